#include "vulkan/faults.hpp"

namespace vkattn::detail {

namespace faults {
std::atomic<int> armed[static_cast<int>(FaultSite::count)] = {};
}

void inject_fault(FaultSite site, VkResult result) { faults::armed[static_cast<int>(site)].store(result); }

}  // namespace vkattn::detail
