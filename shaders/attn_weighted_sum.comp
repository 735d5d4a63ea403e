#version 450
// attn_weighted_sum: out[t, h, :] = sum_j probs[t, h, j] * v[j, kvh(h), :], in f32.
//   binding 0: readonly float probs [n_tokens, n_heads, n_keys]
//   binding 1: readonly v words, element (j, g, d) at s*v_seq_stride + j*v_key_stride +
//              g*v_head_stride + d, s the tile's sequence for a KV cache, else 0: f32 bits
//              packed f16, or q8_0/q4_0 codes and scales (V_TYPE)
//   binding 2: writeonly float out [n_tokens, n_heads, head_dim], or with key_splits > 1
//              partial sums [key_splits, n_tokens, n_heads, head_dim] that
//              attn_weighted_sum_reduce adds up
//   binding 3: readonly int meta: the query tokens' sequence ids at off_q_seq
//   push: AttnWsumParams; spec (by name in params.h): workgroup size = KEY_GROUPS * ceil(head_dim / EPL);
//   ROWS, most rows per tile; V_TYPE (0 f32, 1 f16, 2 q8_0, 3 q4_0);
//   VEC (rows start on 16 bytes: head_dim % EPL == 0); P_VEC4 (n_keys % 4
//   == 0: probabilities are read 4 keys at a time); KEY_GROUPS
//   variants: VKATTN_TEXEL; VKATTN_BOUND (binding 4: a cache's slot table) stops at the
//   occupancy bound, and reads a paged cache's rows through its block table (KV_PAGE)
//   grid: n_kv_heads * row_tiles * key_splits workgroups, folded
// A workgroup computes ROWS rows of one kv head (all heads sharing it: v is read once per
// kv head) over one range of keys. Each invocation owns EPL consecutive dims (4 floats or
// 8 halves: 16 bytes, one load per key; 8 floats for rows over 256), and the workgroup is KEY_GROUPS groups of
// invocations covering a whole v row, each group taking a run of consecutive batches of 8
// keys (so its loads walk forwards, as prefetchers like); the groups' sums meet in shared
// memory at the end. A group's invocations read the
// same probabilities (a broadcast) and contiguous v rows. A batch whose probabilities are
// all 0 for the tile (masked: the future of a causal row, another sequence) is skipped
// without touching v, and a key no row sees contributes nothing: hidden slots may hold
// anything.
// Decode has one row tile per kv head, so without the key splits a GPU would run only
// n_kv_heads workgroups, each streaming every key; the probabilities are already
// normalized, so the splits' partial sums simply add up.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_WSUM
#include "layout.glsl"
#include "params.h"

layout(constant_id = VKATTN_SPEC_WSUM_ROWS) const uint ROWS = 8;
layout(constant_id = VKATTN_SPEC_WSUM_V_TYPE) const uint V_TYPE = VKATTN_KV_F32;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_WSUM_VEC) const bool VEC = true;
layout(constant_id = VKATTN_SPEC_WSUM_P_VEC4) const bool P_VEC4 = false;  // n_keys % 4 == 0: 4 keys per step
layout(constant_id = VKATTN_SPEC_WSUM_KEY_GROUPS) const uint KEY_GROUPS = 1;
// 8 floats per invocation too (two loads) where 4 would need more than 64 invocations per
// row (rows over 256 floats: the spec minimum allows 128 invocations per workgroup).
layout(constant_id = VKATTN_SPEC_WSUM_EIGHT) const bool EIGHT_F32 = false;

const bool EIGHT = V_TYPE != VKATTN_KV_F32 || EIGHT_F32;  // 8 elements per 16 bytes or fewer, or wide rows
const uint EPL = EIGHT ? 8u : 4u;  // elements per invocation

#ifdef VKATTN_TEXEL
layout(binding = 0) uniform usamplerBuffer p_texels;
layout(binding = 1) uniform usamplerBuffer v_texels;
#else
layout(std430, binding = 0) readonly buffer P { uint p_words[]; };
layout(std430, binding = 0) readonly buffer P2 { uvec2 p_words2[]; };
layout(std430, binding = 0) readonly buffer P4 { uvec4 p_words4[]; };
layout(std430, binding = 1) readonly buffer V { uint v_words[]; };
layout(std430, binding = 1) readonly buffer V2 { uvec2 v_words2[]; };
layout(std430, binding = 1) readonly buffer V4 { uvec4 v_words4[]; };
#endif
layout(std430, binding = 2) writeonly buffer O { float out_[]; };
layout(std430, binding = 3) readonly buffer Meta { int meta[]; };
#ifdef VKATTN_BOUND
// attention()'s own temporary over a cache: keys past the sequence's occupancy bound
// (rounded up to the softmax's 8) are not read.
layout(std430, binding = 4) readonly buffer Slots { int slots[]; };
#endif

// One row's partial sums per key group, summed by group 0.
#include "attn_key_groups.glsl"

#include "attn_rows.glsl"

// Probabilities are f32 and read as whole vec4s only when P_VEC4.
#ifdef VKATTN_TEXEL
#define TL_TEXELS p_texels
#endif
#define TL_ALIGNED true
#define TL_WORDS p_words
#define TL_WORDS2 p_words2
#define TL_WORDS4 p_words4
#define TL_TYPE 0u
#define TL_QUANT 0
#define TL_SCALES 0u
#define TL_FN load_p
#include "tensor_load.glsl"
#ifdef VKATTN_TEXEL
#define TL_TEXELS v_texels
#endif

#define TL_ALIGNED VEC
#define TL_WORDS v_words
#define TL_WORDS2 v_words2
#define TL_WORDS4 v_words4
#define TL_TYPE V_TYPE
#define TL_QUANT 1
#define TL_SCALES pc.v_scales
#define TL_FN load_v
#include "tensor_load.glsl"
#ifdef VKATTN_BOUND
// A paged cache's block table follows each sequence's n_keys slot entries (params.h).
#define KV_TABLE_WORD(seq, entry) slots[(seq) * (pc.n_keys + (pc.n_keys >> (KV_PAGE - 1u))) + pc.n_keys + (entry)]
#endif
#include "kv_row.glsl"

void main() {
    const uint lanes = gl_WorkGroupSize.x / KEY_GROUPS;  // invocations per v row
    const uint lane = gl_LocalInvocationID.x % lanes;     // dims EPL lane .. EPL lane + EPL - 1
    const uint key_group = gl_LocalInvocationID.x / lanes;
    uint split, kv_head, row0, n_rows;
    if (!tile_place(pc.key_splits, split, kv_head, row0, n_rows)) {
        return;  // whole workgroup: uniform
    }

    // Where each row's probabilities start; rows past the tile repeat the last row, so the
    // loop needs no bounds check (their sums are not written).
    uint tok[ROWS], head[ROWS], p_row[ROWS];
    tile_rows(row0, n_rows, kv_head, tok, head);
    for (uint r = 0u; r < ROWS; ++r) {
        p_row[r] = (tok[r] * pc.n_heads + head[r]) * pc.n_keys;
    }
    vec4 acc_lo[ROWS], acc_hi[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc_lo[r] = vec4(0.0);
        acc_hi[r] = vec4(0.0);
    }
    const uint seq0 = pc.v_seq_stride != 0u || KV_PAGE != 0u ? uint(meta[pc.off_q_seq + tok[0]]) : 0u;
    // A split's keys are runs of keys_per_split, key_splits runs apart: one run unless the
    // host sized the grid for the device rather than the capacity (VKATTN_BOUND), so
    // that a cache far larger than what it holds launches no empty workgroups.
#ifdef VKATTN_BOUND
    const uint key_end = min(pc.n_keys, (uint(max(slots[pc.bound_offset + seq0], 0)) + 7u) & ~7u);
#else
    const uint key_end = pc.n_keys;
#endif
    for (uint j_begin = split * pc.keys_per_split; j_begin < key_end; j_begin += pc.key_splits * pc.keys_per_split) {
        const uint j_end = min(j_begin + pc.keys_per_split, key_end);
        const uint n_batches = (j_end - j_begin + 7u) / 8u, per_group = (n_batches + KEY_GROUPS - 1u) / KEY_GROUPS;
        const uint jg_end = min(j_begin + (key_group + 1u) * per_group * 8u, j_end);
        // Keys go in batches of 8 per key group: the probabilities, then all 8 v rows, then the
        // sums. The v loads do not depend on each other, so their cache misses overlap (loaded
        // one by one between the sums, each key's miss stalls the loop on CPU devices; GPUs
        // hide latency better with more loads in flight too).
        for (uint j = j_begin + key_group * per_group * 8u; j < jg_end; j += 8u) {
            vec4 p[ROWS][2];
            bool any = false;
            for (uint r = 0u; r < ROWS; ++r) {
                for (uint h = 0u; h < 2u; ++h) {
                    const uint jh = j + 4u * h;
                    if (P_VEC4) {  // n_keys % 4 == 0, and j_end too
                        p[r][h] = jh < j_end ? load_p_4(p_row[r] + jh, 0u) : vec4(0.0);
                    } else {
                        for (uint i = 0u; i < 4u; ++i) {
                            p[r][h][i] = jh + i < j_end ? load_p_1(p_row[r] + jh + i) : 0.0;
                        }
                    }
                    any = any || p[r][h] != vec4(0.0);
                }
            }
            if (!any) {
                continue;  // the same for the whole key group
            }
            vec4 lo[8], hi[8];
            uint v_rows[8];  // past the end: unused
            const uint last = min(j + 7u, j_end - 1u);
            KV_ROW_RUN(v_rows, 8u, seq0, kv_head, j, last, pc.v_seq_stride, pc.v_head_stride, pc.v_key_stride)
            for (uint i = 0u; i < 8u; ++i) {
                const uint v_row = v_rows[i];
                hi[i] = vec4(0.0);
                if (EIGHT) {
                    load_v_8(v_row + 8u * lane, v_row + pc.head_dim, lo[i], hi[i]);
                } else {
                    lo[i] = load_v_4(v_row + 4u * lane, v_row + pc.head_dim);
                }
            }
            for (uint i = 0u; i < 8u; ++i) {
                // A key no row sees is zeroed, not multiplied by 0: its v may be anything (a
                // stale slot, NaN); a key some row sees is real, so 0 * v is 0 for the others.
                bool seen = false;
                for (uint r = 0u; r < ROWS; ++r) {
                    seen = seen || p[r][i / 4u][i & 3u] != 0.0;
                }
                const vec4 vlo = seen ? lo[i] : vec4(0.0), vhi = seen ? hi[i] : vec4(0.0);
                for (uint r = 0u; r < ROWS; ++r) {
                    const float w = p[r][i / 4u][i & 3u];
                    acc_lo[r] = fma(vec4(w), vlo, acc_lo[r]);
                    if (EIGHT) {
                        acc_hi[r] = fma(vec4(w), vhi, acc_hi[r]);
                    }
                }
            }
        }
    }

    for (uint r = 0u; r < ROWS; ++r) {
        if (r >= n_rows) {
            break;  // uniform
        }
        if (KEY_GROUPS > 1u) {
            float no_l = 0.0;
            sum_key_groups(gl_LocalInvocationID.x, lane, lanes, key_group, acc_lo[r], acc_hi[r], no_l);
        }
        if (key_group == 0u) {
            const uint o = split * pc.out_split_stride + (tok[r] * pc.n_heads + head[r]) * pc.head_dim + EPL * lane;
            for (uint e = 0u; e < EPL; ++e) {
                if (EPL * lane + e < pc.head_dim) {
                    out_[o + e] = e < 4u ? acc_lo[r][e] : acc_hi[r][e - 4u];
                }
            }
        }
    }
}
