// The KV-cache test model: every sequence's whole K/V history, written from the documented
// rules (not from the library), and the reference that turns it into attention over plain
// tensors on the CPU backend. Shared by the KV-cache test files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "support/attention_io.hpp"
#include "support/backends.hpp"
#include "support/compare.hpp"
#include "support/expect_invalid.hpp"

namespace vkattn::test {

using Ids = std::vector<std::int32_t>;

// The most slots per block of the paged caches Layout::cache() makes while a test runs the
// ring cache's tests over paged caches (0: ring caches).
inline std::size_t& paged_layouts() {
  static std::size_t block_size = 0;
  return block_size;
}

struct Layout {
  std::size_t seqs = 1, heads = 2, kv_heads = 1, head_dim = 16, capacity = 8, sinks = 0;
  DType dtype = DType::f32;  // the cache's
  DType input = DType::f32;  // the k, v tensors given to kv_append
  DType query = DType::f32;  // q
  bool halves = false;       // draw K/V values that f16 holds exactly (no conversion differs)
  AttentionConfig attn{};

  // With paged_layouts() set, a paged cache of the same slots: blocks of the largest power
  // of two dividing capacity up to it and to half the capacity (a sequence of one block
  // would map its slots as a ring does, hiding a kernel that ignores the block table), and
  // a pool every sequence can fill at once.
  KvCacheConfig cache() const {
    KvCacheConfig c{
        .n_seqs = seqs, .n_kv_heads = kv_heads, .head_dim = head_dim, .capacity = capacity, .dtype = dtype, .n_sinks = sinks};
    if (paged_layouts() != 0) {
      c.paged = true;
      c.block_size = 1;
      while (c.block_size < paged_layouts() && 4 * c.block_size <= capacity && capacity % (2 * c.block_size) == 0) {
        c.block_size *= 2;
      }
      c.n_blocks = seqs * capacity / c.block_size;
    }
    return c;
  }
  std::size_t ring() const { return capacity - sinks; }
  std::size_t slot(std::int32_t p) const {  // the documented slot rule
    const auto u = static_cast<std::size_t>(p);
    return u < sinks ? u : sinks + (u - sinks) % ring();
  }
  // Tolerance against the plain-tensor reference: tight wherever both sides hold the same
  // K/V values; 2e-3 where an f32 input is converted to f16 by the kernel.
  double tol() const { return dtype == DType::f16 && input == DType::f32 && !halves ? 2e-3 : 1e-5; }
};

// New tokens of one call (or the queries of one attention: seq, pos, q).
struct Tokens {
  Ids seq, pos;
  std::vector<float> q, k, v;  // [n, heads, d]; [n, kv_heads, d] each
  std::size_t size() const { return pos.size(); }
};

struct Outputs {
  std::vector<float> scores, probs, out;  // [n, heads, capacity] in slot order; [n, heads, d]
};

// |x| cut to a value f16 holds exactly: 11 significant bits, or 0 below f16's normal range
// (N(0, 1) draws never reach its top).
inline float f16_exact(float x) {
  if (std::fabs(x) < 0x1p-14f) return 0.0f;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) & ~std::uint32_t{0x1fff});
}

struct Rng {  // N(0, 1); with |halves|, values that f16 holds exactly
  Rng(std::uint32_t seed, bool h) : gen(seed), halves(h) {}
  std::vector<float> draw(std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = halves ? f16_exact(dist(gen)) : dist(gen);
    return v;
  }
  std::mt19937 gen;
  bool halves;
  std::normal_distribution<float> dist{0.0f, 1.0f};
};

// The model: every sequence's whole history of K/V rows, position = index.
struct Model {
  Layout s;
  std::vector<std::vector<float>> k, v;
  explicit Model(const Layout& setup) : s(setup), k(setup.seqs), v(setup.seqs) {}

  std::size_t row() const { return s.kv_heads * s.head_dim; }
  std::int32_t length(std::size_t seq) const { return static_cast<std::int32_t>(k[seq].size() / row()); }
  void add(const Tokens& t) {
    for (std::size_t i = 0; i < t.size(); ++i) {
      const auto seq = static_cast<std::size_t>(t.seq[i]);
      ASSERT_EQ(t.pos[i], length(seq));
      k[seq].insert(k[seq].end(), &t.k[i * row()], &t.k[(i + 1) * row()]);
      v[seq].insert(v[seq].end(), &t.v[i * row()], &t.v[(i + 1) * row()]);
    }
  }
  void truncate(std::size_t seq, std::int32_t p) {
    k[seq].resize(static_cast<std::size_t>(p) * row());
    v[seq].resize(static_cast<std::size_t>(p) * row());
  }
  void copy(std::size_t src, std::size_t dst) {
    k[dst] = k[src];
    v[dst] = v[src];
  }
  // Positions a cache of this shape holds: the sinks and the last capacity - n_sinks.
  Ids held(std::size_t seq) const {
    const std::int32_t n = length(seq), sinks = static_cast<std::int32_t>(s.sinks);
    Ids h;
    for (std::int32_t p = 0; p < n; ++p) {
      if (p < sinks || p >= n - static_cast<std::int32_t>(s.ring())) h.push_back(p);
    }
    return h;
  }
  Ids slots(std::size_t seq) const {  // expected KvCache::slot_positions
    Ids out(s.capacity, -1);
    for (std::int32_t p : held(seq)) out[s.slot(p)] = p;
    return out;
  }
};

// Tokens continuing each listed sequence (one entry per token, in call order).
inline Tokens next_tokens(const Model& m, const Ids& seqs, Rng& rng) {
  Tokens t;
  std::vector<std::int32_t> next(m.s.seqs);
  for (std::size_t s = 0; s < m.s.seqs; ++s) next[s] = m.length(s);
  for (std::int32_t s : seqs) {
    t.seq.push_back(s);
    t.pos.push_back(next[static_cast<std::size_t>(s)]++);
  }
  t.q = rng.draw(seqs.size() * m.s.heads * m.s.head_dim);
  t.k = rng.draw(seqs.size() * m.row());
  t.v = rng.draw(seqs.size() * m.row());
  return t;
}

inline Tokens pick(const Tokens& t, const Layout& s, std::initializer_list<std::size_t> idx) {
  Tokens p;
  const std::size_t qr = s.heads * s.head_dim, kr = s.kv_heads * s.head_dim;
  for (std::size_t i : idx) {
    p.seq.push_back(t.seq[i]);
    p.pos.push_back(t.pos[i]);
    p.q.insert(p.q.end(), &t.q[i * qr], &t.q[(i + 1) * qr]);
    p.k.insert(p.k.end(), &t.k[i * kr], &t.k[(i + 1) * kr]);
    p.v.insert(p.v.end(), &t.v[i * kr], &t.v[(i + 1) * kr]);
  }
  return p;
}

// One command list: |pre| (if any), kv_append of |add| (if any), attention of |ask| (if any).
inline Outputs run(Backend& b, KvCache& cache, const Layout& s, const Tokens* add, const Tokens* ask,
                   const KvAppendOptions& options = {}, const std::function<void(CommandList&)>& pre = {}) {
  CommandList cmd = b.commands();
  if (pre) pre(cmd);
  Tensor k, v, q, scores, probs, out;
  if (add) {
    k = b.tensor({add->size(), s.kv_heads, s.head_dim}, s.input);
    v = b.tensor({add->size(), s.kv_heads, s.head_dim}, s.input);
    b.upload(k, add->k);
    b.upload(v, add->v);
    cmd.kv_append(cache, k, v, add->pos, add->seq, options);
  }
  if (ask) {
    const std::size_t n = ask->size();
    q = b.tensor({n, s.heads, s.head_dim}, s.query);
    out = b.tensor({n, s.heads, s.head_dim}, DType::f32);
    scores = b.tensor({n, s.heads, s.capacity}, DType::f32);
    probs = b.tensor({n, s.heads, s.capacity}, DType::f32);
    b.upload(q, ask->q);
    const AttentionTokens tokens{.q_positions = ask->pos, .q_seq_ids = ask->seq};
    cmd.attn_scores(q, cache, scores, tokens, without_sinks(s.attn));
    cmd.attn_softmax(scores, probs, s.attn);
    cmd.attn_weighted_sum(probs, cache, out, tokens);
  }
  cmd.submit_and_wait();
  if (!ask) return {};
  return {b.download(scores), b.download(probs), b.download(out)};
}

// The queries of |ask| over plain K/V tensors (the cache's dtype) holding each sequence's
// held positions, on the CPU backend; scores and probs moved to slot order.
inline Outputs reference(const Model& m, const Tokens& ask) {
  const Layout& s = m.s;
  auto cpu = make_backend(BackendKind::cpu);
  std::vector<float> kf, vf;
  Ids k_pos, k_seq;
  for (std::size_t seq = 0; seq < s.seqs; ++seq) {
    if (std::find(ask.seq.begin(), ask.seq.end(), static_cast<std::int32_t>(seq)) == ask.seq.end()) continue;
    for (std::int32_t p : m.held(seq)) {
      const auto at = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(p) * m.row());
      kf.insert(kf.end(), m.k[seq].begin() + at, m.k[seq].begin() + at + static_cast<std::ptrdiff_t>(m.row()));
      vf.insert(vf.end(), m.v[seq].begin() + at, m.v[seq].begin() + at + static_cast<std::ptrdiff_t>(m.row()));
      k_pos.push_back(p);
      k_seq.push_back(static_cast<std::int32_t>(seq));
    }
  }
  const std::size_t n = ask.size(), keys = k_pos.size(), h = s.heads, c = s.capacity;
  auto t = [&](Shape shape, DType d = DType::f32) { return cpu->tensor(shape, d); };
  Tensor q = t({n, h, s.head_dim}), k = t({keys, s.kv_heads, s.head_dim}, s.dtype);
  Tensor v = t({keys, s.kv_heads, s.head_dim}, s.dtype);
  Tensor scores = t({n, h, keys}), probs = t({n, h, keys}), out = t({n, h, s.head_dim});
  cpu->upload(q, ask.q);
  cpu->upload(k, kf);
  cpu->upload(v, vf);
  CommandList cmd = cpu->commands();
  cmd.attn_scores(q, k, scores, {ask.pos, k_pos, ask.seq, k_seq}, without_sinks(s.attn));
  cmd.attn_softmax(scores, probs, s.attn);
  cmd.attn_weighted_sum(probs, v, out);
  cmd.submit_and_wait();
  const std::vector<float> rs = cpu->download(scores), rp = cpu->download(probs);
  Outputs want{std::vector<float>(n * h * c, -kInf), std::vector<float>(n * h * c, 0.0f), cpu->download(out)};
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t hh = 0; hh < h; ++hh) {
      for (std::size_t j = 0; j < keys; ++j) {
        if (k_seq[j] != ask.seq[t]) continue;
        want.scores[(t * h + hh) * c + s.slot(k_pos[j])] = rs[(t * h + hh) * keys + j];
        want.probs[(t * h + hh) * c + s.slot(k_pos[j])] = rp[(t * h + hh) * keys + j];
      }
    }
  }
  return want;
}

inline void expect_near(const Outputs& got, const Outputs& want, const Layout& s, std::size_t n, double tol,
                        const std::string& what) {
  const Shape sc{n, s.heads, s.capacity}, o{n, s.heads, s.head_dim};
  EXPECT_TRUE(all_close(got.scores, want.scores, sc, tol, tol)) << what << ": scores";
  EXPECT_TRUE(all_close(got.probs, want.probs, sc, tol, 0)) << what << ": probs";
  EXPECT_TRUE(all_close(got.out, want.out, o, tol, tol)) << what << ": out";
}

// Appends |add| to cache and model, attends with |ask|, and checks outputs and bookkeeping.
inline Outputs step(Backend& b, KvCache& cache, Model& m, const Tokens& add, const Tokens& ask, const std::string& what,
                    const KvAppendOptions& options = {}, const std::function<void(CommandList&)>& pre = {}) {
  const Outputs got = run(b, cache, m.s, &add, &ask, options, pre);
  m.add(add);
  expect_near(got, reference(m, ask), m.s, ask.size(), m.s.tol(), what);
  for (std::size_t seq = 0; seq < m.s.seqs; ++seq) {
    EXPECT_EQ(cache.slot_positions(seq), m.slots(seq)) << what << ", sequence " << seq;
    EXPECT_EQ(cache.next_position(seq), m.length(seq)) << what;
    EXPECT_EQ(cache.length(seq), m.held(seq).size()) << what;
  }
  return got;
}

inline void decode(Backend& b, KvCache& cache, Model& m, Rng& rng, std::size_t steps, const std::string& what) {
  for (std::size_t i = 0; i < steps; ++i) {
    const Tokens t = next_tokens(m, {0}, rng);
    step(b, cache, m, t, t, what + ", position " + std::to_string(t.pos[0]));
  }
}

}  // namespace vkattn::test
