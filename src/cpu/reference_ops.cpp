#include "cpu/reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/rope_math.hpp"

namespace vkattn::ref {

void rope(std::span<float> x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim,
          std::span<const std::int32_t> positions, const RopeConfig& config) {
  const std::size_t d = config.rotary_dim;
  std::int32_t max_position = 0;
  for (std::int32_t p : positions) max_position = std::max(max_position, p);
  const detail::RopeTable table = detail::rope_table(config, max_position);
  const std::vector<long double>& theta = table.theta;
  const long double f = table.attention_factor;

  const std::size_t per_token = config.mrope ? 3 : 1;
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < n_heads; ++h) {
      float* row = x.data() + (t * n_heads + h) * head_dim;
      for (std::size_t i = 0; i < d / 2; ++i) {
        // 1. Which two elements form pair i.
        const std::size_t o = config.rotary_offset;
        const std::size_t a = o + (config.layout == RopeLayout::interleaved ? 2 * i : i);
        const std::size_t b = o + (config.layout == RopeLayout::interleaved ? 2 * i + 1 : i + d / 2);
        // 2. Rotate them by m * theta_i (long double keeps the angle exact to ~1e-10 rad
        //    even at m near 2^31; sinl/cosl reduce the range correctly).
        const std::size_t which = config.mrope ? detail::mrope_section(*config.mrope, i) : 0;
        const long double m = positions[t * per_token + which];
        const long double angle = m * theta[i];
        const long double c = std::cos(angle), s = std::sin(angle);
        const long double xa = row[a], xb = row[b];
        row[a] = static_cast<float>((xa * c - xb * s) * f);
        row[b] = static_cast<float>((xa * s + xb * c) * f);
      }
    }
  }
}

namespace {
bool visible(const detail::ScoresParams& p, std::size_t t, std::size_t j) {
  return p.q_seq[t] == p.k_seq[j] && detail::position_visible(p, p.q_pos[t], p.k_pos[j]);
}
}  // namespace

std::vector<float> key_list_mask(std::span<const std::int32_t> list, std::size_t n_tokens, std::size_t width,
                                 std::size_t n_keys) {
  std::vector<float> mask(n_tokens * n_keys, -std::numeric_limits<float>::infinity());
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t i = 0; i < width; ++i) {
      const std::int32_t j = list[t * width + i];
      if (j >= 0 && static_cast<std::size_t>(j) < n_keys) mask[t * n_keys + static_cast<std::size_t>(j)] = 0.0f;
    }
  }
  return mask;
}

void attn_scores(std::span<const float> q, std::span<const float> k, std::span<float> scores, std::span<const float> mask,
                 std::size_t n_tokens, std::size_t n_heads, std::size_t n_kv_heads, std::size_t n_keys, std::size_t head_dim,
                 const detail::ScoresParams& p) {
  const std::size_t group = n_heads / n_kv_heads;
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < n_heads; ++h) {
      const float* qv = &q[(t * n_heads + h) * head_dim];
      for (std::size_t j = 0; j < n_keys; ++j) {
        float& out = scores[(t * n_heads + h) * n_keys + j];
        if (!visible(p, t, j)) {
          out = -std::numeric_limits<float>::infinity();
          continue;
        }
        // 1. Scaled dot product.
        const float* kv = &k[(j * n_kv_heads + h / group) * head_dim];
        double dot = 0;
        for (std::size_t d = 0; d < head_dim; ++d) dot += double{qv[d]} * kv[d];
        double s = p.scale * detail::query_temperature(p, p.q_pos[t]) * dot;
        // 2. Soft-capping, then the additive biases.
        if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
        if (!p.alibi_slopes.empty()) s -= double{p.alibi_slopes[h]} * std::abs(static_cast<double>(p.q_pos[t]) - p.k_pos[j]);
        if (!mask.empty()) s += mask[t * n_keys + j];
        out = static_cast<float>(s);
      }
    }
  }
}

void attn_softmax(std::span<const float> scores, std::span<float> probs, std::size_t n_tokens, std::size_t n_heads,
                  std::size_t n_keys, std::span<const float> sinks) {
  std::vector<double> e(n_keys);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < n_heads; ++h) {
      const float* s = &scores[(t * n_heads + h) * n_keys];
      float* p = &probs[(t * n_heads + h) * n_keys];
      // 1. The row max over visible keys (and the sink).
      bool any = false;
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < n_keys; ++j) {
        if (std::isinf(s[j]) && s[j] < 0) continue;
        any = true;
        m = std::max(m, double{s[j]});
      }
      if (!any) {
        std::fill(p, p + n_keys, 0.0f);
        continue;
      }
      const bool has_sink = !sinks.empty();
      if (has_sink) m = std::max(m, double{sinks[h]});
      // 2. exp(s - m) and their sum; 3. normalize.
      double sum = has_sink ? std::exp(double{sinks[h]} - m) : 0.0;
      for (std::size_t j = 0; j < n_keys; ++j) {
        e[j] = (std::isinf(s[j]) && s[j] < 0) ? 0.0 : std::exp(double{s[j]} - m);
        sum += e[j];
      }
      for (std::size_t j = 0; j < n_keys; ++j) p[j] = static_cast<float>(e[j] / sum);
    }
  }
}

void attn_weighted_sum(std::span<const float> probs, std::span<const float> v, std::span<float> out, std::size_t n_tokens,
                       std::size_t n_heads, std::size_t n_kv_heads, std::size_t n_keys, std::size_t head_dim) {
  const std::size_t group = n_heads / n_kv_heads;
  std::vector<double> acc(head_dim);
  for (std::size_t t = 0; t < n_tokens; ++t) {
    for (std::size_t h = 0; h < n_heads; ++h) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const float* p = &probs[(t * n_heads + h) * n_keys];
      for (std::size_t j = 0; j < n_keys; ++j) {
        if (p[j] == 0.0f) continue;  // masked keys contribute nothing, even if v is not finite
        const float* vv = &v[(j * n_kv_heads + h / group) * head_dim];
        for (std::size_t d = 0; d < head_dim; ++d) acc[d] += double{p[j]} * vv[d];
      }
      float* o = &out[(t * n_heads + h) * head_dim];
      for (std::size_t d = 0; d < head_dim; ++d) o[d] = static_cast<float>(acc[d]);
    }
  }
}

}  // namespace vkattn::ref
