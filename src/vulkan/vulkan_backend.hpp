#pragma once

#include <memory>

#include "vkattn/backend.hpp"

namespace vkattn::detail {

std::unique_ptr<Backend> make_vulkan_backend(const DeviceOptions& options);

}  // namespace vkattn::detail
