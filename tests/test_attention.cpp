// Attention (scores, softmax, weighted sum): hand-computed cases and the identities that
// define softmax attention, on both backends. Vulkan against the CPU reference on shapes
// chosen to break kernels is in test_attention_vulkan.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr double kInfD = std::numeric_limits<double>::infinity();

bool masked(float s) { return std::isinf(s) && s < 0; }

// Softmax of one row with an optional sink, written from the formula.
std::vector<double> softmax_row(const std::vector<double>& s, std::optional<double> sink = {}) {
  double m = sink ? *sink : -kInfD;
  for (double x : s) m = std::max(m, x);
  double den = sink ? std::exp(*sink - m) : 0.0;
  for (double x : s) den += std::exp(x - m);
  std::vector<double> p;
  for (double x : s) p.push_back(std::exp(x - m) / den);
  return p;
}

using AttentionIdentities = BackendTest;

// q = (1, 2); keys (1, 0), (0, 1), (1, 1) at positions 0..2, all visible to the token at 2.
// scale 0.5: s = 0.5 * (1, 2, 3) = (0.5, 1, 1.5).
// p = (e^-1, e^-0.5, 1) / (e^-1 + e^-0.5 + 1) = (0.18632372, 0.30719589, 0.50648039).
// v = (1, 10), (2, 20), (3, 30): out = sum_j p_j v_j = (2.3201567, 23.201567).
TEST_P(AttentionIdentities, HandComputed) {
  const AttnInputs in{.tokens = 1,
                      .heads = 1,
                      .kv_heads = 1,
                      .keys = 3,
                      .head_dim = 2,
                      .q = {1, 2},
                      .k = {1, 0, 0, 1, 1, 1},
                      .v = {1, 10, 2, 20, 3, 30},
                      .q_pos = {2},
                      .k_pos = {0, 1, 2},
                      .config = {.scale = 0.5}};
  const AttnOutputs got = run_attention(backend(), in);
  EXPECT_TRUE(all_close(got.scores, {0.5f, 1.0f, 1.5f}, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.probs, {0.18632372f, 0.30719589f, 0.50648039f}, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.out, {2.3201567f, 23.201567f}, in.out_shape(), 1e-6, 1e-6));
  // Without key positions the keys are at 0..n_keys-1, as here.
  AttnInputs no_k_pos = in;
  no_k_pos.k_pos.clear();
  const AttnOutputs same = run_attention(backend(), no_k_pos);
  EXPECT_EQ(same.scores, got.scores);
  EXPECT_EQ(same.out, got.out);
}

// Every way to run attention on |in|: the three ops, and CommandList::attention through the
// fused kernel and through the three stages (one path on the CPU backend); out of each.
std::vector<std::pair<std::string, std::vector<float>>> outs_of_every_path(Backend& b, AttnInputs in) {
  std::vector<std::pair<std::string, std::vector<float>>> outs{{"three ops", run_attention(b, in).out}};
  for (AttentionPath path : {AttentionPath::fused, AttentionPath::three_stages}) {
    in.config.path = path;
    outs.emplace_back(path == AttentionPath::fused ? "fused" : "three_stages", run_attention_op(b, in));
  }
  return outs;
}

// ALiBi is symmetric, as in llama.cpp: without causal masking a future key is penalised by
// its distance as a past one is. q = 0, so each score is the bias alone: the token at
// position 2 over keys at 0..3 with slopes 0.5 (head 0) and 0.25 (head 1) scores
//   -slope |2 - pos_j| = (-1, -0.5, 0, -0.5) and (-0.5, -0.25, 0, -0.25);
// head 0: p = (e^-1, e^-0.5, 1, e^-0.5) / 2.5809401 = (0.1425370, 0.2350037, 0.3874556,
// 0.2350037); v rows (1, 10), (2, 20), (3, 30), (4, 40): out = (2.7149260, 27.149260).
TEST_P(AttentionIdentities, HandComputedAlibiWithoutCausalIsSymmetric) {
  const AttnInputs in{.tokens = 1,
                      .heads = 2,
                      .kv_heads = 1,
                      .keys = 4,
                      .head_dim = 2,
                      .q = {0, 0, 0, 0},
                      .k = {1, 0, 0, 1, 1, 1, 2, 2},
                      .v = {1, 10, 2, 20, 3, 30, 4, 40},
                      .q_pos = {2},
                      .k_pos = {0, 1, 2, 3},
                      .config = {.causal = false, .alibi_slopes = {0.5f, 0.25f}}};
  const std::vector<std::vector<double>> rows = {{-1, -0.5, 0, -0.5}, {-0.5, -0.25, 0, -0.25}};
  std::vector<float> scores, probs, out;
  for (const auto& s : rows) {
    const std::vector<double> p = softmax_row(s);
    double o0 = 0, o1 = 0;
    for (std::size_t j = 0; j < 4; ++j) {
      scores.push_back(float(s[j]));
      probs.push_back(float(p[j]));
      o0 += p[j] * double(j + 1);
      o1 += p[j] * double(10 * (j + 1));
    }
    out.insert(out.end(), {float(o0), float(o1)});
  }
  EXPECT_NEAR(out[0], 2.7149260, 1e-6);  // the comment's figures, from the same formula
  EXPECT_NEAR(probs[0], 0.1425370, 1e-6);
  const AttnOutputs got = run_attention(backend(), in);
  EXPECT_TRUE(all_close(got.scores, scores, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.probs, probs, in.scores_shape(), 1e-6, 0));
  for (const auto& [path, o] : outs_of_every_path(backend(), in)) {
    EXPECT_TRUE(all_close(o, out, in.out_shape(), 1e-5, 1e-6)) << path;
  }
}

// Soft-capping in either order, q = (1, 2) against keys (1, 0), (0, 1), (1, 1) (dots 1, 2,
// 3), scale 0.5, cap 1.5: scale_then_cap (ggml's flash attention) s = 1.5 tanh(0.5 qk / 1.5);
// cap_then_scale (llama.cpp without flash attention) s = 0.5 * 1.5 tanh(qk / 1.5).
TEST_P(AttentionIdentities, HandComputedSoftcapOrders) {
  for (SoftcapOrder order : {SoftcapOrder::scale_then_cap, SoftcapOrder::cap_then_scale}) {
    const AttnInputs in{.tokens = 1,
                        .heads = 1,
                        .kv_heads = 1,
                        .keys = 3,
                        .head_dim = 2,
                        .q = {1, 2},
                        .k = {1, 0, 0, 1, 1, 1},
                        .v = {1, 10, 2, 20, 3, 30},
                        .q_pos = {2},
                        .k_pos = {0, 1, 2},
                        .config = {.scale = 0.5, .softcap = 1.5, .softcap_order = order}};
    std::vector<double> s;
    for (double qk : {1.0, 2.0, 3.0}) {
      s.push_back(order == SoftcapOrder::scale_then_cap ? 1.5 * std::tanh(0.5 * qk / 1.5) : 0.5 * 1.5 * std::tanh(qk / 1.5));
    }
    const std::vector<double> p = softmax_row(s);
    const std::vector<float> out = {float(p[0] + 2 * p[1] + 3 * p[2]), float(10 * (p[0] + 2 * p[1] + 3 * p[2]))};
    const AttnOutputs got = run_attention(backend(), in);
    const char* name = order == SoftcapOrder::scale_then_cap ? "scale_then_cap" : "cap_then_scale";
    EXPECT_TRUE(all_close(got.scores, {float(s[0]), float(s[1]), float(s[2])}, in.scores_shape(), 1e-6, 0)) << name;
    for (const auto& [path, o] : outs_of_every_path(backend(), in)) {
      EXPECT_TRUE(all_close(o, out, in.out_shape(), 1e-5, 1e-6)) << name << ", " << path;
    }
  }
}

// A cap far above the scores leaves them as they are (tanh x = x for small x): the score's
// relative error must not grow with the cap (a tanh with an absolute error, as Vulkan
// allows the built-in, gave 2.98 for every score at cap 1e8), and tiny scores keep their
// sign (lavapipe's built-in gave +3e-8 for every |x| < 1e-8).
TEST_P(AttentionIdentities, SoftcapFarAboveTheScores) {
  for (const auto& [cap, scale] : {std::pair{30.0, 1.0}, {1e4, 1.0}, {1e6, 1.0}, {1e8, 1.0}, {1e30, 1.0}, {1.0, 1e-20}}) {
    const AttnInputs in{.tokens = 1,
                        .heads = 1,
                        .kv_heads = 1,
                        .keys = 4,
                        .head_dim = 2,
                        .q = {1, 0},
                        .k = {1, 0, -0.5, 0, 0.25, 0, 2, 0},
                        .v = {1, 10, 2, 20, 3, 30, 4, 40},
                        .q_pos = {3},
                        .k_pos = {0, 1, 2, 3},
                        .config = {.scale = scale, .softcap = cap}};
    std::vector<double> s;
    std::vector<float> want_scores;
    for (double qk : {1.0, -0.5, 0.25, 2.0}) {
      s.push_back(cap * std::tanh(scale * qk / cap));
      want_scores.push_back(float(s.back()));
    }
    const std::vector<double> p = softmax_row(s);
    double o = 0;
    for (int j = 0; j < 4; ++j) o += p[j] * (j + 1);
    const std::vector<float> out = {float(o), float(10 * o)};
    const std::string name = "cap " + std::to_string(cap) + ", scale " + std::to_string(scale);
    const AttnOutputs got = run_attention(backend(), in);
    EXPECT_TRUE(all_close(got.scores, want_scores, in.scores_shape(), 0, 1e-5)) << name;
    for (const auto& [path, o_got] : outs_of_every_path(backend(), in)) {
      EXPECT_TRUE(all_close(o_got, out, in.out_shape(), 1e-5, 1e-5)) << name << ", " << path;
    }
  }
}

// Two heads share one kv head (GQA 2:1); the token at position 1 sees keys 0 and 1 but not
// key 2 (causal). Default scale c = 1/sqrt(2), softcap 1, ALiBi slopes 0.5 and 0.25:
//   s = tanh(c <q, k_j>) + slope * (pos_j - 1); head 0 dots (1, 2), head 1 dots (2, 0).
TEST_P(AttentionIdentities, HandComputedSoftcapAlibiGqa) {
  const AttnInputs in{.tokens = 1,
                      .heads = 2,
                      .kv_heads = 1,
                      .keys = 3,
                      .head_dim = 2,
                      .q = {1, 2, 2, 0},
                      .k = {1, 0, 0, 1, 1, 1},
                      .v = {1, 10, 2, 20, 3, 30},
                      .q_pos = {1},
                      .k_pos = {0, 1, 2},
                      .config = {.softcap = 1.0, .alibi_slopes = {0.5f, 0.25f}}};
  const double c = 1 / std::sqrt(2.0);
  const std::vector<std::vector<double>> rows = {{std::tanh(c * 1) - 0.5, std::tanh(c * 2)},
                                                 {std::tanh(c * 2) - 0.25, std::tanh(0.0)}};
  std::vector<float> scores, probs, out;
  for (const auto& s : rows) {
    const std::vector<double> p = softmax_row(s);
    scores.insert(scores.end(), {float(s[0]), float(s[1]), -kInf});
    probs.insert(probs.end(), {float(p[0]), float(p[1]), 0.0f});
    out.insert(out.end(), {float(p[0] * 1 + p[1] * 2), float(p[0] * 10 + p[1] * 20)});
  }
  const AttnOutputs got = run_attention(backend(), in);
  EXPECT_TRUE(all_close(got.scores, scores, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.probs, probs, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.out, out, in.out_shape(), 1e-6, 1e-6));
}

// Every row with a visible key is a distribution; masked keys get exactly 0, and out is finite.
TEST_P(AttentionIdentities, ProbsSumToOneAndMaskedAreZero) {
  AttnInputs in = random_inputs(9, 4, 2, 23, 16, 2, 100);
  in.config.window = 6;
  const AttnOutputs got = run_attention(backend(), in);
  for (std::size_t r = 0; r < in.tokens * in.heads; ++r) {
    double sum = 0;
    for (std::size_t j = 0; j < in.keys; ++j) {
      const float s = got.scores[r * in.keys + j], p = got.probs[r * in.keys + j];
      if (masked(s)) {
        EXPECT_EQ(p, 0.0f) << "row " << r << " key " << j;
      }
      EXPECT_GE(p, 0.0f);
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << "row " << r;
  }
  for (float o : got.out) EXPECT_TRUE(std::isfinite(o));
}

// Softmax is shift invariant: a constant additive mask moves every visible score by that
// constant and changes neither probs nor out.
TEST_P(AttentionIdentities, ConstantShiftChangesNothing) {
  AttnInputs in = random_inputs(7, 4, 2, 20, 16, 2, 200);
  in.mask.assign(in.tokens * in.keys, 0.0f);
  const AttnOutputs base = run_attention(backend(), in);
  in.mask.assign(in.tokens * in.keys, 7.25f);
  const AttnOutputs shifted = run_attention(backend(), in);
  std::vector<float> moved = base.scores;
  for (float& s : moved) s += 7.25f;
  EXPECT_TRUE(all_close(shifted.scores, moved, in.scores_shape(), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(shifted.probs, base.probs, in.scores_shape(), 2e-6, 0));
  EXPECT_TRUE(all_close(shifted.out, base.out, in.out_shape(), 1e-5, 1e-5));
}

// With window 1 (and causal) each token sees only the key at its own position: p = 1, so
// out is that key's value row.
TEST_P(AttentionIdentities, OneVisibleKeyCopiesItsValue) {
  AttnInputs in = random_inputs(4, 4, 2, 9, 8, 1, 300);
  in.q_pos = {0, 3, 8, 5};
  std::iota(in.k_pos.begin(), in.k_pos.end(), 0);
  in.config.window = 1;
  const AttnOutputs got = run_attention(backend(), in);
  std::vector<float> want;
  for (std::size_t t = 0; t < in.tokens; ++t) {
    for (std::size_t h = 0; h < in.heads; ++h) {
      const float* row = &in.v[(in.q_pos[t] * in.kv_heads + h / 2) * in.head_dim];
      want.insert(want.end(), row, row + in.head_dim);
    }
  }
  EXPECT_TRUE(all_close(got.out, want, in.out_shape(), 1e-7, 0));
}

// Reordering the keys (with their values, positions, seq ids and mask columns) reorders
// the scores and probs the same way and leaves out unchanged.
TEST_P(AttentionIdentities, PermutingKeysPermutesScores) {
  AttnInputs in = random_inputs(5, 4, 2, 19, 16, 2, 400);
  in.mask = normal(in.tokens * in.keys, 401);
  std::vector<std::size_t> perm(in.keys);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(402));
  AttnInputs p = in;
  const std::size_t row = in.kv_heads * in.head_dim;
  for (std::size_t j = 0; j < in.keys; ++j) {
    std::copy_n(&in.k[perm[j] * row], row, &p.k[j * row]);
    std::copy_n(&in.v[perm[j] * row], row, &p.v[j * row]);
    p.k_pos[j] = in.k_pos[perm[j]];
    p.k_seq[j] = in.k_seq[perm[j]];
    for (std::size_t t = 0; t < in.tokens; ++t) p.mask[t * in.keys + j] = in.mask[t * in.keys + perm[j]];
  }
  const AttnOutputs a = run_attention(backend(), in), b = run_attention(backend(), p);
  std::vector<float> scores(a.scores.size()), probs(a.probs.size());
  for (std::size_t r = 0; r < in.tokens * in.heads; ++r) {
    for (std::size_t j = 0; j < in.keys; ++j) {
      scores[r * in.keys + j] = a.scores[r * in.keys + perm[j]];
      probs[r * in.keys + j] = a.probs[r * in.keys + perm[j]];
    }
  }
  EXPECT_TRUE(all_close(b.scores, scores, in.scores_shape(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(b.probs, probs, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(b.out, a.out, in.out_shape(), 1e-5, 1e-5));
}

// GQA (8 heads on 2 kv heads) equals MHA with each kv head repeated for its 4 query heads.
TEST_P(AttentionIdentities, GqaEqualsRepeatedKvHeads) {
  const AttnInputs gqa = random_inputs(6, 8, 2, 21, 16, 1, 500);
  AttnInputs mha = gqa;
  mha.kv_heads = 8;
  mha.k.clear();
  mha.v.clear();
  for (std::size_t j = 0; j < gqa.keys; ++j) {
    for (std::size_t h = 0; h < 8; ++h) {
      const std::size_t src = (j * 2 + h / 4) * gqa.head_dim;
      mha.k.insert(mha.k.end(), &gqa.k[src], &gqa.k[src] + gqa.head_dim);
      mha.v.insert(mha.v.end(), &gqa.v[src], &gqa.v[src] + gqa.head_dim);
    }
  }
  const AttnOutputs a = run_attention(backend(), gqa), b = run_attention(backend(), mha);
  EXPECT_TRUE(all_close(a.scores, b.scores, gqa.scores_shape(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(a.probs, b.probs, gqa.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(a.out, b.out, gqa.out_shape(), 1e-6, 1e-6));
}

// Rows with no visible key (no key of the token's sequence; every key in the future; every
// key masked -inf) give zeros in probs and out, never NaN, even with a sink. 9000 keys take
// the path for rows too long for shared memory.
TEST_P(AttentionIdentities, NoVisibleKeyGivesZeros) {
  for (std::size_t n : {4u, 9000u}) {
    AttnInputs in = random_inputs(3, 2, 1, n, 4, 1, 600);
    std::iota(in.k_pos.begin(), in.k_pos.end(), 1);
    in.q_pos = {20000, 0, 20000};
    in.q_seq = {1, 0, 0};
    in.k_seq.assign(n, 0);
    in.mask.assign(3 * n, 0.0f);
    std::fill(in.mask.begin() + 2 * n, in.mask.end(), -kInf);
    in.config.sinks = {0.5f, -1.0f};
    const AttnOutputs got = run_attention(backend(), in);
    EXPECT_EQ(got.scores, std::vector<float>(6 * n, -kInf)) << n << " keys";
    EXPECT_EQ(got.probs, std::vector<float>(6 * n, 0.0f)) << n << " keys";
    EXPECT_EQ(got.out, std::vector<float>(24, 0.0f)) << n << " keys";
  }
}

// Keys no token of the op sees never reach a result, even when their k is inf and their v
// NaN (unwritten KV-cache slots): the reference skips p = 0 (reference_ops.cpp); the GPU
// kernels skip keys no row of a tile sees (a seen key's non-finite v reaches the tile's
// other rows as 0 x inf: docs/attention.md, step 7). 9000 keys: long rows.
TEST_P(AttentionIdentities, InvisibleKeysIgnoreNonFiniteKv) {
  for (std::size_t n : {8u, 9000u}) {
    AttnInputs in = random_inputs(3, 2, 1, n, 4, 1, 650);
    in.q_pos = {0, 1, 2};  // keys at 0..n-1: causal, only keys 0..2 are ever visible
    for (std::size_t i = 3 * 4; i < n * 4; ++i) {
      in.k[i] = kInf;
      in.v[i] = std::nanf("");
    }
    AttnInputs few = in;  // the same without the invisible keys
    few.keys = 3;
    few.k.resize(12);
    few.v.resize(12);
    few.k_pos.resize(3);
    const AttnOutputs got = run_attention(backend(), in), want = run_attention(backend(), few);
    std::vector<float> probs(6 * n, 0.0f);
    for (std::size_t r = 0; r < 6; ++r) std::copy_n(&want.probs[r * 3], 3, &probs[r * n]);
    EXPECT_TRUE(all_close(got.probs, probs, in.scores_shape(), 1e-7, 0)) << n << " keys";
    EXPECT_TRUE(all_close(got.out, want.out, in.out_shape(), 1e-6, 1e-6)) << n << " keys";
  }
}

// With q = 0 the scores are the mask itself. A sink takes its share of the denominator:
// sum_j p_j = 1 - exp(sink - m) / (sum_j exp(s_j - m) + exp(sink - m)), m = max(s, sink).
// Head 0's sink is below the row max, head 1's above it (then m is the sink).
TEST_P(AttentionIdentities, SinksTakeTheirShare) {
  const std::vector<double> s = {1.0, 2.0, 3.0};
  const std::vector<float> sinks = {2.5f, 5.0f};
  AttnInputs in{.tokens = 1,
                .heads = 2,
                .kv_heads = 1,
                .keys = 3,
                .head_dim = 4,
                .q = std::vector<float>(8, 0.0f),
                .k = normal(12, 700),
                .v = normal(12, 701),
                .mask = {s.begin(), s.end()},
                .q_pos = {0},
                .k_pos = {0, 0, 0},
                .config = {.sinks = sinks}};
  const AttnOutputs got = run_attention(backend(), in);
  std::vector<float> probs, out;
  for (std::size_t h = 0; h < 2; ++h) {
    const double m = std::max(3.0, double{sinks[h]});
    const double den = std::exp(1.0 - m) + std::exp(2.0 - m) + std::exp(3.0 - m) + std::exp(sinks[h] - m);
    const std::vector<double> p = softmax_row(s, sinks[h]);
    double sum = 0;
    for (std::size_t j = 0; j < 3; ++j) sum += got.probs[h * 3 + j];
    EXPECT_NEAR(sum, 1.0 - std::exp(sinks[h] - m) / den, 1e-6) << "head " << h;
    EXPECT_LT(sum, 1.0);
    probs.insert(probs.end(), p.begin(), p.end());
    for (std::size_t d = 0; d < 4; ++d) out.push_back(float(p[0] * in.v[d] + p[1] * in.v[4 + d] + p[2] * in.v[8 + d]));
  }
  EXPECT_TRUE(all_close(got.probs, probs, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.out, out, in.out_shape(), 1e-6, 1e-5));
}

// |s| ~ 1e4: exp(s) without the max subtracted overflows (rows 0, 3) or underflows to 0/0
// (row 1). The probs must be finite, sum to 1 and match the formula.
TEST_P(AttentionIdentities, LargeLogitsDoNotOverflow) {
  const std::vector<std::vector<double>> rows = {
      {1e4, 1e4 - 2, -1e4, 9999.5}, {-1e4, -1e4 - 1, -1e4 - 3, -1e4 - 0.5}, {1e4, -1e4, 0, 5e3}, {1e4, 1e4, 1e4, 1e4}};
  AttnInputs in{.tokens = 4,
                .heads = 1,
                .kv_heads = 1,
                .keys = 4,
                .head_dim = 4,
                .q = std::vector<float>(16, 0.0f),
                .k = normal(16, 800),
                .v = normal(16, 801),
                .q_pos = {0, 0, 0, 0},
                .k_pos = {0, 0, 0, 0}};
  std::vector<float> want;
  for (const auto& r : rows) {
    in.mask.insert(in.mask.end(), r.begin(), r.end());
    const std::vector<double> p = softmax_row(r);
    want.insert(want.end(), p.begin(), p.end());
  }
  const AttnOutputs got = run_attention(backend(), in);
  EXPECT_TRUE(all_close(got.probs, want, in.scores_shape(), 1e-6, 0));

  // The same through the scale: 100 * <q, k> on N(0, 1) data of head_dim 128 reaches ~1e3.
  AttnInputs big = random_inputs(3, 2, 1, 50, 128, 1, 802);
  big.config.scale = 100.0;
  const AttnOutputs g = run_attention(backend(), big);
  float largest = 0;
  for (float s : g.scores) largest = std::max(largest, masked(s) ? 0.0f : std::fabs(s));
  EXPECT_GT(largest, 500.0f);
  for (std::size_t r = 0; r < 6; ++r) {  // a NaN or inf anywhere in the row fails this too
    EXPECT_NEAR(std::accumulate(&g.probs[r * 50], &g.probs[r * 50] + 50, 0.0), 1.0, 1e-5) << "row " << r;
  }
  for (float o : g.out) EXPECT_TRUE(std::isfinite(o));
}

// Scores are -inf exactly where the key is in another sequence, in the future (causal), or
// window or more positions back; finite everywhere else. Positions near 2^31.
TEST_P(AttentionIdentities, CausalWindowAndSequenceMasks) {
  AttnInputs in = random_inputs(6, 2, 1, 24, 8, 3, 900, INT32_MAX - 100);
  const struct {
    bool causal;
    std::optional<std::uint32_t> window;
  } configs[] = {{true, {}}, {true, 3u}, {false, {}}, {false, 3u}};
  for (const auto& c : configs) {
    in.config.causal = c.causal;
    in.config.window = c.window;
    const AttnOutputs got = run_attention(backend(), in);
    for (std::size_t t = 0; t < in.tokens; ++t) {
      for (std::size_t j = 0; j < in.keys; ++j) {
        const std::int64_t distance = std::int64_t{in.q_pos[t]} - in.k_pos[j];
        const bool visible =
            in.q_seq[t] == in.k_seq[j] && !(c.causal && distance < 0) && !(c.window && distance >= std::int64_t{*c.window});
        for (std::size_t h = 0; h < in.heads; ++h) {
          const float s = got.scores[(t * in.heads + h) * in.keys + j];
          EXPECT_EQ(masked(s), !visible) << "causal " << c.causal << " window " << c.window.value_or(0) << " token " << t
                                         << " key " << j << ": " << s;
          if (visible) {
            EXPECT_TRUE(std::isfinite(s));
          }
        }
      }
    }
  }
}

// probs may be scores itself: softmax in place gives what it gives out of place.
TEST_P(AttentionIdentities, SoftmaxInPlace) {
  const AttnInputs in = random_inputs(5, 4, 2, 17, 16, 1, 1000);
  const AttnOutputs want = run_attention(backend(), in);
  Tensor q = backend().tensor({5, 4, 16}, DType::f32), k = backend().tensor({17, 2, 16}, DType::f32);
  Tensor s = backend().tensor(in.scores_shape(), DType::f32);
  backend().upload(q, in.q);
  backend().upload(k, in.k);
  CommandList cmd = backend().commands();
  cmd.attn_scores(q, k, s, {in.q_pos, in.k_pos});
  cmd.attn_softmax(s, s);
  cmd.submit_and_wait();
  EXPECT_TRUE(all_close(backend().download(s), want.probs, in.scores_shape(), 1e-7, 0));
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionIdentities, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// The standard slopes: 2^(-8(h+1)/n) for a power of two; otherwise (BLOOM) those of the
// power of two below, then every other slope of twice that power.
TEST(AttentionAlibi, StandardSlopes) {
  const std::vector<float> eight = alibi_slopes(8), twelve = alibi_slopes(12);
  ASSERT_EQ(eight.size(), 8u);
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) {
    EXPECT_FLOAT_EQ(eight[h], std::exp2(-(h + 1.0f)));
    EXPECT_FLOAT_EQ(twelve[h], eight[h]);
  }
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(twelve[8 + i], std::exp2(-0.5f - i));
}

}  // namespace
}  // namespace vkattn::test
