// The running softmax state of attn_decode, the streaming kernel (the row-tile kernels
// take NEG_MAX alone): per row its max m, its sum of exponentials l and its sums of p * v,
// V_PIECES pairs of vec4 (acc_lo, acc_hi). Macros rather than functions, so that the
// arrays stay registers indexed by constants whatever a compiler inlines. Needs ROWS and
// V_PIECES.
#ifndef VKATTN_ATTN_ONLINE_GLSL
#define VKATTN_ATTN_ONLINE_GLSL

#include "softmax_row.glsl"

// Every row empty: max NEG_MAX, sums zero.
#define ONLINE_INIT(m, l, acc_lo, acc_hi)                      \
    [[unroll]] for (uint r_ = 0u; r_ < ROWS; ++r_) {           \
        m[r_] = NEG_MAX;                                       \
        l[r_] = 0.0;                                           \
        [[unroll]] for (uint p_ = 0u; p_ < V_PIECES; ++p_) {   \
            acc_lo[r_][p_] = vec4(0.0);                        \
            acc_hi[r_][p_] = vec4(0.0);                        \
        }                                                      \
    }

// Row r's sums scaled by |rescale| (exp(old max - new max)).
#define ONLINE_RESCALE(r, rescale, l, acc_lo, acc_hi)          \
    l[r] *= (rescale);                                         \
    [[unroll]] for (uint p_ = 0u; p_ < V_PIECES; ++p_) {       \
        acc_lo[r][p_] *= (rescale);                            \
        acc_hi[r][p_] *= (rescale);                            \
    }

#endif
