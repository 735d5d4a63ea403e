#version 450
// attn_decode_group: decode for big query groups (DeepSeek's absorbed MLA: 128 query heads
// over one 576-wide latent KV head; Gemma 4's 512-wide heads), where each K/V byte serves
// many rows and the work is bound by arithmetic, not by the memory. It computes what
// attn_decode.comp does (scores as attn_visible.glsl, sinks in the denominator), shaped
// so that each K/V element is read from memory once per workgroup and used by ROWS rows:
// - a workgroup is ROWS query rows of one KV head in lane groups of LANES invocations, each
//   group RPL rows; each lane holds its rows' query elements (p * LANES + lane) * 4 .. + 3
//   for p < QP in registers, and their sums of p * v for elements (p * LANES + lane) * 4
//   for p < VP, so that each element read from shared memory serves RPL rows;
// - a stage is KEYS keys: the workgroup copies their K rows (and V rows, unless V is the
//   start of each K row: V_FROM_K, a latent cache) into shared memory as floats, then each
//   lane group reads them from there (the same addresses across groups: broadcasts), adds
//   up its share of each row's dot product, and a row's lanes meet by shuffles; every lane
//   then has its rows' scores, runs the online softmax and adds p * v for its elements;
// - splits are interleaved as in attn_decode (split s takes stages s, s + S, ...) and
//   stop at the sequence's occupancy bound; with S > 1 the splits' sums and (max, sum)
//   pairs are merged by attn_decode_merge.comp (attn_merge.glsl);
// - KvRope::on_read: each key's elements are rotated by its place in the cache as they are
//   staged, each query's as they are loaded (partners read again from memory).
//   bindings 0-7: as attn_decode.comp (q, k, v, out, mask, meta, key positions, partials)
//   push: AttnFusedParams; spec: see the constants below
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define VKATTN_WANT_ATTN_FUSED
#include "layout.glsl"
#include "params.h"
#include "rope_phase.glsl"

const uint WG = WG_SIZE;  // ROWS / RPL * LANES, a multiple of the required subgroup size
layout(constant_id = VKATTN_SPEC_DECODE_ROWS) const uint ROWS = 16;  // rows per workgroup
layout(constant_id = VKATTN_SPEC_DECODE_LANES) const uint LANES = 8;  // a power of two within a subgroup
layout(constant_id = VKATTN_SPEC_DECODE_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_DECODE_K_TYPE) const uint K_TYPE = 1u;  // 0 f32, 1 f16, 2 q8_0, 3 q4_0
layout(constant_id = VKATTN_SPEC_DECODE_V_TYPE) const uint V_TYPE = 1u;
layout(constant_id = VKATTN_SPEC_DECODE_K_PIECES) const uint QP = 18;  // query vec4s per lane
layout(constant_id = VKATTN_SPEC_DECODE_V_PIECES) const uint VP = 16;  // sum vec4s per lane
layout(constant_id = VKATTN_SPEC_DECODE_K_ALIGNED) const bool K_ALIGNED = true;  // rows of whole vec4s
layout(constant_id = VKATTN_SPEC_DECODE_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_DECODE_KEYS) const uint KEYS = 8;  // keys per stage
layout(constant_id = VKATTN_SPEC_DECODE_MULTI_SEQ) const bool MULTI_SEQ = false;
layout(constant_id = VKATTN_SPEC_DECODE_Q_ALIGNED) const bool Q_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_DECODE_V_FROM_K) const bool V_FROM_K = false;
layout(constant_id = VKATTN_SPEC_DECODE_RPL) const uint RPL = 1;  // rows per lane group
layout(constant_id = VKATTN_SPEC_DECODE_ROPE_ON_READ) const bool ROPE_ON_READ = false;  // never with V_FROM_K
layout(constant_id = VKATTN_SPEC_DECODE_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;

const uint DK4 = QP * LANES, DV4 = VP * LANES;  // vec4s of a K and a V row in shared memory

#include "attn_row_tiles.glsl"

shared vec4 k_sh[KEYS * DK4];
shared vec4 v_sh[V_FROM_K ? 1u : KEYS * DV4];
shared int kp_sh[KEYS];
shared int ks_sh[KEYS];

// Element e of V row |b| of the stage, as a vec4 index into shared memory.
vec4 v_at(uint b, uint c) {
    return V_FROM_K ? k_sh[b * DK4 + c] : v_sh[b * DV4 + c];
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    // Full subgroups of a size LANES divides: a lane group's lanes are lanes of one subgroup.
    const uint sid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    const uint lane = sid % LANES, r0 = (sid / LANES) * RPL;  // this lane group's first row
    uint kv_head, split, row0, n_rows, seq0;
    if (!row_tile_place(kv_head, split, row0, n_rows, seq0)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }
    // This lane group's RPL rows (rows past n_rows repeat the last one and write nothing):
    // their tokens, heads, positions, sequences, slopes and query elements.
    uint tok[RPL], head[RPL];
    int q_pos[RPL], q_seq[RPL];
    float slope[RPL];
    vec4 q[RPL][QP];
    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        row_query(row0 + min(r0 + i, n_rows - 1u), kv_head, tok[i], head[i], q_pos[i], q_seq[i], slope[i]);
        const uint q_row = (tok[i] * pc.n_heads + head[i]) * pc.head_dim;
        [[unroll]] for (uint p = 0u; p < QP; ++p) {
            const uint e = (p * LANES + lane) * 4u;
            q[i][p] = e < pc.head_dim ? load_q_4(q_row + e, q_row + pc.head_dim) : vec4(0.0);
            if (ROPE_ON_READ && e < pc.rotary_dim) {
                q[i][p] = rope_vec4(0u, q_row, e, uint(meta[off_q_cpos + tok[i]]), q[i][p]);
            }
        }
    }
    float m[RPL], l[RPL];
    vec4 acc[RPL][VP];
    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        m[i] = NEG_MAX;
        l[i] = 0.0;
        [[unroll]] for (uint p = 0u; p < VP; ++p) {
            acc[i][p] = vec4(0.0);
        }
    }

    const uint bound = key_bound(seq0);
    const uint n_stages = (bound + KEYS - 1u) / KEYS;
    for (uint t = split; t < n_stages; t += pc.key_splits) {
        barrier();  // the last stage's rows are read by every row
        // The stage's rows as floats; keys past the bound and empty slots as zeros (a stale
        // slot's V may hold NaN, which no weight of zero may let in).
        for (uint i = lid; i < KEYS * DK4; i += WG) {
            const uint b = i / DK4, e = (i - b * DK4) * 4u, j = t * KEYS + b;
            vec4 x = vec4(0.0);
            const int position = j < bound ? key_position(seq0, j) : -1;
            if (position >= 0 && e < pc.head_dim) {
                const uint kr = key_row(seq0, kv_head, j);
                x = load_k_4(kr + e, kr + pc.head_dim);
                if (ROPE_ON_READ && e < pc.rotary_dim) {  // each key by its place in the cache
                    x = rope_vec4(1u, kr, e, key_cache_position(seq0, position), x);
                }
            }
            k_sh[i] = x;
        }
        if (!V_FROM_K) {
            for (uint i = lid; i < KEYS * DV4; i += WG) {
                const uint b = i / DV4, e = (i - b * DV4) * 4u, j = t * KEYS + b;
                vec4 x = vec4(0.0);
                if (j < bound && e < pc.v_head_dim && key_position(seq0, j) >= 0) {
                    const uint vr = value_row(seq0, kv_head, j);
                    x = load_v_4(vr + e, vr + pc.v_head_dim);
                }
                v_sh[i] = x;
            }
        }
        for (uint b = lid; b < KEYS; b += WG) {  // a workgroup of one lane group has 8 invocations
            const uint j = t * KEYS + b;
            const int position = j < bound ? key_position(seq0, j) : -1;
            kp_sh[b] = position;
            ks_sh[b] = j < bound ? key_sequence(seq0, j, position) : -1;
        }
        barrier();

        // Each key's dot products: this lane's share for each of its rows (one shared load
        // serves RPL rows), then each row's lanes meet by shuffles.
        [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
            const int k_pos = kp_sh[b], k_seq = ks_sh[b];
            bool seen[RPL];
            bool any_seen = false;
            [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                seen[i] = key_visible(q_pos[i], q_seq[i], k_pos, k_seq);
                any_seen = any_seen || seen[i];
            }
            // A key none of this lane group's rows sees (causal, a window, an empty slot)
            // costs nothing more: the branch is the same in all of the group's lanes, which
            // are the only ones its shuffles read.
            if (!any_seen) {
                continue;
            }
            float d[RPL];
            [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                d[i] = 0.0;
            }
            [[unroll]] for (uint p = 0u; p < QP; ++p) {
                const vec4 k = k_sh[b * DK4 + p * LANES + lane];
                [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                    d[i] += dot(q[i][p], k);
                }
            }
            float w[RPL];
            [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                [[unroll]] for (uint o = 1u; o < LANES; o <<= 1u) {
                    d[i] += subgroupShuffleXor(d[i], o);
                }
                const float s = seen[i] ? visible_score(d[i], tok[i], q_pos[i], t * KEYS + b, k_pos, slope[i]) : -1.0 / 0.0;
                // Online softmax one key at a time: a row's sums are rescaled only when
                // its maximum moves.
                if (s > m[i]) {
                    const float rescale = exp(m[i] - s);
                    l[i] *= rescale;
                    [[unroll]] for (uint p = 0u; p < VP; ++p) {
                        acc[i][p] *= rescale;
                    }
                    m[i] = s;
                }
                w[i] = exp(s - m[i]);
                l[i] += w[i];
            }
            [[unroll]] for (uint p = 0u; p < VP; ++p) {
                const vec4 v = v_at(b, p * LANES + lane);
                [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                    acc[i][p] = fma(vec4(w[i]), v, acc[i][p]);
                }
            }
        }
    }

    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        if (r0 + i >= n_rows) {
            break;  // no barrier follows
        }
        const uint out_row = tok[i] * pc.n_heads + head[i];
        const float scale = row_finish(split, out_row, head[i], m[i], l[i], lane == 0u);
        [[unroll]] for (uint p = 0u; p < VP; ++p) {
            row_store(split, out_row, p * LANES + lane, acc[i][p], scale);
        }
    }
}
