// Threads: one backend used by 4 threads at once, each making its own tensors, caches and
// command lists and submitting 200 times a mix of ops (RoPE, copies, the three attention
// stages, fused attention, KV-cache appends and attention over the cache), all reading a
// pair of K/V tensors they share (half of the attention jobs submitted asynchronously, the
// handle dropped: each submission notes its use of the shared tensors, from four threads). Every result must equal, bit for bit,
// the same job run alone on the same backend beforehand, and the validation layer (whose thread checks report two threads in one
// command pool) must stay silent. Built on its own so that CI can run it under -fsanitize=thread (VKATTN_SANITIZE=thread). Also:
// 8 threads uploading and downloading at once behind staging copies, which share the staging buffers and submissions the backend
// keeps between transfers. And two threads in one list: the second is refused by name.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/backends.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kThreads = 4, kJobs = 200;
constexpr std::size_t kKeys = 24, kKvHeads = 2, kHeadDim = 32;

// What every thread reads and none writes: shared K and V, uploaded before threads start.
struct Shared {
  Tensor k, v;
  std::vector<std::int32_t> k_pos;
};

// One thread's objects, made by that thread: a cache and a list it submits again and again.
struct Own {
  KvCache cache;
  Tensor x;
  CommandList reused;
};

// Job |j| of thread |t| on |b|: records one command list, submits it once, returns what it
// wrote. Shapes vary with the job, so threads also build pipelines at the same time.
std::vector<float> run_job(Backend& b, const Shared& shared, Own& own, std::size_t t, std::size_t j) {
  const auto seed = static_cast<std::uint32_t>(1000 * t + j);
  const std::size_t n = 1 + j % 4, heads = kKvHeads * (1 + j % 2);
  const std::vector<std::int32_t> pos = uniform_positions(n, seed, 0, 1 << 20);
  switch (j % 6) {
    case 0: {  // RoPE on Q and K in one dispatch, then a copy
      const std::size_t d = 16 << (j % 3);
      const DType dt = j % 12 == 0 ? DType::f16 : DType::f32;
      Tensor q = b.tensor({n, heads, d}, dt), k = b.tensor({n, kKvHeads, d}, dt);
      Tensor out = b.tensor({n, heads, d}, dt);
      b.upload(q, normal(n * heads * d, seed));
      b.upload(k, normal(n * kKvHeads * d, seed + 1));
      CommandList cmd = b.commands();
      cmd.rope(q, k, pos, {.base = 500000.0});
      cmd.copy(q, out);
      cmd.submit_and_wait();
      std::vector<float> r = b.download(out), rk = b.download(k);
      r.insert(r.end(), rk.begin(), rk.end());
      return r;
    }
    case 1:    // the three stages over the shared K and V
    case 2: {  // fused attention over them
      Tensor q = b.tensor({n, heads, kHeadDim}, DType::f32), out = b.tensor({n, heads, kHeadDim}, DType::f32);
      b.upload(q, normal(n * heads * kHeadDim, seed));
      const std::vector<std::int32_t> q_pos(n, static_cast<std::int32_t>(kKeys - 1 - j % 5));
      const AttentionTokens tokens{.q_positions = q_pos, .k_positions = shared.k_pos};
      const AttentionConfig config{.window = j % 3 == 0 ? std::optional<std::uint32_t>(7) : std::nullopt,
                                   .path = j % 6 == 2 ? AttentionPath::fused : AttentionPath::three_stages};
      CommandList cmd = b.commands();
      if (j % 6 == 1) {
        Tensor scores = b.tensor({n, heads, kKeys}, DType::f32);
        cmd.attn_scores(q, shared.k, scores, tokens, config);
        cmd.attn_softmax(scores, scores, config);
        cmd.attn_weighted_sum(scores, shared.v, out);
      } else {
        cmd.attention(q, shared.k, shared.v, out, tokens, config);
      }
      if ((j / 6) % 2 == 1) {
        (void)cmd.submit();  // the handle dropped: the download waits for the work all the same
      } else {
        cmd.submit_and_wait();
      }
      return b.download(out);
    }
    case 3: {  // append to the thread's cache, attend over it
      if (own.cache.next_position(0) + static_cast<std::int32_t>(n) > 1000) own.cache.reset(0);
      const std::int32_t first = own.cache.next_position(0);
      std::vector<std::int32_t> cpos(n);
      for (std::size_t i = 0; i < n; ++i) cpos[i] = first + static_cast<std::int32_t>(i);
      Tensor k = b.tensor({n, kKvHeads, kHeadDim}, DType::f32), v = b.tensor({n, kKvHeads, kHeadDim}, DType::f32);
      Tensor q = b.tensor({n, heads, kHeadDim}, DType::f32), out = b.tensor({n, heads, kHeadDim}, DType::f32);
      b.upload(k, normal(n * kKvHeads * kHeadDim, seed));
      b.upload(v, normal(n * kKvHeads * kHeadDim, seed + 1));
      b.upload(q, normal(n * heads * kHeadDim, seed + 2));
      CommandList cmd = b.commands();
      cmd.kv_append(own.cache, k, v, cpos);
      cmd.attention(q, own.cache, out, {.q_positions = cpos}, {.window = 8u});  // a chunk sees only held keys
      cmd.submit_and_wait();
      return b.download(out);
    }
    case 4: {  // the thread's long-lived list, submitted again on new contents
      b.upload(own.x, normal(own.x.numel(), seed));
      own.reused.submit_and_wait();
      return b.download(own.x);
    }
    default: {  // many small lists, one op each
      Tensor x = b.tensor({n, heads, 8}, DType::f16);
      b.upload(x, normal(n * heads * 8, seed));
      for (std::size_t i = 0; i < 3; ++i) {
        CommandList cmd = b.commands();
        cmd.rope(x, pos, {.layout = RopeLayout::interleaved});
        cmd.submit_and_wait();
      }
      return b.download(x);
    }
  }
}

Own make_own(Backend& b) {
  Own own{b.kv_cache({.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = 16, .dtype = DType::f16}),
          b.tensor({2, kKvHeads, kHeadDim}, DType::f32), b.commands()};
  own.reused.rope(own.x, std::vector<std::int32_t>{3, 70000});
  own.reused.rope(own.x, std::vector<std::int32_t>{5, 11});
  return own;
}

class Threads : public ::testing::TestWithParam<const char*> {};

TEST_P(Threads, FourThreadsMatchOneThread) {
  const std::string kind = GetParam();
  auto messages = std::make_shared<std::vector<std::string>>();
  auto lock = std::make_shared<std::mutex>();
  std::unique_ptr<Backend> b;
  if (kind == "cpu") {
    b = make_backend(BackendKind::cpu);
  } else {
    DeviceOptions options = test_options();
    options.force_staging = kind == "vulkan_staging";  // transfers through one-shot submissions
    options.log = [messages, lock](LogLevel, std::string_view m) {
      std::lock_guard guard(*lock);
      messages->emplace_back(m);
    };
    std::string why;
    b = try_own_backend(BackendKind::vulkan, options, why);
    VKATTN_REQUIRE_BACKEND(b, why);
  }

  Shared shared{b->tensor({kKeys, kKvHeads, kHeadDim}, DType::f16), b->tensor({kKeys, kKvHeads, kHeadDim}, DType::f32), {}};
  b->upload(shared.k, normal(kKeys * kKvHeads * kHeadDim, 1));
  b->upload(shared.v, normal(kKeys * kKvHeads * kHeadDim, 2));
  for (std::size_t i = 0; i < kKeys; ++i) shared.k_pos.push_back(static_cast<std::int32_t>(i));

  // 1. Every job alone, one thread after another.
  std::vector<std::vector<std::vector<float>>> want(kThreads);
  for (std::size_t t = 0; t < kThreads; ++t) {
    Own own = make_own(*b);
    for (std::size_t j = 0; j < kJobs; ++j) want[t].push_back(run_job(*b, shared, own, t, j));
  }

  // 2. The same jobs on four threads at once.
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Own own = make_own(*b);
        ready.fetch_add(1);
        while (ready.load() < static_cast<int>(kThreads)) std::this_thread::yield();  // start together
        for (std::size_t j = 0; j < kJobs; ++j) got[t].push_back(run_job(*b, shared, own, t, j));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();

  for (std::size_t t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[t], "") << "thread " << t;
    ASSERT_EQ(got[t].size(), kJobs) << "thread " << t;
    for (std::size_t j = 0; j < kJobs; ++j) EXPECT_EQ(got[t][j], want[t][j]) << "thread " << t << ", job " << j;
  }
  expect_no_validation_messages(*b);
  b.reset();  // device destruction reports leaked objects too
  for (const auto& m : *messages) ADD_FAILURE() << "log: " << m;
}

// A list is used by one thread at a time. Two threads recording into one list at once:
// each call either records (and counts in stats()) or is refused by name, never a race on
// the list (ThreadSanitizer would report one; a Release build would corrupt the list).
TEST_P(Threads, TwoThreadsInOneListAreRefusedNotRaced) {
  const std::string kind = GetParam();
  std::unique_ptr<Backend> b;
  if (kind == "cpu") {
    b = make_backend(BackendKind::cpu);
  } else {
    DeviceOptions options = test_options();
    options.force_staging = kind == "vulkan_staging";
    std::string why;
    b = try_own_backend(BackendKind::vulkan, options, why);
    VKATTN_REQUIRE_BACKEND(b, why);
  }
  Tensor x = b->tensor({2, 2, 16}, DType::f32), y = b->tensor({2, 2, 16}, DType::f32);
  const std::vector<float> data = normal(x.numel(), 7);
  b->upload(x, data);
  CommandList cmd = b->commands();
  constexpr int kCalls = 800;
  std::atomic<int> recorded{0}, refused{0};
  std::vector<std::string> other(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        try {
          cmd.copy(x, y);
          recorded.fetch_add(1);
        } catch (const InvalidArgument& e) {
          const std::string m = e.what();
          if (m.find("copy: this = a list in use by another thread now") == std::string::npos) other[t] = m;
          refused.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(other, std::vector<std::string>(2));
  EXPECT_EQ(recorded + refused, 2 * kCalls);
  EXPECT_EQ(cmd.stats().ops, static_cast<std::size_t>(recorded.load()));
  cmd.submit_and_wait();
  EXPECT_EQ(b->download(y), data);
  expect_no_validation_messages(*b);
}

// The refusal itself, made certain: the log callback runs inside the call that caused the
// message (a pipeline built while the list is encoded), and another thread calls the list
// from there.
TEST(ListThreads, ACallWhileAnotherThreadIsInsideIsRefused) {
  CommandList* list = nullptr;
  std::string seen;
  DeviceOptions options = test_options();
  options.log_level = LogLevel::info;
  options.log = [&](LogLevel, std::string_view m) {
    if (!list || !seen.empty() || !m.starts_with("built pipeline")) return;
    std::thread([&] {
      try {
        (void)list->stats();
        seen = "no exception";
      } catch (const InvalidArgument& e) {
        seen = e.what();
      }
    }).join();
  };
  std::string why;
  std::unique_ptr<Backend> b = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(b, why);
  Tensor x = b->tensor({1, 2, 16}, DType::f32);
  CommandList cmd = b->commands();
  list = &cmd;
  cmd.rope(x, std::vector<std::int32_t>{5});
  cmd.submit_and_wait();  // (a rope is held back to fuse with what follows: built here)
  list = nullptr;
  EXPECT_EQ(seen, "vkattn: stats: this = a list in use by another thread now; valid: a list used by one thread at a time");
  EXPECT_EQ(cmd.stats().ops, 1u);  // the refusal left the list alone
}

// The same for a cache: while one thread submits a list that appends to it, another
// thread's reset, append into it, restore and replay of a list recorded over it are
// refused by name; reading it (the next position) is not using it, and works.
TEST(ListThreads, ACacheInUseByAnotherThreadIsRefused) {
  KvCache* shared = nullptr;
  KvCache* free_cache = nullptr;  // read by |reader| before |shared|
  Backend* backend = nullptr;
  CommandList* reader = nullptr;
  std::vector<std::string> seen;
  DeviceOptions options = test_options();
  options.log_level = LogLevel::info;
  options.log = [&](LogLevel, std::string_view m) {
    if (!shared || !seen.empty() || !m.starts_with("built pipeline")) return;
    std::thread([&] {
      const auto attempt = [&](const std::function<void()>& f) {
        try {
          f();
          seen.push_back("no exception");
        } catch (const InvalidArgument& e) {
          seen.push_back(e.what());
        }
      };
      attempt([&] { shared->reset(0); });
      attempt([&] {
        Tensor k = backend->tensor({1, 1, 16}, DType::f32), v = backend->tensor({1, 1, 16}, DType::f32);
        CommandList other = backend->commands();
        other.kv_append(*shared, k, v, std::vector<std::int32_t>{1});
      });
      attempt([&] { backend->restore_cache(*shared, std::vector<std::uint8_t>(8)); });
      attempt([&] { reader->set_tokens(std::vector<std::int32_t>{0}); });  // it records over the cache again
      attempt([&] { free_cache->reset(0); });                              // the refused replay gave it back
      seen.push_back("next position " + std::to_string(shared->next_position(0)));
    }).join();
  };
  std::string why;
  std::unique_ptr<Backend> b = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(b, why);
  backend = b.get();
  KvCache cache = b->kv_cache({.n_kv_heads = 1, .head_dim = 16, .capacity = 8});
  Tensor k = b->tensor({1, 1, 16}, DType::f32), v = b->tensor({1, 1, 16}, DType::f32);
  Tensor q = b->tensor({1, 1, 16}, DType::f32), out = b->tensor({1, 1, 16}, DType::f32);
  KvCache other = b->kv_cache({.n_kv_heads = 1, .head_dim = 16, .capacity = 8});
  free_cache = &other;
  CommandList reads = b->commands();  // attention over both caches, replayed by the other thread
  reads.attention(q, other, out, {.q_positions = std::vector<std::int32_t>{0}});
  reads.attention(q, cache, out, {.q_positions = std::vector<std::int32_t>{0}});
  reader = &reads;
  CommandList cmd = b->commands();
  cmd.kv_append(cache, k, v, std::vector<std::int32_t>{0});
  shared = &cache;
  cmd.submit_and_wait();  // the append's pipeline is built here, inside the submission
  shared = nullptr;
  const std::string in_use = "a cache in use by another thread now; valid: a cache used by one thread at a time";
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "vkattn: reset: this = " + in_use, "vkattn: kv_append: cache = " + in_use,
                      "vkattn: restore_cache: cache = " + in_use,
                      "vkattn: set_tokens: this = a list over a cache another thread is using now; valid: a cache used by "
                      "one thread at a time",
                      "no exception", "next position 1"}));
  EXPECT_EQ(cache.next_position(0), 1);  // the refusals left it alone
  cache.reset(0);                        // and it is free again
}

// More threads than the backend keeps staging buffers and submissions for (4 of each), each
// transferring tensors of sizes that fall in different kept sizes, and now and then one
// above the largest kept (4 MiB, a buffer of its own): every download must give back what
// that thread uploaded, whichever buffer and submission carried it.
// An engine's pattern: the list's thread submits again and again and hands a copy of each
// Submitted handle to another thread, which waits on it, while a third polls ready(). A
// waiter took the next submission's fence for its own, marked it finished, and the list
// then freed a command buffer still running (a crash in the driver), and the fence was
// reset while waited on (the validation layer's reports). Every wait must return true.
TEST(ListThreads, HandlesWaitedOnInOtherThreadsWhileTheListSubmitsAgain) {
  constexpr std::size_t kSubmissions = 300, kTokens = 64;
  std::string why;
  std::unique_ptr<Backend> b = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(b, why);
  Tensor x = b->tensor({kTokens, 4, 64}, DType::f32);
  b->upload(x, normal(x.numel(), 3));
  std::mutex m;
  std::condition_variable cv;
  std::deque<Submitted> handed;
  bool done = false;
  std::atomic<std::size_t> waited = 0, unfinished = 0;
  std::atomic<bool> stop_polling = false;
  std::string errors;
  auto catching = [&](auto f) {
    return [&, f] {
      try {
        f();
      } catch (const std::exception& e) {
        const std::lock_guard lock(m);
        errors += std::string(e.what()) + "\n";
      }
    };
  };
  std::thread waiter(catching([&] {
    for (;;) {
      Submitted h;
      {
        std::unique_lock lock(m);
        cv.wait(lock, [&] { return done || !handed.empty(); });
        if (handed.empty()) return;
        h = handed.front();
        handed.pop_front();
      }
      if (!h.wait()) ++unfinished;
      ++waited;
    }
  }));
  Submitted latest;
  std::mutex latest_lock;
  std::thread poller(catching([&] {
    while (!stop_polling) {
      Submitted h;
      {
        const std::lock_guard lock(latest_lock);
        h = latest;
      }
      (void)h.ready();
    }
  }));
  const std::vector<std::int32_t> pos(kTokens, 1);
  {
    CommandList cmd = b->commands();
    cmd.rope(x, pos);
    for (std::size_t i = 0; i < kSubmissions; ++i) {
      Submitted h = cmd.submit();
      {
        const std::lock_guard lock(latest_lock);
        latest = h;
      }
      {
        const std::lock_guard lock(m);
        handed.push_back(h);
      }
      cv.notify_one();
      if (i % 2) cmd.rope(x, pos);  // a new op: the list drops its encoding (the handles keep it)
      if (i % 20 == 19) {           // a list of a few ops
        cmd.submit_and_wait();
        cmd = b->commands();
        cmd.rope(x, pos);
      }
    }
    cmd.submit_and_wait();
  }
  {
    const std::lock_guard lock(m);
    done = true;
  }
  cv.notify_one();
  waiter.join();
  stop_polling = true;
  poller.join();
  EXPECT_EQ(errors, "");
  EXPECT_EQ(waited.load(), kSubmissions);
  EXPECT_EQ(unfinished.load(), 0u);
  expect_no_validation_messages(*b);
}

TEST(StagingThreads, EightThreadsEachReadBackTheirOwnData) {
  constexpr std::size_t kTransferThreads = 8, kRounds = 40;
  const std::size_t sizes[] = {1, 1000, 20000, 300000};  // floats: 4 B to 1.2 MB
  constexpr std::size_t kLarge = (std::size_t{4} << 20) / 4 + 4;
  DeviceOptions options = test_options();
  options.force_staging = true;
  std::string why;
  std::unique_ptr<Backend> b = try_own_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(b, why);
  std::vector<std::string> errors(kTransferThreads);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < kTransferThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (std::size_t r = 0; r < kRounds; ++r) {
          const std::size_t n = r % 13 == t % 13 ? kLarge : sizes[(t + r) % 4];
          const auto x = normal(n, static_cast<std::uint32_t>(100 * t + r));
          Tensor x_t = b->tensor({n}, DType::f32);
          b->upload(x_t, x);
          if (b->download(x_t) != x) {
            errors[t] = "round " + std::to_string(r) + ": another thread's data, or none";
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t t = 0; t < kTransferThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  expect_no_validation_messages(*b);
}

INSTANTIATE_TEST_SUITE_P(Backends, Threads, ::testing::Values("cpu", "vulkan", "vulkan_staging"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace vkattn::test
