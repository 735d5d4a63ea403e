// The query rows of an attention tile: rows row0 .. row0 + n_rows - 1 of one kv head, row
// = t * group + i for token t and query head kv_head * group + i. Rows past n_rows repeat
// the last (callers never write their results), so loops over ROWS need no bounds check.
// Division-free past the first row: on CPU devices an integer division by a push constant
// is a scalar divide per invocation, dozens of them per tile.
// Needs pc.group and the spec constant ROWS.
#ifndef VKATTN_ATTN_ROWS_GLSL
#define VKATTN_ATTN_ROWS_GLSL

// Where this workgroup sits in a folded grid of n_kv_heads x row_tiles x |inner_count|
// workgroups (|inner| fastest: its key split or key tile): its KV head and its tile's first
// row and row count. False past the grid's end, where the whole workgroup returns.
// Needs pc.row_tiles, pc.rows_per_wg, pc.n_tokens and pc.n_heads too.
bool tile_place(uint inner_count, out uint inner, out uint kv_head, out uint row0, out uint n_rows) {
    uint wg = wg_linear_id();
    inner = wg % inner_count;
    wg /= inner_count;
    const uint row_tile = wg % pc.row_tiles;
    kv_head = wg / pc.row_tiles;
    row0 = row_tile * pc.rows_per_wg;
    n_rows = kv_head * pc.group < pc.n_heads ? min(pc.rows_per_wg, pc.n_tokens * pc.group - row0) : 0u;
    return n_rows != 0u;
}

#ifdef VKATTN_WANT_ATTN
// The same for the decode kernels' grid of n_kv_heads x key_splits x row_tiles workgroups,
// KV head fastest (the splits of all heads stream the keys together): its KV head, split,
// row tile and the tile's first row and row count. False past the grid's end.
bool decode_place(out uint kv_head, out uint split, out uint row_tile, out uint row0, out uint n_rows) {
    const uint n_kv = pc.n_heads / pc.group;
    uint wg = wg_linear_id();
    kv_head = wg % n_kv;
    wg /= n_kv;
    split = wg % pc.key_splits;
    // The last rows first: in causal prefill they see the most keys, and started last they
    // would make a long last wave. Past the grid, row_tile stays past the tiles.
    const uint t = wg / pc.key_splits;
    row_tile = t < pc.row_tiles ? pc.row_tiles - 1u - t : t;
    row0 = row_tile * pc.rows_per_wg;
    n_rows = row_tile < pc.row_tiles ? min(pc.rows_per_wg, pc.n_tokens * pc.group - row0) : 0u;
    return n_rows != 0u;
}
#endif
void tile_rows(uint row0, uint n_rows, uint kv_head, out uint token[ROWS], out uint head[ROWS]) {
    uint t = row0 / pc.group;
    uint i = row0 - t * pc.group;
    for (uint r = 0u; r < ROWS; ++r) {
        token[r] = t;
        head[r] = kv_head * pc.group + i;
        if (r + 1u < n_rows) {
            i += 1u;
            if (i == pc.group) {
                i = 0u;
                t += 1u;
            }
        }
    }
}

#endif
