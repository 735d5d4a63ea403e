/* vkattn on the application's own Vulkan objects, from C: the C form of vkattn/vulkan.hpp
 * (docs/interop.md has the contract; the C++ header's comments are the reference). Vulkan
 * handles cross as Vulkan's own types, so this is the one C header that includes
 * <vulkan/vulkan.h>; vkattn.h does not include it. The conventions and ABI rules of
 * vkattn.h hold here too; Vulkan's dispatchable handles make the structs' sizes differ
 * between 32- and 64-bit platforms, as Vulkan's own do. */
#ifndef VKATTN_VKATTN_VULKAN_H
#define VKATTN_VKATTN_VULKAN_H

#include <vulkan/vulkan.h>

#include "vkattn/vkattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The application's Vulkan objects (ExternalVulkan). vkattn never destroys them; they must
 * outlive the backend and everything made from it. Handles are copied. */
typedef struct vkattn_external_vulkan {
  uint32_t struct_size;                             /* set by vkattn_external_vulkan_init */
  uint32_t queue_family_index;                      /* a family with VK_QUEUE_COMPUTE_BIT; default 0 */
  VkInstance instance;                              /* required */
  VkPhysicalDevice physical_device;                 /* required */
  VkDevice device;                                  /* required */
  VkQueue queue;                                    /* required: a queue of queue_family_index; externally synchronized
                                                       during vkattn calls that submit (vulkan.hpp says which) */
  const VkDeviceCreateInfo* device_create_info;     /* optional: read during the create call only; optional
                                                       extensions and features are used only if enabled there */
  VkPipelineCache pipeline_cache;                   /* optional: VK_NULL_HANDLE (default): vkattn's own */
  uint32_t api_version;                             /* the instance's VkApplicationInfo::apiVersion; default 1.1 */
  uint32_t reserved;                                /* 0 */
  const VkAllocationCallbacks* allocator;           /* optional (since 0.2): for vkattn's device objects (ExternalVulkan) */
  PFN_vkGetInstanceProcAddr get_instance_proc_addr; /* optional (since 0.2): where vkattn takes every
                                               Vulkan command from; NULL: the loader it links (ExternalVulkan) */
} vkattn_external_vulkan;

VKATTN_API vkattn_status vkattn_external_vulkan_init(vkattn_external_vulkan* vulkan, size_t struct_size);

/* What a device needs for vkattn, to read before creating it (vulkan_requirements() in
 * vulkan.hpp, whose comments say what each optional name enables). The arrays and their
 * strings are the library's, valid for the life of the process. 0.12. */
typedef struct vkattn_vulkan_requirements {
  uint32_t struct_size;                   /* bytes written */
  uint32_t api_version;                   /* of the instance and of the device: VK_API_VERSION_1_1 */
  const char* const* required_extensions; /* none (VK_KHR_portability_subset where the device has it, as Vulkan requires) */
  uint64_t n_required_extensions;
  const char* const* required_features; /* none */
  uint64_t n_required_features;
  const char* const* optional_extensions; /* used when enabled in device_create_info and the device has them */
  uint64_t n_optional_extensions;
  const char* const* optional_features; /* the features those need ("subgroupSizeControl", ...) */
  uint64_t n_optional_features;
} vkattn_vulkan_requirements;
VKATTN_API vkattn_status vkattn_get_vulkan_requirements(vkattn_vulkan_requirements* requirements, size_t requirements_size);

/* A Vulkan backend on the application's device; |options| optional (device, validation and
 * pipeline_cache_dir with a pipeline_cache do not apply). A device lacking something
 * vkattn requires is VKATTN_ERROR_UNSUPPORTED, the message naming it. */
VKATTN_API vkattn_status vkattn_backend_create_external(const vkattn_external_vulkan* vulkan,
                                                        const vkattn_device_options* options, vkattn_backend** backend);

/* A tensor viewing bytes [offset, offset + size_bytes) of |buffer| (wrap in vulkan.hpp):
 * offset a multiple of minStorageBufferOffsetAlignment and 16, size_bytes at least the
 * tensor's bytes rounded up to 16, a multiple of 4, at most maxStorageBufferRange;
 * offset + size_bytes at most the buffer's memory requirement size. vkattn never frees the
 * buffer. Destroy the tensor with vkattn_tensor_destroy. */
VKATTN_API vkattn_status vkattn_tensor_wrap(vkattn_backend* backend, VkBuffer buffer, VkDeviceSize offset,
                                            VkDeviceSize size_bytes, const size_t* shape, size_t rank, vkattn_dtype dtype,
                                            vkattn_tensor** tensor);

/* A KV cache whose K and V are the tensors |k| and |v| (wrap_kv_cache in vulkan.hpp):
 * tensors of this backend (made by vkattn_tensor_wrap; one of vkattn's own memory serves
 * too), each of the cache's shape [n_seqs, capacity,
 * n_kv_heads, head_dim] (a paged cache's pool: [n_blocks, block_size, n_kv_heads,
 * head_dim]) and dtype; zero-filled through the queue (TRANSFER_DST usage).
 * |v| is NULL for a latent cache (config->latent), and only then. */
VKATTN_API vkattn_status vkattn_kv_cache_wrap(vkattn_backend* backend, const vkattn_kv_cache_config* config,
                                              const vkattn_tensor* k, const vkattn_tensor* v, vkattn_kv_cache** cache);

/* How vkattn_cmd_record joins the application's commands (RecordOptions). Zeros: an entry
 * barrier (ALL_COMMANDS / MEMORY_WRITE to COMPUTE_SHADER / SHADER_READ | SHADER_WRITE) and
 * an exit barrier (COMPUTE_SHADER / SHADER_WRITE to ALL_COMMANDS / MEMORY_READ |
 * MEMORY_WRITE). */
typedef struct vkattn_record_options {
  uint32_t struct_size;                /* set by vkattn_record_options_init */
  uint32_t no_entry_barrier;           /* 1: the application records the entry barrier itself */
  uint32_t no_exit_barrier;            /* 1: the application records the exit barrier itself */
  VkPipelineStageFlags dst_stage_mask; /* the exit barrier's destination stages; 0: ALL_COMMANDS */
  VkAccessFlags dst_access_mask;       /* its destination accesses (ones the stages perform, checked);
                                          0: MEMORY_READ | MEMORY_WRITE */
  uint32_t reserved;                   /* 0 */
} vkattn_record_options;

VKATTN_API vkattn_status vkattn_record_options_init(vkattn_record_options* options, size_t struct_size);

/* Records the list's dispatches into |command_buffer| (CommandList::record): in the
 * recording state, of the backend's device; the application submits it. The list must
 * outlive every submission of it. It counts as the list running, and so do the list's
 * replays (vkattn_command_list_set_tokens) while the command buffer holds every op that
 * changes a cache and no vkattn_submit of the list came after. |options| optional. */
VKATTN_API vkattn_status vkattn_cmd_record(vkattn_command_list* list, VkCommandBuffer command_buffer,
                                           const vkattn_record_options* options);

/* Semaphores an asynchronous submission waits on and signals (SubmitSemaphores), as
 * parallel arrays like VkSubmitInfo's. A value is a timeline semaphore's (refused where
 * device_create_info enabled no timelineSemaphore feature); 0 (or a NULL values array)
 * marks binary semaphores. */
typedef struct vkattn_submit_semaphores {
  uint32_t struct_size; /* set by vkattn_submit_semaphores_init */
  uint32_t wait_count;
  const VkSemaphore* wait_semaphores;      /* wait_count handles */
  const uint64_t* wait_values;             /* optional: wait_count values */
  const VkPipelineStageFlags* wait_stages; /* optional: wait_count masks; NULL: COMPUTE_SHADER each */
  uint32_t signal_count;
  uint32_t reserved;                    /* 0 */
  const VkSemaphore* signal_semaphores; /* signal_count handles */
  const uint64_t* signal_values;        /* optional: signal_count values */
} vkattn_submit_semaphores;

VKATTN_API vkattn_status vkattn_submit_semaphores_init(vkattn_submit_semaphores* semaphores, size_t struct_size);

/* vkattn_submit (vkattn.h) with the application's semaphores, on a backend made by
 * vkattn_backend_create_external. */
VKATTN_API vkattn_status vkattn_submit_with_semaphores(vkattn_command_list* list, const vkattn_submit_semaphores* semaphores,
                                                       vkattn_submission** submission);

#ifdef __cplusplus
}
#endif

#endif /* VKATTN_VKATTN_VULKAN_H */
