// KvCache: one layer's keys and values for several sequences, in a ring buffer whose
// memory never grows (Mistral's rolling buffer, with StreamingLLM's attention sinks).
//
// K is [n_seqs, capacity, n_kv_heads, head_dim] and V the same with v_head_dim (which
// defaults to head_dim): each sequence's slice has the layout of plain
// [n_keys, n_kv_heads, head_dim] K/V tensors, so attention reads
// the ring exactly as it reads plain tensors. The token at position
// p of a sequence lives in slot p when p < n_sinks (kept for ever), else in slot
// n_sinks + (p - n_sinks) % (capacity - n_sinks). Keys are stored as appended: rotate them
// with RoPE first (Mistral style). The host keeps, per sequence, the position held in
// every slot, so attention reads the ring in place and never sees an overwritten or empty
// slot (KvRope says whether keys are stored rotated or rotated as they are read). A model
// has one cache per layer; each is two device buffers (one for a latent cache), so even
// 100 layers stay far below maxMemoryAllocationCount (at least 4096).
//
// A paged cache (KvCacheConfig::paged; vLLM's PagedAttention) keeps the same slots and
// the same rules, but the rows behind them live in a pool of blocks of block_size slots
// that the sequences share: a sequence takes a block when it first writes one of its
// capacity / block_size block-sized runs of slots, gives its blocks back when reset or
// truncated, and kv_copy_sequence makes a sequence that shares the source's blocks
// (copy-on-write) instead of copying its rows. docs/kv-cache.md: Paged caches.
//
// Methods that change bookkeeping (reset, truncate, and CommandList::kv_append /
// kv_copy_sequence) take effect when called or recorded; GPU writes happen at submit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "vkattn/export.h"
#include "vkattn/types.hpp"

namespace vkattn {

namespace detail {
class KvCacheImpl;
}

// How keys meet RoPE.
enum class KvRope {
  stored,   // keys are appended already rotated at their absolute positions (Mistral's
            // rolling buffer); attention reads them as they are. Default.
  on_read,  // keys are appended unrotated; attention rotates each key by its position
            // inside the cache (sinks 0..n_sinks-1, then the ring's keys oldest first) and
            // the query by its own in-cache position (StreamingLLM), so positions stay
            // below capacity and generation can go on for ever. Callers still pass
            // absolute positions everywhere (kv_append, AttentionTokens::q_positions): the
            // cache converts them.
};

// The shape fields have no defaults: n_kv_heads, head_dim and capacity must be set (0, the
// value they start with, is rejected with InvalidArgument). A default capacity would
// quietly turn attention into a sliding window over that many tokens.
struct KvCacheConfig {
  std::size_t n_seqs = 1;      // sequences held at once; >= 1, n_seqs x capacity <= 2^31 - 1 (paged too); default 1
  std::size_t n_kv_heads = 0;  // required: the model's KV heads; >= 1
  std::size_t head_dim = 0;    // required: [1, kMaxAttentionHeadDim]; even for f16
  std::size_t capacity = 0;    // required: slots per sequence; in (n_sinks, 2^30]
  DType dtype = DType::f16;    // f32, f16 (default), q8_0 or q4_0 (widths a multiple of 32)
  std::size_t n_sinks = 0;     // first positions kept for ever (StreamingLLM: 4); < capacity
  KvRope rope = KvRope::stored;
  RopeConfig rope_config{};  // on_read: the rotation attention applies (attention factor 1, no rotary_offset, no M-RoPE)
  // V's head dim where it differs from K's (DeepSeek without absorption: K 192, V 128);
  // 0 = head_dim. [1, kMaxAttentionHeadDim], even for f16, a multiple of 32 for q8_0/q4_0.
  // Attention's output is [n_tokens, n_heads, v_head_dim].
  std::size_t v_head_dim = 0;
  // A latent cache (DeepSeek's absorbed MLA, llama.cpp's K-only cache): V is the first
  // v_head_dim dims of each key row, stored once, so a token costs one K row. v_head_dim
  // (0 = head_dim) must be <= head_dim; kv_append takes K alone. Default false.
  bool latent = false;
  // Paged: K and V live in a pool of n_blocks blocks of block_size slots, shared by the
  // sequences; a sequence takes blocks as it first fills their slots (capacity is then
  // the most slots one sequence may reach, a multiple of block_size, and n_seqs the most
  // sequences), returns them when reset or truncated, and shares them with the copies
  // kv_copy_sequence makes (a shared block is copied before it is written). Running out
  // of blocks is Error(out_of_memory) from the op that needed them, changing nothing.
  // Default false: every sequence owns capacity slots from the start.
  bool paged = false;
  std::size_t block_size = 16;  // paged: slots per block; a power of two in [1, 2^16]; default 16
  std::size_t n_blocks = 0;     // paged: required, the pool's blocks; in [1, 2^31 / block_size] (2^31 - 1 at block size 1)
};

class VKATTN_API KvCache {
 public:
  KvCache() = default;
  explicit KvCache(std::shared_ptr<detail::KvCacheImpl> impl);
  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache();

  bool valid() const noexcept { return impl_ != nullptr; }
  const KvCacheConfig& config() const;
  // Device bytes of K and V together, fixed for the cache's lifetime:
  // n_seqs * capacity * n_kv_heads * (head_dim + v_head_dim) * element size, K and V each
  // rounded up to whole 32-bit words; K's alone for a latent cache. A paged cache:
  // n_blocks * block_size rows in place of n_seqs * capacity.
  std::size_t bytes() const;

  // The next position to append to |seq| (0 when empty).
  std::int32_t next_position(std::size_t seq) const;
  // Tokens of |seq| held now (at most capacity).
  std::size_t length(std::size_t seq) const;
  // Position held in each slot of |seq|, -1 for an empty slot.
  std::vector<std::int32_t> slot_positions(std::size_t seq) const;
  // Slot of position |position| (any position >= 0).
  std::size_t slot(std::int32_t position) const;

  // Empties |seq| (a paged cache: returns its blocks to the pool). Throws InvalidArgument,
  // changing nothing, while a command list that has not run reads |seq| without writing it
  // (a fork from it; in a paged cache, the copy of a block it shares): submit or destroy
  // that list first. Lists that write |seq| do not hold it back.
  void reset(std::size_t seq);
  // Drops positions >= |position| of |seq| (rejected speculative tokens). Throws
  // InvalidArgument, changing nothing, if the cache no longer holds what it held when
  // |position| was next: positions the ring has since overwritten; and while a command list
  // that has not run appends to |seq| or reads it (a fork from it; in a paged cache, the
  // copy of a block it shares): submit or destroy that list first. A paged cache returns
  // the blocks none of whose slots holds a position any more.
  void truncate(std::size_t seq, std::int32_t position);

  // A paged cache's pool (InvalidArgument on a cache that is not paged). Blocks no
  // sequence holds:
  std::size_t free_blocks() const;
  // The block behind each of |seq|'s capacity / block_size runs of slots, -1 where it
  // holds none (run i: slots [i * block_size, (i + 1) * block_size)).
  std::vector<std::int32_t> block_table(std::size_t seq) const;
  // Blocks that kv_append of |n_tokens| more tokens to |seq| would take from the pool now
  // (blocks for runs it first fills, and copies of shared blocks it writes), so that an
  // engine can evict or preempt before it appends; 0 when they fit the blocks it holds.
  std::size_t blocks_to_append(std::size_t seq, std::size_t n_tokens) const;
  // Sequences holding each block (0: free), n_blocks values.
  std::vector<std::int32_t> block_refs() const;

  const std::shared_ptr<detail::KvCacheImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::KvCacheImpl> impl_;
};

struct KvAppendOptions {
  // More than capacity - n_sinks new ring tokens (positions >= n_sinks) of one sequence in
  // one call is an error, unless this is set: then only the last of them stay (earlier
  // ones are not written; sinks always are).
  bool keep_last = false;
};

}  // namespace vkattn
