// KV cache and command lists: the order lists run in, and what a list planned before a
// change outside lists (reset, truncate) reads.
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

// A list's appends and forks are planned on the host when
// recorded, on the cache as every list recorded before left it; on the device they take
// effect when the list runs. So a list may not run before the lists whose changes its ops
// were planned on (nor read what they wrote), and a list that ran may not run again once
// another list changed a sequence it writes (a fork would have it write into blocks it now
// shares). Both were accepted before, and Vulkan then disagreed with the host silently.
using KvCacheOrder = VulkanVsCpuTest;

// A list that ran, submitted again after a fork from or into the sequence it appends to.
TEST_F(KvCacheOrder, ListThatRanIsRefusedAfterAnotherChangedItsSequence) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      for (const auto& [appended, src, dst] : {std::tuple{0, 0, 1}, std::tuple{1, 0, 1}}) {
        KvCache c = b->kv_cache(config);
        Step{*b, c, 0, 4, 0}.run();
        CommandList list = b->commands();
        Tensor out = b->tensor({1, kHeads, kDim}, DType::f32);
        Step{*b, c, appended == 0 ? 4 : 0, 1, static_cast<std::size_t>(appended)}.record(list, out);
        list.submit_and_wait();
        list.submit_and_wait();  // nothing changed since: it may run again
        CommandList fork = b->commands();
        fork.kv_copy_sequence(c, static_cast<std::size_t>(src), static_cast<std::size_t>(dst));
        fork.submit_and_wait();
        expect_invalid([&] { list.submit_and_wait(); },
                       {"submit_and_wait", "ran", ("sequence " + std::to_string(appended)).c_str(), "set_tokens"});
        list.set_tokens(std::vector<std::int32_t>{c.next_position(static_cast<std::size_t>(appended))});
        EXPECT_NO_THROW(list.submit_and_wait());  // replayed: planned on the cache as it is
      }
    }
  }
}

// Attention reads the cache as it is when its list runs, on both backends (the CPU backend
// read it as it was when the op was recorded): recorded before a reset, it reads the empty
// sequence, not the old keys nor, paged, the block another sequence took since; run again
// after another list's append, it reads the new key too.
TEST_F(KvCacheOrder, AttentionReadsTheCacheAsItIsWhenTheListRuns) {
  for (const KvCacheConfig& config : {ring(8, 3), paged(8, 2, 3)}) {
    std::vector<std::vector<float>> got;
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Tensor q = b->tensor({1, kHeads, kDim}, DType::f32), out = b->tensor({1, kHeads, kDim}, DType::f32);
      b->upload(q, normal(kHeads * kDim, 7));
      const auto reader = [&](std::int32_t position, std::int32_t seq) {
        CommandList list = b->commands();
        list.attention(q, c, out, {.q_positions = {&position, 1}, .q_seq_ids = {&seq, 1}});
        return list;
      };
      Step{*b, c, 0, 2, 1}.run();
      CommandList before_reset = reader(1, 1);
      c.reset(1);
      Step{*b, c, 0, 2, 2}.run();  // paged: the block sequence 1 gave back
      before_reset.submit_and_wait();
      EXPECT_EQ(b->download(out), std::vector<float>(kHeads * kDim, 0.0f)) << "an empty sequence";
      CommandList again = reader(5, 2);
      again.submit_and_wait();
      const std::vector<float> two_keys = b->download(out);
      Step{*b, c, 2, 1, 2}.run();
      again.submit_and_wait();
      got.push_back(b->download(out));
      EXPECT_NE(got.back(), two_keys);
      reader(5, 2).submit_and_wait();
      EXPECT_EQ(b->download(out), got.back()) << "a list recorded now";
    }
    EXPECT_TRUE(all_close(got[0], got[1], {1, kHeads, kDim}, 1e-5, 1e-5));
  }
}

// A fork (and an attention op) recorded after another list's append to its sequence may
// not run before that list; in the recorded order both run and match the CPU.
TEST_F(KvCacheOrder, ListsRunInTheOrderTheyWereRecorded) {
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    KvCache g = gpu_->kv_cache(config), c = cpu_->kv_cache(config);
    std::vector<std::vector<float>> got;
    for (auto [b, cache] : {std::pair{gpu_.get(), &g}, std::pair{cpu_.get(), &c}}) {
      Step{*b, *cache, 0, 5, 0}.run();
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32), read = b->tensor({1, kHeads, kDim}, DType::f32);
      CommandList append = b->commands(), fork = b->commands(), attend = b->commands();
      Step{*b, *cache, 5, 1, 0}.record(append, out);
      fork.kv_copy_sequence(*cache, 0, 1);
      const Step after{*b, *cache, 6, 1, 1, 7};
      after.record(fork, read);
      Tensor q = after.input(kHeads, 1);
      const std::vector<std::int32_t> p{5}, s{0};
      attend.attention(q, *cache, out, {.q_positions = p, .q_seq_ids = s});
      expect_invalid([&] { fork.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run", "order"});
      expect_invalid([&] { attend.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run"});
      append.submit_and_wait();
      fork.submit_and_wait();
      attend.submit_and_wait();
      got.push_back(b->download(read));
      got.push_back(b->download(out));
    }
    EXPECT_TRUE(all_close(got[0], got[2], {1, kHeads, kDim}, 1e-5, 1e-5)) << "the fork's step";
    EXPECT_TRUE(all_close(got[1], got[3], {1, kHeads, kDim}, 1e-5, 1e-5)) << "attention over sequence 0";
  }
}

// Two lists whose ops on one sequence interleave: neither order is right, both refused.
TEST_F(KvCacheOrder, InterleavedListsAreBothRefused) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8));
  Tensor out = b.tensor({1, kHeads, kDim}, DType::f32);
  CommandList x = b.commands(), y = b.commands();
  Step{b, c, 0, 1}.record(x, out);
  Step{b, c, 1, 1}.record(y, out);
  Step{b, c, 2, 1}.record(x, out);
  expect_invalid([&] { x.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run"});
  expect_invalid([&] { y.submit_and_wait(); }, {"submit_and_wait", "sequence 0", "not run"});
}

// A paged cache's blocks: a list that takes blocks another list returned to the pool (a
// fork over a sequence that held some) runs after it; lists that only take blocks run in
// any order.
TEST_F(KvCacheOrder, BlocksReturnedToThePoolAreTakenInOrder) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    KvCache c = b->kv_cache(paged(8, 4, 3));
    Step{*b, c, 0, 2, 0}.run();
    Step{*b, c, 0, 2, 1}.run();
    Tensor out = b->tensor({2, kHeads, kDim}, DType::f32);
    CommandList taker = b->commands(), other = b->commands();
    Step{*b, c, 2, 2, 0}.record(taker, out);
    Step{*b, c, 2, 2, 1}.record(other, out);
    other.submit_and_wait();  // blocks taken, none returned: no order between them
    taker.submit_and_wait();
    CommandList fork = b->commands(), after = b->commands();
    fork.kv_copy_sequence(c, 0, 1);           // returns sequence 1's blocks
    Step{*b, c, 0, 2, 2}.record(after, out);  // takes the last one returned
    expect_invalid([&] { after.submit_and_wait(); }, {"submit_and_wait", "free list", "not run"});
    fork.submit_and_wait();
    EXPECT_NO_THROW(after.submit_and_wait());
  }
}

// A replay refused part way (its second cache's op) leaves the first cache's order as it
// was too: another list then appends there and runs.
TEST_F(KvCacheOrder, RefusedReplayPutsBackItsOrder) {
  Backend& b = *cpu_;
  KvCache x = b.kv_cache(ring(8)), y = b.kv_cache(ring(8));
  Tensor out = b.tensor({1, kHeads, kDim}, DType::f32);
  CommandList list = b.commands();
  Step{b, x, 0, 1}.record(list, out);
  Step{b, y, 0, 1}.record(list, out);
  list.submit_and_wait();
  Step{b, y, 1, 1}.run();
  EXPECT_THROW(list.set_tokens(std::vector<std::int32_t>{1}), InvalidArgument);  // y is at 2
  EXPECT_EQ(x.next_position(0), 1);
  EXPECT_NO_THROW((Step{b, x, 1, 1}.run()));
}

// A list that ran may record more ops on its sequence and run again (its first ops again
// too); not once another list changed the sequence between them.
TEST_F(KvCacheOrder, ListThatRanMayGrowUnlessAnotherChangedItsSequence) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8));
  Tensor out = b.tensor({1, kHeads, kDim}, DType::f32);
  std::optional<CommandList> list = ran(Step{b, c, 0, 1}, out);
  Step{b, c, 1, 1}.record(*list, out);
  EXPECT_NO_THROW(list->submit_and_wait());
  Step{b, c, 2, 1}.run();
  Step{b, c, 3, 1}.record(*list, out);
  expect_invalid([&] { list->submit_and_wait(); }, {"submit_and_wait", "ran", "sequence 0"});
}

// A reset or truncate of one sequence writes that sequence's table to the device, not the
// others': theirs on the host include appends recorded and not run, which a list recorded
// before them, and run first, must not read (it read a ring slot already given to the
// unrun position, and paged, a block not yet copied that held another sequence's rows).
TEST_F(KvCacheOrder, ResetOfOneSequenceLeavesTheOthersUnrunAppendsOffTheDevice) {
  for (const KvCacheConfig& config : {ring(4, 3), paged(4, 6, 3)}) {
    for (int change : {0, 1, 2}) {  // none, reset(2), truncate(1, 1)
      std::vector<std::vector<float>> got;
      for (Backend* b : {gpu_.get(), cpu_.get()}) {
        for (bool before : {true, false}) {  // the reader run before the append is recorded
          KvCache c = b->kv_cache(config);
          Step{*b, c, 0, 4, 0}.run();
          Step{*b, c, 0, 2, 1}.run();
          Step{*b, c, 0, 2, 2}.run();
          CommandList fork = b->commands();
          fork.kv_copy_sequence(c, 0, 1);  // paged: sequence 1 shares both of 0's blocks
          fork.submit_and_wait();
          if (config.paged) c.reset(2);  // its block (another user's rows) back to the pool
          Tensor q = b->tensor({1, kHeads, kDim}, DType::f32), out = b->tensor({1, kHeads, kDim}, DType::f32);
          b->upload(q, normal(kHeads * kDim, 11));
          const std::int32_t p = 3, s = 0;
          CommandList reader = b->commands();
          reader.attention(q, c, out, {.q_positions = {&p, 1}, .q_seq_ids = {&s, 1}});
          if (before) reader.submit_and_wait();
          Tensor unused = b->tensor({1, kHeads, kDim}, DType::f32);
          CommandList append = b->commands();  // position 4: evicts 0; paged, copies a block
          Step{*b, c, 4, 1, 0, 5}.record(append, unused);
          if (change == 1) c.reset(2);
          if (change == 2) c.truncate(1, 1);
          if (!before) reader.submit_and_wait();
          got.push_back(b->download(out));
          append.submit_and_wait();
        }
        EXPECT_EQ(got[got.size() - 2], got.back()) << "paged " << config.paged << ", change " << change;
      }
      EXPECT_TRUE(all_close(got[0], got[2], {1, kHeads, kDim}, 1e-5, 1e-5));
    }
  }
}

// A replay refused changes nothing, not what destroying the list unrun does later: a list
// that ran, refused, replayed after a reset of another sequence and dropped puts its
// append back (the refusal had started its log: the reset made it stale, and the drop
// marked the sequence unwritten); and another list's append recorded between can still be
// put back (the refusal's last writer was restored in its place).
TEST_F(KvCacheOrder, RefusedReplayChangesNotWhatDroppingTheListDoes) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    for (bool refuse : {false, true}) {
      KvCache c = b->kv_cache(ring(8, 2));
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32);
      std::optional<CommandList> list = ran(Step{*b, c, 0, 1, 0}, out);
      if (refuse) {
        EXPECT_THROW(list->set_tokens(std::vector<std::int32_t>{5}, std::vector<std::int32_t>{0}), InvalidArgument);
      }
      c.reset(1);
      std::optional<CommandList> other = recorded(Step{*b, c, 0, 1, 1}, out);
      list->set_tokens(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{0});
      list.reset();
      other.reset();
      EXPECT_EQ(c.next_position(0), 1) << "refused first: " << refuse;
      EXPECT_EQ(c.next_position(1), 0) << "refused first: " << refuse;
      EXPECT_NO_THROW((Step{*b, c, 1, 1, 0}.run()));
      EXPECT_NO_THROW((Step{*b, c, 0, 1, 1}.run()));
    }
    // With no reset between: the refusal, or a replay that Vulkan rebuilds (another pattern
    // of sequences), puts back the cache's last writer as this replay found it, not as an
    // earlier one did (the other list's append could not be put back, or was put back
    // under a later list's).
    for (bool rebuild : {false, true}) {
      KvCache c = b->kv_cache(ring(8, 2));
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32);
      std::optional<CommandList> list = ran(Step{*b, c, 0, 1, 0}, out);
      std::optional<CommandList> other = recorded(Step{*b, c, 0, 1, 1}, out);
      if (rebuild) {
        list->set_tokens(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{1});
      } else {
        EXPECT_THROW(list->set_tokens(std::vector<std::int32_t>{7}, std::vector<std::int32_t>{0}), InvalidArgument);
      }
      list.reset();
      other.reset();
      EXPECT_EQ(c.next_position(0), 1) << "rebuild " << rebuild;
      EXPECT_EQ(c.next_position(1), 0) << "rebuild " << rebuild;
      EXPECT_NO_THROW((Step{*b, c, 0, 1, 1}.run()));
    }
  }
}

// A list dropped unrun whose append was put back holds no later list back: a reader
// recorded after it runs (it was refused for a list no longer there, "submit in order"),
// and reads the cache without the dropped key.
TEST_F(KvCacheOrder, ReaderAfterADroppedListRuns) {
  for (const KvCacheConfig& config : {ring(8), paged(8, 4)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 1}.run();
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32), q = b->tensor({1, kHeads, kDim}, DType::f32);
      b->upload(q, normal(kHeads * kDim, 3));
      const std::int32_t p = 1, s = 0;
      const auto read = [&] {
        CommandList r = b->commands();
        r.attention(q, c, out, {.q_positions = {&p, 1}, .q_seq_ids = {&s, 1}});
        return r;
      };
      CommandList alone = read();
      alone.submit_and_wait();
      const std::vector<float> one_key = b->download(out);
      std::optional<CommandList> append = recorded(Step{*b, c, 1, 1}, out);
      CommandList reader = read();
      append.reset();
      EXPECT_EQ(c.next_position(0), 1);
      b->upload(out, std::vector<float>(kHeads * kDim, 0.0f));
      EXPECT_NO_THROW(reader.submit_and_wait());
      EXPECT_EQ(b->download(out), one_key);
    }
  }
  // Except one rotating keys on read past sinks, planned on the ring the dropped append
  // moved (its start 2, the cache's 1 again): refused as a moved ring is, until replayed;
  // also once another list, not run yet, has moved the host's ring to 2 again (0.14.2 ran
  // it on the device's ring at 1). One planned just after the put-back runs.
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    for (bool again : {false, true}) {
      KvCacheConfig config = ring(4);
      config.n_sinks = 1, config.rope = KvRope::on_read;
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 4}.run();
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32), other = b->tensor({1, kHeads, kDim}, DType::f32);
      std::optional<CommandList> append = recorded(Step{*b, c, 4, 1}, out);
      const std::int32_t p = 4, s = 0;
      const auto read = [&] {
        CommandList r = b->commands();
        r.attention(Step{*b, c, 4, 1}.input(kHeads, 1), c, out, {.q_positions = {&p, 1}, .q_seq_ids = {&s, 1}});
        return r;
      };
      CommandList reader = read();
      append.reset();
      CommandList after = read();
      std::optional<CommandList> later;
      if (again) later = recorded(Step{*b, c, 4, 1}, other);
      expect_invalid([&] { reader.submit_and_wait(); }, {"submit_and_wait", "ring starting at position 2"});
      EXPECT_NO_THROW(after.submit_and_wait()) << "again " << again;
      if (again) later->submit_and_wait();
      EXPECT_NO_THROW(reader.set_tokens(std::vector<std::int32_t>{4}, std::vector<std::int32_t>{0}));
      EXPECT_NO_THROW(reader.submit_and_wait());
    }
  }
  // Lists recorded before the dropped one read the ring as it will be when they run (their
  // own appends and those recorded between move it), with the drop or without it; and with
  // a drop before them too (0.14.2 joined the two drops' spans, refusing them).
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    std::vector<float> without_drop;
    for (int drops : {0, 1, 2}) {
      KvCacheConfig config = ring(8);
      config.n_sinks = 2, config.rope = KvRope::on_read;
      KvCache c = b->kv_cache(config);
      Step{*b, c, 0, 6}.run();
      for (std::int32_t p = 6; p < 10; ++p) Step{*b, c, p, 1}.run();  // the ring wrapped
      Tensor first = b->tensor({1, kHeads, kDim}, DType::f32), second = b->tensor({1, kHeads, kDim}, DType::f32);
      Tensor unused = b->tensor({1, kHeads, kDim}, DType::f32);
      if (drops == 2) recorded(Step{*b, c, 10, 1}, unused).reset();
      std::optional<CommandList> r = recorded(Step{*b, c, 10, 1}, first), e = recorded(Step{*b, c, 11, 1}, second);
      if (drops >= 1) {
        recorded(Step{*b, c, 12, 1}, unused).reset();
        EXPECT_EQ(c.next_position(0), 12);
      }
      ASSERT_NO_THROW(r->submit_and_wait()) << "drops " << drops;
      ASSERT_NO_THROW(e->submit_and_wait()) << "drops " << drops;
      std::vector<float> got = b->download(first), also = b->download(second);
      got.insert(got.end(), also.begin(), also.end());
      if (drops > 0) {
        EXPECT_EQ(got, without_drop) << "drops " << drops;
      } else {
        without_drop = got;
      }
    }
  }
}

// A list whose appends (as recorded, or last replayed) have not run is not replayed: the
// replay would take their place, and the rows the host counts for them would never be
// written (a save took zeros for them; paged, a reset of another sequence made attention
// read a freed block's old rows). Destroying it puts them back; once it ran, it replays.
// A list that only reads replays as often as asked.
TEST_F(KvCacheOrder, ListWhoseAppendsHaveNotRunIsNotReplayed) {
  const std::vector<std::int32_t> seq0{0};
  for (const KvCacheConfig& config : {ring(8, 2), paged(8, 8, 2)}) {
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      KvCache c = b->kv_cache(config);
      Tensor out = b->tensor({1, kHeads, kDim}, DType::f32);
      std::optional<CommandList> list(b->commands());
      Step{*b, c, 0, 1}.record(*list, out);
      expect_invalid([&] { list->set_tokens(std::vector<std::int32_t>{1}, seq0); }, {"set_tokens", "have not run"});
      list->submit_and_wait();
      list->set_tokens(std::vector<std::int32_t>{1}, seq0);
      expect_invalid([&] { list->set_tokens(std::vector<std::int32_t>{2}, seq0); }, {"set_tokens", "have not run"});
      EXPECT_EQ(c.next_position(0), 2);
      list.reset();
      EXPECT_EQ(c.next_position(0), 1);
      EXPECT_NO_THROW((void)b->save_cache(c));
      const std::int32_t p = 0;
      CommandList reader = b->commands();
      reader.attention(Step{*b, c, 0, 1}.input(kHeads, 1), c, out, {.q_positions = {&p, 1}, .q_seq_ids = {&p, 1}});
      reader.set_tokens(std::vector<std::int32_t>{0}, seq0);
      EXPECT_NO_THROW(reader.set_tokens(std::vector<std::int32_t>{0}, seq0));
    }
  }
}

// A sequence marked unwritten refuses a replay over the cache as it refuses recording an
// op over it (a reader's replay has no planned entry for its submission to refuse).
TEST_F(KvCacheOrder, ReplayOverAnUnwrittenSequenceIsRefused) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    KvCache c = b->kv_cache(ring(8, 2));
    Step{*b, c, 0, 1}.run();
    Tensor out = b->tensor({1, kHeads, kDim}, DType::f32), q = b->tensor({1, kHeads, kDim}, DType::f32);
    const std::int32_t p = 0, s = 0;
    CommandList reader = b->commands();
    reader.attention(q, c, out, {.q_positions = {&p, 1}, .q_seq_ids = {&s, 1}});
    reader.submit_and_wait();
    std::optional<CommandList> dropped = recorded(Step{*b, c, 1, 1}, out);
    std::optional<CommandList> built_on = recorded(Step{*b, c, 0, 1, 1}, out);  // after it: it cannot be put back
    dropped.reset();
    expect_invalid([&] { reader.set_tokens(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{0}); },
                   {"set_tokens", "sequence 0", "never wrote", "reset(0)"});
    c.reset(0);
    built_on->submit_and_wait();
    Step{*b, c, 0, 2}.run();
    EXPECT_NO_THROW(reader.set_tokens(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{0}));
    EXPECT_NO_THROW(reader.submit_and_wait());
  }
}

}  // namespace
}  // namespace vkattn::test
