#include "common/rope_math.hpp"

#include <cmath>

namespace vkattn::detail {

long double rope_theta(const RopeConfig& config, std::size_t i) {
  const long double d = static_cast<long double>(config.rotary_dim);
  return std::pow(static_cast<long double>(config.base), -2.0L * static_cast<long double>(i) / d);
}

std::vector<std::uint64_t> rope_turns_fixed(const RopeConfig& config) {
  const long double two_pi = 6.283185307179586476925286766559005768L;
  std::vector<std::uint64_t> out(config.rotary_dim / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    long double turns = rope_theta(config, i) / two_pi;
    turns -= std::floor(turns);  // whole turns per token do not change the angle
    const long double fixed = std::round(std::ldexp(turns, 64));
    // A fraction within half an ulp of 1 rounds to 2^64, which is a whole turn: 0.
    out[i] = fixed >= 18446744073709551616.0L ? 0 : static_cast<std::uint64_t>(fixed);
  }
  return out;
}

}  // namespace vkattn::detail
