#include "vulkan/descriptors.hpp"

#include <algorithm>
#include <vector>

#include "vulkan/check.hpp"
#include "vulkan/device.hpp"

namespace vkattn::detail {

std::unique_ptr<DescriptorPool> DescriptorPool::create(const Device& device, std::uint32_t max_sets, std::uint32_t max_buffers,
                                                       std::uint32_t max_texel_buffers) {
  std::unique_ptr<DescriptorPool> self(new DescriptorPool());
  self->fn_ = &device.fn();
  self->device_ = device.handle();
  const VkDescriptorPoolSize sizes[] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, std::max(max_buffers, 1u)},
                                        {VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, std::max(max_texel_buffers, 1u)}};
  auto info = vk_struct<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
  info.maxSets = std::max(max_sets, 1u);
  info.poolSizeCount = 2;
  info.pPoolSizes = sizes;
  VKATTN_VK_CREATE(self->pool_, self->fn_->vkCreateDescriptorPool(self->device_, &info, self->fn_->allocator, &self->pool_));
  return self;
}

DescriptorPool::~DescriptorPool() {
  if (pool_) fn_->vkDestroyDescriptorPool(device_, pool_, fn_->allocator);  // frees its sets
}

VkDescriptorSet DescriptorPool::allocate(VkDescriptorSetLayout layout, std::span<const VkDescriptorBufferInfo> buffers,
                                         std::span<const VkBufferView> views) {
  auto alloc = vk_struct<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
  alloc.descriptorPool = pool_;
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  VKATTN_VK_CHECK(fn_->vkAllocateDescriptorSets(device_, &alloc, &set));

  std::vector<VkWriteDescriptorSet> writes(buffers.size());
  for (std::size_t b = 0; b < buffers.size(); ++b) {
    writes[b] = vk_struct<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[b].dstSet = set;
    writes[b].dstBinding = static_cast<std::uint32_t>(b);
    writes[b].descriptorCount = 1;
    if (views[b] != VK_NULL_HANDLE) {
      writes[b].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
      writes[b].pTexelBufferView = &views[b];
    } else {
      writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[b].pBufferInfo = &buffers[b];
    }
  }
  fn_->vkUpdateDescriptorSets(device_, static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
  return set;
}

}  // namespace vkattn::detail
