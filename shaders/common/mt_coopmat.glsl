// The matrix-tile layer (mt.glsl) on KHR cooperative matrices: f16 operands, f32
// accumulators, subgroup scope. A tile is one 16 x 16 x 16 cooperative matrix where the
// device lists that shape (NVIDIA, AMD); with VKATTN_MT_CM = 8 it is 2 x 2 matrices of
// 8 x 8 x 8 (the shape lavapipe lists after Mesa 25.0, with 8-lane subgroups), composed so
// that every layer operation means the same (each element's sum runs over the K halves in
// order, each half's 8 products summed by the device). Needs a glslang that knows
// GL_KHR_cooperative_matrix and a device listing the shape (A = B = FLOAT16, C = Result =
// FLOAT32, SUBGROUP); the stand-in mirrors every operation here. Whole shared arrays with
// element offsets are passed to the loads and stores, never slices (glslang 15's
// coopMatLoad of an array-of-arrays element was wrong).
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require

#define MT_ROWS gl_CooperativeMatrixLayoutRowMajor
#define MT_COLS gl_CooperativeMatrixLayoutColumnMajor
// Tile arrays stay registers only when indexed by constants.
#define MT_UNROLL_ACC [[unroll]]

#if !defined(VKATTN_MT_CM) || VKATTN_MT_CM == 16
#define MT_A(a) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a
#define MT_B(b) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b
#define MT_ACC(c) coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c
#define MT_ACC_ARRAY(c, n) coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c[n]
#define MT_A_ARRAY(a, n) coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a[n]
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

#elif VKATTN_MT_CM == 8
// Sub-matrix (i, j) of a tile at index 2 i + j: A's (row block, K block), B's (K block,
// column block), an accumulator's (row block, column block). Offsets count uints: 8 halves
// are 4, 8 floats 8, so every offset stays a multiple of 16 bytes.
#define MT_CMA coopmat<float16_t, gl_ScopeSubgroup, 8, 8, gl_MatrixUseA>
#define MT_CMB coopmat<float16_t, gl_ScopeSubgroup, 8, 8, gl_MatrixUseB>
#define MT_CMC coopmat<float, gl_ScopeSubgroup, 8, 8, gl_MatrixUseAccumulator>
#define MT_A(a) MT_CMA a[4]
#define MT_B(b) MT_CMB b[4]
#define MT_ACC(c) MT_CMC c[4]
#define MT_ACC_ARRAY(c, n) MT_CMC c[n][4]
#define MT_A_ARRAY(a, n) MT_CMA a[n][4]

#define mt_zero(c)                                   \
    {                                                \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_) \
            c[t_] = MT_CMC(0.0);                     \
    }
// A(r, k): row block i_ at at + 8 i_ pitch, K block j_ 4 uints along.
#define mt_load_a(a, arr, at, pitch)                                                          \
    {                                                                                         \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_)                                          \
            coopMatLoad(a[t_], arr, (at) + (t_ >> 1) * 8u * (pitch) + (t_ & 1u) * 4u, pitch, MT_ROWS); \
    }
// B(k, n) = half n of row k: K block i_ at at + 8 i_ pitch, column block j_ 4 uints along.
#define mt_load_b(b, arr, at, pitch) mt_load_a(b, arr, at, pitch)
// B(k, n) = half k of row n: column block j_ at at + 8 j_ pitch, K block i_ 4 uints along.
#define mt_load_bt(b, arr, at, pitch)                                                         \
    {                                                                                         \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_)                                          \
            coopMatLoad(b[t_], arr, (at) + (t_ & 1u) * 8u * (pitch) + (t_ >> 1) * 4u, pitch, MT_COLS); \
    }
// C(i, j) += A(i, 0) B(0, j), then A(i, 1) B(1, j): K in order.
#define mt_mad(c, a, b)                                                      \
    {                                                                        \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_) {                       \
            c[t_] = coopMatMulAdd(a[t_ & 2u], b[t_ & 1u], c[t_]);            \
            c[t_] = coopMatMulAdd(a[(t_ & 2u) + 1u], b[(t_ & 1u) + 2u], c[t_]); \
        }                                                                    \
    }
#define mt_store(c, arr, at, pitch)                                                           \
    {                                                                                         \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_)                                          \
            coopMatStore(c[t_], arr, (at) + (t_ >> 1) * 8u * (pitch) + (t_ & 1u) * 8u, pitch, MT_ROWS); \
    }
// With stride 0 every column of d_ is the vector f[at + 8 i .. + 7]: row block i times it.
#define mt_scale_rows(c, arr, at)                                  \
    {                                                              \
        [[unroll]] for (uint t_ = 0u; t_ < 4u; ++t_) {             \
            MT_CMC d_;                                             \
            coopMatLoad(d_, arr, (at) + (t_ >> 1) * 8u, 0u, MT_COLS); \
            c[t_] = c[t_] * d_;                                    \
        }                                                          \
    }
#else
#error "VKATTN_MT_CM: 16 or 8"
#endif
