// Steps over a KV cache for the tests of lists destroyed before they ran and of the order
// lists run in (test_kv_cache_unrun.cpp, test_kv_cache_order.cpp): one backend's step of
// kv_append and attention, recorded or run.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "support/api.hpp"
#include "support/random.hpp"

namespace vkattn::test::cache_steps {

constexpr std::size_t kHeads = 4, kKvHeads = 2, kDim = 16;

inline KvCacheConfig ring(std::size_t capacity, std::size_t n_seqs = 1) {
  return {.n_seqs = n_seqs, .n_kv_heads = kKvHeads, .head_dim = kDim, .capacity = capacity, .dtype = DType::f32};
}
inline KvCacheConfig paged(std::size_t capacity, std::size_t n_blocks, std::size_t n_seqs = 1) {
  KvCacheConfig c = ring(capacity, n_seqs);
  c.paged = true;
  c.block_size = 2;
  c.n_blocks = n_blocks;
  return c;
}

// One backend's step: append |n| tokens of sequence |seq| from |first| on and attend.
struct Step {
  Backend& b;
  KvCache& cache;
  std::int32_t first;
  std::size_t n, seq = 0;
  std::uint32_t seed = 1;

  std::vector<std::int32_t> positions() const {
    std::vector<std::int32_t> p(n);
    for (std::size_t t = 0; t < n; ++t) p[t] = first + static_cast<std::int32_t>(t);
    return p;
  }
  Tensor input(std::size_t heads, std::uint32_t salt) const {
    Tensor t = b.tensor({n, heads, kDim}, DType::f32);
    b.upload(t, normal(n * heads * kDim, seed * 97 + salt + static_cast<std::uint32_t>(first)));
    return t;
  }
  // Records the step into |list|; |bad_out| makes attention refuse after kv_append.
  void record(CommandList& list, Tensor& out, bool bad_out = false) const {
    const auto p = positions();
    const std::vector<std::int32_t> s(n, static_cast<std::int32_t>(seq));
    Tensor q = input(kHeads, 1), k = input(kKvHeads, 2), v = input(kKvHeads, 3);
    list.kv_append(cache, k, v, p, s);
    Tensor wrong = b.tensor({n, kHeads, kDim + 1}, DType::f32);
    list.attention(q, cache, bad_out ? wrong : out, {.q_positions = p, .q_seq_ids = s});
  }
  std::vector<float> run() const {
    CommandList list = b.commands();
    Tensor out = b.tensor({n, kHeads, kDim}, DType::f32);
    record(list, out);
    list.submit_and_wait();
    return b.download(out);
  }
  void drop_refused() const {
    CommandList list = b.commands();
    Tensor out = b.tensor({n, kHeads, kDim}, DType::f32);
    EXPECT_THROW(record(list, out, true), InvalidArgument);
  }
};

// A one-token step's attention output.
inline Tensor step_output(Backend& b) { return b.tensor({1, kHeads, kDim}, DType::f32); }

// A list with |step| recorded and not run (destroyed by resetting the optional).
inline std::optional<CommandList> recorded(const Step& step, Tensor& out) {
  std::optional<CommandList> list(step.b.commands());
  step.record(*list, out);
  return list;
}

// A list with |step| recorded and run (kept to be replayed, grown or dropped).
inline std::optional<CommandList> ran(const Step& step, Tensor& out) {
  std::optional<CommandList> list = recorded(step, out);
  list->submit_and_wait();
  return list;
}

// Attention of one query (the same data every time) at |position| of |seq|, recorded into
// |list|: its output, to download once the list ran.
inline Tensor record_read(Backend& b, CommandList& list, KvCache& cache, std::int32_t position, std::size_t seq = 0) {
  Tensor q = b.tensor({1, kHeads, kDim}, DType::f32), out = b.tensor({1, kHeads, kDim}, DType::f32);
  b.upload(q, normal(kHeads * kDim, 7));
  const std::vector<std::int32_t> p{position}, s{static_cast<std::int32_t>(seq)};
  list.attention(q, cache, out, {.q_positions = p, .q_seq_ids = s});
  return out;
}

// That attention run on its own.
inline std::vector<float> read(Backend& b, KvCache& cache, std::int32_t position, std::size_t seq = 0) {
  CommandList list = b.commands();
  Tensor out = record_read(b, list, cache, position, seq);
  list.submit_and_wait();
  return b.download(out);
}

inline std::vector<std::int32_t> slots(const KvCache& c, std::size_t seq = 0) {
  const auto s = c.slot_positions(seq);
  return {s.begin(), s.end()};
}

}  // namespace vkattn::test::cache_steps
