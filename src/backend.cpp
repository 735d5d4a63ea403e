// Backend factory and device listing: the only file that knows both backends.
#include "vkattn/backend.hpp"
#include "common/heap_ledger.hpp"
#include "common/log.hpp"
#include "common/validate.hpp"
#include "cpu/cpu_backend.hpp"
#include "vkattn/error.hpp"
#include "vulkan/check.hpp"
#include "vulkan/device.hpp"
#include "vulkan/instance.hpp"
#include "vulkan/vulkan_backend.hpp"

namespace vkattn {

std::unique_ptr<Backend> make_backend(BackendKind kind, const DeviceOptions& options) try {
  detail::check_device_options(options, "create backend");
  switch (kind) {
    case BackendKind::cpu: return detail::make_cpu_backend(options);
    case BackendKind::vulkan: return detail::make_vulkan_backend(options);
  }
  throw InvalidArgument("create backend", "kind", std::to_string(static_cast<int>(kind)),
                        "BackendKind::cpu or BackendKind::vulkan");
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("create backend");
}

std::vector<DeviceInfo> list_devices(const DeviceOptions& options) try {
  detail::OpScope scope("list devices");
  detail::check_device_options(options, "list devices");
  detail::kernels_asked(options, "list devices");  // refused as make_backend refuses it
  auto instance = detail::Instance::create(options.validation.value_or(false), std::make_shared<detail::Logger>(options));
  auto devices = detail::enumerate_devices(*instance, options);
  std::vector<DeviceInfo> out;
  for (const auto& d : devices) out.push_back(d.info);
  try {
    out[detail::choose_device(devices, options)].chosen = true;
  } catch (const Error&) {
    // None would be chosen: the caller sees every device's rejection reason.
  }
  return out;
} catch (const std::bad_alloc&) {
  detail::host_out_of_memory("list devices");
}

}  // namespace vkattn
