// Paged KV caches (KvCacheConfig::paged): random appends, forks, truncates and resets
// against a host model of every sequence's history (the attention it sees) and of the pool
// (which blocks each sequence may hold, how many sequences share each, how many blocks an
// op takes); running out of blocks; and a paged cache against a ring cache of the same
// slots fed the same ops, on every kernel family, dtype, and MLA shape, and through
// replays whose block tables grow. The ring cache's own tests also run over paged caches
// (test_kv_cache.cpp, Paged/KvCacheTest).
#include <gtest/gtest.h>

#include <set>

#include "support/fused_match.hpp"
#include "support/kv_model.hpp"

namespace vkattn::test {
namespace {

// What the public API shows of a paged cache, to compare before and after a refused op.
struct PoolState {
  std::vector<Ids> tables, slots;
  Ids refs, next;
  std::size_t free = 0;
  bool operator==(const PoolState&) const = default;
};

PoolState pool_state(const KvCache& cache) {
  PoolState p;
  for (std::size_t s = 0; s < cache.config().n_seqs; ++s) {
    p.tables.push_back(cache.block_table(s));
    p.slots.push_back(cache.slot_positions(s));
    p.next.push_back(cache.next_position(s));
  }
  p.refs = cache.block_refs();
  p.free = cache.free_blocks();
  return p;
}

// The pool's rules, from the slots alone: a sequence holds a block for a run of slots
// exactly when one of them holds a position, never the same block for two runs; a block's
// count is the number of runs naming it, and the free blocks are those no run names.
void expect_pool_consistent(const KvCache& cache, const std::string& what) {
  const KvCacheConfig& c = cache.config();
  Ids count(c.n_blocks, 0);
  for (std::size_t s = 0; s < c.n_seqs; ++s) {
    const Ids table = cache.block_table(s), slots = cache.slot_positions(s);
    ASSERT_EQ(table.size(), c.capacity / c.block_size);
    std::set<std::int32_t> own;
    for (std::size_t e = 0; e < table.size(); ++e) {
      const bool held =
          std::any_of(slots.begin() + static_cast<std::ptrdiff_t>(e * c.block_size),
                      slots.begin() + static_cast<std::ptrdiff_t>((e + 1) * c.block_size), [](std::int32_t p) { return p >= 0; });
      EXPECT_EQ(table[e] >= 0, held) << what << ": sequence " << s << ", run " << e;
      if (table[e] < 0) continue;
      EXPECT_TRUE(own.insert(table[e]).second) << what << ": sequence " << s << " holds block " << table[e] << " twice";
      ++count[static_cast<std::size_t>(table[e])];
    }
  }
  EXPECT_EQ(cache.block_refs(), count) << what;
  EXPECT_EQ(cache.free_blocks(), static_cast<std::size_t>(std::count(count.begin(), count.end(), 0))) << what;
}

// The blocks a fork needs by the documented rule: one when the source holds a block for
// the run its next append writes; those dst alone holds come back first.
std::size_t fork_needs(const KvCache& cache, std::size_t src) {
  const std::size_t bs = cache.config().block_size;
  return cache.block_table(src)[cache.slot(cache.next_position(src)) / bs] >= 0 ? 1 : 0;
}
std::size_t freed_by_release(const KvCache& cache, std::size_t seq) {
  const Ids refs = cache.block_refs();
  std::size_t n = 0;
  for (std::int32_t b : cache.block_table(seq)) n += b >= 0 && refs[static_cast<std::size_t>(b)] == 1 ? 1 : 0;
  return n;
}

template <class F>
void expect_out_of_blocks(F&& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception; expected Error(out_of_memory)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find("free blocks"), std::string::npos) << e.what();
  }
}

// Random appends (1 to 3 blocks' worth, some with keep_last), forks, truncates and resets
// of 4 sequences in a pool too small for all of them, each op checked against the model:
// the blocks it takes (blocks_to_append, the fork rule), the pool's rules, the slots; an op
// the pool cannot serve throws out_of_memory and changes nothing; every |attend_every|
// ops, attention of every sequence against the model's history.
struct Counts {
  int appends = 0, forks = 0, truncates = 0, resets = 0, refused = 0, shared = 0, attended = 0;
};

Counts random_ops(Backend& b, const Layout& s, std::size_t block_size, std::size_t n_blocks, int ops, int attend_every,
                  std::uint32_t seed) {
  KvCacheConfig config = s.cache();
  config.paged = true;
  config.block_size = block_size;
  config.n_blocks = n_blocks;
  KvCache cache = b.kv_cache(config);
  Model m(s);
  Rng rng(seed, s.halves);
  std::mt19937 gen(seed);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(gen() % n); };
  Counts n;
  const bool failed_before = ::testing::Test::HasFailure();
  for (int op = 0; op < ops; ++op) {
    const std::string what = "op " + std::to_string(op);
    const std::size_t seq = below(s.seqs), kind = below(20);
    const PoolState before = pool_state(cache);
    if (kind < 10) {  // append
      const std::size_t count = 1 + below(3 * block_size);
      const bool keep_last = kind == 0;
      const std::size_t tokens = keep_last ? count + s.ring() : count;
      const Tokens t = next_tokens(m, Ids(tokens, static_cast<std::int32_t>(seq)), rng);
      const std::size_t needs = cache.blocks_to_append(seq, tokens);
      if (needs > before.free) {
        expect_out_of_blocks([&] { run(b, cache, s, &t, nullptr, {.keep_last = keep_last}); }, what);
        EXPECT_EQ(pool_state(cache), before) << what;
        ++n.refused;
        continue;
      }
      run(b, cache, s, &t, nullptr, {.keep_last = keep_last});
      m.add(t);
      EXPECT_EQ(cache.free_blocks(), before.free - needs) << what;
      ++n.appends;
    } else if (kind < 13) {  // fork
      const std::size_t src = below(s.seqs);
      if (src == seq) continue;
      const std::size_t needs = fork_needs(cache, src);
      const std::function<void(CommandList&)> fork = [&](CommandList& cmd) { cmd.kv_copy_sequence(cache, src, seq); };
      if (needs > before.free + freed_by_release(cache, seq)) {
        expect_out_of_blocks([&] { run(b, cache, s, nullptr, nullptr, {}, fork); }, what);
        EXPECT_EQ(pool_state(cache), before) << what;
        ++n.refused;
        continue;
      }
      run(b, cache, s, nullptr, nullptr, {}, fork);
      m.copy(src, seq);
      const Ids from = cache.block_table(src), to = cache.block_table(seq);
      std::size_t differ = 0;
      for (std::size_t e = 0; e < from.size(); ++e) differ += from[e] != to[e] ? 1 : 0;
      EXPECT_EQ(differ, needs) << what << ": a fork shares every block but the one it copies";
      n.shared += from == to ? 0 : 1;
      ++n.forks;
    } else if (kind < 16) {  // truncate
      const auto p = static_cast<std::int32_t>(below(static_cast<std::size_t>(m.length(seq)) + 1));
      try {
        cache.truncate(seq, p);
      } catch (const InvalidArgument&) {  // positions the ring has overwritten: nothing changes
        EXPECT_EQ(pool_state(cache), before) << what;
        continue;
      }
      m.truncate(seq, p);
      ++n.truncates;
    } else if (kind < 17) {
      cache.reset(seq);
      m.truncate(seq, 0);
      ++n.resets;
    } else {
      continue;
    }
    expect_pool_consistent(cache, what);
    for (std::size_t q = 0; q < s.seqs; ++q) EXPECT_EQ(cache.slot_positions(q), m.slots(q)) << what << ", sequence " << q;
    std::size_t held = 0;
    for (std::size_t q = 0; q < s.seqs; ++q) held += m.held(q).size();
    if (op % attend_every == 0 && held > 0) {  // (the reference needs a key)
      Ids all(s.seqs);
      std::iota(all.begin(), all.end(), 0);
      const Tokens ask = next_tokens(m, all, rng);
      expect_near(run(b, cache, s, nullptr, &ask), reference(m, ask), s, ask.size(), s.tol(), what);
      ++n.attended;
    }
    if (::testing::Test::HasFailure() && !failed_before) break;  // one op's failures, not a cascade
  }
  return n;
}

// Thousands of ops on the CPU backend: every kind of op, out of blocks many times, forks
// that share; sinks and a ring that wraps (capacity 32, 2 sinks, 8 runs of 4 slots), 14
// blocks for 4 sequences of 8 runs.
TEST(PagedKvCache, BlockAccountingAgainstModel) {
  auto cpu = make_backend(BackendKind::cpu);
  const Layout s{.seqs = 4, .heads = 4, .kv_heads = 2, .head_dim = 8, .capacity = 32, .sinks = 2};
  const Counts n = random_ops(*cpu, s, 4, 14, 4000, 7, 4301);
  EXPECT_GT(n.appends, 500);
  EXPECT_GT(n.forks, 200);
  EXPECT_GT(n.truncates, 200);
  EXPECT_GT(n.resets, 50);
  EXPECT_GT(n.refused, 100);
  EXPECT_GT(n.shared, 50);
  EXPECT_GT(n.attended, 200);
}

using PagedKvCacheVulkan = VulkanVsCpuTest;
using PagedKvCacheTest = BackendTest;

// The same ops on Vulkan (fewer: each is a submission), f16 and the quantized dtypes,
// GQA, sinks and a window; attention through the three stages against the model.
TEST_F(PagedKvCacheVulkan, RandomOpsAgainstModel) {
  const Layout cases[] = {
      {.seqs = 3,
       .heads = 4,
       .kv_heads = 2,
       .head_dim = 16,
       .capacity = 24,
       .sinks = 1,
       .dtype = DType::f16,
       .input = DType::f16,
       .halves = true,
       .attn = {.window = 12u}},
      {.seqs = 3, .heads = 4, .kv_heads = 1, .head_dim = 32, .capacity = 16, .dtype = DType::q8_0},
      {.seqs = 3, .heads = 2, .kv_heads = 2, .head_dim = 32, .capacity = 16, .sinks = 2, .dtype = DType::q4_0}};
  std::uint32_t seed = 11;
  for (const Layout& s : cases) {
    // Quantized K/V: the reference holds the same blocks (uploading quantizes as kv_append
    // does), so only the order of the sums differs.
    const Counts n = random_ops(*gpu_, s, 4, s.seqs * s.capacity / 4 * 2 / 3, 60, 3, seed++);  // 2/3 of what all need
    EXPECT_GT(n.forks + n.appends, 20);
    EXPECT_GT(n.refused, 0);
  }
}

// A fork shares every full block and copies the one the source's next append writes; the
// next appends of either sequence then copy nothing, until one writes a block both hold
// (here after a truncate); reset returns what only one holds. Blocks of 16, on both
// backends; attention against the model after each step.
TEST_P(PagedKvCacheTest, ForkSharesBlocks) {
  const Layout s{.seqs = 2,
                 .heads = 4,
                 .kv_heads = 2,
                 .head_dim = 16,
                 .capacity = 64,
                 .dtype = DType::f16,
                 .input = DType::f16,
                 .halves = true};
  KvCacheConfig config = s.cache();
  config.paged = true;
  config.n_blocks = 10;
  KvCache cache = backend().kv_cache(config);
  EXPECT_EQ(config.block_size, 16u);  // the default
  EXPECT_EQ(cache.bytes(), 2u * 10 * 16 * 2 * 16 * 2);
  Model m(s);
  Rng rng(5, true);
  auto step_both = [&](const Ids& seqs, const std::string& what) {
    const Tokens t = next_tokens(m, seqs, rng);
    step(backend(), cache, m, t, t, what);
    expect_pool_consistent(cache, what);
  };
  EXPECT_EQ(cache.blocks_to_append(0, 37), 3u);
  step_both(Ids(37, 0), "prefill of 37: runs 0, 1 full, run 2 holds 5");
  EXPECT_EQ(cache.free_blocks(), 7u);
  const Ids before = cache.block_table(0);
  run(backend(), cache, s, nullptr, nullptr, {}, [&](CommandList& cmd) { cmd.kv_copy_sequence(cache, 0, 1); });
  m.copy(0, 1);
  const Ids after = cache.block_table(1);
  EXPECT_EQ(cache.block_table(0), before);
  EXPECT_EQ(after[0], before[0]);
  EXPECT_EQ(after[1], before[1]);
  EXPECT_NE(after[2], before[2]);  // the partly filled block, copied
  EXPECT_EQ(cache.free_blocks(), 6u);
  EXPECT_EQ(cache.block_refs()[static_cast<std::size_t>(before[0])], 2);
  EXPECT_EQ(cache.block_refs()[static_cast<std::size_t>(after[2])], 1);
  EXPECT_EQ(cache.blocks_to_append(0, 11), 0u);
  EXPECT_EQ(cache.blocks_to_append(1, 11), 0u);
  EXPECT_EQ(cache.blocks_to_append(1, 12), 1u);  // a new run
  step_both({0, 1, 1, 0}, "decode after the fork: each writes its own block");
  EXPECT_EQ(cache.free_blocks(), 6u);
  cache.truncate(1, 20);  // into run 1, shared; run 2 comes back
  m.truncate(1, 20);
  expect_pool_consistent(cache, "truncate");
  EXPECT_EQ(cache.free_blocks(), 7u);
  EXPECT_EQ(cache.blocks_to_append(1, 1), 1u);  // the shared block is copied first
  step_both({1, 0}, "a write into a shared block");
  EXPECT_NE(cache.block_table(1)[1], cache.block_table(0)[1]);
  EXPECT_EQ(cache.block_refs()[static_cast<std::size_t>(cache.block_table(0)[1])], 1);
  EXPECT_EQ(cache.free_blocks(), 6u);
  cache.reset(0);
  m.truncate(0, 0);
  expect_pool_consistent(cache, "reset");
  EXPECT_EQ(cache.free_blocks(), 8u);  // run 0 is still sequence 1's
  step_both({1, 1, 0}, "after reset");
}

// Running out: kv_append and kv_copy_sequence throw Error(out_of_memory) naming the free
// blocks when they are recorded, and the cache (pool, tables, slots) is as before, also
// with the ops before it in the same list recorded; freeing blocks makes room.
TEST_P(PagedKvCacheTest, OutOfBlocks) {
  const Layout s{.seqs = 3, .heads = 2, .kv_heads = 1, .head_dim = 8, .capacity = 16};
  KvCacheConfig config = s.cache();
  config.paged = true;
  config.block_size = 4;
  config.n_blocks = 5;
  KvCache cache = backend().kv_cache(config);
  Model m(s);
  Rng rng(9, false);
  const Tokens fill = next_tokens(m, Ids(16, 0), rng);  // 4 runs of 4: 4 blocks
  run(backend(), cache, s, &fill, nullptr);
  m.add(fill);
  EXPECT_EQ(cache.free_blocks(), 1u);
  const Tokens two = next_tokens(m, {1, 1, 1, 1, 2}, rng);  // two new runs, one free block
  EXPECT_EQ(cache.blocks_to_append(1, 4), 1u);
  const PoolState before = pool_state(cache);
  expect_out_of_blocks([&] { run(backend(), cache, s, &two, nullptr); }, "kv_append");
  EXPECT_EQ(pool_state(cache), before);
  // Sequence 0's next append wraps into run 0, which it holds: a fork copies that block.
  EXPECT_EQ(fork_needs(cache, 0), 1u);
  CommandList cmd = backend().commands();
  const Tensor k = backend().tensor({1, 1, 8}, DType::f32), v = backend().tensor({1, 1, 8}, DType::f32);
  cmd.kv_append(cache, k, v, std::vector<std::int32_t>{0}, std::vector<std::int32_t>{2});  // takes the last block
  const PoolState recorded = pool_state(cache);
  EXPECT_EQ(cache.free_blocks(), 0u);
  expect_out_of_blocks([&] { cmd.kv_copy_sequence(cache, 0, 1); }, "kv_copy_sequence");
  EXPECT_EQ(pool_state(cache), recorded);
  cache.reset(2);  // the list's append to sequence 2 is stale now: never submitted
  EXPECT_EQ(cache.free_blocks(), 1u);
  expect_invalid([&] { cmd.submit_and_wait(); }, {"sequence 2", "reset"});
  run(backend(), cache, s, nullptr, nullptr, {}, [&](CommandList& c) { c.kv_copy_sequence(cache, 0, 1); });
  m.copy(0, 1);
  expect_pool_consistent(cache, "fork");
  const Tokens ask = next_tokens(m, {0, 1}, rng);
  expect_near(run(backend(), cache, s, nullptr, &ask), reference(m, ask), s, 2, s.tol(), "after the fork");
}

// The paged fields are checked with the rest of the config; the pool's queries refuse a
// ring cache.
TEST_P(PagedKvCacheTest, ConfigErrors) {
  const KvCacheConfig ok{.n_kv_heads = 1, .head_dim = 8, .capacity = 32, .paged = true, .block_size = 8, .n_blocks = 4};
  auto with = [&](auto edit) {
    KvCacheConfig c = ok;
    edit(c);
    return c;
  };
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.block_size = 0; })); }, {"config.block_size = 0", "power of two"});
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.block_size = 12; })); }, {"config.block_size = 12"});
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.block_size = 1u << 17; })); }, {"65536"});
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.capacity = 36; })); },
                 {"config.capacity = 36", "multiple of block_size = 8"});
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.n_blocks = 0; })); }, {"config.n_blocks = 0", "required"});
  // A pool asked for without paging (the flag forgotten) is refused, not ignored.
  expect_invalid([&] { backend().kv_cache(with([](auto& c) { c.paged = false; })); }, {"config.n_blocks = 4", "config.paged"});
  KvCache ring = backend().kv_cache(with([](auto& c) {
    c.paged = false;
    c.n_blocks = 0;
  }));
  expect_invalid([&] { (void)ring.free_blocks(); }, {"free_blocks", "a ring cache", "KvCacheConfig::paged"});
  expect_invalid([&] { (void)ring.block_table(0); }, {"block_table"});
  KvCache paged = backend().kv_cache(ok);
  expect_invalid([&] { (void)paged.block_table(1); }, {"block_table", "seq = 1"});
  expect_invalid([&] { (void)paged.blocks_to_append(0, std::size_t{1} << 31); }, {"blocks_to_append", "n_tokens"});
  EXPECT_EQ(paged.free_blocks(), 4u);
  EXPECT_EQ(paged.block_table(0), Ids(4, -1));
}

// A slot table over the device's storage buffer range (every sequence's slots, 4 bytes
// each, however small the pool) is refused by kv_cache, naming the table and its size.
TEST_F(PagedKvCacheVulkan, SlotTableOverTheRangeIsNamed) {
  DeviceOptions small = test_options();
  small.cap_limits = uncapped();
  small.cap_limits->max_storage_buffer_range = 65536;
  on_vulkan(small, [&](Backend& gpu) {
    const KvCacheConfig config{
        .n_seqs = 64, .n_kv_heads = 1, .head_dim = 8, .capacity = 512, .paged = true, .block_size = 16, .n_blocks = 4};
    try {
      (void)gpu.kv_cache(config);
      ADD_FAILURE() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
      const std::string m = e.what();
      EXPECT_NE(m.find("vkattn: kv_cache: the slot table of n_seqs x capacity = 64 x 512 slots needs 139520 bytes, over "
                       "maxStorageBufferRange = 65536"),
                std::string::npos)
          << m;
      EXPECT_EQ(e.op(), "kv_cache");
    }
    KvCacheConfig fewer = config;
    fewer.n_seqs = 8;  // 16 KiB of table: fine
    (void)gpu.kv_cache(fewer);
  });
}

// Saved and restored (on the other backend, into a pool of another size): the blocks the
// sequences hold and no others, their sharing kept; attention after it equals the
// original's, as do later appends. A save restores only into a paged cache of the same
// slots and block size, with blocks enough.
TEST_P(PagedKvCacheTest, SaveRestore) {
  const Layout s{.seqs = 3, .heads = 4, .kv_heads = 2, .head_dim = 32, .capacity = 32, .sinks = 1, .dtype = DType::q4_0};
  KvCacheConfig config = s.cache();
  config.paged = true;
  config.block_size = 4;
  config.n_blocks = 20;
  KvCache cache = backend().kv_cache(config);
  Model m(s);
  Rng rng(17, false);
  const Tokens prefill = next_tokens(m, Ids(13, 0), rng);
  run(backend(), cache, s, &prefill, nullptr);
  m.add(prefill);
  run(backend(), cache, s, nullptr, nullptr, {}, [&](CommandList& cmd) { cmd.kv_copy_sequence(cache, 0, 2); });
  m.copy(0, 2);
  const Tokens more = next_tokens(m, {2, 2, 0}, rng);
  run(backend(), cache, s, &more, nullptr);
  m.add(more);
  const std::vector<std::uint8_t> bytes = backend().save_cache(cache);
  const std::size_t used = config.n_blocks - cache.free_blocks();
  std::string why;
  auto other = try_backend(GetParam() == BackendKind::cpu ? BackendKind::vulkan : BackendKind::cpu, test_options(), why);
  VKATTN_REQUIRE_BACKEND(other, why);
  KvCacheConfig smaller = config;
  smaller.n_blocks = used;
  KvCache restored = other->kv_cache(smaller);
  other->restore_cache(restored, bytes);
  expect_pool_consistent(restored, "restored");
  EXPECT_EQ(restored.free_blocks(), 0u);
  for (std::size_t q = 0; q < s.seqs; ++q) {
    EXPECT_EQ(restored.slot_positions(q), cache.slot_positions(q));
    EXPECT_EQ(restored.next_position(q), cache.next_position(q));
  }
  EXPECT_EQ(restored.block_table(0)[0], restored.block_table(2)[0]);  // still shared
  const Tokens ask = next_tokens(m, {0, 2, 1}, rng);
  const Outputs want = reference(m, ask);
  expect_near(run(*other, restored, s, nullptr, &ask), want, s, 3, s.tol(), "restored");
  // Blocks of the K and V words, not the pool: a quarter of it here.
  EXPECT_LT(bytes.size(), cache.bytes() / 2);
  KvCacheConfig tiny = config;
  tiny.n_blocks = used - 1;
  KvCache too_small = other->kv_cache(tiny);
  expect_invalid([&] { other->restore_cache(too_small, bytes); }, {"blocks saved", std::to_string(used).c_str()});
  KvCacheConfig ring_config = config;
  ring_config.paged = false;
  ring_config.n_blocks = 0;
  KvCache ring = other->kv_cache(ring_config);
  expect_invalid([&] { other->restore_cache(ring, bytes); }, {"config.paged = 1", "the cache's 0"});
  expect_invalid([&] { backend().restore_cache(cache, other->save_cache(ring)); }, {"config.paged = 0"});
  KvCacheConfig blocks8 = config;
  blocks8.block_size = 8;
  KvCache other_blocks = other->kv_cache(blocks8);
  expect_invalid([&] { other->restore_cache(other_blocks, bytes); }, {"config.block_size = 4", "the cache's 8"});
  expect_no_validation_messages(*other);
}

// One decode step of 3 sequences (kv_append, then attention) recorded once per backend and
// replayed (set_tokens) for 40 tokens: the tables grow on the device (blocks of 4) under a
// list recorded before them; a fork between replays shares blocks, a truncate returns some
// and leaves a sequence writing a shared one, which the next step copies first (the replay
// builds that op again); Vulkan against the
// CPU backend, and the pools alike, each step. Then a pool too small: the replay that
// needs a block throws out_of_memory and leaves the list and the cache as they were.
TEST_F(PagedKvCacheVulkan, ReplayThroughGrowingTables) {
  const KvCacheConfig config{.n_seqs = 3,
                             .n_kv_heads = 2,
                             .head_dim = 32,
                             .capacity = 64,
                             .dtype = DType::f16,
                             .n_sinks = 1,
                             .paged = true,
                             .block_size = 4,
                             .n_blocks = 40};
  struct Side {
    Backend& b;
    KvCache cache;
    Tensor k, v, q, out;
    CommandList cmd;
    Side(Backend& be, const KvCacheConfig& c)
        : b(be), cache(be.kv_cache(c)), k(be.tensor({3, 2, 32}, DType::f32)), v(be.tensor({3, 2, 32}, DType::f32)),
          q(be.tensor({3, 4, 32}, DType::f32)), out(be.tensor({3, 4, 32}, DType::f32)), cmd(be.commands()) {}
  };
  Rng rng(3, false);
  auto replay = [&](const KvCacheConfig& c, int steps, const std::function<void(int, std::vector<Side*>&)>& between) {
    Side g(*gpu_, c), h(*cpu_, c);
    std::vector<Side*> sides{&g, &h};
    const Ids seqs{0, 1, 2};
    for (int step = 0; step < steps; ++step) {
      between(step, sides);
      Ids pos;
      for (std::size_t s = 0; s < 3; ++s) pos.push_back(g.cache.next_position(s));
      const std::vector<float> k = rng.draw(3 * 2 * 32), v = rng.draw(3 * 2 * 32), q = rng.draw(3 * 4 * 32);
      for (Side* side : sides) {
        if (step == 0) {
          side->cmd.kv_append(side->cache, side->k, side->v, pos, seqs);
          side->cmd.attention(side->q, side->cache, side->out, {.q_positions = pos, .q_seq_ids = seqs}, {.window = 30u});
        } else {
          side->cmd.set_tokens(pos, seqs);
        }
        side->b.upload(side->k, k);
        side->b.upload(side->v, v);
        side->b.upload(side->q, q);
        side->cmd.submit_and_wait();
      }
      const std::string what = "step " + std::to_string(step);
      EXPECT_TRUE(all_close(gpu_->download(g.out), cpu_->download(h.out), {3, 4, 32}, 2e-4, 1e-4)) << what;
      EXPECT_EQ(pool_state(g.cache), pool_state(h.cache)) << what;
      expect_pool_consistent(g.cache, what);
    }
  };
  replay(config, 40, [](int step, std::vector<Side*>& sides) {
    for (Side* side : sides) {
      if (step == 13) {  // sequence 2 shares 0's first 3 blocks and copies its 4th
        CommandList fork = side->b.commands();
        fork.kv_copy_sequence(side->cache, 0, 2);
        fork.submit_and_wait();
      }
      if (step == 24) {
        side->cache.truncate(1, side->cache.next_position(1) - 6);
        side->cache.truncate(2, 10);  // into the third block, shared: the next step copies it
      }
    }
  });
  // 4 blocks: each sequence's first run, and one more. The step that needs three is
  // refused; truncated back into their first runs, two sequences leave it needing one.
  KvCacheConfig small = config;
  small.n_blocks = 4;
  replay(small, 5, [](int step, std::vector<Side*>& sides) {
    if (step != 4) return;
    for (Side* side : sides) {
      const PoolState before = pool_state(side->cache);
      EXPECT_EQ(before.free, 1u);
      const Ids next = before.next, seqs{0, 1, 2};
      expect_out_of_blocks([&] { side->cmd.set_tokens(next, seqs); }, "set_tokens");
      EXPECT_EQ(pool_state(side->cache), before);
      side->cache.truncate(1, 3);
      side->cache.truncate(2, 3);
    }
  });
}

// A list that appends to sequence 0 and forks it into 1, replayed (set_tokens) across
// block boundaries: each replay plans the fork again (which blocks 1 shares, which it
// copies, what the pool takes back), so the fork is built again, never patched (a patched
// fork once wrote the first recording's table entry and block copy: 0.56 off at the third
// token). Vulkan against the CPU backend, both sequences, then appends to 1 alone.
TEST_F(PagedKvCacheVulkan, ReplayedFork) {
  const KvCacheConfig config{.n_seqs = 2,
                             .n_kv_heads = 1,
                             .head_dim = 8,
                             .capacity = 16,
                             .dtype = DType::f32,
                             .paged = true,
                             .block_size = 4,
                             .n_blocks = 8};
  struct Side {
    Backend& b;
    KvCache cache;
    Tensor k, v;
    CommandList cmd;
    Side(Backend& be, const KvCacheConfig& c)
        : b(be), cache(be.kv_cache(c)), k(be.tensor({1, 1, 8}, DType::f32)), v(be.tensor({1, 1, 8}, DType::f32)),
          cmd(be.commands()) {}
    std::vector<float> attend(std::size_t seq, const std::vector<float>& q) {
      Tensor tq = b.tensor({1, 1, 8}, DType::f32), out = b.tensor({1, 1, 8}, DType::f32);
      b.upload(tq, q);
      const Ids pos{cache.next_position(seq) - 1}, seqs{static_cast<std::int32_t>(seq)};
      CommandList c = b.commands();
      c.attention(tq, cache, out, {.q_positions = pos, .q_seq_ids = seqs});
      c.submit_and_wait();
      return b.download(out);
    }
  };
  Side g(*gpu_, config), h(*cpu_, config);
  Rng rng(17, false);
  auto compare = [&](const std::string& what) {
    for (std::size_t seq : {0u, 1u}) {
      const std::vector<float> q = rng.draw(8);
      EXPECT_TRUE(all_close(g.attend(seq, q), h.attend(seq, q), {1, 1, 8}, 1e-5, 1e-5)) << what << ", sequence " << seq;
    }
    EXPECT_EQ(pool_state(g.cache), pool_state(h.cache)) << what;
    expect_pool_consistent(g.cache, what);
  };
  for (std::int32_t p = 0; p < 10; ++p) {
    const std::vector<float> k = rng.draw(8), v = rng.draw(8);
    for (Side* side : {&g, &h}) {
      side->b.upload(side->k, k);
      side->b.upload(side->v, v);
      if (p == 0) {
        side->cmd.kv_append(side->cache, side->k, side->v, Ids{0}, Ids{0});
        side->cmd.kv_copy_sequence(side->cache, 0, 1);
      } else {
        side->cmd.set_tokens(Ids{p}, Ids{0});
      }
      side->cmd.submit_and_wait();
    }
    compare("token " + std::to_string(p));
  }
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> k = rng.draw(8), v = rng.draw(8);
    for (Side* side : {&g, &h}) {
      side->b.upload(side->k, k);
      side->b.upload(side->v, v);
      CommandList c = side->b.commands();
      c.kv_append(side->cache, side->k, side->v, Ids{side->cache.next_position(1)}, Ids{1});
      c.submit_and_wait();
    }
    compare("sequence 1's append " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PagedKvCacheTest, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

}  // namespace
}  // namespace vkattn::test
