#version 450
// attn_mt: fused attention on the matrix units for many query rows per KV head (prefill,
// batched decode, absorbed MLA), written on the matrix-tile layer (mt.glsl) and run only
// under AttentionPrecision::f16_products: Q, K, V and the probabilities are rounded to f16
// (to nearest even), their products summed in f32, the softmax and the merge in f32.
// - A workgroup is ROW_GROUPS x 16 query rows of one KV head (tokens x GQA group, as
//   attn_tiled) on SUBGROUPS = ROW_GROUPS x DIM_SLICES subgroups, mapped one of two ways:
//   - the row split (DIM_SLICES 1): subgroup g owns rows 16 g .. 16 g + 15 and all dims of
//     each tile, so the scores' trip through shared memory stays inside it (subgroup
//     barriers only); its queries are read from shared memory as A tiles, chunk by chunk,
//     or with Q_REGS held as A tiles in registers as the dim split does (16 rows of 128
//     dims: 17 KiB of shared memory a 64-row tile spends on queries go to wider key tiles);
//   - the dim split (wide heads: absorbed MLA, 256): the DIM_SLICES subgroups of a row
//     group each own a slice of the dims, DKS chunks of Q and K and DVS of V and O. A
//     subgroup holds its slice of the queries as A tiles in registers (staged once through
//     the K rows' buffer, so no query rows stay in shared memory), computes a partial S
//     over it and the O columns of its slice; the row group's partial S are summed in the
//     scalar pass, which its slices share by rows (16 / DIM_SLICES each), and the
//     probabilities go back to all of them: workgroup barriers between the three steps.
// - Queries are rounded once to f16 rows (rows past n_rows repeat the last; dims past
//   head_dim are zeros, so any head_dim works, padded to 16).
// - A key tile is BC = 16 KEY_CHUNKS keys: the workgroup stages its K and V rows as f16
//   (decoded from f32, f16, q8_0 or q4_0 and rotated with KvRope::on_read in f32 first;
//   f16 rows in whole vec4s not rotated are copied as their halves, K_RAW / V_RAW;
//   with a latent cache the K rows serve as V: each latent row is staged once a tile and
//   read as both). Keys no row of the tile sees are zeros, never loaded: a stale slot may
//   hold NaN, and 0 x NaN is NaN inside a product.
// - Per tile and row group: S = Q K^T (DK_CHUNKS products per 16 keys, over the slices),
//   S to shared memory, a scalar pass with attn_visible.glsl's rules (positions,
//   sequences, windows, chunks, soft-capping, ALiBi, mask, temperature) and the online
//   softmax, P rounded to f16 into shared memory, then O += P V with O kept in
//   accumulators across tiles.
// - Lazy rescaling: a row's reference maximum moves only when a score passes it by more
//   than ln 256 (P <= 256, exact enough in f16; O and l follow with one pitch-0 row-scale);
//   RESCALE_ALWAYS moves it with every new maximum, as the f32 kernels do.
// - A tile no row sees is skipped whole, and a row group none of whose rows sees a key of
//   it skips its products (a bit per row group and key).
// - PREFETCH: the next tile's K and V are loaded into registers (decoded, rotated) while
//   this tile computes, and written to shared memory at the next tile's start; its marks
//   go to the other half of the double-buffered marks. Two workgroup barriers a tile
//   instead of three.
// - Splits and their merge, sinks and the end of a row as attn_tiled (attn_row_tiles.glsl).
// - llvmpipe's loop limit: loops inside the tile loop are counted by the host, which splits
//   the keys to stay under it; the layer's per-element loops unroll.
//   bindings 0-7: as attn_tiled.comp; push: AttnParams; spec: below
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "half_rne.glsl"
#include "rope_phase.glsl"

#include "mt_specs.glsl"
layout(constant_id = VKATTN_SPEC_MT_CHECK) const bool MT_CHECK = false;  // the layer's rule checks
// Subgroups of a row group (DV_CHUNKS and DK_CHUNKS are multiples of it).
layout(constant_id = VKATTN_SPEC_MT_DIM_SLICES) const uint DIM_SLICES = 1;
layout(constant_id = VKATTN_SPEC_MT_Q_REGS) const bool Q_REGS = false;  // the row split's queries in registers
// A probe's parts left out (VKATTN_PREFILL=matrix_skip; no valid result): bit 0 the K and
// V loads (zeros staged), 1 the scalar pass, 2 the products, 3 the marks after the first
// tile's. What the rest costs says where a tile's time goes.
layout(constant_id = VKATTN_SPEC_MT_SKIP) const uint MT_SKIP = 0u;

const uint WG = WG_SIZE;
const uint ROW_GROUPS = SUBGROUPS / DIM_SLICES;
const bool DIM_SPLIT = DIM_SLICES > 1u;
const bool Q_IN_REGS = DIM_SPLIT || Q_REGS;  // queries as A tiles in registers, not in q_sh
const uint BR = 16u * ROW_GROUPS, BC = 16u * KEY_CHUNKS;
const uint ROWS = BR;  // attn_rows.glsl's name for it
const uint DKS = DK_CHUNKS / DIM_SLICES, DVS = DV_CHUNKS / DIM_SLICES;  // a subgroup's chunks
// Pitches in uints: f16 rows an odd number of 16-byte chunks (a matrix load's 8 rows on
// distinct banks), f32 score rows 4 uints longer than a tile's keys.
const uint QP = ((2u * DK_CHUNKS) | 1u) * 4u, VP = ((2u * DV_CHUNKS) | 1u) * 4u;
const uint SP = BC + 4u, PP = ((BC / 8u) | 1u) * 4u;
// slab_sh: each subgroup's scores (partial in the dim split; also an output tile on the
// way out), then each row group's probabilities as f16 pairs and a factor per row
// (rescales, then 1 / denominator).
const uint S_SLAB = 16u * SP, PF_AT = SUBGROUPS * S_SLAB, PF_SLAB = 16u * PP + 16u;
// The scalar pass: a subgroup's SR rows of its row group, lanes per row, rows per lane.
const uint SR = 16u / DIM_SLICES;
const uint LPR = MT_SG > SR ? MT_SG / SR : 1u, RPL = MT_SG < SR ? SR / MT_SG : 1u;
const uint KPL = BC / LPR;  // keys per lane of a row, consecutive (P is written in pairs)
const float TAU = 5.545177444479562;  // ln 256
const bool SKIP_LOADS = (MT_SKIP & 1u) != 0u, SKIP_SCALAR = (MT_SKIP & 2u) != 0u;
const bool SKIP_PRODUCTS = (MT_SKIP & 4u) != 0u, SKIP_MARKS = (MT_SKIP & 8u) != 0u;

#include "mt.glsl"
#include "attn_row_tiles.glsl"

shared uint q_sh[Q_IN_REGS ? 4u : BR * QP];
shared uint k_sh[BC * QP];
shared uint v_sh[V_FROM_K ? 4u : BC * VP];
shared uint slab_sh[SUBGROUPS * S_SLAB + ROW_GROUPS * PF_SLAB];
#include "mt_stage.glsl"

// Partial scores, then probabilities, reach the subgroups that read them: a row group's
// dim slices meet at a workgroup barrier; in the row split each subgroup reads its own.
void tile_sync() {
    if (DIM_SPLIT) {
        barrier();
    } else {
        subgroupMemoryBarrierShared();
        subgroupBarrier();
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint rg = sg / DIM_SLICES, ds = sg - rg * DIM_SLICES;  // row group, dim slice
    uint kv_head, split, row0, n_rows, seq0;
    if (!row_tile_place(kv_head, split, row0, n_rows, seq0)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }
    // The rows' positions and sequences (rows past n_rows repeat the last), their span,
    // then the queries.
    for (uint r = lid; r < BR; r += WG) {
        const uint t_r = (row0 + min(r, n_rows - 1u)) / pc.group;
        qs_sh[r] = meta[off_q_seq + t_r];
        qp_sh[r] = meta[off_q_pos + t_r];
    }
    span = query_span(row0 / pc.group, (row0 + n_rows - 1u) / pc.group);
    MT_A_ARRAY(qa, Q_IN_REGS ? DKS : 1u);  // this subgroup's slice of its row group's queries
    if (Q_IN_REGS) {
        for (uint g = 0u; g < ROW_GROUPS; ++g) {  // a row group at a time through k_sh
            stage_queries(lid, kv_head, row0, n_rows, 16u * g, 16u);
            barrier();
            if (rg == g) {
                MT_UNROLL_ACC for (uint c = 0u; c < DKS; ++c) {
                    mt_load_a(qa[c], k_sh, 8u * (ds * DKS + c), QP);
                }
            }
            barrier();
        }
    } else {
        stage_queries(lid, kv_head, row0, n_rows, 0u, BR);
    }

    // This lane's rows of its row group's 16 for the scalar pass (row 16 rg + rr[q]), and
    // its keys of each: kl0 .. kl0 + KPL - 1.
    const uint kl0 = (lane % LPR) * KPL;
    uint rr[RPL], tok[RPL], head[RPL];
    int q_pos[RPL], q_seq[RPL];
    float slope[RPL], m[RPL], l[RPL];
    [[unroll]] for (uint q = 0u; q < RPL; ++q) {
        rr[q] = SR * ds + lane / LPR + q * (MT_SG / LPR);
        row_query(row0 + min(16u * rg + rr[q], n_rows - 1u), kv_head, tok[q], head[q], q_pos[q], q_seq[q], slope[q]);
        m[q] = NEG_MAX;
        l[q] = 0.0;
    }
    MT_ACC_ARRAY(o, DVS);  // O's columns of this subgroup's chunks ds DVS ..
    MT_UNROLL_ACC for (uint i = 0u; i < DVS; ++i) {
        mt_zero(o[i]);
    }
    const uint s_at = sg * S_SLAB, p_at = PF_AT + rg * PF_SLAB, f_at = p_at + 16u * PP;
    const uint bound = key_bound(seq0);
    key_end = bound;
    const uint n_tiles = (bound + BC - 1u) / BC;
    barrier();  // qp_sh, qs_sh, q_sh

    tiles_begin(split, lid, seq0, kv_head, bound, n_tiles, n_rows);
    for (uint t = split, it = 0u; t < n_tiles; t += pc.key_splits, ++it) {
        uint mo;
        const bool mine = tile_stage(t, it, lid, rg, seq0, kv_head, bound, n_tiles, n_rows, mo);
        // (mine is uniform in a row group, and tile_sync's barriers are outside it.)
        if (mine) {
            // Scores: S_j = sum over the dim chunks c of Q_c K_(c, j)^T (the dim split: over
            // the slice, a partial S). Without the products, zeros: the scalar pass reads
            // defined scores (shared memory's old contents made O NaN at random).
            MT_ACC_ARRAY(s, KEY_CHUNKS);
            [[unroll]] for (uint j = 0u; j < KEY_CHUNKS; ++j) {
                mt_zero(s[j]);
            }
            if (Q_IN_REGS && !SKIP_PRODUCTS) {
                MT_UNROLL_ACC for (uint c = 0u; c < DKS; ++c) {
                    [[unroll]] for (uint j = 0u; j < KEY_CHUNKS; ++j) {
                        MT_B(kb);
                        mt_load_bt(kb, k_sh, 16u * j * QP + 8u * (ds * DKS + c), QP);
                        mt_mad(s[j], qa[c], kb);
                    }
                }
            } else if (!SKIP_PRODUCTS) {
                for (uint c = 0u; c < DK_CHUNKS; ++c) {
                    MT_A(a);
                    mt_load_a(a, q_sh, 16u * rg * QP + 8u * c, QP);
                    [[unroll]] for (uint j = 0u; j < KEY_CHUNKS; ++j) {
                        MT_B(kb);
                        mt_load_bt(kb, k_sh, 16u * j * QP + 8u * c, QP);
                        mt_mad(s[j], a, kb);
                    }
                }
            }
            [[unroll]] for (uint j = 0u; j < KEY_CHUNKS; ++j) {
                mt_store(s[j], slab_sh, s_at + 16u * j, SP);
            }
        }
        tile_sync();
        if (mine && !SKIP_SCALAR) {
            // The scalar pass over this subgroup's rows: each row's scores (its row group's
            // partial sums added in slice order, written back over its own), its maximum
            // over the row's lanes, the reference maximum (lazy), P rounded to f16 as pairs,
            // l of the rounded P. Its key loops are not unrolled: each holds a whole score's
            // rules, and llvmpipe's compile time follows the code.
            [[unroll]] for (uint q = 0u; q < RPL; ++q) {
                const uint srow = s_at + rr[q] * SP, prow = p_at + rr[q] * PP;
                float mx = -1.0 / 0.0;
                for (uint b = kl0; b < kl0 + KPL; ++b) {
                    float dot = 0.0;
                    [[unroll]] for (uint d = 0u; d < DIM_SLICES; ++d) {
                        dot += uintBitsToFloat(slab_sh[(rg * DIM_SLICES + d) * S_SLAB + rr[q] * SP + b]);
                    }
                    const float x = key_visible(q_pos[q], q_seq[q], kp_sh[mo + b], ks_sh[mo + b])
                                        ? visible_score(dot, tok[q], q_pos[q], t * BC + b, kp_sh[mo + b], slope[q])
                                        : -1.0 / 0.0;
                    slab_sh[srow + b] = floatBitsToUint(x);
                    mx = max(mx, x);
                }
                [[unroll]] for (uint o_ = 1u; o_ < LPR; o_ <<= 1u) {
                    mx = max(mx, subgroupShuffleXor(mx, o_));
                }
                float alpha = 1.0;
                if (RESCALE_ALWAYS ? mx > m[q] : mx > m[q] + TAU) {  // the same in the row's lanes
                    alpha = exp(m[q] - mx);
                    m[q] = mx;
                    l[q] *= alpha;
                }
                for (uint b = kl0; b < kl0 + KPL; b += 2u) {
                    const uint h0 = half_bits_rne(exp(uintBitsToFloat(slab_sh[srow + b]) - m[q]));
                    const uint h1 = half_bits_rne(exp(uintBitsToFloat(slab_sh[srow + b + 1u]) - m[q]));
                    l[q] += unpackHalf2x16(h0).x + unpackHalf2x16(h1).x;
                    slab_sh[prow + b / 2u] = h0 | (h1 << 16);
                }
                if (lane % LPR == 0u) {
                    slab_sh[f_at + rr[q]] = floatBitsToUint(alpha);
                }
            }
        }
        tile_sync();
        if (mine) {
            bool rescale = false;  // uniform: the row group's 16 factors
            [[unroll]] for (uint r = 0u; r < (SKIP_SCALAR ? 0u : 16u); ++r) {
                rescale = rescale || uintBitsToFloat(slab_sh[f_at + r]) != 1.0;
            }
            if (rescale) {
                MT_UNROLL_ACC for (uint i = 0u; i < DVS; ++i) {
                    mt_scale_rows(o[i], slab_sh, f_at);
                }
            }
            // O_i += P_j V_(j, i) over this subgroup's chunks of V.
            [[unroll]] for (uint j = 0u; j < (SKIP_PRODUCTS ? 0u : KEY_CHUNKS); ++j) {
                MT_A(pa);
                mt_load_a(pa, slab_sh, p_at + 8u * j, PP);
                MT_UNROLL_ACC for (uint i = 0u; i < DVS; ++i) {
                    MT_B(vb);
                    if (V_FROM_K) {
                        mt_load_b(vb, k_sh, 16u * j * QP + 8u * (ds * DVS + i), QP);
                    } else {
                        mt_load_b(vb, v_sh, 16u * j * VP + 8u * (ds * DVS + i), VP);
                    }
                    mt_mad(o[i], pa, vb);
                }
            }
        }
        barrier();  // before the next tile's marks, rows and scores replace these
    }

    // Each row's sum over its lanes, then its end (row_finish) as a factor of its row group.
    [[unroll]] for (uint q = 0u; q < RPL; ++q) {
        [[unroll]] for (uint o_ = 1u; o_ < LPR; o_ <<= 1u) {
            l[q] += subgroupShuffleXor(l[q], o_);
        }
        float f = 0.0;
        if (16u * rg + rr[q] < n_rows) {
            f = row_finish(split, tok[q] * pc.n_heads + head[q], head[q], m[q], l[q], lane % LPR == 0u);
        }
        if (lane % LPR == 0u) {
            slab_sh[f_at + rr[q]] = floatBitsToUint(f);
        }
    }
    tile_sync();
    // Each of this subgroup's output tiles through its scores' place, then row_store by vec4s.
    MT_UNROLL_ACC for (uint i = 0u; i < DVS; ++i) {
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        mt_store(o[i], slab_sh, s_at, SP);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        [[unroll]] for (uint n = 0u; n < (64u + MT_SG - 1u) / MT_SG; ++n) {
            const uint x = lane + n * MT_SG, r = x >> 2, c = x & 3u;
            if (x < 64u && 16u * rg + r < n_rows) {
                uint t_, h_;
                int p_, s_;
                float a_;
                row_query(row0 + 16u * rg + r, kv_head, t_, h_, p_, s_, a_);
                const uint w = s_at + r * SP + 4u * c;
                const vec4 y = uintBitsToFloat(uvec4(slab_sh[w], slab_sh[w + 1u], slab_sh[w + 2u], slab_sh[w + 3u]));
                row_store(split, t_ * pc.n_heads + h_, 4u * (ds * DVS + i) + c, y, uintBitsToFloat(slab_sh[f_at + r]));
            }
        }
    }
}
