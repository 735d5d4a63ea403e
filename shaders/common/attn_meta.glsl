// The attention metadata binding (params.h, VKATTN_META_*): word offsets first, then the
// arrays. The includer declares `int meta[]` and calls read_meta_offsets() at the start
// of main(), so that the loops read each array without first reading its offset.
#ifndef VKATTN_ATTN_META_GLSL
#define VKATTN_ATTN_META_GLSL

uint off_q_pos, off_q_seq, off_k_pos, off_k_seq, off_slopes, off_q_cpos, off_k_cpos, off_sinks, off_turns;

void read_meta_offsets() {
    off_q_pos = uint(meta[VKATTN_META_Q_POS]);
    off_q_seq = uint(meta[VKATTN_META_Q_SEQ]);
    off_k_pos = uint(meta[VKATTN_META_K_POS]);
    off_k_seq = uint(meta[VKATTN_META_K_SEQ]);
    off_slopes = uint(meta[VKATTN_META_SLOPES]);
    off_q_cpos = uint(meta[VKATTN_META_Q_CPOS]);
    off_k_cpos = uint(meta[VKATTN_META_K_CPOS]);
    off_sinks = uint(meta[VKATTN_META_SINKS]);
    off_turns = uint(meta[VKATTN_META_TURNS]);
}

// ALiBi slope of query head |head| (0 without ALiBi: the slopes are not there to read).
float alibi_slope(uint head) {
    return pc.has_alibi != 0u ? intBitsToFloat(meta[off_slopes + head]) : 0.0;
}

// RoPE frequency |pair| as rope_phase.glsl's fixed-point turns.
uvec2 rope_turns(uint pair) {
    const uint o = off_turns + 2u * pair;
    return uvec2(uint(meta[o]), uint(meta[o + 1u]));
}

#endif
