// M-RoPE (RopeConfig::mrope): three positions per token (t, h, w), each rotary pair taking
// one by its section, contiguous (Qwen2-VL's mrope_section) or interleaved (Qwen3-VL's).
// Hand-computed angles for both arrangements (one with pairs past 3 x s_h and 3 x s_w);
// Hugging Face's apply_multimodal_rotary_pos_emb and apply_interleaved_mrope and ggml's
// rope_multi section rule written out literally; text tokens (t = h = w) give plain RoPE
// bit for bit; Vulkan against the CPU at any position, both pair layouts, partial rotary
// and scaling; replay with three positions per token, and with the cache positions apart
// after an image; the families' configurations over an image's positions; what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/random.hpp"
#include "support/rope_run.hpp"

namespace vkattn::test {
namespace {

// Pairs (1, 0) in the interleaved layout become (cos a_i, sin a_i).
std::vector<float> unit_pairs_rotated(const std::vector<double>& angles) {
  std::vector<float> v;
  for (double a : angles) v.insert(v.end(), {static_cast<float>(std::cos(a)), static_cast<float>(std::sin(a))});
  return v;
}

using MRopeTest = BackendTest;

// head_dim 16, base 256: theta_i = 2^-i. Positions (t, h, w) = (3, 5, 7).
// Contiguous {1, 2, 5}: pair 0 by t, 1-2 by h, 3-7 by w.
// Interleaved {4, 1, 3}: h where i % 3 == 1 and i < 3; w where i % 3 == 2 and i < 9; t
// elsewhere, pair 4 and 7 included (Hugging Face: what no section claims stays t).
TEST_P(MRopeTest, HandComputedAngles) {
  const std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  const std::vector<std::int32_t> thw = {3, 5, 7};
  struct Case {
    MRope mrope;
    std::vector<double> angles;
  };
  const Case cases[] = {
      {{.sections = {1, 2, 5}, .layout = MRopeLayout::contiguous}, {3.0, 2.5, 1.25, 0.875, 0.4375, 0.21875, 0.109375, 0.0546875}},
      {{.sections = {4, 1, 3}, .layout = MRopeLayout::interleaved},
       {3.0, 2.5, 1.75, 0.375, 0.1875, 0.21875, 0.046875, 0.0234375}},
  };
  for (const Case& c : cases) {
    const RopeConfig config{.layout = RopeLayout::interleaved, .base = 256.0, .mrope = c.mrope};
    EXPECT_TRUE(all_close(apply_rope(backend(), {1, 1, 16}, x, thw, config), unit_pairs_rotated(c.angles), {1, 1, 16}, 1e-6, 0))
        << (c.mrope.layout == MRopeLayout::contiguous ? "contiguous" : "interleaved");
  }
}

// Text tokens have t = h = w: exactly plain RoPE, bit for bit, in every arrangement,
// layout, partial rotary and scaling.
TEST_P(MRopeTest, TextTokensArePlainRopeBitForBit) {
  const std::vector<std::int32_t> pos = {0, 1, 17, 4095, 100000, 2147483647};
  std::vector<std::int32_t> thw;
  for (std::int32_t p : pos) thw.insert(thw.end(), {p, p, p});
  const MRope arrangements[] = {{.sections = {16, 24, 24}, .layout = MRopeLayout::contiguous},
                                {.sections = {24, 20, 20}, .layout = MRopeLayout::interleaved}};
  for (const MRope& m : arrangements) {
    for (RopeLayout layout : {RopeLayout::half, RopeLayout::interleaved}) {
      for (DType dtype : {DType::f32, DType::f16}) {
        RopeConfig plain{.layout = layout, .base = 1e6, .scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 4096};
        RopeConfig mrope = plain;
        mrope.mrope = m;
        const Shape shape{pos.size(), 3, 128};
        const std::vector<float> x = normal(pos.size() * 3 * 128, 5);
        EXPECT_EQ(apply_rope(backend(), shape, x, thw, mrope, dtype), apply_rope(backend(), shape, x, pos, plain, dtype));
      }
    }
  }
  // Qwen3.5: 64 of 256 dims rotated, {11, 11, 10} interleaved.
  RopeConfig plain{.rotary_dim = 64, .base = 1e7};
  RopeConfig mrope = plain;
  mrope.mrope = MRope{.sections = {11, 11, 10}, .layout = MRopeLayout::interleaved};
  const std::vector<float> x = normal(pos.size() * 2 * 256, 6);
  EXPECT_EQ(apply_rope(backend(), {pos.size(), 2, 256}, x, thw, mrope),
            apply_rope(backend(), {pos.size(), 2, 256}, x, pos, plain));
}

INSTANTIATE_TEST_SUITE_P(Backends, MRopeTest, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Hugging Face's rotation for one token, written out as transformers does it (half layout:
// cos/sin over the full head as cat(freqs, freqs), q * cos + rotate_half(q) * sin):
// Qwen2-VL's apply_multimodal_rotary_pos_emb splits the dims by mrope_section * 2 and
// takes chunk k's from position k % 3; Qwen3-VL's apply_interleaved_mrope overwrites
// freqs[1::3][:3 s_h] by h's and freqs[2::3][:3 s_w] by w's.
std::vector<double> hf_rotate(const std::vector<float>& x, std::size_t d, const std::vector<double>& theta,
                              const std::int32_t thw[3], const MRope& m) {
  const std::size_t half = d / 2;
  std::vector<double> freqs(half);
  if (m.layout == MRopeLayout::interleaved) {
    for (std::size_t j = 0; j < half; ++j) freqs[j] = thw[0] * theta[j];
    for (std::size_t axis = 1; axis < 3; ++axis) {
      for (std::size_t j = axis; j < 3 * m.sections[axis] && j < half; j += 3) freqs[j] = thw[axis] * theta[j];
    }
  }
  std::vector<double> c(d), s(d);
  std::size_t chunk_end = 0, chunk = 0;
  for (std::size_t i = 0; i < d; ++i) {
    double f = 0;
    if (m.layout == MRopeLayout::interleaved) {
      f = freqs[i % half];
    } else {
      while (i >= chunk_end) chunk_end += m.sections[chunk++ % 3];  // mrope_section * 2
      f = thw[(chunk - 1) % 3] * theta[i % half];
    }
    c[i] = std::cos(f);
    s[i] = std::sin(f);
  }
  std::vector<double> out(d);
  for (std::size_t i = 0; i < d; ++i) {
    const double rotated_half = i < half ? -double{x[i + half]} : double{x[i - half]};
    out[i] = x[i] * c[i] + rotated_half * s[i];
  }
  return out;
}

// ggml's rope_multi: sector = pair % sum(sections); contiguous by ranges, interleaved by
// the mod-3 rule, and what neither claims takes its fourth position (e), which text and
// Hugging Face give t: written here with e = t.
std::size_t ggml_axis(const MRope& m, std::size_t pair) {
  const std::size_t s0 = m.sections[0], s1 = m.sections[1], s2 = m.sections[2];
  const std::size_t sector = pair % (s0 + s1 + s2);
  if (m.layout == MRopeLayout::interleaved) {
    if (sector % 3 == 1 && sector < 3 * s1) return 1;
    if (sector % 3 == 2 && sector < 3 * s2) return 2;
    return 0;  // t, or e (= t)
  }
  if (sector >= s0 && sector < s0 + s1) return 1;
  if (sector >= s0 + s1 && sector < s0 + s1 + s2) return 2;
  return 0;
}

// One token of an image patch grid, then text after it (Qwen2-VL's get_rope_index): three
// text tokens at 0..2; a 2 x 3 grid of patches at t = 3, h = 3 + row, w = 3 + column;
// text again from max + 1 = 6. |thw| is [n_tokens][3].
std::vector<std::int32_t> image_positions() {
  std::vector<std::int32_t> thw;
  for (std::int32_t p = 0; p < 3; ++p) thw.insert(thw.end(), {p, p, p});
  for (std::int32_t r = 0; r < 2; ++r) {
    for (std::int32_t c = 0; c < 3; ++c) thw.insert(thw.end(), {3, 3 + r, 3 + c});
  }
  for (std::int32_t p = 6; p < 9; ++p) thw.insert(thw.end(), {p, p, p});
  return thw;
}

struct Family {
  const char* name;
  std::size_t heads, kv_heads, head_dim, rotary_dim;
  double base;
  MRope mrope;
};

class MRopeFamilies : public VulkanVsCpuTest, public ::testing::WithParamInterface<Family> {};

// Each family's configuration over text, an image and text: the CPU against Hugging Face's
// formula and ggml's section rule; Vulkan (q and k in one dispatch) against the CPU.
TEST_P(MRopeFamilies, ImageBetweenText) {
  const Family& f = GetParam();
  const RopeConfig config{.rotary_dim = f.rotary_dim, .base = f.base, .mrope = f.mrope};
  const std::vector<std::int32_t> thw = image_positions();
  const std::size_t n = thw.size() / 3, d = f.head_dim, r = f.rotary_dim;
  const std::vector<float> q = normal(n * f.heads * d, 31), k = normal(n * f.kv_heads * d, 32);
  const std::vector<double> theta = rope_frequencies(config, d).theta;

  std::vector<float> got[2][2];
  int side = 0;
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    Tensor tq = b->tensor({n, f.heads, d}, DType::f32), tk = b->tensor({n, f.kv_heads, d}, DType::f32);
    b->upload(tq, q);
    b->upload(tk, k);
    CommandList cmd = b->commands();
    cmd.rope(tq, tk, thw, config);
    cmd.submit_and_wait();
    got[side][0] = b->download(tq);
    got[side++][1] = b->download(tk);
  }
  EXPECT_TRUE(all_close(got[0][0], got[1][0], {n, f.heads, d}, 4e-6, 0)) << "q: Vulkan against the CPU";
  EXPECT_TRUE(all_close(got[0][1], got[1][1], {n, f.kv_heads, d}, 4e-6, 0)) << "k: Vulkan against the CPU";

  // Hugging Face rotates the first rotary_dim dims of each head; ggml the same pairs, each
  // by the position its sector names.
  std::vector<float> hf(q.size()), gg(q.size());
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t h = 0; h < f.heads; ++h) {
      const std::size_t row = (t * f.heads + h) * d;
      const std::vector<float> x(q.begin() + row, q.begin() + row + r);
      const std::vector<double> y = hf_rotate(x, r, theta, &thw[3 * t], f.mrope);
      for (std::size_t i = 0; i < d; ++i) hf[row + i] = i < r ? static_cast<float>(y[i]) : q[row + i];
      for (std::size_t i = 0; i < d; ++i) gg[row + i] = q[row + i];
      for (std::size_t i = 0; i < r / 2; ++i) {
        const double a = thw[3 * t + ggml_axis(f.mrope, i)] * theta[i];
        const double x0 = q[row + i], x1 = q[row + i + r / 2];
        gg[row + i] = static_cast<float>(x0 * std::cos(a) - x1 * std::sin(a));
        gg[row + i + r / 2] = static_cast<float>(x0 * std::sin(a) + x1 * std::cos(a));
      }
    }
  }
  EXPECT_TRUE(all_close(got[1][0], hf, {n, f.heads, d}, 2e-6, 0)) << "the CPU against Hugging Face's formula";
  EXPECT_TRUE(all_close(got[1][0], gg, {n, f.heads, d}, 2e-6, 0)) << "the CPU against ggml's section rule";
  RopeConfig plain = config;
  plain.mrope.reset();
  std::vector<std::int32_t> t_only(n);
  for (std::size_t t = 0; t < n; ++t) t_only[t] = thw[3 * t];
  EXPECT_FALSE(all_close(got[1][0], apply_rope(*cpu_, {n, f.heads, d}, q, t_only, plain), {n, f.heads, d}, 1e-3, 0))
      << "the image's h and w change the result";
}

// Public config.json values: Qwen2.5-VL-7B (28:4, mrope_section [16, 24, 24], rope_theta
// 1e6), Qwen3-VL-8B (32:8, [24, 20, 20] interleaved, 5e6), Qwen3.5 (16:2, head_dim 256,
// partial_rotary_factor 0.25, [11, 11, 10] interleaved, 1e7), GLM-4.5V (96:8, partial
// 0.5, [8, 12, 12], 1e4).
INSTANTIATE_TEST_SUITE_P(Configs, MRopeFamilies,
                         ::testing::Values(Family{"Qwen25VL", 28, 4, 128, 128, 1e6, {{16, 24, 24}, MRopeLayout::contiguous}},
                                           Family{"Qwen3VL", 32, 8, 128, 128, 5e6, {{24, 20, 20}, MRopeLayout::interleaved}},
                                           Family{"Qwen35", 16, 2, 256, 64, 1e7, {{11, 11, 10}, MRopeLayout::interleaved}},
                                           Family{"GLM45V", 96, 8, 128, 64, 1e4, {{8, 12, 12}, MRopeLayout::contiguous}}),
                         [](const ::testing::TestParamInfo<Family>& info) { return std::string(info.param.name); });

// Vulkan against the CPU at positions up to 2^31 - 1 drawn independently for t, h and w:
// both arrangements and pair layouts, f32 and f16, partial rotary, YaRN, the storage-buffer
// path, the Vulkan minimums.
TEST_F(VulkanVsCpuTest, MRopeMatchesAtAnyPosition) {
  std::vector<std::int32_t> thw = {0, 5, 2147483647, 2147483647, 0, 1, 65536, 12, 70000};
  for (std::uint32_t i = 0; i < 15; ++i) thw.push_back(static_cast<std::int32_t>((i * 2654435761u) >> 1));
  const std::size_t n = thw.size() / 3;
  for (MRopeLayout arrangement : {MRopeLayout::contiguous, MRopeLayout::interleaved}) {
    for (RopeLayout layout : {RopeLayout::half, RopeLayout::interleaved}) {
      for (DType dtype : {DType::f32, DType::f16}) {
        const RopeConfig config{.layout = layout,
                                .rotary_dim = 48,
                                .base = 1e6,
                                .scaling = RopeScaling::yarn,
                                .factor = 8.0,
                                .original_context = 2048,
                                .mrope = MRope{.sections = {6, 10, 8}, .layout = arrangement}};
        const Shape shape{n, 4, 64};
        const std::vector<float> x = normal(n * 4 * 64, 7);
        const double atol = dtype == DType::f16 ? 1e-3 : 4e-6, rtol = dtype == DType::f16 ? 1e-3 : 0.0;
        const std::vector<float> want = apply_rope(*cpu_, shape, x, thw, config, dtype);
        EXPECT_TRUE(all_close(apply_rope(*gpu_, shape, x, thw, config, dtype), want, shape, atol, rtol));
        on_vulkan(storage_buffer_options(), [&](Backend& gpu) {
          EXPECT_TRUE(all_close(apply_rope(gpu, shape, x, thw, config, dtype), want, shape, atol, rtol));
        });
        DeviceOptions minimum = test_options();
        minimum.cap_limits = test_spec_minimum();
        on_vulkan(minimum, [&](Backend& gpu) {
          EXPECT_TRUE(all_close(apply_rope(gpu, shape, x, thw, config, dtype), want, shape, atol, rtol));
        });
      }
    }
  }
}

// A decode step with M-RoPE replayed: set_tokens with (t, h, w) per token gives what a list
// recorded afresh gives; with one position per token, what (p, p, p) gives.
TEST_F(VulkanVsCpuTest, MRopeReplayTakesThreePositionsPerToken) {
  const RopeConfig rope{.base = 1e6, .mrope = MRope{.sections = {8, 12, 12}, .layout = MRopeLayout::interleaved}};
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    KvCache replayed = b->kv_cache({.n_kv_heads = 2, .head_dim = 64, .capacity = 32});
    KvCache fresh = b->kv_cache({.n_kv_heads = 2, .head_dim = 64, .capacity = 32});
    Tensor q = b->tensor({1, 4, 64}, DType::f32), k = b->tensor({1, 2, 64}, DType::f32);
    Tensor v = b->tensor({1, 2, 64}, DType::f32), out = b->tensor({1, 4, 64}, DType::f32);
    auto record = [&](CommandList& cmd, KvCache& cache, const std::vector<std::int32_t>& thw) {
      const std::int32_t t = thw[0];
      cmd.rope(q, k, thw, rope);
      cmd.kv_append(cache, k, v, {&t, 1}, {});
      cmd.attention(q, cache, out, {.q_positions = {&t, 1}}, {});
    };
    CommandList step = b->commands();
    std::vector<std::int32_t> thw = {0, 0, 0};
    record(step, replayed, thw);
    for (std::int32_t i = 0; i < 12; ++i) {
      thw = {i, i % 2 ? i + 3 : i, i % 3 ? i + 5 : i};  // text and patch-like tokens
      const std::vector<float> qv = normal(4 * 64, 40 + i), kv = normal(2 * 64, 60 + i), vv = normal(2 * 64, 80 + i);
      auto upload = [&] {
        b->upload(q, qv);
        b->upload(k, kv);
        b->upload(v, vv);
      };
      upload();
      if (i > 0) {
        if (i % 4 == 3) {
          thw = {i, i, i};
          const std::int32_t p = i;
          step.set_tokens({&p, 1});  // one position: t = h = w
        } else {
          step.set_tokens(thw);
        }
      }
      step.submit_and_wait();
      const std::vector<float> got = b->download(out);
      upload();
      CommandList once = b->commands();
      record(once, fresh, thw);
      once.submit_and_wait();
      ASSERT_EQ(got, b->download(out)) << to_string(b->kind()) << ", step " << i;
    }
  }
}

// After an image the cache positions (each token's index) are no longer t: Qwen2-VL's
// 3 text tokens, a 2 x 3 image at t = 3 (indices 3-8), then text at rope position 6 and
// index 9 on. A decode step replayed with set_tokens(index, {}, rope position) gives what
// a list recorded afresh gives, step after step; the older form, handing t to kv_append,
// is refused there.
TEST_F(VulkanVsCpuTest, MRopeReplayAfterAnImageTakesTheIndicesApart) {
  const RopeConfig rope{.base = 1e6, .mrope = MRope{.sections = {8, 12, 12}}};
  std::vector<std::int32_t> prefill_thw = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (std::int32_t h = 0; h < 2; ++h) {
    for (std::int32_t w = 0; w < 3; ++w) prefill_thw.insert(prefill_thw.end(), {3, 3 + h, 3 + w});
  }
  const std::vector<std::int32_t> prefill_index = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  for (Backend* b : {gpu_.get(), cpu_.get()}) {
    KvCache replayed = b->kv_cache({.n_kv_heads = 2, .head_dim = 64, .capacity = 32});
    KvCache fresh = b->kv_cache({.n_kv_heads = 2, .head_dim = 64, .capacity = 32});
    for (KvCache* cache : {&replayed, &fresh}) {
      Tensor q9 = b->tensor({9, 4, 64}, DType::f32), k9 = b->tensor({9, 2, 64}, DType::f32),
             v9 = b->tensor({9, 2, 64}, DType::f32);
      b->upload(k9, normal(9 * 2 * 64, 1));
      b->upload(v9, normal(9 * 2 * 64, 2));
      CommandList prefill = b->commands();
      prefill.rope(q9, k9, prefill_thw, rope);
      prefill.kv_append(*cache, k9, v9, prefill_index);
      prefill.submit_and_wait();
    }
    Tensor q = b->tensor({1, 4, 64}, DType::f32), k = b->tensor({1, 2, 64}, DType::f32);
    Tensor v = b->tensor({1, 2, 64}, DType::f32), out = b->tensor({1, 4, 64}, DType::f32);
    auto record = [&](CommandList& cmd, KvCache& cache, std::int32_t p, std::int32_t index) {
      cmd.rope(q, k, std::vector<std::int32_t>{p, p, p}, rope);
      cmd.kv_append(cache, k, v, {&index, 1});
      cmd.attention(q, cache, out, {.q_positions = {&index, 1}});
    };
    CommandList step = b->commands();
    for (std::int32_t i = 0; i < 6; ++i) {
      const std::int32_t p = 6 + i, index = 9 + i;
      auto upload = [&] {
        b->upload(q, normal(4 * 64, 40 + i));
        b->upload(k, normal(2 * 64, 60 + i));
        b->upload(v, normal(2 * 64, 80 + i));
      };
      upload();
      if (i == 0) {
        record(step, replayed, p, index);
      } else if (i % 2) {
        expect_invalid([&] { step.set_tokens(std::vector<std::int32_t>{p, p, p}); }, {"kv_append", "positions[0]"});
        step.set_tokens({&index, 1}, {}, {&p, 1});  // one M-RoPE position: t = h = w
      } else {
        step.set_tokens({&index, 1}, {}, std::vector<std::int32_t>{p, p, p});
      }
      step.submit_and_wait();
      const std::vector<float> got = b->download(out);
      upload();
      CommandList once = b->commands();
      record(once, fresh, p, index);
      once.submit_and_wait();
      ASSERT_EQ(got, b->download(out)) << to_string(b->kind()) << ", step " << i;
    }
    EXPECT_EQ(replayed.next_position(0), 15);
  }
}

TEST(MRopeErrors, BadInputIsRefused) {
  auto cpu = make_backend(BackendKind::cpu);
  Tensor x = cpu->tensor({2, 1, 16}, DType::f32);
  CommandList cmd = cpu->commands();
  const std::vector<std::int32_t> three = {0, 1, 2, 3, 4, 5}, one = {0, 1};
  const RopeConfig ok{.mrope = MRope{.sections = {2, 3, 3}}};
  expect_invalid([&] { cmd.rope(x, one, ok); }, {"positions.size()", "2", "3 x n_tokens", "6"});
  expect_invalid(
      [&] {
        cmd.rope(x, three, RopeConfig{.mrope = MRope{.sections = {2, 3, 4}}});
      },
      {"config.mrope.sections", "{2, 3, 4} (sum 9)", "rotary_dim / 2 = 8"});
  expect_invalid(
      [&] {
        cmd.rope(x, three, RopeConfig{.mrope = MRope{.sections = {2, 3, 3}, .layout = MRopeLayout(5)}});
      },
      {"config.mrope.layout", "5"});
  expect_invalid([&] { cmd.rope(x, std::vector<std::int32_t>{0, 1, 2, 3, -4, 5}, ok); }, {"positions[4]", "-4"});
  expect_invalid(
      [&] { cpu->kv_cache({.n_kv_heads = 1, .head_dim = 16, .capacity = 8, .rope = KvRope::on_read, .rope_config = ok}); },
      {"config.rope_config.mrope", "KvRope::stored"});
  // Three positions a token, or M-RoPE positions apart, on a list without an M-RoPE op
  // would drop h and w: refused.
  CommandList plain = cpu->commands();
  plain.rope(x, one);
  expect_invalid([&] { plain.set_tokens(three); }, {"positions.size()", "6 (t, h, w per token)", "no rope op with config.mrope"});
  expect_invalid([&] { plain.set_tokens(one, {}, three); }, {"mrope_positions", "no rope op with config.mrope"});
  // A replay refuses a count that is neither n_tokens nor 3 x n_tokens.
  cmd.rope(x, three, ok);
  expect_invalid([&] { cmd.set_tokens(std::vector<std::int32_t>{1, 2, 3, 4}); }, {"positions.size()", "4", "3 x"});
  expect_invalid([&] { cmd.set_tokens(three, {}, three); }, {"positions.size()", "6", "mrope_positions holds"});
  expect_invalid([&] { cmd.set_tokens(one, {}, std::vector<std::int32_t>{1, 2, 3, 4}); }, {"mrope_positions.size()", "4", "3 x"});
  expect_invalid([&] { cmd.set_tokens(one, {}, std::vector<std::int32_t>{1, 2, 3, 4, -5, 6}); }, {"mrope_positions[4]", "-5"});
  cmd.set_tokens(one, {}, three);
}

}  // namespace
}  // namespace vkattn::test
