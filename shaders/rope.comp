#version 450
// rope: rotary position embedding, in place, on q[n_tokens, n_heads_q, head_dim] and
// (optionally) k[n_tokens, n_heads_k, head_dim] in one dispatch. For token t, pair
// i < d/2 (d = rotary_dim) with elements (a, b), o = rotary_offset:
//   interleaved: a = o + 2i, b = o + 2i + 1     half: a = o + i, b = o + i + d/2
//   x'[a] = f (x[a] cos - x[b] sin),  x'[b] = f (x[a] sin + x[b] cos),  angle = pos[t] theta_i
// with f the attention factor. Elements outside [o, o + d) are not touched. M-RoPE (pc.mrope != 0):
// three positions per token (t, h, w), pair i taking one of them (token_position).
//   binding 0: q, read-write: f32, or (VKATTN_F16) f16 packed two per uint
//   binding 1: k, read-write, same type (the same buffer as q when n_heads_k = 0)
//   binding 2: readonly int   pos[n_tokens] (M-RoPE: [n_tokens][3]), each in [0, 2^31)
//   binding 3: readonly uvec2 turns[d/2]: theta_i / 2pi in 64-bit fixed point (lo, hi)
//   push: RopeParams; spec (by name in params.h): workgroup size; HALF_ROT, the cos/sin table size;
//   UNIT (rope_unit.glsl); INTERLEAVED (pairs (2i, 2i+1), else (i, i + d/2))
//   grid: n_tokens * wgs_per_token workgroups, folded
// 1. The workgroup's token's cos/sin go to shared memory once: every head of Q and K
//    reuses them. 2. Each invocation rotates whole units (rope_unit.glsl) in place,
//    16-byte vectors where the shape allows.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ROPE
#include "layout.glsl"
#include "params.h"
#include "rope_phase.glsl"

layout(constant_id = VKATTN_SPEC_ROPE_HALF_ROT) const uint HALF_ROT = 64;
layout(constant_id = VKATTN_SPEC_ROPE_UNIT) const uint UNIT = 0;          // VKATTN_ROPE_UNIT_*: what one invocation owns
layout(constant_id = VKATTN_SPEC_ROPE_INTERLEAVED) const bool INTERLEAVED = false;
#include "rope_table.glsl"

// Each tensor binding is declared twice, as elements and as 16-byte vectors.
layout(std430, binding = 0) buffer Q { ELEM q[]; };
layout(std430, binding = 0) buffer Q4 { ELEM4 q4[]; };
layout(std430, binding = 1) buffer K { ELEM k[]; };
layout(std430, binding = 1) buffer K4 { ELEM4 k4[]; };
layout(std430, binding = 2) readonly buffer Pos { int pos[]; };
layout(std430, binding = 3) readonly buffer Turns { uvec2 turns[]; };
// VKATTN_TEXEL: 16-byte vectors are read through texel views of q and k (tensor_load.glsl
// says why) and written through the storage buffers. Only for VKATTN_ROPE_UNIT_VEC4, where
// each invocation reads and writes whole vectors of its own, so no invocation reads what
// another writes.
// ROPE_READ4(v) reads vector v of the tensor ROPE_SRC names (ROPE_Q_SRC, ROPE_K_SRC: its
// texel view or its vector storage-buffer view).
#ifdef VKATTN_TEXEL
layout(binding = 4) uniform usamplerBuffer q_texels;
layout(binding = 5) uniform usamplerBuffer k_texels;
#define ROPE_Q_SRC q_texels
#define ROPE_K_SRC k_texels
#ifdef VKATTN_F16
#define ROPE_READ4(v) texelFetch(ROPE_SRC, int(v))
#else
#define ROPE_READ4(v) uintBitsToFloat(texelFetch(ROPE_SRC, int(v)))
#endif
#else
#define ROPE_Q_SRC q4
#define ROPE_K_SRC k4
#define ROPE_READ4(v) ROPE_SRC[v]
#endif
#include "rope_rotate.glsl"

// Token |token|'s position for pair |i|: its one position, or with M-RoPE the one its
// section assigns (src/common/rope_math.hpp: mrope_section, the same rule).
uint token_position(uint token, uint i) {
    if (pc.mrope == VKATTN_MROPE_NONE) {
        return uint(pos[token]);
    }
    uint which = 0u;
    if (pc.mrope == VKATTN_MROPE_CONTIGUOUS) {
        which = i < pc.mrope_t ? 0u : (i < pc.mrope_t + pc.mrope_h ? 1u : 2u);
    } else if (i % 3u == 1u && i < 3u * pc.mrope_h) {
        which = 1u;
    } else if (i % 3u == 2u && i < 3u * pc.mrope_w) {
        which = 2u;
    }
    return uint(pos[3u * token + which]);
}

void main() {
    const uint wg = wg_linear_id();
    const uint token = wg / pc.wgs_per_token;
    if (token >= pc.n_tokens) {
        return;  // whole workgroup: uniform
    }
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    const uint half_rot = pc.rotary_dim / 2u;

    // 1. cos/sin of this token's angles, with the attention factor folded in.
    for (uint i = lid; i < half_rot; i += n_lanes) {
        put_cs(i, rope_cos_sin(token_position(token, i), turns[i]) * pc.attention_factor);
    }
    barrier();

    // 2. This workgroup's heads: a range of the q heads followed by the k heads. One loop
    //    per tensor, so that no invocation steps through the other tensor's code masked.
    const uint total_heads = pc.n_heads_q + pc.n_heads_k;
    const uint h0 = (wg - token * pc.wgs_per_token) * pc.heads_per_wg;
    const uint h1 = min(h0 + pc.heads_per_wg, total_heads);
    rotate_q_heads(token, pc.n_heads_q, h0, min(h1, pc.n_heads_q), lid, n_lanes);
    rotate_k_heads(token, pc.n_heads_k, max(h0, pc.n_heads_q) - pc.n_heads_q, max(h1, pc.n_heads_q) - pc.n_heads_q,
                   lid, n_lanes);
}
