// A dispatch as ops describe it: which kernel, which buffers (and whether each is written),
// push constants and the number of workgroups. The command list turns a sequence of these
// into one command buffer with barriers where they are needed.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/inline_vector.hpp"
#include "common/op_call.hpp"
#include "params.h"
#include "vulkan/context.hpp"

namespace vkattn::detail {

struct Binding {
  std::shared_ptr<TensorImpl> tensor;  // a VulkanTensor, or null for a parameter range
  std::uint64_t param_offset = 0;      // bytes into the command list's parameter buffer
  std::uint64_t param_bytes = 0;
  bool write = false;  // the kernel writes it (read-write counts as write)
  bool texel = false;  // bound as a uniform texel buffer (the tensor's texel view)
};

// Whether |t| can be bound as a uniform texel buffer (its buffer has a texel view: it fits
// maxTexelBufferElements and texel reads are not turned off).
bool has_texel_view(const TensorImpl& t);

// Bindings a kernel may have (RoPE on Q and K through texel views has 6), and the
// push-constant bytes every device allows.
inline constexpr std::size_t kMaxBindings = 8, kMaxPushBytes = 128;

struct Dispatch {
  const char* op = "";
  PipelineKey key;
  InlineVector<Binding, kMaxBindings> bindings;
  InlineVector<std::uint8_t, kMaxPushBytes> push;
  std::uint64_t groups = 0;               // total workgroups; folded into x/y/z when recorded
  std::optional<AttentionRun> attention;  // the first dispatch of an attention op: its kernels

  template <class T>
  void set_push(const T& pc) {
    static_assert(sizeof(T) <= kMaxPushBytes);
    push.resize(sizeof(T));
    std::memcpy(push.data(), &pc, sizeof(T));
  }
};

// The kernels' code for a K or V dtype (VKATTN_KV_* in params.h).
inline std::uint32_t kv_type_code(DType dtype) {
  switch (dtype) {
    case DType::f16: return VKATTN_KV_F16;
    case DType::q8_0: return VKATTN_KV_Q8_0;
    case DType::q4_0: return VKATTN_KV_Q4_0;
    default: return VKATTN_KV_F32;
  }
}

// An op's dispatches: one, or a few (attention in three stages with split keys: 4; a
// quantized cache's kv_copy_sequence: 6; a paged cache's kv_append that copies shared
// blocks first: 4).
using Dispatches = InlineVector<Dispatch, 6>;
inline Dispatches one(Dispatch d) {
  Dispatches ds;
  ds.push_back(std::move(d));
  return ds;
}

// Token data an op keeps in the parameter arena (ParamArena::mark): a replay rewrites these
// words in place (patch_tokens) instead of building the op again.
struct TokenWords {
  enum Kind : std::uint8_t {
    meta,            // attn_meta's words (q positions, sequences, ring...); |extra|: 1 with sinks
    rope_positions,  // a rope op's positions
    rope_table,      // its frequency table; |extra|: the attention factor's bits (a push constant)
    append_rows,     // kv_append's rows, then its positions (|words| tokens); |extra|: 1 for a
                     // paged cache, whose tokens' slot-table words follow
    q_seq,           // the queries' sequences: the dispatches follow them, a replay keeps them
    block_copies,    // a paged cache's copies before kv_append, or its fork: a replay builds the op again
  } kind;
  std::uint64_t offset = 0;  // bytes into the arena
  std::uint32_t words = 0;
  std::uint32_t extra = 0;
};
using TokenMarks = InlineVector<TokenWords, 4>;
// kv_append's token words (TokenWords::append_rows; kv_append.comp reads them so): n
// destination rows, then the n positions the slot table records for them, then for a
// paged cache (the mark's |extra|) their n words in it.
inline std::uint64_t append_rows_words(std::uint32_t n, bool paged) { return std::uint64_t{n} * (paged ? 3 : 2); }
// Writes |call|'s arrays at |at| in that layout, for the build and for a replay's patch
// alike; false (part written) where their sizes are not |n|.
bool write_append_rows(std::uint8_t* at, std::uint32_t n, bool paged, const AppendCall& call);
// The bytes a patch may write at |w.offset| (0: it only compares).
inline std::uint64_t token_bytes(const TokenWords& w) {
  if (w.kind == TokenWords::q_seq || w.kind == TokenWords::block_copies) return 0;
  return 4 * (w.kind == TokenWords::append_rows ? append_rows_words(w.words, w.extra != 0) : w.words);
}

// Small read-only inputs of ops (positions, frequency tables), packed into one buffer per
// command list at offsets aligned to minStorageBufferOffsetAlignment.
class ParamArena {
 public:
  explicit ParamArena(std::uint64_t alignment) : alignment_(alignment) {}
  // |words| zeroed 32-bit words (at least one: a zero-length range is not a valid
  // descriptor); |*out| points at their bytes until the next allocate or add.
  Binding allocate(std::size_t words, std::uint8_t** out);
  // 32-bit values, copied as they are.
  Binding add(std::span<const std::uint32_t> words) { return add_bytes(words.data(), words.size()); }
  Binding add(std::span<const std::int32_t> ints) { return add_bytes(ints.data(), ints.size()); }
  Binding add(std::span<const float> floats) { return add_bytes(floats.data(), floats.size()); }
  // One zero word: the placeholder of an optional input that is not given.
  Binding add_zero() { return allocate(1, nullptr); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }
  // Drops everything added after the arena held |size| bytes (an op that failed to build).
  void truncate(std::size_t size) { bytes_.resize(size); }
  void reserve(std::size_t size) { bytes_.reserve(size); }
  void clear() { bytes_.clear(); }
  std::uint8_t* data() { return bytes_.data(); }
  // Token words of the op being built; the command list takes them once it is built.
  void mark(const TokenWords& w) { marks_.push_back(w); }
  // An op whose attention metadata is marked has its queries' sequences compared there
  // (patch_attn_meta): the q_seq marks of its stages (the three-stage path) are dropped,
  // so that a replay compares them once.
  TokenMarks take_marks();

 private:
  Binding add_bytes(const void* data, std::size_t words);

  std::uint64_t alignment_;
  std::vector<std::uint8_t> bytes_;
  TokenMarks marks_;
};

// Rewrites a recorded op's token words in |arena| for |call|, the same op with new tokens;
// false when the new tokens change more than those words (other sequences, another
// frequency table size or attention factor), and then the op must be built again.
bool patch_tokens(std::uint8_t* arena, const TokenMarks& marks, const OpCall& call);
bool patch_attn_meta(std::uint8_t* bytes, const TokenWords& w, const ScoresParams& p, const std::vector<float>& sinks);
bool patch_rope_table(std::uint8_t* bytes, const TokenWords& w, const RopeCall& call);

// rope(q, k) and kv_append of that k in one dispatch (kv_append.comp's VKATTN_KV_ROPE
// variant), which the command list makes of the two ops recorded back to back:
// rope_fusable says whether a rope op's dispatch may be held back for it (q and k rotated
// by one position per token, on a device that allows a kernel 8 storage buffers);
// fuse_rope_append turns kv_append's dispatches |append| into the fused one where they are
// one dispatch appending rope's k at rope's positions (|arena|: the list's parameter bytes)
// and reading neither q nor k as v; false, leaving them as they are, otherwise.
bool rope_fusable(const Dispatch& rope, const DeviceLimits& limits);
bool fuse_rope_append(const Dispatch& rope, Dispatches& append, const std::uint8_t* arena);

// Completes |d| as the command list records it: at least one workgroup, a grid within
// maxComputeWorkGroupCount, the pipeline's layout (binding count, texel bindings,
// push-constant size) from the bindings and push constants; Error(unsupported) naming maxPerStageDescriptorStorageBuffers when it
// binds more storage buffers than the device allows a kernel.
void finish_dispatch(Dispatch& d, const DeviceLimits& limits);

// Whether two dispatches bind, push and dispatch the same (parameter bytes may differ): a
// replay whose rebuilt dispatches all match the recorded ones keeps its encoding.
bool same_dispatch(const Dispatch& a, const Dispatch& b);

// Copies |words| 32-bit words from word |src_word| of src to word |dst_word| of dst.
Dispatch copy_dispatch(const Context& ctx, std::shared_ptr<TensorImpl> src, std::shared_ptr<TensorImpl> dst,
                       std::uint64_t src_word, std::uint64_t dst_word, std::uint64_t words);
// The same in 16-bit halves within one tensor, each read and replaced with atomics (the
// scales of a quantized cache, copied from one sequence to another).
Dispatch copy_halves_dispatch(const Context& ctx, const std::shared_ptr<TensorImpl>& t, std::uint64_t src_half,
                              std::uint64_t dst_half, std::uint64_t halves);

// Where keys (or values) live: a plain [n_keys, n_kv_heads, head_dim] tensor, or a KV
// cache [n_seqs, capacity, n_kv_heads, head_dim] read at each tile's sequence (a paged
// cache: its pool's rows, through the block table after each sequence's n_keys slot-table
// entries, with |page| = log2(block_size) + 1). Strides in elements; meta_stride
// is the key metadata entries per sequence (0: plain).
struct KeySource {
  std::shared_ptr<TensorImpl> tensor;
  std::shared_ptr<TensorImpl> slots;  // keys of a cache: its slot table on the device
  std::uint32_t n_keys, n_kv_heads, head_dim;
  std::uint32_t key_stride, head_stride, seq_stride, meta_stride;
  std::uint32_t type;       // kv_type_code
  std::uint32_t scales;     // q8_0/q4_0: word offset of the scales
  std::uint32_t bound = 0;  // keys of a cache: the occupancy bounds' word offset in |slots|
  std::uint32_t n_seqs = 1;
  std::uint32_t page = 0;                  // a paged cache (VKATTN_SPEC_KV_PAGE); 0 otherwise
  bool wide() const { return type != 0; }  // 8 elements per 16 bytes or fewer
};
KeySource plain_keys(std::shared_ptr<TensorImpl> t);
// An op's keys (|values| false) or values as a KeySource.
KeySource key_source(const KvSource& source, bool values);
// |t| (K or V) of |cache|; |slots|: the cache's slot table, for its keys (null for the
// values of a ring cache, which need none; a paged cache's values need its block table).
KeySource cache_keys(const KvCacheImpl& cache, std::shared_ptr<TensorImpl> t, std::shared_ptr<TensorImpl> slots);
// |spec| with the paging of |keys| (VKATTN_SPEC_KV_PAGE), for a kernel that reads them.
SpecConstants paged(SpecConstants spec, const KeySource& keys);
// The key positions binding of the scores and fused kernels (params.h): a cache's slot
// table, or plain keys' positions and sequence ids as parameters.
Binding key_positions(ParamArena& params, const KeySource& keys, const ScoresParams& p);

// Shared by the attention ops.
// Largest power of two <= |cap| and <= the device's workgroup limit.
std::uint32_t workgroup_size(const Context& ctx, std::uint32_t cap);
// A tensor the kernel reads (through its texel view when |texel|), or writes (read-write
// counts as written: what the barriers between dispatches go by).
Binding read_binding(std::shared_ptr<TensorImpl> t, bool texel = false);
Binding write_binding(std::shared_ptr<TensorImpl> t);
// Query rows per attention tile at most: accumulators per invocation in the three stages
// and the fused kernels, a GQA group of up to 8 in one tile.
inline constexpr std::uint32_t kMaxRows = 8;
// Query rows per tile: up to |cap|; with cache keys (|per_seq|) and tokens of several
// sequences in the call, a tile stays within one token (a divisor of the group), so it
// reads one sequence's keys.
std::uint32_t tile_rows(std::uint32_t cap, std::uint32_t n_tokens, std::uint32_t group, bool per_seq,
                        const std::vector<std::int32_t>& q_seq);
// The scores and fused kernels' meta binding (params.h, VKATTN_META_*): the header of word
// offsets, the queries' positions and sequence ids, ALiBi slopes and sink logits as float
// bits, and for KvRope::on_read the ring, the queries' in-cache positions, the cache's
// RoPE frequencies (rope_phase.glsl's fixed-point turns) and rotary_dim.
// Written straight into |params|; |binding| is its range.
// |extra|: zeroed words after the arrays (attn_decode's merge counters), from word
// |extra_offset| of the range.
struct AttnMeta {
  Binding binding;
  std::uint32_t rotary_dim = 0;
  std::uint32_t extra_offset = 0;
};
AttnMeta attn_meta(ParamArena& params, const ScoresParams& p, const std::vector<float>& sinks = {}, std::uint32_t extra = 0);
// The push-constant fields every kernel that scores keys shares (AttnScoresParams,
// AttnParams): the keys' strides and scales, the checked options, the cache's bound.
template <class Params>
void set_score_fields(Params& pc, const KeySource& keys, const ScoresParams& p, const AttnMeta& meta, bool has_mask) {
  pc.k_key_stride = keys.key_stride;
  pc.k_head_stride = keys.head_stride;
  pc.k_seq_stride = keys.seq_stride;
  pc.k_meta_stride = keys.meta_stride;
  pc.scale = static_cast<float>(p.scale);
  pc.softcap = static_cast<float>(p.softcap);
  pc.causal = p.causal ? 1u : 0u;
  pc.window = p.window;
  pc.has_mask = has_mask ? 1u : 0u;
  pc.has_alibi = p.alibi_slopes.empty() ? 0u : 1u;
  pc.rotary_dim = meta.rotary_dim;
  pc.k_scales = keys.scales;
  pc.k_bound = keys.meta_stride != 0 ? keys.bound : 0u;
  pc.chunk = p.chunk;
  pc.window_symmetric = p.window_symmetric ? 1u : 0u;
}
// The push constants of every kernel that scores and weighs keys in one dispatch
// (attn_fused, the decode, group, tiled and matrix kernels, and attn_decode_merge):
// q's shape, the keys and values, the checked options, and the kernel's plan.
struct AttnPlan {
  std::uint32_t rows = 0, row_tiles = 0, splits = 1, keys_per_split = 0;
  std::uint64_t ml_offset = 0;       // the splits' (max, sum) pairs in the output scratch
  std::uint32_t counter_offset = 0;  // attn_decode's merge counters in meta
};
shader::AttnParams attn_params(const Shape& q_shape, const KeySource& keys, const KeySource& values, const ScoresParams& p,
                               const AttnMeta& meta, bool has_mask, bool has_sinks, const AttnPlan& plan);
// attn_fused's dispatch |d| finished: its bindings (q, k, v through texel views with
// |texel|, |dst|, the mask, meta, the key positions), push constants and grid
// (base_groups x splits), then the combine pass into |out| when the keys are split.
Dispatches finish_fused(const Context& ctx, ParamArena& params, Dispatch d, std::shared_ptr<TensorImpl> q, const KeySource& keys,
                        const KeySource& values, std::shared_ptr<TensorImpl> dst, std::shared_ptr<TensorImpl> out,
                        std::shared_ptr<TensorImpl> mask, const ScoresParams& p, const std::vector<float>& sinks,
                        const AttnMeta& meta, bool texel, const AttnPlan& plan, std::uint64_t base_groups);
// A v row in 16-byte units (8 halves or 4 floats per invocation: |lanes| invocations), and
// how many such groups fill a workgroup of about |target| invocations (at least one).
struct VRowGroups {
  std::uint32_t per_lane, lanes, groups;
};
VRowGroups v_row_groups(const Context& ctx, std::uint32_t head_dim, bool f16, std::uint32_t target);
// How many ranges to split the keys into when |base_groups| row workgroups are too few to
// fill a GPU (decode), each split writing |split_words| 32-bit partial results (1: none).
std::uint32_t key_splits(std::uint64_t base_groups, std::uint32_t n_keys, std::uint64_t split_words, const DeviceLimits& limits);

// attention()'s three stages over a cache, on its own temporary: the stages handle keys
// only up to each sequence's occupancy bound (rounded up to 8), which nothing past them
// reads (null: the public ops' full rows).
struct StopAtBound {
  std::shared_ptr<TensorImpl> slots;  // the cache's slot table
  std::uint32_t offset = 0;           // word offset of the bounds in it
  const std::vector<std::int32_t>* q_seq = nullptr;
};
Dispatch attn_scores_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> q, KeySource keys,
                              std::shared_ptr<TensorImpl> scores, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                              const StopAtBound* stop = nullptr);
Dispatch attn_softmax_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> scores,
                               std::shared_ptr<TensorImpl> probs, const std::vector<float>& sinks,
                               const StopAtBound* stop = nullptr);
// A f32 tensor of at least |floats| elements that ops may use as scratch: shared by the
// ops of one command list (the hazard tracking orders them), so recording many layers'
// attention allocates it once.
using ScratchFn = std::function<std::shared_ptr<TensorImpl>(std::uint64_t floats)>;
// |q_seq|: each query token's sequence (read only for cache values). One dispatch, or two
// when the keys are split across workgroups (few query rows, many keys): the first
// writes each split's partial sums to |scratch|, the second adds them up.
Dispatches attn_weighted_sum_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                        std::shared_ptr<TensorImpl> probs, KeySource values, std::shared_ptr<TensorImpl> out,
                                        const std::vector<std::int32_t>& q_seq, const StopAtBound* stop = nullptr);
// An f32 tensor of |shape| for an op's intermediate results, which later ops of the same
// list may be given again (the hazard tracking orders them).
using TempShape = std::vector<std::size_t>;  // rank 2 or 3
using TempFn = std::function<std::shared_ptr<TensorImpl>(const TempShape& shape)>;

// What an op's build has at hand: the device, the list's parameter arena, its scratch and
// its temporaries.
struct OpEnv {
  const Context& ctx;
  ParamArena& params;
  const ScratchFn& scratch;
  const TempFn& temp;
};
// Each op's dispatches, device-dependent limits checked (vulkan/ops/<op>_op.cpp); the
// command list calls the one for its OpCall. CommandList::attention (AttentionCall): the
// fused kernel, one dispatch, or two when the keys are split across workgroups (the second
// merges the splits from the scratch); or the three stages on a temporary, as the path
// says (AttentionPath).
#define VKATTN_DECLARE_BUILD(Call) Dispatches build(OpEnv& env, const Call& call);
VKATTN_OP_CALLS(VKATTN_DECLARE_BUILD)
#undef VKATTN_DECLARE_BUILD
// The merge of a fused attention whose keys were split: |partial| holds each split's sums
// and, from word |ml_offset|, its (max, sum) pairs (attn_fused_combine.comp).
Dispatch fused_combine_dispatch(const Context& ctx, ParamArena& params, std::shared_ptr<TensorImpl> partial,
                                std::shared_ptr<TensorImpl> out, const std::vector<float>& sinks, std::uint32_t splits,
                                std::uint64_t ml_offset);
// Whether every row of |s| starts on a multiple of |e| elements and holds a multiple of
// them (16-byte loads need no bounds checks).
inline bool rows_aligned(const KeySource& s, std::uint32_t e) {
  return s.head_dim % e == 0 && s.key_stride % e == 0 && s.head_stride % e == 0 && s.seq_stride % e == 0;
}
// Whether the row tiles alone (of up to kMaxRows rows of a KV head) leave the device's
// compute units short of workgroups, fewer than 4 a unit (decode): on the GPU shape the
// decode kernels take those calls and split their keys. With rows enough (prefill), the
// tiled or the lane-per-key kernel.
bool decode_preferred(const Context& ctx, std::uint32_t n_tokens, std::uint32_t n_heads, std::uint32_t n_kv_heads);
// The decode kernels shaped for GPUs (attn_decode.comp, attn_decode_group.comp), for
// KernelShape::gpu when rows are few: on devices that allow a kernel 8 storage buffers and
// 32 invocations (elsewhere the lane-per-key kernel or the three stages).
bool decode_attention_usable(const Context& ctx);
Dispatches decode_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                       std::shared_ptr<TensorImpl> q, KeySource keys, KeySource values,
                                       std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                       const std::vector<float>& sinks, AttentionPrecision precision = AttentionPrecision::f32);
// Shared by the decode and tiled kernels (attention_decode_op.cpp):
// Subgroup shuffles with size control, at a power-of-two size within the workgroup limit.
bool subgroups_fit(const DeviceLimits& l);
// V is the start of each K row (a latent cache): staged K rows serve as V rows.
bool values_in_keys(const KeySource& keys, const KeySource& values);
// The most splits a merge of tiles of |rows| rows takes (attn_merge.glsl's pairs).
std::uint64_t most_splits(std::uint32_t rows);
// Mesa's llvmpipe (lavapipe, CPU devices) keeps one loop counter per vector of invocations
// for the whole shader: every pass of every loop counts, and once 65,535 have passed every
// loop ends after one pass, leaving results wrong. On CPU devices: how many steps of
// |per_step| loop iterations one split may take (its keys are split so that none goes
// further); 0 elsewhere (no limit).
std::uint64_t cpu_steps_per_split(const Context& ctx, std::uint64_t per_step);
// Splits: about |resident| workgroups per compute unit in one wave, each at least two
// stages of |stage| keys (something for the pipeline to overlap), within the merge's limits
// (|rows| per tile) and one buffer range for the |n_rows| rows' partial results.
std::uint64_t decode_splits(const Context& ctx, std::uint64_t base_groups, std::uint32_t n_keys, std::uint32_t stage,
                            std::uint32_t rows, std::uint64_t n_rows, std::uint32_t v4);
// Where a decode kernel's results go: its partial results with S > 1 splits (a scratch
// binding, else none), out unless a second pass writes it.
struct DecodeOutputs {
  Binding partials, out;
};
struct ScratchLayout;
DecodeOutputs decode_outputs(ParamArena& params, const ScratchFn& scratch, const std::shared_ptr<TensorImpl>& out,
                             std::uint64_t splits, const ScratchLayout& layout, bool second_pass);
// A decode kernel's dispatch |d| (its key set) finished: its bindings (q, k, v, |o|, the
// mask, meta, the key positions, the partials), push constants and grid (base groups x
// splits), then with |second_pass| attn_decode_merge into |out| over tiles of |plan.rows|.
Dispatches finish_decode(const Context& ctx, ParamArena& params, Dispatch d, std::shared_ptr<TensorImpl> q, const KeySource& keys,
                         const KeySource& values, std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                         const ScoresParams& p, const std::vector<float>& sinks, const AttnMeta& meta, DecodeOutputs o,
                         const AttnPlan& plan, std::uint64_t base_groups, bool second_pass);
// The row tiles of a kernel over tiles of |rows| query rows whose splits a second pass
// merges (attn_decode_group, attn_tiled; |stage|: keys per step): tiles per KV head,
// workgroups without splits, and the split count (decode_splits).
struct RowTiles {
  std::uint32_t rows = 0, tiles = 0;
  std::uint64_t base_groups = 0, splits = 1;
};
RowTiles row_tiles(const Context& ctx, const TensorImpl& q, const KeySource& keys, const KeySource& values, std::uint32_t rows,
                   std::uint32_t stage);
// Where such a kernel's results go in its scratch (in words): each split's sums, from
// ml_offset the splits' (max, sum) pairs, from lists attn_mask_keys's lists for
// |mask_keys| keys a token (room + 1 words a token), words in all.
struct ScratchLayout {
  std::uint64_t ml_offset = 0, lists = 0, words = 0;
};
// |v4|: the value rows' vec4s.
ScratchLayout scratch_layout(std::uint64_t splits, const TensorImpl& q, std::uint32_t v4, std::uint32_t mask_keys);
inline ScratchLayout scratch_layout(const RowTiles& rt, const TensorImpl& q, const KeySource& values, std::uint32_t mask_keys) {
  return scratch_layout(rt.splits, q, (values.head_dim + 3) / 4, mask_keys);
}
// A sparse mask's lists for the group kernel (attn_mask_keys.comp): room for |keys| keys a
// token (0: no lists), from an f32 mask's rows (AttentionConfig::mask_keys) or from a key
// list (an i32 mask, |from_list|).
struct KeyListing {
  std::uint32_t keys = 0;
  bool from_list = false;
};
// Such a kernel's dispatch |d| (its key set) finished by finish_decode, with its meta,
// outputs and, with splits, the merge. |listing| (attn_decode_group only): attn_mask_keys
// first lists each token's keys, in the scratch after the partials (binding 7), where the
// kernel reads them; from a key list, the kernel then reads no mask.
Dispatches finish_row_tiles(const Context& ctx, ParamArena& params, const ScratchFn& scratch, Dispatch d,
                            std::shared_ptr<TensorImpl> q, const KeySource& keys, const KeySource& values,
                            std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                            const std::vector<float>& sinks, const RowTiles& rt, KeyListing listing = {});
// The group kernel over a sparse mask's lists at any number of rows (prefill too: a tile
// reads only its token's keys), on the GPU shape or under VKATTN_DECODE=kernel=group; none
// where the kernel or the lists do not fit the call.
std::optional<Dispatches> listed_group_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                  std::shared_ptr<TensorImpl> q, const KeySource& keys, const KeySource& values,
                                                  std::shared_ptr<TensorImpl> out, std::shared_ptr<TensorImpl> mask,
                                                  const ScoresParams& p, const std::vector<float>& sinks,
                                                  AttentionPrecision precision, KeyListing listing);
// The tiled kernel (attn_tiled.comp, attention_tiled_op.cpp) for fused attention with
// many rows per KV head: its dispatches, or none where $VKATTN_PREFILL and the shape leave
// it out (automatic: the GPU shape, whole tiles of 16 rows or more, within the device's
// shared memory and a register budget; forced: Unsupported where no tile fits).
std::optional<Dispatches> tiled_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                     std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                                     const KeySource& values, std::shared_ptr<TensorImpl> out,
                                                     std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                                     const std::vector<float>& sinks,
                                                     AttentionPrecision precision = AttentionPrecision::f32);
// Whether the tiled and group kernels run |precision|'s products as packed f16 FMAs (their
// VKATTN_PACKED_F16 variants): f16_products on a device created with shaderFloat16
// (PhysicalDevice::float16) whose limits keep it (DeviceOptions::cap_limits can take it away).
bool packed_f16(const Context& ctx, AttentionPrecision precision);
// The matrix kernel (attn_mt.comp, attention_mt_op.cpp) for AttentionPrecision::f16_products:
// its dispatches, or none where the device's matrix path (DeviceLimits::matrix_standin,
// from DeviceOptions::matrix_units or $VKATTN_MATRIX: coopmat.cpp) or the shape leave it
// out (the f32 kernels then run).
std::optional<Dispatches> matrix_attention_dispatches(const Context& ctx, ParamArena& params, const ScratchFn& scratch,
                                                      std::shared_ptr<TensorImpl> q, const KeySource& keys,
                                                      const KeySource& values, std::shared_ptr<TensorImpl> out,
                                                      std::shared_ptr<TensorImpl> mask, const ScoresParams& p,
                                                      const std::vector<float>& sinks);
// A workgroup of the matrix kernel: row groups of 16 rows, the subgroups each row group's
// dims are split over (1: the row split, a subgroup per row group), 16-key chunks per
// tile, whether the row split holds its queries in registers (the dim split always does),
// and whether the next tile's K and V are loaded into registers during a tile (marks
// doubled).
struct MatrixTileShape {
  std::uint32_t row_groups, dim_slices, key_chunks;
  bool q_regs = false, prefetch = false;
  std::uint32_t subgroups() const { return row_groups * dim_slices; }
};
// The shape taken for rows of |dk_chunks| 16-dim chunks (|dv_padded| of V) on subgroups of
// |sg| lanes, the rows a tile holds (|rows_for| of its row cap: tile_rows), V's chunks as
// the slices pad them, and its shared memory; none where no shape fits |l|.
struct MatrixTilePlan {
  MatrixTileShape shape;
  std::uint32_t rows, dv_chunks;
  std::uint64_t shared_bytes;
  bool nv2 = false;  // attn_mt2's plan (plan_matrix2_tile)
};
std::optional<MatrixTilePlan> plan_matrix_tile(const DeviceLimits& l, const PrefillTuning& tune, std::uint32_t sg,
                                               std::uint32_t dk_chunks, std::uint32_t dv_padded, bool v_from_k,
                                               const std::function<std::uint32_t(std::uint32_t cap)>& rows_for);
// The same for attn_mt2 (NV cooperative matrices 2): the row split alone, queries in
// registers, heads up to 8 chunks (128) wide; none where they are wider or nothing fits.
std::optional<MatrixTilePlan> plan_matrix2_tile(const DeviceLimits& l, const PrefillTuning& tune, std::uint32_t sg,
                                                std::uint32_t dk_chunks, std::uint32_t dv_padded, bool v_from_k,
                                                const std::function<std::uint32_t(std::uint32_t cap)>& rows_for);
// The subgroup size the matrix kernels run on: the device's default where the units run
// them (the size its cooperative-matrix shapes are listed for, as full subgroups),
// preferred_subgroup_size for the stand-in; 0 where neither runs.
std::uint32_t matrix_subgroup_size(const DeviceLimits& limits);
// mt_selftest.comp on one subgroup of |sg| invocations over |words| (kMatrixSelftestWords:
// the layout its header gives), as the stand-in or, with |units|, the cooperative-matrix
// form: its four result tiles, 256 f32 bits each, row-major.
inline constexpr std::size_t kMatrixSelftestWords = 1024;
std::vector<std::uint32_t> matrix_selftest(const std::shared_ptr<Context>& ctx, std::span<const std::uint32_t> words,
                                           std::uint32_t sg, bool units = false);
// The device self-test of the matrix path (matrix_selftest_op.cpp): a fixed input of
// small-integer halves and row factors, and its four tiles computed on the host (every
// product and sum exact, so a correct layer matches bit for bit).
std::vector<std::uint32_t> matrix_selftest_input();
std::vector<std::uint32_t> matrix_selftest_expected(std::span<const std::uint32_t> words);
// Runs it in one form and compares: "" when every word matches, else the first mismatch
// and how many (or the error that kept it from running: a pipeline the driver refused).
// |tamper| (tests) edits the expected tiles before the comparison.
using SelftestTamper = std::function<void(std::vector<std::uint32_t>& expected)>;
std::string run_matrix_selftest(const std::shared_ptr<Context>& ctx, bool units, std::uint32_t sg,
                                const SelftestTamper& tamper = {});
// A failed self-test's consequence: the matrix path off for this backend (limits'
// matrix_units and matrix_standin), DeviceInfo::matrix_note saying why, a warning logged.
void matrix_path_failed(Context& ctx, const std::string& failure);
// The self-test in one form, then matrix_path_failed where it fails, or an info line
// where it passes (which it returns). Tests run it on the stand-in with |tamper|.
bool check_matrix_path(const std::shared_ptr<Context>& ctx, bool units, std::uint32_t sg, const SelftestTamper& tamper = {});
// At backend creation, where the context chose the units: their self-test, once, before
// any attention runs on them.
void check_matrix_units(const std::shared_ptr<Context>& ctx);
// The compute units to plan with: DeviceLimits::compute_units, else an estimate by
// device type.
std::uint32_t compute_units(const Context& ctx);
// The subgroup size kernels that hand values between lanes ask for: 16 where the device
// allows it (Intel would otherwise run SIMD32, Adreno 128 lanes), else the nearest size
// it allows (32 on NVIDIA and AMD RDNA, 8 on llvmpipe).
std::uint32_t preferred_subgroup_size(const DeviceLimits& limits);

}  // namespace vkattn::detail
