// What the matrix kernels (attn_mt.comp on the tile layer, attn_mt2.comp on NV cooperative
// matrices 2) share before their products: a tile's key marks (positions, sequences, the
// row groups that see each key), its K and V rows staged into shared memory as f16
// (decoded from f32, f16, q8_0 or q4_0 and rotated with KvRope::on_read in f32 first; f16
// rows in whole vec4s not rotated copied as their halves), the PREFETCH registers, and the
// query rows rounded to f16. The includer declares k_sh, v_sh and q_sh and the constants
// BC, BR, WG, QP, VP, DK_CHUNKS, DV_CHUNKS, Q_IN_REGS, PREFETCH, STAGE_BATCH, SKIP_LOADS
// and SKIP_MARKS besides attn_row_tiles.glsl's.
#ifndef VKATTN_MT_STAGE_GLSL
#define VKATTN_MT_STAGE_GLSL

// The tile's marks (PREFETCH: two tiles', the halves alternating, |mo| the current's).
const uint MARKS = PREFETCH ? 2u * BC : BC;
shared int kp_sh[MARKS];   // the tile's key positions
shared int ks_sh[MARKS];   // sequences; -1 where no row of the tile sees the key
shared uint kb_sh[MARKS];  // bit g: a row of row group g sees the key
shared int qp_sh[BR];  // the tile's rows' positions and sequences
shared int qs_sh[BR];
ivec4 span;  // attn_visible.glsl's query_span of the tile's rows
uint key_end;  // key_bound: MT_SKIP's kept marks may name keys past it

// Marks tile t's keys into the marks at |mo|: position, sequence where a row sees it, the
// row groups that do.
void mark_keys(uint t, uint lid, uint seq0, uint bound, uint n_rows, uint mo) {
    for (uint b = lid; b < BC; b += WG) {
        int position = -1, seq = -1;  // past the bound: no key
        if (t * BC + b < bound) {
            position = key_position(seq0, t * BC + b);
            seq = key_sequence(seq0, t * BC + b, position);
        }
        uint bits = 0u;
        if (seq >= 0 && span_may_see(span, position, seq)) {
            for (uint r = 0u; r < n_rows; ++r) {
                if (key_visible(qp_sh[r], qs_sh[r], position, seq)) {
                    bits |= 1u << (r >> 4);
                    r |= 15u;  // the rest of this row group's rows add nothing
                }
            }
        }
        kp_sh[mo + b] = position;
        ks_sh[mo + b] = bits != 0u ? seq : -1;
        kb_sh[mo + b] = bits;
    }
}

// Element pairs of a staged row: |x| (4 elements) rounded to f16 into two words at |w|.
#define STAGE4(arr, w, x)                          \
    {                                              \
        const vec4 x4_ = (x);                      \
        arr[w] = pack_half_rne(x4_.xy);            \
        arr[(w) + 1u] = pack_half_rne(x4_.zw);     \
    }
// Two words of halves as they are.
#define STAGE2(arr, w, words)                      \
    {                                              \
        const uvec2 w2_ = (words);                 \
        arr[w] = w2_.x;                            \
        arr[(w) + 1u] = w2_.y;                     \
    }

// f16 rows in whole vec4s (and K not rotated on read) are staged as they are stored, two
// halves a word: no trip through f32 and back.
const bool K_RAW = K_TYPE == VKATTN_KV_F16 && K_ALIGNED && !ROPE_ON_READ;
const bool V_RAW = V_TYPE == VKATTN_KV_F16 && V_ALIGNED;

// Whether key b of tile t is read (marks at |mo|): some row sees it; never under
// SKIP_LOADS, nor past the bound under SKIP_MARKS (a probe's kept marks may name it).
bool staged(uint t, uint b, uint mo) {
    return !SKIP_LOADS && ks_sh[mo + b] >= 0 && (!SKIP_MARKS || t * BC + b < key_end);
}

// Element i of tile t's K rows (vec4 c of key b), and of its V rows: decoded (and K rotated
// on read) in f32; zeros for keys not staged and for dims past the row.
vec4 fetch_k(uint t, uint i, uint mo, uint seq0, uint kv_head) {
    const uint b = i / (DK_CHUNKS * 4u), c = i - b * (DK_CHUNKS * 4u);
    vec4 x = vec4(0.0);
    if (staged(t, b, mo) && c * 4u < pc.head_dim) {
        const uint kr = key_row(seq0, kv_head, t * BC + b);
        x = load_k_4(kr + c * 4u, kr + pc.head_dim);
        if (ROPE_ON_READ && c * 4u < pc.rotary_dim) {
            x = rope_vec4(1u, kr, c * 4u, key_cache_position(seq0, kp_sh[mo + b]), x);
        }
    }
    return x;
}
vec4 fetch_v(uint t, uint i, uint mo, uint seq0, uint kv_head) {
    const uint b = i / (DV_CHUNKS * 4u), c = i - b * (DV_CHUNKS * 4u);
    vec4 x = vec4(0.0);
    if (staged(t, b, mo) && c * 4u < pc.v_head_dim) {
        const uint vr = value_row(seq0, kv_head, t * BC + b);
        x = load_v_4(vr + c * 4u, vr + pc.v_head_dim);
    }
    return x;
}
// The same as K_RAW / V_RAW words (rows start at multiples of 4 elements when aligned).
uvec2 fetch_k_raw(uint t, uint i, uint mo, uint seq0, uint kv_head) {
    const uint b = i / (DK_CHUNKS * 4u), c = i - b * (DK_CHUNKS * 4u);
    uvec2 w = uvec2(0u);
    if (staged(t, b, mo) && c * 4u < pc.head_dim) {
        w = load_k_word2((key_row(seq0, kv_head, t * BC + b) + c * 4u) >> 2);
    }
    return w;
}
uvec2 fetch_v_raw(uint t, uint i, uint mo, uint seq0, uint kv_head) {
    const uint b = i / (DV_CHUNKS * 4u), c = i - b * (DV_CHUNKS * 4u);
    uvec2 w = uvec2(0u);
    if (staged(t, b, mo) && c * 4u < pc.v_head_dim) {
        w = load_v_word2((value_row(seq0, kv_head, t * BC + b) + c * 4u) >> 2);
    }
    return w;
}
// Where element i of K (of V) goes: rows at odd pitches, as f16 pairs.
uint k_word(uint i) { return (i / (DK_CHUNKS * 4u)) * QP + 2u * (i % (DK_CHUNKS * 4u)); }
uint v_word(uint i) { return (i / (DV_CHUNKS * 4u)) * VP + 2u * (i % (DV_CHUNKS * 4u)); }

// Tile t's K rows (and V rows) into k_sh (v_sh) as f16.
void stage_tile(uint t, uint lid, uint mo, uint seq0, uint kv_head) {
    for (uint i = lid; i < BC * DK_CHUNKS * 4u; i += WG) {
        if (K_RAW) {
            STAGE2(k_sh, k_word(i), fetch_k_raw(t, i, mo, seq0, kv_head))
        } else {
            STAGE4(k_sh, k_word(i), fetch_k(t, i, mo, seq0, kv_head))
        }
    }
    for (uint i = lid; i < (V_FROM_K ? 0u : BC * DV_CHUNKS * 4u); i += WG) {
        if (V_RAW) {
            STAGE2(v_sh, v_word(i), fetch_v_raw(t, i, mo, seq0, kv_head))
        } else {
            STAGE4(v_sh, v_word(i), fetch_v(t, i, mo, seq0, kv_head))
        }
    }
}

// PREFETCH's registers: an invocation's share of a tile's K and V elements, as words where
// the rows are staged raw (half the registers), else decoded.
const uint NKR = (BC * DK_CHUNKS * 4u + WG - 1u) / WG, NVR = V_FROM_K ? 1u : (BC * DV_CHUNKS * 4u + WG - 1u) / WG;
const bool PRE = PREFETCH || STAGE_BATCH;
vec4 k_pre[PRE && !K_RAW ? NKR : 1u];
vec4 v_pre[PRE && !V_RAW ? NVR : 1u];
uvec2 k_pre_raw[PRE && K_RAW ? NKR : 1u];
uvec2 v_pre_raw[PRE && V_RAW ? NVR : 1u];

// Tile t's loads into the registers (their results are waited for only where written).
void prefetch_tile(uint t, uint lid, uint mo, uint seq0, uint kv_head) {
    [[unroll]] for (uint n = 0u; n < NKR; ++n) {
        const uint i = lid + n * WG;
        if (K_RAW) {
            k_pre_raw[n] = i < BC * DK_CHUNKS * 4u ? fetch_k_raw(t, i, mo, seq0, kv_head) : uvec2(0u);
        } else {
            k_pre[n] = i < BC * DK_CHUNKS * 4u ? fetch_k(t, i, mo, seq0, kv_head) : vec4(0.0);
        }
    }
    [[unroll]] for (uint n = 0u; n < (V_FROM_K ? 0u : NVR); ++n) {
        const uint i = lid + n * WG;
        if (V_RAW) {
            v_pre_raw[n] = i < BC * DV_CHUNKS * 4u ? fetch_v_raw(t, i, mo, seq0, kv_head) : uvec2(0u);
        } else {
            v_pre[n] = i < BC * DV_CHUNKS * 4u ? fetch_v(t, i, mo, seq0, kv_head) : vec4(0.0);
        }
    }
}

// The prefetched tile into k_sh (v_sh).
void store_prefetched(uint lid) {
    [[unroll]] for (uint n = 0u; n < NKR; ++n) {
        const uint i = lid + n * WG;
        if (i < BC * DK_CHUNKS * 4u) {
            if (K_RAW) {
                STAGE2(k_sh, k_word(i), k_pre_raw[n])
            } else {
                STAGE4(k_sh, k_word(i), k_pre[n])
            }
        }
    }
    [[unroll]] for (uint n = 0u; n < (V_FROM_K ? 0u : NVR); ++n) {
        const uint i = lid + n * WG;
        if (i < BC * DV_CHUNKS * 4u) {
            if (V_RAW) {
                STAGE2(v_sh, v_word(i), v_pre_raw[n])
            } else {
                STAGE4(v_sh, v_word(i), v_pre[n])
            }
        }
    }
}

// Query rows r0 .. r0 + n - 1 of the tile (rows past n_rows repeat the last), rotated with
// KvRope::on_read and rounded: into q_sh, or into k_sh's first rows (Q_IN_REGS: from there
// to the subgroups' registers).
void stage_queries(uint lid, uint kv_head, uint row0, uint n_rows, uint r0, uint n) {
    for (uint i = lid; i < n * DK_CHUNKS * 4u; i += WG) {
        const uint r = i / (DK_CHUNKS * 4u), c = i - r * (DK_CHUNKS * 4u);
        const uint row = row0 + min(r0 + r, n_rows - 1u), tok = row / pc.group;
        const uint q_row = (tok * pc.n_heads + kv_head * pc.group + (row - tok * pc.group)) * pc.head_dim;
        vec4 x = vec4(0.0);
        if (c * 4u < pc.head_dim) {
            x = load_q_4(q_row + c * 4u, q_row + pc.head_dim);
            if (ROPE_ON_READ && c * 4u < pc.rotary_dim) {
                x = rope_vec4(0u, q_row, c * 4u, uint(meta[off_q_cpos + tok]), x);
            }
        }
        if (Q_IN_REGS) {
            STAGE4(k_sh, r * QP + 2u * c, x)
        } else {
            STAGE4(q_sh, r * QP + 2u * c, x)
        }
    }
}

// The first tile's marks and (PREFETCH) loads, before the tile loop.
void tiles_begin(uint split, uint lid, uint seq0, uint kv_head, uint bound, uint n_tiles, uint n_rows) {
    if (PREFETCH && split < n_tiles) {
        mark_keys(split, lid, seq0, bound, n_rows, 0u);
        if (SKIP_MARKS) {
            mark_keys(split, lid, seq0, bound, n_rows, BC);  // both halves, kept
        }
        barrier();
        prefetch_tile(split, lid, 0u, seq0, kv_head);
    }
}

// Tile t (the split's it-th) marked and its rows staged, barriers included; |mo|: where its
// marks are. Returns whether row group |rg| sees a key of it (uniform in the row group).
bool tile_stage(uint t, uint it, uint lid, uint rg, uint seq0, uint kv_head, uint bound, uint n_tiles, uint n_rows,
                out uint mo) {
    mo = PREFETCH ? (it & 1u) * BC : 0u;
    bool any = false, mine = false;
    if (PREFETCH) {
        // This tile's rows from the registers; the next tile's marks, then its loads, in
        // flight while this one computes.
        store_prefetched(lid);
        const uint next = t + pc.key_splits, mn = BC - mo;
        if (next < n_tiles && !SKIP_MARKS) {
            mark_keys(next, lid, seq0, bound, n_rows, mn);
        }
        barrier();
        if (next < n_tiles) {
            prefetch_tile(next, lid, mn, seq0, kv_head);
        }
        [[unroll]] for (uint b = 0u; b < BC; ++b) {
            mine = mine || (kb_sh[mo + b] & (1u << rg)) != 0u;
        }
    } else {
        if (!SKIP_MARKS || it == 0u) {
            mark_keys(t, lid, seq0, bound, n_rows, 0u);
        }
        barrier();
        [[unroll]] for (uint b = 0u; b < BC; ++b) {
            any = any || ks_sh[b] >= 0;
            mine = mine || (kb_sh[b] & (1u << rg)) != 0u;
        }
        if (any && STAGE_BATCH) {  // uniform: every invocation read the same marks
            prefetch_tile(t, lid, 0u, seq0, kv_head);
            store_prefetched(lid);
        } else if (any) {
            stage_tile(t, lid, 0u, seq0, kv_head);
        }
        barrier();
    }
    return mine;
}

#endif
