// AttentionConfig::mask_keys, a promise that each token's mask row leaves few keys
// (DeepSeek V3.2's and GLM-5's top-k selection): the group decode kernel then reads only
// the keys the mask leaves. Each case runs the same op with the promise and without it on
// the GPU shape's group kernel (forced: these heads are narrower than those it takes by
// itself) and on the CPU backend: all three agree, whether the lists hold every token's
// keys, overflow (a row read whole), are empty, or span key splits; plain keys and a
// latent cache of two sequences. Rows of NaN at the keys the mask drops show that those
// are not read. `ctest -R SparseMask` selects these.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/api.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"
#include "support/sparse_cases.hpp"

namespace vkattn::test {
namespace {

constexpr std::size_t kDk = kSparseDk, kDv = kSparseDv, kHeads = kSparseHeads;
using OpResult = SparseResult;

// A mask [n_tokens, n_keys] of -inf but for kept[t] keys of row t, chosen at random among
// the first |pick_from| (0: all), each with a finite bias in [-1, 1].
std::vector<float> top_k_mask(const std::vector<std::size_t>& kept, std::size_t n_keys, std::uint32_t seed,
                              std::size_t pick_from = 0) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> bias(-1.0f, 1.0f);
  std::vector<float> mask(kept.size() * n_keys, -INFINITY);
  std::vector<std::size_t> keys(pick_from ? pick_from : n_keys);
  for (std::size_t t = 0; t < kept.size(); ++t) {
    std::iota(keys.begin(), keys.end(), std::size_t{0});
    std::shuffle(keys.begin(), keys.end(), g);
    for (std::size_t i = 0; i < kept[t]; ++i) mask[t * n_keys + keys[i]] = bias(g);
  }
  return mask;
}

std::shared_ptr<Backend> group_kernel(std::string& why, const char* more = "") {
  return sparse_backend(KernelShape::gpu, std::string("kernel=group") + more, why);
}

// A plain-keys case: each token's kept keys of n_keys, the promise, the query heads over
// one KV head, the precision.
struct Plain {
  std::vector<std::size_t> kept;
  std::size_t n_keys;
  std::uint32_t mask_keys;
  std::size_t heads = kHeads;
  AttentionPrecision precision = AttentionPrecision::f32;
};

// One attention op over plain keys: q [T, heads, 192], k [N, 1, 192], v [N, 1, 128] (f16),
// the tokens at the last positions, causal, with |mask| and |mask_keys|.
OpResult run_plain(Backend& b, const std::vector<float>& mask, const Plain& c, std::uint32_t mask_keys) {
  const std::size_t n_tokens = c.kept.size(), n_keys = c.n_keys;
  Tensor tq = b.tensor({n_tokens, c.heads, kDk}, DType::f32), tk = b.tensor({n_keys, 1, kDk}, DType::f16);
  Tensor tv = b.tensor({n_keys, 1, kDv}, DType::f16), tm = b.tensor({n_tokens, n_keys}, DType::f32);
  Tensor out = b.tensor({n_tokens, c.heads, kDv}, DType::f32);
  b.upload(tq, normal(n_tokens * c.heads * kDk, 1));
  b.upload(tk, normal(n_keys * kDk, 2));
  b.upload(tv, normal(n_keys * kDv, 3));
  b.upload(tm, mask);
  std::vector<std::int32_t> q_pos(n_tokens);
  std::iota(q_pos.begin(), q_pos.end(), static_cast<std::int32_t>(n_keys - n_tokens));
  CommandList cmd = b.commands();
  cmd.attention(tq, tk, tv, out, {.q_positions = q_pos},
                {.path = AttentionPath::fused, .precision = c.precision, .mask_keys = mask_keys}, &tm);
  cmd.submit_and_wait();
  return {b.download(out), cmd.stats().attention.at(0)};
}

// The op with the promise on the group kernel, without it there, and on the CPU backend
// (at f16_products its rounded-inputs oracle, within the packed kernels' bound:
// attention.md). Returns the run with the promise.
AttentionRun expect_agree(const char* what, Backend& gpu, const Plain& c, bool sparse = true) {
  SCOPED_TRACE(what);
  const std::vector<float> mask = top_k_mask(c.kept, c.n_keys, 7);
  auto cpu = make_backend(BackendKind::cpu);
  const OpResult want = run_plain(*cpu, mask, c, c.mask_keys);
  EXPECT_FALSE(want.run.sparse);
  const OpResult dense = run_plain(gpu, mask, c, 0);
  const OpResult got = run_plain(gpu, mask, c, c.mask_keys);
  EXPECT_EQ(got.run.kernel, AttentionKernel::group);
  EXPECT_EQ(got.run.sparse, sparse);
  EXPECT_EQ(got.run.precision, c.precision);
  EXPECT_FALSE(dense.run.sparse);
  const Shape shape{c.kept.size(), c.heads, kDv};
  if (c.precision == AttentionPrecision::f16_products) {
    // P's rounding and the f16 chains: (2u + 8u) max|v|, max|v| about 4 here.
    EXPECT_TRUE(all_close(got.out, want.out, shape, 2e-2, 0)) << "against the rounded-inputs oracle";
    EXPECT_TRUE(all_close(got.out, dense.out, shape, 2e-2, 0)) << "against every key read";
  } else {
    // f16 K and V, f32 scores and sums: as the decode kernels' other tests allow.
    EXPECT_TRUE(all_close(got.out, want.out, shape, 2e-4, 1e-4)) << "against the CPU backend";
    // The same keys in the same order: only the splits' merge may round differently.
    EXPECT_TRUE(all_close(got.out, dense.out, shape, 1e-6, 1e-5)) << "against every key read";
  }
  expect_no_validation_messages(gpu);
  return got.run;
}

TEST(SparseMask, ListsAgreeWithEveryKeyRead) {
  std::string why;
  auto gpu = group_kernel(why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  expect_agree("one token, 40 of 600 keys", *gpu, {{40}, 600, 40});
  expect_agree("one token, a looser promise", *gpu, {{40}, 600, 64});
  // Two tokens, a list each; the second's mask leaves no key (its rows are zeros).
  expect_agree("two tokens, one with no key", *gpu, {{40, 0}, 600, 48});
  // The first row leaves more than promised: read whole, the second from its list.
  expect_agree("a row past the promise", *gpu, {{100, 30}, 600, 48});
  // The promise at n_keys: the lists hold every key the mask leaves.
  expect_agree("every key left", *gpu, {{600}, 600, 600});
  // 24 heads a token in tiles of 16 rows: a tile would read two tokens' lists, so every
  // key is read (and said so).
  expect_agree("tiles across tokens", *gpu, {{40, 30}, 600, 48, 24}, false);
}

// The packed f16 group kernel (f16_products) reads the lists the same way.
TEST(SparseMask, PackedF16GroupKernel) {
  std::string why;
  auto gpu = group_kernel(why, ",packed=1");
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  if (!gpu->limits().shader_float16) GTEST_SKIP() << "no shaderFloat16: the packed kernel does not run";
  expect_agree("f16 products, 12 of 600 keys", *gpu, {{12, 20}, 600, 24, kHeads, AttentionPrecision::f16_products});
}

// Keys split across workgroups: splits whose share of a short list is empty merge as
// splits with no visible key.
TEST(SparseMask, ListsSpanKeySplits) {
  std::string why;
  auto gpu = group_kernel(why, ",keys_per_split=32");
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  EXPECT_GT(expect_agree("split keys", *gpu, {{40, 200}, 600, 200}).splits, 1u);
}

// A replayed list (set_tokens) reads the lists again for its new positions: as a list
// recorded at those positions.
TEST(SparseMask, ReplayedListReadsItsLists) {
  std::string why;
  auto gpu = group_kernel(why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  const std::size_t n_keys = 400;
  const std::vector<float> mask = top_k_mask({32}, n_keys, 4);
  Tensor q = gpu->tensor({1, kHeads, kDk}, DType::f32), k = gpu->tensor({n_keys, 1, kDk}, DType::f16);
  Tensor v = gpu->tensor({n_keys, 1, kDv}, DType::f16), tm = gpu->tensor({1, n_keys}, DType::f32);
  Tensor out = gpu->tensor({1, kHeads, kDv}, DType::f32), fresh_out = gpu->tensor({1, kHeads, kDv}, DType::f32);
  gpu->upload(q, normal(kHeads * kDk, 1));
  gpu->upload(k, normal(n_keys * kDk, 2));
  gpu->upload(v, normal(n_keys * kDv, 3));
  gpu->upload(tm, mask);
  const AttentionConfig config{.path = AttentionPath::fused, .mask_keys = 32};
  const std::vector<std::int32_t> first{static_cast<std::int32_t>(n_keys - 1)}, later{200};
  CommandList cmd = gpu->commands();
  cmd.attention(q, k, v, out, {.q_positions = first}, config, &tm);
  cmd.submit_and_wait();
  cmd.set_tokens(later);  // causal: the token now sees the kept keys up to 200
  cmd.submit_and_wait();
  EXPECT_TRUE(cmd.stats().attention.at(0).sparse);
  CommandList fresh = gpu->commands();
  fresh.attention(q, k, v, fresh_out, {.q_positions = later}, config, &tm);
  fresh.submit_and_wait();
  EXPECT_EQ(gpu->download(out), gpu->download(fresh_out));
  expect_no_validation_messages(*gpu);
}

// The keys the mask drops are not read at all: V rows of infinity there leave the result
// that of rows of zeros (a weight of 0 times infinity is NaN wherever such a row is read:
// reading every key lets it in).
TEST(SparseMask, DroppedKeysAreNotRead) {
  std::string why;
  auto gpu = group_kernel(why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  const std::size_t n_keys = 300;
  const std::vector<float> mask = top_k_mask({24}, n_keys, 9);
  std::vector<float> k = normal(n_keys * kDk, 2), v = normal(n_keys * kDv, 3);
  std::vector<float> v_inf = v;
  for (std::size_t j = 0; j < n_keys; ++j) {
    if (!std::isinf(mask[j])) continue;
    std::fill_n(k.begin() + static_cast<std::ptrdiff_t>(j * kDk), kDk, 0.0f);
    std::fill_n(v.begin() + static_cast<std::ptrdiff_t>(j * kDv), kDv, 0.0f);
    std::fill_n(v_inf.begin() + static_cast<std::ptrdiff_t>(j * kDv), kDv, INFINITY);
  }
  auto run = [&](Backend& b, const std::vector<float>& kv_k, const std::vector<float>& kv_v, std::uint32_t mask_keys) {
    Tensor tq = b.tensor({1, kHeads, kDk}, DType::f32), tk = b.tensor({n_keys, 1, kDk}, DType::f16);
    Tensor tv = b.tensor({n_keys, 1, kDv}, DType::f16), tm = b.tensor({1, n_keys}, DType::f32);
    Tensor out = b.tensor({1, kHeads, kDv}, DType::f32);
    b.upload(tq, normal(kHeads * kDk, 1));
    b.upload(tk, kv_k);
    b.upload(tv, kv_v);
    b.upload(tm, mask);
    const std::vector<std::int32_t> q_pos{static_cast<std::int32_t>(n_keys - 1)};
    CommandList cmd = b.commands();
    cmd.attention(tq, tk, tv, out, {.q_positions = q_pos}, {.path = AttentionPath::fused, .mask_keys = mask_keys}, &tm);
    cmd.submit_and_wait();
    return b.download(out);
  };
  const std::vector<float> want = run(*cpu, k, v, 0), got = run(*gpu, k, v_inf, 24);
  EXPECT_TRUE(all_close(got, want, {1, kHeads, kDv}, 2e-4, 1e-4));
  const std::vector<float> every_key = run(*gpu, k, v_inf, 0);
  EXPECT_TRUE(std::any_of(every_key.begin(), every_key.end(), [](float x) { return std::isnan(x); }))
      << "reading every key should have met the rows of infinity";
  expect_no_validation_messages(*gpu);
}

// A mask but no promise, and a promise the kernels do not read: the three stages (the CPU
// shape's default) run every key, and say so.
TEST(SparseMask, OtherKernelsReadEveryKey) {
  DeviceOptions options = shape_options(KernelShape::cpu);
  options.cap_limits = uncapped();
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  const std::vector<float> mask = top_k_mask({40}, 600, 3);
  auto cpu = make_backend(BackendKind::cpu);
  const Plain c{{40}, 600, 40};
  const OpResult want = run_plain(*cpu, mask, c, 40);
  const OpResult got = run_plain(*gpu, mask, c, 40);
  EXPECT_FALSE(got.run.sparse) << to_string(got.run.kernel);
  EXPECT_TRUE(all_close(got.out, want.out, {1, kHeads, kDv}, 2e-4, 1e-4));
}

// A latent cache of two sequences (V the first 128 dims of each 192-wide key row), ring
// and paged: each token reads its own sequence's slots, a list each, over the capacity's
// keys.
class SparseMaskCache : public ::testing::TestWithParam<bool> {};

TEST_P(SparseMaskCache, LatentCacheOfTwoSequences) {
  std::string why;
  auto gpu = group_kernel(why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  const std::size_t capacity = 256, filled = 200;
  const std::vector<float> mask = top_k_mask({32, 24}, capacity, 5, filled);  // slots that hold keys
  auto run = [&](Backend& b, std::uint32_t mask_keys) {
    KvCache cache = two_sequence_latent_cache(b, GetParam(), capacity, filled);
    Tensor q = b.tensor({2, kHeads, kDk}, DType::f32);
    Tensor tm = b.tensor({2, capacity}, DType::f32), out = b.tensor({2, kHeads, kDv}, DType::f32);
    b.upload(q, normal(2 * kHeads * kDk, 12));
    b.upload(tm, mask);
    const std::vector<std::int32_t> q_pos{static_cast<std::int32_t>(filled - 1), static_cast<std::int32_t>(filled - 1)};
    const std::vector<std::int32_t> q_seq{0, 1};
    CommandList cmd = b.commands();
    cmd.attention(q, cache, out, {.q_positions = q_pos, .q_seq_ids = q_seq},
                  {.path = AttentionPath::fused, .mask_keys = mask_keys}, &tm);
    cmd.submit_and_wait();
    return OpResult{b.download(out), cmd.stats().attention.at(0)};
  };
  const OpResult want = run(*cpu, 32), dense = run(*gpu, 0), got = run(*gpu, 32);
  EXPECT_EQ(got.run.kernel, AttentionKernel::group);
  EXPECT_TRUE(got.run.sparse);
  const Shape shape{2, kHeads, kDv};
  EXPECT_TRUE(all_close(got.out, want.out, shape, 2e-4, 1e-4)) << "against the CPU backend";
  EXPECT_TRUE(all_close(got.out, dense.out, shape, 1e-6, 1e-5)) << "against every key read";
  expect_no_validation_messages(*gpu);
}

INSTANTIATE_TEST_SUITE_P(RingAndPaged, SparseMaskCache, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Paged" : "Ring"; });

// The promise needs a mask, fits n_keys, and is attention()'s alone.
TEST(SparseMask, Refusals) {
  auto cpu = make_backend(BackendKind::cpu);
  Tensor q = cpu->tensor({1, 2, 8}, DType::f32), k = cpu->tensor({10, 1, 8}, DType::f32);
  Tensor mask = cpu->tensor({1, 10}, DType::f32), out = cpu->tensor({1, 2, 8}, DType::f32);
  Tensor scores = cpu->tensor({1, 2, 10}, DType::f32);
  const std::vector<std::int32_t> q_pos{9};
  CommandList cmd = cpu->commands();
  expect_invalid([&] { cmd.attention(q, k, k, out, {.q_positions = q_pos}, {.mask_keys = 4}); },
                 {"config.mask_keys", "4", "0 without a mask"});
  expect_invalid([&] { cmd.attention(q, k, k, out, {.q_positions = q_pos}, {.mask_keys = 11}, &mask); },
                 {"config.mask_keys", "11", "[0, n_keys = 10]"});
  expect_invalid([&] { cmd.attn_scores(q, k, scores, {.q_positions = q_pos}, {.mask_keys = 4}, &mask); },
                 {"attn_scores", "config.mask_keys", "attention() alone"});
  KvCache cache = cpu->kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 6});
  Tensor slots_mask = cpu->tensor({1, 6}, DType::f32);
  expect_invalid([&] { cmd.attention(q, cache, out, {.q_positions = q_pos}, {.mask_keys = 7}, &slots_mask); },
                 {"config.mask_keys", "[0, n_keys = 6]"});
  EXPECT_EQ(cmd.stats().attention.size(), 0u);  // nothing recorded
}

}  // namespace
}  // namespace vkattn::test
