// Chunked attention, symmetric windows and the query temperature (AttentionConfig::chunk,
// window_type, query_temperature): each equals its host workaround on both backends and
// both paths (attention over the query's chunk alone; a -inf mask outside the window; q
// scaled by t(pos) on the host), hand-computed scores, decode over a cache replayed
// through set_tokens under every kernel family, the configurations of the families that
// need them, and what is refused. The shared attention cases (attention_cases.hpp) run
// the same options through every kernel family at the spec minimums too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/attention_cases.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {
namespace {

const AttentionPath kPaths[] = {AttentionPath::fused, AttentionPath::three_stages};
const char* path_name(AttentionPath p) { return p == AttentionPath::fused ? "fused" : "three stages"; }

// |in| restricted to some query tokens and some keys (one sequence).
AttnInputs subset(const AttnInputs& in, const std::vector<std::size_t>& tokens, const std::vector<std::size_t>& keys) {
  AttnInputs s = in;
  s.tokens = tokens.size();
  s.keys = keys.size();
  s.q.clear();
  s.k.clear();
  s.v.clear();
  s.q_pos.clear();
  s.k_pos.clear();
  const std::size_t qrow = in.heads * in.head_dim, krow = in.kv_heads * in.head_dim;
  for (std::size_t t : tokens) {
    s.q.insert(s.q.end(), in.q.begin() + t * qrow, in.q.begin() + (t + 1) * qrow);
    s.q_pos.push_back(in.q_pos[t]);
  }
  for (std::size_t j : keys) {
    s.k.insert(s.k.end(), in.k.begin() + j * krow, in.k.begin() + (j + 1) * krow);
    s.v.insert(s.v.end(), in.v.begin() + j * krow, in.v.begin() + (j + 1) * krow);
    s.k_pos.push_back(in.k_pos[j]);
  }
  return s;
}

std::vector<float> rows_of(const std::vector<float>& out, const AttnInputs& in, const std::vector<std::size_t>& tokens) {
  std::vector<float> r;
  const std::size_t row = in.heads * in.head_dim;
  for (std::size_t t : tokens) r.insert(r.end(), out.begin() + t * row, out.begin() + (t + 1) * row);
  return r;
}

double temperature_of(const QueryTemperature& t, std::int32_t pos) {
  return 1 + t.scale * std::log1p(std::floor((static_cast<double>(pos) + t.offset) / t.floor_scale));
}

// Chunked attention (one sequence) equals, per chunk, attention without chunks over the
// keys of that chunk alone: what an engine would otherwise do by resetting its cache.
void expect_chunks_match_workaround(Backend& b, AttnInputs in, std::uint32_t chunk) {
  for (AttentionPath path : kPaths) {
    in.config.chunk = chunk;
    in.config.path = path;
    const std::vector<float> got = run_attention_op(b, in);
    std::int32_t covered = 0;
    for (std::int32_t c = in.q_pos.front() / static_cast<std::int32_t>(chunk);
         c <= in.q_pos.back() / static_cast<std::int32_t>(chunk); ++c) {
      std::vector<std::size_t> tokens, keys;
      for (std::size_t t = 0; t < in.tokens; ++t) {
        if (in.q_pos[t] / static_cast<std::int32_t>(chunk) == c) tokens.push_back(t);
      }
      for (std::size_t j = 0; j < in.keys; ++j) {
        if (in.k_pos[j] / static_cast<std::int32_t>(chunk) == c) keys.push_back(j);
      }
      if (tokens.empty()) continue;
      AttnInputs alone = subset(in, tokens, keys);
      alone.config.chunk.reset();
      EXPECT_TRUE(all_close(rows_of(got, in, tokens), run_attention_op(b, alone), alone.out_shape(), 2e-5, 2e-5))
          << path_name(path) << ", chunk " << c;
      ++covered;
    }
    EXPECT_GE(covered, 2) << "the queries span two chunks";
  }
}

// A symmetric window equals a -inf mask outside |pos_t - pos_j| <= window / 2.
void expect_symmetric_matches_mask(Backend& b, AttnInputs in, std::uint32_t window) {
  ASSERT_TRUE(in.mask.empty());
  AttnInputs masked = in;
  masked.mask.assign(in.tokens * in.keys, 0.0f);
  std::size_t hidden = 0;
  for (std::size_t t = 0; t < in.tokens; ++t) {
    for (std::size_t j = 0; j < in.keys; ++j) {
      if (std::abs(std::int64_t{in.q_pos[t]} - in.k_pos[j]) > window / 2) {
        masked.mask[t * in.keys + j] = -kInf;
        ++hidden;
      }
    }
  }
  EXPECT_GT(hidden, 0u);
  in.config.window = window;
  in.config.window_type = WindowType::symmetric;
  for (AttentionPath path : kPaths) {
    in.config.path = masked.config.path = path;
    EXPECT_TRUE(all_close(run_attention_op(b, in), run_attention_op(b, masked), in.out_shape(), 2e-5, 2e-5))
        << path_name(path) << ", window " << window;
  }
}

// A query temperature equals q scaled by t(pos_t) on the host (before soft-capping too).
void expect_temperature_matches_scaled_q(Backend& b, AttnInputs in, const QueryTemperature& temp) {
  AttnInputs scaled = in;
  const std::size_t row = in.heads * in.head_dim;
  double lo = 1e300, hi = -1e300;
  for (std::size_t t = 0; t < in.tokens; ++t) {
    const double f = temperature_of(temp, in.q_pos[t]);
    lo = std::min(lo, f);
    hi = std::max(hi, f);
    for (std::size_t i = 0; i < row; ++i) scaled.q[t * row + i] = static_cast<float>(in.q[t * row + i] * f);
  }
  EXPECT_GT(hi, lo) << "t changes across the queries";
  in.config.query_temperature = temp;
  for (AttentionPath path : kPaths) {
    in.config.path = scaled.config.path = path;
    EXPECT_TRUE(all_close(run_attention_op(b, in), run_attention_op(b, scaled), in.out_shape(), 2e-5, 2e-5)) << path_name(path);
  }
}

using ChunkedAttention = BackendTest;
using SymmetricWindow = BackendTest;
using QueryTemperatureTest = BackendTest;

TEST_P(ChunkedAttention, EqualsAttentionOverTheQuerysChunkAlone) {
  // Keys at 0..59, queries at 40..59: chunks of 16 split them at 48.
  AttnInputs in = random_inputs(20, 8, 2, 60, 64, 1, 11);
  expect_chunks_match_workaround(backend(), in, 16);
  // Not causal: a chunk still hides the keys of the next chunk.
  in.config.causal = false;
  expect_chunks_match_workaround(backend(), in, 16);
}

TEST_P(SymmetricWindow, EqualsAMaskOutsideTheWindow) {
  AttnInputs in = random_inputs(24, 4, 2, 40, 32, 1, 12, 5);
  in.config.causal = false;
  for (std::uint32_t w : {1u, 6u, 7u}) expect_symmetric_matches_mask(backend(), in, w);
}

// A symmetric window looks both ways, as in the bidirectional encoders that have one:
// with causal masking (the default) it would be a causal half window, so every attention
// op refuses the pair, over tensors and over a cache, naming causal and what to pass.
TEST_P(SymmetricWindow, CausalIsRefused) {
  Backend& b = backend();
  Tensor q = b.tensor({2, 2, 8}, DType::f32), k = b.tensor({4, 1, 8}, DType::f32);
  Tensor s = b.tensor({2, 2, 4}, DType::f32), out = b.tensor({2, 2, 8}, DType::f32);
  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 4, .dtype = DType::f32});
  CommandList fill = b.commands();
  fill.kv_append(cache, k, k, std::vector<std::int32_t>{0, 1, 2, 3}, {});
  fill.submit_and_wait();
  const std::vector<std::int32_t> qp{2, 3}, kp{0, 1, 2, 3};
  CommandList cmd = b.commands();
  for (std::optional<std::uint32_t> window : {std::optional<std::uint32_t>{4u}, std::optional<std::uint32_t>{}}) {
    const AttentionConfig c{.window = window, .window_type = WindowType::symmetric};
    ASSERT_TRUE(c.causal) << "the default";
    const std::initializer_list<const char*> parts = {"config.causal = true", "WindowType::symmetric", "causal = false"};
    expect_invalid([&] { cmd.attn_scores(q, k, s, {.q_positions = qp, .k_positions = kp}, c); }, parts);
    expect_invalid([&] { cmd.attention(q, k, k, out, {.q_positions = qp, .k_positions = kp}, c); }, parts);
    expect_invalid([&] { cmd.attn_scores(q, cache, s, {.q_positions = qp}, c); }, parts);
    expect_invalid([&] { cmd.attention(q, cache, out, {.q_positions = qp}, c); }, parts);
  }
  EXPECT_EQ(cmd.stats().ops, 0u);
  cmd.attention(q, cache, out, {.q_positions = qp}, {.causal = false, .window = 4u, .window_type = WindowType::symmetric});
  cmd.submit_and_wait();
  EXPECT_GE(cmd.stats().ops, 1u);  // Vulkan may take more than one dispatch
}

TEST_P(QueryTemperatureTest, EqualsScalingQOnTheHost) {
  // Positions 0..29: floor((p + 1) / 3) from 0 to 10, t from 1 to 1 + 0.4 ln 11.
  AttnInputs in = random_inputs(30, 8, 2, 30, 64, 1, 13);
  const QueryTemperature temp{.floor_scale = 3, .scale = 0.4, .offset = 1};
  expect_temperature_matches_scaled_q(backend(), in, temp);
  in.config.softcap = 2.0;  // t before the cap: the cap sees t * scale * qk
  expect_temperature_matches_scaled_q(backend(), in, temp);
  in.config.softcap_order = SoftcapOrder::cap_then_scale;
  expect_temperature_matches_scaled_q(backend(), in, temp);
}

// Scores of q = k = (1, 0, ...) with scale 1 are t(pos_t) itself, by hand: Llama 4's
// (floor_scale 8192, scale 0.1, offset 1) and Ministral 3's (16384, 0.1, 0), at the
// floor's steps and at the largest position; then soft-capped.
TEST_P(QueryTemperatureTest, HandComputedScores) {
  struct Case {
    QueryTemperature temp;
    std::vector<std::int32_t> pos;
    std::vector<double> want;
  };
  const double ln2 = 0.69314718055994531, ln3 = 1.0986122886681098, ln4 = 2 * ln2;
  const Case cases[] = {
      {{.floor_scale = 8192, .scale = 0.1, .offset = 1},
       {0, 8190, 8191, 16383, 24575, 2147483646},
       {1.0, 1.0, 1 + 0.1 * ln2, 1 + 0.1 * ln3, 1 + 0.1 * ln4, 1 + 0.1 * std::log(262144.0)}},
      {{.floor_scale = 16384, .scale = 0.1, .offset = 0}, {0, 16383, 16384, 32768}, {1.0, 1.0, 1 + 0.1 * ln2, 1 + 0.1 * ln3}},
  };
  Backend& b = backend();
  for (const Case& c : cases) {
    for (std::optional<double> cap : {std::optional<double>{}, std::optional<double>{1.5}}) {
      const std::size_t n = c.pos.size(), d = 4;
      std::vector<float> qv(n * d, 0.0f), kv(d, 0.0f);
      for (std::size_t t = 0; t < n; ++t) qv[t * d] = 1.0f;
      kv[0] = 1.0f;
      Tensor q = b.tensor({n, 1, d}, DType::f32), k = b.tensor({1, 1, d}, DType::f32);
      Tensor s = b.tensor({n, 1, 1}, DType::f32);
      b.upload(q, qv);
      b.upload(k, kv);
      const std::vector<std::int32_t> kpos{0};
      CommandList cmd = b.commands();
      cmd.attn_scores(q, k, s, {.q_positions = c.pos, .k_positions = kpos},
                      {.scale = 1.0, .query_temperature = c.temp, .softcap = cap});
      cmd.submit_and_wait();
      const std::vector<float> got = b.download(s);
      for (std::size_t t = 0; t < n; ++t) {
        const double want = cap ? *cap * std::tanh(c.want[t] / *cap) : c.want[t];
        EXPECT_NEAR(got[t], want, 2e-6 * want) << "position " << c.pos[t] << (cap ? ", capped" : "");
      }
    }
  }
}

// Decode over a cache, recorded once and replayed through set_tokens for 70 tokens (the
// ring of 40 wraps; chunks, the window and t change as positions move), under every
// kernel family, against the CPU backend doing the same.
struct Feature {
  const char* name;
  AttentionConfig config;
};
class CacheVisibility : public VulkanVsCpuTest, public ::testing::WithParamInterface<Feature> {};

TEST_P(CacheVisibility, ReplayedDecodeUnderEveryKernelFamily) {
  constexpr std::size_t kHeads = 8, kKvHeads = 2, kDim = 64;
  const KvCacheConfig cache_config{.n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = 40, .dtype = DType::f32};
  for (const KernelFamily& f : kKernelFamilies) {
    std::shared_ptr<Backend> gpu = family_backend(f);
    struct Side {
      Backend& b;
      KvCache cache;
      Tensor q, k, v, out;
      CommandList cmd;
    };
    auto side = [&](Backend& b) {
      return Side{b,
                  b.kv_cache(cache_config),
                  b.tensor({1, kHeads, kDim}, DType::f32),
                  b.tensor({1, kKvHeads, kDim}, DType::f32),
                  b.tensor({1, kKvHeads, kDim}, DType::f32),
                  b.tensor({1, kHeads, kDim}, DType::f32),
                  b.commands()};
    };
    Side g = side(*gpu), c = side(*cpu_);
    AttentionConfig config = GetParam().config;
    config.path = f.path;
    const std::int32_t zero = 0;
    for (Side* x : {&g, &c}) {
      x->cmd.kv_append(x->cache, x->k, x->v, {&zero, 1}, {});
      x->cmd.attention(x->q, x->cache, x->out, {.q_positions = {&zero, 1}}, config);
    }
    for (std::int32_t pos = 0; pos < 70; ++pos) {
      const auto seed = static_cast<std::uint32_t>(100 + 3 * pos);
      for (Side* x : {&g, &c}) {
        x->b.upload(x->q, normal(kHeads * kDim, seed));
        x->b.upload(x->k, normal(kKvHeads * kDim, seed + 1));
        x->b.upload(x->v, normal(kKvHeads * kDim, seed + 2));
        if (pos > 0) x->cmd.set_tokens({&pos, 1});
        x->cmd.submit_and_wait();
      }
      ASSERT_TRUE(all_close(gpu->download(g.out), cpu_->download(c.out), {1, kHeads, kDim}, 1e-4, 1e-4))
          << f.name << ", position " << pos;
    }
    EXPECT_TRUE(new_validation_messages(*gpu).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Features, CacheVisibility,
    ::testing::Values(Feature{"Chunked", {.chunk = 16u}},
                      Feature{"SymmetricWindow", {.causal = false, .window = 13u, .window_type = WindowType::symmetric}},
                      Feature{
                          "QueryTemperature",
                          {.query_temperature = QueryTemperature{.floor_scale = 8, .scale = 0.3, .offset = 1}, .softcap = 5.0}}),
    [](const ::testing::TestParamInfo<Feature>& info) { return std::string(info.param.name); });

// A chunk lets a cache serve queries whose full causal range the ring no longer holds:
// only the query's chunk must still be there.
TEST_P(ChunkedAttention, CacheNeedsOnlyTheQuerysChunk) {
  Backend& b = backend();
  KvCache cache = b.kv_cache({.n_kv_heads = 1, .head_dim = 32, .capacity = 20, .dtype = DType::f32});
  std::vector<std::int32_t> pos(30);
  for (std::int32_t i = 0; i < 30; ++i) pos[static_cast<std::size_t>(i)] = i;
  const std::vector<float> kh = normal(30 * 32, 1), vh = normal(30 * 32, 2);
  for (std::size_t half = 0; half < 2; ++half) {
    Tensor k15 = b.tensor({15, 1, 32}, DType::f32), v15 = b.tensor({15, 1, 32}, DType::f32);
    b.upload(k15, std::vector<float>(kh.begin() + half * 480, kh.begin() + (half + 1) * 480));
    b.upload(v15, std::vector<float>(vh.begin() + half * 480, vh.begin() + (half + 1) * 480));
    CommandList fill = b.commands();
    fill.kv_append(cache, k15, v15, std::span(pos).subspan(half * 15, 15), {});
    fill.submit_and_wait();
  }  // the ring holds positions 10..29
  const std::vector<std::int32_t> qpos{24, 25, 26, 27, 28, 29};
  Tensor q = b.tensor({6, 2, 32}, DType::f32), out = b.tensor({6, 2, 32}, DType::f32);
  b.upload(q, normal(6 * 2 * 32, 3));
  CommandList cmd = b.commands();
  expect_invalid([&] { cmd.attention(q, cache, out, {.q_positions = qpos}, {}); },
                 {"tokens.q_positions[0]", "24", "needs position 5"});
  cmd.attention(q, cache, out, {.q_positions = qpos}, {.chunk = 8u});  // needs 24 onwards
  cmd.submit_and_wait();
  // The same as plain keys 24..29 (the chunk's part held; the query sees no later ones).
  Tensor k6 = b.tensor({6, 1, 32}, DType::f32), v6 = b.tensor({6, 1, 32}, DType::f32);
  Tensor want = b.tensor({6, 2, 32}, DType::f32);
  b.upload(k6, std::vector<float>(kh.begin() + 24 * 32, kh.end()));
  b.upload(v6, std::vector<float>(vh.begin() + 24 * 32, vh.end()));
  CommandList plain = b.commands();
  plain.attention(q, k6, v6, want, {.q_positions = qpos, .k_positions = qpos}, {});
  plain.submit_and_wait();
  EXPECT_TRUE(all_close(b.download(out), b.download(want), {6, 2, 32}, 1e-5, 1e-5));
  // A chunk of 32 starts at 0 for position 24: the ring's own reach (24 - 19) is the limit.
  expect_invalid([&] { cmd.attention(q, cache, out, {.q_positions = qpos}, {.chunk = 32u}); },
                 {"tokens.q_positions[0]", "needs position 5"});
}

// Bad values are refused by name, with the valid range, by every attention op.
TEST_P(QueryTemperatureTest, BadFieldsAreRefused) {
  Backend& b = backend();
  Tensor q = b.tensor({2, 2, 8}, DType::f32), k = b.tensor({2, 1, 8}, DType::f32);
  Tensor s = b.tensor({2, 2, 2}, DType::f32), out = b.tensor({2, 2, 8}, DType::f32);
  CommandList cmd = b.commands();
  const std::vector<std::int32_t> pos{0, 1};
  auto both = [&](const AttentionConfig& config, std::initializer_list<const char*> parts) {
    expect_invalid([&] { cmd.attn_scores(q, k, s, {.q_positions = pos}, config); }, parts);
    expect_invalid([&] { cmd.attention(q, k, k, out, {.q_positions = pos}, config); }, parts);
  };
  using QT = vkattn::QueryTemperature;
  both({.chunk = 0u}, {"config.chunk", "0", ">= 1"});
  both({.window = 4u, .window_type = static_cast<WindowType>(7)}, {"config.window_type", "7", "symmetric"});
  both({.query_temperature = QT{.floor_scale = 0}}, {"config.query_temperature.floor_scale", "0", ">= 1"});
  both({.query_temperature = QT{.scale = std::nan("")}}, {"config.query_temperature.scale", "nan", "finite"});
  both({.query_temperature = QT{.scale = 1e300}}, {"config.query_temperature.scale", "finite in float"});
  both({.query_temperature = QT{.offset = 1u << 31}}, {"config.query_temperature.offset", "2147483648", "2^31"});
}

// The families that need these options, from their public config.json values (heads,
// head_dim, RoPE and its scaling, the window or chunk, the temperature): on both backends,
// each equal to its workaround and the Vulkan result to the CPU one. RoPE runs on the
// backend (CommandList::rope) before attention, as an engine would run it.
AttnInputs rotated(Backend& b, AttnInputs in, const RopeConfig& rope) {
  Tensor q = b.tensor({in.tokens, in.heads, in.head_dim}, DType::f32);
  Tensor k = b.tensor({in.keys, in.kv_heads, in.head_dim}, DType::f32);
  b.upload(q, in.q);
  b.upload(k, in.k);
  CommandList cmd = b.commands();
  cmd.rope(q, in.q_pos, rope);
  cmd.rope(k, in.k_pos, rope);
  cmd.submit_and_wait();
  in.q = b.download(q);
  in.k = b.download(k);
  return in;
}

class FamilyTest : public VulkanVsCpuTest {
 protected:
  // |check| (a workaround identity) on each backend, then Vulkan against the CPU.
  template <class Check>
  void run(const AttnInputs& in, const RopeConfig* rope, Check&& check) {
    std::vector<float> outs[2];
    int i = 0;
    for (Backend* b : {gpu_.get(), cpu_.get()}) {
      const AttnInputs x = rope ? rotated(*b, in, *rope) : in;
      check(*b, x);
      outs[i++] = run_attention_op(*b, x);
    }
    EXPECT_TRUE(all_close(outs[0], outs[1], in.out_shape(), 2e-4, 1e-4)) << "Vulkan against the CPU";
  }
};
using ChunkedModels = FamilyTest;
using SymmetricWindowModels = FamilyTest;
using QueryTemperatureModels = FamilyTest;

// Llama 4 Scout's RoPE layers: 40 query heads over 8, head_dim 128, interleaved RoPE base
// 5e5 with llama3 scaling (factor 16, low = high = 1, original 8192), chunks of 8192.
// Queries at 8190..8193 straddle the first chunk boundary.
TEST_F(ChunkedModels, Llama4ScoutRopeLayer) {
  RopeConfig rope{.layout = RopeLayout::interleaved,
                  .base = 500000.0,
                  .scaling = RopeScaling::llama3,
                  .factor = 16.0,
                  .original_context = 8192};
  rope.llama3 = {.low_freq_factor = 1.0, .high_freq_factor = 1.0};
  AttnInputs in = random_inputs(4, 40, 8, 204, 128, 1, 21, 7990);
  in.config.chunk = 8192u;
  run(in, &rope, [](Backend& b, const AttnInputs& x) { expect_chunks_match_workaround(b, x, 8192); });
}

// Llama 4's NoPE layers (every 4th): no RoPE, all keys, q x (1 + 0.1 ln(1 + floor((p + 1)
// / 8192))) (attn_temperature_tuning, floor_scale 8192, attn_scale 0.1).
TEST_F(QueryTemperatureModels, Llama4NopeLayer) {
  AttnInputs in = random_inputs(6, 40, 8, 204, 128, 1, 22, 7990);  // queries at 8188..8193
  const QueryTemperature t{.floor_scale = 8192, .scale = 0.1, .offset = 1};
  in.config.query_temperature = t;
  run(in, nullptr, [&](Backend& b, AttnInputs x) {
    x.config.query_temperature.reset();
    expect_temperature_matches_scaled_q(b, x, t);
  });
}

// Ministral 3 (3B): 32 heads over 8, head_dim 128, YaRN factor 16 over 16384 (beta 32/1,
// mscale = mscale_all_dim = 1), base 1e6; q x (1 + 0.1 ln(1 + floor(p / 16384)))
// (llama_4_scaling_beta 0.1, original_max_position_embeddings 16384).
TEST_F(QueryTemperatureModels, Ministral3) {
  const RopeConfig rope{.base = 1e6,
                        .scaling = RopeScaling::yarn,
                        .factor = 16.0,
                        .original_context = 16384,
                        .yarn = {.mscale = 1.0, .mscale_all_dim = 1.0}};
  AttnInputs in = random_inputs(8, 32, 8, 100, 128, 1, 23, 16288);  // queries at 16380..16387
  const QueryTemperature t{.floor_scale = 16384, .scale = 0.1, .offset = 0};
  in.config.query_temperature = t;
  run(in, &rope, [&](Backend& b, AttnInputs x) {
    x.config.query_temperature.reset();
    expect_temperature_matches_scaled_q(b, x, t);
  });
}

// ModernBERT-base's local layers: 12 heads, head_dim 64, bidirectional, RoPE base 1e4
// (local_rope_theta), a window of 128 both ways (|pos_t - pos_j| <= 64).
TEST_F(SymmetricWindowModels, ModernBertLocalLayer) {
  AttnInputs in = random_inputs(200, 12, 12, 200, 64, 1, 24);
  in.config.causal = false;
  in.config.window = 128u;
  in.config.window_type = WindowType::symmetric;
  const RopeConfig rope{.base = 10000.0};
  run(in, &rope, [](Backend& b, AttnInputs x) {
    x.config.window.reset();
    x.config.window_type = WindowType::trailing;
    expect_symmetric_matches_mask(b, x, 128);
  });
}

// EmbeddingGemma-300m's local layers: 3 heads over 1, head_dim 256, bidirectional,
// scale 256^-1/2 (query_pre_attn_scalar), RoPE base 1e4, sliding_window 512 both ways.
TEST_F(SymmetricWindowModels, EmbeddingGemmaLocalLayer) {
  AttnInputs in = random_inputs(300, 3, 1, 300, 256, 1, 25);
  in.config.causal = false;
  in.config.scale = 1.0 / 16.0;
  in.config.window = 512u;
  in.config.window_type = WindowType::symmetric;
  const RopeConfig rope{.base = 10000.0};
  run(in, &rope, [](Backend& b, AttnInputs x) {
    x.config.window.reset();
    x.config.window_type = WindowType::trailing;
    expect_symmetric_matches_mask(b, x, 512);
  });
}

INSTANTIATE_TEST_SUITE_P(Backends, ChunkedAttention, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, SymmetricWindow, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);
INSTANTIATE_TEST_SUITE_P(Backends, QueryTemperatureTest, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

}  // namespace
}  // namespace vkattn::test
