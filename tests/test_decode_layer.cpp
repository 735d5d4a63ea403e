// A decode layer as an engine records it: rope(q, k), kv_append of that k into the layer's
// cache, attention of that q over the cache. The Vulkan command list records the first two
// as one dispatch (kv_append.comp's VKATTN_KV_ROPE variant; docs/design.md says when):
// here against the same ops recorded apart ($VKATTN_FUSE=off) and the CPU reference, for
// f32 and f16 q and k, every cache type, both layouts, rotated slices, YaRN's attention
// factor, dynamic NTK (whose table follows the positions), windows, sinks and several
// sequences; what it declines to fuse, recorded apart; a layer's dispatches and barriers;
// replays, at the spec minimums too.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

struct LayerCase {
  const char* name;
  std::size_t tokens = 1, heads = 8, kv_heads = 2, head_dim = 64;
  DType dtype = DType::f32;          // q, k and v
  DType cache = DType::f16;          // the cache's
  std::vector<std::int32_t> seqs{};  // each token's sequence (empty: all 0)
  RopeConfig rope{.base = 10000.0};
  std::optional<std::uint32_t> window{};
  bool sinks = false;
  std::size_t n_sinks = 0;  // the cache's
  bool paged = false;       // a paged cache of blocks of 8
};

std::vector<LayerCase> layer_cases() {
  return {
      {.name = "decode_f32_f16_cache"},
      {.name = "chunk_of_5_two_sequences_interleaved_sinks",
       .tokens = 5,
       .cache = DType::f32,
       .seqs = {0, 0, 1, 1, 1},
       .rope = {.layout = RopeLayout::interleaved, .base = 500000.0},
       .sinks = true,
       .n_sinks = 2},
      {.name = "f16_q8_0_cache_slice_yarn",
       .tokens = 2,
       .dtype = DType::f16,
       .cache = DType::q8_0,
       .rope = {.rotary_dim = 32, .rotary_offset = 16, .scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 32}},
      {.name = "q4_0_cache_window_dynamic_ntk",
       .cache = DType::q4_0,
       .rope = {.scaling = RopeScaling::dynamic_ntk, .factor = 2.0, .original_context = 16},
       .window = 9},
      {.name = "f16_gqa_4_head_dim_128", .heads = 16, .kv_heads = 4, .head_dim = 128, .dtype = DType::f16},
      // f16 half layout over 19 pairs: a unit of a whole row (rope_unit.glsl: ROPE_UNIT_ROW).
      {.name = "f16_odd_pairs_rotary_38_of_80", .head_dim = 80, .dtype = DType::f16, .rope = {.rotary_dim = 38}},
      {.name = "paged_f16_cache_two_sequences", .tokens = 2, .seqs = {1, 0}, .paged = true},
  };
}

constexpr std::size_t kCapacity = 40, kHeld = 30;  // slots; tokens the cache holds before the layer

// One layer on |b|: the cache filled with kHeld tokens per sequence first, then the layer
// at the next positions; its results, q and k after it, and the list's counts.
struct LayerRun {
  std::vector<float> out, q, k;
  CommandStats stats;
};

KvCacheConfig cache_config(const LayerCase& c) {
  return {.n_seqs = 2,
          .n_kv_heads = c.kv_heads,
          .head_dim = c.head_dim,
          .capacity = kCapacity,
          .dtype = c.cache,
          .n_sinks = c.n_sinks,
          .paged = c.paged,
          .block_size = 8,
          .n_blocks = c.paged ? 12u : 0u};
}

std::vector<std::int32_t> seqs_of(const LayerCase& c) { return c.seqs.empty() ? std::vector<std::int32_t>(c.tokens, 0) : c.seqs; }

// Each sequence's tokens at its next positions.
std::vector<std::int32_t> positions_of(const std::vector<std::int32_t>& seqs) {
  std::vector<std::int32_t> pos, next(2, static_cast<std::int32_t>(kHeld));
  for (std::int32_t s : seqs) pos.push_back(next[static_cast<std::size_t>(s)]++);
  return pos;
}

AttentionConfig attention_config(const LayerCase& c) {
  AttentionConfig a{.window = c.window};
  if (c.sinks) a.sinks = normal(c.heads, 17);
  return a;
}

void fill_cache(Backend& b, KvCache& cache, const LayerCase& c) {
  for (std::int32_t s = 0; s < 2; ++s) {
    Tensor k = b.tensor({kHeld, c.kv_heads, c.head_dim}, DType::f32), v = b.tensor({kHeld, c.kv_heads, c.head_dim}, DType::f32);
    b.upload(k, normal(kHeld * c.kv_heads * c.head_dim, 40 + static_cast<std::uint32_t>(s)));
    b.upload(v, normal(kHeld * c.kv_heads * c.head_dim, 50 + static_cast<std::uint32_t>(s)));
    std::vector<std::int32_t> pos(kHeld), seq(kHeld, s);
    for (std::size_t i = 0; i < kHeld; ++i) pos[i] = static_cast<std::int32_t>(i);
    CommandList fill = b.commands();
    fill.kv_append(cache, k, v, pos, seq);
    fill.submit_and_wait();
  }
}

LayerRun run_layer(Backend& b, const LayerCase& c, bool fuse) {
  ScopedEnv env("VKATTN_FUSE", fuse ? "on" : "off");
  KvCache cache = b.kv_cache(cache_config(c));
  fill_cache(b, cache, c);
  Tensor q = b.tensor({c.tokens, c.heads, c.head_dim}, c.dtype), k = b.tensor({c.tokens, c.kv_heads, c.head_dim}, c.dtype),
         v = b.tensor({c.tokens, c.kv_heads, c.head_dim}, c.dtype), out = b.tensor({c.tokens, c.heads, c.head_dim}, DType::f32);
  b.upload(q, normal(c.tokens * c.heads * c.head_dim, 1));
  b.upload(k, normal(c.tokens * c.kv_heads * c.head_dim, 2));
  b.upload(v, normal(c.tokens * c.kv_heads * c.head_dim, 3));
  const std::vector<std::int32_t> seqs = seqs_of(c), pos = positions_of(seqs);
  CommandList cmd = b.commands();
  cmd.rope(q, k, pos, c.rope);
  cmd.kv_append(cache, k, v, pos, seqs);
  cmd.attention(q, cache, out, {.q_positions = pos, .q_seq_ids = seqs}, attention_config(c));
  cmd.submit_and_wait();
  return {b.download(out), b.download(q), b.download(k), cmd.stats()};
}

// Fused against apart on |gpu|, both against the CPU backend.
void expect_layer_matches(Backend& gpu, Backend& cpu, const LayerCase& c) {
  const LayerRun fused = run_layer(gpu, c, true), apart = run_layer(gpu, c, false), want = run_layer(cpu, c, true);
  EXPECT_EQ(fused.stats.ops + 1, apart.stats.ops) << c.name << ": rope and kv_append in one dispatch";
  const Shape q_shape{c.tokens, c.heads, c.head_dim}, k_shape{c.tokens, c.kv_heads, c.head_dim};
  // q and k come out of one rotation either way (f16: within a rounding of the product).
  const double qk_tol = c.dtype == DType::f16 ? 2e-3 : 1e-6;
  EXPECT_TRUE(all_close(fused.q, apart.q, q_shape, qk_tol, qk_tol)) << c.name << ": q";
  EXPECT_TRUE(all_close(fused.k, apart.k, k_shape, qk_tol, qk_tol)) << c.name << ": k";
  EXPECT_TRUE(all_close(fused.out, apart.out, q_shape, 1e-4, 1e-4)) << c.name << ": out, fused against apart";
  // Against the reference: a quantized cache rounds each rotated key to its codes, and one
  // rounding the other way moves a score by a step of the block's scale.
  const bool quantized = c.cache == DType::q8_0 || c.cache == DType::q4_0;
  const double tol = quantized ? 2e-2 : c.dtype == DType::f16 || c.cache == DType::f16 ? 2e-3 : 1e-4;
  EXPECT_TRUE(all_close(fused.q, want.q, q_shape, qk_tol + 1e-5, 1e-3)) << c.name << ": q against the CPU";
  EXPECT_TRUE(all_close(fused.out, want.out, q_shape, tol, tol)) << c.name << ": out against the CPU";
}

class DecodeLayerVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<LayerCase> {};

TEST_P(DecodeLayerVulkanVsCpu, MatchesOpsApart) {
  expect_layer_matches(*gpu_, *cpu_, GetParam());
  // The GPU-shaped attention kernels read what the fused dispatch wrote.
  on_vulkan(shape_options(KernelShape::gpu), [&](Backend& gpu) { expect_layer_matches(gpu, *cpu_, GetParam()); });
}

std::string layer_name(const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Cases, DecodeLayerVulkanVsCpu, ::testing::ValuesIn(layer_cases()), layer_name);

// The Vulkan 1.1 minimums (128 invocations, 16 KiB of shared memory), with the 8 storage
// buffers the fused dispatch binds; with 4, rope and kv_append are recorded apart (and
// kv_append writes k and v in a dispatch each).
TEST_F(VulkanVsCpuTest, DecodeLayerAtSpecMinimum) {
  DeviceOptions options = test_options();
  options.cap_limits = test_spec_minimum();
  on_vulkan(options, [&](Backend& gpu) {
    for (const LayerCase& c : layer_cases()) expect_layer_matches(gpu, *cpu_, c);
  });
  options.cap_limits->max_storage_buffers = 4;
  on_vulkan(options, [&](Backend& gpu) {
    const LayerCase c = layer_cases()[0];
    const LayerRun fused = run_layer(gpu, c, true), apart = run_layer(gpu, c, false);
    EXPECT_EQ(fused.stats.ops, apart.stats.ops) << "not fused with 4 storage buffers";
    EXPECT_EQ(fused.out, apart.out);
  });
}

// What is not rope(q, k) followed by kv_append of that k at the same positions is recorded
// as it was given, and computes what the ops apart compute.
TEST_F(VulkanVsCpuTest, DecodeLayerDeclinesWhatItCannotFuse) {
  constexpr std::size_t kH = 4, kD = 32;
  struct Decline {
    const char* name;
    std::function<void(CommandList&, Tensor& q, Tensor& k, Tensor& k2, Tensor& v, KvCache& cache)> record;
  };
  const std::vector<std::int32_t> pos{0}, other{2};  // a fresh cache takes position 0
  const RopeConfig rope{};
  RopeConfig mrope{.rotary_dim = 16, .mrope = MRope{.sections = {4, 2, 2}}};
  const std::vector<std::int32_t> thw{0, 1, 2};
  const Decline declines[] = {
      {"another k appended",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor& k2, Tensor& v, KvCache& cache) {
         c.rope(q, k, pos, rope);
         c.kv_append(cache, k2, v, pos);
       }},
      {"other positions",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor&, Tensor& v, KvCache& cache) {
         c.rope(q, k, other, rope);
         c.kv_append(cache, k, v, pos);
       }},
      {"an op between",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor& k2, Tensor& v, KvCache& cache) {
         c.rope(q, k, pos, rope);
         c.copy(k2, v);
         c.kv_append(cache, k, v, pos);
       }},
      {"q as v",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor&, Tensor&, KvCache& cache) {
         c.rope(q, k, pos, rope);
         c.kv_append(cache, k, q, pos);
       }},
      {"k as v",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor&, Tensor&, KvCache& cache) {
         c.rope(q, k, pos, rope);
         c.kv_append(cache, k, k, pos);
       }},
      {"k rotated alone",
       [&](CommandList& c, Tensor&, Tensor& k, Tensor&, Tensor& v, KvCache& cache) {
         c.rope(k, pos, rope);
         c.kv_append(cache, k, v, pos);
       }},
      {"M-RoPE",
       [&](CommandList& c, Tensor& q, Tensor& k, Tensor&, Tensor& v, KvCache& cache) {
         c.rope(q, k, thw, mrope);
         c.kv_append(cache, k, v, pos);
       }},
  };
  for (const Decline& d : declines) {
    std::vector<std::vector<float>> results;
    std::vector<std::size_t> ops;
    for (const char* fuse : {"on", "off"}) {
      ScopedEnv env("VKATTN_FUSE", fuse);
      // MHA, so that q may serve as v.
      KvCache cache = gpu_->kv_cache({.n_kv_heads = kH, .head_dim = kD, .capacity = 8, .dtype = DType::f32});
      Tensor q = gpu_->tensor({1, kH, kD}, DType::f32), k = gpu_->tensor({1, kH, kD}, DType::f32),
             k2 = gpu_->tensor({1, kH, kD}, DType::f32), v = gpu_->tensor({1, kH, kD}, DType::f32),
             out = gpu_->tensor({1, kH, kD}, DType::f32);
      for (auto [t, seed] : {std::pair{&q, 1u}, {&k, 2u}, {&k2, 3u}, {&v, 4u}}) gpu_->upload(*t, normal(kH * kD, seed));
      CommandList cmd = gpu_->commands();
      d.record(cmd, q, k, k2, v, cache);
      cmd.attention(q, cache, out, {.q_positions = pos});
      cmd.submit_and_wait();
      results.push_back(gpu_->download(out));
      results.push_back(gpu_->download(q));
      ops.push_back(cmd.stats().ops);
    }
    EXPECT_EQ(ops[0], ops[1]) << d.name << ": recorded apart";
    EXPECT_EQ(results[0], results[2]) << d.name;
    EXPECT_EQ(results[1], results[3]) << d.name;
  }
}

// Decode of 32 query heads over 8 KV heads (d 128, f16 cache of 256 slots) on the GPU
// shape of a 132-unit device: a layer is two dispatches with one barrier between them
// (the attention reads the cache and q the first wrote), and the next layer's first
// dispatch waits for the attention (it rotates the q that attention read).
TEST_F(VulkanVsCpuTest, DecodeLayerIsTwoDispatches) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 132;
  on_vulkan(options, [&](Backend& gpu) {
    for (const char* fuse : {"on", "off"}) {
      ScopedEnv env("VKATTN_FUSE", fuse);
      KvCache layers[2] = {gpu.kv_cache({.n_kv_heads = 8, .head_dim = 128, .capacity = 256}),
                           gpu.kv_cache({.n_kv_heads = 8, .head_dim = 128, .capacity = 256})};
      Tensor q = gpu.tensor({1, 32, 128}, DType::f32), k = gpu.tensor({1, 8, 128}, DType::f32),
             v = gpu.tensor({1, 8, 128}, DType::f32), out = gpu.tensor({1, 32, 128}, DType::f32);
      const std::vector<std::int32_t> pos{0};
      CommandList cmd = gpu.commands();
      for (KvCache& c : layers) {
        cmd.rope(q, k, pos, {.base = 500000.0});
        cmd.kv_append(c, k, v, pos);
        cmd.attention(q, c, out, {.q_positions = pos});
      }
      cmd.submit_and_wait();
      const bool fused = std::string(fuse) == "on";
      EXPECT_EQ(cmd.stats().ops, fused ? 4u : 6u) << fuse;
      EXPECT_EQ(cmd.stats().barriers, fused ? 3u : 5u) << fuse;
    }
  });
}

// A two-layer step over rings of two sequences (f16 and q8_0), dynamic NTK, recorded once
// and replayed past the rings' wrap: each layer's output of each replay equals a list
// recorded afresh bit for bit, the ops apart within rounding, and the CPU within the
// tolerance of its cache (expect_layer_matches': f16 2e-3, q8_0 2e-2).
TEST_F(VulkanVsCpuTest, DecodeLayerReplaysAsRecordedAfresh) {
  constexpr std::size_t kH = 8, kKv = 2, kD = 64;
  const RopeConfig rope{.scaling = RopeScaling::dynamic_ntk, .factor = 2.0, .original_context = 8};
  struct Model {
    Backend& b;
    std::vector<KvCache> caches;
    Tensor q, k, v;
    std::vector<Tensor> outs;  // a layer's each
    explicit Model(Backend& backend) : b(backend) {
      for (DType t : {DType::f16, DType::q8_0})
        caches.push_back(b.kv_cache({.n_seqs = 2, .n_kv_heads = kKv, .head_dim = kD, .capacity = 12, .dtype = t, .n_sinks = 1}));
      q = b.tensor({2, kH, kD}, DType::f32);
      k = b.tensor({2, kKv, kD}, DType::f32);
      v = b.tensor({2, kKv, kD}, DType::f32);
      for (std::size_t i = 0; i < caches.size(); ++i) outs.push_back(b.tensor({2, kH, kD}, DType::f32));
    }
    void record(CommandList& cmd, const std::vector<std::int32_t>& pos, const RopeConfig& r) {
      const std::vector<std::int32_t> seq{0, 1};
      for (std::size_t i = 0; i < caches.size(); ++i) {
        cmd.rope(q, k, pos, r);
        cmd.kv_append(caches[i], k, v, pos, seq);
        cmd.attention(q, caches[i], outs[i], {.q_positions = pos, .q_seq_ids = seq});
      }
    }
    // Sequence 1 starts 3 tokens ahead, so that the two wrap at different steps.
    void prefill_sequence_1() {
      Tensor k3 = b.tensor({3, kKv, kD}, DType::f32), v3 = b.tensor({3, kKv, kD}, DType::f32);
      b.upload(k3, normal(3 * kKv * kD, 7));
      b.upload(v3, normal(3 * kKv * kD, 8));
      CommandList c = b.commands();
      for (KvCache& cache : caches)
        c.kv_append(cache, k3, v3, std::vector<std::int32_t>{0, 1, 2}, std::vector<std::int32_t>(3, 1));
      c.submit_and_wait();
    }
    void upload(std::uint32_t seed) {
      b.upload(q, normal(2 * kH * kD, seed));
      b.upload(k, normal(2 * kKv * kD, seed + 1));
      b.upload(v, normal(2 * kKv * kD, seed + 2));
    }
  };
  ScopedEnv off("VKATTN_FUSE", "off");
  Model apart(*gpu_), cpu(*cpu_);
  CommandList apart_step = gpu_->commands(), cpu_step = cpu_->commands();
  ScopedEnv on("VKATTN_FUSE", "on");
  Model replayed(*gpu_), fresh(*gpu_);
  CommandList step = gpu_->commands();
  for (Model* m : {&replayed, &fresh, &apart, &cpu}) m->prefill_sequence_1();
  for (std::int32_t t = 0; t < 30; ++t) {
    const std::vector<std::int32_t> pos{t, t + 3};
    for (Model* m : {&replayed, &fresh, &apart, &cpu}) m->upload(300 + static_cast<std::uint32_t>(t));
    if (t == 0) {
      replayed.record(step, pos, rope);
      apart.record(apart_step, pos, rope);
      cpu.record(cpu_step, pos, rope);
    } else {
      for (CommandList* c : {&step, &apart_step, &cpu_step}) c->set_tokens(pos);
    }
    CommandList once = gpu_->commands();
    fresh.record(once, pos, rope);
    for (CommandList* c : {&step, &apart_step, &cpu_step, &once}) c->submit_and_wait();
    for (std::size_t i = 0; i < 2; ++i) {
      const std::string what = "step " + std::to_string(t) + ", layer " + std::to_string(i);
      const std::vector<float> got = gpu_->download(replayed.outs[i]);
      const double tol = i == 0 ? 2e-3 : 2e-2;  // f16, q8_0
      ASSERT_EQ(got, gpu_->download(fresh.outs[i])) << what << ": replayed against recorded afresh";
      ASSERT_TRUE(all_close(got, gpu_->download(apart.outs[i]), {2, kH, kD}, 1e-4, 1e-4)) << what << ": against apart";
      ASSERT_TRUE(all_close(got, cpu_->download(cpu.outs[i]), {2, kH, kD}, tol, tol)) << what << ": against the CPU";
    }
  }
  EXPECT_EQ(step.stats().ops + 2, apart_step.stats().ops);
  EXPECT_EQ(step.stats().encodings, 1u) << "a replay recorded the command buffer again";
}

// $VKATTN_FUSE is read when a list is made; a malformed one is refused by name.
TEST_F(VulkanVsCpuTest, DecodeLayerFusionKnobIsChecked) {
  ScopedEnv env("VKATTN_FUSE", "sometimes");
  expect_invalid([&] { gpu_->commands(); }, {"commands", "VKATTN_FUSE", "sometimes"});
}

}  // namespace
}  // namespace vkattn::test
