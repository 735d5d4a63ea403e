// The C API's device and backend functions: listing devices, creating a backend, and what
// a backend says about itself.
#include "c_api/c_api_internal.hpp"

using namespace vkattn::c_api;
using vkattn::InvalidArgument;

namespace vkattn::c_api {

vkattn_device_limits c_limits(const DeviceLimits& l) {
  const auto u = [](bool b) { return b ? 1u : 0u; };
  // Packed (clang-format would put one item per line).
  // clang-format off
  return {.struct_size = 0, .subgroup_size = l.subgroup_size,
          .subgroup_min_size = l.subgroup_min_size, .subgroup_max_size = l.subgroup_max_size,
          .subgroup_arithmetic = u(l.subgroup_arithmetic),
          .subgroup_shuffle = u(l.subgroup_shuffle), .subgroup_vote = u(l.subgroup_vote),
          .subgroup_size_control = u(l.subgroup_size_control),
          .max_shared_memory = l.max_shared_memory,
          .max_workgroup_invocations = l.max_workgroup_invocations,
          .max_workgroup_size = {l.max_workgroup_size[0], l.max_workgroup_size[1], l.max_workgroup_size[2]},
          .max_workgroup_count = {l.max_workgroup_count[0], l.max_workgroup_count[1], l.max_workgroup_count[2]},
          .max_storage_buffers = l.max_storage_buffers, .compute_units = l.compute_units,
          .max_storage_buffer_range = l.max_storage_buffer_range,
          .storage_offset_alignment = l.storage_offset_alignment,
          .max_texel_buffer_elements = l.max_texel_buffer_elements,
          .device_local_bytes = l.device_local_bytes,
          .storage_16bit = u(l.storage_16bit), .shader_float16 = u(l.shader_float16),
          .timestamps = u(l.timestamps), .unified_memory = u(l.unified_memory),
          .timestamp_period_ns = l.timestamp_period_ns,
          .matrix_units = u(l.matrix_units), .matrix_standin = u(l.matrix_standin)};
  // clang-format on
}

}  // namespace vkattn::c_api

extern "C" {

vkattn_status vkattn_list_devices(const vkattn_device_options* options, vkattn_device_list** list) {
  const char* fn = "vkattn_list_devices";
  return guarded([&] {
    need(fn, "list", list) = nullptr;
    auto l = std::make_unique<vkattn_device_list>();
    l->devices = vkattn::list_devices(device_options(fn, options));
    *list = l.release();
  });
}

vkattn_status vkattn_device_list_count(const vkattn_device_list* list, size_t* count) {
  const char* fn = "vkattn_device_list_count";
  return guarded([&] { need(fn, "count", count) = need(fn, "list", list).devices.size(); });
}

vkattn_status vkattn_device_list_get(const vkattn_device_list* list, size_t index, vkattn_device_info* info, size_t info_size) {
  const char* fn = "vkattn_device_list_get";
  return guarded([&] {
    const vkattn::DeviceInfo& d = device_at(fn, need(fn, "list", list), index);
    const vkattn::DeviceLimits& l = d.limits;
    write_struct(fn, "info", info, info_size,
                 // Packed (clang-format would put one item per line).
                 // clang-format off
                 vkattn_device_info{.struct_size = 0, .index = d.index, .name = d.name.c_str(), .type = d.type.c_str(),
                                    .api_version = d.api_version.c_str(), .driver = d.driver.c_str(),
                                    .rejected = d.rejected.c_str(), .chosen = d.chosen ? 1u : 0u,
                                    .subgroup_size = l.subgroup_size,
                                    .max_storage_buffer_range = l.max_storage_buffer_range,
                                    .device_local_bytes = l.device_local_bytes,
                                    .max_shared_memory = l.max_shared_memory,
                                    .unified_memory = l.unified_memory ? 1u : 0u,
                                    .shader_float16 = l.shader_float16 ? 1u : 0u,
                                    .timestamps = l.timestamps ? 1u : 0u,
                                    .matrix_units = l.matrix_units ? 1u : 0u,
                                    .matrix_standin = l.matrix_standin ? 1u : 0u,
                                    .matrix_note = d.matrix_note.c_str()});
    // clang-format on
  });
}

void vkattn_device_list_destroy(vkattn_device_list* list) { delete list; }

vkattn_status vkattn_backend_create(vkattn_backend_kind kind, const vkattn_device_options* options, vkattn_backend** backend) {
  const char* fn = "vkattn_backend_create";
  return guarded([&] {
    need(fn, "backend", backend) = nullptr;
    // Named here: the C++ refusal would name BackendKind's values, not this header's.
    if (kind != VKATTN_BACKEND_CPU && kind != VKATTN_BACKEND_VULKAN) {
      throw InvalidArgument(fn, "kind", std::to_string(static_cast<int>(kind)),
                            "VKATTN_BACKEND_CPU (0) or VKATTN_BACKEND_VULKAN (1)");
    }
    auto b = std::make_unique<vkattn_backend>();
    b->impl = vkattn::make_backend(static_cast<vkattn::BackendKind>(kind), device_options(fn, options));
    b->device_name = b->impl->device_name();
    *backend = b.release();
  });
}

void vkattn_backend_destroy(vkattn_backend* backend) { delete backend; }

vkattn_status vkattn_backend_get_kind(const vkattn_backend* backend, vkattn_backend_kind* kind) {
  const char* fn = "vkattn_backend_get_kind";
  return guarded([&] { need(fn, "kind", kind) = static_cast<vkattn_backend_kind>(need(fn, "backend", backend).impl->kind()); });
}

vkattn_status vkattn_backend_device_name(const vkattn_backend* backend, const char** name) {
  const char* fn = "vkattn_backend_device_name";
  return guarded([&] { need(fn, "name", name) = need(fn, "backend", backend).device_name.c_str(); });
}

vkattn_status vkattn_backend_validation_messages(vkattn_backend* backend, const char* const** messages, size_t* count) {
  const char* fn = "vkattn_backend_validation_messages";
  return guarded([&] {
    vkattn_backend& b = need(fn, "backend", backend);
    need(fn, "messages", messages);
    need(fn, "count", count);
    b.messages = b.impl->validation_messages();
    b.message_ptrs.clear();
    for (const std::string& m : b.messages) b.message_ptrs.push_back(m.c_str());
    *messages = b.message_ptrs.data();
    *count = b.message_ptrs.size();
  });
}

vkattn_status vkattn_backend_limits(const vkattn_backend* backend, vkattn_device_limits* limits, size_t limits_size) {
  const char* fn = "vkattn_backend_limits";
  return guarded([&] { write_struct(fn, "limits", limits, limits_size, c_limits(need(fn, "backend", backend).impl->limits())); });
}

vkattn_status vkattn_spec_minimum_limits(vkattn_device_limits* limits, size_t limits_size) {
  const char* fn = "vkattn_spec_minimum_limits";
  return guarded([&] { write_struct(fn, "limits", limits, limits_size, c_limits(vkattn::spec_minimum_limits())); });
}

}  // extern "C"
