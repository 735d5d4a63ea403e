// Buffers and the memory-type fallback list.
//   device buffers: unified memory -> DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT (mapped, no
//                   staging); else DEVICE_LOCAL; else HOST_VISIBLE|HOST_COHERENT.
//   staging:        HOST_VISIBLE|HOST_COHERENT|HOST_CACHED; else HOST_VISIBLE|HOST_COHERENT;
//                   else HOST_VISIBLE (flushed and invalidated explicitly).
//   borrowed:       a range of a caller's VkBuffer (vulkan.hpp: wrap); never freed here.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/heap_ledger.hpp"
#include "vulkan/functions.hpp"

namespace vkattn::detail {

class Device;

enum class BufferKind { device, staging };

class Buffer {
 public:
  // |what| names the buffer in errors. |prefer_mapped|: on unified memory take
  // host-visible device memory (no staging). |max_texels|: a device buffer whose bytes are
  // a multiple of 16 and at most 16 * |max_texels| also gets a uniform texel buffer view
  // (R32G32B32A32_UINT) over all of it, for kernels that read it through texelFetch; 0: no
  // view. The memory is counted against its heap (Device::reserve) until the buffer goes.
  static std::unique_ptr<Buffer> create(Device& device, VkDeviceSize bytes, BufferKind kind, const std::string& what,
                                        bool prefer_mapped, std::uint64_t max_texels = 0);
  // A view of [offset, offset + bytes) of a buffer someone else owns: not destroyed, not
  // mapped, no texel view, not counted against any heap.
  static std::unique_ptr<Buffer> borrow(VkBuffer buffer, VkDeviceSize offset, VkDeviceSize bytes);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  VkDeviceSize size() const { return size_; }
  VkDeviceSize offset() const { return offset_; }  // into handle(); 0 unless borrowed
  bool mapped() const { return mapped_ != nullptr; }
  VkBufferView texel_view() const { return view_; }  // VK_NULL_HANDLE when there is none

  // Host access to a mapped buffer; flush/invalidate when the memory is not coherent.
  void write(std::span<const std::uint8_t> bytes, VkDeviceSize offset = 0);
  // The (offset, size) ranges of |source| to the same offsets, flushed once.
  void write_ranges(const std::uint8_t* source, std::span<const std::pair<VkDeviceSize, VkDeviceSize>> ranges);
  void read(std::span<std::uint8_t> bytes, VkDeviceSize offset = 0) const;
  void zero();  // a mapped buffer

 private:
  Buffer() = default;
  VkMappedMemoryRange range_from(VkDeviceSize offset) const;
  const VulkanFunctions* fn_ = nullptr;  // the device's; null for a borrowed buffer
  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkBufferView view_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  VkDeviceSize offset_ = 0;
  bool owned_ = true;
  VkDeviceSize atom_ = 1;
  void* mapped_ = nullptr;
  bool coherent_ = true;
  HeapReservation reservation_;  // released after the memory is freed
};

}  // namespace vkattn::detail
