// The dot products of a tile's query rows with KEYS key rows, one step of the head
// dimension at a time: the inner loops attn_scores and attn_fused share. Needs ROWS, KEYS,
// Q_DIRECT (query values from q itself, else from q_tile), q_tile, fma_dot.glsl and the
// loaders of attn_inputs.glsl.
#ifndef VKATTN_ATTN_DOT_GLSL
#define VKATTN_ATTN_DOT_GLSL

// The accumulators' count, named: an array sized by a spec-constant expression is a type of
// its own each time it is written, so the includer declares them as float[ROWS_KEYS].
const uint ROWS_KEYS = ROWS * KEYS;

// Dims 8c .. 8c + 7 of query row r (starting at q_row in q).
void query8(uint q_row, uint r, uint c, uint d4, out vec4 qa, out vec4 qb) {
    if (Q_DIRECT) {
        load_q_8(q_row + 8u * c, q_row + pc.head_dim, qa, qb);
    } else {
        qa = q_tile[r * d4 + 2u * c];
        qb = q_tile[r * d4 + 2u * c + 1u];
    }
}

// Dims 4c .. 4c + 3 (16-byte rows of f32 keys), every key and row.
void dot_step4(uint k_row[KEYS], uint q_row[ROWS], uint c, uint d4, inout float acc[ROWS_KEYS]) {
    vec4 a[KEYS];
    for (uint i = 0u; i < KEYS; ++i) {
        a[i] = load_k_4(k_row[i] + 4u * c, k_row[i] + pc.head_dim);
    }
    for (uint r = 0u; r < ROWS; ++r) {
        const vec4 qa = Q_DIRECT ? load_q_4(q_row[r] + 4u * c, q_row[r] + pc.head_dim) : q_tile[r * d4 + c];
        for (uint i = 0u; i < KEYS; ++i) {
            acc[r * KEYS + i] = fma_dot(qa, a[i], acc[r * KEYS + i]);
        }
    }
}

// Dim d (rows that do not start on 16 bytes), every key and row.
void dot_step1(uint k_row[KEYS], uint q_row[ROWS], uint d, uint d4, inout float acc[ROWS_KEYS]) {
    for (uint i = 0u; i < KEYS; ++i) {
        const float a = load_k_1(k_row[i] + d);
        for (uint r = 0u; r < ROWS; ++r) {
            const float qd = Q_DIRECT ? load_q_1(q_row[r] + d) : q_tile[r * d4 + d / 4u][d & 3u];
            acc[r * KEYS + i] = fma(qd, a, acc[r * KEYS + i]);
        }
    }
}

#endif
