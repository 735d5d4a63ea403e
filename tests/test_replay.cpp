// CommandList::set_tokens: a decode step recorded once and submitted for every token gives
// exactly what a list recorded afresh each time gives (the same dispatches, the same
// parameters), on both backends, through a wrapping ring with sinks, with keys rotated as
// they are read, for several sequences at once; what no longer fits is refused, changing
// nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kHeads = 8, kKvHeads = 2, kDim = 64;

// One layer's decode step for two sequences (one token each), and its tensors.
struct Step {
  Backend& b;
  KvCache cache;
  Tensor q, k, v, out;
  Step(Backend& backend, const KvCacheConfig& config)
      : b(backend), cache(b.kv_cache(config)), q(b.tensor({2, kHeads, kDim}, DType::f32)),
        k(b.tensor({2, kKvHeads, kDim}, DType::f32)), v(b.tensor({2, kKvHeads, kDim}, DType::f32)),
        out(b.tensor({2, kHeads, kDim}, DType::f32)) {}
  void record(CommandList& cmd, const std::vector<std::int32_t>& pos, const std::vector<std::int32_t>& seq, AttentionPath path) {
    cmd.rope(q, k, pos, {.base = 1000.0});
    cmd.kv_append(cache, k, v, pos, seq);
    cmd.attention(q, cache, out, {.q_positions = pos, .q_seq_ids = seq}, {.softcap = 30.0, .path = path});
  }
  // Sequence 1 starts 7 tokens ahead, so the two sequences wrap at different steps.
  void prefill_sequence_1() {
    Tensor k7 = b.tensor({7, kKvHeads, kDim}, DType::f32), v7 = b.tensor({7, kKvHeads, kDim}, DType::f32);
    b.upload(k7, normal(7 * kKvHeads * kDim, 7));
    b.upload(v7, normal(7 * kKvHeads * kDim, 8));
    CommandList c = b.commands();
    c.kv_append(cache, k7, v7, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6}, std::vector<std::int32_t>(7, 1));
    c.submit_and_wait();
  }
  void upload(std::uint32_t seed) {
    b.upload(q, normal(2 * kHeads * kDim, seed));
    b.upload(k, normal(2 * kKvHeads * kDim, seed + 1));
    b.upload(v, normal(2 * kKvHeads * kDim, seed + 2));
  }
};

// |steps| tokens of a decode step replayed on |gpu|, against lists recorded afresh on
// |gpu| (bit for bit) and against the CPU backend replaying too. |swap|: every other step
// takes the two sequences' tokens in the other order (new sequence ids per token, which a
// replay cannot patch in place).
void replay_against_fresh(Backend& gpu, Backend& cpu_backend, KvRope rope, AttentionPath path, std::int32_t steps,
                          bool swap = false) {
  const KvCacheConfig config{.n_seqs = 2,
                             .n_kv_heads = kKvHeads,
                             .head_dim = kDim,
                             .capacity = 40,
                             .dtype = DType::f16,
                             .n_sinks = 3,
                             .rope = rope,
                             .rope_config = {.base = 1000.0}};
  Step replayed(gpu, config), fresh(gpu, config), cpu(cpu_backend, config);
  for (Step* s : {&replayed, &fresh, &cpu}) s->prefill_sequence_1();
  CommandList gpu_step = gpu.commands(), cpu_step = cpu_backend.commands();
  const std::string what = std::string(rope == KvRope::on_read ? "on_read" : "stored") + ", path " +
                           std::to_string(static_cast<int>(path)) + " on " + gpu.device_name();
  for (std::int32_t t = 0; t < steps; ++t) {
    const bool swapped = swap && t % 2 == 1;
    const std::vector<std::int32_t> pos = swapped ? std::vector<std::int32_t>{t + 7, t} : std::vector<std::int32_t>{t, t + 7};
    const std::vector<std::int32_t> seq = swapped ? std::vector<std::int32_t>{1, 0} : std::vector<std::int32_t>{0, 1};
    for (Step* s : {&replayed, &fresh, &cpu}) s->upload(100 + static_cast<std::uint32_t>(t));
    if (t == 0) {
      replayed.record(gpu_step, pos, seq, path);
      cpu.record(cpu_step, pos, seq, path);
    } else {
      gpu_step.set_tokens(pos, seq);
      cpu_step.set_tokens(pos, seq);
    }
    CommandList once = gpu.commands();
    fresh.record(once, pos, seq, path);
    for (CommandList* c : {&gpu_step, &cpu_step, &once}) c->submit_and_wait();
    const std::vector<float> got = gpu.download(replayed.out), want = gpu.download(fresh.out);
    ASSERT_EQ(got, want) << what << ", step " << t << ": replayed against recorded afresh";
    ASSERT_TRUE(all_close(got, cpu_backend.download(cpu.out), {2, kHeads, kDim}, 2e-3, 2e-3))
        << what << ", step " << t << ": Vulkan against CPU";
    EXPECT_EQ(replayed.cache.slot_positions(0), fresh.cache.slot_positions(0));
    EXPECT_EQ(replayed.cache.slot_positions(1), cpu.cache.slot_positions(1));
  }
  EXPECT_EQ(gpu_step.stats().submits, static_cast<std::size_t>(steps));
  EXPECT_EQ(gpu_step.stats().encodings, 1u) << what << ": a replay recorded the command buffer again";
}

// 120 tokens: both sequences wrap their 37-slot rings three times.
TEST_F(VulkanVsCpuTest, ReplayedDecodeMatchesFreshLists) {
  for (KvRope rope : {KvRope::stored, KvRope::on_read}) {
    for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
      replay_against_fresh(*gpu_, *cpu_, rope, path, 120);
    }
  }
}

// A replay patches the recorded parameters in place; one whose tokens change more than
// those words (the sequences' order) records the list again; $VKATTN_REPLAY=rebuild records
// every replay again. All three agree with lists recorded afresh.
TEST_F(VulkanVsCpuTest, ReplayPatchedOrRebuiltAgree) {
  for (const char* mode : {"patch", "rebuild"}) {
    ScopedEnv replay("VKATTN_REPLAY", mode);
    for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
      replay_against_fresh(*gpu_, *cpu_, KvRope::on_read, path, 24, /*swap=*/true);
    }
  }
  ScopedEnv replay("VKATTN_REPLAY", "sometimes");
  expect_invalid([&] { gpu_->commands(); }, {"commands", "VKATTN_REPLAY", "sometimes"});
}

// Parameters reach a discrete GPU's device-local memory through an upload buffer the
// command buffer copies from; and the GPU-shaped kernels take other parameters.
TEST_F(VulkanVsCpuTest, ReplayThroughStagingAndGpuKernels) {
  DeviceOptions staging = test_options(), gpu_shape = shape_options(KernelShape::gpu);
  staging.force_staging = true;
  for (const DeviceOptions& options : {staging, gpu_shape}) {
    auto b = shared_backend(BackendKind::vulkan, options);
    replay_against_fresh(*b, *cpu_, KvRope::on_read, AttentionPath::fused, 60);
    EXPECT_TRUE(new_validation_messages(*b).empty());
  }
}

// The GPU decode kernels' variants ($VKATTN_DECODE), each split into stages of 16 keys so
// that even these small caches are merged across splits, with parameters reaching the
// device through staging as on a discrete GPU (the last-workgroup merge counts in them).
TEST_F(VulkanVsCpuTest, ReplayEachDecodeVariant) {
  for (const char* env : {"keys=1,keys_per_split=16,merge=last", "keys=1,keys_per_split=16,merge=two_pass",
                          "keys=1,keys_per_split=16,reduce=shared", "keys=1,keys_per_split=16,depth=3,run=2"}) {
    DeviceOptions options = shape_options(KernelShape::gpu);
    options.force_staging = true;
    ScopedEnv decode("VKATTN_DECODE", env);
    auto b = shared_backend(BackendKind::vulkan, options);
    replay_against_fresh(*b, *cpu_, KvRope::on_read, AttentionPath::fused, 60);
    EXPECT_TRUE(new_validation_messages(*b).empty()) << env;
  }
  // The group kernel, over keys rotated as read and over keys stored rotated.
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.force_staging = true;
  ScopedEnv decode("VKATTN_DECODE", "kernel=group,keys=2,keys_per_split=16");
  auto b = shared_backend(BackendKind::vulkan, options);
  for (KvRope rope : {KvRope::on_read, KvRope::stored}) replay_against_fresh(*b, *cpu_, rope, AttentionPath::fused, 60);
  EXPECT_TRUE(new_validation_messages(*b).empty()) << "kernel=group";
}

// The tiled kernel (VKATTN_PREFILL=kernel=tiled), split the same way: a replay through its
// tiles, keys rotated as read and stored rotated.
TEST_F(VulkanVsCpuTest, ReplayTiledKernel) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  options.force_staging = true;
  ScopedEnv decode("VKATTN_DECODE", "keys_per_split=16");
  ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
  auto b = shared_backend(BackendKind::vulkan, options);
  for (KvRope rope : {KvRope::on_read, KvRope::stored}) replay_against_fresh(*b, *cpu_, rope, AttentionPath::fused, 60);
  EXPECT_TRUE(new_validation_messages(*b).empty());
}

// What set_tokens refuses: another number of tokens (or of sequence ids); positions the caches cannot take (a
// sequence reset underneath the list). Nothing changes when it refuses.
TEST_F(VulkanVsCpuTest, ReplayRefusesWhatNoLongerFits) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    const KvCacheConfig config{.n_seqs = 2, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 16};
    Step s(*b, config);
    CommandList cmd = b->commands();
    s.upload(1);
    s.record(cmd, {0, 0}, {0, 1}, AttentionPath::automatic);
    cmd.submit_and_wait();
    expect_invalid([&] { cmd.set_tokens(std::vector<std::int32_t>{1}, std::vector<std::int32_t>{0}); },
                   {"set_tokens", "positions.size()", "2"});
    expect_invalid(
        [&] {
          cmd.set_tokens(std::vector<std::int32_t>{1, 1}, std::vector<std::int32_t>{0});
        },
        {"set_tokens: seq_ids.size() = 1", "0 (each op keeps its own) or the list's number of tokens, 2"});
    cmd.set_tokens(std::vector<std::int32_t>{1, 1}, std::vector<std::int32_t>{0, 1});
    cmd.submit_and_wait();
    s.cache.reset(1);  // sequence 1 starts again at 0: position 2 no longer continues it
    const std::vector<std::int32_t> before0 = s.cache.slot_positions(0);
    expect_invalid(
        [&] {
          cmd.set_tokens(std::vector<std::int32_t>{2, 2}, std::vector<std::int32_t>{0, 1});
        },
        {"kv_append", "positions"});
    EXPECT_EQ(s.cache.slot_positions(0), before0) << "sequence 0's append was undone";
    EXPECT_EQ(s.cache.next_position(0), 2);
    EXPECT_EQ(s.cache.next_position(1), 0);
    // The list still replays with positions that fit.
    cmd.set_tokens(std::vector<std::int32_t>{2, 0}, std::vector<std::int32_t>{0, 1});
    cmd.submit_and_wait();
    EXPECT_EQ(s.cache.next_position(0), 3);
    EXPECT_EQ(s.cache.next_position(1), 1);
  }
}

// Sequence ids given to a list none of whose ops took any would be dropped (the tokens
// appended to sequence 0 of a one-sequence cache, whatever they name): refused, and
// nothing changes. Where some op took them, an op recorded without keeps its own (a
// one-sequence cache beside one of several sequences).
TEST_F(VulkanVsCpuTest, ReplayRefusesIdsNoOpTook) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    Step s(*b, {.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 16});
    CommandList cmd = b->commands();
    s.upload(1);
    s.record(cmd, {0, 1}, {}, AttentionPath::automatic);
    cmd.submit_and_wait();
    for (const std::vector<std::int32_t>& ids : {std::vector<std::int32_t>{0, 7}, std::vector<std::int32_t>{0, 0}}) {
      expect_invalid(
          [&] {
            cmd.set_tokens(std::vector<std::int32_t>{2, 3}, ids);
          },
          {"set_tokens", "seq_ids = given", "no op of the list was recorded with sequence ids"});
    }
    EXPECT_EQ(s.cache.next_position(0), 2) << "a refused replay appended";
    cmd.set_tokens(std::vector<std::int32_t>{2, 3});
    cmd.submit_and_wait();
    EXPECT_EQ(s.cache.next_position(0), 4);
    Step two(*b, {.n_seqs = 2, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 16});
    KvCache one = b->kv_cache({.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 16});
    CommandList first = b->commands();
    first.kv_append(two.cache, two.k, two.v, std::vector<std::int32_t>{0, 1}, std::vector<std::int32_t>{1, 1});
    first.submit_and_wait();
    CommandList both = b->commands();
    two.record(both, {0, 1}, {0, 0}, AttentionPath::automatic);
    both.kv_append(one, two.k, two.v, std::vector<std::int32_t>{0, 1});
    both.submit_and_wait();
    both.set_tokens(std::vector<std::int32_t>{2, 3}, std::vector<std::int32_t>{1, 1});
    both.submit_and_wait();
    EXPECT_EQ(two.cache.next_position(0), 2);
    EXPECT_EQ(two.cache.next_position(1), 4);
    EXPECT_EQ(one.next_position(0), 4);
  }
}

// A list without token data, or whose ops take different numbers of tokens, has no tokens
// to replace; n_tokens() says what set_tokens takes (0 for none, the most where they differ).
TEST_F(VulkanVsCpuTest, ReplayRefusesListsWithoutOneTokenCount) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    Tensor two = b->tensor({2, kHeads, kDim}, DType::f32), one = b->tensor({1, kHeads, kDim}, DType::f32),
           other = b->tensor({2, kHeads, kDim}, DType::f32);
    CommandList none = b->commands();
    none.copy(two, other);
    EXPECT_EQ(none.n_tokens(), 0u);
    expect_invalid([&] { none.set_tokens(std::vector<std::int32_t>{0, 1}); }, {"set_tokens", "this", "no op that takes"});
    CommandList mixed = b->commands();
    mixed.rope(one, std::vector<std::int32_t>{5});
    EXPECT_EQ(mixed.n_tokens(), 1u);
    mixed.rope(two, std::vector<std::int32_t>{0, 1});
    mixed.copy(two, other);
    EXPECT_EQ(mixed.n_tokens(), 2u);
    expect_invalid([&] { mixed.set_tokens(std::vector<std::int32_t>{0, 1}); }, {"set_tokens", "this", "take 1 and 2 tokens"});
    // Values no op of the list reads (h and w with no M-RoPE op, ids no op took) are
    // refused, not dropped; by their counts before any value is read (a C caller's count
    // may not be its array's: a negative value past it was named).
    CommandList plain = b->commands();
    plain.rope(two, std::vector<std::int32_t>{0, 1});
    expect_invalid(
        [&] {
          plain.set_tokens(std::vector<std::int32_t>{2, -5, 0, 3, 0, INT32_MIN});
        },
        {"set_tokens", "positions.size() = 6 (t, h, w per token)", "no rope op with config.mrope"});
    expect_invalid(
        [&] {
          plain.set_tokens(std::vector<std::int32_t>{2, 3}, std::vector<std::int32_t>{-1, 0});
        },
        {"set_tokens", "seq_ids = given"});
    expect_invalid(
        [&] {
          plain.set_tokens(std::vector<std::int32_t>{2, -5});
        },
        {"set_tokens", "positions[1]", "-5", "[0, 2^31 - 1]"});
    expect_invalid(
        [&] {
          plain.set_tokens(std::vector<std::int32_t>{2, 3}, std::vector<std::int32_t>{1, 0});
        },
        {"set_tokens", "seq_ids = given"});
    plain.set_tokens(std::vector<std::int32_t>{2, 3});
  }
}

// An op that refuses after earlier ops of the list have advanced their caches (here layer
// 0's append overwrote a slot of its wrapped ring before layer 1's refused): every cache is
// as it was, and the list still replays, agreeing with one recorded afresh.
TEST_F(VulkanVsCpuTest, ReplayRefusedByALaterOpUndoesEarlierAppends) {
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    const KvCacheConfig config{.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 4, .n_sinks = 1};
    Tensor q = b->tensor({1, kHeads, kDim}, DType::f32), k = b->tensor({1, kKvHeads, kDim}, DType::f32),
           v = b->tensor({1, kKvHeads, kDim}, DType::f32), out = b->tensor({1, kHeads, kDim}, DType::f32);
    b->upload(q, normal(kHeads * kDim, 1));
    b->upload(k, normal(kKvHeads * kDim, 2));
    b->upload(v, normal(kKvHeads * kDim, 3));
    KvCache layers[2] = {b->kv_cache(config), b->kv_cache(config)};
    auto record = [&](CommandList& cmd, std::int32_t p) {
      for (KvCache& c : layers) {
        cmd.kv_append(c, k, v, {&p, 1});
        cmd.attention(q, c, out, {.q_positions = {&p, 1}});
      }
    };
    CommandList cmd = b->commands();
    record(cmd, 0);
    cmd.submit_and_wait();
    // Each step appends its own K and V, so that which slots attention reads shows in out.
    const auto new_kv = [&](std::uint32_t seed) {
      b->upload(k, normal(kKvHeads * kDim, seed));
      b->upload(v, normal(kKvHeads * kDim, seed + 1));
    };
    for (std::int32_t p = 1; p < 6; ++p) {  // past the 3-slot ring: slots are overwritten
      new_kv(10 + 2 * static_cast<std::uint32_t>(p));
      cmd.set_tokens({&p, 1});
      cmd.submit_and_wait();
    }
    const std::vector<float> at_five = b->download(out);
    layers[1].reset(0);  // layer 1 starts again at 0, layer 0 continues at 6
    const std::vector<std::int32_t> before = layers[0].slot_positions(0);
    const std::int32_t six = 6;
    expect_invalid([&] { cmd.set_tokens({&six, 1}); }, {"kv_append", "positions"});
    EXPECT_EQ(layers[0].slot_positions(0), before) << to_string(b->kind()) << ": layer 0's append was undone";
    EXPECT_EQ(layers[0].next_position(0), 6);
    EXPECT_EQ(layers[1].next_position(0), 0);
    // Back in step, the list replays, as a list recorded afresh does: over the one new key,
    // whose V is then every head's output (not step 5's mix of keys).
    layers[0].reset(0);
    new_kv(40);
    const std::int32_t zero = 0;
    cmd.set_tokens({&zero, 1});
    cmd.submit_and_wait();
    const std::vector<float> replayed = b->download(out);
    EXPECT_NE(replayed, at_five) << to_string(b->kind());
    const std::vector<float> v_now = b->download(v);
    for (std::size_t h = 0; h < kHeads; ++h) {
      for (std::size_t e = 0; e < kDim; ++e) {
        const float want = v_now[(h / (kHeads / kKvHeads)) * kDim + e];  // as the f16 cache holds it
        EXPECT_NEAR(replayed[h * kDim + e], want, 1e-3 * std::fabs(want) + 1e-6) << to_string(b->kind());
      }
    }
    for (KvCache& c : layers) c.reset(0);
    CommandList fresh = b->commands();
    record(fresh, 0);
    fresh.submit_and_wait();
    EXPECT_EQ(b->download(out), replayed) << to_string(b->kind());
    EXPECT_EQ(layers[0].slot_positions(0), layers[1].slot_positions(0));
  }
}

// Plain-tensor attention keeps its own key positions; only the queries' change.
TEST_F(VulkanVsCpuTest, ReplayKeepsPlainKeyPositions) {
  std::vector<std::vector<float>> outs;
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    Tensor q = b->tensor({1, 4, 32}, DType::f32), k = b->tensor({10, 2, 32}, DType::f32), out = b->tensor({1, 4, 32}, DType::f32);
    b->upload(q, normal(4 * 32, 5));
    b->upload(k, normal(10 * 2 * 32, 6));
    CommandList cmd = b->commands();
    const std::int32_t p0 = 9;
    cmd.attention(q, k, k, out, {.q_positions = {&p0, 1}});  // keys at 0..9
    const std::int32_t p1 = 4;                               // now sees keys 0..4 only
    cmd.set_tokens({&p1, 1});
    cmd.submit_and_wait();
    outs.push_back(b->download(out));
    CommandList direct = b->commands();
    direct.attention(q, k, k, out, {.q_positions = {&p1, 1}});
    direct.submit_and_wait();
    EXPECT_EQ(b->download(out), outs.back()) << to_string(b->kind());
  }
  EXPECT_TRUE(all_close(outs[0], outs[1], {1, 4, 32}, 1e-5, 1e-5)) << "Vulkan vs CPU";
}

// A refused replay leaves what destroying the list unrun does: two appends of sequence 0
// recorded before a reset, replayed (refused: the list has not run), then destroyed, leave
// the sequence empty and open. Before, the refused replay's notes made the list mark it
// unwritten, refusing every op over the cache until another reset.
TEST(ReplayRefused, LeavesWhatDestroyingTheListDoes) {
  for (BackendKind kind : {BackendKind::cpu, BackendKind::vulkan}) {
    SCOPED_TRACE(to_string(kind));
    std::string why;
    auto b = try_backend(kind, test_options(), why);
    VKATTN_REQUIRE_BACKEND(b, why);
    KvCache c = b->kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 8, .dtype = DType::f32});
    const Tensor k = b->tensor({1, 1, 8}, DType::f32);
    {
      CommandList list = b->commands();
      list.kv_append(c, k, k, std::vector<std::int32_t>{0});
      list.kv_append(c, k, k, std::vector<std::int32_t>{1});
      c.reset(0);
      expect_invalid([&] { list.set_tokens(std::vector<std::int32_t>{0}); }, {"set_tokens", "have not run"});
    }
    EXPECT_EQ(c.next_position(0), 0);
    CommandList after = b->commands();
    after.kv_append(c, k, k, std::vector<std::int32_t>{0});
    after.submit_and_wait();
    EXPECT_EQ(c.next_position(0), 1);
  }
}

}  // namespace
}  // namespace vkattn::test
