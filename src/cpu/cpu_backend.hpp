// The CPU reference backend: tensors in host vectors, ops run in recording order at
// submit time through the reference functions.
#pragma once

#include <memory>

#include "vkattn/backend.hpp"

namespace vkattn::detail {

// Tensors are counted against physical memory, or DeviceOptions::cap_limits's
// device_local_bytes when smaller: an absurd size is Error(out_of_memory), not an abort.
std::unique_ptr<Backend> make_cpu_backend(const DeviceOptions& options);

}  // namespace vkattn::detail
