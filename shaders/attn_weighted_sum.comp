#version 450
// attn_weighted_sum: out[t, h, :] = sum_j probs[t, h, j] * v[j, kvh(h), :], in f32.
//   binding 0: readonly float probs [n_tokens, n_heads, n_keys]
//   binding 1: readonly v words, element (j, g, d) at j*v_key_stride + g*v_head_stride + d:
//              f32 bits or packed f16 (V_F16)
//   binding 2: writeonly float out [n_tokens, n_heads, head_dim]
//   push: AttnWsumParams; spec 0: workgroup size; spec 1: ROWS, most rows per tile;
//   spec 2: V_F16; spec 3: ALIGNED (head_dim % 4 == 0); spec 4: D4, ceil(head_dim / 4)
//   grid: n_kv_heads * row_tiles workgroups, folded
// A workgroup computes ROWS rows of one kv head (all heads sharing it: v is read once per
// kv head) for every dim. Invocations are D4 dim lanes (4 dims each, so v rows load
// coalesced) times KSPLIT key lanes. 1. A chunk of probabilities is staged in shared
// memory (a chunk where every probability is 0, such as the future of a causal row, is
// skipped); 2. each invocation accumulates its dims over its share of the chunk's keys;
// 3. the key lanes' partial sums are added in shared memory and written.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_WSUM
#include "layout.glsl"
#include "params.h"

layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const bool V_F16 = false;
layout(constant_id = 3) const bool ALIGNED = true;
layout(constant_id = 4) const uint D4 = 32;

layout(std430, binding = 0) readonly buffer P { float probs[]; };
layout(std430, binding = 1) readonly buffer V { uint v_words[]; };
layout(std430, binding = 1) readonly buffer V2 { uvec2 v_words2[]; };
layout(std430, binding = 1) readonly buffer V4 { uvec4 v_words4[]; };
layout(std430, binding = 2) writeonly buffer O { float out_[]; };

#define TL_ALIGNED ALIGNED
#define TL_WORDS v_words
#define TL_WORDS2 v_words2
#define TL_WORDS4 v_words4
#define TL_F16 V_F16
#define TL_FN load_v
#include "tensor_load.glsl"

const uint KSPLIT = gl_WorkGroupSize.x / D4;  // the host keeps D4 <= workgroup size
const uint CHUNK = 64u;  // keys per staged chunk
shared float p_tile[ROWS * CHUNK];
shared vec4 partial[ROWS * D4 * KSPLIT];
shared uint chunk_nonzero;

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    uint wg = wg_linear_id();
    const uint row_tile = wg % pc.row_tiles;
    const uint kv_head = wg / pc.row_tiles;
    if (kv_head * pc.group >= pc.n_heads) {
        return;  // whole workgroup: uniform
    }
    const uint row0 = row_tile * pc.rows_per_wg;
    const uint n_rows = min(pc.rows_per_wg, pc.n_tokens * pc.group - row0);
    const uint dl = lid % D4;   // this invocation's 4 dims
    const uint ks = lid / D4;   // and its key lane
    const bool lane_used = ks < KSPLIT;

    vec4 acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc[r] = vec4(0.0);
    }
    const uint v_head = kv_head * pc.v_head_stride;
    for (uint j0 = 0u; j0 < pc.n_keys; j0 += CHUNK) {
        const uint chunk = min(CHUNK, pc.n_keys - j0);
        // 1. Stage the chunk's probabilities, noting whether any is nonzero.
        barrier();
        if (lid == 0u) {
            chunk_nonzero = 0u;
        }
        barrier();
        for (uint i = lid; i < ROWS * CHUNK; i += n_lanes) {
            const uint r = i / CHUNK, k = i - r * CHUNK;
            float p = 0.0;
            if (r < n_rows && k < chunk) {
                const uint row = row0 + r;
                const uint t = row / pc.group, h = kv_head * pc.group + row % pc.group;
                p = probs[(t * pc.n_heads + h) * pc.n_keys + j0 + k];
            }
            p_tile[i] = p;
            if (p != 0.0) {
                chunk_nonzero = 1u;  // benign race: every writer stores 1
            }
        }
        barrier();
        if (chunk_nonzero == 0u) {
            continue;  // uniform: every invocation read the same value after the barrier
        }
        // 2. Accumulate this lane's keys of the chunk.
        if (lane_used && 4u * dl < pc.head_dim) {
            for (uint k = ks; k < chunk; k += KSPLIT) {
                const uint row_start = (j0 + k) * pc.v_key_stride + v_head;
                const vec4 v = load_v_4(row_start + 4u * dl, row_start + pc.head_dim);
                for (uint r = 0u; r < ROWS; ++r) {
                    acc[r] += p_tile[r * CHUNK + k] * v;
                }
            }
        }
    }

    // 3. Add the key lanes' partial sums and write.
    if (lane_used) {
        for (uint r = 0u; r < ROWS; ++r) {
            partial[(r * KSPLIT + ks) * D4 + dl] = acc[r];
        }
    }
    barrier();
    for (uint i = lid; i < n_rows * D4; i += n_lanes) {
        const uint r = i / D4, c = i - r * D4;
        vec4 sum = vec4(0.0);
        for (uint k = 0u; k < KSPLIT; ++k) {
            sum += partial[(r * KSPLIT + k) * D4 + c];
        }
        const uint row = row0 + r;
        const uint t = row / pc.group, h = kv_head * pc.group + row % pc.group;
        const uint o = (t * pc.n_heads + h) * pc.head_dim + 4u * c;
        for (uint e = 0u; e < 4u; ++e) {
            if (4u * c + e < pc.head_dim) {
                out_[o + e] = sum[e];
            }
        }
    }
}
