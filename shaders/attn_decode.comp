#version 450
// attn_decode: CommandList::attention for few query rows over many keys (decode), shaped
// for GPUs (KernelShape::gpu). It computes what attn_fused.comp does (scores as
// attn_visible.glsl, the softmax of attn_softmax with sinks in the denominator); it is
// built to keep K and V streaming at the memory's speed:
// - a key group of LANES invocations reads a key row together, each lane PIECES pieces of
//   EPL elements (16 bytes), piece p of lane l at element (p * LANES + l) * EPL;
// - a stage is KEYS keys per key group (G groups: STAGE = G * KEYS consecutive keys); K, V
//   and positions are loaded undecoded (tensor_load.glsl's _raw) into a ring of DEPTH
//   stages' registers, each refilled as soon as its stage is computed, so that DEPTH
//   stages' loads are in flight while one is waited for (DEPTH 1: the next stage is
//   loaded into registers of its own and copied into the current one's at the end of each
//   step, the loop before the ring);
// - splits are interleaved: split s takes runs of RUN stages, runs s, s + S, s + 2S, ...
//   so that all workgroups stream the keys front to back together, and each stops at the
//   sequence's occupancy bound (attn_meta.glsl: key_bound), whatever the cache's capacity;
// - the partial dot products are reduce-scattered over the key group
//   (attn_decode_xchg.glsl), so each score's visibility, bias and exp run once;
// - LAZY_MAX (subgroup shuffles only): a row's reference maximum moves only when a score
//   passes it by more than ln 2^16 (p <= 65536, nothing in f32), found by an OR over the key
//   group's lanes; only then are the scores gathered for the new maximum, so most stages
//   skip that all-gather and keep the probabilities' one;
// - the key groups meet in shared memory at the end, with no register array indexed at run
//   time; with S > 1 splits, each workgroup leaves its rows' partial sums and (max, sum)
//   pairs, and the splits are merged (attn_merge.glsl) by the last workgroup of the tile
//   to finish (VKATTN_LAST_MERGE: an atomic counter; coherent buffers and
//   memoryBarrierBuffer, which every Vulkan device has: the Vulkan memory model's
//   acquire/release lost stores on Mesa 22.3's lavapipe) or by attn_decode_merge.comp in
//   a second dispatch.
//   binding 0: readonly q words [n_tokens, n_heads, head_dim] (Q_F16)
//   binding 1, 2: readonly k, v words, element (j, g, d) at s*k_seq_stride + j*k_key_stride +
//              g*k_head_stride + d (v: its own strides, d < v_head_dim), s the tile's sequence
//              for a KV cache, else 0 (K_TYPE, V_TYPE)
//   binding 3: writeonly float out [n_tokens, n_heads, v_head_dim]
//   binding 4: readonly float mask [n_tokens, n_keys] (when has_mask)
//   binding 5: readonly int meta (params.h: VKATTN_META_*); VKATTN_LAST_MERGE: from word
//              counter_offset, a counter per tile (zero in every run: parameters)
//   binding 6: readonly int key positions (params.h): plain keys' positions and sequences,
//              or a cache's slot table and occupancy bounds
//   binding 7: with key_splits > 1, the splits' results: sums [splits, n_tokens * n_heads,
//              ceil(v_head_dim / 4) vec4], then from word ml_offset their (max, sum) pairs
//   push: AttnParams; spec: see the constants below
//   variants: VKATTN_SHARED_REDUCE (no subgroup operations), VKATTN_LAST_MERGE
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifndef VKATTN_SHARED_REDUCE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "fma_dot.glsl"
#include "rope_phase.glsl"

const uint WG = WG_SIZE;  // a multiple of the required subgroup size (subgroup variant)
layout(constant_id = VKATTN_SPEC_DECODE_ROWS) const uint ROWS = 4;    // rows per tile, a power of two
layout(constant_id = VKATTN_SPEC_DECODE_LANES) const uint LANES = 16;  // lanes per key row, a power of two
layout(constant_id = VKATTN_SPEC_DECODE_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_DECODE_K_TYPE) const uint K_TYPE = VKATTN_KV_F16;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_DECODE_V_TYPE) const uint V_TYPE = VKATTN_KV_F16;
layout(constant_id = VKATTN_SPEC_DECODE_K_EPL) const uint K_EPL = 8;     // elements per piece: 8 or 4
layout(constant_id = VKATTN_SPEC_DECODE_K_PIECES) const uint K_PIECES = 1;  // pieces per lane
layout(constant_id = VKATTN_SPEC_DECODE_V_EPL) const uint V_EPL = 8;
layout(constant_id = VKATTN_SPEC_DECODE_V_PIECES) const uint V_PIECES = 1;
layout(constant_id = VKATTN_SPEC_DECODE_K_ALIGNED) const bool K_ALIGNED = true;  // head_dim % K_EPL == 0
layout(constant_id = VKATTN_SPEC_DECODE_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_DECODE_KEYS) const uint KEYS = 2;  // keys per key group per stage
LEAN_FIXED(VKATTN_SPEC_DECODE_ROPE_ON_READ) const bool ROPE_ON_READ = false;
layout(constant_id = VKATTN_SPEC_DECODE_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;
layout(constant_id = VKATTN_SPEC_DECODE_MULTI_SEQ) const bool MULTI_SEQ = false;  // a cache of several sequences
layout(constant_id = VKATTN_SPEC_DECODE_N) const uint N = 8;  // ROWS * KEYS
layout(constant_id = VKATTN_SPEC_DECODE_C) const uint C = 1;  // max(1, N / LANES)
layout(constant_id = VKATTN_SPEC_DECODE_MERGE_ROWS) const uint MERGE_ROWS = 4;  // rows per pass of the end's merge
layout(constant_id = VKATTN_SPEC_DECODE_Q_ALIGNED) const bool Q_ALIGNED = true;  // head_dim % 8 == 0
layout(constant_id = VKATTN_SPEC_DECODE_INTERLEAVE) const bool INTERLEAVE = true;  // false: contiguous splits (probe)
// A probe's parts (VKATTN_DECODE; no valid result): bit 0 the K and V loads alone
// (load_only=1); skip='s 1 the exchanges between a key group's lanes (each lane keeps its
// own partial sums), 2 the end (the key groups' merge, the writes, the splits' merge),
// 3 the splits' merge by the last workgroup alone.
LEAN_FIXED(VKATTN_SPEC_DECODE_PROBE) const uint PROBE = 0u;
layout(constant_id = VKATTN_SPEC_DECODE_DEPTH) const uint DEPTH = 2;  // stages in flight: 1, 2 or 3
layout(constant_id = VKATTN_SPEC_DECODE_RUN) const uint RUN = 1;  // consecutive stages per run of a split
layout(constant_id = VKATTN_SPEC_DECODE_LAZY_MAX) const bool LAZY_MAX = false;  // shuffle variant only
const float LAZY_TAU = 11.090354888959125;  // ln 2^16

const uint KE = K_PIECES * K_EPL, VE4 = V_PIECES * V_EPL / 4u;
const bool LOAD_ONLY = (PROBE & 1u) != 0u, SKIP_EXCHANGE = (PROBE & 2u) != 0u;
const bool SKIP_END = (PROBE & 4u) != 0u, SKIP_MERGE = (PROBE & 8u) != 0u;

#ifdef VKATTN_LAST_MERGE
layout(std430, binding = 5) coherent buffer Counters { uint counters[]; };  // meta's words
layout(std430, binding = 7) coherent buffer Part { float part[]; };
layout(std430, binding = 7) coherent buffer Part4 { vec4 part4[]; };
#else
layout(std430, binding = 7) buffer Part { float part[]; };
layout(std430, binding = 7) buffer Part4 { vec4 part4[]; };
#endif
#define ATTN_Q_ALIGNED Q_ALIGNED
#define ATTN_K_ALIGNED K_ALIGNED
#define ATTN_V_ALIGNED V_ALIGNED
#include "attn_inputs.glsl"
#include "attn_online.glsl"

#include "attn_rows.glsl"
#include "attn_visible.glsl"
#include "attn_decode_xchg.glsl"
#include "attn_merge.glsl"
#include "rope_element.glsl"

const uint STAGE = G * KEYS;

// The end: each key group's (max, sum) per row, and MERGE_ROWS rows of sums at a time.
shared float m_sh[G * ROWS];
shared float l_sh[G * ROWS];
shared vec4 acc_sh[MERGE_ROWS * WG * VE4];
shared uint last_sh;

float piece_at(vec4 lo, vec4 hi, uint i) { return i < 4u ? lo[i] : hi[i - 4u]; }

// Rotates a piece (elements e0 .. e0 + EPL - 1 of the row at |row|) by |cpos|
// (KvRope::on_read). Partners half a rotary_dim away are read again from memory (|which|:
// 0 q, 1 k): the piece's lane has only its own elements, and the row was just read.
void rope_piece(uint which, uint row, uint e0, uint epl, uint cpos, inout vec4 lo, inout vec4 hi) {
    const vec4 lo0 = lo, hi0 = hi;
    [[unroll]] for (uint i = 0u; i < 8u; ++i) {
        const uint d = e0 + i;
        if (i >= epl || d >= pc.rotary_dim) {
            continue;
        }
        // Interleaved pairs lie inside a piece; others are half a rotary_dim away.
        const uint pd = rope_partner(d);
        const float partner = ROPE_INTERLEAVED ? piece_at(lo0, hi0, i ^ 1u) : which == 0u ? load_q_1(row + pd) : load_k_1(row + pd);
        const float rotated = rope_element(d, piece_at(lo0, hi0, i), partner, cpos);
        if (i < 4u) {
            lo[i] = rotated;
        } else {
            hi[i - 4u] = rotated;
        }
    }
}

// This invocation's place and state: globals rather than parameters, so that compute_stage
// copies no array (it is inlined wherever it is called, its ring slot then a constant).
uint lane, group, kv_head, split, seq0, bound;
vec4 q_lo[ROWS][K_PIECES], q_hi[ROWS][K_PIECES];  // the query rows (this lane's elements)
uint my_r[C], my_b[C], my_tok[C];                 // what this lane's sums (attn_decode_xchg.glsl) belong to
int my_qpos[C], my_qseq[C];
float my_slope[C];
float m[ROWS], l[ROWS];
vec4 acc_lo[ROWS][V_PIECES], acc_hi[ROWS][V_PIECES];
uvec4 sink;  // LOAD_ONLY, SKIP_END: what was loaded or summed, so that it is not dropped
// The ring: DEPTH stages' undecoded K and V pieces, positions and (plain keys) sequences.
uvec4 rk[DEPTH][KEYS][K_PIECES], rv[DEPTH][KEYS][V_PIECES];
int rp[DEPTH][KEYS], rs[DEPTH][KEYS];

// The undecoded K and V pieces and the positions (and, for plain keys, sequences) of the
// keys of stage |T| that this invocation reads; keys at or past |LIMIT| are not read.
#define LOAD_STAGE(T, LIMIT, KR, VR, KP, KS)                                                  \
    [[unroll]] for (uint b = 0u; b < KEYS; ++b) {                                            \
        const uint j = (T) * STAGE + b * G + group;                                          \
        KP[b] = -1;                                                                          \
        KS[b] = -1;                                                                          \
        [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) KR[b][p] = uvec4(0u);                \
        [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) VR[b][p] = uvec4(0u);                \
        if (j < (LIMIT)) {                                                                   \
            KP[b] = key_position(seq0, j);                                                   \
            if (pc.k_meta_stride == 0u) KS[b] = kpos[pc.n_keys + j];                         \
            const uint row = key_row(seq0, kv_head, j);                                      \
            [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {                                \
                const uint e = (p * LANES + lane) * K_EPL;                                   \
                if (e < pc.head_dim) {                                                       \
                    KR[b][p] = K_EPL == 8u ? load_k_raw8(row + e, row + pc.head_dim)         \
                                           : load_k_raw4(row + e, row + pc.head_dim);        \
                }                                                                            \
            }                                                                                \
            const uint v_row = value_row(seq0, kv_head, j);                                  \
            [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {                                \
                const uint e = (p * LANES + lane) * V_EPL;                                   \
                if (e < pc.v_head_dim) {                                                     \
                    VR[b][p] = V_EPL == 8u ? load_v_raw8(v_row + e, v_row + pc.v_head_dim)   \
                                           : load_v_raw4(v_row + e, v_row + pc.v_head_dim);  \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

// a[r] (r < ROWS) with no register array indexed at run time.
float row_value(float a[ROWS], uint r) {
    float x = a[0];
    [[unroll]] for (uint i = 1u; i < ROWS; ++i) {
        if (i == r) {
            x = a[i];
        }
    }
    return x;
}

// Whether one of this lane's scores passes its row's reference maximum by more than
// LAZY_TAU (NEG_MAX + LAZY_TAU is NEG_MAX: a row's first visible score always does).
bool held_passes() {
    bool passes = false;
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        passes = passes || held[j] > row_value(m, my_r[j]) + LAZY_TAU;
    }
    return passes;
}

// |x| in any lane of the key group (shuffles within it: LANES divides the subgroup).
bool key_group_any(bool x) {
#ifdef VKATTN_SHARED_REDUCE
    return true;  // LAZY_MAX is off there: its gathers have workgroup barriers
#else
    if (SKIP_EXCHANGE) {
        return x;
    }
    uint v = x ? 1u : 0u;
    [[unroll]] for (uint o = 1u; o < LANES; o <<= 1u) {
        v |= subgroupShuffleXor(v, o);
    }
    return v != 0u;
#endif
}

// all_gather, or under SKIP_EXCHANGE each lane's own values in every place.
void gather(uint which) {
    if (SKIP_EXCHANGE) {
        [[unroll]] for (uint i = 0u; i < N; ++i) gathered[i] = held[i % C];
    } else {
        all_gather(lane, group, which);
    }
}

// Stage |t|, whose loads sit in ring slot |s|: its scores folded into the running softmax.
void compute_stage(uint t, uint s) {
    if (LOAD_ONLY) {
        [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
            [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) sink ^= rk[s][b][p];
            [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) sink ^= rv[s][b][p];
            sink.x ^= uint(rp[s][b]);
        }
        return;
    }
    // 1. This lane's share of each (row, key) dot product (N pads ROWS * KEYS to a
    //    power of two with zeros).
    [[unroll]] for (uint i = ROWS * KEYS; i < N; ++i) {
        dots[i] = 0.0;
    }
    [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
        // Keys past the last (a stage that runs off the capacity) were not loaded, and their
        // row only picks which half of a scale word is unpacked from zeros: clamped, so that
        // a paged cache's block-table read stays inside the table.
        const uint row = key_row(seq0, kv_head, min(t * STAGE + b * G + group, pc.n_keys - 1u));
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
            dots[r * KEYS + b] = 0.0;
        }
        [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {
            const uint e = (p * LANES + lane) * K_EPL;
            vec4 lo = vec4(0.0), hi = vec4(0.0);
            if (K_EPL == 8u) {  // the element's index in the tensor: its block's scale
                load_k_unraw8(rk[s][b][p], row + e, lo, hi);
            } else {
                lo = load_k_unraw4(rk[s][b][p], row + e);
            }
            if (ROPE_ON_READ && e < pc.head_dim && rp[s][b] >= 0) {
                rope_piece(1u, row, e, K_EPL, key_cache_position(seq0, rp[s][b]), lo, hi);
            }
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                float d = fma_dot(q_lo[r][p], lo, dots[r * KEYS + b]);
                if (K_EPL == 8u) {
                    d = fma_dot(q_hi[r][p], hi, d);
                }
                dots[r * KEYS + b] = d;
            }
        }
    }
    // 2. Whole dot products, one (row, key) per lane; their scores.
    if (SKIP_EXCHANGE) {
        [[unroll]] for (uint j = 0u; j < C; ++j) held[j] = dots[j];
    } else {
        reduce_scatter(lane, group);
    }
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        int k_pos = rp[s][0], k_seq = rs[s][0];
        [[unroll]] for (uint b = 1u; b < KEYS; ++b) {
            if (b == my_b[j]) {
                k_pos = rp[s][b];
                k_seq = rs[s][b];
            }
        }
        const uint key = t * STAGE + my_b[j] * G + group;
        if (pc.k_meta_stride != 0u) {
            k_seq = k_pos >= 0 ? int(seq0) : -1;
        }
        const bool seen = key < bound && key_visible(my_qpos[j], my_qseq[j], k_pos, k_seq);
        held[j] = seen ? visible_score(held[j], my_tok[j], my_qpos[j], key, k_pos, my_slope[j]) : -1.0 / 0.0;
    }
    // 3. Every row's new maximum from all the scores (LAZY_MAX: only where a score passed
    //    its row's by more than LAZY_TAU); this lane's probabilities.
    float m_new[ROWS];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        m_new[r] = m[r];
    }
    if (!LAZY_MAX || key_group_any(held_passes())) {  // uniform in the key group
        gather(0u);
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
            [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
                m_new[r] = max(m_new[r], gathered[r * KEYS + b]);
            }
        }
    }
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        held[j] = exp(held[j] - row_value(m_new, my_r[j]));
    }
    gather(1u);
    // 4. Rows whose maximum moved are rescaled; then p * v. A key no row weighs is
    //    not added in, whatever its V holds (NaN in a stale slot).
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        if (m_new[r] > m[r]) {
            const float rescale = exp(m[r] - m_new[r]);
            ONLINE_RESCALE(r, rescale, l, acc_lo, acc_hi)
            m[r] = m_new[r];
        }
        [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
            l[r] += gathered[r * KEYS + b];
        }
    }
    [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
        const uint row = value_row(seq0, kv_head, min(t * STAGE + b * G + group, pc.n_keys - 1u));  // as key_row's
        bool weighed = false;
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
            weighed = weighed || gathered[r * KEYS + b] > 0.0;
        }
        [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {
            const uint e = (p * LANES + lane) * V_EPL;
            vec4 lo = vec4(0.0), hi = vec4(0.0);
            if (V_EPL == 8u) {
                load_v_unraw8(rv[s][b][p], row + e, lo, hi);
            } else {
                lo = load_v_unraw4(rv[s][b][p], row + e);
            }
            lo = weighed ? lo : vec4(0.0);
            hi = weighed ? hi : vec4(0.0);
            [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
                const vec4 w = vec4(gathered[r * KEYS + b]);
                acc_lo[r][p] = fma(w, lo, acc_lo[r][p]);
                if (V_EPL == 8u) {
                    acc_hi[r][p] = fma(w, hi, acc_hi[r][p]);
                }
            }
        }
    }
}

// The i-th stage split |split| takes: runs of RUN stages, S runs apart (interleaved), or
// from |first| on (contiguous splits).
uint stage_of(uint i, uint first) {
    return INTERLEAVE ? ((i / RUN) * pc.key_splits + split) * RUN + i % RUN : first + i;
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
#ifdef VKATTN_SHARED_REDUCE
    const uint sid = lid;
#else
    // Full subgroups of a size LANES divides: a key group's lanes are lanes of one subgroup.
    const uint sid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#endif
    lane = sid % LANES;
    group = sid / LANES;
    sink = uvec4(0u);
    read_meta_offsets();
    uint row_tile, row0, n_rows;
    if (!decode_place(kv_head, split, row_tile, row0, n_rows)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }

    // The rows, at offsets the host fixes (q_pos, then q_seq), so that these loads need not
    // wait for the header of offsets.
    uint tok[ROWS], head[ROWS];
    int q_pos[ROWS], q_seq[ROWS];
    tile_rows(row0, n_rows, kv_head, tok, head);
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        q_pos[r] = meta[VKATTN_META_HEADER + tok[r]];
        q_seq[r] = meta[VKATTN_META_HEADER + pc.n_tokens + tok[r]];
    }
    seq0 = MULTI_SEQ ? uint(q_seq[0]) : 0u;
    const uint cap_stages = (pc.n_keys + STAGE - 1u) / STAGE;
    uint first = 0u, t_stop = cap_stages;
    if (!INTERLEAVE) {
        const uint per = (cap_stages + pc.key_splits - 1u) / pc.key_splits;
        first = split * per;
        t_stop = min(cap_stages, first + per);
    }

    // The ring's first stages are read before the occupancy bound is known (their keys
    // past the bound are empty slots, positions -1), so that their loads wait for nothing.
    [[unroll]] for (uint s = 0u; s < DEPTH; ++s) {
        const uint ts = stage_of(s, first);
        LOAD_STAGE(ts, ts < t_stop ? pc.n_keys : 0u, rk[s], rv[s], rp[s], rs[s])
    }

    // The query rows in registers: this invocation's elements of each, rotated for on_read.
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const uint q_row = (tok[r] * pc.n_heads + head[r]) * pc.head_dim;
        [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) {
            const uint e = (p * LANES + lane) * K_EPL;
            q_lo[r][p] = vec4(0.0);
            q_hi[r][p] = vec4(0.0);
            if (e < pc.head_dim) {
                if (K_EPL == 8u) {
                    load_q_8(q_row + e, q_row + pc.head_dim, q_lo[r][p], q_hi[r][p]);
                } else {
                    q_lo[r][p] = load_q_4(q_row + e, q_row + pc.head_dim);
                }
                if (ROPE_ON_READ) {
                    rope_piece(0u, q_row, e, K_EPL, uint(meta[off_q_cpos + tok[r]]), q_lo[r][p], q_hi[r][p]);
                }
            }
        }
    }
    [[unroll]] for (uint j = 0u; j < C; ++j) {
        const uint idx = held_index(lane, j);
        my_r[j] = idx / KEYS;
        my_b[j] = idx % KEYS;
        my_tok[j] = tok[0];
        my_qpos[j] = q_pos[0];
        my_qseq[j] = q_seq[0];
        uint h = head[0];
        [[unroll]] for (uint r = 1u; r < ROWS; ++r) {
            if (r == my_r[j]) {
                my_tok[j] = tok[r];
                my_qpos[j] = q_pos[r];
                my_qseq[j] = q_seq[r];
                h = head[r];
            }
        }
        my_slope[j] = alibi_slope(h);
    }

    ONLINE_INIT(m, l, acc_lo, acc_hi)

    bound = key_bound(seq0);
    t_stop = min(t_stop, (bound + STAGE - 1u) / STAGE);
    // One loop for every depth, so that compute_stage is inlined once (a driver translates
    // the whole module for every pipeline; the branches on DEPTH fold once specialized).
    // DEPTH 1: the next stage's loads go out first, into registers of their own, copied into
    // the ring's one slot once the current stage is computed. Deeper: each slot is refilled
    // with the stage DEPTH on as soon as its own is computed, so no register whose load is
    // still in flight is copied, and nothing waits for it early.
    for (uint i = 0u; stage_of(i, first) < t_stop; i += DEPTH) {
        [[unroll]] for (uint s = 0u; s < DEPTH; ++s) {
            const uint t = stage_of(i + s, first);
            if (t < t_stop) {  // uniform
                const uint tn = stage_of(i + s + DEPTH, first);
                uvec4 nkr[KEYS][K_PIECES], nvr[KEYS][V_PIECES];
                int nkp[KEYS], nks[KEYS];
                if (DEPTH == 1u) {
                    LOAD_STAGE(tn, tn < t_stop ? bound : 0u, nkr, nvr, nkp, nks)
                }
                compute_stage(t, s);
                if (DEPTH == 1u) {
                    [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
                        [[unroll]] for (uint p = 0u; p < K_PIECES; ++p) rk[0][b][p] = nkr[b][p];
                        [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) rv[0][b][p] = nvr[b][p];
                        rp[0][b] = nkp[b];
                        rs[0][b] = nks[b];
                    }
                } else {
                    LOAD_STAGE(tn, tn < t_stop ? bound : 0u, rk[s], rv[s], rp[s], rs[s])
                }
            }
        }
    }
    if (LOAD_ONLY || SKIP_END) {
        [[unroll]] for (uint r = 0u; r < (SKIP_END ? ROWS : 0u); ++r) {
            sink.x ^= floatBitsToUint(m[r]) ^ floatBitsToUint(l[r]);
            [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) sink ^= floatBitsToUint(acc_lo[r][p] + acc_hi[r][p]);
        }
        if (sink == uvec4(0x9e3779b9u)) {
            out_[0] = 0.0;  // never in practice; the loads and sums must not be dropped
        }
        return;
    }

    // The key groups' results of each row meet: (max, sum) of every group and row, then
    // MERGE_ROWS rows of sums at a time, one output vec4 per invocation and pass.
    if (lane == 0u) {
        [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
            m_sh[group * ROWS + r] = m[r];
            l_sh[group * ROWS + r] = l[r];
        }
    }
    const uint n_all = pc.n_tokens * pc.n_heads;
    const uint d4 = (pc.v_head_dim + 3u) / 4u;
    const uint per_row = LANES * VE4;  // vec4 slots of a row: LANES lanes' pieces
    [[unroll]] for (uint r0 = 0u; r0 < ROWS; r0 += MERGE_ROWS) {
        if (r0 < n_rows) {  // uniform
            [[unroll]] for (uint rr = 0u; rr < MERGE_ROWS; ++rr) {
                if (r0 + rr < ROWS) {
                    [[unroll]] for (uint p = 0u; p < V_PIECES; ++p) {
                        acc_sh[(rr * WG + sid) * VE4 + p * (V_EPL / 4u)] = acc_lo[r0 + rr][p];
                        if (V_EPL == 8u) {
                            acc_sh[(rr * WG + sid) * VE4 + p * 2u + 1u] = acc_hi[r0 + rr][p];
                        }
                    }
                }
            }
            barrier();
            for (uint i = lid; i < MERGE_ROWS * per_row; i += WG) {
                const uint rr = i / per_row, slot = i - rr * per_row, r = r0 + rr;
                const uint src = slot / VE4, k = slot - src * VE4;
                const uint e = ((k / (V_EPL / 4u)) * LANES + src) * V_EPL + (k % (V_EPL / 4u)) * 4u;
                if (r < n_rows && e < pc.v_head_dim) {
                    float m_all = NEG_MAX;
                    for (uint g = 0u; g < G; ++g) {
                        m_all = max(m_all, m_sh[g * ROWS + r]);
                    }
                    float den = 0.0;
                    vec4 sum = vec4(0.0);
                    for (uint g = 0u; g < G; ++g) {
                        const float w = exp(m_sh[g * ROWS + r] - m_all);
                        den += l_sh[g * ROWS + r] * w;
                        sum += w * acc_sh[(rr * WG + g * LANES + src) * VE4 + k];
                    }
                    const uint row = merge_row(kv_head, row0, r);
                    if (pc.key_splits > 1u) {
                        part4[(split * n_all + row) * d4 + e / 4u] = sum;
                        if (e == 0u) {
                            part[pc.ml_offset + 2u * (split * n_all + row)] = m_all;
                            part[pc.ml_offset + 2u * (split * n_all + row) + 1u] = den;
                        }
                    } else {
                        const bool has_sink = pc.has_sinks != 0u;
                        const float scale = row_factor(
                            m_all, den, has_sink, has_sink ? intBitsToFloat(meta[off_sinks + row % pc.n_heads]) : 0.0);
                        [[unroll]] for (uint c = 0u; c < 4u; ++c) {
                            if (e + c < pc.v_head_dim) {
                                out_[row * pc.v_head_dim + e + c] = scale * sum[c];
                            }
                        }
                    }
                }
            }
            barrier();
        }
    }
#ifdef VKATTN_LAST_MERGE
    if (pc.key_splits > 1u && !SKIP_MERGE) {
        // The last workgroup of the tile to get here merges the splits: each workgroup's
        // sums are made visible (coherent, memoryBarrierBuffer) before it counts itself.
        const uint counter = pc.counter_offset + kv_head * pc.row_tiles + row_tile;
        memoryBarrierBuffer();  // this workgroup's sums, before its count
        barrier();
        if (lid == 0u) {
            // The barrier orders shared memory only: the fences on the counting invocation
            // make the others' sums, ordered before it by the barrier, released with its count
            // and the other workgroups' acquired after it, by the memory model's letter too.
            memoryBarrierBuffer();
            last_sh = atomicAdd(counters[counter], 1u) + 1u == pc.key_splits ? 1u : 0u;
            memoryBarrierBuffer();
        }
        barrier();
        if (last_sh != 0u) {
            memoryBarrierBuffer();  // the other workgroups' sums, after their counts
            merge_tile(kv_head, row0, n_rows, lid);
            if (lid == 0u) {
                counters[counter] = 0u;  // ready for the next run without a fresh copy of the parameters
            }
        }
    }
#endif
}
