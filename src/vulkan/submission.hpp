// A command buffer from a command pool of its own, with a fence for its submissions.
// Vulkan requires a command pool, with every command buffer allocated from it, to be used
// by one thread at a time: a pool per command list (and per one-shot transfer, kept for
// later transfers by TransferCache) lets threads record at once with no lock. Only the
// queue is shared (Device::submit).
#pragma once

#include <vulkan/vulkan.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace vkattn::detail {

class Device;
struct SemaphoreSync;

class Submission {
 public:
  // |one_time|: recorded once, submitted once (a transfer); else resubmittable.
  Submission(Device& device, bool one_time);
  // Waits for work still running after a timeout before freeing what it uses.
  ~Submission();
  Submission(const Submission&) = delete;
  Submission& operator=(const Submission&) = delete;

  // Begins recording; returns the command buffer.
  VkCommandBuffer begin();
  // Makes a one-time submission recordable again (its command pool reset; submit resets
  // the fence), so that a transfer reuses it instead of making a pool and a fence. Only
  // after submit_and_wait returned: nothing of it may still run. Error(device_lost) once
  // the device is lost.
  void reset();
  void end();
  // Submits and waits up to |timeout_ms|. Error(timeout) leaves the work running: the
  // next submit and the destructor wait for it first. Error(device_lost) sticks to the
  // device (Device::check_alive).
  void submit_and_wait(std::uint32_t timeout_ms);
  // Submits without waiting, after waiting up to |timeout_ms| for an earlier submission to
  // finish (the command buffer is not simultaneous-use); returns the submission's number
  // (1, 2, ...). Error(timeout) when the earlier one does not finish: nothing submitted.
  std::uint64_t submit(std::uint32_t timeout_ms, const SemaphoreSync* sync);
  // Whether submission |number| has finished; waits up to |timeout_ns| for it.
  // Any thread may ask (a download waiting for the submission writing its tensor, a copy
  // of a Submitted handle), also while the list's thread submits again.
  bool finished(std::uint64_t number);
  bool wait(std::uint64_t number, std::uint64_t timeout_ns);
  // Waits for submission |number| however long it takes: for work whose effect the caller
  // must not report as failed (a hung device is lost after the driver's watchdog, which
  // throws Error(device_lost) here).
  void wait_out(std::uint64_t number) {
    while (!wait(number, UINT64_MAX)) {
    }
  }
  std::uint64_t submitted() const { return submitted_; }  // the last submission's number
  // Waits up to |timeout_ms| for the last submission (none running: at once), so that
  // what it reads may be rewritten; Error(timeout) when it does not finish.
  void finish(std::uint32_t timeout_ms);

 private:
  void release() noexcept;
  Device& device_;
  bool one_time_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  // Submitted, not yet seen finished; submissions made. Written under |lock_|, by the
  // list's thread (and pending_ by any waiter that sees the work finish).
  std::atomic<bool> pending_ = false;
  std::atomic<std::uint64_t> submitted_ = 0;
  // Threads waiting on the fence outside the lock: a submission resets the fence only
  // once none is (Vulkan: a fence being reset is used by no other command), so that no
  // waiter sees the next submission's fence and takes it for its own.
  std::mutex lock_;
  std::condition_variable no_waiters_;
  std::uint32_t waiters_ = 0;
};

}  // namespace vkattn::detail
