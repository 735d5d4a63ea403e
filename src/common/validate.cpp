// The ops' checks (declared with their calls, common/op_call.hpp) and the helpers they share.
#include "common/op_call.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/kv_cache_impl.hpp"
#include "common/quant.hpp"

namespace vkattn::detail {

std::string shape_string(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

void check_new_tensor(const char* op, const Shape& shape, DType dtype) {
  if (shape.empty()) throw InvalidArgument(op, "shape", "[]", "at least one dimension");
  std::size_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      throw InvalidArgument(op, "shape[" + std::to_string(i) + "]", "0", ">= 1");
    }
    if (n > (std::size_t{1} << 40) / shape[i]) {
      throw InvalidArgument(op, "shape", shape_string(shape), "at most 2^40 elements");
    }
    n *= shape[i];
  }
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::i32 && !is_quantized(dtype)) {
    throw InvalidArgument(op, "dtype", std::to_string(static_cast<int>(dtype)), "f32, f16, i32, q8_0 or q4_0");
  }
  if (is_quantized(dtype) && shape.back() % kQuantBlock != 0) {
    throw InvalidArgument(op, "shape[" + std::to_string(shape.size() - 1) + "]", std::to_string(shape.back()),
                          std::string("a multiple of 32 for ") + to_string(dtype) + " (blocks of 32 along the last dimension)");
  }
}

const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param, const Tensor& t, const void* owner) {
  if (!t.valid()) throw InvalidArgument(op, param, kEmptyTensor, "a tensor made by Backend::tensor");
  if (t.impl()->owner != owner) {
    throw InvalidArgument(op, param, "a tensor of another backend",
                          "a tensor made by the same backend (for an op of a list: the one that made the list)");
  }
  return t.impl();
}

const std::shared_ptr<KvCacheImpl>& check_cache(const char* op, const KvCache& cache, const void* owner, const char* made_by) {
  if (!cache.valid()) throw InvalidArgument(op, "cache", kEmptyCache, "a cache made by Backend::kv_cache");
  if (cache.impl()->owner != owner) {
    throw InvalidArgument(op, "cache", "a cache of another backend", std::string("a cache made by ") + made_by);
  }
  return cache.impl();
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A kernel that writes |out| while reading an input it aliases would race with itself
// inside one dispatch; only attn_softmax documents in-place use.
void check_distinct(const char* op, const char* out_name, const TensorImpl& out,
                    std::initializer_list<std::pair<const char*, const TensorImpl*>> inputs) {
  for (auto [name, in] : inputs) {
    if (in == &out) {
      throw InvalidArgument(op, out_name, std::string("the tensor given as ") + name,
                            std::string("a tensor other than ") + name + " (an op's output may not be one of its inputs)");
    }
    if (in && out.overlaps(*in)) {
      throw InvalidArgument(op, out_name, std::string("a view sharing bytes with ") + name,
                            std::string("bytes apart from ") + name + " (an op's output may not share bytes with its inputs)");
    }
  }
}

// The kernels compute in float: a double past float's range becomes inf there, and one
// below its normal range 0 (a soft-cap of 0 is none; a RoPE base of 0 rotates nothing).
void check_positive(const char* op, const std::string& param, double v) {
  if (!(v >= std::numeric_limits<float>::min() && v <= std::numeric_limits<float>::max())) {
    throw InvalidArgument(op, param, num(v), "finite and > 0 as a float: [1.2e-38, 3.4e38]");
  }
}

void rethrow_allocation(const Error& e, const std::string& what, const std::string& op) {
  if (e.code() != ErrorCode::out_of_memory) throw;
  constexpr std::string_view tensor = "tensor ";
  const std::string& m = e.message();
  throw Error(e.code(), m.starts_with(tensor) ? what + m.substr(tensor.size() - 1) : what + ": " + m, e.call(), e.vk_result(),
              op);
}

void check_device_options(const DeviceOptions& options, const char* op) {
  if (options.submit_timeout_ms == 0) {
    throw InvalidArgument(op, "options.submit_timeout_ms", "0", "[1, 4294967295] ms");
  }
  // A NUL would end the name or path where the C and the Vulkan calls read it: another
  // device, another directory.
  for (const auto& [param, text] :
       {std::pair{"options.device", &options.device}, {"options.pipeline_cache_dir", &options.pipeline_cache_dir}}) {
    if (!*text || (*text)->find('\0') == std::string::npos) continue;
    std::string shown;
    for (const char ch : **text) shown += ch == '\0' ? std::string("\\0") : std::string(1, ch);
    throw InvalidArgument(op, param, "\"" + shown + "\"", "a string without NUL characters");
  }
  // Enums a caller may have cast from any integer (Python's enums take any): refused,
  // not read as a mix of the named values.
  const auto shape = options.kernels.value_or(KernelShape::automatic);
  if (shape != KernelShape::automatic && shape != KernelShape::cpu && shape != KernelShape::gpu) {
    throw InvalidArgument(op, "options.kernels", std::to_string(static_cast<int>(shape)), "KernelShape::automatic, cpu or gpu");
  }
  const auto matrix = options.matrix_units.value_or(MatrixUnits::automatic);
  if (matrix != MatrixUnits::automatic && matrix != MatrixUnits::off && matrix != MatrixUnits::on &&
      matrix != MatrixUnits::standin) {
    throw InvalidArgument(op, "options.matrix_units", std::to_string(static_cast<int>(matrix)),
                          "MatrixUnits::automatic, off, on or standin");
  }
  const auto level = options.log_level.value_or(LogLevel::off);
  if (level != LogLevel::off && level != LogLevel::error && level != LogLevel::warning && level != LogLevel::info) {
    throw InvalidArgument(op, "options.log_level", std::to_string(static_cast<int>(level)),
                          "LogLevel::off, error, warning or info");
  }
}

bool finite_float(double v) { return std::abs(v) <= std::numeric_limits<float>::max(); }

void check_rank3(const char* op, const char* name, const TensorImpl& t, const char* dims) {
  if (t.shape.size() != 3) {
    throw InvalidArgument(op, std::string(name) + ".shape", shape_string(t.shape), std::string("rank 3: ") + dims);
  }
}

void check_dtype(const char* op, const char* name, const TensorImpl& t, bool allow_f16) {
  if (t.dtype != DType::f32 && !(allow_f16 && t.dtype == DType::f16)) {
    throw InvalidArgument(op, std::string(name) + ".dtype", to_string(t.dtype), allow_f16 ? "f32 or f16" : "f32");
  }
}

void check_kv_dtype(const char* op, const char* name, const TensorImpl& t) {
  if (!is_kv_dtype(t.dtype)) {
    throw InvalidArgument(op, std::string(name) + ".dtype", to_string(t.dtype), "f32, f16, q8_0 or q4_0");
  }
}

void check_shape(const char* op, const char* name, const TensorImpl& t, std::span<const std::size_t> want) {
  if (!std::equal(t.shape.begin(), t.shape.end(), want.begin(), want.end())) {
    throw InvalidArgument(op, std::string(name) + ".shape", shape_string(t.shape), shape_string(Shape(want.begin(), want.end())));
  }
}
void check_shape(const char* op, const char* name, const TensorImpl& t, std::initializer_list<std::size_t> want) {
  check_shape(op, name, t, std::span<const std::size_t>(want.begin(), want.size()));
}

namespace {

// Both finite and > 0, and |hi| > |lo| (YaRN's beta bounds, Llama 3's frequency factors).
void check_ordered_pair(const char* op, const std::string& lo_name, double lo, const std::string& hi_name, double hi,
                        bool equal_ok = false) {
  check_positive(op, lo_name, lo);
  check_positive(op, hi_name, hi);
  if (hi < lo || (hi == lo && !equal_ok)) {
    throw InvalidArgument(op, hi_name, num(hi), (equal_ok ? ">= " : "> ") + lo_name + " = " + num(lo));
  }
}

void check_rope_tensor(const char* op, const char* name, const TensorImpl& x) {
  const std::string n(name);
  check_rank3(op, name, x, "[n_tokens, n_heads, head_dim]");
  check_dtype(op, name, x, true);
  const std::size_t head_dim = x.shape[2];
  if (head_dim % 2 != 0 || head_dim > kMaxHeadDim) {
    throw InvalidArgument(op, "head_dim (" + n + ".shape[2])", std::to_string(head_dim),
                          "even, in [2, " + std::to_string(kMaxHeadDim) + "]");
  }
}

}  // namespace

std::size_t check_rope_dims(const char* op, const RopeConfig& config, std::size_t head_dim, const RopeNames& names) {
  const std::string f = std::string(names.config) + ".";
  // A caller's head_dim (rope_frequencies, a cache's) may have no pair to rotate: name it,
  // rather than the offset with a bound of head_dim - 2 wrapped past 2^64.
  if (head_dim < 2) {
    throw InvalidArgument(op, names.head_dim, std::to_string(head_dim), ">= 2 (one rotary pair)");
  }
  // Against head_dim - 2 (>= 0 here), not offset + 2 <= head_dim: an offset near 2^64
  // would wrap that sum and pass, and the kernels would rotate outside the row.
  if (config.rotary_offset % 2 != 0 || config.rotary_offset > head_dim - 2) {
    throw InvalidArgument(op, f + "rotary_offset", std::to_string(config.rotary_offset),
                          "even in [0, head_dim - 2 = " + std::to_string(head_dim - 2) + "]");
  }
  const std::size_t room = head_dim - config.rotary_offset;  // dims from the offset to the row's end, >= 2
  const char* upper = config.rotary_offset == 0 ? "head_dim" : "head_dim - rotary_offset";  // room's name
  if (config.rotary_dim == 0 && room % 2 != 0) {  // "rotate all of it" needs whole pairs
    throw InvalidArgument(op, f + "rotary_dim", std::string("0 (= ") + upper + " = " + std::to_string(room) + ", odd)",
                          "even in [2, " + std::to_string(room - 1) + "], or an even " + upper);
  }
  const std::size_t rotated = rotated_dims(config.rotary_dim, config.rotary_offset, head_dim);
  if (rotated % 2 != 0 || rotated > room) {
    throw InvalidArgument(op, f + "rotary_dim", std::to_string(config.rotary_dim),
                          std::string("0 (= ") + upper + ") or even in [2, " + upper + " = " + std::to_string(room) + "]");
  }
  return rotated;
}

RopeConfig check_rope_config(const char* op, const RopeConfig& config, std::size_t head_dim, const RopeNames& names) {
  RopeConfig out = config;
  out.rotary_dim = check_rope_dims(op, config, head_dim, names);
  const std::string f = std::string(names.config) + ".";
  check_positive(op, f + "base", config.base);
  if (config.layout != RopeLayout::interleaved && config.layout != RopeLayout::half) {
    throw InvalidArgument(op, f + "layout", std::to_string(static_cast<int>(config.layout)),
                          "RopeLayout::interleaved or RopeLayout::half");
  }
  const RopeScaling s = config.scaling;
  if (s != RopeScaling::none && s != RopeScaling::linear && s != RopeScaling::ntk && s != RopeScaling::dynamic_ntk &&
      s != RopeScaling::yarn && s != RopeScaling::llama3 && s != RopeScaling::factors) {
    throw InvalidArgument(op, f + "scaling", std::to_string(static_cast<int>(s)), "a RopeScaling value");
  }
  if (s != RopeScaling::none && s != RopeScaling::factors) check_positive(op, f + "factor", config.factor);
  if ((s == RopeScaling::dynamic_ntk || s == RopeScaling::yarn || s == RopeScaling::llama3) && config.original_context == 0) {
    throw InvalidArgument(op, f + "original_context", "0", ">= 1 (the trained context length) for this scaling");
  }
  if ((s == RopeScaling::ntk || s == RopeScaling::dynamic_ntk) && out.rotary_dim < 4) {
    throw InvalidArgument(op, f + "rotary_dim", std::to_string(out.rotary_dim),
                          ">= 4 for NTK scaling (the exponent is d / (d - 2))");
  }
  if (s == RopeScaling::yarn) {
    if (config.base == 1.0) {  // log(base) = 0: every dim's ramp 0 / 0
      throw InvalidArgument(op, f + "base", "1", "!= 1 with YaRN scaling (its correction dims divide by log(base))");
    }
    check_ordered_pair(op, f + "yarn.beta_slow", config.yarn.beta_slow, f + "yarn.beta_fast", config.yarn.beta_fast);
    for (auto [name, v] :
         {std::pair{f + "yarn.mscale", config.yarn.mscale}, std::pair{f + "yarn.mscale_all_dim", config.yarn.mscale_all_dim}}) {
      if (!std::isfinite(v) || v < 0.0) throw InvalidArgument(op, name, num(v), "finite and >= 0");
    }
  }
  if (s == RopeScaling::llama3) {
    // Equal factors (Llama 4 Scout) leave the smooth band empty.
    check_ordered_pair(op, f + "llama3.low_freq_factor", config.llama3.low_freq_factor, f + "llama3.high_freq_factor",
                       config.llama3.high_freq_factor, true);
  }
  if (s == RopeScaling::factors) {
    if (config.freq_factors.size() != out.rotary_dim / 2) {
      throw InvalidArgument(op, f + "freq_factors.size()", std::to_string(config.freq_factors.size()),
                            "rotary_dim / 2 = " + std::to_string(out.rotary_dim / 2));
    }
    for (std::size_t i = 0; i < config.freq_factors.size(); ++i) {
      check_positive(op, f + "freq_factors[" + std::to_string(i) + "]", config.freq_factors[i]);
    }
  } else if (!config.freq_factors.empty()) {
    throw InvalidArgument(op, f + "freq_factors.size()", std::to_string(config.freq_factors.size()),
                          "0 unless config.scaling = RopeScaling::factors");
  }
  if (config.attention_factor) check_positive(op, f + "attention_factor", *config.attention_factor);
  if (config.mrope) {
    const auto& m = *config.mrope;
    if (m.layout != MRopeLayout::contiguous && m.layout != MRopeLayout::interleaved) {
      throw InvalidArgument(op, f + "mrope.layout", std::to_string(static_cast<int>(m.layout)),
                            "MRopeLayout::contiguous or MRopeLayout::interleaved");
    }
    const std::uint64_t sum = std::uint64_t{m.sections[0]} + m.sections[1] + m.sections[2];
    if (sum != out.rotary_dim / 2) {
      throw InvalidArgument(op, f + "mrope.sections",
                            "{" + std::to_string(m.sections[0]) + ", " + std::to_string(m.sections[1]) + ", " +
                                std::to_string(m.sections[2]) + "} (sum " + std::to_string(sum) + ")",
                            "rotary pairs per position adding up to rotary_dim / 2 = " + std::to_string(out.rotary_dim / 2));
    }
  }
  return out;
}

RopeConfig check_rope(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                      const RopeConfig& config) {
  const char* op = "rope";
  const char* x_name = k ? "q" : "x";
  check_rope_tensor(op, x_name, x);
  if (k) {
    check_rope_tensor(op, "k", *k);
    if (k == &x) throw InvalidArgument(op, "k", "the same tensor as q", "a tensor other than q");
    if (k->overlaps(x)) throw InvalidArgument(op, "k", "a view sharing bytes with q", "bytes apart from q");
    if (k->shape[0] != x.shape[0]) {
      throw InvalidArgument(op, "k.shape[0]", std::to_string(k->shape[0]),
                            "n_tokens = q.shape[0] = " + std::to_string(x.shape[0]));
    }
    if (k->shape[2] != x.shape[2]) {
      throw InvalidArgument(op, "k.shape[2]", std::to_string(k->shape[2]),
                            "head_dim = q.shape[2] = " + std::to_string(x.shape[2]));
    }
    if (k->dtype != x.dtype) {
      throw InvalidArgument(op, "k.dtype", to_string(k->dtype), std::string("q.dtype = ") + to_string(x.dtype));
    }
  }
  RopeConfig checked = check_rope_config(op, config, x.shape[2]);
  check_rope_positions(x, k, positions, checked);
  return checked;
}

void check_rope_positions(const TensorImpl& x, const TensorImpl* k, std::span<const std::int32_t> positions,
                          const RopeConfig& config) {
  const char* op = "rope";
  const char* x_name = k ? "q" : "x";
  if (config.mrope && positions.size() != 3 * x.shape[0]) {
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()),
                          std::string("3 x n_tokens = 3 x ") + x_name + ".shape[0] = " + std::to_string(3 * x.shape[0]) +
                              " with config.mrope ([n_tokens, 3]: t, h, w per token)");
  }
  if (!config.mrope && positions.size() != x.shape[0]) {
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()),
                          std::string("n_tokens = ") + x_name + ".shape[0] = " + std::to_string(x.shape[0]));
  }
  check_nonnegative(op, "positions", positions);
}

void check_nonnegative(const char* op, const char* name, std::span<const std::int32_t> v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0) {
      throw InvalidArgument(op, std::string(name) + "[" + std::to_string(i) + "]", std::to_string(v[i]), "[0, 2^31 - 1]");
    }
  }
}

void check_copy(const TensorImpl& src, const TensorImpl& dst) {
  check_distinct("copy", "dst", dst, {{"src", &src}});
  if (src.dtype != dst.dtype) {
    throw InvalidArgument("copy", "dst.dtype", to_string(dst.dtype), std::string("src.dtype = ") + to_string(src.dtype));
  }
  if (src.numel != dst.numel) {
    throw InvalidArgument("copy", "dst.numel()", std::to_string(dst.numel), "src.numel() = " + std::to_string(src.numel));
  }
}

}  // namespace vkattn::detail
