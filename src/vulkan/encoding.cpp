#include "vulkan/encoding.hpp"

#include <bit>
#include <set>

#include "common/op_scope.hpp"
#include "vulkan/check.hpp"
#include "vulkan/vulkan_command_list.hpp"

namespace vkattn::detail {

namespace {

VkBuffer buffer_of(const Binding& b) { return static_cast<VulkanTensor&>(*b.tensor).buffer->handle(); }

void global_barrier(const VulkanFunctions& fn, VkCommandBuffer cb, VkPipelineStageFlags src_stage, VkAccessFlags src,
                    VkPipelineStageFlags dst_stage, VkAccessFlags dst) {
  auto barrier = vk_struct<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
  barrier.srcAccessMask = src;
  barrier.dstAccessMask = dst;
  fn.vkCmdPipelineBarrier(cb, src_stage, dst_stage, 0, 1, &barrier, 0, nullptr, 0, nullptr);
}

}  // namespace

std::unique_ptr<Encoded> prepare_encoding(const std::shared_ptr<Context>& ctx, std::span<const Dispatch> ops,
                                          std::span<const std::uint8_t> params, bool timestamps) {
  auto enc = std::make_unique<Encoded>(ctx);
  VkDevice dev = ctx->device->handle();
  const std::uint32_t n_ops = static_cast<std::uint32_t>(ops.size());

  enc->param_bytes = params.size();
  if (!params.empty()) {
    enc->params = ctx->device_buffer(params.size(), "op parameters");
    if (!enc->params->mapped()) {
      enc->params_staging = Buffer::create(*ctx->device, params.size(), BufferKind::staging, "op parameters (staging)", true);
    }
    enc->param_target().write(params);
  }

  std::uint32_t n_descriptors = 0, n_texel = 0;
  for (const Dispatch& d : ops) {
    n_descriptors += d.key.n_bindings;
    n_texel += static_cast<std::uint32_t>(std::popcount(d.key.texel_bindings));
  }
  enc->descriptors = DescriptorPool::create(*ctx->device, n_ops, n_descriptors, n_texel);

  if (timestamps) {
    auto q = vk_struct<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    q.queryType = VK_QUERY_TYPE_TIMESTAMP;
    q.queryCount = 2 * n_ops;
    enc->queries.fn = &ctx->device->fn();
    enc->queries.device = dev;
    VKATTN_VK_CREATE(enc->queries.handle,
                     ctx->device->fn().vkCreateQueryPool(dev, &q, ctx->device->fn().allocator, &enc->queries.handle));
  }

  for (std::uint32_t i = 0; i < n_ops; ++i) {
    const Dispatch& d = ops[i];
    OpScope op_scope(d.op);
    const Pipeline& pipeline = ctx->pipelines->get(d.key);
    std::vector<VkDescriptorBufferInfo> infos(d.bindings.size());
    std::vector<VkBufferView> views(d.bindings.size(), VK_NULL_HANDLE);
    for (std::size_t b = 0; b < d.bindings.size(); ++b) {
      const Binding& binding = d.bindings[b];
      if (binding.tensor) {
        const auto& buffer = *static_cast<VulkanTensor&>(*binding.tensor).buffer;
        enc->keep.push_back(binding.tensor);
        infos[b] = {buffer.handle(), buffer.offset(), buffer.size()};
        if (binding.texel) views[b] = buffer.texel_view();
        if (binding.texel && !views[b]) {
          throw Error(ErrorCode::unsupported,
                      "internal: binding " + std::to_string(b) + " of " + kernel_name(d.key.kernel) +
                          " is a texel buffer but its tensor has no texel view",
                      "encode", 0, current_op());
        }
      } else {
        infos[b] = {enc->params->handle(), binding.param_offset, binding.param_bytes};
      }
    }
    enc->pipelines.push_back(&pipeline);
    enc->sets.push_back(enc->descriptors->allocate(pipeline.set_layout(), infos, views));
  }
  return enc;
}

void record_commands(Encoded& enc, std::span<const Dispatch> ops, VkCommandBuffer cb, bool entry, VkPipelineStageFlags exit_stage,
                     VkAccessFlags exit_access) {
  const Context* ctx = enc.ctx.get();
  const VulkanFunctions& fn = ctx->device->fn();
  const std::uint32_t n_ops = static_cast<std::uint32_t>(ops.size());
  if (enc.params_staging) {
    // Earlier submissions' reads of the parameters finish before the copy overwrites them.
    global_barrier(fn, cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_TRANSFER_WRITE_BIT);
    const VkBufferCopy region{0, 0, enc.param_bytes};
    fn.vkCmdCopyBuffer(cb, enc.params_staging->handle(), enc.params->handle(), 1, &region);
    global_barrier(fn, cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_SHADER_READ_BIT);
  }
  if (enc.queries.handle) fn.vkCmdResetQueryPool(cb, enc.queries.handle, 0, 2 * n_ops);
  // Writes of earlier submissions (uploads through staging, previous lists) become
  // visible to this one's shaders.
  if (entry) {
    global_barrier(fn, cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                   VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  }

  enc.barriers = 0;
  std::set<VkBuffer> read, written;  // since the last barrier
  for (std::uint32_t i = 0; i < n_ops; ++i) {
    const Dispatch& d = ops[i];
    const Pipeline& pipeline = *enc.pipelines[i];
    bool hazard = false;
    for (const Binding& binding : d.bindings) {
      if (!binding.tensor) continue;
      const VkBuffer h = buffer_of(binding);
      hazard = hazard || written.count(h) || (binding.write && read.count(h));
    }
    if (hazard) {
      global_barrier(fn, cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                     VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      ++enc.barriers;
      read.clear();
      written.clear();
    }
    for (const Binding& binding : d.bindings) {
      if (!binding.tensor) continue;
      read.insert(buffer_of(binding));
      if (binding.write) written.insert(buffer_of(binding));
    }

    if (enc.queries.handle) {
      // The start as the dispatch begins; the end once it and everything before it is done.
      fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, enc.queries.handle, 2 * i);
    }
    fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle());
    fn.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout(), 0, 1, &enc.sets[i], 0, nullptr);
    if (!d.push.empty()) {
      fn.vkCmdPushConstants(cb, pipeline.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, static_cast<std::uint32_t>(d.push.size()),
                            d.push.data());
    }
    const auto grid = fold_grid(d.groups, ctx->limits);
    fn.vkCmdDispatch(cb, grid[0], grid[1], grid[2]);
    if (enc.queries.handle) {
      fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, enc.queries.handle, 2 * i + 1);
    }
  }
  if (exit_stage)
    global_barrier(fn, cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, exit_stage, exit_access);
}

std::vector<OpTiming> read_timestamps(Encoded& enc, std::span<const Dispatch> ops) {
  const Context* ctx = enc.ctx.get();
  const std::uint32_t n = static_cast<std::uint32_t>(2 * ops.size());
  std::vector<std::uint64_t> ticks(n);
  const VkResult r = ctx->device->fn().vkGetQueryPoolResults(
      ctx->device->handle(), enc.queries.handle, 0, n, ticks.size() * sizeof(std::uint64_t), ticks.data(), sizeof(std::uint64_t),
      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  ctx->device->note(r, "vkGetQueryPoolResults");
  VKATTN_VK_CHECK(r);
  std::vector<OpTiming> timings;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const double ns = static_cast<double>(ticks[2 * i + 1] - ticks[2 * i]) * ctx->limits.timestamp_period_ns;
    timings.push_back({ops[i].op, ns * 1e-6});
  }
  return timings;
}

}  // namespace vkattn::detail
