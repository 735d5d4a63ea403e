// Attention, Vulkan against the CPU reference: shapes and options chosen to break kernels
// (odd sizes, GQA, head_dims real models use, masks, soft-capping, ALiBi, sinks, f16,
// huge logits, long rows), each also at the Vulkan spec-minimum limits, and the weighted
// sum's split-keys path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

// Vulkan against the CPU reference.
enum class MaskKind {
  none,
  random,     // N(0, mask_scale), every 7th entry -inf
  plus_minus  // +-mask_scale at random
};

struct AttnCase {
  const char* name;
  std::size_t tokens, heads, kv_heads, keys, head_dim, seqs = 1;
  AttentionConfig config{};
  DType q_dtype = DType::f32, kv_dtype = DType::f32;
  float qk_scale = 1.0f;  // q and k ~ N(0, qk_scale)
  MaskKind mask = MaskKind::none;
  float mask_scale = 1.0f;
  std::int32_t offset = 0;  // first key position
};

class AttentionVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<AttnCase> {};

std::uint32_t seed_of(const char* name) {  // FNV-1a: a fixed seed per case, stable everywhere
  std::uint32_t h = 2166136261u;
  for (; *name; ++name) h = (h ^ static_cast<unsigned char>(*name)) * 16777619u;
  return h;
}

// What a score is made of, in absolute value: scale * sum_d |q_d k_d| + |ALiBi| + |mask|.
// The f32 rounding error of a score grows with this, not with the score (which may cancel).
double score_magnitude(const AttnInputs& in) {
  const double scale = in.config.scale.value_or(1 / std::sqrt(double(in.head_dim)));
  const std::size_t group = in.heads / in.kv_heads;
  double dots = 0;
  for (std::size_t t = 0; t < in.tokens; ++t) {
    for (std::size_t h = 0; h < in.heads; ++h) {
      for (std::size_t j = 0; j < in.keys; ++j) {
        const float* q = &in.q[(t * in.heads + h) * in.head_dim];
        const float* k = &in.k[(j * in.kv_heads + h / group) * in.head_dim];
        double a = 0;
        for (std::size_t d = 0; d < in.head_dim; ++d) a += std::fabs(double{q[d]} * k[d]);
        dots = std::max(dots, std::fabs(scale) * a);
      }
    }
  }
  double bias = 0;
  for (float m : in.mask) bias = std::max(bias, std::isfinite(m) ? std::fabs(double{m}) : 0.0);
  std::vector<float> slopes = in.config.alibi_slopes;
  if (slopes.empty() && in.config.alibi) slopes = alibi_slopes(in.heads);
  double slope = 0;
  for (float s : slopes) slope = std::max(slope, std::fabs(double{s}));
  const auto [lo, hi] = std::minmax_element(in.k_pos.begin(), in.k_pos.end());
  const auto [qlo, qhi] = std::minmax_element(in.q_pos.begin(), in.q_pos.end());
  return dots + bias + slope * double(std::max(*hi, *qhi) - std::min(*lo, *qlo));
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::isfinite(x) ? std::fabs(double{x}) : 0.0);
  return m;
}

void expect_matches(Backend& gpu, Backend& cpu, const AttnCase& c) {
  const std::uint32_t seed = seed_of(c.name);
  AttnInputs in = random_inputs(c.tokens, c.heads, c.kv_heads, c.keys, c.head_dim, c.seqs, seed, c.offset, c.qk_scale);
  in.config = c.config;
  in.q_dtype = c.q_dtype;
  in.kv_dtype = c.kv_dtype;
  if (c.mask != MaskKind::none) {
    in.mask = normal(c.tokens * c.keys, seed + 3, c.mask_scale);
    for (std::size_t i = 0; i < in.mask.size(); ++i) {
      if (c.mask == MaskKind::plus_minus) in.mask[i] = in.mask[i] < 0 ? -c.mask_scale : c.mask_scale;
      if (c.mask == MaskKind::random && i % 7 == 3) in.mask[i] = -kInf;
    }
  }
  const AttnOutputs want = run_attention(cpu, in);
  const AttnOutputs staged = run_attention(gpu, in, &want);  // each stage on the CPU's inputs
  CommandStats stats;
  const AttnOutputs chained = run_attention(gpu, in, nullptr, &stats);  // the GPU's own stages chained
  // Every input fits a texel view unless texel reads are off; they are read through one then.
  if (gpu.limits().max_texel_buffer_elements == 0) {
    EXPECT_EQ(stats.texel_reads, 0u);
  } else if (gpu.limits().max_texel_buffer_elements >= (1u << 26)) {
    EXPECT_EQ(stats.texel_reads, 5u) << "q, k, scores, probs, v";
  }

  // Scores: 1e-4 abs + 1e-5 rel, the abs part growing with the terms' magnitude (1e4 cases).
  const double s_atol = 1e-4 + 2e-6 * score_magnitude(in);
  EXPECT_TRUE(all_close(staged.scores, want.scores, in.scores_shape(), s_atol, 1e-5)) << "scores";
  EXPECT_TRUE(all_close(chained.scores, want.scores, in.scores_shape(), s_atol, 1e-5)) << "scores, chained";
  // Softmax and weighted sum on identical inputs: tight.
  const bool f16 = c.q_dtype == DType::f16 || c.kv_dtype == DType::f16;
  const double o_atol = f16 ? 2e-4 : 1e-4;
  EXPECT_TRUE(all_close(staged.probs, want.probs, in.scores_shape(), 1e-5, 0)) << "probs on the same scores";
  EXPECT_TRUE(all_close(staged.out, want.out, in.out_shape(), o_atol, 1e-4)) << "out on the same probs";
  // Chained: scores off by at most d move each p_j by at most (e^(2d) - 1) p_j ~ 2d p_j,
  // hence out by 2d max|v|; d is measured, so this stays tight where the scores agree.
  double d = 0;
  for (std::size_t i = 0; i < want.scores.size(); ++i) {
    if (std::isfinite(want.scores[i])) d = std::max(d, double(std::fabs(chained.scores[i] - want.scores[i])));
  }
  const double spread = std::expm1(2 * d);
  EXPECT_TRUE(all_close(chained.probs, want.probs, in.scores_shape(), 1e-5 + spread, 0)) << "probs, chained";
  EXPECT_TRUE(all_close(chained.out, want.out, in.out_shape(), o_atol + (spread + 1e-5) * max_abs(in.v), 1e-4))
      << "out, chained";
}

TEST_P(AttentionVulkanVsCpu, Matches) { expect_matches(*gpu_, *cpu_, GetParam()); }

// The same at the Vulkan 1.1 minimums (16 KiB shared memory, 128 invocations, no subgroup
// operations, staging copies): other tiles, shared-memory reductions, rows outside shared memory.
TEST_P(AttentionVulkanVsCpu, MatchesAtSpecMinimumLimits) {
  DeviceOptions options = test_options();
  options.cap_limits = spec_minimum_limits();
  on_vulkan(options, [&](Backend& gpu) { expect_matches(gpu, *cpu_, GetParam()); });
}

// The same with every input read through storage buffers, as on devices whose
// maxTexelBufferElements is too small for the tensors.
TEST_P(AttentionVulkanVsCpu, MatchesThroughStorageBuffers) {
  on_vulkan(storage_buffer_options(), [&](Backend& gpu) { expect_matches(gpu, *cpu_, GetParam()); });
}

// Decode has one row tile per KV head, so the weighted sum splits its keys across
// workgroups and a second dispatch adds the partial sums; prefill has rows enough. The
// decode_* cases below check the split path's results.
TEST_F(VulkanVsCpuTest, WeightedSumSplitsKeysOnlyWhenRowsAreFew) {
  auto split = [&](std::size_t tokens, std::size_t keys) {
    Tensor probs = gpu_->tensor({tokens, 8, keys}, DType::f32), v = gpu_->tensor({keys, 2, 64}, DType::f16),
           out = gpu_->tensor({tokens, 8, 64}, DType::f32);
    CommandList cmd = gpu_->commands();
    cmd.attn_weighted_sum(probs, v, out);
    return cmd.stats().ops;
  };
  EXPECT_EQ(split(1, 4096), 2u);
  EXPECT_EQ(split(1, 300), 1u);   // too few keys to be worth a second pass
  EXPECT_EQ(split(256, 512), 1u);

  // Two split sums of different sizes in one list share its scratch tensor; the hazard
  // tracking must order the second's partial sums after the first's reduce.
  std::vector<float> results[2][2];
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    CommandList cmd = b->commands();
    std::vector<Tensor> keep;
    for (std::size_t i = 0; i < 2; ++i) {
      const std::size_t keys = i ? 3000 : 1024;
      keep.push_back(b->tensor({1, 8, keys}, DType::f32));
      std::vector<float> p = normal(8 * keys, 40 + static_cast<std::uint32_t>(i));
      for (std::size_t h = 0; h < 8; ++h) {  // rows of |N(0, 1)|, normalized
        float sum = 0;
        for (std::size_t j = 0; j < keys; ++j) sum += (p[h * keys + j] = std::fabs(p[h * keys + j]));
        for (std::size_t j = 0; j < keys; ++j) p[h * keys + j] /= sum;
      }
      b->upload(keep.back(), p);
      keep.push_back(b->tensor({keys, 2, 64}, DType::f32));
      b->upload(keep.back(), normal(keys * 2 * 64, 50 + static_cast<std::uint32_t>(i)));
      keep.push_back(b->tensor({1, 8, 64}, DType::f32));
    }
    for (std::size_t i = 0; i < 2; ++i) cmd.attn_weighted_sum(keep[3 * i], keep[3 * i + 1], keep[3 * i + 2]);
    if (b == gpu_.get()) {
      EXPECT_EQ(cmd.stats().ops, 4u);
    }
    cmd.submit_and_wait();
    for (std::size_t i = 0; i < 2; ++i) results[b == gpu_.get() ? 0 : 1][i] = b->download(keep[3 * i + 2]);
  }
  for (std::size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(all_close(results[0][i], results[1][i], {1, 8, 64}, 1e-5, 1e-5)) << "sum " << i;
}

const std::vector<float> kSinks8 = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -2.0f, 1.0f, 0.25f};

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionVulkanVsCpu,
    ::testing::Values(
        // One decode token for each of 3 sequences whose keys are interleaved in k.
        AttnCase{.name = "decode_3_sequences", .tokens = 3, .heads = 8, .kv_heads = 2, .keys = 301, .head_dim = 64,
                 .seqs = 3},
        AttnCase{.name = "prefill_200_causal", .tokens = 200, .heads = 4, .kv_heads = 4, .keys = 200, .head_dim = 64},
        AttnCase{.name = "one_key", .tokens = 1, .heads = 4, .kv_heads = 2, .keys = 1, .head_dim = 64},
        AttnCase{.name = "odd_17_tokens_37_keys", .tokens = 17, .heads = 6, .kv_heads = 3, .keys = 37, .head_dim = 24},
        AttnCase{.name = "more_tokens_than_keys", .tokens = 17, .heads = 2, .kv_heads = 1, .keys = 5, .head_dim = 16,
                 .config = {.causal = false}},
        AttnCase{.name = "odd_head_dim_7_f16", .tokens = 5, .heads = 3, .kv_heads = 1, .keys = 13, .head_dim = 7,
                 .q_dtype = DType::f16, .kv_dtype = DType::f16},
        AttnCase{.name = "gqa_4", .tokens = 9, .heads = 16, .kv_heads = 4, .keys = 64, .head_dim = 128},
        AttnCase{.name = "gqa_8", .tokens = 5, .heads = 32, .kv_heads = 4, .keys = 100, .head_dim = 128},
        AttnCase{.name = "mqa", .tokens = 7, .heads = 8, .kv_heads = 1, .keys = 33, .head_dim = 64},
        AttnCase{.name = "head_dim_32", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 32},
        AttnCase{.name = "head_dim_80", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 80},
        AttnCase{.name = "head_dim_96", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 96},
        AttnCase{.name = "head_dim_112", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 112},
        AttnCase{.name = "head_dim_128", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 128},
        AttnCase{.name = "head_dim_256", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 256},
        AttnCase{.name = "window_16_two_sequences", .tokens = 40, .heads = 4, .kv_heads = 2, .keys = 100,
                 .head_dim = 64, .seqs = 2, .config = {.window = 16u}, .offset = INT32_MAX - 100},
        AttnCase{.name = "custom_mask_not_causal", .tokens = 12, .heads = 4, .kv_heads = 2, .keys = 29, .head_dim = 64,
                 .config = {.causal = false}, .mask = MaskKind::random, .mask_scale = 2.0f},
        AttnCase{.name = "softcap", .tokens = 8, .heads = 4, .kv_heads = 2, .keys = 40, .head_dim = 64,
                 .config = {.softcap = 5.0}, .qk_scale = 3.0f},
        AttnCase{.name = "alibi_standard_12_heads", .tokens = 20, .heads = 12, .kv_heads = 4, .keys = 50,
                 .head_dim = 64, .config = {.alibi = true}, .offset = 1000},
        AttnCase{.name = "alibi_given_slopes", .tokens = 10, .heads = 4, .kv_heads = 2, .keys = 30, .head_dim = 32,
                 .seqs = 2, .config = {.alibi_slopes = {0.3f, 0.05f, 1.0f, 0.0f}}},
        AttnCase{.name = "sinks", .tokens = 6, .heads = 8, .kv_heads = 2, .keys = 25, .head_dim = 64,
                 .config = {.sinks = kSinks8}},
        AttnCase{.name = "f16_kv", .tokens = 11, .heads = 8, .kv_heads = 2, .keys = 70, .head_dim = 128,
                 .kv_dtype = DType::f16},
        AttnCase{.name = "f16_q_and_kv", .tokens = 11, .heads = 8, .kv_heads = 2, .keys = 70, .head_dim = 80, .seqs = 2,
                 .q_dtype = DType::f16, .kv_dtype = DType::f16},
        // |s| ~ 1e3 from the scale, ~1e4 from the mask.
        AttnCase{.name = "logits_1e3_scale_100", .tokens = 4, .heads = 4, .kv_heads = 2, .keys = 60, .head_dim = 128,
                 .config = {.scale = 100.0}},
        AttnCase{.name = "logits_1e4_mask", .tokens = 6, .heads = 4, .kv_heads = 2, .keys = 50, .head_dim = 64,
                 .mask = MaskKind::plus_minus, .mask_scale = 1e4f},
        // Everything at once, on f16 K/V.
        AttnCase{.name = "all_options", .tokens = 13, .heads = 8, .kv_heads = 2, .keys = 77, .head_dim = 80, .seqs = 2,
                 .config = {.window = 20u, .softcap = 30.0, .alibi = true, .sinks = kSinks8}, .kv_dtype = DType::f16,
                 .mask = MaskKind::random},
        // Many short rows: the softmax's subgroups take whole rows; keys % 4 != 0, sinks.
        AttnCase{.name = "many_rows_sinks_75_keys", .tokens = 70, .heads = 8, .kv_heads = 2, .keys = 75,
                 .head_dim = 32, .seqs = 2, .config = {.sinks = kSinks8}},
        // Long rows: the softmax cannot keep them in shared memory.
        AttnCase{.name = "decode_32768_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 32768, .head_dim = 64},
        // n_keys % 4 != 0: the element-wise paths of the softmax (two-pass) and weighted sum.
        AttnCase{.name = "decode_9001_keys", .tokens = 2, .heads = 4, .kv_heads = 1, .keys = 9001, .head_dim = 64},
        // f16 decode: 8 halves per invocation (split keys, groups of invocations over keys).
        AttnCase{.name = "decode_f16_1000_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 1000, .head_dim = 80,
                 .kv_dtype = DType::f16},
        AttnCase{.name = "decode_f16_head_dim_7", .tokens = 2, .heads = 4, .kv_heads = 2, .keys = 600, .head_dim = 7,
                 .seqs = 2, .kv_dtype = DType::f16},
        AttnCase{.name = "long_rows_window_sinks_mask", .tokens = 4, .heads = 4, .kv_heads = 1, .keys = 20000,
                 .head_dim = 64, .seqs = 2, .config = {.window = 3000u, .sinks = {1.0f, -3.0f, 0.0f, 8.0f}},
                 .mask = MaskKind::random}),
    [](const ::testing::TestParamInfo<AttnCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace vkattn::test
