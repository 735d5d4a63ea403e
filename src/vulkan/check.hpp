// VKATTN_VK_CHECK wraps every Vulkan call that returns a VkResult: a failure throws
// vkattn::Error carrying the call's text, the VkResult, file:line, and the vkattn op in
// progress (set by an OpScope further up the stack).
#pragma once

#include <vulkan/vulkan.h>

#include "common/op_scope.hpp"
#include "vkattn/error.hpp"

namespace vkattn::detail {

const char* vk_result_name(VkResult result);

// A zeroed Vulkan struct with its sType set.
template <class T>
T vk_struct(VkStructureType type) {
  T value{};
  value.sType = type;
  return value;
}
[[noreturn]] void throw_vk_error(VkResult result, const char* call, const char* file, int line);

}  // namespace vkattn::detail

#define VKATTN_VK_CHECK(call)                                                      \
  do {                                                                             \
    const VkResult vkattn_result_ = (call);                                        \
    if (vkattn_result_ < 0) {                                                      \
      ::vkattn::detail::throw_vk_error(vkattn_result_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

// VKATTN_VK_CHECK for a call that creates |handle|: Vulkan leaves the handle undefined when
// the call fails, and the owner's destructor destroys what it holds, so a failure sets it
// back to VK_NULL_HANDLE before it throws.
#define VKATTN_VK_CREATE(handle, call)                                             \
  do {                                                                             \
    const VkResult vkattn_result_ = (call);                                        \
    if (vkattn_result_ < 0) {                                                      \
      (handle) = VK_NULL_HANDLE;                                                   \
      ::vkattn::detail::throw_vk_error(vkattn_result_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)
