// The Vulkan functions vkattn calls, loaded through a vkGetInstanceProcAddr: the loader's,
// found at run time (loader.hpp), or the application's (ExternalVulkan::get_instance_proc_addr,
// for engines that load Vulkan themselves, as volk does). vkattn's sources are compiled
// with VK_NO_PROTOTYPES, so a call that does not go through a table does not compile.
// The table also carries the allocation callbacks that every create, allocate, destroy
// and free of a device object passes (ExternalVulkan::allocator; null for vkattn's own
// device).
#pragma once

#include <vulkan/vulkan.h>

#include "vulkan/coopmat.hpp"

namespace vkattn::detail {

// Global commands (no instance).
#define VKATTN_VK_GLOBAL(X)                 \
  X(vkCreateInstance)                       \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)     \
  X(vkEnumerateInstanceVersion)

// Instance commands (Vulkan 1.1 core).
#define VKATTN_VK_INSTANCE(X)                 \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceFormatProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

// Instance commands of extensions: null when the instance does not have them.
#define VKATTN_VK_INSTANCE_OPTIONAL(X) \
  X(vkCreateDebugUtilsMessengerEXT)    \
  X(vkDestroyDebugUtilsMessengerEXT)

// Device commands (Vulkan 1.0 core), loaded with vkGetDeviceProcAddr.
#define VKATTN_VK_DEVICE(X)         \
  X(vkGetDeviceQueue)               \
  X(vkDeviceWaitIdle)               \
  X(vkDestroyDevice)                \
  X(vkQueueSubmit)                  \
  X(vkCreateFence)                  \
  X(vkDestroyFence)                 \
  X(vkGetFenceStatus)               \
  X(vkWaitForFences)                \
  X(vkResetFences)                  \
  X(vkCreateBuffer)                 \
  X(vkDestroyBuffer)                \
  X(vkGetBufferMemoryRequirements)  \
  X(vkAllocateMemory)               \
  X(vkFreeMemory)                   \
  X(vkBindBufferMemory)             \
  X(vkMapMemory)                    \
  X(vkFlushMappedMemoryRanges)      \
  X(vkInvalidateMappedMemoryRanges) \
  X(vkCreateBufferView)             \
  X(vkDestroyBufferView)            \
  X(vkCreateShaderModule)           \
  X(vkDestroyShaderModule)          \
  X(vkCreateDescriptorSetLayout)    \
  X(vkDestroyDescriptorSetLayout)   \
  X(vkCreatePipelineLayout)         \
  X(vkDestroyPipelineLayout)        \
  X(vkCreateComputePipelines)       \
  X(vkDestroyPipeline)              \
  X(vkCreatePipelineCache)          \
  X(vkDestroyPipelineCache)         \
  X(vkGetPipelineCacheData)         \
  X(vkCreateDescriptorPool)         \
  X(vkDestroyDescriptorPool)        \
  X(vkAllocateDescriptorSets)       \
  X(vkUpdateDescriptorSets)         \
  X(vkCreateCommandPool)            \
  X(vkDestroyCommandPool)           \
  X(vkResetCommandPool)             \
  X(vkAllocateCommandBuffers)       \
  X(vkBeginCommandBuffer)           \
  X(vkEndCommandBuffer)             \
  X(vkCmdPipelineBarrier)           \
  X(vkCmdCopyBuffer)                \
  X(vkCmdFillBuffer)                \
  X(vkCmdDispatch)                  \
  X(vkCmdBindPipeline)              \
  X(vkCmdBindDescriptorSets)        \
  X(vkCmdPushConstants)             \
  X(vkCmdWriteTimestamp)            \
  X(vkCmdResetQueryPool)            \
  X(vkCreateQueryPool)              \
  X(vkDestroyQueryPool)             \
  X(vkGetQueryPoolResults)

// Device commands of extensions vkattn enables only when asked (VKATTN_PIPELINE_STATS=1).
#define VKATTN_VK_DEVICE_OPTIONAL(X)      \
  X(vkGetPipelineExecutablePropertiesKHR) \
  X(vkGetPipelineExecutableStatisticsKHR)

struct VulkanFunctions {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define VKATTN_VK_MEMBER(name) PFN_##name name = nullptr;
  VKATTN_VK_GLOBAL(VKATTN_VK_MEMBER)
  VKATTN_VK_INSTANCE(VKATTN_VK_MEMBER)
  VKATTN_VK_INSTANCE_OPTIONAL(VKATTN_VK_MEMBER)
  VKATTN_VK_DEVICE(VKATTN_VK_MEMBER)
  VKATTN_VK_DEVICE_OPTIONAL(VKATTN_VK_MEMBER)
#undef VKATTN_VK_MEMBER
  // VK_KHR_cooperative_matrix's list (coopmat.hpp declares its type): null when the loader
  // does not return it.
  CoopmatShapesFn vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR = nullptr;
  // VK_NV_cooperative_matrix2's flexible entries, the same way.
  Coopmat2FlexibleFn vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV = nullptr;
  const VkAllocationCallbacks* allocator = nullptr;  // for device objects

  // The global commands through |get_instance_proc_addr| (null: the loader vkattn links).
  // Error(no_device) naming what is missing.
  static VulkanFunctions global(PFN_vkGetInstanceProcAddr get_instance_proc_addr);
  // This table's global commands and |instance|'s commands; Error(unsupported) naming a
  // missing core command.
  VulkanFunctions with_instance(VkInstance instance) const;
  // And |device|'s commands.
  VulkanFunctions with_device(VkDevice device) const;
};

}  // namespace vkattn::detail
