/* vkattn_vulkan.h from C11: an application with its own instance, device, queue, buffers
 * and command buffer (raw Vulkan, validation and synchronization validation on) records
 * RoPE, kv_append and attention between its own copies, and submits a second list
 * asynchronously that signals a semaphore its own copy waits on; results against the CPU
 * backend; misuse refused with the right status. Exit 0: passed; 1: failed; 77: no Vulkan
 * device (a failure under VKATTN_REQUIRE_VULKAN=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "vkattn/vkattn_vulkan.h"

static int g_messages = 0;

/* A vkGetInstanceProcAddr that counts its calls: a struct too old to have the field must
 * not be read past its size. */
static int g_gipa_calls = 0;
static PFN_vkVoidFunction VKAPI_PTR counting_gipa(VkInstance instance, const char* name) {
  ++g_gipa_calls;
  return vkGetInstanceProcAddr(instance, name);
}

#define VK(call)                                                                        \
  do {                                                                                  \
    VkResult vk_result_ = (call);                                                       \
    if (vk_result_ != VK_SUCCESS) {                                                     \
      fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #call, (int)vk_result_); \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

enum { TOKENS = 2, HEADS = 4, KV_HEADS = 2, HEAD_DIM = 16 };

static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                 VkDebugUtilsMessageTypeFlagsEXT types,
                                                 const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  (void)severity;
  (void)types;
  (void)user;
  fprintf(stderr, "validation: %s\n", data && data->pMessage ? data->pMessage : "(none)");
  ++g_messages;
  return VK_FALSE;
}

typedef struct {
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  VkPhysicalDevice physical;
  VkDevice device;
  VkQueue queue;
  uint32_t family;
  VkCommandPool pool;
  VkDeviceCreateInfo device_info;
  VkDeviceQueueCreateInfo queue_info;
  float priority;
} app_t;

typedef struct {
  VkBuffer buffer;
  VkDeviceMemory memory;
  void* mapped;
} buffer_t;

/* 0: made; 77: no Vulkan (or no validation layer). */
static int app_create(app_t* app) {
  memset(app, 0, sizeof *app);
  VkApplicationInfo info = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "vkattn C interop test", 0, NULL, 0, VK_API_VERSION_1_1};
  const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
  const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
  VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features = {VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, NULL, 1, &sync, 0, NULL};
  VkDebugUtilsMessengerCreateInfoEXT messenger = {
      VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      &features,
      0,
      VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      on_message,
      NULL};
  VkInstanceCreateInfo create = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, &messenger, 0, &info, 1, layers, 2, exts};
  if (vkCreateInstance(&create, NULL, &app->instance) != VK_SUCCESS) return 77;
  messenger.pNext = NULL;
  PFN_vkCreateDebugUtilsMessengerEXT make =
      (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(app->instance, "vkCreateDebugUtilsMessengerEXT");
  VK(make(app->instance, &messenger, NULL, &app->messenger));
  uint32_t n = 1;
  VkResult r = vkEnumeratePhysicalDevices(app->instance, &n, &app->physical);
  if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0) return 77;
  VkQueueFamilyProperties families[16];
  n = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(app->physical, &n, families);
  app->family = UINT32_MAX;
  for (uint32_t i = 0; i < n && app->family == UINT32_MAX; ++i) {
    if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) app->family = i;
  }
  if (app->family == UINT32_MAX) return 77;
  app->priority = 1.0f;
  VkDeviceQueueCreateInfo queue = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, app->family, 1, &app->priority};
  app->queue_info = queue;
  VkDeviceCreateInfo device = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, NULL, 0, 1, &app->queue_info, 0, NULL, 0, NULL, NULL};
  app->device_info = device;
  VK(vkCreateDevice(app->physical, &app->device_info, NULL, &app->device));
  vkGetDeviceQueue(app->device, app->family, 0, &app->queue);
  VkCommandPoolCreateInfo pool = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL, 0, app->family};
  VK(vkCreateCommandPool(app->device, &pool, NULL, &app->pool));
  return 0;
}

static buffer_t make_buffer(const app_t* app, VkDeviceSize size, VkBufferUsageFlags usage, int host) {
  buffer_t b = {VK_NULL_HANDLE, VK_NULL_HANDLE, NULL};
  VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, size, usage, VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
  VK(vkCreateBuffer(app->device, &info, NULL, &b.buffer));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(app->device, b.buffer, &req);
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(app->physical, &mem);
  const VkMemoryPropertyFlags want =
      host ? (VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  uint32_t type = UINT32_MAX;
  for (uint32_t i = 0; i < mem.memoryTypeCount && type == UINT32_MAX; ++i) {
    if ((req.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) type = i;
  }
  if (type == UINT32_MAX) exit(1);
  VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, NULL, req.size, type};
  VK(vkAllocateMemory(app->device, &alloc, NULL, &b.memory));
  VK(vkBindBufferMemory(app->device, b.buffer, b.memory, 0));
  if (host) VK(vkMapMemory(app->device, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped));
  return b;
}

static void free_buffer(const app_t* app, buffer_t* b) {
  vkDestroyBuffer(app->device, b->buffer, NULL);
  vkFreeMemory(app->device, b->memory, NULL);
}

static VkCommandBuffer begin(const app_t* app) {
  VkCommandBufferAllocateInfo info = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, app->pool,
                                      VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
  VkCommandBuffer cb;
  VK(vkAllocateCommandBuffers(app->device, &info, &cb));
  VkCommandBufferBeginInfo b = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL, 0, NULL};
  VK(vkBeginCommandBuffer(cb, &b));
  return cb;
}

static void copy_then_host_barrier(VkCommandBuffer cb, VkBuffer src, VkBuffer dst, VkDeviceSize bytes) {
  VkBufferCopy region = {0, 0, bytes};
  vkCmdCopyBuffer(cb, src, dst, 1, &region);
  VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER, NULL, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &barrier, 0, NULL, 0, NULL);
}

/* Ends |cb| and submits it waiting on |wait| (if any) at the transfer stage; waits. */
static void submit_and_wait(const app_t* app, VkCommandBuffer cb, VkSemaphore wait) {
  VK(vkEndCommandBuffer(cb));
  VkFenceCreateInfo fence_info = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, NULL, 0};
  VkFence fence;
  VK(vkCreateFence(app->device, &fence_info, NULL, &fence));
  const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
  VkSubmitInfo submit = {VK_STRUCTURE_TYPE_SUBMIT_INFO, NULL, wait ? 1u : 0u, &wait, &stage, 1, &cb, 0, NULL};
  VK(vkQueueSubmit(app->queue, 1, &submit, fence));
  VK(vkWaitForFences(app->device, 1, &fence, VK_TRUE, UINT64_MAX));
  vkDestroyFence(app->device, fence, NULL);
}

static float frand(unsigned* state) {
  *state = *state * 1664525u + 1013904223u;
  return (float)((*state >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int close_enough(const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]))) {
      fprintf(stderr, "element %zu: got %g, want %g\n", i, (double)got[i], (double)want[i]);
      return 0;
    }
  }
  return 1;
}

/* A cache of 8 slots on |b|, and RoPE on q and k, their append and attention over the cache
 * into out, recorded into |cmd|. */
static vkattn_kv_cache* record_chunk(vkattn_backend* b, vkattn_command_list* cmd, vkattn_tensor* q, vkattn_tensor* k,
                                     vkattn_tensor* v, vkattn_tensor* out, const int32_t* positions) {
  vkattn_kv_cache_config config;
  OK(vkattn_kv_cache_config_init(&config, sizeof config));
  config.n_kv_heads = KV_HEADS;
  config.head_dim = HEAD_DIM;
  config.capacity = 8;
  vkattn_kv_cache* cache = NULL;
  OK(vkattn_kv_cache_create(b, &config, &cache));
  vkattn_attention_tokens tokens;
  OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
  tokens.q_positions = positions;
  tokens.n_q_positions = TOKENS;
  OK(vkattn_cmd_rope_qk(cmd, q, k, positions, TOKENS, NULL));
  OK(vkattn_cmd_kv_append(cmd, cache, k, v, positions, TOKENS, NULL, 0, 0));
  OK(vkattn_cmd_attention_cache(cmd, q, cache, out, &tokens, NULL, NULL));
  return cache;
}

/* The CPU backend's output for q, k, v at |positions| (a cache of its own). */
static void reference(const float* q, const float* k, const float* v, const int32_t* positions, float* out) {
  vkattn_backend* cpu = NULL;
  OK(vkattn_backend_create(VKATTN_BACKEND_CPU, NULL, &cpu));
  const size_t qs[3] = {TOKENS, HEADS, HEAD_DIM}, ks[3] = {TOKENS, KV_HEADS, HEAD_DIM};
  vkattn_tensor *tq = NULL, *tk = NULL, *tv = NULL, *to = NULL;
  OK(vkattn_tensor_create(cpu, qs, 3, VKATTN_DTYPE_F32, &tq));
  OK(vkattn_tensor_create(cpu, ks, 3, VKATTN_DTYPE_F32, &tk));
  OK(vkattn_tensor_create(cpu, ks, 3, VKATTN_DTYPE_F32, &tv));
  OK(vkattn_tensor_create(cpu, qs, 3, VKATTN_DTYPE_F32, &to));
  OK(vkattn_upload_f32(cpu, tq, q, TOKENS * HEADS * HEAD_DIM));
  OK(vkattn_upload_f32(cpu, tk, k, TOKENS * KV_HEADS * HEAD_DIM));
  OK(vkattn_upload_f32(cpu, tv, v, TOKENS * KV_HEADS * HEAD_DIM));
  vkattn_command_list* cmd = NULL;
  OK(vkattn_command_list_create(cpu, NULL, &cmd));
  vkattn_kv_cache* cache = record_chunk(cpu, cmd, tq, tk, tv, to, positions);
  OK(vkattn_submit_and_wait(cmd));
  OK(vkattn_download_f32(cpu, to, out, TOKENS * HEADS * HEAD_DIM));
  vkattn_command_list_destroy(cmd);
  vkattn_kv_cache_destroy(cache);
  vkattn_tensor_destroy(tq);
  vkattn_tensor_destroy(tk);
  vkattn_tensor_destroy(tv);
  vkattn_tensor_destroy(to);
  vkattn_backend_destroy(cpu);
}

int main(void) {
  const char* required = getenv("VKATTN_REQUIRE_VULKAN");
  app_t app;
  if (app_create(&app) != 0) {
    fprintf(stderr, "no Vulkan device with the validation layer\n");
    return required && strcmp(required, "1") == 0 ? 1 : 77;
  }
  enum { QN = TOKENS * HEADS * HEAD_DIM, KN = TOKENS * KV_HEADS * HEAD_DIM };
  float q[QN], k[KN], v[KN], want[QN], got[QN];
  unsigned state = 15;
  for (int i = 0; i < QN; ++i) q[i] = frand(&state);
  for (int i = 0; i < KN; ++i) k[i] = frand(&state);
  for (int i = 0; i < KN; ++i) v[i] = frand(&state);
  const int32_t positions[TOKENS] = {0, 1};
  reference(q, k, v, positions, want);

  /* What a device needs (0.12): nothing required, the optional names as vulkan.hpp lists them. */
  vkattn_vulkan_requirements req;
  OK(vkattn_get_vulkan_requirements(&req, sizeof req));
  CHECK(req.struct_size == sizeof req && req.api_version == VK_API_VERSION_1_1);
  CHECK(req.n_required_extensions == 0 && req.required_extensions == NULL && req.n_required_features == 0);
  CHECK(req.n_optional_extensions == 3 && req.n_optional_features == 6);
  CHECK(strcmp(req.optional_extensions[0], VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME) == 0);
  CHECK(strcmp(req.optional_extensions[1], VK_EXT_MEMORY_BUDGET_EXTENSION_NAME) == 0);
  CHECK(strcmp(req.optional_extensions[2], "VK_KHR_cooperative_matrix") == 0);
  CHECK(strcmp(req.optional_features[0], "subgroupSizeControl") == 0);
  CHECK(strcmp(req.optional_features[4], "vulkanMemoryModel") == 0);
  CHECK(strcmp(req.optional_features[5], "vulkanMemoryModelDeviceScope") == 0);
  CHECK(vkattn_get_vulkan_requirements(&req, 4) == VKATTN_ERROR_INVALID_ARGUMENT);

  vkattn_external_vulkan ext;
  OK(vkattn_external_vulkan_init(&ext, sizeof ext));
  CHECK(ext.api_version == VK_API_VERSION_1_1);
  CHECK(ext.allocator == NULL && ext.get_instance_proc_addr == NULL);
  ext.get_instance_proc_addr = vkGetInstanceProcAddr; /* the application's loader, as volk would give it */
  ext.instance = app.instance;
  ext.physical_device = app.physical;
  ext.device = app.device;
  ext.queue_family_index = app.family;
  ext.queue = app.queue;
  ext.device_create_info = &app.device_info;
  vkattn_device_options options;
  OK(vkattn_device_options_init(&options, sizeof options));
  options.pipeline_cache_dir = "";
  vkattn_backend* gpu = NULL;
  /* 0.1's struct, before the allocator and vkGetInstanceProcAddr: accepted, Vulkan from the
   * loader vkattn opens, and nothing read past its size. */
  vkattn_external_vulkan old = ext;
  old.struct_size = (uint32_t)offsetof(vkattn_external_vulkan, allocator);
  old.get_instance_proc_addr = counting_gipa;
  OK(vkattn_backend_create_external(&old, &options, &gpu));
  CHECK(g_gipa_calls == 0);
  vkattn_backend_destroy(gpu);
  gpu = NULL;
  vkattn_external_vulkan reserved = ext;
  reserved.reserved = 1;
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "vulkan->reserved = 1; valid: 0",
                vkattn_backend_create_external(&reserved, &options, &gpu));
  CHECK(gpu == NULL);
  OK(vkattn_backend_create_external(&ext, &options, &gpu));

  /* Q, K, V device-local, from the application's staging buffer; the output read back. */
  const VkDeviceSize qb = QN * 4, kb = KN * 4;
  const VkBufferUsageFlags storage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  buffer_t staging = make_buffer(&app, qb + 2 * kb, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 1);
  buffer_t qbuf = make_buffer(&app, qb, storage | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0);
  buffer_t kbuf = make_buffer(&app, kb, storage | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0);
  buffer_t vbuf = make_buffer(&app, kb, storage | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 0);
  buffer_t obuf = make_buffer(&app, qb, storage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 0);
  buffer_t readback = make_buffer(&app, qb, VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1);
  memcpy(staging.mapped, q, qb);
  memcpy((char*)staging.mapped + qb, k, kb);
  memcpy((char*)staging.mapped + qb + kb, v, kb);

  const size_t qs[3] = {TOKENS, HEADS, HEAD_DIM}, ks[3] = {TOKENS, KV_HEADS, HEAD_DIM};
  vkattn_tensor *tq = NULL, *tk = NULL, *tv = NULL, *to = NULL;
  OK(vkattn_tensor_wrap(gpu, qbuf.buffer, 0, qb, qs, 3, VKATTN_DTYPE_F32, &tq));
  OK(vkattn_tensor_wrap(gpu, kbuf.buffer, 0, kb, ks, 3, VKATTN_DTYPE_F32, &tk));
  OK(vkattn_tensor_wrap(gpu, vbuf.buffer, 0, kb, ks, 3, VKATTN_DTYPE_F32, &tv));
  OK(vkattn_tensor_wrap(gpu, obuf.buffer, 0, qb, qs, 3, VKATTN_DTYPE_F32, &to));
  vkattn_command_list* cmd = NULL;
  OK(vkattn_command_list_create(gpu, NULL, &cmd));
  vkattn_kv_cache* cache = record_chunk(gpu, cmd, tq, tk, tv, to, positions);

  /* The application's command buffer: copies in, vkattn, copy out. */
  VkCommandBuffer cb = begin(&app);
  VkBufferCopy in[3] = {{0, 0, qb}, {qb, 0, kb}, {qb + kb, 0, kb}};
  vkCmdCopyBuffer(cb, staging.buffer, qbuf.buffer, 1, &in[0]);
  vkCmdCopyBuffer(cb, staging.buffer, kbuf.buffer, 1, &in[1]);
  vkCmdCopyBuffer(cb, staging.buffer, vbuf.buffer, 1, &in[2]);
  vkattn_record_options record;
  OK(vkattn_record_options_init(&record, sizeof record));
  record.dst_stage_mask = VK_PIPELINE_STAGE_TRANSFER_BIT;
  record.dst_access_mask = VK_ACCESS_TRANSFER_READ_BIT;
  record.reserved = 1; /* refused before anything is recorded */
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "options->reserved = 1; valid: 0", vkattn_cmd_record(cmd, cb, &record));
  record.reserved = 0;
  OK(vkattn_cmd_record(cmd, cb, &record));
  copy_then_host_barrier(cb, obuf.buffer, readback.buffer, qb);
  submit_and_wait(&app, cb, VK_NULL_HANDLE);
  memcpy(got, readback.mapped, qb);
  CHECK(close_enough(got, want, QN));

  /* A copy of the output, submitted asynchronously by vkattn into a zeroed buffer of the
   * application's, signalling a binary semaphore the application's readback of that buffer
   * waits on: read before the copy, it would be zeros. */
  buffer_t fresh = make_buffer(&app, qb, storage | VK_BUFFER_USAGE_TRANSFER_SRC_BIT, 1);
  memset(fresh.mapped, 0, qb);
  vkattn_tensor *copy = NULL, *tfresh = NULL;
  OK(vkattn_tensor_create(gpu, qs, 3, VKATTN_DTYPE_F32, &copy));
  OK(vkattn_tensor_wrap(gpu, fresh.buffer, 0, qb, qs, 3, VKATTN_DTYPE_F32, &tfresh));
  vkattn_command_list* async = NULL;
  OK(vkattn_command_list_create(gpu, NULL, &async));
  OK(vkattn_cmd_copy(async, to, copy));
  OK(vkattn_cmd_copy(async, copy, tfresh));
  VkSemaphoreCreateInfo sem_info = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, NULL, 0};
  VkSemaphore done;
  VK(vkCreateSemaphore(app.device, &sem_info, NULL, &done));
  memset(readback.mapped, 0, qb);
  vkattn_submit_semaphores sems;
  OK(vkattn_submit_semaphores_init(&sems, sizeof sems));
  sems.signal_count = 1;
  sems.signal_semaphores = &done;
  vkattn_submission* submission = NULL;
  sems.reserved = 1;
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "semaphores->reserved = 1; valid: 0",
                vkattn_submit_with_semaphores(async, &sems, &submission));
  sems.reserved = 0;
  OK(vkattn_submit_with_semaphores(async, &sems, &submission));
  cb = begin(&app);
  copy_then_host_barrier(cb, fresh.buffer, readback.buffer, qb);
  submit_and_wait(&app, cb, done);
  uint32_t finished = 0;
  OK(vkattn_submission_wait(submission, UINT64_MAX, &finished));
  CHECK(finished == 1);
  memcpy(got, readback.mapped, qb);
  CHECK(close_enough(got, want, QN));

  /* Misuse: refused with the status saying why. */
  vkattn_tensor* bad = NULL;
  CHECK(vkattn_tensor_wrap(gpu, qbuf.buffer, 4, qb - 4, qs, 3, VKATTN_DTYPE_F32, &bad) == VKATTN_ERROR_INVALID_ARGUMENT);
  CHECK(bad == NULL && strstr(vkattn_last_error_message(), "minStorageBufferOffsetAlignment") != NULL);
  CHECK(vkattn_tensor_wrap(gpu, qbuf.buffer, 0, 16, qs, 3, VKATTN_DTYPE_F32, &bad) == VKATTN_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(vkattn_last_error_message(), "size_bytes") != NULL);
  CHECK(vkattn_cmd_record(cmd, VK_NULL_HANDLE, NULL) == VKATTN_ERROR_INVALID_ARGUMENT);
  record.no_exit_barrier = 2;
  cb = begin(&app);
  CHECK(vkattn_cmd_record(cmd, cb, &record) == VKATTN_ERROR_INVALID_ARGUMENT);
  submit_and_wait(&app, cb, VK_NULL_HANDLE); /* empty: nothing was recorded */
  /* A cache in the application's buffers (K and V views of one buffer): empty, zeroed. */
  {
    vkattn_kv_cache_config cc;
    OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
    cc.dtype = VKATTN_DTYPE_F32;
    cc.n_kv_heads = KV_HEADS;
    cc.head_dim = HEAD_DIM;
    cc.capacity = 4;
    const VkDeviceSize bytes = 4 * KV_HEADS * HEAD_DIM * 4;
    buffer_t kvbuf = make_buffer(&app, 2 * bytes, storage | VK_BUFFER_USAGE_TRANSFER_DST_BIT, 1);
    memset(kvbuf.mapped, 0x55, 2 * bytes);
    const size_t cs[4] = {1, 4, KV_HEADS, HEAD_DIM};
    vkattn_tensor *ck = NULL, *cv = NULL;
    OK(vkattn_tensor_wrap(gpu, kvbuf.buffer, 0, bytes, cs, 4, VKATTN_DTYPE_F32, &ck));
    OK(vkattn_tensor_wrap(gpu, kvbuf.buffer, bytes, bytes, cs, 4, VKATTN_DTYPE_F32, &cv));
    vkattn_kv_cache* wrapped = NULL;
    OK(vkattn_kv_cache_wrap(gpu, &cc, ck, cv, &wrapped));
    vkattn_kv_cache_config given;
    OK(vkattn_kv_cache_get_config(wrapped, &given, sizeof given));
    CHECK(given.capacity == 4 && given.dtype == VKATTN_DTYPE_F32 && given.head_dim == HEAD_DIM && given.n_seqs == 1);
    int32_t next = -1;
    OK(vkattn_kv_cache_next_position(wrapped, 0, &next));
    CHECK(next == 0);
    const unsigned char* zeros = (const unsigned char*)kvbuf.mapped;
    int all_zero = 1;
    for (VkDeviceSize i = 0; i < 2 * bytes; ++i) all_zero = all_zero && zeros[i] == 0;
    CHECK(all_zero);
    vkattn_kv_cache* refused_cache = NULL;
    CHECK(vkattn_kv_cache_wrap(gpu, &cc, ck, ck, &refused_cache) == VKATTN_ERROR_INVALID_ARGUMENT);
    CHECK(refused_cache == NULL);
    CHECK(vkattn_kv_cache_wrap(gpu, &cc, ck, NULL, &refused_cache) == VKATTN_ERROR_INVALID_ARGUMENT);
    CHECK(refused_cache == NULL && strstr(vkattn_last_error_message(), "v = NULL; valid: a tensor made by vkattn_tensor_wrap"));
    /* A latent cache wraps K alone (v NULL), and refuses a V. */
    cc.latent = 1;
    CHECK(vkattn_kv_cache_wrap(gpu, &cc, ck, cv, &refused_cache) == VKATTN_ERROR_INVALID_ARGUMENT);
    CHECK(refused_cache == NULL && strstr(vkattn_last_error_message(), "a latent cache stores V inside K") != NULL);
    vkattn_kv_cache* latent = NULL;
    OK(vkattn_kv_cache_wrap(gpu, &cc, ck, NULL, &latent));
    size_t latent_bytes = 0;
    OK(vkattn_kv_cache_bytes(latent, &latent_bytes));
    CHECK(latent_bytes == bytes);
    vkattn_kv_cache_destroy(latent);
    cc.latent = 0;
    vkattn_kv_cache_destroy(wrapped);
    vkattn_tensor_destroy(ck);
    vkattn_tensor_destroy(cv);
    free_buffer(&app, &kvbuf);
  }

  vkattn_backend* refused = NULL;
  ext.api_version = VK_API_VERSION_1_0;
  CHECK(vkattn_backend_create_external(&ext, &options, &refused) == VKATTN_ERROR_UNSUPPORTED);
  CHECK(refused == NULL && strstr(vkattn_last_error_message(), "1.1") != NULL);
  ext.api_version = VK_API_VERSION_1_1;
  ext.device = VK_NULL_HANDLE;
  CHECK(vkattn_backend_create_external(&ext, &options, &refused) == VKATTN_ERROR_INVALID_ARGUMENT);
  CHECK(vkattn_backend_create_external(NULL, &options, &refused) == VKATTN_ERROR_INVALID_ARGUMENT);

  vkattn_submission_destroy(submission);
  vkattn_command_list_destroy(async);
  vkattn_command_list_destroy(cmd);
  vkattn_tensor_destroy(copy);
  vkattn_tensor_destroy(tfresh);
  vkattn_tensor_destroy(tq);
  vkattn_tensor_destroy(tk);
  vkattn_tensor_destroy(tv);
  vkattn_tensor_destroy(to);
  vkattn_kv_cache_destroy(cache);
  vkattn_backend_destroy(gpu);

  /* vkattn is gone; the application destroys what it made (the validation layer reports
   * anything vkattn left on the device, or destroyed that was not its own). */
  vkDestroySemaphore(app.device, done, NULL);
  buffer_t* all[] = {&staging, &qbuf, &kbuf, &vbuf, &obuf, &readback, &fresh};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free_buffer(&app, all[i]);
  vkDestroyCommandPool(app.device, app.pool, NULL);
  vkDestroyDevice(app.device, NULL);
  PFN_vkDestroyDebugUtilsMessengerEXT unmake =
      (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(app.instance, "vkDestroyDebugUtilsMessengerEXT");
  unmake(app.instance, app.messenger, NULL);
  vkDestroyInstance(app.instance, NULL);

  CHECK(g_messages == 0);
  if (g_failures)
    fprintf(stderr, "%d checks failed\n", g_failures);
  else
    printf("C interop API: all checks passed\n");
  return g_failures ? 1 : 0;
}
