// Host side of RoPE: the frequency table (64-bit fixed-point turns per token, built on the
// host in long double; see shaders/common/rope_phase.glsl), the positions, and a tile
// size that keeps whole rows in shared memory.
#include <algorithm>

#include "common/rope_math.hpp"
#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

Dispatch rope_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> x,
                       std::span<const std::int32_t> positions, const RopeConfig& config) {
  static_assert(sizeof(shader::RopeParams) == 24);
  const auto n_heads = static_cast<std::uint32_t>(x->shape[1]);
  const auto head_dim = static_cast<std::uint32_t>(x->shape[2]);
  const std::uint64_t n_rows = std::uint64_t{x->shape[0]} * n_heads;

  // 2048 floats (8 KiB) fits the 16 KiB minimum; kMaxHeadDim guarantees one row fits.
  const std::uint32_t row_floats = std::min<std::uint32_t>(2048, ctx.limits.max_shared_memory / 4);
  const std::uint32_t wg = std::min<std::uint32_t>(128, ctx.limits.max_workgroup_invocations);
  // About four elements per invocation: enough work to amortize the two barriers, and
  // enough workgroups to fill a GPU at decode sizes.
  const std::uint32_t rows_per_wg = std::max(1u, std::min(row_floats / head_dim, 4 * wg / head_dim));

  const std::vector<std::uint64_t> turns = rope_turns_fixed(config);
  std::vector<std::uint32_t> turn_words;
  for (std::uint64_t t : turns) {
    turn_words.push_back(static_cast<std::uint32_t>(t));
    turn_words.push_back(static_cast<std::uint32_t>(t >> 32));
  }
  std::vector<std::uint32_t> pos_words(positions.begin(), positions.end());

  Dispatch d;
  d.op = "rope";
  const KernelId kernel = x->dtype == DType::f16 ? KernelId::rope_f16 : KernelId::rope_f32;
  d.key = {kernel, 3, sizeof(shader::RopeParams), {wg, row_floats}};
  d.bindings = {{std::move(x), 0, 0, true}, params.add(pos_words), params.add(turn_words)};
  d.set_push(shader::RopeParams{static_cast<std::uint32_t>(n_rows), n_heads, head_dim,
                                static_cast<std::uint32_t>(config.rotary_dim), rows_per_wg,
                                config.layout == RopeLayout::interleaved ? 1u : 0u});
  d.groups = ceil_div(n_rows, rows_per_wg);
  return d;
}

}  // namespace vkattn::detail
