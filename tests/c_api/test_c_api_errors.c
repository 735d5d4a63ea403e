/* The C API's statuses and messages (built like test_c_api.c): every status C can
 * provoke, each message naming the C function, the parameter, its value and the valid
 * range. Exit status 0: passed; 1: failed; 77: no Vulkan device (skipped, unless
 * VKATTN_REQUIRE_VULKAN=1). */
#include "c_helpers.h"

static void test_errors(vkattn_backend* gpu, vkattn_backend* cpu) {
  const int E = VKATTN_ERROR_INVALID_ARGUMENT;
  vkattn_tensor *x = tensor(cpu, 2, 2, 8, VKATTN_DTYPE_F32), *out = NULL, *rank2 = NULL;
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(cpu, NULL, &list));
  const int32_t pos[2] = {1, 2}, bad_pos[2] = {1, -3};
  const size_t shape2[2] = {2, 16};

  /* NULL handles and pointers. */
  EXPECT_STATUS(E, "vkattn_cmd_rope: list = NULL", vkattn_cmd_rope(NULL, x, pos, 2, NULL));
  EXPECT_STATUS(E, "vkattn_cmd_rope: x = NULL", vkattn_cmd_rope(list, NULL, pos, 2, NULL));
  EXPECT_STATUS(E, "positions = NULL with count 2", vkattn_cmd_rope(list, x, NULL, 2, NULL));
  EXPECT_STATUS(E, "vkattn_tensor_create: backend = NULL", vkattn_tensor_create(NULL, shape2, 2, 0, &out));
  EXPECT_STATUS(E, "tensor = NULL", vkattn_tensor_create(cpu, shape2, 2, 0, NULL));
  EXPECT_STATUS(E, "backend = NULL", vkattn_backend_create(VKATTN_BACKEND_CPU, NULL, NULL));
  EXPECT_STATUS(E, "numel = NULL", vkattn_tensor_numel(x, NULL));
  EXPECT_STATUS(E, "tokens = NULL", vkattn_cmd_attention(list, x, x, x, x, NULL, NULL, NULL));
  EXPECT_STATUS(E, "cache = NULL", vkattn_kv_cache_reset(NULL, 0));
  EXPECT_STATUS(E, "config = NULL", vkattn_kv_cache_create(cpu, NULL, &(vkattn_kv_cache*){NULL}));
  EXPECT_STATUS(E, "data = NULL", vkattn_download_f32(cpu, x, NULL, 32));

  /* Bad shapes and sizes: the C++ API's own messages. */
  OK(vkattn_tensor_create(cpu, shape2, 2, VKATTN_DTYPE_F32, &rank2));
  EXPECT_STATUS(E, "vkattn: rope: x.shape = [2, 16]; valid: rank 3", vkattn_cmd_rope(list, rank2, pos, 2, NULL));
  EXPECT_STATUS(E, "positions.size() = 1", vkattn_cmd_rope(list, x, pos, 1, NULL));
  EXPECT_STATUS(E, "vkattn_upload_f32: count = 3; valid: tensor numel", vkattn_upload_f32(cpu, x, (const float[3]){0}, 3));
  out = x; /* a failed create sets its result to NULL */
  EXPECT_STATUS(E, "shape[1] = 0", vkattn_tensor_create(cpu, (const size_t[]){2, 0}, 2, 0, &out));
  CHECK(out == NULL);
  EXPECT_STATUS(E, "max_dims", vkattn_tensor_shape(x, &(size_t){0}, (size_t[2]){0}, 2));
  EXPECT_STATUS(E, "count = 3", vkattn_download_f32(cpu, x, (float[3]){0}, 3));
  vkattn_tensor_destroy(rank2);

  /* set_tokens checks every count before it reads a value: it read them first, past a
   * caller's array whose count it then refused (a -1 read there named instead). */
  vkattn_command_list* replay = NULL;
  OK(vkattn_command_list_create(cpu, NULL, &replay));
  OK(vkattn_cmd_rope(replay, x, pos, 2, NULL));
  int32_t past[6] = {0, 0, 0, 0, 0, -1};
  EXPECT_STATUS(E, "positions.size() = 6 (t, h, w per token); valid: one position per token",
                vkattn_command_list_set_tokens(replay, past, 6, NULL, 0));
  EXPECT_STATUS(E, "seq_ids = given; valid: none", vkattn_command_list_set_tokens(replay, pos, 2, past, 6));
  EXPECT_STATUS(E, "mrope_positions = given; valid: none",
                vkattn_command_list_set_tokens_mrope(replay, pos, 2, NULL, 0, past, 6));
  vkattn_command_list_destroy(replay);

  /* Bad enum values. */
  vkattn_rope_config rope;
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.layout = 9;
  EXPECT_STATUS(E, "config.layout = 9", vkattn_cmd_rope(list, x, pos, 2, &rope));
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.scaling = 42;
  EXPECT_STATUS(E, "config.scaling = 42", vkattn_cmd_rope(list, x, pos, 2, &rope));
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.mrope_layout = 1;
  EXPECT_STATUS(E, "config->mrope_layout = 1; valid: 0 unless mrope_sections", vkattn_cmd_rope(list, x, pos, 2, &rope));
  rope.mrope_sections[0] = 1;
  EXPECT_STATUS(E, "config.mrope.sections = {1, 0, 0} (sum 1)", vkattn_cmd_rope(list, x, pos, 2, &rope));
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.rotary_offset = 3;
  EXPECT_STATUS(E, "config.rotary_offset = 3", vkattn_cmd_rope(list, x, pos, 2, &rope));
  /* Even offsets whose sum with the rotary dims wraps, with rotary_dim 0 or set. */
  rope.rotary_offset = UINT64_MAX - 1;
  EXPECT_STATUS(E, "config.rotary_offset = 18446744073709551614; valid: even in [0, head_dim - 2 = 6]",
                vkattn_cmd_rope(list, x, pos, 2, &rope));
  rope.rotary_offset = UINT64_MAX - 5, rope.rotary_dim = 4;
  EXPECT_STATUS(E, "config.rotary_offset = 18446744073709551610; valid: even in [0, head_dim - 2 = 6]",
                vkattn_cmd_rope(list, x, pos, 2, &rope));
  double theta[4], factor = 0;
  EXPECT_STATUS(E, "config.rotary_offset = 18446744073709551610; valid: even in [0, head_dim - 2 = 6]",
                vkattn_rope_frequencies(&rope, 8, 0, theta, 2, &factor));
  EXPECT_STATUS(E, "rope_frequencies: head_dim = 1; valid: >= 2", vkattn_rope_frequencies(NULL, 1, 0, theta, 0, &factor));
  EXPECT_STATUS(E, "dtype = 7", vkattn_tensor_create(cpu, shape2, 2, 7, &out));
  EXPECT_STATUS(E, "vkattn_backend_create: kind = 5; valid: VKATTN_BACKEND_CPU (0) or VKATTN_BACKEND_VULKAN (1)",
                vkattn_backend_create(5, NULL, &(vkattn_backend*){NULL}));
  vkattn_attention_config ac;
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.path = 3;
  vkattn_attention_tokens tok;
  OK(vkattn_attention_tokens_init(&tok, sizeof tok));
  tok.q_positions = pos, tok.n_q_positions = 2;
  vkattn_tensor *k = tensor(cpu, 3, 1, 8, VKATTN_DTYPE_F32), *o = tensor(cpu, 2, 2, 8, VKATTN_DTYPE_F32);
  EXPECT_STATUS(E, "config.path = 3", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  /* Counts that do not match their arrays are refused before the arrays are read (pos
   * holds 2; 4 would read past it), and counts no array can have before anything. */
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  tok.k_positions = pos, tok.n_k_positions = 4;
  EXPECT_STATUS(E, "tokens.k_positions.size() = 4; valid: 3, one per key",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  tok.n_k_positions = (uint64_t)1 << 62; /* wrapped to an empty array, and accepted, before */
  EXPECT_STATUS(E, "tokens->k_positions's count = 4611686018427387904; valid: [0, 2305843009213693951]",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  tok.k_positions = NULL, tok.n_k_positions = 0;
  tok.n_q_positions = 3;
  EXPECT_STATUS(E, "tokens.q_positions.size() = 3; valid: 2, one per query token",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  tok.n_q_positions = 2;
  /* So are a config's arrays, against the op's heads (x: 2) and rotary pairs (head_dim 8:
   * 4): a count of 2^28 read a GiB past the array, and crashed, before. */
  const float two[2] = {0.5f, 0.5f};
  const double four[4] = {1.0, 1.0, 1.0, 1.0};
  vkattn_tensor* scores = tensor(cpu, 2, 2, 3, VKATTN_DTYPE_F32);
  ac.sinks = two, ac.n_sinks = 3;
  EXPECT_STATUS(E, "vkattn_cmd_attention: q = NULL", vkattn_cmd_attention(list, NULL, k, k, o, &tok, &ac, NULL));
  EXPECT_STATUS(E, "vkattn_cmd_attention: config->n_sinks = 3; valid: 0 or n_heads = 2",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.n_sinks = (uint64_t)1 << 28;
  EXPECT_STATUS(E, "config->n_sinks = 268435456; valid: 0 or n_heads = 2", vkattn_cmd_attn_softmax(list, scores, scores, &ac));
  ac.sinks = NULL, ac.n_sinks = 0, ac.alibi_slopes = two, ac.n_alibi_slopes = (uint64_t)1 << 28;
  EXPECT_STATUS(E, "config->n_alibi_slopes = 268435456; valid: 0 or n_heads = 2",
                vkattn_cmd_attn_scores(list, x, k, scores, &tok, &ac, NULL));
  vkattn_tensor_destroy(scores);
  OK(vkattn_rope_config_init(&rope, sizeof rope));
  rope.scaling = VKATTN_ROPE_SCALING_FACTORS, rope.freq_factors = four, rope.n_freq_factors = 5;
  EXPECT_STATUS(E, "config->n_freq_factors = 5; valid: 0 or rotary_dim / 2 = 4", vkattn_cmd_rope(list, x, pos, 2, &rope));
  rope.n_freq_factors = (uint64_t)1 << 28, rope.rotary_dim = 4; /* 2 pairs */
  EXPECT_STATUS(E, "config->n_freq_factors = 268435456; valid: 0 or rotary_dim / 2 = 2",
                vkattn_rope_frequencies(&rope, 8, 0, theta, 2, &factor));
  rope.n_freq_factors = 2;
  OK(vkattn_rope_frequencies(&rope, 8, 0, theta, 2, &factor));
  /* A count wrong only because the dims are: the dims are named, not the count. */
  rope.rotary_dim = 0, rope.rotary_offset = 10;
  EXPECT_STATUS(E, "vkattn_cmd_rope: config.rotary_offset = 10; valid: even in [0, head_dim - 2 = 6]",
                vkattn_cmd_rope(list, x, pos, 2, &rope));
  rope.rotary_dim = 4, rope.rotary_offset = 0;
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.softcap = 1.0, ac.softcap_order = 2;
  EXPECT_STATUS(E, "config.softcap_order = 2", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.causal = 2;
  EXPECT_STATUS(E, "config->causal = 2", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.temperature_scale = 0.1;
  EXPECT_STATUS(E, "config->temperature_floor_scale = 0; valid: >= 1 when temperature_scale",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.temperature_floor_scale = 8192, ac.temperature_scale = 1.0 / 0.0;
  EXPECT_STATUS(E, "config->temperature_scale = inf; valid: finite", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.temperature_scale = 0.0; /* the _init default: a temperature that changes nothing */
  EXPECT_STATUS(E, "config->temperature_scale = 0.000000; valid: finite and nonzero",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.window = 4, ac.window_type = 2;
  EXPECT_STATUS(E, "config.window_type = 2", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.window_type = VKATTN_WINDOW_SYMMETRIC; /* causal stays 1, the default */
  EXPECT_STATUS(E, "config.causal = true with config.window_type = WindowType::symmetric; valid: false",
                vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.causal = 0; /* as bidirectional encoders with a window have it */
  OK(vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  OK(vkattn_attention_config_init(&ac, sizeof ac));
  ac.precision = 2;
  EXPECT_STATUS(E, "config.precision = 2; valid: f32 or f16_products", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.precision = VKATTN_ATTENTION_PRECISION_F32, ac.mask_keys = 4; /* 0.6's reserved */
  EXPECT_STATUS(E, "config.mask_keys = 4; valid: 0 without a mask", vkattn_cmd_attention(list, x, k, k, o, &tok, &ac, NULL));
  ac.mask_keys = 0;
  vkattn_kv_cache_config cc;
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  vkattn_kv_cache* cache = NULL;
  EXPECT_STATUS(E, "config.n_kv_heads = 0; valid: >= 1; required", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.n_kv_heads = 1, cc.head_dim = 8, cc.capacity = 4, cc.rope = 4;
  EXPECT_STATUS(E, "config.rope = 4", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.rope = VKATTN_KV_ROPE_STORED, cc.dtype = VKATTN_DTYPE_I32;
  EXPECT_STATUS(E, "config.dtype = i32", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.dtype = VKATTN_DTYPE_F32, cc.v_head_dim = 600;
  EXPECT_STATUS(E, "config.v_head_dim = 600; valid: [1, 576]", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.v_head_dim = 0, cc.rope = VKATTN_KV_ROPE_ON_READ, cc.rope_config = &rope; /* 2 factors, 4 counted */
  rope.n_freq_factors = 4;
  EXPECT_STATUS(E, "config->rope_config->n_freq_factors = 4; valid: 0 or rotary_dim / 2 = 2",
                vkattn_kv_cache_create(cpu, &cc, &cache));
  rope.rotary_dim = 12; /* 6 pairs in rows of 8 */
  EXPECT_STATUS(E,
                "vkattn_kv_cache_create: config.rope_config.rotary_dim = 12; valid: 0 (= head_dim) or even in [2, head_dim = 8]",
                vkattn_kv_cache_create(cpu, &cc, &cache));
  rope.rotary_dim = 4;
  cc.rope = VKATTN_KV_ROPE_STORED, cc.rope_config = NULL;
  cc.n_kv_heads = (uint64_t)1 << 40; /* named, not the cache's tensor of that shape */
  EXPECT_STATUS(E, "config.n_kv_heads = 1099511627776; valid: [1, 2^40 / (n_seqs x capacity x head_dim) = 34359738368]",
                vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.n_kv_heads = 1, cc.v_head_dim = 4; /* V rows of 4 under K rows of 8: 2 x (8 + 4) x 4 slots x 4 bytes */
  OK(vkattn_kv_cache_create(cpu, &cc, &cache));
  size_t bytes = 0;
  OK(vkattn_kv_cache_bytes(cache, &bytes));
  CHECK(bytes == 4 * (8 + 4) * 4);
  vkattn_kv_cache_destroy(cache);
  /* A latent cache: V is inside K (v_head_dim <= head_dim), and appends take K alone. */
  cc.latent = 2;
  EXPECT_STATUS(E, "config->latent = 2; valid: 0 or 1", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.latent = 1, cc.v_head_dim = 16;
  EXPECT_STATUS(E, "config.v_head_dim = 16; valid: [1, head_dim = 8] for a latent cache",
                vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.v_head_dim = 4, cc.reserved2 = 1;
  EXPECT_STATUS(E, "config->reserved2 = 1", vkattn_kv_cache_create(cpu, &cc, &cache));
  cc.reserved2 = 0;
  OK(vkattn_kv_cache_create(cpu, &cc, &cache));
  OK(vkattn_kv_cache_bytes(cache, &bytes));
  CHECK(bytes == 4 * 8 * 4); /* K alone */
  EXPECT_STATUS(E, "v = a tensor; valid: none: a latent cache stores V inside K: call kv_append(cache, k, positions)",
                vkattn_cmd_kv_append(list, cache, k, k, (const int32_t[]){0, 1, 2}, 3, NULL, 0, 0));
  vkattn_kv_cache_destroy(cache); /* test_c_api.c appends K alone (v NULL) to one */
  cc.latent = 0, cc.v_head_dim = 0;
  OK(vkattn_kv_cache_create(cpu, &cc, &cache));
  EXPECT_STATUS(E, "v = none (K alone); valid: a tensor",
                vkattn_cmd_kv_append(list, cache, k, NULL, (const int32_t[]){0}, 1, NULL, 0, 0));
  EXPECT_STATUS(E, "flags = 2", vkattn_cmd_kv_append(list, cache, k, k, (const int32_t[]){0, 1, 2}, 3, NULL, 0, 2));

  /* Out-of-range positions and sequences. */
  EXPECT_STATUS(E, "positions[1] = -3; valid: [0, 2^31 - 1]", vkattn_cmd_rope(list, x, bad_pos, 2, NULL));
  EXPECT_STATUS(E, "positions[0] = 5", vkattn_cmd_kv_append(list, cache, k, k, (const int32_t[]){5, 6, 7}, 3, NULL, 0, 0));
  EXPECT_STATUS(E, "positions.size() = 4; valid: 3", vkattn_cmd_kv_append(list, cache, k, k, pos, 4, NULL, 0, 0));
  OK(vkattn_cmd_kv_append(list, cache, k, k, (const int32_t[]){0, 1, 2}, 3, NULL, 0, 0));
  OK(vkattn_cmd_kv_append(list, cache, k, k, (const int32_t[]){3, 4, 5}, 3, NULL, 0, 0));
  EXPECT_STATUS(E, "truncate: position = 9", vkattn_kv_cache_truncate(cache, 0, 9));
  EXPECT_STATUS(E, "reset: seq = 1", vkattn_kv_cache_reset(cache, 1));
  tok.q_positions = (const int32_t[]){1, 5};
  EXPECT_STATUS(E, "tokens.q_positions[0] = 1", vkattn_cmd_attention_cache(list, x, cache, o, &tok, NULL, NULL));
  tok.k_positions = pos, tok.n_k_positions = 2;
  EXPECT_STATUS(E, "k_positions / k_seq_ids = given", vkattn_cmd_attention_cache(list, x, cache, o, &tok, NULL, NULL));

  /* Struct sizes: uninitialised, too small, and a newer header's fields set. */
  struct {
    vkattn_attention_config config;
    uint64_t newer_field;
  } newer;
  OK(vkattn_attention_config_init(&newer.config, sizeof newer));
  CHECK(newer.config.struct_size == sizeof newer && newer.newer_field == 0);
  OK(vkattn_cmd_attn_softmax(list, o, o, &newer.config)); /* unknown fields zero: accepted */
  newer.newer_field = 1;
  EXPECT_STATUS(E, "does not know the fields there", vkattn_cmd_attn_softmax(list, o, o, &newer.config));
  ac.struct_size = 0;
  EXPECT_STATUS(E, "config->struct_size = 0", vkattn_cmd_attn_softmax(list, o, o, &ac));
  EXPECT_STATUS(E, "size = 4", vkattn_attention_config_init(&ac, 4));
  /* A garbage size (a struct never _init-ed) is refused, not read or zeroed that far. */
  ac.struct_size = 1u << 30;
  EXPECT_STATUS(E, "config->struct_size = 1073741824", vkattn_cmd_attn_softmax(list, o, o, &ac));
  EXPECT_STATUS(E, "size = 4097; valid: [", vkattn_attention_config_init(&ac, 4097));
  OK(vkattn_attention_config_init(&ac, sizeof ac));

  /* Nothing was recorded by the failed calls; the list still runs. */
  vkattn_command_stats stats;
  OK(vkattn_command_list_stats(list, &stats, sizeof stats));
  CHECK(stats.ops == 4); /* a symmetric window's attention, two appends and the softmax */
  size_t runs = 0;
  OK(vkattn_command_list_attention_count(list, &runs));
  CHECK(runs == 1); /* the attention op; the softmax is a stage of its own */
  vkattn_attention_run run;
  EXPECT_STATUS(E, "run size = 4", vkattn_command_list_attention_run(list, 0, &run, 4));
  EXPECT_STATUS(E, "run", vkattn_command_list_attention_run(list, 0, NULL, sizeof run));
  EXPECT_STATUS(E, "count", vkattn_command_list_attention_count(list, NULL));
  OK(vkattn_submit_and_wait(list));
  CHECK(strcmp(vkattn_last_error_message(), "") == 0); /* cleared by every call */
  uint32_t finished = 7;
  EXPECT_STATUS(E, "finished = NULL", vkattn_command_list_wait(list, 0, NULL));
  vkattn_free(NULL); /* a cleanup path keeps the message (it was cleared before 0.13.2) */
  vkattn_tensor_destroy(NULL);
  CHECK(strstr(vkattn_last_error_message(), "finished = NULL") != NULL);
  EXPECT_STATUS(E, "list = NULL", vkattn_command_list_wait(NULL, 0, &finished));
  CHECK(finished == 7);
  OK(vkattn_command_list_wait(list, 0, &finished)); /* the CPU backend's: nothing runs */
  CHECK(finished == 1);

  /* Device errors: no such device; a cache beyond the device's buffer range. */
  vkattn_device_options dopt;
  OK(vkattn_device_options_init(&dopt, sizeof dopt));
  dopt.device = "no-such-gpu-anywhere";
  vkattn_backend* none = NULL;
  EXPECT_STATUS(VKATTN_ERROR_NO_DEVICE, "no-such-gpu-anywhere", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  CHECK(none == NULL);
  dopt.device = NULL, dopt.validation = 3;
  EXPECT_STATUS(E, "options->validation = 3", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  /* The matrix units: -1 (the environment) by default; a value past the four is refused by
   * name, before any device is made or listed. */
  OK(vkattn_device_options_init(&dopt, sizeof dopt));
  CHECK(dopt.matrix_units == VKATTN_MATRIX_UNITS_ENVIRONMENT && dopt.reserved2 == 0);
  dopt.matrix_units = 4;
  EXPECT_STATUS(E, "options->matrix_units = 4", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  vkattn_device_list* no_list = NULL;
  dopt.matrix_units = -2;
  EXPECT_STATUS(E, "options->matrix_units = -2", vkattn_list_devices(&dopt, &no_list));
  CHECK(none == NULL && no_list == NULL);
  dopt.matrix_units = VKATTN_MATRIX_UNITS_OFF, dopt.reserved2 = 1;
  EXPECT_STATUS(E, "options->reserved2 = 1", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  /* The log (0.10): a level past info or below the environment's -1, user data without a
   * function (a callback forgotten), and reserved3 are refused by name. */
  OK(vkattn_device_options_init(&dopt, sizeof dopt));
  dopt.log_level = VKATTN_LOG_INFO + 1;
  EXPECT_STATUS(E, "options->log_level = 4", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  dopt.log_level = -2;
  EXPECT_STATUS(E, "options->log_level = -2", vkattn_list_devices(&dopt, &no_list));
  dopt.log_level = VKATTN_LOG_OFF, dopt.log_user_data = &dopt;
  EXPECT_STATUS(E, "options->log_user_data", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  dopt.log_user_data = NULL, dopt.reserved3 = 1;
  EXPECT_STATUS(E, "options->reserved3 = 1", vkattn_backend_create(VKATTN_BACKEND_VULKAN, &dopt, &none));
  CHECK(none == NULL && no_list == NULL);
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  cc.n_kv_heads = 64, cc.head_dim = 256, cc.capacity = 1u << 20;
  vkattn_kv_cache* huge = NULL;
  EXPECT_STATUS(VKATTN_ERROR_OUT_OF_DEVICE_MEMORY, "maxStorageBufferRange", vkattn_kv_cache_create(gpu, &cc, &huge));
  CHECK(huge == NULL);

  /* Status names; destroying NULL does nothing. */
  CHECK(strcmp(vkattn_status_string(VKATTN_ERROR_DEVICE_LOST), "ERROR_DEVICE_LOST") == 0);
  CHECK(strcmp(vkattn_status_string(VKATTN_ERROR_TIMEOUT), "ERROR_TIMEOUT") == 0);
  CHECK(strcmp(vkattn_status_string(1000), "unknown status") == 0);
  vkattn_backend_destroy(NULL), vkattn_tensor_destroy(NULL), vkattn_command_list_destroy(NULL);
  vkattn_kv_cache_destroy(NULL), vkattn_device_list_destroy(NULL);

  vkattn_kv_cache_destroy(cache);
  vkattn_tensor_destroy(x), vkattn_tensor_destroy(k), vkattn_tensor_destroy(o);
  vkattn_command_list_destroy(list);
}

int main(void) {
  vkattn_backend *gpu = NULL, *cpu = NULL;
  const int skip = open_backends(&gpu, &cpu);
  if (skip) return skip;
  test_errors(gpu, cpu);
  return close_backends(gpu, cpu, "C API errors");
}
