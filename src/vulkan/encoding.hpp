// An encoding: a command list's dispatches as one command buffer, with its descriptor sets,
// pipelines, parameters on the device and timestamp queries. The command list decides when
// to encode and what to keep; this is how.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "vulkan/descriptors.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/submission.hpp"

namespace vkattn::detail {

// Timestamp queries, destroyed after the submission that writes them has finished.
struct QueryPool {
  const VulkanFunctions* fn = nullptr;
  VkDevice device = VK_NULL_HANDLE;
  VkQueryPool handle = VK_NULL_HANDLE;
  QueryPool() = default;
  QueryPool(const QueryPool&) = delete;
  QueryPool& operator=(const QueryPool&) = delete;
  ~QueryPool() {
    if (handle) fn->vkDestroyQueryPool(device, handle, fn->allocator);
  }
};

// Everything one encoding owns; freed together when ops are added or the list dies. The
// command buffer comes from a pool of the list's own (Submission), so lists record and
// submit on any threads at once.
struct Encoded {
  std::shared_ptr<Context> ctx;
  std::unique_ptr<Buffer> params;
  // Where the host writes the parameters when |params| is not mapped (a discrete GPU):
  // the commands copy them over first (record_commands), so neither an encoding nor a
  // replay waits on a submission of its own to upload them.
  std::unique_ptr<Buffer> params_staging;
  std::unique_ptr<DescriptorPool> descriptors;
  std::vector<const Pipeline*> pipelines;  // one per dispatch
  std::vector<VkDescriptorSet> sets;       // one per dispatch
  QueryPool queries;
  // Every tensor the dispatches bind: kept until the work has finished, even when the list
  // goes before a Submitted handle does.
  std::vector<std::shared_ptr<TensorImpl>> keep;
  Submission submission;  // destroyed first: it waits for work still running
  VkCommandBuffer cb = VK_NULL_HANDLE;
  std::size_t barriers = 0;
  std::uint64_t param_bytes = 0;

  // Host writes before vkQueueSubmit are visible to the submission without a barrier.
  Buffer& param_target() { return params_staging ? *params_staging : *params; }

  explicit Encoded(std::shared_ptr<Context> c) : ctx(std::move(c)), submission(*ctx->device, false) {}
};

// The resources of an encoding of |ops|: |params| on the device (through staging where
// they are not mapped), descriptor sets, pipelines, and with |timestamps| the queries.
std::unique_ptr<Encoded> prepare_encoding(const std::shared_ptr<Context>& ctx, std::span<const Dispatch> ops,
                                          std::span<const std::uint8_t> params, bool timestamps);

// Records the encoding's commands into |cb|: the parameters' copy (if any), the entry
// barrier (if |entry|), the dispatches with a barrier at each hazard, and an exit barrier
// from compute-shader writes to |exit_stage|/|exit_access| (none if |exit_stage| is 0).
void record_commands(Encoded& enc, std::span<const Dispatch> ops, VkCommandBuffer cb, bool entry, VkPipelineStageFlags exit_stage,
                     VkAccessFlags exit_access);

// Each dispatch's time from the encoding's timestamps, after its submission finished.
std::vector<OpTiming> read_timestamps(Encoded& enc, std::span<const Dispatch> ops);

}  // namespace vkattn::detail
