// Random layers as an engine records them: per step, rope of q and k together, kv_append
// of the rotated k, attention of q over the cache, back to back. The Vulkan backend folds
// the rope into the append where it can and records the ops apart where it declines
// (docs/design.md: a rope of each tensor, v the rotated k, an op or a submit between);
// the CPU backend records them apart. Several steps, in one list or submitted apart, of
// one or more sequences, over a ring or paged f32 cache; then, at times, the last step's
// list replayed (set_tokens) at its sequences' next positions. Quantized and f16 caches of the
// layer are test_decode_layer.cpp's: a key rotated a rounding apart on the two backends
// can round to another code, a step of the block's scale that no bound here would cover.
#include <algorithm>
#include <cmath>
#include <memory>

#include "fuzz/fuzz_cases.hpp"
#include "support/attention_cases.hpp"

namespace vkattn::fuzz {

namespace {

struct Step {
  std::vector<std::int32_t> pos, seq;
  std::vector<float> q, k, v;
  bool apart = false;         // rope(q) and rope(k): declined
  bool v_is_k = false;        // the rotated k appended as v too: declined
  bool copy_between = false;  // a copy recorded between rope and kv_append: declined
  bool submit = false;        // submit the list after this step
};

// The last step's list again (set_tokens): its sequences' next tokens, new q, k and v.
struct Replay {
  std::vector<std::int32_t> pos;
  std::vector<float> q, k, v;
};

}  // namespace

ValidCall layer_call(Rng& r) {
  KvCacheConfig c;
  c.n_seqs = r.range(1, 3);
  c.n_kv_heads = r.range(1, 2);
  c.head_dim = 16;  // cache_call's f32 family
  c.capacity = r.range(4, 24);
  c.n_sinks = r.chance(0.3) ? r.range(0, c.capacity / 2) : 0;
  random_paging(r, c);
  const std::size_t ring = c.capacity - c.n_sinks, row = c.n_kv_heads * c.head_dim;
  const std::size_t heads = c.n_kv_heads * r.pick<std::size_t>({1, 4});
  const RopeConfig rope = random_rope_config(r, c.head_dim);

  const AttentionConfig config = random_cache_attention(r, heads, c.capacity);

  // Each step's tokens continue their sequences, up to 4 a sequence while every query's
  // keys stay held (attention refuses a query whose keys a later token of the call
  // overwrote): any number while no position is overwritten, a window's chunk (capacity -
  // sinks - window + 1) after that, or one.
  const std::size_t after_wrap =
      config.window && *config.window <= ring ? std::min<std::size_t>(ring - *config.window + 1, 4) : 1;
  const auto most = [&](std::int32_t at) {
    const std::size_t unwrapped = c.capacity > std::size_t(at) ? c.capacity - std::size_t(at) : 0;
    return std::max<std::size_t>(std::min<std::size_t>(unwrapped, 4), after_wrap);
  };
  std::vector<std::int32_t> next(c.n_seqs, 0);
  std::vector<Step> steps(r.range(1, 3));
  for (Step& s : steps) {
    std::vector<std::size_t> counts(c.n_seqs, 0);
    for (std::size_t q = 0; q < c.n_seqs; ++q) counts[q] = r.chance(0.6) ? r.range(1, most(next[q])) : 0;
    std::size_t& one = counts[r.range(0, c.n_seqs - 1)];
    one = std::max<std::size_t>(one, 1);
    interleave_tokens(r, counts, next, s.seq, s.pos);
    s.q = r.normals(s.pos.size() * heads * c.head_dim);
    s.k = r.normals(s.pos.size() * row);
    s.v = r.normals(s.pos.size() * row);
    s.apart = r.chance(0.15);
    s.v_is_k = r.chance(0.1);
    s.copy_between = r.chance(0.1);
    s.submit = r.chance(0.5);
  }

  // Replays of the last step's list, as engines decode (its list then holds its ops alone),
  // while each of its sequences may take its count of tokens at its next position.
  std::vector<Replay> replays;
  if (r.chance(0.3)) {
    if (steps.size() > 1) steps[steps.size() - 2].submit = true;
    const Step& last = steps.back();
    for (std::size_t j = r.range(1, 3); j > 0; --j) {
      std::vector<std::size_t> counts(c.n_seqs, 0);
      for (std::int32_t q : last.seq) ++counts[static_cast<std::size_t>(q)];
      bool fits = true;
      for (std::size_t q = 0; q < c.n_seqs; ++q) fits = fits && counts[q] <= most(next[q]);
      if (!fits) break;
      Replay p;
      for (std::int32_t q : last.seq) p.pos.push_back(next[static_cast<std::size_t>(q)]++);
      p.q = r.normals(last.q.size());
      p.k = r.normals(last.k.size());
      p.v = r.normals(last.v.size());
      replays.push_back(std::move(p));
    }
  }

  // Tolerances (fuzz_ops.cpp): RoPE within 1e-5 x the attention factor |af| of exact
  // (|x| < 6), and rotated elements at most sqrt(2) af |x|; a score then moves by up to
  // its scale and temperature times head_dim x 1e-5 af (max|q| + max|k|) more than over
  // exact rows, which the chain's score tolerance takes in.
  double max_q = 0, max_k = 0, max_v = 0;
  std::vector<std::int32_t> all_pos;
  for (const Step& s : steps) {
    max_q = std::max(max_q, test::max_abs(s.q));
    max_k = std::max(max_k, test::max_abs(s.k));
    max_v = std::max(max_v, test::max_abs(s.v));
    all_pos.insert(all_pos.end(), s.pos.begin(), s.pos.end());
  }
  for (const Replay& p : replays) {
    max_q = std::max(max_q, test::max_abs(p.q));
    max_k = std::max(max_k, test::max_abs(p.k));
    max_v = std::max(max_v, test::max_abs(p.v));
    all_pos.insert(all_pos.end(), p.pos.begin(), p.pos.end());
  }
  const std::int32_t span = *std::max_element(next.begin(), next.end()) + 1;
  const double af = rope_frequencies(rope, c.head_dim, span).attention_factor, rope_atol = 1e-5 * af;
  const double a = std::sqrt(2.0) * af * max_q, b = std::sqrt(2.0) * af * max_k;
  if (std::any_of(steps.begin(), steps.end(), [](const Step& s) { return s.v_is_k; })) max_v = std::max(max_v, b);
  const double dots = dot_bound(config, all_pos, c.head_dim, a, b);
  AttentionConfig uncapped = config;  // a soft cap moves no score by more than its input
  uncapped.softcap.reset();
  const double rope_shift = dot_bound(uncapped, all_pos, c.head_dim, 1, 1) * rope_atol * (a + b);
  const double magnitude = dots + (config.alibi ? span : 0.0);
  const double d = 1e-4 + 2e-6 * magnitude + rope_shift;
  const double out_atol = 1e-4 + (std::expm1(2 * d) + 1e-5) * max_v;

  ValidCall call{"a layer's rope, kv_append and attention", "", {}, nullptr};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    call.checks.push_back({"out of step " + std::to_string(i), {steps[i].pos.size(), heads, c.head_dim}, out_atol, 1e-4});
  }
  const Shape last_shape{steps.back().pos.size(), heads, c.head_dim};
  for (std::size_t i = 0; i < replays.size(); ++i)
    call.checks.push_back({"out of replay " + std::to_string(i), last_shape, out_atol, 1e-4});
  call.checks.push_back({"q of the last step (or replay)", last_shape, rope_atol, 0});
  call.description = "cache seqs " + std::to_string(c.n_seqs) + " kv_heads " + std::to_string(c.n_kv_heads) + " capacity " +
                     std::to_string(c.capacity) + " sinks " + std::to_string(c.n_sinks) +
                     (c.paged ? " paged " + std::to_string(c.n_blocks) + "x" + std::to_string(c.block_size) : "") + "; heads " +
                     std::to_string(heads) + "; " + describe(rope) + "; " + describe(config) + "; steps";
  for (const Step& s : steps) {
    call.description += " " + std::to_string(s.pos.size()) + (s.apart ? " apart" : "") + (s.v_is_k ? " v=k" : "") +
                        (s.copy_between ? " copy" : "") + (s.submit ? " submit" : "");
  }
  call.description += "; replays " + std::to_string(replays.size());

  call.run = [=](Backend& b, const Outputs*) {
    KvCache cache = b.kv_cache(c);
    auto cmd = std::make_unique<CommandList>(b.commands());
    std::vector<Tensor> outs;  // a list keeps what it records alive until it runs
    Outputs result;
    for (const Step& s : steps) {
      const std::size_t n = s.pos.size();
      Tensor q = b.tensor({n, heads, c.head_dim}, DType::f32), k = b.tensor({n, c.n_kv_heads, c.head_dim}, DType::f32);
      Tensor v = b.tensor({n, c.n_kv_heads, c.head_dim}, DType::f32), out = b.tensor({n, heads, c.head_dim}, DType::f32);
      b.upload(q, s.q);
      b.upload(k, s.k);
      b.upload(v, s.v);
      if (s.apart) {
        cmd->rope(q, s.pos, rope);
        cmd->rope(k, s.pos, rope);
      } else {
        cmd->rope(q, k, s.pos, rope);
      }
      if (s.copy_between) {
        Tensor dst = b.tensor(v.shape(), DType::f32);
        cmd->copy(v, dst);
      }
      cmd->kv_append(cache, k, s.v_is_k ? k : v, s.pos, s.seq);
      cmd->attention(q, cache, out, {.q_positions = s.pos, .q_seq_ids = s.seq}, config);
      if (&s != &steps.back()) {
        if (s.submit) {
          cmd->submit_and_wait();
          cmd = std::make_unique<CommandList>(b.commands());
        }
        outs.push_back(std::move(out));
        continue;
      }
      cmd->submit_and_wait();
      for (const Tensor& o : outs) result.push_back(b.download(o));
      result.push_back(b.download(out));
      for (const Replay& p : replays) {
        b.upload(q, p.q);
        b.upload(k, p.k);
        b.upload(v, p.v);
        cmd->set_tokens(p.pos, s.seq);
        cmd->submit_and_wait();
        result.push_back(b.download(out));
      }
      result.push_back(b.download(q));
    }
    return result;
  };
  return call;
}

}  // namespace vkattn::fuzz
