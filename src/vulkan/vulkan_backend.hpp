#pragma once

#include <memory>

#include "vkattn/backend.hpp"

namespace vkattn::detail {

std::unique_ptr<Backend> make_vulkan_backend(const DeviceOptions& options);

struct Context;
// A backend on a context made elsewhere (external.cpp: the caller's device).
std::unique_ptr<Backend> make_vulkan_backend(std::shared_ptr<Context> ctx);
// Fills the context's options, limits, kernel family and memory path from its physical
// device and |options|; before its device is made.
void plan_context(Context& ctx, const DeviceOptions& options);
// The kernel family |options| asks for (DeviceOptions::kernels, else $VKATTN_KERNELS);
// InvalidArgument naming |op| for a value the variable cannot take.
KernelShape kernels_asked(const DeviceOptions& options, const char* op);
// The context of a Vulkan backend; null for a backend of another kind.
std::shared_ptr<Context> context_of(Backend& backend);

}  // namespace vkattn::detail
