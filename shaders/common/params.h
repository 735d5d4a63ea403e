// Push-constant blocks, valid both as GLSL and as C++ so the layout is written once.
// The C++ side static_asserts sizes in src/vulkan/ops/*.cpp. Each shader defines
// VKATTN_WANT_<NAME> for the one block it uses (GLSL allows one push-constant block).
#ifndef VKATTN_PARAMS_H
#define VKATTN_PARAMS_H

#ifdef __cplusplus
#include <cstdint>
namespace vkattn::shader {
using uint = std::uint32_t;
#define VKATTN_PUSH_CONSTANTS(Name) struct Name
#define VKATTN_PC_INSTANCE
#else
#define VKATTN_PUSH_CONSTANTS(Name) layout(push_constant) uniform Name
#define VKATTN_PC_INSTANCE pc
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_COPY)
VKATTN_PUSH_CONSTANTS(CopyParams) {
    uint count;         // units to copy (16 bytes, or words)
    uint src_offset;    // in units
    uint dst_offset;
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ROPE)
VKATTN_PUSH_CONSTANTS(RopeParams) {
    uint n_tokens;
    uint n_heads_q;         // heads of binding 0
    uint n_heads_k;         // heads of binding 1; 0 when one tensor is rotated
    uint head_dim;          // even
    uint rotary_dim;        // even, <= head_dim - rotary_offset; other dims pass through untouched
    uint units_per_row;     // see shaders/common/rope_unit.glsl
    uint heads_per_wg;      // of the q heads followed by the k heads of one token
    uint wgs_per_token;     // ceil((n_heads_q + n_heads_k) / heads_per_wg)
    float attention_factor; // multiplies the rotated dims (YaRN mscale); 1 otherwise
    uint mrope;             // VKATTN_MROPE_*: one position per token, or M-RoPE's (t, h, w)
                            // per token in contiguous or interleaved sections
    uint mrope_t;           // M-RoPE: rotary pairs of each position
    uint mrope_h;
    uint mrope_w;
    uint rotary_offset;     // even: the rotated dims are [rotary_offset, rotary_offset + rotary_dim)
} VKATTN_PC_INSTANCE;
#endif

// Attention. Rows of a kv head's group are (token, head in group) pairs, row = t * group + i,
// head = kv_head * group + i; a workgroup takes rows_per_wg consecutive rows.
// The scores and fused kernels read two bindings of 32-bit ints besides the tensors:
// - meta: first these word offsets, then the arrays they point at: q_pos, q_seq (n_tokens
//   each); for keys from a cache with KvRope::on_read, the ring (n_sinks, then each
//   sequence's oldest ring position); ALiBi slopes (float bits, n_heads); the queries'
//   in-cache positions (on_read); sink logits (float bits, n_heads); RoPE frequencies
//   (rope_phase.glsl's (lo, hi) turns, rotary_dim / 2 pairs); the query temperature t(pos)
//   of each token (float bits; its offset is 0 without one). All of it is O(tokens +
//   heads): a list's parameters.
// - key positions: for plain keys k_pos then k_seq (n_keys each), a list's parameters; for
//   keys from a cache, the cache's slot table on the device (k_meta_stride = capacity
//   entries per sequence, -1 for an empty slot), which kv_append writes as it runs, so
//   that recording or replaying an op over a cache costs the host nothing per slot.
//   After the n_seqs * capacity entries come each sequence's occupancy bound (k_bound):
//   one past its last occupied slot, so that kernels read no key at or past it. kv_append
//   raises it (atomicMax) as it fills slots; the host writes it with the table after
//   reset, truncate and restore; kv_copy_sequence copies it with the entries.
//   A paged cache (spec constant VKATTN_SPEC_KV_PAGE = log2(block_size) + 1) follows each
//   sequence's capacity (n_keys) entries with its block table (capacity / block_size
//   words: the block of each run of block_size slots), so k_meta_stride is capacity plus
//   that; kv_row.glsl reads a key's row there. kv_append writes the table as it
//   fills runs; kv_copy_sequence copies it with the entries.
// Offsets live there rather than in push constants, which stay well inside the 128 bytes
// every device has.
#define VKATTN_META_Q_POS 0
#define VKATTN_META_Q_SEQ 1
#define VKATTN_META_RING 2
#define VKATTN_META_SLOPES 3
#define VKATTN_META_Q_CPOS 4
#define VKATTN_META_SINKS 5
#define VKATTN_META_TURNS 6
#define VKATTN_META_Q_TEMP 7  // 0: no query temperature
#define VKATTN_META_HEADER 8
#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_SCORES)
VKATTN_PUSH_CONSTANTS(AttnScoresParams) {
    uint n_tokens;
    uint n_heads;
    uint n_keys;
    uint head_dim;
    uint group;           // n_heads / n_kv_heads
    uint rows_per_wg;
    uint row_tiles;       // ceil(n_tokens * group / rows_per_wg)
    uint key_tiles;       // ceil(n_keys / workgroup size)
    uint k_key_stride;    // elements between keys of k
    uint k_head_stride;   // elements between kv heads of k
    uint k_seq_stride;    // elements between sequences of a cache (token t reads q_seq[t]'s)
    uint k_meta_stride;   // key positions between sequences (the cache's capacity); 0 for plain keys
    float scale;
    float softcap;        // 0: off
    uint causal;
    uint window;          // 0: none
    uint has_mask;
    uint has_alibi;
    uint rotary_dim;      // ROPE_ON_READ: dims rotated
    uint k_scales;        // q8_0/q4_0 k: word offset of the scales
    uint k_bound;         // keys of a cache: word offset of each sequence's occupancy bound in
                          // the key positions binding; 0 for plain keys (all n_keys count)
    uint skip_past_bound; // 1: attention()'s own temporary: workgroups past the bound write nothing
    uint chunk;           // 0: none; else keys in the query's chunk of this many positions only
    uint window_symmetric;  // 1: the window looks both ways (|pos_t - pos_j| <= window / 2)
    uint key_tile_stride; // workgroups per row tile: each takes every key_tile_stride-th key tile
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_SOFTMAX)
VKATTN_PUSH_CONSTANTS(AttnSoftmaxParams) {
    uint n_rows;          // n_tokens * n_heads
    uint n_heads;
    uint n_keys;
    uint has_sinks;
    uint bound_offset;    // VKATTN_BOUND: word offset of the occupancy bounds in the slot table
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_WSUM)
VKATTN_PUSH_CONSTANTS(AttnWsumParams) {
    uint n_tokens;
    uint n_heads;
    uint n_keys;
    uint head_dim;
    uint group;
    uint rows_per_wg;
    uint row_tiles;
    uint v_key_stride;
    uint v_head_stride;
    uint v_seq_stride;    // elements between sequences of a cache; 0 for plain values
    uint off_q_seq;       // word offset of the query sequence ids in the meta binding
    uint key_splits;      // workgroups per row tile; split s takes keys [s k, s k + k) + n key_splits k
                          // for n = 0, 1, ... below n_keys, k = keys_per_split
    uint keys_per_split;  // a multiple of 8
    uint out_split_stride;  // elements between the splits' partial outputs (0 when 1 split)
    uint v_scales;        // q8_0/q4_0 v: word offset of the scales
    uint bound_offset;    // VKATTN_BOUND: word offset of the occupancy bounds in the slot table
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_WSUM_REDUCE)
VKATTN_PUSH_CONSTANTS(AttnWsumReduceParams) {
    uint count;   // elements of out
    uint splits;  // partial sums per element, count elements apart
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN)
VKATTN_PUSH_CONSTANTS(AttnParams) {
    uint n_tokens;
    uint n_heads;
    uint n_keys;
    uint head_dim;
    uint group;
    uint rows_per_wg;
    uint row_tiles;
    uint key_splits;      // workgroups per row tile, each over its own range of keys
    uint k_key_stride;    // elements between keys, kv heads and sequences
    uint k_head_stride;
    uint k_seq_stride;
    uint k_meta_stride;   // key positions between sequences (the cache's capacity); 0 for plain keys
    float scale;
    float softcap;
    uint causal;
    uint window;
    uint has_mask;
    uint has_alibi;
    uint keys_per_split;  // a multiple of the keys a workgroup takes per step
    uint has_sinks;
    uint ml_offset;       // key_splits > 1: word offset of the splits' (max, sum) pairs
    uint rotary_dim;      // ROPE_ON_READ: dims rotated
    uint k_scales;        // q8_0/q4_0 k and v: word offsets of the scales
    uint v_scales;
    uint k_bound;         // as AttnScoresParams::k_bound
    uint counter_offset;  // attn_decode's in-dispatch merge: word offset of its counters in meta
    uint chunk;           // as AttnScoresParams
    uint window_symmetric;
    uint v_head_dim;      // V's rows (and out's): head_dim, or their own width (DeepSeek: 128 under 192)
    uint v_key_stride;    // V's elements between values, kv heads and sequences (K's for
    uint v_head_stride;   // a latent cache, whose V is the start of each K row)
    uint v_seq_stride;
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_MASK_KEYS)
VKATTN_PUSH_CONSTANTS(AttnMaskKeysParams) {
    uint n_tokens;
    uint n_keys;       // the mask's row length
    uint max_keys;     // the list's room per token: mask_keys, or a key list's width
    uint list_offset;  // word offset of token 0's count, then its list, in binding 1
} VKATTN_PC_INSTANCE;
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_ATTN_FUSED_COMBINE)
VKATTN_PUSH_CONSTANTS(AttnFusedCombineParams) {
    uint n_rows;          // n_tokens * n_heads
    uint n_heads;
    uint head_dim;
    uint splits;
    uint has_sinks;
    uint ml_offset;
} VKATTN_PC_INSTANCE;
#endif

// kv_append.comp's rotating variant adds these to KvAppendParams: RoPE on q and k first
// (RopeParams' meaning). One list for the shader's block and the host's struct below.
#define VKATTN_KV_ROPE_FIELDS \
    uint n_heads_q;           \
    uint rotary_dim;          \
    uint rotary_offset;       \
    uint units_per_row;       \
    float attention_factor;

#if defined(__cplusplus) || defined(VKATTN_WANT_KV_APPEND)
VKATTN_PUSH_CONSTANTS(KvAppendParams) {
    uint n_tokens;
    uint n_kv_heads;
    uint head_dim;
    uint capacity;        // slots per sequence (dst_rows = seq * capacity + slot)
    uint dst_scales;      // q8_0/q4_0 caches: word offset of the scales
    uint write_slots;     // 1: also write each kept token's position into the slot table
    uint bound_offset;    // write_slots: word offset of the sequences' occupancy bounds in it
    uint page;            // a paged cache: log2(block_size) + 1 (0: a ring; capacity is then
                          // the slot-table words per sequence)
    uint table;           // page: the block table's word offset in a sequence's entries
#ifdef VKATTN_KV_ROPE
    VKATTN_KV_ROPE_FIELDS
#endif
} VKATTN_PC_INSTANCE;
#endif
#ifdef __cplusplus
// The push constants of kv_append.comp's VKATTN_KV_ROPE variant: KvAppendParams, then the
// fields that variant adds to it.
struct KvRopeAppendParams {
    KvAppendParams append;
    VKATTN_KV_ROPE_FIELDS
};
#endif

#if defined(__cplusplus) || defined(VKATTN_WANT_KV_BLOCKS)
VKATTN_PUSH_CONSTANTS(KvBlocksParams) {
    uint n_pairs;         // (from, to) block pairs
    uint block_words;     // words of a block's rows (a quantized cache: its codes)
    uint block_halves;    // a quantized cache: a block's f16 scales; 0 otherwise
    uint scales;          // their word offset
} VKATTN_PC_INSTANCE;
#endif

#ifdef __cplusplus
}  // namespace vkattn::shader
#endif
#undef VKATTN_PUSH_CONSTANTS
#undef VKATTN_PC_INSTANCE
#undef VKATTN_KV_ROPE_FIELDS
// Codes the host passes and the kernels compare, named once (unsigned in both languages).
// A K/V tensor's dtype (the *_TYPE spec constants; kv_type_code in src/vulkan/dispatch.hpp):
#define VKATTN_KV_F32 0u
#define VKATTN_KV_F16 1u
#define VKATTN_KV_Q8_0 2u
#define VKATTN_KV_Q4_0 3u
// Values per q8_0 / q4_0 block along a row, one f16 scale each (kQuantBlock in
// src/common/shape_math.hpp).
#define VKATTN_QUANT_BLOCK 32u
// What one invocation of rope.comp owns (VKATTN_SPEC_ROPE_UNIT; rope_unit.glsl says which
// part of a row each is):
#define VKATTN_ROPE_UNIT_VEC4 0u
#define VKATTN_ROPE_UNIT_PAIR 1u
#define VKATTN_ROPE_UNIT_PAIR2 2u
#define VKATTN_ROPE_UNIT_ROW 3u
// RopeParams::mrope:
#define VKATTN_MROPE_NONE 0u
#define VKATTN_MROPE_CONTIGUOUS 1u
#define VKATTN_MROPE_INTERLEAVED 2u
// Specialization constants by kernel: constant_id values, named once for the shaders
// (layout(constant_id = ...)) and the host (spec() in src/vulkan/dispatch.hpp). Id 0 is
// every kernel's workgroup size (layout.glsl); id 24 every attention kernel's paging
// (kv_row.glsl: 0 for plain keys and a ring cache, log2(block_size) + 1 for a paged one).
#define VKATTN_SPEC_WG_SIZE 0
#define VKATTN_SPEC_KV_PAGE 24
// copy.comp
#define VKATTN_SPEC_COPY_VEC4 1
#define VKATTN_SPEC_COPY_HALVES 2
// rope.comp
#define VKATTN_SPEC_ROPE_HALF_ROT 1
#define VKATTN_SPEC_ROPE_UNIT 2
#define VKATTN_SPEC_ROPE_INTERLEAVED 3
// attn_scores.comp
#define VKATTN_SPEC_SCORES_ROWS 1
#define VKATTN_SPEC_SCORES_Q_VEC4 2
#define VKATTN_SPEC_SCORES_Q_F16 3
#define VKATTN_SPEC_SCORES_K_TYPE 4
#define VKATTN_SPEC_SCORES_VEC 5
#define VKATTN_SPEC_SCORES_KEYS 6
#define VKATTN_SPEC_SCORES_ROPE_ON_READ 7
#define VKATTN_SPEC_SCORES_ROPE_INTERLEAVED 8
#define VKATTN_SPEC_SCORES_S_VEC4 9
#define VKATTN_SPEC_SCORES_SG 10
// attn_softmax.comp
#define VKATTN_SPEC_SOFTMAX_ROW_CAP 1
#define VKATTN_SPEC_SOFTMAX_IN_SHARED 2
#define VKATTN_SPEC_SOFTMAX_VEC4 3
#define VKATTN_SPEC_SOFTMAX_SUBGROUP_ROWS 4
// attn_weighted_sum.comp
#define VKATTN_SPEC_WSUM_ROWS 1
#define VKATTN_SPEC_WSUM_V_TYPE 2
#define VKATTN_SPEC_WSUM_VEC 3
#define VKATTN_SPEC_WSUM_P_VEC4 4
#define VKATTN_SPEC_WSUM_KEY_GROUPS 5
#define VKATTN_SPEC_WSUM_EIGHT 6
// attn_fused.comp
#define VKATTN_SPEC_FUSED_ROWS 1
#define VKATTN_SPEC_FUSED_Q_VEC4 2
#define VKATTN_SPEC_FUSED_Q_F16 3
#define VKATTN_SPEC_FUSED_K_TYPE 4
#define VKATTN_SPEC_FUSED_V_TYPE 5
#define VKATTN_SPEC_FUSED_K_VEC 6
#define VKATTN_SPEC_FUSED_V_VEC 7
#define VKATTN_SPEC_FUSED_KEY_GROUPS 8
#define VKATTN_SPEC_FUSED_KEYS 9
#define VKATTN_SPEC_FUSED_ROPE_ON_READ 10
#define VKATTN_SPEC_FUSED_ROPE_INTERLEAVED 11
#define VKATTN_SPEC_FUSED_V_EIGHT 12
// attn_decode.comp
#define VKATTN_SPEC_DECODE_ROWS 1
#define VKATTN_SPEC_DECODE_LANES 2
#define VKATTN_SPEC_DECODE_Q_F16 3
#define VKATTN_SPEC_DECODE_K_TYPE 4
#define VKATTN_SPEC_DECODE_V_TYPE 5
#define VKATTN_SPEC_DECODE_K_EPL 6
#define VKATTN_SPEC_DECODE_K_PIECES 7
#define VKATTN_SPEC_DECODE_V_EPL 8
#define VKATTN_SPEC_DECODE_V_PIECES 9
#define VKATTN_SPEC_DECODE_K_ALIGNED 10
#define VKATTN_SPEC_DECODE_V_ALIGNED 11
#define VKATTN_SPEC_DECODE_KEYS 12
#define VKATTN_SPEC_DECODE_ROPE_ON_READ 13
#define VKATTN_SPEC_DECODE_ROPE_INTERLEAVED 14
#define VKATTN_SPEC_DECODE_MULTI_SEQ 15
#define VKATTN_SPEC_DECODE_N 16
#define VKATTN_SPEC_DECODE_C 17
#define VKATTN_SPEC_DECODE_MERGE_ROWS 18
#define VKATTN_SPEC_DECODE_Q_ALIGNED 19
#define VKATTN_SPEC_DECODE_INTERLEAVE 20
#define VKATTN_SPEC_DECODE_PROBE 21
// attn_decode_group.comp also takes ROWS, LANES, Q_F16, K_TYPE, V_TYPE, K_ALIGNED, V_ALIGNED,
// KEYS, MULTI_SEQ and Q_ALIGNED, K_PIECES and V_PIECES as its query and sum vec4s per lane, and
#define VKATTN_SPEC_DECODE_V_FROM_K 22
// attn_decode.comp's ring of stages in flight and its splits' runs (24 is left free: a
// constant every attention kernel may come to share)
#define VKATTN_SPEC_DECODE_DEPTH 23
#define VKATTN_SPEC_DECODE_RUN 25
#define VKATTN_SPEC_DECODE_LAZY_MAX 26
// attn_decode_group.comp: AttentionConfig::mask_keys (0: off)
#define VKATTN_SPEC_DECODE_MASK_KEYS 27
// attn_mask_keys.comp: what it reads and writes (0 mask rows to lists, 1 key lists to
// sorted lists, 2 key lists to mask rows) and its shared words (mode 1: the sort's)
#define VKATTN_SPEC_MASK_KEYS_MODE 1
#define VKATTN_SPEC_MASK_KEYS_WORDS 2
// attn_tiled.comp
#define VKATTN_SPEC_TILED_ROWS 1
#define VKATTN_SPEC_TILED_KEYS 2
#define VKATTN_SPEC_TILED_ROWS_PER_INVOCATION 3
#define VKATTN_SPEC_TILED_KEYS_PER_INVOCATION 4
#define VKATTN_SPEC_TILED_Q_F16 5
#define VKATTN_SPEC_TILED_K_TYPE 6
#define VKATTN_SPEC_TILED_V_TYPE 7
#define VKATTN_SPEC_TILED_DK4 8
#define VKATTN_SPEC_TILED_DV4 9
#define VKATTN_SPEC_TILED_Q_ALIGNED 10
#define VKATTN_SPEC_TILED_K_ALIGNED 11
#define VKATTN_SPEC_TILED_V_ALIGNED 12
#define VKATTN_SPEC_TILED_MULTI_SEQ 13
#define VKATTN_SPEC_TILED_V_FROM_K 14
#define VKATTN_SPEC_TILED_ROPE_ON_READ 15
#define VKATTN_SPEC_TILED_ROPE_INTERLEAVED 16
#define VKATTN_SPEC_TILED_PREFETCH 17
// attn_mt.comp (and mt_selftest.comp: MT_SG, MT_CHECK)
#define VKATTN_SPEC_MT_SG 1
#define VKATTN_SPEC_MT_CHECK 2
#define VKATTN_SPEC_MT_SUBGROUPS 3
#define VKATTN_SPEC_MT_KEY_CHUNKS 4
#define VKATTN_SPEC_MT_DK_CHUNKS 5
#define VKATTN_SPEC_MT_DV_CHUNKS 6
#define VKATTN_SPEC_MT_Q_F16 7
#define VKATTN_SPEC_MT_K_TYPE 8
#define VKATTN_SPEC_MT_V_TYPE 9
#define VKATTN_SPEC_MT_Q_ALIGNED 10
#define VKATTN_SPEC_MT_K_ALIGNED 11
#define VKATTN_SPEC_MT_V_ALIGNED 12
#define VKATTN_SPEC_MT_MULTI_SEQ 13
#define VKATTN_SPEC_MT_V_FROM_K 14
#define VKATTN_SPEC_MT_ROPE_ON_READ 15
#define VKATTN_SPEC_MT_ROPE_INTERLEAVED 16
#define VKATTN_SPEC_MT_RESCALE_ALWAYS 17
#define VKATTN_SPEC_MT_DIM_SLICES 18
#define VKATTN_SPEC_MT_Q_REGS 19
#define VKATTN_SPEC_MT_PREFETCH 20
#define VKATTN_SPEC_MT_SKIP 21
#define VKATTN_SPEC_MT_STAGE_BATCH 22
// attn_decode_merge.comp
#define VKATTN_SPEC_MERGE_ROWS 1
// kv_append.comp
#define VKATTN_SPEC_KV_APPEND_SRC_F16 1
#define VKATTN_SPEC_KV_APPEND_DST_TYPE 2
#define VKATTN_SPEC_KV_ROPE_HALF_ROT 3  // the VKATTN_KV_ROPE variant: rope.comp's constants
#define VKATTN_SPEC_KV_ROPE_UNIT 4
#define VKATTN_SPEC_KV_ROPE_INTERLEAVED 5

#endif
