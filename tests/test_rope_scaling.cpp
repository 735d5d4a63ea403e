// RoPE frequency scaling and precision. Every expected table is written out here from the
// published formula (transformers' modeling_rope_utils, the YaRN and Llama 3.1 papers),
// in double, without calling the library; then both backends are checked to use them,
// and to hold the phase at every position in [0, 2^31).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"
#include "support/rope_formulas.hpp"

namespace vkattn::test {
namespace {

constexpr double kPi = std::numbers::pi;

void expect_table(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * want[i]) << "theta_" << i;
}

TEST(RopeScaling, None) {
  const auto f = rope_frequencies({.base = 500000.0}, 128);
  expect_table(f.theta, plain(500000.0, 128));
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeScaling, PartialRotaryUsesRotaryDim) {
  // GPT-NeoX: rotary_dim = 32 of head_dim 128, theta_i = base^(-2i/32).
  expect_table(rope_frequencies({.rotary_dim = 32}, 128).theta, plain(10000.0, 32));
}

TEST(RopeScaling, Linear) {
  auto want = plain(10000.0, 64);
  for (double& t : want) t /= 4.0;
  expect_table(rope_frequencies({.scaling = RopeScaling::linear, .factor = 4.0}, 64).theta, want);
}

TEST(RopeScaling, NtkAware) {
  const double d = 64, factor = 8.0;
  expect_table(rope_frequencies({.scaling = RopeScaling::ntk, .factor = factor}, 64).theta,
               plain(10000.0 * std::pow(factor, d / (d - 2)), 64));
}

TEST(RopeScaling, DynamicNtk) {
  const RopeConfig c{.scaling = RopeScaling::dynamic_ntk, .factor = 2.0, .original_context = 4096};
  // Within the original context nothing changes.
  expect_table(rope_frequencies(c, 128, 4095).theta, plain(10000.0, 128));
  // At length L = 3 * 4096 (largest position L - 1): base * (2 * 3 - (2 - 1))^(d / (d - 2)).
  const double d = 128;
  expect_table(rope_frequencies(c, 128, 3 * 4096 - 1).theta, plain(10000.0 * std::pow(5.0, d / (d - 2)), 128));
  // An explicit sequence length wins over the positions.
  RopeConfig explicit_len = c;
  explicit_len.sequence_length = 3 * 4096;
  expect_table(rope_frequencies(explicit_len, 128, 0).theta, plain(10000.0 * std::pow(5.0, d / (d - 2)), 128));
}

TEST(RopeScaling, Yarn) {
  // Qwen2.5 with YaRN: base 1e6, factor 4, original context 32768, head_dim 128.
  const RopeConfig c{.base = 1e6, .scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 32768};
  const auto f = rope_frequencies(c, 128);
  expect_table(f.theta, yarn(1e6, 128, 4.0, 32768, 32, 1));
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  // The frequencies really are mixed: the first pair extrapolates, the last interpolates.
  EXPECT_NEAR(f.theta[0], 1.0, 1e-15);
  EXPECT_NEAR(f.theta[63], std::pow(1e6, -126.0 / 128) / 4.0, 1e-25);

  RopeConfig bounds = c;
  bounds.yarn.beta_fast = 16;
  bounds.yarn.beta_slow = 2;
  expect_table(rope_frequencies(bounds, 128).theta, yarn(1e6, 128, 4.0, 32768, 16, 2));

  // DeepSeek-V2 style: mscale and mscale_all_dim.
  RopeConfig deepseek = c;
  deepseek.factor = 40;
  deepseek.yarn.mscale = 0.707;
  deepseek.yarn.mscale_all_dim = 1.0;
  EXPECT_NEAR(rope_frequencies(deepseek, 128).attention_factor, (0.1 * 0.707 * std::log(40.0) + 1) / (0.1 * std::log(40.0) + 1),
              1e-15);

  RopeConfig overridden = c;
  overridden.attention_factor = 1.25;
  EXPECT_EQ(rope_frequencies(overridden, 128).attention_factor, 1.25);
}

TEST(RopeScaling, YarnUntruncatedGptOss) {
  // gpt-oss: base 150000, factor 32, original context 4096, head_dim 64, and the ramp's
  // bounds left as computed (8.09 and 17.40) rather than rounded out to whole dims.
  RopeConfig c{.base = 150000.0, .scaling = RopeScaling::yarn, .factor = 32.0, .original_context = 4096};
  c.yarn.truncate = false;
  const auto f = rope_frequencies(c, 64);
  expect_table(f.theta, yarn(150000.0, 64, 32.0, 4096, 32, 1, false));
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(32.0) + 1.0, 1e-15);
  // Not the truncated table: pair 17 sits inside the ramp only without rounding.
  c.yarn.truncate = true;
  EXPECT_GT(std::abs(f.theta[17] / rope_frequencies(c, 64).theta[17] - 1.0), 0.1);
}

// gte-v1.5's "ntk" scaling is fixed NTK as vLLM and gte's own code compute it (kexue.fm
// 9706): theta_i = (base * s)^(-2i/d) / s^(2/d), not RopeScaling::ntk's base change.
// docs/models.md maps it to linear scaling by s^(2/d) over base * s.
TEST(RopeScaling, GteNtkIsLinearOverAScaledBase) {
  const double d = 64, s = 2.0, base = 160000.0;
  std::vector<double> want(32);
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = std::pow(base * s, -2.0 * static_cast<double>(i) / d) / std::pow(s, 2 / d);
  expect_table(rope_frequencies({.base = base * s, .scaling = RopeScaling::linear, .factor = std::pow(s, 2 / d)}, 64).theta,
               want);
  EXPECT_GT(rope_frequencies({.base = base, .scaling = RopeScaling::ntk, .factor = s}, 64).theta[0] / want[0], 1.02);
}

TEST(RopeScaling, Llama3) {
  // Llama 3.1: base 500000, factor 8, low 1, high 4, original context 8192.
  const RopeConfig c{.base = 500000.0, .scaling = RopeScaling::llama3, .factor = 8.0, .original_context = 8192};
  std::vector<double> want = plain(500000.0, 128);
  const double low_wavelen = 8192 / 1.0, high_wavelen = 8192 / 4.0;
  int kept = 0, divided = 0, smoothed = 0;
  for (double& t : want) {
    const double wavelen = 2 * kPi / t;
    if (wavelen < high_wavelen) {
      ++kept;
    } else if (wavelen > low_wavelen) {
      t /= 8.0;
      ++divided;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      t = (1 - smooth) * t / 8.0 + smooth * t;
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);  // the table exercises all three bands
  expect_table(rope_frequencies(c, 128).theta, want);
}

// Llama 4 Scout's config.json: rope_type llama3, factor 16, low_freq_factor =
// high_freq_factor = 1, original context 8192, base 500000. The smooth band is empty:
// wavelengths above 8192 are divided by 16, the rest kept, none in between (a band of
// width 0 would divide by zero).
TEST(RopeScaling, Llama3EqualFactorsLlama4Scout) {
  RopeConfig c{.layout = RopeLayout::interleaved,
               .base = 500000.0,
               .scaling = RopeScaling::llama3,
               .factor = 16.0,
               .original_context = 8192};
  c.llama3 = {.low_freq_factor = 1.0, .high_freq_factor = 1.0};
  std::vector<double> want = plain(500000.0, 128);
  int kept = 0, divided = 0;
  for (double& t : want) {
    if (2 * kPi / t > 8192.0) {
      t /= 16.0;
      ++divided;
    } else {
      ++kept;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  const auto f = rope_frequencies(c, 128);
  expect_table(f.theta, want);
  for (double t : f.theta) EXPECT_TRUE(std::isfinite(t));
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeScaling, FactorTable) {
  std::vector<double> factors(32);
  for (std::size_t i = 0; i < 32; ++i) factors[i] = 1.0 + 0.25 * static_cast<double>(i);
  const RopeConfig c{.rotary_dim = 64, .scaling = RopeScaling::factors, .freq_factors = factors, .attention_factor = 1.19};
  std::vector<double> want = plain(10000.0, 64);
  for (std::size_t i = 0; i < 32; ++i) want[i] /= factors[i];
  const auto f = rope_frequencies(c, 96);
  expect_table(f.theta, want);
  EXPECT_EQ(f.attention_factor, 1.19);
}

using RopeScalingBackends = BackendTest;

// At position 1 each pair (1, 0) becomes (cos theta_i, sin theta_i) * attention factor:
// the backend uses the scaled table; dims past rotary_dim stay untouched.
TEST_P(RopeScalingBackends, OutputUsesTheScaledTable) {
  const RopeConfig configs[] = {
      {.layout = RopeLayout::interleaved, .scaling = RopeScaling::linear, .factor = 4.0},
      {.layout = RopeLayout::interleaved, .base = 1e6, .scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 256},
      {.layout = RopeLayout::interleaved,
       .base = 500000.0,
       .scaling = RopeScaling::llama3,
       .factor = 8.0,
       .original_context = 64},
      {.layout = RopeLayout::interleaved,
       .rotary_dim = 16,
       .scaling = RopeScaling::factors,
       .freq_factors = {1, 2, 3, 4, 5, 6, 7, 8},
       .attention_factor = 2.0},
  };
  for (const RopeConfig& c : configs) {
    const std::size_t D = 32;
    std::vector<float> x(D);
    for (std::size_t i = 0; i < D; ++i) x[i] = i % 2 == 0 ? 1.0f : 0.0f;
    Tensor t = backend().tensor({1, 1, D}, DType::f32);
    backend().upload(t, x);
    CommandList cmd = backend().commands();
    cmd.rope(t, std::vector<std::int32_t>{1}, c);
    cmd.submit_and_wait();
    const auto y = backend().download(t);
    const auto f = rope_frequencies(c, D);
    const std::size_t d = c.rotary_dim ? c.rotary_dim : D;
    for (std::size_t i = 0; i < d / 2; ++i) {
      EXPECT_NEAR(y[2 * i], std::cos(f.theta[i]) * f.attention_factor, 2e-6) << int(c.scaling) << " pair " << i;
      EXPECT_NEAR(y[2 * i + 1], std::sin(f.theta[i]) * f.attention_factor, 2e-6) << int(c.scaling) << " pair " << i;
    }
    for (std::size_t i = d; i < D; ++i) EXPECT_EQ(y[i], x[i]);
  }
}

// The phase is exact at any position: against RoPE computed here in long double, the
// error stays below 4e-6 for |x| <= 4 at positions spread over [0, 2^31).
TEST_P(RopeScalingBackends, PrecisionAtAnyPosition) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> value(-4.0f, 4.0f);
  for (double base : {10000.0, 500000.0, 1e6}) {
    for (std::size_t D : {64u, 128u}) {
      std::vector<std::int32_t> pos = {0, 1, 4095, 65535, 131071, 1000003, (1 << 24) + 1, 16777213, INT32_MAX - 1, INT32_MAX};
      const auto more = uniform_positions(54, 7);
      pos.insert(pos.end(), more.begin(), more.end());
      const std::size_t T = pos.size(), H = 2;
      std::vector<float> x(T * H * D);
      for (float& v : x) v = value(rng);
      Tensor t = backend().tensor({T, H, D}, DType::f32);
      backend().upload(t, x);
      CommandList cmd = backend().commands();
      cmd.rope(t, pos, {.layout = RopeLayout::half, .base = base});
      cmd.submit_and_wait();
      const auto y = backend().download(t);
      double max_err = 0;
      for (std::size_t tok = 0; tok < T; ++tok) {
        for (std::size_t h = 0; h < H; ++h) {
          const float* in = &x[(tok * H + h) * D];
          const float* out = &y[(tok * H + h) * D];
          for (std::size_t i = 0; i < D / 2; ++i) {
            const long double theta = std::pow(static_cast<long double>(base), -2.0L * i / D);
            const long double a = static_cast<long double>(pos[tok]) * theta;
            const long double c = std::cos(a), s = std::sin(a);
            const long double xa = in[i], xb = in[i + D / 2];
            max_err = std::max(max_err, static_cast<double>(std::fabs(out[i] - (xa * c - xb * s))));
            max_err = std::max(max_err, static_cast<double>(std::fabs(out[i + D / 2] - (xa * s + xb * c))));
          }
        }
      }
      EXPECT_LE(max_err, 4e-6) << "base " << base << " head_dim " << D;
    }
  }
}

// Q and K (different head counts) in one op, tokens of three sequences interleaved, each
// token at its own position: the same as rotating each tensor alone.
TEST_P(RopeScalingBackends, QueryAndKeyInOneOpMixedSequences) {
  // Sequence A at 100.., B at 0.., C near 2^31, interleaved in one batch.
  const std::vector<std::int32_t> pos = {100, 0, INT32_MAX - 2, 101, 1, INT32_MAX - 1, 102, 2};
  const std::size_t T = pos.size(), D = 64;
  for (DType dt : {DType::f32, DType::f16}) {
    for (std::size_t Hq : {32u, 3u}) {
      const std::size_t Hk = Hq == 32 ? 8 : 1;
      const auto xq = normal(T * Hq * D, 31), xk = normal(T * Hk * D, 32);
      const RopeConfig c{.layout = RopeLayout::half, .base = 500000.0};
      Tensor q = backend().tensor({T, Hq, D}, dt), k = backend().tensor({T, Hk, D}, dt);
      Tensor q1 = backend().tensor({T, Hq, D}, dt), k1 = backend().tensor({T, Hk, D}, dt);
      backend().upload(q, xq);
      backend().upload(k, xk);
      backend().upload(q1, xq);
      backend().upload(k1, xk);
      CommandList both = backend().commands();
      both.rope(q, k, pos, c);
      EXPECT_EQ(both.stats().ops, 1u);
      both.submit_and_wait();
      EXPECT_EQ(both.stats().barriers, 0u);
      CommandList apart = backend().commands();
      apart.rope(q1, pos, c);
      apart.rope(k1, pos, c);
      apart.submit_and_wait();
      EXPECT_EQ(backend().download(q), backend().download(q1)) << to_string(dt) << " Hq " << Hq;
      EXPECT_EQ(backend().download(k), backend().download(k1)) << to_string(dt) << " Hq " << Hq;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RopeScalingBackends, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Every scaling variant on Vulkan against the CPU reference, f32 and f16, decode and
// prefill sizes, Q and K together.
TEST_F(VulkanVsCpuTest, RopeScalingVariantsMatch) {
  std::vector<double> factors(64);
  for (std::size_t i = 0; i < 64; ++i) factors[i] = 1.0 + 0.1 * static_cast<double>(i);
  const RopeConfig configs[] = {
      {.base = 500000.0, .scaling = RopeScaling::llama3, .factor = 8.0, .original_context = 8192},
      {.base = 1e6, .scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 32768},
      {.layout = RopeLayout::interleaved, .scaling = RopeScaling::dynamic_ntk, .factor = 2.0, .original_context = 16},
      {.scaling = RopeScaling::ntk, .factor = 4.0},
      {.scaling = RopeScaling::linear, .factor = 2.0},
      {.scaling = RopeScaling::factors, .freq_factors = factors, .attention_factor = 1.2},
  };
  for (const RopeConfig& c : configs) {
    for (DType dt : {DType::f32, DType::f16}) {
      for (std::size_t T : {1u, 67u}) {
        const Shape qs{T, 32, 128}, ks{T, 8, 128};
        const auto xq = normal(T * 32 * 128, 41), xk = normal(T * 8 * 128, 42);
        const auto pos = uniform_positions(T, 43, 0, 100000);
        std::vector<float> out[2][2];
        int b = 0;
        for (Backend* be : {gpu_.get(), cpu_.get()}) {
          Tensor q = be->tensor(qs, dt), k = be->tensor(ks, dt);
          be->upload(q, xq);
          be->upload(k, xk);
          CommandList cmd = be->commands();
          cmd.rope(q, k, pos, c);
          cmd.submit_and_wait();
          out[b][0] = be->download(q);
          out[b][1] = be->download(k);
          ++b;
        }
        const double atol = dt == DType::f16 ? 2e-3 : 6e-6, rtol = dt == DType::f16 ? 1e-3 : 0;
        EXPECT_TRUE(all_close(out[0][0], out[1][0], qs, atol, rtol)) << int(c.scaling) << to_string(dt) << T;
        EXPECT_TRUE(all_close(out[0][1], out[1][1], ks, atol, rtol)) << int(c.scaling) << to_string(dt) << T;
      }
    }
  }
}

}  // namespace
}  // namespace vkattn::test
