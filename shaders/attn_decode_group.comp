#version 450
// attn_decode_group: decode for big query groups (DeepSeek's absorbed MLA: 128 query heads
// over one 576-wide latent KV head; Gemma 4's 512-wide heads), where each K/V byte serves
// many rows and the work is bound by arithmetic, not by the memory. It computes what
// attn_decode.comp does (scores as attn_visible.glsl, sinks in the denominator), shaped
// so that each K/V element is read from memory once per workgroup and used by ROWS rows:
// - a workgroup is ROWS query rows of one KV head, LANES invocations per row; each lane
//   holds its row's query elements (p * LANES + lane) * 4 .. + 3 for p < QP in registers,
//   and its row's sums of p * v for elements (p * LANES + lane) * 4 for p < VP;
// - a stage is KEYS keys: the workgroup copies their K rows (and V rows, unless V is the
//   start of each K row: V_FROM_K, a latent cache) into shared memory as floats, then each
//   row's lanes read them from there (the same addresses across rows: broadcasts), add up
//   their share of each dot product and meet by shuffles; every lane of a row then has
//   the row's scores, runs the online softmax and adds p * v for its elements;
// - splits are interleaved as in attn_decode (split s takes stages s, s + S, ...) and
//   stop at the sequence's occupancy bound; with S > 1 the splits' sums and (max, sum)
//   pairs are merged by attn_decode_merge.comp (attn_merge.glsl);
// - KvRope::on_read: each key's elements are rotated by its place in the cache as they are
//   staged, each query's as they are loaded (partners read again from memory);
// - VKATTN_PACKED_F16: queries, K and V rows and the weights as f16 (attn_packed_f16.glsl),
//   each lane's share of a dot product in f16vec2 FMA chains of at most 8, the weighted V
//   rows in chains of at most 8 keys (ended early where the row's maximum moves), each
//   chain then added into f32, as attn_tiled's.
// - MASK_KEYS (AttentionConfig::mask_keys; DeepSeek V3.2's top-k): attn_mask_keys.comp has
//   listed each token's keys that the mask leaves, after the partials in binding 7; a tile
//   (the host keeps it within one token) stages only those, in the order a full scan meets
//   them: with one split the sums are the same (a dropped key adds 0 x v). A token whose
//   list overflowed reads every key.
//   bindings 0-7: as attn_decode.comp (q, k, v, out, mask, meta, key positions, partials)
//   push: AttnParams; spec: see the constants below
//   grid: n_kv_heads * key_splits * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#ifdef VKATTN_PACKED_F16
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#define VKATTN_WANT_ATTN
#include "layout.glsl"
#include "params.h"
#include "rope_phase.glsl"

const uint WG = WG_SIZE;  // ROWS * LANES, a multiple of the required subgroup size
layout(constant_id = VKATTN_SPEC_DECODE_ROWS) const uint ROWS = 16;  // rows per workgroup
layout(constant_id = VKATTN_SPEC_DECODE_LANES) const uint LANES = 8;  // a power of two within a subgroup
layout(constant_id = VKATTN_SPEC_DECODE_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_DECODE_K_TYPE) const uint K_TYPE = VKATTN_KV_F16;  // VKATTN_KV_*
layout(constant_id = VKATTN_SPEC_DECODE_V_TYPE) const uint V_TYPE = VKATTN_KV_F16;
layout(constant_id = VKATTN_SPEC_DECODE_K_PIECES) const uint QP = 18;  // query vec4s per lane
layout(constant_id = VKATTN_SPEC_DECODE_V_PIECES) const uint VP = 16;  // sum vec4s per lane
layout(constant_id = VKATTN_SPEC_DECODE_K_ALIGNED) const bool K_ALIGNED = true;  // rows of whole vec4s
layout(constant_id = VKATTN_SPEC_DECODE_V_ALIGNED) const bool V_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_DECODE_KEYS) const uint KEYS = 8;  // keys per stage
layout(constant_id = VKATTN_SPEC_DECODE_MULTI_SEQ) const bool MULTI_SEQ = false;
layout(constant_id = VKATTN_SPEC_DECODE_Q_ALIGNED) const bool Q_ALIGNED = true;
layout(constant_id = VKATTN_SPEC_DECODE_V_FROM_K) const bool V_FROM_K = false;
LEAN_FIXED(VKATTN_SPEC_DECODE_ROPE_ON_READ) const bool ROPE_ON_READ = false;  // never with V_FROM_K
layout(constant_id = VKATTN_SPEC_DECODE_MASK_KEYS) const uint MASK_KEYS = 0u;  // 0: every key
layout(constant_id = VKATTN_SPEC_DECODE_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;

const uint DK4 = QP * LANES, DV4 = VP * LANES;  // vec4s of a K and a V row in shared memory

#include "attn_row_tiles.glsl"
#include "attn_packed_f16.glsl"

shared SH_VEC4 k_sh[KEYS * DK4];
shared SH_VEC4 v_sh[V_FROM_K ? 1u : KEYS * DV4];
shared int kp_sh[KEYS];
shared int ks_sh[KEYS];
shared uint kj_sh[KEYS];  // each staged key's index (MASK_KEYS: from the list)
#ifdef VKATTN_PACKED_F16
// Set while stage t is staged (in wide_sh[t's parity]) when one of its V values passes
// kWideV: a chain of 8 weights (each at most 1) times such values could pass f16's 65504,
// so that stage's chains are one key long. The other parity is cleared meanwhile.
shared uint wide_sh[2];
const float kWideV = 8000.0;
#endif

layout(std430, binding = 7) readonly buffer PartWords { uint part_words[]; };
uint n_listed = 0u, list0 = 0u;  // MASK_KEYS: the tile's token's list and its length
bool listed = false;

// Key |i| of the scan: itself, or the list's i-th (past its end: |bound|, an empty key).
uint scan_key(uint i, uint bound) {
    return !listed ? i : i < n_listed ? part_words[list0 + i] : bound;
}

// Element e of V row |b| of the stage, as a vec4 index into shared memory.
SH_VEC4 v_at(uint b, uint c) {
    return V_FROM_K ? k_sh[b * DK4 + c] : v_sh[b * DV4 + c];
}

#ifdef VKATTN_PACKED_F16
const uint PV_CHUNK = 8u;  // keys of an output per chain
// The chain |h| of weighted V rows added into |acc| in f32, and begun again.
void flush(inout vec4 acc[VP], inout f16vec4 h[VP], inout uint n_h) {
    [[unroll]] for (uint p = 0u; p < VP; ++p) {
        acc[p] += vec4(h[p]);
        h[p] = f16vec4(0.0hf);
    }
    n_h = 0u;
}
#endif

void main() {
    const uint lid = gl_LocalInvocationID.x;
    // Full subgroups of a size LANES divides: a row's lanes are lanes of one subgroup.
    const uint sid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
    const uint lane = sid % LANES, r = sid / LANES;
    uint kv_head, split, row0, n_rows, seq0;
    if (!row_tile_place(kv_head, split, row0, n_rows, seq0)) {
        return;  // past the grid (folded): whole workgroup, uniform
    }
    // Rows past n_rows repeat the last one and write nothing.
    uint tok, head;
    int q_pos, q_seq;
    float slope;
    row_query(row0 + min(r, n_rows - 1u), kv_head, tok, head, q_pos, q_seq, slope);
    SH_VEC4 q[QP];
    const uint q_row = (tok * pc.n_heads + head) * pc.head_dim;
    [[unroll]] for (uint p = 0u; p < QP; ++p) {
        const uint e = (p * LANES + lane) * 4u;
        vec4 x = e < pc.head_dim ? load_q_4(q_row + e, q_row + pc.head_dim) : vec4(0.0);
        if (ROPE_ON_READ && e < pc.rotary_dim) {
            x = rope_vec4(0u, q_row, e, uint(meta[off_q_cpos + tok]), x);
        }
        q[p] = to_sh4(x * q_prescale());
    }
    float m = NEG_MAX, l = 0.0;
    vec4 acc[VP];
    [[unroll]] for (uint p = 0u; p < VP; ++p) {
        acc[p] = vec4(0.0);
    }
#ifdef VKATTN_PACKED_F16
    f16vec4 h[VP];  // the weighted V rows since the last flush into acc: n_h of them
    uint n_h = 0u, stage_parity = 0u;
    [[unroll]] for (uint p = 0u; p < VP; ++p) {
        h[p] = f16vec4(0.0hf);
    }
    if (lid == 0u) {
        wide_sh[0] = 0u;
        wide_sh[1] = 0u;
    }
#endif

    const uint bound = key_bound(seq0);
    if (MASK_KEYS != 0u) {
        list0 = pc.ml_offset + 2u * pc.key_splits * pc.n_tokens * pc.n_heads + (row0 / pc.group) * (MASK_KEYS + 1u);
        n_listed = part_words[list0];
        listed = n_listed <= MASK_KEYS;
        list0 += 1u;
    }
    const uint n_stages = ((listed ? n_listed : bound) + KEYS - 1u) / KEYS;
    for (uint t = split; t < n_stages; t += pc.key_splits) {
        barrier();  // the last stage's rows are read by every row
#ifdef VKATTN_PACKED_F16
        stage_parity ^= 1u;
        if (lid == 0u) {
            wide_sh[stage_parity ^ 1u] = 0u;  // the last stage's flag, read before the barrier
        }
#endif
        // The stage's rows as floats; keys past the bound and empty slots as zeros (a stale
        // slot's V may hold NaN, which no weight of zero may let in).
        for (uint i = lid; i < KEYS * DK4; i += WG) {
            const uint b = i / DK4, e = (i - b * DK4) * 4u, j = scan_key(t * KEYS + b, bound);
            vec4 x = vec4(0.0);
            const int position = j < bound ? key_position(seq0, j) : -1;
            if (position >= 0 && e < pc.head_dim) {
                const uint kr = key_row(seq0, kv_head, j);
                x = load_k_4(kr + e, kr + pc.head_dim);
                if (ROPE_ON_READ && e < pc.rotary_dim) {  // each key by its place in the cache
                    x = rope_vec4(1u, kr, e, key_cache_position(seq0, position), x);
                }
            }
#ifdef VKATTN_PACKED_F16
            if (V_FROM_K && e < pc.v_head_dim && any(greaterThan(abs(x), vec4(kWideV)))) {
                atomicOr(wide_sh[stage_parity], 1u);
            }
#endif
            k_sh[i] = to_sh4(x * k_prescale(V_FROM_K));
        }
        if (!V_FROM_K) {
            for (uint i = lid; i < KEYS * DV4; i += WG) {
                const uint b = i / DV4, e = (i - b * DV4) * 4u, j = scan_key(t * KEYS + b, bound);
                vec4 x = vec4(0.0);
                if (j < bound && e < pc.v_head_dim && key_position(seq0, j) >= 0) {
                    const uint vr = value_row(seq0, kv_head, j);
                    x = load_v_4(vr + e, vr + pc.v_head_dim);
                }
#ifdef VKATTN_PACKED_F16
                if (any(greaterThan(abs(x), vec4(kWideV)))) {
                    atomicOr(wide_sh[stage_parity], 1u);
                }
#endif
                v_sh[i] = to_sh4(x);
            }
        }
        for (uint b = lid; b < KEYS; b += WG) {  // a workgroup of one row has 8 invocations
            const uint j = scan_key(t * KEYS + b, bound);
            const int position = j < bound ? key_position(seq0, j) : -1;
            kj_sh[b] = j;
            kp_sh[b] = position;
            ks_sh[b] = j < bound ? key_sequence(seq0, j, position) : -1;
        }
        barrier();
#ifdef VKATTN_PACKED_F16
        const uint chain = wide_sh[stage_parity] != 0u ? 1u : PV_CHUNK;
        if (chain == 1u && n_h != 0u) {
            flush(acc, h, n_h);  // the last stage's terms, before this one's wide values
        }
#endif

        // Each key's dot product: this lane's share, then the row's lanes by shuffles.
        [[unroll]] for (uint b = 0u; b < KEYS; ++b) {
            const int k_pos = kp_sh[b], k_seq = ks_sh[b];
            // A key the row does not see (causal, a window, an empty slot) costs nothing
            // more: the branch is the same in all of the row's lanes, which are the only
            // ones its shuffles read.
            if (!key_visible(q_pos, q_seq, k_pos, k_seq)) {
                continue;
            }
            float d = 0.0;
#ifdef VKATTN_PACKED_F16
            [[unroll]] for (uint p0 = 0u; p0 < QP; p0 += QK_CHUNK) {
                f16vec2 hd = f16vec2(0.0hf);
                [[unroll]] for (uint p = p0; p < min(p0 + QK_CHUNK, QP); ++p) {
                    const f16vec4 kv = k_sh[b * DK4 + p * LANES + lane];
                    hd = fma(q[p].xy, kv.xy, hd);
                    hd = fma(q[p].zw, kv.zw, hd);
                }
                d += float(hd.x) + float(hd.y);
            }
#else
            [[unroll]] for (uint p = 0u; p < QP; ++p) {
                d += dot(q[p], k_sh[b * DK4 + p * LANES + lane]);
            }
#endif
            [[unroll]] for (uint o = 1u; o < LANES; o <<= 1u) {
                d += subgroupShuffleXor(d, o);
            }
            d /= qk_prescale(V_FROM_K);  // a power of two (1 without VKATTN_PACKED_F16): exact
            const float s = visible_score(d, tok, q_pos, kj_sh[b], k_pos, slope);
            // Online softmax one key at a time: the sums are rescaled only when the row's
            // maximum moves.
            if (s > m) {
#ifdef VKATTN_PACKED_F16
                flush(acc, h, n_h);  // the chain's terms were weighted against the old maximum
#endif
                const float rescale = exp(m - s);
                l *= rescale;
                [[unroll]] for (uint p = 0u; p < VP; ++p) {
                    acc[p] *= rescale;
                }
                m = s;
            }
#ifdef VKATTN_PACKED_F16
            const float16_t w = to_sh(exp(s - m));
            l += float(w);  // the weights O gets
            [[unroll]] for (uint p = 0u; p < VP; ++p) {
                h[p] = fma(f16vec4(w), v_at(b, p * LANES + lane), h[p]);
            }
            if (++n_h >= chain) {
                flush(acc, h, n_h);
            }
#else
            const float w = exp(s - m);
            l += w;
            [[unroll]] for (uint p = 0u; p < VP; ++p) {
                acc[p] = fma(vec4(w), v_at(b, p * LANES + lane), acc[p]);
            }
#endif
        }
    }
#ifdef VKATTN_PACKED_F16
    flush(acc, h, n_h);
#endif

    if (r >= n_rows) {
        return;  // no barrier follows
    }
    const uint out_row = tok * pc.n_heads + head;
    const float scale = row_finish(split, out_row, head, m, l, lane == 0u);
    [[unroll]] for (uint p = 0u; p < VP; ++p) {
        row_store(split, out_row, p * LANES + lane, acc[p], scale);
    }
}
