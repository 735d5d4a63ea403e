#version 450
// copy: dst[dst_offset + i] = src[src_offset + i] for i < count, in 16-byte units (VEC4),
// 32-bit words, or 16-bit halves (HALVES: a q8_0/q4_0 cache sequence's scales may start
// mid-word; each half is replaced with atomics, leaving the word's other half as it is,
// and read with one from binding 1, src being dst: a word may hold a half read and a half
// written, and a plain read beside another invocation's atomics is a data race in
// Vulkan's memory model). The same-device bandwidth baseline that benchmarks report ratios
// against, a plain tensor copy (tensor buffers are padded to 16 bytes, so whole tensors
// copy as vec4s), and a copy of one KV-cache sequence into another (same buffer, disjoint
// ranges).
//   binding 0: readonly src; binding 1: writeonly dst (uvec4[] and uint[] views); the
//   VKATTN_TEXEL variant reads src through a uniform texel buffer (tensor_load.glsl says why)
//   push: CopyParams; spec (by name in params.h): workgroup size; VEC4; HALVES
//   grid: ceil(count / workgroup size) workgroups, folded
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_COPY
#include "layout.glsl"
#include "params.h"

layout(constant_id = VKATTN_SPEC_COPY_VEC4) const bool VEC4 = true;
layout(constant_id = VKATTN_SPEC_COPY_HALVES) const bool HALVES = false;

#ifdef VKATTN_TEXEL
layout(binding = 0) uniform usamplerBuffer src_texels;
uvec4 src_4(uint i) { return texelFetch(src_texels, int(i)); }
uint src_1(uint i) { return texelFetch(src_texels, int(i >> 2))[i & 3u]; }
#else
layout(std430, binding = 0) readonly buffer Src { uvec4 src4[]; };
layout(std430, binding = 0) readonly buffer SrcWords { uint src1[]; };
uvec4 src_4(uint i) { return src4[i]; }
uint src_1(uint i) { return src1[i]; }
#endif
layout(std430, binding = 1) writeonly buffer Dst { uvec4 dst4[]; };
layout(std430, binding = 1) writeonly buffer DstWords { uint dst1[]; };
layout(std430, binding = 1) buffer DstAtomic { uint dst_atomic[]; };

void main() {
    const uint i = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < pc.count) {
        if (HALVES) {
            const uint s = pc.src_offset + i, d = pc.dst_offset + i;
            const uint bits = (atomicOr(dst_atomic[s >> 1], 0u) >> (16u * (s & 1u))) & 0xffffu;
            const uint shift = 16u * (d & 1u);
            atomicAnd(dst_atomic[d >> 1], ~(0xffffu << shift));
            atomicOr(dst_atomic[d >> 1], bits << shift);
        } else if (VEC4) {
            dst4[pc.dst_offset + i] = src_4(pc.src_offset + i);
        } else {
            dst1[pc.dst_offset + i] = src_1(pc.src_offset + i);
        }
    }
}
