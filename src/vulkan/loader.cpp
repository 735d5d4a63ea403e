#include "vulkan/loader.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "vulkan/check.hpp"

#if defined(VKATTN_LINK_VULKAN)
// VK_NO_PROTOTYPES hides the linked loader's declaration.
extern "C" VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vkGetInstanceProcAddr(VkInstance instance, const char* name);
#elif defined(_WIN32)
#include <windows.h>
#else
#include <dlfcn.h>
#endif

namespace vkattn::detail {

#if defined(VKATTN_LINK_VULKAN)

PFN_vkGetInstanceProcAddr loader_get_instance_proc_addr() { return &::vkGetInstanceProcAddr; }

#else

namespace {

std::vector<std::string> library_names() {
  if (const char* name = std::getenv("VKATTN_VULKAN_LIBRARY"); name && *name) return {name};
#if defined(_WIN32)
  return {"vulkan-1.dll"};
#elif defined(__APPLE__)
  return {"libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib"};
#else
  return {"libvulkan.so.1", "libvulkan.so"};  // Android ships the unversioned name
#endif
}

// The library's vkGetInstanceProcAddr, or null with |why| set.
PFN_vkGetInstanceProcAddr open_library(const std::string& name, std::string& why) {
#if defined(_WIN32)
  HMODULE lib = LoadLibraryA(name.c_str());
  if (!lib) {
    why = "LoadLibrary error " + std::to_string(GetLastError());
    return nullptr;
  }
  auto* get =
      reinterpret_cast<PFN_vkGetInstanceProcAddr>(reinterpret_cast<void (*)()>(GetProcAddress(lib, "vkGetInstanceProcAddr")));
#else
  void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return nullptr;
  }
  auto* get = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
#endif
  if (!get) why = "it has no vkGetInstanceProcAddr";
  return get;  // the library stays loaded either way
}

}  // namespace

PFN_vkGetInstanceProcAddr loader_get_instance_proc_addr() {
  static std::mutex mutex;
  static std::map<std::string, PFN_vkGetInstanceProcAddr> loaded;  // by name, never unloaded
  const std::vector<std::string> names = library_names();
  std::lock_guard lock(mutex);
  std::string tried;
  for (const std::string& name : names) {
    if (auto it = loaded.find(name); it != loaded.end()) return it->second;
    std::string why;
    if (PFN_vkGetInstanceProcAddr get = open_library(name, why)) return loaded[name] = get;
    tried += (tried.empty() ? "" : "; ") + name + " (" + why + ")";
  }
  throw Error(ErrorCode::unsupported,
              "the Vulkan loader could not be loaded: " + tried +
                  ". Install it (Debian: libvulkan1; Windows: a GPU driver or the Vulkan runtime) or name it "
                  "in $VKATTN_VULKAN_LIBRARY",
              "vkGetInstanceProcAddr", 0, current_op());
}

#endif

}  // namespace vkattn::detail
