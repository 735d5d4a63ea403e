// KvRope::on_read, one element at a time: element |d| (< rotary_dim) of a query or key row
// rotated by its in-cache position |cpos|, given the element it pairs with. Shared by the
// decode and tiled kernels, whose lanes hold pieces of a row and read partners as they need them.
// Needs pc.rotary_dim, the spec constant ROPE_INTERLEAVED, rope_phase.glsl and
// attn_meta.glsl (rope_turns).
#ifndef VKATTN_ROPE_ELEMENT_GLSL
#define VKATTN_ROPE_ELEMENT_GLSL
// The element that element |d| pairs with: d ^ 1 interleaved, else half a rotary_dim away.
uint rope_partner(uint d) {
    const uint half_rot = pc.rotary_dim / 2u;
    return ROPE_INTERLEAVED ? d ^ 1u : (d < half_rot ? d + half_rot : d - half_rot);
}
float rope_element(uint d, float x, float partner, uint cpos) {
    const bool first = ROPE_INTERLEAVED ? (d & 1u) == 0u : d < pc.rotary_dim / 2u;
    const vec2 cs = rope_cos_sin(cpos, rope_turns(ROPE_INTERLEAVED ? d / 2u : min(d, rope_partner(d))));
    return first ? x * cs.x - partner * cs.y : partner * cs.y + x * cs.x;
}

// The elements |e| .. |e| + 3 of the row at |row| (|x|, read already) rotated by |cpos|;
// each partner is read again from memory (|which|: 0 q, 1 k; attn_inputs.glsl's loaders),
// as it lies in another lane or another piece.
vec4 rope_vec4(uint which, uint row, uint e, uint cpos, vec4 x) {
    [[unroll]] for (uint c = 0u; c < 4u; ++c) {
        const uint d = e + c;
        if (d < pc.rotary_dim) {
            const uint pd = rope_partner(d);
            x[c] = rope_element(d, x[c], which == 0u ? load_q_1(row + pd) : load_k_1(row + pd), cpos);
        }
    }
    return x;
}
#endif
