// KvRope::on_read (StreamingLLM): keys stored unrotated and rotated as attention reads
// them, by their position inside the cache; the query by its own. Checked on both
// backends against a reference recomputed from the full history with public ops only:
// the visible keys (sinks, then the ring's last positions) rotated at their in-cache
// positions by RoPE on plain tensors, then plain three-stage attention.
#include <gtest/gtest.h>

#include <algorithm>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

struct OnReadCase {
  std::size_t capacity, sinks, head_dim, rotary_dim;
  RopeLayout layout;
  DType dtype;
  std::size_t steps;
};

// Plain attention for one query over given (already rotated) keys, on |b|.
std::vector<float> plain_attention(Backend& b, const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, std::size_t n_keys, std::size_t H, std::size_t Hk, std::size_t D,
                                   DType kv_dtype) {
  Tensor tq = b.tensor({1, H, D}, DType::f32), tk = b.tensor({n_keys, Hk, D}, kv_dtype), tv = b.tensor({n_keys, Hk, D}, kv_dtype);
  Tensor s = b.tensor({1, H, n_keys}, DType::f32), p = b.tensor({1, H, n_keys}, DType::f32),
         out = b.tensor({1, H, D}, DType::f32);
  b.upload(tq, q);
  b.upload(tk, k);
  b.upload(tv, v);
  std::vector<std::int32_t> k_pos(n_keys, 0);  // all visible: no masking
  const std::vector<std::int32_t> q_pos = {0};
  CommandList cmd = b.commands();
  cmd.attn_scores(tq, tk, s, {.q_positions = q_pos, .k_positions = k_pos}, {.causal = false});
  cmd.attn_softmax(s, p);
  cmd.attn_weighted_sum(p, tv, out);
  cmd.submit_and_wait();
  return b.download(out);
}

// RoPE on rows of |x| ([n, heads, D]) at |positions|, via the CPU backend.
std::vector<float> rotated(Backend& cpu, const std::vector<float>& x, std::size_t n, std::size_t heads, std::size_t D,
                           const std::vector<std::int32_t>& positions, const RopeConfig& rope) {
  Tensor t = cpu.tensor({n, heads, D}, DType::f32);
  cpu.upload(t, x);
  CommandList cmd = cpu.commands();
  cmd.rope(t, positions, rope);
  cmd.submit_and_wait();
  return cpu.download(t);
}

// Decode steps over on_read caches (both layouts, part of the head rotated, sinks, a
// wrapping ring) on |b|: the three stages and attention() against the full history
// rotated by each key's in-cache position.
void on_read_matches_history(Backend& b) {
  const OnReadCase cases[] = {
      {12, 2, 16, 16, RopeLayout::half, DType::f32, 40},
      {9, 4, 32, 16, RopeLayout::interleaved, DType::f16, 30},
      {5, 0, 8, 8, RopeLayout::half, DType::f32, 17},
  };
  auto cpu = make_backend(BackendKind::cpu);
  for (const OnReadCase& c : cases) {
    const std::size_t H = 4, Hk = 2, D = c.head_dim, ring = c.capacity - c.sinks;
    const RopeConfig rope{.layout = c.layout, .rotary_dim = c.rotary_dim, .base = 500.0};
    KvCache cache = b.kv_cache({.n_kv_heads = Hk,
                                .head_dim = D,
                                .capacity = c.capacity,
                                .dtype = c.dtype,
                                .n_sinks = c.sinks,
                                .rope = KvRope::on_read,
                                .rope_config = rope});
    std::vector<float> all_k, all_v;  // full history, unrotated, rounded like the cache
    for (std::size_t step = 0; step < c.steps; ++step) {
      const auto p = static_cast<std::int32_t>(step);
      const auto q = normal(H * D, 100 + static_cast<std::uint32_t>(step));
      auto k = normal(Hk * D, 200 + static_cast<std::uint32_t>(step)), v = normal(Hk * D, 300 + static_cast<std::uint32_t>(step));
      Tensor tq = b.tensor({1, H, D}, DType::f32), tk = b.tensor({1, Hk, D}, c.dtype), tv = b.tensor({1, Hk, D}, c.dtype);
      b.upload(tq, q);
      b.upload(tk, k);
      b.upload(tv, v);
      k = b.download(tk);  // f16: the halves the cache holds
      v = b.download(tv);
      all_k.insert(all_k.end(), k.begin(), k.end());
      all_v.insert(all_v.end(), v.begin(), v.end());
      Tensor s = b.tensor({1, H, c.capacity}, DType::f32), pr = b.tensor({1, H, c.capacity}, DType::f32),
             out = b.tensor({1, H, D}, DType::f32), fused = b.tensor({1, H, D}, DType::f32);
      CommandList cmd = b.commands();
      const std::vector<std::int32_t> pos = {p};
      cmd.kv_append(cache, tk, tv, pos);
      cmd.attn_scores(tq, cache, s, {.q_positions = pos});
      cmd.attn_softmax(s, pr);
      cmd.attn_weighted_sum(pr, cache, out);
      // The fused kernel rotates the same way as it reads.
      cmd.attention(tq, cache, fused, {.q_positions = pos}, {.path = AttentionPath::fused});
      cmd.submit_and_wait();

      // Reference: visible positions and their in-cache positions.
      std::vector<std::int32_t> visible, cache_pos;
      const std::int32_t oldest =
          std::max<std::int32_t>(static_cast<std::int32_t>(c.sinks), p + 1 - static_cast<std::int32_t>(ring));
      for (std::int32_t a = 0; a <= p; ++a) {
        if (a < static_cast<std::int32_t>(c.sinks)) {
          visible.push_back(a);
          cache_pos.push_back(a);
        } else if (a >= oldest) {
          visible.push_back(a);
          cache_pos.push_back(static_cast<std::int32_t>(c.sinks) + (a - oldest));
        }
      }
      std::vector<float> vk, vv;
      for (std::int32_t a : visible) {
        vk.insert(vk.end(), all_k.begin() + a * static_cast<std::ptrdiff_t>(Hk * D),
                  all_k.begin() + (a + 1) * static_cast<std::ptrdiff_t>(Hk * D));
        vv.insert(vv.end(), all_v.begin() + a * static_cast<std::ptrdiff_t>(Hk * D),
                  all_v.begin() + (a + 1) * static_cast<std::ptrdiff_t>(Hk * D));
      }
      const std::int32_t q_cache_pos =
          p < static_cast<std::int32_t>(c.sinks) ? p : static_cast<std::int32_t>(c.sinks) + (p - oldest);
      const auto rq = rotated(*cpu, q, 1, H, D, {q_cache_pos}, rope);
      const auto rk = rotated(*cpu, vk, visible.size(), Hk, D, cache_pos, rope);
      const auto want = plain_attention(*cpu, rq, rk, vv, visible.size(), H, Hk, D, DType::f32);
      EXPECT_TRUE(all_close(b.download(out), want, {1, H, D}, 2e-5, 1e-4))
          << "capacity " << c.capacity << " sinks " << c.sinks << " step " << step;
      EXPECT_TRUE(all_close(b.download(fused), want, {1, H, D}, 2e-5, 1e-4))
          << "attention(), capacity " << c.capacity << " sinks " << c.sinks << " step " << step;
      // In-cache positions never reach the capacity: generation can go on for ever.
      EXPECT_LT(q_cache_pos, static_cast<std::int32_t>(c.capacity));
    }
  }
}

// A reader recorded while the ring started at position 2, run after its sequence was reset
// and refilled from 0: its keys' in-cache positions are negative (0 - 2, 1 - 2), and RoPE
// being relative, it gives what a reader recorded now gives (Vulkan read them as 2^32 - 2
// and 2^32 - 1: other angles).
void stale_reader_matches_fresh(Backend& b) {
  constexpr std::size_t H = 2, D = 8;
  KvCache c = b.kv_cache({.n_kv_heads = 1, .head_dim = D, .capacity = 4, .dtype = DType::f32, .rope = KvRope::on_read});
  const auto tensor = [&](std::size_t n, std::size_t heads, std::uint32_t seed) {
    Tensor t = b.tensor({n, heads, D}, DType::f32);
    b.upload(t, normal(n * heads * D, seed));
    return t;
  };
  const auto append = [&](const std::vector<std::int32_t>& positions, std::uint32_t seed) {
    CommandList list = b.commands();
    list.kv_append(c, tensor(positions.size(), 1, seed), tensor(positions.size(), 1, seed + 1), positions, {},
                   {.keep_last = true});
    list.submit_and_wait();
  };
  Tensor q = tensor(1, H, 1), out = b.tensor({1, H, D}, DType::f32);
  const std::int32_t at = 5;
  const auto reader = [&] {
    CommandList list = b.commands();
    list.attention(q, c, out, {.q_positions = {&at, 1}});
    return list;
  };
  append({0, 1, 2, 3, 4, 5}, 2);
  CommandList stale = reader();
  c.reset(0);
  append({0, 1}, 4);
  stale.submit_and_wait();
  const std::vector<float> got = b.download(out);
  reader().submit_and_wait();
  EXPECT_TRUE(all_close(got, b.download(out), {1, H, D}, 1e-5, 1e-5));
}

// With sinks, a query's distance to a sink depends on where the ring starts (the sinks
// keep their positions, the ring's keys and the query move with it): an attention op
// rotates by the start as it was planned. Submitted again after the ring moved, the list
// is refused (it read the sinks at other angles before, silently); replayed, it matches a
// list recorded now. A list whose own later append moves the ring runs (its attention
// runs first), matching the same ops in separate lists, and may not run again.
void ring_moved_under_sinks_is_refused(Backend& b) {
  constexpr std::size_t H = 2, D = 8;
  const KvCacheConfig config{
      .n_kv_heads = 1, .head_dim = D, .capacity = 8, .dtype = DType::f32, .n_sinks = 2, .rope = KvRope::on_read};
  KvCache c = b.kv_cache(config), twin = b.kv_cache(config);
  const auto tensor = [&](std::size_t n, std::size_t heads, std::uint32_t seed) {
    Tensor t = b.tensor({n, heads, D}, DType::f32);
    b.upload(t, normal(n * heads * D, seed));
    return t;
  };
  const auto positions = [](std::int32_t first, std::int32_t n) {
    std::vector<std::int32_t> p(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = first + i;
    return p;
  };
  Tensor q = tensor(1, H, 1), out = b.tensor({1, H, D}, DType::f32);
  const auto append = [&](CommandList& list, KvCache& cache, std::int32_t first, std::int32_t n) {
    const auto seed = static_cast<std::uint32_t>(10 + first);
    list.kv_append(cache, tensor(static_cast<std::size_t>(n), 1, seed), tensor(static_cast<std::size_t>(n), 1, seed + 99),
                   positions(first, n));
  };
  const auto attend = [&](CommandList& list, KvCache& cache, const std::int32_t& at) {
    list.attention(q, cache, out, {.q_positions = {&at, 1}});
  };
  const auto run = [&](KvCache& cache, std::int32_t first, std::int32_t n) {
    CommandList list = b.commands();
    append(list, cache, first, n);
    list.submit_and_wait();
  };
  run(c, 0, 4);
  const std::int32_t at = 100;
  CommandList reader = b.commands();
  attend(reader, c, at);
  reader.submit_and_wait();
  reader.submit_and_wait();  // the ring has not moved
  run(c, 4, 6);              // positions 8 and 9 take the slots of 2 and 3
  expect_invalid([&] { reader.submit_and_wait(); }, {"submit_and_wait", "KvRope::on_read", "ring", "set_tokens"});
  reader.set_tokens(std::vector<std::int32_t>{at});
  reader.submit_and_wait();
  const std::vector<float> replayed = b.download(out);
  CommandList fresh = b.commands();
  attend(fresh, c, at);
  fresh.submit_and_wait();
  EXPECT_EQ(replayed, b.download(out));

  // Two chunks in one list, the second moving the ring, against the same in two lists.
  const std::int32_t first_end = 11, second_end = 15;
  CommandList chunks = b.commands();
  append(chunks, c, 10, 2);
  attend(chunks, c, first_end);
  append(chunks, c, 12, 4);
  attend(chunks, c, second_end);
  run(twin, 0, 4);
  run(twin, 4, 6);
  CommandList one = b.commands(), two = b.commands();
  append(one, twin, 10, 2);
  attend(one, twin, first_end);
  append(two, twin, 12, 4);
  attend(two, twin, second_end);
  chunks.submit_and_wait();
  const std::vector<float> together = b.download(out);
  one.submit_and_wait();
  two.submit_and_wait();
  EXPECT_EQ(together, b.download(out));
  expect_invalid([&] { chunks.submit_and_wait(); }, {"submit_and_wait", "KvRope::on_read"});
}

class KvCacheOnRead : public BackendTest {};

TEST_P(KvCacheOnRead, MatchesFullHistoryReference) {
  on_read_matches_history(backend());
  stale_reader_matches_fresh(backend());
  ring_moved_under_sinks_is_refused(backend());
}

INSTANTIATE_TEST_SUITE_P(Backends, KvCacheOnRead, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// The same through the GPU decode kernels, which rotate keys as they read them, each forced.
TEST(KvCacheOnReadGpuKernels, MatchesFullHistoryReference) {
  for (const char* env : {"kernel=decode", "kernel=group"}) {
    DeviceOptions options = shape_options(KernelShape::gpu);
    ScopedEnv decode("VKATTN_DECODE", env);
    std::string why;
    auto gpu = try_backend(BackendKind::vulkan, options, why);
    VKATTN_REQUIRE_BACKEND(gpu, why);
    on_read_matches_history(*gpu);
    stale_reader_matches_fresh(*gpu);
    expect_no_validation_messages(*gpu, env);
  }
}

// The same through the tiled kernel (VKATTN_PREFILL=kernel=tiled), which rotates keys as
// it stages them and queries as it loads them.
TEST(KvCacheOnReadTiled, MatchesFullHistoryReference) {
  DeviceOptions options = shape_options(KernelShape::gpu);
  ScopedEnv prefill("VKATTN_PREFILL", "kernel=tiled");
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  on_read_matches_history(*gpu);
  stale_reader_matches_fresh(*gpu);
  expect_no_validation_messages(*gpu);
}

}  // namespace
}  // namespace vkattn::test
