#include "vulkan/submission.hpp"

#include <string>

#include "vulkan/check.hpp"
#include "vulkan/device.hpp"

namespace vkattn::detail {

Submission::Submission(Device& device, bool one_time) : device_(device), one_time_(one_time) {
  device_.check_alive();
  try {
    auto pool = vk_struct<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool.flags = one_time ? VK_COMMAND_POOL_CREATE_TRANSIENT_BIT : 0;
    pool.queueFamilyIndex = device_.family();
    VKATTN_VK_CREATE(pool_, device_.fn().vkCreateCommandPool(device_.handle(), &pool, device_.fn().allocator, &pool_));
    auto info = vk_struct<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    info.commandPool = pool_;
    info.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    info.commandBufferCount = 1;
    VKATTN_VK_CREATE(cb_, device_.fn().vkAllocateCommandBuffers(device_.handle(), &info, &cb_));
    auto fence = vk_struct<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    VKATTN_VK_CREATE(fence_, device_.fn().vkCreateFence(device_.handle(), &fence, device_.fn().allocator, &fence_));
  } catch (...) {
    release();
    throw;
  }
}

Submission::~Submission() { release(); }

void Submission::release() noexcept {
  VkDevice dev = device_.handle();
  // A lost device answers at once; a hung one is lost after the driver's watchdog. Out of
  // memory means the wait did not wait: the pool and what the work reads must outlive it.
  VkResult r = VK_SUCCESS;
  do {
    if (pending_) r = device_.fn().vkWaitForFences(dev, 1, &fence_, VK_TRUE, UINT64_MAX);
  } while (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY);
  if (fence_) device_.fn().vkDestroyFence(dev, fence_, device_.fn().allocator);
  if (pool_) device_.fn().vkDestroyCommandPool(dev, pool_, device_.fn().allocator);  // frees cb_
  fence_ = VK_NULL_HANDLE;
  pool_ = VK_NULL_HANDLE;
  cb_ = VK_NULL_HANDLE;
}

VkCommandBuffer Submission::begin() {
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  if (one_time_) begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VKATTN_VK_CHECK(device_.fn().vkBeginCommandBuffer(cb_, &begin));
  return cb_;
}

void Submission::reset() {
  device_.check_alive();
  VKATTN_VK_CHECK(device_.fn().vkResetCommandPool(device_.handle(), pool_, 0));
}

void Submission::end() { VKATTN_VK_CHECK(device_.fn().vkEndCommandBuffer(cb_)); }

namespace {
Error timeout_error(std::uint32_t timeout_ms) {
  return Error(ErrorCode::timeout,
               "submission did not finish within " + std::to_string(timeout_ms) +
                   " ms (DeviceOptions::submit_timeout_ms); it keeps running",
               "vkWaitForFences", VK_TIMEOUT, current_op());
}
}  // namespace

void Submission::finish(std::uint32_t timeout_ms) {
  if (!wait(submitted_, std::uint64_t{timeout_ms} * 1000000u)) throw timeout_error(timeout_ms);
}

void Submission::submit_and_wait(std::uint32_t timeout_ms) {
  const std::uint64_t number = submit(timeout_ms, nullptr);
  if (!wait(number, std::uint64_t{timeout_ms} * 1000000u)) throw timeout_error(timeout_ms);
}

std::uint64_t Submission::submit(std::uint32_t timeout_ms, const SemaphoreSync* sync) {
  if (pending_ && !wait(submitted_, std::uint64_t{timeout_ms} * 1000000u)) throw timeout_error(timeout_ms);
  // The last submission finished: other waiters on its fence return at once.
  std::unique_lock guard(lock_);
  no_waiters_.wait(guard, [&] { return waiters_ == 0; });
  VKATTN_VK_CHECK(device_.fn().vkResetFences(device_.handle(), 1, &fence_));
  device_.submit(cb_, fence_, sync);
  pending_ = true;
  return ++submitted_;
}

bool Submission::finished(std::uint64_t number) {
  const std::lock_guard guard(lock_);
  if (number < submitted_ || !pending_) return true;  // a later one was submitted after it ended
  if (!device_.signalled(fence_)) return false;
  pending_ = false;
  return true;
}

bool Submission::wait(std::uint64_t number, std::uint64_t timeout_ns) {
  std::unique_lock guard(lock_);
  if (number < submitted_ || !pending_) return true;
  // Waiting outside the lock (other threads may ask meanwhile); the fence stays this
  // submission's until the waiters are gone.
  ++waiters_;
  struct Leave {
    Submission& s;
    std::unique_lock<std::mutex>& guard;
    ~Leave() {
      if (!guard.owns_lock()) guard.lock();
      if (--s.waiters_ == 0) s.no_waiters_.notify_all();
    }
  } leave{*this, guard};
  guard.unlock();
  const bool done = device_.wait(fence_, timeout_ns) != VK_TIMEOUT;
  guard.lock();
  if (done) pending_ = false;
  return done;
}

}  // namespace vkattn::detail
