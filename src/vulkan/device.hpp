// Physical-device choice and the logical device with its one compute queue.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vkattn/types.hpp"

namespace vkattn::detail {

class Instance;

struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  DeviceInfo info;                          // limits as the device reports them
  std::uint32_t compute_family = 0;
  std::array<std::uint8_t, VK_UUID_SIZE> uuid{};
  std::uint32_t driver_version = 0;
  bool portability_subset = false;          // must be enabled when present (MoltenVK)
  bool subgroup_size_control = false;       // VK_EXT_subgroup_size_control is enabled with
                                            // subgroupSizeControl and computeFullSubgroups
};

// Every device with its limits and, for unusable ones, the reason.
std::vector<PhysicalDevice> enumerate_devices(const Instance& instance);

// Index into |devices| of the device to use: DeviceOptions::device, else $VKATTN_DEVICE,
// else the best type. Throws Error(no_device) listing each device's rejection reason.
std::size_t choose_device(const std::vector<PhysicalDevice>& devices, const DeviceOptions& options);

// Element-wise minimum of two limit sets (features ANDed).
DeviceLimits cap(const DeviceLimits& device, const DeviceLimits& cap);

class Device {
 public:
  static std::unique_ptr<Device> create(const PhysicalDevice& physical);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkQueue queue() const { return queue_; }
  std::uint32_t family() const { return family_; }
  const VkPhysicalDeviceMemoryProperties& memory() const { return memory_; }

  VkCommandBuffer allocate_command_buffer();
  void free_command_buffer(VkCommandBuffer cb);
  // One vkQueueSubmit and a fence wait; Error(timeout) after |timeout_ms|.
  void submit_and_wait(VkCommandBuffer cb, std::uint32_t timeout_ms);

 private:
  Device() = default;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  std::mutex mutex_;  // guards the pool, the queue and the fence
};

}  // namespace vkattn::detail
