// Tests of internals that the public API cannot reach, built into vkattn_internal_tests
// from the library's objects (a shared libvkattn hides these symbols).
#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "params.h"
#include "support/backends.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"
#include "vulkan/pipeline.hpp"

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

// A pipeline whose K and V are f32 or f16 is built from the kernel's twin without the
// quantized paths (a smaller module), and one whose K or V is quantized, or whose types
// are not given, from the kernel itself (shaders/CMakeLists.txt: vkattn_float_kv).
TEST(KernelModules, FloatKvTwinOnlyForFloatTypes) {
  using detail::KernelId;
  struct Case {
    KernelId kernel;
    std::uint32_t k_type, v_type;  // their constant ids; v_type == k_type: K only
  };
  const Case cases[] = {
      {KernelId::attn_decode, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE},
      {KernelId::attn_decode_shared_last, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE},
      {KernelId::attn_decode_group, VKATTN_SPEC_DECODE_K_TYPE, VKATTN_SPEC_DECODE_V_TYPE},
      {KernelId::attn_tiled_shared_f16, VKATTN_SPEC_TILED_K_TYPE, VKATTN_SPEC_TILED_V_TYPE},
      {KernelId::attn_fused_subgroup_texel, VKATTN_SPEC_FUSED_K_TYPE, VKATTN_SPEC_FUSED_V_TYPE},
      {KernelId::attn_scores_texel, VKATTN_SPEC_SCORES_K_TYPE, VKATTN_SPEC_SCORES_K_TYPE},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(detail::kernel_name(c.kernel));
    const std::span<const std::uint32_t> full = detail::kernel_spirv(c.kernel);
    auto module = [&](std::uint32_t k, std::uint32_t v) {
      return detail::kernel_spirv(c.kernel, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}, {c.v_type, v}, {c.k_type, k}}));
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
      if (c.v_type != c.k_type) {
        EXPECT_EQ(module(1, quantized).data(), full.data());
      }
    }
    // Types not given (the shader's defaults): the kernel itself.
    EXPECT_EQ(detail::kernel_spirv(c.kernel, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}})).data(), full.data());
  }
  // A kernel without a twin.
  EXPECT_EQ(detail::kernel_spirv(KernelId::attn_softmax, detail::spec({{VKATTN_SPEC_WG_SIZE, 64}})).data(),
            detail::kernel_spirv(KernelId::attn_softmax).data());
}

}  // namespace
}  // namespace vkattn::test
