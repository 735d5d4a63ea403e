// Which kernels ran each attention op (CommandStats::attention): every kernel family named
// as the knobs and the automatic choice pick it, with its key splits and the precision it
// computed at; the CPU backend's reference; the C and Python views are tested with their
// APIs (tests/c_api/test_c_api.c, python/tests/test_api.py).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"

namespace vkattn::test {
namespace {

// A decode step (1 token, 8 heads over 2, 600 keys) and a 64-token prefill over 64 keys.
AttnInputs decode_inputs() { return random_inputs(1, 8, 2, 600, 64, 1, 11, 0); }
AttnInputs prefill_inputs() { return random_inputs(64, 8, 2, 64, 64, 1, 12, 0); }
AttnInputs short_decode_inputs() { return random_inputs(1, 8, 2, 16, 64, 1, 13, 0); }

std::vector<AttentionRun> runs_of(Backend& b, const AttnInputs& in) {
  CommandStats stats;
  run_attention_op(b, in, &stats);
  return stats.attention;
}

std::shared_ptr<Backend> gpu_shape(const char* decode = "", const char* prefill = "", bool many_units = true) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  if (many_units) options.cap_limits->compute_units = 1u << 20;
  ScopedEnv d("VKATTN_DECODE", decode);
  ScopedEnv p("VKATTN_PREFILL", prefill);
  std::string why;
  return try_backend(BackendKind::vulkan, options, why);
}

// The CPU shape forced, whatever $VKATTN_KERNELS says (CI runs these tests under gpu too).
std::shared_ptr<Backend> cpu_shape() {
  DeviceOptions options = shape_options(KernelShape::cpu);
  options.cap_limits = uncapped();
  std::string why;
  return try_backend(BackendKind::vulkan, options, why);
}

// $VKATTN_KERNELS, $VKATTN_PACKED_F16 and $VKATTN_MATRIX take automatic and auto alike;
// anything else is refused by name, as is a $VKATTN_CAP_LIMITS other than spec_minimum.
TEST(AttentionKernels, EnvironmentKnobsTakeAutoAndAutomatic) {
  for (const char* var : {"VKATTN_KERNELS", "VKATTN_PACKED_F16", "VKATTN_MATRIX"}) {
    for (const char* value : {"auto", "automatic"}) {
      ScopedEnv env(var, value);
      std::string why;
      auto b = try_backend(BackendKind::vulkan, test_options(), why);
      VKATTN_REQUIRE_BACKEND(b, why);
    }
  }
  expect_knobs_refused("VKATTN_KERNELS", {"fast", "Auto", "on"});
  {
    // list_devices refuses it as make_backend does (0.14.4 listed as if it were unset).
    ScopedEnv env("VKATTN_KERNELS", "fast");
    expect_invalid([] { (void)list_devices(test_options()); }, {"list devices", "VKATTN_KERNELS = fast", "cpu, gpu"});
  }
  expect_knobs_refused("VKATTN_PACKED_F16", {"on", "Auto"});
  expect_knobs_refused("VKATTN_CAP_LIMITS", {"spec_min", "1"});
}

// $VKATTN_VALIDATION and $VKATTN_PIPELINE_STATS are switches, 1 or 0 (unset or empty: 0):
// another value is refused by name, not read as off.
TEST(AttentionKernels, EnvironmentSwitchesTakeOneAndZero) {
  const char* vars[] = {"VKATTN_VALIDATION", "VKATTN_PIPELINE_STATS"};
  for (const char* var : vars) {
    for (const char* value : {"true", "on", "2"}) {
      ScopedEnv env(var, value);
      DeviceOptions options = test_options();
      options.validation.reset();  // the environment's say
      try {
        auto b = make_backend(BackendKind::vulkan, options);
        ADD_FAILURE() << var << "=" << value << " was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(std::string(var) + " = " + value + "; valid: 1 (on) or 0"), std::string::npos)
            << e.what();
      } catch (const Error& e) {
        if (vulkan_required() || e.code() != ErrorCode::no_device) throw;
      }
    }
  }
  for (const char* var : vars) {
    for (const char* value : {"0", "1", ""}) {
      // The layer itself is the test setup's to have (VKATTN_TEST_VALIDATION).
      if (std::string_view(var) == "VKATTN_VALIDATION" && std::string_view(value) == "1" && !test_validation()) continue;
      ScopedEnv env(var, value);
      DeviceOptions options = test_options();
      options.validation.reset();
      std::string why;
      auto b = try_own_backend(BackendKind::vulkan, options, why);
      VKATTN_REQUIRE_BACKEND(b, why);
    }
  }
}

TEST(AttentionKernels, Names) {
  EXPECT_STREQ(to_string(AttentionKernel::reference), "reference");
  EXPECT_STREQ(to_string(AttentionKernel::three_stages), "three_stages");
  EXPECT_STREQ(to_string(AttentionKernel::lane_per_key), "lane_per_key");
  EXPECT_STREQ(to_string(AttentionKernel::decode), "decode");
  EXPECT_STREQ(to_string(AttentionKernel::group), "group");
  EXPECT_STREQ(to_string(AttentionKernel::tiled), "tiled");
  EXPECT_STREQ(to_string(AttentionKernel::matrix), "matrix");
  EXPECT_STREQ(to_string(AttentionKernel::matrix_standin), "matrix_standin");
  EXPECT_STREQ(to_string(AttentionPath::automatic), "automatic");
  EXPECT_STREQ(to_string(AttentionPath::fused), "fused");
  EXPECT_STREQ(to_string(AttentionPath::three_stages), "three_stages");
  EXPECT_STREQ(to_string(static_cast<AttentionPath>(9)), "unknown");
  EXPECT_STREQ(to_string(AttentionPrecision::f32), "f32");
  EXPECT_STREQ(to_string(AttentionPrecision::f16_products), "f16_products");
  EXPECT_STREQ(to_string(static_cast<AttentionPrecision>(9)), "unknown");
}

// The CPU backend runs its reference for every path, at the precision asked.
TEST(AttentionKernels, CpuBackendRunsTheReference) {
  auto cpu = make_backend(BackendKind::cpu);
  AttnInputs in = prefill_inputs();
  for (AttentionPrecision precision : {AttentionPrecision::f32, AttentionPrecision::f16_products}) {
    in.config.precision = precision;
    const std::vector<AttentionRun> runs = runs_of(*cpu, in);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].kernel, AttentionKernel::reference);
    EXPECT_EQ(runs[0].splits, 1u);
    EXPECT_EQ(runs[0].precision, precision);
  }
}

struct Expected {
  const char* what;
  std::shared_ptr<Backend> backend;
  AttnInputs in;
  AttentionKernel kernel;
  std::optional<bool> split;  // more than one split (unset: whatever the plan says)
};

// Each family as the knobs and the automatic choice pick it, one op a list, and two ops in
// one list reported in order.
TEST_F(VulkanVsCpuTest, EachAttentionOpNamesItsKernel) {
  if (limits_capped_by_environment()) GTEST_SKIP() << "VKATTN_CAP_LIMITS replaces the limits these choices are made for";
  const std::shared_ptr<Backend> cpu = cpu_shape();
  ASSERT_TRUE(cpu);
  AttnInputs three = prefill_inputs();
  three.config.path = AttentionPath::three_stages;
  AttnInputs fused = prefill_inputs();
  fused.config.path = AttentionPath::fused;
  std::vector<Expected> cases;
  cases.push_back({"automatic on a CPU device", cpu, prefill_inputs(), AttentionKernel::three_stages, {}});
  cases.push_back({"three stages, decode (the weighted sum splits)",
                   cpu,
                   [] {
                     AttnInputs in = decode_inputs();
                     in.config.path = AttentionPath::three_stages;
                     return in;
                   }(),
                   AttentionKernel::three_stages,
                   {}});
  cases.push_back({"fused on the CPU shape", cpu, fused, AttentionKernel::lane_per_key, {}});
  cases.push_back({"decode on the GPU shape", gpu_shape(), decode_inputs(), AttentionKernel::decode, true});
  cases.push_back({"decode, 16 keys", gpu_shape("", "", false), short_decode_inputs(), AttentionKernel::decode, false});
  // A row of the group kernel takes 8 lanes of a subgroup: on narrower ones the decode kernel runs.
  const std::shared_ptr<Backend> group = gpu_shape("kernel=group");
  const bool group_runs = group && kernel_lanes(*group) >= 8;
  cases.push_back({"group", group, decode_inputs(), group_runs ? AttentionKernel::group : AttentionKernel::decode, true});
  cases.push_back({"prefill on the GPU shape", gpu_shape("", "", false), prefill_inputs(), AttentionKernel::tiled, {}});
  cases.push_back({"lane per key forced on the GPU shape",
                   gpu_shape("", "kernel=lane_per_key", false),
                   prefill_inputs(),
                   AttentionKernel::lane_per_key,
                   {}});
  for (const Expected& e : cases) {
    ASSERT_TRUE(e.backend) << e.what;
    const std::vector<AttentionRun> runs = runs_of(*e.backend, e.in);
    ASSERT_EQ(runs.size(), 1u) << e.what;
    EXPECT_EQ(runs[0].kernel, e.kernel) << e.what << ": " << to_string(runs[0].kernel);
    EXPECT_GE(runs[0].splits, 1u) << e.what;
    if (e.split) {
      EXPECT_EQ(runs[0].splits > 1, *e.split) << e.what << ": " << runs[0].splits << " splits";
    }
    EXPECT_EQ(runs[0].precision, AttentionPrecision::f32) << e.what;
    expect_no_validation_messages(*e.backend);
  }

  // Two ops in one list, then a replay: in recording order, as rebuilt.
  const AttnInputs in = decode_inputs();
  const AttnInputTensors t = upload_inputs(*cpu, in);
  Tensor out = cpu->tensor(in.out_shape(), DType::f32);
  CommandList cmd = cpu->commands();
  AttentionConfig three_config = in.config, fused_config = in.config;
  three_config.path = AttentionPath::three_stages;
  fused_config.path = AttentionPath::fused;
  cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos}, three_config);
  cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos}, fused_config);
  std::vector<AttentionRun> runs = cmd.stats().attention;
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].kernel, AttentionKernel::three_stages);
  EXPECT_EQ(runs[1].kernel, AttentionKernel::lane_per_key);
  cmd.set_tokens(in.q_pos);
  runs = cmd.stats().attention;
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].kernel, AttentionKernel::lane_per_key);
}

// f16 products where no matrix path runs (lavapipe has no matrix units): the exact
// kernels, and the stats say f32; with the matrix units' stand-in, the matrix kernel at f16 products.
TEST_F(VulkanVsCpuTest, F16ProductsSayWhatRan) {
  if (limits_capped_by_environment()) GTEST_SKIP() << "VKATTN_CAP_LIMITS replaces the limits these choices are made for";
  const std::shared_ptr<Backend> cpu = cpu_shape();
  ASSERT_TRUE(cpu);
  AttnInputs in = prefill_inputs();
  in.config.precision = AttentionPrecision::f16_products;
  in.config.path = AttentionPath::fused;
  ASSERT_FALSE(cpu->limits().matrix_units);
  std::vector<AttentionRun> runs = runs_of(*cpu, in);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].kernel, AttentionKernel::lane_per_key);
  EXPECT_EQ(runs[0].precision, AttentionPrecision::f32) << "f16 products fell back to the exact kernels";
  // The tiled and group kernels forced: packed f16 where the device has shaderFloat16
  // (lavapipe does), f32 where that is capped away.
  for (const bool f16 : {true, false}) {
    DeviceOptions shaped = shape_options(KernelShape::gpu);
    shaped.cap_limits = uncapped();
    shaped.cap_limits->shader_float16 = f16;
    ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
    std::string why;
    auto tiled = try_backend(BackendKind::vulkan, shaped, why);
    ASSERT_TRUE(tiled) << why;
    runs = runs_of(*tiled, in);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].kernel, AttentionKernel::tiled);
    EXPECT_EQ(runs[0].precision, f16 ? AttentionPrecision::f16_products : AttentionPrecision::f32);
    expect_no_validation_messages(*tiled);
  }
  DeviceOptions options = test_options();
  options.matrix_units = MatrixUnits::standin;
  std::string why;
  auto standin = try_backend(BackendKind::vulkan, options, why);
  ASSERT_TRUE(standin) << why;
  runs = runs_of(*standin, in);
  ASSERT_EQ(runs.size(), 1u);
  // The stand-in needs subgroups of 8 lanes or more: on narrower ones what runs without it.
  if (kernel_lanes(*standin) >= 8) {
    EXPECT_EQ(runs[0].kernel, AttentionKernel::matrix_standin);
    EXPECT_EQ(runs[0].precision, AttentionPrecision::f16_products);
  } else {
    EXPECT_NE(runs[0].kernel, AttentionKernel::matrix_standin);
  }
  expect_no_validation_messages(*standin);
}

// A NaN among one split's keys (a NaN key element: NaN scores for the heads reading that
// KV head) reaches those heads' outputs as NaN on every kernel, as with one split and on
// the CPU backend, not dropped with the split as one that saw no key (zeros, or the other
// splits' values); the other heads are untouched.
TEST_F(VulkanVsCpuTest, ANaNInOneSplitReachesTheOutput) {
  if (limits_capped_by_environment()) GTEST_SKIP() << "VKATTN_CAP_LIMITS replaces the limits these choices are made for";
  const auto with_nan = [](AttnInputs in) {
    in.k[(5 * in.kv_heads + 0) * in.head_dim + 3] = std::numeric_limits<float>::quiet_NaN();  // key 5, KV head 0
    return in;
  };
  const AttnInputs decode = with_nan(decode_inputs()), prefill = with_nan(random_inputs(16, 8, 2, 2000, 64, 1, 14, 0));
  AttnInputs three = decode, lane = decode;
  three.config.path = AttentionPath::three_stages;
  lane.config.path = AttentionPath::fused;
  struct Case {
    const char* what;
    std::shared_ptr<Backend> backend;
    AttnInputs in;
  };
  const std::vector<Case> cases = {
      {"the CPU backend", cpu_, decode},
      {"decode", gpu_shape(), decode},
      {"group", gpu_shape("kernel=group"), decode},
      {"lane per key", cpu_shape(), lane},
      {"three stages", cpu_shape(), three},
      {"tiled", gpu_shape("", "kernel=tiled", false), prefill},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(c.backend) << c.what;
    CommandStats stats;
    const std::vector<float> out = run_attention_op(*c.backend, c.in, &stats);
    const std::size_t row = c.in.head_dim, group = c.in.heads / c.in.kv_heads;
    std::size_t wrong = 0, first = out.size();
    for (std::size_t i = 0; i < out.size(); ++i) {
      const bool reads_the_nan = (i / row) % c.in.heads < group;
      if (std::isnan(out[i]) != reads_the_nan && wrong++ == 0) first = i;
    }
    EXPECT_EQ(wrong, 0u) << c.what << " (" << to_string(stats.attention.at(0).kernel) << ", " << stats.attention.at(0).splits
                         << " splits): out[" << first << "] = " << (first < out.size() ? out[first] : 0.0f);
  }
}

}  // namespace
}  // namespace vkattn::test
