// The matrix-tile layer (shaders/common/mt.glsl) through mt_selftest.comp: each operation
// (both load layouts, pitch 0, odd pitches, a row scale, an accumulation over two
// products) on small-integer halves, whose products and sums are exact, against the same
// arithmetic on the host, bit for bit. Built into vkattn_internal_tests (it dispatches the
// kernel itself); its suite's name holds "Coopmat": `ctest -R Coopmat`.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "common/half.hpp"
#include "support/backends.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn::test {
namespace {

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
  const std::vector<std::uint32_t> got = detail::matrix_selftest(ctx, w, sg);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i], std::bit_cast<std::uint32_t>(want[i])) << "tile " << i / 256 << " (" << (i % 256) / 16 << ", " << i % 16
                                                             << "): " << std::bit_cast<float>(got[i]) << " vs " << want[i];
  }
  EXPECT_TRUE(backend->validation_messages().empty());
}

}  // namespace
}  // namespace vkattn::test
