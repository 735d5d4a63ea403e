#include "vulkan/faults.hpp"

#include <mutex>

namespace vkattn::detail {

namespace faults {
std::atomic<bool> any_armed{false};
}

namespace {
struct Armed {
  VkResult result = VK_SUCCESS;
  int skip = 0;
};
std::mutex mutex;
Armed armed[static_cast<int>(FaultSite::count)];
}  // namespace

void inject_fault(FaultSite site, VkResult result, int skip) {
  std::lock_guard lock(mutex);
  armed[static_cast<int>(site)] = {result, skip};
  bool any = false;
  for (const Armed& a : armed) any = any || a.result != VK_SUCCESS;
  faults::any_armed.store(any);
}

VkResult take_armed_fault(FaultSite site) {
  std::lock_guard lock(mutex);
  Armed& a = armed[static_cast<int>(site)];
  if (a.result == VK_SUCCESS) return VK_SUCCESS;
  if (a.skip > 0) {
    --a.skip;
    return VK_SUCCESS;
  }
  const VkResult r = a.result;
  a.result = VK_SUCCESS;
  return r;
}

}  // namespace vkattn::detail
