#include "common/validate.hpp"

#include <cmath>
#include <sstream>

namespace vkattn::detail {

std::string shape_string(const Shape& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param,
                                                const Tensor& t, const void* owner) {
  if (!t.valid()) throw InvalidArgument(op, param, "an empty Tensor", "a tensor made by Backend::tensor");
  if (t.impl()->owner != owner) {
    throw InvalidArgument(op, param, "a tensor of another backend",
                          "a tensor made by the backend that made this command list");
  }
  return t.impl();
}

RopeConfig check_rope(const TensorImpl& x, std::span<const std::int32_t> positions,
                      const RopeConfig& config) {
  const char* op = "rope";
  if (x.shape.size() != 3) {
    throw InvalidArgument(op, "x.shape", shape_string(x.shape), "rank 3: [n_tokens, n_heads, head_dim]");
  }
  if (x.dtype != DType::f32 && x.dtype != DType::f16) {
    throw InvalidArgument(op, "x.dtype", to_string(x.dtype), "f32 or f16");
  }
  const std::size_t head_dim = x.shape[2];
  if (head_dim % 2 != 0 || head_dim > kMaxHeadDim) {
    throw InvalidArgument(op, "head_dim (x.shape[2])", std::to_string(head_dim),
                          "even, in [2, " + std::to_string(kMaxHeadDim) + "]");
  }
  if (positions.size() != x.shape[0]) {
    throw InvalidArgument(op, "positions.size()", std::to_string(positions.size()),
                          "n_tokens = x.shape[0] = " + std::to_string(x.shape[0]));
  }
  for (std::size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0) {
      throw InvalidArgument(op, "positions[" + std::to_string(t) + "]",
                            std::to_string(positions[t]), "[0, 2^31 - 1]");
    }
  }
  RopeConfig out = config;
  if (out.rotary_dim == 0) out.rotary_dim = head_dim;
  if (out.rotary_dim % 2 != 0 || out.rotary_dim > head_dim) {
    throw InvalidArgument(op, "config.rotary_dim", std::to_string(config.rotary_dim),
                          "0 (= head_dim) or even in [2, head_dim = " + std::to_string(head_dim) + "]");
  }
  if (!std::isfinite(config.base) || config.base <= 0.0) {
    std::ostringstream v;
    v << config.base;
    throw InvalidArgument(op, "config.base", v.str(), "finite and > 0");
  }
  if (config.layout != RopeLayout::interleaved && config.layout != RopeLayout::half) {
    throw InvalidArgument(op, "config.layout", std::to_string(static_cast<int>(config.layout)),
                          "RopeLayout::interleaved or RopeLayout::half");
  }
  return out;
}

void check_copy(const TensorImpl& src, const TensorImpl& dst) {
  if (src.dtype != dst.dtype) {
    throw InvalidArgument("copy", "dst.dtype", to_string(dst.dtype),
                          std::string("src.dtype = ") + to_string(src.dtype));
  }
  if (src.numel != dst.numel) {
    throw InvalidArgument("copy", "dst.numel()", std::to_string(dst.numel),
                          "src.numel() = " + std::to_string(src.numel));
  }
}

}  // namespace vkattn::detail
