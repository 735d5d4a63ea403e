// The attention kernels' inputs q, k and v (bindings 0, 1 and 2) and their loaders load_q,
// load_k and load_v (tensor_load.glsl): texel views with VKATTN_TEXEL, else storage-buffer
// views as words, word pairs and 16-byte vectors. Without ATTN_NO_V (attn_scores reads no
// v), also the fused kernels' other bindings: out (3), mask (4), meta (5) and the key
// positions (6), with attn_meta.glsl. The includer defines ATTN_Q_ALIGNED, ATTN_K_ALIGNED
// and ATTN_V_ALIGNED (tensor_load.glsl's TL_ALIGNED for each) and has the constants Q_F16,
// K_TYPE and V_TYPE.
#ifndef VKATTN_ATTN_INPUTS_GLSL
#define VKATTN_ATTN_INPUTS_GLSL

// k and v may be quantized (q8_0, q4_0) but in a lean twin, built for float K and V.
#ifdef VKATTN_LEAN
#define ATTN_KV_QUANT 0
#else
#define ATTN_KV_QUANT 1
#endif

#ifdef VKATTN_TEXEL
layout(binding = 0) uniform usamplerBuffer q_texels;
layout(binding = 1) uniform usamplerBuffer k_texels;
#ifndef ATTN_NO_V
layout(binding = 2) uniform usamplerBuffer v_texels;
#endif
#else
layout(std430, binding = 0) readonly buffer Q { uint q_words[]; };
layout(std430, binding = 0) readonly buffer Q2 { uvec2 q_words2[]; };
layout(std430, binding = 0) readonly buffer Q4 { uvec4 q_words4[]; };
layout(std430, binding = 1) readonly buffer K { uint k_words[]; };
layout(std430, binding = 1) readonly buffer K2 { uvec2 k_words2[]; };
layout(std430, binding = 1) readonly buffer K4 { uvec4 k_words4[]; };
#ifndef ATTN_NO_V
layout(std430, binding = 2) readonly buffer V { uint v_words[]; };
layout(std430, binding = 2) readonly buffer V2 { uvec2 v_words2[]; };
layout(std430, binding = 2) readonly buffer V4 { uvec4 v_words4[]; };
#endif
#endif
#ifndef ATTN_NO_V
layout(std430, binding = 3) writeonly buffer O { float out_[]; };
layout(std430, binding = 4) readonly buffer M { float mask[]; };
layout(std430, binding = 5) readonly buffer Meta { int meta[]; };
layout(std430, binding = 6) readonly buffer KeyPos { int kpos[]; };
#include "attn_meta.glsl"
#endif

#ifdef VKATTN_TEXEL
#define TL_TEXELS q_texels
#endif
#define TL_ALIGNED ATTN_Q_ALIGNED
#define TL_WORDS q_words
#define TL_WORDS2 q_words2
#define TL_WORDS4 q_words4
#define TL_TYPE (Q_F16 ? VKATTN_KV_F16 : VKATTN_KV_F32)
#define TL_QUANT 0
#define TL_SCALES 0u
#define TL_FN load_q
#include "tensor_load.glsl"

#ifdef VKATTN_TEXEL
#define TL_TEXELS k_texels
#endif
#define TL_ALIGNED ATTN_K_ALIGNED
#define TL_WORDS k_words
#define TL_WORDS2 k_words2
#define TL_WORDS4 k_words4
#define TL_TYPE K_TYPE
#define TL_QUANT ATTN_KV_QUANT
#define TL_SCALES pc.k_scales
#define TL_FN load_k
#include "tensor_load.glsl"

#ifndef ATTN_NO_V
#ifdef VKATTN_TEXEL
#define TL_TEXELS v_texels
#endif
#define TL_ALIGNED ATTN_V_ALIGNED
#define TL_WORDS v_words
#define TL_WORDS2 v_words2
#define TL_WORDS4 v_words4
#define TL_TYPE V_TYPE
#define TL_QUANT ATTN_KV_QUANT
#define TL_SCALES pc.v_scales
#define TL_FN load_v
#include "tensor_load.glsl"
#endif

#endif
