#version 450
// attn_scores: S[t, h, j] = scale * <q[t,h], k[j, kvh(h)]> (then softcap, ALiBi, mask), or
// -inf when key j is not visible to token t (other sequence; pos_j > pos_t when causal;
// pos_t - pos_j >= window).
//   binding 0: readonly q words [n_tokens, n_heads, head_dim]: f32 bits or packed f16 (Q_F16)
//   binding 1: readonly k words, element (j, g, d) at j*k_key_stride + g*k_head_stride + d
//              (K_F16 as for q)
//   binding 2: writeonly float scores [n_tokens, n_heads, n_keys]
//   binding 3: readonly float mask [n_tokens, n_keys] (when has_mask)
//   binding 4: readonly meta: q_pos, q_seq, k_pos, k_seq (int), ALiBi slopes (float bits)
//   push: AttnScoresParams; spec 0: workgroup size = keys per tile; spec 1: ROWS, most
//   rows per tile; spec 2: Q_VEC4, the query tile size; spec 3/4: Q_F16, K_F16; spec 5:
//   ALIGNED (head_dim % 4 == 0)
//   grid: n_kv_heads * row_tiles * key_tiles workgroups, folded
// A workgroup computes a tile of ROWS query rows of one kv head (all heads that share it,
// so k is read once per kv head) by workgroup-size keys, one key per invocation:
// 1. the query rows go to shared memory; 2. the keys are staged through shared memory in
// chunks of 32 dims with coalesced loads; 3. each invocation accumulates its key's dot
// products; 4. masks and biases are applied and the tile is written, coalesced.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_SCORES
#include "layout.glsl"
#include "params.h"

layout(constant_id = 1) const uint ROWS = 8;
layout(constant_id = 2) const uint Q_VEC4 = 256;  // ROWS * ceil(head_dim / 4)
layout(constant_id = 3) const bool Q_F16 = false;
layout(constant_id = 4) const bool K_F16 = false;
layout(constant_id = 5) const bool ALIGNED = true;

layout(std430, binding = 0) readonly buffer Q { uint q_words[]; };
layout(std430, binding = 0) readonly buffer Q2 { uvec2 q_words2[]; };
layout(std430, binding = 0) readonly buffer Q4 { uvec4 q_words4[]; };
layout(std430, binding = 1) readonly buffer K { uint k_words[]; };
layout(std430, binding = 1) readonly buffer K2 { uvec2 k_words2[]; };
layout(std430, binding = 1) readonly buffer K4 { uvec4 k_words4[]; };
layout(std430, binding = 2) writeonly buffer S { float scores[]; };
layout(std430, binding = 3) readonly buffer M { float mask[]; };
layout(std430, binding = 4) readonly buffer Meta { int meta[]; };

#define TL_ALIGNED ALIGNED
#define TL_WORDS q_words
#define TL_WORDS2 q_words2
#define TL_WORDS4 q_words4
#define TL_F16 Q_F16
#define TL_FN load_q
#include "tensor_load.glsl"
#undef TL_WORDS
#undef TL_WORDS2
#undef TL_WORDS4
#undef TL_F16
#undef TL_FN
#define TL_WORDS k_words
#define TL_WORDS2 k_words2
#define TL_WORDS4 k_words4
#define TL_F16 K_F16
#define TL_FN load_k
#include "tensor_load.glsl"

const uint CHUNK4 = 8u;                 // 32 dims per staged key chunk
const uint KPAD = CHUNK4 + 1u;          // odd row stride in vec4s: no bank conflicts
shared vec4 q_tile[Q_VEC4];
shared vec4 k_tile[gl_WorkGroupSize.x * KPAD];

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    uint wg = wg_linear_id();
    const uint key_tile = wg % pc.key_tiles;
    wg /= pc.key_tiles;
    const uint row_tile = wg % pc.row_tiles;
    const uint kv_head = wg / pc.row_tiles;
    if (kv_head * pc.group >= pc.n_heads) {
        return;  // whole workgroup: uniform
    }
    const uint d4 = (pc.head_dim + 3u) / 4u;
    const uint row0 = row_tile * pc.rows_per_wg;
    const uint n_rows = min(pc.rows_per_wg, pc.n_tokens * pc.group - row0);
    const uint key0 = key_tile * n_lanes;

    // 1. Query rows into shared memory (zero past head_dim).
    for (uint i = lid; i < n_rows * d4; i += n_lanes) {
        const uint r = i / d4, c = i - r * d4;
        const uint row = row0 + r;
        const uint t = row / pc.group, h = kv_head * pc.group + row % pc.group;
        q_tile[i] = load_q_4((t * pc.n_heads + h) * pc.head_dim + 4u * c, (t * pc.n_heads + h) * pc.head_dim + pc.head_dim);
    }

    float acc[ROWS];
    for (uint r = 0u; r < ROWS; ++r) {
        acc[r] = 0.0;
    }
    // 2-3. Keys in chunks of 32 dims: stage, then accumulate.
    const uint k_head = kv_head * pc.k_head_stride;
    for (uint c0 = 0u; c0 < d4; c0 += CHUNK4) {
        const uint chunk = min(CHUNK4, d4 - c0);
        barrier();  // the previous chunk has been used
        for (uint i = lid; i < n_lanes * CHUNK4; i += n_lanes) {
            const uint kk = i / CHUNK4, c = i - kk * CHUNK4;
            const uint j = key0 + kk;
            vec4 v = vec4(0.0);
            if (j < pc.n_keys && c < chunk) {
                const uint row_start = j * pc.k_key_stride + k_head;
                v = load_k_4(row_start + 4u * (c0 + c), row_start + pc.head_dim);
            }
            k_tile[kk * KPAD + c] = v;
        }
        barrier();
        for (uint c = 0u; c < chunk; ++c) {
            const vec4 kv = k_tile[lid * KPAD + c];
            for (uint r = 0u; r < ROWS; ++r) {
                if (r < n_rows) {
                    acc[r] += dot(q_tile[r * d4 + c0 + c], kv);
                }
            }
        }
    }

    // 4. Visibility, soft-capping, biases; one key per invocation, so writes coalesce.
    const uint j = key0 + lid;
    if (j >= pc.n_keys) {
        return;
    }
    const int k_pos = meta[pc.off_k_pos + j];
    const int k_seq = meta[pc.off_k_seq + j];
    for (uint r = 0u; r < ROWS; ++r) {
        if (r >= n_rows) {
            break;
        }
        const uint row = row0 + r;
        const uint t = row / pc.group, h = kv_head * pc.group + row % pc.group;
        const int q_pos = meta[pc.off_q_pos + t];
        const int distance = q_pos - k_pos;  // both in [0, 2^31): no overflow
        const bool visible = meta[pc.off_q_seq + t] == k_seq && (pc.causal == 0u || distance >= 0) &&
                             (pc.window == 0u || distance < int(pc.window));
        float s = -1.0 / 0.0;  // -inf
        if (visible) {
            s = pc.scale * acc[r];
            if (pc.softcap > 0.0) {
                s = pc.softcap * tanh(s / pc.softcap);
            }
            if (pc.has_alibi != 0u) {
                s += uintBitsToFloat(uint(meta[pc.off_slopes + h])) * float(-distance);
            }
            if (pc.has_mask != 0u) {
                s += mask[t * pc.n_keys + j];
            }
        }
        scores[(t * pc.n_heads + h) * pc.n_keys + j] = s;
    }
}
