#version 450
// attn_fused_combine: the second pass of a fused attention whose keys were split across
// workgroups. Split s left, per row, unnormalized sums a_s [head_dim] relative to its
// running maximum m_s, and its sum of exponentials l_s; with M the largest m_s (and the
// row's sink logit, as in attn_softmax):
//   out = sum_s a_s exp(m_s - M) / (sum_s l_s exp(m_s - M) + exp(sink - M))
// and zeros where the denominator is 0 (no visible key, no sink).
//   binding 0: readonly float partial: [splits, n_rows, head_dim] sums, then from word
//              ml_offset the [splits, n_rows, 2] (m, l) pairs
//   binding 1: writeonly float out [n_rows, head_dim]; binding 2: readonly float sinks
//   [n_heads] (when has_sinks)
//   push: AttnFusedCombineParams; spec (by name in params.h): workgroup size
//   variants: VKATTN_TEXEL reads the partial results through a texel buffer
//   grid: ceil(n_rows * head_dim / workgroup size) workgroups, folded
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_FUSED_COMBINE
#include "float_bits.glsl"
#include "layout.glsl"
#include "params.h"
#include "softmax_row.glsl"

#ifdef VKATTN_TEXEL
layout(binding = 0) uniform usamplerBuffer partial_texels;
#define TL_TEXELS partial_texels
#else
layout(std430, binding = 0) readonly buffer Partial { uint partial_words[]; };
layout(std430, binding = 0) readonly buffer Partial2 { uvec2 partial_words2[]; };
layout(std430, binding = 0) readonly buffer Partial4 { uvec4 partial_words4[]; };
#endif
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };
layout(std430, binding = 2) readonly buffer Sinks { float sinks[]; };

#define TL_ALIGNED false
#define TL_WORDS partial_words
#define TL_WORDS2 partial_words2
#define TL_WORDS4 partial_words4
#define TL_TYPE 0u
#define TL_QUANT 0
#define TL_SCALES 0u
#define TL_FN load_partial
#include "tensor_load.glsl"

void main() {
    const uint i = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= pc.n_rows * pc.head_dim) {
        return;
    }
    const uint row = i / pc.head_dim;
    float m_all = NEG_MAX;  // exp(m_s - m_all) stays finite
    for (uint s = 0u; s < pc.splits; ++s) {
        m_all = max(m_all, load_partial_1(pc.ml_offset + 2u * (s * pc.n_rows + row)));
    }
    const float sink = pc.has_sinks != 0u ? sinks[row % pc.n_heads] : 0.0;
    if (pc.has_sinks != 0u) {
        m_all = max(m_all, sink);
    }
    float sum = 0.0, denom = pc.has_sinks != 0u ? exp(sink - m_all) : 0.0;
    for (uint s = 0u; s < pc.splits; ++s) {
        const uint ml = pc.ml_offset + 2u * (s * pc.n_rows + row);
        const float w = exp(load_partial_1(ml) - m_all);
        denom += load_partial_1(ml + 1u) * w;
        sum += load_partial_1(s * pc.n_rows * pc.head_dim + i) * w;  // consecutive i, consecutive words
    }
    out_[i] = denom > 0.0 || is_nan_bits(denom) ? sum / denom : 0.0;  // no visible key: zeros; NaN stays
}
