#include "vulkan/vulkan_backend.hpp"

#include <cstdlib>
#include <cstring>

#include "common/shape_math.hpp"
#include "common/validate.hpp"
#include "vulkan/check.hpp"
#include "vulkan/command_list.hpp"
#include "vulkan/context.hpp"

namespace vkattn::detail {

namespace {

bool validation_wanted(const DeviceOptions& options) {
  if (options.validation) return *options.validation;
  const char* env = std::getenv("VKATTN_VALIDATION");
  return env && std::strcmp(env, "1") == 0;
}

// One-shot command buffer for a staging copy; freed on every path.
void copy_buffer(Device& device, VkBuffer src, VkBuffer dst, VkDeviceSize bytes, std::uint32_t timeout_ms) {
  struct Cb {
    Device& d;
    VkCommandBuffer cb;
    ~Cb() { d.free_command_buffer(cb); }
  } cmd{device, device.allocate_command_buffer()};
  auto begin = vk_struct<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VKATTN_VK_CHECK(vkBeginCommandBuffer(cmd.cb, &begin));
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd.cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                       &barrier, 0, nullptr, 0, nullptr);
  VkBufferCopy region{0, 0, bytes};
  vkCmdCopyBuffer(cmd.cb, src, dst, 1, &region);
  barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd.cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0,
                       nullptr, 0, nullptr);
  VKATTN_VK_CHECK(vkEndCommandBuffer(cmd.cb));
  device.submit_and_wait(cmd.cb, timeout_ms);
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
  std::string device_name() const override { return ctx_->physical.info.name; }
  const DeviceLimits& limits() const override { return ctx_->limits; }
  CommandList commands(const CommandListOptions& options) override {
    return CommandList(make_vulkan_command_list(ctx_, options));
  }
  std::vector<std::string> validation_messages() const override { return ctx_->instance->messages(); }


 protected:
  // Tensors and command lists hold the context, not the backend: it is their owner tag.
  const void* owner_tag() const override { return ctx_.get(); }
  std::shared_ptr<TensorImpl> make_tensor(const Shape& shape, DType dtype) override {
    OpScope scope("tensor");
    return std::make_shared<VulkanTensor>(ctx_, shape, dtype);
  }
  void write_words(TensorImpl& t, std::span<const std::uint32_t> words) override {
    OpScope scope("upload");
    auto& vt = static_cast<VulkanTensor&>(t);
    ctx_->write(*vt.buffer, {reinterpret_cast<const std::uint8_t*>(words.data()), words.size_bytes()});
  }
  std::vector<std::uint32_t> read_words(const TensorImpl& t) override {
    OpScope scope("download");
    const auto& vt = static_cast<const VulkanTensor&>(t);
    std::vector<std::uint32_t> words(t.words);
    ctx_->read(*vt.buffer, {reinterpret_cast<std::uint8_t*>(words.data()), words.size() * 4});
    return words;
  }

 private:
  std::shared_ptr<Context> ctx_;
};

}  // namespace

std::unique_ptr<Buffer> Context::device_buffer(std::uint64_t bytes, const char* what) {
  if (bytes > limits.max_storage_buffer_range) {
    throw Error(ErrorCode::out_of_memory,
                std::string(what) + " needs " + std::to_string(bytes) + " bytes, over maxStorageBufferRange = " +
                    std::to_string(limits.max_storage_buffer_range) + " by " +
                    std::to_string(bytes - limits.max_storage_buffer_range),
                "maxStorageBufferRange", 0, current_op());
  }
  if (limits.device_local_bytes && bytes > limits.device_local_bytes) {
    throw Error(ErrorCode::out_of_memory,
                std::string(what) + " needs " + std::to_string(bytes) + " bytes, over the device-local heap of " +
                    std::to_string(limits.device_local_bytes),
                "VkMemoryHeap::size", 0, current_op());
  }
  return Buffer::create(*device, bytes, BufferKind::device, mapped_tensors, limits.max_texel_buffer_elements);
}

void Context::write(Buffer& buffer, std::span<const std::uint8_t> bytes) {
  if (buffer.mapped()) {
    buffer.write(bytes);
    return;
  }
  auto staging = Buffer::create(*device, std::max<std::size_t>(bytes.size(), 4), BufferKind::staging, true);
  staging->write(bytes);
  copy_buffer(*device, staging->handle(), buffer.handle(), bytes.size(), options.submit_timeout_ms);
}

void Context::read(const Buffer& buffer, std::span<std::uint8_t> bytes) {
  if (buffer.mapped()) {
    buffer.read(bytes);
    return;
  }
  auto staging = Buffer::create(*device, std::max<std::size_t>(bytes.size(), 4), BufferKind::staging, true);
  copy_buffer(*device, buffer.handle(), staging->handle(), bytes.size(), options.submit_timeout_ms);
  staging->read(bytes);
}

bool has_texel_view(const TensorImpl& t) {
  return static_cast<const VulkanTensor&>(t).buffer->texel_view() != VK_NULL_HANDLE;
}

VulkanTensor::VulkanTensor(std::shared_ptr<Context> ctx, const Shape& shape_, DType dtype_, bool zero)
    : TensorImpl(ctx.get(), shape_, dtype_), context(std::move(ctx)) {
  // Padding to 16 bytes lets the copy kernel move whole vec4s.
  buffer = context->device_buffer(ceil_div(words * 4, 16) * 16, "tensor");
  if (!zero) return;
  if (buffer->mapped()) {
    std::vector<std::uint8_t> zeros(buffer->size(), 0);
    buffer->write(zeros);
  } else {
    // Zero-fill so no tensor ever exposes another allocation's old contents.
    std::vector<std::uint8_t> zeros(buffer->size(), 0);
    context->write(*buffer, zeros);
  }
}

// DeviceOptions::kernels, else $VKATTN_KERNELS, resolved for the device.
static KernelShape kernel_shape(const DeviceOptions& options, const PhysicalDevice& physical) {
  KernelShape shape = options.kernels.value_or(KernelShape::automatic);
  if (!options.kernels) {
    if (const char* env = std::getenv("VKATTN_KERNELS"); env && *env) {
      const std::string s = env;
      if (s == "cpu") shape = KernelShape::cpu;
      else if (s == "gpu") shape = KernelShape::gpu;
      else if (s != "automatic") throw InvalidArgument("create backend", "VKATTN_KERNELS", s, "cpu, gpu or automatic");
    }
  }
  if (shape == KernelShape::automatic) shape = physical.info.type == "cpu" ? KernelShape::cpu : KernelShape::gpu;
  return shape;
}

static std::shared_ptr<Context> make_context(const DeviceOptions& options) {
  OpScope scope("create backend");
  auto ctx = std::make_shared<Context>();
  ctx->options = options;
  ctx->instance = Instance::create(validation_wanted(options));
  auto devices = enumerate_devices(*ctx->instance);
  ctx->physical = devices[choose_device(devices, options)];
  ctx->limits = options.cap_limits ? cap(ctx->physical.info.limits, *options.cap_limits)
                                   : ctx->physical.info.limits;
  ctx->shape = kernel_shape(options, ctx->physical);
  // GPU-shaped kernels read through storage buffers: on GPUs they cost what texel fetches
  // do, and coalesced loads need no texture path. A device that allows a kernel fewer
  // storage buffers than attention binds keeps texel views, which do not count.
  if (ctx->shape == KernelShape::gpu && ctx->limits.max_storage_buffers >= 6) ctx->limits.max_texel_buffer_elements = 0;
  ctx->mapped_tensors = ctx->limits.unified_memory && !options.force_staging;
  ctx->device = Device::create(ctx->physical);
  const std::string dir = options.pipeline_cache_dir ? *options.pipeline_cache_dir : default_pipeline_cache_dir();
  ctx->pipelines = std::make_unique<PipelineCache>(*ctx->device, ctx->physical, dir);
  return ctx;
}

}  // namespace vkattn::detail

namespace vkattn::detail {
std::unique_ptr<Backend> make_vulkan_backend(const DeviceOptions& options) {
  return std::make_unique<VulkanBackend>(make_context(options));
}
}  // namespace vkattn::detail
