#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

Dispatch copy_dispatch(const Context& ctx, std::shared_ptr<TensorImpl> src, std::shared_ptr<TensorImpl> dst) {
  static_assert(sizeof(shader::CopyParams) == 4);
  const std::uint32_t wg = std::min<std::uint32_t>(128, ctx.limits.max_workgroup_invocations);
  const auto n_vec4 = static_cast<std::uint32_t>(ceil_div(src->words, 4));
  Dispatch d;
  d.op = "copy";
  d.key = {KernelId::copy_u32, 2, sizeof(shader::CopyParams), {wg}};
  d.bindings = {{std::move(src), 0, 0, false}, {std::move(dst), 0, 0, true}};
  d.set_push(shader::CopyParams{n_vec4});
  d.groups = ceil_div(n_vec4, wg);
  return d;
}

}  // namespace vkattn::detail
