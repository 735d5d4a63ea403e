// RoPE and the copy baseline. Each RoPE case is first checked against the CPU reference,
// then timed per dispatch. Bytes counted: the tensor read and written once (positions and
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
  const double seconds = run_timed(state, cmd);
  report_bandwidth(state, kind, 8.0 * static_cast<double>(n), seconds);
}

std::vector<float> inputs(std::size_t n) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// Verify before timing: the Vulkan result must match the CPU reference.
void verify(BackendKind kind, const Shape& shape, DType dtype, const std::vector<std::int32_t>& pos) {
  if (kind == BackendKind::cpu) return;
  const auto x = inputs(shape[0] * shape[1] * shape[2]);
  std::vector<float> out[2];
  int i = 0;
  for (BackendKind k : {kind, BackendKind::cpu}) {
    Backend& b = backend(k);
    Tensor t = b.tensor(shape, dtype);
    b.upload(t, x);
    CommandList cmd = b.commands();
    cmd.rope(t, pos, {});
    cmd.submit_and_wait();
    out[i++] = b.download(t);
  }
  const double tol = dtype == DType::f16 ? 4e-3 : 4e-6;
  for (std::size_t j = 0; j < x.size(); ++j) {
    if (std::fabs(out[0][j] - out[1][j]) > tol) throw std::runtime_error("rope: GPU result differs from reference");
  }
}

void BM_rope(benchmark::State& state, BackendKind kind, DType dtype) {
  Backend& b = backend(kind);
  const Shape shape{static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)),
                    static_cast<std::size_t>(state.range(2))};
  std::vector<std::int32_t> pos(shape[0]);
  std::iota(pos.begin(), pos.end(), 1000);
  try {
    verify(kind, shape, dtype, pos);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  Tensor t = b.tensor(shape, dtype);
  b.upload(t, inputs(shape[0] * shape[1] * shape[2]));
  CommandList cmd = b.commands({.timestamps = true});
  cmd.rope(t, pos, {});
  const double seconds = run_timed(state, cmd);
  report_bandwidth(state, kind, 2.0 * static_cast<double>(t.bytes()), seconds);
}

void rope_shapes(benchmark::internal::Benchmark* bm) {
  bm->Args({512, 32, 128})->Args({1, 32, 128})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_copy, vulkan, BackendKind::vulkan)->Arg(8 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_copy, cpu, BackendKind::cpu)->Arg(8 << 20)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_rope, vulkan_f32, BackendKind::vulkan, DType::f32)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, vulkan_f16, BackendKind::vulkan, DType::f16)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, cpu_f32, BackendKind::cpu, DType::f32)->Apply(rope_shapes);
BENCHMARK_CAPTURE(BM_rope, cpu_f16, BackendKind::cpu, DType::f16)->Apply(rope_shapes);

}  // namespace
}  // namespace vkattn::bench

BENCHMARK_MAIN();
