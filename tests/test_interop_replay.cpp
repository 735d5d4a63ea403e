// What the caches take as run when an engine replays a list recorded into its own command
// buffer and submits that buffer itself (docs/interop.md: Recording again).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/interop.hpp"
#include "support/random.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kKvHeads = 2, kHeadDim = 16, kCapacity = 8;

// A replay counts as run only while the caller's command buffer holds every op that
// changes a cache and its recording was the list's last run: not after a
// kv_copy_sequence recorded past the record (in no command buffer), nor after the list's own submission
// (the replays are then the list's to submit), until it is recorded again.
TEST_F(Interop, ReplaysCountAsRunWhileTheCallersBufferHoldsThem) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity};
  KvCache cache = gpu->kv_cache(config),
          later = gpu->kv_cache({.n_seqs = 2, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity});
  Tensor k = gpu->tensor({1, kKvHeads, kHeadDim}, DType::f32), v = gpu->tensor({1, kKvHeads, kHeadDim}, DType::f32);
  gpu->upload(k, normal(kKvHeads * kHeadDim, 1));
  gpu->upload(v, normal(kKvHeads * kHeadDim, 2));
  const auto saves = [&](const KvCache& c) {
    try {
      return !gpu->save_cache(c).empty();
    } catch (const InvalidArgument&) {
      return false;  // "... a command list that has not run"
    }
  };
  CommandList step = gpu->commands();
  step.kv_append(cache, k, v, std::vector<std::int32_t>{0});
  VkCommandBuffer cb = e.begin();
  step.record(cb);
  e.submit_and_wait(cb);
  step.set_tokens(std::vector<std::int32_t>{1});
  e.resubmit_and_wait(cb);
  EXPECT_TRUE(saves(cache));
  CommandList prefill = gpu->commands();
  prefill.kv_append(later, k, v, std::vector<std::int32_t>{0}, std::vector<std::int32_t>{0});
  prefill.submit_and_wait();
  step.kv_copy_sequence(later, 0, 1);  // in no command buffer
  EXPECT_FALSE(saves(later));
  // Not replayed over the fork, which has not run (the replay would take its place).
  expect_invalid([&] { step.set_tokens(std::vector<std::int32_t>{2}); }, {"set_tokens", "have not run"});
  step.submit_and_wait();  // the ops at 1 again, and the fork
  step.set_tokens(std::vector<std::int32_t>{2});
  EXPECT_FALSE(saves(later));
  step.submit_and_wait();
  EXPECT_TRUE(saves(later));
  VkCommandBuffer both = e.begin();
  step.record(both);
  e.submit_and_wait(both);  // the ops at 2 again, as the contract says of a record
  step.set_tokens(std::vector<std::int32_t>{3});
  e.resubmit_and_wait(both);
  EXPECT_TRUE(saves(cache) && saves(later));
  step.submit_and_wait();  // the list's own run (the ops at 3 again): its replays are its own
  step.set_tokens(std::vector<std::int32_t>{4});
  EXPECT_FALSE(saves(cache));
  step.submit_and_wait();
  { const CommandList gone = std::move(step); }  // puts back nothing
  EXPECT_EQ(cache.next_position(0), 5);
  EXPECT_EQ(later.next_position(1), 1);
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

// New tokens that would change a recorded list's dispatches (two sequences' rows made one
// sequence's: the tiles follow the sequence ids) are refused, and nothing changes; the
// command buffer goes on with the pattern recorded.
TEST_F(Interop, ReplayOfAnotherPatternIsRefused) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  KvCache cache = gpu->kv_cache({.n_seqs = 2, .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .capacity = kCapacity});
  Tensor q = gpu->tensor({2, 2 * kKvHeads, kHeadDim}, DType::f32), k = gpu->tensor({2, kKvHeads, kHeadDim}, DType::f32);
  Tensor out = gpu->tensor({2, 2 * kKvHeads, kHeadDim}, DType::f32);
  gpu->upload(q, normal(4 * kKvHeads * kHeadDim, 1));
  gpu->upload(k, normal(2 * kKvHeads * kHeadDim, 2));
  const std::vector<std::int32_t> two_seqs{0, 1};
  CommandList step = gpu->commands();
  step.kv_append(cache, k, k, std::vector<std::int32_t>{0, 0}, two_seqs);
  step.attention(q, cache, out, {.q_positions = std::vector<std::int32_t>{0, 0}, .q_seq_ids = two_seqs});
  VkCommandBuffer cb = e.begin();
  step.record(cb);
  e.submit_and_wait(cb);
  expect_invalid(
      [&] {
        step.set_tokens(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{0, 0});
      },
      {"set_tokens: positions / seq_ids", "tokens with the pattern recorded"});
  EXPECT_EQ(cache.next_position(0), 1);
  EXPECT_EQ(cache.next_position(1), 1);
  step.set_tokens(std::vector<std::int32_t>{1, 1}, two_seqs);
  e.resubmit_and_wait(cb);
  EXPECT_EQ(cache.slot_positions(1)[1], 1);
  EXPECT_EQ(step.stats().encodings, 1u);
  EXPECT_TRUE(new_validation_messages(*gpu).empty());
}

}  // namespace
}  // namespace vkattn::test
