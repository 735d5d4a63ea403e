// The matrix path's device side: when the matrix kernels may use a device's matrix units
// (VK_KHR_cooperative_matrix), the knob that overrides it, and what the device query
// reports. The choice is a pure function of a device's facts, tested at made-up NVIDIA-,
// AMD- and Intel-like inputs (no device needed); lavapipe has no matrix units, which the
// device tests check it says. The matrix kernels themselves cannot run here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "common/validate.hpp"
#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "vulkan/context.hpp"
#include "vulkan/coopmat.hpp"

namespace vkattn::test {
namespace {

using detail::choose_matrix;
using detail::CoopmatComponent;
using detail::CoopmatFacts;
using detail::CoopmatScope;
using detail::CoopmatShape;

CoopmatShape shape(std::uint32_t m, std::uint32_t n, std::uint32_t k, CoopmatComponent ab, CoopmatComponent cr,
                   CoopmatScope scope = CoopmatScope::subgroup) {
  return CoopmatShape{detail::kCoopmatShapeType, nullptr, m, n, k, ab, ab, cr, cr, VK_FALSE, scope};
}
const CoopmatShape kKernels = shape(16, 16, 16, CoopmatComponent::f16, CoopmatComponent::f32);

// A device with everything the kernels need, of |vendor| and |driver| (VkDriverId).
CoopmatFacts usable(std::uint32_t vendor, std::uint32_t driver) {
  CoopmatFacts f;
  f.vendor_id = vendor;
  f.driver_id = driver;
  f.listed = f.queried = f.feature = f.compute = true;
  f.shapes = {shape(16, 8, 16, CoopmatComponent::f16, CoopmatComponent::f16), kKernels,
              shape(16, 16, 32, CoopmatComponent::s8, CoopmatComponent::s32)};
  f.vulkan_1_2 = f.shader_float16 = f.memory_model = f.full_subgroups = true;
  f.subgroup_min_size = f.subgroup_max_size = 32;
  return f;
}
CoopmatFacts nvidia(std::uint32_t warps_per_sm) {
  CoopmatFacts f = usable(0x10DE, 4);
  f.nv_warps_per_sm = warps_per_sm;
  return f;
}
// Made-up AMD inputs shaped as llama.cpp tells the architectures apart.
CoopmatFacts amd(std::uint32_t driver, std::uint32_t min_size, std::uint32_t wavefronts, bool mixed_dot8) {
  CoopmatFacts f = usable(0x1002, driver);
  f.subgroup_min_size = min_size;
  f.subgroup_max_size = 64;
  f.amd_wavefronts_per_simd = wavefronts;
  f.amd_mixed_dot8 = mixed_dot8;
  return f;
}
constexpr std::uint32_t kAmdProprietary = 1, kAmdvlk = 2, kRadv = 3, kAnv = 6;

bool units(const CoopmatFacts& f, MatrixUnits knob = MatrixUnits::automatic) { return choose_matrix(f, knob, true).units; }
std::string note(const CoopmatFacts& f, MatrixUnits knob = MatrixUnits::automatic) { return choose_matrix(f, knob, true).note; }
bool mentions(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// NVIDIA only when asked: Ampere and later meet the hardware's rules, but the matrix kernel
// ran slower on an H200 than the kernels f16_products takes without it; Turing's compiler
// is named.
TEST(CoopmatChoice, NvidiaOnlyWhenAskedTuringNamed) {
  for (std::uint32_t warps : {48u, 64u}) {  // Ampere and Ada; A100 and Hopper
    EXPECT_FALSE(units(nvidia(warps)));
    EXPECT_TRUE(mentions(note(nvidia(warps)), "slower")) << note(nvidia(warps));
    EXPECT_TRUE(mentions(note(nvidia(warps)), "VKATTN_MATRIX=on")) << note(nvidia(warps));
    EXPECT_TRUE(units(nvidia(warps), MatrixUnits::on));
    EXPECT_EQ(note(nvidia(warps), MatrixUnits::on), "");
  }
  EXPECT_FALSE(units(nvidia(32)));
  EXPECT_TRUE(mentions(note(nvidia(32)), "Turing")) << note(nvidia(32));
  EXPECT_FALSE(units(nvidia(0)));  // no VK_NV_shader_sm_builtins: architecture unknown
  // "on" skips the vendor rule, never the hardware's.
  EXPECT_TRUE(units(nvidia(32), MatrixUnits::on));
  EXPECT_TRUE(units(nvidia(0), MatrixUnits::on));
  EXPECT_EQ(note(nvidia(32), MatrixUnits::on), "");
}

TEST(CoopmatChoice, AmdDriversRdna3AndLaterRadvAny) {
  for (std::uint32_t driver : {kAmdProprietary, kAmdvlk}) {
    SCOPED_TRACE(driver);
    EXPECT_TRUE(units(amd(driver, 32, 12, true)));    // RDNA3: mixed-sign dot8 accelerated
    EXPECT_TRUE(units(amd(driver, 32, 16, false)));   // RDNA4: 16 wavefronts per SIMD
    EXPECT_FALSE(units(amd(driver, 32, 12, false)));  // RDNA2
    EXPECT_FALSE(units(amd(driver, 32, 20, true)));   // RDNA1
    EXPECT_FALSE(units(amd(driver, 64, 10, true)));   // GCN: subgroups of 64 only
    EXPECT_FALSE(units(amd(driver, 32, 0, true)));    // no VK_AMD_shader_core_properties
    EXPECT_TRUE(mentions(note(amd(driver, 32, 12, false)), "RDNA3")) << note(amd(driver, 32, 12, false));
    EXPECT_TRUE(units(amd(driver, 32, 12, false), MatrixUnits::on));
  }
  // RADV lists the extension only where the units are.
  EXPECT_TRUE(units(amd(kRadv, 32, 12, false)));
  EXPECT_TRUE(units(amd(kRadv, 64, 0, false)));
}

TEST(CoopmatChoice, OtherVendorsOnlyWhenAsked) {
  for (std::uint32_t vendor : {0x8086u, 0x13B5u, 0x5143u, 0x106Bu, 0x1234u}) {
    SCOPED_TRACE(vendor);
    const CoopmatFacts f = usable(vendor, kAnv);
    EXPECT_FALSE(units(f));
    EXPECT_TRUE(mentions(note(f), "allowlist")) << note(f);
    EXPECT_TRUE(units(f, MatrixUnits::on));
  }
  // Intel's Xe2 lists 8x16x16, not the kernels' shape: not even when asked.
  CoopmatFacts xe2 = usable(0x8086, kAnv);
  xe2.shapes = {shape(8, 16, 16, CoopmatComponent::f16, CoopmatComponent::f32)};
  EXPECT_FALSE(units(xe2, MatrixUnits::on));
  EXPECT_TRUE(mentions(note(xe2, MatrixUnits::on), "none of the device's 1 cooperative-matrix shapes")) << note(xe2);
}

TEST(CoopmatChoice, OffStandinAndBuild) {
  const CoopmatFacts f = nvidia(64);
  const auto off = choose_matrix(f, MatrixUnits::off, true);
  EXPECT_FALSE(off.units || off.standin);
  EXPECT_TRUE(mentions(off.note, "as asked")) << off.note;
  // The stand-in anywhere, units or not.
  for (const CoopmatFacts& g : {f, CoopmatFacts{}}) {
    const auto standin = choose_matrix(g, MatrixUnits::standin, false);
    EXPECT_TRUE(standin.standin);
    EXPECT_FALSE(standin.units);
    EXPECT_TRUE(mentions(standin.note, "stand-in")) << standin.note;
  }
  // A build without the kernels has no hardware path.
  for (MatrixUnits knob : {MatrixUnits::automatic, MatrixUnits::on}) {
    const auto unbuilt = choose_matrix(f, knob, false);
    EXPECT_FALSE(unbuilt.units || unbuilt.standin);
    EXPECT_TRUE(mentions(unbuilt.note, "no matrix kernels")) << unbuilt.note;
  }
  EXPECT_TRUE(choose_matrix(f, MatrixUnits::on, true).units);
}

// Each thing the kernels need, missing, turns the hardware path off even when asked for,
// and the note names it.
TEST(CoopmatChoice, EveryRequirementNamed) {
  struct Gap {
    const char* says;
    void (*remove)(CoopmatFacts&);
  };
  const Gap gaps[] = {
      {"does not list", [](CoopmatFacts& f) { f.listed = false; }},
      {"validation layer", [](CoopmatFacts& f) { f.queried = false; }},
      {"cooperativeMatrix feature", [](CoopmatFacts& f) { f.feature = false; }},
      {"compute shaders", [](CoopmatFacts& f) { f.compute = false; }},
      {"lists no cooperative-matrix shapes", [](CoopmatFacts& f) { f.shapes.clear(); }},
      {"none of the device's 2", [](CoopmatFacts& f) { f.shapes.erase(f.shapes.begin() + 1); }},
      {"Vulkan 1.2", [](CoopmatFacts& f) { f.vulkan_1_2 = false; }},
      {"shaderFloat16", [](CoopmatFacts& f) { f.shader_float16 = false; }},
      {"vulkanMemoryModel", [](CoopmatFacts& f) { f.memory_model = false; }},
      {"full subgroups", [](CoopmatFacts& f) { f.full_subgroups = false; }},
      {"the caller's device was created without vulkanMemoryModel",
       [](CoopmatFacts& f) { f.caller_lacks = "vulkanMemoryModel"; }},
  };
  for (const Gap& gap : gaps) {
    SCOPED_TRACE(gap.says);
    CoopmatFacts f = nvidia(64);
    gap.remove(f);
    for (MatrixUnits knob : {MatrixUnits::automatic, MatrixUnits::on}) {
      EXPECT_FALSE(units(f, knob));
      EXPECT_TRUE(mentions(note(f, knob), gap.says)) << note(f, knob);
    }
  }
}

// What a caller's device (ExternalVulkan) enabled of what the matrix kernels need, read from
// its create info: each feature through its own structure or Vulkan 1.2's, the extensions by
// name, and whatever is missing named.
TEST(CoopmatExternal, CreateInfoSaysWhatIsMissing) {
  const std::string none = detail::matrix_features_lacking(nullptr);
  for (const char* part : {"VK_KHR_cooperative_matrix", "shaderFloat16", "vulkanMemoryModel", "VK_EXT_subgroup_size_control"}) {
    EXPECT_TRUE(mentions(none, part)) << none;
  }
  const char* extensions[] = {"VK_EXT_subgroup_size_control", "VK_KHR_cooperative_matrix"};
  detail::CoopmatFeatures coopmat{detail::kCoopmatFeaturesType, nullptr, VK_TRUE, VK_FALSE};
  VkPhysicalDeviceVulkan12Features v12{};
  v12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  v12.shaderFloat16 = v12.vulkanMemoryModel = v12.vulkanMemoryModelDeviceScope = VK_TRUE;
  VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size{};
  size.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
  size.subgroupSizeControl = size.computeFullSubgroups = VK_TRUE;
  VkDeviceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  info.pNext = &coopmat;
  coopmat.pNext = &v12;
  v12.pNext = &size;
  info.enabledExtensionCount = 2;
  info.ppEnabledExtensionNames = extensions;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "");
  info.enabledExtensionCount = 1;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "VK_KHR_cooperative_matrix with cooperativeMatrix");
  info.enabledExtensionCount = 2;
  coopmat.cooperativeMatrix = VK_FALSE;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "VK_KHR_cooperative_matrix with cooperativeMatrix");
  coopmat.cooperativeMatrix = VK_TRUE;
  v12.vulkanMemoryModel = VK_FALSE;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "vulkanMemoryModel with vulkanMemoryModelDeviceScope");
  size.computeFullSubgroups = VK_FALSE;
  EXPECT_TRUE(mentions(detail::matrix_features_lacking(&info), "vulkanMemoryModelDeviceScope, VK_EXT_subgroup_size_control"));
  size.computeFullSubgroups = VK_TRUE;
  // With the model on, the merge kernels' device-scope atomics need device scope too.
  v12.vulkanMemoryModel = VK_TRUE;
  v12.vulkanMemoryModelDeviceScope = VK_FALSE;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "vulkanMemoryModel with vulkanMemoryModelDeviceScope");
  // The features through their own structures instead of Vulkan 1.2's.
  VkPhysicalDeviceShaderFloat16Int8Features f16{};
  f16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
  f16.shaderFloat16 = VK_TRUE;
  VkPhysicalDeviceVulkanMemoryModelFeatures model{};
  model.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
  model.vulkanMemoryModel = model.vulkanMemoryModelDeviceScope = VK_TRUE;
  coopmat.pNext = &f16;
  f16.pNext = &model;
  model.pNext = &size;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "");
  f16.shaderFloat16 = VK_FALSE;
  EXPECT_EQ(detail::matrix_features_lacking(&info), "shaderFloat16");

  // Where the caller did not enable the extension vkattn does not query it (the caller's
  // validation layer may predate it): the note names the create info, not the query.
  CoopmatFacts f = nvidia(64);
  f.caller_lacks = "VK_KHR_cooperative_matrix with cooperativeMatrix";
  f.queried = f.feature = f.compute = false;
  f.shapes.clear();
  EXPECT_TRUE(mentions(note(f, MatrixUnits::on), "the caller's device was created without VK_KHR_cooperative_matrix"))
      << note(f, MatrixUnits::on);
}

TEST(CoopmatChoice, OnlyTheKernelsShapeCounts) {
  EXPECT_EQ(detail::kernel_tile(kKernels), 16u);
  CoopmatShape saturating = kKernels;
  saturating.saturatingAccumulation = VK_TRUE;
  const CoopmatShape others[] = {
      shape(16, 16, 16, CoopmatComponent::f16, CoopmatComponent::f16),  // f16 accumulation
      shape(16, 16, 16, CoopmatComponent::bf16, CoopmatComponent::f32),
      shape(16, 16, 16, CoopmatComponent::f16, CoopmatComponent::f32, CoopmatScope::workgroup),
      shape(16, 8, 16, CoopmatComponent::f16, CoopmatComponent::f32),
      shape(16, 16, 8, CoopmatComponent::f16, CoopmatComponent::f32),
      shape(8, 16, 16, CoopmatComponent::f16, CoopmatComponent::f32),
      saturating,
  };
  for (const auto& s : others) {
    EXPECT_EQ(detail::kernel_tile(s), 0u) << s.MSize << "x" << s.NSize << "x" << s.KSize;
    CoopmatFacts f = nvidia(64);
    f.shapes = {s};
    EXPECT_FALSE(units(f, MatrixUnits::on));
  }
}

// 8x8x8 serves where no 16x16x16 is listed (four to a tile: lavapipe after Mesa 25.0), with
// the same component types; 16x16x16 wins where both are.
TEST(CoopmatChoice, EightCubedWhereSixteenIsMissing) {
  const CoopmatShape eight = shape(8, 8, 8, CoopmatComponent::f16, CoopmatComponent::f32);
  EXPECT_EQ(detail::kernel_tile(eight), 8u);
  EXPECT_EQ(detail::kernel_tile(shape(8, 8, 8, CoopmatComponent::f16, CoopmatComponent::f16)), 0u);
  EXPECT_EQ(detail::kernel_tile(shape(8, 8, 8, CoopmatComponent::f16, CoopmatComponent::f32, CoopmatScope::workgroup)), 0u);
  EXPECT_EQ(detail::kernel_tile(shape(4, 4, 4, CoopmatComponent::f16, CoopmatComponent::f32)), 0u);
  CoopmatFacts f = usable(0x10005, 13);  // Mesa's vendor id, lavapipe's driver id
  f.shapes = {shape(8, 8, 8, CoopmatComponent::f16, CoopmatComponent::f16), eight};
  const detail::MatrixChoice on = detail::choose_matrix(f, MatrixUnits::on, true);
  EXPECT_TRUE(on.units) << on.note;
  EXPECT_EQ(on.tile, 8u);
  EXPECT_FALSE(detail::choose_matrix(f, MatrixUnits::automatic, true).units) << "not on the allowlist";
  f.shapes.push_back(kKernels);
  EXPECT_EQ(detail::choose_matrix(f, MatrixUnits::on, true).tile, 16u);
  f.shapes = {shape(8, 8, 8, CoopmatComponent::f16, CoopmatComponent::f16)};
  EXPECT_TRUE(mentions(note(f, MatrixUnits::on), "16x16x16 or 8x8x8")) << note(f, MatrixUnits::on);
}

// attn_mt2 (NV cooperative matrices 2) with the units, where the device has the four
// features, flexible dimensions to 128 and an f16 x f16 + f32 -> f32 subgroup entry whose
// granularities divide 16; each gap named.
TEST(CoopmatChoice, Nv2WhereItsFeaturesAndAnEntryAre) {
  const auto flexible = [](std::uint32_t g, CoopmatComponent cr, CoopmatScope scope) {
    return detail::Coopmat2Flexible{detail::kCoopmat2FlexibleType, nullptr, g,  g,        g,     CoopmatComponent::f16,
                                    CoopmatComponent::f16,         cr,      cr, VK_FALSE, scope, 0};
  };
  CoopmatFacts f = nvidia(64);
  f.nv2_listed = f.nv2_queried = f.nv2_features = f.vulkan_1_3 = true;
  f.nv2_max_dimension = 256;
  f.nv2_flexible = {flexible(16, CoopmatComponent::f16, CoopmatScope::subgroup),
                    flexible(16, CoopmatComponent::f32, CoopmatScope::workgroup),
                    flexible(16, CoopmatComponent::f32, CoopmatScope::subgroup)};
  const auto nv2 = [](const CoopmatFacts& g, MatrixUnits knob = MatrixUnits::on) {
    return detail::choose_matrix(g, knob, true).nv2 == detail::kCoopmat2KernelsBuilt;
  };
  EXPECT_EQ(detail::coopmat2_gap(f, true), "");
  EXPECT_TRUE(nv2(f));
  EXPECT_FALSE(detail::choose_matrix(f, MatrixUnits::automatic, true).nv2) << "no units, no attn_mt2";
  EXPECT_TRUE(mentions(detail::coopmat2_gap(f, false), "this build")) << detail::coopmat2_gap(f, false);
  const std::pair<void (*)(CoopmatFacts&), const char*> gaps[] = {
      {[](CoopmatFacts& g) { g.nv2_listed = false; }, "does not list"},
      {[](CoopmatFacts& g) { g.nv2_queried = false; }, "not queried"},
      {[](CoopmatFacts& g) { g.vulkan_1_3 = false; }, "Vulkan 1.3"},
      {[](CoopmatFacts& g) { g.nv2_features = false; }, "per-element"},
      {[](CoopmatFacts& g) { g.nv2_max_dimension = 64; }, "below 128"},
      {[](CoopmatFacts& g) { g.nv2_flexible.pop_back(); }, "granularities"},
      {[](CoopmatFacts& g) { g.nv2_flexible.back().KGranularity = 32; }, "granularities"},
  };
  for (const auto& [change, said] : gaps) {
    CoopmatFacts g = f;
    change(g);
    SCOPED_TRACE(said);
    EXPECT_TRUE(mentions(detail::coopmat2_gap(g, true), said)) << detail::coopmat2_gap(g, true);
    EXPECT_FALSE(detail::choose_matrix(g, MatrixUnits::on, true).nv2);
    EXPECT_TRUE(units(g, MatrixUnits::on)) << "attn_mt still runs";
  }
  f.nv2_flexible.back().MGranularity = 8;  // lavapipe's: 8 divides 16
  EXPECT_EQ(detail::coopmat2_gap(f, true), "");
}

TEST(CoopmatChoice, ShapesInWords) {
  const MatrixShape m = detail::public_shape(kKernels);
  EXPECT_EQ(m.m * 10000 + m.n * 100 + m.k, 161616u);
  EXPECT_EQ(m.a + m.b + m.c + m.result + "/" + m.scope, "f16f16f32f32/subgroup");
  EXPECT_FALSE(m.saturating);
  CoopmatShape odd =
      shape(16, 16, 32, static_cast<CoopmatComponent>(1000999000), CoopmatComponent::bf16, static_cast<CoopmatScope>(4));
  odd.saturatingAccumulation = VK_TRUE;
  const MatrixShape o = detail::public_shape(odd);
  EXPECT_EQ(o.a, "type 1000999000");
  EXPECT_EQ(o.result, "bf16");
  EXPECT_EQ(o.scope, "scope 4");
  EXPECT_TRUE(o.saturating);
}

// Debian 12's validation layer (1.3.239) reports the extension's structures as unknown
// (an error): under it vkattn does not ask.
TEST(CoopmatChoice, QueriedOnlyUnderLayersThatKnowIt) {
  EXPECT_TRUE(detail::coopmat_query_allowed(0));
  EXPECT_FALSE(detail::coopmat_query_allowed(VK_MAKE_API_VERSION(0, 1, 3, 239)));
  EXPECT_TRUE(detail::coopmat_query_allowed(VK_MAKE_API_VERSION(0, 1, 3, 255)));
  EXPECT_TRUE(detail::coopmat_query_allowed(VK_MAKE_API_VERSION(0, 1, 4, 309)));
}

TEST(CoopmatKnob, OptionsThenEnvironment) {
  {
    ScopedEnv env("VKATTN_MATRIX", "");
    EXPECT_EQ(detail::matrix_units_wanted({}), MatrixUnits::automatic);
  }
  const std::pair<const char*, MatrixUnits> values[] = {{"automatic", MatrixUnits::automatic},
                                                        {"auto", MatrixUnits::automatic},
                                                        {"off", MatrixUnits::off},
                                                        {"on", MatrixUnits::on},
                                                        {"standin", MatrixUnits::standin}};
  for (const auto& [text, knob] : values) {
    ScopedEnv env("VKATTN_MATRIX", text);
    EXPECT_EQ(detail::matrix_units_wanted({}), knob) << text;
    DeviceOptions options;
    options.matrix_units = MatrixUnits::off;
    EXPECT_EQ(detail::matrix_units_wanted(options), MatrixUnits::off) << text;
  }
  ScopedEnv env("VKATTN_MATRIX", "bogus");
  expect_invalid([] { detail::matrix_units_wanted({}); }, {"VKATTN_MATRIX", "bogus", "standin"});
  DeviceOptions options;
  options.matrix_units = static_cast<MatrixUnits>(7);
  expect_invalid([&] { detail::check_device_options(options, "create backend"); }, {"options.matrix_units", "7"});
  expect_invalid([&] { (void)make_backend(BackendKind::vulkan, options); }, {"options.matrix_units", "7"});
  EXPECT_STREQ(to_string(MatrixUnits::standin), "standin");
}

// A bad VKATTN_MATRIX is refused by name before any device is made or listed.
TEST(CoopmatKnob, BadValueRefusedByBackendAndList) {
  ScopedEnv env("VKATTN_MATRIX", "tensor");
  expect_invalid([] { make_backend(BackendKind::vulkan, test_options()); }, {"create backend", "VKATTN_MATRIX", "tensor"});
  expect_invalid([] { list_devices(test_options()); }, {"list devices", "VKATTN_MATRIX", "tensor"});
  // The CPU backend has no matrix units to choose.
  EXPECT_NO_THROW(make_backend(BackendKind::cpu));
}

// The backend's limits say what was decided; on lavapipe, never the hardware path.
TEST(CoopmatDevice, LimitsSayWhatWasDecided) {
  ScopedEnv env("VKATTN_MATRIX", "");
  const std::pair<MatrixUnits, bool> cases[] = {
      {MatrixUnits::automatic, false}, {MatrixUnits::on, false}, {MatrixUnits::off, false}, {MatrixUnits::standin, true}};
  for (const auto& [knob, standin] : cases) {
    SCOPED_TRACE(to_string(knob));
    DeviceOptions options = test_options();
    options.matrix_units = knob;
    std::string why;
    auto gpu = try_backend(BackendKind::vulkan, options, why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    if (gpu->limits().matrix_units) GTEST_SKIP() << gpu->device_name() << " has matrix units: this test is for lavapipe";
    EXPECT_EQ(gpu->limits().matrix_standin, standin);
    for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
  // The environment does what the option does.
  ScopedEnv standin("VKATTN_MATRIX", "standin");
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  EXPECT_TRUE(gpu->limits().matrix_standin);
  EXPECT_FALSE(gpu->limits().matrix_units);
}

// lavapipe up to Mesa 25.0 (Debian 12's 22.3, Debian 13's 25.0.7) lists no
// VK_KHR_cooperative_matrix, and its devices are made as before (no matrix extension or
// features asked for). Later ones list 8x8x8 (26.1 checked: Cases/CoopmatUnits runs there).
TEST(CoopmatDevice, LavapipeHasNoMatrixUnits) {
  ScopedEnv env("VKATTN_MATRIX", "on");
  auto instance = detail::Instance::create(true);
  auto devices = detail::enumerate_devices(*instance);
  bool cpu_device = false;
  for (const auto& d : devices) {
    // Mesa's driverVersion is VK_MAKE_VERSION(major, minor, patch).
    const std::uint32_t mesa = d.driver_version >> 12;  // major << 10 | minor
    if (!d.cpu() || mesa >= (25u << 10 | 1u)) continue;
    cpu_device = true;
    SCOPED_TRACE(d.info.name);
    EXPECT_FALSE(d.coopmat.listed);
    EXPECT_FALSE(d.matrix_units);
    EXPECT_FALSE(d.info.limits.matrix_units || d.info.limits.matrix_standin);
    EXPECT_TRUE(d.info.matrix_shapes.empty());
    if (detail::kCoopmatKernelsBuilt) {
      EXPECT_EQ(d.info.matrix_note, "the device does not list VK_KHR_cooperative_matrix");
    } else {
      EXPECT_TRUE(mentions(d.info.matrix_note, "no matrix kernels")) << d.info.matrix_note;
    }
    // What the choice read besides.
    EXPECT_EQ(d.coopmat.shader_float16, d.info.limits.shader_float16);
    EXPECT_EQ(d.coopmat.full_subgroups, d.info.limits.subgroup_size_control);
  }
  if (!cpu_device) {
    // A GPU machine without lavapipe skips; where Vulkan is required and no device at all
    // is listed (CI's lavapipe missing), it fails.
    if (vulkan_required() && devices.empty()) FAIL() << "no Vulkan device (lavapipe)";
    GTEST_SKIP() << "no CPU Vulkan device (lavapipe)";
  }
  for (const auto& m : instance->messages()) ADD_FAILURE() << "validation: " << m;
  // list_devices reports the same.
  for (const auto& d : list_devices(test_options())) {
    if (d.type == "cpu") {
      EXPECT_FALSE(d.matrix_note.empty());
    }
  }
}

// Whether the SPIR-V |words| declare |capability|.
bool declares(std::span<const std::uint32_t> words, std::uint32_t capability) {
  constexpr std::uint32_t kCapability = (2u << 16) | 17u;  // OpCapability, two words
  for (std::size_t i = 5; i + 1 < words.size() && words[i] >> 16; i += words[i] >> 16) {
    if (words[i] == kCapability && words[i + 1] == capability) return true;
  }
  return false;
}

// The matrix kernels are in the build's kernel table when configure found a glslang that
// compiles them (both sides, 16 and 8): SPIR-V that declares CooperativeMatrixKHR and the
// Vulkan memory model (Debian 12's lavapipe cannot run them); their stand-ins declare neither.
TEST(CoopmatKernels, EmbeddedWhenBuilt) {
  constexpr std::uint32_t kCooperativeMatrix = 6022;
  constexpr std::uint32_t kMemoryModel = 5345;
  EXPECT_FALSE(declares(detail::kernel_spirv(detail::KernelId::attn_mt_standin), kCooperativeMatrix));
  EXPECT_FALSE(declares(detail::kernel_spirv(detail::KernelId::attn_mt_standin), kMemoryModel));
#ifdef VKATTN_HAVE_COOPMAT_SHADERS
  for (const auto id : {detail::KernelId::attn_mt, detail::KernelId::mt_selftest, detail::KernelId::attn_mt_cm8,
                        detail::KernelId::mt_selftest_cm8}) {
    SCOPED_TRACE(detail::kernel_name(id));
    const auto words = detail::kernel_spirv(id);
    ASSERT_GT(words.size(), 5u);
    EXPECT_EQ(words[0], 0x07230203u);  // SPIR-V's magic number
    EXPECT_GE(words[1], 0x00010500u);  // SPIR-V 1.5 (Vulkan 1.2)
    EXPECT_TRUE(declares(detail::kernel_spirv(id), kCooperativeMatrix));
    EXPECT_TRUE(declares(detail::kernel_spirv(id), kMemoryModel));
  }
#else
  GTEST_SKIP() << "this build has no matrix kernels (no glslang that compiles GL_KHR_cooperative_matrix)";
#endif
}

}  // namespace
}  // namespace vkattn::test
