// The CPU backend's ops: each call's arguments copied into a closure that runs the
// reference at submit.
#include <algorithm>
#include <bit>
#include <limits>

#include "common/half.hpp"
#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"
#include "common/shape_math.hpp"
#include "cpu/cpu_ops.hpp"
#include "cpu/reference_ops.hpp"

namespace vkattn::detail {
namespace {

// f16 tensors are widened to float, processed, and rounded back: the same storage
// rounding the GPU applies. q8_0 and q4_0 tensors (K and V) are dequantized.
float element(const CpuTensor& t, std::size_t i) {
  if (is_quantized(t.dtype)) return dequantize(t.dtype, t.data, t.numel, i);
  return t.dtype == DType::f16 ? half_to_float(static_cast<std::uint16_t>(t.data[i / 2] >> (16 * (i % 2))))
                               : std::bit_cast<float>(t.data[i]);
}

void store_element(CpuTensor& t, std::size_t i, float f) {
  if (t.dtype == DType::f16) {
    std::uint32_t& w = t.data[i / 2];
    const unsigned shift = 16 * (i % 2);
    w = (w & ~(0xffffu << shift)) | (std::uint32_t{float_to_half(f)} << shift);
  } else {
    t.data[i] = std::bit_cast<std::uint32_t>(f);
  }
}

std::vector<float> to_floats(const CpuTensor& t) {
  std::vector<float> f(t.numel);
  for (std::size_t i = 0; i < t.numel; ++i) f[i] = element(t, i);
  return f;
}

// A stage op's mask (f32 [n_tokens, n_keys]: key lists are attention()'s alone) as floats,
// or empty.
std::vector<float> mask_floats(const std::shared_ptr<TensorImpl>& mask) {
  return mask ? to_floats(cpu(mask)) : std::vector<float>{};
}

// Row |t| of attention()'s mask as f32 over |n_keys| keys (a key list expanded), or empty.
std::vector<float> mask_row(const std::shared_ptr<TensorImpl>& mask, std::size_t t, std::size_t n_keys) {
  if (!mask) return {};
  const CpuTensor& m = cpu(mask);
  const std::size_t width = m.shape[1];
  if (m.dtype != DType::i32) {
    std::vector<float> f(width);
    for (std::size_t j = 0; j < width; ++j) f[j] = element(m, t * width + j);
    return f;
  }
  std::vector<std::int32_t> list(width);
  for (std::size_t i = 0; i < width; ++i) list[i] = std::bit_cast<std::int32_t>(m.data[t * width + i]);
  return ref::key_list_mask(list, 1, width, n_keys);
}

void from_floats(CpuTensor& t, const std::vector<float>& f) {
  for (std::size_t i = 0; i < t.numel; ++i) store_element(t, i, f[i]);
}

// AttentionPrecision::f16_products: the inputs of the products rounded to f16 (to nearest
// even, as the GPU rounds them), everything after them exact: the "rounded inputs" oracle.
std::vector<float> rounded(std::vector<float> x, bool round) {
  if (round) {
    for (float& f : x) f = half_to_float(float_to_half(f));
  }
  return x;
}

// The three stage ops on host vectors (attention() runs them per token: cache_attention,
// plain_attention). Scores [n_tokens, n_heads, n_keys] of q against plain keys k.
std::vector<float> plain_scores(const std::shared_ptr<TensorImpl>& q, const std::shared_ptr<TensorImpl>& k,
                                const std::shared_ptr<TensorImpl>& mask, const ScoresParams& params) {
  std::vector<float> out(q->shape[0] * q->shape[1] * k->shape[0]);
  const std::vector<float> m = mask_floats(mask);
  ref::attn_scores(to_floats(cpu(q)), to_floats(cpu(k)), out, m, q->shape[0], q->shape[1], k->shape[1], k->shape[0], q->shape[2],
                   params);
  return out;
}

std::vector<float> softmax(const std::vector<float>& scores, std::size_t n_tokens, std::size_t n_heads,
                           const std::vector<float>& sinks) {
  std::vector<float> probs(scores.size());
  ref::attn_softmax(scores, probs, n_tokens, n_heads, scores.size() / (n_tokens * n_heads), sinks);
  return probs;
}

// out [n_tokens, n_heads, head_dim] from probabilities over plain values v.
std::vector<float> plain_weighted_sum(const std::vector<float>& probs, std::size_t n_tokens, std::size_t n_heads,
                                      const std::shared_ptr<TensorImpl>& v) {
  std::vector<float> o(n_tokens * n_heads * v->shape[2]);
  ref::attn_weighted_sum(probs, to_floats(cpu(v)), o, n_tokens, n_heads, v->shape[1], v->shape[0], v->shape[2]);
  return o;
}

// The first |n_slots| slots of one sequence of the cache's K or V |t| (stored rows of
// n_kv_heads heads of |stored| dims each), as the [n_slots, n_kv_heads, dims] the
// reference takes (|dims| <= |stored|: a latent cache's V is the start of each K head):
// the rows |rows| (KvCacheImpl::row_map, as the slot table has them when the op runs)
// says, zeros where a paged sequence holds no block. Read row by row, not the
// whole cache converted: the cost follows the slots read.
std::vector<float> sequence_rows(const KvCacheImpl& cache, const CpuTensor& t, const std::vector<std::int32_t>& rows,
                                 std::size_t seq, std::size_t n_slots, std::size_t stored, std::size_t dims) {
  const std::size_t c = cache.config.capacity, heads = cache.config.n_kv_heads;
  std::vector<float> out(n_slots * heads * dims, 0.0f);
  for (std::size_t j = 0; j < n_slots; ++j) {
    const std::int32_t r = rows[seq * c + j];
    if (r < 0) continue;
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t from = (static_cast<std::size_t>(r) * heads + h) * stored;
      for (std::size_t e = 0; e < dims; ++e) out[(j * heads + h) * dims + e] = element(t, from + e);
    }
  }
  return out;
}

// Copies |n| rows of |row| elements from row |from| to row |to| of a cache's K or V,
// exactly as stored (a quantized tensor's codes, then its scales half by half).
void copy_rows(const std::shared_ptr<TensorImpl>& t, std::size_t row, std::size_t from, std::size_t to, std::size_t n) {
  std::vector<std::uint32_t>& w = cpu(t).data;
  if (is_quantized(t->dtype)) {
    const std::size_t codes = value_words(row, t->dtype), blocks = row / kQuantBlock;
    std::copy_n(&w[from * codes], n * codes, &w[to * codes]);
    const std::size_t scales = 2 * scale_words_offset(t->numel, t->dtype);  // in halves
    for (std::size_t b = 0; b < n * blocks; ++b) set_half(w, scales + to * blocks + b, get_half(w, scales + from * blocks + b));
    return;
  }
  const std::size_t words = value_words(row, t->dtype);
  std::copy_n(&w[from * words], n * words, &w[to * words]);
}

// A paged cache's blocks (from, to) pairs: to's rows become from's, in K and V.
void copy_blocks(const KvCacheImpl& cache, const std::vector<std::int32_t>& pairs) {
  const auto& c = cache.config;
  for (std::size_t i = 0; i < pairs.size(); i += 2) {
    for (const auto& [t, d] : {std::pair{cache.k, c.head_dim}, std::pair{cache.v, value_head_dim(c)}}) {
      if (!t) continue;  // a latent cache's V, inside K
      copy_rows(t, c.n_kv_heads * d, static_cast<std::size_t>(pairs[i]) * c.block_size,
                static_cast<std::size_t>(pairs[i + 1]) * c.block_size, c.block_size);
    }
  }
}

// |p| without its per-token and per-slot arrays, what one token's ScoresParams starts from:
// copied once per op, so that each token then costs its own keys, not every sequence's
// slots.
ScoresParams without_arrays(const ScoresParams& p) {
  ScoresParams s = p;
  for (std::vector<std::int32_t>* v : {&s.q_pos, &s.k_pos, &s.q_seq, &s.k_seq, &s.q_cpos, &s.k_cpos}) {
    v->clear();
    v->shrink_to_fit();
  }
  return s;
}

// Token |t|'s scores [n_heads, b] over the first |b| slots of its sequence |seq| (|qf|: all
// of q as floats; |m|: its mask row over those slots, or empty; |base|: without_arrays(params)).
std::vector<float> token_scores(const std::vector<float>& qf, std::size_t n_heads, const KvCacheImpl& cache,
                                const std::vector<std::int32_t>& rows, std::span<const float> m, const ScoresParams& params,
                                const ScoresParams& base, std::size_t t, std::size_t seq, std::size_t b, bool round) {
  const auto& c = cache.config;
  const std::size_t d = c.head_dim, n = c.capacity;
  const auto first = static_cast<std::ptrdiff_t>(seq * n);
  ScoresParams one = base;
  one.q_pos = {params.q_pos[t]};
  one.q_seq = {params.q_seq[t]};
  one.k_pos.assign(params.k_pos.begin() + first, params.k_pos.begin() + first + static_cast<std::ptrdiff_t>(b));
  one.k_seq.assign(params.k_seq.begin() + first, params.k_seq.begin() + first + static_cast<std::ptrdiff_t>(b));
  const auto q_at = qf.begin() + static_cast<std::ptrdiff_t>(t * n_heads * d);
  std::vector<float> q_row(q_at, q_at + static_cast<std::ptrdiff_t>(n_heads * d));
  std::vector<float> keys = sequence_rows(cache, cpu(cache.k), rows, seq, b, d, d);
  if (params.rope_on_read) {  // KvRope::on_read: rotate by in-cache positions
    const std::vector<std::int32_t> q_cpos = {params.q_cpos[t]};
    const std::span<const std::int32_t> k_cpos(&params.k_cpos[seq * n], b);
    ref::rope(q_row, 1, n_heads, d, q_cpos, params.rope);
    ref::rope(keys, b, c.n_kv_heads, d, k_cpos, params.rope);
  }
  q_row = rounded(std::move(q_row), round);  // after the rotation, as the GPU rounds them
  keys = rounded(std::move(keys), round);
  std::vector<float> held(n_heads * b);
  ref::attn_scores(q_row, keys, held, m, 1, n_heads, c.n_kv_heads, b, d, one);
  return held;
}

// Scores [n_tokens, n_heads, capacity] over a cache (the stage op's output): one token at a
// time against its own sequence's slots.
std::vector<float> cache_scores(const std::shared_ptr<TensorImpl>& q, const KvCacheImpl& cache,
                                const std::vector<std::int32_t>& rows, const std::shared_ptr<TensorImpl>& mask,
                                const ScoresParams& params) {
  const std::size_t n_heads = q->shape[1], n = cache.config.capacity;
  const std::vector<float> qf = to_floats(cpu(q));
  const std::vector<float> mf = mask_floats(mask);
  const ScoresParams base = without_arrays(params);
  // Empty slots score -inf (as the reference gives a slot of no sequence).
  std::vector<float> out(q->shape[0] * n_heads * n, -std::numeric_limits<float>::infinity());
  for (std::size_t t = 0; t < q->shape[0]; ++t) {
    const auto seq = static_cast<std::size_t>(params.q_seq[t]);
    const std::size_t b = occupancy_bound(params.k_pos, seq, n);
    if (b == 0) continue;  // an empty sequence: every slot -inf
    const std::span<const float> m = mf.empty() ? std::span<const float>{} : std::span<const float>(&mf[t * n], b);
    const std::vector<float> held = token_scores(qf, n_heads, cache, rows, m, params, base, t, seq, b, false);
    for (std::size_t h = 0; h < n_heads; ++h) std::copy_n(held.data() + h * b, b, out.data() + (t * n_heads + h) * n);
  }
  return out;
}

// out [n_tokens, n_heads, v_head_dim] from caller-given probabilities over every slot of a
// cache (the stage op), each token reading its own sequence's values (V, or a latent
// cache's first v_head_dim dims of each K head).
std::vector<float> cache_weighted_sum(const std::vector<float>& probs, std::size_t n_tokens, std::size_t n_heads,
                                      const KvCacheImpl& cache, const std::vector<std::int32_t>& rows,
                                      const std::vector<std::int32_t>& q_seq) {
  const auto& c = cache.config;
  const std::size_t d = value_head_dim(c), n = c.capacity;
  const CpuTensor& values = cpu(cache.v ? cache.v : cache.k);
  std::vector<float> o(n_tokens * n_heads * d);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    const auto seq = static_cast<std::size_t>(q_seq[t]);
    const std::vector<float> v = sequence_rows(cache, values, rows, seq, n, cache.v ? d : c.head_dim, d);
    ref::attn_weighted_sum(std::span<const float>(&probs[t * n_heads * n], n_heads * n), v,
                           std::span<float>(&o[t * n_heads * d], n_heads * d), 1, n_heads, c.n_kv_heads, n, d);
  }
  return o;
}

// attention() over a cache, one query token at a time: its temporaries are one token's
// scores and keys (n_heads x the keys held), never [n_tokens, n_heads, capacity], so a long
// prefill chunk over a large cache takes no more host memory than its tensors. Each token
// stops at its sequence's occupancy bound (the probabilities past it are 0).
std::vector<float> cache_attention(const std::shared_ptr<TensorImpl>& q, const KvCacheImpl& cache,
                                   const std::vector<std::int32_t>& rows, const std::shared_ptr<TensorImpl>& mask,
                                   const ScoresParams& params, const std::vector<float>& sinks, bool round) {
  const auto& c = cache.config;
  const std::size_t n_tokens = q->shape[0], n_heads = q->shape[1], d = value_head_dim(c), n = c.capacity;
  const std::vector<float> qf = to_floats(cpu(q));
  const CpuTensor& values = cpu(cache.v ? cache.v : cache.k);
  const ScoresParams base = without_arrays(params);
  std::vector<float> o(n_tokens * n_heads * d);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    const auto seq = static_cast<std::size_t>(params.q_seq[t]);
    const std::size_t b = occupancy_bound(params.k_pos, seq, n);
    if (b == 0) continue;  // an empty sequence: zeros, as all-zero probabilities give
    const std::vector<float> mrow = mask_row(mask, t, n);
    const std::span<const float> m = mrow.empty() ? std::span<const float>{} : std::span<const float>(mrow.data(), b);
    const std::vector<float> scores = token_scores(qf, n_heads, cache, rows, m, params, base, t, seq, b, round);
    std::vector<float> probs(scores.size());
    ref::attn_softmax(scores, probs, 1, n_heads, b, sinks);
    const std::vector<float> v = rounded(sequence_rows(cache, values, rows, seq, b, cache.v ? d : c.head_dim, d), round);
    ref::attn_weighted_sum(probs, v, std::span<float>(&o[t * n_heads * d], n_heads * d), 1, n_heads, c.n_kv_heads, b, d);
  }
  return o;
}

// attention() over plain K and V, one query token at a time as cache_attention.
std::vector<float> plain_attention(const std::shared_ptr<TensorImpl>& q, const std::shared_ptr<TensorImpl>& k,
                                   const std::shared_ptr<TensorImpl>& v, const std::shared_ptr<TensorImpl>& mask,
                                   const ScoresParams& params, const std::vector<float>& sinks, bool round) {
  const std::size_t n_tokens = q->shape[0], n_heads = q->shape[1], d = q->shape[2], n_keys = k->shape[0];
  const std::size_t kv_heads = k->shape[1], dv = v->shape[2];
  const std::vector<float> qf = rounded(to_floats(cpu(q)), round), kf = rounded(to_floats(cpu(k)), round),
                           vf = rounded(to_floats(cpu(v)), round);
  std::vector<float> o(n_tokens * n_heads * dv), scores(n_heads * n_keys), probs(n_heads * n_keys);
  ScoresParams one = params;
  for (std::size_t t = 0; t < n_tokens; ++t) {
    one.q_pos = {params.q_pos[t]};
    one.q_seq = {params.q_seq[t]};
    const std::vector<float> m = mask_row(mask, t, n_keys);
    ref::attn_scores(std::span<const float>(&qf[t * n_heads * d], n_heads * d), kf, scores, m, 1, n_heads, kv_heads, n_keys, d,
                     one);
    ref::attn_softmax(scores, probs, 1, n_heads, n_keys, sinks);
    ref::attn_weighted_sum(probs, vf, std::span<float>(&o[t * n_heads * dv], n_heads * dv), 1, n_heads, kv_heads, n_keys, dv);
  }
  return o;
}

using Ints = std::vector<std::int32_t>;

// The cache's slot table (KvCacheImpl::slots) as this backend's device: its kv_append and
// kv_copy_sequence ops write it as they run, the host publishes changes outside lists
// there, and attention reads it when it runs, as on Vulkan (a list recorded before a reset
// and run after it reads what the cache holds then, not what it held when recorded).
std::span<std::int32_t> device_slots(const KvCacheImpl& cache) {
  std::vector<std::uint32_t>& w = cpu(cache.slots).data;
  return {reinterpret_cast<std::int32_t*>(w.data()), w.size()};  // int32 and uint32 may alias
}

// The rows the cache's slots map to and |recorded| with its keys, as the op runs.
struct KeysNow {
  Ints rows;
  ScoresParams params;
};
KeysNow keys_now(const KvCacheImpl& cache, const ScoresParams& recorded) {
  const auto words = device_slots(cache);
  KeysNow now{cache.row_map(words), recorded};
  cache.fill_keys(now.params, words);
  return now;
}

// kv_append.comp's write_slot for each kept token: its position in its slot, its
// sequence's occupancy bound raised past the slot, a paged cache's table entry its block.
void write_slots(const KvCacheImpl& cache, const Ints& rows, const Ints& positions, const Ints& meta_rows) {
  const auto w = device_slots(cache);
  const std::size_t stride = cache.meta_stride();
  for (std::size_t t = 0; t < rows.size(); ++t) {
    if (rows[t] < 0) continue;
    const auto word = static_cast<std::size_t>(cache.config.paged ? meta_rows[t] : rows[t]);
    const std::size_t seq = word / stride, slot = word % stride;
    w[word] = positions[t];
    std::int32_t& bound = w[cache.bound_offset() + seq];
    bound = std::max(bound, static_cast<std::int32_t>(slot + 1));
    if (cache.config.paged) w[seq * stride + cache.config.capacity + (slot >> cache.block_shift)] = rows[t] >> cache.block_shift;
  }
}

CpuOp op(const CopyCall& c) {
  return {"copy", [src = c.src, dst = c.dst] { cpu(dst).data = cpu(src).data; }};
}

CpuOp op(const RopeCall& c) {
  return {"rope", [x = c.x, k = c.k, positions = Ints(c.positions.begin(), c.positions.end()), config = c.config] {
            for (const auto& tensor : {x, k}) {
              if (!tensor) continue;
              CpuTensor& t = cpu(tensor);
              std::vector<float> f = to_floats(t);
              ref::rope(f, t.shape[0], t.shape[1], t.shape[2], positions, config);
              from_floats(t, f);
            }
          }};
}

CpuOp op(const ScoresCall& c) {
  if (c.keys.cache) {
    return {"attn_scores", [q = c.q, cache = c.keys.cache, scores = c.scores, mask = c.mask, params = c.params] {
              const KeysNow now = keys_now(*cache, params);
              from_floats(cpu(scores), cache_scores(q, *cache, now.rows, mask, now.params));
            }};
  }
  return {"attn_scores", [q = c.q, k = c.keys.k, scores = c.scores, mask = c.mask, params = c.params] {
            from_floats(cpu(scores), plain_scores(q, k, mask, params));
          }};
}

CpuOp op(const SoftmaxCall& c) {
  return {"attn_softmax", [scores = c.scores, probs = c.probs, sinks = c.sinks] {
            from_floats(cpu(probs), softmax(to_floats(cpu(scores)), scores->shape[0], scores->shape[1], sinks));
          }};
}

CpuOp op(const WeightedSumCall& c) {
  if (c.values.cache) {
    return {"attn_weighted_sum", [probs = c.probs, cache = c.values.cache, out = c.out, q_seq = c.q_seq] {
              const Ints rows = cache->row_map(device_slots(*cache));
              from_floats(cpu(out),
                          cache_weighted_sum(to_floats(cpu(probs)), probs->shape[0], probs->shape[1], *cache, rows, q_seq));
            }};
  }
  return {"attn_weighted_sum", [probs = c.probs, v = c.values.v, out = c.out] {
            from_floats(cpu(out), plain_weighted_sum(to_floats(cpu(probs)), out->shape[0], out->shape[1], v));
          }};
}

CpuOp op(const AppendCall& a) {
  return {"kv_append",
          [cache = a.cache, k = a.k, v = a.v, dst_rows = Ints(a.dst_rows.begin(), a.dst_rows.end()),
           positions = Ints(a.positions.begin(), a.positions.end()), meta_rows = Ints(a.meta_rows.begin(), a.meta_rows.end()),
           copies = Ints(a.copies.begin(), a.copies.end())] {
            const auto& c = cache->config;
            copy_blocks(*cache, copies);  // shared blocks the tokens write, copied first
            write_slots(*cache, dst_rows, positions, meta_rows);
            for (auto [src, dst] : {std::pair{k, cache->k}, std::pair{v, cache->v}}) {
              if (!src) continue;                     // a latent cache: K alone
              const std::size_t row = src->shape[2];  // K's or V's head dim
              const std::vector<float> in = to_floats(cpu(src));
              if (is_quantized(c.dtype)) {  // each row's blocks, quantized in place
                CpuTensor& d = cpu(dst);
                const std::size_t blocks = c.n_kv_heads * row / kQuantBlock;
                for (std::size_t t = 0; t < dst_rows.size(); ++t) {
                  if (dst_rows[t] < 0) continue;
                  for (std::size_t b = 0; b < blocks; ++b) {
                    store_block(c.dtype, std::span<const float>(in).subspan((t * blocks + b) * kQuantBlock).first<kQuantBlock>(),
                                d.data, d.numel, static_cast<std::size_t>(dst_rows[t]) * blocks + b);
                  }
                }
                continue;
              }
              CpuTensor& d = cpu(dst);  // row by row: the cost follows the tokens, not the cache
              const std::size_t n = c.n_kv_heads * row;
              for (std::size_t t = 0; t < dst_rows.size(); ++t) {
                if (dst_rows[t] < 0) continue;
                const auto to = static_cast<std::size_t>(dst_rows[t]) * n;
                for (std::size_t e = 0; e < n; ++e) store_element(d, to + e, in[t * n + e]);
              }
            }
          }};
}

CpuOp op(const CopySequenceCall& a) {
  return {"kv_copy_sequence", [cache = a.cache, src = a.src, dst = a.dst, fork = a.fork] {
            const auto& c = cache->config;
            const auto w = device_slots(*cache);  // the slot table's words, as the Vulkan op copies them
            const std::size_t stride = cache->meta_stride(), bounds = cache->bound_offset();
            std::copy_n(&w[src * stride], stride, &w[dst * stride]);
            w[bounds + dst] = w[bounds + src];
            if (c.paged && fork.entry >= 0) w[dst * stride + c.capacity + static_cast<std::size_t>(fork.entry)] = fork.to;
            if (c.paged) {  // the other blocks are shared
              if (fork.from >= 0) copy_blocks(*cache, {fork.from, fork.to});
              return;
            }
            for (const auto& [t, d] : {std::pair{cache->k, c.head_dim}, std::pair{cache->v, value_head_dim(c)}}) {
              if (!t) continue;  // a latent cache's V, inside K
              copy_rows(t, c.n_kv_heads * d, src * c.capacity, dst * c.capacity, c.capacity);
            }
          }};
}

// The CPU backend runs the reference for every path, at the precision asked (f16 products:
// Q, K and V rounded first): |op| reported as the reference kernel.
CpuOp with_run(const AttentionCall& c, CpuOp op) {
  op.attention = AttentionRun{AttentionKernel::reference, 1, c.precision};
  return op;
}

// The three stages in a row, on temporaries, whatever the path; with f16_products on
// inputs rounded to f16 (the probabilities stay exact: the oracle the GPU's rounding of
// them is measured against).
CpuOp op(const AttentionCall& c) {
  const bool round = c.precision == AttentionPrecision::f16_products;
  if (c.kv.cache) {
    return with_run(
        c, {"attention", [q = c.q, cache = c.kv.cache, out = c.out, mask = c.mask, params = c.params, sinks = c.sinks, round] {
              const KeysNow now = keys_now(*cache, params);
              from_floats(cpu(out), cache_attention(q, *cache, now.rows, mask, now.params, sinks, round));
            }});
  }
  return with_run(
      c, {"attention", [q = c.q, k = c.kv.k, v = c.kv.v, out = c.out, mask = c.mask, params = c.params, sinks = c.sinks, round] {
            from_floats(cpu(out), plain_attention(q, k, v, mask, params, sinks, round));
          }});
}

}  // namespace

CpuOp cpu_op(const OpCall& call) {
  return std::visit([](const auto& c) { return op(c); }, call);
}

}  // namespace vkattn::detail
