// A descriptor pool sized for one encoded command list: one set per dispatch, storage
// buffers and uniform texel buffers. Freed with the encoding, so sets never outlive the list that uses them.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <span>

#include "vulkan/functions.hpp"

namespace vkattn::detail {

class Device;

class DescriptorPool {
 public:
  static std::unique_ptr<DescriptorPool> create(const Device& device, std::uint32_t max_sets, std::uint32_t max_buffers,
                                                std::uint32_t max_texel_buffers);
  ~DescriptorPool();
  DescriptorPool(const DescriptorPool&) = delete;
  DescriptorPool& operator=(const DescriptorPool&) = delete;

  // A set of |layout| with descriptor i at binding i: a texel buffer where |views[i]| is
  // set, else the storage buffer range |buffers[i]|.
  VkDescriptorSet allocate(VkDescriptorSetLayout layout, std::span<const VkDescriptorBufferInfo> buffers,
                           std::span<const VkBufferView> views);

 private:
  DescriptorPool() = default;
  const VulkanFunctions* fn_ = nullptr;
  VkDevice device_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
};

}  // namespace vkattn::detail
