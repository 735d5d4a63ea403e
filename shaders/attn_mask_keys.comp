#version 450
// attn_mask_keys: each query token's list of the keys it may see, for the kernels that
// read only those (attn_decode_group.comp), from one of the two forms a sparse mask takes;
// or, for the kernels that read every key, a key list's mask rows. For token t a list is,
// at list_offset + t * (max_keys + 1), a count, then that many keys in ascending order
// (the order a full scan meets them in, so that a kernel reading the list adds the same
// nonzero terms in the same order); an entry past n_keys names no key.
// - MODE 0, an f32 mask [n_tokens, n_keys] (AttentionConfig::mask_keys): the keys whose
//   value is not -inf (NaN and +inf count: a full scan would meet them too). A row that
//   leaves more than max_keys keeps its full count, which tells the kernel to read every
//   key instead: nothing is dropped when the promise is broken. Each invocation counts one
//   contiguous run of the row, so that its place in the list follows from the counts
//   before it.
// - MODE 1, a key list i32 [n_tokens, max_keys] (a mask given as keys): the row sorted in
//   shared memory (bitonic, WORDS a power of two >= max_keys); entries outside [0, n_keys)
//   sort last, past the count, and a key named twice is listed once (its repeats keep
//   their places as entries past n_keys, which the kernel reads as empty keys).
// - MODE 2, a key list to mask rows [n_tokens, n_keys]: -inf, and 0 at the listed keys.
//   Workgroup w fills keys [c * CHUNK, (c + 1) * CHUNK) of token w / chunks, then zeroes
//   the listed ones among them: no two workgroups write one word.
//   binding 0: readonly mask f32 or key list i32 (as bits); binding 1: the lists (the op's
//   scratch) or the mask rows
//   push: AttnMaskKeysParams; spec: workgroup size, MODE, WORDS
//   grid: n_tokens workgroups (MODE 2: n_tokens * chunks), folded
#extension GL_GOOGLE_include_directive : require
#define VKATTN_WANT_ATTN_MASK_KEYS
#include "layout.glsl"
#include "params.h"

layout(constant_id = VKATTN_SPEC_MASK_KEYS_MODE) const uint MODE = 0u;
layout(constant_id = VKATTN_SPEC_MASK_KEYS_WORDS) const uint WORDS = 128u;  // >= WG_SIZE (set for modes 0, 1)

layout(std430, binding = 0) readonly buffer Source { uint source[]; };
// coherent: mode 2 writes a word twice from two invocations (-inf, then 0), ordered by a
// barrier; the second must land last.
layout(std430, binding = 1) coherent writeonly buffer Lists { uint list[]; };

const uint NEG_INF_BITS = 0xff800000u;  // compared as bits: no fast-math may bend it
const uint NO_KEY = 0xffffffffu;        // past every n_keys: sorts last
const uint CHUNK = WG_SIZE * 32u;       // MODE 2: keys a workgroup fills
shared uint sh[WORDS];                  // MODE 0: each run's start; MODE 1: the row

// Key list entry |i| of token |t| (i32 bits) as a key, or NO_KEY.
uint listed_key(uint t, uint i) {
    const uint j = i < pc.max_keys ? source[t * pc.max_keys + i] : NO_KEY;
    return j < pc.n_keys ? j : NO_KEY;  // -1 and every negative entry are >= 2^31 as bits
}

void mask_to_list(uint t, uint lid) {
    const uint run = (pc.n_keys + WG_SIZE - 1u) / WG_SIZE;
    const uint j0 = min(lid * run, pc.n_keys), j1 = min(j0 + run, pc.n_keys);
    const uint row = t * pc.n_keys;
    uint kept = 0u;
    for (uint j = j0; j < j1; ++j) {
        kept += source[row + j] != NEG_INF_BITS ? 1u : 0u;
    }
    sh[lid] = kept;
    barrier();
    if (lid == 0u) {  // exclusive prefix sums; the total last
        uint sum = 0u;
        for (uint i = 0u; i < WG_SIZE; ++i) {
            const uint c = sh[i];
            sh[i] = sum;
            sum += c;
        }
        list[pc.list_offset + t * (pc.max_keys + 1u)] = sum;
    }
    barrier();
    uint at = sh[lid];
    const uint base = pc.list_offset + t * (pc.max_keys + 1u) + 1u;
    for (uint j = j0; j < j1 && at < pc.max_keys; ++j) {
        if (source[row + j] != NEG_INF_BITS) {
            list[base + at] = j;
            ++at;
        }
    }
}

void sort_list(uint t, uint lid) {
    for (uint i = lid; i < WORDS; i += WG_SIZE) {
        sh[i] = listed_key(t, i);
    }
    barrier();
    for (uint k = 2u; k <= WORDS; k <<= 1u) {
        for (uint h = k >> 1u; h > 0u; h >>= 1u) {
            for (uint i = lid; i < WORDS; i += WG_SIZE) {
                const uint o = i ^ h;
                if (o > i) {
                    const uint a = sh[i], b = sh[o];
                    if ((a > b) == ((i & k) == 0u)) {  // ascending where bit k of i is 0
                        sh[i] = b;
                        sh[o] = a;
                    }
                }
            }
            barrier();
        }
    }
    // Keys first, ascending, then NO_KEY: the count is where the keys end.
    const uint base = pc.list_offset + t * (pc.max_keys + 1u);
    if (lid == 0u && sh[0] == NO_KEY) {
        list[base] = 0u;
    }
    for (uint i = lid; i < pc.max_keys; i += WG_SIZE) {
        const uint j = sh[i];
        list[base + 1u + i] = i > 0u && sh[i - 1u] == j ? NO_KEY : j;
        if (j != NO_KEY && (i + 1u == WORDS || sh[i + 1u] == NO_KEY)) {
            list[base] = i + 1u;
        }
    }
}

void list_to_mask(uint w, uint lid) {
    const uint chunks = (pc.n_keys + CHUNK - 1u) / CHUNK;
    const uint t = w / chunks, c0 = (w - t * chunks) * CHUNK, c1 = min(c0 + CHUNK, pc.n_keys);
    for (uint j = c0 + lid; j < c1; j += WG_SIZE) {
        list[t * pc.n_keys + j] = NEG_INF_BITS;
    }
    memoryBarrierBuffer();
    barrier();
    for (uint i = lid; i < pc.max_keys; i += WG_SIZE) {
        const uint j = listed_key(t, i);
        if (j >= c0 && j < c1) {
            list[t * pc.n_keys + j] = 0u;  // 0.0
        }
    }
}

void main() {
    const uint w = wg_linear_id(), lid = gl_LocalInvocationID.x;
    const uint chunks = MODE == 2u ? (pc.n_keys + CHUNK - 1u) / CHUNK : 1u;
    if (w >= pc.n_tokens * chunks) {
        return;  // whole workgroup
    }
    if (MODE == 0u) {
        mask_to_list(w, lid);
    } else if (MODE == 1u) {
        sort_list(w, lid);
    } else {
        list_to_mask(w, lid);
    }
}
