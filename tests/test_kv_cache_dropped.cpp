// KV cache and command lists: lists destroyed unrun among other lists (the basics:
// test_kv_cache_unrun.cpp). What a dropped list puts back, marks and releases must leave
// the order the other lists run in, and the sequences they read, as the device has them:
// each case here was accepted wrongly, or refused for good, before 0.14.3 (those of no-op
// ops, whose sequences were marked wrongly: before 0.14.4; a fork before the dropped list's
// write: before 0.14.5).
#include <gtest/gtest.h>

#include <optional>

#include "support/backends.hpp"
#include "support/cache_steps.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"

namespace vkattn::test {
namespace {

using namespace cache_steps;

using KvCacheDropped = VulkanVsCpuTest;

// A list whose first op changed no word (a fork between two empty sequences) and which
// wrote later, destroyed, gives the cache back to the list that wrote before its write:
// an older list destroyed after it is refused its put-back while a live list forked from
// it, and put back once that list is gone too. (Before: the older list was put back under
// the fork, which then ran on rows never written; or, newest first, it was marked.)
TEST_F(KvCacheDropped, NoOpForkGivesTheCacheBackToTheListBeforeItsWrite) {
  for (const KvCacheConfig& config : {ring(8, 4), paged(8, 16, 4)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      for (const bool newest_first : {false, true}) {
        KvCache c = b->kv_cache(config);
        Step{*b, c, 0, 4, 0}.run();
        Tensor out_x = step_output(*b), out_l = step_output(*b);
        std::optional<CommandList> x = recorded(Step{*b, c, 4, 1, 0}, out_x);
        std::optional<CommandList> l(b->commands()), m(b->commands());
        l->kv_copy_sequence(c, 1, 2);
        m->kv_copy_sequence(c, 0, 3);  // built on x's position 4
        Step{*b, c, 0, 1, 1}.record(*l, out_l);
        l.reset();
        if (newest_first) {
          m.reset();
          x.reset();
          EXPECT_EQ(c.next_position(0), 4);
          EXPECT_EQ(c.next_position(3), 0);
          EXPECT_NO_THROW((Step{*b, c, 4, 1, 0}.run()));
        } else {
          x.reset();
          EXPECT_EQ(c.next_position(0), 5);
          expect_invalid([&] { m->submit_and_wait(); }, {"submit_and_wait", "sequence 0", "never wrote"});
        }
      }
    }
  }
}

// A list whose first op changed no word but built on another list's unrun changes (a
// fork onto a sequence already equal to its source), and which wrote later, destroyed
// first, gives the cache back to that list, which is then put back too. (Before: it gave
// the cache back to itself, and the older list's sequences were marked.)
TEST_F(KvCacheDropped, NoOpClaimThenWriteGivesTheCacheBackToTheListBefore) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 12, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 2, 0}.run();
      Tensor out_x = step_output(*b), out_a = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 2, 1, 0}, out_x);
      x->kv_copy_sequence(c, 0, 1);
      std::optional<CommandList> a(b->commands());
      a->kv_copy_sequence(c, 0, 1);  // no word: the sequences are equal
      Step{*b, c, 3, 1, 0}.record(*a, out_a);
      a.reset();
      EXPECT_EQ(c.next_position(0), 3);
      x.reset();
      EXPECT_EQ(c.next_position(0), 2);
      EXPECT_EQ(c.next_position(1), 0);
      EXPECT_NO_THROW((Step{*b, c, 2, 1, 0}.run()));  // nothing marked
    }
  }
}

// A list put back restores the order of the sequences it changed as they were before its
// first change, not before its earlier ops that changed nothing: another list's append
// recorded between them still comes first. (Before: a list appending after that append ran
// before it.)
TEST_F(KvCacheDropped, PutBackKeepsTheOrderOthersTookAfterItsNoOpFork) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      Tensor out_a = step_output(*b), out_l = step_output(*b), out_later = step_output(*b);
      std::optional<CommandList> l(b->commands());
      l->kv_copy_sequence(c, 1, 0);
      std::optional<CommandList> a = recorded(Step{*b, c, 0, 1, 0}, out_a);
      Step{*b, c, 0, 1, 2}.record(*l, out_l);
      l.reset();
      std::optional<CommandList> later = recorded(Step{*b, c, 1, 1, 0}, out_later);
      expect_invalid([&] { later->submit_and_wait(); }, {"submit_and_wait", "sequence 0", "has not run"});
      a->submit_and_wait();
      later->submit_and_wait();
      Step{*cpu_, ref, 0, 1, 0}.run();
      const auto want = Step{*cpu_, ref, 1, 1, 0}.run();
      EXPECT_TRUE(all_close(b->download(out_later), want, {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A dropped list that appended to a sequence, then another, then the first again keeps
// the order of both: a fork recorded before it from that sequence still waits for the
// append it was planned after, and the sequence's reset for the fork. (Before: the drop
// counted the first sequence's changes as run; the fork ran first, and its destination
// lacked a position the host counted.)
TEST_F(KvCacheDropped, DropBetweenOpsOnOneSequenceKeepsTheOrder) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      Step{*b, c, 0, 1, 1}.run();
      Tensor out = step_output(*b);
      std::optional<CommandList> later = recorded(Step{*b, c, 1, 1, 1}, out);
      CommandList fork = b->commands();
      fork.kv_copy_sequence(c, 1, 0);
      {
        CommandList dropped = b->commands();
        Tensor o1 = step_output(*b), o2 = step_output(*b), o3 = step_output(*b);
        Step{*b, c, 2, 1, 1}.record(dropped, o1);
        Step{*b, c, 2, 1, 0}.record(dropped, o2);
        Step{*b, c, 3, 1, 1}.record(dropped, o3);
      }
      expect_invalid([&] { fork.submit_and_wait(); }, {"submit_and_wait", "sequence 1", "has not run"});
      expect_invalid([&] { c.reset(1); }, {"reset", "seq = 1"});
      later->submit_and_wait();
      fork.submit_and_wait();
      Step{*cpu_, ref, 0, 1, 0}.run();
      Step{*cpu_, ref, 1, 1, 0}.run();
      EXPECT_TRUE(all_close(read(*b, c, 1, 0), read(*cpu_, ref, 1, 0), {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// Two lists each waiting for the other (x appends, y appends after it, x forks after y),
// destroyed in either order, hold nothing back: the sequence they marked is given back by
// its reset. (Before: its reset was refused for good, as if a list still read it.)
TEST_F(KvCacheDropped, ListsWaitingOnEachOtherHoldNothingBackOnceDropped) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      for (const bool x_first : {true, false}) {
        KvCache c = b->kv_cache(config);
        Tensor out_x = step_output(*b), out_y = step_output(*b);
        std::optional<CommandList> x = recorded(Step{*b, c, 0, 1, 1}, out_x);
        std::optional<CommandList> y = recorded(Step{*b, c, 1, 1, 1}, out_y);
        x->kv_copy_sequence(c, 1, 0);
        if (x_first) x.reset();
        y.reset();
        x.reset();
        EXPECT_NO_THROW(c.reset(1));
        EXPECT_NO_THROW(c.reset(0));
        EXPECT_NO_THROW((void)b->save_cache(c));
        EXPECT_NO_THROW((Step{*b, c, 0, 2, 1}.run()));
      }
    }
  }
}

// Lists recorded before a drop that only read the cache run and read it as the device
// holds it, whether or not they were recorded while the dropped list was pending. (Before:
// one recorded while it was pending was refused.)
TEST_F(KvCacheDropped, ReadersRecordedBeforeTheDropRun) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      Step{*b, c, 0, 2, 1}.run();
      CommandList early = b->commands(), late = b->commands();
      Tensor read_early = record_read(*b, early, c, 1, 1), out = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 2, 1, 1}, out);
      Tensor read_late = record_read(*b, late, c, 1, 1);
      Step{*b, c, 0, 1, 2}.run();  // built on after x: x marks sequence 1
      x.reset();
      early.submit_and_wait();
      late.submit_and_wait();
      Step{*cpu_, ref, 0, 2, 1}.run();
      const auto want = read(*cpu_, ref, 1, 1);
      EXPECT_TRUE(all_close(b->download(read_early), want, {1, kHeads, kDim}, 1e-5, 1e-5));
      EXPECT_TRUE(all_close(b->download(read_late), want, {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A fork put back is forgotten: a later drop marking its source leaves its destination,
// whose rows are its own. (Before: the destination was marked too, and lost to a reset.)
TEST_F(KvCacheDropped, ForkPutBackIsForgotten) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      Step{*b, c, 0, 2, 0}.run();
      Step{*b, c, 0, 2, 1, 2}.run();
      Tensor out = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 2, 1, 0}, out);
      {
        CommandList fork = b->commands();
        fork.kv_copy_sequence(c, 0, 1);
      }
      c.reset(2);  // a change after x: x marks sequence 0
      x.reset();
      c.reset(0);
      Step{*cpu_, ref, 0, 2, 1, 2}.run();
      EXPECT_TRUE(all_close(read(*b, c, 1, 1), read(*cpu_, ref, 1, 1), {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A fork that changed no word (its sequences were equal) and never ran leaves its
// destination's rows its own: a drop that marks the source afterwards does not mark the
// destination. (Before: it did, and the sequence was refused until reset.)
TEST_F(KvCacheDropped, NoOpForkDroppedLeavesItsDestinationUnmarked) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      for (KvCache* k : {&c, &ref}) {
        Backend& on = k == &c ? *b : *cpu_;
        Step{on, *k, 0, 2, 0}.run();
        CommandList fork = on.commands();
        fork.kv_copy_sequence(*k, 0, 1);
        fork.submit_and_wait();
      }
      Tensor out_x = step_output(*b), out_x0 = step_output(*b), out_y = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 0, 1, 2}, out_x);
      {
        CommandList a = b->commands();
        a.kv_copy_sequence(c, 0, 1);  // no word: the sequences are equal
      }
      Step{*b, c, 2, 1, 0}.record(*x, out_x0);
      std::optional<CommandList> y = recorded(Step{*b, c, 3, 1, 0}, out_y);  // built on x
      x.reset();                                                             // marks sequences 0 and 2
      y.reset();
      c.reset(0);
      c.reset(2);
      EXPECT_NO_THROW((void)b->save_cache(c));
      EXPECT_TRUE(all_close(read(*b, c, 1, 1), read(*cpu_, ref, 1, 1), {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A fork that ran after a list began but before that list wrote the fork's source copied
// rows that were written: when the list is dropped and marks the source, the destination
// stays readable. (Before 0.14.5: it was marked with the source, and lost to a reset.)
TEST_F(KvCacheDropped, ForkTakenBeforeTheDroppedListWroteItsSourceStaysUnmarked) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      for (KvCache* k : {&c, &ref}) Step{k == &c ? *b : *cpu_, *k, 0, 2, 0}.run();
      Tensor out_x = step_output(*b), out_x0 = step_output(*b), out_y = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 0, 1, 2}, out_x);  // x begins
      for (KvCache* k : {&c, &ref}) {
        CommandList fork = (k == &c ? *b : *cpu_).commands();
        fork.kv_copy_sequence(*k, 0, 1);
        fork.submit_and_wait();
      }
      Step{*b, c, 2, 1, 0}.record(*x, out_x0);                               // x writes the source
      std::optional<CommandList> y = recorded(Step{*b, c, 3, 1, 0}, out_y);  // built on x
      x.reset();                                                             // marks sequences 0 and 2
      y.reset();
      expect_invalid([&] { (void)b->save_cache(c); }, {"save_cache", "never wrote"});
      c.reset(0);
      c.reset(2);
      EXPECT_NO_THROW((void)b->save_cache(c));
      EXPECT_TRUE(all_close(read(*b, c, 1, 1), read(*cpu_, ref, 1, 1), {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A sequence marked by a drop is given back by its reset alone: truncating it would write
// positions whose rows were never written to the device, for lists recorded before the
// drop to read. (Before: truncate did, and such a list read a zero row.)
TEST_F(KvCacheDropped, MarkedSequenceIsNotTruncated) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      Step{*b, c, 0, 4, 0}.run();
      CommandList reader = b->commands();
      Tensor got = record_read(*b, reader, c, 4, 0), out = step_output(*b);
      std::optional<CommandList> x = recorded(Step{*b, c, 4, 1, 0}, out);
      Step{*b, c, 0, 1, 1}.run();
      x.reset();
      expect_invalid([&] { c.truncate(0, 5); }, {"truncate", "seq = 0", "reset(0)"});
      expect_invalid([&] { c.truncate(0, 0); }, {"truncate", "seq = 0"});
      reader.submit_and_wait();
      Step{*cpu_, ref, 0, 4, 0}.run();
      EXPECT_TRUE(all_close(b->download(got), read(*cpu_, ref, 4, 0), {1, kHeads, kDim}, 1e-5, 1e-5));
      c.reset(0);
      EXPECT_NO_THROW(c.truncate(0, 0));
    }
  }
}

}  // namespace
}  // namespace vkattn::test
