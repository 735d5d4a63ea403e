// The environment's tuning knobs for the GPU-shaped kernels: the comma-separated key=value
// lists of $VKATTN_DECODE and $VKATTN_PREFILL (the tiled and matrix kernels'), read once
// when a backend is made; a bad item is an InvalidArgument naming the variable.
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

#include "vkattn/error.hpp"
#include "vulkan/context.hpp"

namespace vkattn::detail {

void parse_knobs(const char* var, const char* valid,
                 const std::function<bool(const std::string& key, const std::string& value)>& take) {
  const char* env = std::getenv(var);
  if (!env || !*env) return;
  const std::string all = env;
  std::size_t at = 0;
  while (at <= all.size()) {
    const std::size_t comma = std::min(all.find(',', at), all.size());
    const std::string item = all.substr(at, comma - at);
    at = comma + 1;
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) throw InvalidArgument("create backend", var, all, valid);
    if (!take(item.substr(0, eq), item.substr(eq + 1))) throw InvalidArgument("create backend", var, item, valid);
  }
}

bool parse_reduce(const std::string& value, ReduceKnob& out) {
  if (value != "auto" && value != "subgroup" && value != "shared") return false;
  out = value == "auto" ? ReduceKnob::automatic : value == "subgroup" ? ReduceKnob::subgroup : ReduceKnob::shared;
  return true;
}

bool parse_parts(const std::string& value, std::initializer_list<std::string_view> names, std::uint32_t& bits) {
  bits = 0;
  if (value == "none") return true;
  std::string_view rest = value;
  while (true) {
    const std::size_t plus = rest.find('+');
    const auto it = std::find(names.begin(), names.end(), rest.substr(0, plus));
    if (it == names.end() || (bits >> (it - names.begin()) & 1u)) return false;
    bits |= 1u << (it - names.begin());
    if (plus == std::string_view::npos) return true;
    rest.remove_prefix(plus + 1);
  }
}

std::uint32_t knob_number(const char* var, const std::string& key, const std::string& value) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || v > 1u << 20) {
    throw InvalidArgument("create backend", var, key + "=" + value, key + "=<a number up to 2^20>");
  }
  return static_cast<std::uint32_t>(v);
}

bool merge_in_dispatch(DecodeTuning::Merge knob, bool portability_subset) {
  return knob == DecodeTuning::Merge::last || (knob == DecodeTuning::Merge::automatic && !portability_subset);
}

DecodeTuning decode_tuning_from_env() {
  DecodeTuning t;
  const char* valid =
      "a comma-separated list of kernel=auto|decode|group, reduce=auto|subgroup|shared, "
      "merge=auto|last|two_pass, keys=N, resident=N, lanes=N, workgroup=N, keys_per_split=N, interleave=0|1, "
      "load_only=0|1, skip=none or parts of exchange+end+merge, depth=1|2|3, run=N, divide=0|1, packed=0|1, "
      "max=lazy|exact";
  parse_knobs("VKATTN_DECODE", valid, [&](const std::string& key, const std::string& value) {
    const auto number = [&] { return knob_number("VKATTN_DECODE", key, value); };
    if (key == "kernel" && (value == "auto" || value == "decode" || value == "group")) {
      t.kernel = value == "auto"     ? DecodeTuning::Kernel::automatic
                 : value == "decode" ? DecodeTuning::Kernel::decode
                                     : DecodeTuning::Kernel::group;
    } else if (key == "reduce" && parse_reduce(value, t.reduce)) {  // parsed into t.reduce
    } else if (key == "merge" && (value == "auto" || value == "last" || value == "two_pass")) {
      t.merge = value == "auto"   ? DecodeTuning::Merge::automatic
                : value == "last" ? DecodeTuning::Merge::last
                                  : DecodeTuning::Merge::two_pass;
    } else if (key == "keys") {
      t.keys = std::min(number(), 8u);
    } else if (key == "resident") {
      t.resident = number();
    } else if (key == "lanes") {
      t.lanes = number();
    } else if (key == "workgroup") {
      t.workgroup = number();
    } else if (key == "keys_per_split") {
      t.keys_per_split = number();
    } else if (key == "interleave" && (value == "0" || value == "1")) {
      t.interleave = value == "1";
    } else if (key == "load_only" && (value == "0" || value == "1")) {
      t.load_only = value == "1";
    } else if (key == "skip") {
      return parse_parts(value, {"exchange", "end", "merge"}, t.skip);
    } else if (key == "max" && (value == "lazy" || value == "exact")) {
      t.lazy_max = value == "lazy";
    } else if (key == "depth" && (value == "1" || value == "2" || value == "3")) {
      t.depth = static_cast<std::uint32_t>(value[0] - '0');
    } else if (key == "run") {
      t.run = std::clamp(std::bit_floor(number()), 1u, 64u);
    } else if (key == "divide" && (value == "0" || value == "1")) {
      t.divide = value == "1";
    } else if (key == "packed" && (value == "0" || value == "1")) {
      t.packed = value == "1";
    } else {
      return false;
    }
    return true;
  });
  return t;
}

PrefillTuning prefill_tuning_from_env() {
  PrefillTuning t;
  const char* valid =
      "a comma-separated list of kernel=auto|tiled|lane_per_key, reduce=auto|subgroup|shared, prefetch=0|1, and powers of "
      "two rows=N, keys=N (up to 64), rows_per_invocation=N, keys_per_invocation=N (up to 8); the matrix kernel's "
      "matrix_rows=16|32|64, matrix_keys=16|32|64, matrix_queries=shared|registers, matrix_prefetch=0|1, "
      "matrix_stage=loop|batch, matrix_nv2=0|1, and (a probe: "
      "no valid result) matrix_skip=none or parts of loads+scalar+products+marks";
  parse_knobs("VKATTN_PREFILL", valid, [&](const std::string& key, const std::string& value) {
    const auto power_of_two = [&](std::uint32_t most) {
      const std::uint32_t n = knob_number("VKATTN_PREFILL", key, value);
      if (!std::has_single_bit(n) || n > most) {
        throw InvalidArgument("create backend", "VKATTN_PREFILL", key + "=" + value,
                              key + "=<a power of two up to " + std::to_string(most) + ">");
      }
      return n;
    };
    if (key == "kernel" && (value == "auto" || value == "tiled" || value == "lane_per_key")) {
      t.kernel = value == "auto"    ? PrefillTuning::Kernel::automatic
                 : value == "tiled" ? PrefillTuning::Kernel::tiled
                                    : PrefillTuning::Kernel::lane_per_key;
    } else if (key == "reduce" && parse_reduce(value, t.reduce)) {  // parsed into t.reduce
    } else if (key == "prefetch" && (value == "0" || value == "1")) {
      t.prefetch = value == "1";
    } else if (key == "rows") {
      t.rows = power_of_two(64);
    } else if (key == "keys") {
      t.keys = power_of_two(64);
    } else if (key == "rows_per_invocation") {
      t.rows_per_invocation = power_of_two(8);
    } else if (key == "keys_per_invocation") {
      t.keys_per_invocation = power_of_two(8);
    } else if ((key == "matrix_rows" || key == "matrix_keys") && (value == "16" || value == "32" || value == "64")) {
      (key == "matrix_rows" ? t.matrix_rows : t.matrix_keys) = static_cast<std::uint32_t>(std::stoul(value));
    } else if (key == "matrix_queries" && (value == "shared" || value == "registers")) {
      t.matrix_queries = value == "shared" ? PrefillTuning::MatrixQueries::shared : PrefillTuning::MatrixQueries::registers;
    } else if (key == "matrix_prefetch" && (value == "0" || value == "1")) {
      t.matrix_prefetch = value == "1";
    } else if (key == "matrix_nv2" && (value == "0" || value == "1")) {
      t.matrix_nv2 = value == "1";
    } else if (key == "matrix_stage" && (value == "loop" || value == "batch")) {
      t.matrix_batch = value == "batch";
    } else if (key == "matrix_skip") {
      return parse_parts(value, {"loads", "scalar", "products", "marks"}, t.matrix_skip);
    } else {
      return false;
    }
    return true;
  });
  return t;
}

}  // namespace vkattn::detail
