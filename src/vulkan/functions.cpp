#include "vulkan/functions.hpp"

#include <string>

#include "vulkan/check.hpp"
#include "vulkan/loader.hpp"

namespace vkattn::detail {

namespace {

[[noreturn]] void missing(ErrorCode code, const char* name, const char* from) {
  throw Error(code, std::string(name) + " is not available from " + from, from, 0, current_op());
}

// |name| from |get| (vkGetInstanceProcAddr or vkGetDeviceProcAddr) for |handle|; a missing
// one is Error(unsupported) when |required|, else null.
template <class Fn, class Get, class Handle>
void load(Fn& out, Get get, Handle handle, const char* name, const char* from, bool required) {
  out = reinterpret_cast<Fn>(get(handle, name));
  if (!out && required) missing(ErrorCode::unsupported, name, from);
}

}  // namespace

VulkanFunctions VulkanFunctions::global(PFN_vkGetInstanceProcAddr get_instance_proc_addr) {
  VulkanFunctions f;
  // The one command taken from the loader: everything else is loaded through it.
  f.vkGetInstanceProcAddr = get_instance_proc_addr ? get_instance_proc_addr : loader_get_instance_proc_addr();
  // vkEnumerateInstanceVersion is 1.1; a 1.0 loader lacks it, which instance creation reports.
  const VkInstance none = VK_NULL_HANDLE;
#define VKATTN_VK_LOAD(name) load(f.name, f.vkGetInstanceProcAddr, none, #name, "vkGetInstanceProcAddr", false);
  VKATTN_VK_GLOBAL(VKATTN_VK_LOAD)
#undef VKATTN_VK_LOAD
  if (!f.vkCreateInstance) missing(ErrorCode::no_device, "vkCreateInstance", "vkGetInstanceProcAddr");
  return f;
}

VulkanFunctions VulkanFunctions::with_instance(VkInstance instance) const {
  VulkanFunctions f = *this;
#define VKATTN_VK_LOAD(name) load(f.name, f.vkGetInstanceProcAddr, instance, #name, "vkGetInstanceProcAddr", true);
  VKATTN_VK_INSTANCE(VKATTN_VK_LOAD)
#undef VKATTN_VK_LOAD
#define VKATTN_VK_LOAD(name) load(f.name, f.vkGetInstanceProcAddr, instance, #name, "vkGetInstanceProcAddr", false);
  VKATTN_VK_INSTANCE_OPTIONAL(VKATTN_VK_LOAD)
  VKATTN_VK_LOAD(vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)
  VKATTN_VK_LOAD(vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV)
#undef VKATTN_VK_LOAD
  return f;
}

VulkanFunctions VulkanFunctions::with_device(VkDevice device) const {
  VulkanFunctions f = *this;
#define VKATTN_VK_LOAD(name) load(f.name, f.vkGetDeviceProcAddr, device, #name, "vkGetDeviceProcAddr", true);
  VKATTN_VK_DEVICE(VKATTN_VK_LOAD)
#undef VKATTN_VK_LOAD
#define VKATTN_VK_LOAD(name) load(f.name, f.vkGetDeviceProcAddr, device, #name, "vkGetDeviceProcAddr", false);
  VKATTN_VK_DEVICE_OPTIONAL(VKATTN_VK_LOAD)
#undef VKATTN_VK_LOAD
  return f;
}

}  // namespace vkattn::detail
