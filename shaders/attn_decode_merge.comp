#version 450
// attn_decode_merge: the second pass of an attn_decode whose keys were split, where the last
// workgroup of a tile does not merge them in the same dispatch (MoltenVK, whose Metal
// orders device memory within a threadgroup only; VKATTN_DECODE=merge=two_pass): one
// workgroup per tile merges its rows' splits (attn_merge.glsl), in parallel over splits and
// output vec4s.
//   binding 0: readonly float partial results, as attn_decode.comp's binding 7
//   binding 1: writeonly float out [n_tokens, n_heads, head_dim]
//   binding 2: readonly int meta (params.h: VKATTN_META_*; the sink logits)
//   push: AttnParams; spec (by name in params.h): workgroup size; ROWS, rows per tile (a power of two)
//   grid: n_kv_heads * row_tiles workgroups, KV head fastest, folded
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define VKATTN_WANT_ATTN
#define VKATTN_MERGE_PASS
#include "layout.glsl"
#include "params.h"

const uint WG = WG_SIZE;
layout(constant_id = VKATTN_SPEC_MERGE_ROWS) const uint ROWS = 4;

layout(std430, binding = 0) readonly buffer Part { float part[]; };
layout(std430, binding = 0) readonly buffer Part4 { vec4 part4[]; };
layout(std430, binding = 1) writeonly buffer O { float out_[]; };
layout(std430, binding = 2) readonly buffer Meta { int meta[]; };

#include "attn_merge.glsl"

void main() {
    const uint n_kv = pc.n_heads / pc.group;
    const uint wg = wg_linear_id();
    const uint kv_head = wg % n_kv, row_tile = wg / n_kv;
    if (row_tile >= pc.row_tiles) {
        return;  // past the grid (folded): whole workgroup
    }
    const uint row0 = row_tile * pc.rows_per_wg;
    merge_tile(kv_head, row0, min(pc.rows_per_wg, pc.n_tokens * pc.group - row0), gl_LocalInvocationID.x);
}
