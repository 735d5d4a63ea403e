// Memory exhaustion on both backends: allocations are counted against the heap, so asking
// for more than is left is Error(out_of_memory) naming the heap, the request and the use,
// and freeing gives it all back; host allocation failure (provoked with
// support/failing_new.hpp) is Error(out_of_memory) too, never std::bad_alloc; absurd sizes
// are refused, never an abort. After each, the backend still computes attention correctly.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/heap_ledger.hpp"
#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/failing_new.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"
#include "vulkan/dispatch.hpp"

namespace vkattn::test {
namespace {

constexpr std::uint64_t kHeap = 64u << 20;             // the capped heap
constexpr std::size_t kFloats = std::size_t{1} << 20;  // 4 MiB tensors

// |f| throws Error(out_of_memory) whose message contains every part.
template <class F>
std::string expect_out_of_memory(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected Error(out_of_memory)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    // A failed host allocation is VK_ERROR_OUT_OF_HOST_MEMORY (C: VKATTN_ERROR_OUT_OF_HOST_MEMORY).
    if (std::string(e.what()).find("std::bad_alloc") != std::string::npos) {
      EXPECT_EQ(e.vk_result(), -1) << e.what();
    }
    return e.what();
  }
  return {};
}

class Memory : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    DeviceOptions options = GetParam() == BackendKind::vulkan ? test_options() : DeviceOptions{};
    options.cap_limits = uncapped();
    options.cap_limits->device_local_bytes = kHeap;
    std::string why;
    b_ = try_own_backend(GetParam(), options, why);
    VKATTN_REQUIRE_BACKEND(b_, why);
    cpu_ = make_backend(BackendKind::cpu);
  }
  void TearDown() override {
    if (b_) {
      expect_no_validation_messages(*b_);
    }
  }
  const char* heap_name() const { return GetParam() == BackendKind::vulkan ? "heap 0 (device-local)" : "host memory"; }

  // Attention (three stages and fused) on b_ against the CPU reference.
  void expect_attention_works() {
    const AttnInputs in = random_inputs(5, 4, 2, 37, 32, 1, 7);
    const AttnOutputs want = run_attention(*cpu_, in), got = run_attention(*b_, in);
    EXPECT_TRUE(all_close(got.out, want.out, in.out_shape(), 1e-5, 1e-5));
    const AttnInputTensors t = upload_inputs(*b_, in);
    Tensor out = b_->tensor(in.out_shape(), DType::f32);
    CommandList cmd = b_->commands();
    cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos}, {.path = AttentionPath::fused});
    cmd.submit_and_wait();
    EXPECT_TRUE(all_close(b_->download(out), want.out, in.out_shape(), 1e-5, 1e-5));
  }

  std::unique_ptr<Backend> b_, cpu_;
};

// Allocate 4 MiB tensors until the 64 MiB heap refuses one; free them; the same number fit
// again (nothing stays counted) and attention still works.
TEST_P(Memory, AllocateUntilRefusedThenRecover) {
  EXPECT_EQ(b_->limits().device_local_bytes, kHeap);
  std::size_t fitted[2] = {0, 0};
  for (std::size_t& n : fitted) {
    std::vector<Tensor> held;
    const std::string what = expect_out_of_memory(
        [&] {
          for (;;) {
            held.push_back(b_->tensor({kFloats}, DType::f32));
            ASSERT_LE(held.size(), kHeap / (4 * kFloats)) << "more tensors than the heap holds";
          }
        },
        {"vkattn: tensor: tensor needs 4194304 bytes from", heap_name(), "in use of 67108864"});
    n = held.size();
    EXPECT_NE(what.find(std::to_string(4 * kFloats * n) + " bytes in use"), std::string::npos) << what;
    // A cache that does not fit either, named as such.
    expect_out_of_memory([&] { b_->kv_cache({.n_kv_heads = 8, .head_dim = 128, .capacity = 1024, .dtype = DType::f32}); },
                         {"kv_cache: K and V of shape [1, 1024, 8, 128]", heap_name()});
  }
  EXPECT_EQ(fitted[0], kHeap / (4 * kFloats));
  EXPECT_EQ(fitted[1], fitted[0]);
  expect_attention_works();
}

// One request larger than the whole heap, and absurd sizes: refused at once.
TEST_P(Memory, AbsurdSizesAreRefused) {
  expect_out_of_memory([&] { b_->tensor({kHeap / 4 + 1}, DType::f32); }, {"tensor needs"});
  // 2^36 elements in each of K and V (256 GiB): refused, not an abort in new.
  const KvCacheConfig huge{.n_kv_heads = 256, .head_dim = 256, .capacity = std::size_t{1} << 20, .dtype = DType::f32};
  expect_out_of_memory([&] { b_->kv_cache(huge); }, {"kv_cache: K and V of shape [1, 1048576, 256, 256]"});
  expect_attention_works();
}

// The same 2^36-element cache on an uncapped CPU backend: physical memory is the heap.
TEST(MemoryCpu, UncappedAbsurdCacheIsRefused) {
  auto cpu = make_backend(BackendKind::cpu);
  const std::string physical = " of " + std::to_string(cpu->limits().device_local_bytes) + " ";
  expect_out_of_memory(
      [&] { cpu->kv_cache({.n_kv_heads = 256, .head_dim = 256, .capacity = std::size_t{1} << 20, .dtype = DType::f32}); },
      {"kv_cache: K and V", "host memory", physical.c_str()});
}

// An append that fails part way (its list's log cannot grow) leaves nothing of it in the
// list's plan: submitting that list must not count the tick its append would have had as
// run, or a list recorded after the next append (which gets that tick) could run before it.
TEST(MemoryCpu, FailedAppendLeavesNothingPlanned) {
  auto b = make_backend(BackendKind::cpu);
  constexpr std::size_t n = 100000;  // the log's room for it: 4.8 MB
  KvCache c = b->kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 1u << 17, .dtype = DType::f32});
  const Tensor big = b->tensor({n, 1, 8}, DType::f32), one = b->tensor({1, 1, 8}, DType::f32);
  std::vector<std::int32_t> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<std::int32_t>(t);
  CommandList failed = b->commands();
  {
    FailLargeAllocations fail(1u << 20);
    expect_out_of_memory([&] { failed.kv_append(c, big, big, positions); }, {"vkattn: kv_append:", "std::bad_alloc"});
  }
  EXPECT_EQ(c.next_position(0), 0);
  failed.submit_and_wait();
  CommandList first = b->commands(), second = b->commands();
  first.kv_append(c, one, one, std::vector<std::int32_t>{0});
  second.kv_append(c, one, one, std::vector<std::int32_t>{1});
  EXPECT_THROW(second.submit_and_wait(), InvalidArgument);  // first has not run
  first.submit_and_wait();
  second.submit_and_wait();
  EXPECT_EQ(c.next_position(0), 2);
}

// An op whose log cannot grow fails before its list keeps anything of it: no log of a
// cache the list had none of (once the cache is gone, destroying the list reads nothing of
// it), and no mark on the sequence it would have written, which dropping the list would
// have marked unwritten though no op of it wrote there (0.14.3: both stayed; the log's
// cache was read after it was freed).
TEST_P(Memory, FailedOpLeavesTheListNothingOfIt) {
  auto b = make_backend(GetParam());
  constexpr std::size_t n = 100000;  // the log's room for it: 4.8 MB
  const KvCacheConfig config{.n_seqs = 2, .n_kv_heads = 1, .head_dim = 8, .capacity = 1u << 17, .dtype = DType::f32};
  const Tensor big = b->tensor({n, 1, 8}, DType::f32), one = b->tensor({1, 1, 8}, DType::f32);
  std::vector<std::int32_t> positions(n), ones(n, 1);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<std::int32_t>(t);
  const auto fail_append = [&](CommandList& list, KvCache& cache) {
    FailLargeAllocations fail(1u << 20);
    expect_out_of_memory([&] { list.kv_append(cache, big, big, positions, ones); }, {"vkattn: kv_append:", "std::bad_alloc"});
  };
  {
    CommandList failed = b->commands();
    {
      KvCache gone = b->kv_cache(config);
      fail_append(failed, gone);
    }
  }
  KvCache c = b->kv_cache(config);
  auto later = std::make_unique<CommandList>(b->commands());
  {
    CommandList dropped = b->commands();
    dropped.kv_append(c, one, one, std::vector<std::int32_t>{0}, std::vector<std::int32_t>{0});
    fail_append(dropped, c);
    // Built on the dropped list's append: its sequence is marked.
    later->kv_append(c, one, one, std::vector<std::int32_t>{1}, std::vector<std::int32_t>{0});
  }
  expect_invalid([&] { (void)b->save_cache(c); }, {"sequence 0", "never wrote"});
  later.reset();
  c.reset(0);
  EXPECT_NO_THROW((void)b->save_cache(c));  // sequence 1 unmarked
}

// The CPU backend's attention needs host memory for one query token at a time (its scores
// over the keys held), not [n_tokens, n_heads, capacity]: a 512-token chunk over a
// 65,536-slot cache ran once on 2 GiB of temporaries (at 2,048 tokens and Llama's 32
// heads, 32 GiB: the process was killed). No allocation of 16 MiB or more may happen while
// it runs, and the result still matches the plain attention over the same keys.
TEST(MemoryCpu, AttentionOverALargeCacheTakesOneTokensScores) {
  auto b = make_backend(BackendKind::cpu);
  constexpr std::size_t n = 512, heads = 8, d = 16;
  KvCache c = b->kv_cache({.n_kv_heads = 1, .head_dim = d, .capacity = 65536, .dtype = DType::f32});
  const std::vector<float> q = normal(n * heads * d, 1), kv = normal(n * d, 2);
  Tensor tq = b->tensor({n, heads, d}, DType::f32), tk = b->tensor({n, 1, d}, DType::f32);
  Tensor cached = b->tensor({n, heads, d}, DType::f32), plain = b->tensor({n, heads, d}, DType::f32);
  b->upload(tq, q);
  b->upload(tk, kv);
  std::vector<std::int32_t> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<std::int32_t>(t);
  CommandList cmd = b->commands();
  cmd.kv_append(c, tk, tk, positions);
  cmd.attention(tq, c, cached, {.q_positions = positions});
  cmd.attention(tq, tk, tk, plain, {.q_positions = positions});
  {
    FailLargeAllocations fail(16u << 20);
    cmd.submit_and_wait();
    EXPECT_EQ(fail.refused(), 0u);
  }
  EXPECT_TRUE(all_close(b->download(cached), b->download(plain), {n, heads, d}, 1e-6, 0.0));
}

// A CPU submission that fails part way (a host allocation) ran the ops before the failing
// one and not those after it: the sequences its appends write are refused until reset,
// never read with rows missing (before, attention read zeros where the append had not run).
TEST(MemoryCpu, ASubmissionFailingPartWayLeavesItsSequencesUnwritten) {
  auto b = make_backend(BackendKind::cpu);
  constexpr std::size_t n = 256, heads = 8, d = 16;
  KvCache c = b->kv_cache({.n_kv_heads = 1, .head_dim = d, .capacity = 512, .dtype = DType::f32});
  Tensor tq = b->tensor({n, heads, d}, DType::f32), tk = b->tensor({n, 1, d}, DType::f32);
  Tensor out = b->tensor({n, heads, d}, DType::f32);
  b->upload(tq, normal(n * heads * d, 1));
  b->upload(tk, normal(n * d, 2));
  std::vector<std::int32_t> positions(n);
  for (std::size_t t = 0; t < n; ++t) positions[t] = static_cast<std::int32_t>(t);
  Tensor big = b->tensor({kFloats / 64, 2, 32}, DType::f32);
  CommandList cmd = b->commands();
  cmd.rope(big, std::vector<std::int32_t>(kFloats / 64, 9));  // on a host copy of 4 MiB
  cmd.kv_append(c, tk, tk, positions);
  {
    FailLargeAllocations fail(1u << 20);
    expect_out_of_memory([&] { cmd.submit_and_wait(); }, {"vkattn: submit_and_wait:", "std::bad_alloc"});
  }
  CommandList read = b->commands();
  expect_invalid([&] { read.attention(tq, c, out, {.q_positions = positions}); },
                 {"sequence 0 holds positions whose rows a command list never wrote", "KvCache::reset(0)"});
  expect_invalid([&] { (void)b->save_cache(c); }, {"never wrote"});
  c.reset(0);
  CommandList again = b->commands();
  again.kv_append(c, tk, tk, positions);
  again.attention(tq, c, out, {.q_positions = positions});
  again.submit_and_wait();
}

// Vulkan devices allow maxMemoryAllocationCount allocations at once (4096 on many Windows
// drivers; lavapipe: no limit) and every buffer is one: the ledger counts them, the one
// past the limit is Error(out_of_memory) naming it, and a released one makes room.
TEST(MemoryLedger, AllocationCountIsLimited) {
  detail::HeapLedger ledger({{"heap 0 (device-local)", std::uint64_t{1} << 20}});
  ledger.limit_allocations(3);
  std::vector<detail::HeapReservation> held;
  for (int i = 0; i < 3; ++i) held.emplace_back(ledger, 0, 16, "tensor");
  expect_out_of_memory([&] { detail::HeapReservation more(ledger, 0, 16, "tensor"); },
                       {"tensor needs a memory allocation of its own: this backend holds 3,", "maxMemoryAllocationCount"});
  EXPECT_EQ(ledger.used(0), 48u);  // the refused one counted nothing
  held.pop_back();
  held.emplace_back(ledger, 0, 16, "tensor");
  EXPECT_EQ(ledger.used(0), 48u);
}

// Host allocations that fail are Error(out_of_memory) naming the op, and leave the
// backend working.
TEST_P(Memory, HostAllocationFailureIsAnError) {
  const std::vector<float> x = normal(kFloats, 3);
  Tensor t = b_->tensor({kFloats}, DType::f32);
  KvCache cache = b_->kv_cache({.n_kv_heads = 8, .head_dim = 128, .capacity = 1024});  // 2 MiB each of K and V
  {
    FailLargeAllocations fail(1u << 20);
    expect_out_of_memory([&] { (void)b_->save_cache(cache); }, {"vkattn: save_cache:", "std::bad_alloc"});
    if (GetParam() == BackendKind::vulkan) {
      // A Vulkan tensor is zero-filled on the device: no host copy of its size.
      EXPECT_NO_THROW(b_->tensor({kFloats}, DType::f32));
    } else {
      expect_out_of_memory([&] { b_->tensor({kFloats}, DType::f32); }, {"vkattn: tensor:", "std::bad_alloc"});
    }
    expect_out_of_memory([&] { b_->upload(t, x); }, {"vkattn: upload:", "std::bad_alloc"});
    expect_out_of_memory([&] { (void)b_->download(t); }, {"vkattn: download:", "std::bad_alloc"});
    EXPECT_GT(fail.refused(), 0u);
  }
  b_->upload(t, x);
  if (GetParam() == BackendKind::cpu) {
    // The CPU backend computes at submit, on host copies of its tensors.
    Tensor r = b_->tensor({kFloats / 64, 2, 32}, DType::f32);
    CommandList cmd = b_->commands();
    cmd.rope(r, std::vector<std::int32_t>(kFloats / 64, 9));
    {
      FailLargeAllocations fail(1u << 20);
      expect_out_of_memory([&] { cmd.submit_and_wait(); }, {"vkattn: submit_and_wait:", "std::bad_alloc"});
    }
    cmd.submit_and_wait();
  }
  EXPECT_EQ(b_->download(t), x);
  expect_attention_works();
}

// A host allocation failing between the dispatches of one op (the list's vector of them
// growing, here between a split weighted sum's two) leaves none of them: the list counts
// and runs as if the op had not been asked for. Before, one stayed, without parameters.
TEST(MemoryVulkan, AnOpRefusedHalfwayLeavesNoDispatch) {
  std::string why;
  auto b = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(b, why);
  constexpr std::size_t keys = 4096;
  Tensor probs = b->tensor({1, 8, keys}, DType::f32), v = b->tensor({keys, 2, 64}, DType::f16);
  Tensor out = b->tensor({1, 8, 64}, DType::f32), x = b->tensor({64}, DType::f32), y = b->tensor({64}, DType::f32);
  {
    CommandList probe = b->commands();
    probe.attn_weighted_sum(probs, v, out);
    ASSERT_EQ(probe.stats().ops, 2u);  // partial sums, then their reduce
  }
  std::size_t refused = 0, taken = 0;
  for (std::size_t n = 1; n <= 40; ++n) {
    CommandList cmd = b->commands();
    for (std::size_t i = 0; i < n; ++i) cmd.copy(x, y);
    bool failed = false;
    {
      FailLargeAllocations fail(8 * sizeof(detail::Dispatch));  // the vector growing to 8 or more
      try {
        cmd.attn_weighted_sum(probs, v, out);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
        failed = true;
      }
    }
    EXPECT_EQ(cmd.stats().ops, n + (failed ? 0 : 2)) << n << " copies before";
    (failed ? refused : taken) += 1;
    cmd.submit_and_wait();
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(taken, 0u);
  expect_no_validation_messages(*b);
}

// A replay refused by a host allocation while it patches the ops' token words puts back
// every word it patched: the list runs with its recorded positions. Before, a failure
// between noting a word and keeping its bytes read them back from before the kept ones.
TEST(MemoryVulkan, AReplayRefusedWhilePatchingRestoresTheList) {
  std::string why;
  auto b = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(b, why);
  constexpr std::size_t n = 64, layers = 40;
  const std::vector<float> x = normal(n * 2 * 8, 5);
  std::vector<std::int32_t> pos(n), later(n);
  for (std::size_t t = 0; t < n; ++t) pos[t] = static_cast<std::int32_t>(t), later[t] = static_cast<std::int32_t>(t + 1000);
  // x rotated at |p|, by a list of its own.
  auto rotated = [&](const std::vector<std::int32_t>& p) {
    Tensor t = b->tensor({n, 2, 8}, DType::f32);
    b->upload(t, x);
    CommandList one = b->commands();
    one.rope(t, p);
    one.submit_and_wait();
    return b->download(t);
  };
  const std::vector<float> at_pos = rotated(pos), at_later = rotated(later);
  std::vector<Tensor> ts;
  CommandList cmd = b->commands();
  for (std::size_t l = 0; l < layers; ++l) {
    ts.push_back(b->tensor({n, 2, 8}, DType::f32));
    cmd.rope(ts.back(), pos);
  }
  std::size_t refused = 0;
  const std::size_t limits[] = {1024, 2048, 4096, 8192, std::size_t{1} << 20};
  for (std::size_t bytes : limits) {
    bool failed = false;
    {
      FailLargeAllocations fail(bytes);  // the kept words (256 bytes per op) growing past |bytes|
      try {
        cmd.set_tokens(later);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
        failed = true;
      }
    }
    refused += failed;
    for (Tensor& t : ts) b->upload(t, x);
    cmd.submit_and_wait();
    for (Tensor& t : ts) EXPECT_EQ(b->download(t), failed ? at_pos : at_later) << bytes;
    if (!failed) cmd.set_tokens(pos);
  }
  EXPECT_GT(refused, 0u);
  expect_no_validation_messages(*b);
}

// Runs |f| with every allocation after the first |allowed| refused: whether it was refused,
// as Error(out_of_memory) (or bad_alloc, where even the message could not be made).
template <class F>
bool refused_after(std::size_t allowed, F&& f) {
  FailAllocationsAfter fail(allowed);
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory) << e.what();
    return true;
  } catch (const std::bad_alloc&) {
    return true;
  }
  EXPECT_EQ(fail.refused(), 0u) << "a refusal swallowed, after " << allowed;
  return false;
}

// A replay whose appends take blocks the recording took none of (a paged cache) logs more
// of the cache's words than the recording did. Memory running out at any point of it is
// Error(out_of_memory) (or bad_alloc, where even the message could not be made), never an
// abort, and the list replays and runs afterwards. Before, the log grew while the words
// were applied, where nothing may throw.
TEST_P(Memory, AReplayTakingBlocksOutOfHostMemoryIsRefused) {
  Backend& b = *b_;
  const KvCacheConfig config{.n_seqs = 2,
                             .n_kv_heads = 1,
                             .head_dim = 16,
                             .capacity = 32,
                             .dtype = DType::f32,
                             .paged = true,
                             .block_size = 4,
                             .n_blocks = 16};
  Tensor kv = b.tensor({2, 1, 16}, DType::f32);
  b.upload(kv, normal(32, 7));
  const std::vector<std::int32_t> seq{0, 1};
  auto at = [](std::int32_t p) { return std::vector<std::int32_t>{p, p}; };
  std::size_t refused = 0;
  for (std::size_t allowed = 0; allowed < 10000; ++allowed) {
    KvCache cache = b.kv_cache(config);
    CommandList fill = b.commands(), cmd = b.commands();
    for (std::int32_t p = 0; p < 3; ++p) fill.kv_append(cache, kv, kv, at(p), seq);
    fill.submit_and_wait();
    cmd.kv_append(cache, kv, kv, at(3), seq);  // a block's last slot: no block taken
    cmd.submit_and_wait();
    const bool threw = refused_after(allowed, [&] { cmd.set_tokens(at(4), seq); });  // a block each
    if (!threw) break;
    ++refused;
    cmd.set_tokens(at(4), seq);
    cmd.submit_and_wait();
    EXPECT_EQ(cache.free_blocks(), 12u) << "after " << allowed;
  }
  EXPECT_GT(refused, 0u);
}

// A replay refused as it begins (memory running out while the list's last op, a rope held
// for fusion, is recorded, or while a rebuilding replay sets the parameters aside) changes
// nothing: the list replays and runs afterwards as one that was never refused, whether it
// ran before (an append, then the rope) or not (the rope alone, still held). Before, the
// caches' logs stayed started (later replays refused), and a rope held was dropped.
TEST(MemoryVulkan, AReplayRefusedAsItBeginsChangesNothing) {
  std::string why;
  auto b = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(b, why);
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 16, .capacity = 8, .dtype = DType::f32};
  Tensor q = b->tensor({1, 2, 16}, DType::f32), k = b->tensor({1, 1, 16}, DType::f32);
  // The list: an append (|ran|: run once), then a rope left last (held until something
  // records it).
  auto step = [&](KvCache& cache, const char* replay, bool ran) {
    ScopedEnv env("VKATTN_REPLAY", replay);
    CommandList cmd = b->commands();
    if (ran) cmd.kv_append(cache, k, k, std::vector<std::int32_t>{0});
    cmd.rope(q, k, std::vector<std::int32_t>{0});
    if (ran) cmd.submit_and_wait();
    return cmd;
  };
  auto upload = [&] {
    b->upload(q, normal(32, 1));
    b->upload(k, normal(16, 2));
  };
  // q rotated at position 1 (at 0 first, or not: the identity).
  upload();
  KvCache ref_cache = b->kv_cache(config);
  CommandList ref = step(ref_cache, "patch", false);
  ref.set_tokens(std::vector<std::int32_t>{1});
  ref.submit_and_wait();
  const std::vector<float> want = b->download(q);
  for (const auto& [replay, ran] : {std::pair{"patch", true}, {"rebuild", true}, {"patch", false}, {"rebuild", false}}) {
    std::size_t refused = 0;
    for (std::size_t allowed = 0; allowed < 10000; ++allowed) {
      SCOPED_TRACE(std::string(replay) + (ran ? ", ran" : ", held") + ", after " + std::to_string(allowed));
      KvCache cache = b->kv_cache(config);
      upload();
      CommandList cmd = step(cache, replay, ran);
      const bool threw = refused_after(allowed, [&] { cmd.set_tokens(std::vector<std::int32_t>{1}); });
      if (threw) {
        ++refused;
        ASSERT_NO_THROW(cmd.set_tokens(std::vector<std::int32_t>{1}));
      }
      ASSERT_NO_THROW(cmd.submit_and_wait());
      ASSERT_EQ(b->download(q), want);
      if (!threw) break;
    }
    EXPECT_GT(refused, 0u) << replay << (ran ? ", ran" : ", held");
  }
  expect_no_validation_messages(*b);
}

// An engine replays its decode step for every token: once the list has been replayed and
// run, a replay allocates nothing on the host (docs/host-cost.md), whatever the caches
// hold: several caches, two sequences each, one forked from the other; fused or three
// stages; keys rotated on read; a paged cache taking blocks as the loop goes. Every
// allocation on this thread is refused while the replays run, so one would be an
// out_of_memory here. (The CPU backend records its ops again on a replay, allocating.)
void expect_replays_allocate_nothing(Backend& b, const KvCacheConfig& config, AttentionPath path) {
  constexpr std::size_t layers = 2, heads = 4;
  const std::size_t kv_heads = config.n_kv_heads, dim = config.head_dim;
  std::vector<KvCache> caches;
  Tensor q = b.tensor({2, heads, dim}, DType::f32), k = b.tensor({2, kv_heads, dim}, DType::f32);
  Tensor out = b.tensor({2, heads, dim}, DType::f32);
  b.upload(q, normal(2 * heads * dim, 1));
  b.upload(k, normal(2 * kv_heads * dim, 2));
  for (std::size_t l = 0; l < layers; ++l) {
    caches.push_back(b.kv_cache(config));
    CommandList first = b.commands();
    first.kv_append(caches.back(), k, k, std::vector<std::int32_t>{0, 1}, std::vector<std::int32_t>{0, 0});
    first.kv_copy_sequence(caches.back(), 0, 1);
    first.submit_and_wait();
  }
  std::vector<std::int32_t> pos{2, 2};
  const std::vector<std::int32_t> seq{0, 1};
  CommandList cmd = b.commands();
  for (KvCache& c : caches) {
    cmd.rope(q, k, pos);
    cmd.kv_append(c, k, k, pos, seq);
    cmd.attention(q, c, out, {.q_positions = pos, .q_seq_ids = seq}, {.path = path});
  }
  cmd.submit_and_wait();
  for (int step = 0; step < 8; ++step) {  // the paged caches take a block every 4
    for (std::int32_t& p : pos) ++p;
    if (step < 2) {  // the list's own memory grows to what a replay needs
      cmd.set_tokens(pos, seq);
    } else {
      std::size_t refused = 0;
      bool threw = false;
      {
        FailLargeAllocations fail(1);
        try {
          cmd.set_tokens(pos, seq);
        } catch (...) {  // out_of_memory, or bad_alloc where even its message was refused
          threw = true;
        }
        refused = fail.refused();
      }
      EXPECT_FALSE(threw) << "step " << step;
      EXPECT_EQ(refused, 0u) << "step " << step;
      if (threw) break;
    }
    cmd.submit_and_wait();
  }
  EXPECT_EQ(cmd.stats().encodings, 1u);  // patched in place every time
}

TEST(MemoryVulkan, AReplayInADecodeLoopAllocatesNothing) {
  std::string why;
  auto b = try_own_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(b, why);
  const KvCacheConfig ring{.n_seqs = 2, .n_kv_heads = 2, .head_dim = 32, .capacity = 64};
  KvCacheConfig on_read = ring, paged = ring;
  on_read.rope = KvRope::on_read;
  paged.paged = true, paged.block_size = 4, paged.n_blocks = 32;
  for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
    SCOPED_TRACE(to_string(path));
    expect_replays_allocate_nothing(*b, ring, path);
    expect_replays_allocate_nothing(*b, on_read, path);
    expect_replays_allocate_nothing(*b, paged, path);
  }
  expect_no_validation_messages(*b);
}

INSTANTIATE_TEST_SUITE_P(Backends, Memory, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

}  // namespace
}  // namespace vkattn::test
