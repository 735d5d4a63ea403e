// q8_0 and q4_0: ggml's block quantizations (blocks of 32 values along head_dim, one f16
// scale each), with ggml's reference numerics (quantize_row_q8_0_ref and
// quantize_row_q4_0_ref), in vkattn's storage layout:
//   codes first, element e in bits 8 (e % 4) of word e / 4 (q8_0, two's complement) or
//   bits 4 (e % 8) of word e / 8 (q4_0, code + 8 as ggml stores it), then from word
//   value_words(n) the scales, block b in the low (b even) or high half of word b / 2.
// ggml's own block_q4_0 keeps elements j and j + 16 in one byte; the codes are the same
// values, laid out so that 8 consecutive elements are one 32-bit load.
//
// The device quantizes exactly as this code does (shaders/common/quant.glsl), so caches
// appended on either backend hold the same bytes. One deviation from ggml, on both: a
// block whose scale would be subnormal in f32 (largest |x| below about 1.5e-36) gets scale
// 0 and codes 0, because GPUs may flush subnormals.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

#include "common/half.hpp"
#include "common/shape_math.hpp"
#include "vkattn/types.hpp"

namespace vkattn::detail {

// Largest |x| (q8_0) or the signed value of largest |x|, the first one on ties (q4_0), of
// 32 values; the scale d ggml derives from it, or 0 when d would be subnormal (q4_0: 0 with
// d's sign, so that a block of zeros stores -0.0 = 0 / -8, byte for byte as ggml does). An
// infinite value gives an infinite scale, as in ggml and on the device (outside the
// contract: values must be finite; the block then reads back NaN, not zeros).
inline float q8_0_scale(std::span<const float, kQuantBlock> x) {
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.0f;
  return std::fpclassify(d) == FP_SUBNORMAL ? 0.0f : d;
}
inline float q4_0_scale(std::span<const float, kQuantBlock> x) {
  float amax = 0.0f, max = 0.0f;
  for (float v : x) {
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0f;
  return std::fpclassify(d) == FP_SUBNORMAL ? std::copysign(0.0f, d) : d;
}

// Quantizes one block into |codes| (8 words for q8_0, 4 for q4_0) and returns the f16 bits
// of its scale. Codes round as ggml does: q8_0 half away from zero (roundf), q4_0 by
// truncating x / d + 8.5. A NaN (outside the contract) gets code 0 and leaves its
// neighbours' codes alone, as on the device.
inline std::uint16_t quantize_block(DType dtype, std::span<const float, kQuantBlock> x, std::uint32_t* codes) {
  const float d = dtype == DType::q8_0 ? q8_0_scale(x) : q4_0_scale(x);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (dtype == DType::q8_0) {
    for (std::size_t w = 0; w < 8; ++w) codes[w] = 0;
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
      const float r = std::round(x[i] * id);
      const auto q = std::isnan(r) ? 0 : static_cast<std::int32_t>(r);
      codes[i / 4] |= (static_cast<std::uint32_t>(q) & 0xffu) << (8 * (i % 4));
    }
  } else {
    for (std::size_t w = 0; w < 4; ++w) codes[w] = 0;
    for (std::size_t i = 0; i < kQuantBlock; ++i) {
      const float shifted = x[i] * id + 8.5f;
      const auto q = std::isnan(shifted) ? 0u : static_cast<std::uint32_t>(std::min(15, static_cast<int>(shifted)));
      codes[i / 8] |= q << (4 * (i % 8));
    }
  }
  return float_to_half(d);
}

// Element |e| of a quantized tensor held as |words| of |n| elements.
inline float dequantize(DType dtype, std::span<const std::uint32_t> words, std::size_t n, std::size_t e) {
  const std::size_t b = e / kQuantBlock;
  const float d = half_to_float(get_half(words, 2 * value_words(n, dtype) + b));
  if (dtype == DType::q8_0) {
    const auto q = static_cast<std::int8_t>((words[e / 4] >> (8 * (e % 4))) & 0xffu);
    return static_cast<float>(q) * d;
  }
  const auto q = static_cast<int>((words[e / 8] >> (4 * (e % 8))) & 0xfu);
  return static_cast<float>(q - 8) * d;
}

// Quantizes block |b| of |x| into |words| (a tensor of |n| elements), leaving every other
// block as it is.
inline void store_block(DType dtype, std::span<const float, kQuantBlock> x, std::span<std::uint32_t> words, std::size_t n,
                        std::size_t b) {
  const std::size_t per_block = dtype == DType::q8_0 ? 8 : 4;
  set_half(words, 2 * value_words(n, dtype) + b, quantize_block(dtype, x, &words[b * per_block]));
}

}  // namespace vkattn::detail
