#version 450
// attn_fused: out[t, h] = sum_j softmax_j(S[t, h, :]) v[j, kvh(h)] in one pass over the keys
// (flash attention): S exactly as attn_scores computes it (attn_visible.glsl), the softmax
// of attn_softmax (sinks in the denominator only; a row with no visible key gives zeros),
// and neither scores nor probabilities leave the workgroup.
//   binding 0: readonly q words [n_tokens, n_heads, head_dim] (Q_F16)
//   binding 1, 2: readonly k, v words, element (j, g, d) at s*k_seq_stride + j*k_key_stride +
//              g*k_head_stride + d (v: its own strides, d < v_head_dim), s the tile's sequence
//              for a KV cache, else 0 (K_TYPE, V_TYPE)
//   binding 3: writeonly float out [n_tokens, n_heads, v_head_dim]; with key_splits > 1
//              each split's unnormalized sums [key_splits, n_tokens * n_heads, v_head_dim],
//              then from word ml_offset its (running max, sum of exponentials) pairs
//              [key_splits, n_tokens * n_heads, 2], which attn_fused_combine merges
//   binding 4: readonly float mask [n_tokens, n_keys] (when has_mask)
//   binding 5: readonly int meta: positions, sequence ids, ALiBi slopes, sink logits and
//              RoPE frequencies (params.h: VKATTN_META_*)
//   binding 6: readonly int key positions (params.h): plain keys' positions and sequences,
//              or a cache's slot table
//   push: AttnParams; spec (by name in params.h): workgroup size = KEY_GROUPS * ceil(v_head_dim / EPL);
//   ROWS; Q_VEC4 = ROWS * ceil(head_dim / 4) (1 with texel reads: the
//   query tile is not used); Q_F16, K_TYPE, V_TYPE (0 f32, 1 f16, 2 q8_0, 3 q4_0); K_VEC,
//   V_VEC (rows start on 16 bytes: a width and strides % 4 == 0 for f32, % 8 for f16);
//   KEY_GROUPS; KEYS, keys per invocation (a block is KEYS * workgroup size keys);
//   ROPE_ON_READ (KvRope::on_read: the query tile and each key are rotated by
//   their in-cache positions as they are read, attn_rope_read.glsl);
//   ROPE_INTERLEAVED; V_EIGHT
//   variants: VKATTN_TEXEL reads q, k and v through texel buffers (tensor_load.glsl);
//   VKATTN_SUBGROUPS finds a block's maxima with subgroup operations
//   grid: n_kv_heads * row_tiles * key_splits workgroups, folded
// A workgroup takes ROWS query rows of one kv head (every query head sharing it, so k and v
// are read once per kv head) over one range of keys, a block of KEYS keys per invocation
// at a time:
// 1. each invocation scores KEYS consecutive keys against the rows, whose queries all
//    invocations read at the same address (from shared memory, or with texel reads from
//    the texel buffer);
// 2. each row's block maximum (subgroup maxima combined in shared memory, or without
//    subgroup operations a scan of every invocation's maximum) becomes its running
//    maximum, the same in every invocation; the running sums are rescaled to it, and each invocation publishes
//    exp(s - max) of its own keys;
// 3. KEY_GROUPS groups of invocations, each covering one v row in 16-byte units (contiguous),
//    add up p * v for their share of the block's keys, and the probabilities.
// Two barriers per block: the next block's step 1 needs no barrier of its own because
// step 2's barrier has already passed in every invocation. A block no row sees skips step
// 3. At the end the groups' sums meet in shared memory.
#extension GL_GOOGLE_include_directive : require
#ifdef VKATTN_SUBGROUPS
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "fma_dot.glsl"
#include "softmax_row.glsl"
#include "rope_phase.glsl"

layout(constant_id = VKATTN_SPEC_FUSED_ROWS) const uint ROWS = 8;
layout(constant_id = VKATTN_SPEC_FUSED_Q_VEC4) const uint Q_VEC4 = 256;
layout(constant_id = VKATTN_SPEC_FUSED_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_FUSED_K_TYPE) const uint K_TYPE = VKATTN_KV_F32;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_FUSED_V_TYPE) const uint V_TYPE = VKATTN_KV_F32;
// V rows over 256 floats are loaded 8 floats at a time too (V_EIGHT), so that a row needs
// at most 72 invocations (576 / 8) and a workgroup fits the spec minimum of 128.
layout(constant_id = VKATTN_SPEC_FUSED_V_EIGHT) const bool V_EIGHT = false;
const bool K_WIDE = K_TYPE != VKATTN_KV_F32, V_WIDE = V_TYPE != VKATTN_KV_F32 || V_EIGHT;  // loaded 8 elements at a time
layout(constant_id = VKATTN_SPEC_FUSED_K_VEC) const bool K_VEC = true;
layout(constant_id = VKATTN_SPEC_FUSED_V_VEC) const bool V_VEC = true;
layout(constant_id = VKATTN_SPEC_FUSED_KEY_GROUPS) const uint KEY_GROUPS = 1;
layout(constant_id = VKATTN_SPEC_FUSED_KEYS) const uint KEYS = 1;  // keys per invocation in step 1
LEAN_FIXED(VKATTN_SPEC_FUSED_ROPE_ON_READ) const bool ROPE_ON_READ = false;
layout(constant_id = VKATTN_SPEC_FUSED_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;

const uint EPL = V_WIDE ? 8u : 4u;  // v elements per invocation: 16 bytes of f16
const uint ROWS4 = (ROWS + 3u) / 4u;

#define ATTN_Q_ALIGNED K_VEC  // q rows start on 4 elements whenever k rows do
#define ATTN_K_ALIGNED K_VEC
#define ATTN_V_ALIGNED V_VEC
#include "attn_inputs.glsl"

#include "attn_rows.glsl"
#include "attn_visible.glsl"

// With texel reads the query values are fetched where they are used, like the scores
// kernel's (on CPU devices a shared-memory read is a loop over lanes, a texel fetch a few
// vector loads; on GPUs both are broadcasts from a cache); else they sit in q_tile.
#ifdef VKATTN_TEXEL
const bool Q_DIRECT = !ROPE_ON_READ;  // rotated queries live in the tile
#else
const bool Q_DIRECT = false;
#endif
shared vec4 q_tile[Q_VEC4];
#include "attn_rope_read.glsl"
#include "attn_dot.glsl"
// Step 2's exchange: per row, the subgroups' maxima, or every invocation's maximum.
shared float red[ROWS * WG_SIZE];
// Step 3's probabilities: block key i's rows at i * ROWS4.
shared vec4 p_blk[WG_SIZE * KEYS * ROWS4];
// The end: the groups' sums of one row.
#include "attn_key_groups.glsl"

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    const uint lanes = n_lanes / KEY_GROUPS;  // invocations per v row
    const uint lane = lid % lanes;            // v dims EPL lane .. EPL lane + EPL - 1
    const uint key_group = lid / lanes;
    read_meta_offsets();
    uint split, kv_head, row0, n_rows;
    if (!tile_place(pc.key_splits, split, kv_head, row0, n_rows)) {
        return;  // whole workgroup: uniform
    }
    const uint d4 = (pc.head_dim + 3u) / 4u;

    uint tok[ROWS], head[ROWS], q_row[ROWS];
    int q_pos[ROWS], q_seq[ROWS];
    float slope[ROWS];
    tile_queries(row0, n_rows, kv_head, tok, head, q_row, q_pos, q_seq);
    for (uint r = 0u; r < ROWS; ++r) {
        slope[r] = alibi_slope(head[r]);
    }
    // With cache keys a tile holds one sequence's rows and reads that sequence's slots.
    const uint seq0 = pc.k_meta_stride != 0u ? uint(q_seq[0]) : 0u;
    for (uint i = Q_DIRECT ? n_rows * d4 : lid; i < n_rows * d4; i += n_lanes) {
        const uint r = i / d4, c = i - r * d4;
        q_tile[i] = load_q_4(q_row[r] + 4u * c, q_row[r] + pc.head_dim);
    }
    if (!Q_DIRECT) {
        barrier();
    }
    if (ROPE_ON_READ) {
        rope_rotate_query_tile(n_rows, d4, tok, lid, n_lanes);  // by their in-cache positions
        barrier();
    }

    // Running maximum (the same in every invocation; -FLT_MAX, not -inf, so that a block
    // of masked keys gives exp(-inf - m) = 0 rather than NaN), this group's running sum of
    // exponentials, and its sums of p * v for its dims.
    float m[ROWS], l[ROWS];
    vec4 acc_lo[ROWS], acc_hi[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        m[r] = NEG_MAX;
        l[r] = 0.0;
        acc_lo[r] = vec4(0.0);
        acc_hi[r] = vec4(0.0);
    }
    const uint j_begin = split * pc.keys_per_split;
    const uint j_end = min(j_begin + pc.keys_per_split, key_bound(seq0));  // the occupancy bound
    const uint block = n_lanes * KEYS;
    for (uint blk = j_begin; blk < j_end; blk += block) {
        // 1. This invocation's KEYS consecutive keys against every row: each query value
        //    read serves KEYS keys.
        const uint key0 = blk + lid * KEYS;
        uint visible[KEYS];
        int k_pos[KEYS];
        uint k_row[KEYS];
        bool work = false;
        for (uint i = 0u; i < KEYS; ++i) {
            const uint j = key0 + i;
            visible[i] = 0u;
            k_pos[i] = 0;
            if (j < j_end) {
                k_pos[i] = key_position(seq0, j);
                const int k_seq = key_sequence(seq0, j, k_pos[i]);
                for (uint r = 0u; r < ROWS; ++r) {
                    if (r < n_rows && key_visible(q_pos[r], q_seq[r], k_pos[i], k_seq)) {
                        visible[i] |= 1u << r;
                    }
                }
            }
            work = work || visible[i] != 0u;
            k_row[i] = key_row(seq0, kv_head, j < j_end ? j : j_begin);  // past the end: unused
        }
        float dot[ROWS_KEYS];
        for (uint i = 0u; i < ROWS * KEYS; ++i) {
            dot[i] = 0.0;
        }
        if (ROPE_ON_READ) {
            uint cpos[KEYS];
            for (uint i = 0u; i < KEYS; ++i) {
                cpos[i] = key_cache_position(seq0, k_pos[i]);  // keys past j_end: unused
            }
            ROPE_READ_DOTS(dot, d4, k_row, cpos, work)
        } else if (K_VEC && K_WIDE) {
            const uint n8 = work ? pc.head_dim / 8u : 0u;
            for (uint c = 0u; c < n8; ++c) {
                vec4 a[KEYS], b[KEYS];
                for (uint i = 0u; i < KEYS; ++i) {
                    load_k_8(k_row[i] + 8u * c, k_row[i] + pc.head_dim, a[i], b[i]);
                }
                for (uint r = 0u; r < ROWS; ++r) {
                    vec4 qa, qb;
                    query8(q_row[r], r, c, d4, qa, qb);
                    for (uint i = 0u; i < KEYS; ++i) {
                        dot[r * KEYS + i] = fma_dot(qb, b[i], fma_dot(qa, a[i], dot[r * KEYS + i]));
                    }
                }
            }
        } else if (K_VEC) {
            const uint n4 = work ? d4 : 0u;
            for (uint c = 0u; c < n4; ++c) {
                dot_step4(k_row, q_row, c, d4, dot);
            }
        } else {
            const uint n = work ? pc.head_dim : 0u;
            for (uint d = 0u; d < n; ++d) {
                dot_step1(k_row, q_row, d, d4, dot);
            }
        }
        // Scores, and each row's largest among this invocation's keys.
        float s[ROWS * KEYS], own_max[ROWS];
        for (uint r = 0u; r < ROWS; ++r) {
            own_max[r] = -1.0 / 0.0;  // -inf
            for (uint i = 0u; i < KEYS; ++i) {
                const float v = (visible[i] & (1u << r)) != 0u
                                    ? visible_score(dot[r * KEYS + i], tok[r], q_pos[r], key0 + i, k_pos[i], slope[r])
                                    : -1.0 / 0.0;
                s[r * KEYS + i] = v;
                own_max[r] = max(own_max[r], v);
            }
        }

        // 2. The block's maxima, the rescaling, and this invocation's probabilities.
#ifdef VKATTN_SUBGROUPS
        for (uint r = 0u; r < ROWS; ++r) {
            const float sg_max = subgroupMax(own_max[r]);
            if (subgroupElect()) {
                red[r * n_lanes + gl_SubgroupID] = sg_max;
            }
        }
        barrier();
        const uint n_red = gl_NumSubgroups;
#else
        for (uint r = 0u; r < ROWS; ++r) {
            red[r * n_lanes + lid] = own_max[r];
        }
        barrier();
        const uint n_red = n_lanes;
#endif
        // Zero, not undefined, in the components of rows past ROWS (a tile of 1 or 3 rows):
        // step 3 reads whole vec4s, and a nonzero garbage probability would make it read
        // (and multiply by 0) the V row of a key no row sees, which may hold NaN.
        vec4 p_own[KEYS][ROWS4];
        for (uint i = 0u; i < KEYS; ++i) {
            for (uint w = 0u; w < ROWS4; ++w) {
                p_own[i][w] = vec4(0.0);
            }
        }
        bool block_seen = false;  // the same in every invocation
        for (uint r = 0u; r < ROWS; ++r) {
            float block_max = red[r * n_lanes];
            for (uint i = 1u; i < n_red; ++i) {
                block_max = max(block_max, red[r * n_lanes + i]);
            }
            block_seen = block_seen || block_max > -1.0 / 0.0;
            const float m_new = max(m[r], block_max);
            const float rescale = exp(m[r] - m_new);
            m[r] = m_new;
            l[r] *= rescale;
            acc_lo[r] *= rescale;
            acc_hi[r] *= rescale;
            for (uint i = 0u; i < KEYS; ++i) {
                p_own[i][r / 4u][r & 3u] = exp(s[r * KEYS + i] - m_new);
            }
        }
        if (!block_seen) {
            // No row sees a key of this block (the future of a causal tile, another
            // sequence's keys): nothing to add. The barrier keeps every invocation's reads
            // of red above before the next block's writes.
            barrier();
            continue;
        }
        for (uint i = 0u; i < KEYS; ++i) {
            for (uint w = 0u; w < ROWS4; ++w) {
                p_blk[(lid * KEYS + i) * ROWS4 + w] = p_own[i][w];
            }
        }
        barrier();

        // 3. This group's keys of the block, 4 at a time: probabilities, v rows, then sums.
        const uint g_end = min(blk + (key_group + 1u) * lanes * KEYS, j_end);
        for (uint jj = blk + key_group * lanes * KEYS; jj < g_end; jj += 4u) {
            vec4 p[4][ROWS4];
            vec4 lo[4], hi[4];
            for (uint b = 0u; b < 4u; ++b) {
                bool seen = false;
                for (uint i = 0u; i < ROWS4; ++i) {
                    p[b][i] = jj + b < g_end ? p_blk[(jj + b - blk) * ROWS4 + i] : vec4(0.0);
                    seen = seen || p[b][i] != vec4(0.0);
                }
                // A key no row sees is not read: a hidden cache slot may hold anything.
                lo[b] = vec4(0.0);
                hi[b] = vec4(0.0);
                if (seen) {  // the same for the whole group
                    const uint v_row = value_row(seq0, kv_head, jj + b);
                    if (V_WIDE) {
                        load_v_8(v_row + 8u * lane, v_row + pc.v_head_dim, lo[b], hi[b]);
                    } else {
                        lo[b] = load_v_4(v_row + 4u * lane, v_row + pc.v_head_dim);
                    }
                }
            }
            for (uint b = 0u; b < 4u; ++b) {
                for (uint r = 0u; r < ROWS; ++r) {
                    const float w = p[b][r / 4u][r & 3u];
                    l[r] += w;
                    acc_lo[r] = fma(vec4(w), lo[b], acc_lo[r]);
                    if (V_WIDE) {
                        acc_hi[r] = fma(vec4(w), hi[b], acc_hi[r]);
                    }
                }
            }
        }
    }

    // The groups' sums of each row meet in group 0, which normalizes and writes them.
    for (uint r = 0u; r < ROWS; ++r) {
        if (r >= n_rows) {
            break;  // uniform
        }
        if (KEY_GROUPS > 1u) {
            sum_key_groups(lid, lane, lanes, key_group, acc_lo[r], acc_hi[r], l[r]);
        }
        if (key_group != 0u) {
            continue;
        }
        const uint row = tok[r] * pc.n_heads + head[r];
        float scale = 1.0;
        uint o = row * pc.v_head_dim + EPL * lane;
        if (pc.key_splits > 1u) {
            o += split * pc.n_tokens * pc.n_heads * pc.v_head_dim;
            if (lane == 0u) {
                const uint ml = pc.ml_offset + 2u * (split * pc.n_tokens * pc.n_heads + row);
                out_[ml] = m[r];
                out_[ml + 1u] = l[r];
            }
        } else {
            const bool has_sink = pc.has_sinks != 0u;
            scale = row_factor(m[r], l[r], has_sink, has_sink ? intBitsToFloat(meta[off_sinks + head[r]]) : 0.0);
        }
        for (uint e = 0u; e < EPL; ++e) {
            if (EPL * lane + e < pc.v_head_dim) {
                out_[o + e] = scale * (e < 4u ? acc_lo[r][e] : acc_hi[r][e - 4u]);
            }
        }
    }
}
