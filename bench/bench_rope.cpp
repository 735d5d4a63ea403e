// RoPE and the copy baseline. Each RoPE case is first checked against the CPU reference,
// then timed per dispatch. Bytes counted: Q (and K) read and written once (positions and
// the frequency table are a few hundred bytes).
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>

#include "bench_common.hpp"

namespace vkattn::bench {
namespace {

void BM_copy(benchmark::State& state, BackendKind kind) {
  Backend& b = backend(kind);
  const auto n = static_cast<std::size_t>(state.range(0));
  Tensor src = b.tensor({n}, DType::f32), dst = b.tensor({n}, DType::f32);
  CommandList cmd = b.commands({.timestamps = true});
  cmd.copy(src, dst);
  Baseline baseline(kind);
  const double seconds = run_timed(state, cmd, baseline);
  report_bandwidth(state, baseline, 8.0 * static_cast<double>(n), seconds);
}

const std::vector<float>& inputs(std::size_t n) { return normal_values(n, 7); }

// Verify before timing: the Vulkan result must match the CPU reference.
void verify(BackendKind kind, const Shape& q_shape, const Shape& k_shape, DType dtype, const std::vector<std::int32_t>& pos) {
  if (kind == BackendKind::cpu) return;
  const auto xq = inputs(q_shape[0] * q_shape[1] * q_shape[2]);
  const auto xk = inputs(k_shape[0] * k_shape[1] * k_shape[2]);
  std::vector<float> out[2][2];
  int i = 0;
  for (BackendKind k : {kind, BackendKind::cpu}) {
    Backend& b = backend(k);
    Tensor tq = b.tensor(q_shape, dtype), tk = b.tensor(k_shape, dtype);
    b.upload(tq, xq);
    b.upload(tk, xk);
    CommandList cmd = b.commands();
    cmd.rope(tq, tk, pos, {});
    cmd.submit_and_wait();
    out[i][0] = b.download(tq);
    out[i][1] = b.download(tk);
    ++i;
  }
  const double tol = dtype == DType::f16 ? 4e-3 : 4e-6;
  for (int t = 0; t < 2; ++t) {
    for (std::size_t j = 0; j < out[0][t].size(); ++j) {
      if (std::fabs(out[0][t][j] - out[1][t][j]) > tol) {
        throw std::runtime_error("rope: GPU result differs from reference");
      }
    }
  }
}

// Args: tokens, query heads, kv heads (0: rotate Q alone), head_dim.
void BM_rope(benchmark::State& state, BackendKind kind, DType dtype) {
  Backend& b = backend(kind);
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto hq = static_cast<std::size_t>(state.range(1)), hk = static_cast<std::size_t>(state.range(2));
  const auto d = static_cast<std::size_t>(state.range(3));
  std::vector<std::int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 1000);
  try {
    verify(kind, {n, hq, d}, {n, std::max<std::size_t>(hk, 1), d}, dtype, pos);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Tensor q = b.tensor({n, hq, d}, dtype);
  b.upload(q, inputs(n * hq * d));
  Tensor k;
  double bytes = 2.0 * static_cast<double>(q.bytes());
  CommandList cmd = b.commands({.timestamps = true});
  if (hk > 0) {
    k = b.tensor({n, hk, d}, dtype);
    b.upload(k, inputs(n * hk * d));
    bytes += 2.0 * static_cast<double>(k.bytes());
    cmd.rope(q, k, pos, {});
  } else {
    cmd.rope(q, pos, {});
  }
  Baseline baseline(kind);
  const double seconds = run_timed(state, cmd, baseline);
  report_bandwidth(state, baseline, bytes, seconds);
}

void rope_shapes(benchmark::internal::Benchmark* bm) {
  bm->ArgNames({"tokens", "q_heads", "kv_heads", "dim"});
  bm->Args({512, 32, 8, 128})->Args({1, 32, 8, 128})->Args({512, 32, 0, 128})->Args({1, 32, 0, 128});
  bm->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

// 32 MiB (the baseline itself), and 40 KiB, the bytes of a decode-sized RoPE on Q and K:
// what one small dispatch costs on the device, whatever it does.
void copy_sizes(benchmark::internal::Benchmark* bm) {
  bm->Arg(8 << 20)->Arg(10240)->UseManualTime()->Unit(benchmark::kMicrosecond)->Apply(cap_iterations);
}

BENCHMARK_CAPTURE(BM_copy, vulkan, BackendKind::vulkan)->Apply(copy_sizes);
BENCHMARK_CAPTURE(BM_copy, cpu, BackendKind::cpu)->Apply(copy_sizes);
BENCHMARK_CAPTURE(BM_rope, vulkan_f32, BackendKind::vulkan, DType::f32)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, vulkan_f16, BackendKind::vulkan, DType::f16)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, cpu_f32, BackendKind::cpu, DType::f32)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, cpu_f16, BackendKind::cpu, DType::f16)->Apply(rope_shapes);

}  // namespace
}  // namespace vkattn::bench

VKATTN_BENCHMARK_MAIN()
