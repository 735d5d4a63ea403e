// A paged KV cache against a ring cache of the same slots, on one backend, fed the same
// appends, forks, truncates and resets: a paged cache keeps the ring's rules and differs
// only in where rows live, so attention over the two must agree (the ring is tested
// against the model of its history in test_kv_cache.cpp). On every kernel family, every
// dtype, GQA, MLA's own V width and latent caches, KvRope::on_read, sinks and windows, and
// at the spec minimums. Replays (set_tokens) through growing tables, forks and running out
// of blocks: test_kv_cache_paged.cpp.
#include <gtest/gtest.h>

#include <random>

#include "support/fused_match.hpp"
#include "support/kv_model.hpp"

namespace vkattn::test {
namespace {

// Two caches of |c|'s slots fed the same ops: a paged cache (blocks of |block_size| in a
// pool of |n_blocks|) on |b|, and on |ref_b| a ring cache (|ring_ref|) or a paged cache.
struct Twin {
  struct Side {
    Backend& b;
    KvCache cache;
  };
  KvCacheConfig config;
  std::size_t heads;
  Side paged, ref;
  std::mt19937 gen{5};
  std::normal_distribution<float> dist{0.0f, 1.0f};

  Twin(Backend& b, Backend& ref_b, bool ring_ref, const KvCacheConfig& c, std::size_t n_heads, std::size_t block_size,
       std::size_t n_blocks)
      : config(c), heads(n_heads), paged{b, b.kv_cache(paged_config(c, block_size, n_blocks))},
        ref{ref_b, ref_b.kv_cache(ring_ref ? c : paged_config(c, block_size, n_blocks))} {}
  static KvCacheConfig paged_config(KvCacheConfig c, std::size_t block_size, std::size_t n_blocks) {
    c.paged = true;
    c.block_size = block_size;
    c.n_blocks = n_blocks;
    return c;
  }
  std::size_t v_dim() const { return config.v_head_dim ? config.v_head_dim : config.head_dim; }
  std::vector<float> random(std::size_t n) {
    std::vector<float> x(n);
    for (float& e : x) e = dist(gen);
    return x;
  }
  static Tensor tensor(Backend& b, const Shape& shape, const std::vector<float>& x) {
    Tensor t = b.tensor(shape, DType::f32);
    b.upload(t, x);
    return t;
  }
  // One token per entry of |seqs|, continuing each sequence, in one kv_append per cache.
  void append(const Ids& seqs) {
    Ids pos;
    std::vector<std::int32_t> next(config.n_seqs);
    for (std::size_t s = 0; s < config.n_seqs; ++s) next[s] = ref.cache.next_position(s);
    for (std::int32_t s : seqs) pos.push_back(next[static_cast<std::size_t>(s)]++);
    const Shape ks{seqs.size(), config.n_kv_heads, config.head_dim}, vs{seqs.size(), config.n_kv_heads, v_dim()};
    const std::vector<float> k = random(ks[0] * ks[1] * ks[2]), v = random(vs[0] * vs[1] * vs[2]);
    for (Side* side : {&paged, &ref}) {
      CommandList cmd = side->b.commands();
      const Tensor tk = tensor(side->b, ks, k);
      if (config.latent) {
        cmd.kv_append(side->cache, tk, pos, seqs);
      } else {
        cmd.kv_append(side->cache, tk, tensor(side->b, vs, v), pos, seqs);
      }
      cmd.submit_and_wait();
    }
  }
  void append_run(std::int32_t seq, std::size_t n) { append(Ids(n, seq)); }
  void fork(std::size_t src, std::size_t dst) {
    for (Side* side : {&paged, &ref}) {
      CommandList cmd = side->b.commands();
      cmd.kv_copy_sequence(side->cache, src, dst);
      cmd.submit_and_wait();
    }
  }
  void truncate(std::size_t seq, std::int32_t p) {
    paged.cache.truncate(seq, p);
    ref.cache.truncate(seq, p);
  }
  void reset(std::size_t seq) {
    paged.cache.reset(seq);
    ref.cache.reset(seq);
  }
  // Attention of queries (seq, position) over both caches through |attn.path|, and the
  // three public stages: out and probabilities agree within |tol| (0 where the same
  // kernels read the same values).
  void expect_same(const Ids& seqs, const Ids& pos, const AttentionConfig& attn, double tol, const std::string& what) {
    for (std::int32_t s : seqs) {
      ASSERT_EQ(paged.cache.slot_positions(static_cast<std::size_t>(s)), ref.cache.slot_positions(static_cast<std::size_t>(s)))
          << what;
    }
    const std::size_t n = seqs.size();
    const std::vector<float> q = random(n * heads * config.head_dim);
    const AttentionTokens tokens{.q_positions = pos, .q_seq_ids = seqs};
    std::vector<float> out[2], probs[2];
    for (int i = 0; i < 2; ++i) {
      Side& side = i ? ref : paged;
      Backend& b = side.b;
      Tensor o = b.tensor({n, heads, v_dim()}, DType::f32), o3 = b.tensor({n, heads, v_dim()}, DType::f32);
      Tensor sc = b.tensor({n, heads, config.capacity}, DType::f32);
      const Tensor tq = tensor(b, {n, heads, config.head_dim}, q);
      CommandList cmd = b.commands();
      cmd.attention(tq, side.cache, o, tokens, attn);
      AttentionConfig softmax = attn;
      softmax.precision = AttentionPrecision::f32;  // the stages take f32 only
      AttentionConfig scores = softmax;
      scores.sinks.clear();  // the softmax's
      cmd.attn_scores(tq, side.cache, sc, tokens, scores);
      cmd.attn_softmax(sc, sc, softmax);
      cmd.attn_weighted_sum(sc, side.cache, o3, tokens);
      cmd.submit_and_wait();
      out[i] = b.download(o);
      probs[i] = b.download(sc);
      const std::vector<float> three = b.download(o3);
      out[i].insert(out[i].end(), three.begin(), three.end());
    }
    EXPECT_TRUE(all_close(out[0], out[1], {2, n, heads, v_dim()}, tol, tol)) << what << ": out (attention, then the stages)";
    EXPECT_TRUE(all_close(probs[0], probs[1], {n, heads, config.capacity}, tol, 0)) << what << ": probs";
  }
};

// A script of ops over 3 sequences: a prefill, forks of it, decode steps on all three (the
// first write of each shared block copies it), a truncate into shared blocks, a ring that
// wraps (past capacity - n_sinks) and a reset; attention compared after each stage, by
// decode queries (one row per sequence) and prefill chunks (several rows of one).
void run_script(Twin& t, const AttentionConfig& attn, double tol, const std::string& name) {
  const std::int32_t cap = static_cast<std::int32_t>(t.config.capacity);
  auto decode_queries = [&](const std::string& what) {
    Ids seqs, pos;
    for (std::int32_t s = 0; s < 3; ++s) {
      if (t.ref.cache.next_position(static_cast<std::size_t>(s)) == 0) continue;
      seqs.push_back(s);
      pos.push_back(t.ref.cache.next_position(static_cast<std::size_t>(s)) - 1);
    }
    t.expect_same(seqs, pos, attn, tol, name + ", " + what + ", decode");
  };
  auto prefill_queries = [&](std::int32_t seq, std::int32_t rows, const std::string& what) {
    const std::int32_t next = t.ref.cache.next_position(static_cast<std::size_t>(seq));
    Ids seqs(static_cast<std::size_t>(rows), seq), pos;
    for (std::int32_t r = 0; r < rows; ++r) pos.push_back(next - rows + r);
    t.expect_same(seqs, pos, attn, tol, name + ", " + what + ", prefill");
  };
  t.append_run(0, static_cast<std::size_t>(cap / 3));
  t.append_run(0, static_cast<std::size_t>(cap / 4));
  prefill_queries(0, 6, "prefill");
  t.fork(0, 1);
  t.fork(0, 2);
  for (int i = 0; i < 5; ++i) t.append({0, 1, 2});
  decode_queries("after forks");
  t.truncate(1, cap / 4);
  t.append({1, 1, 2, 1});
  decode_queries("after truncate");
  t.append_run(2, static_cast<std::size_t>(cap - 4));  // sequence 2's ring wraps
  prefill_queries(2, 5, "wrapped");
  t.reset(0);
  t.append({0, 0, 0, 2});
  decode_queries("after reset");
  const KvCache& p = t.paged.cache;
  EXPECT_EQ(p.block_refs()[static_cast<std::size_t>(p.block_table(1)[0])], 1)
      << name << ": sequence 1's first block, shared until now";
}

// Vulkan against the CPU backend, within the tolerances of the attention tests (a score
// off by d moves out by about 2 d max|v|).
constexpr double kVulkanTol = 2e-4;

// Every kernel family (fused_match.hpp's, the group kernel and the matrix kernel's
// stand-in), each forced on a device planned with many compute units, against the CPU
// backend: f16 caches with GQA 4, 2 sinks, a window, blocks of 8.
TEST(PagedKvCacheTwin, EveryKernelFamily) {
  const KernelFamily families[] = {{"decode", KernelShape::gpu, AttentionPath::fused, ""},
                                   {"decode, two-pass", KernelShape::gpu, AttentionPath::fused, "merge=two_pass"},
                                   {"decode, group", KernelShape::gpu, AttentionPath::fused, "kernel=group"},
                                   {"tiled", KernelShape::gpu, AttentionPath::fused, "", "kernel=tiled"},
                                   {"lane per key", KernelShape::cpu, AttentionPath::fused, ""},
                                   {"three stages", KernelShape::cpu, AttentionPath::three_stages, ""}};
  const KvCacheConfig c{.n_seqs = 3, .n_kv_heads = 2, .head_dim = 64, .capacity = 48, .dtype = DType::f16, .n_sinks = 2};
  auto cpu = make_backend(BackendKind::cpu);
  for (const KernelFamily& f : families) {
    std::shared_ptr<Backend> gpu;
    try {
      gpu = family_backend(f);
    } catch (const Error& e) {
      if (vulkan_required() || e.code() != ErrorCode::no_device) throw;
      GTEST_SKIP() << e.what();
    }
    Twin t(*gpu, *cpu, false, c, 8, 8, 3 * 48 / 8);
    run_script(t, {.window = 40u, .path = f.path}, kVulkanTol, f.name);
    expect_no_validation_messages(*gpu);
  }
  // The matrix kernel (attn_mt.comp) through its stand-in (DeviceOptions::matrix_units)
  // with f16 products, against the CPU backend's rounded inputs; the pipelines built (the
  // info log) show it ran.
  DeviceOptions options = test_options();
  options.matrix_units = MatrixUnits::standin;
  options.submit_timeout_ms = 600000;  // lavapipe compiles the stand-in inside the submission
  options.cap_limits = uncapped();
  auto built = std::make_shared<std::string>();
  options.log_level = LogLevel::info;
  options.log = [built](LogLevel, std::string_view m) { built->append(m).append("\n"); };
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  Twin t(*gpu, *cpu, false, c, 8, 8, 3 * 48 / 8);
  run_script(t, {.window = 40u, .path = AttentionPath::fused, .precision = AttentionPrecision::f16_products}, 2e-3,
             "matrix stand-in");
  // The stand-in needs subgroups of 8 lanes or more (on narrower ones the exact kernels ran).
  const bool standin_runs = kernel_lanes(*gpu) >= 8;
  EXPECT_EQ(built->find("built pipeline attn_mt_standin ") != std::string::npos, standin_runs) << "the matrix kernel ran";
  expect_no_validation_messages(*gpu);
}

struct TwinCase {
  const char* name;
  KvCacheConfig config;
  std::size_t heads, block_size;
  AttentionConfig attn{};
  bool fused = false;  // also through the lane-per-key fused kernel on Vulkan
};

// Each dtype, MLA's V of its own width, a latent cache, KvRope::on_read, attention sinks
// (gpt-oss) and ALiBi, windows of half the capacity: on the CPU backend against a ring
// cache (exactly: the same reference reads the same values), and on Vulkan against the CPU
// backend through the default kernels (some also the lane-per-key fused kernel), one at
// the spec minimums. Pipelines compile once per kernel and shape on lavapipe: the cases
// are few and small.
TEST(PagedKvCacheTwin, DtypesAndShapes) {
  const TwinCase cases[] = {
      {"f32, head_dim 24", {.n_seqs = 3, .n_kv_heads = 1, .head_dim = 24, .capacity = 32, .dtype = DType::f32}, 2, 4},
      {"f16, sinks, gpt-oss sinks",
       {.n_seqs = 3, .n_kv_heads = 2, .head_dim = 32, .capacity = 32, .n_sinks = 3},
       4,
       8,
       {.sinks = {0.5f, -1.0f, 2.0f, 0.0f}},
       true},
      {"q8_0, alibi",
       {.n_seqs = 3, .n_kv_heads = 2, .head_dim = 32, .capacity = 32, .dtype = DType::q8_0},
       4,
       4,
       {.alibi = true}},
      {"q4_0, one slot per block", {.n_seqs = 3, .n_kv_heads = 1, .head_dim = 64, .capacity = 24, .dtype = DType::q4_0}, 2, 1},
      // One f16 scale a block: blocks copied on write share scale words with others.
      {"q8_0, one scale per block", {.n_seqs = 3, .n_kv_heads = 1, .head_dim = 32, .capacity = 16, .dtype = DType::q8_0}, 2, 1},
      {"MLA, V 32 under K 64", {.n_seqs = 3, .n_kv_heads = 1, .head_dim = 64, .capacity = 32, .v_head_dim = 32}, 4, 8},
      {"latent, V the first 32 of K 64, q8_0",
       {.n_seqs = 3, .n_kv_heads = 1, .head_dim = 64, .capacity = 32, .dtype = DType::q8_0, .v_head_dim = 32, .latent = true},
       8,
       16,
       {},
       true},
      {"KvRope::on_read, sinks",
       {.n_seqs = 3, .n_kv_heads = 2, .head_dim = 32, .capacity = 32, .n_sinks = 2, .rope = KvRope::on_read},
       4,
       4},
  };
  auto cpu = make_backend(BackendKind::cpu);
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  DeviceOptions minimum = test_options();
  minimum.cap_limits = test_spec_minimum();
  auto at_minimum = try_backend(BackendKind::vulkan, minimum, why);
  VKATTN_REQUIRE_BACKEND(at_minimum, why);
  for (const TwinCase& c : cases) {
    AttentionConfig attn = c.attn;
    attn.window = static_cast<std::uint32_t>(c.config.capacity / 2);  // prefill rows of a wrapped ring need one
    const std::size_t n_blocks = 3 * c.config.capacity / c.block_size;
    {
      Twin t(*cpu, *cpu, true, c.config, c.heads, c.block_size, n_blocks);
      run_script(t, attn, 0, std::string("cpu, ") + c.name);
    }
    for (bool fused : {false, true}) {
      if (fused && !c.fused) continue;
      attn.path = fused ? AttentionPath::fused : AttentionPath::automatic;
      Twin t(*gpu, *cpu, false, c.config, c.heads, c.block_size, n_blocks);
      run_script(t, attn, kVulkanTol, std::string("vulkan, ") + c.name + (fused ? ", fused" : ""));
    }
  }
  Twin t(*at_minimum, *cpu, false, cases[1].config, cases[1].heads, cases[1].block_size, 12);
  run_script(t, {.window = 16u}, kVulkanTol, "vulkan at the spec minimums");
  for (Backend* b : {gpu.get(), at_minimum.get()}) expect_no_validation_messages(*b);
}

// Appends long enough that the plan looks its runs and copies up in tables rather than
// its lists (more than 32 of each): three sequences sharing a prefill of 100 tokens in
// blocks of 2, then one append of 64 tokens to each, interleaved (each run met again after
// the other sequences' tokens), whose rings wrap onto 18 shared blocks (36 copies, the
// last writer keeping each). CPU backend, paged against the ring.
TEST(PagedKvCacheTwin, LongAppendsPlanThroughTables) {
  auto cpu = make_backend(BackendKind::cpu);
  const KvCacheConfig config{.n_seqs = 3, .n_kv_heads = 1, .head_dim = 8, .capacity = 128, .dtype = DType::f32};
  Twin t(*cpu, *cpu, true, config, 2, 2, 3 * 64);
  t.append_run(0, 100);
  t.fork(0, 1);
  t.fork(0, 2);
  Ids batch;
  for (int i = 0; i < 64; ++i) batch.insert(batch.end(), {0, 1, 2});
  t.append(batch);
  const KvCache& p = t.paged.cache;
  EXPECT_EQ(p.free_blocks(), 3 * 64 - 50 - 3 * 14 - 2 * 18) << "the prefill, 3 x 14 new runs, 2 x 18 copies";
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t e = 0; e < 18; ++e) {
      EXPECT_EQ(p.block_refs()[static_cast<std::size_t>(p.block_table(s)[e])], 1) << "sequence " << s << ", run " << e;
    }
  }
  // The prefill took blocks 0, 1, ... for its runs; sequence 2, the last writer of each
  // shared one, keeps it rather than copying it too.
  for (std::size_t e = 0; e < 18; ++e) EXPECT_EQ(p.block_table(2)[e], static_cast<std::int32_t>(e)) << "run " << e;
  t.expect_same({0, 1, 2}, {163, 163, 163}, {}, 0, "decode after the long append");
  t.expect_same({1, 1, 1, 1}, {160, 161, 162, 163}, {.window = 64u}, 0, "prefill rows after the long append");
}

}  // namespace
}  // namespace vkattn::test
