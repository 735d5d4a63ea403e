// KV cache: the ring buffer (with sinks) against a model that keeps the whole history. The
// model is written here from the documented rules, not from the library: a sequence holds
// its sinks and its last capacity - n_sinks positions, position p sits in slot p (sinks) or
// n_sinks + (p - n_sinks) % (capacity - n_sinks), and attention over the cache equals the
// public attention ops on plain K/V tensors holding exactly those positions (CPU backend).
// On both backends: wrap-around, capacity 1, sinks, mixed sequences, prefill then decode,
// keep_last, overwritten keys, truncate, reset, sequence copy, many steps in one list,
// stale slots. Vulkan against the CPU reference: test_kv_cache_vulkan.cpp. Every test runs
// again over paged caches of the same slots (Paged/..., blocks of up to 4 slots: a paged
// cache keeps the ring's rules), whose own tests are in test_kv_cache_paged.cpp.
#include <gtest/gtest.h>

#include "support/kv_model.hpp"

namespace vkattn::test {
namespace {

// The backend, and the most slots per block of a paged cache (0: ring caches).
struct CacheKind {
  BackendKind backend;
  std::size_t block_size;
};

class KvCacheTest : public ::testing::TestWithParam<CacheKind> {
 protected:
  void SetUp() override {
    paged_layouts() = GetParam().block_size;
    std::string why;
    backend_ = try_backend(GetParam().backend, test_options(), why);
    VKATTN_REQUIRE_BACKEND(backend_, why);
  }
  void TearDown() override {
    paged_layouts() = 0;
    if (backend_) expect_no_validation_messages(*backend_);
  }
  Backend& backend() { return *backend_; }
  std::shared_ptr<Backend> backend_;
};

std::string cache_kind_name(const ::testing::TestParamInfo<CacheKind>& info) { return to_string(info.param.backend); }

// Decode far past the capacity one token at a time: every step equals attention over the
// positions the model says are held, on f32 and f16 caches, with sinks, windows and ALiBi.
TEST_P(KvCacheTest, RingWrapAroundMatchesFullHistory) {
  const std::vector<std::pair<const char*, Layout>> cases = {
      {"f32", {.heads = 4, .kv_heads = 2}},
      {"f16", {.heads = 4, .kv_heads = 2, .dtype = DType::f16, .input = DType::f16, .halves = true}},
      {"f16 cache, f32 input", {.heads = 4, .kv_heads = 2, .dtype = DType::f16}},
      {"sinks 2, window 4, alibi", {.capacity = 7, .sinks = 2, .attn = {.window = 4u, .alibi = true}}},
      {"f16 gqa 4, head_dim 64",
       {.heads = 8,
        .kv_heads = 2,
        .head_dim = 64,
        .capacity = 5,
        .sinks = 1,
        .dtype = DType::f16,
        .input = DType::f16,
        .halves = true}},
      {"f32 cache, f16 input", {.dtype = DType::f32, .input = DType::f16, .halves = true}},
      {"f32 cache, odd head_dim 7", {.heads = 4, .kv_heads = 2, .head_dim = 7, .capacity = 6}},
      {"f32 cache, odd head_dim 7 in f16",
       {.heads = 4, .kv_heads = 2, .head_dim = 7, .capacity = 6, .input = DType::f16, .halves = true}},
  };
  for (const auto& [name, s] : cases) {
    KvCache cache = backend().kv_cache(s.cache());
    Model m(s);
    Rng rng(11, s.halves);
    decode(backend(), cache, m, rng, 3 * s.capacity + 5, name);
  }
}

// Capacity 1: each token sees only itself, so out is its own value row. Then a capacity
// equal to the tokens of one chunk.
TEST_P(KvCacheTest, SmallCapacities) {
  const Layout s{.heads = 4, .kv_heads = 2, .head_dim = 8, .capacity = 1};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(21, false);
  for (int i = 0; i < 5; ++i) {
    const Tokens t = next_tokens(m, {0}, rng);
    const Outputs got = run(backend(), cache, s, &t, &t);
    m.add(t);
    EXPECT_EQ(cache.slot_positions(0), Ids{i});
    EXPECT_EQ(cache.length(0), 1u);
    EXPECT_EQ(cache.next_position(0), i + 1);
    std::vector<float> want;  // head h reads kv head h / 2
    for (std::size_t h = 0; h < 4; ++h) want.insert(want.end(), &t.v[(h / 2) * 8], &t.v[(h / 2 + 1) * 8]);
    EXPECT_TRUE(all_close(got.out, want, {1, 4, 8}, 1e-6, 0)) << i;
    EXPECT_TRUE(all_close(got.probs, {1, 1, 1, 1}, {1, 4, 1}, 1e-6, 0)) << i;
  }
  // Two new ring tokens in one call: an error without keep_last, the last one with it.
  const Tokens two = next_tokens(m, {0, 0}, rng);
  expect_invalid([&] { run(backend(), cache, s, &two, nullptr); }, {"2 new ring tokens", "at most capacity - n_sinks = 1"});
  EXPECT_EQ(cache.slot_positions(0), Ids{4});
  step(backend(), cache, m, two, pick(two, s, {1}), "keep_last", {.keep_last = true});
  EXPECT_EQ(cache.slot_positions(0), Ids{6});

  // Capacity 6 filled by one prefill chunk, attended causally; one more token takes slot 0.
  const Layout s6{.heads = 2, .kv_heads = 2, .head_dim = 16, .capacity = 6};
  KvCache six = backend().kv_cache(s6.cache());
  Model m6(s6);
  const Tokens chunk = next_tokens(m6, {0, 0, 0, 0, 0, 0}, rng);
  step(backend(), six, m6, chunk, chunk, "chunk of 6");
  EXPECT_EQ(six.slot_positions(0), (Ids{0, 1, 2, 3, 4, 5}));
  decode(backend(), six, m6, rng, 1, "after the chunk");
  EXPECT_EQ(six.slot_positions(0), (Ids{6, 1, 2, 3, 4, 5}));
  EXPECT_EQ(six.next_position(0), 7);
}

// Sinks stay for ever; the ring behind them wraps. Slot rule and slot_positions against
// values worked out by hand.
TEST_P(KvCacheTest, Sinks) {
  for (std::size_t sinks : {2u, 4u}) {
    const Layout s{.heads = 2,
                   .kv_heads = 1,
                   .head_dim = 16,
                   .capacity = 8,
                   .sinks = sinks,
                   .dtype = DType::f16,
                   .input = DType::f16,
                   .halves = true};
    KvCache cache = backend().kv_cache(s.cache());
    Model m(s);
    Rng rng(41, true);
    decode(backend(), cache, m, rng, 11, "sinks " + std::to_string(sinks));
    // Positions 0..10: sinks 2 keep 0, 1 and the ring 5..10; sinks 4 keep 0..3 and 7..10.
    EXPECT_EQ(cache.slot_positions(0), (sinks == 2 ? Ids{0, 1, 8, 9, 10, 5, 6, 7} : Ids{0, 1, 2, 3, 8, 9, 10, 7}));
    decode(backend(), cache, m, rng, 9, "sinks " + std::to_string(sinks));
    EXPECT_EQ(cache.slot_positions(0), (sinks == 2 ? Ids{0, 1, 14, 15, 16, 17, 18, 19} : Ids{0, 1, 2, 3, 16, 17, 18, 19}));
    EXPECT_EQ(cache.length(0), 8u);
    EXPECT_EQ(cache.next_position(0), 20);
    EXPECT_EQ(cache.slot(1), 1u);
    EXPECT_EQ(cache.slot(8), sinks == 2 ? 2u : 4u);
    EXPECT_EQ(cache.slot(9), sinks == 2 ? 3u : 5u);
    EXPECT_EQ(cache.slot(INT32_MAX), 7u);  // 2 + (2^31 - 3) % 6 = 2 + 5; 4 + (2^31 - 5) % 4 = 4 + 3
  }
}

// Three sequences in every call, tokens interleaved, different lengths; one dispatch each.
TEST_P(KvCacheTest, MixedSequences) {
  const Layout s{.seqs = 3, .heads = 2, .kv_heads = 1, .head_dim = 8, .capacity = 4, .sinks = 1};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(51, false);
  const Tokens first = next_tokens(m, {0, 1, 0, 2, 0, 2}, rng);
  step(backend(), cache, m, first, first, "first call");
  EXPECT_EQ(cache.slot_positions(0), (Ids{0, 1, 2, -1}));
  EXPECT_EQ(cache.slot_positions(1), (Ids{0, -1, -1, -1}));
  EXPECT_EQ(cache.slot_positions(2), (Ids{0, 1, -1, -1}));
  // Sequence 0 wraps (positions 3, 4; 4 overwrites 1), so its position 3 is not asked:
  // it would need position 1.
  const Tokens second = next_tokens(m, {2, 0, 0, 1}, rng);
  step(backend(), cache, m, second, pick(second, s, {0, 2, 3}), "second call");
  EXPECT_EQ(cache.slot_positions(0), (Ids{0, 4, 2, 3}));
  EXPECT_EQ(cache.next_position(0), 5);
  EXPECT_EQ(cache.length(1), 2u);
  for (int round = 0; round < 4; ++round) {
    const Tokens t = next_tokens(m, round % 2 == 0 ? Ids{1, 2, 0} : Ids{0, 2}, rng);
    step(backend(), cache, m, t, t, "round " + std::to_string(round));
  }
  EXPECT_EQ(cache.slot_positions(0), (Ids{0, 7, 8, 6}));
  EXPECT_EQ(cache.slot_positions(1), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(cache.slot_positions(2), (Ids{0, 4, 5, 6}));
  EXPECT_EQ((Ids{cache.next_position(0), cache.next_position(1), cache.next_position(2)}), (Ids{9, 4, 7}));
  EXPECT_EQ(cache.length(0) + cache.length(1) + cache.length(2), 12u);
}

// Prefill chunks (every token a query, causal), then decode past the capacity, then a chunk
// after the wrap, which needs a window: chunks of at most capacity - n_sinks - window + 1.
TEST_P(KvCacheTest, PrefillThenDecode) {
  Layout s{.heads = 4,
           .kv_heads = 2,
           .head_dim = 32,
           .capacity = 16,
           .sinks = 2,
           .dtype = DType::f16,
           .input = DType::f16,
           .halves = true};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(61, true);
  const Tokens a = next_tokens(m, Ids(10, 0), rng);
  step(backend(), cache, m, a, a, "prefill 10");
  const Tokens b = next_tokens(m, Ids(4, 0), rng);
  step(backend(), cache, m, b, b, "prefill 4 more");
  decode(backend(), cache, m, rng, 25, "decode");
  s.attn.window = 12u;
  m.s = s;
  const Tokens c = next_tokens(m, Ids(3, 0), rng);
  const Outputs got = run(backend(), cache, s, &c, &c);
  m.add(c);
  expect_near(got, reference(m, c), s, 3, s.tol(), "chunk of 3 with window 12");
}

// keep_last: 2 x capacity tokens in one call keep the sinks and the last ring tokens;
// without it the call throws and the cache is unchanged.
TEST_P(KvCacheTest, KeepLast) {
  const Layout s{.seqs = 2, .heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 8, .sinks = 2};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(71, false);
  const Tokens all = next_tokens(m, Ids(16, 0), rng);
  expect_invalid([&] { run(backend(), cache, s, &all, nullptr); },
                 {"positions (sequence 0)", "14 new ring tokens", "capacity - n_sinks = 6", "keep_last"});
  EXPECT_EQ(cache.slot_positions(0), Ids(8, -1));
  EXPECT_EQ(cache.next_position(0), 0);
  step(backend(), cache, m, all, pick(all, s, {15}), "keep_last 16", {.keep_last = true});
  EXPECT_EQ(cache.slot_positions(0), (Ids{0, 1, 14, 15, 10, 11, 12, 13}));
  EXPECT_EQ(cache.next_position(0), 16);

  // Two sequences in one call: sequence 1 (12 tokens) keeps its last, sequence 0 (3) all.
  const Tokens mixed = next_tokens(m, {1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1}, rng);
  const Ids before = cache.slot_positions(0);
  expect_invalid([&] { run(backend(), cache, s, &mixed, nullptr); }, {"positions (sequence 1)", "10 new ring tokens"});
  EXPECT_EQ(cache.slot_positions(0), before);
  EXPECT_EQ(cache.slot_positions(1), Ids(8, -1));
  step(backend(), cache, m, mixed, pick(mixed, s, {14, 11}), "keep_last, two sequences", {.keep_last = true});
  EXPECT_EQ(cache.slot_positions(1), (Ids{0, 1, 8, 9, 10, 11, 6, 7}));
  EXPECT_EQ(cache.slot_positions(0), (Ids{0, 1, 14, 15, 16, 17, 18, 13}));

  // 9,000 tokens in one call (past 65,535 workgroups of 64 invocations): 64 stay.
  const Layout big{.heads = 8, .kv_heads = 8, .head_dim = 128, .capacity = 64, .sinks = 3};
  KvCache huge = backend().kv_cache(big.cache());
  Model mh(big);
  const Tokens many = next_tokens(mh, Ids(9000, 0), rng);
  step(backend(), huge, mh, many, pick(many, big, {8999}), "keep_last 9000", {.keep_last = true});
}

// A chunk whose first tokens need keys that the chunk itself overwrote: attention throws
// (nothing recorded); a window that only needs held keys works.
TEST_P(KvCacheTest, OverwrittenKeysThrow) {
  Layout s{.heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 8};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(81, false);
  decode(backend(), cache, m, rng, 4, "first 4");
  const Tokens chunk = next_tokens(m, Ids(8, 0), rng);  // positions 4..11; the ring holds 4..11
  run(backend(), cache, s, &chunk, nullptr);
  m.add(chunk);
  const Tokens first = pick(chunk, s, {0});
  CommandList cmd = backend().commands();
  Tensor q = backend().tensor({1, 2, 16}, DType::f32), scores = backend().tensor({1, 2, 8}, DType::f32);
  expect_invalid([&] { cmd.attn_scores(q, cache, scores, {.q_positions = first.pos}); },
                 {"tokens.q_positions[0]", "= 4", "needs position 0, overwritten", "holds 4 onwards"});
  EXPECT_EQ(cmd.stats().ops, 0u);
  s.attn.window = 1u;  // position 4 then needs only itself
  m.s = s;
  expect_near(run(backend(), cache, s, nullptr, &first), reference(m, first), s, 1, s.tol(), "window 1");

  // Positions 4..9 after 0..3 in a cache of 8: the ring lost 0 and 1. Token 4 needs them
  // without a window; window 3 keeps every token of the chunk within what is held.
  s.attn.window.reset();
  KvCache other = backend().kv_cache(s.cache());
  Model m2(s);
  Rng rng2(82, false);
  decode(backend(), other, m2, rng2, 4, "first 4");
  const Tokens six = next_tokens(m2, Ids(6, 0), rng2);
  run(backend(), other, s, &six, nullptr);
  m2.add(six);
  expect_invalid([&] { run(backend(), other, s, nullptr, &six); }, {"needs position 0", "overwritten"});
  expect_invalid([&] { run(backend(), other, s, nullptr, &six); }, {"capacity - n_sinks - window + 1"});
  s.attn.window = 3u;
  m2.s = s;
  expect_near(run(backend(), other, s, nullptr, &six), reference(m2, six), s, 6, s.tol(), "window 3");

  // With sinks, after the ring wrapped: a query at a sink's position sees only sinks (all
  // held), so it runs, window or not; the first ring position needs the overwritten ones.
  Layout w{.heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 8, .sinks = 3};
  KvCache wrapped = backend().kv_cache(w.cache());
  Model mw(w);
  Rng rng3(83, false);
  decode(backend(), wrapped, mw, rng3, 12, "0..11: the ring holds 7..11");
  const auto query_at = [&](std::int32_t p) {
    Tokens t;
    t.seq = {0};
    t.pos = {p};
    t.q = rng3.draw(w.heads * w.head_dim);
    return t;
  };
  for (const std::int32_t p : {0, 2}) {
    const Tokens at_sink = query_at(p);
    expect_near(run(backend(), wrapped, w, nullptr, &at_sink), reference(mw, at_sink), w, 1, w.tol(), "at a sink");
  }
  const Tokens at_ring = query_at(3);
  expect_invalid([&] { run(backend(), wrapped, w, nullptr, &at_ring); }, {"q_positions[0]", "= 3", "needs position 3"});
}

// Speculative decoding: 5 drafted tokens, 2 rejected; the cache then equals one that never
// saw them. Truncating past what the ring overwrote throws and changes nothing.
TEST_P(KvCacheTest, Truncate) {
  const Layout s{
      .heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 8, .dtype = DType::f16, .input = DType::f16, .halves = true};
  KvCache a = backend().kv_cache(s.cache()), b = backend().kv_cache(s.cache());
  Model ma(s), mb(s);
  Rng rng(91, true);
  const Tokens base = next_tokens(ma, {0, 0, 0}, rng);
  step(backend(), a, ma, base, base, "base");
  step(backend(), b, mb, base, base, "base");
  const Tokens draft = next_tokens(ma, Ids(5, 0), rng);  // positions 3..7
  step(backend(), a, ma, draft, draft, "draft");
  a.truncate(0, 6);
  ma.truncate(0, 6);
  EXPECT_EQ(a.slot_positions(0), (Ids{0, 1, 2, 3, 4, 5, -1, -1}));
  EXPECT_EQ(a.next_position(0), 6);
  EXPECT_EQ(a.length(0), 6u);
  const Tokens accepted = pick(draft, s, {0, 1, 2});  // b sees only 3..5
  step(backend(), b, mb, accepted, accepted, "accepted");
  for (int i = 0; i < 10; ++i) {  // positions 6..15: wraps
    const Tokens t = next_tokens(ma, {0}, rng);
    const Outputs got_a = run(backend(), a, s, &t, &t), got_b = run(backend(), b, s, &t, &t);
    ma.add(t);
    EXPECT_EQ(got_a.out, got_b.out) << "position " << t.pos[0];
    EXPECT_EQ(got_a.probs, got_b.probs) << "position " << t.pos[0];
    expect_near(got_a, reference(ma, t), s, 1, s.tol(), "after truncate");
    EXPECT_EQ(a.slot_positions(0), b.slot_positions(0));
  }
  // Next is 16, the ring holds 8..15: truncating to 15 would need position 7 again.
  const Ids held = a.slot_positions(0);
  expect_invalid([&] { a.truncate(0, 15); }, {"truncate", "position = 15", "positions 7 to 7 have been overwritten"});
  expect_invalid([&] { a.truncate(0, 9); }, {"positions 1 to 7 have been overwritten"});
  EXPECT_EQ(a.slot_positions(0), held);
  EXPECT_EQ(a.next_position(0), 16);
  a.truncate(0, 16);  // a no-op
  EXPECT_EQ(a.slot_positions(0), held);

  // With sinks, truncating back to the sinks is always possible (they are never overwritten).
  const Layout s2{.heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 6, .sinks = 2};
  KvCache c = backend().kv_cache(s2.cache());
  Model mc(s2);
  Rng rng2(92, false);
  decode(backend(), c, mc, rng2, 7, "sinks");  // holds 0, 1, 3..6
  expect_invalid([&] { c.truncate(0, 3); }, {"positions 2 to 2 have been overwritten"});
  EXPECT_EQ(c.slot_positions(0), (Ids{0, 1, 6, 3, 4, 5}));
  c.truncate(0, 2);
  mc.truncate(0, 2);
  EXPECT_EQ(c.slot_positions(0), (Ids{0, 1, -1, -1, -1, -1}));
  EXPECT_EQ(c.next_position(0), 2);
  decode(backend(), c, mc, rng2, 6, "after truncating to the sinks");
}

// reset empties one sequence only; kv_copy_sequence shares a prefix (recorded in the same
// list as the next append), after which both sequences decode on their own and the copy
// behaves like a fresh cache fed the same history.
TEST_P(KvCacheTest, ResetAndCopySequence) {
  for (DType dtype : {DType::f32, DType::f16}) {
    SCOPED_TRACE(to_string(dtype));
    const Layout s{.seqs = 3,
                   .heads = 4,
                   .kv_heads = 2,
                   .head_dim = 16,
                   .capacity = 6,
                   .sinks = 1,
                   .dtype = dtype,
                   .input = dtype,
                   .halves = true};
    Layout one = s;
    one.seqs = 1;
    KvCache cache = backend().kv_cache(s.cache()), fresh = backend().kv_cache(one.cache());
    Model m(s), mf(one);
    Rng rng(101, true);
    const Tokens start = next_tokens(m, {1, 2, 1, 2, 1}, rng);
    step(backend(), cache, m, start, start, "sequences 1 and 2");
    for (int i = 0; i < 8; ++i) {  // sequence 0 wraps; the fresh cache sees the same tokens
      const Tokens t = next_tokens(m, {0}, rng);
      step(backend(), cache, m, t, t, "sequence 0");
      step(backend(), fresh, mf, t, t, "fresh");
    }
    m.k[1] = m.k[0];
    m.v[1] = m.v[0];
    const std::function<void(CommandList&)> copy = [&](CommandList& cmd) { cmd.kv_copy_sequence(cache, 0, 1); };
    for (int i = 0; i < 6; ++i) {
      const Tokens t = next_tokens(m, {1, 0}, rng);  // different tokens for the copy and the original
      const Outputs got = step(backend(), cache, m, t, t, "after copy " + std::to_string(i), {},
                               i == 0 ? copy : std::function<void(CommandList&)>{});
      Tokens t1 = pick(t, s, {0});
      t1.seq = {0};
      const Outputs want = step(backend(), fresh, mf, t1, t1, "fresh");
      const std::vector<float> copy_out(got.out.begin(), got.out.begin() + 64);  // token 0: sequence 1
      EXPECT_TRUE(all_close(copy_out, want.out, {1, 4, 16}, 1e-6, 1e-6)) << i;
      EXPECT_EQ(cache.slot_positions(1), cache.slot_positions(0));
      EXPECT_EQ(cache.slot_positions(1), fresh.slot_positions(0));
    }
    const Ids seq0 = cache.slot_positions(0), seq2 = cache.slot_positions(2);
    cache.reset(1);
    m.k[1].clear();
    m.v[1].clear();
    EXPECT_EQ(cache.slot_positions(1), Ids(6, -1));
    EXPECT_EQ(cache.next_position(1), 0);
    EXPECT_EQ(cache.length(1), 0u);
    EXPECT_EQ(cache.slot_positions(0), seq0);
    EXPECT_EQ(cache.slot_positions(2), seq2);
    EXPECT_EQ(cache.next_position(0), 14);
    EXPECT_EQ(cache.next_position(2), 2);
    for (int i = 0; i < 8; ++i) {
      const Tokens t = next_tokens(m, {2, 1}, rng);
      step(backend(), cache, m, t, t, "after reset " + std::to_string(i));
    }
  }
}

// Twelve decode steps recorded into one list and submitted once: each attention uses the
// bookkeeping of its recording and reads the ring before later appends overwrite it.
TEST_P(KvCacheTest, ManyStepsInOneList) {
  const Layout s{.heads = 2, .kv_heads = 1, .head_dim = 16, .capacity = 4, .sinks = 1};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s), upto(s);
  Rng rng(151, false);
  CommandList cmd = backend().commands();
  auto f32 = [&](Shape shape) { return backend().tensor(shape, DType::f32); };
  struct Step {
    Tokens t;
    Tensor q, k, v, scores, probs, out;
  };
  std::vector<Step> steps;
  for (int i = 0; i < 12; ++i) {
    Step& st = steps.emplace_back(Step{next_tokens(m, {0}, rng), f32({1, 2, 16}), f32({1, 1, 16}), f32({1, 1, 16}),
                                       f32({1, 2, 4}), f32({1, 2, 4}), f32({1, 2, 16})});
    m.add(st.t);
    backend().upload(st.q, st.t.q);
    backend().upload(st.k, st.t.k);
    backend().upload(st.v, st.t.v);
    cmd.kv_append(cache, st.k, st.v, st.t.pos);
    cmd.attn_scores(st.q, cache, st.scores, {.q_positions = st.t.pos});
    cmd.attn_softmax(st.scores, st.probs);
    cmd.attn_weighted_sum(st.probs, cache, st.out);
  }
  cmd.submit_and_wait();
  for (const Step& st : steps) {  // against the history as it stood at each step
    upto.add(st.t);
    const Outputs got{backend().download(st.scores), backend().download(st.probs), backend().download(st.out)};
    expect_near(got, reference(upto, st.t), s, 1, s.tol(), "position " + std::to_string(st.t.pos[0]));
  }
}

// Slots emptied by truncate keep their old contents (here NaN keys and infinite values,
// next to live slots): nothing of them may reach scores, probs or out. A query of a
// sequence that holds nothing sees nothing: scores -inf, probs and out 0.
TEST_P(KvCacheTest, StaleSlotsAndEmptySequences) {
  const Layout s{.seqs = 2, .heads = 2, .kv_heads = 1, .head_dim = 8, .capacity = 8};
  KvCache cache = backend().kv_cache(s.cache());
  Model m(s);
  Rng rng(141, false);
  decode(backend(), cache, m, rng, 2, "start");
  Tokens bad = next_tokens(m, {0, 0, 0}, rng);  // positions 2..4, rejected below
  std::fill(bad.k.begin(), bad.k.end(), std::nanf(""));
  std::fill(bad.v.begin(), bad.v.end(), kInf);
  run(backend(), cache, s, &bad, nullptr);
  cache.truncate(0, 2);
  decode(backend(), cache, m, rng, 4, "after truncate");  // rewrites slots 2..5 one at a time
  const Tokens none = next_tokens(m, {1}, rng);
  const Outputs got = run(backend(), cache, s, nullptr, &none);
  EXPECT_TRUE(all_close(got.scores, std::vector<float>(16, -kInf), {1, 2, 8}, 0, 0));
  EXPECT_TRUE(all_close(got.probs, std::vector<float>(16, 0.0f), {1, 2, 8}, 0, 0));
  EXPECT_TRUE(all_close(got.out, std::vector<float>(16, 0.0f), {1, 2, 8}, 0, 0));
}

// A list's appends and forks are planned when recorded (rows, a paged cache's blocks,
// slot-table words); a reset, truncate or restore_cache of a sequence they write leaves them
// stale, and submitting the list is refused, naming the sequence, until it is replayed
// (set_tokens) or recorded again. A change to another sequence leaves it valid. (A stale
// append into a paged cache once wrote a block another sequence had taken since.)
TEST_P(KvCacheTest, ListsPlannedBeforeAChangeAreRefused) {
  const Layout s{.seqs = 2, .heads = 2, .kv_heads = 1, .head_dim = 8, .capacity = 8};
  KvCache cache = backend().kv_cache(s.cache());
  Tensor k = backend().tensor({1, 1, 8}, DType::f32), v = backend().tensor({1, 1, 8}, DType::f32);
  backend().upload(k, std::vector<float>(8, 1.0f));
  backend().upload(v, std::vector<float>(8, 2.0f));
  const auto stale = {"sequence 1", "recorded before that sequence's reset, truncate or restore_cache"};
  CommandList cmd = backend().commands();
  cmd.kv_append(cache, k, v, Ids{0}, Ids{1});
  cmd.submit_and_wait();
  cache.reset(0);  // another sequence
  cmd.submit_and_wait();
  cache.reset(1);
  expect_invalid([&] { cmd.submit_and_wait(); }, {"submit_and_wait", "sequence 1"});
  expect_invalid([&] { cmd.submit(); }, stale);
  EXPECT_EQ(cache.next_position(1), 0);
  cmd.set_tokens(Ids{0}, Ids{1});  // planned again
  cmd.submit_and_wait();
  EXPECT_EQ(cache.slot_positions(1)[0], 0);
  cache.truncate(1, 0);
  expect_invalid([&] { cmd.submit_and_wait(); }, stale);
  cmd.set_tokens(Ids{0}, Ids{1});
  cmd.submit_and_wait();
  // A fork reads its source as planned: the source is not reset (nor truncated) before the
  // fork runs (0.14.2: the fork was left stale, and dropping it marked its destination
  // until reset). Its destination's planned positions were never copied: save_cache
  // refuses them.
  {
    CommandList fork = backend().commands();
    fork.kv_copy_sequence(cache, 1, 0);
    expect_invalid([&] { cache.reset(1); }, {"reset", "seq = 1", "reads it"});
    expect_invalid([&] { cache.truncate(1, 0); }, {"truncate", "seq = 1"});
    expect_invalid([&] { (void)backend().save_cache(cache); }, {"save_cache", "sequence 0", "has not run"});
  }
  EXPECT_EQ(cache.next_position(0), 0) << "the dropped fork was put back";
  cache.reset(1);
  // restore_cache changes every sequence; a list recorded after it is valid.
  const std::vector<std::uint8_t> bytes = backend().save_cache(cache);
  CommandList append = backend().commands();
  append.kv_append(cache, k, v, Ids{cache.next_position(0)}, Ids{0});
  backend().restore_cache(cache, bytes);
  expect_invalid([&] { append.submit_and_wait(); }, {"sequence 0"});
  CommandList after = backend().commands();
  after.kv_append(cache, k, v, Ids{cache.next_position(0)}, Ids{0});
  after.submit_and_wait();
}

INSTANTIATE_TEST_SUITE_P(Backends, KvCacheTest,
                         ::testing::Values(CacheKind{BackendKind::cpu, 0}, CacheKind{BackendKind::vulkan, 0}), cache_kind_name);
INSTANTIATE_TEST_SUITE_P(Paged, KvCacheTest, ::testing::Values(CacheKind{BackendKind::cpu, 4}, CacheKind{BackendKind::vulkan, 4}),
                         cache_kind_name);

}  // namespace
}  // namespace vkattn::test
