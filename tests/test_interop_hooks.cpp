// ExternalVulkan's hooks for engines that manage host memory and load Vulkan themselves:
// every object vkattn makes on the engine's device is allocated through the engine's
// VkAllocationCallbacks and given back through them, and every Vulkan command vkattn
// calls comes from the engine's vkGetInstanceProcAddr (as volk or a loader of its own
// would hand it over). Results match the CPU backend and the validation layer, which
// checks that objects are destroyed with the callbacks they were created with, reports
// nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/interop.hpp"
#include "support/random.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {
namespace {

// Host allocations through callbacks, counted; each remembers its size for reallocation.
struct CountingAllocator {
  std::mutex mutex;
  std::map<void*, std::size_t> live;
  std::size_t total = 0;

  static void* VKAPI_CALL allocate(void* user, std::size_t size, std::size_t alignment, VkSystemAllocationScope) {
    auto& self = *static_cast<CountingAllocator*>(user);
    const std::size_t align = std::max<std::size_t>(alignment, alignof(std::max_align_t));
    void* p = std::aligned_alloc(align, (std::max<std::size_t>(size, 1) + align - 1) / align * align);
    if (!p) return nullptr;
    std::lock_guard lock(self.mutex);
    self.live[p] = size;
    ++self.total;
    return p;
  }
  static void* VKAPI_CALL reallocate(void* user, void* original, std::size_t size, std::size_t alignment,
                                     VkSystemAllocationScope scope) {
    auto& self = *static_cast<CountingAllocator*>(user);
    if (!original) return allocate(user, size, alignment, scope);
    if (size == 0) {
      release(user, original);
      return nullptr;
    }
    void* p = allocate(user, size, alignment, scope);
    if (!p) return nullptr;
    std::size_t old = 0;
    {
      std::lock_guard lock(self.mutex);
      old = self.live.at(original);
    }
    std::memcpy(p, original, std::min(old, size));
    release(user, original);
    return p;
  }
  static void VKAPI_CALL release(void* user, void* memory) {
    if (!memory) return;
    auto& self = *static_cast<CountingAllocator*>(user);
    {
      std::lock_guard lock(self.mutex);
      self.live.erase(memory);
    }
    std::free(memory);
  }
  VkAllocationCallbacks callbacks() {
    VkAllocationCallbacks c{};
    c.pUserData = this;
    c.pfnAllocation = &allocate;
    c.pfnReallocation = &reallocate;
    c.pfnFree = &release;
    return c;
  }
  std::size_t outstanding() {
    std::lock_guard lock(mutex);
    return live.size();
  }
};

// RoPE, kv_append and attention over a 2-token chunk on |gpu| and the CPU backend.
void expect_chunk_matches_cpu(Backend& gpu) {
  auto cpu = make_backend(BackendKind::cpu);
  std::vector<std::vector<float>> outs;
  for (Backend* b : {&gpu, cpu.get()}) {
    const std::vector<std::int32_t> pos{0, 1};
    KvCache cache = b->kv_cache({.n_kv_heads = 2, .head_dim = 32, .capacity = 8});
    Tensor q = b->tensor({2, 4, 32}, DType::f32), k = b->tensor({2, 2, 32}, DType::f32);
    Tensor v = b->tensor({2, 2, 32}, DType::f32), out = b->tensor({2, 4, 32}, DType::f32);
    b->upload(q, normal(2 * 4 * 32, 1));
    b->upload(k, normal(2 * 2 * 32, 2));
    b->upload(v, normal(2 * 2 * 32, 3));
    CommandList cmd = b->commands();
    cmd.rope(q, k, pos);
    cmd.kv_append(cache, k, v, pos);
    cmd.attention(q, cache, out, {.q_positions = pos});
    cmd.submit_and_wait();
    outs.push_back(b->download(out));
  }
  EXPECT_TRUE(all_close(outs[0], outs[1], {2, 4, 32}, 2e-3, 2e-3));
}

TEST_F(Interop, DeviceObjectsUseTheEnginesAllocator) {
  CountingAllocator counter;
  const VkAllocationCallbacks callbacks = counter.callbacks();
  {
    ExternalVulkan v = external(engine());
    v.allocator = &callbacks;
    auto gpu = make_backend(v, interop_options());
    expect_chunk_matches_cpu(*gpu);
    // Buffers, memory, pipelines, descriptor and command pools, fences: all through it.
    EXPECT_GT(counter.total, 10u);
    EXPECT_GT(counter.outstanding(), 0u) << "the backend's pipelines and buffers hold allocations";
  }
  EXPECT_EQ(counter.outstanding(), 0u) << "allocations not given back when the backend went";
}

// What a loader hands out, with every lookup counted and vkCmdDispatch interposed.
struct Spy {
  static inline std::atomic<int> lookups{0}, dispatches{0};
  static inline PFN_vkGetDeviceProcAddr device_proc_addr = nullptr;
  static inline PFN_vkCmdDispatch dispatch = nullptr;
  static inline const char* withheld = "";  // a command the loader "lacks"

  static VKAPI_ATTR void VKAPI_CALL cmd_dispatch(VkCommandBuffer cb, std::uint32_t x, std::uint32_t y, std::uint32_t z) {
    ++dispatches;
    dispatch(cb, x, y, z);
  }
  static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL get_device(VkDevice device, const char* name) {
    ++lookups;
    if (std::strcmp(name, withheld) == 0) return nullptr;
    PFN_vkVoidFunction f = device_proc_addr(device, name);
    if (std::strcmp(name, "vkCmdDispatch") == 0) {
      dispatch = reinterpret_cast<PFN_vkCmdDispatch>(f);
      return reinterpret_cast<PFN_vkVoidFunction>(&cmd_dispatch);
    }
    return f;
  }
  static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL get_instance(VkInstance instance, const char* name) {
    ++lookups;
    if (std::strcmp(name, withheld) == 0) return nullptr;
    if (std::strcmp(name, "vkGetDeviceProcAddr") == 0) {
      device_proc_addr = reinterpret_cast<PFN_vkGetDeviceProcAddr>(vkGetInstanceProcAddr(instance, name));
      return reinterpret_cast<PFN_vkVoidFunction>(&get_device);
    }
    return vkGetInstanceProcAddr(instance, name);
  }
};

TEST_F(Interop, CommandsComeFromTheEnginesLoader) {
  Spy::lookups = 0;
  Spy::dispatches = 0;
  Spy::withheld = "";
  ExternalVulkan v = external(engine());
  v.get_instance_proc_addr = &Spy::get_instance;
  auto gpu = make_backend(v, interop_options());
  EXPECT_GT(Spy::lookups.load(), 40) << "instance and device commands looked up through the engine's loader";
  expect_chunk_matches_cpu(*gpu);
  EXPECT_GT(Spy::dispatches.load(), 0);
  // Exactly the list's dispatches, recorded into the engine's command buffer too.
  Tensor x = gpu->tensor({64}, DType::f32), y = gpu->tensor({64}, DType::f32);
  CommandList cmd = gpu->commands();
  cmd.copy(x, y);
  cmd.copy(y, x);
  const int before = Spy::dispatches.load();
  VkCommandBuffer cb = engine().begin();
  cmd.record(cb);
  engine().submit_and_wait(cb);
  EXPECT_EQ(Spy::dispatches.load() - before, static_cast<int>(cmd.stats().ops));
}

TEST_F(Interop, ALoaderLackingACommandIsRefusedByName) {
  Spy::withheld = "vkCreateComputePipelines";
  ExternalVulkan v = external(engine());
  v.get_instance_proc_addr = &Spy::get_instance;
  try {
    auto gpu = make_backend(v, interop_options());
    ADD_FAILURE() << "a backend without vkCreateComputePipelines";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("vkCreateComputePipelines"), std::string::npos) << e.what();
  }
  Spy::withheld = "";
}

}  // namespace
}  // namespace vkattn::test
