// Tests of internals that the public API cannot reach, built into vkattn_internal_tests
// from the library's objects (a shared libvkattn hides these symbols).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/backends.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"

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

}  // namespace
}  // namespace vkattn::test
