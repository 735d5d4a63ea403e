#version 450
// mt_selftest: every operation of the matrix-tile layer (mt.glsl) on one subgroup, for the
// tests (the stand-in on lavapipe) and as the device self-test of the cooperative-matrix
// implementation. The input's first 1,024 words go to a shared uint array, where (offsets
// and pitches in uints, as the layer counts them):
//   A: rows at 0, pitch 12;  B^T: K rows at 192, pitch 8;  B: V rows at 320, pitch 20;
//   B0: one row at 640 read with pitch 0;  f: 16 row factors (f32 bits) at 652
// and four tiles come out (f32 bits, 256 words each, row-major):
//   0: A B^T (mt_load_a, mt_load_bt, mt_mad from zero)   1: tile 0 + A B (mt_load_b)
//   2: tile 1 with row r times f[r] (mt_scale_rows)        3: A B0 (every row of B0 equal)
// each through mt_store into shared memory at pitch 20. On small-integer halves every
// product and sum is exact, so the host checks the tiles bit for bit.
//   bindings: 0 input words, 1 output words; spec: WG_SIZE = MT_SG, MT_SG, MT_CHECK
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "layout.glsl"
#include "params.h"

layout(constant_id = VKATTN_SPEC_MT_SG) const uint MT_SG = 8;
layout(constant_id = VKATTN_SPEC_MT_CHECK) const bool MT_CHECK = true;

#include "mt.glsl"

layout(std430, binding = 0) readonly buffer In { uint in_words[]; };
layout(std430, binding = 1) writeonly buffer Out { uint out_words[]; };

const uint OUT_PITCH = 20u;
shared uint src_sh[1024];
shared uint out_sh[4u * 16u * OUT_PITCH];

void main() {
    const uint lid = gl_LocalInvocationID.x;
    for (uint i = lid; i < 1024u; i += WG_SIZE) {
        src_sh[i] = in_words[i];
    }
    barrier();
    MT_A(a);
    MT_B(bt);
    MT_B(b);
    MT_B(b0);
    MT_ACC(c);
    MT_ACC(d);
    mt_load_a(a, src_sh, 0u, 12u);
    mt_load_bt(bt, src_sh, 192u, 8u);
    mt_load_b(b, src_sh, 320u, 20u);
    mt_load_b(b0, src_sh, 640u, 0u);
    mt_zero(c);
    mt_mad(c, a, bt);
    mt_store(c, out_sh, 0u, OUT_PITCH);
    mt_mad(c, a, b);
    mt_store(c, out_sh, 16u * OUT_PITCH, OUT_PITCH);
    mt_scale_rows(c, src_sh, 652u);
    mt_store(c, out_sh, 32u * OUT_PITCH, OUT_PITCH);
    mt_zero(d);
    mt_mad(d, a, b0);
    mt_store(d, out_sh, 48u * OUT_PITCH, OUT_PITCH);
    barrier();
    for (uint i = lid; i < 4u * 256u; i += WG_SIZE) {
        const uint tile = i / 256u, e = i % 256u;
        out_words[i] = out_sh[(16u * tile + e / 16u) * OUT_PITCH + e % 16u];
    }
}
