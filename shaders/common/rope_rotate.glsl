// rotate_q_heads / rotate_k_heads (rope_unit.glsl's ROPE_LOOP) and the functions under
// them, for the bindings q, q4 and k, k4 (ELEM and ELEM4 views: rope_table.glsl), the 16-byte
// vectors read from ROPE_Q_SRC and ROPE_K_SRC through the includer's ROPE_READ4. Included
// once, after the bindings; rope_unit.glsl itself is included once per tensor.
#ifndef VKATTN_ROPE_ROTATE_GLSL
#define VKATTN_ROPE_ROTATE_GLSL

#include "half_rne.glsl"  // rope_unit.glsl's f16 results

#define ROPE_BUF q
#define ROPE_BUF4 q4
#define ROPE_SRC ROPE_Q_SRC
#define ROPE_FN rotate_q
#define ROPE_LOOP rotate_q_heads
#include "rope_unit.glsl"
#undef ROPE_BUF
#undef ROPE_BUF4
#undef ROPE_FN
#undef ROPE_LOOP
#undef ROPE_SRC
#define ROPE_BUF k
#define ROPE_BUF4 k4
#define ROPE_SRC ROPE_K_SRC
#define ROPE_FN rotate_k
#define ROPE_LOOP rotate_k_heads
#include "rope_unit.glsl"

#endif
