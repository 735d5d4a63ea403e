// Argument checks of the attention ops, over tensors and over KV caches (declared in
// op_call.hpp).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>

#include "common/kv_cache_impl.hpp"
#include "common/op_call.hpp"
#include "common/quant.hpp"
#include "common/validate.hpp"

namespace vkattn::detail {

namespace {

// q [T, H, D] and k or v [N, Hkv, D]: heads divide, head dims agree and fit.
void check_heads(const char* op, const TensorImpl& q, const char* q_name, const TensorImpl& kv, const char* kv_name) {
  const std::size_t d = q.shape[2];
  if (d == 0 || d > kMaxAttentionHeadDim) {
    throw InvalidArgument(op, std::string("head_dim (") + q_name + ".shape[2])", std::to_string(d),
                          "[1, " + std::to_string(kMaxAttentionHeadDim) + "]");
  }
  if (kv.shape[2] != d) {
    throw InvalidArgument(op, std::string(kv_name) + ".shape[2]", std::to_string(kv.shape[2]),
                          std::string("head_dim = ") + q_name + ".shape[2] = " + std::to_string(d));
  }
  if (q.shape[1] % kv.shape[1] != 0) {
    throw InvalidArgument(op, std::string("n_heads (") + q_name + ".shape[1])", std::to_string(q.shape[1]),
                          std::string("a multiple of n_kv_heads = ") + kv_name + ".shape[1] = " + std::to_string(kv.shape[1]));
  }
}

// Checks |v|: n ids, each >= 0 (or none, where |may_be_empty|).
void check_ids(const char* op, const char* name, std::span<const std::int32_t> v, std::size_t n, bool may_be_empty) {
  if (v.empty() && may_be_empty) return;
  if (v.size() != n) {
    const std::string_view s(name);
    const char* each = s.starts_with("tokens.q")   ? ", one per query token"
                       : s.starts_with("tokens.k") ? ", one per key"
                                                   : ", one per token of k";
    throw InvalidArgument(op, std::string(name) + ".size()", std::to_string(v.size()),
                          std::to_string(n) + (may_be_empty ? " (or 0: all in sequence 0)" : "") + each);
  }
  check_nonnegative(op, name, v);
}

// The same, into |out| (empty: n zeros), whose memory a replay reuses.
void check_ids_into(std::vector<std::int32_t>& out, const char* op, const char* name, std::span<const std::int32_t> v,
                    std::size_t n, bool may_be_empty) {
  check_ids(op, name, v, n, may_be_empty);
  if (v.empty())
    out.assign(n, 0);
  else
    out.assign(v.begin(), v.end());
}

// No ids (all in sequence 0) for a cache of several sequences.
InvalidArgument several_sequences(const char* op, const char* name, std::size_t n_seqs) {
  return InvalidArgument(op, name, "empty",
                         "one id per token: the cache holds n_seqs = " + std::to_string(n_seqs) + " sequences");
}

// The queries' sequence ids over |cache| (|n| tokens; empty: sequence 0, for a cache of
// one) into |out|.
void cache_seq_ids(std::vector<std::int32_t>& out, const char* op, const KvCacheImpl& cache, std::span<const std::int32_t> ids,
                   std::size_t n) {
  if (ids.empty() && cache.config.n_seqs > 1) throw several_sequences(op, "tokens.q_seq_ids", cache.config.n_seqs);
  if (ids.size() == n) {  // a negative id is out of the cache's range, [0, n_seqs)
    for (std::size_t t = 0; t < n; ++t) cache.check_seq(op, ids[t], "tokens.q_seq_ids", t);
  }
  check_ids_into(out, op, "tokens.q_seq_ids", ids, n, true);
  for (std::size_t t = 0; t < n; ++t) cache.check_seq(op, out[t], "tokens.q_seq_ids", t);
}

void check_per_head(const char* op, const char* name, const std::vector<float>& v, std::size_t n_heads) {
  if (v.empty()) return;
  if (v.size() != n_heads) {
    throw InvalidArgument(op, std::string(name) + ".size()", std::to_string(v.size()),
                          "0 or n_heads = " + std::to_string(n_heads));
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) {
      throw InvalidArgument(op, std::string(name) + "[" + std::to_string(i) + "]", num(v[i]), "finite");
    }
  }
}

}  // namespace

namespace {

// check_attn_scores, and with |cache| the same against its keys (|k| then stands for one
// sequence's slots): the token part then comes from the cache, after the config it needs
// (the window; RoPE on read).
ScoresParams check_scores(const TensorImpl& q, const TensorImpl& k, const TensorImpl& scores, const TensorImpl* mask,
                          const AttentionTokens& tokens, const AttentionConfig& config, const char* op,
                          const KvCacheImpl* cache) {
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  check_rank3(op, "k", k, "[n_keys, n_kv_heads, head_dim]");
  check_dtype(op, "q", q, true);
  check_kv_dtype(op, "k", k);
  check_heads(op, q, "q", k, "k");
  const std::size_t n_tokens = q.shape[0], n_heads = q.shape[1], n_keys = k.shape[0];
  check_dtype(op, "scores", scores, false);
  check_shape(op, "scores", scores, {n_tokens, n_heads, n_keys});
  if (mask) {
    check_dtype(op, "mask", *mask, false);
    check_shape(op, "mask", *mask, {n_tokens, n_keys});
  }
  ScoresParams p;
  if (!cache) check_attn_tokens(op, p, tokens, n_tokens, n_keys);

  p.scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(q.shape[2]));
  if (!finite_float(p.scale)) throw InvalidArgument(op, "config.scale", num(p.scale), "finite as a float: |x| <= 3.4e38");
  p.causal = config.causal;
  if (config.window) {
    if (*config.window == 0 || *config.window > std::uint32_t{INT32_MAX}) {
      throw InvalidArgument(op, "config.window", std::to_string(*config.window), "[1, 2^31 - 1], or unset for no window");
    }
    p.window = *config.window;
  }
  if (config.window_type != WindowType::trailing && config.window_type != WindowType::symmetric) {
    throw InvalidArgument(op, "config.window_type", std::to_string(static_cast<int>(config.window_type)),
                          "WindowType::trailing or WindowType::symmetric");
  }
  p.window_symmetric = config.window_type == WindowType::symmetric;
  // Every model with a symmetric window is a bidirectional encoder; with causal masking
  // (the default) the window would silently lose its front half.
  if (p.window_symmetric && config.causal) {
    throw InvalidArgument(op, "config.causal", "true with config.window_type = WindowType::symmetric",
                          "false with a symmetric window (it looks both ways, as in bidirectional encoders): pass causal = "
                          "false, or WindowType::trailing for a causal window");
  }
  if (config.chunk) {
    if (*config.chunk == 0) throw InvalidArgument(op, "config.chunk", "0", ">= 1, or unset for no chunks");
    p.chunk = *config.chunk;
  }
  if (config.query_temperature) {
    const QueryTemperature& t = *config.query_temperature;
    if (t.floor_scale == 0) throw InvalidArgument(op, "config.query_temperature.floor_scale", "0", ">= 1");
    if (!std::isfinite(t.scale)) {
      throw InvalidArgument(op, "config.query_temperature.scale", num(t.scale), "finite");
    }
    if (t.offset > std::uint32_t{INT32_MAX}) {
      throw InvalidArgument(op, "config.query_temperature.offset", std::to_string(t.offset), "[0, 2^31 - 1]");
    }
    // t itself finite (as the kernels' float) at every position a query may have.
    const double t_max = 1.0 + std::abs(t.scale) * std::log1p((double{INT32_MAX} + t.offset) / t.floor_scale);
    if (!(t_max <= 3.0e38)) {
      throw InvalidArgument(op, "config.query_temperature.scale", num(t.scale),
                            "small enough that t(position) stays finite in float");
    }
    p.temperature = t;
  }
  if (config.softcap) {
    check_positive(op, "config.softcap", *config.softcap);
    p.softcap = *config.softcap;
    // scale * c * tanh(qk / c) is c' tanh(scale * qk / c') with c' = |scale| c (tanh is
    // odd), so the other order needs only another cap; scale 0 gives 0 either way.
    if (config.softcap_order == SoftcapOrder::cap_then_scale) {
      p.softcap *= std::abs(p.scale);
      if (p.softcap != 0.0) check_positive(op, "config.softcap x |config.scale| (SoftcapOrder::cap_then_scale)", p.softcap);
    }
  }
  if (config.softcap_order != SoftcapOrder::scale_then_cap && config.softcap_order != SoftcapOrder::cap_then_scale) {
    throw InvalidArgument(op, "config.softcap_order", std::to_string(static_cast<int>(config.softcap_order)),
                          "SoftcapOrder::scale_then_cap or SoftcapOrder::cap_then_scale");
  }
  check_per_head(op, "config.alibi_slopes", config.alibi_slopes, n_heads);
  if (!config.alibi_slopes.empty()) {
    p.alibi_slopes = config.alibi_slopes;
  } else if (config.alibi) {
    if (n_heads > kMaxAlibiHeads) {
      throw InvalidArgument(
          op, "config.alibi", "true with n_heads = " + std::to_string(n_heads),
          "n_heads <= " + std::to_string(kMaxAlibiHeads) + " for the standard slopes, or per-head config.alibi_slopes");
    }
    p.alibi_slopes = alibi_slopes(n_heads);
  }
  check_distinct(op, "scores", scores,
                 {{"q", &q}, {"k", &k}, {"mask", mask}, {"the cache's K", cache ? cache->k.get() : nullptr}});
  if (cache) {
    const KvCacheConfig& c = cache->config;
    if (c.rope == KvRope::on_read) {
      p.rope_on_read = true;
      p.rope = check_rope_config(op, c.rope_config, c.head_dim, kCacheRopeNames);
    }
    check_attn_cache_tokens(op, p, *cache, tokens, n_tokens);
  }
  return p;
}

}  // namespace

void check_stage_config(const AttentionConfig& config, const char* op) {
  if (config.precision != AttentionPrecision::f32) {
    const bool named = config.precision == AttentionPrecision::f16_products;
    throw InvalidArgument(op, "config.precision", named ? "f16_products" : std::to_string(static_cast<int>(config.precision)),
                          "f32 (f16_products is attention()'s only)");
  }
  if (config.mask_keys != 0) {
    throw InvalidArgument(op, "config.mask_keys", std::to_string(config.mask_keys), "0 (a promise attention() alone reads)");
  }
}

ScoresParams check_attn_scores(const TensorImpl& q, const TensorImpl& k, const TensorImpl& scores, const TensorImpl* mask,
                               const AttentionTokens& tokens, const AttentionConfig& config, const char* op) {
  return check_scores(q, k, scores, mask, tokens, config, op, nullptr);
}

std::vector<float> check_attn_softmax(const TensorImpl& scores, const TensorImpl& probs, const AttentionConfig& config,
                                      const char* op) {
  check_rank3(op, "scores", scores, "[n_tokens, n_heads, n_keys]");
  check_dtype(op, "scores", scores, false);
  check_dtype(op, "probs", probs, false);
  check_shape(op, "probs", probs, scores.shape);
  // In place is scores itself: a view over some of its bytes would be written by one row's
  // workgroup while another reads them.
  if (&probs != &scores && probs.overlaps(scores)) {
    throw InvalidArgument(op, "probs", "a view sharing bytes with scores", "scores itself (in place) or bytes apart from scores");
  }
  check_per_head(op, "config.sinks", config.sinks, scores.shape[1]);
  return config.sinks;
}

void check_attn_tokens(const char* op, ScoresParams& p, const AttentionTokens& tokens, std::size_t n_tokens, std::size_t n_keys) {
  check_ids_into(p.q_pos, op, "tokens.q_positions", tokens.q_positions, n_tokens, false);
  if (tokens.k_positions.empty()) {
    if (n_keys > std::size_t{INT32_MAX} + 1) {
      throw InvalidArgument(op, "tokens.k_positions", "empty with n_keys = " + std::to_string(n_keys),
                            "positions for each key (the default 0..n_keys-1 passes 2^31)");
    }
    p.k_pos.resize(n_keys);
    std::iota(p.k_pos.begin(), p.k_pos.end(), 0);
  } else {
    check_ids_into(p.k_pos, op, "tokens.k_positions", tokens.k_positions, n_keys, false);
  }
  check_ids_into(p.q_seq, op, "tokens.q_seq_ids", tokens.q_seq_ids, n_tokens, true);
  check_ids_into(p.k_seq, op, "tokens.k_seq_ids", tokens.k_seq_ids, n_keys, true);
}

void check_attn_weighted_sum(const TensorImpl& probs, const TensorImpl& v, const TensorImpl& out) {
  const char* op = "attn_weighted_sum";
  check_rank3(op, "probs", probs, "[n_tokens, n_heads, n_keys]");
  check_rank3(op, "v", v, "[n_keys, n_kv_heads, head_dim]");
  check_rank3(op, "out", out, "[n_tokens, n_heads, head_dim]");
  check_dtype(op, "probs", probs, false);
  check_kv_dtype(op, "v", v);
  check_dtype(op, "out", out, false);
  check_heads(op, out, "out", v, "v");
  if (v.shape[0] != probs.shape[2]) {
    throw InvalidArgument(op, "v.shape[0]", std::to_string(v.shape[0]),
                          "n_keys = probs.shape[2] = " + std::to_string(probs.shape[2]));
  }
  check_shape(op, "out", out, {probs.shape[0], probs.shape[1], v.shape[2]});
  check_distinct(op, "out", out, {{"probs", &probs}, {"v", &v}});
}

void check_no_sinks(const AttentionConfig& config) {
  if (!config.sinks.empty()) {
    throw InvalidArgument("attn_scores", "config.sinks.size()", std::to_string(config.sinks.size()),
                          "0: sinks enter the softmax, not the scores; give them to attn_softmax");
  }
}

}  // namespace vkattn::detail

namespace vkattn {

std::vector<float> alibi_slopes(std::size_t n_heads) try {
  // Press et al.: for n a power of two, slope_h = 2^(-8 (h + 1) / n). Otherwise BLOOM takes
  // the slopes of the power of two below n, then every other slope of twice that power.
  auto power_of_two = [](std::size_t n) {
    std::vector<float> s(n);
    for (std::size_t h = 0; h < n; ++h)
      s[h] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(n)));
    return s;
  };
  if (n_heads > detail::kMaxAlibiHeads) {
    throw InvalidArgument("alibi_slopes", "n_heads", std::to_string(n_heads),
                          "[0, " + std::to_string(detail::kMaxAlibiHeads) + "]");
  }
  if (n_heads == 0) return {};
  std::size_t closest = 1;
  while (closest * 2 <= n_heads) closest *= 2;
  std::vector<float> slopes = power_of_two(closest);
  const std::vector<float> extra = power_of_two(2 * closest);
  for (std::size_t i = 0; slopes.size() < n_heads; i += 2) slopes.push_back(extra[i]);
  return slopes;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("alibi_slopes");
}

}  // namespace vkattn

namespace vkattn::detail {

namespace {

// |t|'s head dim (after its heads, dim |heads_dim|) is the cache's K head dim, or with
// |value| its V head dim.
void check_against_cache(const char* op, const char* name, const TensorImpl& t, const KvCacheImpl& cache, std::size_t heads_dim,
                         bool value = false) {
  const auto& c = cache.config;
  const std::size_t want = value ? value_head_dim(c) : c.head_dim;
  if (t.shape[heads_dim + 1] != want) {
    throw InvalidArgument(
        op, std::string(name) + ".shape[" + std::to_string(heads_dim + 1) + "]", std::to_string(t.shape[heads_dim + 1]),
        std::string(value && c.v_head_dim ? "cache v_head_dim = " : "cache head_dim = ") + std::to_string(want));
  }
}

}  // namespace

void check_kv_append(const KvCacheImpl& cache, const TensorImpl& k, const TensorImpl* v, std::span<const std::int32_t> positions,
                     std::span<const std::int32_t> seq_ids) {
  const char* op = "kv_append";
  const auto& c = cache.config;
  for (auto [name, t] : {std::pair{"k", &k}, std::pair{"v", v}}) {
    if (!t) continue;  // a latent cache's V
    check_rank3(op, name, *t, "[n_tokens, n_kv_heads, head_dim]");
    check_dtype(op, name, *t, true);
    if (t->shape[1] != c.n_kv_heads) {
      throw InvalidArgument(op, std::string(name) + ".shape[1]", std::to_string(t->shape[1]),
                            "cache n_kv_heads = " + std::to_string(c.n_kv_heads));
    }
    check_against_cache(op, name, *t, cache, 1, t == v);
  }
  if (v && v->shape[0] != k.shape[0]) {
    throw InvalidArgument(op, "v.shape[0]", std::to_string(v->shape[0]), "k.shape[0] = " + std::to_string(k.shape[0]));
  }
  if (v && v->dtype != k.dtype)
    throw InvalidArgument(op, "v.dtype", to_string(v->dtype), std::string("k.dtype = ") + to_string(k.dtype));
  // The append writes the cache's K and V (views of a caller's buffer, wrap_kv_cache).
  for (auto [name, t] : {std::pair{"k", &k}, std::pair{"v", v}}) {
    for (auto [cache_name, ct] : {std::pair{"the cache's K", cache.k.get()}, std::pair{"the cache's V", cache.v.get()}}) {
      if (t && ct && t->overlaps(*ct)) {
        throw InvalidArgument(op, name, std::string("a view sharing bytes with ") + cache_name,
                              "bytes apart from the cache's K and V (the append writes them)");
      }
    }
  }
  check_kv_append_tokens(cache, k, positions, seq_ids);
}

void check_kv_append_tokens(const KvCacheImpl& cache, const TensorImpl& k, std::span<const std::int32_t> positions,
                            std::span<const std::int32_t> seq_ids) {
  const char* op = "kv_append";
  const auto& c = cache.config;
  check_ids(op, "positions", positions, k.shape[0], false);
  if (seq_ids.empty() && c.n_seqs > 1) throw several_sequences(op, "seq_ids", c.n_seqs);
  if (!seq_ids.empty() && seq_ids.size() != k.shape[0]) {
    throw InvalidArgument(op, "seq_ids.size()", std::to_string(seq_ids.size()),
                          "k.shape[0] = " + std::to_string(k.shape[0]) + " (one per token), or 0 for a one-sequence cache");
  }
}

ScoresParams check_attn_scores_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& scores,
                                     const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config,
                                     const char* op) {
  const auto& c = cache.config;
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  check_dtype(op, "q", q, true);
  check_against_cache(op, "q", q, cache, 1);
  if (q.shape[1] % c.n_kv_heads != 0) {
    throw InvalidArgument(op, "n_heads (q.shape[1])", std::to_string(q.shape[1]),
                          "a multiple of the cache's n_kv_heads = " + std::to_string(c.n_kv_heads));
  }
  if (!tokens.k_positions.empty() || !tokens.k_seq_ids.empty()) {
    throw InvalidArgument(op, "tokens.k_positions / k_seq_ids", "given", "empty: the cache knows its keys");
  }
  // The plain-tensor checks, against a stand-in for one sequence's keys: [capacity,
  // n_kv_heads, head_dim].
  const ShapeOnly keys({c.capacity, c.n_kv_heads, c.head_dim}, c.dtype);
  return check_scores(q, keys, scores, mask, tokens, config, op, &cache);
}

void check_attn_cache_tokens(const char* op, ScoresParams& p, const KvCacheImpl& cache, const AttentionTokens& tokens,
                             std::size_t n_tokens) {
  const auto& c = cache.config;
  check_ids_into(p.q_pos, op, "tokens.q_positions", tokens.q_positions, n_tokens, false);
  cache_seq_ids(p.q_seq, op, cache, tokens.q_seq_ids, n_tokens);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    cache.check_readable(op, t, static_cast<std::size_t>(p.q_seq[t]), p.q_pos[t], p);
  }
  // The keys' positions are the cache's (its slot table on the device; fill_keys for the
  // host): nothing here costs anything per slot.
  p.k_pos.clear();
  p.k_seq.clear();
  p.k_cpos.clear();
  if (p.rope_on_read) {
    p.q_cpos.resize(n_tokens);
    for (std::size_t t = 0; t < n_tokens; ++t) {
      p.q_cpos[t] = cache.cache_position(static_cast<std::size_t>(p.q_seq[t]), p.q_pos[t]);
    }
    p.ring.resize(1 + c.n_seqs);
    p.ring[0] = static_cast<std::int32_t>(c.n_sinks);
    std::copy(cache.oldest.begin(), cache.oldest.end(), p.ring.begin() + 1);
  }
}

std::vector<std::int32_t> check_attn_weighted_sum_cache(const TensorImpl& probs, const KvCacheImpl& cache, const TensorImpl& out,
                                                        const AttentionTokens& tokens) {
  const char* op = "attn_weighted_sum";
  const auto& c = cache.config;
  // The cache's values are no argument of this call: out and probs are named against the
  // cache's config, as attention over a cache does.
  check_rank3(op, "probs", probs, "[n_tokens, n_heads, n_keys = capacity]");
  check_rank3(op, "out", out, "[n_tokens, n_heads, v_head_dim]");
  check_dtype(op, "probs", probs, false);
  check_dtype(op, "out", out, false);
  check_against_cache(op, "out", out, cache, 1, true);
  if (out.shape[1] % c.n_kv_heads != 0) {
    throw InvalidArgument(op, "n_heads (out.shape[1])", std::to_string(out.shape[1]),
                          "a multiple of the cache's n_kv_heads = " + std::to_string(c.n_kv_heads));
  }
  if (probs.shape[2] != c.capacity) {
    throw InvalidArgument(op, "probs.shape[2]", std::to_string(probs.shape[2]),
                          "n_keys = the cache's capacity = " + std::to_string(c.capacity));
  }
  check_shape(op, "out", out, {probs.shape[0], probs.shape[1], value_head_dim(c)});
  check_distinct(op, "out", out, {{"probs", &probs}, {"the cache's K", cache.k.get()}, {"the cache's V", cache.v.get()}});
  if (!tokens.k_positions.empty() || !tokens.k_seq_ids.empty()) {
    throw InvalidArgument(op, "tokens.k_positions / k_seq_ids", "given", "empty: the cache knows its keys");
  }
  std::vector<std::int32_t> seq;
  if (!tokens.q_positions.empty()) check_ids_into(seq, op, "tokens.q_positions", tokens.q_positions, probs.shape[0], false);
  cache_seq_ids(seq, op, cache, tokens.q_seq_ids, probs.shape[0]);
  return seq;
}

namespace {
AttentionPath check_path(AttentionPath path) {
  if (path != AttentionPath::automatic && path != AttentionPath::fused && path != AttentionPath::three_stages) {
    throw InvalidArgument("attention", "config.path", std::to_string(static_cast<int>(path)), "automatic, fused or three_stages");
  }
  return path;
}
AttentionPrecision check_precision(AttentionPrecision precision) {
  if (precision != AttentionPrecision::f32 && precision != AttentionPrecision::f16_products) {
    throw InvalidArgument("attention", "config.precision", std::to_string(static_cast<int>(precision)), "f32 or f16_products");
  }
  return precision;
}
// A promise about the mask's rows: with no mask there is nothing to keep it about, and a
// key list is its own promise.
std::uint32_t check_mask_keys(std::uint32_t mask_keys, const TensorImpl* mask, std::size_t n_keys) {
  if (mask_keys != 0 && mask != nullptr && mask->dtype == DType::i32) {
    throw InvalidArgument("attention", "config.mask_keys", std::to_string(mask_keys),
                          "0 with a key list (an i32 mask): its width is the promise");
  }
  if (mask_keys != 0 && (mask == nullptr || mask_keys > n_keys)) {
    throw InvalidArgument("attention", "config.mask_keys", std::to_string(mask_keys),
                          mask == nullptr ? "0 without a mask" : "[0, n_keys = " + std::to_string(n_keys) + "]");
  }
  return mask_keys;
}

// attention()'s mask given as a key list, i32 [n_tokens, width]: checked here, and the
// scores' checks then see no mask (null); an f32 mask goes on to them as it is.
const TensorImpl* scores_mask(const TensorImpl& q, const TensorImpl* mask) {
  const char* op = "attention";
  if (mask != nullptr && mask->dtype != DType::f32 && mask->dtype != DType::i32) {
    throw InvalidArgument(op, "mask.dtype", to_string(mask->dtype), "f32, or i32 (a key list)");
  }
  if (mask == nullptr || mask->dtype != DType::i32) return mask;
  const std::string want =
      "[n_tokens = " + std::to_string(q.shape[0]) + ", width], width in [1, " + std::to_string(kMaxKeyList) + "] (a key list)";
  if (mask->shape.size() != 2 || mask->shape[0] != q.shape[0] || mask->shape[1] == 0 || mask->shape[1] > kMaxKeyList) {
    throw InvalidArgument(op, "mask.shape", shape_string(mask->shape), want);
  }
  return nullptr;
}
}  // namespace

AttentionArgs check_attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v, const TensorImpl& out,
                              const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config) {
  const char* op = "attention";
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  check_rank3(op, "k", k, "[n_keys, n_kv_heads, head_dim]");
  // The stages' checks, against stand-ins for the scores and probabilities.
  const ShapeOnly scores({q.shape[0], q.shape[1], k.shape[0]}, DType::f32);
  AttentionArgs a{check_attn_scores(q, k, scores, scores_mask(q, mask), tokens, config, op),
                  check_attn_softmax(scores, scores, config, op)};
  check_rank3(op, "v", v, "[n_keys, n_kv_heads, v_head_dim]");
  // V's rows may be narrower or wider than K's (DeepSeek without absorption: 192 and 128).
  for (std::size_t i = 0; i < 2; ++i) {
    if (v.shape[i] != k.shape[i]) {
      throw InvalidArgument(op, "v.shape[" + std::to_string(i) + "]", std::to_string(v.shape[i]),
                            "k.shape[" + std::to_string(i) + "] = " + std::to_string(k.shape[i]));
    }
  }
  if (v.shape[2] == 0 || v.shape[2] > kMaxAttentionHeadDim) {
    throw InvalidArgument(op, "v_head_dim (v.shape[2])", std::to_string(v.shape[2]),
                          "[1, " + std::to_string(kMaxAttentionHeadDim) + "]");
  }
  check_rank3(op, "out", out, "[n_tokens, n_heads, v_head_dim]");
  check_shape(op, "out", out, {q.shape[0], q.shape[1], v.shape[2]});
  check_kv_dtype(op, "v", v);
  check_dtype(op, "out", out, false);
  check_distinct(op, "out", out, {{"q", &q}, {"k", &k}, {"v", &v}, {"mask", mask}});
  a.path = check_path(config.path);
  a.precision = check_precision(config.precision);
  a.mask_keys = check_mask_keys(config.mask_keys, mask, k.shape[0]);
  a.key_list = mask != nullptr && mask->dtype == DType::i32;
  return a;
}

AttentionArgs check_attention_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& out, const TensorImpl* mask,
                                    const AttentionTokens& tokens, const AttentionConfig& config) {
  const char* op = "attention";
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  const ShapeOnly scores({q.shape[0], q.shape[1], cache.config.capacity}, DType::f32);
  AttentionArgs a{check_attn_scores_cache(q, cache, scores, scores_mask(q, mask), tokens, config, op),
                  check_attn_softmax(scores, scores, config, op)};
  check_rank3(op, "out", out, "[n_tokens, n_heads, v_head_dim]");
  check_shape(op, "out", out, {q.shape[0], q.shape[1], value_head_dim(cache.config)});
  check_dtype(op, "out", out, false);
  check_distinct(op, "out", out, {{"q", &q}, {"mask", mask}, {"the cache's K", cache.k.get()}, {"the cache's V", cache.v.get()}});
  a.path = check_path(config.path);
  a.precision = check_precision(config.precision);
  a.mask_keys = check_mask_keys(config.mask_keys, mask, cache.config.capacity);
  a.key_list = mask != nullptr && mask->dtype == DType::i32;
  return a;
}

}  // namespace vkattn::detail
