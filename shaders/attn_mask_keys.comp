#version 450
// attn_mask_keys: the keys each query token's mask leaves (AttentionConfig::mask_keys), for
// the kernels that then read only those (attn_decode_group.comp). For token t it writes, at
// list_offset + t * (max_keys + 1), how many of its mask row's values are not -inf, then the
// first max_keys of those keys in ascending order: the order a full scan meets them in, so
// that a kernel reading the list adds the same nonzero terms in the same order. A row with more
// than max_keys keeps its full count, which tells the kernel to read every key instead:
// nothing is dropped when the promise is broken. NaN and +inf count as kept (a full scan
// would meet them too).
//   binding 0: readonly mask f32 [n_tokens, n_keys]; binding 1: the lists (the op's scratch)
//   push: AttnMaskKeysParams; spec: workgroup size
//   grid: n_tokens workgroups, folded; each invocation takes one run of a row's keys
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_MASK_KEYS
#include "layout.glsl"
#include "params.h"

layout(std430, binding = 0) readonly buffer Mask { uint mask_bits[]; };
layout(std430, binding = 1) writeonly buffer Lists { uint list[]; };

const uint NEG_INF_BITS = 0xff800000u;  // compared as bits: no fast-math may bend it
shared uint run_start[WG_SIZE];

void main() {
    const uint t = wg_linear_id();
    if (t >= pc.n_tokens) {
        return;  // whole workgroup
    }
    const uint lid = gl_LocalInvocationID.x;
    // Contiguous runs, so that a run's place in the list follows from the counts before it.
    const uint run = (pc.n_keys + WG_SIZE - 1u) / WG_SIZE;
    const uint j0 = min(lid * run, pc.n_keys), j1 = min(j0 + run, pc.n_keys);
    const uint row = t * pc.n_keys;
    uint kept = 0u;
    for (uint j = j0; j < j1; ++j) {
        kept += mask_bits[row + j] != NEG_INF_BITS ? 1u : 0u;
    }
    run_start[lid] = kept;
    barrier();
    if (lid == 0u) {  // exclusive prefix sums; the total last
        uint sum = 0u;
        for (uint i = 0u; i < WG_SIZE; ++i) {
            const uint c = run_start[i];
            run_start[i] = sum;
            sum += c;
        }
        list[pc.list_offset + t * (pc.max_keys + 1u)] = sum;
    }
    barrier();
    uint at = run_start[lid];
    const uint base = pc.list_offset + t * (pc.max_keys + 1u) + 1u;
    for (uint j = j0; j < j1 && at < pc.max_keys; ++j) {
        if (mask_bits[row + j] != NEG_INF_BITS) {
            list[base + at] = j;
            ++at;
        }
    }
}
