// AttentionPrecision::f16_products on a Vulkan backend against the CPU backend, with the
// tolerances docs/attention.md derives (u = 2^-11, the unit roundoff of f16):
// - against the CPU's f16_products (Q, K, V rounded, everything else exact: the "rounded
//   inputs" oracle) only the probabilities' rounding and f32 order remain:
//     |do| <= (e^(2 ds_f32) - 1 + 2u) max|v| + the f32 terms,
//   ds_f32 the f32 score tolerance of fused_match.hpp;
// - against the f32 reference the inputs' rounding too: a score moves by up to
//   u_qk scale sum_d |q_d k_d| (u_qk = u for Q's rounding, 2u when K was rounded too: f32 or
//   quantized K), a value by u max|v| when V was rounded: |do| <= (e^(2 ds) - 1 + 2u + u_v)
//   max|v| + the f32 terms;
// - a statistical check, which the bounds (about 100 times the typical error) cannot make:
//   the RMS difference from the rounded-inputs oracle within 10 times the probabilities'
//   rounding's RMS (u / sqrt(3) rms(v)) plus the f32 terms, so that a lost chunk of keys or
//   a misplaced fragment element cannot hide under the worst-case bound;
// - with f16 sums (the packed f16 kernels: chains of |chain| f16 FMAs, each then added
//   into f32), each chain's n-th FMA rounds within u times the sum of the terms before:
//   scores move by up to chain u scale sum_d |q_d k_d| more, outputs by chain u max|v|
//   more (the chains of P.V sum weights <= 1 of values); rounding errors of random sign
//   add up as a square root, so the RMS bound grows by 1 + sqrt(chain) only (a lost
//   chain of 8 keys must still show).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/compare.hpp"

namespace vkattn::test {

inline constexpr double kHalfUlp = 1.0 / 2048;  // u = 2^-11
inline constexpr int kPackedChain = 8;          // attn_packed_f16.glsl: the longest f16 chain

inline double rms(const std::vector<float>& v) {
  double s = 0;
  std::size_t n = 0;
  for (float x : v) {
    if (std::isfinite(x)) s += double{x} * x, ++n;
  }
  return n ? std::sqrt(s / n) : 0.0;
}

inline double rms_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return a.empty() ? 0.0 : std::sqrt(s / a.size());
}

// The bounds below from the inputs' facts: the largest score magnitude (score_magnitude:
// |scale| sum_d |q_d k_d| plus the biases, for the f32 terms), the largest dot magnitude
// (|dot_mag|, dot_magnitude: without the biases, which no f16 rounding touches; negative:
// score_mag), max|v| and rms(v), whether Q or K and V reached the kernel as f16
// (|f16_input|), and whether K and V reach the products rounded (|kv_rounded|: f32 or
// quantized; an f16 tensor or cache holds them exactly).
struct F16Bounds {
  double near, far, rms;
};
inline F16Bounds f16_bounds(double score_mag, double v_max, double v_rms, bool f16_input, bool kv_rounded, int chain = 0,
                            double dot_mag = -1) {
  const double qk = dot_mag < 0 ? score_mag : dot_mag;
  const double f32_s = 1e-4 + 2e-6 * score_mag + chain * kHalfUlp * qk;  // fused_match.hpp's
  const double base = f16_input ? 2e-4 : 1e-4;
  const double ds = f32_s + (kv_rounded ? 2 : 1) * kHalfUlp * qk;
  const double p_term = (2 + chain) * kHalfUlp * v_max;
  return {base + (std::expm1(2 * f32_s) + 1e-5) * v_max + p_term,
          base + (std::expm1(2 * ds) + 1e-5 + (kv_rounded ? kHalfUlp : 0.0)) * v_max + p_term,
          10 * (1 + std::sqrt(double(chain))) * kHalfUlp / std::sqrt(3.0) * v_rms + base +
              std::expm1(2 * (1e-4 + 2e-6 * score_mag)) * v_max};
}

// |got| against the CPU backend's rounded-inputs oracle |want_rounded| and f32 reference
// |want| within |b|.
inline void expect_f16_close(const std::vector<float>& got, const std::vector<float>& want_rounded,
                             const std::vector<float>& want, const Shape& shape, const F16Bounds& b, const std::string& what) {
  EXPECT_TRUE(all_close(got, want_rounded, shape, b.near, 1e-4)) << what << ": against the rounded-inputs oracle";
  EXPECT_TRUE(all_close(got, want, shape, b.far, 1e-4)) << what << ": against the f32 reference";
  EXPECT_LE(rms_difference(got, want_rounded), b.rms) << what << ": RMS against the rounded-inputs oracle";
}

// |got| (a Vulkan backend's f16_products output on |in|, |chain| as f16_bounds) against
// |cpu|'s outputs.
inline void expect_f16_matches(Backend& cpu, const AttnInputs& in, const std::vector<float>& got, const std::string& what,
                               int chain = 0) {
  AttnInputs exact = in, rounded = in;
  exact.config.precision = AttentionPrecision::f32;
  rounded.config.precision = AttentionPrecision::f16_products;
  const F16Bounds b =
      f16_bounds(score_magnitude(in), max_abs(in.v), rms(in.v), in.kv_dtype == DType::f16 || in.q_dtype == DType::f16,
                 in.kv_dtype != DType::f16, chain, dot_magnitude(in));
  expect_f16_close(got, run_attention_op(cpu, rounded), run_attention_op(cpu, exact), in.out_shape(), b, what);
}

}  // namespace vkattn::test
