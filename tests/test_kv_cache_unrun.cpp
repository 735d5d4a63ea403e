// KV cache and command lists: a list destroyed before it ran (KvCacheUnrun), and the order
// lists run in (KvCacheOrder, below). A cache's host bookkeeping advances
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
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kHeads = 4, kKvHeads = 2, kDim = 16;

KvCacheConfig ring(std::size_t capacity, std::size_t n_seqs = 1) {
  return {.n_seqs = n_seqs, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f32};
}
KvCacheConfig paged(std::size_t capacity, std::size_t n_blocks, std::size_t n_seqs = 1) {
  KvCacheConfig c = ring(capacity, n_seqs);
  c.paged = true;
  c.block_size = 2;
  c.n_blocks = n_blocks;
  return c;
}

// One backend's step: append |n| tokens of sequence |seq| from |first| on and attend.
struct Step {
  Backend& b;
  KvCache& cache;
  std::int32_t first;
  std::size_t n, seq = 0;
  std::uint32_t seed = 1;

  std::vector<std::int32_t> positions() const {
    std::vector<std::int32_t> p(n);
    for (std::size_t t = 0; t < n; ++t) p[t] = first + static_cast<std::int32_t>(t);
    return p;
  }
  Tensor input(std::size_t heads, std::uint32_t salt) const {
    Tensor t = b.tensor({n, heads, kDim}, DType::f32);
    b.upload(t, normal(n * heads * kDim, seed * 97 + salt + static_cast<std::uint32_t>(first)));
    return t;
  }
  // Records the step into |list|; |bad_out| makes attention refuse after kv_append.
  void record(CommandList& list, Tensor& out, bool bad_out = false) const {
    const auto p = positions();
    const std::vector<std::int32_t> s(n, static_cast<std::int32_t>(seq));
    Tensor q = input(kHeads, 1), k = input(kKvHeads, 2), v = input(kKvHeads, 3);
    list.kv_append(cache, k, v, p, s);
    Tensor wrong = b.tensor({n, kHeads, kDim + 1}, DType::f32);
    list.attention(q, cache, bad_out ? wrong : out, {.q_positions = p, .q_seq_ids = s});
  }
  std::vector<float> run() const {
    CommandList list = b.commands();
    Tensor out = b.tensor({n, kHeads, kDim}, DType::f32);
    record(list, out);
    list.submit_and_wait();
    return b.download(out);
  }
  void drop_refused() const {
    CommandList list = b.commands();
    Tensor out = b.tensor({n, kHeads, kDim}, DType::f32);
    EXPECT_THROW(record(list, out, true), InvalidArgument);
  }
};

// A list with |step| recorded and not run (destroyed by resetting the optional).
std::optional<CommandList> recorded(const Step& step, Tensor& out) {
  std::optional<CommandList> list(step.b.commands());
  step.record(*list, out);
  return list;
}

std::vector<std::int32_t> slots(const KvCache& c, std::size_t seq = 0) {
  const auto s = c.slot_positions(seq);
  return {s.begin(), s.end()};
}

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

// A reset before the dropped list's later ops does not clear them, nor does a truncate
// that keeps some of its positions: the sequence is marked.
TEST_F(KvCacheUnrun, ChangesBetweenItsOpsDoNotClearTheMark) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8));
  Tensor out = b.tensor({2, kHeads, kDim}, DType::f32);
  {
    CommandList a = b.commands();
    Step{b, c, 0, 2}.record(a, out);
    c.reset(0);
    Step{b, c, 0, 2}.record(a, out);
  }
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 0"});
  c.reset(0);
  Step{b, c, 0, 2}.run();
  {
    CommandList a = b.commands();
    Tensor wide = b.tensor({4, kHeads, kDim}, DType::f32);
    Step{b, c, 2, 4}.record(a, wide);
    c.truncate(0, 4);  // keeps 2 and 3, which never ran
  }
  expect_invalid([&] { (void)b.save_cache(c); }, {"save_cache", "sequence 0"});
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

// A list replayed again and again without running keeps, per sequence, its latest op (the
// marks are merged once they pass their bound): a sequence reset between the replays is
// marked because later replays wrote it again, and one only the early replays wrote is not
// (the merge crosses both). restore_cache clears the marks.
TEST_F(KvCacheUnrun, ManyReplaysKeepEachSequencesLatestOp) {
  Backend& b = *cpu_;
  KvCache c = b.kv_cache(ring(8, 4));
  const std::vector<std::uint8_t> empty = b.save_cache(c);
  {
    CommandList list = b.commands();
    Tensor k = b.tensor({2, kKvHeads, kDim}, DType::f32), v = b.tensor({2, kKvHeads, kDim}, DType::f32);
    list.kv_append(c, k, v, std::vector<std::int32_t>{0, 0}, std::vector<std::int32_t>{0, 3});
    auto replay = [&](std::int32_t s0, std::int32_t s1, int times) {
      for (int i = 0; i < times; ++i) {
        list.set_tokens(std::vector<std::int32_t>{c.next_position(static_cast<std::size_t>(s0)),
                                                  c.next_position(static_cast<std::size_t>(s1))},
                        std::vector<std::int32_t>{s0, s1});
      }
    };
    replay(0, 3, 10000);
    replay(0, 1, 10000);
    c.reset(1);
    c.reset(3);
    replay(0, 1, 10000);
    replay(0, 2, 5000);  // past 2^16 marks: merged, the reset's both sides in one entry
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

// The order lists run in. A list's appends and forks are planned on the host when
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
  CommandList list = b.commands();
  Step{b, c, 0, 1}.record(list, out);
  list.submit_and_wait();
  Step{b, c, 1, 1}.record(list, out);
  EXPECT_NO_THROW(list.submit_and_wait());
  Step{b, c, 2, 1}.run();
  Step{b, c, 3, 1}.record(list, out);
  expect_invalid([&] { list.submit_and_wait(); }, {"submit_and_wait", "ran", "sequence 0"});
}

}  // namespace
}  // namespace vkattn::test
