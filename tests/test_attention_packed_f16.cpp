// AttentionPrecision::f16_products off the matrix units: the packed f16 variants of the
// tiled kernel (attn_tiled_f16, attn_tiled_shared_f16) and of the group kernel
// (attn_decode_group_f16): Q.K and P.V as f16vec2 FMAs in chains of at most 8, f32
// softmax, sums and output, on a device with shaderFloat16 (lavapipe has it), against the
// CPU backend's rounded-inputs oracle, its f32 reference and an RMS bound
// (support/f16_match.hpp, widened by the chains as docs/attention.md derives): cases of
// every feature at the device's limits and at the spec minimums' (shaderFloat16 kept);
// caches of every K/V dtype (f32, f16, q8_0, q4_0), stored rotated and rotated on read,
// over a ring that wraps under a window, through both kernels; NaN in keys no row sees; the
// exact kernels where shaderFloat16 is capped away, under VKATTN_PACKED_F16=off and under
// f32, and the exact group kernel unless VKATTN_DECODE=packed=1; a malformed knob. Every
// suite's name holds "PackedF16": `ctest -R PackedF16`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/chunked_prefill.hpp"
#include "support/compare.hpp"
#include "support/f16_match.hpp"
#include "support/fused_match.hpp"
#include "support/matrix_runs.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

// The tiled kernel forced on the GPU shape, at the device's limits or the spec minimums'
// (no subgroups: the shared-memory variant; 16 KiB; 128 invocations) with shaderFloat16
// kept; the keys left whole (one compute unit) or split (2^20).
DeviceOptions packed_options(bool minimum, std::uint32_t units, const Built& built) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.submit_timeout_ms = 600000;  // llvmpipe compiles at the first dispatch
  options.cap_limits = minimum ? test_spec_minimum() : uncapped();
  options.cap_limits->shader_float16 = true;
  options.cap_limits->compute_units = units;
  built.attach(options);
  return options;
}

bool ran(const Built& built, const std::string& kernel) {
  for (const std::string& l : *built.lines) {
    if (l.rfind("built pipeline " + kernel + " ", 0) == 0) return true;
  }
  return false;
}
double max_row_norm(const std::vector<float>& x, std::size_t dim) {
  double most = 0;
  for (std::size_t r = 0; r < x.size() / dim; ++r) {
    double s = 0;
    for (std::size_t e = 0; e < dim; ++e) s += double{x[r * dim + e]} * x[r * dim + e];
    most = std::max(most, std::sqrt(s));
  }
  return most;
}

bool ran_packed(const Built& built) { return ran(built, "attn_tiled_f16") || ran(built, "attn_tiled_shared_f16"); }
bool ran_packed_group(const Built& built) { return ran(built, "attn_decode_group_f16"); }
bool ran_exact(const Built& built) { return ran(built, "attn_tiled") || ran(built, "attn_tiled_shared"); }

struct Limits {
  const char* name;
  bool minimum;
  std::uint32_t units;
  const char* prefill = "kernel=tiled";  // $VKATTN_PREFILL for the tiled kernel
};

class PackedF16Tiled : public ::testing::TestWithParam<std::tuple<AttnCase, Limits>> {
 protected:
  void SetUp() override { cpu_ = make_backend(BackendKind::cpu); }
  std::unique_ptr<Backend> cpu_;
};

TEST_P(PackedF16Tiled, Matches) {
  const auto& [c, lim] = GetParam();
  ScopedEnv prefill("VKATTN_PREFILL", c.head_dim <= 128 ? lim.prefill : "kernel=tiled");
  Built built;
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, packed_options(lim.minimum, lim.units, built), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  const AttnInputs in = case_inputs(c);
  expect_f16_matches(*cpu_, in, run_f16(*gpu, in), c.name, kPackedChain);
  EXPECT_TRUE(ran_packed(built)) << "the packed kernel ran";
  EXPECT_FALSE(ran_exact(built)) << "an exact tiled kernel ran";
  for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
}

// Few of attention_cases() (CI time: each is a pipeline or more llvmpipe compiles), chosen
// for what they reach: many tiles under causal masking, heads whose vec4s are no multiple
// of a chain (24, 7) and the widest (256), f16 Q and K/V, GQA, two sequences under a
// window, soft-capped scores of N(0, 3) inputs (the chains' largest sums), chunks, and
// everything at once (a mask, ALiBi, sinks, soft-capping, a window, f16 K/V); at the spec
// minimums three of them.
std::vector<AttnCase> packed_cases() {
  return cases_named({"prefill_200_causal", "odd_17_tokens_37_keys", "odd_head_dim_7_f16", "gqa_8", "head_dim_256",
                      "window_16_two_sequences", "softcap", "all_options", "Chunked_16_prefill"});
}

std::string packed_name(const ::testing::TestParamInfo<std::tuple<AttnCase, Limits>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

// As planned (64 x 8 tiles at head_dim 128: one chain of P.V a tile), and 16 x 16 tiles of
// 1 x 2 (two chains; heads up to 128, in lavapipe's 32 KiB) with the keys split as far as
// they go.
const Limits kLimits[] = {
    {"device", false, 1},
    {"split_16x16", false, 1u << 20, "kernel=tiled,rows=16,keys=16,rows_per_invocation=1,keys_per_invocation=2"}};
INSTANTIATE_TEST_SUITE_P(Cases, PackedF16Tiled,
                         ::testing::Combine(::testing::ValuesIn(packed_cases()), ::testing::ValuesIn(kLimits)), packed_name);
const Limits kMinimum[] = {{"minimum", true, 1}};
INSTANTIATE_TEST_SUITE_P(Minimum, PackedF16Tiled,
                         ::testing::Combine(::testing::ValuesIn(cases_named({"prefill_200_causal", "head_dim_256",
                                                                             "all_options"})),
                                            ::testing::ValuesIn(kMinimum)),
                         packed_name);

// The group kernel (attn_decode_group_f16) forced on the GPU shape: at the device's limits,
// and at the spec minimums' shared memory (16 KiB) and invocations (128) with its subgroups
// kept (it needs shuffles).
class PackedF16Group : public PackedF16Tiled {};

TEST_P(PackedF16Group, Matches) {
  const auto& [c, lim] = GetParam();
  ScopedEnv decode("VKATTN_DECODE", "kernel=group,packed=1");
  Built built;
  DeviceOptions options = packed_options(false, lim.units, built);
  if (lim.minimum) {
    options.cap_limits->max_shared_memory = 16384;
    options.cap_limits->max_workgroup_invocations = 128;
    options.cap_limits->max_workgroup_size = {128, 128, 64};
  }
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  VKATTN_REQUIRE_EIGHT_LANES(*gpu, "the group kernel");
  const AttnInputs in = case_inputs(c);
  expect_f16_matches(*cpu_, in, run_f16(*gpu, in), c.name, kPackedChain);
  EXPECT_TRUE(ran_packed_group(built)) << "the packed group kernel ran";
  EXPECT_FALSE(ran(built, "attn_decode_group")) << "the exact group kernel ran";
  for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
}

// Decode of three sequences, GQA of 8, heads of 7 (one vec4 pair per lane) and 256, f16
// inputs with everything at once, sinks, soft-capping, and 2000 keys in chunks.
std::vector<AttnCase> group_cases() {
  std::vector<AttnCase> cases = cases_named({"decode_3_sequences", "gqa_8", "odd_head_dim_7_f16", "head_dim_256", "all_options",
                                             "sinks", "softcap", "Chunked_300_decode_2000_keys"});
  // Heads as wide as absorbed MLA's over 4k keys: on lavapipe the host splits the keys below
  // llvmpipe's loop limit, which stops a loop silently past 65,535 iterations.
  cases.push_back(
      AttnCase{.name = "head_dim_576_4096_keys", .tokens = 1, .heads = 16, .kv_heads = 1, .keys = 4096, .head_dim = 576});
  return cases;
}

const Limits kGroupLimits[] = {{"device", false, 1}, {"minimum_split", true, 1u << 20}};
INSTANTIATE_TEST_SUITE_P(Cases, PackedF16Group,
                         ::testing::Combine(::testing::ValuesIn(group_cases()), ::testing::ValuesIn(kGroupLimits)), packed_name);

class PackedF16VsCpu : public VulkanVsCpuTest {};

// Where the packed kernels may not run, the exact ones do (more precise than asked): a
// device capped to no shaderFloat16, VKATTN_PACKED_F16=off, and f32 itself.
TEST_F(PackedF16VsCpu, ExactKernelsWherePackedIsOff) {
  ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
  const AttnInputs in = case_inputs(attention_cases()[1]);  // prefill_200_causal
  AttnInputs exact = in;
  exact.config.path = AttentionPath::fused;
  const std::vector<float> want = run_attention_op(*cpu_, exact);
  for (const char* how : {"capped", "knob", "f32"}) {
    ScopedEnv knob("VKATTN_PACKED_F16", std::string(how) == "knob" ? "off" : "auto");
    Built built;
    DeviceOptions options = packed_options(false, 1, built);
    options.cap_limits->shader_float16 = std::string(how) != "capped";
    auto gpu = make_backend(BackendKind::vulkan, options);
    AttnInputs run = in;
    run.config.path = AttentionPath::fused;
    run.config.precision = std::string(how) == "f32" ? AttentionPrecision::f32 : AttentionPrecision::f16_products;
    EXPECT_TRUE(all_close(run_attention_op(*gpu, run), want, in.out_shape(), 2e-4, 1e-4)) << how << ": an f32 kernel ran";
    EXPECT_FALSE(ran_packed(built)) << how;
    EXPECT_TRUE(ran_exact(built)) << how;
    EXPECT_TRUE(gpu->validation_messages().empty()) << how;
  }
}

// The group kernel takes f16_products exactly (attn_decode_group) unless
// VKATTN_DECODE=packed=1 asks for its packed variant: the exact one ran absorbed MLA 2.4x
// faster on an H200. Either way within the mode's bounds.
TEST_F(PackedF16VsCpu, GroupKernelPackedOnlyWhenAsked) {
  const AttnInputs in = case_inputs(cases_named({"gqa_8"})[0]);
  const std::pair<const char*, bool> runs[] = {{"kernel=group", false}, {"kernel=group,packed=1", true}};
  for (const auto& [env, asked] : runs) {
    ScopedEnv decode("VKATTN_DECODE", env);
    Built built;
    std::string why;
    auto gpu = try_own_backend(BackendKind::vulkan, packed_options(false, 1, built), why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    VKATTN_REQUIRE_EIGHT_LANES(*gpu, "the group kernel");
    expect_f16_matches(*cpu_, in, run_f16(*gpu, in), env, kPackedChain);
    EXPECT_EQ(ran_packed_group(built), asked) << env;
    EXPECT_EQ(ran(built, "attn_decode_group"), !asked) << env;
  }
}

TEST_F(PackedF16VsCpu, MalformedKnobIsRefused) {
  ScopedEnv knob("VKATTN_PACKED_F16", "on");
  try {
    make_backend(BackendKind::vulkan, test_options());
    ADD_FAILURE() << "VKATTN_PACKED_F16=on was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("VKATTN_PACKED_F16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("automatic (or auto) or off"), std::string::npos) << e.what();
  }
}

// Keys no row sees may hold NaN (a stale slot): staged as zeros, never loaded, so no 0 x
// NaN reaches a product. Causal prefill of 20 tokens over 48 keys whose K and V past
// position 19 are NaN.
TEST_F(PackedF16VsCpu, NaNInKeysNoRowSeesStaysOut) {
  ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
  Built built;
  auto gpu = make_backend(BackendKind::vulkan, packed_options(false, 1, built));
  const AttnInputs in = nan_in_unseen_keys_inputs();
  const std::vector<float> got = run_f16(*gpu, in);
  EXPECT_TRUE(all_close(got, run_f16(*cpu_, in), in.out_shape(), 1e-2, 1e-3));
  EXPECT_TRUE(ran_packed(built));
  EXPECT_TRUE(gpu->validation_messages().empty());
}

// Runs |f|(gpu, group) through the tiled kernel, then the group kernel's packed variant
// (where the subgroups are wide enough), each forced, and checks that the packed kernel
// ran, with no validation message.
template <class F>
void on_both_packed_kernels(F f) {
  for (const bool group : {false, true}) {
    SCOPED_TRACE(group ? "group kernel" : "tiled kernel");
    ScopedEnv knob(group ? "VKATTN_DECODE" : "VKATTN_PREFILL", group ? "kernel=group,packed=1" : "kernel=tiled");
    Built built;
    auto gpu = make_backend(BackendKind::vulkan, packed_options(false, 1, built));
    if (group) VKATTN_REQUIRE_EIGHT_LANES(*gpu, "the group kernel");  // the last pass: the tiled one ran
    f(*gpu, group);
    EXPECT_TRUE(group ? ran_packed_group(built) : ran_packed(built));
    EXPECT_TRUE(gpu->validation_messages().empty());
  }
}

// Weights are at most 1, so a chain of 8 weighted V rows reaches f16's 65504 from |v| of
// about 8192: equal scores (q = 0) over V near 9000, through both packed kernels (a chain
// that overflows is summed again in f32; the group kernel's stages holding such values
// take chains of one key), against the f32 reference. Both gave inf before.
TEST_F(PackedF16VsCpu, LargeValuesDoNotOverflowTheChains) {
  on_both_packed_kernels([&](Backend& gpu, bool group) {
    AttnInputs in = random_inputs(group ? 4 : 20, 8, 2, 48, 64, 1, 83);
    std::fill(in.q.begin(), in.q.end(), 0.0f);
    for (float& v : in.v) v = 9000.0f + 100.0f * v;
    const std::vector<float> got = run_f16(gpu, in);
    // One f16 ulp of the values (8 near 9000), no relative part: the outputs (means of
    // rows of V) spread only about 100 around 9000, and a chain of 8 keys lost moves a
    // mean by more (2.6 seen at most on lavapipe).
    EXPECT_TRUE(all_close(got, run_attention_op(*cpu_, in), in.out_shape(), 8.0, 0.0));
  });
}

// Under a small scale, queries and keys of a few thousand give moderate scores: here
// |q|, |k| about 2000 (f16 holds them) and a scale of 3e-8 give scores near N(0, 1). Staging the
// queries alone times 2^-8 left chains of 16 products near 2000^2 / 256 each, past 65504:
// the tiled kernel gave zeros, the group kernel NaN. The keys now take the rest of the
// scale's power of two (down to 2^-16 in all), and both match the oracle within the
// packed bounds.
TEST_F(PackedF16VsCpu, SmallScalesDoNotOverflowTheChains) {
  on_both_packed_kernels([&](Backend& gpu, bool group) {
    AttnInputs in = random_inputs(group ? 4 : 20, 8, 2, 48, 64, 1, 85, 0, 2000.0f);
    in.config.scale = 1.0f / (2000.0f * 2000.0f * 8.0f);
    expect_f16_matches(*cpu_, in, run_f16(gpu, in), group ? "group" : "tiled", kPackedChain);
  });
}

// Prefill chunks over caches of every K/V dtype with GQA, through the tiled kernel and the
// group kernel: a ring of 38 slots that wraps
// under a window of 16 (tiles straddle its end and hold slots no query sees); f32 and q4_0
// keys stored rotated, f16 and q8_0 keys rotated on read. Against the CPU cache's oracle
// (which rounds what it holds) within the packed bound for these magnitudes.
class PackedF16Caches : public ::testing::TestWithParam<bool> {  // the group kernel, else the tiled
 protected:
  void SetUp() override { cpu_ = make_backend(BackendKind::cpu); }
  std::unique_ptr<Backend> cpu_;
};

TEST_P(PackedF16Caches, EveryDtype) {
  const bool group = GetParam();
  ScopedEnv knob(group ? "VKATTN_DECODE" : "VKATTN_PREFILL", group ? "kernel=group,packed=1" : "kernel=tiled");
  Built built;
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, packed_options(false, 1, built), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  if (group) VKATTN_REQUIRE_EIGHT_LANES(*gpu, "the group kernel");
  for (const auto& [rope, dtype] : {std::pair{KvRope::stored, DType::f32}, std::pair{KvRope::on_read, DType::f16},
                                    std::pair{KvRope::on_read, DType::q8_0}, std::pair{KvRope::stored, DType::q4_0}}) {
    double k_norm = 0, v_max = 0;  // over the chunks so far: the window reaches back into them
    const std::string what = std::string(rope == KvRope::on_read ? "on_read, " : "stored, ") + to_string(dtype);
    prefill_in_chunks_over_a_wrapping_ring(
        *gpu, *cpu_, rope, dtype, AttentionPrecision::f16_products, 60, [&](const PrefillChunk& c) {
          // sum_d |q_d k_d| <= |q| |k| (Cauchy-Schwarz; rotation keeps the norms; q4_0's
          // dequantized rows are within a quarter of the originals' norms), then f16_bounds'
          // rounded-inputs bound with the chains.
          k_norm = std::max(k_norm, 1.25 * max_row_norm(c.k, kPrefillDim));
          v_max = std::max(v_max, 1.25 * max_abs(c.v));
          const double score_mag = max_row_norm(c.q, kPrefillDim) * k_norm / std::sqrt(double{kPrefillDim});
          const F16Bounds b = f16_bounds(score_mag, v_max, rms(c.v), false, true, kPackedChain);
          EXPECT_TRUE(all_close(c.got, c.want, c.out_shape(), b.near + 1e-3, 1e-3)) << what << ": chunk at " << c.at;
          EXPECT_LE(rms_difference(c.got, c.want), b.rms) << what << ": RMS, chunk at " << c.at;
        });
  }
  EXPECT_TRUE(group ? ran_packed_group(built) : ran_packed(built));
  EXPECT_FALSE(ran_exact(built) || ran(built, "attn_decode_group"));
  EXPECT_TRUE(gpu->validation_messages().empty());
}

INSTANTIATE_TEST_SUITE_P(Kernels, PackedF16Caches, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "group" : "tiled"; });

}  // namespace
}  // namespace vkattn::test
