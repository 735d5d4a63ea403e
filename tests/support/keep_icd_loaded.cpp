// Sanitizer builds only. The Vulkan loader dlclose()s the driver when the last instance
// goes; lavapipe keeps process-lifetime allocations in its globals, which LeakSanitizer
// then reports as leaks from "<unknown module>" that no suppression can name. Pinning the
// driver with RTLD_NODELETE keeps those allocations reachable, so what LeakSanitizer
// reports is ours. A driver that is not installed is simply not pinned.
#include <dlfcn.h>

namespace {
struct KeepIcdLoaded {
  KeepIcdLoaded() { dlopen("libvulkan_lvp.so", RTLD_NOW | RTLD_NODELETE); }
} keep_icd_loaded;
}  // namespace
