// Which keys a query sees, and a visible key's score from its dot product: the rules of
// attn_scores, shared by every kernel that computes scores (the three-stage scores and
// the fused kernel) so that they cannot drift apart.
// Needs pc.causal, pc.window, pc.window_symmetric, pc.chunk, pc.scale, pc.softcap,
// pc.has_alibi, pc.has_mask, pc.n_keys, attn_meta.glsl (the query temperature) and the
// includer's `float mask[]` binding (read only when pc.has_mask != 0).
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

// scale (times the query temperature), then soft-capping, the ALiBi bias -slope |q_pos - k_pos| and the additive mask (row |token|, key |key|).
float visible_score(float dot, uint token, int q_pos, uint key, int k_pos, float slope) {
    float s = query_scale(token) * dot;
    if (pc.softcap > 0.0) {
        // tanh(15) is 1 in f32; Vulkan lets tanh of a large argument overflow to NaN.
        s = pc.softcap * tanh(clamp(s / pc.softcap, -15.0, 15.0));
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
