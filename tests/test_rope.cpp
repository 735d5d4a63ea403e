// RoPE: the CPU reference against hand-computed values and the identities that define a
// rotary embedding (on both backends), then Vulkan against the CPU reference on shapes
// chosen to break kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/rope_run.hpp"

namespace vkattn::test {
namespace {

double dot(const float* a, const float* b, std::size_t n) {
  double s = 0;
  for (std::size_t i = 0; i < n; ++i) s += double{a[i]} * b[i];
  return s;
}

using RopeIdentities = BackendTest;

// head_dim 4, base 10000: theta_0 = 1, theta_1 = 10000^(-1/2) = 0.01. At position 1,
// pair 0 turns by 1 rad and pair 1 by 0.01 rad.
TEST_P(RopeIdentities, HandComputedInterleaved) {
  const std::vector<float> got = apply_rope(backend(), {1, 1, 4}, {1, 0, 0, 1}, {1}, {.layout = RopeLayout::interleaved});
  const std::vector<float> want = {0.5403023058681398f, 0.8414709848078965f, -0.009999833334166664f, 0.9999500004166653f};
  EXPECT_TRUE(all_close(got, want, {1, 1, 4}, 1e-6, 0));
}

// Half layout pairs (0, 2) and (1, 3).
TEST_P(RopeIdentities, HandComputedHalf) {
  const std::vector<float> got = apply_rope(backend(), {1, 1, 4}, {1, 0, 0, 1}, {1}, {.layout = RopeLayout::half});
  const std::vector<float> want = {0.5403023058681398f, -0.009999833334166664f, 0.8414709848078965f, 0.9999500004166653f};
  EXPECT_TRUE(all_close(got, want, {1, 1, 4}, 1e-6, 0));
}

// theta_i = base^(-2i/d): with base 16 and d = 8, theta = 1, 1/2, 1/4, 1/8; at position 3
// the angles are 3, 1.5, 0.75, 0.375. Checks the frequency formula pair by pair.
TEST_P(RopeIdentities, HandComputedFrequencies) {
  const std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0};
  const std::vector<float> got = apply_rope(backend(), {1, 1, 8}, x, {3}, {.layout = RopeLayout::interleaved, .base = 16.0});
  std::vector<float> want;
  for (double a : {3.0, 1.5, 0.75, 0.375}) {
    want.push_back(static_cast<float>(std::cos(a)));
    want.push_back(static_cast<float>(std::sin(a)));
  }
  EXPECT_TRUE(all_close(got, want, {1, 1, 8}, 1e-6, 0));
}

TEST_P(RopeIdentities, PositionZeroIsIdentity) {
  const Shape shape{3, 4, 64};
  const auto x = normal(3 * 4 * 64, 1);
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half}) {
    EXPECT_EQ(apply_rope(backend(), shape, x, {0, 0, 0}, {.layout = layout}), x);
  }
}

// A rotation preserves the norm of every pair, hence of every row, at any position.
TEST_P(RopeIdentities, PreservesNorms) {
  const std::size_t T = 16, H = 3, D = 128;
  const auto x = normal(T * H * D, 2);
  auto positions = uniform_positions(T, 3);
  positions[0] = INT32_MAX;
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half}) {
    const auto y = apply_rope(backend(), {T, H, D}, x, positions, {.layout = layout});
    for (std::size_t r = 0; r < T * H; ++r) {
      const double before = dot(&x[r * D], &x[r * D], D), after = dot(&y[r * D], &y[r * D], D);
      EXPECT_NEAR(after, before, 1e-5 * before) << "row " << r;
    }
  }
}

// <rope(q, m), rope(k, n)> depends only on m - n, also near 2^31.
TEST_P(RopeIdentities, DotProductDependsOnlyOnOffset) {
  const std::size_t D = 64;
  const auto q = normal(D, 4), k = normal(D, 5);
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half}) {
    std::vector<double> dots;
    for (std::int32_t n : {0, 1000, 131071, 1000000, INT32_MAX - 7}) {
      const auto rq = apply_rope(backend(), {1, 1, D}, q, {n + 7}, {.layout = layout});
      const auto rk = apply_rope(backend(), {1, 1, D}, k, {n}, {.layout = layout});
      dots.push_back(dot(rq.data(), rk.data(), D));
    }
    for (double d : dots) EXPECT_NEAR(d, dots[0], 2e-5 * std::sqrt(D)) << "layout " << int(layout);
  }
}

// Rotations compose: rope(rope(x, m), n) = rope(x, m + n).
TEST_P(RopeIdentities, RotationsCompose) {
  const std::size_t D = 32;
  const auto x = normal(2 * D, 6);
  const auto once = apply_rope(backend(), {2, 1, D}, x, {1 << 30, 12345}, {});
  const auto twice = apply_rope(backend(), {2, 1, D}, once, {(1 << 30) - 1, 54321}, {});
  const auto direct = apply_rope(backend(), {2, 1, D}, x, {INT32_MAX, 66666}, {});
  EXPECT_TRUE(all_close(twice, direct, {2, 1, D}, 1e-5, 0));
}

// The half layout is the interleaved layout on a permuted vector: element i of the first
// half and element i + d/2 play the roles of 2i and 2i + 1.
TEST_P(RopeIdentities, LayoutsAreOnePermutationApart) {
  const std::size_t D = 16;
  const auto x = normal(D, 7);
  std::vector<float> permuted(D);
  for (std::size_t i = 0; i < D / 2; ++i) {
    permuted[2 * i] = x[i];
    permuted[2 * i + 1] = x[i + D / 2];
  }
  const auto half = apply_rope(backend(), {1, 1, D}, x, {77}, {.layout = RopeLayout::half});
  const auto inter = apply_rope(backend(), {1, 1, D}, permuted, {77}, {.layout = RopeLayout::interleaved});
  for (std::size_t i = 0; i < D / 2; ++i) {
    EXPECT_FLOAT_EQ(half[i], inter[2 * i]);
    EXPECT_FLOAT_EQ(half[i + D / 2], inter[2 * i + 1]);
  }
}

// Dims past rotary_dim pass through bit for bit; the rotated part equals RoPE of d dims.
TEST_P(RopeIdentities, PartialRotaryDims) {
  const std::size_t D = 96, d = 32;
  const auto x = normal(D, 8);
  for (RopeLayout layout : {RopeLayout::interleaved, RopeLayout::half}) {
    const auto y = apply_rope(backend(), {1, 1, D}, x, {999}, {.layout = layout, .rotary_dim = d});
    const auto y_short =
        apply_rope(backend(), {1, 1, d}, std::vector<float>(x.begin(), x.begin() + d), {999}, {.layout = layout});
    for (std::size_t i = 0; i < d; ++i) EXPECT_FLOAT_EQ(y[i], y_short[i]);
    for (std::size_t i = d; i < D; ++i) EXPECT_EQ(y[i], x[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeIdentities, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Vulkan against the CPU reference. Shapes pick every unit path of the kernel: 16-byte
// vectors when head_dim and the pairs align, single pairs, f16 word pairs, whole rows.
struct RopeCase {
  std::size_t tokens, heads, head_dim, rotary_dim;
  RopeLayout layout;
  DType dtype;
  bool large_positions;
};

std::string case_name(const ::testing::TestParamInfo<RopeCase>& info) {
  const RopeCase& c = info.param;
  return std::to_string(c.tokens) + "x" + std::to_string(c.heads) + "x" + std::to_string(c.head_dim) + "_rot" +
         std::to_string(c.rotary_dim) + (c.layout == RopeLayout::half ? "_half_" : "_inter_") + to_string(c.dtype) +
         (c.large_positions ? "_large" : "");
}

class RopeVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<RopeCase> {};

// |gpu| against the CPU on case |c|; returns the GPU list's statistics.
CommandStats expect_matches(Backend& gpu, Backend& cpu, const RopeCase& c) {
  const Shape shape{c.tokens, c.heads, c.head_dim};
  const auto x = normal(c.tokens * c.heads * c.head_dim, 11, 1.5f);
  std::vector<std::int32_t> positions(c.tokens);
  if (c.large_positions) {
    positions = uniform_positions(c.tokens, 12);
    positions.back() = INT32_MAX;
  } else {
    std::iota(positions.begin(), positions.end(), 1);  // from 1: position 0 is the identity
  }
  const RopeConfig config{.layout = c.layout, .rotary_dim = c.rotary_dim};
  CommandStats stats;
  const auto got = apply_rope(gpu, shape, x, positions, config, c.dtype, &stats);
  const auto want = apply_rope(cpu, shape, x, positions, config, c.dtype);
  // f32: the phase is exact and sin/cos good to ~3e-8, so 4e-6 absolute on |x| <= ~6.
  // f16: both round the same f32-exact result to half; they may differ by one half ulp.
  const double atol = c.dtype == DType::f16 ? 1e-3 : 4e-6;
  const double rtol = c.dtype == DType::f16 ? 1e-3 : 0.0;
  EXPECT_TRUE(all_close(got, want, shape, atol, rtol));
  return stats;
}

// 16-byte units are read through texel views (two bindings: q and k, here the same
// tensor) when the tensor fits one and the device reads through texel views (not with
// KernelShape::gpu); the other units, which may share a word between invocations, never are.
TEST_P(RopeVulkanVsCpu, Matches) {
  const RopeCase c = GetParam();
  const CommandStats stats = expect_matches(*gpu_, *cpu_, c);
  const std::size_t per_vec = c.dtype == DType::f16 ? 8 : 4;
  const std::size_t rot = c.rotary_dim ? c.rotary_dim : c.head_dim;
  const bool vec = c.head_dim % per_vec == 0 && (c.layout == RopeLayout::interleaved ? rot : rot / 2) % per_vec == 0;
  const std::size_t texels = (c.tokens * c.heads * c.head_dim + per_vec - 1) / per_vec;
  const bool fits = texels <= gpu_->limits().max_texel_buffer_elements;  // less at the spec minimums; 0 for gpu kernels
  EXPECT_EQ(stats.texel_reads, vec && fits ? 2u : 0u);
}

// The same with texel reads off: every unit reads and writes through storage buffers.
TEST_P(RopeVulkanVsCpu, MatchesThroughStorageBuffers) {
  on_vulkan(storage_buffer_options(), [&](Backend& gpu) { EXPECT_EQ(expect_matches(gpu, *cpu_, GetParam()).texel_reads, 0u); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeVulkanVsCpu,
                         ::testing::Values(RopeCase{1, 1, 2, 0, RopeLayout::half, DType::f32, false},
                                           RopeCase{5, 3, 2, 0, RopeLayout::interleaved, DType::f16, true},
                                           RopeCase{3, 7, 64, 0, RopeLayout::interleaved, DType::f32, true},
                                           RopeCase{17, 5, 80, 32, RopeLayout::half, DType::f32, false},
                                           RopeCase{9, 5, 6, 6, RopeLayout::half, DType::f16, true},
                                           RopeCase{257, 9, 128, 0, RopeLayout::half, DType::f16, false},
                                           RopeCase{31, 3, 112, 48, RopeLayout::interleaved, DType::f16, true},
                                           RopeCase{3000, 3, 64, 0, RopeLayout::half, DType::f32, false},
                                           RopeCase{4099, 1, 128, 0, RopeLayout::interleaved, DType::f32, true},
                                           RopeCase{3, 2, 2048, 2048, RopeLayout::half, DType::f32, true},
                                           RopeCase{7, 1, 1000, 998, RopeLayout::interleaved, DType::f16, true},
                                           // Each unit path of rope_unit.glsl (vector units above; scalar ones here).
                                           RopeCase{4, 3, 6, 6, RopeLayout::half, DType::f32, true},
                                           RopeCase{3, 5, 10, 10, RopeLayout::interleaved, DType::f32, true},
                                           RopeCase{6, 4, 12, 12, RopeLayout::half, DType::f16, true},
                                           RopeCase{2, 3, 20, 20, RopeLayout::half, DType::f16, false}),
                         case_name);

}  // namespace
}  // namespace vkattn::test
