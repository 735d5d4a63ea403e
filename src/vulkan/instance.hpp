// VkInstance, with the Khronos validation layer and a debug messenger when asked.
#pragma once

#include <vulkan/vulkan.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/log.hpp"
#include "vulkan/functions.hpp"

namespace vkattn::detail {

class Instance {
 public:
  // Throws Error(unsupported) when |validation| is asked for and the layer is missing,
  // Error(no_device) when no Vulkan loader or driver answers. Validation messages are
  // kept (messages()) and passed to |log| when given.
  static std::unique_ptr<Instance> create(bool validation, std::shared_ptr<const Logger> log = nullptr);
  // An instance the caller created and keeps (vulkan.hpp: ExternalVulkan), made with
  // |api_version|: never destroyed here; no messenger (the caller's own reports). Its
  // commands come through |get_instance_proc_addr| (null: the loader vkattn links).
  static std::unique_ptr<Instance> adopt(VkInstance instance, std::uint32_t api_version,
                                         PFN_vkGetInstanceProcAddr get_instance_proc_addr);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  VkInstance handle() const { return instance_; }
  // The global and instance commands.
  const VulkanFunctions& fn() const { return fn_; }
  std::uint32_t api_version() const { return api_version_; }
  bool validation() const { return messenger_ != VK_NULL_HANDLE; }
  // The validation layer's Vulkan version (VkLayerProperties::specVersion); 0 without it.
  std::uint32_t validation_layer_version() const { return validation_layer_version_; }
  std::vector<std::string> messages() const;

 private:
  Instance() = default;
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user);
  VulkanFunctions fn_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::uint32_t api_version_ = VK_API_VERSION_1_1;
  std::uint32_t validation_layer_version_ = 0;
  bool owned_ = true;
  std::shared_ptr<const Logger> log_;
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace vkattn::detail
