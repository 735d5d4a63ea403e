// Element counts and storage sizes shared by both backends.
#pragma once

#include <cstddef>
#include <cstdint>

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

// f16 packs two values per word, low half first; q8_0 and q4_0 keep codes, 4 or 8 per
// word, then one f16 scale per block of 32, two per word (src/common/quant.hpp).
inline std::size_t storage_words(std::size_t numel, DType dtype) {
  switch (dtype) {
    case DType::f16: return (numel + 1) / 2;
    case DType::q8_0: return numel / 4 + (numel / 32 + 1) / 2;
    case DType::q4_0: return numel / 8 + (numel / 32 + 1) / 2;
    default: return numel;
  }
}

// Where a quantized tensor's scales start, in words (0 for the other types).
inline std::size_t scale_words_offset(std::size_t numel, DType dtype) {
  return dtype == DType::q8_0 ? numel / 4 : dtype == DType::q4_0 ? numel / 8 : 0;
}

}  // namespace vkattn::detail
