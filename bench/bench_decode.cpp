// Decode attention, the case that must run at the memory's speed: one token, 32 query heads
// over 8 KV heads, head_dim 128, q f32, K and V f16, causal (the token sees every key).
// The kernel is the backend's for its shape (automatic, or gpu forced); $VKATTN_DECODE
// picks the GPU decode kernel's variant and the probes (docs/gpu.md), so that one program
// times each in its own process.
//
// - BM_decode: plain K and V of 1k, 4k and 16k keys. Counters: kv_copy_ratio (K and V
//   bytes over the same device's copy rate), main_us and merge_us (the kernel's dispatch
//   and, where the splits are merged in a second one, that dispatch).
// - BM_decode_ops8: the same op recorded 8 times into one list (8 outputs): the time per
//   op once the dispatches follow each other (counter op_us; the case's time is the whole
//   list's, so that the iteration count follows device time, not ops), against BM_decode's
//   lone dispatch. At 1k and
//   4k keys its K and V (4 and 16 MiB) stay in a large GPU's L2 (50 MB on an H200) from one
//   op to the next.
// - BM_decode_cold: the same in one list, each op over K and V of their own from a rotating
//   set of at least 128 MiB (at least 8 ops, 2 sets), so that every op reads them from DRAM.
// - BM_decode_cache: a cache of 16k slots holding 1k tokens against one of 1k slots
//   holding the same tokens, timed alternately in the same run: occupancy_ratio is what
//   the large cache costs over the small one (the capacity must not set the cost).
// - BM_decode_mla: DeepSeek's absorbed MLA, 128 query heads over one latent KV head (K
//   576, V its first 512) in a latent cache of 4k or 16k tokens, f16 or q8_0. Counters:
//   kv_copy_ratio (the cache's K bytes over the copy rate) and gflops (2 x 128 x (576 +
//   512) FLOPs per key) with flops_copy_ratio, the FLOP rate over the copy rate in floats
//   (FLOPs per 4 bytes copied): the group makes each byte serve 128 rows.
// - BM_decode_dsa: the same layer as DeepSeek V3.2 runs it, f16, 16k or 64k tokens, 2048
//   of them (the top-k) left to the token, as an f32 mask (mask:0: every key is read), the
//   same with AttentionConfig::mask_keys = 2048 (mask:1) or a key list (mask:2: an i32
//   mask [1, 2048]); the group kernel reads only the listed keys. FLOPs and bytes count
//   the 2048 keys in all three, so that the rates compare; counter sparse. BM_prefill_dsa:
//   the same for 8 tokens at once (prefill), each with its own 2048 keys.
// - BM_decode_step: a 32-layer decode step as an engine records it (per layer rope(q, k),
//   kv_append into the layer's f16 cache, attention over it), over caches of 256 and 4096
//   slots holding that many tokens once the step has appended its own, with rope and
//   kv_append recorded as one dispatch (fused: 1, the default) or apart ($VKATTN_FUSE=off).
//   Counters: step_us and layer_us (device time from timestamps: the sum of the dispatches'),
//   dispatches and barriers per step.
// - BM_copy_16B: the smallest dispatch, the fixed cost every op pays.
// Each Vulkan case is checked against the CPU reference first (check_tolerance()), except
// under a probe whose kernel computes nothing valid (probe_without_result()).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

constexpr std::size_t kHeads = 32, kKvHeads = 8, kDim = 128;

// Decode over plain keys at positions 0..keys-1 with the token at the last; |sets| copies
// of K and V in buffers of their own (the same values: uploaded once, copied on the device),
// op i reading set i % sets.
struct Decode {
  std::size_t keys;
  Tensor q;
  std::vector<Tensor> k, v, out;
  std::vector<std::int32_t> q_pos, k_pos;

  Decode(Backend& b, std::size_t n_keys, std::size_t n_out, std::size_t sets = 1)
      : keys(n_keys), q_pos{static_cast<std::int32_t>(n_keys - 1)} {
    q = b.tensor({1, kHeads, kDim}, DType::f32);
    b.upload(q, normal_values(kHeads * kDim, 1));
    CommandList copies = b.commands();
    for (std::size_t i = 0; i < sets; ++i) {
      k.push_back(b.tensor({keys, kKvHeads, kDim}, DType::f16));
      v.push_back(b.tensor({keys, kKvHeads, kDim}, DType::f16));
      if (i == 0) {
        b.upload(k.back(), normal_values(keys * kKvHeads * kDim, 2));
        b.upload(v.back(), normal_values(keys * kKvHeads * kDim, 3));
      } else {
        copies.copy(k[0], k.back());
        copies.copy(v[0], v.back());
      }
    }
    if (sets > 1) copies.submit_and_wait();
    for (std::size_t i = 0; i < n_out; ++i) out.push_back(b.tensor({1, kHeads, kDim}, DType::f32));
    k_pos.resize(keys);
    for (std::size_t j = 0; j < keys; ++j) k_pos[j] = static_cast<std::int32_t>(j);
  }
  void record(CommandList& cmd, std::size_t i) {
    cmd.attention(q, k[i % k.size()], v[i % v.size()], out[i], {.q_positions = q_pos, .k_positions = k_pos},
                  {.path = AttentionPath::fused, .precision = bench_precision()});
  }
  double kv_bytes() const { return static_cast<double>(k[0].bytes() + v[0].bytes()); }
};

// DRAM-cold: sets of K and V enough to pass 128 MiB (a GPU's L2 holds 50 MB at most), two
// at least; an op for each, eight at least.
constexpr double kColdBytes = 128.0 * (1 << 20);
std::size_t cold_sets(std::size_t keys) {
  const double kv = 2.0 * static_cast<double>(keys * kKvHeads * kDim * 2);
  return std::max<std::size_t>(2, static_cast<std::size_t>(std::ceil(kColdBytes / kv)));
}

// "" when |got| is within check_tolerance() of |want|, else the first element that is not.
std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= check_tolerance())) {
      return "out[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", CPU reference " + std::to_string(want[i]);
    }
  }
  return "";
}

// "" when |got| matches the CPU reference for |d|, else what differs. The reference depends
// on the key count alone: computed once per count (about a second at 16k keys, while the
// device idles).
std::string verify(const Decode& d, const std::vector<float>& got) {
  static std::map<std::size_t, std::vector<float>> refs;
  const std::vector<float>& want = memo(refs, d.keys, [&] {
    Backend& cpu = backend(BackendKind::cpu);
    Decode ref(cpu, d.keys, 1);
    CommandList cmd = cpu.commands();
    ref.record(cmd, 0);
    cmd.submit_and_wait();
    return cpu.download(ref.out[0]);
  });
  return first_difference(got, want);
}

KernelShape shape_of(const benchmark::State& state) { return static_cast<KernelShape>(state.range(1)); }

void BM_decode(benchmark::State& state, std::size_t ops, bool cold = false) {
  try {
    Backend& b = backend(BackendKind::vulkan, shape_of(state));
    const auto keys = static_cast<std::size_t>(state.range(0));
    const std::size_t sets = cold ? cold_sets(keys) : 1;
    if (cold) ops = std::max<std::size_t>(ops, sets);
    Decode d(b, keys, ops, sets);
    CommandList cmd = b.commands({.timestamps = true});
    for (std::size_t i = 0; i < ops; ++i) d.record(cmd, i);
    cmd.submit_and_wait();
    if (!probe_without_result()) {
      // Once per case: Google Benchmark calls a case several times while it settles the
      // iteration count, and the reference at 16k keys takes about a second.
      static std::map<std::tuple<std::int64_t, std::int64_t, std::size_t, bool>, std::string>
          verified;  // (keys, shape, ops, cold)
      const auto key = std::make_tuple(state.range(0), state.range(1), ops, cold);
      const std::string& diff = memo(verified, key, [&] { return verify(d, b.download(d.out[0])); });
      if (!diff.empty()) return state.SkipWithError(("differs from the CPU reference: " + diff).c_str());
    }
    warm_up("decode " + std::to_string(keys) + "/" + std::to_string(state.range(1)) + "/" + std::to_string(ops) +
                (cold ? "/cold" : ""),
            [&] { cmd.submit_and_wait(); });
    Baseline baseline(BackendKind::vulkan, shape_of(state));
    double total = 0, main = 0, merge = 0;  // total: the lists' device time
    for (auto _ : state) {
      cmd.submit_and_wait();
      const std::vector<OpTiming> t = cmd.timings();
      double s = 0;
      for (const OpTiming& o : t) s += o.ms * 1e-3;
      // One op's dispatches: the kernel's, then the merge's when there is a second pass.
      const std::size_t per_op = t.size() / ops;
      main += t[0].ms * 1e-3;
      if (per_op > 1) merge += t[1].ms * 1e-3;
      state.SetIterationTime(s);
      total += s;
      baseline.keep_up(total);
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["op_us"] = total / n / static_cast<double>(ops) * 1e6;
    state.counters["kv_copy_ratio"] = copy_ratio(state, baseline, d.kv_bytes() * static_cast<double>(ops), total);
    state.counters["copy_GBps"] = baseline.bytes_per_second() * 1e-9;
    state.counters["main_us"] = main / n * 1e6;
    state.counters["merge_us"] = merge / n * 1e6;
    state.counters["dispatches"] = static_cast<double>(cmd.timings().size()) / static_cast<double>(ops);
    state.counters["ops"] = static_cast<double>(ops);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// A cache of |capacity| slots holding positions 0..held-1, and decode over it at the last.
// Positions 0 to |held| - 1 of random K and V, the same in every cache.
void fill_caches(Backend& b, std::span<KvCache> caches, std::size_t held) {
  Tensor k = b.tensor({held, kKvHeads, kDim}, DType::f32), v = b.tensor({held, kKvHeads, kDim}, DType::f32);
  b.upload(k, normal_values(held * kKvHeads * kDim, 2));
  b.upload(v, normal_values(held * kKvHeads * kDim, 3));
  std::vector<std::int32_t> pos(held);
  for (std::size_t j = 0; j < held; ++j) pos[j] = static_cast<std::int32_t>(j);
  CommandList fill = b.commands();
  for (KvCache& cache : caches) fill.kv_append(cache, k, v, pos);
  fill.submit_and_wait();
}

struct CacheDecode {
  KvCache cache;
  Tensor q, out;
  std::vector<std::int32_t> q_pos;
  CommandList cmd;

  CacheDecode(Backend& b, std::size_t capacity, std::size_t held)
      : cache(b.kv_cache({.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f16})),
        q_pos{static_cast<std::int32_t>(held - 1)}, cmd(b.commands({.timestamps = true})) {
    q = b.tensor({1, kHeads, kDim}, DType::f32);
    out = b.tensor({1, kHeads, kDim}, DType::f32);
    b.upload(q, normal_values(kHeads * kDim, 1));
    fill_caches(b, {&cache, 1}, held);
    cmd.attention(q, cache, out, {.q_positions = q_pos}, {.path = AttentionPath::automatic});
    cmd.submit_and_wait();
  }
  double run() {
    cmd.submit_and_wait();
    double s = 0;
    for (const OpTiming& t : cmd.timings()) s += t.ms * 1e-3;
    return s;
  }
};

void BM_decode_cache(benchmark::State& state) {
  try {
    Backend& b = backend(BackendKind::vulkan, shape_of(state));
    const std::size_t held = static_cast<std::size_t>(state.range(0));
    CacheDecode big(b, 16 * held, held), small(b, held, held);
    const std::vector<float> a = b.download(big.out), c = b.download(small.out);
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!(std::fabs(a[i] - c[i]) <= 1e-4f)) return state.SkipWithError("the two caches' results differ");
    }
    time_pair(
        state, "cache " + std::to_string(held) + "/" + std::to_string(state.range(1)), "small", [&] { return small.run(); },
        "big", [&] { return big.run(); }, "occupancy_ratio");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// How a benchmark's sparse mask is given: an f32 mask alone (every key read), with
// AttentionConfig::mask_keys (the promise), or as a key list (an i32 mask).
enum class SparseForm { mask, promise, key_list };

// Absorbed MLA attention over a latent cache holding |keys| tokens, |n_tokens| queries at
// the last positions (1: decode); with |top_k|, a mask that leaves each that many keys (its
// own among them), at random as DeepSeek V3.2's indexer might pick them, given as |form|.
void run_mla(benchmark::State& state, std::size_t keys, KernelShape shape, DType dtype, std::size_t top_k, SparseForm form,
             std::size_t n_tokens = 1) {
  constexpr std::size_t kMlaHeads = 128, kLatentDim = 576, kValueDim = 512;
  try {
    Backend& b = backend(BackendKind::vulkan, shape);
    const KvCacheConfig config{
        .n_kv_heads = 1, .head_dim = kLatentDim, .capacity = keys, .dtype = dtype, .v_head_dim = kValueDim, .latent = true};
    std::vector<float> mask_values;
    std::vector<std::int32_t> key_list;
    if (top_k) {
      mask_values.assign(n_tokens * keys, -INFINITY);
      std::mt19937 g(3);
      for (std::size_t t = 0; t < n_tokens; ++t) {
        const std::size_t own = keys - n_tokens + t;  // the token's own key, then top_k - 1 before it
        float* row = mask_values.data() + t * keys;
        row[own] = 0.0f;
        for (std::size_t left = top_k - 1; left > 0;) {
          float& m = row[std::uniform_int_distribution<std::size_t>(0, own - 1)(g)];
          if (m != 0.0f) m = 0.0f, --left;
        }
        for (std::size_t j = 0; j < keys; ++j) {
          if (row[j] == 0.0f) key_list.push_back(static_cast<std::int32_t>(j));
        }
      }
    }
    auto fill = [&](Backend& on, KvCache& cache, Tensor& q, Tensor& mask) {
      q = on.tensor({n_tokens, kMlaHeads, kLatentDim}, DType::f32);
      on.upload(q, normal_values(n_tokens * kMlaHeads * kLatentDim, 1));
      Tensor k = on.tensor({keys, 1, kLatentDim}, DType::f32);
      on.upload(k, normal_values(keys * kLatentDim, 2));
      if (top_k && form == SparseForm::key_list) {
        mask = on.tensor({n_tokens, top_k}, DType::i32);
        on.upload(mask, key_list);
      } else if (top_k) {
        mask = on.tensor({n_tokens, keys}, DType::f32);
        on.upload(mask, mask_values);
      }
      std::vector<std::int32_t> pos(keys);
      for (std::size_t j = 0; j < keys; ++j) pos[j] = static_cast<std::int32_t>(j);
      CommandList cmd = on.commands();
      cmd.kv_append(cache, k, pos);
      cmd.submit_and_wait();
    };
    std::vector<std::int32_t> last(n_tokens);
    for (std::size_t t = 0; t < n_tokens; ++t) last[t] = static_cast<std::int32_t>(keys - n_tokens + t);
    const bool promise = form == SparseForm::promise;
    const AttentionConfig attn{.precision = bench_precision(), .mask_keys = promise ? static_cast<std::uint32_t>(top_k) : 0u};
    KvCache cache = b.kv_cache(config);
    Tensor q, mask, out = b.tensor({n_tokens, kMlaHeads, kValueDim}, DType::f32);
    fill(b, cache, q, mask);
    CommandList cmd = b.commands({.timestamps = true});
    cmd.attention(q, cache, out, {.q_positions = last}, attn, top_k ? &mask : nullptr);
    cmd.submit_and_wait();
    const std::string name = std::to_string(keys) + "/" + std::to_string(static_cast<int>(shape)) + "/" +
                             std::to_string(static_cast<int>(dtype)) + "/" + std::to_string(top_k) + "/" +
                             std::to_string(static_cast<int>(form)) + "/" + std::to_string(n_tokens);
    static std::map<std::string, std::string> verified;
    auto it = verified.find(name);
    if (it == verified.end() && probe_without_result()) it = verified.emplace(name, "").first;
    if (it == verified.end()) {
      // The mask's three forms and both kernel shapes compute one attention: its reference
      // (tens of seconds at 64k keys) is computed once.
      static std::map<std::string, std::vector<float>> refs;
      const std::string ref_name = std::to_string(keys) + "/" + std::to_string(static_cast<int>(dtype)) + "/" +
                                   std::to_string(top_k) + "/" + std::to_string(n_tokens);
      const std::vector<float>& want = memo(refs, ref_name, [&] {
        Backend& cpu = backend(BackendKind::cpu);
        KvCache ref_cache = cpu.kv_cache(config);
        Tensor ref_q, ref_mask, ref_out = cpu.tensor({n_tokens, kMlaHeads, kValueDim}, DType::f32);
        fill(cpu, ref_cache, ref_q, ref_mask);
        CommandList ref = cpu.commands();
        ref.attention(ref_q, ref_cache, ref_out, {.q_positions = last}, {}, top_k ? &ref_mask : nullptr);
        ref.submit_and_wait();
        return cpu.download(ref_out);
      });
      it = verified.emplace(name, first_difference(b.download(out), want)).first;
    }
    if (!it->second.empty()) return state.SkipWithError(("differs from the CPU reference at " + it->second).c_str());
    warm_up("mla " + name, [&] { cmd.submit_and_wait(); });
    Baseline baseline(BackendKind::vulkan, shape);
    double total = 0;
    for (auto _ : state) {
      cmd.submit_and_wait();
      const double s = op_seconds(cmd);
      state.SetIterationTime(s);
      total += s;
      baseline.keep_up(total);
    }
    // The keys each token sees: all, or the mask's top_k (however it is given, so that the
    // rates compare).
    const double seen = static_cast<double>(top_k ? top_k : keys) * static_cast<double>(n_tokens);
    const double flops = 2.0 * static_cast<double>(kMlaHeads * (kLatentDim + kValueDim)) * seen;
    state.counters["kv_copy_ratio"] = copy_ratio(state, baseline, static_cast<double>(cache.bytes()) * seen / keys, total);
    report_flops(state, flops, total);
    state.counters["flops_copy_ratio"] =
        flops * static_cast<double>(state.iterations()) / total / (baseline.bytes_per_second() / 4);
    if (top_k) state.counters["sparse"] = cmd.stats().attention.at(0).sparse ? 1 : 0;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_decode_mla(benchmark::State& state) {
  run_mla(state, static_cast<std::size_t>(state.range(0)), shape_of(state), static_cast<DType>(state.range(2)), 0,
          SparseForm::mask);
}

// DeepSeek V3.2's sparse attention on the same layer: 2048 keys a token, as an f32 mask
// alone (every key is read), with the promise, or as a key list (the group kernel reads
// only those); decode, and prefill of 8 tokens.
void BM_decode_dsa(benchmark::State& state) {
  run_mla(state, static_cast<std::size_t>(state.range(0)), shape_of(state), DType::f16, 2048,
          static_cast<SparseForm>(state.range(2)));
}
void BM_prefill_dsa(benchmark::State& state) {
  run_mla(state, static_cast<std::size_t>(state.range(0)), shape_of(state), DType::f16, 2048,
          static_cast<SparseForm>(state.range(2)), static_cast<std::size_t>(state.range(3)));
}

// Sets $VKATTN_FUSE for the life of the object (read when a list is made).
class FuseEnv {
 public:
  explicit FuseEnv(bool on) {
    if (const char* old = std::getenv("VKATTN_FUSE")) old_ = old;
    ::setenv("VKATTN_FUSE", on ? "on" : "off", 1);
  }
  ~FuseEnv() {
    if (old_.empty()) {
      ::unsetenv("VKATTN_FUSE");
    } else {
      ::setenv("VKATTN_FUSE", old_.c_str(), 1);
    }
  }
  FuseEnv(const FuseEnv&) = delete;
  FuseEnv& operator=(const FuseEnv&) = delete;

 private:
  std::string old_;
};

// Args: capacity, shape, fused.
void BM_decode_step(benchmark::State& state) {
  constexpr std::size_t kLayers = 32;
  try {
    Backend& b = backend(BackendKind::vulkan, shape_of(state));
    const auto capacity = static_cast<std::size_t>(state.range(0)), held = capacity - 1;
    std::vector<KvCache> caches;
    for (std::size_t l = 0; l < kLayers; ++l) {
      caches.push_back(b.kv_cache({.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f16}));
    }
    fill_caches(b, caches, held);
    Tensor q = b.tensor({1, kHeads, kDim}, DType::f32), k = b.tensor({1, kKvHeads, kDim}, DType::f32),
           v = b.tensor({1, kKvHeads, kDim}, DType::f32), out = b.tensor({1, kHeads, kDim}, DType::f32);
    b.upload(q, normal_values(kHeads * kDim, 1));
    b.upload(k, normal_values(kKvHeads * kDim, 4));
    b.upload(v, normal_values(kKvHeads * kDim, 5));
    const std::vector<std::int32_t> pos{static_cast<std::int32_t>(held)};
    const FuseEnv fuse(state.range(2) != 0);
    CommandList cmd = b.commands({.timestamps = true});
    for (KvCache& c : caches) {
      cmd.rope(q, k, pos, {.base = 500000.0});
      cmd.kv_append(c, k, v, pos);  // each submission writes the same slot again
      cmd.attention(q, c, out, {.q_positions = pos});
    }
    cmd.submit_and_wait();
    warm_up(
        "step " + std::to_string(state.range(0)) + "/" + std::to_string(state.range(1)) + "/" + std::to_string(state.range(2)),
        [&] { cmd.submit_and_wait(); });
    double total = 0;
    for (auto _ : state) {
      cmd.submit_and_wait();
      const double s = op_seconds(cmd);
      state.SetIterationTime(s);
      total += s;
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["step_us"] = total / n * 1e6;
    state.counters["layer_us"] = total / n * 1e6 / static_cast<double>(kLayers);
    state.counters["dispatches"] = static_cast<double>(cmd.stats().ops);
    state.counters["barriers"] = static_cast<double>(cmd.stats().barriers);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_copy_16B(benchmark::State& state) {
  try {
    Backend& b = backend(BackendKind::vulkan, static_cast<KernelShape>(state.range(0)));  // its one argument
    Tensor src = b.tensor({4}, DType::f32), dst = b.tensor({4}, DType::f32);
    CommandList cmd = b.commands({.timestamps = true});
    cmd.copy(src, dst);
    cmd.submit_and_wait();
    warm_up("copy 16 B", [&] { cmd.submit_and_wait(); });
    for (auto _ : state) {
      cmd.submit_and_wait();
      state.SetIterationTime(op_seconds(cmd));
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void decode_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"keys", "shape"});
  for (KernelShape s : {KernelShape::automatic, KernelShape::gpu}) {
    for (std::int64_t keys : {1024, 4096, 16384}) bm->Args({keys, static_cast<std::int64_t>(s)});
  }
  bm->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

BENCHMARK_CAPTURE(BM_decode, one, std::size_t{1})->Apply(decode_shapes);
BENCHMARK_CAPTURE(BM_decode, ops8, std::size_t{8})->Apply(decode_shapes);
BENCHMARK_CAPTURE(BM_decode, cold, std::size_t{8}, true)->Apply(decode_shapes);
BENCHMARK(BM_decode_step)
    ->ArgNames({"capacity", "shape", "fused"})
    ->ArgsProduct({{256, 4096},
                   {static_cast<std::int64_t>(KernelShape::automatic), static_cast<std::int64_t>(KernelShape::gpu)},
                   {1, 0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_decode_cache)
    ->ArgNames({"held", "shape"})
    ->Args({1024, static_cast<std::int64_t>(KernelShape::automatic)})
    ->Args({1024, static_cast<std::int64_t>(KernelShape::gpu)})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_decode_mla)
    ->ArgNames({"keys", "shape", "dtype"})
    ->ArgsProduct({{4096, 16384},
                   {static_cast<std::int64_t>(KernelShape::automatic), static_cast<std::int64_t>(KernelShape::gpu)},
                   {static_cast<std::int64_t>(DType::f16), static_cast<std::int64_t>(DType::q8_0)}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_decode_dsa)
    ->ArgNames({"keys", "shape", "mask"})
    ->ArgsProduct({{16384, 65536}, {static_cast<std::int64_t>(KernelShape::gpu)}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_prefill_dsa)
    ->ArgNames({"keys", "shape", "mask", "tokens"})
    ->ArgsProduct({{16384}, {static_cast<std::int64_t>(KernelShape::gpu)}, {0, 1, 2}, {8}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_copy_16B)->ArgNames({"shape"})->Arg(0)->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
