// The CPU reference backend: tensors in host vectors, ops run in recording order at
// submit time through the reference functions.
#pragma once

#include <memory>

#include "vkattn/backend.hpp"

namespace vkattn::detail {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace vkattn::detail
