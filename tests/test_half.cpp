// Host f16 conversion: exhaustive round trip of every half, and round-to-nearest-even
// at the boundaries that matter (overflow, subnormals, ties).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/half.hpp"

namespace vkattn::detail {
namespace {

TEST(Half, EveryHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = half_to_float(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      EXPECT_EQ(float_to_half(f), h) << h;
    }
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);               // below the overflow tie
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);               // tie rounds to even: inf
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even (down)
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);             // tie between 0 and 2^-24
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
}

}  // namespace
}  // namespace vkattn::detail
