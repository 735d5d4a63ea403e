// The backend-independent part of a tensor and of a command list. Backends derive from
// these; the public Tensor/CommandList classes only forward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "vkattn/command_list.hpp"
#include "vkattn/types.hpp"

namespace vkattn::detail {

class TensorImpl {
 public:
  // |owner| identifies the backend that made the tensor; ops reject tensors of another.
  TensorImpl(const void* owner, Shape shape, DType dtype);
  virtual ~TensorImpl();

  const void* const owner;
  const Shape shape;
  const DType dtype;
  const std::size_t numel;
  const std::size_t words;  // 32-bit storage words
};

// Arguments reach a CommandListImpl already checked and normalized
// (RopeConfig::rotary_dim filled in).
class CommandListImpl {
 public:
  virtual ~CommandListImpl();
  virtual const void* owner() const = 0;
  virtual void copy(std::shared_ptr<TensorImpl> src, std::shared_ptr<TensorImpl> dst) = 0;
  // |k| is null for rope on one tensor.
  virtual void rope(std::shared_ptr<TensorImpl> x, std::shared_ptr<TensorImpl> k,
                    std::vector<std::int32_t> positions, const RopeConfig& config) = 0;
  virtual void submit_and_wait() = 0;
  virtual std::vector<OpTiming> timings() const = 0;
  virtual CommandStats stats() const = 0;
};

}  // namespace vkattn::detail
