// Tests of internals that the public API cannot reach, built into vkattn_internal_tests
// from the library's objects (a shared libvkattn hides these symbols).
#include <gtest/gtest.h>

#include "support/backends.hpp"
#include "vulkan/check.hpp"
#include "vulkan/context.hpp"

namespace vkattn::test {
namespace {

// The messenger really reports: an invalid call made on vkattn's own device is recorded.
TEST(VulkanInternals, ValidationMessengerRecords) {
  auto instance = detail::Instance::create(true);
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
  EXPECT_FALSE(instance->messages().empty());
}

}  // namespace
}  // namespace vkattn::test
