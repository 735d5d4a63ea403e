// Asynchronous submission (CommandList::submit): handles that can be polled and waited on,
// the list's own wait for its last submission,
// downloads that wait for the submission writing the tensor, uploads for the one reading
// it, what a submission uses kept
// alive until it finishes, and chains with the caller's semaphores (timeline and binary)
// on an engine's device, with no wait on the host between the links.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/interop.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kHeads = 4, kHeadDim = 16;

// rope on x at positions 0..n-1, then a copy to y; on |backend|, asynchronously.
struct RopeCopy {
  Tensor x, y;
  CommandList rope, copy;
  RopeCopy(Backend& b, const std::vector<float>& values, std::size_t n)
      : x(b.tensor({n, kHeads, kHeadDim}, DType::f32)), y(b.tensor({n, kHeads, kHeadDim}, DType::f32)), rope(b.commands()),
        copy(b.commands()) {
    b.upload(x, values);
    std::vector<std::int32_t> pos(n);
    for (std::size_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>(1000 * i);
    rope.rope(x, pos);
    copy.copy(x, y);
  }
};

TEST_F(VulkanVsCpuTest, SubmitReturnsAtOnceAndDownloadsWaitForIt) {
  const std::size_t n = 64;
  const auto values = normal(n * kHeads * kHeadDim, 7);
  RopeCopy want(*cpu_, values, n);
  Submitted done = want.rope.submit();
  EXPECT_TRUE(done.ready());  // the CPU backend runs the list before returning
  EXPECT_TRUE(want.copy.submit().wait());
  EXPECT_TRUE(want.copy.wait(0));  // the list's own wait: nothing in flight
  const std::vector<float> expected = cpu_->download(want.y);

  // Two lists in flight on one backend, the second reading what the first writes: queue
  // order and the second's entry barrier order them; the download of y waits for the
  // second, with no wait() called.
  RopeCopy got(*gpu_, values, n);
  Submitted first = got.rope.submit();
  Submitted second = got.copy.submit();
  EXPECT_TRUE(all_close(gpu_->download(got.y), expected, {n, kHeads, kHeadDim}, 1e-5, 1e-5));
  EXPECT_TRUE(first.wait(0));  // the second finished, so the first had
  EXPECT_TRUE(second.ready());
  EXPECT_TRUE(Submitted().ready());
  EXPECT_TRUE(got.copy.wait(0));
  EXPECT_TRUE(gpu_->commands().wait(0));  // never submitted

  // Submitting a list again while it runs waits for the run before; rope on x twice more.
  got.rope.submit();
  got.rope.submit();
  Submitted copied = got.copy.submit();
  EXPECT_TRUE(copied.wait());
  want.rope.submit_and_wait();
  want.rope.submit_and_wait();
  want.copy.submit_and_wait();
  EXPECT_TRUE(all_close(gpu_->download(got.y), cpu_->download(want.y), {n, kHeads, kHeadDim}, 1e-4, 1e-4));
  EXPECT_EQ(got.rope.stats().submits, 3u);
}

TEST_F(VulkanVsCpuTest, WhatASubmissionUsesOutlivesItsHandles) {
  // The tensors and the list go before the submission has finished: the handle keeps what
  // the work reads and writes, and waits for it before letting go (ASan and the
  // validation layer would see a buffer freed under the device).
  const std::size_t n = 256;
  const auto values = normal(n * kHeads * kHeadDim, 8);
  Submitted handle;
  {
    RopeCopy work(*gpu_, values, n);
    work.rope.submit();
    handle = work.copy.submit();
  }
  EXPECT_TRUE(handle.wait());
  Submitted copy = handle;  // handles copy; the last one lets go
  handle = Submitted();
  EXPECT_TRUE(copy.ready());
}

// The host signals |value| on the timeline |semaphore|.
VkResult signal_timeline(Engine& e, VkSemaphore semaphore, std::uint64_t value) {
  auto signal = vk_struct<VkSemaphoreSignalInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO);
  signal.semaphore = semaphore;
  signal.value = value;
  return vkSignalSemaphore(e.device(), &signal);
}

// A copy of |src| into |dst| on |gpu| that cannot run before the host sets an event: the
// engine submits a command buffer that waits for the event and signals 1 on |timeline|,
// which the copy waits for. (Not a host signal of the timeline: vkSignalSemaphore from one
// thread while another waits on the host deadlocks Debian 12's validation layer for its
// 10 s timeout, one run in a few hundred: the signal waits for a lock the waiting thread
// holds while it waits for that signal's record; Vulkan-ValidationLayers issue 4649. An
// event's record is nothing a wait depends on.)
struct GatedCopy {
  Engine& e;
  Tensor src, dst;
  CommandList copy;
  VkSemaphore timeline;
  VkEvent event;
  VkCommandBuffer gate;
  GatedCopy(Backend& gpu, Engine& engine, float value)
      : e(engine), src(gpu.tensor({1, kHeads, kHeadDim}, DType::f32)), dst(gpu.tensor({1, kHeads, kHeadDim}, DType::f32)),
        copy(gpu.commands()), timeline(e.semaphore(true)), event(e.event()), gate(e.begin()) {
    gpu.upload(src, std::vector<float>(kHeads * kHeadDim, value));
    copy.copy(src, dst);
    vkCmdWaitEvents(gate, 1, &event, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, nullptr, 0, nullptr, 0,
                    nullptr);
    if (vkEndCommandBuffer(gate) != VK_SUCCESS) throw std::runtime_error("vkEndCommandBuffer");
  }
  // Submits the gate and the copy.
  Submitted submit() {
    const std::uint64_t signal_value = 1;
    auto values = vk_struct<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    values.signalSemaphoreValueCount = 1;
    values.pSignalSemaphoreValues = &signal_value;
    auto info = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    info.pNext = &values;
    info.commandBufferCount = 1;
    info.pCommandBuffers = &gate;
    info.signalSemaphoreCount = 1;
    info.pSignalSemaphores = &timeline;
    if (vkQueueSubmit(e.queue(), 1, &info, VK_NULL_HANDLE) != VK_SUCCESS) throw std::runtime_error("vkQueueSubmit");
    return copy.submit({.wait = {{timeline, 1}}});
  }
  // A thread that sets the event |after| that much time (joined when it goes, also when a
  // check throws).
  std::jthread open_after(std::chrono::milliseconds after) {
    return std::jthread([this, after] {
      std::this_thread::sleep_for(after);
      vkSetEvent(e.device(), event);
    });
  }
};

// An engine with timeline semaphores (Vulkan 1.2).
class TimelineInterop : public Interop {
 protected:
  void make_engine() override { engine_.emplace(VK_API_VERSION_1_2, true, true); }
};

TEST_F(TimelineInterop, ChainsWithTheEnginesSemaphores) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  auto cpu = make_backend(BackendKind::cpu);
  const std::size_t n = 8;
  const VkDeviceSize bytes = n * kHeads * kHeadDim * 4;
  const auto values = normal(n * kHeads * kHeadDim, 9);
  RopeCopy want(*cpu, values, n);
  want.rope.submit_and_wait();
  want.copy.submit_and_wait();

  EngineBuffer y_buf = e.buffer(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, false);
  EngineBuffer readback = e.buffer(bytes, VK_BUFFER_USAGE_TRANSFER_DST_BIT, true);
  RopeCopy got(*gpu, values, n);
  Tensor y = wrap(*gpu, y_buf.buffer, 0, bytes, {n, kHeads, kHeadDim}, DType::f32);
  CommandList copy = gpu->commands();
  copy.copy(got.x, y);

  // The host starts the chain: rope waits for timeline value 1, the copy for 2 (which rope
  // signals), the engine's readback for the copy's binary semaphore.
  VkSemaphore timeline = e.semaphore(true), binary = e.semaphore(false);
  Submitted roped = got.rope.submit({.wait = {{timeline, 1}}, .signal = {{timeline, 2}}});
  Submitted copied = copy.submit({.wait = {{timeline, 2}}, .signal = {{timeline, 3}, {binary, 0}}});
  EXPECT_FALSE(roped.ready());
  EXPECT_FALSE(copied.wait(1000000));  // 1 ms: it is waiting for the host's signal
  EXPECT_FALSE(copy.wait(1000000));    // the list's own wait, for the same submission
  // (Signalled before the engine submits: lavapipe's vkQueueSubmit blocks on a binary
  // semaphore whose signal is still waiting for a timeline value nobody has signalled.)
  ASSERT_EQ(signal_timeline(e, timeline, 1), VK_SUCCESS);

  VkCommandBuffer cb = e.begin();
  Engine::copy(cb, y_buf, 0, readback, 0, bytes);
  Engine::barrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                  VK_ACCESS_HOST_READ_BIT);
  ASSERT_EQ(vkEndCommandBuffer(cb), VK_SUCCESS);
  const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
  auto submit = vk_struct<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
  submit.waitSemaphoreCount = 1;
  submit.pWaitSemaphores = &binary;
  submit.pWaitDstStageMask = &stage;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cb;
  VkFence fence = e.fence();
  ASSERT_EQ(vkResetFences(e.device(), 1, &fence), VK_SUCCESS);
  ASSERT_EQ(vkQueueSubmit(e.queue(), 1, &submit, fence), VK_SUCCESS);

  ASSERT_EQ(vkWaitForFences(e.device(), 1, &fence, VK_TRUE, UINT64_MAX), VK_SUCCESS);
  std::uint64_t reached = 0;
  ASSERT_EQ(vkGetSemaphoreCounterValue(e.device(), timeline, &reached), VK_SUCCESS);
  EXPECT_EQ(reached, 3u);
  EXPECT_TRUE(copy.wait(0));
  EXPECT_TRUE(roped.ready());
  EXPECT_TRUE(copied.ready());
  std::vector<float> result(n * kHeads * kHeadDim);
  std::memcpy(result.data(), readback.mapped, bytes);
  EXPECT_TRUE(all_close(result, cpu->download(want.y), {n, kHeads, kHeadDim}, 1e-5, 1e-5));
}

TEST_F(Interop, SemaphoresAreCheckedAndNeedTheCallersDevice) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  Tensor x = gpu->tensor({4, 16}, DType::f32), y = gpu->tensor({4, 16}, DType::f32);
  CommandList cmd = gpu->commands();
  expect_invalid([&] { cmd.submit({.signal = {{e.semaphore(false), 0}}}); }, {"submit", "empty list"});
  cmd.copy(x, y);
  expect_invalid(
      [&] {
        cmd.submit({.wait = {{VK_NULL_HANDLE, 0}}});
      },
      {"submit", "semaphores.wait[0].semaphore", "VK_NULL_HANDLE"});
  expect_invalid([&] { cmd.submit({.wait = {{e.semaphore(false), 0, 0}}}); }, {"semaphores.wait[0].stages", "0"});
  expect_invalid([&] { cmd.submit({.signal = {{}, {VK_NULL_HANDLE, 0}}}); }, {"semaphores.signal[0].semaphore"});
  // A value is a timeline semaphore's, which the engine's device did not enable.
  const VkSemaphore binary = e.semaphore(false);
  expect_invalid(
      [&] {
        cmd.submit({.wait = {{binary, 0}}, .signal = {{binary, 0}, {binary, 5}}});
      },
      {"submit: semaphores.signal[1].value = 5; valid: 0 (a binary semaphore)", "timelineSemaphore"});
  expect_invalid([&] { cmd.submit({.wait = {{binary, 3}}}); }, {"semaphores.wait[0].value = 3"});
  EXPECT_EQ(cmd.stats().submits, 0u);

  auto cpu = make_backend(BackendKind::cpu);
  Tensor a = cpu->tensor({4}, DType::f32), b = cpu->tensor({4}, DType::f32);
  CommandList cpu_list = cpu->commands();
  cpu_list.copy(a, b);
  expect_invalid([&] { cpu_list.submit({.signal = {{e.semaphore(false), 0}}}); }, {"submit", "CPU backend"});
  std::string why;
  auto own = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(own, why);
  Tensor c = own->tensor({4}, DType::f32), d = own->tensor({4}, DType::f32);
  CommandList own_list = own->commands();
  own_list.copy(c, d);
  expect_invalid([&] { own_list.submit({.signal = {{e.semaphore(false), 0}}}); }, {"submit", "made its own device"});
  EXPECT_EQ(cpu_list.stats().submits, 0u);
  EXPECT_EQ(own_list.stats().submits, 0u);
  expect_no_validation_messages(*own);
}

// An upload over a tensor that a pending submission reads waits for it (the next token's
// inputs uploaded while a step reading this token's runs): the copy below waits for the
// host's event, set 50 ms later from another thread; an upload that did not
// wait would be what the copy copies.
TEST_F(TimelineInterop, UploadWaitsForASubmissionReadingTheTensor) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  const std::size_t n = kHeads * kHeadDim;
  GatedCopy g(*gpu, e, 1.0f);
  Submitted copied = g.submit();
  std::jthread host = g.open_after(std::chrono::milliseconds(50));
  gpu->upload(g.src, std::vector<float>(n, 2.0f));
  host.join();
  EXPECT_TRUE(copied.ready());
  EXPECT_EQ(gpu->download(g.dst), std::vector<float>(n, 1.0f));
  EXPECT_EQ(gpu->download(g.src), std::vector<float>(n, 2.0f));
}

// The list's wait is for its last submission also after an op recorded since, which starts a
// new encoding while the Submitted handle keeps the old one running: the copy waits for the
// host's event, set 50 ms after the list has been seen waiting.
TEST_F(TimelineInterop, ListWaitsForItsLastSubmissionAfterMoreOps) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  GatedCopy g(*gpu, e, 4.0f);
  Submitted copied = g.submit();
  g.copy.copy(g.src, g.dst);  // recorded while the submission waits for the event
  EXPECT_FALSE(g.copy.wait(1000000));
  std::jthread host = g.open_after(std::chrono::milliseconds(50));
  EXPECT_TRUE(g.copy.wait());
  EXPECT_TRUE(copied.ready());
  host.join();
  EXPECT_EQ(gpu->download(g.dst), std::vector<float>(kHeads * kHeadDim, 4.0f));
}

// A download waits for the submission writing its tensor when the caller dropped the
// Submitted handle (the work runs on; its encoding is the list's): the copy waits for the
// host's event, set 50 ms later from another thread, and the download must see its
// result (it once read the tensor before the copy ran).
TEST_F(TimelineInterop, DownloadWaitsWithTheHandleDropped) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  GatedCopy g(*gpu, e, 3.0f);
  (void)g.submit();  // the handle dropped at once
  std::jthread host = g.open_after(std::chrono::milliseconds(50));
  const std::vector<float> got = gpu->download(g.dst);
  host.join();
  EXPECT_EQ(got, std::vector<float>(kHeads * kHeadDim, 3.0f));
}

}  // namespace
}  // namespace vkattn::test
