// The merge of a decode whose keys were split across workgroups (attn_decode.comp): split s
// left, per row, unnormalized sums a_s relative to its maximum m_s and its sum of
// exponentials l_s; with M the largest m_s of splits that saw a key (and the row's sink):
//   out = sum_s a_s exp(m_s - M) / (sum_s l_s exp(m_s - M) + exp(sink - M))
// and zeros where the denominator is 0. A split that saw no key (l_s = 0: past the cache's
// occupancy bound, all masked) is left out without reading its sums, which it never wrote.
// One workgroup merges one tile (ROWS rows of a KV head): the (m, l) pairs of every split
// at once into shared memory, the weights once per (row, split), then one invocation per
// output vec4 accumulates over the splits with several loads in flight. The host keeps
// rows x splits within MERGE_MAX_PAIRS.
// merge_tile() is defined where VKATTN_LAST_MERGE or VKATTN_MERGE_PASS is (its shared
// memory would cost the other variants occupancy).
// Needs: pc (AttnParams: key_splits, ml_offset, has_sinks, ...), WG, ROWS,
// `float part[]` and `vec4 part4[]` (views of the partials' binding: the (max, sum) pairs;
// the sums as vec4 rows of ceil(v_head_dim / 4)),
// `float out_[]`, `int meta[]`.
#ifndef VKATTN_ATTN_MERGE_GLSL
#define VKATTN_ATTN_MERGE_GLSL

#include "float_bits.glsl"
#include "softmax_row.glsl"

// Row |r| of the tile starting at |row0| of KV head |kv_head|: its index into q and out.
uint merge_row(uint kv_head, uint row0, uint r) {
    const uint row = row0 + r, t = row / pc.group;
    return t * pc.n_heads + kv_head * pc.group + (row - t * pc.group);
}

#if defined(VKATTN_LAST_MERGE) || defined(VKATTN_MERGE_PASS)
const uint MERGE_MAX_PAIRS = 512u;
shared float merge_m[MERGE_MAX_PAIRS];  // m_s, then the weights
shared float merge_l[MERGE_MAX_PAIRS];
shared float merge_row_max[ROWS];
shared float merge_row_den[ROWS];

// A split that saw a visible key: l > 0, or NaN (a NaN score, inf x 0 among its keys),
// which must reach the output as NaN, as it does with one split, not drop out as a split
// that saw none (told from the bits: float_bits.glsl).
bool saw_keys(float l) {
    return l > 0.0 || is_nan_bits(l);
}

void merge_tile(uint kv_head, uint row0, uint n_rows, uint lid) {
    const uint S = pc.key_splits, n_all = pc.n_tokens * pc.n_heads;
    const uint d4 = (pc.v_head_dim + 3u) / 4u;
    for (uint i = lid; i < n_rows * S; i += WG) {
        const uint r = i / S, s = i - r * S;
        const uint ml = pc.ml_offset + 2u * (s * n_all + merge_row(kv_head, row0, r));
        merge_m[i] = part[ml];
        merge_l[i] = part[ml + 1u];
    }
    barrier();
    if (lid < n_rows) {
        float m_all = NEG_MAX;  // exp(m_s - m_all) stays finite
        for (uint s = 0u; s < S; ++s) {
            if (saw_keys(merge_l[lid * S + s])) {
                m_all = max(m_all, merge_m[lid * S + s]);
            }
        }
        float sink = 0.0;
        if (pc.has_sinks != 0u) {
            const uint head = merge_row(kv_head, row0, lid) % pc.n_heads;
            sink = intBitsToFloat(meta[uint(meta[VKATTN_META_SINKS]) + head]);
            m_all = max(m_all, sink);
        }
        float den = pc.has_sinks != 0u ? exp(sink - m_all) : 0.0;
        for (uint s = 0u; s < S; ++s) {
            const float l = merge_l[lid * S + s];
            den += saw_keys(l) ? l * exp(merge_m[lid * S + s] - m_all) : 0.0;
        }
        merge_row_max[lid] = m_all;
        merge_row_den[lid] = den;
    }
    barrier();
    for (uint i = lid; i < n_rows * S; i += WG) {
        const uint r = i / S;
        merge_m[i] = saw_keys(merge_l[i]) ? exp(merge_m[i] - merge_row_max[r]) : 0.0;
    }
    barrier();
    for (uint i = lid; i < n_rows * d4; i += WG) {
        const uint r = i / d4, c = i - r * d4;
        const uint row = merge_row(kv_head, row0, r);
        vec4 acc = vec4(0.0);
        // Eight splits per turn, as whole vec4s: their loads are independent, so they are in
        // flight together.
        for (uint s0 = 0u; s0 < S; s0 += 8u) {
            vec4 a[8];
            float w[8];
            [[unroll]] for (uint k = 0u; k < 8u; ++k) {
                const uint s = min(s0 + k, S - 1u);
                w[k] = s0 + k < S ? merge_m[r * S + s] : 0.0;
                a[k] = w[k] != 0.0 ? part4[(s * n_all + row) * d4 + c] : vec4(0.0);
            }
            [[unroll]] for (uint k = 0u; k < 8u; ++k) {
                acc += w[k] * a[k];
            }
        }
        const float den = merge_row_den[r];
        const float scale = saw_keys(den) ? 1.0 / den : 0.0;  // no visible key: zeros
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            if (4u * c + k < pc.v_head_dim) {
                out_[row * pc.v_head_dim + 4u * c + k] = acc[k] * scale;
            }
        }
    }
}
#endif

#endif
