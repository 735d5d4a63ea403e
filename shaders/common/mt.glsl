// The matrix-tile layer: 16 x 16 tiles of f16 operands (A, B) and f32 accumulators on which
// the matrix kernels (attn_mt.comp, mt_selftest.comp) are written, with two
// implementations behind one vocabulary:
// - VKATTN_MT_COOPMAT: KHR cooperative matrices at subgroup scope (mt_coopmat.glsl), the
//   hardware path, compiled only where the toolchain knows GL_KHR_cooperative_matrix;
// - otherwise the stand-in (mt_standin.glsl): plain shuffles and shared-memory loads with the
//   same tile shapes, the same f16 operands and the same sums, so that lavapipe runs every
//   kernel written on the layer (VKATTN_MATRIX=standin).
// Shared arrays are uint: halves packed in pairs (low half first), f32 values as bits;
// offsets |at| and pitches in uints, multiples of 4 (16 bytes), uniform in the subgroup.
// GLSL cannot pass shared arrays to functions, so the operations are macros:
//   MT_A(a) MT_B(b) MT_ACC(c)      declare a tile (MT_ACC_ARRAY(c, n): n accumulators,
//                                  MT_A_ARRAY(a, n): n A tiles held across a loop)
//   mt_zero(c)                     c = 0
//   mt_load_a(a, arr, at, pitch)   A(r, k) = half k of the row at arr[at + r * pitch]
//   mt_load_b(b, arr, at, pitch)   B(k, n) = half n of the row at arr[at + k * pitch] (V rows)
//   mt_load_bt(b, arr, at, pitch)  B(k, n) = half k of the row at arr[at + n * pitch] (K rows:
//                                  B = K^T)
//   mt_mad(c, a, b)                c += a b (each element's 16 products summed in f32)
//   mt_store(c, arr, at, pitch)    f32 bits of c(r, n) to arr[at + r * pitch + n]
//   mt_scale_rows(c, arr, at)      c(r, n) *= the f32 at arr[at + r] (a pitch-0 load)
// The includer has the spec constant MT_SG (the subgroup size the pipeline requires, with
// full subgroups) and MT_CHECK (the stand-in poisons a tile with NaN when an operand breaks
// a KHR rule that lavapipe would let pass).
#ifndef VKATTN_MT_GLSL
#define VKATTN_MT_GLSL

#ifdef VKATTN_MT_COOPMAT
#include "mt_coopmat.glsl"
#else
#include "mt_standin.glsl"
#endif

#endif
