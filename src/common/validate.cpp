#include "common/validate.hpp"

#include <cmath>
#include <numeric>
#include <initializer_list>
#include <utility>
#include <sstream>

#include "common/quant.hpp"

namespace vkattn::detail {

std::string shape_string(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

void check_new_tensor(const char* op, const Shape& shape, DType dtype) {
  if (shape.empty()) throw InvalidArgument(op, "shape", "[]", "at least one dimension");
  std::size_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      throw InvalidArgument(op, "shape[" + std::to_string(i) + "]", "0", ">= 1");
    }
    if (n > (std::size_t{1} << 40) / shape[i]) {
      throw InvalidArgument(op, "shape", shape_string(shape), "at most 2^40 elements");
    }
    n *= shape[i];
  }
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::i32 && !is_quantized(dtype)) {
    throw InvalidArgument(op, "dtype", std::to_string(static_cast<int>(dtype)), "f32, f16, i32, q8_0 or q4_0");
  }
  if (is_quantized(dtype) && shape.back() % kQuantBlock != 0) {
    throw InvalidArgument(op, "shape[" + std::to_string(shape.size() - 1) + "]", std::to_string(shape.back()),
                          std::string("a multiple of 32 for ") + to_string(dtype) + " (blocks of 32 along the last dimension)");
  }
}

const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param,
                                                const Tensor& t, const void* owner) {
  if (!t.valid()) throw InvalidArgument(op, param, kEmptyTensor, "a tensor made by Backend::tensor");
  if (t.impl()->owner != owner) {
    throw InvalidArgument(op, param, "a tensor of another backend",
                          "a tensor made by the backend that made this command list");
  }
  return t.impl();
}

namespace {

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A kernel that writes |out| while reading an input it aliases would race with itself
// inside one dispatch; only attn_softmax documents in-place use.
void check_distinct(const char* op, const char* out_name, const TensorImpl& out,
                    std::initializer_list<std::pair<const char*, const TensorImpl*>> inputs) {
  for (auto [name, in] : inputs) {
    if (in == &out) {
      throw InvalidArgument(op, out_name, std::string("the tensor given as ") + name,
                            std::string("a tensor other than ") + name + " (an op's output may not be one of its inputs)");
    }
  }
}

void check_positive(const char* op, const std::string& param, double v) {
  if (!std::isfinite(v) || v <= 0.0) throw InvalidArgument(op, param, num(v), "finite and > 0");
}

// Both finite and > 0, and |hi| > |lo| (YaRN's beta bounds, Llama 3's frequency factors).
void check_ordered_pair(const char* op, const std::string& lo_name, double lo, const std::string& hi_name, double hi) {
  check_positive(op, lo_name, lo);
  check_positive(op, hi_name, hi);
  if (hi <= lo) throw InvalidArgument(op, hi_name, num(hi), "> " + lo_name + " = " + num(lo));
}

void check_rope_tensor(const char* op, const char* name, const TensorImpl& x) {
  const std::string n(name);
  if (x.shape.size() != 3) {
    throw InvalidArgument(op, n + ".shape", shape_string(x.shape), "rank 3: [n_tokens, n_heads, head_dim]");
  }
  if (x.dtype != DType::f32 && x.dtype != DType::f16) {
    throw InvalidArgument(op, n + ".dtype", to_string(x.dtype), "f32 or f16");
  }
  const std::size_t head_dim = x.shape[2];
  if (head_dim % 2 != 0 || head_dim > kMaxHeadDim) {
    throw InvalidArgument(op, "head_dim (" + n + ".shape[2])", std::to_string(head_dim),
                          "even, in [2, " + std::to_string(kMaxHeadDim) + "]");
  }
}

}  // namespace

RopeConfig check_rope_config(const char* op, const RopeConfig& config, std::size_t head_dim) {
  RopeConfig out = config;
  if (out.rotary_dim == 0) out.rotary_dim = head_dim;
  if (out.rotary_dim % 2 != 0 || out.rotary_dim > head_dim) {
    throw InvalidArgument(op, "config.rotary_dim", std::to_string(config.rotary_dim),
                          "0 (= head_dim) or even in [2, head_dim = " + std::to_string(head_dim) + "]");
  }
  check_positive(op, "config.base", config.base);
  if (config.layout != RopeLayout::interleaved && config.layout != RopeLayout::half) {
    throw InvalidArgument(op, "config.layout", std::to_string(static_cast<int>(config.layout)),
                          "RopeLayout::interleaved or RopeLayout::half");
  }
  const RopeScaling s = config.scaling;
  if (s != RopeScaling::none && s != RopeScaling::linear && s != RopeScaling::ntk && s != RopeScaling::dynamic_ntk &&
      s != RopeScaling::yarn && s != RopeScaling::llama3 && s != RopeScaling::factors) {
    throw InvalidArgument(op, "config.scaling", std::to_string(static_cast<int>(s)), "a RopeScaling value");
  }
  if (s != RopeScaling::none && s != RopeScaling::factors) check_positive(op, "config.factor", config.factor);
  if ((s == RopeScaling::dynamic_ntk || s == RopeScaling::yarn || s == RopeScaling::llama3) &&
      config.original_context == 0) {
    throw InvalidArgument(op, "config.original_context", "0", ">= 1 (the trained context length) for this scaling");
  }
  if ((s == RopeScaling::ntk || s == RopeScaling::dynamic_ntk) && out.rotary_dim < 4) {
    throw InvalidArgument(op, "config.rotary_dim", std::to_string(out.rotary_dim),
                          ">= 4 for NTK scaling (the exponent is d / (d - 2))");
  }
  if (s == RopeScaling::yarn) {
    check_ordered_pair(op, "config.yarn.beta_slow", config.yarn.beta_slow, "config.yarn.beta_fast",
                       config.yarn.beta_fast);
    for (auto [name, v] : {std::pair{"config.yarn.mscale", config.yarn.mscale},
                           std::pair{"config.yarn.mscale_all_dim", config.yarn.mscale_all_dim}}) {
      if (!std::isfinite(v) || v < 0.0) throw InvalidArgument(op, name, num(v), "finite and >= 0");
    }
  }
  if (s == RopeScaling::llama3) {
    check_ordered_pair(op, "config.llama3.low_freq_factor", config.llama3.low_freq_factor,
                       "config.llama3.high_freq_factor", config.llama3.high_freq_factor);
  }
  if (s == RopeScaling::factors) {
    if (config.freq_factors.size() != out.rotary_dim / 2) {
      throw InvalidArgument(op, "config.freq_factors.size()", std::to_string(config.freq_factors.size()),
                            "rotary_dim / 2 = " + std::to_string(out.rotary_dim / 2));
    }
    for (std::size_t i = 0; i < config.freq_factors.size(); ++i) {
      check_positive(op, "config.freq_factors[" + std::to_string(i) + "]", config.freq_factors[i]);
    }
  } else if (!config.freq_factors.empty()) {
    throw InvalidArgument(op, "config.freq_factors.size()", std::to_string(config.freq_factors.size()),
                          "0 unless config.scaling = RopeScaling::factors");
  }
  if (config.attention_factor) check_positive(op, "config.attention_factor", *config.attention_factor);
  return out;
}

RopeConfig check_rope(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                      const RopeConfig& config) {
  const char* op = "rope";
  const char* x_name = k ? "q" : "x";
  check_rope_tensor(op, x_name, x);
  if (k) {
    check_rope_tensor(op, "k", *k);
    if (k == &x) throw InvalidArgument(op, "k", "the same tensor as q", "a tensor other than q");
    if (k->shape[0] != x.shape[0]) {
      throw InvalidArgument(op, "k.shape[0]", std::to_string(k->shape[0]),
                            "n_tokens = q.shape[0] = " + std::to_string(x.shape[0]));
    }
    if (k->shape[2] != x.shape[2]) {
      throw InvalidArgument(op, "k.shape[2]", std::to_string(k->shape[2]),
                            "head_dim = q.shape[2] = " + std::to_string(x.shape[2]));
    }
    if (k->dtype != x.dtype) {
      throw InvalidArgument(op, "k.dtype", to_string(k->dtype), std::string("q.dtype = ") + to_string(x.dtype));
    }
  }
  if (positions.size() != x.shape[0]) {
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()),
                          std::string("n_tokens = ") + x_name + ".shape[0] = " + std::to_string(x.shape[0]));
  }
  for (std::size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0) {
      throw InvalidArgument(op, "positions[" + std::to_string(t) + "]", std::to_string(positions[t]),
                            "[0, 2^31 - 1]");
    }
  }
  return check_rope_config(op, config, x.shape[2]);
}

void check_copy(const TensorImpl& src, const TensorImpl& dst) {
  check_distinct("copy", "dst", dst, {{"src", &src}});
  if (src.dtype != dst.dtype) {
    throw InvalidArgument("copy", "dst.dtype", to_string(dst.dtype),
                          std::string("src.dtype = ") + to_string(src.dtype));
  }
  if (src.numel != dst.numel) {
    throw InvalidArgument("copy", "dst.numel()", std::to_string(dst.numel),
                          "src.numel() = " + std::to_string(src.numel));
  }
}

}  // namespace vkattn::detail

namespace vkattn::detail {

namespace {

void check_rank3(const char* op, const char* name, const TensorImpl& t, const char* dims) {
  if (t.shape.size() != 3) {
    throw InvalidArgument(op, std::string(name) + ".shape", shape_string(t.shape), std::string("rank 3: ") + dims);
  }
}

void check_dtype(const char* op, const char* name, const TensorImpl& t, bool allow_f16) {
  if (t.dtype != DType::f32 && !(allow_f16 && t.dtype == DType::f16)) {
    throw InvalidArgument(op, std::string(name) + ".dtype", to_string(t.dtype), allow_f16 ? "f32 or f16" : "f32");
  }
}

// Keys and values of attention: also q8_0 and q4_0 (blocks along head_dim, which tensor
// creation has checked is a multiple of 32).
void check_kv_dtype(const char* op, const char* name, const TensorImpl& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::q8_0 && t.dtype != DType::q4_0) {
    throw InvalidArgument(op, std::string(name) + ".dtype", to_string(t.dtype), "f32, f16, q8_0 or q4_0");
  }
}

void check_shape(const char* op, const char* name, const TensorImpl& t, const Shape& want) {
  if (t.shape != want) throw InvalidArgument(op, std::string(name) + ".shape", shape_string(t.shape), shape_string(want));
}

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
                          std::string("a multiple of n_kv_heads = ") + kv_name + ".shape[1] = " +
                              std::to_string(kv.shape[1]));
  }
}

std::vector<std::int32_t> check_ids(const char* op, const char* name, std::span<const std::int32_t> v, std::size_t n,
                                    bool may_be_empty) {
  if (v.empty() && may_be_empty) return std::vector<std::int32_t>(n, 0);
  if (v.size() != n) {
    throw InvalidArgument(op, std::string(name) + ".size()", std::to_string(v.size()),
                          std::to_string(n) + (may_be_empty ? " (or 0: all in sequence 0)" : ""));
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (v[i] < 0) {
      throw InvalidArgument(op, std::string(name) + "[" + std::to_string(i) + "]", std::to_string(v[i]), "[0, 2^31 - 1]");
    }
  }
  return {v.begin(), v.end()};
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

ScoresParams check_attn_scores(const TensorImpl& q, const TensorImpl& k, const TensorImpl& scores,
                               const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config,
                               const char* op) {
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
  p.q_pos = check_ids(op, "tokens.q_positions", tokens.q_positions, n_tokens, false);
  if (tokens.k_positions.empty()) {
    if (n_keys > std::size_t{INT32_MAX} + 1) {
      throw InvalidArgument(op, "tokens.k_positions", "empty with n_keys = " + std::to_string(n_keys),
                            "positions for each key (the default 0..n_keys-1 passes 2^31)");
    }
    p.k_pos.resize(n_keys);
    std::iota(p.k_pos.begin(), p.k_pos.end(), 0);
  } else {
    p.k_pos = check_ids(op, "tokens.k_positions", tokens.k_positions, n_keys, false);
  }
  p.q_seq = check_ids(op, "tokens.q_seq_ids", tokens.q_seq_ids, n_tokens, true);
  p.k_seq = check_ids(op, "tokens.k_seq_ids", tokens.k_seq_ids, n_keys, true);

  p.scale = config.scale ? *config.scale : 1.0 / std::sqrt(static_cast<double>(q.shape[2]));
  if (!std::isfinite(p.scale)) throw InvalidArgument(op, "config.scale", num(p.scale), "finite");
  p.causal = config.causal;
  if (config.window) {
    if (*config.window == 0) throw InvalidArgument(op, "config.window", "0", ">= 1, or unset for no window");
    p.window = *config.window;
  }
  if (config.softcap) {
    check_positive(op, "config.softcap", *config.softcap);
    p.softcap = *config.softcap;
    // scale * c * tanh(qk / c) is c' tanh(scale * qk / c') with c' = |scale| c (tanh is
    // odd), so the other order needs only another cap; scale 0 gives 0 either way.
    if (config.softcap_order == SoftcapOrder::cap_then_scale) p.softcap *= std::abs(p.scale);
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
      throw InvalidArgument(op, "config.alibi", "true with n_heads = " + std::to_string(n_heads),
                            "n_heads <= " + std::to_string(kMaxAlibiHeads) +
                                " for the standard slopes, or per-head config.alibi_slopes");
    }
    p.alibi_slopes = alibi_slopes(n_heads);
  }
  check_distinct(op, "scores", scores, {{"q", &q}, {"k", &k}, {"mask", mask}});
  return p;
}

std::vector<float> check_attn_softmax(const TensorImpl& scores, const TensorImpl& probs,
                                      const AttentionConfig& config, const char* op) {
  check_rank3(op, "scores", scores, "[n_tokens, n_heads, n_keys]");
  check_dtype(op, "scores", scores, false);
  check_dtype(op, "probs", probs, false);
  check_shape(op, "probs", probs, scores.shape);
  check_per_head(op, "config.sinks", config.sinks, scores.shape[1]);
  return config.sinks;
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
    for (std::size_t h = 0; h < n; ++h) s[h] = static_cast<float>(std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(n)));
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

#include "common/kv_cache_impl.hpp"

namespace vkattn::detail {

namespace {

void check_against_cache(const char* op, const char* name, const TensorImpl& t, const KvCacheImpl& cache,
                         std::size_t heads_dim) {
  const auto& c = cache.config;
  if (t.shape[heads_dim + 1] != c.head_dim) {
    throw InvalidArgument(op, std::string(name) + ".shape[" + std::to_string(heads_dim + 1) + "]",
                          std::to_string(t.shape[heads_dim + 1]), "cache head_dim = " + std::to_string(c.head_dim));
  }
}

}  // namespace

void check_kv_append(const KvCacheImpl& cache, const TensorImpl& k, const TensorImpl& v,
                     std::span<const std::int32_t> positions, std::span<const std::int32_t> seq_ids) {
  const char* op = "kv_append";
  const auto& c = cache.config;
  for (auto [name, t] : {std::pair{"k", &k}, std::pair{"v", &v}}) {
    check_rank3(op, name, *t, "[n_tokens, n_kv_heads, head_dim]");
    check_dtype(op, name, *t, true);
    if (t->shape[1] != c.n_kv_heads) {
      throw InvalidArgument(op, std::string(name) + ".shape[1]", std::to_string(t->shape[1]),
                            "cache n_kv_heads = " + std::to_string(c.n_kv_heads));
    }
    check_against_cache(op, name, *t, cache, 1);
  }
  if (v.shape[0] != k.shape[0]) {
    throw InvalidArgument(op, "v.shape[0]", std::to_string(v.shape[0]), "k.shape[0] = " + std::to_string(k.shape[0]));
  }
  if (v.dtype != k.dtype) throw InvalidArgument(op, "v.dtype", to_string(v.dtype), std::string("k.dtype = ") + to_string(k.dtype));
  check_ids(op, "positions", positions, k.shape[0], false);
  if (seq_ids.empty() && c.n_seqs > 1) {
    throw InvalidArgument(op, "seq_ids", "empty",
                          "one id per token: the cache holds n_seqs = " + std::to_string(c.n_seqs) + " sequences");
  }
  if (!seq_ids.empty() && seq_ids.size() != k.shape[0]) {
    throw InvalidArgument(op, "seq_ids.size()", std::to_string(seq_ids.size()), std::to_string(k.shape[0]));
  }
}

ScoresParams check_attn_scores_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& scores,
                                     const TensorImpl* mask, const AttentionTokens& tokens,
                                     const AttentionConfig& config, const char* op) {
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
  // The plain-tensor checks, against a stand-in for the keys: [capacity, n_kv_heads,
  // head_dim] at the default positions, which the cache's slot table then replaces.
  const std::size_t n_tokens = q.shape[0];
  const TensorImpl keys(nullptr, {c.capacity, c.n_kv_heads, c.head_dim}, c.dtype);
  ScoresParams p = check_attn_scores(q, keys, scores, mask, tokens, config, op);
  if (tokens.q_seq_ids.empty() && c.n_seqs > 1) {
    throw InvalidArgument(op, "tokens.q_seq_ids", "empty",
                          "one id per token: the cache holds n_seqs = " + std::to_string(c.n_seqs) + " sequences");
  }
  for (std::size_t t = 0; t < n_tokens; ++t) {
    if (static_cast<std::size_t>(p.q_seq[t]) >= c.n_seqs) {
      throw InvalidArgument(op, "tokens.q_seq_ids[" + std::to_string(t) + "]", std::to_string(p.q_seq[t]),
                            "[0, n_seqs = " + std::to_string(c.n_seqs) + ")");
    }
    cache.check_readable(op, t, static_cast<std::size_t>(p.q_seq[t]), p.q_pos[t], p.window);
  }
  p.from_cache = true;
  // Slot tables, a sequence at a time (this runs per op and per replayed token).
  p.k_pos = cache.slot_pos;
  p.k_seq.resize(p.k_pos.size());
  std::int32_t* seq_of = p.k_seq.data();
  for (std::size_t s = 0; s < c.n_seqs; ++s) {
    const std::int32_t* slot = p.k_pos.data() + s * c.capacity;
    for (std::size_t i = 0; i < c.capacity; ++i) seq_of[s * c.capacity + i] = slot[i] >= 0 ? static_cast<std::int32_t>(s) : -1;
  }
  if (c.rope == KvRope::on_read) {
    p.rope_on_read = true;
    p.rope = check_rope_config(op, c.rope_config, c.head_dim);
    for (std::size_t t = 0; t < n_tokens; ++t) {
      p.q_cpos.push_back(cache.cache_position(static_cast<std::size_t>(p.q_seq[t]), p.q_pos[t]));
    }
    p.k_cpos.assign(p.k_pos.size(), 0);
    for (std::size_t s = 0; s < c.n_seqs; ++s) {
      for (std::size_t i = s * c.capacity; i < (s + 1) * c.capacity; ++i) {
        if (p.k_pos[i] >= 0) p.k_cpos[i] = cache.cache_position(s, p.k_pos[i]);
      }
    }
  }
  return p;
}

std::vector<std::int32_t> check_attn_weighted_sum_cache(const TensorImpl& probs, const KvCacheImpl& cache,
                                                        const TensorImpl& out, const AttentionTokens& tokens) {
  const char* op = "attn_weighted_sum";
  const auto& c = cache.config;
  const TensorImpl values(nullptr, {c.capacity, c.n_kv_heads, c.head_dim}, c.dtype);
  check_attn_weighted_sum(probs, values, out);
  if (!tokens.k_positions.empty() || !tokens.k_seq_ids.empty()) {
    throw InvalidArgument(op, "tokens.k_positions / k_seq_ids", "given", "empty: the cache knows its keys");
  }
  if (!tokens.q_positions.empty()) check_ids(op, "tokens.q_positions", tokens.q_positions, probs.shape[0], false);
  if (tokens.q_seq_ids.empty() && c.n_seqs > 1) {
    throw InvalidArgument(op, "tokens.q_seq_ids", "empty",
                          "one id per token: the cache holds n_seqs = " + std::to_string(c.n_seqs) + " sequences");
  }
  std::vector<std::int32_t> seq = check_ids(op, "tokens.q_seq_ids", tokens.q_seq_ids, probs.shape[0], true);
  for (std::size_t t = 0; t < seq.size(); ++t) {
    if (static_cast<std::size_t>(seq[t]) >= c.n_seqs) {
      throw InvalidArgument(op, "tokens.q_seq_ids[" + std::to_string(t) + "]", std::to_string(seq[t]),
                            "[0, n_seqs = " + std::to_string(c.n_seqs) + ")");
    }
  }
  return seq;
}

namespace {
AttentionPath check_path(AttentionPath path) {
  if (path != AttentionPath::automatic && path != AttentionPath::fused && path != AttentionPath::three_stages) {
    throw InvalidArgument("attention", "config.path", std::to_string(static_cast<int>(path)),
                          "automatic, fused or three_stages");
  }
  return path;
}
}  // namespace

AttentionArgs check_attention(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v, const TensorImpl& out,
                              const TensorImpl* mask, const AttentionTokens& tokens, const AttentionConfig& config) {
  const char* op = "attention";
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  check_rank3(op, "k", k, "[n_keys, n_kv_heads, head_dim]");
  // The stages' checks, against stand-ins for the scores and probabilities.
  const TensorImpl scores(nullptr, {q.shape[0], q.shape[1], k.shape[0]}, DType::f32);
  AttentionArgs a{check_attn_scores(q, k, scores, mask, tokens, config, op), check_attn_softmax(scores, scores, config, op)};
  check_rank3(op, "out", out, "[n_tokens, n_heads, head_dim]");
  check_shape(op, "out", out, {q.shape[0], q.shape[1], q.shape[2]});
  check_rank3(op, "v", v, "[n_keys, n_kv_heads, head_dim]");
  for (std::size_t i = 0; i < 3; ++i) {
    if (v.shape[i] != k.shape[i]) {
      throw InvalidArgument(op, "v.shape[" + std::to_string(i) + "]", std::to_string(v.shape[i]),
                            "k.shape[" + std::to_string(i) + "] = " + std::to_string(k.shape[i]));
    }
  }
  check_kv_dtype(op, "v", v);
  check_dtype(op, "out", out, false);
  check_distinct(op, "out", out, {{"q", &q}, {"k", &k}, {"v", &v}, {"mask", mask}});
  a.path = check_path(config.path);
  return a;
}

AttentionArgs check_attention_cache(const TensorImpl& q, const KvCacheImpl& cache, const TensorImpl& out,
                                    const TensorImpl* mask, const AttentionTokens& tokens,
                                    const AttentionConfig& config) {
  const char* op = "attention";
  check_rank3(op, "q", q, "[n_tokens, n_heads, head_dim]");
  const TensorImpl scores(nullptr, {q.shape[0], q.shape[1], cache.config.capacity}, DType::f32);
  AttentionArgs a{check_attn_scores_cache(q, cache, scores, mask, tokens, config, op),
                  check_attn_softmax(scores, scores, config, op)};
  check_rank3(op, "out", out, "[n_tokens, n_heads, head_dim]");
  check_shape(op, "out", out, {q.shape[0], q.shape[1], q.shape[2]});
  check_dtype(op, "out", out, false);
  check_distinct(op, "out", out, {{"q", &q}, {"mask", mask}});
  a.path = check_path(config.path);
  return a;
}

}  // namespace vkattn::detail
