// Test-only fault injection, internal (not in the public headers): a chosen call at a site
// fails with a chosen VkResult, so that tests can drive the error paths a real driver
// takes rarely (out of memory, device lost, a submission that times out) and check the
// ErrorCode, that nothing leaks and that nothing hangs. Unarmed, a site costs one relaxed
// atomic load.
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

// Arms |site|: after |skip| more calls pass, the next one (on any thread) gets |result|.
// VK_SUCCESS disarms it.
void inject_fault(FaultSite site, VkResult result, int skip = 0);

// The armed fault of |site| if this call is the one (disarming it), else VK_SUCCESS.
VkResult take_armed_fault(FaultSite site);
namespace faults {
extern std::atomic<bool> any_armed;
}
inline VkResult take_fault(FaultSite site) {
  return faults::any_armed.load(std::memory_order_relaxed) ? take_armed_fault(site) : VK_SUCCESS;
}

}  // namespace vkattn::detail
