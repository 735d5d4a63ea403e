#include "vkattn/error.hpp"
#include "vkattn/command_list.hpp"
#include "vkattn/types.hpp"
#include "vkattn/version.hpp"

namespace vkattn {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::vulkan_call_failed: return "vulkan_call_failed";
    case ErrorCode::no_device: return "no_device";
    case ErrorCode::device_lost: return "device_lost";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::unsupported: return "unsupported";
  }
  return "unknown";
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
  }
  return "unknown";
}

const char* to_string(BackendKind kind) {
  switch (kind) {
    case BackendKind::cpu: return "cpu";
    case BackendKind::vulkan: return "vulkan";
  }
  return "unknown";
}

static std::string error_text(ErrorCode code, const std::string& message, const std::string& call, const std::string& op) {
  std::string s = "vkattn";
  if (!op.empty()) s += ": " + op;
  s += ": " + message;
  if (!call.empty()) s += " [" + call + "]";
  s += std::string(" (") + to_string(code) + ")";
  return s;
}

Error::Error(ErrorCode code, std::string message, std::string call, int vk_result, std::string op)
    : std::runtime_error(error_text(code, message, call, op)), code_(code), message_(std::move(message)), call_(std::move(call)),
      vk_result_(vk_result), op_(std::move(op)) {}

InvalidArgument::InvalidArgument(const std::string& op, const std::string& param, const std::string& value,
                                 const std::string& valid)
    : std::invalid_argument("vkattn: " + op + ": " + param + " = " + value + "; valid: " + valid), param_(param), op_(op),
      message_(param + " = " + value + "; valid: " + valid) {}

DeviceLimits spec_minimum_limits() { return DeviceLimits{}; }

const char* to_string(KernelShape shape) {
  switch (shape) {
    case KernelShape::automatic: return "automatic";
    case KernelShape::cpu: return "cpu";
    case KernelShape::gpu: return "gpu";
  }
  return "unknown";
}

const char* to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::reference: return "reference";
    case AttentionKernel::three_stages: return "three_stages";
    case AttentionKernel::lane_per_key: return "lane_per_key";
    case AttentionKernel::decode: return "decode";
    case AttentionKernel::group: return "group";
    case AttentionKernel::tiled: return "tiled";
    case AttentionKernel::matrix: return "matrix";
    case AttentionKernel::matrix_standin: return "matrix_standin";
  }
  return "unknown";
}

const char* to_string(AttentionPath path) {
  switch (path) {
    case AttentionPath::automatic: return "automatic";
    case AttentionPath::fused: return "fused";
    case AttentionPath::three_stages: return "three_stages";
  }
  return "unknown";
}

const char* to_string(AttentionPrecision precision) {
  switch (precision) {
    case AttentionPrecision::f32: return "f32";
    case AttentionPrecision::f16_products: return "f16_products";
  }
  return "unknown";
}

const char* to_string(MatrixUnits units) {
  switch (units) {
    case MatrixUnits::automatic: return "automatic";
    case MatrixUnits::off: return "off";
    case MatrixUnits::on: return "on";
    case MatrixUnits::standin: return "standin";
  }
  return "unknown";
}

const char* version() noexcept { return VKATTN_VERSION_STRING; }

}  // namespace vkattn
