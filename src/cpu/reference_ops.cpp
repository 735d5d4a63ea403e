#include "cpu/reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/rope_math.hpp"

namespace vkattn::ref {

void rope(std::span<float> x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim,
          std::span<const std::int32_t> positions, const RopeConfig& config) {
  const std::size_t d = config.rotary_dim;
  std::int32_t max_position = 0;
  for (std::int32_t p : positions) max_position = std::max(max_position, p);
  const detail::RopeTable table = detail::rope_table(config, max_position);
  const std::vector<long double>& theta = table.theta;
  const long double f = table.attention_factor;

  for (std::size_t t = 0; t < n_tokens; ++t) {
    const long double m = positions[t];
    for (std::size_t h = 0; h < n_heads; ++h) {
      float* row = x.data() + (t * n_heads + h) * head_dim;
      for (std::size_t i = 0; i < d / 2; ++i) {
        // 1. Which two elements form pair i.
        const std::size_t a = config.layout == RopeLayout::interleaved ? 2 * i : i;
        const std::size_t b = config.layout == RopeLayout::interleaved ? 2 * i + 1 : i + d / 2;
        // 2. Rotate them by m * theta_i (long double keeps the angle exact to ~1e-10 rad
        //    even at m near 2^31; sinl/cosl reduce the range correctly).
        const long double angle = m * theta[i];
        const long double c = std::cos(angle), s = std::sin(angle);
        const long double xa = row[a], xb = row[b];
        row[a] = static_cast<float>((xa * c - xb * s) * f);
        row[b] = static_cast<float>((xa * s + xb * c) * f);
      }
    }
  }
}

}  // namespace vkattn::ref
