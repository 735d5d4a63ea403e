// KV cache: what appending costs, and what reading the ring in place costs against plain
// K/V tensors of the same length.
//
// Config throughout: Llama-style, 8 KV heads, head_dim 128, f16 cache, capacity 4096 (one
// cache per layer), 32 query heads, q f32, no sinks, KvRope::stored.
//
// 1. BM_kv_append: |layers| caches, |tokens| new tokens (f16 K and V, [tokens, 8, 128])
//    appended to each, every append in one command list, timed together with GPU
//    timestamps (the time is the sum of the appends' device times):
//    - decode: 32 layers x 1 token, the per-token step of a 32-layer model;
//    - prefill: 1 layer x 512 tokens.
//    Bytes are the K and V bytes written into the caches (what an append cannot avoid;
//    it reads as many); copy_ratio is those bytes per second over the same backend's copy
//    kernel (which counts its reads and writes). us_per_token_layer is the time per
//    (token, layer); wall_us the host's submit-to-fence time per submission (on decode,
//    the fixed cost of 32 tiny dispatches shows there, not in the device times); barriers
//    the pipeline barriers in the list (appends to different caches need none).
//    kv_append advances the cache's bookkeeping when recorded, so every run makes fresh
//    caches, records the list once and resubmits it: each submission rewrites the same
//    slots with the same values.
//
// 2. BM_ring_vs_plain: attn_scores + attn_softmax + attn_weighted_sum over plain K/V
//    tensors [keys, 8, 128] at positions 0..keys-1, and over a KvCache of capacity
//    |keys| that has wrapped (positions 0..5120 + tokens - 1 appended in chunks of at most
//    capacity, the last chunk being the query tokens' own keys). The cache's position
//    p holds the plain tensors' key p - offset, and the queries sit at the same distance
//    from their keys, so both compute the same attention (same visible pairs, same values)
//    and differ only in where the keys are: the ring in slot order and in the cache's
//    [n_kv_heads, capacity, head_dim] layout. The two lists are submitted alternately in
//    each iteration (the order swapped every iteration) so that both see the same
//    machine; the time reported is the ring's, with plain_ms, ring_ms, ring_over_plain
//    (total ring time over total plain time) and the per-stage ratios as counters, and
//    on decode ring_kv_copy_ratio (K and V bytes over the ring time, against the copy
//    kernel). Without positional terms a decode token's result does not depend on key
//    order, so ring against plain checks the set of keys read there; the prefill cases
//    (causal, windowed) also check which slot holds which position.
//    - decode: 1 token at position 5120 over a ring of 4096 (positions 1025..5120), vs
//      1 token at 4095 over keys 0..4095; causal, no window.
//    - prefill, window 3841: 256 tokens over a ring of capacity 4096 holding positions
//      1280..5375, queries 5120..5375. A chunk of 256 whose keys were just appended has
//      overwritten 256 of the ring's keys, so a query may only look back
//      capacity - chunk + 1 = 3841 positions (KvCacheImpl::check_readable). Plain: 4096
//      keys, queries 3840..4095, same window; every query sees 3841 keys on both sides.
//    - prefill, window 4096: 256 tokens over a ring of capacity 4096 + 256 - 1 = 4351
//      (Mistral's rolling buffer sized for the chunk), queries see 4096 keys each. Plain:
//      4351 keys, queries 4095..4350, window 4096.
//    Scores blocks: [256, 32, 4351] f32 is more than lavapipe's 128 MiB storage buffer
//    range, so rows are split into blocks that fit, on both sides alike.
//
// Every Vulkan case is checked once against the CPU reference before it is timed:
// appends by attending over the caches with window 1 (each query sees only its own key:
// out must equal the appended V, and the one finite score q.k / sqrt(128)); ring and
// plain attention by their out (2e-3 absolute; all rows on decode, the first and last 16
// on prefill, rows being independent), and ring against plain on the device (same
// attention, 2e-3). Mismatches skip the case with the reason.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

constexpr std::size_t kHeads = 32, kKvHeads = 8, kDim = 128, kCapacity = 4096;
constexpr std::size_t kRow = kKvHeads * kDim;  // values per token of K (or V)

KvCacheConfig cache_config(std::size_t capacity) {
  return {.n_seqs = 1, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f16};
}

std::vector<std::int32_t> iota_positions(std::int32_t first, std::size_t n) {
  std::vector<std::int32_t> pos(n);
  for (std::size_t i = 0; i < n; ++i) pos[i] = first + static_cast<std::int32_t>(i);
  return pos;
}

std::string printf_string(const char* fmt, auto... args) {
  char msg[320];
  std::snprintf(msg, sizeof msg, fmt, args...);
  return msg;
}

// ---------------------------------------------------------------------------------------
// Appends

std::span<const float> append_k(std::size_t layer, std::size_t tokens) {
  return normal_values(tokens * kRow, 100 + 2 * static_cast<unsigned>(layer));
}
std::span<const float> append_v(std::size_t layer, std::size_t tokens) {
  return normal_values(tokens * kRow, 101 + 2 * static_cast<unsigned>(layer));
}

// Attends over each cache with window 1 (query t at position t sees only its own key),
// so out is the appended V and the one finite score per row is scale * q.k. Returns
// scores and out per layer, concatenated.
std::pair<std::vector<float>, std::vector<float>> read_back(Backend& b, const std::vector<KvCache>& caches, std::size_t tokens) {
  const std::vector<std::int32_t> pos = iota_positions(0, tokens);
  const AttentionConfig config{.window = 1};
  CommandList cmd = b.commands();
  std::vector<Tensor> scores, probs, out;
  Tensor q = b.tensor({tokens, kKvHeads, kDim}, DType::f32);  // 8 query heads: group 1
  b.upload(q, normal_values(tokens * kKvHeads * kDim, 7));
  for (const KvCache& cache : caches) {
    scores.push_back(b.tensor({tokens, kKvHeads, cache.config().capacity}, DType::f32));
    probs.push_back(b.tensor({tokens, kKvHeads, cache.config().capacity}, DType::f32));
    out.push_back(b.tensor({tokens, kKvHeads, kDim}, DType::f32));
    cmd.attn_scores(q, cache, scores.back(), {.q_positions = pos}, config);
    cmd.attn_softmax(scores.back(), probs.back(), config);
    cmd.attn_weighted_sum(probs.back(), cache, out.back());
  }
  cmd.submit_and_wait();
  std::pair<std::vector<float>, std::vector<float>> r;
  for (std::size_t l = 0; l < caches.size(); ++l) {
    const std::vector<float> s = b.download(scores[l]), o = b.download(out[l]);
    r.first.insert(r.first.end(), s.begin(), s.end());
    r.second.insert(r.second.end(), o.begin(), o.end());
  }
  return r;
}

// Fresh caches for layers first..first+layers-1 with |tokens| appended to each, recorded
// into |cmd| (not submitted).
struct AppendSetup {
  std::vector<KvCache> caches;
  std::vector<Tensor> k, v;
};

AppendSetup record_appends(Backend& b, CommandList& cmd, std::size_t first, std::size_t layers, std::size_t tokens) {
  AppendSetup s;
  const std::vector<std::int32_t> pos = iota_positions(0, tokens);
  for (std::size_t l = first; l < first + layers; ++l) {
    s.caches.push_back(b.kv_cache(cache_config(kCapacity)));
    s.k.push_back(b.tensor({tokens, kKvHeads, kDim}, DType::f16));
    s.v.push_back(b.tensor({tokens, kKvHeads, kDim}, DType::f16));
    b.upload(s.k.back(), append_k(l, tokens));
    b.upload(s.v.back(), append_v(l, tokens));
    cmd.kv_append(s.caches.back(), s.k.back(), s.v.back(), pos);
  }
  return s;
}

// The Vulkan caches (appends submitted) against the same appends on the CPU reference.
std::string verify_appends(const std::vector<KvCache>& caches, std::size_t tokens) {
  Backend& gpu = backend(BackendKind::vulkan);
  Backend& cpu = backend(BackendKind::cpu);
  const auto [got_scores, got_out] = read_back(gpu, caches, tokens);
  const std::size_t s_layer = tokens * kKvHeads * kCapacity, o_layer = tokens * kKvHeads * kDim;
  for (std::size_t l = 0; l < caches.size(); ++l) {  // one CPU cache at a time (16 MiB each)
    CommandList cmd = cpu.commands();
    AppendSetup ref = record_appends(cpu, cmd, l, 1, tokens);
    cmd.submit_and_wait();
    const auto [want_scores, want_out] = read_back(cpu, ref.caches, tokens);
    for (std::size_t i = 0; i < o_layer; ++i) {
      const float got = got_out[l * o_layer + i], want = want_out[i];
      if (!(std::fabs(got - want) <= 2e-3f)) {
        return printf_string("layer %zu: V of token %zu, head %zu, dim %zu = %g, CPU reference %g (tolerance 2e-3)", l, i / kRow,
                             i / kDim % kKvHeads, i % kDim, got, want);
      }
    }
    for (std::size_t i = 0; i < s_layer; ++i) {
      const float got = got_scores[l * s_layer + i], want = want_scores[i];
      const bool ok = std::isinf(want) ? got == want : std::fabs(got - want) <= 1e-4f + 1e-4f * std::fabs(want);
      if (!ok) {
        return printf_string("layer %zu: scores[%zu, %zu, slot %zu] = %g, CPU reference %g (K differs)", l,
                             i / (kKvHeads * kCapacity), i / kCapacity % kKvHeads, i % kCapacity, got, want);
      }
    }
  }
  return "";
}

// Args: layers, tokens.
void BM_kv_append(benchmark::State& state, BackendKind kind) {
  try {
    const auto layers = static_cast<std::size_t>(state.range(0)), tokens = static_cast<std::size_t>(state.range(1));
    Backend& b = backend(kind);
    CommandList cmd = b.commands({.timestamps = true});
    AppendSetup s = record_appends(b, cmd, 0, layers, tokens);
    cmd.submit_and_wait();  // warm-up, and the result to verify

    if (kind != BackendKind::cpu) {
      static std::map<std::array<std::size_t, 2>, std::string> verified;  // once per case
      const std::string& difference =
          memo(verified, std::array{layers, tokens}, [&] { return verify_appends(s.caches, tokens); });
      if (!difference.empty()) {
        state.SkipWithError(("differs from the CPU reference: " + difference).c_str());
        return;
      }
    }

    double seconds = 0, wall = 0;
    Baseline baseline(kind);
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      cmd.submit_and_wait();
      wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double op = op_seconds(cmd);
      state.SetIterationTime(op);
      seconds += op;
      baseline.keep_up(seconds);
    }
    const double iterations = static_cast<double>(state.iterations());
    const double written = 2.0 * 2.0 * static_cast<double>(layers * tokens * kRow);  // K and V, f16
    // Read from the f16 inputs and written into the cache, as the copy counts its own.
    report_bandwidth(state, baseline, 2.0 * written, seconds);
    if (iterations > 0) {
      state.counters["us_per_token_layer"] = seconds / iterations / static_cast<double>(layers * tokens) * 1e6;
      state.counters["wall_us"] = wall / iterations * 1e6;
    }
    state.counters["barriers"] = static_cast<double>(cmd.stats().barriers);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---------------------------------------------------------------------------------------
// Ring versus plain

struct PairCase {
  std::size_t tokens = 0, keys = 0, window = 0;  // keys: plain length = ring capacity

  std::array<std::size_t, 3> key() const { return {tokens, keys, window}; }
  // Ring: the last query position (the ring has wrapped: 5120 + tokens > capacity), and
  // the offset between a ring position and the plain key holding the same values.
  std::int32_t last() const { return static_cast<std::int32_t>(5120 + tokens - 1); }
  std::int32_t offset() const { return last() + 1 - static_cast<std::int32_t>(keys); }
  std::int32_t q_position(bool ring, std::size_t t) const {
    return static_cast<std::int32_t>(keys - tokens + t) + (ring ? offset() : 0);
  }
  AttentionConfig config() const {
    AttentionConfig c{};
    if (window != 0) c.window = static_cast<std::uint32_t>(window);
    return c;
  }
  std::span<const float> k_data() const { return normal_values(keys * kRow, 2); }
  std::span<const float> v_data() const { return normal_values(keys * kRow, 3); }
  std::span<const float> q_data() const { return normal_values(tokens * kHeads * kDim, 1); }
};

// Args: tokens, keys, window (0: none).
PairCase pair_case(const benchmark::State& state) {
  return {static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)),
          static_cast<std::size_t>(state.range(2))};
}

// Plain K/V tensors, or a cache that has been filled up to c.last() (appends submitted).
struct Keys {
  bool ring = false;
  Tensor k, v;
  std::vector<std::int32_t> k_pos;
  KvCache cache;
};

Keys make_keys(Backend& b, const PairCase& c, bool ring) {
  Keys keys;
  keys.ring = ring;
  if (!ring) {
    keys.k = b.tensor({c.keys, kKvHeads, kDim}, DType::f16);
    keys.v = b.tensor({c.keys, kKvHeads, kDim}, DType::f16);
    b.upload(keys.k, c.k_data());
    b.upload(keys.v, c.v_data());
    keys.k_pos = iota_positions(0, c.keys);
    return keys;
  }
  keys.cache = b.kv_cache(cache_config(c.keys));
  CommandList cmd = b.commands();
  std::vector<Tensor> chunks;
  // Positions 0..last() in chunks of at most capacity; the last chunk is the query tokens'.
  const std::int64_t end = std::int64_t{c.last()} + 1, tail = end - static_cast<std::int64_t>(c.tokens);
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  for (std::int64_t a = 0; a < tail; a += static_cast<std::int64_t>(c.keys)) {
    ranges.emplace_back(a, std::min(tail, a + static_cast<std::int64_t>(c.keys)));
  }
  ranges.emplace_back(tail, end);
  chunks.reserve(2 * ranges.size());  // kt and vt below stay valid
  const std::span<const float> k_all = c.k_data(), v_all = c.v_data();
  const auto n = static_cast<std::int64_t>(c.keys);
  for (const auto& [a, z] : ranges) {
    const auto m = static_cast<std::size_t>(z - a);
    std::vector<float> k_host(m * kRow), v_host(m * kRow);
    for (std::size_t i = 0; i < m; ++i) {
      // Position p holds plain key (p - offset) mod keys; those below offset are overwritten.
      const auto row = static_cast<std::size_t>((((a + static_cast<std::int64_t>(i) - c.offset()) % n) + n) % n);
      std::copy_n(k_all.begin() + static_cast<std::ptrdiff_t>(row * kRow), kRow,
                  k_host.begin() + static_cast<std::ptrdiff_t>(i * kRow));
      std::copy_n(v_all.begin() + static_cast<std::ptrdiff_t>(row * kRow), kRow,
                  v_host.begin() + static_cast<std::ptrdiff_t>(i * kRow));
    }
    Tensor& kt = chunks.emplace_back(b.tensor({m, kKvHeads, kDim}, DType::f16));
    b.upload(kt, k_host);
    Tensor& vt = chunks.emplace_back(b.tensor({m, kKvHeads, kDim}, DType::f16));
    b.upload(vt, v_host);
    const std::vector<std::int32_t> pos = iota_positions(static_cast<std::int32_t>(a), m);
    cmd.kv_append(keys.cache, kt, vt, pos);
  }
  cmd.submit_and_wait();
  return keys;
}

struct Blocks {
  std::vector<Tensor> q, scores, probs, out;
};

// The three stages for query rows |q_data| at |q_pos| over |keys|, in blocks of rows
// whose scores fit in one storage buffer.
Blocks record_attention(Backend& b, CommandList& cmd, const PairCase& c, const Keys& keys, std::span<const float> q_data,
                        std::span<const std::int32_t> q_pos) {
  const std::size_t n = q_pos.size(), q_row = kHeads * kDim, row_bytes = 4 * kHeads * c.keys;
  const std::size_t block = std::max<std::size_t>(1, std::min<std::size_t>(n, b.limits().max_storage_buffer_range / row_bytes));
  const AttentionConfig config = c.config();
  Blocks t;
  for (std::size_t start = 0; start < n; start += block) {
    const std::size_t m = std::min(block, n - start);
    t.q.push_back(b.tensor({m, kHeads, kDim}, DType::f32));
    t.scores.push_back(b.tensor({m, kHeads, c.keys}, DType::f32));
    t.probs.push_back(b.tensor({m, kHeads, c.keys}, DType::f32));
    t.out.push_back(b.tensor({m, kHeads, kDim}, DType::f32));
    b.upload(t.q.back(), q_data.subspan(start * q_row, m * q_row));
    const std::span<const std::int32_t> pos = q_pos.subspan(start, m);
    if (keys.ring) {
      cmd.attn_scores(t.q.back(), keys.cache, t.scores.back(), {.q_positions = pos}, config);
      cmd.attn_softmax(t.scores.back(), t.probs.back(), config);
      cmd.attn_weighted_sum(t.probs.back(), keys.cache, t.out.back());
    } else {
      cmd.attn_scores(t.q.back(), keys.k, t.scores.back(), {.q_positions = pos, .k_positions = keys.k_pos}, config);
      cmd.attn_softmax(t.scores.back(), t.probs.back(), config);
      cmd.attn_weighted_sum(t.probs.back(), keys.v, t.out.back());
    }
  }
  return t;
}

// One layout's keys and its recorded attention (every query row).
struct Side {
  Keys keys;
  std::optional<CommandList> cmd;
  Blocks blocks;
};

Side make_side(Backend& b, const PairCase& c, bool ring) {
  Side s;
  s.keys = make_keys(b, c, ring);
  s.cmd.emplace(b.commands({.timestamps = true}));
  std::vector<std::int32_t> pos(c.tokens);
  for (std::size_t t = 0; t < c.tokens; ++t) pos[t] = c.q_position(ring, t);
  s.blocks = record_attention(b, *s.cmd, c, s.keys, c.q_data(), pos);
  return s;
}

std::string compare_out(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                        std::span<const std::size_t> rows) {
  const std::size_t q_row = kHeads * kDim;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < q_row; ++i) {
      const float g = got[rows[r] * q_row + i], w = want[r * q_row + i];
      if (!(std::fabs(g - w) <= 2e-3f)) {
        return printf_string("%s: out[%zu, %zu, %zu] = %g, expected %g (tolerance 2e-3)", what, rows[r], i / kDim, i % kDim, g,
                             w);
      }
    }
  }
  return "";
}

// Vulkan out of both sides (submitted) against the CPU reference, and ring against plain.
std::string verify_pair(const PairCase& c, const std::vector<float>& plain_out, const std::vector<float>& ring_out) {
  std::vector<std::size_t> rows, all_rows;
  for (std::size_t t = 0; t < c.tokens; ++t) {
    all_rows.push_back(t);
    if (c.tokens <= 32 || t < 16 || t + 16 >= c.tokens) rows.push_back(t);
  }
  if (std::string e = compare_out("ring vs plain on the device", ring_out, plain_out, all_rows); !e.empty()) return e;
  const std::span<const float> q_all = c.q_data();
  const std::size_t q_row = kHeads * kDim;
  std::vector<float> q_sub;
  for (std::size_t t : rows) {
    q_sub.insert(q_sub.end(), q_all.begin() + static_cast<std::ptrdiff_t>(t * q_row),
                 q_all.begin() + static_cast<std::ptrdiff_t>((t + 1) * q_row));
  }
  Backend& cpu = backend(BackendKind::cpu);
  for (bool ring : {false, true}) {
    std::vector<std::int32_t> pos;
    for (std::size_t t : rows) pos.push_back(c.q_position(ring, t));
    const Keys keys = make_keys(cpu, c, ring);
    CommandList cmd = cpu.commands();
    const Blocks ref = record_attention(cpu, cmd, c, keys, q_sub, pos);
    cmd.submit_and_wait();
    const std::string e = compare_out(ring ? "ring vs CPU reference" : "plain vs CPU reference", ring ? ring_out : plain_out,
                                      concat(cpu, ref.out), rows);
    if (!e.empty()) return e;
  }
  return "";
}

void BM_ring_vs_plain(benchmark::State& state, BackendKind kind) {
  try {
    const PairCase c = pair_case(state);
    Backend& b = backend(kind);
    Side plain = make_side(b, c, false), ring = make_side(b, c, true);

    if (kind != BackendKind::cpu) {
      plain.cmd->submit_and_wait();  // warm-up, and the results to verify
      ring.cmd->submit_and_wait();
      static std::map<std::array<std::size_t, 3>, std::string> verified;  // once per case
      const std::string& difference =
          memo(verified, c.key(), [&] { return verify_pair(c, concat(b, plain.blocks.out), concat(b, ring.blocks.out)); });
      if (!difference.empty()) {
        state.SkipWithError(("differs: " + difference).c_str());
        return;
      }
    }

    // Per side: total, and per stage (blocks repeat scores, softmax, weighted sum).
    std::array<double, 3> plain_stage{}, ring_stage{};
    double plain_total = 0, ring_total = 0;
    auto run = [](CommandList& cmd, std::array<double, 3>& stage) {
      cmd.submit_and_wait();
      const std::vector<OpTiming> timings = cmd.timings();
      double s = 0;
      for (const OpTiming& t : timings) {
        s += t.ms * 1e-3;
        stage[t.op == "attn_scores" ? 0 : t.op == "attn_softmax" ? 1 : 2] += t.ms * 1e-3;
      }
      return s;
    };
    bool ring_first = false;
    Baseline baseline(kind);
    for (auto _ : state) {
      double r = 0;
      if (ring_first) r = run(*ring.cmd, ring_stage);
      plain_total += run(*plain.cmd, plain_stage);
      if (!ring_first) r = run(*ring.cmd, ring_stage);
      ring_first = !ring_first;
      ring_total += r;
      state.SetIterationTime(r);
      if (c.tokens == 1) baseline.keep_up(ring_total);
    }
    const double iterations = static_cast<double>(state.iterations());
    if (iterations > 0 && plain_total > 0) {
      state.counters["plain_ms"] = plain_total / iterations * 1e3;
      state.counters["ring_ms"] = ring_total / iterations * 1e3;
      state.counters["ring_over_plain"] = ring_total / plain_total;
      const char* names[] = {"scores_ratio", "softmax_ratio", "wsum_ratio"};
      for (std::size_t i = 0; i < 3; ++i) {
        if (plain_stage[i] > 0) state.counters[names[i]] = ring_stage[i] / plain_stage[i];
      }
      if (c.tokens == 1) {  // decode: reading K and V is the floor; prefill is bound by arithmetic
        state.counters["ring_kv_copy_ratio"] =
            copy_ratio(state, baseline, 2.0 * 2.0 * static_cast<double>(c.keys * kRow), ring_total);
      }
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---------------------------------------------------------------------------------------

void append_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"layers", "tokens"});
  bm->Args({32, 1});   // decode step of a 32-layer model
  bm->Args({1, 512});  // prefill of one layer
  bm->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

void decode_pair(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "keys", "window"});
  bm->Args({1, 4096, 0});
  bm->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

void prefill_pairs(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "keys", "window"});
  bm->Args({256, 4096, 4096 - 256 + 1});  // capacity 4096: look back capacity - chunk + 1
  bm->Args({256, 4096 + 256 - 1, 4096});  // capacity window + chunk - 1
  bm->UseManualTime()->Unit(benchmark::kMillisecond)->Apply(cap_iterations);
}

BENCHMARK_CAPTURE(BM_kv_append, vulkan, BackendKind::vulkan)->Apply(append_shapes);
BENCHMARK_CAPTURE(BM_ring_vs_plain, vulkan_decode, BackendKind::vulkan)->Apply(decode_pair);
BENCHMARK_CAPTURE(BM_ring_vs_plain, vulkan_prefill, BackendKind::vulkan)->Apply(prefill_pairs);
// The CPU reference is slow (plain loops, double accumulation): a fixed few runs.
BENCHMARK_CAPTURE(BM_kv_append, cpu, BackendKind::cpu)->Apply(append_shapes)->Apply(iterations<5>);
BENCHMARK_CAPTURE(BM_ring_vs_plain, cpu_decode, BackendKind::cpu)->Apply(decode_pair)->Apply(iterations<3>);
BENCHMARK_CAPTURE(BM_ring_vs_plain, cpu_prefill, BackendKind::cpu)->Apply(prefill_pairs)->Apply(iterations<1>);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
