// Tensor: a move-only handle to backend storage of a given shape and dtype. Its contents
// move with Backend::upload/download; ops in a CommandList read and write it in place.
// Recorded command lists keep the storage alive, so a tensor may be destroyed before a
// command list that uses it.
#pragma once

#include <memory>

#include "vkattn/export.h"
#include "vkattn/types.hpp"

namespace vkattn {

namespace detail {
class TensorImpl;
}

class VKATTN_API Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor();

  bool valid() const noexcept { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  std::size_t numel() const;  // product of the shape
  std::size_t bytes() const;  // storage bytes: 4 * numel; f16 4 * ceil(numel / 2); q8_0 / q4_0 codes, then f16 scales

  const std::shared_ptr<detail::TensorImpl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

}  // namespace vkattn
