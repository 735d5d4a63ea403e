// Argument checks shared by both backends. Each throws InvalidArgument naming the op, the
// parameter, its value and the valid range, before anything is recorded.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "common/tensor_impl.hpp"
#include "vkattn/error.hpp"
#include "vkattn/tensor.hpp"

namespace vkattn::detail {

std::string shape_string(const Shape& shape);

// |t| is a live tensor of the backend |owner|.
const std::shared_ptr<TensorImpl>& check_tensor(const char* op, const char* param,
                                                const Tensor& t, const void* owner);

// Returns |config| with rotary_dim resolved (0 -> head_dim).
RopeConfig check_rope(const TensorImpl& x, std::span<const std::int32_t> positions,
                      const RopeConfig& config);

void check_copy(const TensorImpl& src, const TensorImpl& dst);

}  // namespace vkattn::detail
