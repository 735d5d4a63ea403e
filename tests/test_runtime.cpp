// The host runtime: command lists (many ops, one submit, barriers only on hazards, reuse),
// transfers of odd sizes on both memory paths, timestamps, the pipeline cache, device
// choice, limit caps and object lifetimes (the validation messenger itself:
// test_vulkan_internals.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

using Runtime = BackendTest;

TEST_P(Runtime, RoundTripOddSizes) {
  for (std::size_t n : {1u, 2u, 3u, 17u, 1001u, 65537u}) {
    const auto x = normal(n, static_cast<std::uint32_t>(n));
    Tensor f = backend().tensor({n}, DType::f32);
    backend().upload(f, x);
    EXPECT_EQ(backend().download(f), x) << n;

    // Halves of small integers and powers of two are exact.
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>(static_cast<int>(i % 2049) - 1024) / 4.0f;
    Tensor t = backend().tensor({n}, DType::f16);
    backend().upload(t, h);
    EXPECT_EQ(backend().download(t), h) << n;
    EXPECT_EQ(t.bytes(), 4 * ((n + 1) / 2));

    std::vector<std::int32_t> ints(n);
    for (std::size_t i = 0; i < n; ++i) ints[i] = static_cast<std::int32_t>(i * 2654435761u);
    Tensor it = backend().tensor({n}, DType::i32);
    backend().upload(it, ints);
    EXPECT_EQ(backend().download_i32(it), ints) << n;
  }
}

TEST_P(Runtime, NewTensorsAreZero) {
  Tensor t = backend().tensor({3, 5}, DType::f16);
  EXPECT_EQ(backend().download(t), std::vector<float>(15, 0.0f));
}

// Ops run in recording order: rope(x, m) then rope(x, n) must equal rope(x, m + n), which
// fails if the second dispatch does not wait for the first.
TEST_P(Runtime, ManyOpsOneSubmitInOrder) {
  const std::size_t T = 4, H = 3, D = 32, N = 40;
  const auto x = normal(T * H * D, 21);
  std::vector<Tensor> ts;
  for (std::size_t i = 0; i < 4; ++i) {
    ts.push_back(backend().tensor({T, H, D}, DType::f32));
    backend().upload(ts.back(), x);
  }
  CommandList cmd = backend().commands();
  for (std::size_t i = 0; i < N; ++i) cmd.rope(ts[i % 4], std::vector<std::int32_t>{1, 2, 3, 4}, {});
  cmd.copy(ts[0], ts[3]);
  EXPECT_EQ(cmd.stats().ops, N + 1);
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().submits, 1u);

  Tensor ref = backend().tensor({T, H, D}, DType::f32);
  backend().upload(ref, x);
  CommandList once = backend().commands();
  once.rope(ref, std::vector<std::int32_t>{10, 20, 30, 40}, {});
  once.submit_and_wait();
  const auto want = backend().download(ref);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(backend().download(ts[i]), want, {T, H, D}, 2e-5, 0)) << i;
}

// A list submitted again reruns on the tensors' current contents.
TEST_P(Runtime, CommandListReuse) {
  const std::size_t D = 16;
  const auto x = normal(D, 22);
  Tensor t = backend().tensor({1, 1, D}, DType::f32);
  backend().upload(t, x);
  CommandList cmd = backend().commands();
  cmd.rope(t, std::vector<std::int32_t>{5}, {});
  for (int i = 0; i < 3; ++i) cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().submits, 3u);

  Tensor ref = backend().tensor({1, 1, D}, DType::f32);
  backend().upload(ref, x);
  CommandList direct = backend().commands();
  direct.rope(ref, std::vector<std::int32_t>{15}, {});
  direct.submit_and_wait();
  EXPECT_TRUE(all_close(backend().download(t), backend().download(ref), {1, 1, D}, 1e-5, 0));

  // More ops recorded after a submit join the list; the next submit runs all of them on
  // the tensor's current contents: rope 5, then rope 10.
  cmd.rope(t, std::vector<std::int32_t>{10}, {});
  backend().upload(t, x);
  cmd.submit_and_wait();
  EXPECT_TRUE(all_close(backend().download(t), backend().download(ref), {1, 1, D}, 1e-5, 0));
}

TEST_P(Runtime, EmptyListSubmits) {
  CommandList cmd = backend().commands();
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().submits, 1u);
  EXPECT_EQ(cmd.stats().ops, 0u);
}

// A tensor may be dropped before the list that uses it runs.
TEST_P(Runtime, ListKeepsTensorsAlive) {
  Tensor keep = backend().tensor({1, 1, 4}, DType::f32);
  backend().upload(keep, std::vector<float>{1, 2, 3, 4});
  CommandList cmd = backend().commands();
  {
    Tensor tmp = backend().tensor({1, 1, 4}, DType::f32);
    backend().upload(tmp, std::vector<float>{5, 6, 7, 8});
    cmd.copy(tmp, keep);
  }
  cmd.submit_and_wait();
  EXPECT_EQ(backend().download(keep), (std::vector<float>{5, 6, 7, 8}));
}

TEST_P(Runtime, CopyAcrossShapesAndDtypes) {
  for (DType dt : {DType::f32, DType::f16}) {
    Tensor a = backend().tensor({3, 7}, dt), b = backend().tensor({21}, dt);
    std::vector<float> v(21);
    for (std::size_t i = 0; i < 21; ++i) v[i] = static_cast<float>(i) - 10.5f;
    backend().upload(a, v);
    CommandList cmd = backend().commands();
    cmd.copy(a, b);
    cmd.submit_and_wait();
    EXPECT_EQ(backend().download(b), v);
  }
}

TEST_P(Runtime, Timestamps) {
  if (!backend().limits().timestamps) {  // a device (or a cap) without them refuses them
    EXPECT_THROW(backend().commands({.timestamps = true}), Error);
    return;
  }
  Tensor t = backend().tensor({8, 4, 64}, DType::f32);
  Tensor u = backend().tensor({8, 4, 64}, DType::f32);
  CommandList cmd = backend().commands({.timestamps = true});
  cmd.rope(t, std::vector<std::int32_t>(8, 3), {});
  cmd.copy(t, u);
  cmd.submit_and_wait();
  const auto times = cmd.timings();
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[0].op, "rope");
  EXPECT_EQ(times[1].op, "copy");
  for (const auto& t : times) EXPECT_GE(t.ms, 0.0);
  EXPECT_TRUE(backend().commands().timings().empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, Runtime, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

class VulkanRuntime : public ::testing::Test {
 protected:
  std::shared_ptr<Backend> make(DeviceOptions options) {
    std::string why;
    auto b = try_backend(BackendKind::vulkan, options, why);
    if (!b) {
      if (vulkan_required()) ADD_FAILURE() << "no Vulkan device: " << why;
      return nullptr;
    }
    return b;
  }
  static void expect_clean(const Backend& b) { expect_no_validation_messages(b); }
};

#define VKATTN_MAKE_OR_SKIP(var, options) \
  auto var = make(options);               \
  if (!var) GTEST_SKIP() << "no Vulkan device available"

// Barriers appear exactly where a dispatch reads or overwrites what an earlier one wrote.
TEST_F(VulkanRuntime, BarriersOnlyOnHazards) {
  VKATTN_MAKE_OR_SKIP(b, test_options());
  Tensor x = b->tensor({2, 2, 8}, DType::f32), y = b->tensor({2, 2, 8}, DType::f32), z = b->tensor({2, 2, 8}, DType::f32);
  const std::vector<std::int32_t> pos{1, 2};
  struct Case {
    const char* name;
    std::function<void(CommandList&)> record;
    std::size_t barriers;
  };
  const Case cases[] = {
      {"independent",
       [&](CommandList& c) {
         c.rope(x, pos);
         c.rope(y, pos);
       },
       0},
      {"read after write",
       [&](CommandList& c) {
         c.rope(x, pos);
         c.copy(x, y);
       },
       1},
      {"write after write",
       [&](CommandList& c) {
         c.copy(x, y);
         c.copy(z, y);
       },
       1},
      {"write after read",
       [&](CommandList& c) {
         c.copy(x, y);
         c.rope(x, pos);
       },
       1},
      {"read after read",
       [&](CommandList& c) {
         c.copy(x, y);
         c.copy(x, z);
       },
       0},
      {"chain",
       [&](CommandList& c) {
         c.rope(x, pos);
         c.rope(x, pos);
         c.rope(x, pos);
         c.rope(y, pos);
       },
       2},
  };
  for (const Case& c : cases) {
    CommandList cmd = b->commands();
    c.record(cmd);
    cmd.submit_and_wait();
    EXPECT_EQ(cmd.stats().barriers, c.barriers) << c.name;
  }
  expect_clean(*b);
}

// The staging path (device-local memory behind copies), forced on a unified-memory device.
TEST_F(VulkanRuntime, StagingPathMatchesMappedPath) {
  DeviceOptions options = test_options();
  options.force_staging = true;
  VKATTN_MAKE_OR_SKIP(staged, options);
  VKATTN_MAKE_OR_SKIP(mapped, test_options());
  const std::size_t T = 33, H = 3, D = 64;
  const auto x = normal(T * H * D, 23);
  const auto pos = uniform_positions(T, 24);
  std::vector<float> out[2];
  int i = 0;
  for (Backend* b : {staged.get(), mapped.get()}) {
    Tensor t = b->tensor({T, H, D}, DType::f16);
    b->upload(t, x);
    CommandList cmd = b->commands();
    cmd.rope(t, pos, {});
    cmd.submit_and_wait();
    out[i++] = b->download(t);
  }
  EXPECT_EQ(out[0], out[1]);
  expect_clean(*staged);
  expect_clean(*mapped);
}

// Grids past maxComputeWorkGroupCount fold into y and z; capping the count forces it.
TEST_F(VulkanRuntime, GridFolding) {
  DeviceOptions options = test_options();
  DeviceLimits small = uncapped();
  small.max_workgroup_count = {3, 2, 65535};
  options.cap_limits = small;
  VKATTN_MAKE_OR_SKIP(b, options);
  auto cpu = make_backend(BackendKind::cpu);
  const std::size_t T = 61, H = 5, D = 64;  // 305 rows, many workgroups
  const auto x = normal(T * H * D, 25);
  const auto pos = uniform_positions(T, 26);
  std::vector<float> out[2];
  int i = 0;
  for (Backend* be : {b.get(), cpu.get()}) {
    Tensor t = be->tensor({T, H, D}, DType::f32);
    be->upload(t, x);
    CommandList cmd = be->commands();
    cmd.rope(t, pos, {});
    cmd.submit_and_wait();
    out[i++] = be->download(t);
  }
  EXPECT_TRUE(all_close(out[0], out[1], {T, H, D}, 4e-6, 0));
  expect_clean(*b);
}

TEST_F(VulkanRuntime, SpecMinimumLimits) {
  DeviceOptions options = test_options();
  options.cap_limits = spec_minimum_limits();
  VKATTN_MAKE_OR_SKIP(b, options);
  const DeviceLimits& l = b->limits();
  EXPECT_EQ(l.max_shared_memory, 16384u);
  EXPECT_EQ(l.max_workgroup_invocations, 128u);
  EXPECT_EQ(l.max_storage_buffer_range, 134217728u);
  EXPECT_EQ(l.max_texel_buffer_elements, 65536u);
  EXPECT_EQ(l.max_storage_buffers, 4u);
  EXPECT_FALSE(l.subgroup_arithmetic);
  EXPECT_FALSE(l.subgroup_size_control);
  EXPECT_FALSE(l.unified_memory);  // so tensors go through staging
  Tensor t = b->tensor({2, 2, 2048}, DType::f32);
  CommandList cmd = b->commands();
  cmd.rope(t, std::vector<std::int32_t>{1, 2}, {});
  cmd.submit_and_wait();
  expect_clean(*b);
}

TEST_F(VulkanRuntime, PipelineCacheFileWritten) {
  const auto dir = fresh_temp_dir("vkattn-test-cache-write");
  DeviceOptions options = test_options();
  options.pipeline_cache_dir = dir.string();
  {
    VKATTN_MAKE_OR_SKIP(b, options);
    Tensor t = b->tensor({1, 1, 2}, DType::f32);
    CommandList cmd = b->commands();
    cmd.rope(t, std::vector<std::int32_t>{1}, {});
    cmd.submit_and_wait();
  }
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().extension(), ".bin");
    EXPECT_GT(e.file_size(), 0u);
    ++files;
  }
  EXPECT_EQ(files, 1u);
  // A second backend loads the file; an unwritable directory is not an error.
  options.pipeline_cache_dir = "/proc/vkattn-cannot-write-here";
  VKATTN_MAKE_OR_SKIP(b2, options);
  Tensor t = b2->tensor({1, 1, 2}, DType::f32);
  CommandList cmd = b2->commands();
  cmd.rope(t, std::vector<std::int32_t>{1}, {});
  cmd.submit_and_wait();
  std::filesystem::remove_all(dir);
}

TEST_F(VulkanRuntime, DeviceSelection) {
  std::vector<DeviceInfo> devices;
  try {
    devices = list_devices();
  } catch (const Error& e) {
    if (vulkan_required()) FAIL() << e.what();
    GTEST_SKIP() << e.what();
  }
  if (devices.empty()) {
    if (vulkan_required()) FAIL() << "no Vulkan devices";
    GTEST_SKIP() << "no Vulkan devices";
  }
  std::size_t chosen = 0;
  for (const auto& d : devices) chosen += d.chosen;
  EXPECT_EQ(chosen, 1u);

  DeviceOptions by_index = test_options();
  by_index.device = std::to_string(devices[0].index);
  VKATTN_MAKE_OR_SKIP(b, by_index);
  EXPECT_EQ(b->device_name(), devices[0].name);

  DeviceOptions by_name = test_options();
  by_name.device = devices[0].name.substr(0, 4);
  EXPECT_NO_THROW(make_backend(BackendKind::vulkan, by_name));

  DeviceOptions missing = test_options();
  missing.device = "no-such-gpu-anywhere";
  try {
    make_backend(BackendKind::vulkan, missing);
    ADD_FAILURE() << "expected Error(no_device)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::no_device);
    EXPECT_NE(std::string(e.what()).find("no-such-gpu-anywhere"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(devices[0].name), std::string::npos) << e.what();
  }
  missing.device = "99";
  EXPECT_THROW(make_backend(BackendKind::vulkan, missing), Error);
}

// Destroying the backend first leaves tensors and lists valid to destroy (sanitizers
// check for leaks and use-after-free).
TEST_F(VulkanRuntime, BackendDestroyedFirst) {
  VKATTN_MAKE_OR_SKIP(b, test_options());
  Tensor t = b->tensor({4, 1, 8}, DType::f32);
  CommandList cmd = b->commands();
  cmd.rope(t, std::vector<std::int32_t>{1, 2, 3, 4}, {});
  cmd.submit_and_wait();
  b.reset();
  cmd.submit_and_wait();  // the list holds the device
}

}  // namespace
}  // namespace vkattn::test
