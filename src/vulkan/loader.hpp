// The Vulkan loader, found at run time (as volk does): only vkGetInstanceProcAddr is taken
// from it, so neither an import library nor the Vulkan SDK is needed to build vkattn, and
// a machine without a loader can still use the CPU backend.
#pragma once

#include <vulkan/vulkan.h>

namespace vkattn::detail {

// vkGetInstanceProcAddr of the loader: $VKATTN_VULKAN_LIBRARY when set, else the
// platform's name (vulkan-1.dll; libvulkan.so.1 or libvulkan.so; libvulkan.1.dylib,
// libvulkan.dylib or libMoltenVK.dylib). A library once loaded stays loaded for the life
// of the process (drivers keep state in it; see instance.cpp). Error(unsupported) naming
// the libraries tried when none loads or one lacks the command. Built with
// VKATTN_LINK_VULKAN, the linked loader's instead.
PFN_vkGetInstanceProcAddr loader_get_instance_proc_addr();

}  // namespace vkattn::detail
