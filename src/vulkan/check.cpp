#include "vulkan/check.hpp"

#include <string>

namespace vkattn::detail {

const char* vk_result_name(VkResult result) {
  switch (result) {
#define VKATTN_CASE(r) \
  case r: return #r;
    VKATTN_CASE(VK_SUCCESS)
    VKATTN_CASE(VK_NOT_READY)
    VKATTN_CASE(VK_TIMEOUT)
    VKATTN_CASE(VK_INCOMPLETE)
    VKATTN_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    VKATTN_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    VKATTN_CASE(VK_ERROR_INITIALIZATION_FAILED)
    VKATTN_CASE(VK_ERROR_DEVICE_LOST)
    VKATTN_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    VKATTN_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    VKATTN_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    VKATTN_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    VKATTN_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    VKATTN_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    VKATTN_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    VKATTN_CASE(VK_ERROR_FRAGMENTED_POOL)
    VKATTN_CASE(VK_ERROR_UNKNOWN)
    VKATTN_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    VKATTN_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    VKATTN_CASE(VK_ERROR_FRAGMENTATION)
    VKATTN_CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef VKATTN_CASE
    default: return "VkResult(unknown)";
  }
}

void throw_vk_error(VkResult result, const char* call, const char* file, int line) {
  ErrorCode code = ErrorCode::vulkan_call_failed;
  if (result == VK_ERROR_DEVICE_LOST) code = ErrorCode::device_lost;
  // Too many objects, a fragmented heap or pool: the driver cannot hold more, as with
  // memory (docs/reliability.md: out_of_memory leaves the backend usable).
  if (result == VK_ERROR_OUT_OF_HOST_MEMORY || result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_TOO_MANY_OBJECTS ||
      result == VK_ERROR_FRAGMENTATION || result == VK_ERROR_FRAGMENTED_POOL || result == VK_ERROR_OUT_OF_POOL_MEMORY) {
    code = ErrorCode::out_of_memory;
  }
  std::string where = file;
  const auto slash = where.find_last_of('/');
  if (slash != std::string::npos) where = where.substr(slash + 1);
  throw Error(code, std::string(vk_result_name(result)) + " at " + where + ":" + std::to_string(line), call,
              static_cast<int>(result), current_op());
}

}  // namespace vkattn::detail
