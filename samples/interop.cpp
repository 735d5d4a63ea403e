// An engine's view of vkattn: the engine owns the Vulkan instance, device, queue, buffers
// and command buffers (it would run its own matmuls there); vkattn is brought in on that
// device, views the engine's buffers as tensors, and records RoPE, the KV-cache append and
// attention into the engine's command buffer, which the engine submits with its own fence.
// Eight decode steps, each checked against vkattn's CPU backend; exit status 1 if they
// disagree. Usage: vkattn-interop
#include <vulkan/vulkan.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "vkattn/vkattn.hpp"
#include "vkattn/vulkan.hpp"

namespace {

void vk(VkResult r, const char* what) {
  if (r != VK_SUCCESS) throw std::runtime_error(std::string(what) + " failed: VkResult " + std::to_string(r));
}

// The engine: what an application that renders or computes with Vulkan already has.
struct Engine {
  VkInstance instance{};
  VkPhysicalDevice physical{};
  VkDevice device{};
  VkQueue queue{};
  std::uint32_t family = 0;
  VkCommandPool pool{};
  VkFence fence{};
  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue_info{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, nullptr, 0, 0, 1, &priority};
  VkDeviceCreateInfo device_info{
      VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, nullptr, 0, 1, &queue_info, 0, nullptr, 0, nullptr, nullptr};

  Engine() {
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO, nullptr, "engine", 1, nullptr, 0, VK_API_VERSION_1_1};
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, nullptr, 0, &app, 0, nullptr, 0, nullptr};
    vk(vkCreateInstance(&info, nullptr, &instance), "vkCreateInstance");
    std::uint32_t n = 1;
    const VkResult r = vkEnumeratePhysicalDevices(instance, &n, &physical);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) throw std::runtime_error("no Vulkan device");
    std::vector<VkQueueFamilyProperties> families(16);
    n = 16;
    vkGetPhysicalDeviceQueueFamilyProperties(physical, &n, families.data());
    while (family < n && !(families[family].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++family;
    queue_info.queueFamilyIndex = family;
    vk(vkCreateDevice(physical, &device_info, nullptr, &device), "vkCreateDevice");
    vkGetDeviceQueue(device, family, 0, &queue);
    VkCommandPoolCreateInfo p{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, nullptr,
                              VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, family};
    vk(vkCreateCommandPool(device, &p, nullptr, &pool), "vkCreateCommandPool");
    VkFenceCreateInfo f{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, nullptr, 0};
    vk(vkCreateFence(device, &f, nullptr, &fence), "vkCreateFence");
  }
  // Last, after vkattn's backend and tensors (made after the engine, so gone before it):
  // the engine's buffers outlive what wraps them, also when main throws.
  ~Engine() {
    for (const Buffer& b : buffers) {
      vkDestroyBuffer(device, b.buffer, nullptr);
      vkFreeMemory(device, b.memory, nullptr);
    }
    vkDestroyFence(device, fence, nullptr);
    vkDestroyCommandPool(device, pool, nullptr);
    vkDestroyDevice(device, nullptr);
    vkDestroyInstance(instance, nullptr);
  }

  // One host-visible buffer (the engine's activations; a discrete GPU would use
  // device-local memory and copy through staging, as the tests do).
  struct Buffer {
    VkBuffer buffer{};
    VkDeviceMemory memory{};
    float* data = nullptr;
  };
  std::vector<Buffer> buffers;
  Buffer buffer(VkDeviceSize bytes) {
    Buffer& b = buffers.emplace_back();
    VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            nullptr,
                            0,
                            bytes,
                            VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
                            VK_SHARING_MODE_EXCLUSIVE,
                            0,
                            nullptr};
    vk(vkCreateBuffer(device, &info, nullptr, &b.buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device, b.buffer, &req);
    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(physical, &mem);
    const auto want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    std::uint32_t type = 0;
    while (type < mem.memoryTypeCount &&
           (!((req.memoryTypeBits >> type) & 1) || (mem.memoryTypes[type].propertyFlags & want) != want))
      ++type;
    if (type == mem.memoryTypeCount) throw std::runtime_error("no host-visible, coherent memory type for the buffers");
    VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, nullptr, req.size, type};
    vk(vkAllocateMemory(device, &alloc, nullptr, &b.memory), "vkAllocateMemory");
    vk(vkBindBufferMemory(device, b.buffer, b.memory, 0), "vkBindBufferMemory");
    vk(vkMapMemory(device, b.memory, 0, VK_WHOLE_SIZE, 0, reinterpret_cast<void**>(&b.data)), "vkMapMemory");
    return b;
  }
};

constexpr std::size_t kHeads = 8, kKvHeads = 2, kHeadDim = 64, kSteps = 8;

}  // namespace

int main(int argc, char** argv) try {
  if (argc > 1) {  // it takes none: say so rather than run past a mistyped option
    const bool help = std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0;
    if (!help) std::fprintf(stderr, "vkattn-interop: unknown argument %s\n", argv[1]);
    std::fprintf(help ? stdout : stderr, "usage: vkattn-interop (no arguments)\n");
    return help ? 0 : 2;
  }
  Engine engine;
  // vkattn on the engine's device: it destroys none of it, and reads from the create info
  // which optional features the engine enabled (none here).
  vkattn::ExternalVulkan ext{.instance = engine.instance,
                             .physical_device = engine.physical,
                             .device = engine.device,
                             .queue_family_index = engine.family,
                             .queue = engine.queue,
                             .device_create_info = &engine.device_info};
  auto gpu = vkattn::make_backend(ext);
  auto cpu = vkattn::make_backend(vkattn::BackendKind::cpu);  // the reference, for the check
  const vkattn::KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = 64};
  vkattn::KvCache cache = gpu->kv_cache(config), ref_cache = cpu->kv_cache(config);

  // The engine's buffers for one token's Q, K, V and attention output, as vkattn tensors.
  const std::size_t q_n = kHeads * kHeadDim, kv_n = kKvHeads * kHeadDim;
  Engine::Buffer q = engine.buffer(q_n * 4), k = engine.buffer(kv_n * 4), v = engine.buffer(kv_n * 4),
                 out = engine.buffer(q_n * 4);
  vkattn::Tensor tq = vkattn::wrap(*gpu, q.buffer, 0, q_n * 4, {1, kHeads, kHeadDim}, vkattn::DType::f32);
  vkattn::Tensor tk = vkattn::wrap(*gpu, k.buffer, 0, kv_n * 4, {1, kKvHeads, kHeadDim}, vkattn::DType::f32);
  vkattn::Tensor tv = vkattn::wrap(*gpu, v.buffer, 0, kv_n * 4, {1, kKvHeads, kHeadDim}, vkattn::DType::f32);
  vkattn::Tensor tout = vkattn::wrap(*gpu, out.buffer, 0, q_n * 4, {1, kHeads, kHeadDim}, vkattn::DType::f32);

  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  double worst = 0.0;
  for (std::size_t step = 0; step < kSteps; ++step) {
    // The engine's projections would write Q, K, V on the device; here the host does.
    for (std::size_t i = 0; i < q_n; ++i) q.data[i] = normal(rng);
    for (std::size_t i = 0; i < kv_n; ++i) k.data[i] = normal(rng), v.data[i] = normal(rng);
    std::vector<float> qh(q.data, q.data + q_n), kh(k.data, k.data + kv_n), vh(v.data, v.data + kv_n);

    // vkattn records into the engine's command buffer; its exit barrier hands the output
    // to the host (the engine's next op would name its own stage instead).
    const std::vector<std::int32_t> pos = {cache.next_position(0)};
    vkattn::CommandList cmd = gpu->commands();
    cmd.rope(tq, tk, pos);
    cmd.kv_append(cache, tk, tv, pos);
    cmd.attention(tq, cache, tout, {.q_positions = pos});
    VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, nullptr, engine.pool,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    VkCommandBuffer cb;
    vk(vkAllocateCommandBuffers(engine.device, &alloc, &cb), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, nullptr, 0, nullptr};
    vk(vkBeginCommandBuffer(cb, &begin), "vkBeginCommandBuffer");
    cmd.record(cb, {.dst_stage_mask = VK_PIPELINE_STAGE_HOST_BIT, .dst_access_mask = VK_ACCESS_HOST_READ_BIT});
    vk(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO, nullptr, 0, nullptr, nullptr, 1, &cb, 0, nullptr};
    vk(vkResetFences(engine.device, 1, &engine.fence), "vkResetFences");
    vk(vkQueueSubmit(engine.queue, 1, &submit, engine.fence), "vkQueueSubmit");
    vk(vkWaitForFences(engine.device, 1, &engine.fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    vkFreeCommandBuffers(engine.device, engine.pool, 1, &cb);  // done: cmd may go too

    // The same step on the CPU reference.
    vkattn::Tensor rq = cpu->tensor({1, kHeads, kHeadDim}, vkattn::DType::f32);
    vkattn::Tensor rk = cpu->tensor({1, kKvHeads, kHeadDim}, vkattn::DType::f32);
    vkattn::Tensor rv = cpu->tensor({1, kKvHeads, kHeadDim}, vkattn::DType::f32);
    vkattn::Tensor rout = cpu->tensor({1, kHeads, kHeadDim}, vkattn::DType::f32);
    cpu->upload(rq, qh);
    cpu->upload(rk, kh);
    cpu->upload(rv, vh);
    vkattn::CommandList ref = cpu->commands();
    ref.rope(rq, rk, pos);
    ref.kv_append(ref_cache, rk, rv, pos);
    ref.attention(rq, ref_cache, rout, {.q_positions = pos});
    ref.submit_and_wait();
    const std::vector<float> want = cpu->download(rout);
    for (std::size_t i = 0; i < q_n; ++i) worst = std::max(worst, std::fabs(double(out.data[i]) - want[i]));
  }
  std::printf("%zu decode steps recorded into the engine's command buffers on %s; max |vulkan - cpu| = %.2g\n", kSteps,
              gpu->device_name().c_str(), worst);
  return worst <= 1e-4 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "vkattn-interop: %s\n", e.what());
  return 1;
}
