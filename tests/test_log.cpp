// The log sink: DeviceOptions::log at DeviceOptions::log_level, else VKATTN_LOG and
// stderr. A first pipeline build (seconds on CPU devices) is silent by default and an info
// line with its time when asked; pipeline cache files that cannot be written or are
// invalid are warnings. (Validation messages: VulkanRuntime.ValidationMessengerRecords.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "support/backends.hpp"

namespace vkattn::test {
namespace {

struct Line {
  LogLevel level;
  std::string text;
};

// A log that outlives the backends writing to it.
struct Sink {
  std::shared_ptr<std::vector<Line>> lines = std::make_shared<std::vector<Line>>();
  std::shared_ptr<std::mutex> lock = std::make_shared<std::mutex>();
  LogCallback callback() const {
    return [lines = lines, lock = lock](LogLevel level, std::string_view text) {
      std::lock_guard guard(*lock);
      lines->push_back({level, std::string(text)});
    };
  }
  std::size_t count(const std::string& part, LogLevel level) const {
    std::size_t n = 0;
    for (const Line& l : *lines) n += l.level == level && l.text.find(part) != std::string::npos;
    return n;
  }
};

std::unique_ptr<Backend> vulkan(const DeviceOptions& options) {
  std::string why;
  auto b = try_own_backend(BackendKind::vulkan, options, why);
  if (!b && vulkan_required()) ADD_FAILURE() << "no Vulkan device: " << why;
  return b;
}

void rope_once(Backend& b) {
  Tensor t = b.tensor({2, 3, 8}, DType::f32);
  CommandList cmd = b.commands();
  cmd.rope(t, std::vector<std::int32_t>{1, 2});
  cmd.submit_and_wait();
}

TEST(Log, FirstPipelineBuildIsAnInfoLine) {
  Sink quiet, verbose;
  DeviceOptions options = test_options();
  options.log = quiet.callback();
  auto b = vulkan(options);
  if (!b) GTEST_SKIP() << "no Vulkan device";
  rope_once(*b);
  EXPECT_TRUE(quiet.lines->empty()) << quiet.lines->front().text;  // default: warnings and errors only

  options.log = verbose.callback();
  options.log_level = LogLevel::info;
  b = vulkan(options);
  rope_once(*b);
  rope_once(*b);  // built once per backend
  EXPECT_EQ(verbose.count("built pipeline rope_", LogLevel::info), 1u);
  EXPECT_EQ(verbose.count(" ms", LogLevel::info), 1u);
  EXPECT_EQ(verbose.count(": " + b->device_name() + " (", LogLevel::info), 1u);  // the device chosen
  for (const Line& l : *verbose.lines) EXPECT_EQ(l.level, LogLevel::info) << l.text;
}

// Without a callback, VKATTN_LOG=info prints to stderr; by default nothing is printed.
TEST(Log, EnvironmentPrintsToStderr) {
  for (const char* level : {"", "info", "off"}) {
    SCOPED_TRACE(level);
    if (*level) {
      setenv("VKATTN_LOG", level, 1);
    } else {
      unsetenv("VKATTN_LOG");
    }
    ::testing::internal::CaptureStderr();
    auto b = vulkan(test_options());
    if (b) rope_once(*b);
    b.reset();
    const std::string err = ::testing::internal::GetCapturedStderr();
    unsetenv("VKATTN_LOG");
    if (std::string(level) == "info") {
      EXPECT_NE(err.find("vkattn: info: built pipeline rope_"), std::string::npos) << err;
    } else {
      EXPECT_EQ(err, "");
    }
  }
}

TEST(Log, PipelineCacheFileProblemsAreWarnings) {
  const auto dir = fresh_temp_dir("vkattn-test-log-cache");
  Sink sink;
  DeviceOptions options = test_options();
  options.pipeline_cache_dir = dir.string();
  options.log = sink.callback();
  auto b = vulkan(options);
  if (!b) GTEST_SKIP() << "no Vulkan device";
  rope_once(*b);
  b.reset();  // writes the file
  ASSERT_TRUE(std::filesystem::exists(dir));
  const auto file = std::filesystem::directory_iterator(dir)->path();
  EXPECT_TRUE(sink.lines->empty());

  std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a pipeline cache";
  b = vulkan(options);
  EXPECT_EQ(sink.count("pipeline cache " + file.string() + " is invalid", LogLevel::warning), 1u);
  rope_once(*b);
  b.reset();  // replaces it with a valid one
  b = vulkan(options);
  b.reset();
  EXPECT_EQ(sink.lines->size(), 1u);

  options.pipeline_cache_dir = "/proc/vkattn-cannot-write-here";
  b = vulkan(options);
  rope_once(*b);
  b.reset();
  EXPECT_EQ(sink.count("/proc/vkattn-cannot-write-here", LogLevel::warning), 1u);
  EXPECT_EQ(sink.count("cannot be written", LogLevel::warning), 1u);
  std::filesystem::remove_all(dir);
}

// Validation messages reaching the log: VulkanRuntime.ValidationMessengerRecords. A
// callback that throws loses its line, nothing else.
TEST(Log, ThrowingCallbackIsHarmless) {
  DeviceOptions options = test_options();
  options.log = [](LogLevel, std::string_view) { throw std::runtime_error("a callback that throws"); };
  options.log_level = LogLevel::info;
  auto b = vulkan(options);
  if (!b) GTEST_SKIP() << "no Vulkan device";
  rope_once(*b);
}

}  // namespace
}  // namespace vkattn::test
