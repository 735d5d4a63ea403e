#version 450
// kv_append: writes each new token's key and value rows into its cache slot.
//   cache[seq, slot, g, :] = src[t, g, :] for k and v, converted to the cache's dtype
//   (f16: rounded to nearest even, half_rne.glsl; q8_0/q4_0: quantized per block of 32
//   exactly as the CPU reference does, quant.glsl), where dst_rows[t] = seq * capacity +
//   slot (-1: the token is not kept).
//   binding 0/1: readonly k, v words [n_tokens, n_kv_heads, head_dim]: f32 bits or packed
//                f16 (SRC_F16)
//   binding 2/3: k, v cache words [n_seqs, capacity, n_kv_heads, head_dim] (DST_TYPE: 0
//                f32, 1 f16, 2 q8_0, 3 q4_0, whose scales start at word dst_scales; head_dim
//                is even for f16 and a multiple of 32 for the quantized types, so every row
//                starts on a word and every block on its own code words)
//   binding 4: readonly int rows: dst_rows[n_tokens], then the tokens' positions[n_tokens]
//              (a paged cache: dst_rows are rows of its pool, and the tokens' slot-table
//              words follow, seq * capacity + slot with capacity the words per sequence)
//   binding 5: int slots[n_seqs * capacity + n_seqs], the cache's slot table:
//              slots[dst_rows[t]] = positions[t] when write_slots (params.h: the key
//              positions attention reads), and the sequence's occupancy bound from word
//              bound_offset raised past each slot written; a paged cache's block table
//              entry of each slot written gets its block
//   push: KvAppendParams; spec (by name in params.h): workgroup size; SRC_F16, DST_TYPE
//   variants: VKATTN_KV_ONE writes one of k and v (binding 0: source, 1: cache, 2: rows,
//   3: slots), for devices that allow 4 storage buffers per kernel; the host records two.
//   VKATTN_KV_ROPE (with VKATTN_F16 for f16 q and k): rope(q, k) and this op in one dispatch
//   (the command list's fusion of the two, docs/design.md): RoPE rotates q (binding 6, read
//   and written) and k (binding 0, now read and written) in place at each token's position
//   (binding 4's positions; binding 7: rope.comp's turns; spec HALF_ROT, UNIT, INTERLEAVED,
//   push: KvAppendParams' rope fields), then the rotated k row and the v row are appended
//   grid: one invocation per (token, kv head, pair of elements), or per block of 32 for the
//   quantized types, folded; VKATTN_KV_ROPE: a workgroup per (token, kv head), which rotates
//   that k head and its share of the q heads, then appends the two rows (its own
//   invocations read the k row it wrote: k is coherent, behind a barrier)
// An invocation owns a pair of elements (a block), so an f16 word (a block's code words) is
// written whole, by one writer; two blocks share a scale word, whose halves are replaced
// with atomics. The host drops tokens that a later token of the same call would
// overwrite, so no two invocations write one slot.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_KV_APPEND
#include "layout.glsl"
#include "params.h"
#include "half_rne.glsl"
#include "quant.glsl"

layout(constant_id = VKATTN_SPEC_KV_APPEND_SRC_F16) const bool SRC_F16 = false;
layout(constant_id = VKATTN_SPEC_KV_APPEND_DST_TYPE) const uint DST_TYPE = VKATTN_KV_F16;  // VKATTN_KV_*
const bool DST_F16 = DST_TYPE == VKATTN_KV_F16, DST_QUANT = DST_TYPE >= VKATTN_KV_Q8_0;

#ifdef VKATTN_KV_ROPE
layout(constant_id = VKATTN_SPEC_KV_ROPE_HALF_ROT) const uint HALF_ROT = 64;
layout(constant_id = VKATTN_SPEC_KV_ROPE_UNIT) const uint UNIT = 0;
layout(constant_id = VKATTN_SPEC_KV_ROPE_INTERLEAVED) const bool INTERLEAVED = false;
#include "rope_phase.glsl"
#include "rope_table.glsl"
#define K_ACCESS coherent
#else
#define K_ACCESS readonly
#endif

#ifdef VKATTN_KV_ONE
layout(std430, binding = 0) readonly buffer Src { uint src_words[]; };
layout(std430, binding = 1) buffer Dst { uint dst_words[]; };
layout(std430, binding = 2) readonly buffer Rows { int dst_rows[]; };
layout(std430, binding = 3) buffer Slots { int slots[]; };
const uint N_TENSORS = 1u;

float src_elem(uint which, uint e) {
    const uint w = src_words[SRC_F16 ? e >> 1 : e];
    return SRC_F16 ? unpackHalf2x16(w)[e & 1u] : uintBitsToFloat(w);
}

void store(uint which, uint e, uint bits) { dst_words[e] = bits; }

// Replaces the 16 bits of word |e| from |shift| on with |bits|, leaving the other half to
// whichever invocation owns it.
void store_half(uint which, uint e, uint shift, uint bits) {
    atomicAnd(dst_words[e], ~(0xffffu << shift));
    atomicOr(dst_words[e], bits << shift);
}
#else
layout(std430, binding = 0) K_ACCESS buffer K { uint k_src[]; };
layout(std430, binding = 1) readonly buffer V { uint v_src[]; };
layout(std430, binding = 2) buffer KC { uint k_cache[]; };
layout(std430, binding = 3) buffer VC { uint v_cache[]; };
layout(std430, binding = 4) readonly buffer Rows { int dst_rows[]; };
layout(std430, binding = 5) buffer Slots { int slots[]; };
const uint N_TENSORS = 2u;
#ifdef VKATTN_KV_ROPE
layout(std430, binding = 0) coherent buffer KE { ELEM k[]; };
layout(std430, binding = 0) coherent buffer KE4 { ELEM4 k4[]; };
layout(std430, binding = 6) buffer Q { ELEM q[]; };
layout(std430, binding = 6) buffer Q4 { ELEM4 q4[]; };
layout(std430, binding = 7) readonly buffer Turns { uvec2 turns[]; };
#define ROPE_Q_SRC q4
#define ROPE_K_SRC k4
#define ROPE_READ4(v) ROPE_SRC[v]
#include "rope_rotate.glsl"
#endif

float src_elem(uint which, uint e) {
    const uint w = which == 0u ? k_src[SRC_F16 ? e >> 1 : e] : v_src[SRC_F16 ? e >> 1 : e];
    return SRC_F16 ? unpackHalf2x16(w)[e & 1u] : uintBitsToFloat(w);
}

void store(uint which, uint e, uint bits) {
    if (which == 0u) {
        k_cache[e] = bits;
    } else {
        v_cache[e] = bits;
    }
}

void store_half(uint which, uint e, uint shift, uint bits) {
    if (which == 0u) {
        atomicAnd(k_cache[e], ~(0xffffu << shift));
        atomicOr(k_cache[e], bits << shift);
    } else {
        atomicAnd(v_cache[e], ~(0xffffu << shift));
        atomicOr(v_cache[e], bits << shift);
    }
}
#endif

// The invocation that owns a token's first element records the position its slot holds,
// and raises its sequence's occupancy bound past the slot. A paged cache's tokens of one
// run of slots all write its block to the table: the same value.
void write_slot(uint t, int row) {
    if (pc.write_slots != 0u) {
        const uint word = pc.page != 0u ? uint(dst_rows[2u * pc.n_tokens + t]) : uint(row);
        slots[word] = dst_rows[pc.n_tokens + t];
        const uint seq = word / pc.capacity, slot = word - seq * pc.capacity;
        atomicMax(slots[pc.bound_offset + seq], int(slot) + 1);
        if (pc.page != 0u) {
            const uint shift = pc.page - 1u;
            slots[seq * pc.capacity + pc.table + (slot >> shift)] = row >> shift;
        }
    }
}

// One block of 32 elements of a quantized cache.
void append_block(uint id) {
    const uint blocks = pc.head_dim / QUANT_BLOCK;
    const uint u = id % blocks;
    const uint g = (id / blocks) % pc.n_kv_heads;
    const uint t = id / (blocks * pc.n_kv_heads);
    const int row = dst_rows[t];
    if (row < 0) {
        return;
    }
    if (g == 0u && u == 0u) {
        write_slot(t, row);
    }
    const uint src = (t * pc.n_kv_heads + g) * pc.head_dim + QUANT_BLOCK * u;
    const uint dst = (uint(row) * pc.n_kv_heads + g) * pc.head_dim + QUANT_BLOCK * u;  // element
    const uint block = dst / QUANT_BLOCK;
    const uint code_words = DST_TYPE == VKATTN_KV_Q8_0 ? 8u : 4u;
    for (uint which = 0u; which < N_TENSORS; ++which) {
        float x[32];
        for (uint i = 0u; i < QUANT_BLOCK; ++i) {
            x[i] = src_elem(which, src + i);
        }
        uint words[8];
        const uint scale = quantize_block(DST_TYPE == VKATTN_KV_Q4_0, x, words);
        for (uint w = 0u; w < code_words; ++w) {
            store(which, block * code_words + w, words[w]);
        }
        store_half(which, pc.dst_scales + block / 2u, 16u * (block & 1u), scale);
    }
}

// One pair of elements of a cache that is not quantized.
void append_pair(uint id) {
    const uint pairs = (pc.head_dim + 1u) / 2u;
    const uint u = id % pairs;
    const uint g = (id / pairs) % pc.n_kv_heads;
    const uint t = id / (pairs * pc.n_kv_heads);
    const int row = dst_rows[t];
    if (row < 0) {
        return;
    }
    if (g == 0u && u == 0u) {
        write_slot(t, row);
    }
    const uint seq = uint(row) / pc.capacity, slot = uint(row) % pc.capacity;
    const uint src = (t * pc.n_kv_heads + g) * pc.head_dim + 2u * u;
    const uint dst = ((seq * pc.capacity + slot) * pc.n_kv_heads + g) * pc.head_dim + 2u * u;
    const bool second = 2u * u + 1u < pc.head_dim;
    for (uint which = 0u; which < N_TENSORS; ++which) {
        const float a = src_elem(which, src);
        const float b = second ? src_elem(which, src + 1u) : 0.0;
        if (DST_F16) {
            store(which, dst >> 1, pack_half_rne(vec2(a, b)));
        } else {
            store(which, dst, floatBitsToUint(a));
            if (second) {
                store(which, dst + 1u, floatBitsToUint(b));
            }
        }
    }
}

// The units of a (token, kv head) row: blocks of 32, or pairs.
uint units_per_row() { return DST_QUANT ? pc.head_dim / QUANT_BLOCK : (pc.head_dim + 1u) / 2u; }

#ifdef VKATTN_KV_ROPE
void main() {
    const uint wg = wg_linear_id();
    const uint t = wg / pc.n_kv_heads, g = wg - t * pc.n_kv_heads;
    if (t >= pc.n_tokens) {
        return;  // whole workgroup: uniform
    }
    const uint lid = gl_LocalInvocationID.x, n_lanes = gl_WorkGroupSize.x;
    // 1. The token's cos/sin, the attention factor folded in, as rope.comp makes them (at the
    //    token's position: kv_append's, which the command list checked are rope's).
    const uint position = uint(dst_rows[pc.n_tokens + t]);
    for (uint i = lid; i < pc.rotary_dim / 2u; i += n_lanes) {
        put_cs(i, rope_cos_sin(position, turns[i]) * pc.attention_factor);
    }
    barrier();
    // 2. This KV head's share of the q heads, and its k head, rotated in place.
    const uint q_share = (pc.n_heads_q + pc.n_kv_heads - 1u) / pc.n_kv_heads;
    rotate_q_heads(t, pc.n_heads_q, min(g * q_share, pc.n_heads_q), min(g * q_share + q_share, pc.n_heads_q), lid, n_lanes);
    rotate_k_heads(t, pc.n_kv_heads, g, g + 1u, lid, n_lanes);
    // 3. The k row (as rotated by the whole workgroup) and the v row into the cache.
    memoryBarrierBuffer();
    barrier();
    const uint per_row = units_per_row();
    for (uint u = lid; u < per_row; u += n_lanes) {
        const uint id = (t * pc.n_kv_heads + g) * per_row + u;
        if (DST_QUANT) {
            append_block(id);
        } else {
            append_pair(id);
        }
    }
}
#else
void main() {
    const uint id = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (id >= pc.n_tokens * pc.n_kv_heads * units_per_row()) {
        return;
    }
    if (DST_QUANT) {
        append_block(id);
    } else {
        append_pair(id);
    }
}
#endif
