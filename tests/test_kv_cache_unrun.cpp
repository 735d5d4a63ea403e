// KV cache and command lists: a list destroyed before it ran (the order lists run in:
// test_kv_cache_order.cpp). A cache's host bookkeeping advances
// when kv_append or kv_copy_sequence is recorded, the device's when the list runs; an
// engine whose step fails to record (an op refused) drops the list. Where no later change
// builds on the dropped ops, the list puts the bookkeeping back (ring and paged caches,
// forks, replays); where one does, the sequences are refused until reset. Vulkan and the
// CPU backend give the same attention afterwards (they disagreed silently before).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>

#include "support/backends.hpp"
#include "support/cache_steps.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

using namespace cache_steps;

using KvCacheUnrun = VulkanVsCpuTest;

// A step refused after its kv_append (a wrapping ring: the append had evicted positions
// the device still holds): the cache is as before it, a truncate that needs those
// positions works, and the next steps match between the backends.
TEST_F(KvCacheUnrun, RefusedStepPutsBackItsAppends) {
  for (const KvCacheConfig& config : {ring(4), paged(4, 3)}) {
    // |ref| never sees the refused step.
    KvCache g = gpu_->kv_cache(config), c = cpu_->kv_cache(config), ref = cpu_->kv_cache(config);
    for (auto [b, cache] : {std::pair{gpu_.get(), &g}, std::pair{cpu_.get(), &c}, std::pair{cpu_.get(), &ref}}) {
      Step{*b, *cache, 0, 4}.run();
      const auto before = slots(*cache);
      if (cache != &ref) Step{*b, *cache, 4, 3}.drop_refused();
      EXPECT_EQ(cache->next_position(0), 4);
      EXPECT_EQ(slots(*cache), before);
      if (config.paged) {
        EXPECT_EQ(cache->free_blocks(), 1u);
      }
      cache->truncate(0, 3);  // refused before: the dropped append had evicted 0 to 2
    }
    for (int step = 0; step < 6; ++step) {
      const std::int32_t p = c.next_position(0);
      const auto got = Step{*gpu_, g, p, 1}.run(), want = Step{*cpu_, c, p, 1}.run();
      EXPECT_TRUE(all_close(got, want, {1, kHeads, kDim}, 1e-5, 1e-5)) << "position " << p;
      EXPECT_EQ(want, (Step{*cpu_, ref, p, 1}.run())) << "position " << p;
    }
  }
}

// A fork recorded and dropped leaves the destination as it was (a paged cache: its blocks
// and the shared ones' counts).
TEST_F(KvCacheUnrun, DroppedForkPutsBackTheDestination) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      Backend& cb = *b;
      KvCache c = cb.kv_cache(config);
      Step{cb, c, 0, 5, 0}.run();
      Step{cb, c, 0, 2, 1}.run();
      const auto before = slots(c, 1);
      const std::size_t free = config.paged ? c.free_blocks() : 0;
      {
        CommandList list = cb.commands();
        list.kv_copy_sequence(c, 0, 1);
        EXPECT_EQ(c.next_position(1), 5);
      }
      EXPECT_EQ(slots(c, 1), before);
      EXPECT_EQ(c.next_position(1), 2);
      if (config.paged) {
        EXPECT_EQ(c.free_blocks(), free);
        EXPECT_EQ(c.block_refs(), (std::vector<std::int32_t>{1, 1, 1, 1, 0, 0, 0, 0}));
      }
      EXPECT_NO_THROW((Step{cb, c, 2, 1, 1}.run()));  // nothing left to wait for
    }
  }
}

// A replayed list destroyed after set_tokens puts back the replay, not what it ran before;
// a refused replay changes nothing that the destruction then undoes twice.
TEST_F(KvCacheUnrun, ReplayedListPutsBackOnlyWhatDidNotRun) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(6));
  {
    CommandList list = b.commands();
    Tensor out = b.tensor({1, kHeads, kDim}, DType::f32);
    Step{b, c, 0, 1}.record(list, out);
    list.submit_and_wait();
    list.set_tokens(std::vector<std::int32_t>{1});
    list.submit_and_wait();
    list.set_tokens(std::vector<std::int32_t>{2});
    EXPECT_EQ(c.next_position(0), 3);
    EXPECT_THROW(list.set_tokens(std::vector<std::int32_t>{7}), InvalidArgument);  // not next
    EXPECT_EQ(c.next_position(0), 3);
  }
  EXPECT_EQ(c.next_position(0), 2);
  EXPECT_EQ(slots(c), (std::vector<std::int32_t>{0, 1, -1, -1, -1, -1}));
}

// A later list's appends build on the dropped ones: the sequence is refused, by name, until
// reset; one reset before the drop takes it in hand; a list that ran is never undone.
TEST_F(KvCacheUnrun, LaterChangesMarkTheSequenceUntilReset) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8, 2));
  Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
  std::optional<CommandList> first = recorded(Step{b, c, 0, 2, 0}, out);
  CommandList second = b.commands();
  Step{b, c, 2, 2, 0}.record(second, out);
  Step{b, c, 0, 2, 1}.record(second, out);
  first.reset();
  EXPECT_EQ(c.next_position(0), 4);  // the second list's positions stay
  expect_invalid([&] { second.submit_and_wait(); }, {"submit_and_wait", "cache", "sequence 0", "reset(0)"});
  expect_invalid([&] { Step{b, c, 4, 1, 0}.run(); }, {"kv_append", "sequence 0", "reset(0)"});
  expect_invalid([&] { Step{b, c, 2, 1, 1}.run(); }, {"kv_append", "sequence 0"});  // the whole cache
  expect_invalid([&] { b.save_cache(c); }, {"save_cache", "sequence 0"});
  c.reset(0);
  EXPECT_EQ((Step{b, c, 0, 2, 0}.run().size()), 2 * kHeads * kDim);

  // Reset between the record and the drop: nothing marked, the reset's state kept.
  std::optional<CommandList> third = recorded(Step{b, c, 2, 2, 0}, out);
  c.reset(0);
  third.reset();
  EXPECT_EQ(c.next_position(0), 0);
  EXPECT_NO_THROW((Step{b, c, 0, 2, 0}.run()));

  // A list that ran keeps its effect when destroyed.
  EXPECT_EQ(c.next_position(0), 2);
  EXPECT_EQ(c.next_position(1), 2);
}

// Another list's op between two of the dropped list's: nothing is put back (it would free
// blocks the other holds, or move next below what it wrote); the sequence is marked. The
// pool's counts stay whole: every block held by a table is counted, no other.
TEST_F(KvCacheUnrun, AnotherListBetweenItsOpsMarksInsteadOfUndoing) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    Backend& b = *cpu_;
    KvCache c = b.kv_cache(config);
    Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
    std::optional<CommandList> a(b.commands());
    CommandList other = b.commands();
    Step{b, c, 0, 2, 0}.record(*a, out);
    Step{b, c, 0, 2, 1}.record(other, out);
    Step{b, c, 2, 2, 0}.record(*a, out);
    other.submit_and_wait();
    a.reset();
    expect_invalid([&] { Step{b, c, 4, 1, 0}.run(); }, {"kv_append", "sequence 0", "reset(0)"});
    c.reset(0);
    EXPECT_EQ(c.next_position(1), 2);
    if (config.paged) {
      std::vector<std::int32_t> held(8, 0);
      for (std::size_t s = 0; s < 2; ++s) {
        for (std::int32_t block : c.block_table(s)) {
          if (block >= 0) ++held[static_cast<std::size_t>(block)];
        }
      }
      EXPECT_EQ(c.block_refs(), held);
      EXPECT_EQ(c.free_blocks(), 8u - 1u);
    }
    EXPECT_NO_THROW((Step{b, c, 0, 2, 0}.run()));
  }
}

// A reset before the dropped list's later ops does not clear them: the sequence is marked.
// A truncate while the list holds positions is refused (0.14.1: it wrote them to the device,
// unwritten, for lists run before; one keeping some of them left the sequence marked).
TEST_F(KvCacheUnrun, ChangesBetweenItsOpsDoNotClearTheMark) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8));
  Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
  std::optional<CommandList> a = recorded(Step{b, c, 0, 2}, out);
  c.reset(0);
  Step{b, c, 0, 2}.record(*a, out);
  a.reset();
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 0"});
  c.reset(0);
  Step{b, c, 0, 2}.run();
  {
    CommandList a = b.commands();
    Tensor wide = b.tensor({4, kHeads, kDim}, DType::f32);
    Step{b, c, 2, 4}.record(a, wide);
    expect_invalid([&] { c.truncate(0, 4); }, {"truncate", "seq = 0", "has not run holds its positions"});
  }
  EXPECT_EQ(c.next_position(0), 2);  // put back
  EXPECT_NO_THROW((void)b.save_cache(c));
}

// A fork built on the dropped list's positions marks its destination too, until it is
// reset itself.
TEST_F(KvCacheUnrun, MarksFollowForks) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8, 3));
  Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
  std::optional<CommandList> a = recorded(Step{b, c, 0, 2, 0}, out);
  {
    CommandList fork = b.commands();
    fork.kv_copy_sequence(c, 0, 1);  // built on a's append, so it may not run before a
    expect_invalid([&] { fork.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run"});
    Step{b, c, 0, 2, 2}.run();  // another sequence, untouched
    a.reset();
  }
  c.reset(0);
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 1"});
  c.reset(1);
  EXPECT_NO_THROW((void)b.save_cache(c));
  EXPECT_EQ(c.next_position(2), 2);
}

// A dropped fork that cannot be put back (a change outside lists came after it): its
// destination is marked, its source, which it only read, is not, and no later list waits
// for it, neither over the source nor for blocks of the pool (before, both were refused
// for ever, whatever was reset).
TEST_F(KvCacheUnrun, DroppedForkMarksOnlyItsDestinationAndHoldsNoListBack) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 8, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 3, 0}.run();
      Step{*b, c, 0, 2, 1}.run();  // a block the fork returns to the pool
      {
        CommandList fork = b->commands();
        fork.kv_copy_sequence(c, 0, 1);
        c.reset(2);
      }
      expect_invalid([&] { (void)b->save_cache(c); }, {"save_cache", "sequence 1"});
      c.reset(1);
      EXPECT_NO_THROW((Step{*b, c, 3, 1, 0}.run()));
      EXPECT_NO_THROW((Step{*b, c, 0, 2, 2}.run()));  // a block from the pool
      EXPECT_NO_THROW((void)b->save_cache(c));
    }
  }
}

// Lists planned after a dropped one wait for what it waited for: here a reader after a
// fork that was planned after an append not yet run (taking the dropped fork's changes
// as run at once let the reader pass the append).
TEST_F(KvCacheUnrun, ListsAfterADroppedOneWaitForWhatItWaitedFor) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 8, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 2, 0}.run();
      Tensor out = b->tensor({2, kHeads, kDim}, DType::f32), q = b->tensor({1, kHeads, kDim}, DType::f32),
             read_out = b->tensor({1, kHeads, kDim}, DType::f32);
      CommandList append = b->commands();
      Step{*b, c, 2, 2, 0}.record(append, out);
      std::optional<CommandList> fork(b->commands());
      fork->kv_copy_sequence(c, 0, 1);
      c.reset(2);
      CommandList read = b->commands();
      const std::int32_t at = 5, seq = 0;
      read.attention(q, c, read_out, {.q_positions = {&at, 1}, .q_seq_ids = {&seq, 1}});
      fork.reset();
      c.reset(1);
      expect_invalid([&] { read.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run"});
      append.submit_and_wait();
      EXPECT_NO_THROW(read.submit_and_wait());
    }
  }
}

// save_cache refuses positions a list planned and has not run (their rows are not on the
// device yet: they would restore as keys of zeros), until the list runs or is destroyed.
TEST_F(KvCacheUnrun, SaveWaitsForTheListsThatWroteTheCache) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 2, 1}.run();
      Tensor out = b->tensor({2, kHeads, kDim}, DType::f32);
      std::optional<CommandList> list = recorded(Step{*b, c, 0, 2, 0}, out);
      expect_invalid([&] { (void)b->save_cache(c); }, {"save_cache", "sequence 0", "has not run"});
      list->submit_and_wait();
      const std::vector<std::uint8_t> saved = b->save_cache(c);
      list->set_tokens(std::vector<std::int32_t>{2, 3}, std::vector<std::int32_t>{0, 0});  // replayed, not run
      expect_invalid([&] { (void)b->save_cache(c); }, {"save_cache", "sequence 0"});
      list.reset();  // put back: the cache as saved
      EXPECT_EQ(b->save_cache(c), saved);
    }
  }
}

// A list of many ops keeps, per sequence, its latest op (the marks are merged once they
// pass their bound): a sequence reset between the ops is marked because later ops wrote it
// again, and one only the early ops wrote is not (the merge crosses both).
// restore_cache clears the marks.
TEST_F(KvCacheUnrun, ManyOpsKeepEachSequencesLatestOp) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8, 4));
  const std::vector<std::uint8_t> empty = b.save_cache(c);
  {
    CommandList list = b.commands();
    Tensor k = b.tensor({2, kKvHeads, kDim}, DType::f32), v = b.tensor({2, kKvHeads, kDim}, DType::f32);
    auto append = [&](std::int32_t s0, std::int32_t s1, int times) {
      for (int i = 0; i < times; ++i) {
        list.kv_append(c, k, v,
                       std::vector<std::int32_t>{c.next_position(static_cast<std::size_t>(s0)),
                                                 c.next_position(static_cast<std::size_t>(s1))},
                       std::vector<std::int32_t>{s0, s1});
      }
    };
    append(0, 3, 10000);
    append(0, 1, 10000);
    c.reset(1);
    c.reset(3);
    append(0, 1, 10000);
    append(0, 2, 5000);  // past 2^16 marks: merged, the reset's both sides in one entry
  }
  c.reset(0);
  c.reset(2);
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 1"});
  c.reset(3);
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 1"});
  b.restore_cache(c, empty);  // clears every mark, as a reset of each sequence does
  EXPECT_NO_THROW((void)b.save_cache(c));
}

// A list over two caches: each is judged on its own, one put back, the other (another
// list's op built on it) marked with its words left as they are.
TEST_F(KvCacheUnrun, EachCacheIsJudgedOnItsOwn) {
  Backend& b = *cpu_;
  KvCache x = b.kv_cache(ring(8, 2)), y = b.kv_cache(ring(8, 2));
  Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
  {
    CommandList later = b.commands();  // destroyed after a: a is judged while later's op stands
    CommandList a = b.commands();
    Step{b, x, 0, 2, 0}.record(a, out);
    Step{b, y, 0, 2, 0}.record(a, out);
    Step{b, y, 2, 2, 0}.record(later, out);  // builds on a's append to y
    Step{b, x, 0, 2, 1}.record(a, out);
  }
  EXPECT_EQ(x.next_position(0), 0);
  EXPECT_EQ(x.next_position(1), 0);
  EXPECT_EQ(slots(x, 0), std::vector<std::int32_t>(8, -1));
  EXPECT_NO_THROW((void)b.save_cache(x));
  EXPECT_EQ(y.next_position(0), 2);  // later's append put back, a's kept
  EXPECT_EQ(slots(y, 0), (std::vector<std::int32_t>{0, 1, -1, -1, -1, -1, -1, -1}));
  expect_invalid([&] { (void)b.save_cache(y); }, {"save_cache", "sequence 0"});
  y.reset(0);
  EXPECT_NO_THROW((void)b.save_cache(y));  // only a's sequence of y
}

// A list destroyed unrun whose fork changed nothing (between two empty sequences) holds
// neither sequence back (0.14.2: its source's reset and truncate were refused for good).
TEST_F(KvCacheUnrun, DroppedForkThatChangedNothingHoldsNothingBack) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      {
        CommandList fork = b->commands();
        fork.kv_copy_sequence(c, 0, 1);
      }
      EXPECT_NO_THROW(c.reset(0));
      EXPECT_NO_THROW(c.truncate(0, 0));
      EXPECT_NO_THROW((Step{*b, c, 0, 2, 0}.run()));
      EXPECT_NO_THROW((Step{*b, c, 0, 1, 1}.run()));
    }
  }
}

}  // namespace
}  // namespace vkattn::test
