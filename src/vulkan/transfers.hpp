// What host transfers (Context::write, read and zero) keep from one to the next. Each
// used to make a staging buffer (vkAllocateMemory, vkMapMemory) and a one-shot submission
// (vkCreateCommandPool, vkCreateFence) and free them again. Discrete-GPU drivers make
// memory allocation and pool creation costly: on an H100 a loop of three small uploads
// and a submit per step took over 3.7 ms a step (docs/gpu.md; which call cost most there
// was not measured).
//
// Kept, at most, per backend:
//   - 4 staging buffers of at most 4 MiB each (so at most 16 MiB of host-visible memory),
//     sized to a power of two from 64 KiB so that transfers of similar sizes share them.
//     Kept buffers stay counted against their heap (Device::reserve), as any live buffer
//     is: an out_of_memory message's "bytes in use" includes them. A larger transfer makes
//     and frees its own buffer, as before.
//   - 4 idle one-time submissions: a command pool with its command buffer, and a fence.
// More threads transferring at once than are kept make their own, freed afterwards.
//
// Only what finished cleanly is given back: after any error (out of memory, a timeout, a
// lost device) the transfer's buffer and submission are destroyed as before (the
// submission's destructor waits for work still running, so its buffer outlives the copy).
// The mutex guards the lists only: no buffer is made, and nothing recorded, submitted or
// waited for, while it is held, so transfers on any number of threads still run at once.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "vulkan/memory.hpp"
#include "vulkan/submission.hpp"

namespace vkattn::detail {

class Device;

// Up to N objects, taken and given back by any thread.
template <class T, std::size_t N>
class KeptObjects {
 public:
  // The kept object with the least |cost| (cost(object) >= kUnfit: it cannot serve), or
  // null when none can.
  static constexpr std::uint64_t kUnfit = UINT64_MAX;
  template <class Cost>
  std::unique_ptr<T> take(Cost cost) {
    std::lock_guard lock(mutex_);
    std::unique_ptr<T>* best = nullptr;
    std::uint64_t least = kUnfit;
    for (auto& slot : slots_) {
      if (!slot) continue;
      const std::uint64_t c = cost(*slot);
      if (c < least) {
        least = c;
        best = &slot;
      }
    }
    return best ? std::move(*best) : nullptr;
  }
  // Keeps |object| when a slot is free; otherwise it is destroyed, after the lock is
  // released (a parameter outlives the locals).
  void give(std::unique_ptr<T> object) noexcept {
    std::lock_guard lock(mutex_);
    for (auto& slot : slots_) {
      if (!slot) {
        slot = std::move(object);
        return;
      }
    }
  }

 private:
  std::mutex mutex_;
  std::array<std::unique_ptr<T>, N> slots_;
};

class TransferCache {
 public:
  static constexpr VkDeviceSize kMaxKeptBytes = VkDeviceSize{4} << 20;
  static constexpr VkDeviceSize kMinBytes = VkDeviceSize{64} << 10;

  // A mapped staging buffer of at least |bytes|: the smallest kept one that holds them,
  // else a new one (rounded up to be kept afterwards when |bytes| <= kMaxKeptBytes).
  std::unique_ptr<Buffer> staging(Device& device, VkDeviceSize bytes);
  // A one-time submission ready to record: a kept one, reset, else a new one.
  std::unique_ptr<Submission> submission(Device& device);
  // After a transfer that finished without error: kept when small enough and there is
  // room, else freed.
  void give(std::unique_ptr<Buffer> staging) noexcept;
  void give(std::unique_ptr<Submission> submission) noexcept { submissions_.give(std::move(submission)); }

 private:
  KeptObjects<Buffer, 4> buffers_;
  KeptObjects<Submission, 4> submissions_;
};

}  // namespace vkattn::detail
