#include "vulkan/instance.hpp"

#include <cstring>

#include "vulkan/check.hpp"

namespace vkattn::detail {

namespace {
constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

// NVIDIA's Linux driver takes static TLS (libnvidia-tls) each time the loader loads it,
// and glibc does not give all of it back when the loader unloads it with the last
// instance: after about 30 create/destroy cycles in one process, vkCreateInstance fails
// with "cannot allocate memory in static TLS block" (found on an H100, driver 580). One
// bare instance kept for the life of the process keeps every driver loaded, so backends
// may come and go. It is never destroyed: at exit, drivers may already be torn down.
void keep_drivers_loaded(const VulkanFunctions& fn) {
  static const VkInstance anchor = [&fn] {
    auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "vkattn (keeps drivers loaded)";
    app.apiVersion = VK_API_VERSION_1_1;
    auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    info.pApplicationInfo = &app;
    VkInstance instance = VK_NULL_HANDLE;
    // A failure here is reported by the real instance creation that follows.
    if (fn.vkCreateInstance(&info, nullptr, &instance) != VK_SUCCESS) instance = VK_NULL_HANDLE;
    return instance;
  }();
  (void)anchor;
}

bool has_extension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts) {
    if (std::strcmp(e.extensionName, name) == 0) return true;
  }
  return false;
}
}  // namespace

std::unique_ptr<Instance> Instance::create(bool validation, std::shared_ptr<const Logger> log) {
  std::unique_ptr<Instance> self(new Instance());
  self->log_ = std::move(log);
  self->fn_ = VulkanFunctions::global(nullptr);
  const VulkanFunctions& fn = self->fn_;

  std::uint32_t loader_version = VK_API_VERSION_1_0;
  if (!fn.vkEnumerateInstanceVersion || fn.vkEnumerateInstanceVersion(&loader_version) != VK_SUCCESS) {
    loader_version = VK_API_VERSION_1_0;
  }
  if (loader_version < VK_API_VERSION_1_1) {
    throw Error(ErrorCode::no_device, "the Vulkan loader supports only Vulkan 1.0; vkattn needs 1.1",
                "vkEnumerateInstanceVersion", 0, current_op());
  }
  keep_drivers_loaded(fn);
  // The newest of 1.3, 1.2 and 1.1 the loader has, so that a device's feature structs of
  // that version may be queried (and SPIR-V 1.6, attn_mt2's, run on 1.3 devices).
  self->api_version_ = loader_version >= VK_API_VERSION_1_3   ? VK_API_VERSION_1_3
                       : loader_version >= VK_API_VERSION_1_2 ? VK_API_VERSION_1_2
                                                              : VK_API_VERSION_1_1;

  std::uint32_t n = 0;
  VKATTN_VK_CHECK(fn.vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> exts(n);
  VKATTN_VK_CHECK(fn.vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data()));

  std::vector<const char*> extensions;
  std::vector<const char*> layers;
  VkInstanceCreateFlags flags = 0;
  bool has_validation_features = false;
  // MoltenVK devices are only listed to applications that opt into portability.
  if (has_extension(exts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  if (validation) {
    VKATTN_VK_CHECK(fn.vkEnumerateInstanceLayerProperties(&n, nullptr));
    std::vector<VkLayerProperties> props(n);
    VKATTN_VK_CHECK(fn.vkEnumerateInstanceLayerProperties(&n, props.data()));
    bool found = false;
    for (const auto& p : props) {
      if (std::strcmp(p.layerName, kValidationLayer) != 0) continue;
      found = true;
      self->validation_layer_version_ = p.specVersion;
    }
    if (!found) {
      throw Error(ErrorCode::unsupported,
                  "validation requested but VK_LAYER_KHRONOS_validation is not installed "
                  "(Debian package vulkan-validationlayers)",
                  "vkEnumerateInstanceLayerProperties", 0, current_op());
    }
    if (!has_extension(exts, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
      throw Error(ErrorCode::unsupported, "validation requested but VK_EXT_debug_utils is missing",
                  "vkEnumerateInstanceExtensionProperties", 0, current_op());
    }
    layers.push_back(kValidationLayer);
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    VKATTN_VK_CHECK(fn.vkEnumerateInstanceExtensionProperties(kValidationLayer, &n, nullptr));
    std::vector<VkExtensionProperties> layer_exts(n);
    VKATTN_VK_CHECK(fn.vkEnumerateInstanceExtensionProperties(kValidationLayer, &n, layer_exts.data()));
    has_validation_features = has_extension(layer_exts, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    if (has_validation_features) extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
  }

  auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "vkattn";
  app.pEngineName = "vkattn";
  app.apiVersion = self->api_version_;

  auto messenger_info = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  messenger_info.messageSeverity =
      VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_info.pfnUserCallback = &Instance::on_message;
  messenger_info.pUserData = self.get();

  auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  // Synchronization validation checks exactly what the command list's barrier elision
  // decides: a missing barrier between dependent dispatches becomes a reported hazard.
  const VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  auto features = vk_struct<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;
  // Chained so that instance creation and destruction are validated too.
  if (validation) {
    info.pNext = &messenger_info;
    if (has_validation_features) messenger_info.pNext = &features;
  }

  const VkResult r = fn.vkCreateInstance(&info, nullptr, &self->instance_);
  if (r != VK_SUCCESS) self->instance_ = VK_NULL_HANDLE;  // undefined after a failure (VKATTN_VK_CREATE)
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) {
    throw Error(ErrorCode::no_device, "no Vulkan driver is installed (on Debian, mesa-vulkan-drivers provides lavapipe)",
                "vkCreateInstance", r, current_op());
  }
  VKATTN_VK_CHECK(r);
  try {
    self->fn_ = fn.with_instance(self->instance_);
  } catch (...) {
    self->fn_.vkDestroyInstance =
        reinterpret_cast<PFN_vkDestroyInstance>(self->fn_.vkGetInstanceProcAddr(self->instance_, "vkDestroyInstance"));
    throw;
  }

  if (validation) {
    const auto create = self->fn_.vkCreateDebugUtilsMessengerEXT;
    if (!create) {
      throw Error(ErrorCode::unsupported, "vkCreateDebugUtilsMessengerEXT is unavailable", "vkGetInstanceProcAddr", 0,
                  current_op());
    }
    messenger_info.pNext = nullptr;  // the features struct belonged to instance creation
    VKATTN_VK_CREATE(self->messenger_, create(self->instance_, &messenger_info, nullptr, &self->messenger_));
  }
  return self;
}

Instance::~Instance() {
  if (messenger_ != VK_NULL_HANDLE && fn_.vkDestroyDebugUtilsMessengerEXT) {
    fn_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  }
  if (instance_ != VK_NULL_HANDLE && owned_ && fn_.vkDestroyInstance) fn_.vkDestroyInstance(instance_, nullptr);
}

std::unique_ptr<Instance> Instance::adopt(VkInstance instance, std::uint32_t api_version,
                                          PFN_vkGetInstanceProcAddr get_instance_proc_addr) {
  std::unique_ptr<Instance> self(new Instance());
  self->fn_ = VulkanFunctions::global(get_instance_proc_addr).with_instance(instance);
  self->instance_ = instance;
  self->api_version_ = api_version;
  self->owned_ = false;
  return self;
}

std::vector<std::string> Instance::messages() const {
  std::lock_guard lock(mutex_);
  return messages_;
}

VKAPI_ATTR VkBool32 VKAPI_CALL Instance::on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                    VkDebugUtilsMessageTypeFlagsEXT,
                                                    const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  // Nothing may be thrown through the driver: out of host memory, the message is lost.
  try {
    auto* self = static_cast<Instance*>(user);
    const bool error = severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    const std::string message = data && data->pMessage ? data->pMessage : "(no message)";
    if (self->log_) self->log_->log(error ? LogLevel::error : LogLevel::warning, "validation: " + message);
    std::lock_guard lock(self->mutex_);
    self->messages_.push_back((error ? "error: " : "warning: ") + message);
  } catch (...) {
  }
  return VK_FALSE;
}

}  // namespace vkattn::detail
