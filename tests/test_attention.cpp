// Attention (scores, softmax, weighted sum): hand-computed cases and the identities that
// define softmax attention (on both backends), Vulkan against the CPU reference on shapes
// and options chosen to break kernels, and the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();

// One attention call, on the host, in the layouts of command_list.hpp.
struct AttnInputs {
  std::size_t tokens = 1, heads = 1, kv_heads = 1, keys = 1, head_dim = 1;
  std::vector<float> q{}, k{}, v{}, mask{};                      // mask empty: none
  std::vector<std::int32_t> q_pos{}, k_pos{}, q_seq{}, k_seq{};  // seq ids empty: all in sequence 0
  AttentionConfig config{};
  DType q_dtype = DType::f32, kv_dtype = DType::f32;

  Shape scores_shape() const { return {tokens, heads, keys}; }
  Shape out_shape() const { return {tokens, heads, head_dim}; }
};

struct AttnOutputs {
  std::vector<float> scores, probs, out;
};

// Records the three stages in one list and runs it. With |feed|, softmax reads feed->scores
// and the weighted sum feed->probs instead of the previous stage's result, so that each
// stage can be compared on identical inputs.
AttnOutputs run_attention(Backend& b, const AttnInputs& in, const AttnOutputs* feed = nullptr) {
  Tensor q = b.tensor({in.tokens, in.heads, in.head_dim}, in.q_dtype);
  Tensor k = b.tensor({in.keys, in.kv_heads, in.head_dim}, in.kv_dtype);
  Tensor v = b.tensor({in.keys, in.kv_heads, in.head_dim}, in.kv_dtype);
  Tensor scores = b.tensor(in.scores_shape(), DType::f32), probs = b.tensor(in.scores_shape(), DType::f32);
  Tensor out = b.tensor(in.out_shape(), DType::f32);
  b.upload(q, in.q);
  b.upload(k, in.k);
  b.upload(v, in.v);
  Tensor mask, fed_scores, fed_probs;
  if (!in.mask.empty()) {
    mask = b.tensor({in.tokens, in.keys}, DType::f32);
    b.upload(mask, in.mask);
  }
  if (feed) {
    fed_scores = b.tensor(in.scores_shape(), DType::f32);
    fed_probs = b.tensor(in.scores_shape(), DType::f32);
    b.upload(fed_scores, feed->scores);
    b.upload(fed_probs, feed->probs);
  }
  const AttentionTokens tokens{in.q_pos, in.k_pos, in.q_seq, in.k_seq};
  CommandList cmd = b.commands();
  cmd.attn_scores(q, k, scores, tokens, in.config, mask.valid() ? &mask : nullptr);
  cmd.attn_softmax(feed ? fed_scores : scores, probs, in.config);
  cmd.attn_weighted_sum(feed ? fed_probs : probs, v, out);
  cmd.submit_and_wait();
  return {b.download(scores), b.download(probs), b.download(out)};
}

// Random q, k (N(0, qk_scale)) and v (N(0, 1)). Key j is in sequence j % seqs at position
// offset + j / seqs (sequences interleaved in the key list); the tokens of each sequence
// are its last positions (a prefill chunk, or with one token per sequence a decode step).
// One sequence leaves the seq ids empty (the default).
AttnInputs random_inputs(std::size_t tokens, std::size_t heads, std::size_t kv_heads, std::size_t keys,
                         std::size_t head_dim, std::size_t seqs, std::uint32_t seed, std::int32_t offset = 0,
                         float qk_scale = 1.0f) {
  AttnInputs in{.tokens = tokens, .heads = heads, .kv_heads = kv_heads, .keys = keys, .head_dim = head_dim};
  in.q = normal(tokens * heads * head_dim, seed, qk_scale);
  in.k = normal(keys * kv_heads * head_dim, seed + 1, qk_scale);
  in.v = normal(keys * kv_heads * head_dim, seed + 2);
  const auto count = [&](std::size_t n, std::size_t s) { return static_cast<std::int32_t>((n + seqs - 1 - s) / seqs); };
  for (std::size_t j = 0; j < keys; ++j) {
    in.k_pos.push_back(offset + static_cast<std::int32_t>(j / seqs));
    if (seqs > 1) in.k_seq.push_back(static_cast<std::int32_t>(j % seqs));
  }
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::size_t s = t % seqs;
    const std::int32_t first = std::max(0, count(keys, s) - count(tokens, s));
    in.q_pos.push_back(offset + first + static_cast<std::int32_t>(t / seqs));
    if (seqs > 1) in.q_seq.push_back(static_cast<std::int32_t>(s));
  }
  return in;
}

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
  const AttnInputs in{.tokens = 1, .heads = 1, .kv_heads = 1, .keys = 3, .head_dim = 2,
                      .q = {1, 2}, .k = {1, 0, 0, 1, 1, 1}, .v = {1, 10, 2, 20, 3, 30},
                      .q_pos = {2}, .k_pos = {0, 1, 2}, .config = {.scale = 0.5}};
  const AttnOutputs got = run_attention(backend(), in);
  EXPECT_TRUE(all_close(got.scores, {0.5f, 1.0f, 1.5f}, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.probs, {0.18632372f, 0.30719589f, 0.50648039f}, in.scores_shape(), 1e-6, 0));
  EXPECT_TRUE(all_close(got.out, {2.3201567f, 23.201567f}, in.out_shape(), 1e-6, 1e-6));
}

// Two heads share one kv head (GQA 2:1); the token at position 1 sees keys 0 and 1 but not
// key 2 (causal). Default scale c = 1/sqrt(2), softcap 1, ALiBi slopes 0.5 and 0.25:
//   s = tanh(c <q, k_j>) + slope * (pos_j - 1); head 0 dots (1, 2), head 1 dots (2, 0).
TEST_P(AttentionIdentities, HandComputedSoftcapAlibiGqa) {
  const AttnInputs in{.tokens = 1, .heads = 2, .kv_heads = 1, .keys = 3, .head_dim = 2,
                      .q = {1, 2, 2, 0}, .k = {1, 0, 0, 1, 1, 1}, .v = {1, 10, 2, 20, 3, 30},
                      .q_pos = {1}, .k_pos = {0, 1, 2},
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

// Keys a token cannot see never reach its result, even when their k is inf and their v NaN
// (unwritten KV-cache slots): the reference skips p = 0 (reference_ops.cpp); the header
// only promises p = 0. 9000 keys: long rows.
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
  AttnInputs in{.tokens = 1, .heads = 2, .kv_heads = 1, .keys = 3, .head_dim = 4,
                .q = std::vector<float>(8, 0.0f), .k = normal(12, 700), .v = normal(12, 701),
                .mask = {s.begin(), s.end()}, .q_pos = {0}, .k_pos = {0, 0, 0}, .config = {.sinks = sinks}};
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
  const std::vector<std::vector<double>> rows = {{1e4, 1e4 - 2, -1e4, 9999.5},
                                                 {-1e4, -1e4 - 1, -1e4 - 3, -1e4 - 0.5},
                                                 {1e4, -1e4, 0, 5e3},
                                                 {1e4, 1e4, 1e4, 1e4}};
  AttnInputs in{.tokens = 4, .heads = 1, .kv_heads = 1, .keys = 4, .head_dim = 4,
                .q = std::vector<float>(16, 0.0f), .k = normal(16, 800), .v = normal(16, 801),
                .q_pos = {0, 0, 0, 0}, .k_pos = {0, 0, 0, 0}};
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
        const bool visible = in.q_seq[t] == in.k_seq[j] && !(c.causal && distance < 0) &&
                             !(c.window && distance >= std::int64_t{*c.window});
        for (std::size_t h = 0; h < in.heads; ++h) {
          const float s = got.scores[(t * in.heads + h) * in.keys + j];
          EXPECT_EQ(masked(s), !visible) << "causal " << c.causal << " window " << c.window.value_or(0)
                                         << " token " << t << " key " << j << ": " << s;
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

INSTANTIATE_TEST_SUITE_P(Backends, AttentionIdentities, ::testing::Values(BackendKind::cpu, BackendKind::vulkan),
                         backend_name);

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

// Vulkan against the CPU reference.
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

class AttentionVulkanVsCpu : public VulkanVsCpuTest, public ::testing::WithParamInterface<AttnCase> {};

std::uint32_t seed_of(const char* name) {  // FNV-1a: a fixed seed per case, stable everywhere
  std::uint32_t h = 2166136261u;
  for (; *name; ++name) h = (h ^ static_cast<unsigned char>(*name)) * 16777619u;
  return h;
}

// What a score is made of, in absolute value: scale * sum_d |q_d k_d| + |ALiBi| + |mask|.
// The f32 rounding error of a score grows with this, not with the score (which may cancel).
double score_magnitude(const AttnInputs& in) {
  const double scale = in.config.scale.value_or(1 / std::sqrt(double(in.head_dim)));
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

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::isfinite(x) ? std::fabs(double{x}) : 0.0);
  return m;
}

void expect_matches(Backend& gpu, Backend& cpu, const AttnCase& c) {
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
  const AttnOutputs want = run_attention(cpu, in);
  const AttnOutputs staged = run_attention(gpu, in, &want);  // each stage on the CPU's inputs
  const AttnOutputs chained = run_attention(gpu, in);        // the GPU's own stages chained

  // Scores: 1e-4 abs + 1e-5 rel, the abs part growing with the terms' magnitude (1e4 cases).
  const double s_atol = 1e-4 + 2e-6 * score_magnitude(in);
  EXPECT_TRUE(all_close(staged.scores, want.scores, in.scores_shape(), s_atol, 1e-5)) << "scores";
  EXPECT_TRUE(all_close(chained.scores, want.scores, in.scores_shape(), s_atol, 1e-5)) << "scores, chained";
  // Softmax and weighted sum on identical inputs: tight.
  const bool f16 = c.q_dtype == DType::f16 || c.kv_dtype == DType::f16;
  const double o_atol = f16 ? 2e-4 : 1e-4;
  EXPECT_TRUE(all_close(staged.probs, want.probs, in.scores_shape(), 1e-5, 0)) << "probs on the same scores";
  EXPECT_TRUE(all_close(staged.out, want.out, in.out_shape(), o_atol, 1e-4)) << "out on the same probs";
  // Chained: scores off by at most d move each p_j by at most (e^(2d) - 1) p_j ~ 2d p_j,
  // hence out by 2d max|v|; d is measured, so this stays tight where the scores agree.
  double d = 0;
  for (std::size_t i = 0; i < want.scores.size(); ++i) {
    if (std::isfinite(want.scores[i])) d = std::max(d, double(std::fabs(chained.scores[i] - want.scores[i])));
  }
  const double spread = std::expm1(2 * d);
  EXPECT_TRUE(all_close(chained.probs, want.probs, in.scores_shape(), 1e-5 + spread, 0)) << "probs, chained";
  EXPECT_TRUE(all_close(chained.out, want.out, in.out_shape(), o_atol + (spread + 1e-5) * max_abs(in.v), 1e-4))
      << "out, chained";
}

TEST_P(AttentionVulkanVsCpu, Matches) { expect_matches(*gpu_, *cpu_, GetParam()); }

// The same at the Vulkan 1.1 minimums (16 KiB shared memory, 128 invocations, no subgroup
// operations, staging copies): other tiles, shared-memory reductions, rows outside shared memory.
TEST_P(AttentionVulkanVsCpu, MatchesAtSpecMinimumLimits) {
  DeviceOptions options = test_options();
  options.cap_limits = spec_minimum_limits();
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  expect_matches(*gpu, *cpu_, GetParam());
  for (const auto& m : gpu->validation_messages()) ADD_FAILURE() << "validation: " << m;
}

// Decode has one row tile per KV head, so the weighted sum splits its keys across
// workgroups and a second dispatch adds the partial sums; prefill has rows enough. The
// decode_* cases below check the split path's results.
TEST_F(VulkanVsCpuTest, WeightedSumSplitsKeysOnlyWhenRowsAreFew) {
  auto split = [&](std::size_t tokens, std::size_t keys) {
    Tensor probs = gpu_->tensor({tokens, 8, keys}, DType::f32), v = gpu_->tensor({keys, 2, 64}, DType::f16),
           out = gpu_->tensor({tokens, 8, 64}, DType::f32);
    CommandList cmd = gpu_->commands();
    cmd.attn_weighted_sum(probs, v, out);
    return cmd.stats().ops;
  };
  EXPECT_EQ(split(1, 4096), 2u);
  EXPECT_EQ(split(1, 300), 1u);   // too few keys to be worth a second pass
  EXPECT_EQ(split(256, 512), 1u);
}

const std::vector<float> kSinks8 = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -2.0f, 1.0f, 0.25f};

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionVulkanVsCpu,
    ::testing::Values(
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
        // Long rows: the softmax cannot keep them in shared memory.
        AttnCase{.name = "decode_32768_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 32768, .head_dim = 64},
        // n_keys % 4 != 0: the element-wise paths of the softmax (two-pass) and weighted sum.
        AttnCase{.name = "decode_9001_keys", .tokens = 2, .heads = 4, .kv_heads = 1, .keys = 9001, .head_dim = 64},
        // f16 decode: 8 halves per invocation (split keys, groups of invocations over keys).
        AttnCase{.name = "decode_f16_1000_keys", .tokens = 1, .heads = 8, .kv_heads = 2, .keys = 1000, .head_dim = 80,
                 .kv_dtype = DType::f16},
        AttnCase{.name = "decode_f16_head_dim_7", .tokens = 2, .heads = 4, .kv_heads = 2, .keys = 600, .head_dim = 7,
                 .seqs = 2, .kv_dtype = DType::f16},
        AttnCase{.name = "long_rows_window_sinks_mask", .tokens = 4, .heads = 4, .kv_heads = 1, .keys = 20000,
                 .head_dim = 64, .seqs = 2, .config = {.window = 3000u, .sinks = {1.0f, -3.0f, 0.0f, 8.0f}},
                 .mask = MaskKind::random}),
    [](const ::testing::TestParamInfo<AttnCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace vkattn::test
