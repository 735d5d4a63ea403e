#include "common/shape_math.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::detail {

Dispatch copy_dispatch(const Context& ctx, std::shared_ptr<TensorImpl> src, std::shared_ptr<TensorImpl> dst,
                       std::uint64_t src_word, std::uint64_t dst_word, std::uint64_t words) {
  static_assert(sizeof(shader::CopyParams) == 12);
  const std::uint32_t wg = workgroup_size(ctx, 128);
  // Whole 16-byte units when every range is aligned to them (always for whole tensors,
  // whose buffers are padded to 16 bytes), else words.
  const bool vec4 = src_word % 4 == 0 && dst_word % 4 == 0 && words % 4 == 0;
  const std::uint64_t unit = vec4 ? 4 : 1;
  const bool texel = has_texel_view(*src);
  Dispatch d;
  d.op = "copy";
  d.key = {texel ? KernelId::copy_u32_texel : KernelId::copy_u32,
           spec({{VKATTN_SPEC_WG_SIZE, wg}, {VKATTN_SPEC_COPY_VEC4, vec4 ? 1u : 0u}, {VKATTN_SPEC_COPY_HALVES, 0u}})};
  const auto count = static_cast<std::uint32_t>(words / unit);
  d.bindings = {read_binding(std::move(src), texel), write_binding(std::move(dst))};
  d.set_push(shader::CopyParams{.count = count,
                                .src_offset = static_cast<std::uint32_t>(src_word / unit),
                                .dst_offset = static_cast<std::uint32_t>(dst_word / unit)});
  d.groups = ceil_div(count, wg);
  return d;
}

Dispatch copy_halves_dispatch(const Context& ctx, const std::shared_ptr<TensorImpl>& t, std::uint64_t src_half,
                              std::uint64_t dst_half, std::uint64_t halves) {
  const std::uint32_t wg = workgroup_size(ctx, 128);
  const bool texel = has_texel_view(*t);
  Dispatch d;
  d.op = "copy";
  d.key = {texel ? KernelId::copy_u32_texel : KernelId::copy_u32,
           spec({{VKATTN_SPEC_WG_SIZE, wg}, {VKATTN_SPEC_COPY_VEC4, 0u}, {VKATTN_SPEC_COPY_HALVES, 1u}})};
  const auto count = static_cast<std::uint32_t>(halves);
  d.bindings = {read_binding(t, texel), write_binding(t)};  // the kernel reads binding 1 (copy.comp)
  d.set_push(shader::CopyParams{
      .count = count, .src_offset = static_cast<std::uint32_t>(src_half), .dst_offset = static_cast<std::uint32_t>(dst_half)});
  d.groups = ceil_div(count, wg);
  return d;
}

Dispatches build(OpEnv& env, const CopyCall& call) {
  const std::uint64_t words = ceil_div(call.src->words, 4) * 4;  // buffers are padded to 16 bytes
  return one(copy_dispatch(env.ctx, call.src, call.dst, 0, 0, words));
}

}  // namespace vkattn::detail
