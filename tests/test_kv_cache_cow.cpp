// A paged cache's copy-on-write and the order lists run in. An append that writes a block
// other sequences share copies the block first, as those sequences hold it when the list
// runs: they count as read by the list, as a fork's source does. A change of theirs after
// the list was recorded (a reset or truncate, another list's append), before it runs or
// runs again, refuses it; before, the copy silently took whatever the block held then (a
// block freed and reused by another sequence: that sequence's keys), on both backends.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kHeads = 2, kKvHeads = 1, kDim = 16;

// Blocks of 2 slots: sequence 0 holds positions 0-3 in two blocks, sequence 1 a fork of it
// truncated to position 0, so that appending its position 1 copies the first block.
KvCacheConfig pool() {
  return {.n_seqs = 3,
          .n_kv_heads = kKvHeads,
          .head_dim = kDim,
          .capacity = 8,
          .dtype = DType::f32,
          .paged = true,
          .block_size = 2,
          .n_blocks = 6};
}

// Records an append of |positions| to |seq| into |list| (keys and values from |seed|).
void append(Backend& b, CommandList& list, KvCache& c, std::vector<std::int32_t> positions, std::int32_t seq,
            std::uint32_t seed) {
  const std::size_t n = positions.size();
  Tensor k = b.tensor({n, kKvHeads, kDim}, DType::f32), v = b.tensor({n, kKvHeads, kDim}, DType::f32);
  b.upload(k, normal(n * kKvHeads * kDim, seed));
  b.upload(v, normal(n * kKvHeads * kDim, seed + 1));
  list.kv_append(c, k, v, positions, std::vector<std::int32_t>(n, seq));
}
void run_append(Backend& b, KvCache& c, std::vector<std::int32_t> positions, std::int32_t seq, std::uint32_t seed) {
  CommandList list = b.commands();
  append(b, list, c, std::move(positions), seq, seed);
  list.submit_and_wait();
}

// Sequence 1 shares sequence 0's first block and holds position 0 only.
void share_first_block(Backend& b, KvCache& c) {
  run_append(b, c, {0, 1, 2, 3}, 0, 10);
  CommandList fork = b.commands();
  fork.kv_copy_sequence(c, 0, 1);
  fork.submit_and_wait();
  c.truncate(1, 1);
  ASSERT_EQ(c.block_table(1)[0], c.block_table(0)[0]);
}

// share_first_block, then a list recording sequence 1's position 1, which copies the block.
CommandList copying_list(Backend& b, KvCache& c) {
  share_first_block(b, c);
  CommandList list = b.commands();
  append(b, list, c, {1}, 1, 20);
  return list;
}

// What a query at position 1 of sequence 1 reads.
std::vector<float> attend(Backend& b, KvCache& c) {
  Tensor q = b.tensor({1, kHeads, kDim}, DType::f32), out = b.tensor({1, kHeads, kDim}, DType::f32);
  b.upload(q, normal(kHeads * kDim, 5));
  const std::int32_t position = 1, seq = 1;
  CommandList list = b.commands();
  list.attention(q, c, out, {.q_positions = {&position, 1}, .q_seq_ids = {&seq, 1}});
  list.submit_and_wait();
  return b.download(out);
}

using KvCacheCopyOnWrite = VulkanVsCpuTest;

// Submitted again with nothing changed, the copying list runs; after the block's other
// holder was reset (its block then taken by sequence 2) it is refused, and a replay plans
// anew (no copy: sequence 1 has the block to itself).
TEST_F(KvCacheCopyOnWrite, ListThatCopiedIsRefusedAfterTheBlocksHolderChanged) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    SCOPED_TRACE(b->device_name());
    KvCache c = b->kv_cache(pool());
    CommandList list = copying_list(*b, c);
    EXPECT_NE(c.block_table(1)[0], c.block_table(0)[0]) << "the append copies the shared block";
    list.submit_and_wait();
    const std::vector<float> once = attend(*b, c);
    list.submit_and_wait();  // nothing changed: it may run again
    EXPECT_EQ(attend(*b, c), once);
    c.reset(0);
    run_append(*b, c, {0, 1, 2, 3, 4, 5, 6, 7}, 2, 30);  // takes the block sequence 0 gave back
    expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "reading sequence 0", "set_tokens"});
    EXPECT_EQ(attend(*b, c), once) << "sequence 1 keeps its keys";
    list.set_tokens(std::vector<std::int32_t>{2});
    EXPECT_NO_THROW(list.submit_and_wait());
  }
}

// The holder is neither reset nor truncated while the copying list has not run (0.14.2:
// truncated, or reset and written again, it refused the list, which could then neither run
// nor be replayed, and dropping it marked sequence 1, which it writes, unwritten): after
// the list runs, or is dropped (and put back), it is, and nothing is marked.
TEST_F(KvCacheCopyOnWrite, HolderChangesOnceTheCopyRanOrWasDropped) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    for (bool reset : {false, true}) {
      for (bool run : {false, true}) {
        SCOPED_TRACE(b->device_name() + (reset ? " reset" : " truncate") + (run ? " run" : " dropped"));
        KvCache c = b->kv_cache(pool());
        const auto change = [&] { reset ? c.reset(0) : c.truncate(0, 3); };
        {
          CommandList list = copying_list(*b, c);
          expect_invalid(change, {reset ? "reset" : "truncate", "seq = 0", "reads", "submit it first, or destroy it"});
          if (run) list.submit_and_wait();
        }
        EXPECT_NO_THROW(change());
        if (reset) run_append(*b, c, {0}, 0, 40);
        EXPECT_EQ(c.next_position(1), run ? 2 : 1);
        EXPECT_NO_THROW((void)b->save_cache(c)) << "no sequence marked unwritten";
        EXPECT_NO_THROW(attend(*b, c));
      }
    }
  }
}

// The sequence the copying append writes is reset as the list stands (a list that writes
// a sequence does not hold its reset back; 0.14.2 counted it as a holder it read).
TEST_F(KvCacheCopyOnWrite, WrittenSequenceIsResetBeforeTheCopyRuns) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    SCOPED_TRACE(b->device_name());
    KvCache c = b->kv_cache(pool());
    {
      CommandList list = copying_list(*b, c);
      EXPECT_NO_THROW(c.reset(1));
      expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "sequence 1"});
    }
    EXPECT_EQ(c.next_position(1), 0);
    EXPECT_NO_THROW(run_append(*b, c, {0}, 1, 60));
  }
}

// Another list's append to the holder: it runs after the copying list (recorded after it),
// and the copying list may not run again after it.
TEST_F(KvCacheCopyOnWrite, AnotherListsAppendToTheHolderRunsAfterTheCopy) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    SCOPED_TRACE(b->device_name());
    KvCache c = b->kv_cache(pool());
    CommandList list = copying_list(*b, c), later = b->commands();
    append(*b, later, c, {4}, 0, 50);
    expect_invalid([&] { later.submit_and_wait(); }, {"submit_and_wait", "not run", "order they were recorded"});
    list.submit_and_wait();
    later.submit_and_wait();
    expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "ran", "sequence 0", "reads"});
  }
}

}  // namespace
}  // namespace vkattn::test
