#version 450
// attn_tiled: fused attention for many query rows per KV head (prefill, batched decode of
// many sequences, speculative verification), where the work is bound by arithmetic: it
// computes what attn_fused.comp does (scores as attn_visible.glsl, sinks in the
// denominator), shaped so that each K/V element is read from memory once per tile of BR
// rows and each value read from shared memory serves several FMAs:
// - a workgroup is BR query rows of one KV head (tokens x GQA group packed, attn_rows.glsl),
//   whose queries sit in shared memory as floats for the whole kernel;
// - a key tile is BC keys: the workgroup copies their K and V rows into shared memory as
//   floats (decoded once, however many rows use them; with a latent cache the K rows also
//   serve as V), through consecutive 16-byte loads issued (PREFETCH) while the tile before
//   computes, held undecoded in registers until its last barrier;
// - register blocking: invocations form BR / RB row groups of KG = BC / KB; each computes
//   RB rows x KB keys of scores (keys kg, kg + KG, ...: one shared load of a query vec4
//   serves KB keys, one of a key vec4 RB rows) and owns RB rows x OP vec4s of the output
//   (vec4s kg, kg + KG, ...: one probability serves OP vec4s);
// - online softmax per row: a tile's maximum meets across the row group (shuffles, or
//   shared memory with VKATTN_SHARED_REDUCE), sums are rescaled only when it moves, and
//   each invocation keeps its own share of the denominator until the end;
// - a key that no row of the tile can see (causal, a window, chunks, another sequence, an
//   empty slot, past the cache's occupancy bound) is never loaded, and a tile of such keys
//   is skipped whole: the keys' positions are read one tile ahead and marked;
// - odd strides (QS, KS, PS) keep the row groups' shared loads on distinct banks;
// - Mesa's llvmpipe counts a loop's iterations over the whole run, not per entry, and
//   stops it at 65,535: on CPU devices the host splits the keys so that no loop inside
//   the loop over tiles gets there (unrolling them all took lavapipe 4x as long to compile);
// - splits are interleaved as in attn_decode (split s takes tiles s, s + S, ...) and merged
//   by attn_decode_merge.comp; KvRope::on_read as in attn_decode_group;
// - VKATTN_PACKED_F16 (AttentionPrecision::f16_products on devices with shaderFloat16):
//   queries, K, V and the probabilities sit in shared memory as f16 (rounded to nearest
//   even; queries, and under scales below 2^-8 keys, times powers of two near the scale,
//   exactly, so that products stay far from f16's 65504), and their products run as
//   f16vec2 FMAs in chains of at most 8 (16 dims of a score, 8 keys of an output) before
//   each chain is added into f32: packed f16 runs at twice the f32 rate on GPUs without
//   matrix units (Mali, Adreno, AMD, Intel) and on NVIDIA (HFMA2), none of which have an
//   f16 x f16 + f32 FMA outside them.
//   bindings 0-7: as attn_decode.comp (q, k, v, out, mask, meta, key positions, partials)
//   push: AttnParams; spec: see the constants below
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef VKATTN_SHARED_REDUCE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef VKATTN_PACKED_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "fma_dot.glsl"
#include "rope_phase.glsl"

const uint WG = WG_SIZE;  // BR / RB * KG
layout(constant_id = VKATTN_SPEC_TILED_ROWS) const uint BR = 32;                  // rows per tile
layout(constant_id = VKATTN_SPEC_TILED_KEYS) const uint BC = 16;                  // keys per tile
layout(constant_id = VKATTN_SPEC_TILED_ROWS_PER_INVOCATION) const uint RB = 2;    // divides BR
layout(constant_id = VKATTN_SPEC_TILED_KEYS_PER_INVOCATION) const uint KB = 2;    // divides BC
layout(constant_id = VKATTN_SPEC_TILED_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_TILED_K_TYPE) const uint K_TYPE = VKATTN_KV_F16;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_TILED_V_TYPE) const uint V_TYPE = VKATTN_KV_F16;
layout(constant_id = VKATTN_SPEC_TILED_DK4) const uint DK4 = 32;  // vec4s of a query and K row
layout(constant_id = VKATTN_SPEC_TILED_DV4) const uint DV4 = 32;  // of a V row
layout(constant_id = VKATTN_SPEC_TILED_Q_ALIGNED) const bool Q_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_TILED_K_ALIGNED) const bool K_ALIGNED = true;  // rows of whole vec4s
layout(constant_id = VKATTN_SPEC_TILED_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_TILED_MULTI_SEQ) const bool MULTI_SEQ = false;
layout(constant_id = VKATTN_SPEC_TILED_V_FROM_K) const bool V_FROM_K = false;
LEAN_FIXED(VKATTN_SPEC_TILED_ROPE_ON_READ) const bool ROPE_ON_READ = false;  // never with V_FROM_K
layout(constant_id = VKATTN_SPEC_TILED_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;
// The next tile's rows loaded during this one (the host asks for it where NK and NV <= 8).
layout(constant_id = VKATTN_SPEC_TILED_PREFETCH) const bool PREFETCH = true;

const uint ROWS = BR;                 // attn_rows.glsl's name for it
const uint KG = BC / KB;              // invocations per row group, a power of two
const uint OP = (DV4 + KG - 1u) / KG;  // output vec4s per row per invocation
// Odd strides: the row groups of a subgroup read rows RB apart (queries) and the lanes of
// a row group keys one apart (keys), which with an even stride would share banks.
const uint QS = DK4 | 1u, KS = DK4 | 1u, PS = BC | 1u;
const uint NK = (BC * DK4 + WG - 1u) / WG, NV = (BC * DV4 + WG - 1u) / WG;  // staged vec4s per invocation

#include "attn_row_tiles.glsl"
#include "attn_packed_f16.glsl"
#ifdef VKATTN_PACKED_F16
const uint PV_CHUNK = BC < 8u ? BC : 8u;  // keys of an output per chain: BC is a power of two
#define PV_SUM po
#else
const uint PV_CHUNK = BC;  // one pass
#define PV_SUM acc
#endif

shared SH_VEC4 q_sh[BR * QS];
shared SH_VEC4 k_sh[BC * KS];
shared SH_VEC4 v_sh[V_FROM_K ? 1u : BC * DV4];
shared SH_FLOAT p_sh[BR * PS];
// Two tiles' key positions and sequences (the next tile's are read while this one
// computes); a sequence of -1 marks a key no row of the tile sees.
shared int kp_sh[2u * BC];
shared int ks_sh[2u * BC];
shared int qp_sh[BR];  // the tile's rows' positions and sequences
shared int qs_sh[BR];
#ifdef VKATTN_SHARED_REDUCE
shared float red_sh[BR * KG];
#endif

// V vec4 |c| of the tile's key |b| (a latent cache's values are K's first dims).
SH_VEC4 v_tile(uint b, uint c) { return V_FROM_K ? k_sh[b * KS + c] : v_sh[b * DV4 + c]; }
uvec4 kraw[NK], vraw[NV];  // a tile's K and V rows as loaded (tensor_load.glsl's raw pieces)
// The span of the tile's rows (attn_visible.glsl's query_span): a key outside what any of
// them could see is marked unseen by one test instead of one per row (past the causal
// diagonal, a tile's marking would otherwise cost BR tests a key and dominate causal prefill).
ivec4 span;

// Row r's share |x| from each invocation of its row group: their maximum (|is_max|) or sum,
// in every invocation of the group. All invocations call it (shuffles; barriers).
#ifdef VKATTN_SHARED_REDUCE
void reduce_rows(inout float x[RB], uint rg, uint kg, bool is_max) {
    [[unroll]] for (uint i = 0u; i < RB; ++i) {
        red_sh[(rg * RB + i) * KG + kg] = x[i];
    }
    barrier();
    [[unroll]] for (uint i = 0u; i < RB; ++i) {
        float y = red_sh[(rg * RB + i) * KG];
        [[unroll]] for (uint g = 1u; g < KG; ++g) {
            const float z = red_sh[(rg * RB + i) * KG + g];
            y = is_max ? max(y, z) : y + z;
        }
        x[i] = y;
    }
    barrier();  // before red_sh is written again
}
#else
void reduce_rows(inout float x[RB], uint rg, uint kg, bool is_max) {
    [[unroll]] for (uint i = 0u; i < RB; ++i) {
        [[unroll]] for (uint o = 1u; o < KG; o <<= 1u) {
            const float z = subgroupShuffleXor(x[i], o);
            x[i] = is_max ? max(x[i], z) : x[i] + z;
        }
    }
}
#endif

// Marks tile t's keys into half |h| of kp_sh/ks_sh: each key's position, and its sequence
// where some row of the tile sees it (-1 otherwise, and past the bound).
void mark_keys(uint t, uint h, uint lid, uint seq0, uint bound, uint n_rows) {
    [[unroll]] for (uint n = 0u; n < (BC + WG - 1u) / WG; ++n) {
        const uint b = lid + n * WG;
        if (b >= BC) {
            break;
        }
        const uint j = t * BC + b;
        const int position = j < bound ? key_position(seq0, j) : -1;
        int seq = j < bound ? key_sequence(seq0, j, position) : -1;
        const bool may_see = seq >= 0 && span_may_see(span, position, seq);
        bool seen = false;
        for (uint r = 0u; r < n_rows && may_see && !seen; ++r) {
            seen = key_visible(qp_sh[r], qs_sh[r], position, seq);
        }
        kp_sh[h * BC + b] = position;
        ks_sh[h * BC + b] = seen ? seq : -1;
    }
}

// Whether some row of the tile sees a key marked in half |h|.
bool tile_seen(uint h) {
    bool seen = false;
    [[unroll]] for (uint b = 0u; b < BC; ++b) {
        seen = seen || ks_sh[h * BC + b] >= 0;
    }
    return seen;
}

// Tile t's K and V rows (keys marked in half |h|) loaded undecoded into kraw and vraw, vec4
// lid + n * WG of the tile in element n; keys no row sees are not loaded.
void load_tile(uint t, uint h, uint lid, uint seq0, uint kv_head) {
    [[unroll]] for (uint n = 0u; n < NK; ++n) {
        const uint i = lid + n * WG, b = i / DK4, c = i - b * DK4;
        kraw[n] = uvec4(0u);
        if (i < BC * DK4 && ks_sh[h * BC + b] >= 0) {
            const uint kr = key_row(seq0, kv_head, t * BC + b);
            kraw[n] = load_k_raw4(kr + c * 4u, kr + pc.head_dim);
        }
    }
    [[unroll]] for (uint n = 0u; n < (V_FROM_K ? 0u : NV); ++n) {
        const uint i = lid + n * WG, b = i / DV4, c = i - b * DV4;
        vraw[n] = uvec4(0u);
        if (i < BC * DV4 && ks_sh[h * BC + b] >= 0) {
            const uint vr = value_row(seq0, kv_head, t * BC + b);
            vraw[n] = load_v_raw4(vr + c * 4u, vr + pc.v_head_dim);
        }
    }
}

// K vec4 |i| and V vec4 |i| of tile t (keys marked in half |h|) into k_sh and v_sh as
// floats: decoded from |raw| (loaded before) or, without |have_raw|, loaded now; keys
// rotated by their place in the cache with KvRope::on_read; zeros for keys no row sees (a
// stale slot's V may hold NaN, which no weight of zero may let in).
void stage_k(uint i, uint t, uint h, uint seq0, uint kv_head, bool have_raw, uvec4 raw) {
    const uint b = i / DK4, c = i - b * DK4;
    vec4 x = vec4(0.0);
    if (ks_sh[h * BC + b] >= 0) {
        const uint kr = key_row(seq0, kv_head, t * BC + b);
        x = have_raw ? load_k_unraw4(raw, kr + c * 4u) : load_k_4(kr + c * 4u, kr + pc.head_dim);
        if (ROPE_ON_READ && c * 4u < pc.rotary_dim) {
            x = rope_vec4(1u, kr, c * 4u, key_cache_position(seq0, kp_sh[h * BC + b]), x);
        }
    }
    k_sh[b * KS + c] = to_sh4(x * k_prescale(V_FROM_K));
}
void stage_v(uint i, uint t, uint h, uint seq0, uint kv_head, bool have_raw, uvec4 raw) {
    const uint b = i / DV4, c = i - b * DV4;
    vec4 x = vec4(0.0);
    if (ks_sh[h * BC + b] >= 0) {
        const uint vr = value_row(seq0, kv_head, t * BC + b);
        x = have_raw ? load_v_unraw4(raw, vr + c * 4u) : load_v_4(vr + c * 4u, vr + pc.v_head_dim);
    }
    v_sh[b * DV4 + c] = to_sh4(x);
}

// Tile t's rows into shared memory: from kraw and vraw (PREFETCH), else loaded now.
void stage_tile(uint t, uint h, uint lid, uint seq0, uint kv_head) {
    if (PREFETCH) {
        [[unroll]] for (uint n = 0u; n < NK; ++n) {
            if (lid + n * WG < BC * DK4) {
                stage_k(lid + n * WG, t, h, seq0, kv_head, true, kraw[n]);
            }
        }
        [[unroll]] for (uint n = 0u; n < (V_FROM_K ? 0u : NV); ++n) {
            if (lid + n * WG < BC * DV4) {
                stage_v(lid + n * WG, t, h, seq0, kv_head, true, vraw[n]);
            }
        }
        return;
    }
    for (uint i = lid; i < BC * DK4; i += WG) {
        stage_k(i, t, h, seq0, kv_head, false, uvec4(0u));
    }
    for (uint i = lid; i < (V_FROM_K ? 0u : BC * DV4); i += WG) {
        stage_v(i, t, h, seq0, kv_head, false, uvec4(0u));
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
#ifdef VKATTN_SHARED_REDUCE
    const uint sid = lid;
#else
    // Full subgroups of a size KG divides: a row group's invocations share a subgroup.
    const uint sid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#endif
    const uint rg = sid / KG, kg = sid % KG;
    uint kv_head, split, row0, n_rows, seq0;
    if (!row_tile_place(kv_head, split, row0, n_rows, seq0)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }

    // The tile's queries (rows past n_rows repeat the last one and write nothing), rotated
    // by their place in the cache with KvRope::on_read.
    for (uint i = lid; i < BR * DK4; i += WG) {
        const uint r = i / DK4, c = i - r * DK4;
        const uint row = row0 + min(r, n_rows - 1u), tok = row / pc.group;
        const uint q_row = (tok * pc.n_heads + kv_head * pc.group + (row - tok * pc.group)) * pc.head_dim;
        vec4 x = load_q_4(q_row + c * 4u, q_row + pc.head_dim);
        if (ROPE_ON_READ && c * 4u < pc.rotary_dim) {
            x = rope_vec4(0u, q_row, c * 4u, uint(meta[off_q_cpos + tok]), x);
        }
        q_sh[r * QS + c] = to_sh4(x * q_prescale());
    }
    for (uint r = lid; r < BR; r += WG) {
        const uint tok = (row0 + min(r, n_rows - 1u)) / pc.group;
        qp_sh[r] = meta[off_q_pos + tok];
        qs_sh[r] = meta[off_q_seq + tok];
    }
    span = query_span(row0 / pc.group, (row0 + n_rows - 1u) / pc.group);
    // This invocation's rows: tokens, heads, positions, sequences and ALiBi slopes.
    uint tok[RB], head[RB];
    int q_pos[RB], q_seq[RB];
    float slope[RB], m[RB], l[RB];
    vec4 acc[RB][OP];
    [[unroll]] for (uint i = 0u; i < RB; ++i) {
        row_query(row0 + min(rg * RB + i, n_rows - 1u), kv_head, tok[i], head[i], q_pos[i], q_seq[i], slope[i]);
        m[i] = NEG_MAX;
        l[i] = 0.0;
        [[unroll]] for (uint o = 0u; o < OP; ++o) {
            acc[i][o] = vec4(0.0);
        }
    }
    const uint bound = key_bound(seq0);
    const uint n_tiles = (bound + BC - 1u) / BC;
    barrier();  // qp_sh, qs_sh
    mark_keys(split, 0u, lid, seq0, bound, n_rows);
    barrier();

    uint h = 0u;        // the half of kp_sh/ks_sh holding this tile's keys
    bool have = false;  // kraw and vraw hold this tile's rows (loaded during the last one)
    for (uint t = split; t < n_tiles; t += pc.key_splits, h ^= 1u) {
        if (!tile_seen(h)) {  // uniform: every invocation read the same marks
            mark_keys(t + pc.key_splits, h ^ 1u, lid, seq0, bound, n_rows);
            barrier();
            have = false;
            continue;
        }
        if (PREFETCH && !have) {
            load_tile(t, h, lid, seq0, kv_head);
        }
        stage_tile(t, h, lid, seq0, kv_head);
        mark_keys(t + pc.key_splits, h ^ 1u, lid, seq0, bound, n_rows);
        barrier();
        // The next tile's rows start loading now, to arrive while this one computes.
        have = PREFETCH && tile_seen(h ^ 1u);
        if (have) {
            load_tile(t + pc.key_splits, h ^ 1u, lid, seq0, kv_head);
        }

        // Scores: RB rows x KB keys, each shared load serving KB or RB of them.
        float s[RB][KB];
        [[unroll]] for (uint i = 0u; i < RB; ++i) {
            [[unroll]] for (uint j = 0u; j < KB; ++j) {
                s[i][j] = 0.0;
            }
        }
#ifdef VKATTN_PACKED_F16
        // Chains of QK_CHUNK vec4s (8 FMAs a half), each then added into f32.
        for (uint c0 = 0u; c0 < DK4; c0 += QK_CHUNK) {
            f16vec2 sc[RB][KB];
            [[unroll]] for (uint i = 0u; i < RB; ++i) {
                [[unroll]] for (uint j = 0u; j < KB; ++j) {
                    sc[i][j] = f16vec2(0.0hf);
                }
            }
            [[unroll]] for (uint cc = 0u; cc < QK_CHUNK; ++cc) {
                const uint c = c0 + cc;
                if (c < DK4) {
                    f16vec4 kv[KB];
                    [[unroll]] for (uint j = 0u; j < KB; ++j) {
                        kv[j] = k_sh[(kg + j * KG) * KS + c];
                    }
                    [[unroll]] for (uint i = 0u; i < RB; ++i) {
                        const f16vec4 qv = q_sh[(rg * RB + i) * QS + c];
                        [[unroll]] for (uint j = 0u; j < KB; ++j) {
                            sc[i][j] = fma(qv.xy, kv[j].xy, sc[i][j]);
                            sc[i][j] = fma(qv.zw, kv[j].zw, sc[i][j]);
                        }
                    }
                }
            }
            [[unroll]] for (uint i = 0u; i < RB; ++i) {
                [[unroll]] for (uint j = 0u; j < KB; ++j) {
                    s[i][j] += float(sc[i][j].x) + float(sc[i][j].y);
                }
            }
        }
        [[unroll]] for (uint i = 0u; i < RB; ++i) {
            [[unroll]] for (uint j = 0u; j < KB; ++j) {
                s[i][j] /= qk_prescale(V_FROM_K);  // a power of two: exact
            }
        }
#else
        for (uint c = 0u; c < DK4; ++c) {
            vec4 kv[KB];
            [[unroll]] for (uint j = 0u; j < KB; ++j) {
                kv[j] = k_sh[(kg + j * KG) * KS + c];
            }
            [[unroll]] for (uint i = 0u; i < RB; ++i) {
                const vec4 qv = q_sh[(rg * RB + i) * QS + c];
                [[unroll]] for (uint j = 0u; j < KB; ++j) {
                    s[i][j] = fma_dot(qv, kv[j], s[i][j]);
                }
            }
        }
#endif
        float mx[RB];
        [[unroll]] for (uint i = 0u; i < RB; ++i) {
            mx[i] = -1.0 / 0.0;
            [[unroll]] for (uint j = 0u; j < KB; ++j) {
                const uint b = kg + j * KG;
                const int k_pos = kp_sh[h * BC + b];
                s[i][j] = key_visible(q_pos[i], q_seq[i], k_pos, ks_sh[h * BC + b])
                              ? visible_score(s[i][j], tok[i], q_pos[i], t * BC + b, k_pos, slope[i])
                              : -1.0 / 0.0;
                mx[i] = max(mx[i], s[i][j]);
            }
        }
        reduce_rows(mx, rg, kg, true);
        [[unroll]] for (uint i = 0u; i < RB; ++i) {
            if (mx[i] > m[i]) {  // the row's maximum moved: its sums follow (same in its group)
                const float rescale = exp(m[i] - mx[i]);
                l[i] *= rescale;
                [[unroll]] for (uint o = 0u; o < OP; ++o) {
                    acc[i][o] *= rescale;
                }
                m[i] = mx[i];
            }
            [[unroll]] for (uint j = 0u; j < KB; ++j) {
                const float p = exp(s[i][j] - m[i]);
                const SH_FLOAT ps = to_sh(p);
                l[i] += float(ps);  // the weights O gets
                p_sh[(rg * RB + i) * PS + kg + j * KG] = ps;
            }
        }
        barrier();

        // Output: RB rows x OP vec4s, each probability serving OP vec4s, each V vec4 RB rows;
        // packed f16: in chains of PV_CHUNK keys (po), each then added into f32 (acc).
        for (uint b0 = 0u; b0 < BC; b0 += PV_CHUNK) {
#ifdef VKATTN_PACKED_F16
            f16vec4 po[RB][OP];
            [[unroll]] for (uint i = 0u; i < RB; ++i) {
                [[unroll]] for (uint o = 0u; o < OP; ++o) {
                    po[i][o] = f16vec4(0.0hf);
                }
            }
#endif
            for (uint b = b0; b < b0 + PV_CHUNK; ++b) {
                SH_FLOAT p[RB];
                [[unroll]] for (uint i = 0u; i < RB; ++i) {
                    p[i] = p_sh[(rg * RB + i) * PS + b];
                }
                [[unroll]] for (uint o = 0u; o < OP; ++o) {
                    const uint c = kg + o * KG;
                    if (c < DV4) {
                        const SH_VEC4 v = v_tile(b, c);
                        [[unroll]] for (uint i = 0u; i < RB; ++i) {
                            PV_SUM[i][o] = fma(SH_VEC4(p[i]), v, PV_SUM[i][o]);
                        }
                    }
                }
            }
#ifdef VKATTN_PACKED_F16
            [[unroll]] for (uint i = 0u; i < RB; ++i) {
                [[unroll]] for (uint o = 0u; o < OP; ++o) {
                    const uint c = kg + o * KG;
                    vec4 sum = vec4(po[i][o]);
                    // Weights are at most 1, but a chain of 8 passes f16's 65504 from |v| of
                    // about 8192: that chain again in f32 (rare; per invocation, no barrier).
                    if (c < DV4 && any_not_finite(sum)) {
                        sum = vec4(0.0);
                        for (uint b = b0; b < b0 + PV_CHUNK; ++b) {
                            sum = fma(vec4(float(p_sh[(rg * RB + i) * PS + b])), vec4(v_tile(b, c)), sum);
                        }
                    }
                    acc[i][o] += sum;
                }
            }
#endif
        }
        barrier();  // before the next tile's rows replace these
    }
    reduce_rows(l, rg, kg, false);

    [[unroll]] for (uint i = 0u; i < RB; ++i) {
        if (rg * RB + i >= n_rows) {
            break;  // no barrier follows
        }
        const uint out_row = tok[i] * pc.n_heads + head[i];
        const float scale = row_finish(split, out_row, head[i], m[i], l[i], kg == 0u);
        [[unroll]] for (uint o = 0u; o < OP; ++o) {
            row_store(split, out_row, kg + o * KG, acc[i][o], scale);
        }
    }
}
