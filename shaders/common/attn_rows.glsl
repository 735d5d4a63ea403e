// The query rows of an attention tile: rows row0 .. row0 + n_rows - 1 of one kv head, row
// = t * group + i for token t and query head kv_head * group + i. Rows past n_rows repeat
// the last (callers never write their results), so loops over ROWS need no bounds check.
// Division-free past the first row: on CPU devices an integer division by a push constant
// is a scalar divide per invocation, dozens of them per tile.
// Needs pc.group and the spec constant ROWS.
#ifndef VKATTN_ATTN_ROWS_GLSL
#define VKATTN_ATTN_ROWS_GLSL

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
