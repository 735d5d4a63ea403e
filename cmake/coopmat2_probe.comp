#version 450
// Whether the matrix kernels' glslangValidator also compiles GL_NV_cooperative_matrix2
// (glslang 15.0 and later; SPIR-V 1.6): configure (cmake/vkattn_coopmat_glslang.cmake)
// compiles this and nothing else with it. Never run.
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Words { uint words[]; };
float twice(const in uint r, const in uint c, const in float x) { return 2.0 * x; }
void main() {
  coopmat<float, gl_ScopeSubgroup, 16, 48, gl_MatrixUseAccumulator> c =
      coopmat<float, gl_ScopeSubgroup, 16, 48, gl_MatrixUseAccumulator>(0.0);
  coopMatLoad(c, words, 0, 48, gl_CooperativeMatrixLayoutRowMajor);
  coopMatPerElementNV(c, c, twice);
  coopmat<float16_t, gl_ScopeSubgroup, 16, 48, gl_MatrixUseA> a = coopmat<float16_t, gl_ScopeSubgroup, 16, 48, gl_MatrixUseA>(c);
  coopmat<float16_t, gl_ScopeSubgroup, 48, 48, gl_MatrixUseB> b;
  coopMatLoad(b, words, 1024, 24, gl_CooperativeMatrixLayoutRowMajor);
  c = coopMatMulAdd(a, b, c);
  coopMatStore(c, words, 2048, 48, gl_CooperativeMatrixLayoutRowMajor);
}
