// KV cache, Vulkan against the CPU backend: mixed batches of three sequences (also at the
// Vulkan spec-minimum limits), and a 20,000-token soak through a 256-slot ring with sinks,
// replayed as engines run decode and checked every 1,000 tokens (no drift) with memory
// that never grows.
#include <gtest/gtest.h>

#include <optional>

#include "support/kv_model.hpp"

namespace vkattn::test {
namespace {

using KvCacheVulkanVsCpu = VulkanVsCpuTest;

// Prefill chunks and decode steps of 3 sequences mixed in every call (GQA 8, head_dim 128,
// f16 cache fed f32; then a 600-slot cache, whose decode splits the weighted sum's keys), the same calls on both backends,
// compared after every call; also at the Vulkan spec minimum limits (small tiles, no subgroups). Tolerances as in
// test_attention.cpp.
TEST_F(KvCacheVulkanVsCpu, MixedBatches) {
  const Layout layouts[] = {{.seqs = 3,
                             .heads = 16,
                             .kv_heads = 2,
                             .head_dim = 128,
                             .capacity = 40,
                             .sinks = 4,
                             .dtype = DType::f16,
                             .attn = {.softcap = 30.0}},
                            {.seqs = 3,
                             .heads = 24,
                             .kv_heads = 2,
                             .head_dim = 80,
                             .capacity = 33,
                             .sinks = 1,
                             .query = DType::f16,
                             .attn = {.window = 30u}},
                            // Enough slots that decode splits the weighted sum's keys.
                            {.seqs = 3, .heads = 8, .kv_heads = 2, .head_dim = 64, .capacity = 600}};
  DeviceOptions options = test_options();
  options.cap_limits = test_spec_minimum();
  std::string why;
  auto minimum = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(minimum, why);
  for (const auto& [s, gpu] :
       {std::pair{layouts[0], gpu_.get()}, std::pair{layouts[0], minimum.get()}, std::pair{layouts[1], gpu_.get()},
        std::pair{layouts[1], minimum.get()}, std::pair{layouts[2], gpu_.get()}}) {
    KvCache g = gpu->kv_cache(s.cache()), c = cpu_->kv_cache(s.cache());
    Model m(s);
    Rng rng(121, false);
    for (int call = 0; call < 30; ++call) {
      const Ids seqs = call == 0  ? Ids{0, 0, 1, 0, 2, 0, 1, 0, 0, 2, 0, 0}  // prefill, then decode
                       : call % 3 ? Ids{2, 0, 1}
                                  : Ids{1, 1, 0, 2, 2};
      const Tokens t = next_tokens(m, seqs, rng);
      const Outputs got = run(*gpu, g, s, &t, &t), want = run(*cpu_, c, s, &t, &t);
      m.add(t);
      const Shape sc{t.size(), s.heads, s.capacity}, o{t.size(), s.heads, s.head_dim};
      EXPECT_TRUE(all_close(got.scores, want.scores, sc, 1e-4, 1e-5)) << "scores, call " << call;
      EXPECT_TRUE(all_close(got.probs, want.probs, sc, 1e-5, 0)) << "probs, call " << call;
      EXPECT_TRUE(all_close(got.out, want.out, o, 2e-4, 1e-4)) << "out, call " << call;
      for (std::size_t seq = 0; seq < 3; ++seq) EXPECT_EQ(g.slot_positions(seq), m.slots(seq));
    }
  }
  expect_no_validation_messages(*minimum);
}

// 20,000 decode steps through a cache of 256 slots with 4 sinks on each backend, as an
// engine runs them: the first step's command list replayed (set_tokens) for the next, but
// every 1,000th step, which a list of its own records afresh, between replays of the same
// cache. That step: Vulkan against the CPU backend, the CPU backend against the
// plain-tensor reference, bookkeeping against the model; the memory never grows.
// (Recorded afresh every step, the soak took 2-2.5x as long on lavapipe.)
TEST_F(KvCacheVulkanVsCpu, Soak20000Tokens) {
  const Layout s{.heads = 2,
                 .kv_heads = 1,
                 .head_dim = 16,
                 .capacity = 256,
                 .sinks = 4,
                 .dtype = DType::f16,
                 .input = DType::f16,
                 .halves = true};
  struct Side {
    Backend* b;
    KvCache cache;
    Tensor q, k, v, scores, probs, out;
    std::optional<CommandList> step;  // the first step's list, replayed
  };
  std::vector<Side> sides;
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    auto t = [&](Shape shape, DType d = DType::f32) { return b->tensor(shape, d); };
    sides.push_back({b, b->kv_cache(s.cache()), t({1, 2, 16}), t({1, 1, 16}, DType::f16), t({1, 1, 16}, DType::f16),
                     t({1, 2, 256}), t({1, 2, 256}), t({1, 2, 16}), std::nullopt});
  }
  // K and V of 256 slots x 16 f16 dims, exactly, for the whole run.
  const std::size_t bytes = 2 * 1 * 1 * 256 * 16 * 2;
  for (const Side& side : sides) EXPECT_EQ(side.cache.bytes(), bytes) << to_string(side.b->kind());
  Model m(s);
  Rng rng(131, true);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20000; ++i) {
    const Tokens t = next_tokens(m, {0}, rng);
    m.add(t);
    const bool check = (i + 1) % 1000 == 0;
    std::vector<std::vector<float>> outs;
    for (Side& side : sides) {
      Backend& b = *side.b;
      b.upload(side.q, t.q);
      b.upload(side.k, t.k);
      b.upload(side.v, t.v);
      if (side.step && !check) {
        side.step->set_tokens(t.pos);
        side.step->submit_and_wait();
      } else {
        CommandList cmd = b.commands();
        cmd.kv_append(side.cache, side.k, side.v, t.pos);
        cmd.attn_scores(side.q, side.cache, side.scores, {.q_positions = t.pos});
        cmd.attn_softmax(side.scores, side.probs);
        cmd.attn_weighted_sum(side.probs, side.cache, side.out);
        cmd.submit_and_wait();
        if (!side.step) side.step.emplace(std::move(cmd));
      }
      if (!check) continue;
      outs.push_back(b.download(side.out));
      EXPECT_EQ(side.cache.bytes(), bytes);  // memory never grows
      EXPECT_EQ(side.cache.slot_positions(0), m.slots(0)) << to_string(b.kind()) << ", position " << i;
      EXPECT_EQ(side.cache.next_position(0), i + 1);
    }
    if (!check) continue;
    EXPECT_TRUE(all_close(outs[0], outs[1], {1, 2, 16}, 1e-5, 1e-5)) << "Vulkan vs CPU, position " << i;
    EXPECT_TRUE(all_close(outs[1], reference(m, t).out, {1, 2, 16}, 1e-5, 1e-5)) << "CPU vs reference, position " << i;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RecordProperty("seconds", std::to_string(seconds));
  std::printf("soak: 20000 steps on both backends in %.1f s\n", seconds);
}

}  // namespace
}  // namespace vkattn::test
