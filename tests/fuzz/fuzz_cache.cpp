// Random valid KV-cache calls: a random cache (sequences, sinks, both RoPE modes, f32, f16,
// q8_0 or q4_0, latent or not, ring or paged), a random schedule of appends (interleaved
// sequences, keep_last, sequence copies, submitted together or apart, truncates and
// resets between submissions), then attention of each sequence's newest token over the
// cache, by the three cache stages or by the attention op on any path, in f32 or with f16
// products.
#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <numeric>

#include "fuzz/fuzz_cases.hpp"
#include "support/attention_cases.hpp"
#include "support/f16_match.hpp"

namespace vkattn::fuzz {

namespace {

struct Append {
  std::vector<std::int32_t> pos, seq;
  std::vector<float> k, v;
  bool keep_last = false;
  int copy_src = -1, copy_dst = -1;  // kv_copy_sequence after the append, when set
  bool submit = false;               // submit the list after this step
  // After the submit: KvCache::truncate(cut_seq, cut_at), or reset(cut_seq) where reset.
  int cut_seq = -1;
  std::int32_t cut_at = 0;
  bool reset = false;
};

}  // namespace

void random_paging(Rng& r, KvCacheConfig& c) {
  if (!r.chance(0.3)) return;
  // A sequence never holds more than capacity / block_size blocks (forks share theirs and
  // copy the ones they write); running out is test_kv_cache_paged.cpp's. One block more,
  // at times, leaves the pool a block no sequence needs.
  c.paged = true;
  std::size_t most = 1;
  while (c.capacity % (2 * most) == 0) most *= 2;
  c.block_size = std::size_t{1} << r.range(0, static_cast<std::size_t>(std::countr_zero(most)));
  c.n_blocks = c.n_seqs * (c.capacity / c.block_size) + r.range(0, 1);
}

void interleave_tokens(Rng& r, std::vector<std::size_t> counts, std::vector<std::int32_t>& next, std::vector<std::int32_t>& seq,
                       std::vector<std::int32_t>& pos) {
  for (std::size_t left = std::accumulate(counts.begin(), counts.end(), std::size_t{0}); left > 0; --left) {
    std::size_t s;
    do s = r.range(0, counts.size() - 1);
    while (counts[s] == 0);
    --counts[s];
    seq.push_back(static_cast<std::int32_t>(s));
    pos.push_back(next[s]++);
  }
}

double dot_bound(const AttentionConfig& c, std::span<const std::int32_t> q_pos, std::size_t head_dim, double max_q,
                 double max_k) {
  double t_max = 1;  // the query temperature multiplies the dot products
  if (const auto& temp = c.query_temperature) {
    for (std::int32_t p : q_pos) {
      const double steps = std::floor((static_cast<double>(p) + temp->offset) / temp->floor_scale);
      t_max = std::max(t_max, std::fabs(1 + temp->scale * std::log1p(steps)));
    }
  }
  const double dots = std::fabs(c.scale.value_or(1 / std::sqrt(double(head_dim)))) * t_max * double(head_dim) * max_q * max_k;
  return c.softcap ? std::min(dots, *c.softcap) : dots;
}

AttentionConfig random_cache_attention(Rng& r, std::size_t heads, std::size_t capacity) {
  AttentionConfig config;
  config.causal = r.chance(0.8);
  if (r.chance(0.3)) config.window = static_cast<std::uint32_t>(r.range(1, capacity + 2));
  random_visibility(r, config, capacity);
  if (r.chance(0.2)) config.softcap = r.uniform(1.0, 50.0);
  config.alibi = r.chance(0.15);
  if (r.chance(0.25)) config.sinks = r.normals(heads, 2.0);
  config.path = r.pick({AttentionPath::automatic, AttentionPath::fused, AttentionPath::three_stages});
  return config;
}

ValidCall cache_call(Rng& r) {
  KvCacheConfig c;
  c.n_seqs = r.range(1, 3);
  c.n_kv_heads = r.range(1, 2);
  // Two shape families (fuzz_valid.cpp says why so few): f32 and head_dim 16; f16, q8_0
  // or q4_0 (the same bytes on both backends: test_kv_quant.cpp) and 64.
  c.dtype = r.pick({DType::f32, DType::f16, DType::q8_0, DType::q4_0});
  c.head_dim = c.dtype == DType::f32 ? 16 : 64;
  // A latent cache (absorbed MLA): V is the first v_head_dim dims of each key row.
  if (c.dtype != DType::f32 && r.chance(0.2)) {
    c.latent = true;
    c.v_head_dim = r.pick<std::size_t>({32, 64});
  }
  const std::size_t vd = c.latent ? c.v_head_dim : c.head_dim;
  c.capacity = r.range(1, 24);
  c.n_sinks = r.chance(0.3) ? r.range(0, c.capacity - 1) : 0;
  if (!c.latent && r.chance(0.3)) {  // a latent cache keeps its keys as stored
    c.rope = KvRope::on_read;
    c.rope_config = random_rope_config(r, c.head_dim, true);
    // On read, dynamic NTK takes one length for queries and keys (fuzz_invalid: without).
    if (c.rope_config.scaling == RopeScaling::dynamic_ntk && c.rope_config.sequence_length == 0) {
      c.rope_config.sequence_length = r.range(1, 20000);
    }
  }
  random_paging(r, c);
  const std::size_t ring = c.capacity - c.n_sinks, row = c.n_kv_heads * c.head_dim;
  const std::size_t heads = c.n_kv_heads * r.pick<std::size_t>({1, 4});

  // The appends: each sequence's tokens continue at its next position, in order.
  std::vector<std::int32_t> next(c.n_seqs, 0);
  std::vector<Append> steps(r.range(1, 4));
  for (Append& a : steps) {
    std::vector<std::size_t> counts(c.n_seqs, 0);
    for (std::size_t s = 0; s < c.n_seqs; ++s) {
      if (!r.chance(0.7)) continue;
      a.keep_last = a.keep_last || r.chance(0.15);
      counts[s] = r.range(1, a.keep_last ? 2 * ring + 1 : ring);
    }
    interleave_tokens(r, counts, next, a.seq, a.pos);
    a.k = r.normals(a.pos.size() * row);
    a.v = r.normals(a.pos.size() * row);
    if (c.n_seqs > 1 && r.chance(0.2)) {
      a.copy_src = static_cast<int>(r.range(0, c.n_seqs - 1));
      a.copy_dst = static_cast<int>((static_cast<std::size_t>(a.copy_src) + r.range(1, c.n_seqs - 1)) % c.n_seqs);
      next[static_cast<std::size_t>(a.copy_dst)] = next[static_cast<std::size_t>(a.copy_src)];
    }
    a.submit = r.chance(0.4);
    // Truncating is valid while the ring has overwritten nothing since the position was
    // next (here: while the sequence never passed its capacity); a reset always is.
    if (a.submit && r.chance(0.3)) {
      const std::size_t s = r.range(0, c.n_seqs - 1);
      a.cut_seq = static_cast<int>(s);
      a.reset = std::size_t(next[s]) > c.capacity || r.chance(0.25);
      a.cut_at = a.reset ? 0 : static_cast<std::int32_t>(r.range(0, static_cast<std::size_t>(next[s])));
      next[s] = a.cut_at;
    }
  }

  // One query per sequence, at its newest position (always readable), or 0 when empty.
  std::vector<std::int32_t> q_pos, q_seq;
  for (std::size_t s = 0; s < c.n_seqs; ++s) {
    if (!r.chance(0.8) && !(s + 1 == c.n_seqs && q_pos.empty())) continue;
    q_pos.push_back(std::max(0, next[s] - 1));
    q_seq.push_back(static_cast<std::int32_t>(s));
  }
  const std::size_t n = q_pos.size();
  const std::vector<float> q = r.normals(n * heads * c.head_dim);
  const AttentionConfig config = random_cache_attention(r, heads, c.capacity);
  const bool stages = r.chance(0.4);
  std::vector<float> mask;
  if (r.chance(0.2)) {
    mask = r.normals(n * c.capacity, 2.0);
    for (float& m : mask) m = r.chance(0.15) ? -test::kInf : m;
  }

  // A bound on the magnitude of a score's terms (test::score_magnitude for the cache).
  double max_k = 0, max_v = 0, v_rms = 0, max_q = test::max_abs(q), max_mask = test::max_abs(mask);
  for (const Append& a : steps) {
    max_k = std::max(max_k, test::max_abs(a.k));
    max_v = std::max(max_v, test::max_abs(c.latent ? a.k : a.v));
    v_rms = std::max(v_rms, test::rms(c.latent ? a.k : a.v));  // f16 products' RMS bound
  }
  const double dots = dot_bound(config, q_pos, c.head_dim, max_q, max_k);
  const std::int32_t span = *std::max_element(next.begin(), next.end()) + 1;
  const double magnitude = dots + max_mask + (config.alibi ? span : 0.0);  // standard slopes are below 1
  const double d = 1e-4 + 2e-6 * magnitude, o = c.dtype == DType::f32 ? 1e-4 : 2e-4;
  const double out_atol = o + (std::expm1(2 * d) + 1e-5) * max_v;

  // The op with f16 products in 3 of 10 (drawn last, so that the f32 calls draw as they
  // did): fuzz_valid.cpp's f16_attention_call says how it is checked. The cache's values
  // stand in for the live ones in the RMS bound, and the dots' bound for their magnitude.
  const bool f16 = !stages && r.chance(0.3);
  auto chain = std::make_shared<int>(0);

  ValidCall call{stages ? "attn_scores, attn_softmax, attn_weighted_sum over a cache" : "attention over a cache",
                 "",
                 {{"out", {n, heads, vd}, out_atol, 1e-4}},
                 nullptr};
  if (stages) call.checks.push_back({"scores", {n, heads, c.capacity}, d, 1e-5});
  if (f16) {
    call.checks_after = [=] {
      const test::F16Bounds b =
          test::f16_bounds(magnitude, max_v, v_rms, c.dtype == DType::f16, c.dtype != DType::f16, *chain, dots);
      return f16_checks(b.near, b.far, b.rms, {n, heads, vd});
    };
  }
  const auto cuts = std::count_if(steps.begin(), steps.end(), [](const Append& a) { return a.cut_seq >= 0; });
  call.description = "cache seqs " + std::to_string(c.n_seqs) + " kv_heads " + std::to_string(c.n_kv_heads) + " head_dim " +
                     std::to_string(c.head_dim) + " capacity " + std::to_string(c.capacity) + " sinks " +
                     std::to_string(c.n_sinks) + " " + to_string(c.dtype) + (c.latent ? " latent v " + std::to_string(vd) : "") +
                     (c.paged ? " paged " + std::to_string(c.n_blocks) + "x" + std::to_string(c.block_size) : "") +
                     (c.rope == KvRope::on_read ? " on_read " + describe(c.rope_config) : "") + "; " +
                     std::to_string(steps.size()) + " appends, " + std::to_string(cuts) + " truncates or resets; heads " +
                     std::to_string(heads) + ", " + std::to_string(n) + " queries; " + describe(config) +
                     (mask.empty() ? "" : "; mask") + (f16 ? "; f16_products" : "");

  call.run = [=](Backend& b, const Outputs* cpu) {
    KvCache cache = b.kv_cache(c);
    auto cmd = std::make_unique<CommandList>(b.commands());
    std::vector<Tensor> keep;  // inputs live until their list is submitted
    for (const Append& a : steps) {
      if (!a.pos.empty()) {
        Tensor k = b.tensor({a.pos.size(), c.n_kv_heads, c.head_dim}, DType::f32);
        Tensor v = b.tensor({a.pos.size(), c.n_kv_heads, c.head_dim}, DType::f32);
        b.upload(k, a.k);
        b.upload(v, a.v);
        if (c.latent) {
          cmd->kv_append(cache, k, a.pos, a.seq, {.keep_last = a.keep_last});
        } else {
          cmd->kv_append(cache, k, v, a.pos, a.seq, {.keep_last = a.keep_last});
        }
        keep.push_back(std::move(k));
        keep.push_back(std::move(v));
      }
      if (a.copy_src >= 0) {
        cmd->kv_copy_sequence(cache, static_cast<std::size_t>(a.copy_src), static_cast<std::size_t>(a.copy_dst));
      }
      if (a.submit) {
        cmd->submit_and_wait();
        cmd = std::make_unique<CommandList>(b.commands());
        keep.clear();
      }
      if (a.cut_seq >= 0 && a.reset) cache.reset(static_cast<std::size_t>(a.cut_seq));
      if (a.cut_seq >= 0 && !a.reset) cache.truncate(static_cast<std::size_t>(a.cut_seq), a.cut_at);
    }
    Tensor tq = b.tensor({n, heads, c.head_dim}, DType::f32), out = b.tensor({n, heads, vd}, DType::f32);
    Tensor scores = b.tensor({n, heads, c.capacity}, DType::f32), tm;
    b.upload(tq, q);
    if (!mask.empty()) {
      tm = b.tensor({n, c.capacity}, DType::f32);
      b.upload(tm, mask);
    }
    const AttentionTokens tokens{.q_positions = q_pos, .q_seq_ids = q_seq};
    if (stages) {
      AttentionConfig no_sinks = config;
      no_sinks.sinks.clear();
      cmd->attn_scores(tq, cache, scores, tokens, no_sinks, mask.empty() ? nullptr : &tm);
      Tensor probs = b.tensor({n, heads, c.capacity}, DType::f32);
      cmd->attn_softmax(scores, probs, config);
      cmd->attn_weighted_sum(probs, cache, out, tokens);
      cmd->submit_and_wait();
      return Outputs{b.download(out), b.download(scores)};
    }
    if (!f16) {
      cmd->attention(tq, cache, out, tokens, config, mask.empty() ? nullptr : &tm);
      cmd->submit_and_wait();
      return Outputs{b.download(out)};
    }
    AttentionConfig rounded = config;
    rounded.precision = AttentionPrecision::f16_products;
    if (rounded.path == AttentionPath::three_stages) rounded.path = AttentionPath::automatic;  // f32 alone
    cmd->attention(tq, cache, out, tokens, rounded, mask.empty() ? nullptr : &tm);
    Tensor exact = b.tensor({n, heads, vd}, DType::f32);
    if (!cpu) cmd->attention(tq, cache, exact, tokens, config, mask.empty() ? nullptr : &tm);
    cmd->submit_and_wait();
    if (cpu) {
      *chain = f16_chain(cmd->stats().attention.at(0));
      const std::vector<float> got = b.download(out);
      return Outputs{got, got};
    }
    return Outputs{b.download(out), b.download(exact)};
  };
  return call;
}

}  // namespace vkattn::fuzz
