#version 450
// mt_probe: C = A B for one 16 x 16 x 16 tile on the matrix units (f16 operands, f32
// accumulation), one subgroup; the device check a matrix path runs before trusting a
// driver's VK_KHR_cooperative_matrix (some advertise it without the hardware behind it, or
// lower it wrongly: llama.cpp #10597). Built only with a glslang that knows
// GL_KHR_cooperative_matrix (vkattn_add_coopmat_shader); lavapipe cannot run it.
//   binding 0: readonly a words: A row-major, 16 halves a row packed two a word (low half
//              first), 8 words a row
//   binding 1: readonly b words: B row-major (row k holds B(k, 0..15)), as A
//   binding 2: writeonly c: C row-major, 16 floats a row
//   spec: workgroup size = the subgroup size, with full subgroups (one subgroup)
//   grid: one workgroup
// The uint arrays are what the attention kernels' shared slabs hold (halves in pairs); a
// load's offset and stride count the array's elements, so a row of 16 halves is 8 words.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "layout.glsl"

layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };

void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> mc =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(ma, a, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, b, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
    mc = coopMatMulAdd(ma, mb, mc);
    coopMatStore(mc, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
