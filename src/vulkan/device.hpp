// Physical-device choice and the logical device with its one compute queue.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/heap_ledger.hpp"
#include "vkattn/types.hpp"
#include "vulkan/functions.hpp"

namespace vkattn::detail {

class Instance;

// Semaphores a submission waits on and signals (vulkan.hpp: SubmitSemaphores). A value is a
// timeline semaphore's; 0 marks a binary semaphore. When any value is not 0 the submission
// carries VkTimelineSemaphoreSubmitInfo.
struct SemaphoreSync {
  std::vector<VkSemaphore> wait;
  std::vector<std::uint64_t> wait_values;
  std::vector<VkPipelineStageFlags> wait_stages;
  std::vector<VkSemaphore> signal;
  std::vector<std::uint64_t> signal_values;
};

struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  const VulkanFunctions* functions = nullptr;                 // its instance's (Instance::fn())
  DeviceInfo info;                                            // limits as the device reports them
  VkPhysicalDeviceType kind = VK_PHYSICAL_DEVICE_TYPE_OTHER;  // info.type's source
  bool cpu() const { return kind == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  std::uint32_t compute_family = 0;
  std::array<std::uint8_t, VK_UUID_SIZE> uuid{};
  std::uint32_t driver_version = 0;
  bool portability_subset = false;     // must be enabled when present (MoltenVK)
  bool subgroup_size_control = false;  // VK_EXT_subgroup_size_control is enabled with
                                       // subgroupSizeControl and computeFullSubgroups
  // A pipeline that requires a subgroup size may have at most this many subgroups in a
  // workgroup (maxComputeWorkgroupSubgroups; Intel's 64 with its SIMD8 is 512 invocations).
  std::uint32_t max_workgroup_subgroups = UINT32_MAX;
  bool memory_budget = false;  // VK_EXT_memory_budget is enabled
  // VK_KHR_pipeline_executable_properties exists (enabled only for VKATTN_PIPELINE_STATS=1).
  bool pipeline_stats = false;
  CoopmatFacts coopmat;  // what the matrix path's choice depends on
  // The matrix kernels run on the units: VK_KHR_cooperative_matrix, shaderFloat16 and
  // vulkanMemoryModel (with device scope) are enabled when the device is created (choose_matrix_path).
  bool matrix_units = false;
  std::uint32_t matrix_tile = 0;  // with matrix_units: the cooperative matrices' side, 16 or 8
  // With matrix_units: attn_mt2 (NV cooperative matrices 2) may run; VK_NV_cooperative_matrix2
  // and its four features are enabled too.
  bool matrix_nv2 = false;
  std::string matrix_nv2_note;  // with matrix_units and not matrix_nv2: why not (coopmat2_gap)
  // shaderFloat16 is enabled when the device is created, for the packed f16 kernels
  // (AttentionPrecision::f16_products off the matrix units): Vulkan 1.2 devices that have
  // it, unless $VKATTN_PACKED_F16 = off. Never on a caller's device (ExternalVulkan).
  bool float16 = false;
};

// Every device with its limits and, for unusable ones, the reason; the matrix path chosen
// as |options| (or $VKATTN_MATRIX) asks.
std::vector<PhysicalDevice> enumerate_devices(const Instance& instance, const DeviceOptions& options = {});

// What vkattn can use of one physical device, as enumerate_devices reports it;
// |instance_api| is the apiVersion its instance was created with, |fn| its commands.
// VK_KHR_cooperative_matrix is queried only when |query_coopmat|, VK_NV_cooperative_matrix2
// only when |query_nv2| too.
PhysicalDevice probe_device(const VulkanFunctions& fn, VkPhysicalDevice handle, std::uint32_t index, std::uint32_t instance_api,
                            bool query_coopmat, bool query_nv2 = false);

// Sets |device|'s matrix path (PhysicalDevice::matrix_units, the limits' matrix_units and
// matrix_standin, DeviceInfo::matrix_note) from its facts and |knob|.
void choose_matrix_path(PhysicalDevice& device, MatrixUnits knob);

// Index into |devices| of the device to use: DeviceOptions::device, else $VKATTN_DEVICE,
// else the best type. Throws Error(no_device) listing each device's rejection reason.
std::size_t choose_device(const std::vector<PhysicalDevice>& devices, const DeviceOptions& options);

// $VKATTN_PACKED_F16: "auto" (or unset) or "off"; InvalidArgument naming it otherwise.
bool packed_f16_wanted();

// $VKATTN_PIPELINE_STATS (a switch): print every pipeline's statistics as it is built.
bool pipeline_stats_wanted();

// Element-wise minimum of two limit sets (features ANDed).
DeviceLimits cap(const DeviceLimits& device, const DeviceLimits& cap);

// A Vulkan version as "1.3.239", or "1.3" without |patch|.
std::string api_version_string(std::uint32_t v, bool patch = true);

// A vendor ID or a set of flag bits as "0x106B".
std::string hex_string(std::uint32_t v);

class Device {
 public:
  // |local_heap_cap|: each device-local heap counts as at most this many bytes (0: its
  // size), so that tests can exhaust a small heap quickly.
  static std::unique_ptr<Device> create(const PhysicalDevice& physical, std::uint64_t local_heap_cap = 0);
  // A device and queue the caller created and keeps (vulkan.hpp: ExternalVulkan): never
  // destroyed or waited on here; |physical|.compute_family is the caller's queue family;
  // |allocator| (may be null) is passed to every create and destroy of vkattn's objects;
  // |local_heap_cap| as create()'s. Defined in external.cpp.
  static std::unique_ptr<Device> adopt(const PhysicalDevice& physical, VkDevice device, VkQueue queue,
                                       const VkAllocationCallbacks* allocator, std::uint64_t local_heap_cap = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  // Every command, and the allocation callbacks for device objects.
  const VulkanFunctions& fn() const { return fn_; }
  VkPhysicalDevice physical() const { return physical_; }
  std::uint32_t family() const { return family_; }
  const VkPhysicalDeviceMemoryProperties& memory() const { return memory_; }
  const HeapLedger& heaps() const { return *heaps_; }
  bool memory_budget() const { return memory_budget_; }
  // VK_KHR_pipeline_executable_properties is enabled (VKATTN_PIPELINE_STATS=1).
  bool pipeline_stats() const { return pipeline_stats_; }

  // Takes |bytes| of |heap| for |what|: Error(out_of_memory) when they would pass the
  // heap's size (as counted by this device's buffers) or, with VK_EXT_memory_budget, the
  // driver's budget for this process.
  HeapReservation reserve(std::uint32_t heap, std::uint64_t bytes, const std::string& what);

  // Submits |cb|, signalling |fence|. The queue is the one Vulkan object that every thread
  // using the backend shares; a mutex guards it.
  void submit(VkCommandBuffer cb, VkFence fence, const SemaphoreSync* sync = nullptr);
  // Whether |fence| has signalled (vkGetFenceStatus); throws on errors.
  bool signalled(VkFence fence);
  // Waits up to |timeout_ns| for |fence|: VK_SUCCESS or VK_TIMEOUT; throws on errors.
  VkResult wait(VkFence fence, std::uint64_t timeout_ns);
  // Throws Error(device_lost) once any call on this device has reported it lost, so that
  // every later call fails at once; a new backend is needed.
  void check_alive() const;
  // Records a lost device from the result of |call|.
  void note(VkResult result, const char* call);

 private:
  Device() = default;
  void count_heaps(std::uint64_t local_heap_cap);  // memory_ and heaps_
  VulkanFunctions fn_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  std::uint32_t family_ = 0;
  VkPhysicalDeviceMemoryProperties memory_{};
  bool memory_budget_ = false;
  bool pipeline_stats_ = false;
  bool owned_ = true;
  std::unique_ptr<HeapLedger> heaps_;
  std::mutex queue_mutex_;
  std::atomic<const char*> lost_in_{nullptr};  // the call that reported the device lost
};

}  // namespace vkattn::detail
