// Bring your own Vulkan: vkattn on the caller's instance, device and queue, on the caller's
// buffers, recording into the caller's command buffers. The only public header that
// includes <vulkan/vulkan.h>; docs/interop.md has the whole contract.
//
// Ownership: vkattn never destroys, frees or waits on anything it did not create. What it
// borrows (the instance, device, queue, pipeline cache, wrapped buffers) must outlive the
// backend and every tensor, list and cache made from it. Handles are copied by value when
// they are passed in; no pointer passed in is kept.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "vkattn/backend.hpp"
#include "vkattn/export.h"
#include "vkattn/kv_cache.hpp"

namespace vkattn {

// The caller's Vulkan objects. Every handle but pipeline_cache is required.
struct ExternalVulkan {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;  // the device's physical device
  VkDevice device = VK_NULL_HANDLE;
  std::uint32_t queue_family_index = 0;  // a family with VK_QUEUE_COMPUTE_BIT; default 0
  // A queue of that family. vkattn submits to it only inside calls that say so (tensor
  // and cache creation, wrap_kv_cache, upload, download, save/restore_cache, a cache's
  // reset and truncate (its slot table, where memory is not host-visible), submit,
  // submit_and_wait, and make_backend where the matrix units are on: their self-test);
  // Vulkan makes a queue externally synchronized: the caller must not use it from another
  // thread during those calls.
  VkQueue queue = VK_NULL_HANDLE;
  // VkApplicationInfo::apiVersion the instance was created with; at least 1.1. Default 1.1.
  std::uint32_t api_version = VK_API_VERSION_1_1;
  // The VkDeviceCreateInfo the device was created with, read during make_backend only:
  // vkattn uses an optional extension or feature (vulkan_requirements()) only if it is
  // enabled there, and checks that queue_family_index is among its queues. Default null:
  // no optional extension or feature is used.
  const VkDeviceCreateInfo* device_create_info = nullptr;
  // Pipelines are built into this cache (not created with
  // VK_PIPELINE_CACHE_CREATE_EXTERNALLY_SYNCHRONIZED_BIT); vkattn neither saves nor
  // destroys it. Default VK_NULL_HANDLE: a cache of vkattn's own, as
  // DeviceOptions::pipeline_cache_dir says.
  VkPipelineCache pipeline_cache = VK_NULL_HANDLE;
  // Host memory callbacks for the Vulkan objects vkattn creates on the device (buffers,
  // memory, views, pipelines and their layouts and modules, descriptor pools, command
  // pools, fences, query pools, a pipeline cache of its own): passed to every create,
  // allocate, destroy and free of them, as the engine's allocator. Default null: the
  // driver's. Must outlive the backend and everything made from it.
  const VkAllocationCallbacks* allocator = nullptr;
  // For engines that load Vulkan themselves (volk, a loader of their own): every Vulkan
  // command vkattn calls on this backend is taken from it (instance commands with
  // vkGetInstanceProcAddr(instance, ...), device commands with the vkGetDeviceProcAddr it
  // returns). Default null: the Vulkan loader vkattn is linked with.
  PFN_vkGetInstanceProcAddr get_instance_proc_addr = nullptr;
};

// What a device needs for vkattn, to read before creating it.
struct VulkanRequirements {
  std::uint32_t api_version = VK_API_VERSION_1_1;  // of the instance and of the device
  // Device extensions that must be enabled: none. (VK_KHR_portability_subset must be
  // enabled where the device has it, as Vulkan itself requires.)
  std::vector<const char*> required_extensions;
  // Device features that must be enabled: none (f16 is stored as packed halves in 32-bit
  // words, so 16-bit storage and shaderFloat16 are not needed).
  std::vector<const char*> required_features;
  // Used when enabled in ExternalVulkan::device_create_info, and when the device has them:
  // VK_EXT_subgroup_size_control (with the features subgroupSizeControl and
  // computeFullSubgroups, in VkPhysicalDeviceSubgroupSizeControlFeaturesEXT or
  // VkPhysicalDeviceVulkan13Features) for the GPU-shaped kernels, VK_EXT_memory_budget for
  // memory accounting within the driver's budget, VK_KHR_cooperative_matrix with
  // cooperativeMatrix, shaderFloat16, vulkanMemoryModel and vulkanMemoryModelDeviceScope
  // (and size control) for the matrix units (docs/interop.md).
  std::vector<const char*> optional_extensions;
  std::vector<const char*> optional_features;
};
VKATTN_API VulkanRequirements vulkan_requirements();

// A Vulkan backend on the caller's device. |options|: device, validation and
// pipeline_cache_dir (with ExternalVulkan::pipeline_cache) do not apply; the rest do.
// Throws InvalidArgument naming a null handle or a queue family out of range,
// Error(unsupported) naming what the device, the instance or the queue family lacks.
// Backend::validation_messages() is empty: the caller's instance reports to the caller.
VKATTN_API std::unique_ptr<Backend> make_backend(const ExternalVulkan& vulkan, const DeviceOptions& options = {});

// A tensor that is bytes [offset, offset + size_bytes) of the caller's |buffer|, not a
// copy; vkattn never frees it, and the buffer must outlive the tensor and every list that
// uses it. The buffer must be of the backend's device (make_backend(ExternalVulkan)),
// created with VK_BUFFER_USAGE_STORAGE_BUFFER_BIT (and TRANSFER_SRC/TRANSFER_DST for
// Backend::download/upload, which copy through a staging buffer and submit to the queue),
// with memory bound. Checked: |offset| a multiple of minStorageBufferOffsetAlignment (and
// of 16); |size_bytes| at least the tensor's bytes() rounded up to 16 (kernels move whole
// 16-byte units), a multiple of 4, at most maxStorageBufferRange; offset + size_bytes at
// most the buffer's memory requirement size. Ops take wrapped and owned tensors alike,
// and refuse an output sharing bytes with an input (docs/interop.md); two VkBuffers
// aliasing one memory are the caller's to keep apart. Contents are the buffer's, not zeroed.
VKATTN_API Tensor wrap(Backend& backend, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size_bytes, const Shape& shape,
                       DType dtype);

// A KV cache whose K and V live in the caller's buffers: |k| and |v|, tensors of this
// backend (wrap() them; one of vkattn's own memory serves too) that share no bytes, each
// of the cache's shape [n_seqs, capacity, n_kv_heads, head_dim] (a paged cache's pool:
// [n_blocks, block_size, n_kv_heads, head_dim]) and config.dtype (docs/kv-cache.md has the
// layout of each dtype). vkattn fills both with zeros now, through the queue (their
// buffers need TRANSFER_DST), and the cache starts empty, as Backend::kv_cache's. The
// caller may read the buffers (after the work that wrote them); writing them behind
// vkattn's bookkeeping is undefined. A latent cache (KvCacheConfig::latent) takes K alone:
// |v| must be an empty Tensor{}.
VKATTN_API KvCache wrap_kv_cache(Backend& backend, const KvCacheConfig& config, const Tensor& k, const Tensor& v);

// Semaphores of the caller that an asynchronous submission (CommandList::submit) waits on
// before vkattn's work and signals after it, so that vkattn's work and the caller's chain
// on the device with no wait on the host. A value is for a timeline semaphore (the device
// made with the timelineSemaphore feature of Vulkan 1.2, or VK_KHR_timeline_semaphore;
// refused where ExternalVulkan::device_create_info enabled no such feature); 0 marks a
// binary semaphore. The rules are vkQueueSubmit's: a binary semaphore waited on
// must have a signal pending; a timeline value signalled must exceed the semaphore's
// current value and every value signalled before.
struct SemaphoreWait {
  VkSemaphore semaphore = VK_NULL_HANDLE;
  std::uint64_t value = 0;  // timeline: wait until it reaches this; 0: binary
  // vkattn's stages that wait (pWaitDstStageMask); default its compute shaders.
  VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
};
struct SemaphoreSignal {
  VkSemaphore semaphore = VK_NULL_HANDLE;
  std::uint64_t value = 0;  // timeline: set to this when vkattn's work is done; 0: binary
};
struct SubmitSemaphores {
  std::vector<SemaphoreWait> wait{};
  std::vector<SemaphoreSignal> signal{};
};

// CommandList::record takes a VkCommandBuffer (command_list.hpp declares it without this
// header).
static_assert(std::is_same_v<VkCommandBuffer, VkCommandBuffer_T*>);

}  // namespace vkattn
