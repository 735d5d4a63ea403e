// The tiled kernel (attn_tiled.comp; VKATTN_PREFILL=kernel=tiled forces it) against the CPU
// reference: every attention case under each variant (tiles as planned, with splits and
// without; a row's maximum and sum through shared memory, each tile's rows loaded only
// when it starts; 8 x 8 tiles of 2 x 4 scores per invocation; 4 x 4 tiles of one; 8 x 8
// tiles of 2 x 2),
// also at the Vulkan minimums; odd shapes (rows and keys no multiple of a tile, head_dim
// 64 to 256 and 72, quantized K and V); prefill chunks over a cache whose ring wraps, keys
// stored rotated or rotated on read; and the automatic choice on the GPU shape. Every
// suite's name holds "Tiled": `ctest -R Tiled`.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/chunked_prefill.hpp"
#include "support/compare.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

struct Variant {
  const char* name;
  const char* env;      // $VKATTN_PREFILL
  std::uint32_t units;  // compute units planned for: 1 leaves the keys whole, 2^20 splits them
};
const Variant kVariants[] = {
    {"planned", "kernel=tiled", 1},
    {"planned_split", "kernel=tiled", 1u << 20},
    {"shared_reduce_no_prefetch", "kernel=tiled,reduce=shared,prefetch=0", 1u << 20},
    {"tile_8x8_2x4", "kernel=tiled,rows=8,keys=8,rows_per_invocation=2,keys_per_invocation=4", 1},
    {"tile_4x4_1x1", "kernel=tiled,rows=4,keys=4,rows_per_invocation=1,keys_per_invocation=1", 1u << 20},
    {"tile_8x8_2x2", "kernel=tiled,rows=8,keys=8,rows_per_invocation=2,keys_per_invocation=2", 1u << 20},
};

// Shared with the program's other tests of the same knob and options, so that a suite's
// cases build each specialization once.
std::shared_ptr<Backend> tiled_backend(const char* env, const DeviceOptions& options) {
  ScopedEnv prefill("VKATTN_PREFILL", env);
  return shared_backend(BackendKind::vulkan, options);
}

DeviceOptions gpu_options(std::uint32_t units, const DeviceLimits& limits = uncapped()) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = limits;
  options.cap_limits->compute_units = units;
  return options;
}

// The list's one attention op took the tiled kernel.
bool ran_tiled(const CommandStats& stats) {
  return stats.attention.size() == 1 && stats.attention[0].kernel == AttentionKernel::tiled;
}

class TiledVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<std::tuple<AttnCase, Variant>> {};

// Every variant but the first, whose keys are left whole as 8 x 8's are (and as the odd
// shapes below take it): CI time.
const Variant kShapeVariants[] = {kVariants[1], kVariants[2], kVariants[3], kVariants[4], kVariants[5]};

TEST_P(TiledVulkanVsCpu, Matches) {
  const auto& [c, v] = GetParam();
  VKATTN_SKIP_UNLESS_PAIR_RUNS(c, v, kShapeVariants);
  auto gpu = tiled_backend(v.env, gpu_options(v.units));
  EXPECT_TRUE(ran_tiled(expect_fused_matches(*gpu, *cpu_, c))) << "the tiled kernel ran";
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

std::string tiled_name(const ::testing::TestParamInfo<std::tuple<AttnCase, Variant>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TiledVulkanVsCpu,
                         ::testing::Combine(::testing::ValuesIn(attention_cases()), ::testing::ValuesIn(kShapeVariants)),
                         tiled_name);

// The Vulkan 1.1 minimums (no subgroup operations: the shared-memory variant, which
// TiledSharedVariantAtSpecMinimum checks is the one built; 16 KiB of shared memory, where
// heads of 256 take 4 x 4 tiles; 128 invocations).
class TiledAtSpecMinimum : public TiledVulkanVsCpu {};

TEST_P(TiledAtSpecMinimum, Matches) {
  const auto& [c, v] = GetParam();
  auto gpu = tiled_backend(v.env, gpu_options(v.units, test_spec_minimum()));
  EXPECT_TRUE(ran_tiled(expect_fused_matches(*gpu, *cpu_, c))) << "the tiled kernel ran";
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

const Variant kMinimumVariants[] = {kVariants[1]};
INSTANTIATE_TEST_SUITE_P(Shapes, TiledAtSpecMinimum,
                         ::testing::Combine(::testing::ValuesIn(attention_cases()), ::testing::ValuesIn(kMinimumVariants)),
                         tiled_name);

// Without subgroup operations the tiled kernel reduces through shared memory
// (attn_tiled_shared), and the subgroup variant is never built: read from the pipelines a
// backend of its own builds (the spec-minimum suite above checks only that the tiled kernel
// ran, on a shared backend).
TEST_F(VulkanVsCpuTest, TiledSharedVariantAtSpecMinimum) {
  DeviceOptions options = gpu_options(1u << 20, test_spec_minimum());
  BuiltPipelines built;
  built.attach(options);
  ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
  auto gpu = make_backend(BackendKind::vulkan, options);
  AttnInputs in = random_inputs(37, 8, 2, 83, 64, 1, 501);
  in.config.path = AttentionPath::fused;
  CommandStats stats;
  EXPECT_TRUE(all_close(run_attention_op(*gpu, in, &stats), run_attention(*cpu_, in).out, in.out_shape(), 2e-4, 1e-4));
  EXPECT_TRUE(ran_tiled(stats));
  EXPECT_TRUE(built.any("attn_tiled_shared")) << "the shared-memory variant ran";
  EXPECT_FALSE(built.any("attn_tiled")) << "the subgroup variant was built";
  EXPECT_TRUE(gpu->validation_messages().empty());
}

// Rows and keys no multiple of any tile (37 tokens x 4 heads per KV head, 83 keys), every
// head_dim a model uses up to 256 and an odd one (72), each K/V type, causal and not.
TEST_F(VulkanVsCpuTest, TiledOddShapes) {
  for (const Variant& v : {kVariants[0], kVariants[2]}) {
    auto gpu = tiled_backend(v.env, gpu_options(v.units));
    std::uint32_t seed = 500;
    for (std::size_t d : {64u, 72u, 80u, 96u, 112u, 128u, 256u}) {
      for (DType dtype : {DType::f32, DType::f16, DType::q8_0, DType::q4_0}) {
        if (d % 32 != 0 && (dtype == DType::q8_0 || dtype == DType::q4_0)) continue;  // whole blocks
        AttnInputs in = random_inputs(37, 8, 2, 83, d, 1, ++seed, 46);
        in.kv_dtype = dtype;
        in.config.path = AttentionPath::fused;
        in.config.causal = seed % 2 == 0;
        const std::vector<float> want = run_attention(*cpu_, in).out;
        CommandStats stats;
        EXPECT_TRUE(all_close(run_attention_op(*gpu, in, &stats), want, in.out_shape(), 2e-4, 1e-4))
            << v.name << ": head_dim " << d << ", " << to_string(dtype) << (in.config.causal ? ", causal" : "");
        EXPECT_TRUE(ran_tiled(stats)) << v.name << ": head_dim " << d << ", " << to_string(dtype);
      }
    }
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// Prefill chunks over a cache of 2 sinks and a ring of 38 slots under a window of 16: the
// second chunk wraps the ring, so tiles of keys straddle its end and hold slots no query
// sees. Keys stored rotated
// (the chunk's own keys appended first) and rotated on read; f16 and q8_0; against the CPU
// backend's cache.
TEST_F(VulkanVsCpuTest, TiledPrefillOverAWrappedRing) {
  for (const Variant& v : {kVariants[1], kVariants[4]}) {
    auto gpu = tiled_backend(v.env, gpu_options(v.units));
    for (KvRope rope : {KvRope::stored, KvRope::on_read}) {
      for (DType dtype : {DType::f16, DType::q8_0}) {
        prefill_in_chunks_over_a_wrapping_ring(*gpu, *cpu_, rope, dtype, AttentionPrecision::f32, 40, [&](const PrefillChunk& c) {
          EXPECT_TRUE(all_close(c.got, c.want, c.out_shape(), 2e-4, 1e-4))
              << v.name << ", " << (rope == KvRope::on_read ? "on_read" : "stored") << ", " << to_string(dtype) << ": chunk at "
              << c.at;
          EXPECT_TRUE(ran_tiled(c.stats)) << v.name << ": chunk at " << c.at;
        });
      }
    }
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// Left to choose on the GPU shape, prefill (1,024 rows per KV head) takes the tiled kernel,
// decode (4 rows) the decode kernel, and VKATTN_PREFILL=kernel=lane_per_key the kernel
// before it; all agree with the CPU.
TEST_F(VulkanVsCpuTest, TiledIsChosenForPrefillOnTheGpuShape) {
  AttnInputs prefill = random_inputs(256, 8, 2, 512, 64, 1, 96);
  prefill.kv_dtype = DType::f16;
  AttnInputs decode = random_inputs(1, 8, 2, 600, 64, 1, 95);
  const std::vector<float> want_prefill = run_attention(*cpu_, prefill).out, want_decode = run_attention(*cpu_, decode).out;
  for (const char* env : {"", "kernel=lane_per_key"}) {
    auto gpu = tiled_backend(env, gpu_options(30));
    CommandStats stats;
    EXPECT_TRUE(all_close(run_attention_op(*gpu, prefill, &stats), want_prefill, prefill.out_shape(), 2e-4, 1e-4)) << env;
    const bool tiled = env[0] == '\0';
    ASSERT_EQ(stats.attention.size(), 1u);
    EXPECT_EQ(stats.attention[0].kernel, tiled ? AttentionKernel::tiled : AttentionKernel::lane_per_key)
        << (tiled ? "automatic" : env) << ": " << to_string(stats.attention[0].kernel) << " ran";
    EXPECT_TRUE(all_close(run_attention_op(*gpu, decode, &stats), want_decode, decode.out_shape(), 2e-4, 1e-4)) << env;
    ASSERT_EQ(stats.attention.size(), 1u);
    EXPECT_EQ(stats.attention[0].kernel, AttentionKernel::decode) << "decode takes the decode kernel";
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

// $VKATTN_PREFILL is read when a backend is made; a malformed one is refused by name, and a
// tile the device cannot hold is refused when the op is recorded.
TEST(TiledTuning, MalformedKnobsAreRefused) {
  expect_knobs_refused("VKATTN_PREFILL", {"kernel", "kernel=fast", "rows=3", "keys=128", "rows_per_invocation=16", "reduce=x",
                                          "prefetch=2", "unknown=1"});
}

// A tile asked for that the device cannot hold (64 x 64 invocations) is refused with
// Unsupported naming the knob, not left to another kernel, whether forced or not.
TEST_F(VulkanVsCpuTest, TiledRefusesATileThatDoesNotFit) {
  AttnInputs prefill = random_inputs(256, 8, 2, 256, 32, 1, 97);
  for (const char* env : {"rows=64,keys=64,rows_per_invocation=1,keys_per_invocation=1",
                          "kernel=tiled,rows=64,keys=64,rows_per_invocation=1,keys_per_invocation=1"}) {
    auto gpu = tiled_backend(env, gpu_options(30));
    try {
      run_attention_op(*gpu, prefill);
      ADD_FAILURE() << env << " was run";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("VKATTN_PREFILL"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace vkattn::test
