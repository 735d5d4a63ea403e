// Device faults, injected (src/vulkan/faults.hpp) at the next vkAllocateMemory,
// vkQueueSubmit or fence wait: each gives its ErrorCode; out of memory and timeouts leave
// the backend working; a lost device makes every later call on that backend fail with
// device_lost at once, and a new backend works. A machine without a Vulkan loader gets
// Error(unsupported) naming it, and its CPU backend works. The validation layer, which also reports
// Vulkan objects left alive when a device is destroyed, must stay silent, and the
// sanitizer build checks host leaks.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"
#include "vulkan/faults.hpp"

namespace vkattn::test {
namespace {

using detail::FaultSite;

constexpr std::size_t T = 3, H = 2, D = 16;
const std::vector<std::int32_t> kPos{1, 20, 300};

class Faults : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int s = 0; s < static_cast<int>(FaultSite::count); ++s) detail::inject_fault(static_cast<FaultSite>(s), VK_SUCCESS);
    backends_.clear();  // device destruction reports leaked Vulkan objects
    for (const auto& m : *log_) ADD_FAILURE() << "log: " << m;
  }

  // A Vulkan backend whose log is checked after it is gone; null with |why| without Vulkan.
  // |timeout_ms|: its submit_timeout_ms (0: the tests' default).
  Backend* make(std::string& why, bool staging = false, std::uint32_t timeout_ms = 0) {
    DeviceOptions options = test_options();
    options.force_staging = staging;
    if (timeout_ms) options.submit_timeout_ms = timeout_ms;
    options.log = [log = log_, lock = lock_](LogLevel, std::string_view m) {
      std::lock_guard guard(*lock);
      log->emplace_back(m);
    };
    auto b = try_own_backend(BackendKind::vulkan, options, why);
    if (!b) return nullptr;
    backends_.push_back(std::move(b));
    return backends_.back().get();
  }

  // Random x on a new tensor of |b|, and a list that rotates it by RoPE at kPos.
  struct Rotation {
    std::vector<float> x;
    Tensor t;
    CommandList cmd;
  };
  static Rotation rotation(Backend& b, std::uint32_t seed) {
    Rotation r{normal(T * H * D, seed), b.tensor({T, H, D}, DType::f32), b.commands()};
    b.upload(r.t, r.x);
    r.cmd.rope(r.t, kPos);
    return r;
  }

  // x rotated by |turns| RoPE passes at kPos, on the CPU reference.
  static std::vector<float> rotated(const std::vector<float>& x, int turns) {
    auto cpu = make_backend(BackendKind::cpu);
    Tensor t = cpu->tensor({T, H, D}, DType::f32);
    cpu->upload(t, x);
    CommandList cmd = cpu->commands();
    for (int i = 0; i < turns; ++i) cmd.rope(t, kPos);
    cmd.submit_and_wait();
    return cpu->download(t);
  }

  // The log so far, emptied (TearDown fails a test on any message left).
  std::vector<std::string> take_log() {
    std::lock_guard guard(*lock_);
    return std::exchange(*log_, {});
  }

  // A transfer whose copy overran the timeout: one warning naming |op|.
  void expect_overran(const char* op) {
    const std::vector<std::string> log = take_log();
    ASSERT_EQ(log.size(), 1u);
    EXPECT_NE(log[0].find(std::string(op) + ": a copy did not finish within 600000 ms"), std::string::npos) << log[0];
    EXPECT_NE(log[0].find("waited for it"), std::string::npos) << log[0];
  }

  std::shared_ptr<std::vector<std::string>> log_ = std::make_shared<std::vector<std::string>>();
  std::shared_ptr<std::mutex> lock_ = std::make_shared<std::mutex>();
  std::vector<std::unique_ptr<Backend>> backends_;
};

#define VKATTN_BACKEND_OR_SKIP(var, ...)                     \
  std::string var##_why;                                     \
  Backend* var = make(var##_why __VA_OPT__(, ) __VA_ARGS__); \
  VKATTN_REQUIRE_BACKEND(var, var##_why)

// |f| throws Error with |code| and |vk_result|.
void expect_error(const std::function<void()>& f, ErrorCode code, VkResult vk_result, const char* what = "") {
  try {
    f();
    ADD_FAILURE() << "no exception; expected Error(" << to_string(code) << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_EQ(e.vk_result(), vk_result) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// Out of device memory at vkAllocateMemory, wherever a buffer is made: a tensor, the
// second half of a cache, a list's parameters at its first submit. Each leaves the
// backend as it was.
TEST_F(Faults, AllocateMemoryOutOfMemory) {
  VKATTN_BACKEND_OR_SKIP(b);
  const auto x = normal(T * H * D, 1);
  Tensor t = b->tensor({T, H, D}, DType::f32);
  b->upload(t, x);

  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  expect_error([&] { b->tensor({64}, DType::f32); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY,
               "tensor: tensor needs 256 bytes from heap 0");
  // A driver past its maxMemoryAllocationCount says so (VK_ERROR_TOO_MANY_OBJECTS): memory too.
  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_TOO_MANY_OBJECTS);
  expect_error([&] { b->tensor({64}, DType::f32); }, ErrorCode::out_of_memory, VK_ERROR_TOO_MANY_OBJECTS,
               "the driver refused (VK_ERROR_TOO_MANY_OBJECTS)");
  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY, 1);  // K, then V fails
  expect_error([&] { b->kv_cache({.n_kv_heads = 1, .head_dim = D, .capacity = 8}); }, ErrorCode::out_of_memory,
               VK_ERROR_OUT_OF_DEVICE_MEMORY, "kv_cache: K and V of shape [1, 8, 1, 16]");

  CommandList cmd = b->commands();
  cmd.rope(t, kPos);  // positions and frequencies go in a parameter buffer at submit
  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  expect_error([&] { cmd.submit_and_wait(); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY, "op parameters");
  EXPECT_EQ(b->download(t), x);  // nothing ran
  cmd.submit_and_wait();
  EXPECT_TRUE(all_close(b->download(t), rotated(x, 1), {T, H, D}, 4e-6, 0));
}

TEST_F(Faults, SubmitOutOfMemory) {
  VKATTN_BACKEND_OR_SKIP(b);
  auto [x, t, cmd] = rotation(*b, 2);
  detail::inject_fault(FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  // Structured bindings are captured by name (clang 14 has not C++20's capture of them).
  expect_error([&cmd = cmd] { cmd.submit_and_wait(); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkQueueSubmit");
  EXPECT_EQ(b->download(t), x);  // not submitted
  EXPECT_EQ(cmd.stats().submits, 0u);
  cmd.submit_and_wait();
  EXPECT_TRUE(all_close(b->download(t), rotated(x, 1), {T, H, D}, 4e-6, 0));
}

// A fence wait that times out: Error(timeout); the submission still ran, the list's wait
// waits for it without running it again, and the list and the backend go on. Through staging, an upload whose copy overruns the
// timeout waits for it (its staging buffer is in use), warns, and succeeds: the data landed.
TEST_F(Faults, FenceWaitTimeout) {
  for (bool staging : {false, true}) {
    SCOPED_TRACE(staging ? "staging" : "mapped");
    VKATTN_BACKEND_OR_SKIP(b, staging);
    auto [x, t, cmd] = rotation(*b, 3);
    cmd.submit_and_wait();  // encoded (its parameters uploaded) and run once
    detail::inject_fault(FaultSite::fence_wait, VK_TIMEOUT);
    expect_error([&cmd = cmd] { cmd.submit_and_wait(); }, ErrorCode::timeout, VK_TIMEOUT, "did not finish within 600000 ms");
    detail::inject_fault(FaultSite::fence_wait, VK_TIMEOUT);
    EXPECT_FALSE(cmd.wait(0));  // still running, as far as the list knows
    EXPECT_TRUE(cmd.wait());    // waits for the second run alone, running nothing
    EXPECT_TRUE(all_close(b->download(t), rotated(x, 2), {T, H, D}, 1e-5, 0));
    cmd.submit_and_wait();  // runs a third time
    EXPECT_TRUE(all_close(b->download(t), rotated(x, 3), {T, H, D}, 1e-5, 0));
    if (staging) {
      const auto y = normal(T * H * D, 4);
      detail::inject_fault(FaultSite::fence_wait, VK_TIMEOUT);
      b->upload(t, y);
      expect_overran("upload");
      EXPECT_EQ(b->download(t), y);
    }
  }
}

// A fence wait that fails otherwise than by timing out (out of host memory here, after the
// real wait timed out) may leave the work running, as a timeout does: a download of what
// it writes waits for it (Error(timeout) while it runs, at 1 ms a wait) rather than
// reading rows half written. Before, only a timeout noted the list's uses.
TEST_F(Faults, FenceWaitFailingOtherwiseLeavesTheUsesNoted) {
  VKATTN_BACKEND_OR_SKIP(b, false, 1);
  if (!b->limits().unified_memory) GTEST_SKIP() << "tensors behind staging: the queue orders their copies after the work";
  constexpr std::size_t n = 128, keys = 16384, heads = 8, dim = 64;  // lavapipe: a second
  Tensor q = b->tensor({n, heads, dim}, DType::f32), k = b->tensor({keys, heads, dim}, DType::f32),
         v = b->tensor({keys, heads, dim}, DType::f32), out = b->tensor({n, heads, dim}, DType::f32);
  b->upload(q, normal(n * heads * dim, 1));
  b->upload(k, normal(keys * heads * dim, 2));
  b->upload(v, normal(keys * heads * dim, 3));
  std::vector<std::int32_t> pos(n);
  for (std::size_t t = 0; t < n; ++t) pos[t] = static_cast<std::int32_t>(keys - n + t);
  CommandList cmd = b->commands();
  cmd.attention(q, k, v, out, {.q_positions = pos});
  auto download = [&] {  // waiting 1 ms a try
    for (;;) {
      try {
        return b->download(out);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::timeout) throw;
      }
    }
  };
  try {
    cmd.submit_and_wait();
  } catch (const Error& e) {
    ASSERT_EQ(e.code(), ErrorCode::timeout) << e.what();
  }
  const std::vector<float> want = download();
  b->upload(out, std::vector<float>(n * heads * dim, 0.0f));
  detail::inject_fault(FaultSite::fence_wait, VK_ERROR_OUT_OF_HOST_MEMORY);
  expect_error([&] { cmd.submit_and_wait(); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_HOST_MEMORY);
  EXPECT_EQ(download(), want);
}

// Transfers behind staging keep their staging buffer and submission for the next transfer
// (src/vulkan/transfers.hpp), and only after they finished cleanly. A small upload on a
// backend that has made one needs no new memory: it succeeds with an allocation fault
// armed, which the next tensor then meets. One larger than what is kept (4 MiB) makes its
// own buffer and gets the fault. After a failed submit (whose submission and buffer are
// freed, not kept) and a copy that overran the timeout (waited for) the next transfers
// work and carry the right data.
TEST_F(Faults, TransfersAfterFaultsThroughStaging) {
  VKATTN_BACKEND_OR_SKIP(b, true);
  const auto x = normal(T * H * D, 6), y = normal(T * H * D, 7);
  Tensor t = b->tensor({T, H, D}, DType::f32);
  const std::size_t large = (std::size_t{4} << 20) / 4 + 4;
  Tensor big = b->tensor({large}, DType::f32);  // zero-filled on the device: no staging
  b->upload(t, x);

  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  b->upload(t, y);
  EXPECT_EQ(b->download(t), y);
  expect_error([&] { b->tensor({4}, DType::f32); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY, "tensor needs");
  detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  expect_error([&] { b->upload(big, std::vector<float>(large, 1.0f)); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY,
               "staging needs");

  detail::inject_fault(FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY);
  expect_error([&] { b->upload(t, x); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkQueueSubmit");
  EXPECT_EQ(b->download(t), y);  // nothing copied
  b->upload(t, x);
  EXPECT_EQ(b->download(t), x);

  detail::inject_fault(FaultSite::fence_wait, VK_TIMEOUT);
  EXPECT_EQ(b->download(t), x);
  expect_overran("download");
  b->upload(t, y);
  EXPECT_EQ(b->download(t), y);
  EXPECT_EQ(b->download(big), std::vector<float>(large, 0.0f));
}

std::vector<float> attend(Backend& b, KvCache& cache, std::int32_t q_pos);

// A reset or truncate whose slot table cannot reach the device (its staging submit out of
// memory) changes nothing on the host either: the sequence, and a paged cache's pool, are
// as they were, the device's table too (one transfer: its words and its bound together),
// and the next try works.
TEST_F(Faults, ResetAndTruncateThatFailChangeNothing) {
  VKATTN_BACKEND_OR_SKIP(b, true);
  for (const bool paged : {false, true}) {
    KvCacheConfig config{.n_seqs = 2, .n_kv_heads = 1, .head_dim = D, .capacity = 8, .dtype = DType::f32};
    if (paged) config.paged = true, config.block_size = 2, config.n_blocks = 8;
    KvCache cache = b->kv_cache(config);
    const Tensor k = b->tensor({6, 1, D}, DType::f32), v = b->tensor({6, 1, D}, DType::f32);
    CommandList cmd = b->commands();
    cmd.kv_append(cache, k, v, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}, std::vector<std::int32_t>(6, 0));
    cmd.submit_and_wait();
    const std::vector<std::int32_t> slots = cache.slot_positions(0);
    const std::size_t free = paged ? cache.free_blocks() : 0;
    const std::string what = paged ? "paged" : "ring";
    const std::vector<float> before = attend(*b, cache, 5);
    for (const bool truncate : {false, true}) {
      detail::inject_fault(FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY);
      expect_error([&] { truncate ? cache.truncate(0, 1) : cache.reset(0); }, ErrorCode::out_of_memory,
                   VK_ERROR_OUT_OF_DEVICE_MEMORY);
      EXPECT_EQ(cache.slot_positions(0), slots) << what;
      EXPECT_EQ(cache.next_position(0), 6) << what;
      EXPECT_EQ(attend(*b, cache, 5), before) << what;
      if (paged) {
        EXPECT_EQ(cache.free_blocks(), free) << what;
      }
    }
    cmd.submit_and_wait();  // not stale: nothing changed
    cache.truncate(0, 1);
    EXPECT_EQ(cache.next_position(0), 1) << what;
    if (paged) {
      EXPECT_EQ(cache.free_blocks(), 7u) << what;
    }
  }
}

// Attention of one query at |q_pos| over |cache| (one head), and the same on the CPU
// reference over a cache given |tokens| K/V rows at positions 0.. (seq 0).
std::vector<float> attend(Backend& b, KvCache& cache, std::int32_t q_pos) {
  Tensor q = b.tensor({1, 1, D}, DType::f32), out = b.tensor({1, 1, D}, DType::f32);
  b.upload(q, normal(D, 99));
  CommandList cmd = b.commands();
  const std::vector<std::int32_t> pos{q_pos}, seq{0};
  cmd.attention(q, cache, out, {.q_positions = pos, .q_seq_ids = seq});
  cmd.submit_and_wait();
  return b.download(out);
}

KvCacheConfig small_cache(bool paged) {
  KvCacheConfig config{.n_seqs = 2, .n_kv_heads = 1, .head_dim = D, .capacity = 8, .dtype = DType::f32};
  if (paged) config.paged = true, config.block_size = 2, config.n_blocks = 8;
  return config;
}

// Appends |n| rows of keys and values (from |seed|) at positions |first|.. of seq 0.
void append(Backend& b, KvCache& cache, std::size_t n, std::int32_t first, std::uint32_t seed) {
  Tensor k = b.tensor({n, 1, D}, DType::f32), v = b.tensor({n, 1, D}, DType::f32);
  b.upload(k, normal(n * D, seed));
  b.upload(v, normal(n * D, seed + 1));
  std::vector<std::int32_t> pos(n);
  for (std::size_t i = 0; i < n; ++i) pos[i] = first + static_cast<std::int32_t>(i);
  CommandList cmd = b.commands();
  cmd.kv_append(cache, k, v, pos, std::vector<std::int32_t>(n, 0));
  cmd.submit_and_wait();
}

// A truncate whose slot-table copy overruns the timeout (staging) waits for it and
// succeeds, and the device's table agrees with the host's: attention sees the 3 keys
// kept, as the CPU reference does. (It used to report the timeout and put the host's
// bookkeeping back while the device had the change.)
TEST_F(Faults, CacheChangeWhoseCopyOverrunsTheTimeoutLands) {
  VKATTN_BACKEND_OR_SKIP(b, true);
  auto cpu = make_backend(BackendKind::cpu);
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "ring");
    KvCache cache = b->kv_cache(small_cache(paged)), want = cpu->kv_cache(small_cache(paged));
    append(*b, cache, 6, 0, 1);
    append(*cpu, want, 3, 0, 1);
    detail::inject_fault(FaultSite::fence_wait, VK_TIMEOUT);
    cache.truncate(0, 3);
    expect_overran("truncate");
    EXPECT_EQ(cache.next_position(0), 3);
    EXPECT_TRUE(all_close(attend(*b, cache, 5), attend(*cpu, want, 5), {1, 1, D}, 1e-5, 1e-6));
  }
}

// restore_cache empties the device's slot table before it rewrites K and V: a failure at
// that first copy changes nothing; one later (K's copy out of memory) leaves every
// sequence empty, host and device alike (attention after a new append sees only it); a
// restore then works.
TEST_F(Faults, RestoreThatFailsChangesNothingOrEmptiesTheCache) {
  VKATTN_BACKEND_OR_SKIP(b, true);
  auto cpu = make_backend(BackendKind::cpu);
  for (const bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "ring");
    KvCache cache = b->kv_cache(small_cache(paged)), other = b->kv_cache(small_cache(paged));
    append(*b, cache, 6, 0, 1);
    append(*b, other, 4, 0, 3);
    const std::vector<std::uint8_t> bytes = b->save_cache(other), before = b->save_cache(cache);
    detail::inject_fault(FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY);
    expect_error([&] { b->restore_cache(cache, bytes); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_EQ(b->save_cache(cache), before);
    detail::inject_fault(FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY, 1);
    expect_error([&] { b->restore_cache(cache, bytes); }, ErrorCode::out_of_memory, VK_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_EQ(cache.next_position(0), 0);
    EXPECT_EQ(cache.slot_positions(0), std::vector<std::int32_t>(8, -1));
    if (paged) {
      EXPECT_EQ(cache.free_blocks(), 8u);
    }
    KvCache want = cpu->kv_cache(small_cache(paged));
    append(*b, cache, 2, 0, 5);
    append(*cpu, want, 2, 0, 5);
    EXPECT_TRUE(all_close(attend(*b, cache, 5), attend(*cpu, want, 5), {1, 1, D}, 1e-5, 1e-6));
    b->restore_cache(cache, bytes);
    EXPECT_EQ(b->save_cache(cache), bytes);
  }
}

// A list that appends to a cache and then fails counts as having run only once its work
// reached the device: failed at vkQueueSubmit, it is dropped unrun and its append is put
// back; failed at the fence wait (a timeout), the rows were written and the append stays.
TEST_F(Faults, FailedListCountsAsRunOnceItReachedTheDevice) {
  VKATTN_BACKEND_OR_SKIP(b);
  KvCache cache = b->kv_cache({.n_seqs = 1, .n_kv_heads = H, .head_dim = D, .capacity = 8, .dtype = DType::f32});
  const Tensor k = b->tensor({T, H, D}, DType::f32), v = b->tensor({T, H, D}, DType::f32);
  const std::vector<std::int32_t> positions{0, 1, 2};
  for (const auto& [site, fault] :
       {std::pair{FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY}, std::pair{FaultSite::fence_wait, VK_TIMEOUT}}) {
    {
      CommandList cmd = b->commands();
      cmd.kv_append(cache, k, v, positions);
      detail::inject_fault(site, fault);
      expect_error([&] { cmd.submit_and_wait(); }, fault == VK_TIMEOUT ? ErrorCode::timeout : ErrorCode::out_of_memory, fault);
    }
    const bool ran = site == FaultSite::fence_wait;
    EXPECT_EQ(cache.next_position(0), ran ? 3 : 0);
    EXPECT_EQ(cache.slot_positions(0)[2], ran ? 2 : -1);
  }
  EXPECT_NO_THROW((void)b->save_cache(cache));  // nothing marked
}

// An append whose recording fails after its list planned it (the device lost) leaves the
// list no log of the cache: a replay finds no append that has not run, and destroying the
// list after the cache reads nothing of it (0.14.3: the log stayed started; the replay
// was refused for it, and destroying the list read the freed cache).
TEST_F(Faults, AppendFailingAsItIsRecordedLeavesTheListNothingOfItsCache) {
  VKATTN_BACKEND_OR_SKIP(b);
  Tensor x = b->tensor({T, H, D}, DType::f32);
  CommandList cmd = b->commands();
  cmd.rope(x, kPos);
  {
    KvCache cache = b->kv_cache({.n_seqs = 1, .n_kv_heads = H, .head_dim = D, .capacity = 8, .dtype = DType::f32});
    detail::inject_fault(FaultSite::allocate_memory, VK_ERROR_DEVICE_LOST);
    expect_error([&] { b->tensor({4}, DType::f32); }, ErrorCode::device_lost, VK_ERROR_DEVICE_LOST);
    expect_error(
        [&] {
          cmd.kv_append(cache, x, x, std::vector<std::int32_t>{0, 1, 2});
        },
        ErrorCode::device_lost, VK_ERROR_DEVICE_LOST);
    EXPECT_EQ(cache.next_position(0), 0);
  }
  expect_error([&] { cmd.set_tokens(std::vector<std::int32_t>{4, 5, 6}); }, ErrorCode::device_lost, VK_ERROR_DEVICE_LOST);
}

// A submission that fails or times out has no times: the earlier run's are not its.
TEST_F(Faults, FailedSubmissionLeavesNoTimings) {
  VKATTN_BACKEND_OR_SKIP(b);
  if (!b->limits().timestamps) GTEST_SKIP() << "the device has no timestamps";
  Tensor t = b->tensor({T, H, D}, DType::f32);
  b->upload(t, normal(T * H * D, 8));
  CommandList cmd = b->commands({.timestamps = true});
  cmd.rope(t, kPos);
  for (const auto& [site, fault] :
       {std::pair{FaultSite::queue_submit, VK_ERROR_OUT_OF_DEVICE_MEMORY}, std::pair{FaultSite::fence_wait, VK_TIMEOUT}}) {
    cmd.submit_and_wait();
    ASSERT_EQ(cmd.timings().size(), 1u);
    detail::inject_fault(site, fault);
    expect_error([&] { cmd.submit_and_wait(); }, fault == VK_TIMEOUT ? ErrorCode::timeout : ErrorCode::out_of_memory, fault);
    EXPECT_TRUE(cmd.timings().empty());
    EXPECT_TRUE(cmd.wait());
  }
}

// After a lost device every call on that backend fails with device_lost before touching
// the device; objects made before still destroy cleanly; a new backend works.
void expect_lost_everywhere(Backend& b, Tensor& t, Tensor& out, KvCache& cache, CommandList& cmd) {
  const auto lost = [&](const std::function<void()>& f) {
    expect_error(f, ErrorCode::device_lost, VK_ERROR_DEVICE_LOST, "make a new backend");
  };
  lost([&] { b.tensor({4}, DType::f32); });
  lost([&] { b.kv_cache({.n_kv_heads = 1, .head_dim = D, .capacity = 4}); });
  lost([&] { b.upload(t, std::vector<float>(t.numel())); });
  lost([&] { (void)b.download(t); });
  lost([&] { (void)b.commands(); });
  lost([&] { cmd.set_tokens(kPos); });  // also where it would only patch the list's words
  lost([&] { cmd.rope(t, kPos); });
  lost([&] { cmd.submit_and_wait(); });
  lost([&] { cmd.attention(t, cache, out, {.q_positions = kPos}); });
}

TEST_F(Faults, DeviceLost) {
  struct Case {
    FaultSite site;
    const char* where;
  };
  for (const Case c : {Case{FaultSite::queue_submit, "vkQueueSubmit"}, Case{FaultSite::fence_wait, "vkWaitForFences"},
                       Case{FaultSite::allocate_memory, "vkAllocateMemory"}}) {
    SCOPED_TRACE(c.where);
    VKATTN_BACKEND_OR_SKIP(b);
    Tensor t = b->tensor({T, H, D}, DType::f32), out = b->tensor({T, H, D}, DType::f32);
    KvCache cache = b->kv_cache({.n_kv_heads = H, .head_dim = D, .capacity = 8, .dtype = DType::f32});
    CommandList cmd = b->commands();
    cmd.rope(t, kPos);
    detail::inject_fault(c.site, VK_ERROR_DEVICE_LOST);
    if (c.site == FaultSite::allocate_memory) {
      expect_error([&] { b->tensor({4}, DType::f32); }, ErrorCode::device_lost, VK_ERROR_DEVICE_LOST, c.where);
    } else {
      expect_error([&] { cmd.submit_and_wait(); }, ErrorCode::device_lost, VK_ERROR_DEVICE_LOST, c.where);
    }
    expect_lost_everywhere(*b, t, out, cache, cmd);
    EXPECT_TRUE(b->validation_messages().empty());  // still answers
  }
  // A new backend works.
  VKATTN_BACKEND_OR_SKIP(fresh);
  auto [x, t, cmd] = rotation(*fresh, 5);
  cmd.submit_and_wait();
  EXPECT_TRUE(all_close(fresh->download(t), rotated(x, 1), {T, H, D}, 4e-6, 0));
}

// The loader is opened at run time: $VKATTN_VULKAN_LIBRARY naming a file that does not
// exist stands for a machine without one. make_backend gives Error(unsupported) naming the
// library and the variable; the CPU backend works meanwhile; afterwards the real loader
// (already loaded or not) gives a device again.
TEST(Loader, MissingLoaderIsUnsupportedAndTheCpuBackendWorks) {
#ifdef VKATTN_TEST_LINKED_VULKAN
  GTEST_SKIP() << "built with VKATTN_LINK_VULKAN: the loader is linked, not looked for";
#else
  const std::string missing = "/nonexistent/libvulkan-missing.so.1";
  {
    ScopedEnv env("VKATTN_VULKAN_LIBRARY", missing);
    try {
      make_backend(BackendKind::vulkan, test_options());
      ADD_FAILURE() << "a Vulkan backend without a loader";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("VKATTN_VULKAN_LIBRARY"), std::string::npos) << e.what();
    }
    auto cpu = make_backend(BackendKind::cpu);
    Tensor x = cpu->tensor({T, H, D}, DType::f32);
    cpu->upload(x, normal(T * H * D, 1));
    CommandList cmd = cpu->commands();
    cmd.rope(x, kPos);
    cmd.submit_and_wait();
    EXPECT_NE(cpu->download(x), normal(T * H * D, 1));
  }
  std::string why;
  auto gpu = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
#endif
}

}  // namespace
}  // namespace vkattn::test
