// An "engine" for the interop tests: its own VkInstance (validation and synchronization
// validation on, its own messenger), VkDevice, queue, command pool and buffers, made with
// raw Vulkan calls, as an application that already uses Vulkan has them. vkattn is then
// brought in on top (vkattn/vulkan.hpp), and must leave all of it as it found it.
#pragma once

#include <gtest/gtest.h>
#include <vulkan/vulkan.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace vkattn::test {

// A zeroed Vulkan struct with its sType.
template <class T>
T vk_struct(VkStructureType type) {
  T value{};
  value.sType = type;
  return value;
}

#define ENGINE_CHECK(call)                                                                   \
  do {                                                                                       \
    const VkResult engine_result_ = (call);                                                  \
    if (engine_result_ != VK_SUCCESS) {                                                      \
      throw std::runtime_error(std::string(#call) + " = " + std::to_string(engine_result_)); \
    }                                                                                        \
  } while (0)

struct EngineBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;  // host-visible buffers only
  VkDeviceSize size = 0;
};

class Engine {
 public:
  // |api_version| of the instance; |enable_size_control|: enable VK_EXT_subgroup_size_control
  // with its features when the device has them; |timeline|: Vulkan 1.2 and the
  // timelineSemaphore feature (throws when the device lacks them).
  explicit Engine(std::uint32_t api_version = VK_API_VERSION_1_1, bool enable_size_control = true, bool timeline = false) {
    api_version_ = timeline ? VK_API_VERSION_1_2 : api_version;
    create_instance();
    create_device(enable_size_control, timeline);
  }
  ~Engine() {
    for (VkSemaphore s : semaphores_) vkDestroySemaphore(device_, s, nullptr);
    for (VkEvent v : events_) vkDestroyEvent(device_, v, nullptr);
    for (auto& b : buffers_) {
      vkDestroyBuffer(device_, b.buffer, nullptr);
      vkFreeMemory(device_, b.memory, nullptr);
    }
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
    if (device_) vkDestroyDevice(device_, nullptr);
    if (messenger_) {
      auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
      destroy(instance_, messenger_, nullptr);
    }
    if (instance_) vkDestroyInstance(instance_, nullptr);
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  VkInstance instance() const { return instance_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  std::uint32_t family() const { return family_; }
  std::uint32_t api_version() const { return api_version_; }
  const VkDeviceCreateInfo* device_create_info() const { return &device_info_; }
  const VkPhysicalDeviceLimits& limits() const { return props_.limits; }

  // Validation messages seen so far (warnings and errors).
  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }

  // A buffer of |size| bytes with |usage|; host-visible and mapped when |host|, else
  // device-local (where the device has such memory).
  EngineBuffer buffer(VkDeviceSize size, VkBufferUsageFlags usage, bool host) {
    EngineBuffer b;
    b.size = size;
    auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    info.size = size;
    info.usage = usage;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    ENGINE_CHECK(vkCreateBuffer(device_, &info, nullptr, &b.buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device_, b.buffer, &req);
    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(physical_, &mem);
    const VkMemoryPropertyFlags want =
        host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    std::uint32_t type = UINT32_MAX;
    for (std::uint32_t i = 0; i < mem.memoryTypeCount && type == UINT32_MAX; ++i) {
      if ((req.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) type = i;
    }
    if (type == UINT32_MAX) throw std::runtime_error("no memory type");
    auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = type;
    ENGINE_CHECK(vkAllocateMemory(device_, &alloc, nullptr, &b.memory));
    ENGINE_CHECK(vkBindBufferMemory(device_, b.buffer, b.memory, 0));
    if (host) ENGINE_CHECK(vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped));
    buffers_.push_back(b);
    return b;
  }

  // A binary semaphore, or a timeline semaphore at value 0.
  VkSemaphore semaphore(bool timeline) {
    auto type = vk_struct<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
    type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    auto info = vk_struct<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
    if (timeline) info.pNext = &type;
    VkSemaphore s;
    ENGINE_CHECK(vkCreateSemaphore(device_, &info, nullptr, &s));
    semaphores_.push_back(s);
    return s;
  }
  VkFence fence() const { return fence_; }

  // An event, unset.
  VkEvent event() {
    auto info = vk_struct<VkEventCreateInfo>(VK_STRUCTURE_TYPE_EVENT_CREATE_INFO);
    VkEvent v;
    ENGINE_CHECK(vkCreateEvent(device_, &info, nullptr, &v));
    events_.push_back(v);
    return v;
  }

  VkCommandBuffer begin() {
    auto info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    info.commandPool = pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    VkCommandBuffer cb;
    ENGINE_CHECK(vkAllocateCommandBuffers(device_, &info, &cb));
    auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    ENGINE_CHECK(vkBeginCommandBuffer(cb, &begin));
    return cb;
  }

  static void copy(VkCommandBuffer cb, const EngineBuffer& src, VkDeviceSize src_offset, const EngineBuffer& dst,
                   VkDeviceSize dst_offset, VkDeviceSize bytes) {
    const VkBufferCopy region{src_offset, dst_offset, bytes};
    vkCmdCopyBuffer(cb, src.buffer, dst.buffer, 1, &region);
  }

  static void barrier(VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src, VkPipelineStageFlags dst_stage,
                      VkAccessFlags dst) {
    auto b = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    b.srcAccessMask = src;
    b.dstAccessMask = dst;
    vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &b, 0, nullptr, 0, nullptr);
  }

  // Ends |cb|, submits it with the engine's fence and waits.
  void submit_and_wait(VkCommandBuffer cb) {
    ENGINE_CHECK(vkEndCommandBuffer(cb));
    resubmit_and_wait(cb);
  }

  // Submits an already ended |cb| (again) and waits.
  void resubmit_and_wait(VkCommandBuffer cb) {
    auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cb;
    ENGINE_CHECK(vkResetFences(device_, 1, &fence_));
    ENGINE_CHECK(vkQueueSubmit(queue_, 1, &submit, fence_));
    ENGINE_CHECK(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
  }

 private:
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* self = static_cast<Engine*>(user);
    std::lock_guard lock(self->mutex_);
    self->messages_.push_back(data && data->pMessage ? data->pMessage : "(no message)");
    return VK_FALSE;
  }

  void create_instance() {
    auto app = vk_struct<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "vkattn interop test engine";
    app.apiVersion = api_version_;
    const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char* extensions[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    auto messenger = vk_struct<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
    messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                            VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    messenger.pfnUserCallback = &Engine::on_message;
    messenger.pUserData = this;
    const VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    auto features = vk_struct<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = enables;
    messenger.pNext = &features;
    auto info = vk_struct<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    info.pNext = &messenger;
    info.pApplicationInfo = &app;
    info.enabledLayerCount = 1;
    info.ppEnabledLayerNames = layers;
    info.enabledExtensionCount = 2;
    info.ppEnabledExtensionNames = extensions;
    ENGINE_CHECK(vkCreateInstance(&info, nullptr, &instance_));
    messenger.pNext = nullptr;
    auto create =
        reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    ENGINE_CHECK(create(instance_, &messenger, nullptr, &messenger_));
  }

  void create_device(bool enable_size_control, bool timeline) {
    std::uint32_t n = 0;
    ENGINE_CHECK(vkEnumeratePhysicalDevices(instance_, &n, nullptr));
    if (n == 0) throw std::runtime_error("no Vulkan device");
    std::vector<VkPhysicalDevice> devices(n);
    ENGINE_CHECK(vkEnumeratePhysicalDevices(instance_, &n, devices.data()));
    physical_ = devices[0];
    vkGetPhysicalDeviceProperties(physical_, &props_);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
    family_ = UINT32_MAX;
    for (std::uint32_t i = 0; i < n && family_ == UINT32_MAX; ++i) {
      if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family_ = i;
    }
    if (family_ == UINT32_MAX) throw std::runtime_error("no compute queue");

    ENGINE_CHECK(vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, nullptr));
    std::vector<VkExtensionProperties> exts(n);
    ENGINE_CHECK(vkEnumerateDeviceExtensionProperties(physical_, nullptr, &n, exts.data()));
    auto has = [&](const char* name) {
      for (const auto& e : exts) {
        if (std::strcmp(e.extensionName, name) == 0) return true;
      }
      return false;
    };
    if (has("VK_KHR_portability_subset")) extensions_.push_back("VK_KHR_portability_subset");
    if (enable_size_control && has(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
      extensions_.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
      size_control_.subgroupSizeControl = VK_TRUE;
      size_control_.computeFullSubgroups = VK_TRUE;
      device_info_.pNext = &size_control_;
    }
    if (timeline) {
      if (props_.apiVersion < VK_API_VERSION_1_2) throw std::runtime_error("the device lacks Vulkan 1.2");
      timeline_.timelineSemaphore = VK_TRUE;
      timeline_.pNext = const_cast<void*>(device_info_.pNext);
      device_info_.pNext = &timeline_;
    }
    queue_info_.queueFamilyIndex = family_;
    queue_info_.queueCount = 1;
    queue_info_.pQueuePriorities = &priority_;
    device_info_.queueCreateInfoCount = 1;
    device_info_.pQueueCreateInfos = &queue_info_;
    device_info_.enabledExtensionCount = static_cast<std::uint32_t>(extensions_.size());
    device_info_.ppEnabledExtensionNames = extensions_.data();
    ENGINE_CHECK(vkCreateDevice(physical_, &device_info_, nullptr, &device_));
    vkGetDeviceQueue(device_, family_, 0, &queue_);

    auto pool = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool.queueFamilyIndex = family_;
    ENGINE_CHECK(vkCreateCommandPool(device_, &pool, nullptr, &pool_));
    auto fence = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    ENGINE_CHECK(vkCreateFence(device_, &fence, nullptr, &fence_));
  }

  std::uint32_t api_version_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties props_{};
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  std::vector<EngineBuffer> buffers_;
  std::vector<VkSemaphore> semaphores_;
  std::vector<VkEvent> events_;
  // Kept for ExternalVulkan::device_create_info, which vkattn reads while it is made.
  float priority_ = 1.0f;
  std::vector<const char*> extensions_;
  VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_control_ = vk_struct<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
  VkPhysicalDeviceTimelineSemaphoreFeatures timeline_ =
      vk_struct<VkPhysicalDeviceTimelineSemaphoreFeatures>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES);
  VkDeviceQueueCreateInfo queue_info_ = vk_struct<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  VkDeviceCreateInfo device_info_ = vk_struct<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  mutable std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace vkattn::test
