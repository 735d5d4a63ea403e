// Fused attention (CommandList::attention), Vulkan against the CPU reference: every case of
// the three-stage tests (also at the Vulkan spec minimums, where the block maxima take the
// shared-memory path, and through storage buffers), the split-keys path and its merge, KV
// caches (mixed sequences, and KvRope::on_read, rotated as read), the path choice, and the
// CPU backend's attention against its own three stages. test_kv_cache_rope.cpp checks the
// fused kernel's rotate-on-read against a full-history reference too.
#include <gtest/gtest.h>

#include <cstdlib>

#include <cmath>
#include <map>
#include <string>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/fused_match.hpp"
#include "support/kv_model.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

// The tests below ask for the fused kernel (in.config.path), which a CPU device would not
// take by itself.
std::vector<float> run_fused(Backend& b, const AttnInputs& in, CommandStats* stats = nullptr) {
  return run_attention_op(b, in, stats);
}

class FusedVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<AttnCase> {};

void expect_matches(Backend& gpu, Backend& cpu, const AttnCase& c) { expect_fused_matches(gpu, cpu, c); }

TEST_P(FusedVulkanVsCpu, Matches) { expect_matches(*gpu_, *cpu_, GetParam()); }

// At the Vulkan 1.1 minimums: no subgroup operations (the block maxima come from a scan of
// the block's scores in shared memory), 16 KiB of shared memory, smaller tiles.
TEST_P(FusedVulkanVsCpu, MatchesAtSpecMinimumLimits) {
  DeviceOptions options = test_options();
  options.cap_limits = test_spec_minimum();
  on_vulkan(options, [&](Backend& gpu) { expect_matches(gpu, *cpu_, GetParam()); });
}

// The GPU-shaped kernel (KernelShape::gpu) on every case: planned for a device of very
// many compute units, it takes every case however many rows (with the units a device
// reports, prefill takes the lane-per-key kernel; a cap cannot raise reported units).
TEST_P(FusedVulkanVsCpu, MatchesWithGpuKernels) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 1u << 20;
  on_vulkan(options, [&](Backend& gpu) { expect_matches(gpu, *cpu_, GetParam()); });
}

TEST_P(FusedVulkanVsCpu, MatchesThroughStorageBuffers) {
  on_vulkan(storage_buffer_options(), [&](Backend& gpu) { expect_matches(gpu, *cpu_, GetParam()); });
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedVulkanVsCpu, ::testing::ValuesIn(attention_cases()), case_name);

// Decode has one row tile per KV head, so the keys are split across workgroups and a
// second dispatch merges the splits; prefill has rows enough, and few keys are not split.
// The decode cases above (32768 and 9001 keys, sinks on 20000) check the merged results.
TEST_F(VulkanVsCpuTest, FusedSplitsKeysOnlyWhenRowsAreFew) {
  // The lane-per-key kernel's planning (KernelShape::cpu); test_portability.cpp checks the
  // GPU shape's.
  on_vulkan(shape_options(KernelShape::cpu), [&](Backend& gpu) {
    auto dispatches = [&](std::size_t tokens, std::size_t keys) {
      Tensor q = gpu.tensor({tokens, 8, 64}, DType::f32), k = gpu.tensor({keys, 2, 64}, DType::f16),
             out = gpu.tensor({tokens, 8, 64}, DType::f32);
      std::vector<std::int32_t> q_pos(tokens), k_pos(keys);
      for (std::size_t j = 0; j < keys; ++j) k_pos[j] = static_cast<std::int32_t>(j);
      for (std::size_t t = 0; t < tokens; ++t) q_pos[t] = static_cast<std::int32_t>(keys - tokens + t);
      CommandList cmd = gpu.commands({.timestamps = gpu.limits().timestamps});
      cmd.attention(q, k, k, out, {.q_positions = q_pos, .k_positions = k_pos}, {.path = AttentionPath::fused});
      cmd.submit_and_wait();
      for (const OpTiming& t : cmd.timings()) EXPECT_EQ(t.op, "attention");
      return cmd.stats().ops;
    };
    EXPECT_EQ(dispatches(1, 4096), 2u);
    EXPECT_EQ(dispatches(1, 300), 1u);  // too few keys to be worth a second pass
    EXPECT_EQ(dispatches(256, 512), 1u);
  });
}

// Over KV caches: three sequences in mixed prefill/decode calls (19, 17 and 6 tokens), two
// of the caches rings with sinks that wrap (8 and 14 slots) under windows that hide keys
// (6: a query needs no key its own chunk overwrote), one rotating keys as they are read
// (KvRope::on_read, whose in-cache positions then differ from the tokens'), on both
// backends; the CPU backend's attention() equals its three stages exactly.
TEST_F(VulkanVsCpuTest, FusedOverKvCaches) {
  std::vector<float> kSinks16 = kSinks8;
  kSinks16.insert(kSinks16.end(), kSinks8.rbegin(), kSinks8.rend());
  const Layout layouts[] = {
      {.seqs = 3,
       .heads = 16,
       .kv_heads = 2,
       .head_dim = 128,
       .capacity = 12,
       .sinks = 4,
       .dtype = DType::f16,
       .attn = {.window = 6u, .softcap = 30.0, .sinks = kSinks16}},
      {.seqs = 3, .heads = 8, .kv_heads = 2, .head_dim = 80, .capacity = 600, .query = DType::f16, .attn = {.alibi = true}},
      {.seqs = 2, .heads = 8, .kv_heads = 2, .head_dim = 64, .capacity = 16, .sinks = 2, .attn = {.window = 6u}}};
  for (const Layout& s : layouts) {
    KvCacheConfig config = s.cache();
    if (&s == &layouts[2]) config.rope = KvRope::on_read;  // the third rotates keys as they are read
    KvCache g = gpu_->kv_cache(config), c = cpu_->kv_cache(config);
    Model m(s);
    Rng rng(141, false);
    for (int call = 0; call < 12; ++call) {
      const Ids seqs = call == 0 ? Ids{0, 0, 1, 0, 1, 0, 0, 1} : call % 3 ? Ids{1, 0} : Ids{1, 1, 0, 0};
      Ids ids = seqs;
      if (s.seqs == 3 && call % 2) ids.push_back(2);
      const Tokens t = next_tokens(m, ids, rng);
      m.add(t);
      std::vector<std::vector<float>> fused, staged;
      for (auto [b, cache] : {std::pair{gpu_.get(), &g}, std::pair{cpu_.get(), &c}}) {
        Tensor q = b->tensor({t.size(), s.heads, s.head_dim}, s.query),
               k = b->tensor({t.size(), s.kv_heads, s.head_dim}, s.input),
               v = b->tensor({t.size(), s.kv_heads, s.head_dim}, s.input),
               out = b->tensor({t.size(), s.heads, s.head_dim}, DType::f32),
               scores = b->tensor({t.size(), s.heads, s.capacity}, DType::f32),
               probs = b->tensor({t.size(), s.heads, s.capacity}, DType::f32),
               out3 = b->tensor({t.size(), s.heads, s.head_dim}, DType::f32);
        b->upload(q, t.q);
        b->upload(k, t.k);
        b->upload(v, t.v);
        const AttentionTokens tokens{.q_positions = t.pos, .q_seq_ids = t.seq};
        CommandList cmd = b->commands();
        cmd.kv_append(*cache, k, v, t.pos, t.seq);
        AttentionConfig fused_config = s.attn;
        fused_config.path = AttentionPath::fused;
        cmd.attention(q, *cache, out, tokens, fused_config);
        cmd.attn_scores(q, *cache, scores, tokens, without_sinks(s.attn));
        cmd.attn_softmax(scores, probs, s.attn);
        cmd.attn_weighted_sum(probs, *cache, out3, tokens);
        cmd.submit_and_wait();
        fused.push_back(b->download(out));
        staged.push_back(b->download(out3));
      }
      const Shape o{t.size(), s.heads, s.head_dim};
      EXPECT_TRUE(all_close(fused[0], fused[1], o, 1e-3, 1e-3)) << "Vulkan vs CPU, call " << call;
      EXPECT_EQ(fused[1], staged[1]) << "CPU attention() vs its three stages, call " << call;
      EXPECT_TRUE(all_close(staged[0], staged[1], o, 1e-3, 1e-3)) << "Vulkan's three stages vs CPU, call " << call;
    }
  }
}

// AttentionPath: automatic takes the three stages with KernelShape::cpu (the default on
// CPU devices such as lavapipe, where they are faster) and the fused kernel with
// KernelShape::gpu; either can be asked for; all agree.
TEST_F(VulkanVsCpuTest, FusedPathChoice) {
  AttnInputs in = case_inputs({.name = "path",
                               .tokens = 3,
                               .heads = 8,
                               .kv_heads = 2,
                               .keys = 700,
                               .head_dim = 64,
                               .seqs = 3,
                               .config = {.sinks = kSinks8}});
  const std::vector<float> want = run_attention(*cpu_, in).out;
  for (KernelShape shape : {KernelShape::cpu, KernelShape::gpu}) {
    on_vulkan(shape_options(shape), [&](Backend& gpu) {
      std::map<AttentionPath, std::size_t> ops;
      for (AttentionPath path : {AttentionPath::automatic, AttentionPath::fused, AttentionPath::three_stages}) {
        in.config.path = path;
        CommandStats stats;
        const std::vector<float> got = run_fused(gpu, in, &stats);
        EXPECT_TRUE(all_close(got, want, in.out_shape(), 1e-4, 1e-4))
            << "path " << static_cast<int>(path) << ", " << to_string(shape) << " kernels";
        ops[path] = stats.ops;
      }
      EXPECT_EQ(ops[AttentionPath::three_stages], 4u) << "scores, softmax, weighted sum and its reduce";
      if (shape == KernelShape::cpu) {
        EXPECT_EQ(ops[AttentionPath::fused], 2u) << "fused kernel and its merge (700 keys split)";
        EXPECT_EQ(ops[AttentionPath::automatic], 4u) << "the three stages, faster on CPU devices";
      } else {
        EXPECT_EQ(ops[AttentionPath::automatic], ops[AttentionPath::fused]) << "the fused kernel";
      }
    });
  }

  // Two three-stage ops of one shape in one list share its scores tensor: the second must
  // wait for the first's weighted sum before it overwrites the scores.
  {
    in.config.path = AttentionPath::three_stages;
    AttnInputs other = case_inputs({.name = "path_other",
                                    .tokens = 3,
                                    .heads = 8,
                                    .kv_heads = 2,
                                    .keys = 700,
                                    .head_dim = 64,
                                    .seqs = 3,
                                    .config = {.sinks = kSinks8}});
    other.config.path = AttentionPath::three_stages;
    const AttnInputTensors a = upload_inputs(*gpu_, in), b = upload_inputs(*gpu_, other);
    Tensor out_a = gpu_->tensor(in.out_shape(), DType::f32), out_b = gpu_->tensor(in.out_shape(), DType::f32);
    CommandList cmd = gpu_->commands();
    cmd.attention(a.q, a.k, a.v, out_a, {in.q_pos, in.k_pos, in.q_seq, in.k_seq}, in.config);
    cmd.attention(b.q, b.k, b.v, out_b, {other.q_pos, other.k_pos, other.q_seq, other.k_seq}, other.config);
    cmd.submit_and_wait();
    EXPECT_TRUE(all_close(gpu_->download(out_a), want, in.out_shape(), 1e-4, 1e-4)) << "first of two";
    EXPECT_TRUE(all_close(gpu_->download(out_b), run_attention(*cpu_, other).out, in.out_shape(), 1e-4, 1e-4)) << "second of two";
  }

  // Scores that would not fit one buffer: automatic takes the fused kernel on any device.
  AttnInputs big = case_inputs(
      {.name = "path_big", .tokens = 3, .heads = 8, .kv_heads = 2, .keys = 700, .head_dim = 16, .kv_dtype = DType::f16});
  big.config.path = AttentionPath::automatic;
  DeviceOptions small = test_options();
  small.cap_limits = uncapped();
  small.cap_limits->max_storage_buffer_range = 65536;  // scores: 3 x 8 x 700 x 4 = 67200 bytes
  on_vulkan(small, [&](Backend& gpu) {
    CommandStats stats;
    EXPECT_TRUE(all_close(run_fused(gpu, big, &stats), run_attention(*cpu_, big).out, big.out_shape(), 1e-4, 1e-4));
    EXPECT_LE(stats.ops, 2u) << "the fused kernel (and its merge)";
  });
}

// On a CPU device llvmpipe's loop limit splits a cache's keys by its capacity, and the
// splits' partial results of a long chunk can pass the storage buffer range: refused when
// recorded, saying how many query tokens fit (a GPU's splits stay within the range); fewer
// tokens, whose partials fit, are recorded (the tiled kernel in the GPU-shaped family).
TEST_F(VulkanVsCpuTest, FusedSplitsOverTheRangeSayHowManyTokensFit) {
  constexpr std::size_t n = 2048, heads = 32, kv_heads = 8, d = 128;
  KvCache cache = gpu_->kv_cache({.n_kv_heads = kv_heads, .head_dim = d, .capacity = 65536, .dtype = DType::f16});
  Tensor q = gpu_->tensor({n, heads, d}, DType::f32), kv = gpu_->tensor({n, kv_heads, d}, DType::f32);
  Tensor out = gpu_->tensor({n, heads, d}, DType::f32);
  std::vector<std::int32_t> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<std::int32_t>(t);
  CommandList cmd = gpu_->commands();
  cmd.kv_append(cache, kv, kv, positions);
  AttentionConfig fused;
  fused.path = AttentionPath::fused;
  if (gpu_->device_name().find("llvmpipe") == std::string::npos) {
    cmd.attention(q, cache, out, {.q_positions = positions}, fused);
    return;
  }
  try {
    cmd.attention(q, cache, out, {.q_positions = positions}, fused);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    const std::string m = e.what();
    // The GPU-shaped family's tiled kernel leaves it to the lane-per-key one (0.14.2: it
    // refused, saying only what its scratch needed).
    EXPECT_NE(m.find("vkattn: attention: on a CPU device (llvmpipe's loop limit) attention over 65536 keys splits them"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("record at most about 2016 query tokens"), std::string::npos) << m;
  }
  EXPECT_EQ(cmd.stats().ops, 1u);  // the append alone
  const std::span<const std::int32_t> fewer(positions.data(), 512);
  Tensor q512 = gpu_->tensor({512, heads, d}, DType::f32), out512 = gpu_->tensor({512, heads, d}, DType::f32);
  EXPECT_NO_THROW(cmd.attention(q512, cache, out512, {.q_positions = fewer}, fused));
}

// A list's parameters live in one buffer within the storage buffer range: attention over
// plain keys adds 8 bytes a key (positions and sequences). The op that would pass the range
// is refused when recorded, and the list, kept as it was, submits and matches the CPU.
TEST_F(VulkanVsCpuTest, ListParametersOverTheRangeRefuseTheOp) {
  DeviceOptions small = test_options();
  small.cap_limits = uncapped();
  small.cap_limits->max_storage_buffer_range = 1u << 20;
  on_vulkan(small, [&](Backend& gpu) {
    constexpr std::size_t n_keys = 16384, d = 8;
    const std::vector<float> qv = normal(d, 1), kv = normal(n_keys * d, 2);
    const std::vector<std::int32_t> last = {static_cast<std::int32_t>(n_keys - 1)};
    std::vector<float> want;
    for (Backend* b : {&gpu, cpu_.get()}) {
      Tensor q = b->tensor({1, 1, d}, DType::f32), k = b->tensor({n_keys, 1, d}, DType::f32);
      Tensor out = b->tensor({1, 1, d}, DType::f32);
      b->upload(q, qv);
      b->upload(k, kv);
      CommandList cmd = b->commands();
      if (b == cpu_.get()) {
        cmd.attention(q, k, k, out, {.q_positions = last});
        cmd.submit_and_wait();
        EXPECT_TRUE(all_close(b->download(out), want, {1, 1, d}, 1e-5, 1e-5));
        continue;
      }
      std::size_t recorded = 0;
      try {
        for (; recorded < 64; ++recorded) cmd.attention(q, k, k, out, {.q_positions = last});
        ADD_FAILURE() << "64 ops of 128 KiB of parameters each recorded within 1 MiB";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
        const std::string m = e.what();
        EXPECT_NE(m.find("vkattn: attention: with this op the list's parameters"), std::string::npos) << m;
        EXPECT_NE(m.find("over maxStorageBufferRange = 1048576: record it into another list"), std::string::npos) << m;
      }
      EXPECT_GE(recorded, 4u);
      cmd.submit_and_wait();
      want = b->download(out);
    }
  });
}

}  // namespace
}  // namespace vkattn::test
