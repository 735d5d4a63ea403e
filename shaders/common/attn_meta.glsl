// The attention metadata binding (params.h, VKATTN_META_*): word offsets first, then the
// arrays; and the key positions binding. The includer declares `int meta[]` and
// `int kpos[]` and calls read_meta_offsets() at the start of main(), so that the loops read
// each array without first reading its offset.
#ifndef VKATTN_ATTN_META_GLSL
#define VKATTN_ATTN_META_GLSL

// A paged cache's block table follows each sequence's slot entries (params.h).
#define KV_TABLE_WORD(seq, entry) kpos[(seq) * pc.k_meta_stride + pc.n_keys + (entry)]
#include "kv_row.glsl"

uint off_q_pos, off_q_seq, off_ring, off_slopes, off_q_cpos, off_sinks, off_turns, off_q_temp;

void read_meta_offsets() {
    off_q_pos = uint(meta[VKATTN_META_Q_POS]);
    off_q_seq = uint(meta[VKATTN_META_Q_SEQ]);
    off_ring = uint(meta[VKATTN_META_RING]);
    off_slopes = uint(meta[VKATTN_META_SLOPES]);
    off_q_cpos = uint(meta[VKATTN_META_Q_CPOS]);
    off_sinks = uint(meta[VKATTN_META_SINKS]);
    off_turns = uint(meta[VKATTN_META_TURNS]);
    off_q_temp = uint(meta[VKATTN_META_Q_TEMP]);
}

// Key j's position for a tile of sequence |seq| (0 for plain keys): -1 for an empty slot.
int key_position(uint seq, uint j) {
    return kpos[seq * pc.k_meta_stride + j];
}

// Where key j of |kv_head| starts in k, for a tile of sequence |seq| (0 for plain keys).
uint key_row(uint seq, uint kv_head, uint j) {
    return kv_row(seq, kv_head, j, pc.k_seq_stride, pc.k_head_stride, pc.k_key_stride);
}

#ifndef VKATTN_WANT_ATTN_SCORES
// Where value j of |kv_head| starts in v: its own strides, since V's rows may be another
// width than K's, or the start of K's rows (a latent cache).
uint value_row(uint seq, uint kv_head, uint j) {
    return kv_row(seq, kv_head, j, pc.v_seq_stride, pc.v_head_stride, pc.v_key_stride);
}
#endif

// One past the last key of sequence |seq| (0 for plain keys) that may hold anything: the
// cache's occupancy bound, else n_keys. Keys at or past it are empty slots.
uint key_bound(uint seq) {
    return pc.k_bound != 0u ? min(uint(max(kpos[pc.k_bound + seq], 0)), pc.n_keys) : pc.n_keys;
}

// Key j's sequence: a cache slot belongs to its sequence when it holds a position.
int key_sequence(uint seq, uint j, int position) {
    return pc.k_meta_stride != 0u ? (position >= 0 ? int(seq) : -1) : kpos[pc.n_keys + j];
}

// KvRope::on_read: where a key of sequence |seq| at |position| sits inside the cache (sinks
// first, then the ring oldest first; negative, as rope_cos_sin reads it, below a ring start
// recorded before the sequence changed); 0 for an empty slot, whose score is never used.
uint key_cache_position(uint seq, int position) {
    const int sinks = meta[off_ring];
    return position < 0 ? 0u : uint(position < sinks ? position : sinks + position - meta[off_ring + 1u + seq]);
}

// ALiBi slope of query head |head| (0 without ALiBi: the slopes are not there to read).
float alibi_slope(uint head) {
    return pc.has_alibi != 0u ? intBitsToFloat(meta[off_slopes + head]) : 0.0;
}

// The scale of query token |token|'s scores: the op's, times its query temperature.
float query_scale(uint token) {
    return off_q_temp != 0u ? pc.scale * intBitsToFloat(meta[off_q_temp + token]) : pc.scale;
}

// RoPE frequency |pair| as rope_phase.glsl's fixed-point turns.
uvec2 rope_turns(uint pair) {
    const uint o = off_turns + 2u * pair;
    return uvec2(uint(meta[o]), uint(meta[o + 1u]));
}

#endif
