// Sanitizer builds only. The Vulkan loader dlclose()s the driver and the layers when the
// last instance goes. lavapipe and the validation layer keep process-lifetime allocations
// in their globals, which LeakSanitizer then reports as leaks from "<unknown module>" that
// no suppression can name. Pinning them with RTLD_NODELETE keeps those allocations
// reachable, so what LeakSanitizer reports is ours. A library that is not installed is
// simply not pinned.
#include <dlfcn.h>

#include <initializer_list>

namespace {
struct KeepVulkanLibrariesLoaded {
  KeepVulkanLibrariesLoaded() {
    for (const char* lib : {"libvulkan_lvp.so", "libVkLayer_khronos_validation.so"}) {
      dlopen(lib, RTLD_NOW | RTLD_NODELETE);
    }
  }
} keep_loaded;
}  // namespace
