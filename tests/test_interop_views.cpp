// Views of one engine buffer (wrap) that share bytes: an op whose output shares bytes
// with one of its inputs would read what it wrote, so it is refused by name before it is
// recorded, as passing one tensor twice is; views side by side are what engines make (Q,
// K and V of one projection) and are taken. Views that share bytes across two ops are
// taken, in the order the ops were recorded.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/fused_match.hpp"
#include "support/interop.hpp"
#include "support/random.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {
namespace {

// An offset every view may start at: the engine's and vkattn's alignments, which powers of
// two all divide.
VkDeviceSize view_alignment(Engine& e, const Backend& gpu) {
  return std::max<VkDeviceSize>({e.limits().minStorageBufferOffsetAlignment, 16, gpu.limits().storage_offset_alignment});
}

TEST_F(Interop, ViewsSharingBytesAreRefused) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  // Each view is 256 bytes (f32 [4, 1, 16]) at a multiple of |step|.
  const VkDeviceSize align = view_alignment(e, *gpu), step = std::max<VkDeviceSize>(align, 256);
  EngineBuffer buf = e.buffer(8 * step, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, false);
  auto view = [&](VkDeviceSize offset, const Shape& shape = {4, 1, 16}) {
    return wrap(*gpu, buf.buffer, offset, 256, shape, DType::f32);
  };
  Tensor q = view(0), q_again = view(0), next = view(step), far = view(2 * step), out = view(3 * step);
  const std::vector<std::int32_t> pos = {0, 1, 2, 3};
  CommandList cmd = gpu->commands();
  expect_invalid([&] { cmd.rope(q, q_again, pos); }, {"rope", "k", "a view sharing bytes with q"});
  expect_invalid([&] { cmd.copy(q, q_again); }, {"copy", "dst", "a view sharing bytes with src"});
  const AttentionTokens tokens{pos, pos};
  expect_invalid([&] { cmd.attention(q, next, far, q_again, tokens); }, {"attention", "out", "sharing bytes with q"});
  Tensor on_k = view(step);
  expect_invalid([&] { cmd.attention(q, next, far, on_k, tokens); }, {"attention", "out", "sharing bytes with k"});
  if (align <= 128) {  // a view starting inside another
    Tensor inside_k = view(step + 128);
    expect_invalid([&] { cmd.attention(q, next, far, inside_k, tokens); }, {"attention", "out", "sharing bytes with k"});
    expect_invalid([&] { cmd.attn_softmax(next, inside_k); }, {"attn_softmax", "probs", "sharing bytes with scores"});
  }
  // A softmax in place is scores itself, not another view of its bytes.
  expect_invalid([&] { cmd.attn_softmax(q, q_again); }, {"attn_softmax", "probs", "a view sharing bytes with scores"});
  EXPECT_EQ(cmd.stats().ops, 0u);
  // Side by side: taken.
  cmd.attn_softmax(q, q);
  cmd.rope(q, next, pos);
  cmd.attention(q, next, far, out, tokens);
  cmd.copy(out, q);
  EXPECT_GT(cmd.stats().ops, 0u);
  EXPECT_EQ(cmd.stats().attention.size(), 1u);

  // A cache's K and V: not sharing bytes with each other, nor with what an op over the
  // cache writes or an append reads.
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 16, .capacity = 4, .dtype = DType::f32};
  const Shape kv_shape = {1, 4, 1, 16};
  Tensor ck = view(4 * step, kv_shape), cv = view(5 * step, kv_shape);
  expect_invalid([&] { wrap_kv_cache(*gpu, config, ck, view(4 * step, kv_shape)); },
                 {"wrap_kv_cache", "v", "a view sharing bytes with k"});
  KvCache cache = wrap_kv_cache(*gpu, config, ck, cv);
  Tensor over_k = view(4 * step), over_v = view(5 * step);
  CommandList ops = gpu->commands();
  expect_invalid([&] { ops.kv_append(cache, over_v, next, pos); }, {"kv_append", "k", "sharing bytes with the cache's V"});
  expect_invalid([&] { ops.kv_append(cache, next, over_k, pos); }, {"kv_append", "v", "sharing bytes with the cache's K"});
  EXPECT_EQ(ops.stats().ops, 0u);
  ops.kv_append(cache, next, far, pos);
  expect_invalid([&] { ops.attention(q, cache, over_k, {.q_positions = pos}); },
                 {"attention", "out", "sharing bytes with the cache's K"});
  expect_invalid([&] { ops.attention(q, cache, over_v, {.q_positions = pos}); },
                 {"attention", "out", "sharing bytes with the cache's V"});
  Tensor scores = wrap(*gpu, buf.buffer, 4 * step, 64, {4, 1, 4}, DType::f32);
  expect_invalid([&] { ops.attn_scores(q, cache, scores, {.q_positions = pos}); },
                 {"attn_scores", "scores", "sharing bytes with the cache's K"});
  Tensor probs = wrap(*gpu, buf.buffer, 6 * step, 64, {4, 1, 4}, DType::f32);
  expect_invalid([&] { ops.attn_weighted_sum(probs, cache, over_v, {.q_positions = pos}); },
                 {"attn_weighted_sum", "out", "sharing bytes with the cache's V"});
  ops.attention(q, cache, out, {.q_positions = pos});
  EXPECT_EQ(ops.stats().attention.size(), 1u);
  ops.submit_and_wait();
}

// A decode layer's rope and kv_append are recorded as one dispatch (design.md), which
// reads v while it rotates q and k and writes the cache while it rotates q: where v, or
// the cache's K or V, shares bytes with q or k, the two ops are recorded apart, in order,
// as for one tensor passed twice. Views side by side are fused.
TEST_F(Interop, ViewsSharingBytesAreNotFused) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  const VkDeviceSize step = std::max<VkDeviceSize>(view_alignment(e, *gpu), 512);
  EngineBuffer buf = e.buffer(
      8 * step, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, false);
  const Shape rows = {4, 1, 16}, kv_shape = {1, 8, 1, 16};  // 256 bytes; the cache's 512
  auto view = [&](VkDeviceSize offset, const Shape& shape) {
    return wrap(*gpu, buf.buffer, offset, shape == rows ? 256 : 512, shape, DType::f32);
  };
  const KvCacheConfig config{.n_kv_heads = 1, .head_dim = 16, .capacity = 8, .dtype = DType::f32};
  // Slots 1 to 4 (slot 0 holds position 0): a q over the cache's V rows 0 to 3 is rotated
  // where the tokens before have been appended, once fused.
  const std::vector<std::int32_t> pos = {1, 2, 3, 4};
  ScopedEnv fuse("VKATTN_FUSE", "on");
  // Records rope(q, k) and kv_append(cache, k, v) over a cache in the buffer's last two
  // steps, runs them, and returns the ops recorded and the cache's V rows 1 to 4 against
  // what v holds after the run.
  struct Run {
    std::size_t ops;
    std::vector<float> v_rows, v_after;
  };
  auto run = [&](VkDeviceSize q_at, VkDeviceSize v_at) {
    Tensor q = view(q_at, rows), k = view(step, rows), v = view(v_at, rows);
    KvCache cache = wrap_kv_cache(*gpu, config, view(6 * step, kv_shape), view(7 * step, kv_shape));
    Tensor first = gpu->tensor({1, 1, 16}, DType::f32);  // position 0 (slot 0), apart
    gpu->upload(first, normal(16, 4));
    CommandList prefill = gpu->commands();
    prefill.kv_append(cache, first, first, std::vector<std::int32_t>{0});
    prefill.submit_and_wait();
    gpu->upload(q, normal(64, 1));
    gpu->upload(k, normal(64, 2));
    if (v_at != q_at) gpu->upload(v, normal(64, 3));
    CommandList cmd = gpu->commands();
    cmd.rope(q, k, pos);
    cmd.kv_append(cache, k, v, pos);
    const std::size_t ops = cmd.stats().ops;
    cmd.submit_and_wait();
    const std::vector<float> cv = gpu->download(view(7 * step, kv_shape));
    return Run{ops, std::vector<float>(cv.begin() + 16, cv.begin() + 80), gpu->download(v)};
  };
  const Run side_by_side = run(0, 2 * step);
  EXPECT_EQ(side_by_side.ops, 1u) << "views side by side: one dispatch";
  EXPECT_EQ(side_by_side.v_rows, side_by_side.v_after);
  const Run v_on_q = run(0, 0);
  EXPECT_EQ(v_on_q.ops, 2u) << "v sharing q's bytes: recorded apart";
  EXPECT_EQ(v_on_q.v_rows, v_on_q.v_after) << "the cache's V holds q as rope left it";
  const Run q_on_cache = run(7 * step, 2 * step);
  EXPECT_EQ(q_on_cache.ops, 2u) << "q sharing the cache's V bytes: recorded apart";
  EXPECT_EQ(q_on_cache.v_rows, q_on_cache.v_after);
  expect_no_validation_messages(*gpu);
}

}  // namespace
}  // namespace vkattn::test
