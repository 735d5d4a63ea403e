// Random valid calls of every op, with the tolerances Vulkan and the CPU reference must
// agree within (fuzz_ops.cpp states the model).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <memory>
#include <sstream>

#include "common/validate.hpp"
#include "fuzz/fuzz_cases.hpp"
#include "support/attention_cases.hpp"
#include "support/attention_io.hpp"
#include "support/f16_match.hpp"

namespace vkattn::fuzz {

using test::AttnInputs;
using test::AttnOutputs;

std::string shape_text(const Shape& s) { return detail::shape_string(s); }

std::string describe(const RopeConfig& c) {
  std::ostringstream o;
  o << "layout " << static_cast<int>(c.layout) << " rotary_dim " << c.rotary_dim << " rotary_offset " << c.rotary_offset
    << " base " << c.base << " scaling " << static_cast<int>(c.scaling) << " factor " << c.factor << " original_context "
    << c.original_context << " sequence_length " << c.sequence_length << " yarn " << c.yarn.beta_fast << "/" << c.yarn.beta_slow
    << "/" << c.yarn.mscale << "/" << c.yarn.mscale_all_dim << "/" << c.yarn.truncate << " llama3 " << c.llama3.low_freq_factor
    << "/" << c.llama3.high_freq_factor << " freq_factors " << c.freq_factors.size() << " attention_factor "
    << c.attention_factor.value_or(0);
  if (c.mrope) {
    o << " mrope " << c.mrope->sections[0] << "/" << c.mrope->sections[1] << "/" << c.mrope->sections[2]
      << (c.mrope->layout == MRopeLayout::interleaved ? " interleaved" : " contiguous");
  }
  return o.str();
}

std::string describe(const AttentionConfig& c) {
  std::ostringstream o;
  o << "scale " << c.scale.value_or(0) << " causal " << c.causal << " window " << c.window.value_or(0)
    << (c.window_type == WindowType::symmetric ? " symmetric" : "") << " chunk " << c.chunk.value_or(0);
  if (c.query_temperature) {
    const auto& t = *c.query_temperature;
    o << " temperature " << t.floor_scale << "/" << t.scale << "/" << t.offset;
  }
  o << " softcap " << c.softcap.value_or(0) << " alibi " << c.alibi << " slopes " << c.alibi_slopes.size() << " sinks "
    << c.sinks.size() << " path " << static_cast<int>(c.path) << " precision " << to_string(c.precision);
  return o.str();
}

int f16_chain(const AttentionRun& run) {
  const bool packed = run.precision == AttentionPrecision::f16_products &&
                      (run.kernel == AttentionKernel::tiled || run.kernel == AttentionKernel::group);
  return packed ? test::kPackedChain : 0;
}

std::vector<Check> f16_checks(double near, double far, double rms, const Shape& out) {
  return {{"out against the rounded-inputs oracle", out, near, 1e-4, rms}, {"out against the f32 reference", out, far, 1e-4}};
}

RopeConfig random_rope_config(Rng& r, std::size_t head_dim, bool for_cache) {
  RopeConfig c;
  c.layout = r.pick({RopeLayout::interleaved, RopeLayout::half});
  c.rotary_dim = r.chance(0.5) || head_dim % 4 ? 0 : head_dim / 2;  // each rotary_dim is a kernel variant
  const std::size_t d = c.rotary_dim ? c.rotary_dim : head_dim;
  // A slice after the offset (not for a cache: on_read refuses one).
  if (!for_cache && c.rotary_dim != 0 && r.chance(0.4)) c.rotary_offset = 2 * r.range(0, (head_dim - d) / 2);
  c.base = r.chance(0.7) ? r.pick({1e4, 5e5, 1e6}) : r.uniform(1.5, 1e7);
  c.scaling = r.pick({RopeScaling::none, RopeScaling::linear, RopeScaling::ntk, RopeScaling::dynamic_ntk, RopeScaling::yarn,
                      RopeScaling::llama3, RopeScaling::factors});
  if (for_cache && c.scaling == RopeScaling::yarn) c.scaling = RopeScaling::none;  // it scales attention
  if (d < 4 && (c.scaling == RopeScaling::ntk || c.scaling == RopeScaling::dynamic_ntk)) c.scaling = RopeScaling::linear;
  c.factor = r.uniform(1.0, 32.0);
  c.original_context = r.range(16, 8192);
  switch (c.scaling) {
    case RopeScaling::linear: c.factor = r.uniform(0.25, 16.0); break;
    case RopeScaling::dynamic_ntk: c.sequence_length = r.chance(0.5) ? 0 : r.range(1, 20000); break;
    case RopeScaling::yarn:
      c.yarn.beta_slow = r.uniform(0.5, 4.0);
      c.yarn.beta_fast = c.yarn.beta_slow + r.uniform(1.0, 40.0);
      if (r.chance(0.3)) {
        c.yarn.mscale = r.uniform(0.0, 1.0);
        c.yarn.mscale_all_dim = r.uniform(0.0, 1.0);
      }
      c.yarn.truncate = r.chance(0.5);
      break;
    case RopeScaling::llama3:
      c.llama3.low_freq_factor = r.uniform(0.5, 2.0);
      // Equal factors (Llama 4 Scout) leave no smooth band.
      c.llama3.high_freq_factor = c.llama3.low_freq_factor + (r.chance(0.2) ? 0.0 : r.uniform(0.5, 4.0));
      break;
    case RopeScaling::factors:
      for (std::size_t i = 0; i < d / 2; ++i) c.freq_factors.push_back(r.uniform(0.5, 8.0));
      break;
    default: break;
  }
  if (!for_cache && r.chance(0.2)) c.attention_factor = r.uniform(0.5, 2.0);
  return c;
}

namespace {

std::vector<std::int32_t> random_positions(Rng& r, std::size_t n) {
  std::vector<std::int32_t> p(n);
  const std::int64_t top = r.pick<std::int64_t>({64, 100000, 2147483647});
  for (auto& x : p)
    x = static_cast<std::int32_t>(
        r.range(static_cast<std::size_t>(top == 2147483647 ? top - 5000 : 0), static_cast<std::size_t>(top)));
  return p;
}

// RoPE on one tensor, or on Q and K in one dispatch. Each result is within 1e-6 * |x| of
// exact (README); with |x| < 6 and the attention factor: atol 1e-5 * factor. f16 outputs
// round the same values: one f16 ulp, rtol 1e-3 (atol 1e-3 near zero).
ValidCall rope_call(Rng& r) {
  const std::size_t n = r.range(1, 9), h = r.range(1, 5), hk = r.range(1, 4);
  const std::size_t d = r.pick<std::size_t>({6, 16, 64, 320});  // pairs, 16-byte vectors, two rows' worth
  const DType dt = r.pick({DType::f32, DType::f16});
  const bool pair = r.chance(0.4);
  RopeConfig config = random_rope_config(r, d);
  // M-RoPE: three positions per token, sections drawn to add up to the rotary pairs.
  const bool mrope = r.chance(0.2);
  if (mrope) {
    const std::uint32_t pairs = static_cast<std::uint32_t>((config.rotary_dim ? config.rotary_dim : d) / 2);
    const auto a = static_cast<std::uint32_t>(r.range(0, pairs)), b = static_cast<std::uint32_t>(r.range(0, pairs - a));
    config.mrope =
        MRope{.sections = {a, b, pairs - a - b}, .layout = r.pick({MRopeLayout::contiguous, MRopeLayout::interleaved})};
  }
  const std::vector<std::int32_t> pos = random_positions(r, mrope ? 3 * n : n);
  const std::vector<float> x = r.normals(n * h * d), y = r.normals(n * hk * d);
  const double af = rope_frequencies(config, d, *std::max_element(pos.begin(), pos.end())).attention_factor;
  const double atol = dt == DType::f16 ? 1e-3 * af : 1e-5 * af, rtol = dt == DType::f16 ? 1e-3 : 0;
  ValidCall call{"rope", "", {{"x", {n, h, d}, atol, rtol}}, nullptr};
  if (pair) call.checks.push_back({"k", {n, hk, d}, atol, rtol});
  call.description = "x " + shape_text({n, h, d}) + (pair ? " k " + shape_text({n, hk, d}) : "") + " " + to_string(dt) +
                     " positions from " + std::to_string(pos[0]) + "; " + describe(config);
  call.run = [=](Backend& b, const Outputs*) {
    Tensor tx = b.tensor({n, h, d}, dt), ty = b.tensor({n, hk, d}, dt);
    b.upload(tx, x);
    b.upload(ty, y);
    CommandList cmd = b.commands();
    if (pair) {
      cmd.rope(tx, ty, pos, config);
    } else {
      cmd.rope(tx, pos, config);
    }
    cmd.submit_and_wait();
    Outputs out{b.download(tx)};
    if (pair) out.push_back(b.download(ty));
    return out;
  };
  return call;
}

// A copy between shapes of one element count: exact.
ValidCall copy_call(Rng& r) {
  const std::size_t n = r.range(1, 3000);
  const DType dt = r.pick({DType::f32, DType::f16, DType::i32});
  const Shape src = r.chance(0.5) ? Shape{n} : Shape{1, n}, dst = r.chance(0.5) ? Shape{n, 1} : Shape{n};
  std::vector<float> x = r.normals(n, 100.0);
  if (dt == DType::i32) {
    for (float& v : x) v = std::round(v);
  }
  ValidCall call{
      "copy", "src " + shape_text(src) + " dst " + shape_text(dst) + " " + to_string(dt), {{"dst", dst, 0, 0}}, nullptr};
  call.run = [=](Backend& b, const Outputs*) {
    Tensor a = b.tensor(src, dt), c = b.tensor(dst, dt);
    if (dt == DType::i32) {
      b.upload(a, std::vector<std::int32_t>(x.begin(), x.end()));
    } else {
      b.upload(a, x);
    }
    CommandList cmd = b.commands();
    cmd.copy(a, c);
    cmd.submit_and_wait();
    if (dt != DType::i32) return Outputs{b.download(c)};
    const auto ints = b.download_i32(c);
    return Outputs{std::vector<float>(ints.begin(), ints.end())};
  };
  return call;
}

}  // namespace

// The window's direction, chunks and the query temperature (fuzz_cache.cpp draws them too).
// A symmetric window is bidirectional (causal with it is refused).
void random_visibility(Rng& r, AttentionConfig& c, std::size_t keys) {
  if (c.window && r.chance(0.3)) {
    c.window_type = WindowType::symmetric;
    c.causal = false;
  }
  if (r.chance(0.15)) c.chunk = static_cast<std::uint32_t>(r.range(1, keys + 2));
  if (r.chance(0.15)) {
    c.query_temperature = QueryTemperature{.floor_scale = static_cast<std::uint32_t>(r.range(1, 64)),
                                           .scale = r.uniform(-0.3, 0.5),
                                           .offset = static_cast<std::uint32_t>(r.range(0, 3))};
  }
}

namespace {

AttentionConfig random_attention_config(Rng& r, std::size_t heads, std::size_t keys, std::size_t head_dim) {
  AttentionConfig c;
  c.causal = r.chance(0.8);
  if (r.chance(0.3)) c.window = static_cast<std::uint32_t>(r.range(1, keys + 2));
  random_visibility(r, c, keys);
  if (r.chance(0.2)) c.softcap = r.uniform(1.0, 50.0);
  if (r.chance(0.2)) c.scale = r.uniform(-0.5, 2.0) / std::sqrt(static_cast<double>(head_dim));
  if (r.chance(0.1)) {
    for (std::size_t h = 0; h < heads; ++h) c.alibi_slopes.push_back(static_cast<float>(r.uniform(-0.5, 0.5)));
  } else {
    c.alibi = r.chance(0.15);
  }
  if (r.chance(0.25)) c.sinks = r.normals(heads, 2.0);
  c.path = r.pick({AttentionPath::automatic, AttentionPath::fused, AttentionPath::three_stages});
  return c;
}

// The shape families attention calls come from: token count (decode, prefill), GQA group,
// head_dim (odd, unaligned, aligned, wide), dtypes. The kernels are specialized on these, and
// lavapipe compiles each specialization on first use (about a second each), so a bounded
// set keeps the fuzz fast once its pipelines are built; KV heads, key counts, sequences,
// positions, config, masks and values are drawn freely.
struct Family {
  std::size_t tokens, group, head_dim;
  DType q, kv;
  bool long_keys = false;  // 200 to 2048 keys: split-key paths
};
constexpr Family kFamilies[] = {
    {1, 1, 64, DType::f32, DType::f32},
    {1, 4, 128, DType::f16, DType::f16},
    {5, 1, 16, DType::f32, DType::f32},
    {5, 4, 64, DType::f32, DType::f16},
    {3, 2, 3, DType::f32, DType::f32},
    {2, 1, 13, DType::f16, DType::f16},
    {8, 2, 32, DType::f16, DType::f16},
    {1, 1, 128, DType::f32, DType::f16, true},
    // Decode of a big group over wide heads (absorbed MLA's width): the group kernel's on
    // the GPU shape (heads over 256 in groups of 16 rows or more).
    {1, 16, 576, DType::f16, DType::f16},
    // Prefill of 256 rows a KV head: the tiled kernel's on the GPU shape (fewer row tiles
    // than 4 a compute unit take the decode kernel).
    {64, 4, 64, DType::f16, DType::f16},
};

constexpr const Family& kPrefillFamily = kFamilies[std::size(kFamilies) - 1];
constexpr const Family& kWideFamily = kFamilies[std::size(kFamilies) - 2];

// q, k, v, positions (several sequences, interleaved), dtypes, config and mask; of |family|
// where given.
AttnInputs random_attention_inputs(Rng& r, const Family* family = nullptr) {
  const Family& f = family ? *family : kFamilies[r.range(0, std::size(kFamilies) - 1)];
  const std::size_t kv_heads = r.range(1, 3), heads = kv_heads * f.group;
  const std::size_t keys = f.long_keys ? r.range(200, 2048) : r.range(1, 48);
  const std::size_t seqs = r.range(1, 3);
  AttnInputs in = test::random_inputs(f.tokens, heads, kv_heads, keys, f.head_dim, seqs, r.engine()(),
                                      static_cast<std::int32_t>(r.range(0, 64)), r.pick({0.5f, 1.0f, 2.0f}));
  if (r.chance(0.3)) {
    const auto top = static_cast<std::size_t>(*std::max_element(in.k_pos.begin(), in.k_pos.end())) + 3;
    for (auto& p : in.q_pos) p = static_cast<std::int32_t>(r.range(0, top));
  }
  in.q_dtype = f.q;
  in.kv_dtype = f.kv;
  in.config = random_attention_config(r, heads, keys, f.head_dim);
  if (r.chance(0.3)) {
    in.mask = r.normals(f.tokens * keys, 2.0);
    for (float& m : in.mask) m = r.chance(0.15) ? -test::kInf : m;
  }
  return in;
}

std::string describe_inputs(const AttnInputs& in) {
  return "q " + shape_text({in.tokens, in.heads, in.head_dim}) + " " + to_string(in.q_dtype) + ", k/v " +
         shape_text({in.keys, in.kv_heads, in.head_dim}) + " " + to_string(in.kv_dtype) + ", mask " +
         (in.mask.empty() ? "none" : "yes") + ", seqs " +
         std::to_string(in.q_seq.empty() ? 1 : 1 + *std::max_element(in.q_seq.begin(), in.q_seq.end())) + "; " +
         describe(in.config);
}

// Tolerances of the attention model (tests/test_attention_vulkan.cpp): a score within
// 1e-4 + 2e-6 M (M: the magnitude of its terms) and 1e-5 relative; probabilities on the
// same scores within 1e-5; out on the same probabilities within 1e-4 (2e-4 with f16
// inputs) and 1e-4 relative; out of the whole chain within that plus (e^(2d) - 1) max|v|
// for scores off by d.
struct AttnTolerance {
  double scores_atol, out_atol, chained_out_atol;
};
AttnTolerance attention_tolerance(double magnitude, bool f16, double max_v) {
  const double d = 1e-4 + 2e-6 * magnitude, o = f16 ? 2e-4 : 1e-4;
  return {d, o, o + (std::expm1(2 * d) + 1e-5) * max_v};
}

// The three stages, each fed the CPU's results of the previous one on Vulkan.
ValidCall stages_call(Rng& r) {
  const AttnInputs in = random_attention_inputs(r);
  const bool f16 = in.q_dtype == DType::f16 || in.kv_dtype == DType::f16;
  const AttnTolerance tol = attention_tolerance(test::score_magnitude(in), f16, test::max_abs(in.v));
  ValidCall call{"attn_scores, attn_softmax, attn_weighted_sum",
                 describe_inputs(in),
                 {{"scores", in.scores_shape(), tol.scores_atol, 1e-5},
                  {"probs", in.scores_shape(), 1e-5, 0},
                  {"out", in.out_shape(), tol.out_atol, 1e-4}},
                 nullptr};
  call.run = [in](Backend& b, const Outputs* cpu) {
    const AttnOutputs feed = cpu ? AttnOutputs{(*cpu)[0], (*cpu)[1], (*cpu)[2]} : AttnOutputs{};
    const AttnOutputs o = test::run_attention(b, in, cpu ? &feed : nullptr);
    return Outputs{o.scores, o.probs, o.out};
  };
  return call;
}

// Softmax alone on raw logits: -inf entries, rows with nothing visible, huge logits; in
// place or not.
ValidCall softmax_call(Rng& r) {
  const std::size_t n = r.range(1, 6), h = r.range(1, 5), keys = r.chance(0.2) ? r.range(300, 3000) : r.range(1, 60);
  const double scale = r.pick({1.0, 30.0, 1e4});
  std::vector<float> s = r.normals(n * h * keys, scale);
  const double hidden = r.pick({0.0, 0.3, 1.0});
  for (float& x : s) x = r.chance(hidden) ? -test::kInf : x;
  AttentionConfig config;
  if (r.chance(0.3)) config.sinks = r.normals(h, scale);
  const bool in_place = r.chance(0.5);
  ValidCall call{"attn_softmax",
                 "scores " + shape_text({n, h, keys}) + " ~N(0, " + std::to_string(scale) + "), hidden " +
                     std::to_string(hidden) + (in_place ? ", in place" : "") + "; " + describe(config),
                 {{"probs", {n, h, keys}, 1e-5, 0}},
                 nullptr};
  call.run = [=](Backend& b, const Outputs*) {
    Tensor ts = b.tensor({n, h, keys}, DType::f32), tp = b.tensor({n, h, keys}, DType::f32);
    b.upload(ts, s);
    CommandList cmd = b.commands();
    cmd.attn_softmax(ts, in_place ? ts : tp, config);
    cmd.submit_and_wait();
    return Outputs{b.download(in_place ? ts : tp)};
  };
  return call;
}

// The attention op with f16 products, against the CPU's rounded-inputs oracle and its f32
// reference within support/f16_match.hpp's bounds and RMS check (docs/attention.md), those
// of packed f16 chains where the Vulkan run took them: the matrix kernels' stand-in runs it
// on the first Vulkan backend, the packed f16 tiled or group kernel on the GPU-shaped one,
// f32 kernels elsewhere (a kernel may be more precise than asked).
ValidCall f16_attention_call(AttnInputs in) {
  in.config.precision = AttentionPrecision::f16_products;
  if (in.config.path == AttentionPath::three_stages) in.config.path = AttentionPath::automatic;  // f32 alone
  auto chain = std::make_shared<int>(0);
  const auto checks = [in, chain] {
    const test::F16Bounds b = test::f16_bounds(test::score_magnitude(in), test::max_abs(in.v), test::rms(in.v),
                                               in.q_dtype == DType::f16 || in.kv_dtype == DType::f16, in.kv_dtype != DType::f16,
                                               *chain, test::dot_magnitude(in));
    return f16_checks(b.near, b.far, b.rms, in.out_shape());
  };
  ValidCall call{"attention", describe_inputs(in), {}, nullptr, checks};
  call.run = [in, chain](Backend& backend, const Outputs* cpu) {
    CommandStats stats;
    std::vector<float> out = test::run_attention_op(backend, in, &stats);
    if (cpu) {
      *chain = f16_chain(stats.attention.at(0));
      return Outputs{out, out};
    }
    AttentionConfig exact = in.config;
    exact.precision = AttentionPrecision::f32;
    return Outputs{std::move(out), test::run_attention_op(backend, in, exact)};
  };
  return call;
}

// Attention in one op, on any path; with f16 products (fused) in 3 of 10, half of those a
// prefill of the tiled kernel's and a fifth a decode step of the group kernel's (drawn
// afresh, so that the f32 calls draw as they would without them).
ValidCall attention_call(Rng& r) {
  AttnInputs in = random_attention_inputs(r);
  if (r.chance(0.3)) {
    const double u = r.uniform(0, 1);
    if (u < 0.7) in = random_attention_inputs(r, u < 0.5 ? &kPrefillFamily : &kWideFamily);
    return f16_attention_call(std::move(in));
  }
  const bool f16 = in.q_dtype == DType::f16 || in.kv_dtype == DType::f16;
  const AttnTolerance tol = attention_tolerance(test::score_magnitude(in), f16, test::max_abs(in.v));
  ValidCall call{"attention", describe_inputs(in), {{"out", in.out_shape(), tol.chained_out_atol, 1e-4}}, nullptr};
  call.run = [in](Backend& b, const Outputs*) {
    const test::AttnInputTensors t = test::upload_inputs(b, in);
    Tensor out = b.tensor(in.out_shape(), DType::f32);
    CommandList cmd = b.commands();
    cmd.attention(t.q, t.k, t.v, out, {in.q_pos, in.k_pos, in.q_seq, in.k_seq}, in.config, t.mask_or_null());
    cmd.submit_and_wait();
    return Outputs{b.download(out)};
  };
  return call;
}

}  // namespace

ValidCall random_valid_call(Rng& r) {
  switch (r.range(0, 6)) {
    case 0: return rope_call(r);
    case 1: return copy_call(r);
    case 2: return stages_call(r);
    case 3: return softmax_call(r);
    case 4: return attention_call(r);
    case 5: return cache_call(r);
    default: return layer_call(r);
  }
}

}  // namespace vkattn::fuzz
