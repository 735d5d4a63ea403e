// Element counts and storage sizes shared by both backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vkattn/types.hpp"

namespace vkattn::detail {

constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// A count for a 32-bit shader parameter; callers have checked that it fits.
constexpr std::uint32_t u32(std::uint64_t v) { return static_cast<std::uint32_t>(v); }

inline std::size_t numel(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

// q8_0 and q4_0 quantize blocks of this many values along a row, one f16 scale each
// (src/common/quant.hpp; VKATTN_QUANT_BLOCK in the shaders).
constexpr std::size_t kQuantBlock = 32;
inline bool is_quantized(DType d) { return d == DType::q8_0 || d == DType::q4_0; }
// What K and V (tensors and caches) may hold.
inline bool is_kv_dtype(DType d) { return d == DType::f32 || d == DType::f16 || is_quantized(d); }

// The words holding |numel| values of |dtype| without a quantized tensor's scales: f16
// packs two values per word, low half first; q8_0 and q4_0 keep codes, 4 or 8 per word.
// A tensor's rows and blocks of rows are whole words (f16 rows are even, quantized ones
// whole blocks), so this also gives a row's offset.
inline std::size_t value_words(std::size_t numel, DType dtype) {
  switch (dtype) {
    case DType::f16: return (numel + 1) / 2;
    case DType::q8_0: return numel / 4;
    case DType::q4_0: return numel / 8;
    default: return numel;
  }
}
// A quantized tensor's scales follow its codes, one half per block, two per word.
inline std::size_t scale_words(std::size_t numel, DType dtype) { return is_quantized(dtype) ? (numel / kQuantBlock + 1) / 2 : 0; }
inline std::size_t storage_words(std::size_t numel, DType dtype) { return value_words(numel, dtype) + scale_words(numel, dtype); }
// Where a quantized tensor's scales start, in words (0 for the other types).
inline std::size_t scale_words_offset(std::size_t numel, DType dtype) {
  return is_quantized(dtype) ? value_words(numel, dtype) : 0;
}

// Half |i| of |words| packed two 16-bit halves a word, low half first (f16 values and
// quantized scales), and setting it, leaving the other half as it is.
inline std::uint16_t get_half(std::span<const std::uint32_t> words, std::size_t i) {
  return static_cast<std::uint16_t>(words[i / 2] >> (16 * (i % 2)));
}
inline void set_half(std::span<std::uint32_t> words, std::size_t i, std::uint16_t bits) {
  const unsigned shift = 16 * (i % 2);
  words[i / 2] = (words[i / 2] & ~(0xffffu << shift)) | (std::uint32_t{bits} << shift);
}

}  // namespace vkattn::detail
