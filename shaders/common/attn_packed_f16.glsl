// What attn_tiled and attn_decode_group keep in shared memory and registers, and how values
// get there (the includer enables GL_EXT_shader_explicit_arithmetic_types_float16): f32 for AttentionPrecision::f32; under VKATTN_PACKED_F16 f16, rounded to
// nearest even (half_rne.glsl: a conversion's rounding is implementation-defined, and AMD's
// compilers truncate), for AttentionPrecision::f16_products on devices with shaderFloat16.
// The chains of f16 FMAs before a sum goes into f32 are at most 8 long: docs/attention.md
// derives the tolerance from that length.
#ifndef VKATTN_ATTN_PACKED_F16_GLSL
#define VKATTN_ATTN_PACKED_F16_GLSL

#ifdef VKATTN_PACKED_F16
#include "half_rne.glsl"
#define SH_VEC4 f16vec4
#define SH_FLOAT float16_t

const uint QK_CHUNK = 4u;  // vec4s of a score per chain: 8 FMAs per f16vec2

// The exact f16 value nearest |x| (ties to even), as a float.
vec2 half_rne2(vec2 x) { return unpackHalf2x16(pack_half_rne(x)); }
f16vec4 to_sh4(vec4 x) { return f16vec4(vec4(half_rne2(x.xy), half_rne2(x.zw))); }
float16_t to_sh(float x) { return float16_t(unpackHalf2x16(half_bits_rne(x)).x); }

// The products' inputs are staged times a power of two near the scale, 2^e with
// e = round(log2 |scale|) within [-16, 0]: the queries take up to 2^-8 of it and the keys
// the rest (never keys that V is read from), so that products of f16 values of a few
// hundred (a few thousand under scales below 2^-8, where such values give moderate scores)
// stay below 65504. Exact (no rounding but where it makes a value subnormal in f16), so the
// scores divide it out exactly.
float prescale_log2() { return pc.scale != 0.0 ? clamp(round(log2(abs(pc.scale))), -16.0, 0.0) : 0.0; }
float q_prescale() { return exp2(max(prescale_log2(), -8.0)); }
float k_prescale(bool v_from_k) { return v_from_k ? 1.0 : exp2(prescale_log2() - max(prescale_log2(), -8.0)); }
// What a staged product carries: the scores divide it out.
float qk_prescale(bool v_from_k) { return q_prescale() * k_prescale(v_from_k); }
#else
#define SH_VEC4 vec4
#define SH_FLOAT float
vec4 to_sh4(vec4 x) { return x; }
float to_sh(float x) { return x; }
float q_prescale() { return 1.0; }
float k_prescale(bool v_from_k) { return 1.0; }
float qk_prescale(bool v_from_k) { return 1.0; }
#endif

#endif
