#version 450
// attn_scores: S[t, h, j] = scale * <q[t,h], k[j, kvh(h)]> (then softcap, ALiBi, mask), or
// -inf when key j is not visible to token t (other sequence; pos_j > pos_t when causal;
// pos_t - pos_j >= window).
//   binding 0: readonly q words [n_tokens, n_heads, head_dim]: f32 bits or packed f16 (Q_F16)
//   binding 1: readonly k words, element (j, g, d) at s*k_seq_stride + j*k_key_stride +
//              g*k_head_stride + d, s the tile's sequence for a KV cache, else 0 (K_TYPE)
//   binding 2: writeonly float scores [n_tokens, n_heads, n_keys]
//   binding 3: readonly float mask [n_tokens, n_keys] (when has_mask)
//   binding 4: readonly int meta: positions, sequence ids, ALiBi slopes, RoPE frequencies
//              (params.h: VKATTN_META_*); the host keeps a tile within one sequence when
//              keys come from a cache.
//   binding 5: readonly int key positions (params.h): the keys' positions and sequences,
//              or a cache's slot table
//   push: AttnScoresParams; spec (by name in params.h): workgroup size = keys per tile; ROWS, most
//   rows per tile; Q_VEC4, the query tile size; Q_F16, K_TYPE (0 f32, 1 f16, 2 q8_0, 3 q4_0);
//   VEC: rows start on 16 bytes (head_dim % 4 == 0 for f32 k, % 8 for f16 k);
//   KEYS, keys per invocation; ROPE_ON_READ (KvRope::on_read: q and each key are
//   rotated by their in-cache positions as they are read); ROPE_INTERLEAVED;
//   S_VEC4 (n_keys % 4 == 0: scores are stored 4 keys at a time); SG
//   variants: VKATTN_TEXEL reads q and k through texel buffers; with VKATTN_SHUFFLE too
//   (f16 k; the pipeline requires subgroups of SG full lanes), the lanes of a subgroup
//   fetch the query texels of a step between them and hand them round with
//   subgroupShuffle, rather than every lane fetching every row's (on CPU devices a texel
//   fetch costs tens of instructions, a shuffle one)
//   grid: n_kv_heads * row_tiles * key_tile_stride workgroups (KEYS * workgroup size keys
//   each), folded
// A workgroup computes ROWS query rows of one kv head (all heads that share it, so k is
// read once per kv head) against KEYS * workgroup-size keys:
// 1. the query rows go to shared memory, where every invocation reads the same address
//    (the texel variant reads them where it uses them instead);
// 2. each invocation decides which rows see each of its KEYS consecutive keys; one that
//    sees none skips its loads (a tile no row sees, the future of a causal block, costs
//    nothing);
// 3. each invocation streams its KEYS key rows in 16-byte units (on GPUs each lane walks
//    its own rows through L1) into a ROWS x KEYS block of dot products;
// 4. biases are applied and the scores are written.
#extension GL_GOOGLE_include_directive : require
#ifdef VKATTN_SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#endif
#define VKATTN_WANT_ATTN_SCORES
#include "layout.glsl"
#include "params.h"
#include "rope_phase.glsl"
#include "fma_dot.glsl"

layout(constant_id = VKATTN_SPEC_SCORES_ROWS) const uint ROWS = 8;
layout(constant_id = VKATTN_SPEC_SCORES_Q_VEC4) const uint Q_VEC4 = 256;  // ROWS * ceil(head_dim / 4)
layout(constant_id = VKATTN_SPEC_SCORES_Q_F16) const bool Q_F16 = false;
layout(constant_id = VKATTN_SPEC_SCORES_K_TYPE) const uint K_TYPE = VKATTN_KV_F32;  // VKATTN_KV_*
const bool K_WIDE = K_TYPE != VKATTN_KV_F32;  // 8 elements per 16 bytes or fewer: loaded 8 at a time
layout(constant_id = VKATTN_SPEC_SCORES_VEC) const bool VEC = true;
layout(constant_id = VKATTN_SPEC_SCORES_KEYS) const uint KEYS = 4;  // keys per invocation
LEAN_FIXED(VKATTN_SPEC_SCORES_ROPE_ON_READ) const bool ROPE_ON_READ = false;
layout(constant_id = VKATTN_SPEC_SCORES_ROPE_INTERLEAVED) const bool ROPE_INTERLEAVED = false;
layout(constant_id = VKATTN_SPEC_SCORES_S_VEC4) const bool S_VEC4 = false;  // n_keys % 4 == 0 (KEYS is 4 or 8)
layout(constant_id = VKATTN_SPEC_SCORES_SG) const uint SG = 8;  // VKATTN_SHUFFLE: the (required) subgroup size

layout(std430, binding = 2) writeonly buffer S { float scores[]; };
layout(std430, binding = 2) writeonly buffer S4 { vec4 scores4[]; };
layout(std430, binding = 3) readonly buffer M { float mask[]; };
layout(std430, binding = 4) readonly buffer Meta { int meta[]; };
layout(std430, binding = 5) readonly buffer KeyPos { int kpos[]; };
#include "attn_meta.glsl"

// q rows start on 4 elements whenever head_dim % 4 == 0, which VEC implies; k rows start
// on 16 bytes when VEC.
#define ATTN_Q_ALIGNED VEC
#define ATTN_K_ALIGNED VEC
#define ATTN_NO_V
#include "attn_inputs.glsl"

// With texel reads the query values are fetched where they are used (on CPU devices a
// shared-memory read costs a loop over lanes, a texel fetch a few vector loads); the
// tile is kept for ROPE_ON_READ, which rotates the rows once.
#ifdef VKATTN_TEXEL
const bool Q_DIRECT = !ROPE_ON_READ;
#else
const bool Q_DIRECT = false;
#endif
#include "attn_rows.glsl"
#include "attn_visible.glsl"
shared vec4 q_tile[Q_VEC4];
#include "attn_rope_read.glsl"
#include "attn_dot.glsl"

void main() {
    const uint lid = gl_LocalInvocationID.x;
    const uint n_lanes = gl_WorkGroupSize.x;
    read_meta_offsets();
    uint key_tile, kv_head, row0, n_rows;
    if (!tile_place(pc.key_tile_stride, key_tile, kv_head, row0, n_rows)) {
        return;  // whole workgroup: uniform
    }
    const uint d4 = (pc.head_dim + 3u) / 4u;

    // Where each row starts in q, its token's position and sequence (rows past the tile
    // repeat the last one: their results are never written).
    uint tok[ROWS], head[ROWS], q_row[ROWS];
    int q_pos[ROWS], q_seq[ROWS];
    tile_queries(row0, n_rows, kv_head, tok, head, q_row, q_pos, q_seq);
    // With cache keys a tile holds one sequence's rows and reads that sequence's keys.
    const uint seq0 = pc.k_meta_stride != 0u ? uint(q_seq[0]) : 0u;
    if (pc.skip_past_bound != 0u && key_tile * n_lanes * KEYS >= key_bound(seq0)) {
        return;  // attention()'s temporary: nothing reads scores past the bound (uniform)
    }
    // 1. Query rows into shared memory (zero past head_dim), unless read directly.
    for (uint i = Q_DIRECT ? n_rows * d4 : lid; i < n_rows * d4; i += n_lanes) {
        const uint r = i / d4, c = i - r * d4;
        q_tile[i] = load_q_4(q_row[r] + 4u * c, q_row[r] + pc.head_dim);
    }
    if (!Q_DIRECT) {
        // Only then: on CPU devices a barrier turns the kernel into coroutines, and without
        // one the scores run 6-9% faster on lavapipe.
        barrier();
    }
    if (ROPE_ON_READ) {
        rope_rotate_query_tile(n_rows, d4, tok, lid, n_lanes);  // by their in-cache positions
        barrier();
    }

    const uint key_end = key_bound(seq0);  // keys at or past it are empty slots: not read
    // A workgroup takes key tiles key_tile, key_tile + key_tile_stride, ... (the host
    // sizes the grid for the device when the tiles past the bound are skipped, so a cache
    // far larger than what it holds launches no empty workgroups), up to the bound.
    for (uint kt = key_tile; kt < pc.key_tiles; kt += pc.key_tile_stride) {
        if (pc.skip_past_bound != 0u && kt * n_lanes * KEYS >= key_end) {
            break;  // uniform
        }
        // 2. Which rows see each of this invocation's KEYS consecutive keys, and whether it
        //    sees any: an invocation that sees none skips its loads, and so does a subgroup or
        //    a whole tile (the future of a causal block) whose invocations all see none.
        const uint key0 = (kt * n_lanes + lid) * KEYS;
        bool work = false;
        uint visible[KEYS];
        int key_pos[KEYS];
        for (uint i = 0u; i < KEYS; ++i) {
            visible[i] = 0u;
            key_pos[i] = 0;
            const uint j = key0 + i;
            if (j >= key_end) {
                continue;
            }
            const int k_pos = key_position(seq0, j);
            key_pos[i] = k_pos;
            const int k_seq = key_sequence(seq0, j, k_pos);
            for (uint r = 0u; r < ROWS; ++r) {
                if (r < n_rows && key_visible(q_pos[r], q_seq[r], k_pos, k_seq)) {
                    visible[i] |= 1u << r;
                }
            }
            work = work || visible[i] != 0u;
        }

        // 3. Dot products: a ROWS x KEYS block per invocation, so each query value read from
        //    shared memory serves KEYS keys. Keys past n_keys read key 0 (results unused).
        float acc[ROWS_KEYS];
        for (uint i = 0u; i < ROWS_KEYS; ++i) {
            acc[i] = 0.0;
        }
        uint k_row[KEYS];
        const uint first = key0 < pc.n_keys ? key0 : 0u, last = min(first + KEYS - 1u, pc.n_keys - 1u);
        KV_ROW_RUN(k_row, KEYS, seq0, kv_head, first, last, pc.k_seq_stride, pc.k_head_stride, pc.k_key_stride)
        if (ROPE_ON_READ) {
            // Each key pair is rotated by the key's in-cache position as it is read.
            uint cpos[KEYS];
            for (uint i = 0u; i < KEYS; ++i) {
                cpos[i] = key_cache_position(seq0, key_pos[i]);  // keys past n_keys: unused
            }
            ROPE_READ_DOTS(acc, d4, k_row, cpos, work)
        } else if (VEC && K_WIDE) {
#ifdef VKATTN_SHUFFLE
            // Lanes hand values round, so the whole subgroup runs the loop if any lane works.
            const uint n8 = subgroupAny(work) ? pc.head_dim / 8u : 0u;
            // The step's query texels: TPR per row (8 dims: two texels of f32, one of f16),
            // NT in all; lane l holds texels l, l + SG, ... (the last repeated past NT).
            const uint TPR = Q_F16 ? 1u : 2u, NT = ROWS * TPR, NSLOT = (NT + SG - 1u) / SG;
            const uint lane = gl_SubgroupInvocationID;
            uint my_q[(ROWS * 2u + SG - 1u) / SG];
            for (uint k = 0u; k < NSLOT; ++k) {
                const uint n = min(lane + k * SG, NT - 1u);
                uint base = 0u;
                for (uint r = 0u; r < ROWS; ++r) {
                    base = r == n / TPR ? q_row[r] : base;  // q_row[n / TPR] without indexing
                }
                my_q[k] = base / (Q_F16 ? 8u : 4u) + n % TPR;
            }
#else
            const uint n8 = work ? pc.head_dim / 8u : 0u;  // 8 halves per 16 bytes
#endif
            for (uint c = 0u; c < n8; ++c) {
                vec4 a[KEYS], b[KEYS];
                for (uint i = 0u; i < KEYS; ++i) {
                    load_k_8(k_row[i] + 8u * c, k_row[i] + pc.head_dim, a[i], b[i]);
                }
#ifdef VKATTN_SHUFFLE
                uvec4 held[(ROWS * 2u + SG - 1u) / SG];
                for (uint k = 0u; k < NSLOT; ++k) {
                    held[k] = texelFetch(q_texels, int(my_q[k] + TPR * c));
                }
#endif
                for (uint r = 0u; r < ROWS; ++r) {
                    vec4 qa, qb;
#ifdef VKATTN_SHUFFLE
                    const uint n0 = r * TPR;
                    const uvec4 t0 = subgroupShuffle(held[n0 / SG], n0 % SG);
                    if (Q_F16) {
                        qa = vec4(unpackHalf2x16(t0.x), unpackHalf2x16(t0.y));
                        qb = vec4(unpackHalf2x16(t0.z), unpackHalf2x16(t0.w));
                    } else {
                        qa = uintBitsToFloat(t0);
                        qb = uintBitsToFloat(subgroupShuffle(held[(n0 + 1u) / SG], (n0 + 1u) % SG));
                    }
#else
                    query8(q_row[r], r, c, d4, qa, qb);
#endif
                    for (uint i = 0u; i < KEYS; ++i) {
                        acc[r * KEYS + i] = fma_dot(qb, b[i], fma_dot(qa, a[i], acc[r * KEYS + i]));
                    }
                }
            }
        } else if (VEC) {
            const uint n4 = work ? d4 : 0u;
            for (uint c = 0u; c < n4; ++c) {
                dot_step4(k_row, q_row, c, d4, acc);
            }
        } else {
            const uint n = work ? pc.head_dim : 0u;
            for (uint d = 0u; d < n; ++d) {
                dot_step1(k_row, q_row, d, d4, acc);
            }
        }

        // 4. Scale, soft-capping and biases on visible entries (attn_visible.glsl), -inf
        //    elsewhere; written 16 bytes at a time when rows start on 4 keys (S_VEC4), each
        //    store's address computed once.
        for (uint r = 0u; r < ROWS; ++r) {
            if (r >= n_rows) {
                break;  // uniform
            }
            const uint out_row = (tok[r] * pc.n_heads + head[r]) * pc.n_keys;
            const float slope = alibi_slope(head[r]);
            float sc[KEYS];
            for (uint i = 0u; i < KEYS; ++i) {
                sc[i] = (visible[i] & (1u << r)) != 0u
                            ? visible_score(acc[r * KEYS + i], tok[r], q_pos[r], key0 + i, key_pos[i], slope)
                            : -1.0 / 0.0;  // -inf
            }
            for (uint i = 0u; i < KEYS; i += S_VEC4 ? 4u : 1u) {
                if (key0 + i >= pc.n_keys) {
                    break;
                }
                if (S_VEC4) {
                    scores4[(out_row + key0 + i) / 4u] = vec4(sc[i], sc[i + 1u], sc[i + 2u], sc[i + 3u]);
                } else {
                    scores[out_row + key0 + i] = sc[i];
                }
            }
        }
    }
}
