// The reference: plain loops written from the formulas in docs/rope.md and
// docs/attention.md, RoPE's angles in long double and attention's sums in double, never
// from the shaders. Every GPU op is tested
// against these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/tensor_impl.hpp"
#include "vkattn/types.hpp"

namespace vkattn::ref {

// RoPE in place on x[n_tokens, n_heads, head_dim]; |config| is checked, rotary_dim
// resolved. For pair i with elements (a, b) (interleaved: 2i, 2i+1; half: i, i + d/2) and
// the angle pos * theta_i (theta_i = base^(-2i/d), rescaled as config.scaling says):
//   x'[a] = (x[a] cos - x[b] sin) * attention_factor
//   x'[b] = (x[a] sin + x[b] cos) * attention_factor
void rope(std::span<float> x, std::size_t n_tokens, std::size_t n_heads, std::size_t head_dim,
          std::span<const std::int32_t> positions, const RopeConfig& config);

// Attention, stage 1. q [T, H, D], k [N, Hkv, D], scores [T, H, N]; mask [T, N] or empty.
//   s = scale * <q[t,h], k[j,kvh]>, kvh = h / (H / Hkv), accumulated in double;
//   s = softcap * tanh(s / softcap);  s -= slope[h] * |pos_t - pos_j|;  s += mask[t, j];
//   s = -inf where key j is not visible to token t.
void attn_scores(std::span<const float> q, std::span<const float> k, std::span<float> scores, std::span<const float> mask,
                 std::size_t n_tokens, std::size_t n_heads, std::size_t n_kv_heads, std::size_t n_keys, std::size_t head_dim,
                 const detail::ScoresParams& params);

// A key list (attention's i32 mask [T, width]) as the f32 mask [T, N] it stands for: 0 at
// each listed key in [0, N), -inf elsewhere (other entries name no key; a repeat is one).
std::vector<float> key_list_mask(std::span<const std::int32_t> list, std::size_t n_tokens, std::size_t width, std::size_t n_keys);

// Stage 2, per row of n_keys: p_j = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)),
// m = max(max_j s_j, sink); sink only when |sinks| is given (per head). A row where no
// key is visible (all -inf) gives zeros.
void attn_softmax(std::span<const float> scores, std::span<float> probs, std::size_t n_tokens, std::size_t n_heads,
                  std::size_t n_keys, std::span<const float> sinks);

// Stage 3. out[t,h,:] = sum_j p[t,h,j] v[j,kvh,:], accumulated in double.
void attn_weighted_sum(std::span<const float> probs, std::span<const float> v, std::span<float> out, std::size_t n_tokens,
                       std::size_t n_heads, std::size_t n_kv_heads, std::size_t n_keys, std::size_t head_dim);

}  // namespace vkattn::ref
