// CommandList: records ops; nothing runs until submit_and_wait(). On Vulkan the whole list
// becomes one command buffer and one vkQueueSubmit, with a barrier only where an op reads
// or overwrites what an earlier op wrote. A list can be submitted again: it reruns the
// same ops on the tensors' current contents. Arguments are checked when an op is
// recorded; a bad one throws InvalidArgument and records nothing. An op's output may not
// be one of its inputs (the kernels read inputs while writing outputs), except where an
// op says so: attn_softmax in place, rope on its own tensor. A list is used by one thread
// at a time (a call made while another thread is inside the list throws InvalidArgument);
// a moved-from list throws InvalidArgument from every member.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vkattn/export.h"
#include "vkattn/kv_cache.hpp"
#include "vkattn/tensor.hpp"
#include "vkattn/types.hpp"

// Vulkan's command buffer handle, as <vulkan/vulkan.h> declares it (VkCommandBuffer is a
// pointer to it), so that this header needs no Vulkan header.
struct VkCommandBuffer_T;

namespace vkattn {

namespace detail {
class CommandListImpl;
class SubmittedImpl;
}  // namespace detail

struct SubmitSemaphores;  // the caller's semaphores: vkattn/vulkan.hpp

// A submission that may still be running (CommandList::submit). A copyable handle; it
// keeps what the submission uses (its command buffer, parameters, and every tensor and
// cache it reads or writes) alive until the submission finishes, whatever is destroyed
// first. Each copy is used by one thread at a time; copies may be used by other threads
// than the list's, also while it submits again (docs/reliability.md).
class VKATTN_API Submitted {
 public:
  Submitted() = default;  // a finished submission (also what the CPU backend returns)
  explicit Submitted(std::shared_ptr<detail::SubmittedImpl> impl);
  // Whether it has finished; never blocks. Throws Error(device_lost).
  bool ready() const;
  // Waits up to |timeout_ns| nanoseconds: true once it has finished, false on timeout (it
  // keeps running). Throws Error(device_lost).
  bool wait(std::uint64_t timeout_ns = UINT64_MAX) const;

 private:
  std::shared_ptr<detail::SubmittedImpl> impl_;
};

// How CommandList::record joins the caller's commands (docs/interop.md has the contract).
struct RecordOptions {
  // A global memory barrier before the first dispatch, from ALL_COMMANDS / MEMORY_WRITE to
  // COMPUTE_SHADER / SHADER_READ | SHADER_WRITE: every earlier command of the queue is done
  // and its writes are visible to vkattn. Default true; false when the caller records such
  // a barrier itself.
  bool entry_barrier = true;
  // A global memory barrier after the last dispatch, from COMPUTE_SHADER / SHADER_WRITE to
  // dst_stage_mask / dst_access_mask. Default true; false when the caller records it.
  bool exit_barrier = true;
  // Checked: accesses the stages perform (Vulkan's table; docs/interop.md).
  std::uint32_t dst_stage_mask = 0;   // VkPipelineStageFlags; 0: ALL_COMMANDS
  std::uint32_t dst_access_mask = 0;  // VkAccessFlags; 0: MEMORY_READ | MEMORY_WRITE
};

struct CommandListOptions {
  bool timestamps = false;  // measure each op's device time; see CommandList::timings()
};

struct OpTiming {
  std::string op;   // "rope", "copy", ...
  double ms = 0.0;  // device time (Vulkan timestamps) or host time (CPU backend)
};

// Which kernels ran a CommandList::attention op (docs/kernel-shapes.md describes each).
enum class AttentionKernel {
  reference,       // the CPU backend's plain loops
  three_stages,    // attn_scores, attn_softmax and attn_weighted_sum on a temporary
  lane_per_key,    // attn_fused.comp: a lane per key (the CPU shape's fused kernel)
  decode,          // attn_decode.comp: few rows, keys split across the device (GPU shape)
  group,           // attn_decode_group.comp: a big query group over wide heads (absorbed MLA)
  tiled,           // attn_tiled.comp: tiles of rows and keys in shared memory (GPU prefill)
  matrix,          // attn_mt.comp on the device's matrix units (AttentionPrecision::f16_products)
  matrix_standin,  // attn_mt.comp on its plain stand-in of the matrix units (VKATTN_MATRIX=standin)
};
VKATTN_API const char* to_string(AttentionKernel kernel);

// One CommandList::attention op as recorded (after a replay, as rebuilt).
struct AttentionRun {
  AttentionKernel kernel = AttentionKernel::reference;
  std::uint32_t splits = 1;  // workgroups' key ranges merged afterwards (1: none); for the
                             // three stages, the weighted sum's
  // The precision the kernels computed at: f32 where f16_products was asked and no kernel
  // of that precision could take the op (the exact kernels ran instead).
  AttentionPrecision precision = AttentionPrecision::f32;
  // Whether the kernels read only the keys each token's mask leaves (AttentionConfig::
  // mask_keys; a token whose mask leaves more was read whole) or its key list names,
  // rather than every key.
  bool sparse = false;
};

struct CommandStats {
  std::size_t ops = 0;                    // dispatches recorded (on Vulkan a weighted sum that splits its
                                          // keys records two, rope(q, k) followed by kv_append of that k
                                          // one: docs/design.md; on the CPU backend, ops)
  std::size_t barriers = 0;               // pipeline barriers between ops (Vulkan); 0 on the CPU backend
  std::size_t submits = 0;                // submissions (submit() counts when it submits)
  std::size_t texel_reads = 0;            // inputs bound as uniform texel buffers (Vulkan; see
                                          // DeviceLimits::max_texel_buffer_elements); 0 on the CPU backend
  std::size_t encodings = 0;              // times the ops were recorded into a command buffer, the list's
                                          // own or a caller's (record) (Vulkan; a set_tokens that changes
                                          // only parameters keeps the last one)
  std::vector<AttentionRun> attention{};  // each attention op, in recording order
};

class VKATTN_API CommandList {
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
  // With config.mrope, three per token ([n_tokens, 3]: t, h, w). The frequency table is
  // built once here, on the host.
  void rope(Tensor& x, std::span<const std::int32_t> positions, const RopeConfig& config = {});

  // The same on Q [n_tokens, n_heads, head_dim] and K [n_tokens, n_kv_heads, head_dim] in
  // one dispatch: same n_tokens, head_dim and dtype; distinct tensors.
  void rope(Tensor& q, Tensor& k, std::span<const std::int32_t> positions, const RopeConfig& config = {});

  // Attention, in three stages that can be recorded separately (docs/attention.md).
  // Positions and sequence ids (AttentionTokens) are copied when an op is recorded.
  // q [n_tokens, n_heads, head_dim] f32 or f16; k, v [n_keys, n_kv_heads, head_dim] f32,
  // f16, q8_0 or q4_0 (v may be another width, v_head_dim, and dtype); n_heads a multiple
  // of n_kv_heads; head_dim <= kMaxAttentionHeadDim.
  // scores and probs are f32 [n_tokens, n_heads, n_keys], key order as in k; a key the
  // token cannot see scores -inf and gets probability exactly 0.
  // |mask|, if given, is f32 [n_tokens, n_keys], added to every head's scores.
  // config.sinks must be empty: sinks enter the softmax's denominator, not the scores, so
  // they go to attn_softmax (a config with sinks given here is refused rather than losing
  // them silently when attn_softmax is not given them too).
  void attn_scores(const Tensor& q, const Tensor& k, Tensor& scores, const AttentionTokens& tokens,
                   const AttentionConfig& config = {}, const Tensor* mask = nullptr);
  // probs = softmax over each row of scores (max subtracted, f32), with the per-head sink
  // logits of |config| in the denominator; a row with no visible key is all zeros.
  // probs may be scores itself (in place).
  void attn_softmax(const Tensor& scores, Tensor& probs, const AttentionConfig& config = {});
  // out [n_tokens, n_heads, v_head_dim] f32 = probs x v (v [n_keys, n_kv_heads,
  // v_head_dim]), per head's kv head.
  void attn_weighted_sum(const Tensor& probs, const Tensor& v, Tensor& out);

  // Writes each token's key and value (k, v: [n_tokens, n_kv_heads, head_dim], both f32 or
  // both f16, converted to the cache's dtype) into slot(position) of its sequence, one dispatch for
  // any mix of sequences. seq_ids may be empty only for a one-sequence cache. Each sequence's tokens must
  // have consecutive positions continuing at next_position(seq), in order. On a bad
  // argument nothing changes. The cache's bookkeeping advances when the append is
  // recorded, so that later ops of the same list see it: submit such a list once (a
  // resubmission rewrites the same slots). A list destroyed before it ran (submitted, or
  // recorded into a command buffer) puts back what its appends and forks changed, where
  // no later list's op or reset built on them; otherwise the sequences they wrote are
  // refused (InvalidArgument) until KvCache::reset. A paged cache takes the blocks the
  // tokens need from its pool here (and copies shared blocks they write first, as the
  // sequences sharing them hold them when the list runs: submitting the list after a
  // change of theirs is refused, docs/kv-cache.md): Error(out_of_memory) when it has too
  // few (KvCache::blocks_to_append says how many), changing nothing.
  void kv_append(KvCache& cache, const Tensor& k, const Tensor& v, std::span<const std::int32_t> positions,
                 std::span<const std::int32_t> seq_ids = {}, const KvAppendOptions& options = {});
  // The same for a latent cache (KvCacheConfig::latent), which takes K alone: its values
  // are the first v_head_dim dims of each key row. One dispatch on Vulkan. A latent cache
  // refuses the overload above, and other caches this one.
  void kv_append(KvCache& cache, const Tensor& k, std::span<const std::int32_t> positions,
                 std::span<const std::int32_t> seq_ids = {}, const KvAppendOptions& options = {});
  // Makes |dst| a copy of |src| (keys, values and bookkeeping): prefix sharing. A paged
  // cache forks: |dst| returns its own blocks and shares every block of |src|, except the
  // one src's next append writes, which it copies (one block at most); Error(out_of_memory)
  // when the pool has no block for it, changing nothing.
  void kv_copy_sequence(KvCache& cache, std::size_t src, std::size_t dst);

  // Attention over a cache: n_keys = capacity, keys in slot order (scores and probs are
  // [n_tokens, n_heads, capacity]); each token sees the slots of its own sequence that
  // hold a position it may see (tokens.q_seq_ids, required when the cache holds several
  // sequences; tokens.k_* must be empty). Throws if a
  // token needs a key its sequence's ring has already overwritten (a chunk longer than
  // capacity - n_sinks - window + 1: append and attend in smaller chunks).
  void attn_scores(const Tensor& q, const KvCache& cache, Tensor& scores, const AttentionTokens& tokens,
                   const AttentionConfig& config = {}, const Tensor* mask = nullptr);
  // |tokens|: as given to attn_scores; q_seq_ids says which sequence each query row reads
  // (may be empty only for a one-sequence cache), q_positions may be empty, k_* must be.
  void attn_weighted_sum(const Tensor& probs, const KvCache& cache, Tensor& out, const AttentionTokens& tokens = {});

  // Attention in one op: out [n_tokens, n_heads, v_head_dim] f32 = softmax(scores) x v,
  // with the scores, visibility, biases and sinks of attn_scores and attn_softmax (the same
  // arguments, checked the same way), without writing scores or probabilities anywhere.
  // v: [n_keys, n_kv_heads, v_head_dim], v_head_dim in [1, kMaxAttentionHeadDim] (K's or
  // another: DeepSeek's 192 and 128), its dtype k's or another. config.path picks the kernels: on Vulkan a
  // fused flash-attention kernel, or the three stages on a temporary (by default on CPU
  // devices, where they are faster); docs/attention.md: Fused attention. Every dispatch is
  // timed as "attention".
  // |mask| may also be a key list (0.8), i32 [n_tokens, width], width <= kMaxKeyList: the
  // keys each token may see (indices into k, or a cache's slots), as an f32 mask of 0 at
  // them and -inf elsewhere would say, without the n_tokens x n_keys floats (DeepSeek
  // V3.2's and GLM-5's top-k indices). Entries outside [0, n_keys) (-1: none) name no key;
  // a key named twice counts once. An i32 mask is always such a list, never 0/1 flags.
  // Kernels that read lists read only the listed keys (AttentionRun::sparse); the others
  // read mask rows built from the list on the device.
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out, const AttentionTokens& tokens,
                 const AttentionConfig& config = {}, const Tensor* mask = nullptr);
  // The same over a cache's keys and values, as attn_scores and attn_weighted_sum on a
  // cache (tokens.q_seq_ids as there).
  void attention(const Tensor& q, const KvCache& cache, Tensor& out, const AttentionTokens& tokens,
                 const AttentionConfig& config = {}, const Tensor* mask = nullptr);

  // Replay: makes the list record its ops again for the next tokens, as if each op had
  // been given |positions| (rope's and kv_append's positions, attention's q_positions
  // where the op took positions) and |seq_ids| (every op's sequence ids where it took
  // them; empty: each op keeps the ids it was recorded with, not a replay's), with
  // everything else as recorded. A decode step
  // recorded once is then submitted for every token with ~1 us of host time per op: on
  // Vulkan the command buffer is kept and only parameter bytes (positions, the cache's
  // slot tables) are rewritten, so the same list stays valid until shapes change. What may
  // change between replays: the positions and sequence ids, and the contents of tensors
  // and caches. What may not: the number of tokens (every op of the list must take the
  // same number; positions.size() must be it, or, for a list with a rope op of
  // config.mrope, 3 x it: (t, h, w) per token, which M-RoPE ops take whole and every other
  // op as t; given one per token, M-RoPE ops take t = h = w, as text tokens have), shapes,
  // which tensors and caches. Each op's
  // checks run again: kv_append advances its cache's bookkeeping as when recorded, so
  // positions must continue each sequence (after reset or truncate, give positions that
  // continue it), after the tokens the list last had. A list whose appends or forks (as
  // recorded, or last replayed) have not run is refused (0.14.1: replayed, those tokens'
  // rows were never written, though the cache counted them): submit it first (or record
  // it into a command buffer), or destroy it, which puts them back. A list that only reads
  // caches replays as often as asked. On an error nothing changes: the list and the caches
  // stay as they were.
  // A list keeps every tensor and cache it records alive, also after their handles go.
  // set_tokens waits for the list's own pending submission; command buffers the list was
  // recorded into (record) read the rewritten parameters too, so they serve the next
  // tokens as they are: call it only when none of them is pending; such a replay counts
  // as the list running, as record does (see record; docs/interop.md). Sequence ids given
  // to a list none of whose ops took any are refused (they would be dropped).
  void set_tokens(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids = {});
  // The same, with M-RoPE ops taking |mrope_positions| ((t, h, w) per token, or one per
  // token: t = h = w) and every other op |positions|, one per token: the cache positions
  // once an image has made them differ from t (its patches share t; the text after it
  // continues at the largest position + 1, short of the token's index). Empty
  // |mrope_positions|: as the call above. 0.14.
  void set_tokens(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids,
                  std::span<const std::int32_t> mrope_positions);
  // The number of tokens set_tokens takes: what the list's ops that take positions or
  // sequence ids were recorded with; 0 when none has. Where they took different numbers,
  // the largest (set_tokens then refuses the list).
  std::size_t n_tokens() const;

  // Runs everything recorded so far and waits for it. Error(timeout) after
  // DeviceOptions::submit_timeout_ms: the submission keeps running, and the list's next
  // submit and its destruction wait for it (a next submit then runs the list again: a
  // retry is no wait; docs/reliability.md). Error(device_lost): the backend is lost for
  // good (every later call on it fails so), make a new one.
  void submit_and_wait();

  // Records the list's dispatches and the barriers between them into |command_buffer|, a
  // primary or secondary command buffer of the backend's VkDevice (vkattn/vulkan.hpp: a
  // backend on the caller's device), in the recording state, outside a render pass, whose
  // pool's queue family is the backend's. The caller submits it; nothing is submitted here.
  // What stays alive until that submission completes (descriptor sets, parameters,
  // intermediate tensors) lives as long as this list: destroy the list only after every
  // submission of a command buffer it was recorded into has completed. A list may be
  // recorded into several command buffers and again after more ops are recorded; each
  // recording runs every op recorded so far (kv_append included: a cache's bookkeeping
  // advanced when the op was recorded, so run a list with kv_append once). A record counts
  // as the list running, and so do its replays (set_tokens) while the command buffer holds
  // every op that changes a cache and no submit of the list's own came after it. Throws
  // InvalidArgument on a backend not made on a caller's device, or with timestamps on.
  void record(VkCommandBuffer_T* command_buffer, const RecordOptions& options = {});

  // Submits everything recorded so far and returns at once (one vkQueueSubmit on Vulkan;
  // the CPU backend runs the list before returning). A list has one submission in flight
  // at a time: submitting it again first waits for the last one (Error(timeout) after
  // DeviceOptions::submit_timeout_ms, submitting nothing). Until it finishes, nothing may
  // write what it reads or read what it writes, except Backend::download, download_i32,
  // download_raw and save_cache, which wait for the last submission that wrote the tensor
  // or cache, and upload, upload_raw and a cache's reset, truncate and restore_cache, which
  // wait for those that read or write it (kept handle or not). timings() are not read for
  // these submissions: empty after one on Vulkan (the CPU backend, which runs the list
  // here, has its times).
  Submitted submit();
  // The same, waiting on and signalling the caller's semaphores (vkattn/vulkan.hpp), on a
  // backend made on the caller's device.
  Submitted submit(const SubmitSemaphores& semaphores);
  // Waits up to |timeout_ns| nanoseconds for the list's last submission (by submit, or by a
  // submit_and_wait that threw Error(timeout)) without running anything: true once it has
  // finished, or when none is in flight (the CPU backend's, a command buffer the list was
  // recorded into, which the caller submitted); false on timeout (it keeps running). Throws
  // Error(device_lost). (0.13)
  bool wait(std::uint64_t timeout_ns = UINT64_MAX) const;

  // Per-dispatch times of the last submission, in recording order, named by their op (a
  // split weighted sum's two dispatches both say "attn_weighted_sum"; rope and kv_append
  // recorded as one dispatch, "rope+kv_append"); empty unless the list was created with
  // CommandListOptions::timestamps, and after a submission that failed or timed out.
  std::vector<OpTiming> timings() const;
  CommandStats stats() const;

 private:
  std::unique_ptr<detail::CommandListImpl> impl_;
};

}  // namespace vkattn
