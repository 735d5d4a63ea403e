// Bring your own Vulkan (vkattn/vulkan.hpp): a backend on the caller's instance, device and
// queue; tensors on the caller's buffers; lists recorded into the caller's command buffers.
#include <cstring>
#include <new>
#include <string>
#include <tuple>

#include "common/heap_ledger.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/shape_math.hpp"
#include "common/validate.hpp"
#include "vkattn/vulkan.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn {

namespace detail {

namespace {

constexpr const char* kSizeControl = "VK_EXT_subgroup_size_control";
constexpr const char* kMemoryBudget = "VK_EXT_memory_budget";

// What the caller enabled of what vkattn may use, from the device's create info.
struct Enabled {
  bool size_control = false;  // the extension and both of its features
  bool memory_budget = false;
  // What the matrix kernels need besides size control: the extension with its feature,
  // f16 arithmetic and the Vulkan memory model (cooperative-matrix SPIR-V declares both)
  // with device scope (with the model enabled, every module's device-scope atomics, the
  // other kernels' too, need vulkanMemoryModelDeviceScope).
  bool coopmat = false, shader_float16 = false, memory_model = false;
  // Whether a create info was given, and the timelineSemaphore feature in it: without,
  // a semaphore value is invalid usage (SubmitSemaphores).
  bool known = false, timeline = false;
};

// The features in |info|'s chain, as either their own structures or Vulkan 1.2's and 1.3's
// (|size_core|: size control through Vulkan 1.3's, which needs no extension name).
void enabled_features(const VkDeviceCreateInfo* info, bool& size_features, bool& size_core, Enabled& out) {
  for (auto* s = static_cast<const VkBaseInStructure*>(info->pNext); s; s = s->pNext) {
    if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT) {
      const auto* f = reinterpret_cast<const VkPhysicalDeviceSubgroupSizeControlFeaturesEXT*>(s);
      size_features = size_features || (f->subgroupSizeControl && f->computeFullSubgroups);
    } else if (s->sType == kCoopmatFeaturesType) {
      out.coopmat = out.coopmat || reinterpret_cast<const CoopmatFeatures*>(s)->cooperativeMatrix;
    } else if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES) {
      out.shader_float16 =
          out.shader_float16 || reinterpret_cast<const VkPhysicalDeviceShaderFloat16Int8Features*>(s)->shaderFloat16;
    } else if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES) {
      const auto* f = reinterpret_cast<const VkPhysicalDeviceVulkanMemoryModelFeatures*>(s);
      out.memory_model = out.memory_model || (f->vulkanMemoryModel && f->vulkanMemoryModelDeviceScope);
    } else if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES) {
      out.timeline = out.timeline || reinterpret_cast<const VkPhysicalDeviceTimelineSemaphoreFeatures*>(s)->timelineSemaphore;
    } else if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES) {
      const auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan12Features*>(s);
      out.shader_float16 = out.shader_float16 || f->shaderFloat16;
      out.memory_model = out.memory_model || (f->vulkanMemoryModel && f->vulkanMemoryModelDeviceScope);
      out.timeline = out.timeline || f->timelineSemaphore;
    }
#ifdef VK_API_VERSION_1_3
    if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES) {
      const auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan13Features*>(s);
      size_core = size_core || (f->subgroupSizeControl && f->computeFullSubgroups);
    }
#endif
  }
}

Enabled parse_enabled(const VkDeviceCreateInfo* info) {
  Enabled out;
  if (!info) return out;
  out.known = true;
  bool size_ext = false, coopmat_ext = false;
  for (std::uint32_t i = 0; i < info->enabledExtensionCount; ++i) {
    const char* name = info->ppEnabledExtensionNames[i];
    size_ext = size_ext || std::strcmp(name, kSizeControl) == 0;
    out.memory_budget = out.memory_budget || std::strcmp(name, kMemoryBudget) == 0;
    coopmat_ext = coopmat_ext || std::strcmp(name, kCoopmatExtension) == 0;
  }
  bool size_features = false, size_core = false;
  enabled_features(info, size_features, size_core, out);
  // A device of Vulkan 1.3 has size control in its core: a 1.3 engine enables the features
  // through Vulkan13Features and seldom lists the promoted extension.
  out.size_control = (size_ext && size_features) || size_core;
  out.coopmat = out.coopmat && coopmat_ext;
  return out;
}

Enabled enabled_in(const VkDeviceCreateInfo* info, std::uint32_t family) {
  if (!info) return {};
  bool has_family = false;
  for (std::uint32_t i = 0; i < info->queueCreateInfoCount; ++i) {
    has_family = has_family || info->pQueueCreateInfos[i].queueFamilyIndex == family;
  }
  if (!has_family) {
    throw InvalidArgument("create backend", "ExternalVulkan::queue_family_index", std::to_string(family),
                          "a queue family of ExternalVulkan::device_create_info->pQueueCreateInfos");
  }
  return parse_enabled(info);
}

std::string lacks_for_matrix(const Enabled& enabled) {
  std::string lacks;
  const auto lack = [&](bool ok, const char* what) {
    if (!ok) lacks += (lacks.empty() ? "" : ", ") + std::string(what);
  };
  lack(enabled.coopmat, "VK_KHR_cooperative_matrix with cooperativeMatrix");
  lack(enabled.shader_float16, "shaderFloat16");
  lack(enabled.memory_model, "vulkanMemoryModel with vulkanMemoryModelDeviceScope");
  lack(enabled.size_control, "VK_EXT_subgroup_size_control with subgroupSizeControl and computeFullSubgroups");
  return lacks;
}

// The physical device as vkattn sees it, with only what the caller enabled counted in.
PhysicalDevice external_physical(const Instance& instance, const ExternalVulkan& v, const Enabled& enabled) {
  const VulkanFunctions& fn = instance.fn();
  // The extension is queried only where the caller enabled it: vkattn cannot tell which
  // validation layer the caller's instance runs, and one older than the extension reports
  // its structures as errors to the caller.
  PhysicalDevice p = probe_device(fn, v.physical_device, 0, v.api_version,
                                  enabled.coopmat && coopmat_query_allowed(instance.validation_layer_version()));
  if (!p.info.rejected.empty()) {
    throw Error(ErrorCode::unsupported, "ExternalVulkan::physical_device (" + p.info.name + ") " + p.info.rejected,
                "vkGetPhysicalDeviceProperties", 0, current_op());
  }
  std::uint32_t n = 0;
  fn.vkGetPhysicalDeviceQueueFamilyProperties(v.physical_device, &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  fn.vkGetPhysicalDeviceQueueFamilyProperties(v.physical_device, &n, families.data());
  if (v.queue_family_index >= n) {
    throw InvalidArgument("create backend", "ExternalVulkan::queue_family_index", std::to_string(v.queue_family_index),
                          "[0, " + std::to_string(n) + ") (the device's queue families)");
  }
  const VkQueueFamilyProperties& family = families[v.queue_family_index];
  if (!(family.queueFlags & VK_QUEUE_COMPUTE_BIT)) {
    throw Error(ErrorCode::unsupported,
                "queue family " + std::to_string(v.queue_family_index) + " lacks VK_QUEUE_COMPUTE_BIT, which vkattn requires",
                "vkGetPhysicalDeviceQueueFamilyProperties", 0, current_op());
  }
  p.compute_family = v.queue_family_index;
  p.info.limits.timestamps = family.timestampValidBits > 0 && p.info.limits.timestamp_period_ns > 0.0;
  DeviceLimits& lim = p.info.limits;
  if (!(enabled.size_control && p.subgroup_size_control)) {
    p.subgroup_size_control = false;
    lim.subgroup_size_control = false;
    lim.subgroup_min_size = lim.subgroup_max_size = lim.subgroup_size;
  }
  p.memory_budget = p.memory_budget && enabled.memory_budget;
  p.pipeline_stats = false;
  // The matrix kernels run on the caller's device only where its create info enabled all
  // they need: vkattn cannot enable anything on a device it did not create.
  p.coopmat.caller_lacks = lacks_for_matrix(enabled);
  return p;
}

void check_handles(const ExternalVulkan& v) {
  auto null = [](const char* field, const char* type) {
    return InvalidArgument("create backend", std::string("ExternalVulkan::") + field, "VK_NULL_HANDLE",
                           std::string("the caller's ") + type);
  };
  if (v.instance == VK_NULL_HANDLE) throw null("instance", "VkInstance");
  if (v.physical_device == VK_NULL_HANDLE) throw null("physical_device", "VkPhysicalDevice");
  if (v.device == VK_NULL_HANDLE) throw null("device", "VkDevice");
  if (v.queue == VK_NULL_HANDLE) throw null("queue", "VkQueue of queue_family_index");
  if (v.api_version < VK_API_VERSION_1_1) {
    throw Error(ErrorCode::unsupported,
                "ExternalVulkan::api_version = " + api_version_string(v.api_version, false) +
                    ": vkattn needs an instance created with Vulkan 1.1 or later (VkApplicationInfo::apiVersion)",
                "VkApplicationInfo::apiVersion", 0, current_op());
  }
}

// Every bit VkPipelineStageFlagBits and VkAccessFlagBits define (Vulkan 1.0 and the
// extensions' bits; newer stages and accesses exist only in the 64-bit *2 flags).
constexpr std::uint32_t kStageBits = 0x03FFFFFF, kAccessBits = 0x0FFFFFFF;
// The stages ALL_GRAPHICS stands for: the core ones, and conditional rendering, task and
// mesh shaders, the shading rate attachment, fragment density and transform feedback.
constexpr VkPipelineStageFlags kGraphicsStages = 0x000007FE | 0x01DC0000;
constexpr VkPipelineStageFlags kShaderStages =
    VK_PIPELINE_STAGE_VERTEX_SHADER_BIT | VK_PIPELINE_STAGE_TESSELLATION_CONTROL_SHADER_BIT |
    VK_PIPELINE_STAGE_TESSELLATION_EVALUATION_SHADER_BIT | VK_PIPELINE_STAGE_GEOMETRY_SHADER_BIT |
    VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | 0x00380000;  // task, mesh, ray tracing
constexpr VkPipelineStageFlags kBuild = 0x02000000;  // ACCELERATION_STRUCTURE_BUILD_BIT_KHR

// Vulkan's table of the stages that perform each core access (extension accesses are
// left to the validation layer): a barrier naming an access none of its stages performs
// is invalid, and drivers may do anything with it.
struct AccessStages {
  VkAccessFlags access;
  const char* name;
  VkPipelineStageFlags stages;
  const char* stage_names;
};
constexpr AccessStages kAccessStages[] = {
    {VK_ACCESS_INDIRECT_COMMAND_READ_BIT, "INDIRECT_COMMAND_READ", VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT | kBuild, "DRAW_INDIRECT"},
    {VK_ACCESS_INDEX_READ_BIT, "INDEX_READ", VK_PIPELINE_STAGE_VERTEX_INPUT_BIT, "VERTEX_INPUT"},
    {VK_ACCESS_VERTEX_ATTRIBUTE_READ_BIT, "VERTEX_ATTRIBUTE_READ", VK_PIPELINE_STAGE_VERTEX_INPUT_BIT, "VERTEX_INPUT"},
    {VK_ACCESS_UNIFORM_READ_BIT, "UNIFORM_READ", kShaderStages, "a shader stage"},
    {VK_ACCESS_INPUT_ATTACHMENT_READ_BIT, "INPUT_ATTACHMENT_READ", VK_PIPELINE_STAGE_FRAGMENT_SHADER_BIT, "FRAGMENT_SHADER"},
    {VK_ACCESS_SHADER_READ_BIT, "SHADER_READ", kShaderStages | kBuild, "a shader stage"},
    {VK_ACCESS_SHADER_WRITE_BIT, "SHADER_WRITE", kShaderStages, "a shader stage"},
    {VK_ACCESS_COLOR_ATTACHMENT_READ_BIT, "COLOR_ATTACHMENT_READ", VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
     "COLOR_ATTACHMENT_OUTPUT"},
    {VK_ACCESS_COLOR_ATTACHMENT_WRITE_BIT, "COLOR_ATTACHMENT_WRITE", VK_PIPELINE_STAGE_COLOR_ATTACHMENT_OUTPUT_BIT,
     "COLOR_ATTACHMENT_OUTPUT"},
    {VK_ACCESS_DEPTH_STENCIL_ATTACHMENT_READ_BIT, "DEPTH_STENCIL_ATTACHMENT_READ",
     VK_PIPELINE_STAGE_EARLY_FRAGMENT_TESTS_BIT | VK_PIPELINE_STAGE_LATE_FRAGMENT_TESTS_BIT, "EARLY or LATE_FRAGMENT_TESTS"},
    {VK_ACCESS_DEPTH_STENCIL_ATTACHMENT_WRITE_BIT, "DEPTH_STENCIL_ATTACHMENT_WRITE",
     VK_PIPELINE_STAGE_EARLY_FRAGMENT_TESTS_BIT | VK_PIPELINE_STAGE_LATE_FRAGMENT_TESTS_BIT, "EARLY or LATE_FRAGMENT_TESTS"},
    {VK_ACCESS_TRANSFER_READ_BIT, "TRANSFER_READ", VK_PIPELINE_STAGE_TRANSFER_BIT | kBuild, "TRANSFER"},
    {VK_ACCESS_TRANSFER_WRITE_BIT, "TRANSFER_WRITE", VK_PIPELINE_STAGE_TRANSFER_BIT | kBuild, "TRANSFER"},
    {VK_ACCESS_HOST_READ_BIT, "HOST_READ", VK_PIPELINE_STAGE_HOST_BIT, "HOST"},
    {VK_ACCESS_HOST_WRITE_BIT, "HOST_WRITE", VK_PIPELINE_STAGE_HOST_BIT, "HOST"},
};

void check_stage_mask(const char* op, const std::string& param, std::uint32_t stages) {
  if ((stages & ~kStageBits) != 0) {
    throw InvalidArgument(op, param, hex_string(stages), "VkPipelineStageFlagBits (no bit above 0x2000000)");
  }
}

void check_exit_barrier(const RecordOptions& options) {
  if (!options.exit_barrier) return;
  const std::uint32_t stages = options.dst_stage_mask, access = options.dst_access_mask;
  check_stage_mask("record", "options.dst_stage_mask", stages);
  if ((access & ~kAccessBits) != 0) {
    throw InvalidArgument("record", "options.dst_access_mask", hex_string(access), "VkAccessFlagBits (no bit above 0x8000000)");
  }
  if (stages == 0 || (stages & VK_PIPELINE_STAGE_ALL_COMMANDS_BIT) != 0) return;  // every stage
  const VkPipelineStageFlags expanded = stages | ((stages & VK_PIPELINE_STAGE_ALL_GRAPHICS_BIT) != 0 ? kGraphicsStages : 0);
  for (const AccessStages& a : kAccessStages) {
    if ((access & a.access) != 0 && (expanded & a.stages) == 0) {
      throw InvalidArgument("record", "options.dst_access_mask", hex_string(access) + " (with VK_ACCESS_" + a.name + "_BIT)",
                            std::string("accesses that the stages of options.dst_stage_mask = ") + hex_string(stages) +
                                " perform (" + a.name + " needs " + a.stage_names + ")");
    }
  }
}

}  // namespace

std::string matrix_features_lacking(const VkDeviceCreateInfo* info) { return lacks_for_matrix(parse_enabled(info)); }

std::unique_ptr<Device> Device::adopt(const PhysicalDevice& physical, VkDevice device, VkQueue queue,
                                      const VkAllocationCallbacks* allocator, std::uint64_t local_heap_cap) {
  std::unique_ptr<Device> self(new Device());
  self->owned_ = false;
  self->fn_ = physical.functions->with_device(device);
  self->fn_.allocator = allocator;
  self->physical_ = physical.handle;
  self->device_ = device;
  self->queue_ = queue;
  self->family_ = physical.compute_family;
  self->memory_budget_ = physical.memory_budget;
  self->count_heaps(local_heap_cap);
  return self;
}

VulkanTensor::VulkanTensor(std::shared_ptr<Context> ctx, const Shape& shape_, DType dtype_, std::unique_ptr<Buffer> borrowed)
    : TensorImpl(ctx.get(), shape_, dtype_), context(std::move(ctx)), buffer(std::move(borrowed)) {}

// A tensor's own buffer is its alone; views share a caller's. The bytes a kernel may touch
// are the tensor's words rounded up to 16 (a vec4 at its end), as wrap requires of a view.
bool VulkanTensor::overlaps(const TensorImpl& other) const {
  const auto* o = dynamic_cast<const VulkanTensor*>(&other);
  if (!o || o == this || !buffer || !o->buffer || buffer->handle() != o->buffer->handle()) return false;
  const auto bytes = [](const VulkanTensor& t) { return (VkDeviceSize{t.words} * 4 + 15) / 16 * 16; };
  const VkDeviceSize a = buffer->offset(), c = o->buffer->offset();
  return a < c + bytes(*o) && c < a + bytes(*this);
}

void CommandListImpl::record_into(void*, const RecordOptions&) {
  throw InvalidArgument("record", "this", "a list of the CPU backend",
                        "a list of a Vulkan backend on the caller's device (make_backend(ExternalVulkan))");
}

}  // namespace detail

VulkanRequirements vulkan_requirements() try {
  VulkanRequirements r;
  r.optional_extensions = {detail::kSizeControl, detail::kMemoryBudget, detail::kCoopmatExtension};
  r.optional_features = {"subgroupSizeControl", "computeFullSubgroups", "cooperativeMatrix",
                         "shaderFloat16",       "vulkanMemoryModel",    "vulkanMemoryModelDeviceScope"};
  return r;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("vulkan_requirements");
}

std::unique_ptr<Backend> make_backend(const ExternalVulkan& vulkan, const DeviceOptions& options) try {
  using namespace detail;
  OpScope scope("create backend");
  check_device_options(options, "create backend");
  check_handles(vulkan);
  const Enabled enabled = enabled_in(vulkan.device_create_info, vulkan.queue_family_index);
  auto ctx = std::make_shared<Context>();
  ctx->external = true;
  ctx->timeline_semaphores = !enabled.known || enabled.timeline;
  ctx->log = std::make_shared<Logger>(options);
  ctx->instance = Instance::adopt(vulkan.instance, vulkan.api_version, vulkan.get_instance_proc_addr);
  ctx->physical = external_physical(*ctx->instance, vulkan, enabled);
  choose_matrix_path(ctx->physical, matrix_units_wanted(options));
  plan_context(*ctx, options);
  ctx->device = Device::adopt(ctx->physical, vulkan.device, vulkan.queue, vulkan.allocator,
                              options.cap_limits ? options.cap_limits->device_local_bytes : 0);
  if (vulkan.pipeline_cache != VK_NULL_HANDLE) {
    ctx->pipelines = std::make_unique<PipelineCache>(*ctx->device, vulkan.pipeline_cache, ctx->log);
  } else {
    const std::string dir = options.pipeline_cache_dir ? *options.pipeline_cache_dir : default_pipeline_cache_dir();
    ctx->pipelines = std::make_unique<PipelineCache>(*ctx->device, ctx->physical, dir, ctx->log);
  }
  check_matrix_units(ctx);
  ctx->log->log(LogLevel::info, "device: " + ctx->physical.info.name + " (the caller's), queue family " +
                                    std::to_string(vulkan.queue_family_index) +
                                    (ctx->physical.subgroup_size_control ? "; subgroup size control enabled" : "") +
                                    (ctx->physical.memory_budget ? "; memory budget enabled" : ""));
  return make_vulkan_backend(std::move(ctx));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("create backend");
}

Tensor wrap(Backend& backend, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size_bytes, const Shape& shape,
            DType dtype) try {
  using namespace detail;
  const char* op = "wrap";
  OpScope scope(op);
  auto ctx = context_of(backend);
  if (!ctx || !ctx->external) {
    throw InvalidArgument(op, "backend", ctx ? "a backend that made its own device" : "the CPU backend",
                          "a backend on the caller's device (make_backend(ExternalVulkan))");
  }
  ctx->device->check_alive();
  if (buffer == VK_NULL_HANDLE) throw InvalidArgument(op, "buffer", "VK_NULL_HANDLE", "a VkBuffer of the backend's device");
  check_new_tensor(op, shape, dtype);
  const DeviceLimits& lim = ctx->limits;
  const std::uint64_t align = std::max<std::uint64_t>(lim.storage_offset_alignment, 16);
  if (offset % align != 0) {
    throw InvalidArgument(op, "offset", std::to_string(offset),
                          "a multiple of " + std::to_string(align) + " (minStorageBufferOffsetAlignment = " +
                              std::to_string(lim.storage_offset_alignment) + ", and 16)");
  }
  const std::uint64_t needed = ceil_div(storage_words(numel(shape), dtype) * 4, 16) * 16;
  if (size_bytes < needed) {
    throw InvalidArgument(
        op, "size_bytes", std::to_string(size_bytes),
        ">= " + std::to_string(needed) + " (" + to_string(dtype) + " " + shape_string(shape) + ", rounded up to 16 bytes)");
  }
  if (size_bytes % 4 != 0) {  // wrap_kv_cache fills the range, and a fill takes whole words
    throw InvalidArgument(op, "size_bytes", std::to_string(size_bytes), "a multiple of 4");
  }
  if (size_bytes > lim.max_storage_buffer_range) {
    throw InvalidArgument(op, "size_bytes", std::to_string(size_bytes),
                          "<= maxStorageBufferRange = " + std::to_string(lim.max_storage_buffer_range));
  }
  if (numel(shape) > std::size_t{UINT32_MAX}) {
    throw InvalidArgument(op, "shape", shape_string(shape), "at most 2^32 - 1 elements (the kernels index them in 32 bits)");
  }
  // Vulkan gives no query for a buffer's size; its memory requirement is an upper bound
  // (the size rounded up to the alignment), enough to refuse a range past the end, or
  // one whose end wraps around, before a shader reads there.
  VkMemoryRequirements req{};
  ctx->device->fn().vkGetBufferMemoryRequirements(ctx->device->handle(), buffer, &req);
  if (offset > req.size || size_bytes > req.size - offset) {
    throw InvalidArgument(op, "offset + size_bytes", std::to_string(offset) + " + " + std::to_string(size_bytes),
                          "<= the buffer's size (its memory requirement: " + std::to_string(req.size) + " bytes)");
  }
  return Tensor(std::make_shared<VulkanTensor>(ctx, shape, dtype, Buffer::borrow(buffer, offset, size_bytes)));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("wrap");
}

KvCache wrap_kv_cache(Backend& backend, const KvCacheConfig& config, const Tensor& k, const Tensor& v) try {
  using namespace detail;
  const char* op = "wrap_kv_cache";
  OpScope scope(op);
  auto ctx = context_of(backend);
  if (!ctx || !ctx->external) {
    throw InvalidArgument(op, "backend", ctx ? "a backend that made its own device" : "the CPU backend",
                          "a backend on the caller's device (make_backend(ExternalVulkan))");
  }
  const KvShapes shapes = check_kv_cache_config(config);
  if (config.latent && v.valid()) {
    throw InvalidArgument(op, "v", "a tensor", "an empty Tensor{}: a latent cache stores V inside K");
  }
  for (const auto& [name, t] : {std::pair{"k", &k}, std::pair{"v", &v}}) {
    if (!t->valid() && (t == &k || !config.latent)) {
      throw InvalidArgument(op, name, kEmptyTensor,
                            "a tensor of this backend, made by wrap (an empty v only for a latent cache)");
    }
  }
  const auto& tk = check_tensor(op, "k", k, ctx.get());
  const auto tv = config.latent ? nullptr : check_tensor(op, "v", v, ctx.get());
  for (const auto& [name, t, shape, dims] :
       {std::tuple{"k", tk.get(), &shapes.k, "head_dim"}, std::tuple{"v", tv.get(), &shapes.v, "v_head_dim"}}) {
    if (!t) continue;  // a latent cache's V
    if (t->shape != *shape || t->dtype != config.dtype) {
      throw InvalidArgument(op, name, std::string(to_string(t->dtype)) + " " + shape_string(t->shape),
                            std::string(to_string(config.dtype)) + " " + shape_string(*shape) + " (config.dtype [" +
                                (config.paged ? "n_blocks, block_size" : "n_seqs, capacity") + ", n_kv_heads, " + dims + "])");
    }
  }
  if (tk == tv) throw InvalidArgument(op, "v", "the tensor given as k", "a tensor of its own");
  if (tv && tv->overlaps(*tk)) throw InvalidArgument(op, "v", "a view sharing bytes with k", "bytes apart from k");
  for (const auto* t : {tk.get(), tv.get()}) {
    if (t) ctx->zero(*static_cast<const VulkanTensor*>(t)->buffer);
  }
  auto impl = std::make_shared<KvCacheImpl>(ctx.get(), config, tk, tv);
  impl->slots = std::make_shared<VulkanTensor>(ctx, Shape{impl->slot_table_words()}, DType::i32);
  impl->publish();
  return KvCache(std::move(impl));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("wrap_kv_cache");
}

Submitted CommandList::submit(const SubmitSemaphores& semaphores) try {
  const detail::InUse use(impl_.get(), "submit");
  detail::SemaphoreSync sync;
  for (std::size_t i = 0; i < semaphores.wait.size(); ++i) {
    const SemaphoreWait& w = semaphores.wait[i];
    if (w.semaphore == VK_NULL_HANDLE) {
      throw InvalidArgument("submit", "semaphores.wait[" + std::to_string(i) + "].semaphore", "VK_NULL_HANDLE",
                            "a VkSemaphore of the backend's device");
    }
    if (w.stages == 0) {
      throw InvalidArgument("submit", "semaphores.wait[" + std::to_string(i) + "].stages", "0", "a nonzero VkPipelineStageFlags");
    }
    detail::check_stage_mask("submit", "semaphores.wait[" + std::to_string(i) + "].stages", w.stages);
    sync.wait.push_back(w.semaphore);
    sync.wait_values.push_back(w.value);
    sync.wait_stages.push_back(w.stages);
  }
  for (std::size_t i = 0; i < semaphores.signal.size(); ++i) {
    const SemaphoreSignal& g = semaphores.signal[i];
    if (g.semaphore == VK_NULL_HANDLE) {
      throw InvalidArgument("submit", "semaphores.signal[" + std::to_string(i) + "].semaphore", "VK_NULL_HANDLE",
                            "a VkSemaphore of the backend's device");
    }
    sync.signal.push_back(g.semaphore);
    sync.signal_values.push_back(g.value);
  }
  const detail::CachesInUse caches_use(use->caches, "submit");
  use->check_planned("submit");
  use->recorded_recipes = 0;  // its replays are the list's own to submit from here
  return Submitted(use->submitting([&] { return use->submit(&sync); }));
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("submit");
}

void CommandList::record(VkCommandBuffer_T* command_buffer, const RecordOptions& options) try {
  const detail::InUse use(impl_.get(), "record");
  if (!command_buffer) {
    throw InvalidArgument("record", "command_buffer", "VK_NULL_HANDLE", "a VkCommandBuffer in the recording state");
  }
  detail::check_exit_barrier(options);
  const detail::CachesInUse caches_use(use->caches, "record");
  use->check_planned("record");
  use->submitting([&] { use->record_into(command_buffer, options); });
  use->recorded_recipes = use->recipes.size();  // its replays count as running too (set_tokens)
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("record");
}

}  // namespace vkattn
