// The C API's asynchronous submission (vkattn.h) and its interop header (vkattn_vulkan.h):
// each function forwards to vkattn/vulkan.hpp after the checks C adds.
#include <vector>

#include "c_api/c_api_internal.hpp"
#include "vkattn/vkattn_vulkan.h"
#include "vkattn/vulkan.hpp"

namespace vkattn::c_api {
template <>  // 0.1's: before the allocator and the application's vkGetInstanceProcAddr
inline constexpr std::size_t kFirstSize<vkattn_external_vulkan> = offsetof(vkattn_external_vulkan, allocator);
}  // namespace vkattn::c_api
VKATTN_ENDS_WITHOUT_PADDING(vkattn_vulkan_requirements, n_optional_features);

using namespace vkattn::c_api;
using vkattn::InvalidArgument;

namespace {

void external_defaults(vkattn_external_vulkan& v) { v.api_version = VK_API_VERSION_1_1; }
void record_defaults(vkattn_record_options&) {}
void semaphores_defaults(vkattn_submit_semaphores&) {}

std::uint32_t flag(const char* function, const char* param, std::uint32_t value) {
  if (value > 1) throw InvalidArgument(function, param, std::to_string(value), "0 or 1");
  return value;
}

}  // namespace

extern "C" {

vkattn_status vkattn_submit(vkattn_command_list* list, vkattn_submission** submission) {
  const char* fn = "vkattn_submit";
  return guarded([&] {
    need(fn, "submission", submission) = nullptr;
    auto s = std::make_unique<vkattn_submission>();
    vkattn_command_list& l = need(fn, "list", list);
    s->impl = l.submitting([&] { return l.impl.submit(); });
    *submission = s.release();
  });
}

vkattn_status vkattn_submission_ready(vkattn_submission* submission, uint32_t* ready) {
  const char* fn = "vkattn_submission_ready";
  return guarded([&] { need(fn, "ready", ready) = need(fn, "submission", submission).impl.ready() ? 1u : 0u; });
}

vkattn_status vkattn_submission_wait(vkattn_submission* submission, uint64_t timeout_ns, uint32_t* finished) {
  const char* fn = "vkattn_submission_wait";
  return guarded([&] {
    uint32_t& done = need(fn, "finished", finished);  // refused before it waits, not after
    done = need(fn, "submission", submission).impl.wait(timeout_ns) ? 1u : 0u;
  });
}

void vkattn_submission_destroy(vkattn_submission* submission) { delete submission; }

vkattn_status vkattn_external_vulkan_init(vkattn_external_vulkan* vulkan, size_t struct_size) {
  return guarded([&] {
    vkattn_external_vulkan v{};
    external_defaults(v);
    write_struct("vkattn_external_vulkan_init", "vulkan", vulkan, struct_size, v);
  });
}

vkattn_status vkattn_get_vulkan_requirements(vkattn_vulkan_requirements* requirements, size_t requirements_size) {
  const char* fn = "vkattn_get_vulkan_requirements";
  return guarded([&] {
    // Built once (thread-safe): the arrays outlive every caller. The strings are literals.
    static const vkattn::VulkanRequirements r = vkattn::vulkan_requirements();
    const auto data = [](const std::vector<const char*>& v) { return v.empty() ? nullptr : v.data(); };
    write_struct(fn, "requirements", requirements, requirements_size,
                 vkattn_vulkan_requirements{.struct_size = 0,
                                            .api_version = r.api_version,
                                            .required_extensions = data(r.required_extensions),
                                            .n_required_extensions = r.required_extensions.size(),
                                            .required_features = data(r.required_features),
                                            .n_required_features = r.required_features.size(),
                                            .optional_extensions = data(r.optional_extensions),
                                            .n_optional_extensions = r.optional_extensions.size(),
                                            .optional_features = data(r.optional_features),
                                            .n_optional_features = r.optional_features.size()});
  });
}

vkattn_status vkattn_backend_create_external(const vkattn_external_vulkan* vulkan, const vkattn_device_options* options,
                                             vkattn_backend** backend) {
  const char* fn = "vkattn_backend_create_external";
  return guarded([&] {
    need(fn, "backend", backend) = nullptr;
    const vkattn_external_vulkan v = read_struct(fn, "vulkan", vulkan, external_defaults, false);
    if (v.reserved != 0) throw InvalidArgument(fn, "vulkan->reserved", std::to_string(v.reserved), "0");
    vkattn::ExternalVulkan ext;
    ext.instance = v.instance;
    ext.physical_device = v.physical_device;
    ext.device = v.device;
    ext.queue_family_index = v.queue_family_index;
    ext.queue = v.queue;
    ext.api_version = v.api_version;
    ext.device_create_info = v.device_create_info;
    ext.pipeline_cache = v.pipeline_cache;
    ext.allocator = v.allocator;
    ext.get_instance_proc_addr = v.get_instance_proc_addr;
    auto b = std::make_unique<vkattn_backend>();
    b->impl = vkattn::make_backend(ext, device_options(fn, options));
    b->device_name = b->impl->device_name();
    *backend = b.release();
  });
}

vkattn_status vkattn_tensor_wrap(vkattn_backend* backend, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size_bytes,
                                 const size_t* shape, size_t rank, vkattn_dtype dtype, vkattn_tensor** tensor) {
  const char* fn = "vkattn_tensor_wrap";
  return guarded([&] {
    new_tensor(fn, backend, shape, rank, tensor, [&](vkattn_backend& b, vkattn::Shape s) {
      return vkattn::wrap(*b.impl, buffer, offset, size_bytes, std::move(s), static_cast<vkattn::DType>(dtype));
    });
  });
}

vkattn_status vkattn_kv_cache_wrap(vkattn_backend* backend, const vkattn_kv_cache_config* config, const vkattn_tensor* k,
                                   const vkattn_tensor* v, vkattn_kv_cache** cache) {
  const char* fn = "vkattn_kv_cache_wrap";
  return guarded([&] {
    need(fn, "cache", cache) = nullptr;
    vkattn_backend& b = need(fn, "backend", backend);
    auto c = std::make_unique<vkattn_kv_cache>();
    const vkattn::KvCacheConfig cfg = kv_cache_config(fn, config);
    if (!v && !cfg.latent) {
      throw InvalidArgument(fn, "v", "NULL", "a tensor made by vkattn_tensor_wrap (NULL only with config->latent)");
    }
    const vkattn::Tensor none;  // a latent cache's V, inside K
    c->impl = vkattn::wrap_kv_cache(*b.impl, cfg, need(fn, "k", k).impl, v ? v->impl : none);
    *cache = c.release();
  });
}

vkattn_status vkattn_record_options_init(vkattn_record_options* options, size_t struct_size) {
  return guarded([&] { write_struct("vkattn_record_options_init", "options", options, struct_size, vkattn_record_options{}); });
}

vkattn_status vkattn_cmd_record(vkattn_command_list* list, VkCommandBuffer command_buffer, const vkattn_record_options* options) {
  const char* fn = "vkattn_cmd_record";
  return guarded([&] {
    vkattn_command_list& l = need(fn, "list", list);
    const vkattn_record_options o = read_struct(fn, "options", options, record_defaults, true);
    if (o.reserved != 0) throw InvalidArgument(fn, "options->reserved", std::to_string(o.reserved), "0");
    l.impl.record(command_buffer, {.entry_barrier = flag(fn, "options->no_entry_barrier", o.no_entry_barrier) == 0,
                                   .exit_barrier = flag(fn, "options->no_exit_barrier", o.no_exit_barrier) == 0,
                                   .dst_stage_mask = o.dst_stage_mask,
                                   .dst_access_mask = o.dst_access_mask});
  });
}

vkattn_status vkattn_submit_semaphores_init(vkattn_submit_semaphores* semaphores, size_t struct_size) {
  return guarded(
      [&] { write_struct("vkattn_submit_semaphores_init", "semaphores", semaphores, struct_size, vkattn_submit_semaphores{}); });
}

vkattn_status vkattn_submit_with_semaphores(vkattn_command_list* list, const vkattn_submit_semaphores* semaphores,
                                            vkattn_submission** submission) {
  const char* fn = "vkattn_submit_with_semaphores";
  return guarded([&] {
    need(fn, "submission", submission) = nullptr;
    vkattn_command_list& l = need(fn, "list", list);
    const vkattn_submit_semaphores s = read_struct(fn, "semaphores", semaphores, semaphores_defaults, false);
    if (s.reserved != 0) throw InvalidArgument(fn, "semaphores->reserved", std::to_string(s.reserved), "0");
    const auto waits = array(fn, "semaphores->wait_semaphores", s.wait_semaphores, s.wait_count);
    const auto signals = array(fn, "semaphores->signal_semaphores", s.signal_semaphores, s.signal_count);
    vkattn::SubmitSemaphores sync;
    for (std::size_t i = 0; i < waits.size(); ++i) {
      sync.wait.push_back({waits[i], s.wait_values ? s.wait_values[i] : 0,
                           s.wait_stages ? s.wait_stages[i] : VkPipelineStageFlags{VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT}});
    }
    for (std::size_t i = 0; i < signals.size(); ++i) {
      sync.signal.push_back({signals[i], s.signal_values ? s.signal_values[i] : 0});
    }
    auto out = std::make_unique<vkattn_submission>();
    out->impl = l.submitting([&] { return l.impl.submit(sync); });
    *submission = out.release();
  });
}

}  // extern "C"
