// Attention: attn_scores, attn_softmax and attn_weighted_sum recorded in one command list
// (timestamps on) and timed together; the time is the sum of the three ops, and each
// stage's time per iteration is reported as scores_ms, softmax_ms and wsum_ms. The fused
// op (CommandList::attention) runs the same cases as BM_attention_fused.
//
// Shapes: Llama-style grouped-query attention, 32 query heads over 8 KV heads, head_dim
// 128, q f32, K and V f16, causal. The keys sit at positions 0..n_keys-1 and the query
// tokens are the last n_tokens of them (positions n_keys - n_tokens + t): a decode token
// sees every key; prefill token t sees the n_keys - n_tokens earlier keys and the first
// t + 1 of the prefill's own keys.
//
// Counted per iteration:
// - bytes: K and V read once, q read once, out written once, and the scores/probs
//   traffic: scores written, read and written by the softmax, read by the weighted sum
//   (4 passes of 4 bytes over [n_tokens, n_heads, n_keys]). copy_ratio is all of it over
//   the same backend's copy bandwidth; kv_copy_ratio is K and V alone, the part no
//   attention kernel can avoid.
// - FLOPs: 4 * head_dim per (token, head, visible key) pair (a multiply-add each in the
//   scores and in the weighted sum); masked pairs are not counted. Reported as gflops.
//
// Each Vulkan case is first checked against the CPU reference (out: check_tolerance(), 2e-3
// absolute in f32 and 1e-2 under VKATTN_BENCH_PRECISION=f16_products; probs:
// 1e-6 absolute + 1e-2 relative, and exactly 0 where the reference is 0, as the API
// promises for keys a token cannot see). Ops the backend refuses (Error(unsupported)),
// tensors larger than the device allows, and mismatches skip the case with the reason; a
// probe that computes nothing valid (probe_without_result()) is not checked.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

struct AttnCase {
  std::size_t tokens = 0, keys = 0, heads = 0, kv_heads = 0, dim = 0;
  DType kv = DType::f16;  // K and V

  std::array<std::size_t, 6> key() const { return {tokens, keys, heads, kv_heads, dim, static_cast<std::size_t>(kv)}; }
  std::int32_t q_position(std::size_t t) const { return static_cast<std::int32_t>(keys - tokens + t); }
  std::vector<std::int32_t> q_positions() const {
    std::vector<std::int32_t> pos(tokens);
    for (std::size_t t = 0; t < tokens; ++t) pos[t] = q_position(t);
    return pos;
  }
  std::vector<std::int32_t> k_positions() const {
    std::vector<std::int32_t> pos(keys);
    for (std::size_t j = 0; j < keys; ++j) pos[j] = static_cast<std::int32_t>(j);
    return pos;
  }
  // (token, key) pairs a token can see, per head: causal, keys at 0..keys-1.
  double visible_pairs() const {
    double n = 0;
    for (std::size_t t = 0; t < tokens; ++t) n += static_cast<double>(q_position(t)) + 1.0;
    return n;
  }
};

std::string case_name(const AttnCase& c) {
  std::string name;
  for (std::size_t x : c.key()) name += std::to_string(x) + "/";
  return name;
}

// Args: tokens, keys, query heads, kv heads, head_dim, and optionally K/V's DType (f16).
AttnCase attn_case(const benchmark::State& state) {
  AttnCase c;
  if (state.range(5) != 0) c.kv = static_cast<DType>(state.range(5));
  c.tokens = static_cast<std::size_t>(state.range(0));
  c.keys = static_cast<std::size_t>(state.range(1));
  c.heads = static_cast<std::size_t>(state.range(2));
  c.kv_heads = static_cast<std::size_t>(state.range(3));
  c.dim = static_cast<std::size_t>(state.range(4));
  return c;
}

const std::vector<float>& inputs(std::size_t n, unsigned seed) { return normal_values(n, seed); }

// K and V once; q, scores, probs and out per block of query rows. A device with the
// 128 MiB minimum maxStorageBufferRange cannot hold [512, 32, 4096] f32 scores in one
// tensor, so the rows are split into blocks that fit, all recorded into the same list.
struct AttnTensors {
  Tensor k, v;
  std::vector<Tensor> q, scores, probs, out;
  std::size_t q_bytes = 0, out_bytes = 0;
};

// Tensors for the query rows in |q_data| (positions |q_pos|) against all of c's keys,
// with the three stages recorded into |cmd| for each block of rows.
AttnTensors record(Backend& b, CommandList& cmd, const AttnCase& c, std::span<const float> q_data,
                   std::span<const std::int32_t> q_pos, const std::vector<std::int32_t>& k_pos) {
  const std::size_t n = q_pos.size();
  const std::size_t row_bytes = 4 * c.heads * c.keys;
  const std::size_t block = std::max<std::size_t>(1, std::min<std::size_t>(n, b.limits().max_storage_buffer_range / row_bytes));
  AttnTensors t;
  t.k = b.tensor({c.keys, c.kv_heads, c.dim}, c.kv);
  t.v = b.tensor({c.keys, c.kv_heads, c.dim}, c.kv);
  b.upload(t.k, inputs(c.keys * c.kv_heads * c.dim, 2));
  b.upload(t.v, inputs(c.keys * c.kv_heads * c.dim, 3));
  const AttentionConfig config{};  // causal, scale 1/sqrt(head_dim)
  for (std::size_t start = 0; start < n; start += block) {
    const std::size_t m = std::min(block, n - start);
    t.q.push_back(b.tensor({m, c.heads, c.dim}, DType::f32));
    t.scores.push_back(b.tensor({m, c.heads, c.keys}, DType::f32));
    t.probs.push_back(b.tensor({m, c.heads, c.keys}, DType::f32));
    t.out.push_back(b.tensor({m, c.heads, c.dim}, DType::f32));
    b.upload(t.q.back(), q_data.subspan(start * c.heads * c.dim, m * c.heads * c.dim));
    t.q_bytes += t.q.back().bytes();
    t.out_bytes += t.out.back().bytes();
    const AttentionTokens tokens{.q_positions = q_pos.subspan(start, m), .k_positions = k_pos};
    cmd.attn_scores(t.q.back(), t.k, t.scores.back(), tokens, config);
    cmd.attn_softmax(t.scores.back(), t.probs.back(), config);
    cmd.attn_weighted_sum(t.probs.back(), t.v, t.out.back());
  }
  return t;
}

// Checks the Vulkan result (|out|, |probs| of all tokens) against the CPU reference.
// Returns "" when it matches, else what differs. The reference is run on every token
// when that is cheap, else on the first and last 16 tokens only (rows are independent:
// a token's result depends on its own q row and position and on the keys, so the
// reference for a subset of rows is exact for those rows); the 512x4096 prefill alone
// would take the reference tens of seconds.
std::string verify(const AttnCase& c, const std::vector<float>& out, const std::vector<float>* probs) {
  std::vector<std::size_t> rows;
  if (c.tokens * c.keys <= (std::size_t{1} << 20)) {
    for (std::size_t t = 0; t < c.tokens; ++t) rows.push_back(t);
  } else {
    for (std::size_t t = 0; t < c.tokens; ++t) {
      if (t < 16 || t + 16 >= c.tokens) rows.push_back(t);
    }
  }
  const std::vector<float>& q_all = inputs(c.tokens * c.heads * c.dim, 1);
  const std::size_t q_row = c.heads * c.dim, p_row = c.heads * c.keys;
  std::vector<float> q_sub;
  std::vector<std::int32_t> pos_sub;
  for (std::size_t t : rows) {
    q_sub.insert(q_sub.end(), q_all.begin() + static_cast<std::ptrdiff_t>(t * q_row),
                 q_all.begin() + static_cast<std::ptrdiff_t>((t + 1) * q_row));
    pos_sub.push_back(c.q_position(t));
  }
  Backend& cpu = backend(BackendKind::cpu);
  CommandList cmd = cpu.commands();
  const std::vector<std::int32_t> k_pos = c.k_positions();
  AttnTensors ref = record(cpu, cmd, c, q_sub, pos_sub, k_pos);
  cmd.submit_and_wait();
  const std::vector<float> ref_out = concat(cpu, ref.out), ref_probs = concat(cpu, ref.probs);

  char msg[256];
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::size_t t = rows[r];
    for (std::size_t i = 0; i < q_row; ++i) {
      const float got = out[t * q_row + i], want = ref_out[r * q_row + i];
      if (!(std::fabs(got - want) <= check_tolerance())) {
        std::snprintf(msg, sizeof msg, "out[%zu, %zu, %zu] = %g, CPU reference %g (tolerance %g)", t, i / c.dim, i % c.dim, got,
                      want, static_cast<double>(check_tolerance()));
        return msg;
      }
    }
    for (std::size_t i = 0; probs && i < p_row; ++i) {
      const float got = (*probs)[t * p_row + i], want = ref_probs[r * p_row + i];
      const bool ok = want == 0.0f ? got == 0.0f : std::fabs(got - want) <= 1e-6f + 1e-2f * std::fabs(want);
      if (!ok) {
        std::snprintf(msg, sizeof msg, "probs[%zu, %zu, %zu] = %g, CPU reference %g (tolerance 1e-6 + 1e-2 rel)", t, i / c.keys,
                      i % c.keys, got, want);
        return msg;
      }
    }
  }
  return "";
}

void BM_attention(benchmark::State& state, BackendKind kind) {
  try {
    const AttnCase c = attn_case(state);
    Backend& b = backend(kind);
    const std::vector<std::int32_t> q_pos = c.q_positions(), k_pos = c.k_positions();
    CommandList cmd = b.commands({.timestamps = true});
    AttnTensors t = record(b, cmd, c, inputs(c.tokens * c.heads * c.dim, 1), q_pos, k_pos);

    if (kind != BackendKind::cpu) {
      cmd.submit_and_wait();                                              // warm-up, and the result to verify
      static std::map<std::array<std::size_t, 6>, std::string> verified;  // once per case
      const std::string& difference = memo(verified, c.key(), [&] {
        const std::vector<float> probs = concat(b, t.probs);
        return verify(c, concat(b, t.out), &probs);
      });
      if (!difference.empty()) {
        state.SkipWithError(("differs from the CPU reference: " + difference).c_str());
        return;
      }
    }

    // The CPU reference has nothing to warm up, and one extra run of its prefill costs seconds.
    if (kind != BackendKind::cpu) warm_up("three stages " + case_name(c), [&] { cmd.submit_and_wait(); });
    std::map<std::string, double> stage_seconds;
    Baseline baseline(kind);
    const double seconds = run_timed(state, cmd, baseline, stage_seconds, /*warm_up=*/false);

    const double kv_bytes = static_cast<double>(t.k.bytes() + t.v.bytes());
    const double score_bytes = 4.0 * 4.0 * static_cast<double>(c.tokens * c.heads * c.keys);
    const double bytes = kv_bytes + score_bytes + static_cast<double>(t.q_bytes + t.out_bytes);
    report_bandwidth(state, baseline, bytes, seconds);
    state.counters["kv_copy_ratio"] = copy_ratio(state, baseline, kv_bytes, seconds);
    report_flops(state, 4.0 * static_cast<double>(c.heads * c.dim) * c.visible_pairs(), seconds);
    const double iterations = static_cast<double>(state.iterations());
    const std::pair<const char*, const char*> names[] = {
        {"attn_scores", "scores_ms"}, {"attn_softmax", "softmax_ms"}, {"attn_weighted_sum", "wsum_ms"}};
    for (const auto& [op, counter] : names)  // summed over the blocks
      state.counters[counter] = iterations > 0 ? stage_seconds[op] / iterations * 1e3 : 0.0;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// CommandList::attention's fused kernel (AttentionPath::fused: a CPU device would take
// the three stages by itself) on the same cases, with either family of kernels
// (KernelShape: cpu, a lane per key; gpu, key rows read by groups of lanes, keys split
// over the compute units): no scores or probabilities in memory, so bytes are K, V, q and
// out, and the 512x4096 prefill needs no blocks of rows.
void BM_attention_fused(benchmark::State& state, BackendKind kind, KernelShape shape) {
  try {
    const AttnCase c = attn_case(state);
    Backend& b = backend(kind, shape);
    const std::vector<std::int32_t> q_pos = c.q_positions(), k_pos = c.k_positions();
    Tensor q = b.tensor({c.tokens, c.heads, c.dim}, DType::f32), out = b.tensor({c.tokens, c.heads, c.dim}, DType::f32);
    Tensor k = b.tensor({c.keys, c.kv_heads, c.dim}, c.kv), v = b.tensor({c.keys, c.kv_heads, c.dim}, c.kv);
    b.upload(q, inputs(c.tokens * c.heads * c.dim, 1));
    b.upload(k, inputs(c.keys * c.kv_heads * c.dim, 2));
    b.upload(v, inputs(c.keys * c.kv_heads * c.dim, 3));
    CommandList cmd = b.commands({.timestamps = true});
    cmd.attention(q, k, v, out, {.q_positions = q_pos, .k_positions = k_pos},
                  {.path = AttentionPath::fused, .precision = bench_precision()});
    if (kind != BackendKind::cpu) {
      cmd.submit_and_wait();                                              // warm-up, and the result to verify
      static std::map<std::array<std::size_t, 6>, std::string> verified;  // once per case
      const std::string& difference =
          memo(verified, c.key(), [&] { return probe_without_result() ? std::string() : verify(c, b.download(out), nullptr); });
      if (!difference.empty()) {
        state.SkipWithError(("differs from the CPU reference: " + difference).c_str());
        return;
      }
    }
    if (kind != BackendKind::cpu) {
      warm_up(std::string(shape == KernelShape::gpu ? "fused gpu " : "fused cpu ") + case_name(c),
              [&] { cmd.submit_and_wait(); });
    }
    Baseline baseline(kind);
    std::map<std::string, double> per_op;
    const double seconds = run_timed(state, cmd, baseline, per_op, /*warm_up=*/false);
    const double kv_bytes = static_cast<double>(k.bytes() + v.bytes());
    report_bandwidth(state, baseline, kv_bytes + static_cast<double>(q.bytes() + out.bytes()), seconds);
    state.counters["kv_copy_ratio"] = copy_ratio(state, baseline, kv_bytes, seconds);
    report_flops(state, 4.0 * static_cast<double>(c.heads * c.dim) * c.visible_pairs(), seconds);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

constexpr std::int64_t kHeads = 32, kKvHeads = 8, kDim = 128;

void decode_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "keys", "heads", "kv_heads", "dim", "kv_dtype"});
  for (std::int64_t keys : {1024, 4096, 16384}) bm->Args({1, keys, kHeads, kKvHeads, kDim, 0});
  bm->UseManualTime()->Unit(benchmark::kMicrosecond);
  cap_iterations(bm);  // the CPU cases' fixed Iterations, set after, win
}

// The bytes of decode at 16k keys with one KV head (4 query heads), so that each key's row
// is contiguous with the next: how much the 8 heads' interleaving costs.
void decode_one_kv_head(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "keys", "heads", "kv_heads", "dim", "kv_dtype"});
  bm->Args({1, 131072, 4, 1, kDim, 0});
  bm->UseManualTime()->Unit(benchmark::kMicrosecond);
  cap_iterations(bm);  // the CPU cases' fixed Iterations, set after, win
}

// 512 tokens attending to themselves, and after 3584 earlier keys; with |with_4kx4k|
// (the fused op only: three stages would need 2 GiB of scores) 4096 tokens attending to
// themselves.
void prefill_shapes(benchmark::internal::Benchmark* bm, bool with_4k, bool with_4kx4k = false) {
  bm->ArgNames({"tokens", "keys", "heads", "kv_heads", "dim", "kv_dtype"});
  bm->Args({512, 512, kHeads, kKvHeads, kDim, 0});
  if (with_4k) bm->Args({512, 4096, kHeads, kKvHeads, kDim, 0});
  if (with_4kx4k) bm->Args({4096, 4096, kHeads, kKvHeads, kDim, 0});
  bm->UseManualTime()->Unit(benchmark::kMillisecond);
  cap_iterations(bm);  // the CPU cases' fixed Iterations, set after, win
}

BENCHMARK_CAPTURE(BM_attention, vulkan_decode, BackendKind::vulkan)->Apply(decode_shapes);
// 512x4096 needs 256 MiB of scores: on devices with the 128 MiB maxStorageBufferRange
// minimum (lavapipe) it runs as two blocks of 256 rows in the same command list.
BENCHMARK_CAPTURE(BM_attention, vulkan_prefill, BackendKind::vulkan)->Apply([](auto* bm) { prefill_shapes(bm, true); });
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_cpu_kernels_decode, BackendKind::vulkan, KernelShape::cpu)->Apply(decode_shapes);
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_gpu_kernels_decode, BackendKind::vulkan, KernelShape::gpu)->Apply(decode_shapes);
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_gpu_kernels_decode_one_kv_head, BackendKind::vulkan, KernelShape::gpu)
    ->Apply(decode_one_kv_head);
// Quantized K and V against the f16 cases above: decode at 4k and 16k keys and a 512-token
// prefill, with q8_0 and q4_0 (kv_dtype is DType's value: 3 q8_0, 4 q4_0). Bytes count the
// codes and scales actually read.
void quantized_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "keys", "heads", "kv_heads", "dim", "kv_dtype"});
  for (DType kv : {DType::q8_0, DType::q4_0}) {
    for (std::int64_t keys : {4096, 16384}) bm->Args({1, keys, kHeads, kKvHeads, kDim, static_cast<std::int64_t>(kv)});
    bm->Args({512, 512, kHeads, kKvHeads, kDim, static_cast<std::int64_t>(kv)});
  }
  bm->UseManualTime()->Unit(benchmark::kMicrosecond);
  cap_iterations(bm);  // the CPU cases' fixed Iterations, set after, win
}
BENCHMARK_CAPTURE(BM_attention, vulkan_quantized, BackendKind::vulkan)->Apply(quantized_shapes);
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_cpu_kernels_quantized, BackendKind::vulkan, KernelShape::cpu)
    ->Apply(quantized_shapes);
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_gpu_kernels_quantized, BackendKind::vulkan, KernelShape::gpu)
    ->Apply(quantized_shapes);
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_cpu_kernels_prefill, BackendKind::vulkan, KernelShape::cpu)->Apply([](auto* bm) {
  prefill_shapes(bm, true, true);
});
BENCHMARK_CAPTURE(BM_attention_fused, vulkan_gpu_kernels_prefill, BackendKind::vulkan, KernelShape::gpu)->Apply([](auto* bm) {
  prefill_shapes(bm, true, true);
});
// The CPU reference (plain loops, double accumulation) is slow: a fixed few runs. On a
// 2-core x86-64 VM one run takes about 0.3 s (decode, 16k keys), 0.5 s (prefill 512) and
// 9-10 s (prefill 512x4096), all under the ~20 s past which a case would be left out, so
// every case is kept.
BENCHMARK_CAPTURE(BM_attention, cpu_decode, BackendKind::cpu)->Apply(decode_shapes)->Apply(iterations<3>);
BENCHMARK_CAPTURE(BM_attention, cpu_prefill, BackendKind::cpu)
    ->Apply([](auto* bm) { prefill_shapes(bm, true); }) -> Apply(iterations<1>);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
