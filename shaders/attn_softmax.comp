#version 450
// attn_softmax: for each row of scores (one token, one head):
//   p_j = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)),  m = max(max_j s_j, sink)
// in f32; the sink term only when has_sinks. Masked keys (-inf) get exactly 0; a row with
// no visible key gets zeros: the running max starts at NEG_MAX, not -inf, so
// exp(-inf - m) is 0 rather than NaN, and an empty sum gives a zero reciprocal.
//   binding 0: readonly float scores [n_rows, n_keys]
//   binding 1: writeonly float probs [n_rows, n_keys] (may be the scores buffer)
//   binding 2: readonly float sinks [n_heads] (when has_sinks)
//   push: AttnSoftmaxParams; spec (by name in params.h): workgroup size (a power of two); ROW_CAP,
//   the shared row size; IN_SHARED (n_keys <= ROW_CAP); VEC4 (n_keys % 4
//   == 0: rows load and store as vec4); SUBGROUP_ROWS (VKATTN_SUBGROUPS only):
//   rows per workgroup, each taken by one subgroup, 0 for a workgroup per row
//   variants: VKATTN_SUBGROUPS reduces with subgroup operations (reduce.glsl);
//   VKATTN_TEXEL reads the scores through a uniform texel buffer (tensor_load.glsl says why);
//   VKATTN_BOUND (attention()'s own temporary over a cache; binding 3: the tokens' sequence
//   ids, binding 4: the cache's slot table) handles each row only up to its sequence's
//   occupancy bound rounded up to 8 keys: nothing reads the rest
//   grid: n_rows workgroups (SUBGROUP_ROWS: ceil(n_rows / SUBGROUP_ROWS)), folded
// IN_SHARED: one read of the row into shared memory, then max, exp and sum, and write.
// Otherwise two passes over the row: an online max and rescaled sum, then the write.
// SUBGROUP_ROWS (many short rows: prefill): the workgroup's subgroups share its rows
// (subgroup i takes rows i, i + gl_NumSubgroups, ..., whatever the subgroup size turns out
// to be) and make the two passes with subgroup reductions alone, so no barrier, and no
// workgroup per row, is paid for rows of a few hundred keys. A subgroup need not be full
// (Turnip runs 64-invocation workgroups in 128-lane subgroups; Intel may compile SIMD16
// where it reports 32), so its lanes are counted and ranked with subgroupAdd rather than
// taken from gl_SubgroupSize and gl_SubgroupInvocationID.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_SOFTMAX
#include "layout.glsl"
#include "params.h"
#include "softmax_row.glsl"

layout(constant_id = VKATTN_SPEC_SOFTMAX_ROW_CAP) const uint ROW_CAP = 1024;
layout(constant_id = VKATTN_SPEC_SOFTMAX_IN_SHARED) const bool IN_SHARED = true;
layout(constant_id = VKATTN_SPEC_SOFTMAX_VEC4) const bool VEC4 = false;  // n_keys % 4 == 0: rows move as vec4
layout(constant_id = VKATTN_SPEC_SOFTMAX_SUBGROUP_ROWS) const uint SUBGROUP_ROWS = 0;

#ifdef VKATTN_TEXEL
layout(binding = 0) uniform usamplerBuffer s_texels;
#define TL_TEXELS s_texels
#else
layout(std430, binding = 0) readonly buffer S { uint s_words[]; };
layout(std430, binding = 0) readonly buffer S2 { uvec2 s_words2[]; };
layout(std430, binding = 0) readonly buffer S4 { uvec4 s_words4[]; };
#endif
// Scores are f32 and only read as whole vec4s when VEC4.
#define TL_ALIGNED true
#define TL_WORDS s_words
#define TL_WORDS2 s_words2
#define TL_WORDS4 s_words4
#define TL_TYPE 0u
#define TL_QUANT 0
#define TL_SCALES 0u
#define TL_FN load_s
#include "tensor_load.glsl"
vec4 scores_4(uint i) { return load_s_4(4u * i, 0u); }  // vec4 i
float scores_1(uint e) { return load_s_1(e); }

layout(std430, binding = 1) writeonly buffer P { float probs[]; };
layout(std430, binding = 1) writeonly buffer P4 { vec4 probs4[]; };
layout(std430, binding = 2) readonly buffer Sinks { float sinks[]; };

#ifdef VKATTN_BOUND
layout(std430, binding = 3) readonly buffer QSeq { int q_seq[]; };
layout(std430, binding = 4) readonly buffer Slots { int slots[]; };
uint row_keys(uint row) {
    const uint bound = uint(max(slots[pc.bound_offset + uint(q_seq[row / pc.n_heads])], 0));
    return min(pc.n_keys, (bound + 7u) & ~7u);
}
#else
uint row_keys(uint row) { return pc.n_keys; }
#endif

shared float red[WG_SIZE];
#define REDUCE_SCRATCH red
#include "reduce.glsl"

shared vec4 row_tile[(ROW_CAP + 3u) / 4u];

float max4(vec4 v) { return max(max(v.x, v.y), max(v.z, v.w)); }
float sum4(vec4 v) { return (v.x + v.y) + (v.z + v.w); }

// Two passes over |row| by |n_lanes| invocations (this one is |lane|): an online max and
// rescaled sum, reduced by |sub| (subgroup operations) or the workgroup, then the write.
void two_pass(uint row, uint lane, uint n_lanes, bool sub) {
    const uint base = row * pc.n_keys;
    const bool has_sink = pc.has_sinks != 0u;
    const float sink = has_sink ? sinks[row % pc.n_heads] : NEG_MAX;
    const uint n = VEC4 ? row_keys(row) / 4u : row_keys(row);
    // 1. Online max and sum, rescaled whenever the max grows.
    float m = NEG_MAX, sum = 0.0;
    for (uint i = lane; i < n; i += n_lanes) {
        const vec4 s = VEC4 ? scores_4(base / 4u + i) : vec4(scores_1(base + i), NEG_MAX, NEG_MAX, NEG_MAX);
        const float block_max = max4(s);
        if (block_max > m) {
            sum *= exp(m - block_max);
            m = block_max;
        }
        sum += VEC4 ? sum4(exp(s - m)) : exp(s.x - m);
    }
#ifdef VKATTN_SUBGROUPS
    const float row_max = max(sub ? subgroupMax(m) : workgroup_max(m), sink);
    const float scaled = sum * exp(m - row_max);
    sum = (sub ? subgroupAdd(scaled) : workgroup_sum(scaled)) + (has_sink ? exp(sink - row_max) : 0.0);
#else
    const float row_max = max(workgroup_max(m), sink);
    sum = workgroup_sum(sum * exp(m - row_max)) + (has_sink ? exp(sink - row_max) : 0.0);
#endif
    // 2. Normalize.
    const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
    for (uint i = lane; i < n; i += n_lanes) {
        if (VEC4) {
            probs4[base / 4u + i] = exp(scores_4(base / 4u + i) - row_max) * inv;
        } else {
            probs[base + i] = exp(scores_1(base + i) - row_max) * inv;
        }
    }
}

void main() {
#ifdef VKATTN_SUBGROUPS
    if (SUBGROUP_ROWS > 0u) {
        const uint row0 = wg_linear_id() * SUBGROUP_ROWS;
        const uint n_active = subgroupAdd(1u), rank = subgroupExclusiveAdd(1u);
        for (uint r = gl_SubgroupID; r < SUBGROUP_ROWS && row0 + r < pc.n_rows; r += gl_NumSubgroups) {
            two_pass(row0 + r, rank, n_active, true);
        }
        return;
    }
#endif
    const uint row = wg_linear_id();
    if (row >= pc.n_rows) {
        return;  // whole workgroup: uniform
    }
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    const uint base = row * pc.n_keys;
    const bool has_sink = pc.has_sinks != 0u;
    const float sink = has_sink ? sinks[row % pc.n_heads] : NEG_MAX;

    // Rows are walked in vec4s when n_keys % 4 == 0 (a quarter of the memory operations);
    // otherwise element by element. The tile holds the row as vec4s either way.
    const uint n = VEC4 ? row_keys(row) / 4u : row_keys(row);
    if (IN_SHARED) {
        // 1. Load and take the max.
        float m = NEG_MAX;
        for (uint i = lid; i < n; i += n_lanes) {
            if (VEC4) {
                const vec4 s = scores_4(base / 4u + i);
                row_tile[i] = s;
                m = max(m, max4(s));
            } else {
                const float s = scores_1(base + i);
                row_tile[i / 4u][i & 3u] = s;
                m = max(m, s);
            }
        }
        m = max(workgroup_max(m), sink);
        // 2. Exponentials and their sum (each invocation reads back what it wrote).
        float sum = 0.0;
        for (uint i = lid; i < n; i += n_lanes) {
            if (VEC4) {
                const vec4 e = exp(row_tile[i] - m);
                row_tile[i] = e;
                sum += sum4(e);
            } else {
                const float e = exp(row_tile[i / 4u][i & 3u] - m);
                row_tile[i / 4u][i & 3u] = e;
                sum += e;
            }
        }
        sum = workgroup_sum(sum) + (has_sink ? exp(sink - m) : 0.0);
        // 3. Normalize.
        const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
        for (uint i = lid; i < n; i += n_lanes) {
            if (VEC4) {
                probs4[base / 4u + i] = row_tile[i] * inv;
            } else {
                probs[base + i] = row_tile[i / 4u][i & 3u] * inv;
            }
        }
    } else {
        two_pass(row, lid, n_lanes, false);
    }
}
