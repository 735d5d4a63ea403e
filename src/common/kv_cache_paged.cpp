// A paged KV cache's pool (KvCacheConfig::paged): which block of the pool holds each run
// of block_size slots of each sequence, how many sequences share each block, and the
// free list. A paged cache keeps the ring cache's slots and bookkeeping (slot_pos, next,
// oldest) unchanged; only where a slot's row lives differs, so attention, the checks and
// the kernels read it as they read a ring, through the block table.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <numeric>

#include "common/kv_cache_impl.hpp"
#include "common/validate.hpp"

namespace vkattn::detail {

void check_paging(const char* op, const KvCacheConfig& c) {
  if (c.block_size == 0 || c.block_size > (std::size_t{1} << 16) || !std::has_single_bit(c.block_size)) {
    throw InvalidArgument(op, "config.block_size", std::to_string(c.block_size), "a power of two in [1, 65536] (default 16)");
  }
  if (c.capacity % c.block_size != 0) {
    throw InvalidArgument(op, "config.capacity", std::to_string(c.capacity),
                          "a multiple of block_size = " + std::to_string(c.block_size) + " for a paged cache");
  }
  // Block ids and the free count are int32.
  const std::size_t most = std::min<std::size_t>((std::size_t{1} << 31) / c.block_size, INT32_MAX);
  if (c.n_blocks == 0 || c.n_blocks > most) {
    throw InvalidArgument(op, "config.n_blocks", std::to_string(c.n_blocks),
                          "[1, min(2^31 / block_size, 2^31 - 1) = " + std::to_string(most) + "]" +
                              (c.n_blocks == 0 ? "; required for a paged cache, no default" : ""));
  }
  // A sequence's slot-table words (its slots, then its block table) are indexed by int32
  // across the sequences, as a ring cache's slots are.
  const std::size_t stride = c.capacity + c.capacity / c.block_size;
  if (c.n_seqs > std::size_t{INT32_MAX} / stride) {
    throw InvalidArgument(
        op, "config.n_seqs", std::to_string(c.n_seqs),
        "[1, (2^31 - 1) / (capacity + capacity / block_size) = " + std::to_string(std::size_t{INT32_MAX} / stride) +
            "] for a paged cache: each sequence's slots and block table are counted in 32-bit ints");
  }
}

namespace {

// |free|: the pool as the ops before this one left it: those recorded earlier and, in a
// replay, the replay's ops before it (which KvCache::free_blocks, asked before the replay,
// cannot count).
[[noreturn]] void out_of_blocks(const char* op, std::size_t needed, std::int32_t free, std::size_t n_blocks) {
  throw Error(ErrorCode::out_of_memory,
              "a paged KV cache has " + std::to_string(free) + " free blocks of " + std::to_string(n_blocks) +
                  " left by the ops recorded (or, in set_tokens, replayed) before this one; this op needs " +
                  std::to_string(needed) +
                  " (KvCache::free_blocks and blocks_to_append say so first: reset or truncate "
                  "sequences, or give the cache more blocks)",
              "paged KV cache blocks", 0, op);
}

}  // namespace

void KvCacheImpl::drop_ref(std::int32_t b) {
  const auto u = static_cast<std::size_t>(b);
  set(refs[u], refs[u] - 1);
  if (refs[u] != 0) return;
  ++blocks_freed;
  set(free_list[static_cast<std::size_t>(free_count)], b);
  set(free_count, free_count + 1);
}

std::size_t KvCacheImpl::plan_blocks(AppendPlan& plan, bool check) const {
  const std::size_t c = config.capacity, bs = config.block_size, stride = meta_stride();
  plan.meta_rows.resize(plan.dst_rows.size());
  plan.copies.clear();
  plan.changes.clear();
  // Each run of slots the tokens write gets its block once, in the order first written:
  // its own, a new one where it has none, or a copy where other sequences share it (as
  // many copies of a shared block as writers beyond the last, who keeps it). The runs
  // given a block and the copies of each block are looked up in the plan's lists while
  // they are short, in tables once they are long (a prefill of 32k tokens in runs of one
  // took 0.7 s scanning the lists per token); a token of the run before takes its block.
  constexpr std::size_t kScan = 32;
  std::vector<std::int32_t> given, copied;  // by table index, by block; empty while short
  auto given_block = [&](std::int32_t index) {
    if (!given.empty()) return given[static_cast<std::size_t>(index)];
    for (std::size_t i = 0; i < plan.changes.size(); i += 2) {
      if (plan.changes[i] == index) return plan.changes[i + 1];
    }
    return -2;
  };
  auto copies_of = [&](std::int32_t b) {
    if (!copied.empty()) return copied[static_cast<std::size_t>(b)];
    std::int32_t n = 0;
    for (std::size_t i = 0; i < plan.copies.size(); i += 2) n += plan.copies[i] == b ? 1 : 0;
    return n;
  };
  std::size_t taken = 0;
  std::int32_t last_index = -1, last_block = -2;
  for (std::size_t t = 0; t < plan.dst_rows.size(); ++t) {
    if (plan.dst_rows[t] < 0) {
      plan.meta_rows[t] = -1;
      continue;
    }
    const auto ring_row = static_cast<std::size_t>(plan.dst_rows[t]);
    const std::size_t s = ring_row / c, slot = ring_row % c;
    const auto index = static_cast<std::int32_t>(s * entries + (slot >> block_shift));
    plan.meta_rows[t] = static_cast<std::int32_t>(s * stride + slot);
    // A run this call has already given a block keeps it; another is decided now (the
    // same way for each of its tokens: a block stops being shared only by copies).
    std::int32_t block = index == last_index ? last_block : given_block(index);
    if (block == -2) {
      block = table[static_cast<std::size_t>(index)];
      if (block < 0 || refs[static_cast<std::size_t>(block)] - copies_of(block) > 1) {
        const std::int32_t fresh =
            taken < static_cast<std::size_t>(free_count) ? free_list[static_cast<std::size_t>(free_count) - 1 - taken] : -1;
        ++taken;
        if (block >= 0) {
          plan.copies.insert(plan.copies.end(), {block, fresh});
          if (copied.empty() && plan.copies.size() / 2 > kScan) {
            copied.assign(config.n_blocks, 0);
            for (std::size_t i = 0; i < plan.copies.size(); i += 2) ++copied[static_cast<std::size_t>(plan.copies[i])];
          } else if (!copied.empty()) {
            ++copied[static_cast<std::size_t>(block)];
          }
        }
        plan.changes.insert(plan.changes.end(), {index, fresh});
        if (given.empty() && plan.changes.size() / 2 > kScan) {
          given.assign(table.size(), -2);
          for (std::size_t i = 0; i < plan.changes.size(); i += 2)
            given[static_cast<std::size_t>(plan.changes[i])] = plan.changes[i + 1];
        } else if (!given.empty()) {
          given[static_cast<std::size_t>(index)] = fresh;
        }
        block = fresh;
      }
    }
    last_index = index;
    last_block = block;
    plan.dst_rows[t] =
        static_cast<std::int32_t>((static_cast<std::size_t>(std::max(block, 0)) << block_shift) + (slot & (bs - 1)));
  }
  if (check && taken > static_cast<std::size_t>(free_count)) out_of_blocks("kv_append", taken, free_count, config.n_blocks);
  return taken;
}

void KvCacheImpl::apply_blocks(const AppendPlan& plan) {
  // Taken from the end of the free list in the plan's order; a copied block is held by
  // one sequence fewer (never by none: its last holder writes it in place).
  set(free_count, free_count - static_cast<std::int32_t>(plan.changes.size() / 2));
  blocks_taken += plan.changes.size() / 2;
  for (std::size_t i = 0; i < plan.changes.size(); i += 2) {
    const auto index = static_cast<std::size_t>(plan.changes[i]);
    const std::int32_t old = table[index];
    set(table[index], plan.changes[i + 1]);
    set(refs[static_cast<std::size_t>(plan.changes[i + 1])], 1);
    if (old >= 0) drop_ref(old);
  }
}

KvCacheImpl::ForkPlan KvCacheImpl::plan_copy_sequence(std::size_t src, std::size_t dst) const {
  ForkPlan plan;
  if (!config.paged) return plan;
  // The run src's next append writes: a block there is copied, not shared, so that
  // neither sequence's next token has to copy it.
  const std::size_t e = slot(next[src]) >> block_shift;
  const std::int32_t from = table[src * entries + e];
  if (from < 0) return plan;
  // dst's own blocks go back first: those no other sequence holds are free for the copy.
  std::size_t freed = 0;
  for (std::size_t i = dst * entries; i < (dst + 1) * entries; ++i) {
    if (table[i] >= 0 && refs[static_cast<std::size_t>(table[i])] == 1) ++freed;
  }
  if (free_count + freed == 0) out_of_blocks("kv_copy_sequence", 1, free_count, config.n_blocks);
  // The block on top of the free list once dst's are back: the last of them returned,
  // else the list's last.
  std::int32_t to = -1;
  for (std::size_t i = dst * entries; i < (dst + 1) * entries; ++i) {
    if (table[i] >= 0 && refs[static_cast<std::size_t>(table[i])] == 1) to = table[i];
  }
  if (to < 0) to = free_list[static_cast<std::size_t>(free_count) - 1];
  plan.entry = static_cast<std::int32_t>(e);
  plan.from = from;
  plan.to = to;
  return plan;
}

void KvCacheImpl::fork_blocks(std::size_t src, std::size_t dst, const ForkPlan& plan) {
  for (std::size_t i = dst * entries; i < (dst + 1) * entries; ++i) {
    if (table[i] < 0) continue;
    const std::int32_t b = table[i];
    set(table[i], -1);
    drop_ref(b);
  }
  for (std::size_t e = 0; e < entries; ++e) {
    const std::int32_t b = table[src * entries + e];
    if (b < 0) continue;
    if (static_cast<std::int32_t>(e) == plan.entry) {
      set(free_count, free_count - 1);  // plan.to, the free list's last
      ++blocks_taken;
      set(refs[static_cast<std::size_t>(plan.to)], 1);
      set(table[dst * entries + e], plan.to);
      continue;
    }
    set(table[dst * entries + e], b);
    set(refs[static_cast<std::size_t>(b)], refs[static_cast<std::size_t>(b)] + 1);
  }
}

void KvCacheImpl::release_empty_blocks(std::size_t seq) {
  const std::size_t c = config.capacity, bs = config.block_size;
  for (std::size_t e = 0; e < entries; ++e) {
    std::int32_t& b = table[seq * entries + e];
    if (b < 0) continue;
    const auto first = slot_pos.begin() + static_cast<std::ptrdiff_t>(seq * c + e * bs);
    if (std::any_of(first, first + static_cast<std::ptrdiff_t>(bs), [](std::int32_t p) { return p >= 0; })) continue;
    const std::int32_t block = b;
    set(b, -1);
    drop_ref(block);
  }
}

std::vector<std::int32_t> KvCacheImpl::row_map(std::span<const std::int32_t> words) const {
  const std::size_t c = config.capacity;
  std::vector<std::int32_t> rows(config.n_seqs * c);
  if (!config.paged) {
    std::iota(rows.begin(), rows.end(), 0);
    return rows;
  }
  for (std::size_t s = 0; s < config.n_seqs; ++s) {
    for (std::size_t j = 0; j < c; ++j) {
      const std::int32_t b = words[s * meta_stride() + c + (j >> block_shift)];
      rows[s * c + j] =
          b < 0 ? -1 : static_cast<std::int32_t>((static_cast<std::size_t>(b) << block_shift) + (j & (config.block_size - 1)));
    }
  }
  return rows;
}

}  // namespace vkattn::detail

namespace vkattn {

namespace {

const detail::KvCacheImpl& paged_cache(const char* op, const std::shared_ptr<detail::KvCacheImpl>& impl) {
  const detail::KvCacheImpl& c = detail::live(impl, op);
  if (!c.config.paged) throw InvalidArgument(op, "this", "a ring cache", "a paged cache (KvCacheConfig::paged)");
  return c;
}

}  // namespace

std::size_t KvCache::free_blocks() const { return static_cast<std::size_t>(paged_cache("free_blocks", impl_).free_count); }

std::vector<std::int32_t> KvCache::block_table(std::size_t seq) const try {
  const auto& c = paged_cache("block_table", impl_);
  const auto first = c.table.begin() + static_cast<std::ptrdiff_t>(c.check_seq("block_table", seq) * c.entries);
  return {first, first + static_cast<std::ptrdiff_t>(c.entries)};
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("block_table");
}

std::vector<std::int32_t> KvCache::block_refs() const try {
  return paged_cache("block_refs", impl_).refs;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("block_refs");
}

std::size_t KvCache::blocks_to_append(std::size_t seq, std::size_t n_tokens) const try {
  const char* op = "blocks_to_append";
  const auto& c = paged_cache(op, impl_);
  c.check_seq(op, seq);
  // The tokens that would stay (as KvAppendOptions::keep_last keeps them), as a plan.
  const std::int64_t next = c.next[seq];
  if (n_tokens > static_cast<std::size_t>(INT32_MAX - next)) {
    throw InvalidArgument(op, "n_tokens", std::to_string(n_tokens),
                          "[0, 2^31 - 1 - next_position = " + std::to_string(INT32_MAX - next) + "]");
  }
  const std::int64_t last = next + static_cast<std::int64_t>(n_tokens) - 1;
  detail::KvCacheImpl::AppendPlan plan;
  // Kept: positions of sinks, and the last ring()'s (a loop over only those: n_tokens may
  // be near 2^31).
  const auto sinks = static_cast<std::int64_t>(c.config.n_sinks), ring = static_cast<std::int64_t>(c.ring());
  auto keep = [&](std::int64_t p) {
    plan.dst_rows.push_back(static_cast<std::int32_t>(seq * c.config.capacity + c.slot(static_cast<std::int32_t>(p))));
  };
  for (std::int64_t p = next; p <= std::min(last, sinks - 1); ++p) keep(p);
  for (std::int64_t p = std::max({next, sinks, last - ring + 1}); p <= last; ++p) keep(p);
  return c.plan_blocks(plan, false);
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("blocks_to_append");
}

}  // namespace vkattn
