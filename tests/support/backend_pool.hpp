// One Vulkan backend per test program for each set of options. ctest runs many tests in one
// process (tests/CMakeLists.txt batches them), and a test asking for a backend with the same
// options and the same VKATTN_* environment (read when a backend is made: $VKATTN_DECODE,
// $VKATTN_PREFILL, ...) as an earlier test gets that backend again, with the pipelines it
// has built: on lavapipe each pipeline is an LLVM compile of 0.1-2 s, most of a small
// test's time, and the same kernel specializations recur across a suite's cases.
// What cannot be shared is made afresh: a backend with a log callback (it would see other
// tests' builds and messages), with a heap cap (other tests' staging buffers would count),
// or with a pipeline cache directory of its own (the tests of that file); a test that reads
// the pipelines built takes shared_backend_with_builds instead of a log of its own.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/api.hpp"

extern char** environ;

namespace vkattn::test {

inline std::string test_cache_dir();

namespace pool_detail {

struct Entry {
  std::shared_ptr<Backend> backend;
  std::shared_ptr<std::vector<std::string>> builds;  // shared_backend_with_builds's record
  const ::testing::TestInfo* test = nullptr;         // the test that last took it
  std::size_t baseline = 0;                          // its validation messages before that test
};

struct Pool {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
};

// Never destroyed at exit: the pool is made before the first backend loads the Vulkan
// driver, so a static pool would outlive the driver's own globals and crash tearing its
// devices down. Its backends go when the test program ends (below).
inline Pool& pool() {
  static Pool& p = *new Pool;
  return p;
}

class ReleaseAtProgramEnd : public ::testing::EmptyTestEventListener {
  void OnTestProgramEnd(const ::testing::UnitTest&) override {
    std::lock_guard<std::mutex> lock(pool().mutex);
    pool().entries.clear();
  }
};
inline const bool released_at_program_end = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new ReleaseAtProgramEnd);
  return true;
}();

// Every field a backend's creation reads, so that equal keys make equal backends. The
// asserts fail when DeviceLimits or DeviceOptions gain a field: add it here.
inline void put_limits(std::ostream& k, const DeviceLimits& l) {
  static_assert(sizeof(DeviceLimits) == 128, "a DeviceLimits field is missing from the pool's key");
  k << l.subgroup_size << ',' << l.subgroup_arithmetic << l.subgroup_shuffle << l.subgroup_size_control << ','
    << l.subgroup_min_size << ',' << l.subgroup_max_size << ',' << l.subgroup_vote << ',' << l.max_shared_memory << ','
    << l.max_workgroup_invocations << ',' << l.max_workgroup_size[0] << ',' << l.max_workgroup_size[1] << ','
    << l.max_workgroup_size[2] << ',' << l.max_workgroup_count[0] << ',' << l.max_workgroup_count[1] << ','
    << l.max_workgroup_count[2] << ',' << l.max_storage_buffer_range << ',' << l.max_storage_buffers << ','
    << l.storage_offset_alignment << ',' << l.max_texel_buffer_elements << ',' << l.device_local_bytes << ',' << l.storage_16bit
    << l.shader_float16 << l.timestamps << ',' << l.timestamp_period_ns << ',' << l.unified_memory << ',' << l.compute_units
    << ',' << l.matrix_units << l.matrix_standin;
}

inline std::string key(BackendKind kind, const DeviceOptions& o) {
  static_assert(sizeof(DeviceOptions) == 296, "a DeviceOptions field is missing from the pool's key");
  std::ostringstream k;
  k << static_cast<int>(kind) << '|' << (o.device ? "=" + *o.device : "-") << '|'
    << (o.validation ? static_cast<int>(*o.validation) : -1) << '|' << o.force_staging << '|'
    << o.pipeline_cache_dir.value_or("-") << '|' << o.submit_timeout_ms << '|' << (o.kernels ? static_cast<int>(*o.kernels) : -1)
    << '|' << (o.log_level ? static_cast<int>(*o.log_level) : -1) << '|'
    << (o.matrix_units ? static_cast<int>(*o.matrix_units) : -1) << '|';
  if (o.cap_limits) put_limits(k, *o.cap_limits);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "VKATTN_", 7) == 0) env.emplace_back(*e);
  }
  std::sort(env.begin(), env.end());
  for (const std::string& e : env) k << '|' << e;
  return k.str();
}

inline bool shareable(BackendKind kind, const DeviceOptions& o) {
  return kind == BackendKind::vulkan && !o.log && !(o.cap_limits && o.cap_limits->device_local_bytes != 0) &&
         (!o.pipeline_cache_dir || *o.pipeline_cache_dir == test_cache_dir());
}

// The pool's entry for |key| (made by |make| where empty), taken by the current test.
template <class Make>
Entry& take(const std::string& key, Make make) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  Entry& e = p.entries[key];
  if (!e.backend) make(e);  // a throw leaves the entry empty
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  if (e.test != test || !test) {
    e.test = test;
    e.baseline = e.backend->validation_messages().size();
  }
  return e;
}

}  // namespace pool_detail

// make_backend(kind, options), shared within the process where the options allow (above).
// Throws as make_backend does.
inline std::shared_ptr<Backend> shared_backend(BackendKind kind, const DeviceOptions& options) {
  if (!pool_detail::shareable(kind, options)) return make_backend(kind, options);
  return pool_detail::take(pool_detail::key(kind, options),
                           [&](pool_detail::Entry& e) { e.backend = make_backend(kind, options); })
      .backend;
}

// Sets |options| to append each pipeline build the backend logs (its "built pipeline ..."
// info lines) to |lines|.
inline void record_builds(DeviceOptions& options, std::shared_ptr<std::vector<std::string>> lines) {
  options.log_level = LogLevel::info;
  options.log = [lines = std::move(lines)](LogLevel, std::string_view m) {
    if (m.find("built pipeline") != std::string_view::npos || m.starts_with("matrix units: ")) lines->emplace_back(m);
  };
}

// Pipelines built, from the info log: which kernels a backend ran.
struct BuiltPipelines {
  std::shared_ptr<std::vector<std::string>> lines = std::make_shared<std::vector<std::string>>();
  void attach(DeviceOptions& options) const { record_builds(options, lines); }
  // The backend's info line on the units' kernel ("matrix units: ...") starts with |head|.
  bool matrix_line(std::string_view head) const {
    return std::any_of(lines->begin(), lines->end(), [&](const std::string& l) { return l.starts_with(head); });
  }
  bool any(const std::string& kernel) const {
    return std::any_of(lines->begin(), lines->end(),
                       [&](const std::string& l) { return l.find("built pipeline " + kernel + " ") != std::string::npos; });
  }
};

// The same for a backend that records the pipelines it builds (its "built pipeline" info
// lines, into |builds|): the builds of every test that took it, so a test reads what its
// own ops chose by their specialization (a kernel built once serves every later test).
// |options| must not have a log callback of their own.
inline std::shared_ptr<Backend> shared_backend_with_builds(BackendKind kind, DeviceOptions options,
                                                           std::shared_ptr<std::vector<std::string>>& builds) {
  EXPECT_FALSE(options.log) << "shared_backend_with_builds sets the log callback";
  pool_detail::Entry& e = pool_detail::take("builds|" + pool_detail::key(kind, options), [&](pool_detail::Entry& n) {
    n.builds = std::make_shared<std::vector<std::string>>();
    record_builds(options, n.builds);
    n.backend = make_backend(kind, options);
  });
  builds = e.builds;
  return e.backend;
}

// The validation messages |b| reported during the current test: those since the test first
// took it from the pool, or all of them for a backend of its own.
inline std::vector<std::string> new_validation_messages(const Backend& b) {
  std::vector<std::string> all = b.validation_messages();
  pool_detail::Pool& p = pool_detail::pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (const auto& [key, e] : p.entries) {
    if (e.backend.get() != &b) continue;
    if (e.test == ::testing::UnitTest::GetInstance()->current_test_info() && e.baseline <= all.size()) {
      all.erase(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(e.baseline));
    }
    break;
  }
  return all;
}

// Fails the current test with each validation message |b| reported during it.
inline void expect_no_validation_messages(const Backend& b, const std::string& context = "") {
  for (const std::string& m : new_validation_messages(b)) {
    ADD_FAILURE() << "validation: " << m << (context.empty() ? "" : " (" + context + ")");
  }
}

}  // namespace vkattn::test
