// A prefill in chunks over a ring that wraps, as the tiled, packed-f16 and matrix kernel
// tests run it: chunks of 21, 23 and 17 tokens into a cache of 40 slots with 2 sinks (8
// query heads over 2 KV heads of 64, the whole head rotated, stored or on read), each chunk
// appended and then attending with a window of 16, which reaches back into the chunks
// before it; the second chunk wraps the ring (38 slots after the sinks), so tiles of keys
// straddle its end.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "support/api.hpp"
#include "support/random.hpp"

namespace vkattn::test {

inline constexpr std::size_t kPrefillHeads = 8, kPrefillKvHeads = 2, kPrefillDim = 64;

// One chunk: its inputs (k and v before rotation), its first position, and its output on
// each backend.
struct PrefillChunk {
  std::size_t tokens;
  std::int32_t at;
  std::vector<float> q, k, v, got{}, want{};
  CommandStats stats{};  // the GPU's list (which kernel ran)
  Shape out_shape() const { return {tokens, kPrefillHeads, kPrefillDim}; }
};

// Runs the chunks on |gpu| and |cpu| (fresh caches of |dtype|, |rope|; the fused path at
// |precision|; inputs drawn from |seed| on) and hands each chunk to |check|.
inline void prefill_in_chunks_over_a_wrapping_ring(Backend& gpu, Backend& cpu, KvRope rope, DType dtype,
                                                   AttentionPrecision precision, std::uint32_t seed,
                                                   const std::function<void(const PrefillChunk&)>& check) {
  const KvCacheConfig config{.n_kv_heads = kPrefillKvHeads,
                             .head_dim = kPrefillDim,
                             .capacity = 40,
                             .dtype = dtype,
                             .n_sinks = 2,
                             .rope = rope,
                             .rope_config = {.rotary_dim = kPrefillDim}};
  KvCache gc = gpu.kv_cache(config), cc = cpu.kv_cache(config);
  std::int32_t at = 0;
  for (std::size_t n : {21u, 23u, 17u}) {
    const std::uint32_t s = seed + static_cast<std::uint32_t>(n);
    PrefillChunk c{.tokens = n,
                   .at = at,
                   .q = normal(n * kPrefillHeads * kPrefillDim, s),
                   .k = normal(n * kPrefillKvHeads * kPrefillDim, s + 1),
                   .v = normal(n * kPrefillKvHeads * kPrefillDim, s + 2)};
    std::vector<std::int32_t> pos(n);
    for (std::size_t i = 0; i < n; ++i) pos[i] = at + static_cast<std::int32_t>(i);
    auto attend = [&](Backend& b, KvCache& cache) {
      Tensor tq = b.tensor({n, kPrefillHeads, kPrefillDim}, DType::f32),
             tk = b.tensor({n, kPrefillKvHeads, kPrefillDim}, DType::f32),
             tv = b.tensor({n, kPrefillKvHeads, kPrefillDim}, DType::f32),
             out = b.tensor({n, kPrefillHeads, kPrefillDim}, DType::f32);
      b.upload(tq, c.q);
      b.upload(tk, c.k);
      b.upload(tv, c.v);
      CommandList cmd = b.commands();
      cmd.kv_append(cache, tk, tv, pos);
      cmd.attention(tq, cache, out, {.q_positions = pos}, {.window = 16u, .path = AttentionPath::fused, .precision = precision});
      cmd.submit_and_wait();
      if (&b == &gpu) c.stats = cmd.stats();
      return b.download(out);
    };
    c.got = attend(gpu, gc);
    c.want = attend(cpu, cc);
    check(c);
    at += static_cast<std::int32_t>(n);
  }
}

}  // namespace vkattn::test
