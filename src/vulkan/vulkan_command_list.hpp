// The Vulkan CommandListImpl: ops append Dispatches; the first submit encodes them into
// one command buffer (descriptor sets from a pool of its own, barriers only on hazards,
// optional timestamps), and later submits reuse it until more ops are recorded.
#pragma once

#include <memory>

#include "common/command_list_impl.hpp"
#include "vulkan/context.hpp"

namespace vkattn::detail {

std::unique_ptr<CommandListImpl> make_vulkan_command_list(std::shared_ptr<Context> ctx, const CommandListOptions& options);

// Splits |groups| workgroups into x/y/z counts within maxComputeWorkGroupCount; shaders
// rebuild the linear id with wg_linear_id() (shaders/common/layout.glsl).
std::array<std::uint32_t, 3> fold_grid(std::uint64_t groups, const DeviceLimits& limits);

}  // namespace vkattn::detail
