#include "vulkan/vulkan_backend.hpp"

#include <algorithm>

#include "common/env.hpp"
#include "common/shape_math.hpp"
#include "common/validate.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/encoding.hpp"
#include "vulkan/submission.hpp"
#include "vulkan/vulkan_command_list.hpp"

namespace vkattn::detail {

namespace {

bool validation_wanted(const DeviceOptions& options) {
  if (options.validation) return *options.validation;
  return env_switch("VKATTN_VALIDATION");
}

// Records |record| into a command buffer of its own, submits it and waits: transfers run
// on any thread without a lock (see Submission). The submission is kept for the next
// transfer only when it finished; after an error it is freed (waiting for its work first).
// Once submitted, the copy is waited for past DeviceOptions::submit_timeout_ms (with a
// warning): its staging buffer could not be freed under it anyway, and a transfer then has
// its whole effect or, the device lost, throws. A timeout reported after the copy landed
// would leave a caller that puts its bookkeeping back on failure (a cache's reset,
// truncate or restore) out of step with the device.
template <class Record>
void one_shot(Context& ctx, Record record) {
  std::unique_ptr<Submission> kept = ctx.transfers.submission(*ctx.device);
  Submission& submission = *kept;
  VkCommandBuffer cb = submission.begin();
  const VulkanFunctions& fn = ctx.device->fn();
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &barrier, 0, nullptr, 0,
                          nullptr);
  record(cb);
  barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, nullptr, 0, nullptr);
  submission.end();
  const std::uint32_t ms = ctx.options.submit_timeout_ms;
  const std::uint64_t number = submission.submit(ms, nullptr);
  if (!submission.wait(number, std::uint64_t{ms} * 1000000u)) {
    submission.wait_out(number);
    try {  // after the wait: a message that cannot be made must not unwind before it
      ctx.log->log(LogLevel::warning, std::string(*current_op() ? current_op() : "transfer") + ": a copy did not finish within " +
                                          std::to_string(ms) + " ms (DeviceOptions::submit_timeout_ms); waited for it");
    } catch (...) {
    }
  }
  ctx.transfers.give(std::move(kept));
}

void copy_buffer(Context& ctx, const Buffer& src, const Buffer& dst, VkDeviceSize bytes) {
  one_shot(ctx, [&](VkCommandBuffer cb) {
    const VkBufferCopy region{src.offset(), dst.offset(), bytes};
    ctx.device->fn().vkCmdCopyBuffer(cb, src.handle(), dst.handle(), 1, &region);
  });
}

// Waits for the submissions that may still write |t| before the host copies it, and
// (|over|) for those that may read or write it before the host copies over it.
void settle(const Context& ctx, const VulkanTensor& t, bool over = false) {
  std::vector<std::pair<std::shared_ptr<Encoded>, std::uint64_t>> pending;
  {
    std::lock_guard lock(t.uses_lock);
    for (const VulkanTensor::Use& u : t.uses) {
      if (!over && !u.writes) continue;
      if (auto enc = u.enc.lock()) pending.emplace_back(std::move(enc), u.number);
    }
  }
  const std::uint32_t ms = ctx.options.submit_timeout_ms;
  for (const auto& [enc, number] : pending) {
    if (enc->submission.wait(number, std::uint64_t{ms} * 1000000u)) continue;
    throw Error(ErrorCode::timeout,
                std::string("the submission ") + (over ? "using" : "writing") + " this tensor did not finish within " +
                    std::to_string(ms) + " ms (DeviceOptions::submit_timeout_ms); it keeps running",
                "vkWaitForFences", VK_TIMEOUT, current_op());
  }
}

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  ~VulkanBackend() override {
    try {
      ctx_->pipelines->save();
    } catch (...) {
      // A cache that cannot be written only costs compile time next run.
    }
  }

  BackendKind kind() const override { return BackendKind::vulkan; }
  std::string device_name() const override try { return ctx_->physical.info.name; } catch (const std::bad_alloc&) {
    host_out_of_memory("device_name");
  }
  const DeviceLimits& limits() const override { return ctx_->limits; }
  CommandList commands(const CommandListOptions& options) override try {
    OpScope scope("commands");
    return CommandList(make_vulkan_command_list(ctx_, options));
  } catch (const std::bad_alloc&) {
    host_out_of_memory("commands");
  }
  const std::shared_ptr<Context>& context() const { return ctx_; }
  std::vector<std::string> validation_messages() const override try {
    return ctx_->instance->messages();
  } catch (const std::bad_alloc&) {
    host_out_of_memory("validation_messages");
  }

 protected:
  // Tensors and command lists hold the context, not the backend: it is their owner tag.
  const void* owner_tag() const override { return ctx_.get(); }
  std::shared_ptr<TensorImpl> make_tensor(const Shape& shape, DType dtype) override {
    OpScope scope("tensor");
    return std::make_shared<VulkanTensor>(ctx_, shape, dtype);
  }
  // Named "upload" and "download" unless an op calls them (save_cache, restore_cache).
  void write_words(TensorImpl& t, std::span<const std::uint32_t> words) override {
    OpScope scope(*current_op() ? current_op() : "upload");
    t.store(words);
  }
  std::vector<std::uint32_t> read_words(const TensorImpl& t) override {
    OpScope scope(*current_op() ? current_op() : "download");
    const auto& vt = static_cast<const VulkanTensor&>(t);
    settle(*ctx_, vt);
    std::vector<std::uint32_t> words(t.words);
    ctx_->read(*vt.buffer, {reinterpret_cast<std::uint8_t*>(words.data()), words.size() * 4});
    return words;
  }

 private:
  std::shared_ptr<Context> ctx_;
};

}  // namespace

std::unique_ptr<Buffer> Context::device_buffer(std::uint64_t bytes, const char* what) {
  device->check_alive();
  if (bytes > limits.max_storage_buffer_range) {
    throw Error(ErrorCode::out_of_memory,
                std::string(what) + " needs " + std::to_string(bytes) +
                    " bytes, over maxStorageBufferRange = " + std::to_string(limits.max_storage_buffer_range) + " by " +
                    std::to_string(bytes - limits.max_storage_buffer_range),
                "maxStorageBufferRange", 0, current_op());
  }
  return Buffer::create(*device, bytes, BufferKind::device, what, mapped_tensors, limits.max_texel_buffer_elements);
}

void Context::write(Buffer& buffer, std::span<const std::uint8_t> bytes) {
  const ByteRun run{0, bytes};
  write(buffer, {&run, 1});
}

void Context::write(Buffer& buffer, std::span<const ByteRun> runs) {
  device->check_alive();
  if (buffer.mapped()) {
    for (const ByteRun& r : runs) buffer.write(r.bytes, r.offset);
    return;
  }
  VkDeviceSize total = 0;
  for (const ByteRun& r : runs) total += r.bytes.size();
  auto staging = transfers.staging(*device, total);
  std::vector<VkBufferCopy> regions;
  regions.reserve(runs.size());
  VkDeviceSize at = 0;  // each run's place in the staging buffer
  for (const ByteRun& r : runs) {
    if (r.bytes.empty()) continue;  // a copy region of 0 bytes is invalid usage
    staging->write(r.bytes, at);
    regions.push_back({staging->offset() + at, buffer.offset() + r.offset, r.bytes.size()});
    at += r.bytes.size();
  }
  one_shot(*this, [&](VkCommandBuffer cb) {
    device->fn().vkCmdCopyBuffer(cb, staging->handle(), buffer.handle(), static_cast<std::uint32_t>(regions.size()),
                                 regions.data());
  });
  transfers.give(std::move(staging));
}

void Context::read(const Buffer& buffer, std::span<std::uint8_t> bytes) {
  device->check_alive();
  if (buffer.mapped()) {
    buffer.read(bytes);
    return;
  }
  auto staging = transfers.staging(*device, bytes.size());
  copy_buffer(*this, buffer, *staging, bytes.size());
  staging->read(bytes);
  transfers.give(std::move(staging));
}

void Context::zero(Buffer& buffer) {
  if (buffer.mapped()) {
    buffer.zero();
    return;
  }
  one_shot(*this,
           [&](VkCommandBuffer cb) { device->fn().vkCmdFillBuffer(cb, buffer.handle(), buffer.offset(), buffer.size(), 0); });
}

bool has_texel_view(const TensorImpl& t) { return static_cast<const VulkanTensor&>(t).buffer->texel_view() != VK_NULL_HANDLE; }

namespace {
// Whether |use| is of |enc|, without locking it: a shared_ptr made under uses_lock could be
// the last one, and destroying another list's encoding waits for its fence there.
bool of(const std::weak_ptr<Encoded>& use, const std::shared_ptr<Encoded>& enc) {
  return !use.owner_before(enc) && !enc.owner_before(use);
}
}  // namespace

void VulkanTensor::note_use(const std::shared_ptr<Encoded>& enc, std::uint64_t number, bool writes) {
  std::lock_guard lock(uses_lock);
  // Gone: finished. The same encoding: its earlier submission finished before this one was
  // made, or this one binds the tensor twice (a write among them makes it a writer).
  std::erase_if(uses, [&](const Use& u) {
    const bool same = of(u.enc, enc);
    if (same && u.number == number) writes = writes || u.writes;
    return same || u.enc.expired();
  });
  uses.push_back({enc, number, writes});
}

void VulkanTensor::forget_use(const std::shared_ptr<Encoded>& enc, std::uint64_t number) noexcept {
  std::lock_guard lock(uses_lock);
  std::erase_if(uses, [&](const Use& u) { return u.number == number && of(u.enc, enc); });
}

void check_element_indices(const Shape& shape, std::size_t numel, std::uint64_t bytes, std::uint64_t max_range) {
  // Only q4_0 (half a byte an element) can pass 2^32 elements inside a range of 4 GiB;
  // past the range, device_buffer names it.
  if (numel > std::size_t{UINT32_MAX} && bytes <= max_range) {
    throw Error(ErrorCode::out_of_memory,
                "tensor of " + std::to_string(numel) + " elements (" + shape_string(shape) +
                    "): the kernels index elements in 32 bits, at most 2^32 - 1",
                "", 0, current_op());
  }
}

VulkanTensor::VulkanTensor(std::shared_ptr<Context> ctx, const Shape& shape_, DType dtype_, bool zero)
    : TensorImpl(ctx.get(), shape_, dtype_), context(std::move(ctx)) {
  // Padding to 16 bytes lets the copy kernel move whole vec4s.
  const std::uint64_t bytes = ceil_div(words * 4, 16) * 16;
  check_element_indices(shape, numel, bytes, context->limits.max_storage_buffer_range);
  buffer = context->device_buffer(bytes, "tensor");
  // Zero-filled so that no tensor ever exposes another allocation's old contents.
  if (zero) context->zero(*buffer);
}

void VulkanTensor::store_runs(std::span<const WordRun> runs) {
  settle(*context, *this, true);
  std::vector<Context::ByteRun> bytes;
  bytes.reserve(runs.size());
  for (const WordRun& r : runs) {
    bytes.push_back({VkDeviceSize{r.first} * 4, {reinterpret_cast<const std::uint8_t*>(r.words.data()), r.words.size_bytes()}});
  }
  context->write(*buffer, bytes);
}

// $VKATTN_CAP_LIMITS=spec_minimum: plan with the Vulkan minimums whatever the options say.
// Another value is refused: a test run that meant to cap the limits must not run uncapped.
static bool spec_minimum_wanted() {
  return env_choice("create backend", "VKATTN_CAP_LIMITS", false, {{"spec_minimum", true}}, "spec_minimum, or unset or empty");
}

// What was chosen and why, and a GPU passed over for a lesser device.
static void log_device(const Context& ctx, const std::vector<PhysicalDevice>& devices) {
  const DeviceInfo& chosen = ctx.physical.info;
  for (const auto& d : devices) {
    if (!d.info.rejected.empty() &&
        (d.kind == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU || d.kind == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU)) {
      ctx.log->log(LogLevel::warning, "device " + std::to_string(d.info.index) + ": " + d.info.name + " (" + d.info.type +
                                          ") is rejected: " + d.info.rejected + "; using " + chosen.name + " (" + chosen.type +
                                          ")");
    }
  }
  if (!ctx.log->enabled(LogLevel::info)) return;
  std::string heaps;
  for (std::uint32_t i = 0; i < ctx.device->memory().memoryHeapCount; ++i) {
    heaps += (i ? ", " : "") + ctx.device->heaps().heap(i).name + " " + std::to_string(ctx.device->heaps().heap(i).size >> 20) +
             " MiB";
  }
  ctx.log->log(LogLevel::info, "device " + std::to_string(chosen.index) + ": " + chosen.name + " (" + chosen.type + "), Vulkan " +
                                   chosen.api_version + ", " + chosen.driver + "; " + heaps +
                                   (ctx.device->memory_budget() ? "; allocations also within VK_EXT_memory_budget"
                                                                : "; allocations counted against the heap sizes") +
                                   (ctx.mapped_tensors ? "; tensors mapped" : "; tensors behind staging copies"));
  if (ctx.physical.matrix_units) {
    ctx.log->log(LogLevel::info,
                 ctx.physical.matrix_nv2
                     ? std::string("matrix units: attn_mt2 (NV cooperative matrices 2) where planned, else attn_mt")
                     : "matrix units: attn_mt (not attn_mt2: " + ctx.physical.matrix_nv2_note + ")");
  }
}

KernelShape kernels_asked(const DeviceOptions& options, const char* op) {
  using enum KernelShape;
  if (options.kernels) return *options.kernels;
  return env_choice(op, "VKATTN_KERNELS", automatic, {{"cpu", cpu}, {"gpu", gpu}, {"automatic", automatic}, {"auto", automatic}},
                    "cpu, gpu or automatic (or auto)");
}

// The kernel family asked for, resolved for the device.
static KernelShape kernel_shape(const DeviceOptions& options, const PhysicalDevice& physical) {
  const KernelShape shape = kernels_asked(options, "create backend");
  if (shape == KernelShape::automatic) return physical.cpu() ? KernelShape::cpu : KernelShape::gpu;
  return shape;
}

// Limits, kernel family and memory path: what a context plans with, once its physical
// device is known and before its device is made.
void plan_context(Context& ctx, const DeviceOptions& options) {
  ctx.options = options;
  ctx.limits = options.cap_limits ? cap(ctx.physical.info.limits, *options.cap_limits) : ctx.physical.info.limits;
  if (spec_minimum_wanted()) {
    // Every minimum but one: kernels may bind 8 storage buffers, not 4. At 4, an input too
    // large for the minimum texel view leaves attention more than it may bind, which it
    // refuses by name; those refusals have their own test, and the other limits then get
    // every shape an application runs.
    DeviceLimits minimum = spec_minimum_limits();
    minimum.max_storage_buffers = 8;
    ctx.limits = cap(ctx.limits, minimum);
    ctx.log->log(LogLevel::info, "VKATTN_CAP_LIMITS=spec_minimum: planning with the Vulkan 1.1 minimum limits");
  }
  // Every kernel's workgroup is one-dimensional (local_size_x): its invocations are bounded
  // by maxComputeWorkGroupSize[0] too, which Vulkan lets be below the invocations.
  ctx.limits.max_workgroup_invocations = std::min(ctx.limits.max_workgroup_invocations, ctx.limits.max_workgroup_size[0]);
  // Kernels that require a subgroup size (the preferred one; the device's own on the
  // matrix units) may have maxComputeWorkgroupSubgroups of them. Folded in for all: it
  // keeps each planner from needing the rule and costs GPUs nothing (NVIDIA's 32 of 32,
  // Intel's 64 of 16 are 1024); lavapipe's 32 of 8 are 256.
  if (ctx.limits.subgroup_size_control && ctx.limits.subgroup_size) {
    const std::uint32_t required = std::min(preferred_subgroup_size(ctx.limits), ctx.limits.subgroup_size);
    const std::uint64_t most = std::uint64_t{required} * ctx.physical.max_workgroup_subgroups;
    if (most < ctx.limits.max_workgroup_invocations) ctx.limits.max_workgroup_invocations = static_cast<std::uint32_t>(most);
  }
  ctx.shape = kernel_shape(options, ctx.physical);
  ctx.decode = decode_tuning_from_env();
  ctx.prefill = prefill_tuning_from_env();
  // GPU-shaped kernels read through storage buffers: on GPUs they cost what texel fetches
  // do, and contiguous loads need no texture path. A device that allows a kernel fewer
  // storage buffers than attention binds keeps texel views, which do not count.
  if (ctx.shape == KernelShape::gpu && ctx.limits.max_storage_buffers >= 6) ctx.limits.max_texel_buffer_elements = 0;
  ctx.mapped_tensors = ctx.limits.unified_memory && !options.force_staging;
}

static std::shared_ptr<Context> make_context(const DeviceOptions& options) {
  OpScope scope("create backend");
  auto ctx = std::make_shared<Context>();
  ctx->log = std::make_shared<Logger>(options);
  ctx->instance = Instance::create(validation_wanted(options), ctx->log);
  auto devices = enumerate_devices(*ctx->instance, options);
  ctx->physical = devices[choose_device(devices, options)];
  plan_context(*ctx, options);
  const std::uint64_t heap_cap = options.cap_limits ? options.cap_limits->device_local_bytes : 0;
  ctx->device = Device::create(ctx->physical, heap_cap);
  log_device(*ctx, devices);
  const std::string dir = options.pipeline_cache_dir ? *options.pipeline_cache_dir : default_pipeline_cache_dir();
  ctx->pipelines = std::make_unique<PipelineCache>(*ctx->device, ctx->physical, dir, ctx->log);
  check_matrix_units(ctx);
  return ctx;
}

}  // namespace vkattn::detail

namespace vkattn::detail {
std::unique_ptr<Backend> make_vulkan_backend(const DeviceOptions& options) { return make_vulkan_backend(make_context(options)); }
std::unique_ptr<Backend> make_vulkan_backend(std::shared_ptr<Context> ctx) {
  return std::make_unique<VulkanBackend>(std::move(ctx));
}
std::shared_ptr<Context> context_of(Backend& backend) {
  auto* vulkan = dynamic_cast<VulkanBackend*>(&backend);
  return vulkan ? vulkan->context() : nullptr;
}
}  // namespace vkattn::detail
