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

// M-RoPE: which of a token's three positions (0 t, 1 h, 2 w) rotary pair |pair| takes;
// rope.comp has its twin.
inline std::size_t mrope_section(const MRope& m, std::size_t pair) {
  if (m.layout == MRopeLayout::contiguous) return pair < m.sections[0] ? 0 : pair < m.sections[0] + m.sections[1] ? 1 : 2;
  if (pair % 3 == 1 && pair < 3 * std::size_t{m.sections[1]}) return 1;
  if (pair % 3 == 2 && pair < 3 * std::size_t{m.sections[2]}) return 2;
  return 0;
}

// Whether a call's frequency table depends on its positions: dynamic NTK scaling without a
// sequence length takes the largest position of the call (1 + it) as the length.
inline bool table_follows_positions(const RopeConfig& c) {
  return c.scaling == RopeScaling::dynamic_ntk && c.sequence_length == 0;
}

// |config| must be checked (check_rope_config) with rotary_dim resolved.
RopeTable rope_table(const RopeConfig& config, std::int32_t max_position);

// Each theta as turns per token (theta / 2pi) in 64-bit fixed point, keeping only the
// fraction of a turn: pos * turns mod 2^64 is then exact for any position.
std::vector<std::uint64_t> rope_turns_fixed(const std::vector<long double>& theta);

// What the kernels read: the turns as (lo, hi) 32-bit words, and the attention factor.
// Remembered per thread for the last few configurations, because a model records the same
// RoPE on every layer and the long double table is most of what recording one costs.
struct RopeTurns {
  std::vector<std::uint32_t> words;
  double attention_factor = 1.0;
};
const RopeTurns& rope_turn_words(const RopeConfig& config, std::int32_t max_position);

}  // namespace vkattn::detail
