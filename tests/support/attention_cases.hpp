// The attention cases every Vulkan-against-CPU attention test runs (the three stages and
// the fused op alike): shapes and options chosen to break kernels (odd sizes, GQA, head_dims
// real models use, masks, soft-capping, ALiBi, sinks, f16, huge logits, long rows), and
// what their tolerances are built from.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/attention_io.hpp"
#include "support/env.hpp"
#include "support/random.hpp"

namespace vkattn::test {

enum class MaskKind {
  none,
  random,     // N(0, mask_scale), every 7th entry -inf
  plus_minus  // +-mask_scale at random
};

struct AttnCase {
  const char* name;
  std::size_t tokens, heads, kv_heads, keys, head_dim, seqs = 1;
  AttentionConfig config{};
  DType q_dtype = DType::f32, kv_dtype = DType::f32;
  float qk_scale = 1.0f;  // q and k ~ N(0, qk_scale)
  MaskKind mask = MaskKind::none;
  float mask_scale = 1.0f;
  std::int32_t offset = 0;  // first key position
};

inline std::uint32_t seed_of(const char* name) {  // FNV-1a: a fixed seed per case, stable everywhere
  std::uint32_t h = 2166136261u;
  for (; *name; ++name) h = (h ^ static_cast<unsigned char>(*name)) * 16777619u;
  return h;
}

// The largest |scale| * sum_d |q_d k_d| (with the query temperature): what f16 rounding of
// Q and K scales (the biases are added in f32).
inline double dot_magnitude(const AttnInputs& in) {
  double scale = in.config.scale.value_or(1 / std::sqrt(double(in.head_dim)));
  if (const auto& temp = in.config.query_temperature) {  // the largest t(pos_t) multiplies it
    double t_max = 0;
    for (std::int32_t p : in.q_pos) {
      const double steps = std::floor((static_cast<double>(p) + temp->offset) / temp->floor_scale);
      t_max = std::max(t_max, std::fabs(1 + temp->scale * std::log1p(steps)));
    }
    scale *= t_max;
  }
  const std::size_t group = in.heads / in.kv_heads;
  double dots = 0;
  for (std::size_t t = 0; t < in.tokens; ++t) {
    for (std::size_t h = 0; h < in.heads; ++h) {
      for (std::size_t j = 0; j < in.keys; ++j) {
        const float* q = &in.q[(t * in.heads + h) * in.head_dim];
        const float* k = &in.k[(j * in.kv_heads + h / group) * in.head_dim];
        double a = 0;
        for (std::size_t d = 0; d < in.head_dim; ++d) a += std::fabs(double{q[d]} * k[d]);
        dots = std::max(dots, std::fabs(scale) * a);
      }
    }
  }
  return dots;
}

// What a score is made of, in absolute value: scale * sum_d |q_d k_d| + |ALiBi| + |mask|.
// The f32 rounding error of a score grows with this, not with the score (which may cancel).
inline double score_magnitude(const AttnInputs& in) {
  const double dots = dot_magnitude(in);
  double bias = 0;
  for (float m : in.mask) bias = std::max(bias, std::isfinite(m) ? std::fabs(double{m}) : 0.0);
  std::vector<float> slopes = in.config.alibi_slopes;
  if (slopes.empty() && in.config.alibi) slopes = alibi_slopes(in.heads);
  double slope = 0;
  for (float s : slopes) slope = std::max(slope, std::fabs(double{s}));
  const auto [lo, hi] = std::minmax_element(in.k_pos.begin(), in.k_pos.end());
  const auto [qlo, qhi] = std::minmax_element(in.q_pos.begin(), in.q_pos.end());
  return dots + bias + slope * double(std::max(*hi, *qhi) - std::min(*lo, *qlo));
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::isfinite(x) ? std::fabs(double{x}) : 0.0);
  return m;
}

// The case's inputs: random q, k, v and positions (random_inputs), its config, dtypes and mask.
inline AttnInputs case_inputs(const AttnCase& c) {
  const std::uint32_t seed = seed_of(c.name);
  AttnInputs in = random_inputs(c.tokens, c.heads, c.kv_heads, c.keys, c.head_dim, c.seqs, seed, c.offset, c.qk_scale);
  in.config = c.config;
  in.q_dtype = c.q_dtype;
  in.kv_dtype = c.kv_dtype;
  if (c.mask != MaskKind::none) {
    in.mask = normal(c.tokens * c.keys, seed + 3, c.mask_scale);
    for (std::size_t i = 0; i < in.mask.size(); ++i) {
      if (c.mask == MaskKind::plus_minus) in.mask[i] = in.mask[i] < 0 ? -c.mask_scale : c.mask_scale;
      if (c.mask == MaskKind::random && i % 7 == 3) in.mask[i] = -kInf;
    }
  }
  return in;
}

// A case's inputs (its own config), the CPU backend's stages on them and the magnitudes
// the tolerances take (of the scores, the stage's scores and V), kept for the later tests of the process on the same case: a
// suite runs each case under several variants or limits, and drawing the inputs and running the CPU side again took a tenth of
// the decode suite's time. Up to kCpuSidesKept floats are kept (the 32768-key case alone is 9M).
struct CpuSide {
  std::string name;  // the case's, checked on every use: an entry kept under the wrong key
                     // would go unnoticed, the GPU side running the same wrong inputs
  AttnInputs in;
  AttnOutputs want;
  double score_mag = 0;
  double v_max = 0;  // max_abs(in.v)
  std::size_t floats() const {
    return in.q.size() + in.k.size() + in.v.size() + in.mask.size() + want.scores.size() + want.probs.size() + want.out.size();
  }
};
inline constexpr std::size_t kCpuSidesKept = std::size_t{64} << 20;
inline const CpuSide& cpu_side(Backend& cpu, const AttnCase& c) {
  thread_local std::map<std::string, CpuSide> kept;
  thread_local std::size_t kept_floats = 0;
  std::string key = std::string(c.name);
  for (std::size_t n : {c.tokens, c.heads, c.kv_heads, c.keys, c.head_dim, c.seqs}) key += "," + std::to_string(n);
  key += "," + std::to_string(c.offset) + "," + to_string(c.q_dtype) + "," + to_string(c.kv_dtype);
  if (auto it = kept.find(key); it != kept.end()) {
    EXPECT_EQ(it->second.name, c.name) << "cpu_side kept another case under this one's key";
    return it->second;
  }
  CpuSide side;
  side.name = c.name;
  side.in = case_inputs(c);
  side.want = run_attention(cpu, side.in);
  side.score_mag = score_magnitude(side.in);
  side.v_max = max_abs(side.in.v);
  if (kept_floats + side.floats() > kCpuSidesKept) {
    kept.clear();
    kept_floats = 0;
  }
  kept_floats += side.floats();
  return kept.emplace(std::move(key), std::move(side)).first->second;
}

inline const std::vector<float> kSinks8 = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -2.0f, 1.0f, 0.25f};

inline std::vector<AttnCase> attention_cases() {
  // A table: one case per line or two.
  // clang-format off
  return {
        // One decode token for each of 3 sequences whose keys are interleaved in k.
        AttnCase{.name = "decode_3_sequences", .tokens = 3, .heads = 8, .kv_heads = 2, .keys = 301, .head_dim = 64,
                 .seqs = 3},
        AttnCase{.name = "prefill_200_causal", .tokens = 200, .heads = 4, .kv_heads = 4, .keys = 200, .head_dim = 64},
        AttnCase{.name = "one_key", .tokens = 1, .heads = 4, .kv_heads = 2, .keys = 1, .head_dim = 64},
        AttnCase{.name = "odd_17_tokens_37_keys", .tokens = 17, .heads = 6, .kv_heads = 3, .keys = 37, .head_dim = 24},
        AttnCase{.name = "more_tokens_than_keys", .tokens = 17, .heads = 2, .kv_heads = 1, .keys = 5, .head_dim = 16,
                 .config = {.causal = false}},
        AttnCase{.name = "odd_head_dim_7_f16", .tokens = 5, .heads = 3, .kv_heads = 1, .keys = 13, .head_dim = 7,
                 .q_dtype = DType::f16, .kv_dtype = DType::f16},
        AttnCase{.name = "gqa_4", .tokens = 9, .heads = 16, .kv_heads = 4, .keys = 64, .head_dim = 128},
        AttnCase{.name = "gqa_8", .tokens = 5, .heads = 32, .kv_heads = 4, .keys = 100, .head_dim = 128},
        AttnCase{.name = "mqa", .tokens = 7, .heads = 8, .kv_heads = 1, .keys = 33, .head_dim = 64},
        AttnCase{.name = "head_dim_32", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 32},
        AttnCase{.name = "head_dim_80", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 80},
        AttnCase{.name = "head_dim_96", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 96},
        AttnCase{.name = "head_dim_112", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 112},
        AttnCase{.name = "head_dim_128", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 128},
        AttnCase{.name = "head_dim_256", .tokens = 5, .heads = 4, .kv_heads = 2, .keys = 45, .head_dim = 256},
        AttnCase{.name = "window_16_two_sequences", .tokens = 40, .heads = 4, .kv_heads = 2, .keys = 100,
                 .head_dim = 64, .seqs = 2, .config = {.window = 16u}, .offset = INT32_MAX - 100},
        AttnCase{.name = "custom_mask_not_causal", .tokens = 12, .heads = 4, .kv_heads = 2, .keys = 29, .head_dim = 64,
                 .config = {.causal = false}, .mask = MaskKind::random, .mask_scale = 2.0f},
        AttnCase{.name = "softcap", .tokens = 8, .heads = 4, .kv_heads = 2, .keys = 40, .head_dim = 64,
                 .config = {.softcap = 5.0}, .qk_scale = 3.0f},
        AttnCase{.name = "alibi_standard_12_heads", .tokens = 20, .heads = 12, .kv_heads = 4, .keys = 50,
                 .head_dim = 64, .config = {.alibi = true}, .offset = 1000},
        AttnCase{.name = "alibi_given_slopes", .tokens = 10, .heads = 4, .kv_heads = 2, .keys = 30, .head_dim = 32,
                 .seqs = 2, .config = {.alibi_slopes = {0.3f, 0.05f, 1.0f, 0.0f}}},
        AttnCase{.name = "sinks", .tokens = 6, .heads = 8, .kv_heads = 2, .keys = 25, .head_dim = 64,
                 .config = {.sinks = kSinks8}},
        AttnCase{.name = "f16_kv", .tokens = 11, .heads = 8, .kv_heads = 2, .keys = 70, .head_dim = 128,
                 .kv_dtype = DType::f16},
        AttnCase{.name = "f16_q_and_kv", .tokens = 11, .heads = 8, .kv_heads = 2, .keys = 70, .head_dim = 80, .seqs = 2,
                 .q_dtype = DType::f16, .kv_dtype = DType::f16},
        // |s| ~ 1e3 from the scale, ~1e4 from the mask.
        AttnCase{.name = "logits_1e3_scale_100", .tokens = 4, .heads = 4, .kv_heads = 2, .keys = 60, .head_dim = 128,
                 .config = {.scale = 100.0}},
        AttnCase{.name = "logits_1e4_mask", .tokens = 6, .heads = 4, .kv_heads = 2, .keys = 50, .head_dim = 64,
                 .mask = MaskKind::plus_minus, .mask_scale = 1e4f},
        // Everything at once, on f16 K/V.
        AttnCase{.name = "all_options", .tokens = 13, .heads = 8, .kv_heads = 2, .keys = 77, .head_dim = 80, .seqs = 2,
                 .config = {.window = 20u, .softcap = 30.0, .alibi = true, .sinks = kSinks8}, .kv_dtype = DType::f16,
                 .mask = MaskKind::random},
        // Many short rows: the softmax's subgroups take whole rows; keys % 4 != 0, sinks.
        AttnCase{.name = "many_rows_sinks_75_keys", .tokens = 70, .heads = 8, .kv_heads = 2, .keys = 75,
                 .head_dim = 32, .seqs = 2, .config = {.sinks = kSinks8}},
        // Long rows: the softmax cannot keep them in shared memory.
        AttnCase{.name = "decode_32768_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 32768, .head_dim = 64},
        // n_keys % 4 != 0: the element-wise paths of the softmax (two-pass) and weighted sum.
        AttnCase{.name = "decode_9001_keys", .tokens = 2, .heads = 4, .kv_heads = 1, .keys = 9001, .head_dim = 64},
        // f16 decode: 8 halves per invocation (split keys, groups of invocations over keys).
        AttnCase{.name = "decode_f16_1000_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 1000, .head_dim = 80,
                 .kv_dtype = DType::f16},
        AttnCase{.name = "decode_f16_head_dim_7", .tokens = 2, .heads = 4, .kv_heads = 2, .keys = 600, .head_dim = 7,
                 .seqs = 2, .kv_dtype = DType::f16},
        // Llama 4's chunked attention: chunks of 16 positions cut through the keys of each
        // sequence; decode with whole key splits outside the query's chunk.
        AttnCase{.name = "Chunked_16_prefill", .tokens = 40, .heads = 8, .kv_heads = 2, .keys = 100, .head_dim = 64,
                 .seqs = 2, .config = {.chunk = 16u}, .offset = 7},
        AttnCase{.name = "Chunked_300_decode_2000_keys", .tokens = 2, .heads = 8, .kv_heads = 2, .keys = 2000,
                 .head_dim = 64, .seqs = 2, .config = {.chunk = 300u}, .kv_dtype = DType::f16, .offset = 50},
        // An encoder's window both ways (|pos_t - pos_j| <= 4), with symmetric ALiBi.
        AttnCase{.name = "SymmetricWindow_9_bidirectional", .tokens = 30, .heads = 4, .kv_heads = 2, .keys = 60,
                 .head_dim = 32, .config = {.causal = false, .window = 9u, .window_type = WindowType::symmetric,
                                            .alibi = true},
                 .offset = 3},
        // t(pos) about 3.76 (floor_scale 4, positions ~1000), then soft-capping and a mask.
        AttnCase{.name = "QueryTemperature_softcap_mask", .tokens = 13, .heads = 8, .kv_heads = 2, .keys = 77,
                 .head_dim = 80, .seqs = 2,
                 .config = {.query_temperature = QueryTemperature{.floor_scale = 4, .scale = 0.5, .offset = 1},
                            .softcap = 20.0},
                 .mask = MaskKind::random, .offset = 1000},
        AttnCase{.name = "long_rows_window_sinks_mask", .tokens = 4, .heads = 4, .kv_heads = 1, .keys = 20000,
                 .head_dim = 64, .seqs = 2, .config = {.window = 3000u, .sinks = {1.0f, -3.0f, 0.0f, 8.0f}},
                 .mask = MaskKind::random}};
  // clang-format on
}

inline std::string case_name(const ::testing::TestParamInfo<AttnCase>& info) { return info.param.name; }

// The cases of attention_cases() named in |names|, in the table's order. A name the table
// lacks throws (at a suite's instantiation the test program stops) instead of leaving a
// suite quietly smaller.
inline std::vector<AttnCase> cases_named(std::initializer_list<const char*> names) {
  const auto named = [&](const AttnCase& c) {
    return std::any_of(names.begin(), names.end(), [&](const char* want) { return std::string(c.name) == want; });
  };
  std::vector<AttnCase> out;
  for (const AttnCase& c : attention_cases()) {
    if (named(c)) out.push_back(c);
  }
  for (const char* want : names) {
    if (std::none_of(out.begin(), out.end(), [&](const AttnCase& c) { return std::string(c.name) == want; })) {
      throw std::invalid_argument(std::string("cases_named: no attention case is named ") + want);
    }
  }
  return out;
}

// Whether a per-variant suite (every attention case under each of |variants|) runs case
// |c| under |v|: every pair, unless VKATTN_TEST_VARIANTS=one_per_case, where the case at
// index i of attention_cases() runs under variants[i % N] alone, so that every case and
// every variant still runs, at a variant's share of the time (CI's sanitizer step, where a
// pair costs 4-5 times what it does in the README step's run of every pair).
template <class Variant, std::size_t N>
bool variant_pair_runs(const AttnCase& c, const Variant& v, const Variant (&variants)[N]) {
  static const bool one_per_case = env_is("VKATTN_TEST_VARIANTS", "one_per_case");
  if (!one_per_case) return true;
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const AttnCase& a : attention_cases()) out.emplace_back(a.name);
    return out;
  }();
  const auto at = std::find(names.begin(), names.end(), c.name);
  if (at == names.end()) throw std::invalid_argument(std::string("variant_pair_runs: no attention case is named ") + c.name);
  const auto pick = static_cast<std::size_t>(at - names.begin()) % N;
  return std::string(variants[pick].name) == v.name;
}

// Skips the calling test where variant_pair_runs says the pair does not run.
#define VKATTN_SKIP_UNLESS_PAIR_RUNS(c, v, variants)                                             \
  do {                                                                                           \
    if (!::vkattn::test::variant_pair_runs(c, v, variants)) {                                    \
      GTEST_SKIP() << "VKATTN_TEST_VARIANTS=one_per_case: this case runs under another variant"; \
    }                                                                                            \
  } while (0)

}  // namespace vkattn::test
