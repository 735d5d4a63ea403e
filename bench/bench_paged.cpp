// Paged KV caches (KvCacheConfig::paged) against ring caches of the same slots.
//
// - BM_paged_memory: 64 sequences whose lengths are drawn uniformly from [100, 8192]
//   (a fixed seed) held in a ring cache sized for 8k (64 x 8192 slots) and in a paged
//   cache of blocks of 16 whose pool has exactly the blocks they need, both filled by
//   kv_append. Device bytes: K and V (KvCache::bytes) plus the slot table on the device
//   (an int32 per slot and a bound per sequence; the paged cache's block tables besides).
//   Counters: ring_MiB, paged_MiB, paged_over_ring, and the share of each one's K/V rows
//   that hold no token (ring_waste, paged_waste: vLLM's measure). One KV head of 64 (256
//   bytes a token) keeps the ring within lavapipe's heap; the ratios do not depend on it.
// - BM_paged_decode: decode (one token, 32 query heads over 8 KV heads, head_dim 128, f16
//   K and V, causal: it sees every key) over 1k, 4k and 16k keys held by a ring cache of
//   that capacity, and by sequence 0 of a paged cache of 2 sequences appended in turns of
//   a block, so that sequence 0's blocks are every other block of the pool; the two lists
//   timed alternately in the same run (GPU timestamps). Counters: ring_us, paged_us,
//   paged_over_ring (target: within 10%). The kernels are the backend's for its shape
//   (automatic: the three stages on lavapipe; gpu: the decode kernel).
// - BM_paged_fork: kv_copy_sequence of a 4k-token sequence (the same heads) in a ring cache
//   (its K and V rows and slot entries copied) and in a paged cache (the slot entries and
//   block table copied, the blocks shared, the one the source's next append writes
//   copied), timed alternately. Counters: ring_us, paged_us, ring_bytes and paged_bytes
//   (bytes the op writes: rows and table words).
// - BM_paged_plan: host time to record kv_append of a 32k-token prefill into a paged cache
//   (blocks of 16, and of 1), and of blocks_to_append for it: the planning of which block
//   each run takes (CPU backend: nothing runs). Recording once scanned the plan's lists
//   per token: 52 ms, and 0.76 s in blocks of 1.
// Each case checks first that both caches give the same attention (2e-3 absolute; the
// fork: the forked sequence's).
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

constexpr std::size_t kHeads = 32, kKvHeads = 8, kDim = 128, kBlock = 16;

KernelShape shape_of(const benchmark::State& state) { return static_cast<KernelShape>(state.range(1)); }

std::vector<std::int32_t> iota_from(std::int32_t first, std::size_t n) {
  std::vector<std::int32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + static_cast<std::int32_t>(i);
  return v;
}

// Device bytes of a cache: K and V, and its slot table (an int32 per slot, a bound per
// sequence, a paged cache's block tables).
double device_bytes(const KvCache& c) {
  const KvCacheConfig& k = c.config();
  const std::size_t table = k.paged ? k.capacity / k.block_size : 0;
  return static_cast<double>(c.bytes() + 4 * k.n_seqs * (k.capacity + table + 1));
}

void BM_paged_memory(benchmark::State& state) {
  constexpr std::size_t kSeqs = 64, kMax = 8192, kKv = 1, kD = 64, kChunk = 4096;
  try {
    Backend& b = backend(BackendKind::vulkan);
    std::mt19937 gen(43);
    std::uniform_int_distribution<std::size_t> length(100, kMax);
    std::vector<std::size_t> lengths(kSeqs);
    std::size_t tokens = 0, blocks = 0;
    for (std::size_t& n : lengths) {
      n = length(gen);
      tokens += n;
      blocks += (n + kBlock - 1) / kBlock;
    }
    KvCacheConfig ring_config{.n_seqs = kSeqs, .n_kv_heads = kKv, .head_dim = kD, .capacity = kMax, .dtype = DType::f16};
    KvCacheConfig paged_config = ring_config;
    paged_config.paged = true;
    paged_config.block_size = kBlock;
    paged_config.n_blocks = blocks;
    KvCache ring = b.kv_cache(ring_config), paged = b.kv_cache(paged_config);
    for (KvCache* c : {&ring, &paged}) {
      for (std::size_t s = 0; s < kSeqs; ++s) {
        for (std::size_t at = 0; at < lengths[s]; at += kChunk) {  // chunks of at most kChunk
          const std::size_t n = std::min(kChunk, lengths[s] - at);
          Tensor k = b.tensor({n, kKv, kD}, DType::f16), v = b.tensor({n, kKv, kD}, DType::f16);
          b.upload(k, normal_values(n * kKv * kD, 2));
          b.upload(v, normal_values(n * kKv * kD, 3));
          CommandList cmd = b.commands();
          cmd.kv_append(*c, k, v, iota_from(static_cast<std::int32_t>(at), n),
                        std::vector<std::int32_t>(n, static_cast<std::int32_t>(s)));
          cmd.submit_and_wait();
        }
      }
    }
    if (paged.free_blocks() != 0) return state.SkipWithError("the pool is not exactly full");
    for (auto _ : state) state.SetIterationTime(1e-6);
    const double ring_bytes = device_bytes(ring), paged_bytes = device_bytes(paged);
    state.counters["tokens"] = static_cast<double>(tokens);
    state.counters["ring_MiB"] = ring_bytes / (1 << 20);
    state.counters["paged_MiB"] = paged_bytes / (1 << 20);
    state.counters["paged_over_ring"] = paged_bytes / ring_bytes;
    state.counters["ring_waste"] = 1.0 - static_cast<double>(tokens) / static_cast<double>(kSeqs * kMax);
    state.counters["paged_waste"] = 1.0 - static_cast<double>(tokens) / static_cast<double>(blocks * kBlock);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Decode of sequence 0 at its last position over |cache|, timed.
struct Decode {
  Tensor q, out;
  CommandList cmd;
  Decode(Backend& b, const KvCache& cache, std::size_t keys) : cmd(b.commands({.timestamps = true})) {
    q = b.tensor({1, kHeads, kDim}, DType::f32);
    out = b.tensor({1, kHeads, kDim}, DType::f32);
    b.upload(q, normal_values(kHeads * kDim, 1));
    const std::vector<std::int32_t> pos{static_cast<std::int32_t>(keys - 1)}, seq{0};
    cmd.attention(q, cache, out, {.q_positions = pos, .q_seq_ids = seq});
    cmd.submit_and_wait();
  }
  double run() {
    cmd.submit_and_wait();
    return op_seconds(cmd);
  }
};

// Whether |a| and |b| agree within 2e-3, else the reason.
std::string same(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 2e-3f)) return "out[" + std::to_string(i) + "] differs";
  }
  return "";
}

// A ring cache of |keys| slots holding positions 0..keys-1, and a paged cache of 2
// sequences holding the same in sequence 0 (and other keys in 1), appended in turns of a
// block: sequence 0 has every other block of the pool.
struct Caches {
  KvCache ring, paged;
  Caches(Backend& b, std::size_t keys) {
    const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = keys, .dtype = DType::f16};
    KvCacheConfig pc = config;
    pc.n_seqs = 2;
    pc.paged = true;
    pc.block_size = kBlock;
    pc.n_blocks = 2 * keys / kBlock;
    ring = b.kv_cache(config);
    paged = b.kv_cache(pc);
    const std::size_t row = kKvHeads * kDim;
    Tensor k = b.tensor({keys, kKvHeads, kDim}, DType::f16), v = b.tensor({keys, kKvHeads, kDim}, DType::f16);
    b.upload(k, normal_values(keys * row, 2));
    b.upload(v, normal_values(keys * row, 3));
    const std::vector<std::int32_t> pos = iota_from(0, keys);
    CommandList fill = b.commands();
    fill.kv_append(ring, k, v, pos);
    // Both sequences the same keys, block by block in turns (one call: the blocks go in
    // the order the tokens first write them).
    Tensor k2 = b.tensor({2 * keys, kKvHeads, kDim}, DType::f16), v2 = b.tensor({2 * keys, kKvHeads, kDim}, DType::f16);
    std::vector<float> kk(2 * keys * row), vv(2 * keys * row);
    std::vector<std::int32_t> pos2(2 * keys), seq2(2 * keys);
    const std::vector<float>& kf = normal_values(keys * row, 2);
    const std::vector<float>& vf = normal_values(keys * row, 3);
    for (std::size_t t = 0; t < 2 * keys; ++t) {
      const std::size_t block = t / kBlock, s = block % 2, p = (block / 2) * kBlock + t % kBlock;
      std::copy_n(&kf[p * row], row, &kk[t * row]);
      std::copy_n(&vf[p * row], row, &vv[t * row]);
      pos2[t] = static_cast<std::int32_t>(p);
      seq2[t] = static_cast<std::int32_t>(s);
    }
    b.upload(k2, kk);
    b.upload(v2, vv);
    fill.kv_append(paged, k2, v2, pos2, seq2);
    fill.submit_and_wait();
  }
};

void BM_paged_decode(benchmark::State& state) {
  try {
    Backend& b = backend(BackendKind::vulkan, shape_of(state));
    const auto keys = static_cast<std::size_t>(state.range(0));
    Caches c(b, keys);
    if (c.paged.block_table(0)[1] != 2) return state.SkipWithError("sequence 0's blocks are not every other one");
    Decode ring(b, c.ring, keys), paged(b, c.paged, keys);
    const std::string diff = same(b.download(paged.out), b.download(ring.out));
    if (!diff.empty()) return state.SkipWithError(("paged against ring: " + diff).c_str());
    time_pair(
        state, "paged decode " + std::to_string(keys) + "/" + std::to_string(state.range(1)), "ring", [&] { return ring.run(); },
        "paged", [&] { return paged.run(); }, "paged_over_ring");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_paged_fork(benchmark::State& state) {
  constexpr std::size_t kTokens = 4096, kCapacity = 4096;
  try {
    Backend& b = backend(BackendKind::vulkan);
    const std::size_t row = kKvHeads * kDim;
    KvCacheConfig config{.n_seqs = 2, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = kCapacity, .dtype = DType::f16};
    KvCacheConfig pc = config;
    pc.paged = true;
    pc.block_size = kBlock;
    pc.n_blocks = kCapacity / kBlock + 1;  // sequence 0's, and the fork's copy
    KvCache ring = b.kv_cache(config), paged = b.kv_cache(pc);
    // 4096 - 5 tokens: the last block holds 11, and is copied.
    const std::size_t held = kTokens - 5;
    Tensor k = b.tensor({held, kKvHeads, kDim}, DType::f16), v = b.tensor({held, kKvHeads, kDim}, DType::f16);
    b.upload(k, normal_values(held * row, 2));
    b.upload(v, normal_values(held * row, 3));
    std::vector<CommandList> forks;
    for (KvCache* c : {&ring, &paged}) {
      CommandList fill = b.commands();
      fill.kv_append(*c, k, v, iota_from(0, held), std::vector<std::int32_t>(held, 0));
      fill.submit_and_wait();
      forks.push_back(b.commands({.timestamps = true}));
      forks.back().kv_copy_sequence(*c, 0, 1);
      forks.back().submit_and_wait();
    }
    Decode ring_check(b, ring, held), paged_check(b, paged, held);  // sequence 0; then 1:
    std::vector<float> outs[2];
    for (int i = 0; i < 2; ++i) {
      Tensor q = b.tensor({1, kHeads, kDim}, DType::f32), out = b.tensor({1, kHeads, kDim}, DType::f32);
      b.upload(q, normal_values(kHeads * kDim, 1));
      const std::vector<std::int32_t> pos{static_cast<std::int32_t>(held - 1)}, seq{1};
      CommandList cmd = b.commands();
      cmd.attention(q, i ? paged : ring, out, {.q_positions = pos, .q_seq_ids = seq});
      cmd.submit_and_wait();
      outs[i] = b.download(out);
    }
    const std::string diff = same(outs[1], outs[0]) + same(outs[0], b.download(ring_check.out));
    if (!diff.empty()) return state.SkipWithError(("the forked sequence: " + diff).c_str());
    if (paged.free_blocks() != 0) {
      return state.SkipWithError("the paged fork took more than one block");
    }
    auto fork = [&](CommandList& cmd) {
      cmd.submit_and_wait();
      return op_seconds(cmd);
    };
    time_pair(
        state, "paged fork", "ring", [&] { return fork(forks[0]); }, "paged", [&] { return fork(forks[1]); }, "paged_over_ring");
    // Written: a sequence's K and V rows and its slot entries and bound; the paged fork its
    // slot entries, block table and bound, one table word and one block of K and V.
    state.counters["ring_bytes"] = static_cast<double>(2 * kCapacity * row * 2 + 4 * (kCapacity + 1));
    state.counters["paged_bytes"] = static_cast<double>(4 * (kCapacity + kCapacity / kBlock + 1) + 4 + 2 * kBlock * row * 2);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_paged_plan(benchmark::State& state) {
  constexpr std::size_t kTokens = 32768;
  const auto block = static_cast<std::size_t>(state.range(0));
  Backend& b = backend(BackendKind::cpu);
  const KvCacheConfig config{.n_kv_heads = 1,
                             .head_dim = 8,
                             .capacity = kTokens,
                             .dtype = DType::f32,
                             .paged = true,
                             .block_size = block,
                             .n_blocks = kTokens / block};
  KvCache cache = b.kv_cache(config);
  const Tensor k = b.tensor({kTokens, 1, 8}, DType::f32), v = b.tensor({kTokens, 1, 8}, DType::f32);
  const std::vector<std::int32_t> pos = iota_from(0, kTokens);
  double plan_s = 0, record_s = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(cache.blocks_to_append(0, kTokens));
    const auto t1 = std::chrono::steady_clock::now();
    CommandList cmd = b.commands();
    cmd.kv_append(cache, k, v, pos);
    const auto t2 = std::chrono::steady_clock::now();
    cache.reset(0);  // the blocks back, for the next iteration
    plan_s += std::chrono::duration<double>(t1 - t0).count();
    record_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t2 - t0).count());
  }
  const auto n = static_cast<double>(state.iterations());
  state.counters["blocks_to_append_us"] = 1e6 * plan_s / n;
  state.counters["record_us"] = 1e6 * record_s / n;
}

BENCHMARK(BM_paged_memory)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_paged_plan)
    ->ArgName("block")
    ->Arg(16)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_paged_decode)
    ->ArgNames({"keys", "shape"})
    ->ArgsProduct({{1024, 4096, 16384},
                   {static_cast<std::int64_t>(KernelShape::automatic), static_cast<std::int64_t>(KernelShape::gpu)}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Apply(cap_iterations);
BENCHMARK(BM_paged_fork)->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
