#version 450
// attn_fused_coalesced: CommandList::attention shaped for GPUs (KernelShape::gpu). It
// computes exactly what attn_fused.comp does (scores as attn_visible.glsl, the softmax of
// attn_softmax with sinks in the denominator, the same split partials for
// attn_fused_combine); it maps the work differently:
// - a key group of LANES consecutive invocations (within one subgroup) reads one key row
//   together, each invocation PIECES pieces of EPL elements (8 or 16 bytes), piece p of
//   lane l at element (p * LANES + l) * EPL: every load instruction of a subgroup covers
//   whole rows of contiguous memory, where a lane per key touches a cache line per lane;
// - each invocation's partial dot products are summed over its key group with
//   subgroupShuffleXor (LANES divides the required subgroup size);
// - the query rows sit in registers (rows x dims per lane bounded by the host: at most 32
//   floats of query and 32 of accumulators per invocation, so that GPUs with 64 registers
//   per invocation do not spill);
// - each key group keeps its own running max, sum and sums of p * v over its keys, and
//   the groups meet in shared memory at the end.
//   binding 0: readonly q words [n_tokens, n_heads, head_dim] (Q_F16)
//   binding 1, 2: readonly k, v words, element (j, g, d) at s*k_seq_stride + j*k_key_stride +
//              g*k_head_stride + d (v: its own strides, d < v_head_dim), s the tile's sequence
//              for a KV cache, else 0 (K_TYPE, V_TYPE)
//   binding 3: writeonly float out [n_tokens, n_heads, v_head_dim], or with key_splits > 1
//              the splits' partial results, laid out as attn_fused.comp's
//   binding 4: readonly float mask [n_tokens, n_keys] (when has_mask)
//   binding 5: readonly int meta (params.h: VKATTN_META_*)
//   binding 6: readonly int key positions (params.h): plain keys' positions and sequences,
//              or a cache's slot table
//   push: AttnFusedParams; spec (by name in params.h): WG, the workgroup size (a multiple of
//   the required subgroup size); ROWS; LANES; Q_F16, K_TYPE, V_TYPE (0 f32, 1 f16, 2 q8_0,
//   3 q4_0); K_EPL, K_PIECES; V_EPL, V_PIECES; K_ALIGNED, V_ALIGNED (head_dim % EPL == 0:
//   pieces need no bounds checks); BATCH, keys per key group per step; ROPE_ON_READ;
//   ROPE_INTERLEAVED; D4, vec4s per query row (ceil(head_dim / 4)); EARLY, V loads issued
//   with the K loads; HEADS_FIRST, workgroup ids KV head fastest
//   grid: n_kv_heads * row_tiles * key_splits workgroups, folded
// Per step, key group g takes keys step + b * G + g (b < BATCH, G key groups), so that
// neighbouring groups read neighbouring rows:
// 1. which rows see each key; K pieces of seen keys are loaded (a hidden key is never read);
// 2. dot products, summed over the key group by shuffles; scores;
// 3. the running max and sums are rescaled once per step, and p = exp(s - max);
// 4. V pieces of keys some row gives a nonzero probability are loaded and accumulated.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#define VKATTN_WANT_ATTN_FUSED_COALESCED
#include "layout.glsl"
#include "params.h"
#include "fma_dot.glsl"
#include "rope_phase.glsl"

const uint WG = WG_SIZE;
layout(constant_id = VKATTN_SPEC_COALESCED_ROWS) const uint ROWS = 4;
layout(constant_id = VKATTN_SPEC_COALESCED_LANES) const uint LANES = 16;
layout(constant_id = VKATTN_SPEC_COALESCED_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_COALESCED_K_TYPE) const uint K_TYPE = 1u;  // 0 f32, 1 f16, 2 q8_0, 3 q4_0
layout(constant_id = VKATTN_SPEC_COALESCED_V_TYPE) const uint V_TYPE = 1u;
layout(constant_id = VKATTN_SPEC_COALESCED_K_EPL) const uint K_EPL = 8;
layout(constant_id = VKATTN_SPEC_COALESCED_K_PIECES) const uint K_PIECES = 1;
layout(constant_id = VKATTN_SPEC_COALESCED_V_EPL) const uint V_EPL = 8;
layout(constant_id = VKATTN_SPEC_COALESCED_V_PIECES) const uint V_PIECES = 1;
layout(constant_id = VKATTN_SPEC_COALESCED_K_ALIGNED) const bool K_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_COALESCED_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_COALESCED_BATCH) const uint BATCH = 4;
layout(constant_id = VKATTN_SPEC_COALESCED_ROPE_ON_READ) const bool ROPE_ON_READ = false;
layout(constant_id = VKATTN_SPEC_COALESCED_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;
layout(constant_id = VKATTN_SPEC_COALESCED_D4) const uint D4 = 32;
layout(constant_id = VKATTN_SPEC_COALESCED_EARLY) const bool EARLY = true;  // issue V loads with K loads
layout(constant_id = VKATTN_SPEC_COALESCED_HEADS_FIRST) const bool HEADS_FIRST = false;  // workgroup ids: kv head fastest

const uint G = WG / LANES;  // key groups
const uint KE = K_PIECES * K_EPL, VE = V_PIECES * V_EPL;  // elements per invocation

#define ATTN_Q_ALIGNED false
#define ATTN_K_ALIGNED K_ALIGNED
#define ATTN_V_ALIGNED V_ALIGNED
#include "attn_inputs.glsl"
#include "attn_online.glsl"

#include "attn_rows.glsl"
#include "attn_visible.glsl"

// The query rows (rotated in place for ROPE_ON_READ), read into registers once.
shared vec4 q_tile[ROWS * D4];
#include "attn_rope_read.glsl"
// The end: the key groups' sums of one row, and their (max, sum) pairs.
shared vec4 acc_sh[WG * VE / 4u];
shared float m_sh[WG];
shared float l_sh[WG];
// ROPE_ON_READ with pairs half a rotary_dim apart: each key group's key row, so that an
// invocation can read the partners of its elements.
shared float k_sh[ROPE_ON_READ && !ROPE_INTERLEAVED ? WG * KE : 1u];

// Element |i| (< EPL) of a piece held as (lo, hi).
float piece_at(vec4 lo, vec4 hi, uint i) { return i < 4u ? lo[i] : hi[i - 4u]; }

// Piece at element |e| of a K row (V row) starting at |row|; zero past head_dim (v_head_dim).
void load_k_piece(uint row, uint e, out vec4 lo, out vec4 hi) {
    lo = vec4(0.0);
    hi = vec4(0.0);
    if (e < pc.head_dim) {
        if (K_EPL == 8u) {
            load_k_8(row + e, row + pc.head_dim, lo, hi);
        } else {
            lo = load_k_4(row + e, row + pc.head_dim);
        }
    }
}
void load_v_piece(uint row, uint e, out vec4 lo, out vec4 hi) {
    lo = vec4(0.0);
    hi = vec4(0.0);
    if (e < pc.v_head_dim) {
        if (V_EPL == 8u) {
            load_v_8(row + e, row + pc.v_head_dim, lo, hi);
        } else {
            lo = load_v_4(row + e, row + pc.v_head_dim);
        }
    }
}

// Rotates this invocation's pieces of one key row by the key's in-cache position |cpos|
// (KvRope::on_read). Every invocation of the subgroup calls it: with pairs half a
// rotary_dim apart the partners are exchanged through k_sh.
void rotate_key(uint sid, uint lane, uint cpos, inout vec4 lo[K_PIECES], inout vec4 hi[K_PIECES]) {
    const uint half_rot = pc.rotary_dim / 2u;
    if (!ROPE_INTERLEAVED) {
        for (uint p = 0u; p < K_PIECES; ++p) {
            for (uint i = 0u; i < K_EPL; ++i) {
                k_sh[sid * KE + p * K_EPL + i] = piece_at(lo[p], hi[p], i);
            }
        }
        subgroupBarrier();
    }
    const uint group_base = (sid / LANES) * LANES;  // the key group's first invocation
    for (uint p = 0u; p < K_PIECES; ++p) {
        const uint e0 = (p * LANES + lane) * K_EPL;
        const vec4 lo0 = lo[p], hi0 = hi[p];  // the unrotated piece
        for (uint i = 0u; i < K_EPL; ++i) {
            const uint d = e0 + i;
            if (d >= pc.rotary_dim) {
                continue;
            }
            float x = piece_at(lo0, hi0, i), rotated;
            if (ROPE_INTERLEAVED) {
                // Pairs (2i, 2i + 1) lie inside one piece (EPL is even).
                const float partner = piece_at(lo0, hi0, i ^ 1u);
                const vec2 cs = rope_cos_sin(cpos, rope_turns(d / 2u));
                rotated = (d & 1u) == 0u ? x * cs.x - partner * cs.y : partner * cs.y + x * cs.x;
            } else {
                const bool first = d < half_rot;
                const uint pd = first ? d + half_rot : d - half_rot;  // the partner's element
                // Which invocation and piece hold it: element pd is in piece pd / EPL of
                // the row, held by lane (that % LANES) as its piece (that / LANES).
                const uint piece = pd / K_EPL;
                const float partner = k_sh[(group_base + piece % LANES) * KE + (piece / LANES) * K_EPL + pd % K_EPL];
                const vec2 cs = rope_cos_sin(cpos, rope_turns(first ? d : pd));
                rotated = first ? x * cs.x - partner * cs.y : partner * cs.y + x * cs.x;
            }
            if (i < 4u) {
                lo[p][i] = rotated;
            } else {
                hi[p][i - 4u] = rotated;
            }
        }
    }
    if (!ROPE_INTERLEAVED) {
        subgroupBarrier();  // k_sh is rewritten by the next key
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    // The host requires full subgroups of a size LANES divides: sid numbers the invocations
    // subgroup by subgroup, so a key group's lanes are lanes of one subgroup.
    const uint sid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    const uint lane = sid % LANES, group = sid / LANES;
    read_meta_offsets();
    uint wg = wg_linear_id();
    uint split, row_tile, kv_head;
    if (HEADS_FIRST) {
        const uint n_kv = pc.n_heads / pc.group;
        kv_head = wg % n_kv;
        wg /= n_kv;
        split = wg % pc.key_splits;
        row_tile = wg / pc.key_splits;
    } else {
        split = wg % pc.key_splits;
        wg /= pc.key_splits;
        row_tile = wg % pc.row_tiles;
        kv_head = wg / pc.row_tiles;
    }
    if (kv_head * pc.group >= pc.n_heads) {
        return;  // whole workgroup: uniform
    }
    const uint row0 = row_tile * pc.rows_per_wg;
    const uint n_rows = min(pc.rows_per_wg, pc.n_tokens * pc.group - row0);

    uint tok[ROWS], head[ROWS];
    int q_pos[ROWS], q_seq[ROWS];
    float slope[ROWS];
    tile_rows(row0, n_rows, kv_head, tok, head);
    for (uint r = 0u; r < ROWS; ++r) {
        q_pos[r] = meta[off_q_pos + tok[r]];
        q_seq[r] = meta[off_q_seq + tok[r]];
        slope[r] = alibi_slope(head[r]);
    }
    const uint seq0 = pc.k_meta_stride != 0u ? uint(q_seq[0]) : 0u;

    // The query rows: into shared memory (rotated there when on_read), then the elements
    // this invocation multiplies into registers.
    for (uint i = lid; i < n_rows * D4; i += WG) {
        const uint r = i / D4, c = i - r * D4;
        const uint q_row = (tok[r] * pc.n_heads + head[r]) * pc.head_dim;
        q_tile[i] = load_q_4(q_row + 4u * c, q_row + pc.head_dim);
    }
    barrier();
    if (ROPE_ON_READ) {
        rope_rotate_query_tile(n_rows, D4, tok, lid, WG);
        barrier();
    }
    vec4 q_lo[ROWS][K_PIECES], q_hi[ROWS][K_PIECES];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const uint rr = min(r, n_rows - 1u);  // rows past the tile repeat the last
        [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {
            const uint c = ((p * LANES + lane) * K_EPL) / 4u;
            q_lo[r][p] = c < D4 ? q_tile[rr * D4 + c] : vec4(0.0);
            q_hi[r][p] = K_EPL == 8u && c + 1u < D4 ? q_tile[rr * D4 + c + 1u] : vec4(0.0);
        }
    }

    // This key group's running max (-FLT_MAX, not -inf: exp(-inf - m) must be 0, not NaN),
    // sum of exponentials and sums of p * v over its elements.
    float m[ROWS], l[ROWS];
    vec4 acc_lo[ROWS][V_PIECES], acc_hi[ROWS][V_PIECES];
    ONLINE_INIT(m, l, acc_lo, acc_hi)

    const uint j_begin = split * pc.keys_per_split;
    const uint j_end = min(j_begin + pc.keys_per_split, key_bound(seq0));  // the occupancy bound
    for (uint step = j_begin; step < j_end; step += G * BATCH) {
        // 1. Visibility and the K pieces of seen keys.
        uint visible[BATCH], key[BATCH];
        int k_pos[BATCH];
        vec4 k_lo[BATCH][K_PIECES], k_hi[BATCH][K_PIECES];
        vec4 v_lo[BATCH][V_PIECES], v_hi[BATCH][V_PIECES];
        [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
            const uint j = step + b * G + group;
            key[b] = j;
            visible[b] = 0u;
            k_pos[b] = 0;
            if (j < j_end) {
                k_pos[b] = key_position(seq0, j);
                const int k_seq = key_sequence(seq0, j, k_pos[b]);
                [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                    if (r < n_rows && key_visible(q_pos[r], q_seq[r], k_pos[b], k_seq)) {
                        visible[b] |= 1u << r;
                    }
                }
            }
            // Keys in range are read whether or not a row sees them, so that these loads
            // need not wait for the positions; a hidden key's score is -inf whatever it
            // holds. Its V is never used (EARLY: read, then replaced by zeros).
            const uint row = key_row(seq0, kv_head, min(j, j_end - 1u));
            [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {
                load_k_piece(row, (p * LANES + lane) * K_EPL, k_lo[b][p], k_hi[b][p]);
            }
            if (EARLY) {
                const uint v_row = value_row(seq0, kv_head, min(j, j_end - 1u));
                [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {
                    load_v_piece(v_row, (p * LANES + lane) * V_EPL, v_lo[b][p], v_hi[b][p]);
                }
            }
        }
        if (ROPE_ON_READ) {
            [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
                rotate_key(sid, lane, key_cache_position(seq0, k_pos[b]), k_lo[b], k_hi[b]);  // past j_end: unused
            }
        }

        // 2. This invocation's share of each dot product, summed over the key group.
        float dot[BATCH * ROWS];
        [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                float d = 0.0;
                [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {
                    d = fma_dot(q_lo[r][p], k_lo[b][p], d);
                    if (K_EPL == 8u) {
                        d = fma_dot(q_hi[r][p], k_hi[b][p], d);
                    }
                }
                dot[b * ROWS + r] = d;
            }
        }
        [[unroll]] for (uint o = LANES / 2u; o > 0u; o >>= 1u) {
            [[unroll]] for (uint i = 0u; i < BATCH * ROWS; ++i) {
                dot[i] += subgroupShuffleXor(dot[i], o);
            }
        }

        // 3. Scores, the rescaling to the new running max, and the probabilities.
        float prob[BATCH * ROWS];
        bool seen[BATCH];
        [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
            seen[b] = false;
        }
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
            float step_max = -1.0 / 0.0;  // -inf
            [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
                const float s = (visible[b] & (1u << r)) != 0u
                                    ? visible_score(dot[b * ROWS + r], tok[r], q_pos[r], key[b], k_pos[b], slope[r])
                                    : -1.0 / 0.0;
                prob[b * ROWS + r] = s;
                step_max = max(step_max, s);
            }
            const float m_new = max(m[r], step_max);
            const float rescale = exp(m[r] - m_new);
            m[r] = m_new;
            ONLINE_RESCALE(r, rescale, l, acc_lo, acc_hi)
            [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
                const float pr = exp(prob[b * ROWS + r] - m_new);
                prob[b * ROWS + r] = pr;
                l[r] += pr;
                seen[b] = seen[b] || pr > 0.0;
            }
        }

        // 4. V of keys with a nonzero probability (the same across the key group): a key
        //    no row weighs is not added in, whatever its V holds (NaN in a stale slot).
        [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
            const uint row = value_row(seq0, kv_head, key[b]);
            [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {
                if (!EARLY) {
                    v_lo[b][p] = vec4(0.0);
                    v_hi[b][p] = vec4(0.0);
                    if (seen[b]) {
                        load_v_piece(row, (p * LANES + lane) * V_EPL, v_lo[b][p], v_hi[b][p]);
                    }
                } else if (!seen[b]) {
                    v_lo[b][p] = vec4(0.0);
                    v_hi[b][p] = vec4(0.0);
                }
            }
        }
        [[unroll]] for (uint b = 0u; b < BATCH; ++b) {
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                const vec4 w = vec4(prob[b * ROWS + r]);
                [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {
                    acc_lo[r][p] = fma(w, v_lo[b][p], acc_lo[r][p]);
                    if (V_EPL == 8u) {
                        acc_hi[r][p] = fma(w, v_hi[b][p], acc_hi[r][p]);
                    }
                }
            }
        }
    }

    // The key groups' results of each row meet in group 0, which writes them: normalized
    // (with the sink at the common maximum), or as this split's partial results.
    const uint VE4 = VE / 4u;
    for (uint r = 0u; r < ROWS; ++r) {
        if (r >= n_rows) {
            break;  // uniform
        }
        for (uint p = 0u; p < V_PIECES; ++p) {
            acc_sh[sid * VE4 + p * (V_EPL / 4u)] = acc_lo[r][p];
            if (V_EPL == 8u) {
                acc_sh[sid * VE4 + p * 2u + 1u] = acc_hi[r][p];
            }
        }
        if (lane == 0u) {
            m_sh[group] = m[r];
            l_sh[group] = l[r];
        }
        barrier();
        if (group == 0u) {
            float m_all = m_sh[0];
            for (uint g = 1u; g < G; ++g) {
                m_all = max(m_all, m_sh[g]);
            }
            float denom = 0.0;
            for (uint p = 0u; p < V_PIECES; ++p) {
                acc_lo[r][p] = vec4(0.0);
                acc_hi[r][p] = vec4(0.0);
            }
            for (uint g = 0u; g < G; ++g) {
                const float w = exp(m_sh[g] - m_all);
                denom += l_sh[g] * w;
                const uint src = (g * LANES + lane) * VE4;
                for (uint p = 0u; p < V_PIECES; ++p) {
                    acc_lo[r][p] += w * acc_sh[src + p * (V_EPL / 4u)];
                    if (V_EPL == 8u) {
                        acc_hi[r][p] += w * acc_sh[src + p * 2u + 1u];
                    }
                }
            }
            const uint row = tok[r] * pc.n_heads + head[r];
            uint o = row * pc.v_head_dim;
            float scale = 1.0;
            if (pc.key_splits > 1u) {
                o += split * pc.n_tokens * pc.n_heads * pc.v_head_dim;
                if (lane == 0u) {
                    const uint ml = pc.ml_offset + 2u * (split * pc.n_tokens * pc.n_heads + row);
                    out_[ml] = m_all;
                    out_[ml + 1u] = denom;
                }
            } else {
                float m_fin = m_all;
                scale = 1.0;
                if (pc.has_sinks != 0u) {
                    const float sink = intBitsToFloat(meta[off_sinks + head[r]]);
                    m_fin = max(m_all, sink);
                    scale = exp(m_all - m_fin);
                    denom = denom * scale + exp(sink - m_fin);
                }
                scale = denom > 0.0 ? scale / denom : 0.0;  // no visible key: zeros
            }
            for (uint p = 0u; p < V_PIECES; ++p) {
                const uint e0 = (p * LANES + lane) * V_EPL;
                for (uint i = 0u; i < V_EPL; ++i) {
                    if (e0 + i < pc.v_head_dim) {
                        out_[o + e0 + i] = scale * piece_at(acc_lo[r][p], acc_hi[r][p], i);
                    }
                }
            }
        }
        barrier();
    }
}
