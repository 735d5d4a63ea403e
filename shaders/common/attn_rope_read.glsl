// Attention over a cache whose keys are stored unrotated (KvRope::on_read): the query tile
// is rotated in shared memory by each query's in-cache position, and each key pair by the
// key's as it is read. Shared by attn_scores and attn_fused.
// Needs, from the includer: shared vec4 q_tile[] (rows of d4 vec4s), attn_meta.glsl
// (read_meta_offsets() called), load_k_1(), pc.rotary_dim, pc.head_dim, the spec
// constants ROWS, ROPE_INTERLEAVED (and KEYS for ROPE_READ_DOTS).
#ifndef VKATTN_ATTN_ROPE_READ_GLSL
#define VKATTN_ATTN_ROPE_READ_GLSL

// The element indices of rotary pair |pair|: (2 pair, 2 pair + 1) interleaved, else
// (pair, pair + rotary_dim / 2).
uvec2 rope_pair(uint pair) {
    const uint a = ROPE_INTERLEAVED ? 2u * pair : pair;
    return uvec2(a, ROPE_INTERLEAVED ? a + 1u : a + pc.rotary_dim / 2u);
}

float q_tile_at(uint r, uint d4, uint e) { return q_tile[r * d4 + e / 4u][e & 3u]; }

// Rotates the tile's first |n_rows| rows in place, tok[r] giving each row's token; every
// invocation calls it, and a barrier must follow before the tile is read.
void rope_rotate_query_tile(uint n_rows, uint d4, uint tok[ROWS], uint lid, uint n_lanes) {
    const uint half_rot = pc.rotary_dim / 2u;
    for (uint i = lid; i < n_rows * half_rot; i += n_lanes) {
        const uint r = i / half_rot, pair = i - r * half_rot;
        const vec2 cs = rope_cos_sin(uint(meta[off_q_cpos + tok[r]]), rope_turns(pair));
        const uvec2 ab = rope_pair(pair);
        const float xa = q_tile_at(r, d4, ab.x), xb = q_tile_at(r, d4, ab.y);
        q_tile[r * d4 + ab.x / 4u][ab.x & 3u] = xa * cs.x - xb * cs.y;
        q_tile[r * d4 + ab.y / 4u][ab.y & 3u] = xa * cs.y + xb * cs.x;
    }
}

// dot[r] += <rotated query row r, rotated key> for the key whose row starts at k_row and
// whose in-cache position is cpos; dims past rotary_dim are read plainly. One key per
// call: with an array parameter sized ROWS * KEYS (a specialization-constant expression)
// the results came out wrong on llvmpipe; ROPE_READ_DOTS below loops over the keys.
void rope_read_dot(uint d4, uint k_row, uint cpos, inout float dot[ROWS]) {
    for (uint pair = 0u; pair < pc.rotary_dim / 2u; ++pair) {
        const uvec2 ab = rope_pair(pair);
        const vec2 cs = rope_cos_sin(cpos, rope_turns(pair));
        const float ka = load_k_1(k_row + ab.x), kb = load_k_1(k_row + ab.y);
        const float ra = ka * cs.x - kb * cs.y, rb = ka * cs.y + kb * cs.x;
        for (uint r = 0u; r < ROWS; ++r) {
            dot[r] += q_tile_at(r, d4, ab.x) * ra + q_tile_at(r, d4, ab.y) * rb;
        }
    }
    for (uint d = pc.rotary_dim; d < pc.head_dim; ++d) {
        const float kd = load_k_1(k_row + d);
        for (uint r = 0u; r < ROWS; ++r) {
            dot[r] += q_tile_at(r, d4, d) * kd;
        }
    }
}

// acc[r * KEYS + i] += <rotated query row r, rotated key i> for the KEYS keys at k_row[]
// with in-cache positions cpos[], when |work|.
#define ROPE_READ_DOTS(acc, d4, k_row, cpos, work)                              \
    for (uint rr_i = 0u; rr_i < ((work) ? KEYS : 0u); ++rr_i) {                 \
        float rr_dot[ROWS];                                                     \
        for (uint rr_r = 0u; rr_r < ROWS; ++rr_r) {                             \
            rr_dot[rr_r] = acc[rr_r * KEYS + rr_i];                             \
        }                                                                       \
        rope_read_dot(d4, k_row[rr_i], cpos[rr_i], rr_dot);                     \
        for (uint rr_r = 0u; rr_r < ROWS; ++rr_r) {                             \
            acc[rr_r * KEYS + rr_i] = rr_dot[rr_r];                             \
        }                                                                       \
    }

#endif
