// RoPE on one tensor of |shape| holding |x| (as |dtype|), recorded, run and read back: the
// rope tests' common step. |stats|, when given, gets the list's CommandStats.
#pragma once

#include <cstdint>
#include <vector>

#include "support/api.hpp"

namespace vkattn::test {

inline std::vector<float> apply_rope(Backend& b, const Shape& shape, const std::vector<float>& x,
                                     const std::vector<std::int32_t>& positions, const RopeConfig& config,
                                     DType dtype = DType::f32, CommandStats* stats = nullptr) {
  Tensor t = b.tensor(shape, dtype);
  b.upload(t, x);
  CommandList cmd = b.commands();
  cmd.rope(t, positions, config);
  cmd.submit_and_wait();
  if (stats) *stats = cmd.stats();
  return b.download(t);
}

}  // namespace vkattn::test
