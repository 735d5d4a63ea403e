/* The C API's queries of vkattn_inspect.h added in 0.12 (built like test_c_api.c): the
 * last error's parts, a cache's configuration given back, the spec minimum limits, the
 * devices' cooperative-matrix shapes and the dtypes' names; and a backend's limits
 * (vkattn.h, 0.10). Exit status 0: passed; 1: failed; 77: no Vulkan device (skipped,
 * unless VKATTN_REQUIRE_VULKAN=1). */
#include "c_helpers.h"

static int same(const char* a, const char* b) { return a && b && strcmp(a, b) == 0; }

static void test_error_details(vkattn_backend* gpu, vkattn_backend* cpu) {
  vkattn_error_details d;
  memset(&d, 0x55, sizeof d);
  OK(vkattn_last_error_details(&d, sizeof d)); /* after a success: empty */
  CHECK(d.struct_size == sizeof d && d.vk_result == 0);
  CHECK(same(d.op, "") && same(d.call, "") && same(d.param, "") && same(d.message, ""));

  /* An invalid argument: its parts put back together are the whole message. */
  vkattn_tensor* x = tensor(cpu, 2, 2, 8, VKATTN_DTYPE_F32);
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(cpu, NULL, &list));
  const int32_t bad_pos[2] = {1, -3};
  CHECK(vkattn_cmd_rope(list, x, bad_pos, 2, NULL) == VKATTN_ERROR_INVALID_ARGUMENT);
  OK(vkattn_last_error_details(&d, sizeof d));
  CHECK(same(d.op, "rope") && same(d.param, "positions[1]") && same(d.call, "") && d.vk_result == 0);
  CHECK(same(d.message, "positions[1] = -3; valid: [0, 2^31 - 1]"));
  CHECK(same(vkattn_last_error_message(), "vkattn: rope: positions[1] = -3; valid: [0, 2^31 - 1]"));
  /* A C check names the C function as its op. */
  CHECK(vkattn_tensor_numel(x, NULL) == VKATTN_ERROR_INVALID_ARGUMENT);
  OK(vkattn_last_error_details(&d, sizeof d));
  CHECK(same(d.op, "vkattn_tensor_numel") && same(d.param, "numel"));

  /* Its own refusals keep the last error: the parts above are still there. */
  CHECK(vkattn_last_error_details(NULL, sizeof d) == VKATTN_ERROR_INVALID_ARGUMENT);
  CHECK(vkattn_last_error_details(&d, 2) == VKATTN_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(vkattn_last_error_message(), "vkattn_tensor_numel: numel = NULL") != NULL);
  /* A newer header's longer struct gets zeros past ours; one shorter than the first
   * release is refused, the error kept. */
  union {
    vkattn_error_details details;
    unsigned char bytes[sizeof(vkattn_error_details) + 16];
  } bigger;
  memset(&bigger, 0x55, sizeof bigger);
  OK(vkattn_last_error_details(&bigger.details, sizeof bigger));
  CHECK(bigger.bytes[sizeof d] == 0 && bigger.bytes[sizeof bigger - 1] == 0);
  CHECK(bigger.details.struct_size == sizeof bigger && same(bigger.details.op, "vkattn_tensor_numel"));
  CHECK(vkattn_last_error_details(&d, offsetof(vkattn_error_details, message)) == VKATTN_ERROR_INVALID_ARGUMENT);
  OK(vkattn_last_error_details(&d, sizeof d));
  CHECK(same(d.op, "vkattn_tensor_numel") && same(d.param, "numel"));

  /* A device error: a tensor past what a storage buffer can hold. */
  const size_t huge[3] = {(size_t)1 << 20, 64, 64}; /* 1 GiB of f32 */
  vkattn_tensor* t = NULL;
  const vkattn_status s = vkattn_tensor_create(gpu, huge, 3, VKATTN_DTYPE_F32, &t);
  CHECK(s == VKATTN_ERROR_OUT_OF_DEVICE_MEMORY);
  OK(vkattn_last_error_details(&d, sizeof d));
  CHECK(d.op[0] != '\0' && d.message[0] != '\0' && same(d.param, ""));
  CHECK(strstr(vkattn_last_error_message(), d.message) != NULL && strstr(vkattn_last_error_message(), d.op) != NULL);
  vkattn_tensor_destroy(t);

  /* Success clears the parts, as it clears the message. */
  size_t n = 0;
  OK(vkattn_tensor_numel(x, &n));
  OK(vkattn_last_error_details(&d, sizeof d));
  CHECK(same(d.op, "") && same(d.message, ""));
  vkattn_tensor_destroy(x);
  vkattn_command_list_destroy(list);
}

/* A configuration given back equals the one given, and makes an equal cache. */
static void test_cache_config(vkattn_backend* b) {
  vkattn_rope_config rope;
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.scaling = VKATTN_ROPE_SCALING_FACTORS;
  rope.base = 500000.0;
  rope.rotary_dim = 8; /* partial: 4 factors */
  const double factors[4] = {1.0, 2.0, 4.0, 8.0};
  rope.freq_factors = factors;
  rope.n_freq_factors = 4;
  vkattn_kv_cache_config c;
  OK(vkattn_kv_cache_config_init(&c, sizeof c));
  c.dtype = VKATTN_DTYPE_Q8_0;
  c.n_seqs = 2;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.capacity = 64;
  c.n_sinks = 4;
  c.rope = VKATTN_KV_ROPE_ON_READ;
  c.rope_config = &rope;
  vkattn_kv_cache* cache = NULL;
  OK(vkattn_kv_cache_create(b, &c, &cache));

  vkattn_kv_cache_config got;
  memset(&got, 0x55, sizeof got);
  OK(vkattn_kv_cache_get_config(cache, &got, sizeof got));
  CHECK(got.struct_size == sizeof got && got.dtype == VKATTN_DTYPE_Q8_0 && got.n_seqs == 2 && got.n_kv_heads == 2);
  CHECK(got.head_dim == 32 && got.capacity == 64 && got.n_sinks == 4 && got.rope == VKATTN_KV_ROPE_ON_READ);
  CHECK(got.v_head_dim == 0 && got.latent == 0 && got.paged == 0 && got.block_size == 16 && got.n_blocks == 0);
  CHECK(got.reserved == 0 && got.reserved2 == 0);
  CHECK(got.rope_config != NULL && got.rope_config != &rope);
  if (got.rope_config) {
    const vkattn_rope_config* r = got.rope_config;
    CHECK(r->scaling == VKATTN_ROPE_SCALING_FACTORS && r->base == 500000.0 && r->layout == rope.layout && r->rotary_dim == 8);
    CHECK(r->n_freq_factors == 4 && r->freq_factors && r->freq_factors != factors && r->freq_factors[3] == 8.0);
    CHECK(r->yarn_beta_fast == rope.yarn_beta_fast && r->yarn_truncate == 1 && r->attention_factor == 0.0);
  }
  /* Round trip: a cache of the returned configuration has the same bytes. */
  vkattn_kv_cache* twin = NULL;
  OK(vkattn_kv_cache_create(b, &got, &twin));
  size_t bytes = 0, twin_bytes = 1;
  OK(vkattn_kv_cache_bytes(cache, &bytes));
  OK(vkattn_kv_cache_bytes(twin, &twin_bytes));
  CHECK(bytes == twin_bytes);
  vkattn_kv_cache_destroy(twin);
  CHECK(vkattn_kv_cache_get_config(NULL, &got, sizeof got) == VKATTN_ERROR_INVALID_ARGUMENT);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "config size = 3", vkattn_kv_cache_get_config(cache, &got, 3));
  vkattn_kv_cache_destroy(cache);

  /* A paged latent cache, the defaults of a stored rotation. */
  OK(vkattn_kv_cache_config_init(&c, sizeof c));
  c.n_seqs = 3;
  c.n_kv_heads = 1;
  c.head_dim = 576;
  c.v_head_dim = 512;
  c.latent = 1;
  c.capacity = 256;
  c.paged = 1;
  c.block_size = 64;
  c.n_blocks = 8;
  OK(vkattn_kv_cache_create(b, &c, &cache));
  OK(vkattn_kv_cache_get_config(cache, &got, sizeof got));
  CHECK(got.dtype == VKATTN_DTYPE_F16 && got.head_dim == 576 && got.v_head_dim == 512 && got.latent == 1);
  CHECK(got.paged == 1 && got.block_size == 64 && got.n_blocks == 8 && got.rope == VKATTN_KV_ROPE_STORED);
  CHECK(got.rope_config && got.rope_config->freq_factors == NULL && got.rope_config->n_freq_factors == 0);
  CHECK(got.rope_config && got.rope_config->base == 10000.0);
  vkattn_kv_cache_destroy(cache);
}

static void test_limits_and_names(void) {
  vkattn_device_limits l;
  OK(vkattn_spec_minimum_limits(&l, sizeof l));
  CHECK(l.struct_size == sizeof l && l.max_shared_memory == 16384 && l.max_workgroup_invocations == 128);
  CHECK(l.max_storage_buffer_range == (uint64_t)1 << 27 && l.subgroup_size_control == 0 && l.matrix_units == 0);
  CHECK(vkattn_spec_minimum_limits(NULL, sizeof l) == VKATTN_ERROR_INVALID_ARGUMENT);

  CHECK(same(vkattn_dtype_name(VKATTN_DTYPE_F32), "f32") && same(vkattn_dtype_name(VKATTN_DTYPE_F16), "f16"));
  CHECK(same(vkattn_dtype_name(VKATTN_DTYPE_I32), "i32") && same(vkattn_dtype_name(VKATTN_DTYPE_Q8_0), "q8_0"));
  CHECK(same(vkattn_dtype_name(VKATTN_DTYPE_Q4_0), "q4_0") && same(vkattn_dtype_name(5), "unknown"));
  CHECK(same(vkattn_dtype_name(-1), "unknown"));

  /* Every device's shapes, each readable; lavapipe lists none. */
  vkattn_device_list* list = NULL;
  OK(vkattn_list_devices(NULL, &list));
  size_t n = 0;
  OK(vkattn_device_list_count(list, &n));
  for (size_t i = 0; i < n; ++i) {
    size_t shapes = 99;
    OK(vkattn_device_list_matrix_shape_count(list, i, &shapes));
    for (size_t j = 0; j < shapes; ++j) {
      vkattn_matrix_shape s;
      OK(vkattn_device_list_matrix_shape(list, i, j, &s, sizeof s));
      CHECK(s.m > 0 && s.n > 0 && s.k > 0 && s.a[0] && s.b[0] && s.c[0] && s.result[0] && s.scope[0] && s.saturating <= 1);
    }
    vkattn_matrix_shape s;
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "shape_index", vkattn_device_list_matrix_shape(list, i, shapes, &s, sizeof s));
  }
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "vkattn_device_list_matrix_shape_count: index",
                vkattn_device_list_matrix_shape_count(list, n, &(size_t){0}));
  vkattn_device_list_destroy(list);
}

/* A backend's limits (0.10). */
static void test_limits(vkattn_backend* gpu, vkattn_backend* cpu) {
  /* The CPU backend's are the spec minimums, with its memory and host timings: each field
   * its own value, so a field filled from another shows. */
  vkattn_device_limits l;
  memset(&l, 0xAB, sizeof l);
  OK(vkattn_backend_limits(cpu, &l, sizeof l));
  CHECK(l.struct_size == sizeof l && l.subgroup_size == 0 && l.subgroup_min_size == 0 && l.subgroup_max_size == 0);
  CHECK(!l.subgroup_arithmetic && !l.subgroup_shuffle && !l.subgroup_vote && !l.subgroup_size_control);
  CHECK(l.max_shared_memory == 16384 && l.max_workgroup_invocations == 128);
  CHECK(l.max_workgroup_size[0] == 128 && l.max_workgroup_size[1] == 128 && l.max_workgroup_size[2] == 64);
  CHECK(l.max_workgroup_count[0] == 65535 && l.max_workgroup_count[1] == 65535 && l.max_workgroup_count[2] == 65535);
  CHECK(l.max_storage_buffers == 4 && l.compute_units == 0 && l.max_storage_buffer_range == 134217728u);
  CHECK(l.storage_offset_alignment == 256 && l.max_texel_buffer_elements == 65536 && l.device_local_bytes > (1u << 20));
  CHECK(!l.storage_16bit && !l.shader_float16 && l.timestamps == 1 && !l.unified_memory && l.timestamp_period_ns == 0.0);
  CHECK(!l.matrix_units && !l.matrix_standin);

  /* The Vulkan backend's: the chosen device's, where no cap lowers them. */
  OK(vkattn_backend_limits(gpu, &l, sizeof l));
  CHECK(l.max_shared_memory >= 16384 && l.max_workgroup_invocations >= 128 && l.max_storage_buffer_range >= 134217728u);
  CHECK(l.subgroup_min_size <= l.subgroup_size && l.subgroup_size <= l.subgroup_max_size && l.timestamp_period_ns >= 0.0);
  const char* cap = getenv("VKATTN_CAP_LIMITS");
  if (!cap || !cap[0]) {
    vkattn_device_list* devices = NULL;
    size_t count = 0;
    OK(vkattn_list_devices(NULL, &devices));
    OK(vkattn_device_list_count(devices, &count));
    for (size_t i = 0; i < count; ++i) {
      vkattn_device_info d;
      OK(vkattn_device_list_get(devices, i, &d, sizeof d));
      if (!d.chosen) continue;
      CHECK(l.subgroup_size == d.subgroup_size && l.max_storage_buffer_range == d.max_storage_buffer_range);
      CHECK(l.device_local_bytes == d.device_local_bytes && l.max_shared_memory == d.max_shared_memory);
      CHECK(l.unified_memory == d.unified_memory && l.shader_float16 == d.shader_float16 && l.timestamps == d.timestamps);
      CHECK(l.matrix_units == d.matrix_units && l.matrix_standin == d.matrix_standin);
    }
    vkattn_device_list_destroy(devices);
  }
  /* A larger struct (a newer header's) gets zeros past ours; a smaller one is refused. */
  unsigned char bigger[sizeof l + 16];
  memset(bigger, 0xAB, sizeof bigger);
  OK(vkattn_backend_limits(cpu, (vkattn_device_limits*)(void*)bigger, sizeof bigger));
  CHECK(bigger[sizeof l] == 0 && bigger[sizeof bigger - 1] == 0);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "limits size = 8", vkattn_backend_limits(cpu, &l, 8));
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "backend", vkattn_backend_limits(NULL, &l, sizeof l));
}

int main(void) {
  vkattn_backend *gpu = NULL, *cpu = NULL;
  const int skip = open_backends(&gpu, &cpu);
  if (skip) return skip;
  test_error_details(gpu, cpu);
  test_limits(gpu, cpu);
  test_cache_config(cpu);
  test_cache_config(gpu);
  test_limits_and_names();
  return close_backends(gpu, cpu, "C API queries");
}
