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

// f16 packs two values per word, low half first.
inline std::size_t storage_words(std::size_t numel, DType dtype) {
  return dtype == DType::f16 ? (numel + 1) / 2 : numel;
}

}  // namespace vkattn::detail
