// Test-only fault injection, internal (not in the public headers): the next call at a
// site fails with a chosen VkResult, so that tests can drive the error paths a real
// driver takes rarely (out of memory, device lost, a submission that times out) and check
// the ErrorCode, that nothing leaks and that nothing hangs. Unarmed, a site costs one
// relaxed atomic load.
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>

namespace vkattn::detail {

enum class FaultSite {
  allocate_memory,  // vkAllocateMemory: not called; the result is the fault's
  queue_submit,     // vkQueueSubmit: not called
  fence_wait,       // vkWaitForFences: called, then its result replaced (so that nothing
                    // is freed while the work still runs)
  count,
};

// Arms |site| for its next call, on any thread; VK_SUCCESS disarms it.
void inject_fault(FaultSite site, VkResult result);

namespace faults {
extern std::atomic<int> armed[static_cast<int>(FaultSite::count)];
}

// The armed fault of |site| (disarming it), else VK_SUCCESS.
inline VkResult take_fault(FaultSite site) {
  auto& a = faults::armed[static_cast<int>(site)];
  if (a.load(std::memory_order_relaxed) == VK_SUCCESS) return VK_SUCCESS;
  return static_cast<VkResult>(a.exchange(VK_SUCCESS));
}

}  // namespace vkattn::detail
