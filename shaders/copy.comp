#version 450
// copy: dst[i] = src[i] for i < n_vec4, in 16-byte units. The same-device bandwidth
// baseline that benchmarks report ratios against, and a plain tensor copy. Tensor
// buffers are padded to 16 bytes, so any tensor copies as whole vec4s.
//   binding 0: readonly  uvec4 src[n_vec4]
//   binding 1: writeonly uvec4 dst[n_vec4]
//   push: CopyParams; spec 0: workgroup size; grid: ceil(n_vec4 / wg) groups, folded.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_COPY
#include "layout.glsl"
#include "params.h"

layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uvec4 dst[]; };

void main() {
    uint i = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < pc.n_vec4) {
        dst[i] = src[i];
    }
}
