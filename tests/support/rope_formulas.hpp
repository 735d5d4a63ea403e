// RoPE frequency tables written out from the published formulas (transformers'
// modeling_rope_utils), in double, without calling the library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

namespace vkattn::test {

inline std::vector<double> plain(double base, std::size_t d) {
  std::vector<double> t(d / 2);
  for (std::size_t i = 0; i < d / 2; ++i) t[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return t;
}

// YaRN as transformers' _compute_yarn_parameters computes it.
inline std::vector<double> yarn(double base, double d, double factor, double original, double beta_fast, double beta_slow,
                                bool truncate = true) {
  auto correction_dim = [&](double rotations) {
    return d * std::log(original / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, d - 1);
  if (low == high) high += 0.001;
  std::vector<double> t(static_cast<std::size_t>(d) / 2);
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double pos_freq = std::pow(base, 2.0 * static_cast<double>(i) / d);
    const double extrapolation = 1.0 / pos_freq, interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1.0 - ramp;
    t[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return t;
}

}  // namespace vkattn::test
