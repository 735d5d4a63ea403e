#include "vulkan/transfers.hpp"

#include <algorithm>
#include <bit>

namespace vkattn::detail {

std::unique_ptr<Buffer> TransferCache::staging(Device& device, VkDeviceSize bytes) {
  bytes = std::max<VkDeviceSize>(bytes, 4);  // Vulkan buffers are never empty
  auto kept = buffers_.take([&](const Buffer& b) { return b.size() >= bytes ? b.size() : buffers_.kUnfit; });
  if (kept) return kept;
  const VkDeviceSize size = bytes <= kMaxKeptBytes ? std::max(kMinBytes, std::bit_ceil(bytes)) : bytes;
  return Buffer::create(device, size, BufferKind::staging, "staging", true);
}

void TransferCache::give(std::unique_ptr<Buffer> staging) noexcept {
  if (staging->size() <= kMaxKeptBytes) buffers_.give(std::move(staging));
}

std::unique_ptr<Submission> TransferCache::submission(Device& device) {
  if (auto kept = submissions_.take([](const Submission&) { return std::uint64_t{0}; })) {
    kept->reset();  // on error the submission is freed here, not kept
    return kept;
  }
  return std::make_unique<Submission>(device, true);
}

}  // namespace vkattn::detail
