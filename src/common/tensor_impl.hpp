// The backend-independent part of a tensor, and the checked attention parameters ops
// take. Backends derive from TensorImpl; the public Tensor class only forwards.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "vkattn/command_list.hpp"
#include "vkattn/types.hpp"

namespace vkattn::detail {

class KvCacheImpl;

class TensorImpl {
 public:
  // |owner| identifies the backend that made the tensor; ops reject tensors of another.
  TensorImpl(const void* owner, Shape shape, DType dtype);
  virtual ~TensorImpl();

  const void* const owner;
  const Shape shape;
  const DType dtype;
  const std::size_t numel;
  const std::size_t words;  // 32-bit storage words

  // Host words into the tensor's storage, each run from its first word on, in one transfer
  // (one that fails writes none of them), after any pending submission that reads or
  // writes the tensor.
  struct WordRun {
    std::size_t first;
    std::span<const std::uint32_t> words;
  };
  virtual void store_runs(std::span<const WordRun> runs) = 0;
  void store(std::span<const std::uint32_t> words) {  // from word 0 (Backend::write_words)
    const WordRun run{0, words};
    store_runs({&run, 1});
  }
  // Whether this tensor, another than |other|, shares storage bytes with it: views of one
  // caller's buffer (vulkan.hpp: wrap) that meet. An op whose output shares bytes with an
  // input would read what it wrote.
  virtual bool overlaps(const TensorImpl&) const { return false; }
};

// Attention scores parameters after checking: defaults resolved, seq ids filled in.
struct ScoresParams {
  double scale = 1.0;
  bool causal = true;
  std::uint32_t window = 0;       // 0: no window
  bool window_symmetric = false;  // WindowType::symmetric: |pos_t - pos_j| <= window / 2
  std::uint32_t chunk = 0;        // 0: no chunks
  std::optional<QueryTemperature> temperature;
  double softcap = 0.0;             // 0: off
  std::vector<float> alibi_slopes;  // n_heads values, or empty
  // With keys from a KV cache, token t reads sequence q_seq[t]'s slots. The checks leave
  // k_pos, k_seq and k_cpos empty then (the Vulkan kernels read the cache's slot table on
  // the device); KvCacheImpl::fill_keys fills them from the host's, n_seqs * capacity
  // entries in slot order, k_seq -1 for empty slots.
  std::vector<std::int32_t> q_pos, k_pos, q_seq, k_seq;
  // KvRope::on_read: rotate q by q_cpos and each key by k_cpos (slot order) with |rope|;
  // |ring| holds n_sinks, then each sequence's oldest ring position (a key's in-cache
  // position follows from its position and these).
  bool rope_on_read = false;
  RopeConfig rope;
  std::vector<std::int32_t> q_cpos, k_cpos, ring;
};

// Whether query t sees key j by position alone (sequences aside): causal, the window,
// the chunk. The CPU reference and the caches' readability check use it; the kernels
// have its twin in attn_visible.glsl.
inline bool position_visible(const ScoresParams& p, std::int64_t q_pos, std::int64_t k_pos) {
  const std::int64_t distance = q_pos - k_pos;
  if (p.causal && distance < 0) return false;
  if (p.window != 0) {
    if (p.window_symmetric ? std::abs(distance) > p.window / 2 : distance >= p.window) return false;
  }
  return p.chunk == 0 || q_pos / p.chunk == k_pos / p.chunk;  // positions are >= 0
}
// The lowest key position query |q_pos| may see by the window and the chunk (0 where
// neither bounds it). A rule added to position_visible belongs here too.
inline std::int64_t lowest_visible_position(const ScoresParams& p, std::int64_t q_pos) {
  std::int64_t lo = 0;
  if (p.window != 0) lo = std::max<std::int64_t>(lo, p.window_symmetric ? q_pos - p.window / 2 : q_pos - p.window + 1);
  if (p.chunk != 0) lo = std::max<std::int64_t>(lo, q_pos / p.chunk * p.chunk);
  return lo;
}

// The query temperature t(pos) (1 without one), in double: the kernels read it as float.
inline double query_temperature(const ScoresParams& p, std::int32_t pos) {
  if (!p.temperature) return 1.0;
  const auto& t = *p.temperature;
  const std::int64_t steps = (std::int64_t{pos} + t.offset) / t.floor_scale;
  return 1.0 + t.scale * std::log1p(static_cast<double>(steps));
}

}  // namespace vkattn::detail
