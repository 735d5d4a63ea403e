// The matrix-tile layer (shaders/common/mt.glsl) through mt_selftest.comp: each operation
// (both load layouts, pitch 0, odd pitches, a row scale, an accumulation over two
// products) on small-integer halves, whose products and sums are exact, against the same
// arithmetic on the host, bit for bit. Built into vkattn_internal_tests (it dispatches the
// kernel itself); its suite's name holds "Coopmat": `ctest -R Coopmat`.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/half.hpp"
#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/f16_match.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn::test {
namespace {

bool mentions(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Half k of the row of pitch |pitch| uints at |at|, row |r|.
float half_at(const std::vector<std::uint32_t>& w, std::uint32_t at, std::uint32_t pitch, std::uint32_t r, std::uint32_t k) {
  return detail::half_to_float(static_cast<std::uint16_t>(w[at + r * pitch + k / 2] >> (16 * (k % 2))));
}

TEST(CoopmatLayer, SelftestIsBitExact) {
  std::string why;
  auto backend = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(backend, why);
  const auto ctx = detail::context_of(*backend);
  ASSERT_TRUE(ctx);
  const std::uint32_t sg = detail::preferred_subgroup_size(ctx->limits);
  if (!ctx->limits.subgroup_shuffle || !ctx->limits.subgroup_size_control || sg < 8 || sg > 64) {
    GTEST_SKIP() << "the stand-in needs shuffles and full subgroups of 8 to 64";
  }
  std::mt19937 g(7);
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<std::uint32_t> w(detail::kMatrixSelftestWords);
  for (std::uint32_t i = 0; i < 652; ++i) {
    const auto lo = detail::float_to_half(static_cast<float>(small(g))), hi = detail::float_to_half(static_cast<float>(small(g)));
    w[i] = lo | (std::uint32_t{hi} << 16);
  }
  const float factors[] = {0.5f, 2.0f, -1.0f, 4.0f, 0.25f, 1.0f, -2.0f, 8.0f};
  for (std::uint32_t r = 0; r < 16; ++r) w[652 + r] = std::bit_cast<std::uint32_t>(factors[r % 8] * (r < 8 ? 1.0f : -1.0f));

  std::vector<float> want(4 * 256);
  for (std::uint32_t r = 0; r < 16; ++r) {
    for (std::uint32_t n = 0; n < 16; ++n) {
      float c0 = 0, c1 = 0, d = 0;
      for (std::uint32_t k = 0; k < 16; ++k) {
        const float a = half_at(w, 0, 12, r, k);
        c0 += a * half_at(w, 192, 8, n, k);   // B^T: key row n, element k
        c1 += a * half_at(w, 320, 20, k, n);  // B: value row k, element n
        d += a * half_at(w, 640, 0, k, n);    // B0: the one row, element n
      }
      want[r * 16 + n] = c0;
      want[256 + r * 16 + n] = c0 + c1;
      want[512 + r * 16 + n] = (c0 + c1) * std::bit_cast<float>(w[652 + r]);
      want[768 + r * 16 + n] = d;
    }
  }
  // The device self-test's host side computes the same tiles.
  const std::vector<std::uint32_t> expected = detail::matrix_selftest_expected(w);
  ASSERT_EQ(expected.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(expected[i], std::bit_cast<std::uint32_t>(want[i])) << i;
  const std::vector<std::uint32_t> got = detail::matrix_selftest(ctx, w, sg);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], std::bit_cast<std::uint32_t>(want[i])) << "tile " << i / 256 << " (" << (i % 256) / 16 << ", " << i % 16
                                                             << "): " << std::bit_cast<float>(got[i]) << " vs " << want[i];
  }
  EXPECT_TRUE(backend->validation_messages().empty());
}

// The device self-test's input: small integers in every operand (so that the tiles are
// exact), no operand all zero, the row factors powers of two.
TEST(CoopmatSelftest, InputIsSmallExactIntegers) {
  const std::vector<std::uint32_t> w = detail::matrix_selftest_input();
  ASSERT_EQ(w.size(), detail::kMatrixSelftestWords);
  std::set<float> seen;
  for (std::uint32_t i = 0; i < 652 * 2; ++i) {
    const float x = detail::half_to_float(static_cast<std::uint16_t>(w[i / 2] >> (16 * (i % 2))));
    if (i < 16 || (i >= 192 * 2 && i < 192 * 2 + 16)) {  // the precision probe: A's and K's row 0
      ASSERT_EQ(x, 1.0f + 0x1p-10f) << i;
      continue;
    }
    ASSERT_EQ(x, std::round(x)) << i;
    ASSERT_LE(std::abs(x), 4.0f) << i;
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 9u);  // every integer of [-4, 4]
  // The probe: tile 0's (0, 0) needs f32 sums of exact products; sums kept in f16 differ.
  const std::vector<std::uint32_t> probe_want = detail::matrix_selftest_expected(w);
  EXPECT_EQ(std::bit_cast<float>(probe_want[0]), 16.0f + 0x1p-5f + 0x1p-16f);
  float in_f16 = 0;
  for (int k = 0; k < 16; ++k) {
    in_f16 = detail::half_to_float(detail::float_to_half(in_f16 + (1.0f + 0x1p-10f) * (1.0f + 0x1p-10f)));
  }
  EXPECT_NE(in_f16, std::bit_cast<float>(probe_want[0]));
  for (std::uint32_t r = 0; r < 16; ++r) {
    int e = 0;
    EXPECT_EQ(std::abs(std::frexp(std::bit_cast<float>(w[652 + r]), &e)), 0.5f) << r;
  }
  // The expected tiles are not trivial: each has values of both signs past 16.
  const std::vector<std::uint32_t> want = detail::matrix_selftest_expected(w);
  for (std::size_t t = 0; t < 4; ++t) {
    float lo = 0, hi = 0;
    for (std::size_t e = 0; e < 256; ++e) {
      lo = std::min(lo, std::bit_cast<float>(want[t * 256 + e]));
      hi = std::max(hi, std::bit_cast<float>(want[t * 256 + e]));
    }
    EXPECT_LT(lo, -16.0f) << "tile " << t;
    EXPECT_GT(hi, 16.0f) << "tile " << t;
  }
}

// The fallback, exercised through the stand-in (lavapipe has no matrix units): a self-test
// that passes leaves the path on; one whose tiles differ, or that cannot run (a pipeline
// the driver refuses), turns the matrix path off for the backend, names the failure in
// DeviceInfo::matrix_note and logs it as a warning; f16_products attention then runs what
// a device without units would.
TEST(CoopmatSelftest, FailureTurnsThePathOff) {
  auto warnings = std::make_shared<std::vector<std::string>>();
  auto built = std::make_shared<std::vector<std::string>>();
  DeviceOptions options = test_options();
  options.matrix_units = MatrixUnits::standin;
  options.submit_timeout_ms = 600000;  // llvmpipe builds the pipeline inside the submission
  options.log_level = LogLevel::info;
  options.log = [warnings, built](LogLevel level, std::string_view m) {
    if (level == LogLevel::warning) warnings->emplace_back(m);
    if (m.find("built pipeline") != std::string_view::npos || m.find("self-test") != std::string_view::npos) {
      built->emplace_back(m);
    }
  };
  std::string why;
  auto backend = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(backend, why);
  const auto ctx = detail::context_of(*backend);
  ASSERT_TRUE(ctx);
  const std::uint32_t sg = detail::matrix_subgroup_size(ctx->limits);
  if (!ctx->limits.subgroup_shuffle || !ctx->limits.subgroup_size_control || sg < 8 || sg > 64) {
    GTEST_SKIP() << "the stand-in needs shuffles and full subgroups of 8 to 64";
  }
  EXPECT_EQ(sg, detail::preferred_subgroup_size(ctx->limits));
  // A backend made as the stand-in ran no self-test (only the units get one).
  for (const auto& m : *built) EXPECT_EQ(m.find("self-test"), std::string::npos) << m;

  EXPECT_EQ(detail::run_matrix_selftest(ctx, false, sg), "");
  const std::string wrong =
      detail::run_matrix_selftest(ctx, false, sg, [](std::vector<std::uint32_t>& want) { want[256 + 2 * 16 + 12] ^= 1u; });
  EXPECT_TRUE(mentions(wrong, "1 of 1024 values wrong")) << wrong;
  EXPECT_TRUE(mentions(wrong, "tile 1 (2, 12)")) << wrong;
  const std::string refused = detail::run_matrix_selftest(ctx, false, sg, [](std::vector<std::uint32_t>&) {
    throw Error(ErrorCode::vulkan_call_failed, "pipeline refused", "vkCreateComputePipelines", -13, "mt_selftest");
  });
  EXPECT_TRUE(mentions(refused, "did not run")) << refused;
  EXPECT_TRUE(mentions(refused, "pipeline refused")) << refused;

  // As if the units had been chosen: a pass keeps them, a failure turns them off.
  ctx->limits.matrix_units = true;
  EXPECT_TRUE(detail::check_matrix_path(ctx, false, sg));
  EXPECT_TRUE(ctx->limits.matrix_units);
  EXPECT_TRUE(warnings->empty());
  EXPECT_FALSE(detail::check_matrix_path(ctx, false, sg, [](std::vector<std::uint32_t>& want) { want[700] ^= 1u << 31; }));
  EXPECT_FALSE(ctx->limits.matrix_units || ctx->limits.matrix_standin);
  EXPECT_FALSE(backend->limits().matrix_units || backend->limits().matrix_standin);
  const std::string& note = ctx->physical.info.matrix_note;
  EXPECT_TRUE(mentions(note, "self-test")) << note;
  EXPECT_TRUE(mentions(note, "tile 2 (11, 12)")) << note;
  ASSERT_EQ(warnings->size(), 1u);
  EXPECT_TRUE(mentions(warnings->front(), note)) << warnings->front();

  // f16_products now runs what a device without units would: the packed f16 tiled kernel on
  // the GPU shape with shaderFloat16 (a device with units has it), but the decode kernel in
  // f32 where the GPU shape finds the rows few for the device (lavapipe under
  // VKATTN_KERNELS=gpu), else (lavapipe's CPU shape) the lane-per-key kernel in f32; no
  // matrix pipeline; within the f16 bounds.
  built->clear();
  auto cpu = make_backend(BackendKind::cpu);
  AttnInputs in = random_inputs(40, 4, 2, 40, 64, 1, 11);
  in.config.path = AttentionPath::fused;
  CommandStats stats;
  in.config.precision = AttentionPrecision::f16_products;
  const std::vector<float> got = run_attention_op(*backend, in, &stats);
  ASSERT_EQ(stats.attention.size(), 1u);
  const bool few_rows = ctx->shape == KernelShape::gpu && detail::decode_preferred(*ctx, 40, 4, 2);
  const bool packed = ctx->shape == KernelShape::gpu && !few_rows && ctx->physical.float16;
  EXPECT_EQ(stats.attention[0].kernel, few_rows ? AttentionKernel::decode
                                       : packed ? AttentionKernel::tiled
                                                : AttentionKernel::lane_per_key);
  EXPECT_EQ(stats.attention[0].precision, packed ? AttentionPrecision::f16_products : AttentionPrecision::f32);
  expect_f16_matches(*cpu, in, got, "after the failed self-test", kPackedChain);
  for (const auto& m : *built) EXPECT_EQ(m.find("attn_mt"), std::string::npos) << m;
  EXPECT_FALSE(built->empty());
  EXPECT_TRUE(backend->validation_messages().empty());
}

}  // namespace
}  // namespace vkattn::test
