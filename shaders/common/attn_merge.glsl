// The merge of a decode whose keys were split across workgroups (attn_decode.comp): split s
// left, per row, unnormalized sums a_s relative to its maximum m_s and its sum of
// exponentials l_s; with M the largest m_s of splits that saw a key (and the row's sink):
//   out = sum_s a_s exp(m_s - M) / (sum_s l_s exp(m_s - M) + exp(sink - M))
// and zeros where the denominator is 0. A split that saw no key (l_s = 0: past the cache's
// occupancy bound, all masked) is left out without reading its sums, which it never wrote.
// One workgroup merges one tile (ROWS rows of a KV head): the (m, l) pairs of every split
// at once into shared memory, each row's maximum and denominator by a tree over the
// invocations that share the row, the weights once per (row, split), then one invocation
// per output vec4 accumulates over the splits with MERGE_BATCH loads in flight, the first
// batch issued before the pairs are read. The host keeps rows x splits within
// MERGE_MAX_PAIRS.
// merge_tile() is defined where VKATTN_LAST_MERGE or VKATTN_MERGE_PASS is (its shared
// memory would cost the other variants occupancy).
// Needs: pc (AttnFusedParams: key_splits, ml_offset, has_sinks, ...), WG, ROWS,
// `float part[]` and `vec4 part4[]` (views of the partials' binding: the (max, sum) pairs;
// the sums as vec4 rows of ceil(head_dim / 4)),
// `float out_[]`, `int meta[]`.
#ifndef VKATTN_ATTN_MERGE_GLSL
#define VKATTN_ATTN_MERGE_GLSL

// Row |r| of the tile starting at |row0| of KV head |kv_head|: its index into q and out.
uint merge_row(uint kv_head, uint row0, uint r) {
    const uint row = row0 + r, t = row / pc.group;
    return t * pc.n_heads + kv_head * pc.group + (row - t * pc.group);
}

#if defined(VKATTN_LAST_MERGE) || defined(VKATTN_MERGE_PASS)
const uint MERGE_MAX_PAIRS = 512u;
const uint MERGE_BATCH = 16u;  // splits whose sums an invocation has in flight at once
shared float merge_m[MERGE_MAX_PAIRS];  // m_s, then the weights
shared float merge_l[MERGE_MAX_PAIRS];
shared float merge_red[WG];  // each row's partial maxima, then partial denominators
shared float merge_row_max[ROWS];
shared float merge_row_den[ROWS];

// Row |r|'s (max, sum of l exp(m - max)) over its splits by the invocations that share
// the row (|per_row| of them, |j| this one's place), a tree through shared memory: a
// chain of log2(per_row) barriers, not of S dependent steps in one invocation.
float merge_tree(uint lid, uint r, uint j, uint per_row, uint n_rows, float v, bool is_max) {
    barrier();  // the previous tree's result is read by every invocation of its row first
    merge_red[lid] = v;
    barrier();
    uint h = 1u;  // the largest power of two below per_row (1 when per_row is 1)
    while (2u * h < per_row) {
        h *= 2u;
    }
    for (; h > 0u; h /= 2u) {
        if (r < n_rows && j < h && j + h < per_row) {
            const float o = merge_red[lid + h];
            merge_red[lid] = is_max ? max(merge_red[lid], o) : merge_red[lid] + o;
        }
        barrier();
    }
    return r < n_rows ? merge_red[lid - j] : 0.0;
}

void merge_tile(uint kv_head, uint row0, uint n_rows, uint lid) {
    const uint S = pc.key_splits, n_all = pc.n_tokens * pc.n_heads;
    const uint d4 = (pc.head_dim + 3u) / 4u;
    // This invocation's first output vec4 and its first MERGE_BATCH splits' sums, loaded
    // before the weights: they do not depend on them, so their round trip overlaps the
    // pairs'. A split that saw no key never wrote its sums; what is read there is
    // dropped by a select below, never multiplied (it may be anything).
    const bool first = lid < n_rows * d4;
    const uint r0 = first ? lid / d4 : 0u, c0 = lid - r0 * d4;
    const uint row_first = merge_row(kv_head, row0, r0);
    vec4 early[MERGE_BATCH];
    [[unroll]] for (uint k = 0u; k < MERGE_BATCH; ++k) {
        early[k] = first && k < S ? part4[(k * n_all + row_first) * d4 + c0] : vec4(0.0);
    }
    for (uint i = lid; i < n_rows * S; i += WG) {
        const uint r = i / S, s = i - r * S;
        const uint ml = pc.ml_offset + 2u * (s * n_all + merge_row(kv_head, row0, r));
        merge_m[i] = part[ml];
        merge_l[i] = part[ml + 1u];
    }
    barrier();
    // Each row's largest m_s of the splits that saw a key, with its sink, then the
    // denominator, by WG / ROWS invocations per row.
    const uint per_row = max(WG / ROWS, 1u);
    const uint r = lid / per_row, j = lid - r * per_row;
    float m_part = -3.4028234663852886e38;  // -FLT_MAX: exp(m_s - m_all) stays finite
    for (uint s = j; r < n_rows && s < S; s += per_row) {
        if (merge_l[r * S + s] > 0.0) {
            m_part = max(m_part, merge_m[r * S + s]);
        }
    }
    float m_all = merge_tree(lid, r, j, per_row, n_rows, m_part, true);
    float sink = 0.0;
    if (pc.has_sinks != 0u && r < n_rows) {
        const uint head = merge_row(kv_head, row0, r) % pc.n_heads;
        sink = intBitsToFloat(meta[uint(meta[VKATTN_META_SINKS]) + head]);
        m_all = max(m_all, sink);
    }
    float d_part = pc.has_sinks != 0u && j == 0u ? exp(sink - m_all) : 0.0;
    for (uint s = j; r < n_rows && s < S; s += per_row) {
        const float l = merge_l[r * S + s];
        d_part += l > 0.0 ? l * exp(merge_m[r * S + s] - m_all) : 0.0;
    }
    const float den_all = merge_tree(lid, r, j, per_row, n_rows, d_part, false);
    if (r < n_rows && j == 0u) {
        merge_row_max[r] = m_all;
        merge_row_den[r] = den_all;
    }
    barrier();
    for (uint i = lid; i < n_rows * S; i += WG) {
        const uint rr = i / S;
        merge_m[i] = merge_l[i] > 0.0 ? exp(merge_m[i] - merge_row_max[rr]) : 0.0;
    }
    barrier();
    for (uint i = lid; i < n_rows * d4; i += WG) {
        const uint rr = i / d4, c = i - rr * d4;
        const uint row = merge_row(kv_head, row0, rr);
        vec4 acc = vec4(0.0);
        // MERGE_BATCH splits per turn, as whole vec4s: their loads are independent, so
        // they are in flight together (the first turn of the first output was loaded above).
        for (uint s0 = 0u; s0 < S; s0 += MERGE_BATCH) {
            vec4 a[MERGE_BATCH];
            [[unroll]] for (uint k = 0u; k < MERGE_BATCH; ++k) {
                const uint s = min(s0 + k, S - 1u);
                a[k] = i == lid && s0 == 0u ? early[k] : part4[(s * n_all + row) * d4 + c];
            }
            [[unroll]] for (uint k = 0u; k < MERGE_BATCH; ++k) {
                const float w = s0 + k < S ? merge_m[rr * S + min(s0 + k, S - 1u)] : 0.0;
                acc += w != 0.0 ? w * a[k] : vec4(0.0);
            }
        }
        const float den = merge_row_den[rr];
        const float scale = den > 0.0 ? 1.0 / den : 0.0;  // no visible key: zeros
        [[unroll]] for (uint k = 0u; k < 4u; ++k) {
            if (4u * c + k < pc.head_dim) {
                out_[row * pc.head_dim + 4u * c + k] = acc[k] * scale;
            }
        }
    }
}
#endif

#endif
