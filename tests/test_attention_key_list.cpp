// attention()'s mask as a key list (0.8): i32 [n_tokens, width], the keys each token may
// see (DeepSeek V3.2's and GLM-5's top-k indices), in place of an f32 mask of 0 there and
// -inf elsewhere. The group kernel (the GPU shape's, for big query groups) sorts each
// token's list and reads only those keys, at any number of tokens (prefill too); every
// other kernel reads mask rows made from the list on the device. Each case runs against the
// CPU backend and against the f32 mask the list stands for; lists hold padding (-1), other
// entries outside [0, n_keys) and repeats, which name no key or count once.
// `ctest -R SparseMask` selects these with the mask_keys tests.
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

// Token t's list names kept[t] distinct keys among the first |pick_from| (0: all), in a
// random order, then fills its |width| with what names nothing new: -1, an entry past
// n_keys, a negative one, a repeat of a listed key.
struct Lists {
  std::vector<std::int32_t> list;  // [n_tokens, width]
  std::vector<float> mask;         // the f32 mask it stands for: 0 at the listed keys
};
Lists top_k_lists(const std::vector<std::size_t>& kept, std::size_t width, std::size_t n_keys, std::uint32_t seed,
                  std::size_t pick_from = 0) {
  std::mt19937 g(seed);
  Lists l{std::vector<std::int32_t>(kept.size() * width), std::vector<float>(kept.size() * n_keys, -INFINITY)};
  std::vector<std::int32_t> keys(pick_from ? pick_from : n_keys);
  const std::int32_t filler[] = {-1, static_cast<std::int32_t>(n_keys + 5), -7, -1};
  for (std::size_t t = 0; t < kept.size(); ++t) {
    std::iota(keys.begin(), keys.end(), 0);
    std::shuffle(keys.begin(), keys.end(), g);
    std::int32_t* row = l.list.data() + t * width;
    for (std::size_t i = 0; i < width; ++i) {
      const bool repeat = i % 4 == 3 && kept[t] > 0;
      row[i] = i < kept[t] ? keys[i] : repeat ? keys[i % kept[t]] : filler[i % 4];
    }
    for (std::size_t i = 0; i < kept[t]; ++i) l.mask[t * n_keys + static_cast<std::size_t>(keys[i])] = 0.0f;
  }
  return l;
}

// One attention op over plain keys: q [T, heads, 192], k [N, 1, 192], v [N, 1, 128] (f16),
// the tokens at the last positions, causal; |list| (i32) or |mask| (f32, with mask_keys).
struct Plain {
  std::size_t n_tokens, n_keys, heads = kHeads;
  AttentionPath path = AttentionPath::fused;
};
OpResult run_plain(Backend& b, const Plain& c, const std::vector<std::int32_t>* list, const std::vector<float>* mask,
                   std::uint32_t mask_keys = 0, const std::vector<float>* v_rows = nullptr) {
  Tensor tq = b.tensor({c.n_tokens, c.heads, kDk}, DType::f32), tk = b.tensor({c.n_keys, 1, kDk}, DType::f16);
  Tensor tv = b.tensor({c.n_keys, 1, kDv}, DType::f16), out = b.tensor({c.n_tokens, c.heads, kDv}, DType::f32);
  b.upload(tq, normal(c.n_tokens * c.heads * kDk, 1));
  b.upload(tk, normal(c.n_keys * kDk, 2));
  b.upload(tv, v_rows ? *v_rows : normal(c.n_keys * kDv, 3));
  Tensor tm;
  if (list) {
    tm = b.tensor({c.n_tokens, list->size() / c.n_tokens}, DType::i32);
    b.upload(tm, *list);
  } else {
    tm = b.tensor({c.n_tokens, c.n_keys}, DType::f32);
    b.upload(tm, *mask);
  }
  std::vector<std::int32_t> q_pos(c.n_tokens);
  std::iota(q_pos.begin(), q_pos.end(), static_cast<std::int32_t>(c.n_keys - c.n_tokens));
  CommandList cmd = b.commands();
  cmd.attention(tq, tk, tv, out, {.q_positions = q_pos}, {.path = c.path, .mask_keys = mask_keys}, &tm);
  cmd.submit_and_wait();
  return {b.download(out), cmd.stats().attention.at(0)};
}

// The list on |gpu| against the CPU backend's reading of it and against the f32 mask it
// stands for on |gpu| (with the list's width as mask_keys: the same lists, so the same sums).
AttentionRun expect_list_agrees(const char* what, Backend& gpu, const Plain& c, const std::vector<std::size_t>& kept,
                                std::size_t width) {
  SCOPED_TRACE(what);
  const Lists l = top_k_lists(kept, width, c.n_keys, 7);
  auto cpu = make_backend(BackendKind::cpu);
  const OpResult want = run_plain(*cpu, c, &l.list, nullptr);
  const OpResult as_mask = run_plain(*cpu, c, nullptr, &l.mask);
  EXPECT_EQ(want.out, as_mask.out) << "the CPU backend reads a list as its mask";
  const OpResult got = run_plain(gpu, c, &l.list, nullptr);
  const OpResult mask = run_plain(gpu, c, nullptr, &l.mask, static_cast<std::uint32_t>(std::min(width, c.n_keys)));
  const Shape shape{c.n_tokens, c.heads, kDv};
  // f16 K and V, f32 scores and sums: as the decode kernels' other tests allow.
  EXPECT_TRUE(all_close(got.out, want.out, shape, 2e-4, 1e-4)) << "against the CPU backend";
  EXPECT_TRUE(all_close(got.out, mask.out, shape, 1e-6, 1e-5)) << "against the f32 mask";
  EXPECT_EQ(got.run.sparse, mask.run.sparse);
  expect_no_validation_messages(gpu);
  return got.run;
}

TEST(SparseMaskKeyList, GroupKernelReadsTheLists) {
  std::string why;
  auto gpu = sparse_backend(KernelShape::gpu, "kernel=group", why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  for (const auto& [what, c, kept, width] : std::vector<std::tuple<const char*, Plain, std::vector<std::size_t>, std::size_t>>{
           {"one token, 40 of 600 keys in 64", {1, 600}, {40}, 64},
           {"a list filled to its width", {1, 600}, {48}, 48},
           {"two tokens, one naming no key", {2, 600}, {40, 0}, 48},
           {"prefill: 6 tokens, a list each", {6, 300}, {30, 12, 50, 1, 64, 20}, 64},
           {"a width past n_keys", {2, 40}, {40, 25}, 100}}) {
    const AttentionRun run = expect_list_agrees(what, *gpu, c, kept, width);
    EXPECT_EQ(run.kernel, AttentionKernel::group) << what;
    EXPECT_TRUE(run.sparse) << what;
  }
  // 24 heads a token in tiles of 16 rows: a tile would read two tokens' lists, so the
  // group kernel reads mask rows made from them (every key).
  const AttentionRun across = expect_list_agrees("tiles across tokens", *gpu, {2, 300, 24}, {30, 20}, 32);
  EXPECT_EQ(across.kernel, AttentionKernel::group);
  EXPECT_FALSE(across.sparse);
}

// Sorts of one workgroup's words and of several (a width past a workgroup once took only
// the first 128 entries: a shared array sized by a constant the host could not set), the
// widest list (16 KiB of shared memory), widths that are no power of two.
TEST(SparseMaskKeyList, WidestList) {
  std::string why;
  auto gpu = sparse_backend(KernelShape::gpu, "kernel=group", why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  for (std::size_t w : {128, 129, 256, 300, 512}) {
    EXPECT_TRUE(expect_list_agrees(std::to_string(w).c_str(), *gpu, {1, 600}, {std::min(w, w / 2 + 80)}, w).sparse);
  }
  EXPECT_TRUE(expect_list_agrees("4096 wide", *gpu, {1, 5000}, {3000}, kMaxKeyList).sparse);
  EXPECT_TRUE(expect_list_agrees("1000 wide", *gpu, {2, 1200}, {700, 999}, 1000).sparse);
}

// The kernels that read every key get the list's mask rows: the CPU shape's three stages
// and lane-per-key kernel, the GPU shape's decode kernel (heads of 192 go to it by
// itself), at the spec minimums too.
TEST(SparseMaskKeyList, OtherKernelsReadMaskRows) {
  std::string why;
  auto cpu_shape = sparse_backend(KernelShape::cpu, "", why), gpu_shape = sparse_backend(KernelShape::gpu, "", why);
  VKATTN_REQUIRE_BACKEND(cpu_shape, why);
  VKATTN_REQUIRE_BACKEND(gpu_shape, why);
  DeviceOptions minimum = shape_options(KernelShape::gpu);
  minimum.cap_limits = test_spec_minimum();
  auto at_minimum = try_backend(BackendKind::vulkan, minimum, why);
  VKATTN_REQUIRE_BACKEND(at_minimum, why);
  const std::vector<std::size_t> kept{40, 0, 17, 33};
  const char* names[] = {"CPU shape", "GPU shape", "GPU shape at the minimums"};
  int at = 0;
  for (Backend* b : {cpu_shape.get(), gpu_shape.get(), at_minimum.get()}) {
    const char* name = names[at++];
    // 5000 keys: mask rows of two chunks (a workgroup fills 32 x its size keys of a row).
    for (const Plain& c : {Plain{1, 500, kHeads, AttentionPath::automatic}, Plain{1, 500, kHeads, AttentionPath::fused},
                           Plain{4, 500, 4, AttentionPath::fused}, Plain{2, 5000, 4, AttentionPath::automatic}}) {
      const std::vector<std::size_t> k(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(c.n_tokens));
      const AttentionRun run = expect_list_agrees(name, *b, c, k, 48);
      EXPECT_FALSE(run.sparse) << to_string(run.kernel);
    }
  }
}

// The keys a list leaves out are not read: V rows of infinity there leave the result that
// of rows of zeros (a weight of 0 times infinity is NaN wherever such a row is read).
TEST(SparseMaskKeyList, UnlistedKeysAreNotRead) {
  std::string why;
  auto gpu = sparse_backend(KernelShape::gpu, "kernel=group", why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  const Plain c{2, 300};
  const Lists l = top_k_lists({24, 31}, 40, c.n_keys, 9);
  std::vector<float> v = normal(c.n_keys * kDv, 3), v_inf = v;
  for (std::size_t j = 0; j < c.n_keys; ++j) {
    if (!std::isinf(l.mask[j]) || !std::isinf(l.mask[c.n_keys + j])) continue;  // listed by a token
    std::fill_n(v.begin() + static_cast<std::ptrdiff_t>(j * kDv), kDv, 0.0f);
    std::fill_n(v_inf.begin() + static_cast<std::ptrdiff_t>(j * kDv), kDv, INFINITY);
  }
  const OpResult want = run_plain(*cpu, c, &l.list, nullptr, 0, &v), got = run_plain(*gpu, c, &l.list, nullptr, 0, &v_inf);
  EXPECT_TRUE(got.run.sparse);
  EXPECT_TRUE(all_close(got.out, want.out, {c.n_tokens, kHeads, kDv}, 2e-4, 1e-4));
  const OpResult every_key = run_plain(*gpu, c, nullptr, &l.mask, 0, &v_inf);
  EXPECT_TRUE(std::any_of(every_key.out.begin(), every_key.out.end(), [](float x) { return std::isnan(x); }))
      << "reading every key should have met the rows of infinity";
  expect_no_validation_messages(*gpu);
}

// A latent cache of two sequences, ring and paged: each token's list names slots of its
// own sequence; a replay (set_tokens) with the lists rewritten reads the new ones.
class SparseMaskKeyListCache : public ::testing::TestWithParam<bool> {};

TEST_P(SparseMaskKeyListCache, LatentCacheAndReplay) {
  std::string why;
  auto gpu = sparse_backend(KernelShape::gpu, "kernel=group", why);
  VKATTN_REQUIRE_GROUP_KERNEL(gpu, why);
  auto cpu = make_backend(BackendKind::cpu);
  const std::size_t capacity = 256, filled = 200, width = 40;
  const Lists first = top_k_lists({32, 24}, width, capacity, 5, filled),
              later = top_k_lists({17, 40}, width, capacity, 6, filled);
  auto run = [&](Backend& b, bool replay) {
    KvCache cache = two_sequence_latent_cache(b, GetParam(), capacity, filled);
    Tensor q = b.tensor({2, kHeads, kDk}, DType::f32);
    Tensor list = b.tensor({2, width}, DType::i32), out = b.tensor({2, kHeads, kDv}, DType::f32);
    b.upload(q, normal(2 * kHeads * kDk, 12));
    b.upload(list, replay ? first.list : later.list);
    const std::vector<std::int32_t> q_seq{0, 1}, end(2, static_cast<std::int32_t>(filled - 1)), mid(2, 150);
    CommandList cmd = b.commands();
    cmd.attention(q, cache, out, {.q_positions = end, .q_seq_ids = q_seq}, {.path = AttentionPath::fused}, &list);
    cmd.submit_and_wait();
    if (replay) {  // the same op for other positions, over the lists the indexer wrote since
      b.upload(list, later.list);
      cmd.set_tokens(mid);
      cmd.submit_and_wait();
    } else {
      cmd = b.commands();
      cmd.attention(q, cache, out, {.q_positions = mid, .q_seq_ids = q_seq}, {.path = AttentionPath::fused}, &list);
      cmd.submit_and_wait();
    }
    return OpResult{b.download(out), cmd.stats().attention.at(0)};
  };
  const OpResult want = run(*cpu, false), fresh = run(*gpu, false), replayed = run(*gpu, true);
  EXPECT_EQ(replayed.run.kernel, AttentionKernel::group);
  EXPECT_TRUE(replayed.run.sparse);
  EXPECT_TRUE(all_close(replayed.out, want.out, {2, kHeads, kDv}, 2e-4, 1e-4)) << "against the CPU backend";
  EXPECT_EQ(replayed.out, fresh.out) << "against the op recorded for those positions";
  expect_no_validation_messages(*gpu);
}

INSTANTIATE_TEST_SUITE_P(RingAndPaged, SparseMaskKeyListCache, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Paged" : "Ring"; });

// A key list is [n_tokens, width <= kMaxKeyList], its own promise, and attention()'s alone.
TEST(SparseMaskKeyList, Refusals) {
  auto cpu = make_backend(BackendKind::cpu);
  Tensor q = cpu->tensor({2, 2, 8}, DType::f32), k = cpu->tensor({10, 1, 8}, DType::f32);
  Tensor out = cpu->tensor({2, 2, 8}, DType::f32), scores = cpu->tensor({2, 2, 10}, DType::f32);
  Tensor list = cpu->tensor({2, 4}, DType::i32), one_row = cpu->tensor({1, 4}, DType::i32);
  Tensor flat = cpu->tensor({8}, DType::i32), too_wide = cpu->tensor({2, kMaxKeyList + 1}, DType::i32);
  const std::vector<std::int32_t> q_pos{8, 9};
  CommandList cmd = cpu->commands();
  const AttentionTokens tok{.q_positions = q_pos};
  expect_invalid([&] { cmd.attention(q, k, k, out, tok, {}, &one_row); },
                 {"attention", "mask.shape", "[1, 4]", "[n_tokens = 2, width]", "[1, 4096]"});
  expect_invalid([&] { cmd.attention(q, k, k, out, tok, {}, &flat); }, {"mask.shape", "[8]"});
  expect_invalid([&] { cmd.attention(q, k, k, out, tok, {}, &too_wide); }, {"mask.shape", "[2, 4097]", "[1, 4096]"});
  expect_invalid([&] { cmd.attention(q, k, k, out, tok, {.mask_keys = 4}, &list); },
                 {"config.mask_keys", "4", "0 with a key list"});
  expect_invalid([&] { cmd.attn_scores(q, k, scores, tok, {}, &list); }, {"attn_scores", "mask.dtype", "i32", "f32"});
  Tensor halves = cpu->tensor({2, 10}, DType::f16);
  expect_invalid([&] { cmd.attention(q, k, k, out, tok, {}, &halves); },
                 {"attention", "mask.dtype", "f16", "f32, or i32 (a key list)"});
  KvCache cache = cpu->kv_cache({.n_kv_heads = 1, .head_dim = 8, .capacity = 6});
  expect_invalid([&] { cmd.attention(q, cache, out, tok, {}, &one_row); }, {"mask.shape", "[1, 4]"});
  EXPECT_EQ(cmd.stats().attention.size(), 0u);  // nothing recorded
}

// Where a key list must become mask rows that would pass a storage buffer's range, the
// op is refused by name when it is recorded (with the lists the group kernel reads, it is
// not: every tensor fits).
TEST(SparseMaskKeyList, MaskRowsPastTheBufferRange) {
  DeviceOptions options = shape_options(KernelShape::cpu);
  options.cap_limits = uncapped();
  options.cap_limits->max_storage_buffer_range = 8192;
  std::string why;
  auto gpu = try_backend(BackendKind::vulkan, options, why);
  VKATTN_REQUIRE_BACKEND(gpu, why);
  const std::size_t n_tokens = 64, n_keys = 64;  // mask rows of 16 KiB
  Tensor q = gpu->tensor({n_tokens, 1, 8}, DType::f32), k = gpu->tensor({n_keys, 1, 8}, DType::f16);
  Tensor out = gpu->tensor({n_tokens, 1, 8}, DType::f32), list = gpu->tensor({n_tokens, 4}, DType::i32);
  std::vector<std::int32_t> pos(n_tokens);
  std::iota(pos.begin(), pos.end(), 0);
  CommandList cmd = gpu->commands();
  try {
    cmd.attention(q, k, k, out, {.q_positions = pos}, {}, &list);
    ADD_FAILURE() << "mask rows of 16 KiB past a range of 8 KiB were recorded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cmd.stats().attention.size(), 0u);
}

}  // namespace
}  // namespace vkattn::test
