// Which keys a query sees, and a visible key's score from its dot product: the rules of
// attn_scores, shared by every kernel that computes scores (the three-stage scores and
// the fused kernel) so that they cannot drift apart.
// Needs pc.causal, pc.window, pc.window_symmetric, pc.chunk, pc.scale, pc.softcap,
// pc.has_alibi, pc.has_mask, pc.n_keys, attn_meta.glsl (the query temperature, positions
// and sequences) and the includer's `float mask[]` binding (read only when pc.has_mask != 0).
#ifndef VKATTN_ATTN_VISIBLE_GLSL
#define VKATTN_ATTN_VISIBLE_GLSL

// Same sequence; not in the future when causal; within the window when there is one
// (behind, or both ways); in the query's chunk when there are chunks. An empty slot (k_seq
// -1) is never visible, whatever its position.
bool key_visible(int q_pos, int q_seq, int k_pos, int k_seq) {
    const int distance = q_pos - k_pos;  // in (-2^31, 2^31): positions are in [0, 2^31)
    const bool in_window = pc.window == 0u ||
                           (pc.window_symmetric != 0u ? uint(abs(distance)) <= pc.window / 2u : distance < int(pc.window));
    const bool in_chunk = pc.chunk == 0u || uint(q_pos) / pc.chunk == uint(k_pos) / pc.chunk;
    return q_seq == k_seq && (pc.causal == 0u || distance >= 0) && in_window && in_chunk;
}

// The span of a block of queries: the lowest and highest position and sequence among
// tokens [first_tok, last_tok] (x, y: positions; z, w: sequences).
ivec4 query_span(uint first_tok, uint last_tok) {
    ivec4 span = ivec4(0x7fffffff, -1, 0x7fffffff, -1);
    for (uint tok = first_tok; tok <= last_tok; ++tok) {
        const int p = meta[off_q_pos + tok], s = meta[off_q_seq + tok];
        span = ivec4(min(span.x, p), max(span.y, p), min(span.z, s), max(span.w, s));
    }
    return span;
}

// Whether some query of |span| might see a key: key_visible's rules against the span, so
// false only where none of them can (a key behind every query's window, past the causal
// diagonal of all, in a chunk or sequence none is in). A new rule belongs in both.
bool span_may_see(ivec4 span, int k_pos, int k_seq) {
    if (k_seq < span.z || k_seq > span.w || (pc.causal != 0u && k_pos > span.y)) {
        return false;
    }
    if (pc.chunk != 0u) {
        const uint chunk = uint(k_pos) / pc.chunk;
        if (chunk < uint(span.x) / pc.chunk || chunk > uint(span.y) / pc.chunk) {
            return false;
        }
    }
    if (pc.window == 0u) {
        return true;
    }
    if (pc.window_symmetric != 0u) {
        const int reach = int(pc.window / 2u);
        return span.x - k_pos <= reach && k_pos - span.y <= reach;
    }
    return span.x - k_pos < int(pc.window);
}

// tanh to a few parts in 10^6 of its value at every argument. The built-in need not be:
// Vulkan defines its precision by sinh / cosh, an absolute error, so a small argument (a
// cap far above the scores) loses its relative precision (about 2^-25 / x; lavapipe gives
// +3e-8 for every |x| < 1e-8, negative ones too), and the cap multiplies the error back.
float precise_tanh(float x) {
    const float a = abs(x);
    const float x2 = x * x;
    // |x| < 1/8: the odd series; the first term left out is below 2e-9 of the value.
    const float series = x + x * x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0)));
    // Beyond: 1 - 2 / (e^2|x| + 1), which loses at most 3 bits to the subtraction there.
    const float e = exp(2.0 * min(a, 15.0));  // tanh(15) is 1 in f32; e^30 stays finite
    const float large = sign(x) * (1.0 - 2.0 / (e + 1.0));
    return a < 0.125 ? series : large;
}

// scale (times the query temperature), then soft-capping, the ALiBi bias -slope |q_pos - k_pos| and the additive mask (row |token|, key |key|).
float visible_score(float dot, uint token, int q_pos, uint key, int k_pos, float slope) {
    float s = query_scale(token) * dot;
    if (pc.softcap > 0.0) {
        s = pc.softcap * precise_tanh(s / pc.softcap);
    }
    if (pc.has_alibi != 0u) {
        // Symmetric, as llama.cpp: future keys (without causal masking) are penalised too.
        s -= slope * float(abs(q_pos - k_pos));
    }
    if (pc.has_mask != 0u) {
        s += mask[token * pc.n_keys + key];
    }
    return s;
}

// A tile's rows (attn_rows.glsl) with where each starts in q and its token's position and
// sequence (attn_meta.glsl).
void tile_queries(uint row0, uint n_rows, uint kv_head, out uint tok[ROWS], out uint head[ROWS], out uint q_row[ROWS],
                  out int q_pos[ROWS], out int q_seq[ROWS]) {
    tile_rows(row0, n_rows, kv_head, tok, head);
    for (uint r = 0u; r < ROWS; ++r) {
        q_row[r] = (tok[r] * pc.n_heads + head[r]) * pc.head_dim;
        q_pos[r] = meta[off_q_pos + tok[r]];
        q_seq[r] = meta[off_q_seq + tok[r]];
    }
}

#endif
