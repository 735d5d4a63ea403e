#version 450
// attn_weighted_sum_reduce: out[i] = sum_s partial[s * count + i] for s < splits, in split
// order: the second pass of a weighted sum whose keys were split across workgroups.
//   binding 0: readonly float partial [splits, count]; binding 1: writeonly float out [count]
//   push: AttnWsumReduceParams; spec (by name in params.h): workgroup size
//   grid: ceil(count / workgroup size) workgroups, folded
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_WSUM_REDUCE
#include "layout.glsl"
#include "params.h"

layout(std430, binding = 0) readonly buffer Partial { float partial[]; };
layout(std430, binding = 1) writeonly buffer Out { float out_[]; };

void main() {
    const uint i = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= pc.count) {
        return;
    }
    float sum = 0.0;
    for (uint s = 0u; s < pc.splits; ++s) {
        sum += partial[s * pc.count + i];  // consecutive i, consecutive words
    }
    out_[i] = sum;
}
