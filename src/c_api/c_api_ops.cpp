// The C API's command lists, ops and KV caches: each function checks what C adds (NULL
// handles and pointers, arrays, struct sizes) and calls the C++ API, which checks the rest.
#include "c_api/c_api_internal.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

using namespace vkattn::c_api;
using vkattn::InvalidArgument;

namespace {

// The C++ object behind a handle that an op reads or writes (|p| must not be NULL).
const vkattn::Tensor& in(const char* fn, const char* param, const vkattn_tensor* p) { return need(fn, param, p).impl; }
vkattn::Tensor& out(const char* fn, const char* param, vkattn_tensor* p) { return need(fn, param, p).impl; }
// A tensor's dim |i| (its heads, its head dim), or 0 where it has none: the op refuses it.
// NULL is refused here, whichever argument the compiler evaluates first.
std::size_t dim_of(const char* fn, const char* param, const vkattn_tensor* t, std::size_t i) {
  const vkattn::Tensor& impl = need(fn, param, t).impl;
  return impl.valid() && impl.shape().size() > i ? impl.shape()[i] : 0;
}
const vkattn::Tensor* optional_mask(const vkattn_tensor* mask) { return mask ? &mask->impl : nullptr; }
vkattn::CommandList& list_of(const char* fn, vkattn_command_list* list) { return need(fn, "list", list).impl; }
const vkattn::KvCache& cache_of(const char* fn, const vkattn_kv_cache* cache) { return need(fn, "cache", cache).impl; }

// |values| into |out|, which the caller sized |count|.
void copy_out(const char* fn, const char* param, const std::vector<std::int32_t>& values, std::int32_t* out, std::size_t count,
              const char* what) {
  need(fn, param, out);
  if (count != values.size()) throw InvalidArgument(fn, "count", std::to_string(count), what + std::to_string(values.size()));
  std::copy(values.begin(), values.end(), out);
}

}  // namespace

extern "C" {

vkattn_status vkattn_command_list_create(vkattn_backend* backend, const vkattn_command_list_options* options,
                                         vkattn_command_list** list) {
  const char* fn = "vkattn_command_list_create";
  return guarded([&] {
    need(fn, "list", list) = nullptr;
    vkattn_backend& b = need(fn, "backend", backend);
    *list = new vkattn_command_list{b.impl->commands(command_list_options(fn, options)), {}};
  });
}

void vkattn_command_list_destroy(vkattn_command_list* list) { delete list; }

vkattn_status vkattn_submit_and_wait(vkattn_command_list* list) {
  const char* fn = "vkattn_submit_and_wait";
  return guarded([&] {
    vkattn_command_list& l = need(fn, "list", list);
    l.submitting([&] { l.impl.submit_and_wait(); });
    l.timings = l.impl.timings();
  });
}

vkattn_status vkattn_command_list_wait(vkattn_command_list* list, uint64_t timeout_ns, uint32_t* finished) {
  const char* fn = "vkattn_command_list_wait";
  return guarded([&] {
    uint32_t& done = need(fn, "finished", finished);
    done = need(fn, "list", list).impl.wait(timeout_ns) ? 1 : 0;
  });
}

vkattn_status vkattn_cmd_copy(vkattn_command_list* list, const vkattn_tensor* src, vkattn_tensor* dst) {
  const char* fn = "vkattn_cmd_copy";
  return guarded([&] { list_of(fn, list).copy(in(fn, "src", src), out(fn, "dst", dst)); });
}

vkattn_status vkattn_command_list_set_tokens(vkattn_command_list* list, const int32_t* positions, size_t n_positions,
                                             const int32_t* seq_ids, size_t n_seq_ids) {
  const char* fn = "vkattn_command_list_set_tokens";
  return guarded([&] {
    list_of(fn, list).set_tokens(array(fn, "positions", positions, n_positions), array(fn, "seq_ids", seq_ids, n_seq_ids));
  });
}

vkattn_status vkattn_command_list_set_tokens_mrope(vkattn_command_list* list, const int32_t* positions, size_t n_positions,
                                                   const int32_t* seq_ids, size_t n_seq_ids, const int32_t* mrope_positions,
                                                   size_t n_mrope_positions) {
  const char* fn = "vkattn_command_list_set_tokens_mrope";
  return guarded([&] {
    list_of(fn, list).set_tokens(array(fn, "positions", positions, n_positions), array(fn, "seq_ids", seq_ids, n_seq_ids),
                                 array(fn, "mrope_positions", mrope_positions, n_mrope_positions));
  });
}

vkattn_status vkattn_command_list_n_tokens(const vkattn_command_list* list, size_t* n_tokens) {
  const char* fn = "vkattn_command_list_n_tokens";
  return guarded([&] { need(fn, "n_tokens", n_tokens) = need(fn, "list", list).impl.n_tokens(); });
}

vkattn_status vkattn_cmd_rope(vkattn_command_list* list, vkattn_tensor* x, const int32_t* positions, size_t n_positions,
                              const vkattn_rope_config* config) {
  const char* fn = "vkattn_cmd_rope";
  return guarded([&] {
    list_of(fn, list).rope(out(fn, "x", x), array(fn, "positions", positions, n_positions),
                           rope_config(fn, "config", config, dim_of(fn, "x", x, 2)));
  });
}

vkattn_status vkattn_cmd_rope_qk(vkattn_command_list* list, vkattn_tensor* q, vkattn_tensor* k, const int32_t* positions,
                                 size_t n_positions, const vkattn_rope_config* config) {
  const char* fn = "vkattn_cmd_rope_qk";
  return guarded([&] {
    list_of(fn, list).rope(out(fn, "q", q), out(fn, "k", k), array(fn, "positions", positions, n_positions),
                           rope_config(fn, "config", config, dim_of(fn, "q", q, 2)));
  });
}

vkattn_status vkattn_cmd_attn_scores(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_tensor* k,
                                     vkattn_tensor* scores, const vkattn_attention_tokens* tokens,
                                     const vkattn_attention_config* config, const vkattn_tensor* mask) {
  const char* fn = "vkattn_cmd_attn_scores";
  return guarded([&] {
    list_of(fn, list).attn_scores(in(fn, "q", q), in(fn, "k", k), out(fn, "scores", scores), attention_tokens(fn, tokens, false),
                                  attention_config(fn, config, dim_of(fn, "q", q, 1)), optional_mask(mask));
  });
}

vkattn_status vkattn_cmd_attn_softmax(vkattn_command_list* list, const vkattn_tensor* scores, vkattn_tensor* probs,
                                      const vkattn_attention_config* config) {
  const char* fn = "vkattn_cmd_attn_softmax";
  return guarded([&] {
    list_of(fn, list).attn_softmax(in(fn, "scores", scores), out(fn, "probs", probs),
                                   attention_config(fn, config, dim_of(fn, "scores", scores, 1)));
  });
}

vkattn_status vkattn_cmd_attn_weighted_sum(vkattn_command_list* list, const vkattn_tensor* probs, const vkattn_tensor* v,
                                           vkattn_tensor* o) {
  const char* fn = "vkattn_cmd_attn_weighted_sum";
  return guarded([&] { list_of(fn, list).attn_weighted_sum(in(fn, "probs", probs), in(fn, "v", v), out(fn, "out", o)); });
}

vkattn_status vkattn_cmd_attention(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_tensor* k,
                                   const vkattn_tensor* v, vkattn_tensor* o, const vkattn_attention_tokens* tokens,
                                   const vkattn_attention_config* config, const vkattn_tensor* mask) {
  const char* fn = "vkattn_cmd_attention";
  return guarded([&] {
    list_of(fn, list).attention(in(fn, "q", q), in(fn, "k", k), in(fn, "v", v), out(fn, "out", o),
                                attention_tokens(fn, tokens, false), attention_config(fn, config, dim_of(fn, "q", q, 1)),
                                optional_mask(mask));
  });
}

vkattn_status vkattn_cmd_kv_append(vkattn_command_list* list, vkattn_kv_cache* cache, const vkattn_tensor* k,
                                   const vkattn_tensor* v, const int32_t* positions, size_t n_positions, const int32_t* seq_ids,
                                   size_t n_seq_ids, uint32_t flags) {
  const char* fn = "vkattn_cmd_kv_append";
  return guarded([&] {
    if (flags & ~std::uint32_t{VKATTN_KV_APPEND_KEEP_LAST}) {
      throw InvalidArgument(fn, "flags", std::to_string(flags), "0 or VKATTN_KV_APPEND_KEEP_LAST (1)");
    }
    const auto p = array(fn, "positions", positions, n_positions), s = array(fn, "seq_ids", seq_ids, n_seq_ids);
    const vkattn::KvAppendOptions options{.keep_last = (flags & VKATTN_KV_APPEND_KEEP_LAST) != 0};
    // v NULL: K alone, which only a latent cache takes (the C++ overload refuses it otherwise).
    if (v)
      list_of(fn, list).kv_append(need(fn, "cache", cache).impl, in(fn, "k", k), v->impl, p, s, options);
    else
      list_of(fn, list).kv_append(need(fn, "cache", cache).impl, in(fn, "k", k), p, s, options);
  });
}

vkattn_status vkattn_cmd_kv_copy_sequence(vkattn_command_list* list, vkattn_kv_cache* cache, size_t src, size_t dst) {
  const char* fn = "vkattn_cmd_kv_copy_sequence";
  return guarded([&] { list_of(fn, list).kv_copy_sequence(need(fn, "cache", cache).impl, src, dst); });
}

vkattn_status vkattn_cmd_attn_scores_cache(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_kv_cache* cache,
                                           vkattn_tensor* scores, const vkattn_attention_tokens* tokens,
                                           const vkattn_attention_config* config, const vkattn_tensor* mask) {
  const char* fn = "vkattn_cmd_attn_scores_cache";
  return guarded([&] {
    list_of(fn, list).attn_scores(in(fn, "q", q), cache_of(fn, cache), out(fn, "scores", scores),
                                  attention_tokens(fn, tokens, false), attention_config(fn, config, dim_of(fn, "q", q, 1)),
                                  optional_mask(mask));
  });
}

vkattn_status vkattn_cmd_attn_weighted_sum_cache(vkattn_command_list* list, const vkattn_tensor* probs,
                                                 const vkattn_kv_cache* cache, vkattn_tensor* o,
                                                 const vkattn_attention_tokens* tokens) {
  const char* fn = "vkattn_cmd_attn_weighted_sum_cache";
  return guarded([&] {
    list_of(fn, list).attn_weighted_sum(in(fn, "probs", probs), cache_of(fn, cache), out(fn, "out", o),
                                        attention_tokens(fn, tokens, true));
  });
}

vkattn_status vkattn_cmd_attention_cache(vkattn_command_list* list, const vkattn_tensor* q, const vkattn_kv_cache* cache,
                                         vkattn_tensor* o, const vkattn_attention_tokens* tokens,
                                         const vkattn_attention_config* config, const vkattn_tensor* mask) {
  const char* fn = "vkattn_cmd_attention_cache";
  return guarded([&] {
    list_of(fn, list).attention(in(fn, "q", q), cache_of(fn, cache), out(fn, "out", o), attention_tokens(fn, tokens, false),
                                attention_config(fn, config, dim_of(fn, "q", q, 1)), optional_mask(mask));
  });
}

vkattn_status vkattn_command_list_timing_count(const vkattn_command_list* list, size_t* count) {
  const char* fn = "vkattn_command_list_timing_count";
  return guarded([&] { need(fn, "count", count) = need(fn, "list", list).timings.size(); });
}

vkattn_status vkattn_command_list_timing(const vkattn_command_list* list, size_t index, const char** op, double* ms) {
  const char* fn = "vkattn_command_list_timing";
  return guarded([&] {
    const auto& timings = need(fn, "list", list).timings;
    need(fn, "op", op);
    need(fn, "ms", ms);
    if (index >= timings.size()) {
      throw InvalidArgument(fn, "index", std::to_string(index), "[0, count = " + std::to_string(timings.size()) + ")");
    }
    *op = timings[index].op.c_str();
    *ms = timings[index].ms;
  });
}

vkattn_status vkattn_command_list_stats(const vkattn_command_list* list, vkattn_command_stats* stats, size_t stats_size) {
  const char* fn = "vkattn_command_list_stats";
  return guarded([&] {
    const vkattn::CommandStats s = need(fn, "list", list).impl.stats();
    write_struct(fn, "stats", stats, stats_size,
                 // Packed (clang-format would put one item per line).
                 // clang-format off
                 vkattn_command_stats{.struct_size = 0, .reserved = 0, .ops = s.ops, .barriers = s.barriers,
                                      .submits = s.submits, .texel_reads = s.texel_reads, .encodings = s.encodings});
    // clang-format on
  });
}

vkattn_status vkattn_command_list_attention_count(const vkattn_command_list* list, size_t* count) {
  const char* fn = "vkattn_command_list_attention_count";
  return guarded([&] {
    std::size_t& n = need(fn, "count", count);
    n = need(fn, "list", list).impl.stats().attention.size();
  });
}

vkattn_status vkattn_command_list_attention_run(const vkattn_command_list* list, size_t index, vkattn_attention_run* run,
                                                size_t run_size) {
  const char* fn = "vkattn_command_list_attention_run";
  return guarded([&] {
    const std::vector<vkattn::AttentionRun> runs = need(fn, "list", list).impl.stats().attention;
    if (index >= runs.size()) {
      throw vkattn::InvalidArgument(
          fn, "index", std::to_string(index),
          runs.empty() ? "none: the list has no attention op" : "[0, " + std::to_string(runs.size() - 1) + "]");
    }
    const vkattn::AttentionRun& r = runs[index];
    write_struct(fn, "run", run, run_size,
                 vkattn_attention_run{.struct_size = 0,
                                      .kernel = static_cast<std::uint32_t>(r.kernel),
                                      .splits = r.splits,
                                      .precision = static_cast<std::uint32_t>(r.precision),
                                      .sparse = r.sparse ? 1u : 0u,
                                      .reserved = 0});
  });
}

const char* vkattn_attention_kernel_name(uint32_t kernel) {
  if (kernel > VKATTN_ATTENTION_KERNEL_MATRIX_STANDIN) return "unknown";
  return vkattn::to_string(static_cast<vkattn::AttentionKernel>(kernel));
}

vkattn_status vkattn_kv_cache_create(vkattn_backend* backend, const vkattn_kv_cache_config* config, vkattn_kv_cache** cache) {
  const char* fn = "vkattn_kv_cache_create";
  return guarded([&] {
    need(fn, "cache", cache) = nullptr;
    vkattn_backend& b = need(fn, "backend", backend);
    auto c = std::make_unique<vkattn_kv_cache>();
    c->impl = b.impl->kv_cache(kv_cache_config(fn, config));
    *cache = c.release();
  });
}

void vkattn_kv_cache_destroy(vkattn_kv_cache* cache) { delete cache; }

vkattn_status vkattn_kv_cache_reset(vkattn_kv_cache* cache, size_t seq) {
  return guarded([&] { need("vkattn_kv_cache_reset", "cache", cache).impl.reset(seq); });
}

vkattn_status vkattn_kv_cache_truncate(vkattn_kv_cache* cache, size_t seq, int32_t position) {
  return guarded([&] { need("vkattn_kv_cache_truncate", "cache", cache).impl.truncate(seq, position); });
}

vkattn_status vkattn_kv_cache_next_position(const vkattn_kv_cache* cache, size_t seq, int32_t* position) {
  const char* fn = "vkattn_kv_cache_next_position";
  return guarded([&] { need(fn, "position", position) = cache_of(fn, cache).next_position(seq); });
}

vkattn_status vkattn_kv_cache_length(const vkattn_kv_cache* cache, size_t seq, size_t* length) {
  const char* fn = "vkattn_kv_cache_length";
  return guarded([&] { need(fn, "length", length) = cache_of(fn, cache).length(seq); });
}

vkattn_status vkattn_kv_cache_slot_positions(const vkattn_kv_cache* cache, size_t seq, int32_t* positions, size_t count) {
  const char* fn = "vkattn_kv_cache_slot_positions";
  return guarded([&] {
    const vkattn::KvCache& c = cache_of(fn, cache);
    need(fn, "positions", positions);
    const std::vector<std::int32_t> held = c.slot_positions(seq);
    if (count != held.size()) {
      throw InvalidArgument(fn, "count", std::to_string(count), "capacity = " + std::to_string(held.size()));
    }
    std::copy(held.begin(), held.end(), positions);
  });
}

vkattn_status vkattn_kv_cache_slot(const vkattn_kv_cache* cache, int32_t position, size_t* slot) {
  const char* fn = "vkattn_kv_cache_slot";
  return guarded([&] { need(fn, "slot", slot) = cache_of(fn, cache).slot(position); });
}

vkattn_status vkattn_kv_cache_bytes(const vkattn_kv_cache* cache, size_t* bytes) {
  const char* fn = "vkattn_kv_cache_bytes";
  return guarded([&] { need(fn, "bytes", bytes) = cache_of(fn, cache).bytes(); });
}

vkattn_status vkattn_save_cache(vkattn_backend* backend, const vkattn_kv_cache* cache, void** data, size_t* size) {
  const char* fn = "vkattn_save_cache";
  return guarded([&] {
    need(fn, "data", data) = nullptr;
    need(fn, "size", size) = 0;
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    const std::vector<std::uint8_t> bytes = b.save_cache(cache_of(fn, cache));
    void* out = std::malloc(bytes.size());  // vkattn_free's: a C caller's free may be another runtime's
    if (!out) throw std::bad_alloc();
    std::memcpy(out, bytes.data(), bytes.size());
    *data = out;
    *size = bytes.size();
  });
}

void vkattn_free(void* data) { std::free(data); }

vkattn_status vkattn_restore_cache(vkattn_backend* backend, vkattn_kv_cache* cache, const void* data, size_t size) {
  const char* fn = "vkattn_restore_cache";
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    vkattn::KvCache& c = need(fn, "cache", cache).impl;
    need(fn, "data", static_cast<const std::uint8_t*>(data));
    b.restore_cache(c, std::span(static_cast<const std::uint8_t*>(data), size));
  });
}

vkattn_status vkattn_kv_cache_free_blocks(const vkattn_kv_cache* cache, size_t* free_blocks) {
  const char* fn = "vkattn_kv_cache_free_blocks";
  return guarded([&] { need(fn, "free_blocks", free_blocks) = cache_of(fn, cache).free_blocks(); });
}

vkattn_status vkattn_kv_cache_block_table(const vkattn_kv_cache* cache, size_t seq, int32_t* blocks, size_t count) {
  const char* fn = "vkattn_kv_cache_block_table";
  return guarded(
      [&] { copy_out(fn, "blocks", cache_of(fn, cache).block_table(seq), blocks, count, "capacity / block_size = "); });
}

vkattn_status vkattn_kv_cache_blocks_to_append(const vkattn_kv_cache* cache, size_t seq, size_t n_tokens, size_t* blocks) {
  const char* fn = "vkattn_kv_cache_blocks_to_append";
  return guarded([&] { need(fn, "blocks", blocks) = cache_of(fn, cache).blocks_to_append(seq, n_tokens); });
}

vkattn_status vkattn_kv_cache_block_refs(const vkattn_kv_cache* cache, int32_t* refs, size_t count) {
  const char* fn = "vkattn_kv_cache_block_refs";
  return guarded([&] { copy_out(fn, "refs", cache_of(fn, cache).block_refs(), refs, count, "n_blocks = "); });
}

vkattn_status vkattn_alibi_slopes(size_t n_heads, float* slopes, size_t count) {
  const char* fn = "vkattn_alibi_slopes";
  return guarded([&] {
    if (count != 0) need(fn, "slopes", slopes);  // (NULL, 0): an empty array
    if (count != n_heads) throw InvalidArgument(fn, "count", std::to_string(count), "n_heads = " + std::to_string(n_heads));
    const std::vector<float> s = vkattn::alibi_slopes(n_heads);
    std::copy(s.begin(), s.end(), slopes);
  });
}

vkattn_status vkattn_rope_frequencies(const vkattn_rope_config* config, size_t head_dim, int32_t max_position, double* theta,
                                      size_t count, double* attention_factor) {
  const char* fn = "vkattn_rope_frequencies";
  return guarded([&] {
    need(fn, "theta", theta);
    need(fn, "attention_factor", attention_factor);
    const vkattn::RopeFrequencies f =
        vkattn::rope_frequencies(rope_config(fn, "config", config, head_dim), head_dim, max_position);
    if (count != f.theta.size()) {
      throw InvalidArgument(fn, "count", std::to_string(count), "rotary_dim / 2 = " + std::to_string(f.theta.size()));
    }
    std::copy(f.theta.begin(), f.theta.end(), theta);
    *attention_factor = f.attention_factor;
  });
}

}  // extern "C"
