// A latent cache (KvCacheConfig::latent: DeepSeek's absorbed MLA, llama.cpp's K-only cache
// with v_mla): V is the first v_head_dim dims of each key row, stored once. These run K 192
// with V its first 128 (DeepSeek's K 576 with V its first 512: test_attention_wide_heads.cpp), 16 query
// heads over one KV head, on both backends and every kernel family, against a float64
// computation written out here over the keys as the cache stores them; replay, save and
// restore, kv_copy_sequence, bytes() and the refusals. `ctest -R Mla` selects these.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/api.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"
#include "support/wide_heads.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kDk = 192, kDv = 128, kHeads = 16;

// |x| as a cache of |dtype| stores it: through a CPU tensor of that dtype (upload rounds
// or quantizes blocks of 32 exactly as kv_append does; download widens).
std::vector<float> stored(const std::vector<float>& x, std::size_t row, DType dtype) {
  if (dtype == DType::f32) return x;
  auto cpu = make_backend(BackendKind::cpu);
  Tensor t = cpu->tensor({x.size() / row, 1, row}, dtype);
  cpu->upload(t, x);
  return cpu->download(t);
}

// One query token of |n_heads| heads (q [n_heads, dk]) over |n| key rows of one KV head
// (k [n, dk]), all visible, in float64; V is the first |dv| dims of each key row.
std::vector<float> latent_reference(const std::vector<float>& q, const std::vector<float>& k, std::size_t n_heads, std::size_t dk,
                                    std::size_t dv) {
  const std::size_t n = k.size() / dk;
  std::vector<float> out(n_heads * dv);
  for (std::size_t h = 0; h < n_heads; ++h) {
    std::vector<double> s(n);
    double m = -INFINITY, den = 0;
    for (std::size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (std::size_t d = 0; d < dk; ++d) dot += double{q[h * dk + d]} * k[j * dk + d];
      s[j] = dot / std::sqrt(static_cast<double>(dk));
      m = std::max(m, s[j]);
    }
    for (double& x : s) den += (x = std::exp(x - m));
    for (std::size_t d = 0; d < dv; ++d) {
      double acc = 0;
      for (std::size_t j = 0; j < n; ++j) acc += s[j] * k[j * dk + d];
      out[h * dv + d] = static_cast<float>(acc / den);
    }
  }
  return out;
}

// Device bytes of |rows| key rows of |dk| (whole 32-bit words: the row counts here keep
// every dtype's codes and scales whole): 32 elements take 128, 64, 34 or 18 bytes.
std::size_t k_bytes(std::size_t rows, std::size_t dk, DType dtype) {
  const std::size_t per32 = dtype == DType::f32 ? 128 : dtype == DType::f16 ? 64 : dtype == DType::q8_0 ? 34 : 18;
  return rows * dk * per32 / 32;
}

// One decode step per token into latent caches (K |dk|, V its first |dv|; 0 = all of it),
// two sequences over a ring that wraps (capacity 12, 2 sinks, 20 tokens each): the CPU
// backend against the float64 computation over the rows each ring holds as stored, every
// Vulkan family against the CPU backend.
void decode_latent(DType dtype, std::size_t dk, std::size_t dv) {
  const std::size_t kv = 1, capacity = 12, sinks = 2, steps = 20, seqs = 2, v_dim = dv ? dv : dk;
  const KvCacheConfig config{.n_seqs = seqs,
                             .n_kv_heads = kv,
                             .head_dim = dk,
                             .capacity = capacity,
                             .dtype = dtype,
                             .n_sinks = sinks,
                             .v_head_dim = dv,
                             .latent = true};
  std::string why;
  std::vector<CacheSide> sides = cache_sides(config, wide_families(), {{"large device", uncapped()}}, why);
  const bool have_vulkan = !sides.empty();
  VKATTN_REQUIRE_BACKEND(have_vulkan, why);
  for (CacheSide& s : sides) EXPECT_EQ(s.cache.bytes(), k_bytes(seqs * capacity * kv, dk, dtype)) << s.name << ": K alone";
  std::vector<std::vector<float>> all_k(seqs);  // per sequence, its key rows as stored
  for (std::size_t i = 0; i < steps; ++i) {
    const auto pos = static_cast<std::int32_t>(i);
    const std::vector<std::int32_t> positions{pos, pos}, seq_ids{0, 1};
    const std::vector<float> k = normal(seqs * kv * dk, 100 + i), q = normal(seqs * kHeads * dk, 300 + i);
    for (CacheSide& s : sides) {
      Backend& b = *s.b;
      Tensor tq = b.tensor({seqs, kHeads, dk}, DType::f32), tk = b.tensor({seqs, kv, dk}, DType::f32);
      Tensor out = b.tensor({seqs, kHeads, v_dim}, DType::f32);
      b.upload(tq, q);
      b.upload(tk, k);
      CommandList cmd = b.commands();
      cmd.kv_append(s.cache, tk, positions, seq_ids);
      cmd.attention(tq, s.cache, out, {.q_positions = positions, .q_seq_ids = seq_ids}, {.causal = true, .path = s.path});
      cmd.submit_and_wait();
      s.outs.push_back(b.download(out));
    }
    const std::vector<float> ks = stored(k, dk, dtype);
    for (std::size_t s = 0; s < seqs; ++s) {
      all_k[s].insert(all_k[s].end(), ks.begin() + s * dk, ks.begin() + (s + 1) * dk);
      std::vector<float> held;  // the sinks and the last capacity - sinks rows, in any order
      for (std::size_t p = 0; p <= i; ++p) {
        if (p >= sinks && p + (capacity - sinks) <= i) continue;  // overwritten
        held.insert(held.end(), all_k[s].begin() + p * dk, all_k[s].begin() + (p + 1) * dk);
      }
      const std::vector<float> qs(q.begin() + s * kHeads * dk, q.begin() + (s + 1) * kHeads * dk);
      const std::vector<float> got(sides[0].outs.back().begin() + s * kHeads * v_dim,
                                   sides[0].outs.back().begin() + (s + 1) * kHeads * v_dim);
      EXPECT_TRUE(all_close(got, latent_reference(qs, held, kHeads, dk, v_dim), {1, kHeads, v_dim}, 1e-5, 1e-5))
          << "cpu vs reference, " << to_string(dtype) << ", step " << i << ", sequence " << s;
    }
  }
  for (std::size_t si = 1; si < sides.size(); ++si) {
    for (std::size_t i = 0; i < steps; ++i) {
      EXPECT_TRUE(all_close(sides[si].outs[i], sides[0].outs[i], {seqs, kHeads, v_dim}, 2e-4, 1e-3))
          << sides[si].name << " vs cpu, " << to_string(dtype) << ", step " << i;
    }
    expect_no_validation_messages(*sides[si].b);
  }
}

TEST(MlaLatent, DecodeK192V128F32) { decode_latent(DType::f32, kDk, kDv); }
TEST(MlaLatent, DecodeK192V128F16) { decode_latent(DType::f16, kDk, kDv); }
TEST(MlaLatent, DecodeK192V128Q8_0) { decode_latent(DType::q8_0, kDk, kDv); }
TEST(MlaLatent, DecodeK192V128Q4_0) { decode_latent(DType::q4_0, kDk, kDv); }
// V as wide as K: the fused kernels read the cache's K as its V.
TEST(MlaLatent, DecodeVAllOfKF16) { decode_latent(DType::f16, kDk, 0); }
// Rows whose starts are not 16 bytes apart (K 66 in f32, 68 in f16): the weighted sum must
// not read V's rows as whole 16-byte vectors.
TEST(MlaLatent, DecodeUnalignedKeyRowsF32) { decode_latent(DType::f32, 66, 64); }
TEST(MlaLatent, DecodeUnalignedKeyRowsF16) { decode_latent(DType::f16, 68, 64); }

// A decode step (K alone, then attention) recorded once and replayed for 14 tokens over a
// ring of 8 on Vulkan: bit for bit what fresh lists give there, and the CPU backend's result;
// then the cache saved and restored on the CPU backend, where attention goes on the same.
TEST(MlaLatent, ReplayAndSaveRestore) {
  const std::size_t kv = 1, steps = 14;
  const KvCacheConfig config{
      .n_kv_heads = kv, .head_dim = kDk, .capacity = 8, .dtype = DType::q8_0, .n_sinks = 1, .v_head_dim = kDv, .latent = true};
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  KvCache replayed = gpu->kv_cache(config), fresh = gpu->kv_cache(config), cc = cpu->kv_cache(config);
  auto step_on = [&](Backend& b, KvCache& cache, const std::vector<float>& q, const std::vector<float>& k,
                     const std::vector<std::int32_t>& pos) {
    Tensor tq = b.tensor({1, kHeads, kDk}, DType::f32), tk = b.tensor({1, kv, kDk}, DType::f32);
    Tensor out = b.tensor({1, kHeads, kDv}, DType::f32);
    b.upload(tq, q);
    b.upload(tk, k);
    CommandList cmd = b.commands();
    cmd.kv_append(cache, tk, pos);
    cmd.attention(tq, cache, out, {.q_positions = pos}, {.causal = true});
    cmd.submit_and_wait();
    return b.download(out);
  };
  Tensor gq = gpu->tensor({1, kHeads, kDk}, DType::f32), gk = gpu->tensor({1, kv, kDk}, DType::f32);
  Tensor gout = gpu->tensor({1, kHeads, kDv}, DType::f32);
  const std::vector<std::int32_t> first{0};
  CommandList step = gpu->commands();
  step.kv_append(replayed, gk, first);
  step.attention(gq, replayed, gout, {.q_positions = first}, {.causal = true});
  for (std::size_t i = 0; i < steps; ++i) {
    const std::vector<std::int32_t> pos{static_cast<std::int32_t>(i)};
    const std::vector<float> q = normal(kHeads * kDk, 400 + i), k = normal(kv * kDk, 500 + i);
    gpu->upload(gq, q);
    gpu->upload(gk, k);
    if (i > 0) step.set_tokens(pos);
    step.submit_and_wait();
    const std::vector<float> got = gpu->download(gout);
    EXPECT_EQ(got, step_on(*gpu, fresh, q, k, pos)) << "replayed vs fresh, step " << i;
    EXPECT_TRUE(all_close(got, step_on(*cpu, cc, q, k, pos), {1, kHeads, kDv}, 2e-4, 1e-3)) << "step " << i;
  }
  EXPECT_EQ(replayed.slot_positions(0), cc.slot_positions(0));
  // Saved on Vulkan: the header and bookkeeping, then K's words alone.
  const std::vector<std::uint8_t> saved = gpu->save_cache(replayed);
  EXPECT_EQ(saved.size(), 64 + 4 * (8 + 2) + k_bytes(8, kDk, DType::q8_0));
  EXPECT_EQ(saved, cpu->save_cache(cc)) << "the same words on both backends";
  KvCache restored = cpu->kv_cache(config);
  cpu->restore_cache(restored, saved);
  EXPECT_EQ(cpu->save_cache(restored), saved);
  const std::vector<std::int32_t> next{static_cast<std::int32_t>(steps)};
  const std::vector<float> q = normal(kHeads * kDk, 700), k = normal(kv * kDk, 701);
  EXPECT_TRUE(all_close(step_on(*cpu, restored, q, k, next), step_on(*gpu, replayed, q, k, next), {1, kHeads, kDv}, 2e-4, 1e-3))
      << "after restoring";
  // A cache that is not latent refuses a latent save by name, and a latent cache a plain one.
  KvCacheConfig plain = config;
  plain.latent = false;
  KvCache other = cpu->kv_cache(plain);
  expect_invalid([&] { cpu->restore_cache(other, saved); }, {"restore_cache", "config.latent", "1", "the cache's 0"});
  expect_invalid([&] { cpu->restore_cache(restored, cpu->save_cache(other)); }, {"config.latent", "0", "the cache's 1"});
  expect_no_validation_messages(*gpu);
}

// kv_copy_sequence copies a latent cache's K rows (its values with them), and the three
// stages over the copy read them: the copy's attention equals the original's, on both
// backends and q4_0 (scales copied by block), and Vulkan's equals the CPU's.
TEST(MlaLatent, CopySequenceAndStages) {
  const std::size_t kv = 1, n = 5, capacity = 8;
  const KvCacheConfig config{.n_seqs = 2,
                             .n_kv_heads = kv,
                             .head_dim = kDk,
                             .capacity = capacity,
                             .dtype = DType::q4_0,
                             .v_head_dim = kDv,
                             .latent = true};
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, test_options(), why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  const std::vector<float> k = normal(n * kv * kDk, 800), q1 = normal(kHeads * kDk, 801);
  std::vector<float> q = q1;
  q.insert(q.end(), q1.begin(), q1.end());  // the same query in both sequences
  const std::vector<std::int32_t> positions{0, 1, 2, 3, 4}, seq0(n, 0);
  const std::vector<std::int32_t> q_pos{4, 4}, q_seq{0, 1};
  std::vector<std::vector<float>> outs;
  for (Backend* b : {cpu.get(), gpu.get()}) {
    KvCache cache = b->kv_cache(config);
    Tensor tq = b->tensor({2, kHeads, kDk}, DType::f32), tk = b->tensor({n, kv, kDk}, DType::f32);
    Tensor scores = b->tensor({2, kHeads, capacity}, DType::f32), out = b->tensor({2, kHeads, kDv}, DType::f32);
    b->upload(tq, q);
    b->upload(tk, k);
    CommandList cmd = b->commands();
    cmd.kv_append(cache, tk, positions, seq0);
    cmd.kv_copy_sequence(cache, 0, 1);
    const AttentionTokens tokens{.q_positions = q_pos, .q_seq_ids = q_seq};
    cmd.attn_scores(tq, cache, scores, tokens);
    cmd.attn_softmax(scores, scores);
    cmd.attn_weighted_sum(scores, cache, out, tokens);
    cmd.submit_and_wait();
    EXPECT_EQ(cache.slot_positions(1), cache.slot_positions(0));
    const std::vector<float> o = b->download(out);
    EXPECT_EQ(std::vector<float>(o.begin(), o.begin() + kHeads * kDv), std::vector<float>(o.begin() + kHeads * kDv, o.end()))
        << to_string(b->kind()) << ": the copy attends as the original";
    outs.push_back(o);
  }
  EXPECT_TRUE(all_close(outs[1], outs[0], {2, kHeads, kDv}, 2e-4, 1e-3)) << "vulkan vs cpu";
  expect_no_validation_messages(*gpu);
}

// Each misuse is refused by name before anything changes.
TEST(MlaLatent, MisuseIsRefused) {
  auto b = make_backend(BackendKind::cpu);
  KvCacheConfig c{.n_kv_heads = 1, .head_dim = kDk, .capacity = 4, .dtype = DType::f16, .v_head_dim = 224, .latent = true};
  expect_invalid([&] { b->kv_cache(c); }, {"kv_cache", "config.v_head_dim", "224", "[1, head_dim = 192] for a latent cache"});
  c.v_head_dim = kDv;
  c.rope = KvRope::on_read;
  expect_invalid([&] { b->kv_cache(c); }, {"config.rope", "KvRope::stored for a latent cache"});
  c.rope = KvRope::stored;
  KvCache latent = b->kv_cache(c);
  EXPECT_TRUE(latent.config().latent);
  EXPECT_EQ(latent.bytes(), k_bytes(4, kDk, DType::f16));
  KvCacheConfig p = c;
  p.latent = false;
  KvCache plain = b->kv_cache(p);
  EXPECT_EQ(plain.bytes(), k_bytes(4, kDk, DType::f16) + k_bytes(4, kDv, DType::f16));
  Tensor k = b->tensor({1, 1, kDk}, DType::f32), v = b->tensor({1, 1, kDv}, DType::f32),
         narrow = b->tensor({1, 1, kDv}, DType::f32);
  CommandList cmd = b->commands();
  const std::vector<std::int32_t> pos{0};
  expect_invalid([&] { cmd.kv_append(latent, k, v, pos); },
                 {"kv_append", "v = a tensor", "a latent cache stores V inside K: call kv_append(cache, k, positions)"});
  expect_invalid([&] { cmd.kv_append(plain, k, pos); }, {"kv_append", "v = none", "latent"});
  expect_invalid([&] { cmd.kv_append(latent, narrow, pos); }, {"k.shape[2]", "128", "cache head_dim = 192"});
  EXPECT_EQ(latent.next_position(0), 0);
  EXPECT_EQ(plain.next_position(0), 0);
  cmd.kv_append(latent, k, pos);
  cmd.kv_append(plain, k, v, pos);
  EXPECT_EQ(latent.next_position(0), 1);
  Tensor q = b->tensor({1, 2, kDk}, DType::f32), out_wide = b->tensor({1, 2, kDk}, DType::f32);
  expect_invalid([&] { cmd.attention(q, latent, out_wide, {.q_positions = pos}); }, {"out.shape", "[1, 2, 128]"});
}

}  // namespace
}  // namespace vkattn::test
