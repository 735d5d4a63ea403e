// The matrix-tile layer (mt.glsl) on KHR cooperative matrices: 16 x 16 x 16, f16 operands,
// f32 accumulators, subgroup scope. Needs a glslang that knows GL_KHR_cooperative_matrix
// and a device listing that shape (M = N = K = 16, A = B = FLOAT16, C = Result = FLOAT32,
// SUBGROUP); the stand-in mirrors every operation here. Whole shared arrays with element
// offsets are passed to the loads and stores, never slices (glslang 15's coopMatLoad of an
// array-of-arrays element was wrong).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#define MT_A(a) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a
#define MT_B(b) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b
#define MT_ACC(c) coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c
#define MT_ACC_ARRAY(c, n) coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c[n]
#define MT_A_ARRAY(a, n) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[n]
// Tile arrays stay registers only when indexed by constants.
#define MT_UNROLL_ACC [[unroll]]

#define MT_ROWS gl_CooperativeMatrixLayoutRowMajor
#define MT_COLS gl_CooperativeMatrixLayoutColumnMajor

#define mt_zero(c) c = MT_ACC_ZERO
#define MT_ACC_ZERO coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0)
#define mt_load_a(a, arr, at, pitch) coopMatLoad(a, arr, at, pitch, MT_ROWS)
#define mt_load_b(b, arr, at, pitch) coopMatLoad(b, arr, at, pitch, MT_ROWS)
#define mt_load_bt(b, arr, at, pitch) coopMatLoad(b, arr, at, pitch, MT_COLS)
#define mt_mad(c, a, b) c = coopMatMulAdd(a, b, c)
#define mt_store(c, arr, at, pitch) coopMatStore(c, arr, at, pitch, MT_ROWS)
// With stride 0 every column of d_ is the vector f[at .. at + 15]: c's rows times it.
#define mt_scale_rows(c, arr, at)                                                 \
    {                                                                             \
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> d_;     \
        coopMatLoad(d_, arr, at, 0u, MT_COLS);                                    \
        c = c * d_;                                                               \
    }
