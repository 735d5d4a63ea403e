#version 450
// rope: rotary position embedding, in place on x[n_tokens, n_heads, head_dim].
// For row (t, h) and pair i < rotary_dim/2 with elements (a, b):
//   interleaved: a = 2i, b = 2i + 1     half: a = i, b = i + rotary_dim/2
//   x'[a] = x[a] cos - x[b] sin,  x'[b] = x[a] sin + x[b] cos,  angle = pos[t] * theta_i
// Elements past rotary_dim pass through.
//   binding 0: x, read-write: f32, or (VKATTN_F16) f16 packed two per uint
//   binding 1: readonly int   pos[n_tokens], each in [0, 2^31)
//   binding 2: readonly uvec2 turns[rotary_dim/2], theta_i / 2pi in 64-bit fixed point
//   push: RopeParams; spec 0: workgroup size, spec 1: ROW_FLOATS (shared tile size)
//   grid: ceil(n_rows / rows_per_wg) workgroups, folded.
// A workgroup owns whole rows: it loads them into shared memory, rotates, and writes
// them back, so in-place updates never race even when two f16 values share a word.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ROPE
#include "layout.glsl"
#include "params.h"
#include "rope_phase.glsl"

layout(constant_id = 1) const uint ROW_FLOATS = 2048;

#ifdef VKATTN_F16
layout(std430, binding = 0) buffer X { uint x[]; };
#else
layout(std430, binding = 0) buffer X { float x[]; };
#endif
layout(std430, binding = 1) readonly buffer Pos { int pos[]; };
layout(std430, binding = 2) readonly buffer Turns { uvec2 turns[]; };

shared float tile[ROW_FLOATS];

void main() {
    uint row0 = wg_linear_id() * pc.rows_per_wg;
    if (row0 >= pc.n_rows) {
        return;  // whole workgroup: uniform
    }
    uint n_rows = min(pc.rows_per_wg, pc.n_rows - row0);
    uint n_elems = n_rows * pc.head_dim;
    uint base = row0 * pc.head_dim;
    uint lid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupSize.x;

    // 1. Load the rows (coalesced).
#ifdef VKATTN_F16
    for (uint w = lid; w < n_elems / 2; w += wg) {
        vec2 v = unpackHalf2x16(x[base / 2 + w]);
        tile[2 * w] = v.x;
        tile[2 * w + 1] = v.y;
    }
#else
    for (uint e = lid; e < n_elems; e += wg) {
        tile[e] = x[base + e];
    }
#endif
    barrier();

    // 2. Rotate each pair once.
    uint half_rot = pc.rotary_dim / 2;
    for (uint p = lid; p < n_rows * half_rot; p += wg) {
        uint r = p / half_rot;
        uint i = p - r * half_rot;
        uint token = (row0 + r) / pc.n_heads;
        vec2 cs = rope_cos_sin(uint(pos[token]), turns[i]);
        uint a = r * pc.head_dim + (pc.interleaved != 0u ? 2u * i : i);
        uint b = a + (pc.interleaved != 0u ? 1u : half_rot);
        float xa = tile[a];
        float xb = tile[b];
        tile[a] = xa * cs.x - xb * cs.y;
        tile[b] = xa * cs.y + xb * cs.x;
    }
    barrier();

    // 3. Store.
#ifdef VKATTN_F16
    for (uint w = lid; w < n_elems / 2; w += wg) {
        x[base / 2 + w] = packHalf2x16(vec2(tile[2 * w], tile[2 * w + 1]));
    }
#else
    for (uint e = lid; e < n_elems; e += wg) {
        x[base + e] = tile[e];
    }
#endif
}
