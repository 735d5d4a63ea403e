// q8_0 and q4_0 on the host (src/common/quant.hpp): blocks worked out by hand, ggml's
// rounding rules, the layout, and the one deviation (no subnormal scales).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "common/half.hpp"
#include "common/quant.hpp"

namespace vkattn::test {
namespace {

using detail::kQuantBlock;

struct Block {
  std::array<std::uint32_t, 8> codes{};
  std::uint16_t scale = 0;
};

Block quantize(DType dtype, const std::array<float, 32>& x) {
  Block b;
  b.scale = detail::quantize_block(dtype, std::span<const float, 32>(x), b.codes.data());
  return b;
}

std::int32_t q8_code(const Block& b, std::size_t i) {
  return static_cast<std::int8_t>((b.codes[i / 4] >> (8 * (i % 4))) & 0xffu);
}
std::uint32_t q4_code(const Block& b, std::size_t i) { return (b.codes[i / 8] >> (4 * (i % 8))) & 0xfu; }

// amax 127 gives d = 1 exactly: the codes are x rounded half away from zero (C's round).
TEST(Quant, Q8BlockByHand) {
  std::array<float, 32> x{};
  const float head[] = {127.0f, -127.0f, 63.5f, 0.5f, -0.5f, 1.49f, -2.5f, 0.0f, 100.4f, -100.6f};
  std::copy(std::begin(head), std::end(head), x.begin());
  const Block b = quantize(DType::q8_0, x);
  EXPECT_EQ(b.scale, 0x3c00u) << "f16 1.0";
  const std::int32_t want[] = {127, -127, 64, 1, -1, 1, -3, 0, 100, -101};
  for (std::size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(q8_code(b, i), want[i]) << "element " << i;
  for (std::size_t i = std::size(want); i < kQuantBlock; ++i) EXPECT_EQ(q8_code(b, i), 0);
}

// A scale that is not a power of two: d = 3 / 127 rounds to f16, and the codes use the
// reciprocal of the f32 d (as ggml does), so x = 3 maps to exactly 127.
TEST(Quant, Q8ScaleRoundsToHalf) {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < kQuantBlock; ++i) x[i] = 3.0f * (static_cast<float>(i) - 16.0f) / 16.0f;
  const Block b = quantize(DType::q8_0, x);
  EXPECT_EQ(b.scale, detail::float_to_half(3.0f / 127.0f));
  EXPECT_EQ(q8_code(b, 0), -127);  // x = -3
  EXPECT_EQ(q8_code(b, 16), 0);
  const float id = 1.0f / (3.0f / 127.0f);
  for (std::size_t i = 0; i < kQuantBlock; ++i) EXPECT_EQ(q8_code(b, i), std::lround(x[i] * id)) << i;
}

// q4_0: d = x_max / -8 for the value of largest magnitude (the first on ties); codes are
// x / d + 8.5 truncated, at most 15; dequantized (q - 8) d.
TEST(Quant, Q4BlockByHand) {
  std::array<float, 32> x{};
  const float head[] = {-8.0f, 7.0f, 7.4f, -0.5f, 0.49f, 0.5f, 3.0f, -7.9f};
  std::copy(std::begin(head), std::end(head), x.begin());
  Block b = quantize(DType::q4_0, x);
  EXPECT_EQ(b.scale, 0x3c00u) << "d = -8 / -8 = 1";
  const std::uint32_t want[] = {0, 15, 15, 8, 8, 9, 11, 0};
  for (std::size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(q4_code(b, i), want[i]) << "element " << i;
  for (std::size_t i = std::size(want); i < kQuantBlock; ++i) EXPECT_EQ(q4_code(b, i), 8u) << "zeros are 8";

  // A positive maximum makes d negative; the first of two equal magnitudes decides.
  std::array<float, 32> y{};
  y[3] = 4.0f;
  y[9] = -4.0f;
  y[10] = 1.0f;
  b = quantize(DType::q4_0, y);
  EXPECT_EQ(b.scale, detail::float_to_half(-0.5f));
  EXPECT_EQ(q4_code(b, 3), 0u);   // 4 / -0.5 + 8.5 = 0.5
  EXPECT_EQ(q4_code(b, 9), 15u);  // -4 / -0.5 + 8.5 = 16.5, capped
  EXPECT_EQ(q4_code(b, 10), 6u);  // 1 / -0.5 + 8.5 = 6.5
}

TEST(Quant, ZeroAndTinyBlocks) {
  for (DType dtype : {DType::q8_0, DType::q4_0}) {
    std::array<float, 32> x{};
    // q4_0's d = max / -8 is -0.0 for zeros: ggml stores f16 0x8000 there.
    const std::uint16_t zero = dtype == DType::q4_0 ? 0x8000u : 0u;
    Block b = quantize(dtype, x);
    EXPECT_EQ(b.scale, zero) << to_string(dtype);
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
      EXPECT_EQ(dtype == DType::q8_0 ? q8_code(b, i) : static_cast<std::int32_t>(q4_code(b, i)), dtype == DType::q8_0 ? 0 : 8);
    }
    // A scale that would be subnormal in f32 is 0 (GPUs may flush subnormals).
    x.fill(9e-38f);  // normal, but |x| / 127 and |x| / 8 are not
    b = quantize(dtype, x);
    EXPECT_EQ(b.scale, zero) << to_string(dtype);
    x.fill(-9e-38f);  // q4_0: d = +tiny, 0 with its sign
    b = quantize(dtype, x);
    EXPECT_EQ(b.scale, 0u) << to_string(dtype);
  }
}

// Layout: codes of every block first, then the f16 scales two per word; a tensor's
// elements dequantize one at a time from it.
TEST(Quant, LayoutAndDequantize) {
  const std::size_t n = 96;  // three blocks: the last scale word is half used
  for (DType dtype : {DType::q8_0, DType::q4_0}) {
    std::vector<std::uint32_t> words(detail::storage_words(n, dtype), 0);
    EXPECT_EQ(words.size(), (dtype == DType::q8_0 ? 24u : 12u) + 2u);
    std::vector<float> x(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * static_cast<float>(1 + i / 32);
    for (std::size_t b = 0; b < 3; ++b) {
      detail::store_block(dtype, std::span<const float, 32>(&x[32 * b], 32), words, n, b);
    }
    for (std::size_t b = 0; b < 3; ++b) {
      std::array<float, 32> xb{};
      std::copy_n(&x[32 * b], 32, xb.begin());
      const Block want = quantize(dtype, xb);
      const std::size_t scale_word = detail::value_words(n, dtype) + b / 2;
      EXPECT_EQ((words[scale_word] >> (16 * (b % 2))) & 0xffffu, want.scale) << "block " << b;
      const float d = detail::half_to_float(want.scale);
      for (std::size_t i = 0; i < kQuantBlock; ++i) {
        const float q = dtype == DType::q8_0 ? static_cast<float>(q8_code(want, i)) : static_cast<float>(q4_code(want, i)) - 8.0f;
        EXPECT_EQ(detail::dequantize(dtype, words, n, 32 * b + i), q * d) << "element " << 32 * b + i;
        // Error bound: half a step for q8_0, a step for q4_0 (codes stop at 15), plus the
        // scale's rounding to f16 (2^-11 relative) times the largest code.
        const float steps = dtype == DType::q8_0 ? 0.5f + 127.0f / 2048 : 1.0f + 8.0f / 2048;
        EXPECT_LE(std::fabs(q * d - x[32 * b + i]), steps * std::fabs(d) + 1e-6f);
      }
    }
  }
}

}  // namespace
}  // namespace vkattn::test
