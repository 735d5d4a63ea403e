#include "common/rope_math.hpp"

#include <algorithm>
#include <cmath>

#include "common/validate.hpp"

namespace vkattn::detail {

namespace {

constexpr long double kPi = 3.141592653589793238462643383279502884L;

// YaRN's m(s, mscale) = 0.1 * mscale * ln(s) + 1, and 1 for s <= 1.
long double yarn_mscale(long double scale, long double mscale) {
  return scale <= 1.0L ? 1.0L : 0.1L * mscale * std::log(scale) + 1.0L;
}

}  // namespace

RopeTable rope_table(const RopeConfig& c, std::int32_t max_position) {
  const std::size_t half = c.rotary_dim / 2;
  const long double d = static_cast<long double>(c.rotary_dim);
  const long double factor = c.factor;
  const long double original = static_cast<long double>(c.original_context);
  long double base = c.base;

  if (c.scaling == RopeScaling::ntk) {
    base *= std::pow(factor, d / (d - 2.0L));
  } else if (c.scaling == RopeScaling::dynamic_ntk) {
    const long double seq =
        c.sequence_length ? static_cast<long double>(c.sequence_length) : static_cast<long double>(max_position) + 1.0L;
    const long double len = std::max(seq, original);
    base *= std::pow(factor * len / original - (factor - 1.0L), d / (d - 2.0L));
  }

  RopeTable t;
  t.theta.resize(half);
  for (std::size_t i = 0; i < half; ++i) t.theta[i] = std::pow(base, -2.0L * static_cast<long double>(i) / d);

  switch (c.scaling) {
    case RopeScaling::none:
    case RopeScaling::ntk:
    case RopeScaling::dynamic_ntk: break;
    case RopeScaling::linear:
      for (auto& th : t.theta) th /= factor;
      break;
    case RopeScaling::factors:
      for (std::size_t i = 0; i < half; ++i) t.theta[i] /= static_cast<long double>(c.freq_factors[i]);
      break;
    case RopeScaling::yarn: {
      // The dim whose frequency turns |rotations| times over the original context.
      auto correction_dim = [&](long double rotations) {
        return d * std::log(original / (rotations * 2.0L * kPi)) / (2.0L * std::log(base));
      };
      long double low = correction_dim(c.yarn.beta_fast), high = correction_dim(c.yarn.beta_slow);
      if (c.yarn.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0L);
      high = std::min(high, d - 1.0L);
      if (low == high) high += 0.001L;  // as transformers does, to avoid dividing by zero
      for (std::size_t i = 0; i < half; ++i) {
        const long double ramp = std::clamp((static_cast<long double>(i) - low) / (high - low), 0.0L, 1.0L);
        // ramp 0: extrapolate (keep theta); ramp 1: interpolate (theta / factor).
        t.theta[i] = t.theta[i] / factor * ramp + t.theta[i] * (1.0L - ramp);
      }
      const auto& y = c.yarn;
      t.attention_factor = (y.mscale != 0.0 && y.mscale_all_dim != 0.0)
                               ? yarn_mscale(factor, y.mscale) / yarn_mscale(factor, y.mscale_all_dim)
                               : yarn_mscale(factor, 1.0L);
      break;
    }
    case RopeScaling::llama3: {
      const long double low_ff = c.llama3.low_freq_factor, high_ff = c.llama3.high_freq_factor;
      const long double low_wavelen = original / low_ff, high_wavelen = original / high_ff;
      for (auto& th : t.theta) {
        const long double wavelen = 2.0L * kPi / th;
        if (wavelen > low_wavelen) {
          th /= factor;
        } else if (wavelen >= high_wavelen && high_ff > low_ff) {  // equal factors: no band
          const long double smooth = (original / wavelen - low_ff) / (high_ff - low_ff);
          th = (1.0L - smooth) * th / factor + smooth * th;
        }
      }
      break;
    }
  }
  if (c.attention_factor) t.attention_factor = *c.attention_factor;
  return t;
}

std::vector<std::uint64_t> rope_turns_fixed(const std::vector<long double>& theta) {
  std::vector<std::uint64_t> out(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) {
    long double turns = theta[i] / (2.0L * kPi);
    turns -= std::floor(turns);  // whole turns per token do not change the angle
    const long double fixed = std::round(std::ldexp(turns, 64));
    // A fraction within half an ulp of 1 rounds to 2^64, which is a whole turn: 0.
    out[i] = fixed >= 18446744073709551616.0L ? 0 : static_cast<std::uint64_t>(fixed);
  }
  return out;
}

const RopeTurns& rope_turn_words(const RopeConfig& c, std::int32_t max_position) {
  // Every field the table depends on; the largest position only where it matters. The
  // key's memory is kept: every recorded or replayed RoPE op looks its table up here.
  thread_local std::vector<double> key;
  key.assign({static_cast<double>(c.rotary_dim), c.base, static_cast<double>(c.scaling), c.factor,
              static_cast<double>(c.original_context), static_cast<double>(c.sequence_length), c.yarn.beta_fast, c.yarn.beta_slow,
              c.yarn.mscale, c.yarn.mscale_all_dim, c.yarn.truncate ? 1.0 : 0.0, c.llama3.low_freq_factor,
              c.llama3.high_freq_factor, c.attention_factor ? 1.0 : 0.0, c.attention_factor.value_or(0.0),
              table_follows_positions(c) ? static_cast<double>(max_position) : 0.0});
  key.insert(key.end(), c.freq_factors.begin(), c.freq_factors.end());
  struct Entry {
    std::vector<double> key;
    RopeTurns turns;
  };
  thread_local std::vector<Entry> recent;  // most recent last
  for (const Entry& e : recent) {
    if (e.key == key) return e.turns;
  }
  const RopeTable table = rope_table(c, max_position);
  RopeTurns turns;
  for (std::uint64_t t : rope_turns_fixed(table.theta)) {
    turns.words.push_back(static_cast<std::uint32_t>(t));
    turns.words.push_back(static_cast<std::uint32_t>(t >> 32));
  }
  turns.attention_factor = static_cast<double>(table.attention_factor);
  if (recent.size() == 4) recent.erase(recent.begin());
  recent.push_back({key, std::move(turns)});
  return recent.back().turns;
}

}  // namespace vkattn::detail

namespace vkattn {

RopeFrequencies rope_frequencies(const RopeConfig& config, std::size_t head_dim, std::int32_t max_position) try {
  if (max_position < 0) {
    throw InvalidArgument("rope_frequencies", "max_position", std::to_string(max_position), "[0, 2^31 - 1]");
  }
  // The rope op's bound: a wrong head_dim is named rather than allocated for.
  if (head_dim > kMaxHeadDim) {
    throw InvalidArgument("rope_frequencies", "head_dim", std::to_string(head_dim),
                          "[2, kMaxHeadDim = " + std::to_string(kMaxHeadDim) + "]");
  }
  const RopeConfig checked = detail::check_rope_config("rope_frequencies", config, head_dim);
  const detail::RopeTable t = detail::rope_table(checked, max_position);
  RopeFrequencies out;
  out.theta.assign(t.theta.begin(), t.theta.end());
  out.attention_factor = static_cast<double>(t.attention_factor);
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("rope_frequencies");
}

}  // namespace vkattn
