// RoPE frequencies, computed once per op on the host in long double and shared by both
// backends: the scaling variants live here once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "vkattn/types.hpp"

namespace vkattn::detail {

struct RopeTable {
  std::vector<long double> theta;  // radians per token, one per pair
  long double attention_factor = 1.0L;
};

// |config| must be checked (check_rope_config) with rotary_dim resolved.
RopeTable rope_table(const RopeConfig& config, std::int32_t max_position);

// Each theta as turns per token (theta / 2pi) in 64-bit fixed point, keeping only the
// fraction of a turn: pos * turns mod 2^64 is then exact for any position.
std::vector<std::uint64_t> rope_turns_fixed(const std::vector<long double>& theta);

}  // namespace vkattn::detail
