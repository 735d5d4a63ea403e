// Linked into every test program. The Vulkan loader dlclose()s the driver and the layers
// when the last instance goes, and loads them again with the next: a test program makes
// and drops many backends, and each reload of lavapipe (with LLVM) and the validation
// layer cost about 40 ms of relocations and static setup (the whole warm suite: a tenth
// of the test programs' CPU time, docs/ci-runs.md). Pinning them with RTLD_NODELETE loads
// each once per process, as an engine that keeps an instance alive would. Under the
// sanitizers it also keeps their process-lifetime allocations reachable, which
// LeakSanitizer would otherwise report as leaks from "<unknown module>" that no
// suppression can name. A library that is not installed is simply not pinned.
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
