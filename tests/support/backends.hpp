// Backends for tests. Vulkan backends run with the Khronos validation layer, and a test
// fails if the layer reports anything. Without a Vulkan device the test is skipped with
// the reason, unless VKATTN_REQUIRE_VULKAN=1 (CI), where it fails.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "vkattn/vkattn.hpp"

namespace vkattn::test {

inline bool vulkan_required() {
  const char* env = std::getenv("VKATTN_REQUIRE_VULKAN");
  return env && std::strcmp(env, "1") == 0;
}

inline std::string test_cache_dir() {
  return (std::filesystem::temp_directory_path() / "vkattn-test-pipeline-cache").string();
}

inline DeviceOptions test_options() {
  DeviceOptions options;
  options.validation = true;
  options.pipeline_cache_dir = test_cache_dir();
  return options;
}

// The backend, or null with |why| set when Vulkan is unavailable.
inline std::unique_ptr<Backend> try_backend(BackendKind kind, const DeviceOptions& options, std::string& why) {
  try {
    return make_backend(kind, options);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::no_device && e.code() != ErrorCode::unsupported) throw;
    why = e.what();
    return nullptr;
  }
}

// Skips the calling test (or fails it under VKATTN_REQUIRE_VULKAN=1) when null.
#define VKATTN_REQUIRE_BACKEND(ptr, why)                                              \
  do {                                                                                \
    if (!(ptr)) {                                                                     \
      if (::vkattn::test::vulkan_required()) FAIL() << "no Vulkan device: " << (why); \
      GTEST_SKIP() << "no Vulkan device: " << (why);                                  \
    }                                                                                 \
  } while (0)

// A fixture with one backend per test; for Vulkan it checks the validation layer after
// the test body.
class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = try_backend(GetParam(), test_options(), why);
    VKATTN_REQUIRE_BACKEND(backend_, why);
  }
  void TearDown() override {
    if (!backend_) return;
    for (const auto& m : backend_->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
  Backend& backend() { return *backend_; }
  std::unique_ptr<Backend> backend_;
};

// A Vulkan backend next to the CPU reference, for GPU-against-CPU comparisons.
class VulkanVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = try_backend(BackendKind::vulkan, test_options(), why);
    VKATTN_REQUIRE_BACKEND(gpu_, why);
    cpu_ = make_backend(BackendKind::cpu);
  }
  void TearDown() override {
    if (!gpu_) return;
    for (const auto& m : gpu_->validation_messages()) ADD_FAILURE() << "validation: " << m;
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

inline std::string backend_name(const ::testing::TestParamInfo<BackendKind>& info) {
  return to_string(info.param);
}

}  // namespace vkattn::test
