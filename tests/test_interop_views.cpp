// Views of one engine buffer (wrap) that share bytes: an op whose output shares bytes
// with one of its inputs would read what it wrote, so it is refused by name before it is
// recorded, as passing one tensor twice is; views side by side are what engines make (Q,
// K and V of one projection) and are taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/backends.hpp"
#include "support/expect_invalid.hpp"
#include "support/interop.hpp"
#include "vkattn/vulkan.hpp"

namespace vkattn::test {
namespace {

TEST_F(Interop, ViewsSharingBytesAreRefused) {
  Engine& e = engine();
  auto gpu = make_backend(external(e), interop_options());
  // Each view is 256 bytes (f32 [4, 1, 16]) at a multiple of |step|, which every offset
  // alignment divides.
  const VkDeviceSize align =
      std::max<VkDeviceSize>({e.limits().minStorageBufferOffsetAlignment, 16, gpu->limits().storage_offset_alignment});
  const VkDeviceSize step = std::max<VkDeviceSize>(align, 256);
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
  }
  EXPECT_EQ(cmd.stats().ops, 0u);
  // Side by side: taken.
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

}  // namespace
}  // namespace vkattn::test
