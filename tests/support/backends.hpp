// Backends for tests. Vulkan backends run with the Khronos validation layer, and a test
// fails if the layer reports anything. Without a Vulkan device the test is skipped with
// the reason, unless VKATTN_REQUIRE_VULKAN=1 (CI), where it fails.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "support/api.hpp"
#include "support/backend_pool.hpp"
#include "support/env.hpp"

namespace vkattn::test {

inline bool vulkan_required() { return env_is("VKATTN_REQUIRE_VULKAN", "1"); }

// A directory of the temporary folder no other process names: |name| and a random tag
// (two test runs on one machine would otherwise clear each other's).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / (name + "-" + std::to_string(std::random_device{}()));
}

inline std::string test_cache_dir() { return (std::filesystem::temp_directory_path() / "vkattn-test-pipeline-cache").string(); }

// Whether the tests' Vulkan backends load the validation layer: yes, unless
// VKATTN_TEST_VALIDATION=0 (CI's sanitizer step, whose calls the README step's run of the
// same tests validates: the layer's work, in code AddressSanitizer does not instrument
// but whose allocations it serves, was most of a test's time there).
inline bool test_validation() { return !env_is("VKATTN_TEST_VALIDATION", "0"); }

// Submissions may take 10 minutes, not the default 60 s: llvmpipe compiles a pipeline
// inside the submission that first uses it (1-60 s each, more with a cold cache on a busy
// machine); ctest's per-entry timeouts still stop a hang.
constexpr std::uint32_t kTestSubmitTimeoutMs = 600000;

inline DeviceOptions test_options(bool validation = test_validation()) {
  DeviceOptions options;
  options.validation = validation;
  options.pipeline_cache_dir = test_cache_dir();
  options.submit_timeout_ms = kTestSubmitTimeoutMs;
  return options;
}

// The Vulkan 1.1 minimums, except that a kernel may bind 8 storage buffers rather than 4:
// at 4, an input too large for the minimum texel view (1 MiB) leaves the fused kernel 6
// storage buffers and a masked scores kernel 5, which vkattn refuses by name
// (test_portability.cpp, FourStorageBuffersPerKernel, tests that and the fallbacks); the
// attention suites at the minimums then cover every other limit on every shape.
inline DeviceLimits test_spec_minimum() {
  DeviceLimits l = spec_minimum_limits();
  l.max_storage_buffers = 8;
  return l;
}

// The subgroup size the subgroup kernels ask of |b| (the library's
// preferred_subgroup_size): 16 where the device allows it, else the nearest it allows.
inline unsigned kernel_lanes(const Backend& b) {
  const DeviceLimits& l = b.limits();
  return l.subgroup_size_control ? std::clamp(16u, l.subgroup_min_size, l.subgroup_max_size) : l.subgroup_size;
}

// Skips a test of a kernel that needs subgroups of 8 lanes or more (the group decode
// kernel's rows, the matrix kernels' stand-in): on narrower ones (4, the narrowest the
// kernels are designed for, which lavapipe runs at 128-bit vectors) the library takes
// another kernel, whose results the tests that do not name a kernel check there (ci.md).
#define VKATTN_REQUIRE_EIGHT_LANES(b, what)                                                              \
  do {                                                                                                   \
    if (::vkattn::test::kernel_lanes(b) < 8) {                                                           \
      GTEST_SKIP() << (what) << " needs subgroups of 8 lanes or more; " << (b).device_name() << " runs " \
                   << ::vkattn::test::kernel_lanes(b);                                                   \
    }                                                                                                    \
  } while (false)

// A cap that lowers nothing, to be edited field by field.
inline DeviceLimits uncapped() {
  DeviceLimits l;
  l.subgroup_size = UINT32_MAX;
  l.subgroup_arithmetic = l.subgroup_shuffle = l.subgroup_size_control = l.subgroup_vote = true;
  l.subgroup_min_size = 0;
  l.subgroup_max_size = UINT32_MAX;
  l.max_storage_buffers = UINT32_MAX;
  l.compute_units = 0;
  l.max_shared_memory = l.max_workgroup_invocations = UINT32_MAX;
  l.max_workgroup_size = l.max_workgroup_count = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
  l.max_storage_buffer_range = UINT64_MAX;
  l.storage_offset_alignment = 1;
  l.max_texel_buffer_elements = UINT64_MAX;
  l.device_local_bytes = 0;
  l.storage_16bit = l.shader_float16 = l.timestamps = l.unified_memory = true;
  l.matrix_units = l.matrix_standin = true;
  return l;
}

// Test options with the kernel family fixed (tests of one family's planning).
inline DeviceOptions shape_options(KernelShape shape) {
  DeviceOptions options = test_options();
  options.kernels = shape;
  return options;
}

// Test options whose kernels read every input through storage buffers (no texel views),
// the path of devices whose maxTexelBufferElements is too small for a tensor.
inline DeviceOptions storage_buffer_options() {
  DeviceOptions options = test_options();
  options.cap_limits = uncapped();
  options.cap_limits->max_texel_buffer_elements = 0;
  return options;
}

// |make|'s backend, or null with |why| set where Vulkan is unavailable (no device, or none
// with what the options ask); other errors propagate.
template <class Make>
auto unless_unavailable(std::string& why, Make make) -> decltype(make()) {
  try {
    return make();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::no_device && e.code() != ErrorCode::unsupported) throw;
    why = e.what();
    return nullptr;
  }
}

// The backend (shared_backend: one per set of options in the test program), or null with
// |why| set when Vulkan is unavailable.
inline std::shared_ptr<Backend> try_backend(BackendKind kind, const DeviceOptions& options, std::string& why) {
  return unless_unavailable(why, [&] { return shared_backend(kind, options); });
}

// The same, always a backend of its own (tests that break, cap or watch their backend).
inline std::unique_ptr<Backend> try_own_backend(BackendKind kind, const DeviceOptions& options, std::string& why) {
  return unless_unavailable(why, [&] { return make_backend(kind, options); });
}

// Skips the calling test (or fails it under VKATTN_REQUIRE_VULKAN=1) when null.
#define VKATTN_REQUIRE_BACKEND(ptr, why)                                              \
  do {                                                                                \
    if (!(ptr)) {                                                                     \
      if (::vkattn::test::vulkan_required()) FAIL() << "no Vulkan device: " << (why); \
      GTEST_SKIP() << "no Vulkan device: " << (why);                                  \
    }                                                                                 \
  } while (0)

// A fixture with a backend (for Vulkan, shared with the program's other tests of the same
// options); it checks the validation layer's messages of the test after its body.
class BackendTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = try_backend(GetParam(), test_options(), why);
    VKATTN_REQUIRE_BACKEND(backend_, why);
  }
  void TearDown() override {
    if (backend_) expect_no_validation_messages(*backend_);
  }
  Backend& backend() { return *backend_; }
  std::shared_ptr<Backend> backend_;
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
    if (gpu_) expect_no_validation_messages(*gpu_);
  }
  // Runs |body| on a second Vulkan backend made with |options| (other limits), with the
  // same skip-or-fail and validation checks as gpu_.
  template <class Body>
  void on_vulkan(const DeviceOptions& options, Body&& body) {
    std::string why;
    auto gpu = try_backend(BackendKind::vulkan, options, why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    body(*gpu);
    expect_no_validation_messages(*gpu);
  }
  std::shared_ptr<Backend> gpu_, cpu_;
};

inline std::string backend_name(const ::testing::TestParamInfo<BackendKind>& info) { return to_string(info.param); }

}  // namespace vkattn::test
