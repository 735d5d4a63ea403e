// KV cache and command lists: a list run again, as submitted (a rerun) or replayed with
// set_tokens, where its own ops depend on one another. A rerun repeats the ops as
// planned; where an earlier op read what a later one changes (a fork's source), or, in a
// paged cache, wrote blocks a later fork replaces, the repeat is not what the host planned
// and is refused. Each case here was accepted before 0.14.3, and the device then
// disagreed with the host silently; or refused for good.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "support/backends.hpp"
#include "support/cache_steps.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"

namespace vkattn::test {
namespace {

using namespace cache_steps;

using KvCacheRerun = VulkanVsCpuTest;

// [append to 0, fork 0 -> 1, append to 0] runs once; run again, the fork would copy the
// second append's position into sequence 1, which the host does not count. A list that
// ran, grown by an append to the fork's source, may run once more (the fork runs before
// the append), not twice.
TEST_F(KvCacheRerun, ListChangingAForksSourceAfterItRunsOnce) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config), ref = cpu_->kv_cache(config);
      CommandList list = b->commands();
      Tensor o0 = step_output(*b), o1 = step_output(*b);
      Step{*b, c, 0, 1, 0}.record(list, o0);
      list.kv_copy_sequence(c, 0, 1);
      Step{*b, c, 1, 1, 0}.record(list, o1);
      list.submit_and_wait();
      expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "reads sequence 0", "set_tokens"});
      EXPECT_EQ(c.next_position(1), 1);
      Step{*cpu_, ref, 0, 1, 0}.run();
      EXPECT_TRUE(all_close(read(*b, c, 0, 1), read(*cpu_, ref, 0, 0), {1, kHeads, kDim}, 1e-5, 1e-5));

      KvCache g = b->kv_cache(config);
      Step{*b, g, 0, 2, 0}.run();
      CommandList grown = b->commands();
      grown.kv_copy_sequence(g, 0, 1);
      grown.submit_and_wait();
      Tensor o2 = step_output(*b);
      Step{*b, g, 2, 1, 0}.record(grown, o2);
      EXPECT_NO_THROW(grown.submit_and_wait());
      expect_invalid([&] { grown.submit_and_wait(); }, {"submit_and_wait", "reads sequence 0"});
      EXPECT_EQ(g.next_position(1), 2);
    }
  }
}

// [append to 1, fork 0 -> 1] in a paged cache runs once: run again, the append would write
// blocks the fork gave back (sequence 1 shares 0's since), and attention between them read
// 0's rows. A ring's rows stay the sequence's: there it runs again.
TEST_F(KvCacheRerun, PagedListForkingOverWhatItAppendedRunsOnce) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 2, 0}.run();
      Step{*b, c, 0, 1, 1, 2}.run();
      CommandList list = b->commands();
      Tensor out = step_output(*b);
      Step{*b, c, 1, 1, 1}.record(list, out);
      list.kv_copy_sequence(c, 0, 1);
      list.submit_and_wait();
      if (config.paged) {
        expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "writes sequence 1", "paged"});
      } else {
        EXPECT_NO_THROW(list.submit_and_wait());
      }
      EXPECT_TRUE(all_close(read(*b, c, 1, 1), read(*b, c, 1, 0), {1, kHeads, kDim}, 1e-6, 1e-6));
    }
  }
}

// A list whose fork has not run is not replayed, even where the fork changed no word
// (between sequences holding the same positions): its copy of the rows is still to run,
// and a list recorded after it waits for it. (Before: the replay took the fork's place,
// and both lists, then the sequence's reset, were refused for good.)
TEST_F(KvCacheRerun, ListWhoseNoOpForkHasNotRunIsNotReplayed) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 12, 3)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      for (std::size_t s = 0; s < 3; ++s) Step{*b, c, 0, 2, s, static_cast<std::uint32_t>(s + 1)}.run();
      CommandList fork = b->commands(), after = b->commands();
      fork.kv_copy_sequence(c, 0, 1);
      (void)record_read(*b, fork, c, 1, 0);
      after.kv_copy_sequence(c, 1, 2);
      const std::vector<std::int32_t> p{1}, s{0};
      expect_invalid([&] { fork.set_tokens(p, s); }, {"set_tokens", "have not run"});
      fork.submit_and_wait();
      after.submit_and_wait();
      EXPECT_NO_THROW(c.reset(1));
      EXPECT_TRUE(all_close(read(*b, c, 1, 2), read(*b, c, 1, 0), {1, kHeads, kDim}, 1e-6, 1e-6));
    }
  }
}

// An op refused while recorded (or a fork of a sequence into itself, which records
// nothing) leaves the list over the caches of its recorded ops alone: its replay does not
// answer for another cache's marked sequence. (Before: it was refused for it.)
TEST_F(KvCacheRerun, RefusedOpLeavesTheListOverItsOwnCaches) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    for (const bool refused : {true, false}) {
      KvCache a = b->kv_cache(ring(8, 2)), other = b->kv_cache(ring(8, 2));
      Step{*b, a, 0, 2, 0}.run();
      Step{*b, other, 0, 2, 0}.run();
      CommandList list = b->commands();
      (void)record_read(*b, list, a, 1, 0);
      Tensor out = step_output(*b);
      if (refused) {
        EXPECT_THROW((Step{*b, other, 5, 1, 0}.record(list, out)), InvalidArgument);  // not where 0 continues
      } else {
        list.kv_copy_sequence(other, 0, 0);
      }
      list.submit_and_wait();
      std::optional<CommandList> x = recorded(Step{*b, other, 2, 1, 0}, out);
      Step{*b, other, 0, 1, 1}.run();
      x.reset();  // marks other's sequence 0
      const std::vector<std::int32_t> p{1}, s{0};
      EXPECT_NO_THROW(list.set_tokens(p, s));
      EXPECT_NO_THROW(list.submit_and_wait());
    }
  }
}

}  // namespace
}  // namespace vkattn::test
