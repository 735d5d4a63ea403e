// K and V of different head dims (DeepSeek without absorption: K 192, V 128): attention
// over plain tensors and over caches with KvCacheConfig::v_head_dim, on both backends and
// every kernel family, against the float64 reference of support/wide_heads.hpp; the cache's bytes,
// save and restore, replay, and the checks. `ctest -R Mla` selects these.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "support/api.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/wide_heads.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kDk = 192, kDv = 128;

// Device bytes of a cache of |rows| K rows of 192 and V rows of 128 (K and V each rounded
// up to 16 bytes): 32 elements take 128, 64, 34 or 18 bytes in f32, f16, q8_0, q4_0.
std::size_t cache_bytes(std::size_t rows, DType dtype) {
  const std::size_t per32 = dtype == DType::f32 ? 128 : dtype == DType::f16 ? 64 : dtype == DType::q8_0 ? 34 : 18;
  auto round16 = [](std::size_t b) { return (b + 15) / 16 * 16; };
  return round16(rows * kDk / 32 * per32) + round16(rows * kDv / 32 * per32);
}

TEST(MlaWidths, PlainAttentionDk192Dv128OnEveryKernelFamily) {
  // A prefill of 5 tokens and a decode token, 8 query heads over 4 KV heads, 37 keys.
  const std::size_t heads = 8, kv = 4, keys = 37;
  const std::vector<float> k = normal_values(keys * kv * kDk, 2), v = normal_values(keys * kv * kDv, 3);
  for (const std::vector<std::int32_t>& q_pos : {std::vector<std::int32_t>{20, 21, 22, 23, 24}, std::vector<std::int32_t>{36}}) {
    const std::size_t tokens = q_pos.size();
    const std::vector<float> q = normal_values(tokens * heads * kDk, 1);
    const Widths w{heads, kv, kDk, kDv};
    const std::vector<float> want = wide_reference(q, k, v, tokens, w, keys, q_pos);
    auto cpu = make_backend(BackendKind::cpu);
    for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
      EXPECT_TRUE(all_close(run_wide_plain(*cpu, path, w, DType::f32, q, k, v, q_pos), want, {tokens, heads, kDv}, 1e-5, 1e-5))
          << "cpu, " << tokens << " tokens";
    }
    for (const KernelFamily& f : kKernelFamilies) {
      std::string why;
      DeviceOptions options = shape_options(f.shape);
      options.cap_limits = uncapped();
      options.cap_limits->compute_units = 1u << 20;
      ScopedEnv decode("VKATTN_DECODE", f.env);
      ScopedEnv prefill("VKATTN_PREFILL", f.prefill);
      auto gpu = try_backend(BackendKind::vulkan, options, why);
      VKATTN_REQUIRE_BACKEND(gpu, why);
      const std::vector<float> got = run_wide_plain(*gpu, f.path, w, DType::f32, q, k, v, q_pos);
      EXPECT_TRUE(all_close(got, want, {tokens, heads, kDv}, 2e-5, 1e-4)) << f.name << ", " << tokens << " tokens";
      expect_no_validation_messages(*gpu);
    }
  }
}

// One decode step per token into caches of K 192 and V 128 on every backend, two sequences
// over a ring that wraps (capacity 12, 2 sinks, 20 tokens each); the Vulkan families
// against the CPU backend, and the CPU backend of an f32 cache against the reference.
void decode_through_cache(DType dtype) {
  const std::size_t heads = 4, kv = 2, capacity = 12, sinks = 2, steps = 20, seqs = 2;
  const KvCacheConfig config{.n_seqs = seqs,
                             .n_kv_heads = kv,
                             .head_dim = kDk,
                             .capacity = capacity,
                             .dtype = dtype,
                             .n_sinks = sinks,
                             .v_head_dim = kDv};
  std::string why;
  std::vector<CacheSide> sides =
      cache_sides(config, {std::begin(kKernelFamilies), std::end(kKernelFamilies)}, {{"large device", uncapped()}}, why);
  const bool have_vulkan = !sides.empty();
  VKATTN_REQUIRE_BACKEND(have_vulkan, why);
  for (CacheSide& s : sides) EXPECT_EQ(s.cache.bytes(), cache_bytes(seqs * capacity * kv, dtype)) << s.name;
  // Per sequence, the keys and values it appended (for the reference).
  std::vector<std::vector<float>> all_k(seqs), all_v(seqs);
  for (std::size_t i = 0; i < steps; ++i) {
    const auto pos = static_cast<std::int32_t>(i);
    const std::vector<std::int32_t> positions{pos, pos}, seq_ids{0, 1};
    const std::vector<float> k = normal_values(seqs * kv * kDk, 100 + i), v = normal_values(seqs * kv * kDv, 200 + i);
    const std::vector<float> q = normal_values(seqs * heads * kDk, 300 + i);
    for (CacheSide& s : sides) {
      Backend& b = *s.b;
      Tensor tq = b.tensor({seqs, heads, kDk}, DType::f32), tk = b.tensor({seqs, kv, kDk}, DType::f32),
             tv = b.tensor({seqs, kv, kDv}, DType::f32);
      Tensor out = b.tensor({seqs, heads, kDv}, DType::f32);
      b.upload(tq, q);
      b.upload(tk, k);
      b.upload(tv, v);
      CommandList cmd = b.commands();
      cmd.kv_append(s.cache, tk, tv, positions, seq_ids);
      cmd.attention(tq, s.cache, out, {.q_positions = positions, .q_seq_ids = seq_ids}, {.causal = true, .path = s.path});
      cmd.submit_and_wait();
      s.outs.push_back(b.download(out));
    }
    if (dtype != DType::f32) continue;
    // The reference sees what each sequence's ring holds: the sinks and the last
    // capacity - sinks tokens, in any order (attention does not care about slot order).
    for (std::size_t s = 0; s < seqs; ++s) {
      all_k[s].insert(all_k[s].end(), k.begin() + s * kv * kDk, k.begin() + (s + 1) * kv * kDk);
      all_v[s].insert(all_v[s].end(), v.begin() + s * kv * kDv, v.begin() + (s + 1) * kv * kDv);
      std::vector<float> held_k, held_v;
      for (std::size_t p = 0; p <= i; ++p) {
        if (p >= sinks && p + (capacity - sinks) <= i) continue;  // overwritten
        held_k.insert(held_k.end(), all_k[s].begin() + p * kv * kDk, all_k[s].begin() + (p + 1) * kv * kDk);
        held_v.insert(held_v.end(), all_v[s].begin() + p * kv * kDv, all_v[s].begin() + (p + 1) * kv * kDv);
      }
      const std::size_t n = held_k.size() / (kv * kDk);
      const std::vector<float> qs(q.begin() + s * heads * kDk, q.begin() + (s + 1) * heads * kDk);
      const std::vector<float> want =
          wide_reference(qs, held_k, held_v, 1, {heads, kv, kDk, kDv}, n, {static_cast<std::int32_t>(n)});
      const std::vector<float> got(sides[0].outs.back().begin() + s * heads * kDv,
                                   sides[0].outs.back().begin() + (s + 1) * heads * kDv);
      EXPECT_TRUE(all_close(got, want, {1, heads, kDv}, 1e-5, 1e-5)) << "cpu vs reference, step " << i << ", sequence " << s;
    }
  }
  for (std::size_t si = 1; si < sides.size(); ++si) {
    for (std::size_t i = 0; i < steps; ++i) {
      EXPECT_TRUE(all_close(sides[si].outs[i], sides[0].outs[i], {seqs, heads, kDv}, 2e-4, 1e-3))
          << sides[si].name << " vs cpu, step " << i;
    }
    expect_no_validation_messages(*sides[si].b);
  }
}

// A decode step recorded once and replayed for 14 tokens (the ring of 8 wraps) on Vulkan,
// against fresh lists on the CPU backend; then the cache saved and restored.
TEST(MlaWidths, ReplayAndSaveRestoreWithDv128) {
  const std::size_t heads = 4, kv = 1, steps = 14;
  const KvCacheConfig config{.n_kv_heads = kv, .head_dim = kDk, .capacity = 8, .dtype = DType::f16, .v_head_dim = kDv};
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  KvCache gc = gpu->kv_cache(config), cc = cpu->kv_cache(config);
  Tensor gq = gpu->tensor({1, heads, kDk}, DType::f32), gk = gpu->tensor({1, kv, kDk}, DType::f32),
         gv = gpu->tensor({1, kv, kDv}, DType::f32);
  Tensor gout = gpu->tensor({1, heads, kDv}, DType::f32);
  const std::vector<std::int32_t> first{0};
  CommandList step = gpu->commands();
  step.kv_append(gc, gk, gv, first);
  step.attention(gq, gc, gout, {.q_positions = first}, {.causal = true});
  for (std::size_t i = 0; i < steps; ++i) {
    const std::vector<std::int32_t> pos{static_cast<std::int32_t>(i)};
    const std::vector<float> q = normal_values(heads * kDk, 400 + i), k = normal_values(kv * kDk, 500 + i),
                             v = normal_values(kv * kDv, 600 + i);
    gpu->upload(gq, q);
    gpu->upload(gk, k);
    gpu->upload(gv, v);
    if (i > 0) step.set_tokens(pos);
    step.submit_and_wait();
    Tensor cq = cpu->tensor({1, heads, kDk}, DType::f32), ck = cpu->tensor({1, kv, kDk}, DType::f32),
           cv = cpu->tensor({1, kv, kDv}, DType::f32);
    Tensor cout = cpu->tensor({1, heads, kDv}, DType::f32);
    cpu->upload(cq, q);
    cpu->upload(ck, k);
    cpu->upload(cv, v);
    CommandList cmd = cpu->commands();
    cmd.kv_append(cc, ck, cv, pos);
    cmd.attention(cq, cc, cout, {.q_positions = pos}, {.causal = true});
    cmd.submit_and_wait();
    EXPECT_TRUE(all_close(gpu->download(gout), cpu->download(cout), {1, heads, kDv}, 2e-4, 1e-3)) << "step " << i;
  }
  // Saved on Vulkan, restored on the CPU backend into a fresh cache of the same config: the
  // same rows come back (its save is the same bytes), and a cache whose V is as wide as K
  // refuses the bytes by naming v_head_dim.
  const std::vector<std::uint8_t> saved = gpu->save_cache(gc);
  KvCache restored = cpu->kv_cache(config);
  cpu->restore_cache(restored, saved);
  EXPECT_EQ(restored.slot_positions(0), gc.slot_positions(0));
  EXPECT_EQ(cpu->save_cache(restored), saved);
  KvCacheConfig same = config;
  same.v_head_dim = 0;
  KvCache other = cpu->kv_cache(same);
  expect_invalid([&] { cpu->restore_cache(other, saved); }, {"v_head_dim", "128", "192"});
  expect_no_validation_messages(*gpu);
}

// Each wrong width is refused by name, value and range, before anything is recorded.
TEST(MlaWidths, WrongWidthsAreRefused) {
  auto b = make_backend(BackendKind::cpu);
  KvCacheConfig c{.n_kv_heads = 1, .head_dim = kDk, .capacity = 4, .dtype = DType::f16, .v_head_dim = 600};
  expect_invalid([&] { b->kv_cache(c); }, {"config.v_head_dim", "600", "[1, 576]"});
  c.v_head_dim = 127;
  expect_invalid([&] { b->kv_cache(c); }, {"config.v_head_dim", "127", "even for f16"});
  c.dtype = DType::q8_0;
  c.v_head_dim = 48;
  expect_invalid([&] { b->kv_cache(c); }, {"config.v_head_dim", "48", "a multiple of 32 for q8_0"});
  c.dtype = DType::f16;
  c.v_head_dim = kDv;
  KvCache cache = b->kv_cache(c);
  EXPECT_EQ(cache.config().v_head_dim, kDv);
  Tensor q = b->tensor({1, 2, kDk}, DType::f32), k = b->tensor({1, 1, kDk}, DType::f32),
         v_wide = b->tensor({1, 1, kDk}, DType::f32), v = b->tensor({1, 1, kDv}, DType::f32);
  Tensor out_wide = b->tensor({1, 2, kDk}, DType::f32), out = b->tensor({1, 2, kDv}, DType::f32);
  CommandList cmd = b->commands();
  const std::vector<std::int32_t> pos{0};
  expect_invalid([&] { cmd.kv_append(cache, k, v_wide, pos); }, {"v.shape[2]", "192", "cache v_head_dim = 128"});
  cmd.kv_append(cache, k, v, pos);
  expect_invalid([&] { cmd.attention(q, cache, out_wide, {.q_positions = pos}); }, {"out.shape", "[1, 2, 128]"});
  // Plain tensors: V's rows may be another width, not another count or head count.
  Tensor k3 = b->tensor({3, 1, kDk}, DType::f32), v2 = b->tensor({2, 1, kDv}, DType::f32),
         v3 = b->tensor({3, 1, kDv}, DType::f32);
  Tensor v_big = b->tensor({3, 1, 600}, DType::f32);
  const std::vector<std::int32_t> q_pos{2};
  expect_invalid([&] { cmd.attention(q, k3, v2, out, {.q_positions = q_pos}); }, {"v.shape[0]", "2", "k.shape[0] = 3"});
  expect_invalid([&] { cmd.attention(q, k3, v_big, out, {.q_positions = q_pos}); },
                 {"v_head_dim (v.shape[2])", "600", "[1, 576]"});
  expect_invalid([&] { cmd.attention(q, k3, v3, out_wide, {.q_positions = q_pos}); }, {"out.shape", "[1, 2, 128]"});
  cmd.attention(q, k3, v3, out, {.q_positions = q_pos});
}

TEST(MlaWidths, CacheDk192Dv128F32) { decode_through_cache(DType::f32); }
TEST(MlaWidths, CacheDk192Dv128F16) { decode_through_cache(DType::f16); }
TEST(MlaWidths, CacheDk192Dv128Q8_0) { decode_through_cache(DType::q8_0); }
TEST(MlaWidths, CacheDk192Dv128Q4_0) { decode_through_cache(DType::q4_0); }

}  // namespace
}  // namespace vkattn::test
