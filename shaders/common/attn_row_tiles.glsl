// What the kernels over tiles of query rows whose key splits attn_decode_merge.comp merges
// share (attn_decode_group, attn_tiled): their inputs and the partials binding (7), each
// row's query data, and where a row's results go. The includer has the spec constants
// Q_ALIGNED, K_ALIGNED, V_ALIGNED and MULTI_SEQ, and what attn_inputs.glsl, attn_rows.glsl and
// rope_element.glsl need.
#ifndef VKATTN_ATTN_ROW_TILES_GLSL
#define VKATTN_ATTN_ROW_TILES_GLSL

layout(std430, binding = 7) buffer Part { float part[]; };
layout(std430, binding = 7) buffer Part4 { vec4 part4[]; };
#define ATTN_Q_ALIGNED Q_ALIGNED
#define ATTN_K_ALIGNED K_ALIGNED
#define ATTN_V_ALIGNED V_ALIGNED
#include "attn_inputs.glsl"
#include "attn_online.glsl"
#include "attn_rows.glsl"
#include "attn_visible.glsl"
#include "rope_element.glsl"

// This workgroup's place (decode_place; the meta offsets read first) and the sequence whose
// cache rows it reads (MULTI_SEQ: its first row's; else 0). False past the grid's end.
bool row_tile_place(out uint kv_head, out uint split, out uint row0, out uint n_rows, out uint seq0) {
    read_meta_offsets();
    uint row_tile;
    if (!decode_place(kv_head, split, row_tile, row0, n_rows)) {
        return false;
    }
    seq0 = MULTI_SEQ ? uint(meta[off_q_seq + row0 / pc.group]) : 0u;
    return true;
}

// Row |row| of KV head |kv_head|: its token, query head, position, sequence and ALiBi slope.
void row_query(uint row, uint kv_head, out uint tok, out uint head, out int q_pos, out int q_seq, out float slope) {
    tok = row / pc.group;
    head = kv_head * pc.group + (row - tok * pc.group);
    q_pos = meta[off_q_pos + tok];
    q_seq = meta[off_q_seq + tok];
    slope = alibi_slope(head);
}

// The end of output row |out_row| (query head |head|) with max |m| and sum |l|: with splits,
// its split's (max, sum) pair (where |writes_pair|; the merge adds the sinks) and 1; else
// the factor of its sums, 1 / its denominator with the head's sink in it (0 with no key).
float row_finish(uint split, uint out_row, uint head, float m, float l, bool writes_pair) {
    if (pc.key_splits > 1u) {
        if (writes_pair) {
            part[pc.ml_offset + 2u * (split * pc.n_tokens * pc.n_heads + out_row)] = m;
            part[pc.ml_offset + 2u * (split * pc.n_tokens * pc.n_heads + out_row) + 1u] = l;
        }
        return 1.0;
    }
    return row_factor(m, l, pc.has_sinks != 0u, pc.has_sinks != 0u ? intBitsToFloat(meta[off_sinks + head]) : 0.0);
}

// Vec4 |c| of output row |out_row|'s sums |x|: with splits its split's partial sums, else
// times |scale| into the output, within v_head_dim.
void row_store(uint split, uint out_row, uint c, vec4 x, float scale) {
    const uint d4 = (pc.v_head_dim + 3u) / 4u;
    if (c >= d4) {
        return;
    }
    if (pc.key_splits > 1u) {
        part4[(split * pc.n_tokens * pc.n_heads + out_row) * d4 + c] = x;
        return;
    }
    [[unroll]] for (uint e = 0u; e < 4u; ++e) {
        if (c * 4u + e < pc.v_head_dim) {
            out_[out_row * pc.v_head_dim + c * 4u + e] = scale * x[e];
        }
    }
}

#endif
