// IEEE binary16 <-> binary32 on the host, round to nearest even, with subnormals,
// infinities and NaN. Matches packHalf2x16/unpackHalf2x16 on devices that round to
// nearest (the Vulkan spec leaves the rounding of packHalf2x16 to the implementation).
#pragma once

#include <bit>
#include <cstdint>

namespace vkattn::detail {

inline std::uint16_t float_to_half(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  const std::uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (abs < 0x38800000u) {                                           // below the smallest normal half: subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to 0
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - (abs >> 23);  // 14 + (113 - exp)
    const std::uint32_t half_ulp = 1u << (shift - 1);
    std::uint32_t h = mant >> shift;
    const std::uint32_t rest = mant & ((1u << shift) - 1u);
    if (rest > half_ulp || (rest == half_ulp && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  const std::uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t f;
  if (exp == 0x1fu) {
    f = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    f = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    f = sign;
  } else {  // subnormal: normalize
    std::uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    f = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(f);
}

}  // namespace vkattn::detail
