#include "vulkan/memory.hpp"

#include <cstring>
#include <vector>

#include "vulkan/check.hpp"
#include "vulkan/device.hpp"
#include "vulkan/faults.hpp"

namespace vkattn::detail {

namespace {

constexpr VkMemoryPropertyFlags kLocal = VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
constexpr VkMemoryPropertyFlags kVisible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
constexpr VkMemoryPropertyFlags kCoherent = VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
constexpr VkMemoryPropertyFlags kCached = VK_MEMORY_PROPERTY_HOST_CACHED_BIT;

// First memory type allowed by |type_bits| that has all of |wanted|.
int find_type(const VkPhysicalDeviceMemoryProperties& mem, std::uint32_t type_bits, VkMemoryPropertyFlags wanted) {
  for (std::uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & wanted) == wanted) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

std::unique_ptr<Buffer> Buffer::create(Device& device, VkDeviceSize bytes, BufferKind kind, const std::string& what,
                                       bool prefer_mapped, std::uint64_t max_texels) {
  std::unique_ptr<Buffer> self(new Buffer());
  self->fn_ = &device.fn();
  self->device_ = device.handle();
  self->size_ = bytes;
  const VulkanFunctions& fn = device.fn();

  auto info = vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = bytes;
  info.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  const bool texels = kind == BufferKind::device && bytes % 16 == 0 && bytes / 16 <= max_texels;
  if (kind == BufferKind::device) info.usage |= VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  if (texels) info.usage |= VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VKATTN_VK_CREATE(self->buffer_, fn.vkCreateBuffer(self->device_, &info, fn.allocator, &self->buffer_));

  VkMemoryRequirements req{};
  fn.vkGetBufferMemoryRequirements(self->device_, self->buffer_, &req);

  std::vector<VkMemoryPropertyFlags> order;
  if (kind == BufferKind::device) {
    if (prefer_mapped) order.push_back(kLocal | kVisible | kCoherent);
    order.insert(order.end(), {kLocal, kVisible | kCoherent});
  } else {
    order = {kVisible | kCoherent | kCached, kVisible | kCoherent, kVisible};
  }
  int type = -1;
  for (VkMemoryPropertyFlags flags : order) {
    type = find_type(device.memory(), req.memoryTypeBits, flags);
    if (type >= 0) break;
  }
  if (type < 0) {
    throw Error(ErrorCode::unsupported, "no memory type fits a buffer of " + std::to_string(bytes) + " bytes",
                "vkGetBufferMemoryRequirements", 0, current_op());
  }

  const std::uint32_t heap = device.memory().memoryTypes[type].heapIndex;
  self->reservation_ = device.reserve(heap, req.size, what);
  auto alloc = vk_struct<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = static_cast<std::uint32_t>(type);
  VkResult r = take_fault(FaultSite::allocate_memory);
  if (r == VK_SUCCESS) r = fn.vkAllocateMemory(self->device_, &alloc, fn.allocator, &self->memory_);
  if (r != VK_SUCCESS) self->memory_ = VK_NULL_HANDLE;  // undefined after a failure (VKATTN_VK_CREATE)
  device.note(r, "vkAllocateMemory");
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_TOO_MANY_OBJECTS) {
    const auto& h = device.heaps();
    throw Error(ErrorCode::out_of_memory,
                what + " needs " + std::to_string(req.size) + " bytes from " + h.heap(heap).name + ": the driver refused (" +
                    vk_result_name(r) + ") with " + std::to_string(h.used(heap) - req.size) + " bytes in use by this backend",
                "vkAllocateMemory", r, current_op());
  }
  if (r < 0) throw_vk_error(r, "vkAllocateMemory", __FILE__, __LINE__);
  VKATTN_VK_CHECK(fn.vkBindBufferMemory(self->device_, self->buffer_, self->memory_, 0));

  if (texels) {
    auto view = vk_struct<VkBufferViewCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO);
    view.buffer = self->buffer_;
    view.format = VK_FORMAT_R32G32B32A32_UINT;
    view.offset = 0;
    view.range = bytes;
    VKATTN_VK_CREATE(self->view_, fn.vkCreateBufferView(self->device_, &view, fn.allocator, &self->view_));
  }

  const VkMemoryPropertyFlags flags = device.memory().memoryTypes[type].propertyFlags;
  // A device buffer not asked to be mapped stays behind staging copies even in
  // host-visible memory (every type is, on CPU devices): DeviceOptions::force_staging and
  // devices without unified memory take that path.
  if ((flags & kVisible) && (kind == BufferKind::staging || prefer_mapped)) {
    VKATTN_VK_CHECK(fn.vkMapMemory(self->device_, self->memory_, 0, VK_WHOLE_SIZE, 0, &self->mapped_));
    self->coherent_ = (flags & kCoherent) != 0;
    VkPhysicalDeviceProperties props{};
    fn.vkGetPhysicalDeviceProperties(device.physical(), &props);
    self->atom_ = props.limits.nonCoherentAtomSize;
  }
  return self;
}

std::unique_ptr<Buffer> Buffer::borrow(VkBuffer buffer, VkDeviceSize offset, VkDeviceSize bytes) {
  std::unique_ptr<Buffer> self(new Buffer());
  self->buffer_ = buffer;
  self->offset_ = offset;
  self->size_ = bytes;
  self->owned_ = false;
  return self;
}

Buffer::~Buffer() {
  if (!owned_) return;
  if (view_) fn_->vkDestroyBufferView(device_, view_, fn_->allocator);
  if (buffer_) fn_->vkDestroyBuffer(device_, buffer_, fn_->allocator);
  if (memory_) fn_->vkFreeMemory(device_, memory_, fn_->allocator);  // unmaps implicitly
}

// From |offset| (rounded down to nonCoherentAtomSize) to the end of the mapping.
VkMappedMemoryRange Buffer::range_from(VkDeviceSize offset) const {
  auto range = vk_struct<VkMappedMemoryRange>(VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE);
  range.memory = memory_;
  range.offset = offset / atom_ * atom_;
  range.size = VK_WHOLE_SIZE;
  return range;
}

void Buffer::write(std::span<const std::uint8_t> bytes, VkDeviceSize offset) {
  std::memcpy(static_cast<std::uint8_t*>(mapped_) + offset, bytes.data(), bytes.size());
  if (!coherent_) {
    const VkMappedMemoryRange range = range_from(offset);
    VKATTN_VK_CHECK(fn_->vkFlushMappedMemoryRanges(device_, 1, &range));
  }
}

void Buffer::write_ranges(const std::uint8_t* source, std::span<const std::pair<VkDeviceSize, VkDeviceSize>> ranges) {
  for (const auto& [offset, size] : ranges) {
    std::memcpy(static_cast<std::uint8_t*>(mapped_) + offset, source + offset, size);
  }
  if (!coherent_ && !ranges.empty()) {
    const VkMappedMemoryRange range = range_from(0);
    VKATTN_VK_CHECK(fn_->vkFlushMappedMemoryRanges(device_, 1, &range));
  }
}

void Buffer::zero() {
  std::memset(mapped_, 0, size_);
  if (!coherent_) {
    const VkMappedMemoryRange range = range_from(0);
    VKATTN_VK_CHECK(fn_->vkFlushMappedMemoryRanges(device_, 1, &range));
  }
}

void Buffer::read(std::span<std::uint8_t> bytes, VkDeviceSize offset) const {
  if (!coherent_) {
    const VkMappedMemoryRange range = range_from(offset);
    VKATTN_VK_CHECK(fn_->vkInvalidateMappedMemoryRanges(device_, 1, &range));
  }
  std::memcpy(bytes.data(), static_cast<const std::uint8_t*>(mapped_) + offset, bytes.size());
}

}  // namespace vkattn::detail
