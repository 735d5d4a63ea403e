// Shared by the sparse-mask tests (test_attention_sparse.cpp, test_attention_key_list.cpp):
// the heads they run (DeepSeek's unabsorbed widths, 16 query heads over one KV head), a
// Vulkan backend of a kernel shape with $VKATTN_DECODE set while it is made, and a latent
// cache of two sequences filled with keys.
#pragma once

#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "support/api.hpp"
#include "support/backends.hpp"
#include "support/fused_match.hpp"
#include "support/random.hpp"

namespace vkattn::test {

inline constexpr std::size_t kSparseDk = 192, kSparseDv = 128, kSparseHeads = 16;

// An op's output and how it ran.
struct SparseResult {
  std::vector<float> out;
  AttentionRun run;
};

// A Vulkan backend of |shape| (limits uncapped), made with $VKATTN_DECODE = |decode|; null
// with |why| set where Vulkan is unavailable (VKATTN_REQUIRE_BACKEND reports it).
inline std::shared_ptr<Backend> sparse_backend(KernelShape shape, const std::string& decode, std::string& why) {
  DeviceOptions options = shape_options(shape);
  options.cap_limits = uncapped();
  ScopedEnv env("VKATTN_DECODE", decode);
  return try_backend(BackendKind::vulkan, options, why);
}

// A backend of sparse_backend's asked for the group kernel: skipped or failed as
// VKATTN_REQUIRE_BACKEND says without Vulkan, skipped on subgroups the kernel cannot use.
#define VKATTN_REQUIRE_GROUP_KERNEL(ptr, why)               \
  do {                                                      \
    VKATTN_REQUIRE_BACKEND(ptr, why);                       \
    VKATTN_REQUIRE_EIGHT_LANES(*(ptr), "the group kernel"); \
  } while (false)

// A latent cache (K rows of 192, V their first 128) of two sequences, ring or |paged|
// (blocks of 16), each holding |filled| keys at positions 0.. (sequence s: normal(.., 10 + s)).
inline KvCache two_sequence_latent_cache(Backend& b, bool paged, std::size_t capacity, std::size_t filled) {
  KvCache cache = b.kv_cache({.n_seqs = 2,
                              .n_kv_heads = 1,
                              .head_dim = kSparseDk,
                              .capacity = capacity,
                              .v_head_dim = kSparseDv,
                              .latent = true,
                              .paged = paged,
                              .block_size = 16,
                              .n_blocks = paged ? 2 * capacity / 16 : 0});
  Tensor k = b.tensor({filled, 1, kSparseDk}, DType::f32);
  std::vector<std::int32_t> pos(filled);
  std::iota(pos.begin(), pos.end(), 0);
  for (std::int32_t s = 0; s < 2; ++s) {
    b.upload(k, normal(filled * kSparseDk, 10 + static_cast<std::uint32_t>(s)));
    CommandList fill = b.commands();
    fill.kv_append(cache, k, pos, std::vector<std::int32_t>(filled, s));
    fill.submit_and_wait();
  }
  return cache;
}

}  // namespace vkattn::test
