// The C API's boundary (status codes, the per-thread message), its struct conversions, and
// the tensor functions. Devices and backends are in c_api_devices.cpp, the ops in
// c_api_ops.cpp.
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include "c_api/c_api_internal.hpp"
#include "common/validate.hpp"

// The C enumerations are the C++ ones' values, so that values pass through and the C++
// checks reject bad ones with the C++ API's own messages. These keep them tied.
static_assert(VKATTN_BACKEND_CPU == int(vkattn::BackendKind::cpu) && VKATTN_BACKEND_VULKAN == int(vkattn::BackendKind::vulkan));
static_assert(VKATTN_DTYPE_F32 == int(vkattn::DType::f32) && VKATTN_DTYPE_F16 == int(vkattn::DType::f16) &&
              VKATTN_DTYPE_I32 == int(vkattn::DType::i32) && VKATTN_DTYPE_Q8_0 == int(vkattn::DType::q8_0) &&
              VKATTN_DTYPE_Q4_0 == int(vkattn::DType::q4_0));
static_assert(VKATTN_KERNELS_AUTOMATIC == int(vkattn::KernelShape::automatic) &&
              VKATTN_KERNELS_CPU == int(vkattn::KernelShape::cpu) && VKATTN_KERNELS_GPU == int(vkattn::KernelShape::gpu));
static_assert(VKATTN_MATRIX_UNITS_AUTOMATIC == int(vkattn::MatrixUnits::automatic) &&
              VKATTN_MATRIX_UNITS_OFF == int(vkattn::MatrixUnits::off) &&
              VKATTN_MATRIX_UNITS_ON == int(vkattn::MatrixUnits::on) &&
              VKATTN_MATRIX_UNITS_STANDIN == int(vkattn::MatrixUnits::standin));
static_assert(VKATTN_LOG_OFF == int(vkattn::LogLevel::off) && VKATTN_LOG_ERROR == int(vkattn::LogLevel::error) &&
              VKATTN_LOG_WARNING == int(vkattn::LogLevel::warning) && VKATTN_LOG_INFO == int(vkattn::LogLevel::info));
static_assert(VKATTN_ROPE_LAYOUT_INTERLEAVED == int(vkattn::RopeLayout::interleaved) &&
              VKATTN_ROPE_LAYOUT_HALF == int(vkattn::RopeLayout::half));
static_assert(VKATTN_ROPE_SCALING_NONE == int(vkattn::RopeScaling::none) &&
              VKATTN_ROPE_SCALING_LINEAR == int(vkattn::RopeScaling::linear) &&
              VKATTN_ROPE_SCALING_NTK == int(vkattn::RopeScaling::ntk) &&
              VKATTN_ROPE_SCALING_DYNAMIC_NTK == int(vkattn::RopeScaling::dynamic_ntk) &&
              VKATTN_ROPE_SCALING_YARN == int(vkattn::RopeScaling::yarn) &&
              VKATTN_ROPE_SCALING_LLAMA3 == int(vkattn::RopeScaling::llama3) &&
              VKATTN_ROPE_SCALING_FACTORS == int(vkattn::RopeScaling::factors));
static_assert(VKATTN_ATTENTION_PRECISION_F32 == int(vkattn::AttentionPrecision::f32) &&
              VKATTN_ATTENTION_PRECISION_F16_PRODUCTS == int(vkattn::AttentionPrecision::f16_products));
static_assert(VKATTN_ATTENTION_PATH_AUTOMATIC == int(vkattn::AttentionPath::automatic) &&
              VKATTN_ATTENTION_PATH_FUSED == int(vkattn::AttentionPath::fused) &&
              VKATTN_ATTENTION_PATH_THREE_STAGES == int(vkattn::AttentionPath::three_stages));
static_assert(VKATTN_SOFTCAP_SCALE_THEN_CAP == int(vkattn::SoftcapOrder::scale_then_cap) &&
              VKATTN_SOFTCAP_CAP_THEN_SCALE == int(vkattn::SoftcapOrder::cap_then_scale));
static_assert(VKATTN_MROPE_CONTIGUOUS == int(vkattn::MRopeLayout::contiguous) &&
              VKATTN_MROPE_INTERLEAVED == int(vkattn::MRopeLayout::interleaved));
static_assert(VKATTN_WINDOW_TRAILING == int(vkattn::WindowType::trailing) &&
              VKATTN_WINDOW_SYMMETRIC == int(vkattn::WindowType::symmetric));
static_assert(VKATTN_KV_ROPE_STORED == int(vkattn::KvRope::stored) && VKATTN_KV_ROPE_ON_READ == int(vkattn::KvRope::on_read));
static_assert(VKATTN_ATTENTION_KERNEL_REFERENCE == int(vkattn::AttentionKernel::reference) &&
              VKATTN_ATTENTION_KERNEL_THREE_STAGES == int(vkattn::AttentionKernel::three_stages) &&
              VKATTN_ATTENTION_KERNEL_LANE_PER_KEY == int(vkattn::AttentionKernel::lane_per_key) &&
              VKATTN_ATTENTION_KERNEL_DECODE == int(vkattn::AttentionKernel::decode) &&
              VKATTN_ATTENTION_KERNEL_GROUP == int(vkattn::AttentionKernel::group) &&
              VKATTN_ATTENTION_KERNEL_TILED == int(vkattn::AttentionKernel::tiled) &&
              VKATTN_ATTENTION_KERNEL_MATRIX == int(vkattn::AttentionKernel::matrix) &&
              VKATTN_ATTENTION_KERNEL_MATRIX_STANDIN == int(vkattn::AttentionKernel::matrix_standin));

VKATTN_ENDS_WITHOUT_PADDING(vkattn_device_options, reserved3);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_device_limits, matrix_standin);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_device_info, matrix_note);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_rope_config, rotary_offset);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_attention_config, mask_keys);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_attention_tokens, n_k_seq_ids);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_kv_cache_config, n_blocks);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_command_list_options, timestamps);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_command_stats, encodings);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_attention_run, reserved);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_error_details, message);
VKATTN_ENDS_WITHOUT_PADDING(vkattn_matrix_shape, reserved);

namespace vkattn::c_api {

namespace {

// The last failure on this thread: its whole text and its parts (vkattn_error_details).
struct LastError {
  std::string text, op, call, param, message;
  int vk_result = 0;
};
thread_local LastError t_last;
thread_local bool t_message_lost = false;  // the message could not be stored

vkattn_status fail(vkattn_status status, const char* text, const std::string& op = {}, const std::string& call = {},
                   const std::string& param = {}, const char* message = nullptr, int vk_result = 0) noexcept {
  try {
    t_last.text = text;
    t_last.op = op;
    t_last.call = call;
    t_last.param = param;
    t_last.message = message ? message : text;
    t_last.vk_result = vk_result;
  } catch (...) {
    t_message_lost = true;
  }
  return status;
}

vkattn_status status_of(ErrorCode code, int vk_result) {
  switch (code) {
    case ErrorCode::no_device: return VKATTN_ERROR_NO_DEVICE;
    case ErrorCode::device_lost: return VKATTN_ERROR_DEVICE_LOST;
    case ErrorCode::out_of_memory:  // -1: VK_ERROR_OUT_OF_HOST_MEMORY (a host allocation too)
      return vk_result == -1 ? VKATTN_ERROR_OUT_OF_HOST_MEMORY : VKATTN_ERROR_OUT_OF_DEVICE_MEMORY;
    case ErrorCode::timeout: return VKATTN_ERROR_TIMEOUT;
    case ErrorCode::unsupported: return VKATTN_ERROR_UNSUPPORTED;
    case ErrorCode::vulkan_call_failed: return VKATTN_ERROR_VULKAN;
  }
  return VKATTN_ERROR_INTERNAL;
}

}  // namespace

void clear_last_error() noexcept {
  t_last = LastError{};  // no allocation: moves in empty strings
  t_message_lost = false;
}

LastErrorParts last_error_parts() noexcept {
  if (t_message_lost) return {.op = "", .call = "", .param = "", .message = kLostMessage, .vk_result = 0};
  return {.op = t_last.op.c_str(),
          .call = t_last.call.c_str(),
          .param = t_last.param.c_str(),
          .message = t_last.message.c_str(),
          .vk_result = t_last.vk_result};
}

vkattn_status status_of_current_exception() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    return fail(status_of(e.code(), e.vk_result()), e.what(), e.op(), e.call(), {}, e.message().c_str(), e.vk_result());
  } catch (const InvalidArgument& e) {
    return fail(VKATTN_ERROR_INVALID_ARGUMENT, e.what(), e.op(), {}, e.param(), e.message().c_str());
  } catch (const std::invalid_argument& e) {
    return fail(VKATTN_ERROR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(VKATTN_ERROR_OUT_OF_HOST_MEMORY, "vkattn: out of host memory");
  } catch (const std::exception& e) {
    try {
      return fail(VKATTN_ERROR_INTERNAL, (std::string("vkattn: internal error: ") + e.what()).c_str());
    } catch (...) {
      return fail(VKATTN_ERROR_INTERNAL, "vkattn: internal error");
    }
  } catch (...) {
    return fail(VKATTN_ERROR_INTERNAL, "vkattn: internal error: an unknown exception");
  }
}

namespace {

void device_defaults(vkattn_device_options& o) {
  o.validation = -1;
  o.submit_timeout_ms = DeviceOptions{}.submit_timeout_ms;
  o.matrix_units = VKATTN_MATRIX_UNITS_ENVIRONMENT;
  o.log_level = VKATTN_LOG_ENVIRONMENT;
}

void rope_defaults(vkattn_rope_config& c) { c = c_rope_config(RopeConfig{}); }

void attention_defaults(vkattn_attention_config& c) {
  const AttentionConfig d;
  c.causal = d.causal ? 1 : 0;
  c.path = static_cast<std::int32_t>(d.path);
  c.softcap_order = static_cast<std::int32_t>(d.softcap_order);
}

void tokens_defaults(vkattn_attention_tokens&) {}

void kv_cache_defaults(vkattn_kv_cache_config& c) { c = c_kv_cache_config(KvCacheConfig{}); }

void list_defaults(vkattn_command_list_options&) {}

bool flag(const char* function, const std::string& param, std::uint32_t v) {
  if (v > 1) throw InvalidArgument(function, param, std::to_string(v), "0 or 1");
  return v == 1;
}

void check_reserved(const char* function, const std::string& param, std::uint32_t v) {
  if (v != 0) throw InvalidArgument(function, param, std::to_string(v), "0 (reserved)");
}

// A uint64_t field as the C++ API's size_t: where size_t is narrower (32-bit targets), a
// value it cannot hold is refused rather than wrapped into one the later checks accept.
std::size_t size_field(const char* function, const std::string& param, std::uint64_t v) {
  const auto s = static_cast<std::size_t>(v);
  if (static_cast<std::uint64_t>(s) != v) {
    throw InvalidArgument(function, param, std::to_string(v),
                          "at most " + std::to_string(std::numeric_limits<std::size_t>::max()) + " (this target's size_t)");
  }
  return s;
}

}  // namespace

DeviceOptions device_options(const char* function, const vkattn_device_options* options) {
  const vkattn_device_options o = read_struct(function, "options", options, device_defaults, true);
  DeviceOptions d;
  if (o.validation != -1) {
    if (o.validation != 0 && o.validation != 1) {
      throw InvalidArgument(function, "options->validation", std::to_string(o.validation), "-1 (environment), 0 or 1");
    }
    d.validation = o.validation == 1;
  }
  if (o.device) d.device = std::string(o.device);
  if (o.pipeline_cache_dir) d.pipeline_cache_dir = std::string(o.pipeline_cache_dir);
  d.force_staging = flag(function, "options->force_staging", o.force_staging);
  d.submit_timeout_ms = o.submit_timeout_ms;
  check_reserved(function, "options->reserved", o.reserved);
  if (o.kernels < VKATTN_KERNELS_AUTOMATIC || o.kernels > VKATTN_KERNELS_GPU) {
    throw InvalidArgument(function, "options->kernels", std::to_string(o.kernels), "VKATTN_KERNELS_AUTOMATIC, _CPU or _GPU");
  }
  if (o.kernels != VKATTN_KERNELS_AUTOMATIC) d.kernels = static_cast<KernelShape>(o.kernels);
  check_reserved(function, "options->reserved2", o.reserved2);
  if (o.matrix_units < VKATTN_MATRIX_UNITS_ENVIRONMENT || o.matrix_units > VKATTN_MATRIX_UNITS_STANDIN) {
    throw InvalidArgument(function, "options->matrix_units", std::to_string(o.matrix_units),
                          "VKATTN_MATRIX_UNITS_ENVIRONMENT (-1), _AUTOMATIC, _OFF, _ON or _STANDIN (0 to 3)");
  }
  if (o.matrix_units != VKATTN_MATRIX_UNITS_ENVIRONMENT) d.matrix_units = static_cast<MatrixUnits>(o.matrix_units);
  if (o.log) {
    d.log = [log = o.log, user = o.log_user_data](LogLevel level, std::string_view message) {
      const std::string line(message);  // NUL-terminated, whatever the view's source
      log(user, static_cast<vkattn_log_level>(level), line.c_str());
    };
  } else if (o.log_user_data) {
    throw InvalidArgument(function, "options->log_user_data", "non-NULL", "NULL when options->log is NULL");
  }
  if (o.log_level < VKATTN_LOG_ENVIRONMENT || o.log_level > VKATTN_LOG_INFO) {
    throw InvalidArgument(function, "options->log_level", std::to_string(o.log_level),
                          "VKATTN_LOG_ENVIRONMENT (-1), _OFF, _ERROR, _WARNING or _INFO (0 to 3)");
  }
  if (o.log_level != VKATTN_LOG_ENVIRONMENT) d.log_level = static_cast<LogLevel>(o.log_level);
  check_reserved(function, "options->reserved3", o.reserved3);
  return d;
}

RopeConfig rope_config(const char* function, const char* param, const vkattn_rope_config* config, std::size_t head_dim,
                       bool of_cache) {
  const vkattn_rope_config c = read_struct(function, param, config, rope_defaults, true);
  const std::string p(param);
  check_reserved(function, p + "->reserved", c.reserved);
  RopeConfig r;
  r.layout = static_cast<RopeLayout>(c.layout);
  r.scaling = static_cast<RopeScaling>(c.scaling);
  r.rotary_dim = c.rotary_dim;
  r.rotary_offset = size_field(function, p + "->rotary_offset", c.rotary_offset);
  r.base = c.base;
  r.factor = c.factor;
  r.original_context = size_field(function, p + "->original_context", c.original_context);
  r.sequence_length = size_field(function, p + "->sequence_length", c.sequence_length);
  r.yarn = {.beta_fast = c.yarn_beta_fast,
            .beta_slow = c.yarn_beta_slow,
            .mscale = c.yarn_mscale,
            .mscale_all_dim = c.yarn_mscale_all_dim,
            .truncate = flag(function, p + "->yarn_truncate", c.yarn_truncate)};
  r.llama3 = {.low_freq_factor = c.llama3_low_freq_factor, .high_freq_factor = c.llama3_high_freq_factor};
  const std::size_t rotated = detail::rotated_dims(r.rotary_dim, r.rotary_offset, head_dim);
  if (c.n_freq_factors != 0 && c.n_freq_factors != rotated / 2) {
    // The count may be wrong only because the dims are: name them, as the op's check would.
    detail::check_rope_dims(function, r, head_dim, of_cache ? detail::kCacheRopeNames : detail::RopeNames{});
  }
  const auto factors =
      config_array(function, p + "->freq_factors", c.freq_factors, c.n_freq_factors, rotated / 2, "rotary_dim / 2");
  r.freq_factors.assign(factors.begin(), factors.end());
  if (c.attention_factor != 0.0) r.attention_factor = c.attention_factor;
  if (c.mrope_sections[0] != 0 || c.mrope_sections[1] != 0 || c.mrope_sections[2] != 0) {
    r.mrope = MRope{.sections = {c.mrope_sections[0], c.mrope_sections[1], c.mrope_sections[2]},
                    .layout = static_cast<MRopeLayout>(c.mrope_layout)};
  } else if (c.mrope_layout != 0) {
    throw InvalidArgument(function, p + "->mrope_layout", std::to_string(c.mrope_layout), "0 unless mrope_sections are set");
  }
  return r;
}

vkattn_rope_config c_rope_config(const RopeConfig& r) {
  vkattn_rope_config c{};
  c.struct_size = sizeof c;
  c.layout = static_cast<std::int32_t>(r.layout);
  c.scaling = static_cast<std::int32_t>(r.scaling);
  c.rotary_dim = static_cast<std::uint32_t>(r.rotary_dim);  // a C handle's came from a uint32_t
  c.rotary_offset = r.rotary_offset;
  c.base = r.base;
  c.factor = r.factor;
  c.original_context = r.original_context;
  c.sequence_length = r.sequence_length;
  c.yarn_beta_fast = r.yarn.beta_fast;
  c.yarn_beta_slow = r.yarn.beta_slow;
  c.yarn_mscale = r.yarn.mscale;
  c.yarn_mscale_all_dim = r.yarn.mscale_all_dim;
  c.yarn_truncate = r.yarn.truncate ? 1 : 0;
  c.llama3_low_freq_factor = r.llama3.low_freq_factor;
  c.llama3_high_freq_factor = r.llama3.high_freq_factor;
  c.attention_factor = r.attention_factor.value_or(0.0);
  if (r.mrope) {
    std::copy(r.mrope->sections.begin(), r.mrope->sections.end(), c.mrope_sections);
    c.mrope_layout = static_cast<std::int32_t>(r.mrope->layout);
  }
  return c;  // freq_factors: the caller points them at storage of its own
}

vkattn_kv_cache_config c_kv_cache_config(const KvCacheConfig& k) {
  // Packed (clang-format would put one item per line).
  // clang-format off
  return {.struct_size = sizeof(vkattn_kv_cache_config), .dtype = static_cast<std::int32_t>(k.dtype),
          .n_seqs = k.n_seqs, .n_kv_heads = k.n_kv_heads, .head_dim = k.head_dim, .capacity = k.capacity,
          .n_sinks = k.n_sinks, .rope = static_cast<std::int32_t>(k.rope), .reserved = 0, .rope_config = nullptr,
          .v_head_dim = k.v_head_dim, .latent = k.latent ? 1u : 0u, .reserved2 = 0, .paged = k.paged ? 1u : 0u,
          .block_size = static_cast<std::uint32_t>(k.block_size), .n_blocks = k.n_blocks};
  // clang-format on
}

AttentionConfig attention_config(const char* function, const vkattn_attention_config* config, std::size_t n_heads) {
  const vkattn_attention_config c = read_struct(function, "config", config, attention_defaults, true);
  AttentionConfig a;
  a.causal = flag(function, "config->causal", c.causal);
  if (c.scale != 0.0) a.scale = c.scale;
  if (c.window != 0) a.window = c.window;
  if (c.softcap != 0.0) a.softcap = c.softcap;
  a.softcap_order = static_cast<SoftcapOrder>(c.softcap_order);
  a.path = static_cast<AttentionPath>(c.path);
  a.alibi = flag(function, "config->alibi", c.alibi);
  const auto slopes = config_array(function, "config->alibi_slopes", c.alibi_slopes, c.n_alibi_slopes, n_heads, "n_heads");
  a.alibi_slopes.assign(slopes.begin(), slopes.end());
  const auto sinks = config_array(function, "config->sinks", c.sinks, c.n_sinks, n_heads, "n_heads");
  a.sinks.assign(sinks.begin(), sinks.end());
  if (c.chunk != 0) a.chunk = c.chunk;
  a.window_type = static_cast<WindowType>(c.window_type);
  if (c.temperature_floor_scale != 0) {
    if (!std::isfinite(c.temperature_scale) || c.temperature_scale == 0.0) {
      // 0 (the _init default) would leave every score as it is: C++ and Python default
      // to Llama 4's 0.1, which a C struct cannot tell from "not set".
      throw InvalidArgument(function, "config->temperature_scale", std::to_string(c.temperature_scale),
                            "finite and nonzero when temperature_floor_scale is set (Llama 4: 0.1)");
    }
    a.query_temperature =
        QueryTemperature{.floor_scale = c.temperature_floor_scale, .scale = c.temperature_scale, .offset = c.temperature_offset};
  } else if (c.temperature_scale != 0.0 || c.temperature_offset != 0) {
    throw InvalidArgument(function, "config->temperature_floor_scale", "0",
                          ">= 1 when temperature_scale or temperature_offset is set (0: no query temperature)");
  }
  a.precision = static_cast<AttentionPrecision>(c.precision);
  a.mask_keys = c.mask_keys;
  return a;
}

AttentionTokens attention_tokens(const char* function, const vkattn_attention_tokens* tokens, bool optional) {
  const vkattn_attention_tokens t = read_struct(function, "tokens", tokens, tokens_defaults, optional);
  check_reserved(function, "tokens->reserved", t.reserved);
  // The spans point into the caller's arrays; the C++ ops copy them when recording.
  return {.q_positions = array(function, "tokens->q_positions", t.q_positions, t.n_q_positions),
          .k_positions = array(function, "tokens->k_positions", t.k_positions, t.n_k_positions),
          .q_seq_ids = array(function, "tokens->q_seq_ids", t.q_seq_ids, t.n_q_seq_ids),
          .k_seq_ids = array(function, "tokens->k_seq_ids", t.k_seq_ids, t.n_k_seq_ids)};
}

KvCacheConfig kv_cache_config(const char* function, const vkattn_kv_cache_config* config) {
  const vkattn_kv_cache_config c = read_struct(function, "config", config, kv_cache_defaults, false);
  check_reserved(function, "config->reserved", c.reserved);
  check_reserved(function, "config->reserved2", c.reserved2);
  auto size = [function](const char* field, std::uint64_t v) { return size_field(function, field, v); };
  const std::size_t head_dim = size("config->head_dim", c.head_dim);
  // Packed (clang-format would put one item per line).
  // clang-format off
  return {.n_seqs = size("config->n_seqs", c.n_seqs), .n_kv_heads = size("config->n_kv_heads", c.n_kv_heads),
          .head_dim = head_dim, .capacity = size("config->capacity", c.capacity),
          .dtype = static_cast<DType>(c.dtype), .n_sinks = size("config->n_sinks", c.n_sinks),
          .rope = static_cast<KvRope>(c.rope),
          .rope_config = rope_config(function, "config->rope_config", c.rope_config, head_dim, true),
          .v_head_dim = size("config->v_head_dim", c.v_head_dim),
          .latent = flag(function, "config->latent", c.latent),
          .paged = flag(function, "config->paged", c.paged), .block_size = c.block_size,
          .n_blocks = size("config->n_blocks", c.n_blocks)};
  // clang-format on
}

CommandListOptions command_list_options(const char* function, const vkattn_command_list_options* options) {
  const vkattn_command_list_options o = read_struct(function, "options", options, list_defaults, true);
  return {.timestamps = flag(function, "options->timestamps", o.timestamps)};
}

}  // namespace vkattn::c_api

using namespace vkattn::c_api;
using vkattn::InvalidArgument;

namespace {

// Downloads into the caller's |count| values: the tensor's numel.
template <class T, class Download>
void download_into(const char* fn, const vkattn_tensor* tensor, T* data, size_t count, Download&& download) {
  const vkattn::Tensor& t = need(fn, "tensor", tensor).impl;
  need(fn, "data", data);
  if (count != t.numel()) {
    throw InvalidArgument(fn, "count", std::to_string(count), "tensor numel = " + std::to_string(t.numel()));
  }
  const std::vector<T> values = download(t);
  std::copy(values.begin(), values.end(), data);
}

// Uploads the caller's |count| values: the tensor's numel (checked here, so that the
// message names the C parameter).
template <class T>
vkattn_status upload_from(const char* fn, vkattn_backend* backend, vkattn_tensor* tensor, const T* data, size_t count) {
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    vkattn::Tensor& t = need(fn, "tensor", tensor).impl;
    const std::span<const T> values = array(fn, "data", data, count);
    if (count != t.numel()) {
      throw InvalidArgument(fn, "count", std::to_string(count), "tensor numel = " + std::to_string(t.numel()));
    }
    b.upload(t, values);
  });
}
}  // namespace

extern "C" {

const char* vkattn_status_string(vkattn_status status) {
  switch (status) {
    case VKATTN_OK: return "OK";
    case VKATTN_ERROR_INVALID_ARGUMENT: return "ERROR_INVALID_ARGUMENT";
    case VKATTN_ERROR_NO_DEVICE: return "ERROR_NO_DEVICE";
    case VKATTN_ERROR_OUT_OF_DEVICE_MEMORY: return "ERROR_OUT_OF_DEVICE_MEMORY";
    case VKATTN_ERROR_OUT_OF_HOST_MEMORY: return "ERROR_OUT_OF_HOST_MEMORY";
    case VKATTN_ERROR_DEVICE_LOST: return "ERROR_DEVICE_LOST";
    case VKATTN_ERROR_TIMEOUT: return "ERROR_TIMEOUT";
    case VKATTN_ERROR_UNSUPPORTED: return "ERROR_UNSUPPORTED";
    case VKATTN_ERROR_VULKAN: return "ERROR_VULKAN";
    case VKATTN_ERROR_INTERNAL: return "ERROR_INTERNAL";
    default: return "unknown status";
  }
}

const char* vkattn_last_error_message(void) { return t_message_lost ? kLostMessage : t_last.text.c_str(); }

const char* vkattn_version_string(void) { return vkattn::version(); }
uint32_t vkattn_version_number(void) { return VKATTN_VERSION_NUMBER; }

#define VKATTN_INIT_FUNCTION(name, type, defaults) \
  vkattn_status name(type* s, size_t size) {       \
    return guarded([&] {                           \
      type value{};                                \
      defaults(value);                             \
      write_struct(#name, #type, s, size, value);  \
    });                                            \
  }
VKATTN_INIT_FUNCTION(vkattn_device_options_init, vkattn_device_options, device_defaults)
VKATTN_INIT_FUNCTION(vkattn_rope_config_init, vkattn_rope_config, rope_defaults)
VKATTN_INIT_FUNCTION(vkattn_attention_config_init, vkattn_attention_config, attention_defaults)
VKATTN_INIT_FUNCTION(vkattn_attention_tokens_init, vkattn_attention_tokens, tokens_defaults)
VKATTN_INIT_FUNCTION(vkattn_kv_cache_config_init, vkattn_kv_cache_config, kv_cache_defaults)
VKATTN_INIT_FUNCTION(vkattn_command_list_options_init, vkattn_command_list_options, list_defaults)
#undef VKATTN_INIT_FUNCTION

vkattn_status vkattn_tensor_create(vkattn_backend* backend, const size_t* shape, size_t rank, vkattn_dtype dtype,
                                   vkattn_tensor** tensor) {
  const char* fn = "vkattn_tensor_create";
  return guarded([&] {
    new_tensor(fn, backend, shape, rank, tensor, [&](vkattn_backend& b, vkattn::Shape s) {
      return b.impl->tensor(std::move(s), static_cast<vkattn::DType>(dtype));
    });
  });
}

void vkattn_tensor_destroy(vkattn_tensor* tensor) { delete tensor; }

vkattn_status vkattn_tensor_dtype(const vkattn_tensor* tensor, vkattn_dtype* dtype) {
  const char* fn = "vkattn_tensor_dtype";
  return guarded([&] { need(fn, "dtype", dtype) = static_cast<vkattn_dtype>(need(fn, "tensor", tensor).impl.dtype()); });
}

vkattn_status vkattn_tensor_shape(const vkattn_tensor* tensor, size_t* rank, size_t* dims, size_t max_dims) {
  const char* fn = "vkattn_tensor_shape";
  return guarded([&] {
    const vkattn::Shape& shape = need(fn, "tensor", tensor).impl.shape();
    need(fn, "rank", rank) = shape.size();
    if (!dims) return;
    if (max_dims < shape.size()) {
      throw InvalidArgument(fn, "max_dims", std::to_string(max_dims), ">= rank = " + std::to_string(shape.size()));
    }
    std::copy(shape.begin(), shape.end(), dims);
  });
}

vkattn_status vkattn_tensor_numel(const vkattn_tensor* tensor, size_t* numel) {
  const char* fn = "vkattn_tensor_numel";
  return guarded([&] { need(fn, "numel", numel) = need(fn, "tensor", tensor).impl.numel(); });
}

vkattn_status vkattn_upload_f32(vkattn_backend* backend, vkattn_tensor* tensor, const float* data, size_t count) {
  return upload_from("vkattn_upload_f32", backend, tensor, data, count);
}

vkattn_status vkattn_upload_i32(vkattn_backend* backend, vkattn_tensor* tensor, const int32_t* data, size_t count) {
  return upload_from("vkattn_upload_i32", backend, tensor, data, count);
}

vkattn_status vkattn_download_f32(vkattn_backend* backend, const vkattn_tensor* tensor, float* data, size_t count) {
  const char* fn = "vkattn_download_f32";
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    download_into(fn, tensor, data, count, [&](const vkattn::Tensor& t) { return b.download(t); });
  });
}

vkattn_status vkattn_download_i32(vkattn_backend* backend, const vkattn_tensor* tensor, int32_t* data, size_t count) {
  const char* fn = "vkattn_download_i32";
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    download_into(fn, tensor, data, count, [&](const vkattn::Tensor& t) { return b.download_i32(t); });
  });
}

vkattn_status vkattn_tensor_bytes(const vkattn_tensor* tensor, size_t* bytes) {
  const char* fn = "vkattn_tensor_bytes";
  return guarded([&] { need(fn, "bytes", bytes) = need(fn, "tensor", tensor).impl.bytes(); });
}

vkattn_status vkattn_upload_raw(vkattn_backend* backend, vkattn_tensor* tensor, const void* data, size_t size) {
  const char* fn = "vkattn_upload_raw";
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    const std::span<const std::uint8_t> bytes = array(fn, "data", static_cast<const std::uint8_t*>(data), size);
    b.upload_raw(need(fn, "tensor", tensor).impl, bytes);
  });
}

vkattn_status vkattn_download_raw(vkattn_backend* backend, const vkattn_tensor* tensor, void* data, size_t size) {
  const char* fn = "vkattn_download_raw";
  return guarded([&] {
    vkattn::Backend& b = *need(fn, "backend", backend).impl;
    const vkattn::Tensor& t = need(fn, "tensor", tensor).impl;
    if (size != t.bytes()) {
      throw InvalidArgument(fn, "size", std::to_string(size), "the tensor's bytes = " + std::to_string(t.bytes()));
    }
    if (!data) throw InvalidArgument(fn, "data", "NULL", "a valid pointer");
    const std::vector<std::uint8_t> bytes = b.download_raw(t);
    std::memcpy(data, bytes.data(), bytes.size());
  });
}

}  // extern "C"
