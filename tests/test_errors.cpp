// Every bad parameter raises InvalidArgument naming the parameter, its value and the valid
// range, on both backends, and leaves the command list unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"

namespace vkattn::test {
namespace {

using Errors = BackendTest;

TEST_P(Errors, TensorShapes) {
  expect_invalid([&] { backend().tensor({}, DType::f32); }, {"shape", "at least one dimension"});
  expect_invalid([&] { backend().tensor({4, 0, 2}, DType::f32); }, {"shape[1]", "= 0", ">= 1"});
  expect_invalid([&] { backend().tensor({1u << 21, 1u << 21}, DType::f32); }, {"shape", "2^40"});
  expect_invalid([&] { backend().tensor({2}, static_cast<DType>(9)); }, {"dtype", "9"});
}

TEST_P(Errors, Transfers) {
  Tensor f = backend().tensor({2, 3}, DType::f32);
  Tensor i = backend().tensor({6}, DType::i32);
  Tensor empty;
  expect_invalid([&] { backend().upload(f, std::vector<float>(5)); }, {"data.size()", "5", "numel() = 6"});
  expect_invalid([&] { backend().upload(f, std::vector<std::int32_t>(6)); }, {"tensor.dtype", "f32", "i32"});
  expect_invalid([&] { backend().upload(i, std::vector<float>(6)); }, {"tensor.dtype", "i32"});
  expect_invalid([&] { backend().upload(empty, std::vector<float>(1)); }, {"tensor", "empty"});
  expect_invalid([&] { backend().download(i); }, {"tensor.dtype", "download_i32"});
  expect_invalid([&] { backend().download_i32(f); }, {"tensor.dtype", "f32"});
  expect_invalid([&] { (void)empty.shape(); }, {"empty"});

  auto other = make_backend(BackendKind::cpu);
  Tensor foreign = other->tensor({6}, DType::f32);
  expect_invalid([&] { backend().upload(foreign, std::vector<float>(6)); }, {"another backend"});
}

TEST_P(Errors, Rope) {
  Tensor x = backend().tensor({3, 2, 8}, DType::f32);
  const std::vector<std::int32_t> pos{0, 1, 2};
  CommandList cmd = backend().commands();
  auto rope = [&](Tensor& t, std::vector<std::int32_t> p, RopeConfig c) { cmd.rope(t, p, c); };

  Tensor rank2 = backend().tensor({3, 8}, DType::f32);
  expect_invalid([&] { rope(rank2, pos, {}); }, {"x.shape", "[3, 8]", "rank 3"});
  Tensor ints = backend().tensor({3, 2, 8}, DType::i32);
  expect_invalid([&] { rope(ints, pos, {}); }, {"x.dtype", "i32", "f32 or f16"});
  Tensor odd = backend().tensor({3, 2, 7}, DType::f32);
  expect_invalid([&] { rope(odd, pos, {}); }, {"head_dim", "7", "even"});
  Tensor wide = backend().tensor({1, 1, kMaxHeadDim + 2}, DType::f32);
  expect_invalid([&] { rope(wide, {0}, {}); }, {"head_dim", "2050", "2048"});
  expect_invalid([&] { rope(x, {0, 1}, {}); }, {"positions.size()", "2", "n_tokens", "3"});
  expect_invalid([&] { rope(x, {0, -5, 2}, {}); }, {"positions[1]", "-5", "2^31"});
  try {  // the parts the C API and Python hand on
    rope(x, {0, -5, 2}, {});
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.op(), "rope");
    EXPECT_EQ(e.param(), "positions[1]");
  }
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 3}); }, {"rotary_dim", "3", "even"});
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 10}); }, {"rotary_dim", "10", "head_dim = 8"});
  for (double base : {0.0, -2.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e-300, 1e300}) {
    expect_invalid([&] { rope(x, pos, {.base = base}); }, {"config.base", "finite and > 0 as a float"});
  }
  expect_invalid([&] { rope(x, pos, {.attention_factor = 1e300}); }, {"config.attention_factor", "[1.2e-38, 3.4e38]"});
  expect_invalid([&] { rope(x, pos, {.layout = static_cast<RopeLayout>(5)}); }, {"config.layout", "5"});
  Tensor empty;
  expect_invalid([&] { rope(empty, pos, {}); }, {"x", "empty"});
  auto other = make_backend(BackendKind::cpu);
  Tensor foreign = other->tensor({3, 2, 8}, DType::f32);
  expect_invalid([&] { rope(foreign, pos, {}); }, {"another backend"});

  // Scaling parameters.
  const auto yarn = [](auto edit) {
    RopeConfig c{.scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 4096};
    edit(c);
    return c;
  };
  for (double f : {0.0, -1.0, std::nan("")}) {
    expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::linear, .factor = f}); }, {"config.factor", "> 0"});
  }
  expect_invalid([&] { rope(x, pos, {.scaling = static_cast<RopeScaling>(42)}); }, {"config.scaling", "42"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::yarn, .factor = 4.0}); }, {"config.original_context", "0", ">= 1"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::llama3, .factor = 8.0}); }, {"original_context"});
  expect_invalid([&] { rope(x, pos, {.scaling = RopeScaling::dynamic_ntk, .factor = 2.0}); }, {"original_context"});
  expect_invalid([&] { rope(x, pos, {.rotary_dim = 2, .scaling = RopeScaling::ntk, .factor = 2.0}); },
                 {"config.rotary_dim", "2", ">= 4"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.beta_fast = 0.5; })); },
                 {"config.yarn.beta_fast", "0.5", "> config.yarn.beta_slow = 1"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.beta_slow = -1; })); }, {"config.yarn.beta_slow", "-1"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.yarn.mscale = std::nan(""); })); },
                 {"config.yarn.mscale", ">= 0"});
  expect_invalid([&] { rope(x, pos, yarn([](RopeConfig& c) { c.base = 1.0; })); }, {"config.base", "1", "log(base)"});
  expect_invalid(
      [&] {
        RopeConfig c{.scaling = RopeScaling::llama3, .factor = 8.0, .original_context = 8192};
        c.llama3.high_freq_factor = 0.5;
        rope(x, pos, c);
      },
      {"config.llama3.high_freq_factor", "0.5", ">= config.llama3.low_freq_factor = 1"});
  expect_invalid(
      [&] {
        rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, 3}});
      },
      {"config.freq_factors.size()", "3", "rotary_dim / 2 = 4"});
  expect_invalid(
      [&] {
        rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, 0, 4}});
      },
      {"config.freq_factors[2]", "0", "> 0"});
  expect_invalid(
      [&] {
        rope(x, pos, {.scaling = RopeScaling::factors, .freq_factors = {1, 2, INFINITY, 4}});
      },
      {"config.freq_factors[2]", "inf"});
  expect_invalid([&] { rope(x, pos, {.freq_factors = {1, 2, 3, 4}}); }, {"config.freq_factors.size()", "0 unless"});
  expect_invalid([&] { rope(x, pos, {.attention_factor = 0.0}); }, {"config.attention_factor", "> 0"});
  expect_invalid([&] { rope_frequencies({}, 7); }, {"config.rotary_dim = 0 (= head_dim = 7, odd)", "even in [2, 6]"});
  expect_invalid([&] { rope_frequencies({.rotary_offset = 2}, 9); },
                 {"(= head_dim - rotary_offset = 7, odd)", "even in [2, 6], or an even head_dim - rotary_offset"});
  expect_invalid([&] { rope_frequencies({}, std::size_t{1} << 40); }, {"head_dim = 1099511627776", "kMaxHeadDim = 2048"});
  expect_invalid([&] { rope_frequencies({}, 8, -1); }, {"max_position", "-1"});

  // Q and K together.
  Tensor k = backend().tensor({3, 1, 8}, DType::f32);
  Tensor k_tokens = backend().tensor({4, 1, 8}, DType::f32);
  Tensor k_dim = backend().tensor({3, 1, 6}, DType::f32);
  Tensor k_f16 = backend().tensor({3, 1, 8}, DType::f16);
  expect_invalid([&] { cmd.rope(x, k_tokens, pos); }, {"k.shape[0]", "4", "n_tokens = q.shape[0] = 3"});
  expect_invalid([&] { cmd.rope(x, k_dim, pos); }, {"k.shape[2]", "6", "head_dim = q.shape[2] = 8"});
  expect_invalid([&] { cmd.rope(x, k_f16, pos); }, {"k.dtype", "f16", "q.dtype = f32"});
  expect_invalid([&] { cmd.rope(x, x, pos); }, {"k", "the same tensor as q"});
  expect_invalid([&] { cmd.rope(x, empty, pos); }, {"k", "empty"});
  expect_invalid([&] { cmd.rope(x, k, std::vector<std::int32_t>{0, 1}); }, {"positions.size()", "q.shape[0]"});

  // Nothing was recorded, and the list still works.
  EXPECT_EQ(cmd.stats().ops, 0u);
  rope(x, pos, {});
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().ops, 1u);
}

TEST_P(Errors, Copy) {
  Tensor a = backend().tensor({4}, DType::f32), b = backend().tensor({5}, DType::f32);
  Tensor h = backend().tensor({4}, DType::f16);
  CommandList cmd = backend().commands();
  expect_invalid([&] { cmd.copy(a, b); }, {"dst.numel()", "5", "4"});
  expect_invalid([&] { cmd.copy(a, h); }, {"dst.dtype", "f16", "f32"});
  EXPECT_EQ(cmd.stats().ops, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, Errors, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Bad arguments: InvalidArgument naming the parameter, on both backends, nothing recorded.
using AttentionErrors = BackendTest;

TEST_P(AttentionErrors, BadArguments) {
  Backend& b = backend();
  auto t = [&](Shape s, DType d = DType::f32) { return b.tensor(s, d); };
  // Valid: 2 tokens, 2 heads on 1 kv head, 4 keys, head_dim 8.
  Tensor q = t({2, 2, 8}), k = t({4, 1, 8}), v = t({4, 1, 8}), scores = t({2, 2, 4}), probs = t({2, 2, 4});
  Tensor out = t({2, 2, 8}), mask = t({2, 4});
  const std::vector<std::int32_t> qp{3, 3}, kp{0, 1, 2, 3};
  const AttentionTokens tok{qp, kp};
  CommandList cmd = b.commands();
  Tensor a = t({4}), c = t({4});
  cmd.copy(a, c);  // one op, so that "nothing recorded" means the count stays at 1

  auto sc = [&](const Tensor& qq, const Tensor& kk, Tensor& ss, const AttentionTokens& tt, const AttentionConfig& cfg,
                const Tensor* m = nullptr) { cmd.attn_scores(qq, kk, ss, tt, cfg, m); };
  // Heads and head_dim.
  Tensor q3 = t({2, 3, 8}), k2 = t({4, 2, 8}), s3 = t({2, 3, 4});
  expect_invalid([&] { sc(q3, k2, s3, tok, {}); }, {"n_heads (q.shape[1])", "3", "multiple of n_kv_heads = k.shape[1] = 2"});
  Tensor k6 = t({4, 1, 6});
  expect_invalid([&] { sc(q, k6, scores, tok, {}); }, {"k.shape[2]", "6", "head_dim = q.shape[2] = 8"});
  Tensor q_wide = t({2, 2, kMaxAttentionHeadDim + 2}), k_wide = t({4, 1, kMaxAttentionHeadDim + 2});
  expect_invalid([&] { sc(q_wide, k_wide, scores, tok, {}); }, {"head_dim (q.shape[2])", "578", "[1, 576]"});
  Tensor q_rank2 = t({2, 16});
  expect_invalid([&] { sc(q_rank2, k, scores, tok, {}); }, {"q.shape", "[2, 16]", "rank 3"});
  // Config.
  expect_invalid([&] { sc(q, k, scores, tok, {.window = 0u}); }, {"config.window", "0", "[1, 2^31 - 1]"});
  // The kernels compare positions as ints: a window of 2^31 once hid every key on Vulkan.
  expect_invalid([&] { sc(q, k, scores, tok, {.window = 1u << 31}); }, {"config.window = 2147483648", "[1, 2^31 - 1]"});
  // Doubles past float's range (or, for the positive ones, below its normal range) would
  // be inf or 0 in the kernels.
  for (double s : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(), 1e39}) {
    expect_invalid([&] { sc(q, k, scores, tok, {.scale = s}); }, {"config.scale", "finite as a float"});
  }
  for (double cap : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e39, 1e-50}) {
    expect_invalid([&] { sc(q, k, scores, tok, {.softcap = cap}); }, {"config.softcap", "finite and > 0 as a float"});
  }
  expect_invalid(
      [&] { sc(q, k, scores, tok, {.scale = 1e-30, .softcap = 1e-20, .softcap_order = SoftcapOrder::cap_then_scale}); },
      {"config.softcap x |config.scale|", "1e-50"});
  expect_invalid([&] { sc(q, k, scores, tok, {.softcap = 1.0, .softcap_order = static_cast<SoftcapOrder>(2)}); },
                 {"config.softcap_order", "2", "scale_then_cap or SoftcapOrder::cap_then_scale"});
  expect_invalid([&] { sc(q, k, scores, tok, {.alibi_slopes = {0.5f}}); },
                 {"config.alibi_slopes.size()", "1", "0 or n_heads = 2"});
  expect_invalid(
      [&] {
        sc(q, k, scores, tok, {.alibi_slopes = {std::numeric_limits<float>::infinity(), 0.5f}});
      },
      {"config.alibi_slopes[0]", "inf", "finite"});
  // Scores and mask.
  Tensor s5 = t({2, 2, 5});
  expect_invalid([&] { sc(q, k, s5, tok, {}); }, {"scores.shape", "[2, 2, 5]", "[2, 2, 4]"});
  Tensor mask5 = t({2, 5}), mask3d = t({2, 2, 4}), mask_f16 = t({2, 4}, DType::f16), empty;
  expect_invalid([&] { sc(q, k, scores, tok, {}, &mask5); }, {"mask.shape", "[2, 5]", "[2, 4]"});
  expect_invalid([&] { sc(q, k, scores, tok, {}, &mask3d); }, {"mask.shape", "[2, 2, 4]"});
  expect_invalid([&] { sc(q, k, scores, tok, {}, &mask_f16); }, {"mask.dtype", "f16", "f32"});
  expect_invalid([&] { sc(q, k, scores, tok, {}, &empty); }, {"mask", "empty"});
  // Positions and sequence ids.
  const std::vector<std::int32_t> kp5{0, 1, 2, 3, 4}, qp1{3}, qp_neg{3, -1}, kp_neg{0, 1, -7, 3};
  const std::vector<std::int32_t> qs1{0}, ks_neg{0, 0, -1, 0};
  expect_invalid([&] { sc(q, k, scores, {qp, kp5}, {}); }, {"tokens.k_positions.size()", "5", "4"});
  expect_invalid([&] { sc(q, k, scores, {qp1, kp}, {}); }, {"tokens.q_positions.size()", "1", "2"});
  expect_invalid([&] { sc(q, k, scores, {{}, kp}, {}); }, {"tokens.q_positions.size()", "0", "2"});
  expect_invalid([&] { sc(q, k, scores, {qp_neg, kp}, {}); }, {"tokens.q_positions[1]", "-1", "[0, 2^31 - 1]"});
  expect_invalid([&] { sc(q, k, scores, {qp, kp_neg}, {}); }, {"tokens.k_positions[2]", "-7"});
  expect_invalid([&] { sc(q, k, scores, {qp, kp, qs1}, {}); }, {"tokens.q_seq_ids.size()", "1", "2 (or 0"});
  expect_invalid([&] { sc(q, k, scores, {qp, kp, {}, ks_neg}, {}); }, {"tokens.k_seq_ids[2]", "-1"});
  // dtypes.
  Tensor q_i32 = t({2, 2, 8}, DType::i32), k_i32 = t({4, 1, 8}, DType::i32), s_f16 = t({2, 2, 4}, DType::f16);
  expect_invalid([&] { sc(q_i32, k, scores, tok, {}); }, {"q.dtype", "i32", "f32 or f16"});
  expect_invalid([&] { sc(q, k_i32, scores, tok, {}); }, {"k.dtype", "i32", "f32, f16, q8_0 or q4_0"});
  expect_invalid([&] { sc(q, k, s_f16, tok, {}); }, {"scores.dtype", "f16", "f32"});
  auto other = make_backend(BackendKind::cpu);
  Tensor foreign = other->tensor({4, 1, 8}, DType::f32);
  expect_invalid([&] { sc(q, foreign, scores, tok, {}); }, {"k", "another backend"});

  // Softmax.
  Tensor p5 = t({2, 2, 5}), s_i32 = t({2, 2, 4}, DType::i32), p_f16 = t({2, 2, 4}, DType::f16), s_rank2 = t({4, 4});
  expect_invalid([&] { cmd.attn_softmax(scores, p5); }, {"probs.shape", "[2, 2, 5]", "[2, 2, 4]"});
  expect_invalid([&] { cmd.attn_softmax(s_i32, probs); }, {"scores.dtype", "i32", "f32"});
  expect_invalid([&] { cmd.attn_softmax(scores, p_f16); }, {"probs.dtype", "f16", "f32"});
  expect_invalid([&] { cmd.attn_softmax(s_rank2, probs); }, {"scores.shape", "[4, 4]", "rank 3"});
  expect_invalid(
      [&] {
        cmd.attn_softmax(scores, probs, {.sinks = {1, 2, 3}});
      },
      {"config.sinks.size()", "3", "0 or n_heads = 2"});
  expect_invalid([&] { cmd.attn_softmax(scores, probs, {.sinks = {0.0f, std::nanf("")}}); }, {"config.sinks[1]", "finite"});
  expect_invalid(
      [&] {
        cmd.attn_softmax(scores, probs, {.sinks = {-std::numeric_limits<float>::infinity(), 0.0f}});
      },
      {"config.sinks[0]", "inf"});

  // Weighted sum.
  Tensor v6 = t({4, 1, 6}), v5 = t({5, 1, 8}), v_i32 = t({4, 1, 8}, DType::i32), out_f16 = t({2, 2, 8}, DType::f16);
  Tensor out3 = t({3, 2, 8}), out_heads = t({2, 3, 8}), v2 = t({4, 2, 8}), out_wide = t({2, 2, 578});
  Tensor v_wide = t({4, 1, 578}), p_i32 = t({2, 2, 4}, DType::i32);
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v6, out); }, {"v.shape[2]", "6", "head_dim = out.shape[2] = 8"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v_wide, out_wide); }, {"head_dim (out.shape[2])", "578", "[1, 576]"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v2, out_heads); }, {"n_heads (out.shape[1])", "3", "v.shape[1] = 2"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v5, out); }, {"v.shape[0]", "5", "n_keys = probs.shape[2] = 4"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v, out3); }, {"out.shape", "[3, 2, 8]", "[2, 2, 8]"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v_i32, out); }, {"v.dtype", "i32", "f32, f16, q8_0 or q4_0"});
  expect_invalid([&] { cmd.attn_weighted_sum(probs, v, out_f16); }, {"out.dtype", "f16", "f32"});
  expect_invalid([&] { cmd.attn_weighted_sum(p_i32, v, out); }, {"probs.dtype", "i32", "f32"});
  // out == probs needs n_keys == head_dim for the shapes to pass.
  Tensor square = t({2, 2, 8}), v8 = t({8, 1, 8});
  expect_invalid([&] { cmd.attn_weighted_sum(square, v8, square); }, {"out = the tensor given as probs"});

  // Fused attention: the stages' checks under its own name, and v the shape of k.
  auto fused = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, Tensor& oo, const AttentionConfig& cfg,
                   const Tensor* m = nullptr) { cmd.attention(qq, kk, vv, oo, tok, cfg, m); };
  expect_invalid([&] { fused(q, k6, v, out, {}); }, {"attention: k.shape[2]", "6", "head_dim = q.shape[2] = 8"});
  expect_invalid([&] { fused(q, k, v2, out, {}); }, {"attention: v.shape[1]", "2", "k.shape[1] = 1"});
  expect_invalid([&] { fused(q, k, v5, out, {}); }, {"attention: v.shape[0]", "5", "k.shape[0] = 4"});
  expect_invalid([&] { fused(q, k, v_i32, out, {}); }, {"attention: v.dtype", "i32", "f32, f16, q8_0 or q4_0"});
  expect_invalid([&] { fused(q, k, v, out3, {}); }, {"attention: out.shape", "[3, 2, 8]", "[2, 2, 8]"});
  expect_invalid([&] { fused(q, k, v, out, {.window = 0u}); }, {"attention: config.window", "0"});
  expect_invalid([&] { fused(q, k, v, out, {.sinks = {1, 2, 3}}); }, {"attention: config.sinks.size()", "3"});
  expect_invalid([&] { fused(q, k, v, out, {}, &mask5); }, {"attention: mask.shape", "[2, 5]", "[2, 4]"});
  expect_invalid([&] { fused(q, k, v, q, {}); }, {"attention: out = the tensor given as q"});
  expect_invalid([&] { fused(q, k, v, out_f16, {}); }, {"attention: out.dtype", "f16", "f32"});
  expect_invalid([&] { fused(q, foreign, v, out, {}); }, {"attention: k", "another backend"});
  expect_invalid([&] { fused(q, k, v, out, {.path = static_cast<AttentionPath>(7)}); },
                 {"attention: config.path", "7", "automatic, fused or three_stages"});

  EXPECT_EQ(cmd.stats().ops, 1u);
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionErrors, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// KV cache: bad configs, appends, copies, attention over the cache and sequence methods
// raise InvalidArgument naming the parameter; nothing is recorded and the cache's
// bookkeeping (slot positions, next positions) stays as it was.
using KvCacheErrors = BackendTest;

TEST_P(KvCacheErrors, BadArguments) {
  Backend& b = backend();
  auto t = [&](Shape s, DType d = DType::f32) { return b.tensor(s, d); };
  auto config = [](auto edit) {
    KvCacheConfig c{.n_seqs = 2, .n_kv_heads = 2, .head_dim = 8, .capacity = 6, .dtype = DType::f32, .n_sinks = 1};
    edit(c);
    return c;
  };
  // Config.
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.n_seqs = 0; })); }, {"kv_cache: config.n_seqs = 0", ">= 1"});
  // Slots are counted in 32-bit ints: a sequence past 2^31 slots once lost its tokens.
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.n_seqs = 9, c.capacity = std::size_t{1} << 28; })); },
                 {"config.n_seqs = 9", "[1, (2^31 - 1) / capacity = 7]"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.n_seqs = std::size_t{1} << 61; })); },
                 {"config.n_seqs = 2305843009213693952"});
  // A paged cache's block ids and free count, and each sequence's slots with its block
  // table, too.
  auto paged = [](auto& c) { c.paged = true, c.block_size = 1, c.n_sinks = 0, c.n_blocks = 4; };
  expect_invalid([&] { b.kv_cache(config([&](auto& c) { paged(c), c.n_blocks = std::size_t{1} << 31; })); },
                 {"config.n_blocks = 2147483648", "= 2147483647]"});
  expect_invalid([&] { b.kv_cache(config([&](auto& c) { paged(c), c.n_seqs = 1024, c.capacity = std::size_t{1} << 20; })); },
                 {"config.n_seqs = 1024", "(capacity + capacity / block_size) = 1023]"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.dtype = static_cast<DType>(99); })); }, {"config.dtype = DType(99)"});
  // On read, dynamic NTK needs one length for queries and keys (rotated in different
  // passes, each would take its own base; the device once applied none).
  const RopeConfig ntk{.scaling = RopeScaling::dynamic_ntk, .factor = 4.0, .original_context = 8};
  expect_invalid([&] { b.kv_cache(config([&](auto& c) { c.rope = KvRope::on_read, c.rope_config = ntk; })); },
                 {"config.rope_config.sequence_length = 0", ">= 1 with KvRope::on_read"});
  EXPECT_NO_THROW(b.kv_cache(config([&](auto& c) {
    c.rope = KvRope::on_read, c.rope_config = ntk;
    c.rope_config.sequence_length = 64;
  })));
  // On read, keys rotate without an attention factor: one set, or one a scaling makes
  // (YaRN), is refused with the way round it; an explicit 1 is taken.
  const RopeConfig yarn{.scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 8};
  expect_invalid([&] { b.kv_cache(config([&](auto& c) { c.rope = KvRope::on_read, c.rope_config = yarn; })); },
                 {"config.rope_config.attention_factor = unset, which makes 1.138", "scale by its square"});
  expect_invalid(
      [&] { b.kv_cache(config([&](auto& c) { c.rope = KvRope::on_read, c.rope_config = {.attention_factor = 1.2}; })); },
      {"config.rope_config.attention_factor = 1.2", "1 with KvRope::on_read"});
  EXPECT_NO_THROW(b.kv_cache(config([&](auto& c) {
    c.rope = KvRope::on_read, c.rope_config = yarn;
    c.rope_config.attention_factor = 1.0;
  })));
  // The shape fields have no defaults: a config that leaves them unset is rejected.
  expect_invalid([&] { b.kv_cache({}); }, {"config.n_kv_heads = 0", "required, no default"});
  expect_invalid([&] { b.kv_cache({.n_kv_heads = 2}); }, {"config.head_dim = 0", "required, no default"});
  expect_invalid([&] { b.kv_cache({.n_kv_heads = 2, .head_dim = 8}); }, {"config.capacity = 0", "required, no default"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.n_kv_heads = 0; })); }, {"config.n_kv_heads = 0", ">= 1"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.head_dim = 0; })); }, {"config.head_dim = 0", "[1, 576]"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.head_dim = 578; })); }, {"config.head_dim = 578", "[1, 576]"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.head_dim = 7, c.dtype = DType::f16; })); },
                 {"config.head_dim = 7", "even for f16"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.capacity = 0, c.n_sinks = 0; })); },
                 {"config.capacity = 0", "[1, 2^30]"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.capacity = (std::size_t{1} << 30) + 1; })); },
                 {"config.capacity = 1073741825", "[1, 2^30]"});
  for (std::size_t sinks : {6u, 7u}) {
    expect_invalid([&] { b.kv_cache(config([&](auto& c) { c.n_sinks = sinks; })); },
                   {sinks == 6 ? "config.n_sinks = 6" : "config.n_sinks = 7", "< capacity = 6"});
  }
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.dtype = DType::i32; })); },
                 {"config.dtype = i32", "f32, f16, q8_0 or q4_0"});
  expect_invalid([&] { b.kv_cache(config([](auto& c) { c.rope = static_cast<KvRope>(7); })); },
                 {"config.rope = 7", "KvRope::stored or KvRope::on_read"});
  // K and V hold at most 2^40 elements: 2^31 - 2 slots of 576 dims pass it with one head.
  expect_invalid(
      [&] { b.kv_cache(config([](auto& c) { c.n_seqs = 2, c.capacity = (std::size_t{1} << 30) - 1, c.head_dim = 576; })); },
      {"config.capacity = 1073741823", "n_seqs x capacity x head_dim <= 2^40"});

  // A cache with sequence 0 at positions 0..2 and sequence 1 at 0.
  KvCache cache = b.kv_cache(config([](auto&) {}));
  {
    Tensor k = t({4, 2, 8}), v = t({4, 2, 8});
    CommandList fill = b.commands();
    fill.kv_append(cache, k, v, std::vector<std::int32_t>{0, 0, 1, 2}, std::vector<std::int32_t>{0, 1, 0, 0});
    fill.submit_and_wait();
  }
  const std::vector<std::int32_t> slots0 = cache.slot_positions(0), slots1 = cache.slot_positions(1);
  ASSERT_EQ(slots0, (std::vector<std::int32_t>{0, 1, 2, -1, -1, -1}));
  ASSERT_EQ(cache.next_position(1), 1);
  CommandList cmd = b.commands();
  Tensor a = t({4}), c = t({4});
  cmd.copy(a, c);  // one op, so that "nothing recorded" means the count stays at 1

  // Each case: InvalidArgument, and the bookkeeping as it was.
  auto bad = [&](const std::function<void()>& f, std::initializer_list<const char*> parts) {
    expect_invalid(f, parts);
    EXPECT_EQ(cache.slot_positions(0), slots0) << *parts.begin();
    EXPECT_EQ(cache.slot_positions(1), slots1) << *parts.begin();
    EXPECT_EQ(cache.next_position(0), 3) << *parts.begin();
    EXPECT_EQ(cache.next_position(1), 1) << *parts.begin();
  };
  // kv_append: two tokens of sequence 0 at 3, 4 are valid with these tensors.
  Tensor k = t({2, 2, 8}), v = t({2, 2, 8});
  using P = std::vector<std::int32_t>;
  // Without seq ids, every token is in sequence 0 (the cache holds two, so say so).
  auto app = [&](const Tensor& kk, const Tensor& vv, P pos, P seq = {}, KvAppendOptions o = {}) {
    if (seq.empty()) seq.assign(pos.size(), 0);
    cmd.kv_append(cache, kk, vv, pos, seq, o);
  };
  Tensor k_heads = t({2, 1, 8}), k_dim = t({2, 2, 6}), v_dim = t({2, 2, 6}), v3 = t({3, 2, 8}), k_rank2 = t({2, 16});
  Tensor v_f16 = t({2, 2, 8}, DType::f16), k_i32 = t({2, 2, 8}, DType::i32), k7 = t({7, 2, 8}), v7 = t({7, 2, 8});
  bad([&] { app(k_heads, v, {3, 4}); }, {"kv_append: k.shape[1] = 1", "cache n_kv_heads = 2"});
  bad([&] { app(k_dim, v, {3, 4}); }, {"k.shape[2] = 6", "cache head_dim = 8"});
  bad([&] { app(k, v_dim, {3, 4}); }, {"v.shape[2] = 6", "cache head_dim = 8"});
  bad([&] { app(k_rank2, v, {3, 4}); }, {"k.shape = [2, 16]", "rank 3"});
  bad([&] { app(k, v3, {3, 4}); }, {"v.shape[0] = 3", "k.shape[0] = 2"});
  bad([&] { app(k, v_f16, {3, 4}); }, {"v.dtype = f16", "k.dtype = f32"});
  bad([&] { app(k_i32, v, {3, 4}); }, {"k.dtype = i32", "f32 or f16"});
  bad([&] { app(k, v, {3, 4}, {0, 2}); }, {"seq_ids[1] = 2", "[0, n_seqs = 2)"});
  bad([&] { app(k, v, {3, 4}, {-1, 0}); }, {"seq_ids[0] = -1"});
  bad([&] { app(k, v, {3, 4}, {0}); }, {"seq_ids.size() = 1", "k.shape[0] = 2 (one per token)"});
  bad([&] { cmd.kv_append(cache, k, v, P{3, 4}); }, {"seq_ids = empty", "n_seqs = 2"});
  bad([&] { app(k, v, {3}); }, {"positions.size() = 1", "2"});
  bad([&] { app(k, v, {3, 5}); }, {"positions[1] = 5", "4: sequence 0 continues there", "consecutive"});
  bad([&] { app(k, v, {2, 3}); }, {"positions[0] = 2", "3: sequence 0 continues there"});
  bad([&] { app(k, v, {4, 3}); }, {"positions[0] = 4", "3: sequence 0"});
  bad([&] { app(k, v, {1, 3}, {1, 1}); }, {"positions[1] = 3", "2: sequence 1"});
  bad([&] { app(k, v, {3, -1}); }, {"positions[1] = -1", "[0, 2^31 - 1]"});
  bad(
      [&] {
        app(k7, v7, {1, 2, 3, 4, 5, 6, 7}, {1, 1, 1, 1, 1, 1, 1});
      },
      {"positions (sequence 1) = 7 new ring tokens", "at most capacity - n_sinks = 5", "keep_last"});
  auto other = make_backend(BackendKind::cpu);
  KvCache foreign = other->kv_cache(config([](auto&) {})), empty_cache;
  Tensor foreign_k = other->tensor({2, 2, 8}, DType::f32);
  bad([&] { cmd.kv_append(foreign, k, v, P{0, 1}, P{0, 0}); }, {"kv_append: cache = a cache of another backend"});
  bad([&] { cmd.kv_append(empty_cache, k, v, P{0, 1}, P{0, 0}); }, {"cache = an empty KvCache"});
  bad([&] { app(foreign_k, v, {3, 4}); }, {"k = a tensor of another backend"});
  bad([&] { cmd.kv_copy_sequence(cache, 2, 0); }, {"kv_copy_sequence: src = 2", "[0, n_seqs = 2)"});
  bad([&] { cmd.kv_copy_sequence(cache, 0, 9); }, {"dst = 9"});
  bad([&] { cmd.kv_copy_sequence(foreign, 0, 1); }, {"cache = a cache of another backend"});

  // Attention over the cache: 1 token, 2 heads on 2 kv heads, capacity 6.
  Tensor q = t({1, 2, 8}), scores = t({1, 2, 6}), probs = t({1, 2, 6}), out = t({1, 2, 8});
  const P qp{2}, kp{0, 1, 2, 3, 4, 5};
  auto sc = [&](const Tensor& qq, Tensor& ss, const AttentionTokens& tok, const AttentionConfig& cfg = {},
                const Tensor* mask = nullptr) { cmd.attn_scores(qq, cache, ss, tok, cfg, mask); };
  Tensor q_dim = t({1, 2, 6}), q3 = t({1, 3, 8}), s3 = t({1, 3, 6}), s5 = t({1, 2, 5});
  Tensor q_i32 = t({1, 2, 8}, DType::i32);
  Tensor mask5 = t({1, 5});
  bad([&] { sc(q_dim, scores, {qp}); }, {"attn_scores: q.shape[2] = 6", "cache head_dim = 8"});
  bad([&] { sc(q3, s3, {qp}); }, {"n_heads (q.shape[1]) = 3", "multiple of the cache's n_kv_heads = 2"});
  bad([&] { sc(q, scores, {qp, kp}); }, {"tokens.k_positions / k_seq_ids = given", "empty"});
  bad([&] { sc(q, scores, {.q_positions = qp, .k_seq_ids = P{0, 0, 0, 0, 0, 0}}); }, {"tokens.k_positions / k_seq_ids"});
  bad([&] { sc(q, scores, {.q_positions = qp, .q_seq_ids = P{2}}); }, {"tokens.q_seq_ids[0] = 2", "[0, n_seqs = 2)"});
  bad([&] { sc(q, scores, {.q_positions = qp, .q_seq_ids = P{-3}}); }, {"tokens.q_seq_ids[0] = -3", "[0, n_seqs = 2)"});
  bad([&] { sc(q, scores, {.q_positions = P{-1}}); }, {"tokens.q_positions[0] = -1"});
  bad([&] { sc(q, scores, {.q_positions = P{1, 2}}); }, {"tokens.q_positions.size() = 2", "1"});
  bad([&] { sc(q, s5, {qp}); }, {"scores.shape = [1, 2, 5]", "[1, 2, 6]"});
  bad([&] { sc(q, s3, {qp}); }, {"scores.shape = [1, 3, 6]", "[1, 2, 6]"});
  bad([&] { sc(q_i32, scores, {qp}); }, {"q.dtype = i32"});
  bad([&] { sc(q, scores, {qp}, {.window = 0u}); }, {"config.window = 0"});
  bad([&] { sc(q, scores, {qp}, {}, &mask5); }, {"mask.shape = [1, 5]", "[1, 6]"});
  bad([&] { cmd.attn_scores(q, foreign, scores, {qp}); }, {"attn_scores: cache = a cache of another backend"});
  bad([&] { cmd.attn_scores(q, empty_cache, scores, {qp}); }, {"cache = an empty KvCache"});
  bad([&] { cmd.attention(q, foreign, out, {qp}); }, {"attention: cache = a cache of another backend"});
  bad([&] { cmd.attention(q_dim, cache, out, {.q_positions = qp, .q_seq_ids = P{0}}); },
      {"attention: q.shape[2] = 6", "cache head_dim = 8"});
  bad([&] { cmd.attention(q, cache, out, {.q_positions = qp}); }, {"attention: tokens.q_seq_ids = empty", "n_seqs = 2"});
  bad([&] { cmd.attention(q, cache, scores, {.q_positions = qp, .q_seq_ids = P{0}}); },
      {"attention: out.shape = [1, 2, 6]", "[1, 2, 8]"});
  bad([&] { cmd.attention(q, cache, q, {.q_positions = qp, .q_seq_ids = P{0}}); }, {"attention: out = the tensor given as q"});
  Tensor p5 = t({1, 2, 5}), out_dim = t({1, 2, 6}), out2 = t({2, 2, 8});
  // Over a cache V is no argument: out and probs are named, against the cache's config (as
  // attention over a cache does), never v.
  KvCache narrow = b.kv_cache(config([](auto& c) { c.v_head_dim = 4; }));
  Tensor out_heads = t({1, 3, 8}), probs3 = t({1, 3, 6});
  auto wsum = [&](const Tensor& pp, const KvCache& cc, Tensor& oo, std::initializer_list<const char*> parts) {
    bad([&] { cmd.attn_weighted_sum(pp, cc, oo, {.q_seq_ids = P{0}}); }, parts);
    try {
      cmd.attn_weighted_sum(pp, cc, oo, {.q_seq_ids = P{0}});
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).find("v.shape"), std::string::npos) << e.what();
    }
  };
  wsum(p5, cache, out, {"attn_weighted_sum: probs.shape[2] = 5", "n_keys = the cache's capacity = 6"});
  wsum(probs, cache, out_dim, {"attn_weighted_sum: out.shape[2] = 6", "cache head_dim = 8"});
  wsum(probs3, cache, out_heads, {"n_heads (out.shape[1]) = 3", "multiple of the cache's n_kv_heads = 2"});
  wsum(probs, narrow, out, {"attn_weighted_sum: out.shape[2] = 8", "cache v_head_dim = 4"});
  bad([&] { cmd.attn_weighted_sum(probs, cache, out2); }, {"out.shape = [2, 2, 8]", "[1, 2, 8]"});
  bad([&] { cmd.attn_weighted_sum(probs, cache, out, {.q_seq_ids = P{2}}); }, {"q_seq_ids[0] = 2", "[0, n_seqs = 2)"});
  bad([&] { cmd.attn_weighted_sum(probs, cache, out, {.q_seq_ids = P{0, 0}}); }, {"q_seq_ids.size() = 2", "1"});
  bad([&] { cmd.attn_weighted_sum(probs, foreign, out); }, {"cache = a cache of another backend"});
  bad([&] { cmd.attn_weighted_sum(probs, cache, out, {.q_seq_ids = P{0}, .k_seq_ids = P{0}}); },
      {"attn_weighted_sum: tokens.k_positions / k_seq_ids = given", "empty"});
  bad(
      [&] {
        cmd.attn_weighted_sum(probs, cache, out, {.q_positions = P{2, 3}, .q_seq_ids = P{0}});
      },
      {"attn_weighted_sum: tokens.q_positions.size() = 2", "1"});

  // Sequence methods.
  bad([&] { cache.reset(2); }, {"reset: seq = 2", "[0, n_seqs = 2)"});
  bad([&] { cache.truncate(2, 0); }, {"truncate: seq = 2"});
  bad([&] { (void)cache.next_position(2); }, {"next_position: seq = 2"});
  bad([&] { (void)cache.length(5); }, {"length: seq = 5"});
  bad([&] { (void)cache.slot_positions(2); }, {"slot_positions: seq = 2"});
  bad([&] { cache.truncate(0, 4); }, {"truncate: position = 4", "[0, next_position = 3]"});
  bad([&] { cache.truncate(1, -1); }, {"truncate: position = -1", "[0, next_position = 1]"});
  bad([&] { (void)cache.slot(-1); }, {"slot: position = -1"});
  bad([&] { (void)empty_cache.config(); }, {"config: this = an empty KvCache"});
  bad([&] { empty_cache.reset(0); }, {"reset: this = an empty KvCache"});

  // Nothing recorded; the list and the cache still work.
  bad([&] { cmd.attn_scores(q, cache, scores, {.q_positions = P{2}}); }, {"tokens.q_seq_ids = empty", "n_seqs = 2"});
  bad([&] { cmd.attn_weighted_sum(probs, cache, out); }, {"q_seq_ids = empty", "n_seqs = 2"});
  EXPECT_EQ(cmd.stats().ops, 1u);
  app(k, v, {3, 4});
  cmd.attn_scores(q, cache, scores, {.q_positions = P{4}, .q_seq_ids = P{0}});
  cmd.submit_and_wait();
  EXPECT_EQ(cmd.stats().ops, 3u);
  EXPECT_EQ(cache.slot_positions(0), (P{0, 1, 2, 3, 4, -1}));
}

INSTANTIATE_TEST_SUITE_P(Backends, KvCacheErrors, ::testing::Values(BackendKind::cpu, BackendKind::vulkan), backend_name);

// Device limits: a tensor past maxStorageBufferRange, timestamps a device lacks.
TEST(VulkanErrors, DeviceLimits) {
  DeviceOptions options = test_options();
  DeviceLimits cap = spec_minimum_limits();
  cap.max_storage_buffer_range = 1 << 20;
  cap.timestamps = false;
  options.cap_limits = cap;
  std::string why;
  auto b = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(b, why);
  try {
    b->tensor({1 << 18, 2}, DType::f32);
    ADD_FAILURE() << "expected Error(out_of_memory)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1048576"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(b->tensor({1 << 18}, DType::f32));
  // An intermediate past the range (the three stages' scores, 2 MiB) names the op recording it.
  Tensor q = b->tensor({64, 8, 8}, DType::f32), k = b->tensor({1024, 8, 8}, DType::f32);
  Tensor out = b->tensor({64, 8, 8}, DType::f32);
  std::vector<std::int32_t> pos(64);
  std::iota(pos.begin(), pos.end(), 960);
  CommandList list = b->commands();
  try {
    list.attention(q, k, k, out, {.q_positions = pos}, {.path = AttentionPath::three_stages});
    ADD_FAILURE() << "expected Error(out_of_memory)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_memory);
    EXPECT_EQ(e.op(), "attention") << e.what();
  }
  try {
    b->commands({.timestamps = true});
    ADD_FAILURE() << "expected Error(unsupported)";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
  }
  expect_no_validation_messages(*b);
}

TEST(VulkanErrors, MakeBackendKind) { EXPECT_THROW(make_backend(static_cast<BackendKind>(7)), InvalidArgument); }

// A timeout of 0 ms would fail every submission; both kinds refuse it by name.
TEST(VulkanErrors, ZeroSubmitTimeout) {
  for (const BackendKind kind : {BackendKind::cpu, BackendKind::vulkan}) {
    expect_invalid([&] { make_backend(kind, {.submit_timeout_ms = 0}); },
                   {"create backend: options.submit_timeout_ms = 0; valid: [1, 4294967295] ms"});
  }
  EXPECT_NO_THROW(make_backend(BackendKind::cpu, {.submit_timeout_ms = 1}));
}

// Enum options cast from integers no value has (a binding's enums take any) are refused,
// not run as a mix of the named ones; so are names and paths with a NUL (the C calls
// reading them would end there: another device, another directory).
TEST(VulkanErrors, OptionsOutOfRange) {
  for (const BackendKind kind : {BackendKind::cpu, BackendKind::vulkan}) {
    expect_invalid([&] { make_backend(kind, {.device = std::string("llvm\0pipe", 9)}); },
                   {"create backend: options.device = \"llvm\\0pipe\"; valid: a string without NUL characters"});
    expect_invalid([&] { make_backend(kind, {.pipeline_cache_dir = std::string("dir\0", 4)}); },
                   {"options.pipeline_cache_dir = \"dir\\0\""});
    expect_invalid([&] { make_backend(kind, {.kernels = static_cast<KernelShape>(7)}); },
                   {"create backend: options.kernels = 7; valid: KernelShape::automatic, cpu or gpu"});
    expect_invalid([&] { make_backend(kind, {.log_level = static_cast<LogLevel>(9)}); },
                   {"create backend: options.log_level = 9; valid: LogLevel::off, error, warning or info"});
    expect_invalid([&] { make_backend(kind, {.matrix_units = static_cast<MatrixUnits>(9)}); },
                   {"create backend: options.matrix_units = 9; valid: MatrixUnits::automatic, off, on or standin"});
  }
  expect_invalid([&] { (void)list_devices({.device = std::string("llvm\0pipe", 9)}); },
                 {"list devices: options.device = \"llvm\\0pipe\""});
  EXPECT_NO_THROW(make_backend(BackendKind::cpu, {.kernels = KernelShape::gpu, .log_level = LogLevel::off}));
}

}  // namespace
}  // namespace vkattn::test
