// The backend-independent part of a tensor and of a command list. Backends derive from
// these; the public Tensor/CommandList classes only forward.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "vkattn/command_list.hpp"
#include "vkattn/types.hpp"

namespace vkattn::detail {

class KvCacheImpl;
struct SemaphoreSync;  // vulkan/device.hpp

// A submission in flight (the public Submitted).
class SubmittedImpl {
 public:
  virtual ~SubmittedImpl();
  virtual bool ready() = 0;
  virtual bool wait(std::uint64_t timeout_ns) = 0;
};

class TensorImpl {
 public:
  // |owner| identifies the backend that made the tensor; ops reject tensors of another.
  TensorImpl(const void* owner, Shape shape, DType dtype);
  virtual ~TensorImpl();

  const void* const owner;
  const Shape shape;
  const DType dtype;
  const std::size_t numel;
  const std::size_t words;  // 32-bit storage words

  // Host words into the tensor's storage (Backend::write_words), after any pending
  // submission that writes it.
  virtual void store(std::span<const std::uint32_t> words) = 0;
};

// Attention scores parameters after checking: defaults resolved, seq ids filled in.
struct ScoresParams {
  double scale = 1.0;
  bool causal = true;
  std::uint32_t window = 0;        // 0: no window
  bool window_symmetric = false;   // WindowType::symmetric: |pos_t - pos_j| <= window / 2
  std::uint32_t chunk = 0;         // 0: no chunks
  std::optional<QueryTemperature> temperature;
  double softcap = 0.0;            // 0: off
  std::vector<float> alibi_slopes;  // n_heads values, or empty
  std::vector<std::int32_t> q_pos, k_pos, q_seq, k_seq;
  // Keys from a KV cache: token t reads sequence q_seq[t]'s slots. The checks leave k_pos,
  // k_seq and k_cpos empty (the Vulkan kernels read the cache's slot table on the device);
  // KvCacheImpl::fill_keys fills them from the host's, n_seqs * capacity entries in slot
  // order, k_seq -1 for empty slots.
  bool from_cache = false;
  // KvRope::on_read: rotate q by q_cpos and each key by k_cpos (slot order) with |rope|;
  // |ring| holds n_sinks, then each sequence's oldest ring position (a key's in-cache
  // position follows from its position and these).
  bool rope_on_read = false;
  RopeConfig rope;
  std::vector<std::int32_t> q_cpos, k_cpos, ring;
};

// Whether query t sees key j by position alone (sequences aside): causal, the window,
// the chunk. The CPU reference and the caches' readability check use it; the kernels
// have its twin in attn_visible.glsl.
inline bool position_visible(const ScoresParams& p, std::int64_t q_pos, std::int64_t k_pos) {
  const std::int64_t distance = q_pos - k_pos;
  if (p.causal && distance < 0) return false;
  if (p.window != 0) {
    if (p.window_symmetric ? std::abs(distance) > p.window / 2 : distance >= p.window) return false;
  }
  return p.chunk == 0 || q_pos / p.chunk == k_pos / p.chunk;  // positions are >= 0
}

// The query temperature t(pos) (1 without one), in double: the kernels read it as float.
inline double query_temperature(const ScoresParams& p, std::int32_t pos) {
  if (!p.temperature) return 1.0;
  const auto& t = *p.temperature;
  const std::int64_t steps = (std::int64_t{pos} + t.offset) / t.floor_scale;
  return 1.0 + t.scale * std::log1p(static_cast<double>(steps));
}

class CommandListImpl;

// A replayed list's tokens (CommandList::set_tokens).
struct NextTokens {
  std::span<const std::int32_t> positions, seq_ids;  // seq_ids empty: each op keeps its own
  std::span<const std::int32_t> mrope_positions;     // (t, h, w) per token, or empty
};

// How the frontend records one op again: the same checks and the same arguments, except
// the tokens' positions and sequence ids when |next| is given.
struct Recipe {
  std::function<void(CommandListImpl&, const NextTokens* next)> run;
  std::size_t n_tokens = 0;            // tokens whose data set_tokens replaces; 0: none
  std::shared_ptr<KvCacheImpl> cache;  // the cache whose bookkeeping it advances, or null
};

// Arguments reach a CommandListImpl already checked and normalized
// (RopeConfig::rotary_dim filled in).
class CommandListImpl {
 public:
  virtual ~CommandListImpl();
  std::vector<Recipe> recipes;  // every op recorded, in order (kept by the frontend)
  std::vector<std::shared_ptr<KvCacheImpl>> caches;  // those the recipes advance, once each
  // set_tokens' record of the caches' bookkeeping before a replay, in the order of
  // |caches| (memory kept from one replay to the next).
  struct SavedCache {
    std::vector<std::int32_t> next, oldest;
    std::vector<std::pair<std::size_t, std::int32_t>> slots;  // KvCacheImpl::journal
  };
  std::vector<SavedCache> saved;
  std::vector<std::int32_t> t_positions;  // set_tokens: the t of each token given (t, h, w)

  // Replay: begin_replay() sets the recorded ops aside; the recipes then record them
  // again; end_replay() keeps the new ones (on Vulkan reusing the encoded command buffer
  // when only parameter bytes changed), abort_replay() restores the old ones.
  virtual void begin_replay() = 0;
  virtual void end_replay() = 0;
  virtual void abort_replay() noexcept = 0;
  virtual const void* owner() const = 0;
  virtual void copy(std::shared_ptr<TensorImpl> src, std::shared_ptr<TensorImpl> dst) = 0;
  // |k| is null for rope on one tensor.
  virtual void rope(std::shared_ptr<TensorImpl> x, std::shared_ptr<TensorImpl> k,
                    std::span<const std::int32_t> positions, const RopeConfig& config) = 0;
  virtual void attn_scores(std::shared_ptr<TensorImpl> q, std::shared_ptr<TensorImpl> k,
                           std::shared_ptr<TensorImpl> scores, std::shared_ptr<TensorImpl> mask,
                           const ScoresParams& params) = 0;
  // |sinks|: n_heads values, or empty.
  virtual void attn_softmax(std::shared_ptr<TensorImpl> scores, std::shared_ptr<TensorImpl> probs,
                            const std::vector<float>& sinks) = 0;
  virtual void attn_weighted_sum(std::shared_ptr<TensorImpl> probs, std::shared_ptr<TensorImpl> v,
                                 std::shared_ptr<TensorImpl> out) = 0;
  virtual void kv_append(std::shared_ptr<KvCacheImpl> cache, std::shared_ptr<TensorImpl> k,
                         std::shared_ptr<TensorImpl> v, std::span<const std::int32_t> dst_rows,
                         std::span<const std::int32_t> positions) = 0;
  virtual void kv_copy_sequence(std::shared_ptr<KvCacheImpl> cache, std::size_t src, std::size_t dst) = 0;
  virtual void attn_scores_cache(std::shared_ptr<TensorImpl> q, std::shared_ptr<KvCacheImpl> cache,
                                 std::shared_ptr<TensorImpl> scores, std::shared_ptr<TensorImpl> mask,
                                 const ScoresParams& params) = 0;
  virtual void attn_weighted_sum_cache(std::shared_ptr<TensorImpl> probs, std::shared_ptr<KvCacheImpl> cache,
                                       std::shared_ptr<TensorImpl> out, std::vector<std::int32_t> q_seq) = 0;
  // Attention in one op (CommandList::attention): |sinks| n_heads values, or empty.
  virtual void attention(std::shared_ptr<TensorImpl> q, std::shared_ptr<TensorImpl> k, std::shared_ptr<TensorImpl> v,
                         std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask, const ScoresParams& params,
                         const std::vector<float>& sinks, AttentionPath path) = 0;
  virtual void attention_cache(std::shared_ptr<TensorImpl> q, std::shared_ptr<KvCacheImpl> cache,
                               std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                               const ScoresParams& params, const std::vector<float>& sinks, AttentionPath path) = 0;
  virtual void submit_and_wait() = 0;
  // CommandList::submit: null when the work is already done. |sync|: the caller's
  // semaphores, or null. By default (the CPU backend) runs the list at once and refuses
  // semaphores.
  virtual std::shared_ptr<SubmittedImpl> submit(const SemaphoreSync* sync);
  // CommandList::record; |command_buffer| is a VkCommandBuffer. Backends that cannot
  // record into a caller's command buffer refuse (external.cpp).
  virtual void record(void* command_buffer, const RecordOptions& options);
  virtual std::vector<OpTiming> timings() const = 0;
  virtual CommandStats stats() const = 0;
};

}  // namespace vkattn::detail
