// KV cache bookkeeping, shared by both backends: which position each slot holds, and the
// plans for appends and copies. Plans are computed (and checked) in full before anything
// changes, so a bad argument leaves the cache exactly as it was.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/tensor_impl.hpp"
#include "common/use_flag.hpp"
#include "vkattn/error.hpp"
#include "vkattn/kv_cache.hpp"

namespace vkattn::detail {

// A bookkeeping word changed, with what it held, and which log it belongs to (a command
// list's log of the cache: CommandListImpl::logs).
struct LoggedWord {
  std::int32_t* word;
  std::int32_t old;
  std::uint32_t log;
};

// The last change of a sequence's bookkeeping (or of a paged cache's free list): its tick
// of the cache's clock, the list that made it (CommandListImpl::id; 0: outside lists), and
// the tick at which that list's unbroken run of changes to it began.
struct SeqTouch {
  std::uint64_t at = 0, by = 0, since = 0;
  std::uint64_t read = 0;  // the last op that read it without writing it (a fork's source, a copied block's holder)
};
struct LoggedTouch {
  SeqTouch* touch;
  SeqTouch old;
  std::uint32_t log;
};

class KvCacheImpl {
 public:
  KvCacheImpl(const void* owner, const KvCacheConfig& config, std::shared_ptr<TensorImpl> k, std::shared_ptr<TensorImpl> v);

  const void* const owner;
  const KvCacheConfig config;
  // K [n_seqs, capacity, n_kv_heads, head_dim] and V the same with v_head_dim; V is null
  // for a latent cache, whose values are the first v_head_dim dims of K's rows (null
  // rather than an alias of K, so that nothing copies, saves or counts them twice).
  const std::shared_ptr<TensorImpl> k, v;
  // The slot table on the device: i32, per sequence meta_stride() words (its capacity
  // entries of slot_pos as the device's kv_append ops have written them, then for a paged
  // cache its block table), then each sequence's occupancy bound (one past its last
  // occupied slot, which kv_append raises), read by attention. The CPU backend keeps one
  // too, which its ops write and read as they run, so that attention reads the cache as
  // it is when the list runs there as well.
  std::shared_ptr<TensorImpl> slots;
  std::size_t meta_stride() const { return config.capacity + entries; }
  std::size_t bound_offset() const { return config.n_seqs * meta_stride(); }
  std::size_t slot_table_words() const { return config.n_seqs * (meta_stride() + 1); }
  // Writes slot_pos (and a paged cache's block tables) and the bounds it implies to
  // |slots| after the host changed it outside a command list (creation, restore_cache).
  void publish() const;
  // The same for sequence |seq| alone (reset, truncate): the host's words of the other
  // sequences include appends recorded but not run, which lists that run first must not
  // see.
  void publish(std::size_t seq) const;

  // A paged cache (KvCacheConfig::paged): each sequence's |entries| = capacity /
  // block_size runs of block_size slots map to blocks of the pool (table, -1: none), whose
  // rows hold K and V: slot j of sequence s is row table[s * entries + (j >> block_shift)]
  // * block_size + j % block_size. refs counts the sequences holding each block; the free
  // blocks are free_list[0, free_count), taken from the end. Every write goes through
  // set(), so that a refused replay puts the pool back too. Empty for a ring cache.
  std::size_t entries = 0;
  std::uint32_t block_shift = 0;
  std::vector<std::int32_t> table, refs, free_list;
  std::int32_t free_count = 0;
  // Calls |f| with each sequence whose table holds |block|.
  template <class F>
  void for_each_holder(std::int32_t block, F f) const {
    for (std::size_t e = 0; e < table.size(); ++e) {
      if (table[e] == block) f(e / entries);
    }
  }
  // The free list of a pool whose every block is free, as a new cache has it.
  static std::vector<std::int32_t> every_block_free(std::size_t n_blocks);
  // Each slot's row of K and V, n_seqs * capacity (-1: a paged sequence holds no block
  // there), from |words|, the slot table's (slots): what the CPU backend reads.
  std::vector<std::int32_t> row_map(std::span<const std::int32_t> words) const;
  // Returns |seq|'s blocks none of whose slots holds a position (all of them: reset).
  void release_empty_blocks(std::size_t seq);

  std::size_t ring() const { return config.capacity - config.n_sinks; }
  std::size_t slot(std::int32_t position) const;

  // Changes made outside command lists (reset, truncate, restore_cache): the tick (|clock|)
  // of the last one, and per sequence of its last one. A list's appends and forks planned
  // before a later change of a sequence they write are stale: submitting them is refused
  // (CommandListImpl::check_planned).
  std::uint64_t changes = 0;
  std::vector<std::uint64_t> changed_at;
  void changed(std::size_t seq) {
    changes = ++clock;
    changed_at[seq] = clock;
    last_writer = 0;
    touched[seq] = {clock, 0, clock, 0};
    ran_at[seq] = clock;
    std::erase_if(dropped, [&](const Dropped& d) { return d.seq == seq; });
  }
  void changed_all() {
    changes = ++clock;
    std::fill(changed_at.begin(), changed_at.end(), clock);
    last_writer = 0;
    std::fill(touched.begin(), touched.end(), SeqTouch{clock, 0, clock, 0});
    std::fill(ran_at.begin(), ran_at.end(), clock);
    dropped.clear();
  }
  // Ticks with every change of the bookkeeping, in lists or not: when each sequence was
  // last reset (or restored), so that a list destroyed unrun spares a sequence reset after
  // its last op there.
  std::uint64_t clock = 0;
  std::vector<std::uint64_t> reset_at;
  // The order lists run in (CommandListImpl::check_planned): per sequence, and at index
  // n_seqs a paged cache's free list, its last change (journaled with the words: a list
  // destroyed unrun, or a refused replay, puts it back) and the latest change known to
  // have run (changes outside lists run at once; a list's when it is submitted).
  std::vector<SeqTouch> touched;
  std::vector<std::uint64_t> ran_at;
  // Per sequence, the ticks between which lists destroyed unrun made the changes they put
  // back there (from the first one's start to the last one's put-back; several are joined):
  // a ring start they moved moves back, which attention planned on them in between
  // (KvRope::on_read with sinks) would not see. Attention planned before or after sees
  // the ring as it will be.
  // Spans ending before the sequence's ran_at are dropped (attention planned then is
  // refused for that already); overlapping ones are joined, and past kSpans the two
  // nearest (refusing those planned between them: an engine dropping lists over and over
  // without running one). Fixed room: a put-back happens in a destructor.
  struct PutBacks {
    static constexpr std::size_t kSpans = 4;
    struct Span {
      std::uint64_t from, to;
    };
    std::array<Span, kSpans> spans{};
    std::size_t n = 0;
    void add(std::uint64_t from, std::uint64_t to, std::uint64_t ran_at) noexcept;
    bool covers(std::uint64_t tick) const noexcept;
  };
  std::vector<PutBacks> put_back;
  // |i|'s changes up to |tick| have run; so have those of lists destroyed unrun, which
  // never will, once what they were planned after has (|dropped|: each waiting entry).
  struct Dropped {
    std::size_t seq;
    std::uint64_t need, last;
  };
  std::vector<Dropped> dropped;
  void ran_to(std::size_t i, std::uint64_t tick) noexcept;
  void drop_planned(std::size_t i, std::uint64_t need, std::uint64_t last) noexcept;
  std::vector<LoggedTouch>* touch_journal = nullptr;
  void touch(std::size_t i, std::uint64_t list, bool reads) {
    SeqTouch& t = touched[i];
    if (touch_journal) touch_journal->push_back({&t, t, journal_log});
    t = {clock, list, t.by == list ? t.since : clock, reads ? clock : t.read};
  }
  // Blocks taken from and returned to the free list, counted: whether an op did either.
  std::uint64_t blocks_taken = 0, blocks_freed = 0;
  // The list whose append or fork last changed the bookkeeping (CommandListImpl::id; 0:
  // none, or a change outside lists since), so that a list destroyed without running
  // knows whether it may put back what its ops changed (CommandListImpl::undo_unrun).
  std::uint64_t last_writer = 0;
  // Which of a list's logs is this cache's (CommandListImpl::log_of), for the list that
  // looked last: found in O(1) op after op.
  std::uint64_t hint_list = 0;
  std::size_t hint_slot = 0;
  // Per sequence, 1 where it holds positions a list planned and was destroyed without
  // running, when later changes built on them: the device never wrote them, so every
  // op over the cache, and save_cache, is refused (check_written) until the sequence is
  // reset or the cache restored.
  // |n_unwritten| counts them, so that the check costs nothing while none is.
  std::vector<std::uint8_t> unwritten;
  std::size_t n_unwritten = 0;
  void set_unwritten(std::size_t seq, bool on) {
    if (static_cast<bool>(unwritten[seq]) == on) return;
    unwritten[seq] = on;
    n_unwritten = on ? n_unwritten + 1 : n_unwritten - 1;
  }
  void clear_unwritten() {
    std::fill(unwritten.begin(), unwritten.end(), std::uint8_t{0});
    n_unwritten = 0;
  }
  void check_written(const char* op) const {
    if (n_unwritten) refuse_unwritten(op, first_unwritten(), false);
  }
  std::size_t first_unwritten() const;
  // |named|: the op names the sequence (its "seq"), else the cache.
  [[noreturn]] void refuse_unwritten(const char* op, std::size_t seq, bool named) const;
  // |seq| (a sequence id |name| of |op|) when below n_seqs, else InvalidArgument.
  std::size_t check_seq(const char* op, std::size_t seq, const std::string& name = "seq") const;
  // A token's id, |array|[|index|] (its name made only when refused: replays check every
  // token's id, and must not allocate).
  std::size_t check_seq(const char* op, std::int32_t seq, const char* array, std::size_t index) const;

  std::vector<std::int32_t> slot_pos;  // [n_seqs * capacity], -1 when empty
  std::vector<std::int32_t> next;      // per sequence: next position to append
  std::vector<std::int32_t> oldest;    // per sequence: oldest ring position (>= n_sinks) held
  // While a list records an append or a fork, a replay runs (CommandList::set_tokens), or a
  // reset or truncate runs, where each write to the bookkeeping (slot_pos, next, oldest, a
  // paged cache's pool) logs the word and its old value, so that a list destroyed unrun, a
  // refused replay, or a reset that could not reach the device, can put back what it
  // changed, and only that; null otherwise. Each word names |journal_log|: in a list's log,
  // which cache it is (CommandListImpl::logs).
  std::vector<LoggedWord>* journal = nullptr;
  std::uint32_t journal_log = 0;
  void set(std::int32_t& word, std::int32_t value) {
    if (journal && word != value) journal->push_back({&word, word, journal_log});
    word = value;
  }

  // Per token, the row of K and V it goes to (seq * capacity + slot; a paged cache's
  // block row), or -1 when keep_last drops it; and per sequence what planning needs (kept
  // so that a replay plans without allocating). A paged cache's plan also has each kept
  // token's slot-table word (seq * meta_stride() + slot), the (block, copy) pairs of shared
  // blocks to copy before the tokens are written, and the (table index, block) entries it
  // changes, their blocks taken from the end of the free list in order.
  struct AppendPlan {
    std::vector<std::int32_t> dst_rows;
    std::vector<std::int32_t> expect, last;
    std::vector<std::int32_t> meta_rows, copies, changes;
  };
  // Checks an append and plans it into |plan|; throws InvalidArgument, or for a paged
  // cache with too few free blocks Error(out_of_memory), changing nothing.
  void plan_append(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids, const KvAppendOptions& options,
                   AppendPlan& plan) const;
  void apply_append(std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids, const AppendPlan& plan);
  // A paged cache's blocks for the kept tokens of |plan| (its dst_rows as ring rows, seq *
  // capacity + slot, on entry): fills the rest of the plan and returns the blocks it takes;
  // with |check|, Error(out_of_memory) when the pool has fewer free.
  std::size_t plan_blocks(AppendPlan& plan, bool check) const;
  // kv_copy_sequence. A paged fork shares src's blocks, except the one src's next append
  // writes (entry: its table index in dst's table, -1 when none), which dst gets a copy of:
  // block |to|, a copy of |from|, taken after dst's own blocks are returned.
  struct ForkPlan {
    std::int32_t entry = -1, from = -1, to = -1;
  };
  ForkPlan plan_copy_sequence(std::size_t src, std::size_t dst) const;
  void copy_sequence(std::size_t src, std::size_t dst, const ForkPlan& plan);
  // The paged parts of apply_append and copy_sequence.
  void apply_blocks(const AppendPlan& plan);
  void fork_blocks(std::size_t src, std::size_t dst, const ForkPlan& plan);
  // Returns block |b| held by one sequence fewer to the pool when none holds it.
  void drop_ref(std::int32_t b);
  // The keys' positions, sequences and (KvRope::on_read) in-cache positions, from |words|
  // (the slot table's) and p.ring (the ring's start when the op was recorded, as Vulkan's
  // kernels take it), into |p| (ScoresParams: the CPU backend reads them there).
  void fill_keys(ScoresParams& p, std::span<const std::int32_t> words) const;
  // KvRope::on_read: the position |position| of |seq| takes inside the cache now.
  std::int32_t cache_position(std::size_t seq, std::int32_t position) const;
  // Throws InvalidArgument when a query at |position| of |seq| needs a key the ring has
  // already overwritten (|p|: its window and chunk).
  void check_readable(const char* op, std::size_t token, std::size_t seq, std::int32_t position, const ScoresParams& p) const;
  UseFlag in_use;  // CacheInUse, CachesInUse
};

// Holds a cache's UseFlag for one call: its own, or that of a list that records over it or
// writes it (docs/reliability.md says what counts as using it). Nothing for a null cache
// (the call's checks name it).
class CacheInUse {
 public:
  CacheInUse(const KvCacheImpl* cache, const char* op, const char* param = "cache") : cache_(cache) {
    if (cache_) cache_->in_use.take(op, param, "a cache in use by another thread now", "a cache used by one thread at a time");
  }
  ~CacheInUse() {
    if (cache_) cache_->in_use.give_back();
  }
  CacheInUse(const CacheInUse&) = delete;
  CacheInUse& operator=(const CacheInUse&) = delete;

 private:
  const KvCacheImpl* cache_;
};

// Every cache a list writes (CommandListImpl::caches), in use while the list is submitted,
// recorded into a command buffer or replayed.
class CachesInUse {
 public:
  CachesInUse(const std::vector<std::shared_ptr<KvCacheImpl>>& caches, const char* op) : caches_(caches) {
    try {
      for (; taken_ < caches_.size(); ++taken_) {
        caches_[taken_]->in_use.take(op, "this", "a list over a cache another thread is using now",
                                     "a cache used by one thread at a time");
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~CachesInUse() { release(); }
  CachesInUse(const CachesInUse&) = delete;
  CachesInUse& operator=(const CachesInUse&) = delete;

 private:
  void release() noexcept {
    while (taken_ > 0) caches_[--taken_]->in_use.give_back();
  }
  const std::vector<std::shared_ptr<KvCacheImpl>>& caches_;
  std::size_t taken_ = 0;
};

// Sequence |seq|'s occupancy bound in slot positions |slot_pos| ([n_seqs, capacity], -1
// for an empty slot): one past its last occupied slot.
inline std::size_t occupancy_bound(std::span<const std::int32_t> slot_pos, std::size_t seq, std::size_t capacity) {
  std::size_t bound = capacity;
  while (bound > 0 && slot_pos[seq * capacity + bound - 1] < 0) --bound;
  return bound;
}

// V's head dim (KvCacheConfig::v_head_dim, 0 = head_dim).
inline std::size_t value_head_dim(const KvCacheConfig& c) { return c.v_head_dim ? c.v_head_dim : c.head_dim; }

struct KvShapes {
  Shape k, v;  // v empty for a latent cache (V lives in K)
};
// Checks a KvCacheConfig; returns the K and V shapes.
KvShapes check_kv_cache_config(const KvCacheConfig& config);
// Its paged fields (KvCacheConfig::paged).
void check_paging(const char* op, const KvCacheConfig& config);

// The cache behind a KvCache handle whose method |op| was called; an empty handle is refused.
KvCacheImpl& live(const std::shared_ptr<KvCacheImpl>& impl, const char* op);

}  // namespace vkattn::detail
