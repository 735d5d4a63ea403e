/* The C API from C11 (built with -std=c11 -Wall -Wextra -Wpedantic -Werror): RoPE and
 * attention on the Vulkan backend against the CPU backend, and the queries;
 * test_c_api_cache.c has the caches, test_c_api_errors.c every status that C can provoke.
 * Exit status 0: passed; 1: failed; 77: no Vulkan device (skipped, unless
 * VKATTN_REQUIRE_VULKAN=1, where it fails). */
#include "c_helpers.h"

/* ---- RoPE: every layout and scaling variant, f32 and f16, Vulkan against the CPU ---- */

static void rope_config(vkattn_rope_config* c, int variant, const double* factors) {
  OK(vkattn_rope_config_init(c, sizeof *c));
  c->scaling = variant;
  c->layout = variant % 2 ? VKATTN_ROPE_LAYOUT_INTERLEAVED : VKATTN_ROPE_LAYOUT_HALF;
  c->factor = 4.0;
  c->original_context = 4096;
  if (variant == VKATTN_ROPE_SCALING_FACTORS) {
    c->freq_factors = factors;
    c->n_freq_factors = 8;
  }
}

/* q [n, 4, 16] rotated by |config| on |b|, in f32: the caller frees it. */
static float* rotated_q(vkattn_backend* b, const float* q, const int32_t* positions, size_t n, const vkattn_rope_config* config) {
  vkattn_tensor* t = filled(b, n, 4, 16, VKATTN_DTYPE_F32, q);
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(b, NULL, &list));
  OK(vkattn_cmd_rope(list, t, positions, n, config));
  OK(vkattn_submit_and_wait(list));
  float* out = download(b, t, n * 4 * 16);
  vkattn_command_list_destroy(list);
  vkattn_tensor_destroy(t);
  return out;
}

/* Both backends read the config through the same C translation, so each variant must also
 * change the result against the same layout unscaled: a field lost on the way would not. */
static void test_rope(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 5, H = 4, HK = 2, D = 16 };
  const int32_t positions[T] = {0, 1, 7, 100000, 2147483000};
  const double factors[8] = {1, 1.5, 2, 3, 4, 6, 8, 16};
  float* q = random_values(T * H * D, 1);
  float* k = random_values(T * HK * D, 2);
  for (int variant = VKATTN_ROPE_SCALING_NONE; variant <= VKATTN_ROPE_SCALING_FACTORS; ++variant) {
    vkattn_rope_config config;
    rope_config(&config, variant, factors);
    if (variant != VKATTN_ROPE_SCALING_NONE) {
      vkattn_rope_config unscaled = config;
      unscaled.scaling = VKATTN_ROPE_SCALING_NONE;
      unscaled.freq_factors = NULL;
      unscaled.n_freq_factors = 0;
      float* scaled_q = rotated_q(cpu, q, positions, T, &config);
      float* plain_q = rotated_q(cpu, q, positions, T, &unscaled);
      const double moved = max_diff(scaled_q, plain_q, T * H * D);
      if (moved < 1e-3) {
        fprintf(stderr, "rope scaling %d: max |diff| %g against the same layout unscaled: the variant was lost\n", variant,
                moved);
        ++g_failures;
      }
      free(scaled_q);
      free(plain_q);
    }
    for (vkattn_dtype dtype = VKATTN_DTYPE_F32; dtype <= VKATTN_DTYPE_F16; ++dtype) {
      float* out[2][2];
      vkattn_backend* backends[2] = {gpu, cpu};
      for (int i = 0; i < 2; ++i) {
        vkattn_tensor* tq = filled(backends[i], T, H, D, dtype, q);
        vkattn_tensor* tk = filled(backends[i], T, HK, D, dtype, k);
        vkattn_command_list* list = NULL;
        OK(vkattn_command_list_create(backends[i], NULL, &list));
        OK(vkattn_cmd_rope_qk(list, tq, tk, positions, T, &config));
        OK(vkattn_submit_and_wait(list));
        out[i][0] = download(backends[i], tq, T * H * D);
        out[i][1] = download(backends[i], tk, T * HK * D);
        vkattn_command_list_destroy(list);
        vkattn_tensor_destroy(tq);
        vkattn_tensor_destroy(tk);
      }
      const double tol = dtype == VKATTN_DTYPE_F32 ? 4e-6 : 2e-3;
      const double dq = max_diff(out[0][0], out[1][0], T * H * D), dk = max_diff(out[0][1], out[1][1], T * HK * D);
      if (dq > tol || dk > tol) {
        fprintf(stderr, "rope scaling %d dtype %d: max |diff| q %g, k %g > %g\n", variant, dtype, dq, dk, tol);
        ++g_failures;
      }
      for (int i = 0; i < 2; ++i) {
        free(out[i][0]);
        free(out[i][1]);
      }
    }
  }
  free(q);
  free(k);
}

/* RoPE on one f32 tensor [T, H, D] holding |x| on |b|: the result (freed by the caller). */
static float* roped(vkattn_backend* b, size_t T, size_t H, size_t D, const float* x, const int32_t* positions, size_t n_positions,
                    const vkattn_rope_config* config) {
  vkattn_tensor* t = filled(b, T, H, D, VKATTN_DTYPE_F32, x);
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(b, NULL, &list));
  OK(vkattn_cmd_rope(list, t, positions, n_positions, config));
  OK(vkattn_submit_and_wait(list));
  float* out = download(b, t, T * H * D);
  vkattn_command_list_destroy(list);
  vkattn_tensor_destroy(t);
  return out;
}

/* M-RoPE (0.3's fields): three positions per token, both layouts, Vulkan against the
 * CPU; each differs from plain RoPE at the temporal positions, so the fields arrive. */
static void test_mrope(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 3, H = 2, D = 16 };
  const int32_t positions[3 * T] = {5, 5, 5, 9, 10, 11, 12, 300, 7}; /* (t, h, w) per token */
  const int32_t t_positions[T] = {5, 9, 12};
  const uint32_t sections[2][3] = {{2, 3, 3}, {3, 3, 2}};
  float* x = random_values(T * H * D, 9);
  for (int layout = VKATTN_MROPE_CONTIGUOUS; layout <= VKATTN_MROPE_INTERLEAVED; ++layout) {
    vkattn_rope_config config, plain;
    OK(vkattn_rope_config_init(&config, sizeof config));
    OK(vkattn_rope_config_init(&plain, sizeof plain));
    memcpy(config.mrope_sections, sections[layout], sizeof config.mrope_sections);
    config.mrope_layout = layout;
    float* out[3] = {roped(gpu, T, H, D, x, positions, 3 * T, &config), roped(cpu, T, H, D, x, positions, 3 * T, &config),
                     roped(cpu, T, H, D, x, t_positions, T, &plain)};
    if (max_diff(out[0], out[1], T * H * D) > 4e-6 || max_diff(out[1], out[2], T * H * D) < 1e-3) {
      fprintf(stderr, "mrope layout %d: Vulkan against CPU %g, against plain RoPE %g\n", layout,
              max_diff(out[0], out[1], T * H * D), max_diff(out[1], out[2], T * H * D));
      ++g_failures;
    }
    for (int i = 0; i < 3; ++i) free(out[i]);
  }
  free(x);
}

/* A replay with M-RoPE positions apart (0.14's vkattn_command_list_set_tokens_mrope): the
 * rope op takes them, bit for bit as a list recorded with them; t given for them on a list
 * without M-RoPE is refused. */
static void test_mrope_replay(vkattn_backend* gpu) {
  enum { T = 3, H = 2, D = 16 };
  const int32_t thw[3 * T] = {5, 5, 5, 9, 10, 11, 12, 300, 7}, index[T] = {20, 21, 22}, first[3 * T] = {0};
  float* x = random_values(T * H * D, 10);
  vkattn_rope_config config;
  OK(vkattn_rope_config_init(&config, sizeof config));
  config.mrope_sections[0] = 2, config.mrope_sections[1] = 3, config.mrope_sections[2] = 3;
  float* want = roped(gpu, T, H, D, x, thw, 3 * T, &config);
  vkattn_tensor* t = filled(gpu, T, H, D, VKATTN_DTYPE_F32, x);
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(gpu, NULL, &list));
  OK(vkattn_cmd_rope(list, t, first, 3 * T, &config));
  OK(vkattn_command_list_set_tokens_mrope(list, index, T, NULL, 0, thw, 3 * T));
  OK(vkattn_submit_and_wait(list));
  float* got = download(gpu, t, T * H * D);
  CHECK(max_diff(got, want, T * H * D) == 0.0);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "mrope_positions.size() = 2",
                vkattn_command_list_set_tokens_mrope(list, index, T, NULL, 0, thw, 2));
  vkattn_command_list* plain = NULL;
  OK(vkattn_command_list_create(gpu, NULL, &plain));
  OK(vkattn_cmd_rope(plain, t, index, T, NULL));
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "no rope op with config.mrope",
                vkattn_command_list_set_tokens_mrope(plain, index, T, NULL, 0, thw, 3 * T));
  vkattn_command_list_destroy(plain);
  vkattn_command_list_destroy(list);
  vkattn_tensor_destroy(t);
  free(got), free(want), free(x);
}

/* RoPE on a slice (0.4's rotary_offset): DeepSeek's MLA key, the last 64 of 576 dims;
 * Vulkan against the CPU, the first 512 dims untouched, the slice rotated. An older
 * header's struct (0.2's size: no M-RoPE, no offset) still works with the defaults, and
 * what lies past its size is not read (here values the library would refuse). */
static void test_rope_slice(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 2, H = 1, D = 576, O = 512 };
  const int32_t positions[T] = {3, 40000};
  float* x = random_values(T * H * D, 12);
  vkattn_rope_config config, old, plain;
  OK(vkattn_rope_config_init(&config, sizeof config));
  config.rotary_dim = 64;
  config.rotary_offset = O;
  OK(vkattn_rope_config_init(&plain, sizeof plain));
  OK(vkattn_rope_config_init(&old, sizeof old));
  old.struct_size = (uint32_t)offsetof(vkattn_rope_config, mrope_sections);
  old.mrope_sections[0] = 1, old.mrope_sections[1] = 2, old.mrope_sections[2] = 3; /* not rotary_dim / 2 */
  old.rotary_offset = 3;                                                           /* odd */
  float* out[4] = {roped(gpu, T, H, D, x, positions, T, &config), roped(cpu, T, H, D, x, positions, T, &config),
                   roped(cpu, T, H, D, x, positions, T, &old), roped(cpu, T, H, D, x, positions, T, &plain)};
  double kept = 0, rotated = 0;
  for (int t = 0; t < T; ++t) {
    kept = fmax(kept, max_diff(out[1] + t * D, x + t * D, O));
    rotated = fmax(rotated, max_diff(out[1] + t * D + O, x + t * D + O, D - O));
  }
  if (max_diff(out[0], out[1], T * H * D) > 4e-6 || kept != 0 || rotated < 1e-3 || max_diff(out[2], out[1], T * H * D) < 1e-3 ||
      max_diff(out[2], out[3], T * H * D) != 0) {
    fprintf(stderr, "rope slice: Vulkan against CPU %g, dims before the slice moved %g, slice moved %g, old struct %g\n",
            max_diff(out[0], out[1], T * H * D), kept, rotated, max_diff(out[2], out[3], T * H * D));
    ++g_failures;
  }
  for (int i = 0; i < 4; ++i) free(out[i]);
  free(x);
}

/* ---- Attention with every option, fused and three-stage, against the CPU ---- */

/* out of attention on |b|: the fused op through |path|, or with path -1 the three ops. */
static float* run_attention(vkattn_backend* b, int path, const float* q, const float* k, const float* v, const float* mask,
                            const vkattn_attention_tokens* tokens, vkattn_attention_config config, size_t T, size_t H, size_t HK,
                            size_t N, size_t D) {
  const size_t mask_shape[2] = {T, N};
  vkattn_tensor *tq = filled(b, T, H, D, VKATTN_DTYPE_F32, q), *tk = filled(b, N, HK, D, VKATTN_DTYPE_F16, k);
  vkattn_tensor *tv = filled(b, N, HK, D, VKATTN_DTYPE_F16, v), *tm = NULL;
  vkattn_tensor *out = tensor(b, T, H, D, VKATTN_DTYPE_F32), *scores = tensor(b, T, H, N, VKATTN_DTYPE_F32);
  OK(vkattn_tensor_create(b, mask_shape, 2, VKATTN_DTYPE_F32, &tm));
  OK(vkattn_upload_f32(b, tm, mask, T * N));
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(b, NULL, &list));
  if (path < 0) {
    vkattn_attention_config no_sinks = config; /* sinks go to the softmax only */
    no_sinks.sinks = NULL;
    no_sinks.n_sinks = 0;
    OK(vkattn_cmd_attn_scores(list, tq, tk, scores, tokens, &no_sinks, tm));
    OK(vkattn_cmd_attn_softmax(list, scores, scores, &config));
    OK(vkattn_cmd_attn_weighted_sum(list, scores, tv, out));
  } else {
    config.path = path;
    OK(vkattn_cmd_attention(list, tq, tk, tv, out, tokens, &config, tm));
  }
  OK(vkattn_submit_and_wait(list));
  uint32_t finished = 0;
  OK(vkattn_command_list_wait(list, UINT64_MAX, &finished)); /* its run finished: at once */
  CHECK(finished == 1);
  float* got = download(b, out, T * H * D);
  vkattn_command_list_destroy(list);
  vkattn_tensor_destroy(tq), vkattn_tensor_destroy(tk), vkattn_tensor_destroy(tv), vkattn_tensor_destroy(tm);
  vkattn_tensor_destroy(out), vkattn_tensor_destroy(scores);
  return got;
}

static void test_attention(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 6, H = 4, HK = 2, N = 11, D = 32 };
  int32_t q_pos[T];
  for (int t = 0; t < T; ++t) q_pos[t] = N - T + t;
  const float sinks[H] = {0.5f, -1.0f, 0.0f, 2.0f};
  float* q = random_values(T * H * D, 3);
  float* k = random_values(N * HK * D, 4);
  float* v = random_values(N * HK * D, 5);
  float* mask = random_values(T * N, 6);

  vkattn_attention_tokens tokens;
  OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
  tokens.q_positions = q_pos; /* keys: none given, so at 0..N-1 */
  tokens.n_q_positions = T;
  vkattn_attention_config config;
  OK(vkattn_attention_config_init(&config, sizeof config));
  config.causal = 0;
  config.window = 8;
  config.softcap = 3.0;
  config.softcap_order = VKATTN_SOFTCAP_CAP_THEN_SCALE;
  config.alibi = 1;
  config.sinks = sinks;
  config.n_sinks = H;

  /* Then chunks with the query temperature, and a symmetric window (0.3's fields): each
   * must change the result (the fields reach the library) and match on both backends. */
  vkattn_attention_config chunked;
  OK(vkattn_attention_config_init(&chunked, sizeof chunked));
  chunked.chunk = 4;
  chunked.temperature_floor_scale = 2, chunked.temperature_scale = 0.5, chunked.temperature_offset = 1;
  vkattn_attention_config symmetric;
  OK(vkattn_attention_config_init(&symmetric, sizeof symmetric));
  symmetric.causal = 0, symmetric.window = 5, symmetric.window_type = VKATTN_WINDOW_SYMMETRIC;
  vkattn_attention_config plain;
  OK(vkattn_attention_config_init(&plain, sizeof plain));
  float* plain_want = run_attention(cpu, -1, q, k, v, mask, &tokens, plain, T, H, HK, N, D);
  const vkattn_attention_config configs[3] = {config, chunked, symmetric};
  for (int c = 0; c < 3; ++c) {
    float* want = run_attention(cpu, -1, q, k, v, mask, &tokens, configs[c], T, H, HK, N, D);
    if (c > 0 && max_diff(want, plain_want, T * H * D) < 1e-3) {
      fprintf(stderr, "attention config %d: no different from the default config\n", c);
      ++g_failures;
    }
    const int paths[3] = {-1, VKATTN_ATTENTION_PATH_FUSED, VKATTN_ATTENTION_PATH_THREE_STAGES};
    for (int p = 0; p < 3; ++p) {
      float* got = run_attention(gpu, paths[p], q, k, v, mask, &tokens, configs[c], T, H, HK, N, D);
      const double diff = max_diff(got, want, T * H * D);
      if (diff > 2e-4) {
        fprintf(stderr, "attention config %d path %d: max |diff| %g > 2e-4\n", c, paths[p], diff);
        ++g_failures;
      }
      free(got);
    }
    free(want);
  }
  free(plain_want);

  /* Each field alone changes the CPU's result from the config it modifies: both backends
   * share the C translation, so their agreement above cannot show a field it drops. */
  enum { FIELDS = 12 };
  const char* what[FIELDS] = {"causal", "window", "softcap",           "softcap_order",      "alibi", "alibi_slopes",
                              "sinks",  "chunk",  "temperature_scale", "temperature_offset", "scale", "window_type"};
  const float slopes[H] = {0.25f, 0.5f, 1.0f, 2.0f};
  vkattn_attention_config base[FIELDS], with[FIELDS];
  for (int i = 0; i < FIELDS; ++i) base[i] = plain;
  base[3].softcap = 1.0;
  base[9].temperature_floor_scale = 2, base[9].temperature_offset = 1, base[9].temperature_scale = 0.5;
  base[8] = base[9];
  base[11].causal = 0, base[11].window = 3;
  for (int i = 0; i < FIELDS; ++i) with[i] = base[i];
  with[0].causal = 0;
  with[1].window = 3;
  with[2].softcap = 1.0;
  with[3].softcap_order = VKATTN_SOFTCAP_CAP_THEN_SCALE;
  with[4].alibi = 1;
  with[5].alibi_slopes = slopes, with[5].n_alibi_slopes = H;
  with[6].sinks = sinks, with[6].n_sinks = H;
  with[7].chunk = 4;
  with[8].temperature_scale = 1.0;
  with[9].temperature_offset = 3;
  with[10].scale = 0.5;
  with[11].window_type = VKATTN_WINDOW_SYMMETRIC;
  for (int i = 0; i < FIELDS; ++i) {
    float* a = run_attention(cpu, VKATTN_ATTENTION_PATH_FUSED, q, k, v, mask, &tokens, base[i], T, H, HK, N, D);
    float* b = run_attention(cpu, VKATTN_ATTENTION_PATH_FUSED, q, k, v, mask, &tokens, with[i], T, H, HK, N, D);
    if (max_diff(a, b, T * H * D) < 1e-4) {
      fprintf(stderr, "attention config: %s changes nothing\n", what[i]);
      ++g_failures;
    }
    free(a), free(b);
  }
  free(q), free(k), free(v), free(mask);
}

/* ---- Raw bytes: a q8_0 tensor's blocks as ggml lays them out (34 bytes per 32 values),
 * the same from both backends, and restored on the other one exactly ---- */

static void test_raw(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 2, H = 1, D = 64 };
  float* x = random_values(T * H * D, 13);
  vkattn_backend* backends[2] = {gpu, cpu};
  uint8_t* raw[2];
  size_t bytes = 0;
  for (int i = 0; i < 2; ++i) {
    vkattn_tensor* t = filled(backends[i], T, H, D, VKATTN_DTYPE_Q8_0, x);
    OK(vkattn_tensor_bytes(t, &bytes));
    raw[i] = malloc(bytes);
    OK(vkattn_download_raw(backends[i], t, raw[i], bytes));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "size = ", vkattn_download_raw(backends[i], t, raw[i], bytes - 1));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "data = NULL", vkattn_download_raw(backends[i], t, NULL, bytes));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "bytes.size() = ", vkattn_upload_raw(backends[i], t, raw[i], bytes + 1));
    vkattn_tensor_destroy(t);
  }
  if (bytes != T * H * D / 32 * 34 || memcmp(raw[0], raw[1], bytes) != 0) {
    fprintf(stderr, "raw q8_0: %zu bytes (want %d), Vulkan's and the CPU's %s\n", bytes, T * H * D / 32 * 34,
            memcmp(raw[0], raw[1], bytes) ? "differ" : "agree");
    ++g_failures;
  }
  for (int i = 0; i < 2; ++i) { /* each backend's bytes restored on the other */
    vkattn_tensor* t = tensor(backends[1 - i], T, H, D, VKATTN_DTYPE_Q8_0);
    OK(vkattn_upload_raw(backends[1 - i], t, raw[i], bytes));
    uint8_t* back = malloc(bytes);
    OK(vkattn_download_raw(backends[1 - i], t, back, bytes));
    float* values = download(backends[1 - i], t, T * H * D);
    if (memcmp(back, raw[i], bytes) != 0 || max_diff(values, x, T * H * D) > 1.0 / 127) {
      fprintf(stderr, "raw q8_0 restored on backend %d: bytes %s, values off by %g\n", 1 - i,
              memcmp(back, raw[i], bytes) ? "differ" : "agree", max_diff(values, x, T * H * D));
      ++g_failures;
    }
    free(back), free(values);
    vkattn_tensor_destroy(t);
  }
  free(raw[0]), free(raw[1]), free(x);
}

/* ---- Timings, statistics, devices, version ---- */

static void test_queries(vkattn_backend* gpu) {
  CHECK(strcmp(vkattn_version_string(), VKATTN_VERSION_STRING) == 0);
  CHECK(vkattn_version_number() == VKATTN_VERSION_NUMBER);

  vkattn_device_list* devices = NULL;
  size_t count = 0, chosen = 0;
  OK(vkattn_list_devices(NULL, &devices));
  OK(vkattn_device_list_count(devices, &count));
  CHECK(count >= 1);
  for (size_t i = 0; i < count; ++i) {
    vkattn_device_info info;
    OK(vkattn_device_list_get(devices, i, &info, sizeof info));
    CHECK(info.struct_size == sizeof info && info.name && info.type && info.driver && info.rejected && info.matrix_note);
    /* the matrix units on, or why not (lavapipe has none) */
    CHECK(info.matrix_units == (info.matrix_note[0] == '\0') && !(info.matrix_units && info.matrix_standin));
    chosen += info.chosen;
  }
  CHECK(chosen == 1);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "index", vkattn_device_list_get(devices, count, NULL, 0));
  vkattn_device_list_destroy(devices);
  /* Older headers' structs, before the fields appended since: accepted, and filled as far
   * as they go (device options: the first header's, and 0.1 to 0.5's, which end at reserved). */
  vkattn_device_options old_options;
  OK(vkattn_device_options_init(&old_options, offsetof(vkattn_device_options, kernels)));
  CHECK(old_options.struct_size == offsetof(vkattn_device_options, kernels) && old_options.validation == -1);
  OK(vkattn_list_devices(&old_options, &devices));
  vkattn_device_list_destroy(devices);
  OK(vkattn_device_options_init(&old_options, offsetof(vkattn_device_options, matrix_units)));
  OK(vkattn_list_devices(&old_options, &devices));
  vkattn_device_info old_info;
  memset(&old_info, 0xAB, sizeof old_info);
  OK(vkattn_device_list_get(devices, 0, &old_info, offsetof(vkattn_device_info, matrix_units)));
  CHECK(old_info.struct_size == offsetof(vkattn_device_info, matrix_units) && old_info.name != NULL);
  CHECK(old_info.matrix_units == 0xABABABABu); /* past the old size: not written */
  vkattn_device_list_destroy(devices);
  /* The options' matrix units decide what each device reports: the stand-in anywhere, and
   * off with the note saying it was asked. */
  vkattn_device_options mopt;
  OK(vkattn_device_options_init(&mopt, sizeof mopt));
  for (int32_t m = VKATTN_MATRIX_UNITS_OFF; m <= VKATTN_MATRIX_UNITS_STANDIN; m += VKATTN_MATRIX_UNITS_STANDIN - 1) {
    mopt.matrix_units = m;
    OK(vkattn_list_devices(&mopt, &devices));
    OK(vkattn_device_list_count(devices, &count));
    for (size_t i = 0; i < count; ++i) {
      vkattn_device_info info;
      OK(vkattn_device_list_get(devices, i, &info, sizeof info));
      CHECK(!info.matrix_units && info.matrix_standin == (m == VKATTN_MATRIX_UNITS_STANDIN));
      CHECK(strstr(info.matrix_note, m == VKATTN_MATRIX_UNITS_OFF ? "as asked" : "stand-in") != NULL);
    }
    vkattn_device_list_destroy(devices);
  }

  const char* name = NULL;
  vkattn_backend_kind kind = -1;
  OK(vkattn_backend_device_name(gpu, &name));
  OK(vkattn_backend_get_kind(gpu, &kind));
  CHECK(name && name[0] && kind == VKATTN_BACKEND_VULKAN);

  vkattn_command_list_options options;
  OK(vkattn_command_list_options_init(&options, sizeof options));
  options.timestamps = 1;
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(gpu, &options, &list));
  vkattn_tensor* x = tensor(gpu, 2, 2, 8, VKATTN_DTYPE_F32);
  const int32_t pos[2] = {3, 4};
  OK(vkattn_cmd_rope(list, x, pos, 2, NULL));
  OK(vkattn_submit_and_wait(list));
  size_t n = 0;
  const char* op = NULL;
  double ms = -1.0;
  OK(vkattn_command_list_timing_count(list, &n));
  OK(vkattn_command_list_timing(list, 0, &op, &ms));
  CHECK(n == 1 && strcmp(op, "rope") == 0 && ms >= 0.0);
  /* Every array or index the caller sizes is checked against the size it must have. */
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "vkattn_command_list_timing: index = 1; valid: [0, count = 1)",
                vkattn_command_list_timing(list, 1, &op, &ms));
  vkattn_command_stats stats;
  OK(vkattn_command_list_stats(list, &stats, sizeof stats));
  CHECK(stats.ops == 1 && stats.submits == 1);
  vkattn_submission* submission = NULL; /* an asynchronous submit's times are not read */
  OK(vkattn_submit(list, &submission));
  uint32_t finished = 0;
  OK(vkattn_submission_wait(submission, UINT64_MAX, &finished));
  vkattn_submission_destroy(submission);
  OK(vkattn_command_list_timing_count(list, &n));
  OK(vkattn_command_list_stats(list, &stats, sizeof stats));
  CHECK(finished == 1 && n == 0 && stats.submits == 2);
  size_t rank = 0, dims[3] = {0, 0, 0}, numel = 0;
  vkattn_dtype dtype = -1;
  OK(vkattn_tensor_shape(x, &rank, dims, 3));
  OK(vkattn_tensor_numel(x, &numel));
  OK(vkattn_tensor_dtype(x, &dtype));
  CHECK(rank == 3 && dims[0] == 2 && dims[2] == 8 && numel == 32 && dtype == VKATTN_DTYPE_F32);
  float slopes[8];
  OK(vkattn_alibi_slopes(8, slopes, 8));
  CHECK(slopes[0] == 0.5f && slopes[7] == 1.0f / 256.0f);
  OK(vkattn_alibi_slopes(0, NULL, 0)); /* (NULL, 0): an empty array */
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "slopes", vkattn_alibi_slopes(8, NULL, 8));
  double theta[4], factor = 0.0;
  OK(vkattn_rope_frequencies(NULL, 8, 0, theta, 4, &factor));
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "count = 3; valid: rotary_dim / 2 = 4",
                vkattn_rope_frequencies(NULL, 8, 0, theta, 3, &factor));
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "count = 7; valid: n_heads = 8", vkattn_alibi_slopes(8, slopes, 7));
  CHECK(theta[0] == 1.0 && fabs(theta[1] - 0.1) < 1e-15 && factor == 1.0);
  vkattn_tensor_destroy(x);
  vkattn_command_list_destroy(list);
}

/* ---- The log callback (0.10) ---- */

typedef struct log_record {
  int info, other, saw_device;
  int gone, info_after; /* info messages after vkattn_backend_destroy */
} log_record;

static void record_log(void* user_data, vkattn_log_level level, const char* message) {
  log_record* r = (log_record*)user_data;
  if (level == VKATTN_LOG_INFO) {
    ++r->info;
  } else {
    ++r->other;
  }
  if (strncmp(message, "device ", 7) == 0) r->saw_device = 1;
  if (r->gone && level == VKATTN_LOG_INFO) ++r->info_after;
}

/* The messages of a backend that runs one op at |level|, its pipeline cache where it
 * cannot be written (Linux's /proc), so that closing it warns; |backend_first|: the
 * backend destroyed before the op is recorded, its list and tensor kept. */
static log_record logged(vkattn_log_level level, int backend_first) {
  vkattn_device_options options;
  OK(vkattn_device_options_init(&options, sizeof options));
  log_record r = {0, 0, 0, 0, 0};
  options.submit_timeout_ms = 600000;
  options.pipeline_cache_dir = "/proc/vkattn-test-no-cache";
  options.log = record_log;
  options.log_user_data = &r;
  options.log_level = level;
  vkattn_backend* b = NULL;
  OK(vkattn_backend_create(VKATTN_BACKEND_VULKAN, &options, &b));
  vkattn_command_list* list = NULL;
  OK(vkattn_command_list_create(b, NULL, &list));
  vkattn_tensor* x = tensor(b, 1, 1, 8, VKATTN_DTYPE_F32);
  if (backend_first) vkattn_backend_destroy(b), r.gone = 1;
  const int32_t pos = 1;
  OK(vkattn_cmd_rope(list, x, &pos, 1, NULL));
  OK(vkattn_submit_and_wait(list));
  vkattn_tensor_destroy(x);
  vkattn_command_list_destroy(list);
  if (!backend_first) vkattn_backend_destroy(b);
  return r;
}

static void test_log(void) {
  vkattn_device_options options;
  OK(vkattn_device_options_init(&options, sizeof options));
  CHECK(options.log == NULL && options.log_user_data == NULL && options.log_level == VKATTN_LOG_ENVIRONMENT);
  /* Each threshold lets through what it should, through the callback with the caller's
   * pointer: at info the device chosen too, at warning only the cache that cannot be
   * written, off nothing. */
  const log_record info = logged(VKATTN_LOG_INFO, 0), warning = logged(VKATTN_LOG_WARNING, 0);
  const log_record off = logged(VKATTN_LOG_OFF, 0);
  CHECK(info.info >= 1 && info.saw_device && info.other >= 1);
  CHECK(warning.info == 0 && warning.other >= 1);
  CHECK(off.info == 0 && off.other == 0);
  /* After vkattn_backend_destroy the callback still serves what was made from the backend
   * (vkattn.h): the op's pipeline, built then, is logged. */
  const log_record after = logged(VKATTN_LOG_INFO, 1);
  CHECK(after.info_after >= 1);
  /* 0.6 to 0.9's options end before the log: accepted, logging as before. */
  vkattn_device_options old_options;
  OK(vkattn_device_options_init(&old_options, offsetof(vkattn_device_options, log)));
  CHECK(old_options.struct_size == offsetof(vkattn_device_options, log));
  vkattn_device_list* devices = NULL;
  OK(vkattn_list_devices(&old_options, &devices));
  vkattn_device_list_destroy(devices);
}

int main(void) {
  vkattn_backend *gpu = NULL, *cpu = NULL;
  const int skip = open_backends(&gpu, &cpu);
  if (skip) return skip;

  test_queries(gpu);
  test_log();
  test_rope(gpu, cpu);
  test_mrope(gpu, cpu);
  test_mrope_replay(gpu);
  test_rope_slice(gpu, cpu);
  test_attention(gpu, cpu);
  test_raw(gpu, cpu);
  return close_backends(gpu, cpu, "C API");
}
