// The reference: plain loops written from the formulas in the README, in long double,
// never from the shaders. Every GPU op is tested against these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "vkattn/types.hpp"

namespace vkattn::ref {

// RoPE in place on x[n_tokens, n_heads, head_dim]; |config| is checked, rotary_dim
// resolved. For pair i with elements (a, b) (interleaved: 2i, 2i+1; half: i, i + d/2) and
// the angle pos * theta_i (theta_i = base^(-2i/d), rescaled as config.scaling says):
//   x'[a] = (x[a] cos - x[b] sin) * attention_factor
//   x'[b] = (x[a] sin + x[b] cos) * attention_factor
void rope(std::span<float> x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim,
          std::span<const std::int32_t> positions, const RopeConfig& config);

}  // namespace vkattn::ref
