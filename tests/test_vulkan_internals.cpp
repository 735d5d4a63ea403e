// Tests of internals that the public API cannot reach, built into vkattn_internal_tests
// from the library's objects (a shared libvkattn hides these symbols).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "params.h"
#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/fused_match.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"
#include "vulkan/dispatch.hpp"
#include "vulkan/pipeline.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn::test {
namespace {

// The messenger really reports: an invalid call made on vkattn's own device is recorded,
// and reaches the log at its severity.
TEST(VulkanInternals, ValidationMessengerRecords) {
  std::vector<std::string> logged;
  DeviceOptions options;
  options.log = [&](LogLevel level, std::string_view m) {
    if (level == LogLevel::error) logged.emplace_back(m);
  };
  auto instance = detail::Instance::create(true, std::make_shared<detail::Logger>(options));
  auto devices = detail::enumerate_devices(*instance);
  if (devices.empty()) {
    if (vulkan_required()) FAIL() << "no Vulkan devices";
    GTEST_SKIP() << "no Vulkan devices";
  }
  auto device = detail::Device::create(devices[detail::choose_device(devices, {})]);
  auto info = detail::vk_struct<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = 0;  // invalid: size must be > 0
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buffer = VK_NULL_HANDLE;
  if (vkCreateBuffer(device->handle(), &info, nullptr, &buffer) == VK_SUCCESS && buffer) {
    vkDestroyBuffer(device->handle(), buffer, nullptr);
  }
  const auto messages = instance->messages();
  ASSERT_FALSE(messages.empty());
  EXPECT_EQ(messages.front().rfind("error: ", 0), 0u) << messages.front();
  ASSERT_EQ(logged.size(), messages.size());
  EXPECT_EQ("validation: " + messages.front().substr(7), logged.front());
}

// A pipeline whose K and V are f32 or f16, whose keys are stored rotated and which is no
// probe (load_only, skip) is built from the kernel's lean twin (a smaller module); any other, or
// one whose constants are not all given, from the kernel itself (shaders/CMakeLists.txt:
// vkattn_lean_twin).
// Every constant id the kernels declare fits the pipeline key's list (params.h's highest,
// the group kernel's MASK_KEYS, was once one past it and written past the list's storage);
// an id past it throws rather than writing there.
// 2^32 q4_0 elements are 2.25 GiB, inside a 4 GiB maxStorageBufferRange (lavapipe's is
// 128 MiB, so no tensor here reaches it): refused, since the kernels index elements in 32
// bits; a tensor past the range is left to the range's own error.
TEST(VulkanInternals, TensorsPast32BitElementIndicesAreRefused) {
  const std::uint64_t range = UINT32_MAX, q4_bytes = (std::uint64_t{1} << 32) / 32 * 18;
  try {
    detail::check_element_indices({std::size_t{1} << 27, 32}, std::size_t{1} << 32, q4_bytes, range);
    ADD_FAILURE() << "2^32 elements accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("tensor of 4294967296 elements ([134217728, 32])"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(detail::check_element_indices({UINT32_MAX}, UINT32_MAX, q4_bytes, range));
  EXPECT_NO_THROW(detail::check_element_indices({std::size_t{1} << 32}, std::size_t{1} << 32, q4_bytes, q4_bytes - 1));
}

// A driver that cannot hold more objects, or whose heap or descriptor pool is fragmented or
// full, is out of memory as far as the caller can tell (it leaves the backend usable); other
// failures stay vulkan_call_failed, a lost device device_lost.
TEST(VulkanInternals, ResultCodesMapToErrorCodes) {
  const auto code_of = [](VkResult r) {
    try {
      detail::throw_vk_error(r, "vkSomething", __FILE__, __LINE__);
    } catch (const Error& e) {
      EXPECT_EQ(e.vk_result(), static_cast<int>(r));
      return e.code();
    }
    ADD_FAILURE() << "no Error";
    return ErrorCode::vulkan_call_failed;
  };
  for (VkResult r : {VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY, VK_ERROR_TOO_MANY_OBJECTS,
                     VK_ERROR_FRAGMENTATION, VK_ERROR_FRAGMENTED_POOL, VK_ERROR_OUT_OF_POOL_MEMORY}) {
    EXPECT_EQ(code_of(r), ErrorCode::out_of_memory) << detail::vk_result_name(r);
  }
  EXPECT_EQ(code_of(VK_ERROR_DEVICE_LOST), ErrorCode::device_lost);
  EXPECT_EQ(code_of(VK_ERROR_INITIALIZATION_FAILED), ErrorCode::vulkan_call_failed);
}

// A Vulkan backend counts its allocations against the device's maxMemoryAllocationCount
// (the ledger's refusal itself: MemoryLedger.AllocationCountIsLimited).
TEST(VulkanInternals, AllocationsAreLimitedToTheDevicesCount) {
  std::string why;
  auto backend = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(backend, why);
  const auto ctx = detail::context_of(*backend);
  VkPhysicalDeviceProperties props{};
  ctx->physical.functions->vkGetPhysicalDeviceProperties(ctx->physical.handle, &props);
  EXPECT_EQ(ctx->device->heaps().allocation_limit(), props.limits.maxMemoryAllocationCount);
  EXPECT_NE(ctx->device->heaps().allocation_limit(), 0u);
}

// On MoltenVK (a device with VK_KHR_portability_subset) decode's splits merge in a second
// dispatch unless VKATTN_DECODE asks for the last workgroup's merge: Metal makes one
// threadgroup's device-memory writes visible to another only through fences that SPIR-V's
// translation does not emit. lavapipe made to say it has the extension, planned as a GPU
// of 30 units (the keys split): two dispatches, the same results.
TEST(KernelPlans, DecodeMergesInASecondDispatchOnMoltenVk) {
  using Merge = detail::DecodeTuning::Merge;
  EXPECT_TRUE(detail::merge_in_dispatch(Merge::automatic, false));
  EXPECT_FALSE(detail::merge_in_dispatch(Merge::automatic, true));
  EXPECT_FALSE(detail::merge_in_dispatch(Merge::two_pass, false));
  EXPECT_TRUE(detail::merge_in_dispatch(Merge::last, true));
  AttnInputs in = random_inputs(1, 8, 2, 4096, 64, 1, 97);
  in.kv_dtype = DType::f16;
  auto cpu = make_backend(BackendKind::cpu);
  const std::vector<float> want = run_attention_op(*cpu, in);
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  options.cap_limits->compute_units = 30;
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  for (bool portability : {false, true}) {
    SCOPED_TRACE(portability ? "portability subset" : "no portability subset");
    detail::context_of(*gpu)->physical.portability_subset = portability;
    CommandStats stats;
    EXPECT_TRUE(all_close(run_attention_op(*gpu, in, &stats), want, in.out_shape(), 2e-4, 1e-4));
    EXPECT_EQ(stats.ops, portability ? 2u : 1u);
  }
}

// A pipeline that requires a subgroup size may have at most maxComputeWorkgroupSubgroups
// subgroups in a workgroup (lavapipe: 32 of 8, 256 invocations): the limits the planners
// use fold that in, so a decode kernel asked for workgroups of 1024 gets at most that many,
// with no validation message, and the same results.
TEST(KernelPlans, WorkgroupsWithinTheSubgroupsAllowed) {
  AttnInputs in = random_inputs(1, 8, 2, 1024, 64, 1, 96);
  auto cpu = make_backend(BackendKind::cpu);
  const std::vector<float> want = run_attention_op(*cpu, in);
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.cap_limits = uncapped();
  ScopedEnv wide("VKATTN_DECODE", "workgroup=1024");
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  const auto ctx = detail::context_of(*gpu);
  if (!ctx->limits.subgroup_size_control) GTEST_SKIP() << "no subgroup size control: no kernel requires a size";
  auto size_control = detail::vk_struct<VkPhysicalDeviceSubgroupSizeControlProperties>(
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES);
  auto props = detail::vk_struct<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props.pNext = &size_control;
  vkGetPhysicalDeviceProperties2(ctx->physical.handle, &props);
  EXPECT_EQ(ctx->physical.max_workgroup_subgroups, size_control.maxComputeWorkgroupSubgroups);
  // Bounded by the widest size a kernel may require, from the device, not the planner's
  // formula (lavapipe's sizes are all 8, so there the bound is exact).
  EXPECT_LE(std::uint64_t{ctx->limits.max_workgroup_invocations},
            std::uint64_t{size_control.maxSubgroupSize} * size_control.maxComputeWorkgroupSubgroups);
  EXPECT_TRUE(all_close(run_attention_op(*gpu, in), want, in.out_shape(), 2e-4, 1e-4));
  expect_no_validation_messages(*gpu);
}

TEST(KernelModules, SpecConstantIdsFitTheirList) {
  const detail::SpecConstants s = detail::spec({{VKATTN_SPEC_DECODE_MASK_KEYS, 7}, {VKATTN_SPEC_DECODE_LAZY_MAX, 1}});
  ASSERT_EQ(s.size(), std::size_t{VKATTN_SPEC_DECODE_MASK_KEYS} + 1);
  EXPECT_EQ(s[VKATTN_SPEC_DECODE_MASK_KEYS], 7u);
  EXPECT_EQ(s[0], 0u);
  EXPECT_THROW(detail::spec({{static_cast<std::uint32_t>(detail::kMaxSpecConstants), 1}}), std::length_error);
  detail::InlineVector<std::uint32_t, 4> v;
  v.push_back(1);
  EXPECT_THROW(v.resize(5), std::length_error);
  EXPECT_EQ(v.size(), 1u);
}

TEST(KernelModules, LeanTwinOnlyWhereItsConstantsAllow) {
  using detail::KernelId;
  constexpr std::uint32_t kNone = 0xffffffffu;
  struct Case {
    KernelId kernel;
    std::uint32_t k_type, v_type, rope_on_read, probe;  // constant ids; v_type, probe: kNone where none
  };
  const Case cases[] = {
      {KernelId::attn_decode, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE, VKATTN_SPEC_DECODE_ROPE_ON_READ,
       VKATTN_SPEC_DECODE_PROBE},
      {KernelId::attn_decode_shared_last, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE, VKATTN_SPEC_DECODE_ROPE_ON_READ,
       VKATTN_SPEC_DECODE_PROBE},
      {KernelId::attn_decode_group, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE, VKATTN_SPEC_DECODE_ROPE_ON_READ, kNone},
      {KernelId::attn_tiled_shared_f16, VKATTN_SPEC_TILED_K_TYPE, VKATTN_SPEC_TILED_V_TYPE, VKATTN_SPEC_TILED_ROPE_ON_READ,
       kNone},
      {KernelId::attn_fused_subgroup_texel, VKATTN_SPEC_FUSED_K_TYPE, VKATTN_SPEC_FUSED_V_TYPE, VKATTN_SPEC_FUSED_ROPE_ON_READ,
       kNone},
      {KernelId::attn_scores_texel, VKATTN_SPEC_SCORES_K_TYPE, kNone, VKATTN_SPEC_SCORES_ROPE_ON_READ, kNone},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(detail::kernel_name(c.kernel));
    const std::span<const std::uint32_t> full = detail::kernel_spirv(c.kernel);
    // Every constant of the rules given, as the host's ops give them.
    auto module = [&](std::uint32_t k, std::uint32_t v, std::uint32_t rope = 0, std::uint32_t probe = 0) {
      detail::SpecConstants s = detail::spec({{VKATTN_SPEC_WG_SIZE, 64}, {c.k_type, k}, {c.rope_on_read, rope}});
      for (auto [id, value] : {std::pair{c.v_type, v}, std::pair{c.probe, probe}}) {
        if (id == kNone) continue;
        if (id >= s.size()) s.resize(id + 1);
        s[id] = value;
      }
      return detail::kernel_spirv(c.kernel, s);
    };
    const std::span<const std::uint32_t> twin = module(1, 1);
    EXPECT_NE(twin.data(), full.data());
    EXPECT_LT(twin.size(), full.size() * 9 / 10);
    EXPECT_EQ(module(0, 0).data(), twin.data());
    EXPECT_EQ(module(0, 1).data(), twin.data());
    EXPECT_EQ(module(1, 0).data(), twin.data());
    for (std::uint32_t quantized : {2u, 3u}) {
      EXPECT_EQ(module(quantized, 1).data(), full.data());
      EXPECT_EQ(module(quantized, quantized).data(), full.data());
      if (c.v_type != kNone) {
        EXPECT_EQ(module(1, quantized).data(), full.data());
      }
    }
    EXPECT_EQ(module(1, 1, 1).data(), full.data()) << "keys rotated on read";
    if (c.probe != kNone) {
      for (std::uint32_t probe : {1u, 2u, 4u, 8u, 14u}) {
        EXPECT_EQ(module(1, 1, 0, probe).data(), full.data()) << "the probe's parts " << probe;
      }
    }
    // Constants not given (the shader's defaults): the kernel itself.
    EXPECT_EQ(detail::kernel_spirv(c.kernel, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}})).data(), full.data());
    EXPECT_EQ(detail::kernel_spirv(c.kernel, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}, {c.k_type, 1}})).data(), full.data());
  }
  // A kernel without a twin.
  EXPECT_EQ(detail::kernel_spirv(KernelId::attn_softmax, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}})).data(),
            detail::kernel_spirv(KernelId::attn_softmax).data());
}

}  // namespace
}  // namespace vkattn::test
