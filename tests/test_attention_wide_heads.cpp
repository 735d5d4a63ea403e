// Heads up to 576 (kMaxAttentionHeadDim): DeepSeek's absorbed MLA (K 576, V 512, 128
// query heads over one KV head) and Gemma 4's global layers (head_dim 512, GQA), over plain
// tensors and caches, on the CPU backend against a float64 computation and on every Vulkan
// kernel family against the CPU backend, with the limits of a large device and with the
// Vulkan minimums (16 KiB of shared memory, 128 invocations). `ctest -R Mla` selects them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/wide_heads.hpp"

namespace vkattn::test {
namespace {

constexpr Widths kDeepSeek{128, 1, 576, 512};  // absorbed MLA: one latent KV head
constexpr Widths kGemma4{8, 2, 512, 512};      // a global layer's 512-wide heads, GQA 4
constexpr Widths kDeepSeekUnabsorbed{128, 128, 192, 128};
constexpr Widths kUneven{8, 2, 330, 290};  // even widths off every 16-byte boundary

// The minimums of shared memory and invocations with subgroup shuffles: the group kernel's
// stages at their shortest (2 keys, 4 with a latent cache).
DeviceLimits small_with_shuffles() {
  DeviceLimits l = uncapped();
  l.max_shared_memory = 16384;
  l.max_workgroup_invocations = 128;
  return l;
}
std::vector<NamedLimits> limit_sets() {
  return {{"large device", uncapped()},
          {"spec minimum", test_spec_minimum(), NamedLimits::Families::unforced},
          {"16 KiB with shuffles", small_with_shuffles(), NamedLimits::Families::group}};
}

// A prefill chunk of 3 tokens and a decode token over 40 keys, f32 and f16 K/V: the CPU
// backend's two paths against the float64 computation (f32), every Vulkan family at each
// limit set against the CPU backend (both dtypes; each backend made once).
void plain_on_every_family(const Widths& w) {
  const std::size_t keys = 40;
  const std::vector<float> k = normal_values(keys * w.kv * w.dk, 2), v = normal_values(keys * w.kv * w.dv, 3);
  auto cpu = make_backend(BackendKind::cpu);
  struct Side {
    std::shared_ptr<Backend> b;
    std::string name;
    AttentionPath path;
  };
  std::vector<Side> sides;
  for (const NamedLimits& l : limit_sets()) {
    for (const KernelFamily& f : wide_families()) {
      if (skips(l, f)) continue;
      std::string why;
      auto gpu = wide_family_backend(f, l.limits, why);
      VKATTN_REQUIRE_BACKEND(gpu, why);
      sides.push_back({std::move(gpu), std::string(f.name) + ", " + l.name, f.path});
    }
  }
  for (const std::vector<std::int32_t>& q_pos : {std::vector<std::int32_t>{20, 21, 22}, std::vector<std::int32_t>{39}}) {
    const std::size_t tokens = q_pos.size();
    const Shape out_shape{tokens, w.heads, w.dv};
    const std::vector<float> q = normal_values(tokens * w.heads * w.dk, 1);
    const std::vector<float> want = wide_reference(q, k, v, tokens, w, keys, q_pos);
    for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
      EXPECT_TRUE(all_close(run_wide_plain(*cpu, path, w, DType::f32, q, k, v, q_pos), want, out_shape, 1e-5, 1e-5))
          << "cpu vs float64, " << tokens << " tokens";
    }
    for (DType dtype : {DType::f32, DType::f16}) {
      const std::vector<float> base = run_wide_plain(*cpu, AttentionPath::automatic, w, dtype, q, k, v, q_pos);
      for (Side& side : sides) {
        const std::vector<float> got = run_wide_plain(*side.b, side.path, w, dtype, q, k, v, q_pos);
        EXPECT_TRUE(all_close(got, base, out_shape, 3e-5, 2e-4))
            << side.name << ", " << to_string(dtype) << ", " << tokens << " tokens";
      }
    }
  }
  for (Side& side : sides) expect_no_validation_messages(*side.b);
}

TEST(MlaWideHeads, DeepSeekAbsorbedDk576Dv512PlainOnEveryFamily) { plain_on_every_family(kDeepSeek); }
TEST(MlaWideHeads, Gemma4Head512PlainOnEveryFamily) { plain_on_every_family(kGemma4); }
TEST(MlaWideHeads, DeepSeekUnabsorbedDk192Dv128With128KvHeadsOnEveryFamily) { plain_on_every_family(kDeepSeekUnabsorbed); }
TEST(MlaWideHeads, UnevenWidthsDk330Dv290OnEveryFamily) { plain_on_every_family(kUneven); }

// Decode steps into a cache of K 576 and V 512 (128 query heads over one KV head, two
// sequences, a ring of 10 with 2 sinks wrapping over 14 steps) in |dtype|, V its own or
// (|latent|) the first 512 dims of each key row as absorbed MLA stores it: every Vulkan
// family at each limit set against the CPU backend.
void decode_wide_cache(DType dtype, bool latent) {
  const Widths w = kDeepSeek;
  const std::size_t seqs = 2, steps = 14;
  const KvCacheConfig config{.n_seqs = seqs,
                             .n_kv_heads = w.kv,
                             .head_dim = w.dk,
                             .capacity = 10,
                             .dtype = dtype,
                             .n_sinks = 2,
                             .v_head_dim = w.dv,
                             .latent = latent};
  std::string why;
  std::vector<CacheSide> sides = cache_sides(config, wide_families(), limit_sets(), why);
  const bool have_vulkan = !sides.empty();
  VKATTN_REQUIRE_BACKEND(have_vulkan, why);
  for (std::size_t i = 0; i < steps; ++i) {
    const auto pos = static_cast<std::int32_t>(i);
    const std::vector<std::int32_t> positions{pos, pos}, seq_ids{0, 1};
    const std::vector<float> k = normal_values(seqs * w.kv * w.dk, 100 + i), v = normal_values(seqs * w.kv * w.dv, 200 + i);
    const std::vector<float> q = normal_values(seqs * w.heads * w.dk, 300 + i);
    for (CacheSide& s : sides) {
      Backend& b = *s.b;
      Tensor tq = b.tensor({seqs, w.heads, w.dk}, DType::f32), tk = b.tensor({seqs, w.kv, w.dk}, DType::f32);
      Tensor tv = b.tensor({seqs, w.kv, w.dv}, DType::f32), out = b.tensor({seqs, w.heads, w.dv}, DType::f32);
      b.upload(tq, q);
      b.upload(tk, k);
      b.upload(tv, v);
      CommandList cmd = b.commands();
      if (latent) {
        cmd.kv_append(s.cache, tk, positions, seq_ids);
      } else {
        cmd.kv_append(s.cache, tk, tv, positions, seq_ids);
      }
      cmd.attention(tq, s.cache, out, {.q_positions = positions, .q_seq_ids = seq_ids}, {.causal = true, .path = s.path});
      cmd.submit_and_wait();
      s.outs.push_back(b.download(out));
    }
  }
  for (std::size_t si = 1; si < sides.size(); ++si) {
    for (std::size_t i = 0; i < steps; ++i) {
      EXPECT_TRUE(all_close(sides[si].outs[i], sides[0].outs[i], {seqs, w.heads, w.dv}, 1e-4, 1e-3))
          << sides[si].name << " vs cpu, " << to_string(dtype) << (latent ? ", latent" : "") << ", step " << i;
    }
    expect_no_validation_messages(*sides[si].b);
  }
}

TEST(MlaWideHeads, CacheDk576Dv512F16OnEveryFamily) { decode_wide_cache(DType::f16, false); }
TEST(MlaWideHeads, CacheDk576Dv512Q8_0OnEveryFamily) { decode_wide_cache(DType::q8_0, false); }
TEST(MlaWideHeads, LatentCacheK576V512F16OnEveryFamily) { decode_wide_cache(DType::f16, true); }
TEST(MlaWideHeads, LatentCacheK576V512Q8_0OnEveryFamily) { decode_wide_cache(DType::q8_0, true); }
TEST(MlaWideHeads, LatentCacheK576V512Q4_0OnEveryFamily) { decode_wide_cache(DType::q4_0, true); }

}  // namespace
}  // namespace vkattn::test
