#version 450
// attn_softmax: for each row of scores (one token, one head):
//   p_j = exp(s_j - m) / (sum_j exp(s_j - m) + exp(sink - m)),  m = max(max_j s_j, sink)
// in f32; the sink term only when has_sinks. Masked keys (-inf) get exactly 0; a row with
// no visible key gets zeros: the running max starts at -FLT_MAX, not -inf, so
// exp(-inf - m) is 0 rather than NaN, and an empty sum gives a zero reciprocal.
//   binding 0: readonly float scores [n_rows, n_keys]
//   binding 1: writeonly float probs [n_rows, n_keys] (may be the scores buffer)
//   binding 2: readonly float sinks [n_heads] (when has_sinks)
//   push: AttnSoftmaxParams; spec 0: workgroup size (a power of two); spec 1: ROW_CAP,
//   the shared row size; spec 2: IN_SHARED (n_keys <= ROW_CAP)
//   variants: VKATTN_SUBGROUPS reduces with subgroup operations (reduce.glsl)
//   grid: n_rows workgroups, folded
// IN_SHARED: one read of the row into shared memory, then max, exp and sum, and write.
// Otherwise two passes over the row: an online max and rescaled sum, then the write.
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_SOFTMAX
#include "layout.glsl"
#include "params.h"

layout(constant_id = 1) const uint ROW_CAP = 1024;
layout(constant_id = 2) const bool IN_SHARED = true;

layout(std430, binding = 0) readonly buffer S { float scores[]; };
layout(std430, binding = 1) writeonly buffer P { float probs[]; };
layout(std430, binding = 2) readonly buffer Sinks { float sinks[]; };

shared float red[gl_WorkGroupSize.x];
#define REDUCE_SCRATCH red
#include "reduce.glsl"

shared float row_tile[ROW_CAP];

const float FLT_MAX = 3.402823466e38;

void main() {
    const uint row = wg_linear_id();
    if (row >= pc.n_rows) {
        return;  // whole workgroup: uniform
    }
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    const uint base = row * pc.n_keys;
    const bool has_sink = pc.has_sinks != 0u;
    const float sink = has_sink ? sinks[row % pc.n_heads] : -FLT_MAX;

    if (IN_SHARED) {
        // 1. Load and take the max.
        float m = -FLT_MAX;
        for (uint j = lid; j < pc.n_keys; j += n_lanes) {
            const float s = scores[base + j];
            row_tile[j] = s;
            m = max(m, s);
        }
        m = max(workgroup_max(m), sink);
        // 2. Exponentials and their sum (each invocation reads back what it wrote).
        float sum = 0.0;
        for (uint j = lid; j < pc.n_keys; j += n_lanes) {
            const float e = exp(row_tile[j] - m);
            row_tile[j] = e;
            sum += e;
        }
        sum = workgroup_sum(sum) + (has_sink ? exp(sink - m) : 0.0);
        // 3. Normalize.
        const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
        for (uint j = lid; j < pc.n_keys; j += n_lanes) {
            probs[base + j] = row_tile[j] * inv;
        }
    } else {
        // 1. Online max and sum, rescaled whenever the max grows.
        float m = -FLT_MAX, sum = 0.0;
        for (uint j = lid; j < pc.n_keys; j += n_lanes) {
            const float s = scores[base + j];
            if (s > m) {
                sum = sum * exp(m - s) + 1.0;
                m = s;
            } else {
                sum += exp(s - m);
            }
        }
        const float row_max = max(workgroup_max(m), sink);
        sum = workgroup_sum(sum * exp(m - row_max)) + (has_sink ? exp(sink - row_max) : 0.0);
        // 2. Normalize.
        const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
        for (uint j = lid; j < pc.n_keys; j += n_lanes) {
            probs[base + j] = exp(scores[base + j] - row_max) * inv;
        }
    }
}
