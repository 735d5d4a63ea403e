#version 450
// kv_blocks: a paged cache's copy-on-write. For each (from, to) pair, block to's rows of K
// (or V) become block from's, exactly as stored: block_words words each (f32 or f16
// elements, or a quantized cache's codes), then for a quantized cache its block_halves f16
// scales from word |scales| on, each half replaced with atomics (two blocks may share a
// scale word). |to| blocks are free blocks the host just took, never a |from| of the same
// dispatch, so no invocation reads what another writes; a scale word may still hold a
// |from| half and a |to| half (blocks of one slot and an odd number of scales), so scales
// are read with atomics too: a plain read beside another invocation's atomics on the word
// is a data race in Vulkan's memory model.
//   binding 0: the cache's K or V words; binding 1: readonly int pairs[2 * n_pairs]
//   push: KvBlocksParams; spec (by name in params.h): workgroup size
//   grid: n_pairs * ceil((block_words + block_halves) / workgroup size) workgroups, folded
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_KV_BLOCKS
#include "layout.glsl"
#include "params.h"

layout(std430, binding = 0) buffer Cache { uint words[]; };
layout(std430, binding = 1) readonly buffer Pairs { int pairs[]; };

void main() {
    const uint per_pair = pc.block_words + pc.block_halves;
    const uint id = wg_linear_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint pair = id / per_pair, i = id % per_pair;
    if (pair >= pc.n_pairs) {
        return;
    }
    const uint from = uint(pairs[2u * pair]), to = uint(pairs[2u * pair + 1u]);
    if (i < pc.block_words) {
        words[to * pc.block_words + i] = words[from * pc.block_words + i];
        return;
    }
    const uint h = i - pc.block_words;
    const uint s = from * pc.block_halves + h, d = to * pc.block_halves + h;
    const uint bits = (atomicOr(words[pc.scales + (s >> 1)], 0u) >> (16u * (s & 1u))) & 0xffffu;
    const uint shift = 16u * (d & 1u);
    atomicAnd(words[pc.scales + (d >> 1)], ~(0xffffu << shift));
    atomicOr(words[pc.scales + (d >> 1)], bits << shift);
}
