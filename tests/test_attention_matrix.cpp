// AttentionPrecision::f16_products and the matrix kernel (attn_mt.comp) through the
// matrix-tile layer's stand-in (VKATTN_MATRIX=standin), against the CPU backend with the
// tolerances of support/f16_match.hpp: every attention case at the device's limits and at
// the spec minimums' shared memory and invocations (subgroups kept: the stand-in needs
// them); the f32 kernels where the stand-in declines (no subgroups) and by default; the
// CPU backend's rounded-inputs oracle; the stage ops' refusal of the mode; NaN in keys no
// row sees; a replayed decode step; a cache whose keys are rotated on read or quantized;
// the GPU probe's matrix_skip parts. The last four, the row split's variants and attn_mt2's
// tiles run on the matrix units too (CoopmatUnitsVsCpu, where the device has them).
// Every suite's name holds "Coopmat": `ctest -R Coopmat`.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <set>
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

struct Limits {
  const char* name;
  bool minimum;
};

class CoopmatStandin : public ::testing::TestWithParam<std::tuple<AttnCase, Limits>> {
 protected:
  void SetUp() override { cpu_ = make_backend(BackendKind::cpu); }
  std::unique_ptr<Backend> cpu_;
};

// The stand-in forced: each case within the f16 tolerances, the matrix kernel run (head
// widths whose tiles do not fit 16 KiB, and subgroups under 8 lanes, take the f32
// kernels). The backends are shared by the suite's cases (each kernel specialization built
// once in a process), so the kernel that ran comes from the list's stats and the mapping
// from the pipelines built for the case's head width.
const Limits kLimits[] = {{"device", false}, {"minimum", true}};

TEST_P(CoopmatStandin, Matches) {
  const auto& [c, lim] = GetParam();
  VKATTN_SKIP_UNLESS_PAIR_RUNS(c, lim, kLimits);
  ScopedEnv matrix("VKATTN_MATRIX", "standin");
  Built built;
  std::string why;
  auto gpu = shared_matrix_backend(lim.minimum, built, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  const AttnInputs in = case_inputs(c);
  CommandStats stats;
  expect_f16_matches(*cpu_, in, run_f16(*gpu, in, &stats), c.name);
  const bool fits = (!lim.minimum || c.head_dim <= 128) && kernel_lanes(*gpu) >= 8;
  ASSERT_EQ(stats.attention.size(), 1u);
  EXPECT_EQ(stats.attention[0].kernel == AttentionKernel::matrix_standin, fits)
      << "the matrix kernel ran: " << to_string(stats.attention[0].kernel);
  // Heads up to 128 wide take the row split; 256 the dim split (10 rows: one row group
  // over 4 subgroups, 2 with 64-lane subgroups).
  if (fits) {
    const unsigned slices = c.head_dim <= 128 ? 1 : matrix_lanes(*gpu) > 32 ? 2 : 4;
    EXPECT_EQ(built.dim_slices(c.head_dim), std::set<unsigned>{slices}) << "the mapping";
  }
  expect_no_validation_messages(*gpu);
}

std::string standin_name(const ::testing::TestParamInfo<std::tuple<AttnCase, Limits>>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, CoopmatStandin,
                         ::testing::Combine(::testing::ValuesIn(attention_cases()), ::testing::ValuesIn(kLimits)), standin_name);

class CoopmatVsCpu : public VulkanVsCpuTest {};

// The matrix kernel's variants a GPU run compares ($VKATTN_PREFILL's matrix_* knobs,
// gpu.md): the row split's queries held as A tiles in registers (the planned shapes, whose
// 64 x 32 tiles then fit), one row group over 64-key tiles, and the next tile's K and V
// loaded into registers during a tile (with the dim split too, at head_dim 256), and a
// tile's loads all issued before any is stored; each within the f16 tolerances, with the
// mapping asked. Through the stand-in, or on the |units| (the forms a GPU probe times).
void row_split_variants(Backend& cpu, bool units) {
  struct Variant {
    const char* knobs;
    std::set<unsigned> key_chunks;  // at head_dim 64 and 80 (padded to 128) in lavapipe's 32 KiB
    unsigned prefetch;
    unsigned batch = 0;
  };
  const Variant variants[] = {{"matrix_queries=registers", {2, 1}, 0},
                              {"matrix_rows=16,matrix_keys=64,matrix_queries=registers", {4}, 0},
                              {"matrix_queries=registers,matrix_prefetch=1", {2, 1}, 1},
                              {"matrix_queries=registers,matrix_stage=batch", {2, 1}, 0, 1}};
  ScopedEnv matrix("VKATTN_MATRIX", units ? "on" : "standin");
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.knobs);
    // On the units attn_mt's variants: attn_mt2 takes none of these knobs' meanings.
    ScopedEnv prefill("VKATTN_PREFILL", std::string(units ? "matrix_nv2=0," : "") + v.knobs);
    Built built;
    std::string why;
    std::unique_ptr<Backend> gpu = matrix_backend(matrix_options(false, built), units, why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    VKATTN_REQUIRE_MATRIX_KERNELS(*gpu, units);
    std::vector<AttnCase> cases = cases_named({"many_rows_sinks_75_keys", "all_options"});
    if (v.prefetch) cases.push_back(cases_named({"head_dim_256"})[0]);  // the dim split's mapping too
    for (const AttnCase& c : cases) {
      const AttnInputs in = case_inputs(c);
      expect_f16_matches(cpu, in, run_f16(*gpu, in), c.name);
    }
    const std::set<unsigned> slices =
        v.prefetch ? std::set<unsigned>{1, matrix_lanes(*gpu, units) > 32 ? 2u : 4u} : std::set<unsigned>{1};
    EXPECT_EQ(built.dim_slices(units), slices) << "the mappings";
    if (!v.prefetch) {
      EXPECT_EQ(built.spec(19, 0, units), std::set<unsigned>{1}) << "queries in registers (VKATTN_SPEC_MT_Q_REGS)";
      EXPECT_EQ(built.spec(4, 0, units), v.key_chunks) << "16-key chunks a tile (VKATTN_SPEC_MT_KEY_CHUNKS)";
    }
    EXPECT_EQ(built.spec(20, 0, units), std::set<unsigned>{v.prefetch}) << "VKATTN_SPEC_MT_PREFETCH";
    EXPECT_EQ(built.spec(22, 0, units), std::set<unsigned>{v.batch}) << "VKATTN_SPEC_MT_STAGE_BATCH";
    for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
}

TEST_F(CoopmatVsCpu, RowSplitVariantsFromTheKnob) { row_split_variants(*cpu_, false); }

// The same on the matrix units, where the device has them (as Cases/CoopmatUnits).
class CoopmatUnitsVsCpu : public VulkanVsCpuTest {};
TEST_F(CoopmatUnitsVsCpu, RowSplitVariantsFromTheKnob) { row_split_variants(*cpu_, true); }

// The probe's parts left out (VKATTN_PREFILL=matrix_skip, gpu.md): the pipeline built with
// those MT_SKIP bits, and what each leaves is what it should: no K and V loads, or no
// products, leave O exactly zero; marks kept from a split's first tile change nothing
// where every tile's keys are all visible (not causal, 128 keys in tiles of 16 or 32);
// the scalar pass left out only runs. Bad values are refused when the backend is made.
// Through the stand-in, or on the |units| (where the probe runs them).
void probe_skips(Backend& cpu, bool units) {
  ScopedEnv matrix("VKATTN_MATRIX", units ? "on" : "standin");
  const AttnCase open{.name = "open_128_keys",
                      .tokens = 40,
                      .heads = 8,
                      .kv_heads = 2,
                      .keys = 128,
                      .head_dim = 64,
                      .config = {.causal = false},
                      .kv_dtype = DType::f16};
  const AttnInputs in = case_inputs(open);
  const struct {
    const char* skip;
    unsigned bits;
  } skips[] = {{"none", 0}, {"loads", 1}, {"products", 4}, {"marks", 8}, {"scalar+loads", 3}};
  for (const auto& k : skips) {
    SCOPED_TRACE(k.skip);
    ScopedEnv prefill("VKATTN_PREFILL", std::string("matrix_skip=") + k.skip);
    Built built;
    std::string why;
    std::unique_ptr<Backend> gpu = matrix_backend(matrix_options(false, built), units, why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    VKATTN_REQUIRE_MATRIX_KERNELS(*gpu, units);
    const std::vector<float> got = run_f16(*gpu, in);
    EXPECT_EQ(built.spec(21, 0, units), std::set<unsigned>{k.bits}) << "VKATTN_SPEC_MT_SKIP";
    if (k.bits == 1 || k.bits == 4) {
      EXPECT_EQ(got, std::vector<float>(got.size(), 0.0f)) << "O without loads or products (NaN included)";
    } else if (k.bits == 0 || k.bits == 8) {
      expect_f16_matches(cpu, in, got, open.name);
    }
    for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
  expect_knobs_refused("VKATTN_PREFILL", {"matrix_skip=loads+loads", "matrix_skip=all", "matrix_skip=", "matrix_skip=marks+"});
}

TEST_F(CoopmatVsCpu, ProbeSkipsWhatItNames) { probe_skips(*cpu_, false); }
TEST_F(CoopmatUnitsVsCpu, ProbeSkipsWhatItNames) { probe_skips(*cpu_, true); }

// attn_mt2's tiles and staging from the knobs the probe times (rows x keys; prefetch;
// a tile's loads all issued first), each within the f16 tolerances, on attn_mt2 with the
// tile asked; where the device has NV cooperative matrices 2 (required so under
// VKATTN_TEST_REQUIRE_NV2=1). Each variant runs one of two cases, in turn: lavapipe 26.1
// compiles an attn_mt2 pipeline in about 70 s, and both cases under every variant took
// this test to 590 s on a machine that had not run it before.
TEST_F(CoopmatUnitsVsCpu, Nv2TilesFromTheKnob) {
  struct Variant {
    const char* knobs;
    unsigned row_groups, key_chunks;  // the tile asked (0: as planned, per case)
    unsigned prefetch, batch;
  };
  const Variant variants[] = {{"", 0, 0, 0, 0},
                              {"matrix_rows=32,matrix_keys=16", 2, 1, 0, 0},
                              {"matrix_rows=16,matrix_keys=32", 1, 2, 0, 0},
                              {"matrix_prefetch=1", 0, 0, 1, 0},
                              {"matrix_stage=batch", 0, 0, 0, 1}};
  const std::vector<AttnCase> cases = cases_named({"many_rows_sinks_75_keys", "all_options"});
  ScopedEnv matrix("VKATTN_MATRIX", "on");
  for (std::size_t i = 0; i < std::size(variants); ++i) {
    const Variant& v = variants[i];
    const AttnCase& c = cases[i % cases.size()];
    SCOPED_TRACE(std::string(v.knobs) + " on " + c.name);
    ScopedEnv prefill("VKATTN_PREFILL", v.knobs);
    Built built;
    std::string why;
    std::unique_ptr<Backend> gpu = units_backend(matrix_options(false, built), why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    VKATTN_REQUIRE_MATRIX_UNITS(*gpu);
    const AttnInputs in = case_inputs(c);
    expect_f16_matches(*cpu_, in, run_f16(*gpu, in), c.name);
    if (!built.nv2()) {
      EXPECT_TRUE(built.matrix_line("matrix units: attn_mt (not attn_mt2: ")) << "the info line saying why not";
      if (env_is("VKATTN_TEST_REQUIRE_NV2", "1")) FAIL() << "attn_mt2 did not run";
      GTEST_SKIP() << gpu->device_name() << " has no NV cooperative matrices 2";
    }
    EXPECT_TRUE(built.matrix_line("matrix units: attn_mt2 (NV cooperative matrices 2) where planned")) << "the info line";
    if (v.row_groups) {
      EXPECT_EQ(built.spec(3, 0, true), std::set<unsigned>{v.row_groups}) << "row groups (VKATTN_SPEC_MT_SUBGROUPS)";
      EXPECT_EQ(built.spec(4, 0, true), std::set<unsigned>{v.key_chunks}) << "16-key chunks (VKATTN_SPEC_MT_KEY_CHUNKS)";
    }
    EXPECT_EQ(built.spec(20, 0, true), std::set<unsigned>{v.prefetch}) << "VKATTN_SPEC_MT_PREFETCH";
    EXPECT_EQ(built.spec(22, 0, true), std::set<unsigned>{v.batch}) << "VKATTN_SPEC_MT_STAGE_BATCH";
    for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
}

// The full Vulkan minimums (no subgroup operations): the stand-in declines and the f32
// kernels run, within the f16 tolerances (more precise than asked). Left to choose, the
// stand-in never runs on lavapipe: VKATTN_MATRIX=auto finds no matrix units, and =on
// dispatches no cooperative-matrix kernel on a device without the extension; an f32 kernel
// runs on lavapipe's CPU shape, the packed f16 tiled kernel on the GPU shape
// (VKATTN_KERNELS=gpu) where the device has shaderFloat16.
TEST_F(CoopmatVsCpu, FallsBackToTheF32Kernels) {
  const AttnInputs in = case_inputs(attention_cases()[1]);  // prefill_200_causal
  for (const char* mode : {"standin", "auto", "on", "off"}) {
    ScopedEnv matrix("VKATTN_MATRIX", mode);
    Built built;
    DeviceOptions options = test_options();
    options.cap_limits = mode[0] == 's' ? test_spec_minimum() : uncapped();
    built.attach(options);
    on_vulkan(options, [&](Backend& gpu) {
      CommandStats stats;
      const std::vector<float> got = run_f16(gpu, in, &stats);
      expect_f16_matches(*cpu_, in, got, mode);
      EXPECT_FALSE(built.matrix()) << mode;
      if (!gpu.limits().matrix_units) {
        EXPECT_FALSE(built.units()) << mode;
      }
      ASSERT_EQ(stats.attention.size(), 1u) << mode;
      if (stats.attention[0].precision == AttentionPrecision::f16_products) {
        EXPECT_EQ(stats.attention[0].kernel, AttentionKernel::tiled) << mode << ": the packed f16 kernel";
        EXPECT_TRUE(gpu.limits().shader_float16 && mode[0] != 's') << mode;
        return;
      }
      AttnInputs exact = in;
      exact.config.path = AttentionPath::fused;
      EXPECT_TRUE(all_close(got, run_attention_op(*cpu_, exact), in.out_shape(), 2e-4, 1e-4)) << mode << ": an f32 kernel ran";
    });
  }
}

// The matrix units themselves, where the device lists a shape the kernels take (a GPU's
// 16x16x16, or the 8x8x8 of lavapipe after Mesa 25.0: tools/lavapipe-units.sh runs this
// suite there; a skip elsewhere, Debian 12's lavapipe included, or a failure with
// VKATTN_TEST_REQUIRE_MATRIX_UNITS=1): the backend kept them (its self-test passed), and
// each attention case runs the cooperative-matrix attn_mt, not the stand-in, within the
// f16 tolerances. One backend for the suite, validated where the layer knows the
// extension; under an older layer (Debian 12's, which the GPU bundle carries) vkattn does
// not query the extension (devices.md), so the backend is made again without validation.
class CoopmatUnits : public ::testing::TestWithParam<AttnCase> {
 protected:
  void SetUp() override { cpu_ = make_backend(BackendKind::cpu); }
  std::unique_ptr<Backend> cpu_;
};

// |c| on the units, with $VKATTN_PREFILL = |prefill| ("": unset): within the f16 tolerances, on the
// units' kernel, validated. Returns the pipelines built.
void units_case(Backend& cpu, const AttnCase& c, const char* prefill, Built& built) {
  std::optional<ScopedEnv> env;
  if (*prefill) env.emplace("VKATTN_PREFILL", prefill);
  std::string why;
  auto gpu = shared_units_backend(built, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  VKATTN_REQUIRE_MATRIX_UNITS(*gpu);
  const AttnInputs in = case_inputs(c);
  CommandStats stats;
  expect_f16_matches(cpu, in, run_f16(*gpu, in, &stats), c.name);
  ASSERT_EQ(stats.attention.size(), 1u);
  EXPECT_EQ(stats.attention[0].kernel, AttentionKernel::matrix) << to_string(stats.attention[0].kernel);
  EXPECT_TRUE(built.units()) << "attn_mt ran";
  EXPECT_FALSE(built.matrix()) << "the stand-in ran";
  expect_no_validation_messages(*gpu, c.name);
}

// As planned: attn_mt2 where the device has NV cooperative matrices 2 and the head is up to
// 128 wide (required so under VKATTN_TEST_REQUIRE_NV2=1: tools/lavapipe-units.sh), else attn_mt.
TEST_P(CoopmatUnits, Matches) {
  const AttnCase& c = GetParam();
  Built built;
  units_case(*cpu_, c, "", built);
  if (env_is("VKATTN_TEST_REQUIRE_NV2", "1") && !HasFatalFailure() && !IsSkipped()) {
    EXPECT_EQ(built.nv2(c.head_dim), c.head_dim <= 128) << "attn_mt2 ran (or not) as planned";
  }
}

// The KHR form alone (matrix_nv2=0), on devices that have both.
TEST_P(CoopmatUnits, MatchesOnKhr) {
  Built built;
  units_case(*cpu_, GetParam(), "matrix_nv2=0", built);
  EXPECT_FALSE(built.nv2()) << "matrix_nv2=0 ran attn_mt2";
}

INSTANTIATE_TEST_SUITE_P(Cases, CoopmatUnits, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttnCase>& info) { return std::string(info.param.name); });

// The CPU backend's f16_products is its f32 path on inputs rounded to f16 (to nearest
// even), exactly; and differs from f32 where the inputs are not halves.
TEST(CoopmatCpuOracle, RoundsTheInputs) {
  auto cpu = make_backend(BackendKind::cpu);
  AttnInputs in = random_inputs(9, 4, 2, 40, 64, 1, 71);
  in.config.path = AttentionPath::fused;
  AttnInputs halves = in;
  for (auto* v : {&halves.q, &halves.k, &halves.v}) {  // through an f16 tensor: rounded to nearest even
    Tensor t = cpu->tensor({v->size()}, DType::f16);
    cpu->upload(t, *v);
    *v = cpu->download(t);
  }
  AttnInputs f16 = in;
  f16.config.precision = AttentionPrecision::f16_products;
  const std::vector<float> got = run_attention_op(*cpu, f16);
  EXPECT_EQ(got, run_attention_op(*cpu, halves));
  EXPECT_NE(got, run_attention_op(*cpu, in));
}

// Only attention() takes f16_products: the stage ops refuse it by name, and a value outside
// the enum is refused too; a malformed $VKATTN_MATRIX is refused when a backend is made.
TEST(CoopmatPrecision, RefusedWhereNotTaken) {
  auto cpu = make_backend(BackendKind::cpu);
  Tensor q = cpu->tensor({2, 2, 16}, DType::f32), k = cpu->tensor({3, 1, 16}, DType::f32), s = cpu->tensor({2, 2, 3}, DType::f32),
         out = cpu->tensor({2, 2, 16}, DType::f32);
  const std::int32_t pos[] = {1, 2};
  AttentionConfig config;
  config.precision = AttentionPrecision::f16_products;
  auto refused = [](const char* op, auto&& record) {
    try {
      record();
      ADD_FAILURE() << op << " took f16_products";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("config.precision"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  CommandList cmd = cpu->commands();
  refused("attn_scores", [&] { cmd.attn_scores(q, k, s, {.q_positions = pos}, config); });
  refused("attn_softmax", [&] { cmd.attn_softmax(s, s, config); });
  config.precision = static_cast<AttentionPrecision>(7);
  refused("attention", [&] { cmd.attention(q, k, k, out, {.q_positions = pos}, config); });
}

TEST_F(CoopmatVsCpu, MalformedKnobIsRefused) {
  ScopedEnv matrix("VKATTN_MATRIX", "fast");
  try {
    make_backend(BackendKind::vulkan, test_options());
    ADD_FAILURE() << "VKATTN_MATRIX=fast was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("VKATTN_MATRIX"), std::string::npos) << e.what();
  }
  // A backend made before keeps the path it was given.
  AttnInputs in = random_inputs(4, 2, 1, 8, 16, 1, 3);
  expect_f16_matches(*cpu_, in, run_f16(*gpu_, in), "made before");
}

// The backend of the three tests below: the stand-in on |options|, or the |units| (as
// Cases/CoopmatUnits, on matrix_options: llvmpipe compiles their pipelines inside the
// submission). Null, with |why|, without Vulkan.
std::unique_ptr<Backend> standin_or_units(const DeviceOptions& options, bool units, Built& built, std::string& why) {
  ScopedEnv matrix("VKATTN_MATRIX", units ? "on" : "standin");
  return matrix_backend(units ? matrix_options(false, built) : options, units, why);
}

// That the kernel asked for ran: the stand-in, or on the units attn_mt2 where the device
// has NV cooperative matrices 2 (required under VKATTN_TEST_REQUIRE_NV2=1), else attn_mt.
void expect_matrix_ran(const Built& built, bool units) {
  if (!units) {
    EXPECT_TRUE(built.matrix()) << "the stand-in";
    return;
  }
  EXPECT_TRUE(built.units()) << "the units' kernel";
  if (env_is("VKATTN_TEST_REQUIRE_NV2", "1")) {
    EXPECT_TRUE(built.nv2()) << "attn_mt2";
  }
}

// Keys no row sees may hold NaN (a stale slot): they are staged as zeros, never loaded, so
// that no 0 x NaN reaches a product. Causal prefill of 20 tokens over 48 keys whose K and V
// past position 19 are NaN: the second tile of 16 keys holds both kinds.
void nan_keys_stay_out(Backend& cpu, bool units) {
  Built built;
  std::string why;
  std::unique_ptr<Backend> gpu = standin_or_units(matrix_options(false, built), units, built, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  VKATTN_REQUIRE_MATRIX_KERNELS(*gpu, units);
  const AttnInputs in = nan_in_unseen_keys_inputs();
  const std::vector<float> got = run_f16(*gpu, in);
  EXPECT_TRUE(all_close(got, run_f16(cpu, in), in.out_shape(), 2e-3, 1e-3));
  expect_matrix_ran(built, units);
  expect_no_validation_messages(*gpu);
}

TEST_F(CoopmatVsCpu, NaNInKeysNoRowSeesStaysOut) { nan_keys_stay_out(*cpu_, false); }
TEST_F(CoopmatUnitsVsCpu, NaNInKeysNoRowSeesStaysOut) { nan_keys_stay_out(*cpu_, true); }

// A decode step of two sequences over a cache, recorded once and replayed with new tokens
// (set_tokens patches the matrix kernel's token words, as the other kernels'), equals the
// same step recorded afresh, bit for bit, without encoding the list again.
void replay_matches_a_fresh_recording(bool units) {
  Built built;
  std::string why;
  std::unique_ptr<Backend> backend = standin_or_units(matrix_options(false, built), units, built, why);
  VKATTN_REQUIRE_BACKEND(backend, why);
  VKATTN_REQUIRE_MATRIX_KERNELS(*backend, units);
  Backend& gpu = *backend;
  const KvCacheConfig config{.n_seqs = 2, .n_kv_heads = 2, .head_dim = 64, .capacity = 24, .dtype = DType::f16, .n_sinks = 2};
  KvCache replayed = gpu.kv_cache(config), fresh = gpu.kv_cache(config);
  Tensor q = gpu.tensor({2, 8, 64}, DType::f32), k = gpu.tensor({2, 2, 64}, DType::f32), v = gpu.tensor({2, 2, 64}, DType::f32),
         out_replayed = gpu.tensor({2, 8, 64}, DType::f32), out_fresh = gpu.tensor({2, 8, 64}, DType::f32);
  const AttentionConfig f16{.path = AttentionPath::fused, .precision = AttentionPrecision::f16_products};
  CommandList step = gpu.commands();
  for (std::int32_t t = 0; t < 30; ++t) {  // past the ring's 22 slots
    const std::vector<std::int32_t> pos = {t, t}, seq = {0, 1};
    const auto at = static_cast<std::uint32_t>(t);
    gpu.upload(q, normal(2 * 8 * 64, 300 + at));
    gpu.upload(k, normal(2 * 2 * 64, 400 + at));
    gpu.upload(v, normal(2 * 2 * 64, 500 + at));
    if (t == 0) {
      step.kv_append(replayed, k, v, pos, seq);
      step.attention(q, replayed, out_replayed, {.q_positions = pos, .q_seq_ids = seq}, f16);
    } else {
      step.set_tokens(pos, seq);
    }
    CommandList once = gpu.commands();
    once.kv_append(fresh, k, v, pos, seq);
    once.attention(q, fresh, out_fresh, {.q_positions = pos, .q_seq_ids = seq}, f16);
    step.submit_and_wait();
    once.submit_and_wait();
    ASSERT_EQ(gpu.download(out_replayed), gpu.download(out_fresh)) << "step " << t;
  }
  EXPECT_EQ(step.stats().encodings, 1u) << "a replay encoded the list again";
  expect_matrix_ran(built, units);
  expect_no_validation_messages(gpu);
}

TEST_F(CoopmatVsCpu, ReplayMatchesARecordingAfresh) { replay_matches_a_fresh_recording(false); }
TEST_F(CoopmatUnitsVsCpu, ReplayMatchesARecordingAfresh) { replay_matches_a_fresh_recording(true); }

// Prefill chunks over caches: a ring of 38 slots that wraps under a window of 16 (tiles
// straddle its end and hold slots no query sees): f16 keys stored rotated, and q8_0 keys
// rotated on read.
void caches_rotated_on_read_and_quantized(Backend& cpu, bool units) {
  Built built;
  DeviceOptions options = test_options();
  built.attach(options);
  std::string why;
  std::unique_ptr<Backend> gpu = standin_or_units(options, units, built, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  VKATTN_REQUIRE_MATRIX_KERNELS(*gpu, units);
  // Two of the four combinations (CI time: each is a pipeline llvmpipe compiles).
  for (const auto& [rope, dtype] : {std::pair{KvRope::stored, DType::f16}, std::pair{KvRope::on_read, DType::q8_0}}) {
    // The CPU cache takes each chunk once; its f16 oracle rounds what it holds.
    const std::string what = std::string(rope == KvRope::on_read ? "on_read, " : "stored, ") + to_string(dtype);
    prefill_in_chunks_over_a_wrapping_ring(
        *gpu, cpu, rope, dtype, AttentionPrecision::f16_products, 60, [&](const PrefillChunk& c) {
          const double tol = 2e-4 + 2 * kHalfUlp * max_abs(c.v) + 1e-3;
          EXPECT_TRUE(all_close(c.got, c.want, c.out_shape(), tol, 1e-3)) << what << ": chunk at " << c.at;
        });
  }
  expect_matrix_ran(built, units);
  EXPECT_TRUE(gpu->validation_messages().empty());
}

TEST_F(CoopmatVsCpu, CachesRotatedOnReadAndQuantized) { caches_rotated_on_read_and_quantized(*cpu_, false); }
TEST_F(CoopmatUnitsVsCpu, CachesRotatedOnReadAndQuantized) { caches_rotated_on_read_and_quantized(*cpu_, true); }

}  // namespace
}  // namespace vkattn::test
