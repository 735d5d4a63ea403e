// Random invalid calls: a valid call of a random op with random shapes, one argument then
// broken at random (a shape, a dtype, a position, a config field, an alias, a handle that
// was moved from or belongs to another backend). Each must throw InvalidArgument naming
// the op, and record nothing.
#include <cmath>
#include <initializer_list>
#include <limits>

#include "fuzz/fuzz_cases.hpp"

// Each switch is a table of wrong arguments, one per line.
// clang-format off
namespace vkattn::fuzz {

namespace {

using Run = std::function<void(Backend&, Backend&, CommandList&)>;

double bad_real(Rng& r) {
  return r.pick({0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), -1e-300});
}

// RoPE: x [n, h, d] (or q and k) with one thing wrong.
InvalidCall bad_rope(Rng& r) {
  std::size_t n = r.range(1, 6), h = r.range(1, 4), d = 2 * r.range(1, 32);
  DType dt = r.pick({DType::f32, DType::f16});
  std::vector<std::int32_t> pos(n, static_cast<std::int32_t>(r.range(0, 1000)));
  RopeConfig c = random_rope_config(r, d);
  Shape shape{n, h, d};
  std::string what;
  switch (r.range(0, 15)) {
    case 0: shape = {n, h * d}; what = "rank 2"; break;
    case 1: dt = DType::i32; what = "i32"; break;
    case 2: shape[2] = d + 1; what = "odd head_dim"; break;
    case 3: shape[2] = kMaxHeadDim + 2; what = "head_dim > 2048"; break;
    case 4: pos.push_back(0); what = "positions.size()"; break;
    case 5: pos[r.range(0, n - 1)] = -static_cast<std::int32_t>(r.range(1, 1u << 30)); what = "negative position"; break;
    case 6:
      if (r.chance(0.3)) {  // odd, no room for a pair after it, or even and wrapping past 2^64 when added to
        c.rotary_offset = r.pick({2 * r.range(0, d / 2 - 1) + 1, d, SIZE_MAX - 1 - 2 * r.range(0, d)});
        what = "rotary_offset";
        break;
      }
      c.rotary_dim = r.chance(0.5) ? 2 * r.range(1, d / 2) + 1 : d + 2;
      what = "rotary_dim";
      break;
    case 7: c.base = bad_real(r); what = "base"; break;
    case 8: c.layout = static_cast<RopeLayout>(r.range(2, 9)); what = "layout"; break;
    case 9: c.scaling = static_cast<RopeScaling>(r.range(7, 99)); what = "scaling"; break;
    case 10:
      c.scaling = r.pick({RopeScaling::linear, RopeScaling::yarn, RopeScaling::llama3});
      c.factor = bad_real(r);
      c.original_context = 100;
      what = "factor";
      break;
    case 11:
      c.scaling = r.pick({RopeScaling::dynamic_ntk, RopeScaling::yarn, RopeScaling::llama3});
      c.original_context = 0;
      what = "original_context";
      break;
    case 12:
      c.freq_factors.assign(r.range(1, 40), static_cast<double>(r.pick({1.0, 0.0})));
      c.scaling = r.chance(0.5) ? RopeScaling::factors : RopeScaling::none;
      if (c.scaling == RopeScaling::factors && c.freq_factors.size() == (c.rotary_dim ? c.rotary_dim : d) / 2) {
        c.freq_factors[0] = -1.0;
      }
      what = "freq_factors";
      break;
    case 13: {  // M-RoPE sections that miss the rotary pairs by 1 or more
      const auto pairs = static_cast<std::uint32_t>((c.rotary_dim ? c.rotary_dim : d) / 2);
      c.mrope = MRope{.sections = {pairs, static_cast<std::uint32_t>(r.range(1, 5)), 0}};
      pos.resize(3 * n, 0);
      what = "mrope sections";
      break;
    }
    case 14: {  // M-RoPE with one position per token
      const auto pairs = static_cast<std::uint32_t>((c.rotary_dim ? c.rotary_dim : d) / 2);
      c.mrope = MRope{.sections = {pairs, 0, 0}, .layout = r.pick({MRopeLayout::contiguous, MRopeLayout::interleaved})};
      what = "mrope positions";
      break;
    }
    default: c.attention_factor = bad_real(r); what = "attention_factor"; break;
  }
  const bool pair = r.chance(0.3);
  return {"rope", "rope " + what + (pair ? " (q and k)" : ""), [=](Backend& b, Backend&, CommandList& cmd) {
            Tensor x = b.tensor(shape, dt);
            if (!pair) return cmd.rope(x, pos, c);
            Tensor k = b.tensor(shape, dt);
            cmd.rope(x, k, pos, c);
          }};
}

InvalidCall bad_rope_pair(Rng& r) {
  const std::size_t n = r.range(1, 6), d = 2 * r.range(1, 16);
  Shape q{n, 2, d}, k{n, 1, d};
  DType kd = DType::f32;
  bool same = false;
  switch (r.range(0, 3)) {
    case 0: k[0] = n + 1; break;
    case 1: k[2] = d + 2; break;
    case 2: kd = DType::f16; break;
    default: same = true; break;
  }
  return {"rope", "rope q/k mismatch", [=](Backend& b, Backend&, CommandList& cmd) {
            Tensor tq = b.tensor(q, DType::f32), tk = b.tensor(k, kd);
            cmd.rope(tq, same ? tq : tk, std::vector<std::int32_t>(n, 1));
          }};
}

InvalidCall bad_copy(Rng& r) {
  const std::size_t n = r.range(1, 100);
  const int kind = static_cast<int>(r.range(0, 2));
  return {"copy", "copy case " + std::to_string(kind), [=](Backend& b, Backend&, CommandList& cmd) {
            Tensor a = b.tensor({n}, DType::f32);
            Tensor c = kind == 0 ? b.tensor({n}, DType::f16) : b.tensor({n + 1}, DType::f32);
            cmd.copy(a, kind == 2 ? a : c);
          }};
}

// The attention ops on plain tensors: q [T, H, D], k and v [N, Hkv, D] with one thing wrong.
InvalidCall bad_attention(Rng& r) {
  const std::size_t t = r.range(1, 4), hkv = r.range(1, 3), h = hkv * r.range(1, 3), n = r.range(1, 20);
  const std::size_t d = r.range(1, 32);
  Shape q{t, h, d}, k{n, hkv, d}, v{n, hkv, d}, s{t, h, n}, o{t, h, d}, m{t, n};
  DType qd = DType::f32, sd = DType::f32, od = DType::f32;
  std::vector<std::int32_t> qp(t, static_cast<std::int32_t>(n)), kp(n, 0), qs, ks;
  AttentionConfig config;
  bool use_mask = false, alias = false;
  const int op = static_cast<int>(r.range(0, 3));  // scores, softmax, weighted sum, attention
  std::string what;
  switch (r.range(0, 21)) {
    case 0: q[1] = h + 1; what = "heads"; break;
    case 1: k[2] = v[2] = d + 1; what = "head_dim"; break;
    case 2: q[2] = k[2] = v[2] = o[2] = kMaxAttentionHeadDim + r.range(1, 20); what = "head_dim > 576"; break;
    case 3: qd = DType::i32; what = "q i32"; break;
    case 4: s[2] = n + 1; o[0] = t + 1; what = "scores/out shape"; break;
    case 5: sd = od = DType::f16; what = "scores/out f16"; break;
    case 6: use_mask = true; m[1] = n + 1; what = "mask shape"; break;
    case 7: qp.push_back(0); kp.push_back(0); what = "positions size"; break;
    case 8: kp[r.range(0, n - 1)] = -1; qp[0] = -5; what = "negative positions"; break;
    case 9: qs.assign(t + 1, 0); ks.assign(n, -1); what = "seq ids"; break;
    case 10: config.window = 0u; config.sinks = {1.0f}; what = "window 0 / sinks size"; break;
    case 11: config.scale = std::nan(""); config.sinks.assign(h, std::nanf("")); what = "scale / sinks NaN"; break;
    case 12: config.softcap = bad_real(r); config.sinks.assign(h + 1, 0.0f); what = "softcap / sinks"; break;
    case 13: config.alibi_slopes.assign(r.pick<std::size_t>({1, h + 1}), 0.5f); config.sinks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
      what = "alibi slopes"; break;
    case 14:  // shapes that let an output be an input: n tokens, 1 head, n keys, head_dim n
      alias = true;
      q = s = o = k = v = {n, 1, n};
      m = {n, n};
      qp.assign(n, static_cast<std::int32_t>(n));
      kp.assign(n, 0);
      what = "alias";
      break;
    case 15: config.chunk = 0u; what = "chunk 0"; break;
    case 16: config.window = 4u; config.window_type = static_cast<WindowType>(r.range(2, 50)); what = "window_type"; break;
    case 17: config.window = r.pick<std::optional<std::uint32_t>>({4u, std::nullopt}); config.window_type = WindowType::symmetric;
      what = "symmetric and causal"; break;
    case 18:
      config.query_temperature = QueryTemperature{.floor_scale = r.pick<std::uint32_t>({0, 8}),
                                                  .scale = r.pick({std::nan(""), HUGE_VAL, 1e300, 0.1}),
                                                  .offset = r.pick<std::uint32_t>({1, 1u << 31})};
      if (config.query_temperature->floor_scale != 0 && config.query_temperature->scale == 0.1 &&
          config.query_temperature->offset == 1) {
        config.query_temperature->floor_scale = 0;  // at least one field bad
      }
      what = "query temperature";
      break;
    case 19:  // f16 products or an unknown precision: the stages take f32 alone
      config.precision = r.chance(0.5) ? AttentionPrecision::f16_products : static_cast<AttentionPrecision>(r.range(2, 50));
      what = config.precision == AttentionPrecision::f16_products ? "f16_products" : "precision";
      break;
    case 20: config.mask_keys = static_cast<std::uint32_t>(r.range(1, 64)); what = "mask_keys"; break;  // attention()'s alone
    default: config.path = static_cast<AttentionPath>(r.range(3, 50)); what = "path"; config.sinks = {0.0f}; break;
  }
  static const char* const names[] = {"attn_scores", "attn_softmax", "attn_weighted_sum", "attention"};
  // Some cases are only wrong for some ops: softmax reads only scores, probs, sinks and
  // the stages' precision and mask_keys, the weighted sum neither positions nor config,
  // and attention() takes f16 products and mask_keys. Where the case cannot break the
  // chosen op, attn_scores (which every case breaks) takes it.
  const auto among = [&](std::initializer_list<const char*> cases) {
    for (const char* c : cases) {
      if (what == c) return true;
    }
    return false;
  };
  const bool softmax_breaks =
      among({"scores/out f16", "scale / sinks NaN", "softcap / sinks", "alibi slopes", "f16_products", "precision", "mask_keys"});
  const bool wsum_breaks = among({"head_dim", "head_dim > 576", "scores/out shape", "scores/out f16", "alias"});
  const bool attention_breaks = !among({"f16_products", "mask_keys"});
  const int chosen = (op == 1 && !softmax_breaks) || (op == 2 && !wsum_breaks) || (op == 3 && !attention_breaks) ? 0 : op;
  const bool sinks_break = !config.sinks.empty();  // attn_scores refuses any sinks
  return {names[chosen], std::string(names[chosen]) + " " + what + (sinks_break ? " (sinks)" : ""),
          [=](Backend& b, Backend&, CommandList& cmd) {
            Tensor tq = b.tensor(q, qd), tk = b.tensor(k, DType::f32), tv = b.tensor(v, DType::f32);
            Tensor ts = b.tensor(s, sd), to = b.tensor(o, od), tm = b.tensor(m, DType::f32);
            const Tensor* mask = use_mask ? &tm : nullptr;
            const AttentionTokens tok{qp, kp, qs, ks};
            switch (chosen) {
              case 0: return cmd.attn_scores(tq, tk, alias ? tq : ts, tok, config, mask);
              case 1: return cmd.attn_softmax(ts, ts, config);
              case 2: return cmd.attn_weighted_sum(alias ? tv : ts, tv, alias ? tv : to);
              default: return cmd.attention(tq, tk, tv, alias ? tq : to, tok, config, mask);
            }
          }};
}

InvalidCall bad_cache_config(Rng& r) {
  KvCacheConfig c{.n_seqs = r.range(1, 3), .n_kv_heads = r.range(1, 3), .head_dim = 2 * r.range(1, 16),
                  .capacity = r.range(2, 16)};
  switch (r.range(0, 12)) {
    case 0: c.n_seqs = 0; break;
    case 1: c.n_kv_heads = 0; break;
    case 2: c.head_dim = r.pick<std::size_t>({0, kMaxAttentionHeadDim + 2}); break;
    case 3: c.head_dim = 2 * r.range(1, 16) + 1; c.dtype = DType::f16; break;
    case 4: c.dtype = DType::i32; break;
    case 5: c.capacity = r.pick<std::size_t>({0, (std::size_t{1} << 30) + 1}); break;
    case 6: c.n_sinks = c.capacity + r.range(0, 3); break;
    case 7: c.rope = static_cast<KvRope>(r.range(2, 9)); break;
    case 8: c.latent = true; c.v_head_dim = c.head_dim + 2 * r.range(1, 8); break;  // V inside K, wider than K
    // Paged: blocks of no power of two (or past 2^16), an empty pool or one past 2^31 slots,
    // a capacity of no whole blocks, a pool asked for without paged.
    case 9: c.paged = true; c.n_blocks = 4; c.block_size = r.pick<std::size_t>({0, 3, 12, 1u << 17}); break;
    case 10: c.paged = true; c.capacity = 8; c.block_size = 4; c.n_blocks = r.pick<std::size_t>({0, (1u << 29) + 1}); break;
    case 11:
      c.n_blocks = 4;
      c.paged = r.chance(0.5);
      c.block_size = 4;
      c.capacity = 4 * r.range(1, 3) + r.range(1, 3);
      break;
    default:
      c.rope = KvRope::on_read;
      c.rope_config = {.scaling = RopeScaling::yarn, .factor = 4.0, .original_context = 64};
      if (r.chance(0.5)) c.rope_config = {.attention_factor = 0.5};
      if (r.chance(0.3)) c.rope_config = {.scaling = RopeScaling::dynamic_ntk, .factor = 4.0, .original_context = 8};
      break;
  }
  return {"kv_cache", "kv_cache config", [=](Backend& b, Backend&, CommandList&) { b.kv_cache(c); }};
}

// Calls on a valid cache: appends, copies and attention with one thing wrong.
InvalidCall bad_cache_use(Rng& r) {
  const int kind = static_cast<int>(r.range(0, 11));
  // Kinds 10 and 11: V given to a latent cache, K alone to another.
  const KvCacheConfig c{.n_seqs = r.range(1, 3), .n_kv_heads = r.range(1, 2), .head_dim = 2 * r.range(1, 8),
                        .capacity = r.range(2, 8), .latent = kind == 10};
  static const char* const ops[] = {"kv_append", "kv_append", "kv_append", "kv_append", "kv_copy_sequence", "attn_scores",
                                    "attn_scores", "attn_weighted_sum", "attention", "attention", "kv_append", "kv_append"};
  return {ops[kind], std::string(ops[kind]) + " case " + std::to_string(kind),
          [=](Backend& b, Backend&, CommandList& cmd) {
            KvCache cache = b.kv_cache(c);
            const std::size_t n = c.capacity - 1 + (kind == 3 ? 2 : 0);
            std::vector<std::int32_t> pos(n), seq(n, static_cast<std::int32_t>(c.n_seqs - 1));
            for (std::size_t i = 0; i < n; ++i) pos[i] = static_cast<std::int32_t>(i);
            Tensor k = b.tensor({n, c.n_kv_heads + (kind == 0 ? 1 : 0), c.head_dim}, DType::f32);
            Tensor v = b.tensor({n + (kind == 1 ? 1 : 0), c.n_kv_heads, c.head_dim}, DType::f32);
            if (kind == 2) pos.back() += 2;  // not consecutive
            if (kind <= 3 || kind == 10) return cmd.kv_append(cache, k, v, pos, seq);
            if (kind == 11) return cmd.kv_append(cache, k, pos, seq);
            if (kind == 4) return cmd.kv_copy_sequence(cache, c.n_seqs, 0);
            const std::size_t heads = c.n_kv_heads;
            Tensor q = b.tensor({1, heads, c.head_dim + (kind == 8 ? 2 : 0)}, DType::f32);
            Tensor s = b.tensor({1, heads, c.capacity}, DType::f32), out = b.tensor({1, heads, c.head_dim}, DType::f32);
            const std::vector<std::int32_t> qp{0}, bad_seq{static_cast<std::int32_t>(c.n_seqs)};
            if (kind == 5) return cmd.attn_scores(q, cache, s, {.q_positions = qp, .k_positions = qp});
            if (kind == 6) return cmd.attn_scores(q, cache, s, {.q_positions = qp, .q_seq_ids = bad_seq});
            if (kind == 7) return cmd.attn_weighted_sum(s, cache, out, {.q_seq_ids = bad_seq});
            if (kind == 8) return cmd.attention(q, cache, out, {.q_positions = qp, .q_seq_ids = std::vector<std::int32_t>{0}});
            cmd.attention(q, cache, out, {.q_positions = std::vector<std::int32_t>{-1}, .q_seq_ids = std::vector<std::int32_t>{0}});
          }};
}

// Handles: empty, moved-from, of another backend; transfers of the wrong size or dtype.
InvalidCall bad_handle(Rng& r) {
  const int kind = static_cast<int>(r.range(0, 8));
  static const char* const ops[] = {"rope", "copy", "upload", "upload", "download", "download_i32", "tensor",
                                    "tensor", "attn_softmax"};
  return {ops[kind], std::string("handle case ") + std::to_string(kind), [=](Backend& b, Backend& other, CommandList& cmd) {
            Tensor t = b.tensor({2, 1, 4}, DType::f32), moved = b.tensor({2, 1, 4}, DType::f32);
            Tensor taker = std::move(moved);
            Tensor foreign = other.tensor({2, 1, 4}, DType::f32);
            switch (kind) {
              case 0: return cmd.rope(moved, std::vector<std::int32_t>{1, 2});
              case 1: return cmd.copy(foreign, t);
              case 2: return b.upload(t, std::vector<float>(7));
              case 3: return b.upload(t, std::vector<std::int32_t>(8));
              case 4: return (void)b.download(moved);
              case 5: return (void)b.download_i32(t);
              case 6: return (void)b.tensor({4, 0}, DType::f32);
              case 7: return (void)b.tensor({std::size_t{1} << 21, std::size_t{1} << 20}, DType::f32);
              default: {
                CommandList gone = b.commands();
                CommandList keeper = std::move(gone);
                (void)keeper;
                // A moved-from list names the op it was asked for.
                return gone.attn_softmax(t, t);
              }
            }
          }};
}

InvalidCall bad_function(Rng& r) {
  if (r.chance(0.5)) {
    const std::size_t n = r.pick<std::size_t>({65537, std::numeric_limits<std::size_t>::max()});
    return {"alibi_slopes", "alibi_slopes(" + std::to_string(n) + ")",
            [=](Backend&, Backend&, CommandList&) { (void)alibi_slopes(n); }};
  }
  const std::int32_t max_position = -static_cast<std::int32_t>(r.range(1, 100));
  return {"rope_frequencies", "rope_frequencies max_position < 0",
          [=](Backend&, Backend&, CommandList&) { (void)rope_frequencies({}, 8, max_position); }};
}

}  // namespace

InvalidCall random_invalid_call(Rng& r) {
  switch (r.range(0, 8)) {
    case 0:
    case 1: return bad_rope(r);
    case 2: return bad_rope_pair(r);
    case 3: return bad_copy(r);
    case 4:
    case 5: return bad_attention(r);
    case 6: return r.chance(0.5) ? bad_cache_config(r) : bad_cache_use(r);
    case 7: return bad_handle(r);
    default: return bad_function(r);
  }
}

}  // namespace vkattn::fuzz
// clang-format on
