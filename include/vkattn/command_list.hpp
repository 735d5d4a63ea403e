// CommandList: records ops; nothing runs until submit_and_wait(). On Vulkan the whole list
// becomes one command buffer and one vkQueueSubmit, with a barrier only where an op reads
// or overwrites what an earlier op wrote. A list can be submitted again: it reruns the
// same ops on the tensors' current contents. Arguments are checked when an op is
// recorded; a bad one throws InvalidArgument and records nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"

namespace vkattn {

namespace detail {
class CommandListImpl;
}

struct CommandListOptions {
  bool timestamps = false;  // measure each op's device time; see CommandList::timings()
};

struct OpTiming {
  std::string op;    // "rope", "copy", ...
  double ms = 0.0;   // device time (Vulkan timestamps) or host time (CPU backend)
};

struct CommandStats {
  std::size_t ops = 0;       // ops recorded
  std::size_t barriers = 0;  // pipeline barriers between ops (Vulkan); 0 on the CPU backend
  std::size_t submits = 0;   // completed submissions
};

class CommandList {
 public:
  explicit CommandList(std::unique_ptr<detail::CommandListImpl> impl);
  CommandList(CommandList&&) noexcept;
  CommandList& operator=(CommandList&&) noexcept;
  ~CommandList();

  // dst = src. Same dtype and the same number of elements (shapes may differ).
  void copy(const Tensor& src, Tensor& dst);

  // Rotary position embedding in place on |x| [n_tokens, n_heads, head_dim] (f32 or f16;
  // head_dim even, <= kMaxHeadDim). |positions| holds n_tokens absolute positions, each in
  // [0, 2^31), copied when the op is recorded; tokens may come from different sequences.
  // The frequency table is built once here, on the host.
  void rope(Tensor& x, std::span<const std::int32_t> positions, const RopeConfig& config = {});

  // The same on Q [n_tokens, n_heads, head_dim] and K [n_tokens, n_kv_heads, head_dim] in
  // one dispatch: same n_tokens, head_dim and dtype; distinct tensors.
  void rope(Tensor& q, Tensor& k, std::span<const std::int32_t> positions, const RopeConfig& config = {});

  // Runs everything recorded so far and waits for it.
  void submit_and_wait();

  // Per-op times of the last submission, in recording order; empty unless the list was
  // created with CommandListOptions::timestamps.
  std::vector<OpTiming> timings() const;
  CommandStats stats() const;

 private:
  std::unique_ptr<detail::CommandListImpl> impl_;
};

}  // namespace vkattn
