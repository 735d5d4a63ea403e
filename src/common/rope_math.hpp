// RoPE frequencies, computed once per config on the host and shared by both backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vkattn/types.hpp"

namespace vkattn::detail {

// theta_i = base^(-2i/d) for pair i of rotary dimension d, in long double.
long double rope_theta(const RopeConfig& config, std::size_t i);

// Each theta_i as turns per token (theta_i / 2pi) in 64-bit fixed point: only the
// fraction of a turn matters, and pos * turns mod 2^64 is then exact for any position.
std::vector<std::uint64_t> rope_turns_fixed(const RopeConfig& config);

}  // namespace vkattn::detail
