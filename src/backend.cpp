// Backend factory and device listing: the only file that knows both backends.
#include "cpu/cpu_backend.hpp"
#include "vkattn/backend.hpp"
#include "vkattn/error.hpp"
#include "vulkan/check.hpp"
#include "vulkan/device.hpp"
#include "vulkan/instance.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn {

std::unique_ptr<Backend> make_backend(BackendKind kind, const DeviceOptions& options) {
  switch (kind) {
    case BackendKind::cpu: return detail::make_cpu_backend();
    case BackendKind::vulkan: return detail::make_vulkan_backend(options);
  }
  throw InvalidArgument("make_backend", "kind", std::to_string(static_cast<int>(kind)),
                        "BackendKind::cpu or BackendKind::vulkan");
}

std::vector<DeviceInfo> list_devices(const DeviceOptions& options) {
  detail::OpScope scope("list devices");
  auto instance = detail::Instance::create(options.validation.value_or(false));
  auto devices = detail::enumerate_devices(*instance);
  std::vector<DeviceInfo> out;
  for (const auto& d : devices) out.push_back(d.info);
  try {
    out[detail::choose_device(devices, options)].chosen = true;
  } catch (const Error&) {
    // None would be chosen: the caller sees every device's rejection reason.
  }
  return out;
}

}  // namespace vkattn
