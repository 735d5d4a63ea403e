#version 450
// Whether a glslangValidator can compile the matrix kernels (GL_KHR_cooperative_matrix,
// glslang 13.0 and later): configure (cmake/vkattn_coopmat_glslang.cmake) and tools/glslang.sh
// compile this and nothing else with it. Never run.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer Words { uint words[]; };
void main() {
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
  coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
  coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c =
      coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
  coopMatLoad(a, words, 0, 8, gl_CooperativeMatrixLayoutRowMajor);
  coopMatLoad(b, words, 128, 8, gl_CooperativeMatrixLayoutColumnMajor);
  c = coopMatMulAdd(a, b, c);
  coopMatStore(c, words, 256, 16, gl_CooperativeMatrixLayoutRowMajor);
}
