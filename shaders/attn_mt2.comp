#version 450
// attn_mt2: attn_mt's kernel (same tiles of rows and keys, same staging, same precision:
// AttentionPrecision::f16_products) on NVIDIA's cooperative matrices 2
// (VK_NV_cooperative_matrix2: flexible dimensions, per-element operations and conversions,
// all at subgroup scope). What changes is where the softmax runs: attn_mt
// sends each 16 x 16 score tile through shared memory to a scalar pass and its
// probabilities back, with subgroup barriers between; here a subgroup's scores stay in
// registers as one 16 x BC matrix:
// - S = Q K^T in one product: Q as one 16 x DK A matrix held across tiles, K^T as one
//   DK x BC B matrix read from the staged rows;
// - the visibility rules (attn_visible.glsl: positions, sequences, windows, chunks,
//   soft-capping, ALiBi, mask, temperature) by a per-element operation, with each row's
//   query data from shared memory;
// - the row maxima by the subgroup's lanes over S stored to shared memory (no scalar rules
//   there: just the maximum); each row's reference maximum, its rescale factor and its sum
//   live in shared memory (lazy rescaling as attn_mt: the reference moves only when a score
//   passes it by more than ln 256, RESCALE_ALWAYS with every new maximum);
// - P = exp(S - m) by a per-element operation, rounded to f16 by a conversion to an A
//   matrix; its row sums by a product with ones (f32 sums of the rounded P, as attn_mt's l),
//   stored to shared memory and added to the row's sum by the row's first lane (a
//   per-element operation may run more than once: each changes only its element, but for
//   the output's store, which writes the same value each time);
// - O (16 x DV, f32) rescaled by a per-element operation where a row's factor is not 1,
//   then O += P V; at the end each row's factor (row_finish) and a per-element store.
// The row split alone (DIM_SLICES 1, queries in registers: the host plans it for heads up
// to 128 wide; wider ones take attn_mt's dim split). Splits, sinks and the merge as attn_mt.
//   bindings 0-7: as attn_tiled.comp; push: AttnParams; spec: attn_mt's ids
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "half_rne.glsl"
#include "rope_phase.glsl"

#include "mt_specs.glsl"

const uint WG = WG_SIZE;
const uint BR = 16u * SUBGROUPS, BC = 16u * KEY_CHUNKS, DK = 16u * DK_CHUNKS, DV = 16u * DV_CHUNKS;
const uint ROWS = BR;  // attn_rows.glsl's name for it
const bool Q_IN_REGS = true;
const bool SKIP_LOADS = false, SKIP_MARKS = false;
// f16 rows at odd numbers of 16-byte chunks (pitches in uints), as attn_mt's.
const uint QP = ((2u * DK_CHUNKS) | 1u) * 4u, VP = ((2u * DV_CHUNKS) | 1u) * 4u;
const float TAU = 5.545177444479562;  // ln 256

#include "attn_row_tiles.glsl"

shared uint q_sh[4];  // the queries pass through k_sh's first rows
shared uint k_sh[BC * QP];
shared uint v_sh[V_FROM_K ? 4u : BC * VP];
#include "mt_stage.glsl"
// The tile's rows: token and ALiBi slope (beside mt_stage.glsl's positions and sequences),
// then the running reference maximum, sum and this tile's rescale factor of each.
shared uint qt_sh[BR];
shared float qa_sh[BR];
shared float rm_sh[BR];
shared float rl_sh[BR];
shared float rf_sh[BR];
// Each subgroup's scores, for its rows' maxima (a row reduction would do, but lavapipe's
// (Mesa 26.1) gives rows 8-15 of a 16-row matrix the maxima of rows 0-7's first columns).
const uint SP = BC + 4u;
shared float s_sh[SUBGROUPS * 16u * SP];
// The maxima's pass: lanes per row, rows per lane, keys per lane.
const uint LPR = MT_SG > 16u ? MT_SG / 16u : 1u, RPL = MT_SG < 16u ? 16u / MT_SG : 1u, KPL = BC / LPR;

#define CM_A(r, c) coopmat<float16_t, gl_ScopeSubgroup, r, c, gl_MatrixUseA>
#define CM_B(r, c) coopmat<float16_t, gl_ScopeSubgroup, r, c, gl_MatrixUseB>
#define CM_C(r, c) coopmat<float, gl_ScopeSubgroup, r, c, gl_MatrixUseAccumulator>

// Per-element operations: |r0| is the subgroup's first row of the tile.
// Score (r, b) of tile t (marks at |mo|): the rules of attn_visible.glsl, -inf where unseen.
float score_at(const in uint r, const in uint b, const in float dot, const in uint r0, const in uint t, const in uint mo) {
    const uint row = r0 + r;
    const int kp = kp_sh[mo + b];
    return key_visible(qp_sh[row], qs_sh[row], kp, ks_sh[mo + b])
               ? visible_score(dot, qt_sh[row], qp_sh[row], t * BC + b, kp, qa_sh[row])
               : -1.0 / 0.0;
}
float exp_at(const in uint r, const in uint c, const in float s, const in uint r0) { return exp(s - rm_sh[r0 + r]); }
float scale_row(const in uint r, const in uint c, const in float o, const in uint r0) { return o * rf_sh[r0 + r]; }
// O's element (r, c) to its row's place (row_store's, element by element): with splits the
// split's partial sums (whole vec4s, the padding's zeros too), else times the row's factor.
float store_at(const in uint r, const in uint c, const in float o, const in uint r0, const in uint row0,
               const in uint n_rows, const in uint kv_head, const in uint split) {
    if (r0 + r < n_rows) {
        const uint tok = qt_sh[r0 + r], head = kv_head * pc.group + (row0 + r0 + r - tok * pc.group);
        const uint out_row = tok * pc.n_heads + head, d4 = (pc.v_head_dim + 3u) / 4u;
        if (pc.key_splits > 1u) {
            if (c < 4u * d4) {
                part[(split * pc.n_tokens * pc.n_heads + out_row) * d4 * 4u + c] = o;
            }
        } else if (c < pc.v_head_dim) {
            out_[out_row * pc.v_head_dim + c] = rf_sh[r0 + r] * o;
        }
    }
    return o;
}

void main() {
    const uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint rg = sg, r0 = 16u * sg;
    uint kv_head, split, row0, n_rows, seq0;
    if (!row_tile_place(kv_head, split, row0, n_rows, seq0)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }
    // The rows' data (rows past n_rows repeat the last) and their running state, their
    // span, then the queries a row group at a time through k_sh into A matrices.
    for (uint r = lid; r < BR; r += WG) {
        uint tok, head;
        int q_pos, q_seq;
        float slope;
        row_query(row0 + min(r, n_rows - 1u), kv_head, tok, head, q_pos, q_seq, slope);
        qp_sh[r] = q_pos;
        qs_sh[r] = q_seq;
        qt_sh[r] = tok;
        qa_sh[r] = slope;
        rm_sh[r] = NEG_MAX;
        rl_sh[r] = 0.0;
    }
    span = query_span(row0 / pc.group, (row0 + n_rows - 1u) / pc.group);
    CM_A(16, DK) qa;
    for (uint g = 0u; g < SUBGROUPS; ++g) {
        stage_queries(lid, kv_head, row0, n_rows, 16u * g, 16u);
        barrier();
        if (rg == g) {
            coopMatLoad(qa, k_sh, 0u, QP, gl_CooperativeMatrixLayoutRowMajor);
        }
        barrier();
    }
    const uint s_at = sg * 16u * SP, kl0 = (lane % LPR) * KPL;
    CM_C(16, DV) o = CM_C(16, DV)(0.0);
    const CM_B(BC, 16) ones = CM_B(BC, 16)(1.0);
    const uint bound = key_bound(seq0);
    key_end = bound;
    const uint n_tiles = (bound + BC - 1u) / BC;

    tiles_begin(split, lid, seq0, kv_head, bound, n_tiles, n_rows);
    for (uint t = split, it = 0u; t < n_tiles; t += pc.key_splits, ++it) {
        uint mo;
        tile_stage(t, it, lid, rg, seq0, kv_head, bound, n_tiles, n_rows, mo);
        // Every subgroup computes a tile some row of the workgroup sees (a row group that
        // sees none of its keys adds zeros; the staged keys are finite or zeros): lavapipe
        // (Mesa 26.1) gave wrong results where subgroups of a workgroup branched apart around
        // these operations, and the diagonal tiles that attn_mt skips so are few.
        bool seen = false;  // uniform in the workgroup
        [[unroll]] for (uint b = 0u; b < BC; ++b) {
            seen = seen || kb_sh[mo + b] != 0u;
        }
        if (seen) {
            CM_B(DK, BC) kt;
            coopMatLoad(kt, k_sh, 0u, QP, gl_CooperativeMatrixLayoutColumnMajor);
            CM_C(16, BC) s = CM_C(16, BC)(0.0);
            s = coopMatMulAdd(qa, kt, s);
            coopMatPerElementNV(s, s, score_at, r0, t, mo);
            coopMatStore(s, s_sh, s_at, SP, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            // Each row's maximum over its lanes' keys, then its reference and factor.
            [[unroll]] for (uint q = 0u; q < RPL; ++q) {
                const uint r = lane / LPR + q * (MT_SG / LPR);
                float mx = -1.0 / 0.0;
                for (uint b = kl0; b < kl0 + KPL; ++b) {
                    mx = max(mx, s_sh[s_at + r * SP + b]);
                }
                [[unroll]] for (uint o_ = 1u; o_ < LPR; o_ <<= 1u) {
                    mx = max(mx, subgroupShuffleXor(mx, o_));
                }
                if (lane % LPR == 0u) {
                    const float m = rm_sh[r0 + r];
                    float f = 1.0;
                    if (RESCALE_ALWAYS ? mx > m : mx > m + TAU) {
                        f = exp(m - mx);
                        rm_sh[r0 + r] = mx;
                    }
                    rf_sh[r0 + r] = f;
                }
            }
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            coopMatPerElementNV(s, s, exp_at, r0);
            const CM_A(16, BC) p = CM_A(16, BC)(s);
            CM_C(16, 16) sums = CM_C(16, 16)(0.0);
            sums = coopMatMulAdd(p, ones, sums);
            // Each row's sum, rescaled, plus this tile's (column 0 of the product with ones),
            // by the row's first lane: a per-element operation may run more than once for an
            // element (SPV_NV_cooperative_matrix2), so none changes anything but its element.
            coopMatStore(sums, s_sh, s_at, SP, gl_CooperativeMatrixLayoutRowMajor);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            [[unroll]] for (uint q = 0u; q < RPL; ++q) {
                const uint r = lane / LPR + q * (MT_SG / LPR);
                if (lane % LPR == 0u) {
                    rl_sh[r0 + r] = rl_sh[r0 + r] * rf_sh[r0 + r] + s_sh[s_at + r * SP];
                }
            }
            bool rescale = false;  // uniform: the row group's 16 factors
            [[unroll]] for (uint r = 0u; r < 16u; ++r) {
                rescale = rescale || rf_sh[r0 + r] != 1.0;
            }
            if (rescale) {
                coopMatPerElementNV(o, o, scale_row, r0);
            }
            CM_B(BC, DV) vb;
            if (V_FROM_K) {
                coopMatLoad(vb, k_sh, 0u, QP, gl_CooperativeMatrixLayoutRowMajor);
            } else {
                coopMatLoad(vb, v_sh, 0u, VP, gl_CooperativeMatrixLayoutRowMajor);
            }
            o = coopMatMulAdd(p, vb, o);
        }
        barrier();  // before the next tile's marks and rows replace these
    }

    // Each row's end (row_finish) as its factor, then O to its places.
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint r = lane; r < 16u; r += MT_SG) {
        float f = 0.0;
        if (r0 + r < n_rows) {
            const uint tok = qt_sh[r0 + r], head = kv_head * pc.group + (row0 + r0 + r - tok * pc.group);
            f = row_finish(split, tok * pc.n_heads + head, head, rm_sh[r0 + r], rl_sh[r0 + r], true);
        }
        rf_sh[r0 + r] = f;
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    coopMatPerElementNV(o, o, store_at, r0, row0, n_rows, kv_head, split);
}
