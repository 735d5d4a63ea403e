// Attention, Vulkan against the CPU reference: shapes and options chosen to break kernels
// (odd sizes, GQA, head_dims real models use, masks, soft-capping, ALiBi, sinks, f16,
// huge logits, long rows), each also at the Vulkan spec-minimum limits, and the weighted
// sum's split-keys path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

class AttentionVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<AttnCase> {};

void expect_matches(Backend& gpu, Backend& cpu, const AttnCase& c) {
  const CpuSide& side = cpu_side(cpu, c);  // kept for the case's other tests
  const AttnInputs& in = side.in;
  const AttnOutputs& want = side.want;
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
  const double s_atol = 1e-4 + 2e-6 * side.score_mag;
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
  EXPECT_TRUE(all_close(chained.out, want.out, in.out_shape(), o_atol + (spread + 1e-5) * max_abs(in.v), 1e-4)) << "out, chained";
}

TEST_P(AttentionVulkanVsCpu, Matches) { expect_matches(*gpu_, *cpu_, GetParam()); }

// The same at the Vulkan 1.1 minimums (16 KiB shared memory, 128 invocations, no subgroup
// operations, staging copies): other tiles, shared-memory reductions, rows outside shared memory.
TEST_P(AttentionVulkanVsCpu, MatchesAtSpecMinimumLimits) {
  DeviceOptions options = test_options();
  options.cap_limits = test_spec_minimum();
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
  EXPECT_EQ(split(1, 300), 1u);  // too few keys to be worth a second pass
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
  for (std::size_t i = 0; i < 2; ++i) EXPECT_TRUE(all_close(results[0][i], results[1][i], {1, 8, 64}, 1e-5, 1e-5)) << "sum " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionVulkanVsCpu, ::testing::ValuesIn(attention_cases()), case_name);

}  // namespace
}  // namespace vkattn::test
