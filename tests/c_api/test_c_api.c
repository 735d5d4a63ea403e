/* The C API from C11 (built with -std=c11 -Wall -Wextra -Wpedantic -Werror): RoPE, fused
 * attention and a KV-cache decode loop on the Vulkan backend against the CPU backend;
 * test_c_api_errors.c has every status that C can provoke. Exit status 0: passed; 1:
 * failed; 77: no Vulkan device (skipped, unless VKATTN_REQUIRE_VULKAN=1, where it fails). */
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

static void test_rope(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 5, H = 4, HK = 2, D = 16 };
  const int32_t positions[T] = {0, 1, 7, 100000, 2147483000};
  const double factors[8] = {1, 1.5, 2, 3, 4, 6, 8, 16};
  float* q = random_values(T * H * D, 1);
  float* k = random_values(T * HK * D, 2);
  for (int variant = VKATTN_ROPE_SCALING_NONE; variant <= VKATTN_ROPE_SCALING_FACTORS; ++variant) {
    vkattn_rope_config config;
    rope_config(&config, variant, factors);
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

/* RoPE on a slice (0.4's rotary_offset): DeepSeek's MLA key, the last 64 of 576 dims;
 * Vulkan against the CPU, the first 512 dims untouched, the slice rotated. An older
 * header's struct (0.2's size: no M-RoPE, no offset) still works with the defaults. */
static void test_rope_slice(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { T = 2, H = 1, D = 576, O = 512 };
  const int32_t positions[T] = {3, 40000};
  float* x = random_values(T * H * D, 12);
  vkattn_rope_config config, old;
  OK(vkattn_rope_config_init(&config, sizeof config));
  config.rotary_dim = 64;
  config.rotary_offset = O;
  OK(vkattn_rope_config_init(&old, sizeof old));
  old.struct_size = (uint32_t)offsetof(vkattn_rope_config, mrope_sections);
  float* out[3] = {roped(gpu, T, H, D, x, positions, T, &config), roped(cpu, T, H, D, x, positions, T, &config),
                   roped(cpu, T, H, D, x, positions, T, &old)};
  double kept = 0, rotated = 0;
  for (int t = 0; t < T; ++t) {
    kept = fmax(kept, max_diff(out[1] + t * D, x + t * D, O));
    rotated = fmax(rotated, max_diff(out[1] + t * D + O, x + t * D + O, D - O));
  }
  if (max_diff(out[0], out[1], T * H * D) > 4e-6 || kept != 0 || rotated < 1e-3 || max_diff(out[2], out[1], T * H * D) < 1e-3) {
    fprintf(stderr, "rope slice: Vulkan against CPU %g, dims before the slice moved %g, slice moved %g\n",
            max_diff(out[0], out[1], T * H * D), kept, rotated);
    ++g_failures;
  }
  for (int i = 0; i < 3; ++i) free(out[i]);
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
  free(plain_want), free(q), free(k), free(v), free(mask);
}

/* ---- A KV-cache decode loop: two sequences taking turns through a wrapping ring ---- */

struct side {
  vkattn_backend* b;
  vkattn_kv_cache* cache;
  vkattn_tensor *q, *k, *v, *out, *scores, *out3;
};

static void test_kv_cache_decode(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { H = 4, HK = 2, D = 16, CAP = 8, STEPS = 24 };
  vkattn_kv_cache_config cc;
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  cc.n_seqs = 2, cc.n_kv_heads = HK, cc.head_dim = D, cc.capacity = CAP, cc.n_sinks = 1, cc.dtype = VKATTN_DTYPE_F32;
  struct side sides[2] = {{gpu, NULL, NULL, NULL, NULL, NULL, NULL, NULL}, {cpu, NULL, NULL, NULL, NULL, NULL, NULL, NULL}};
  for (int i = 0; i < 2; ++i) {
    struct side* s = &sides[i];
    OK(vkattn_kv_cache_create(s->b, &cc, &s->cache));
    s->q = tensor(s->b, 1, H, D, VKATTN_DTYPE_F32), s->k = tensor(s->b, 1, HK, D, VKATTN_DTYPE_F32);
    s->v = tensor(s->b, 1, HK, D, VKATTN_DTYPE_F32), s->out = tensor(s->b, 1, H, D, VKATTN_DTYPE_F32);
    s->scores = tensor(s->b, 1, H, CAP, VKATTN_DTYPE_F32), s->out3 = tensor(s->b, 1, H, D, VKATTN_DTYPE_F32);
  }
  vkattn_attention_config config;
  OK(vkattn_attention_config_init(&config, sizeof config));
  config.path = VKATTN_ATTENTION_PATH_FUSED;
  double worst = 0.0;
  for (int step = 0; step < STEPS; ++step) {
    const int32_t seq = step % 2, pos = step / 2;
    float* q = random_values(H * D, 100u + (unsigned)step);
    float* k = random_values(HK * D, 200u + (unsigned)step);
    float* v = random_values(HK * D, 300u + (unsigned)step);
    vkattn_attention_tokens tokens;
    OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
    tokens.q_positions = &pos, tokens.n_q_positions = 1, tokens.q_seq_ids = &seq, tokens.n_q_seq_ids = 1;
    float* outs[2][2];
    for (int i = 0; i < 2; ++i) {
      struct side* s = &sides[i];
      OK(vkattn_upload_f32(s->b, s->q, q, H * D));
      OK(vkattn_upload_f32(s->b, s->k, k, HK * D));
      OK(vkattn_upload_f32(s->b, s->v, v, HK * D));
      vkattn_command_list* list = NULL;
      OK(vkattn_command_list_create(s->b, NULL, &list));
      OK(vkattn_cmd_rope_qk(list, s->q, s->k, &pos, 1, NULL));
      OK(vkattn_cmd_kv_append(list, s->cache, s->k, s->v, &pos, 1, &seq, 1, 0));
      OK(vkattn_cmd_attention_cache(list, s->q, s->cache, s->out, &tokens, &config, NULL));
      OK(vkattn_cmd_attn_scores_cache(list, s->q, s->cache, s->scores, &tokens, NULL, NULL));
      OK(vkattn_cmd_attn_softmax(list, s->scores, s->scores, NULL));
      OK(vkattn_cmd_attn_weighted_sum_cache(list, s->scores, s->cache, s->out3, &tokens));
      OK(vkattn_submit_and_wait(list));
      vkattn_command_list_destroy(list);
      outs[i][0] = download(s->b, s->out, H * D);
      outs[i][1] = download(s->b, s->out3, H * D);
    }
    for (int j = 0; j < 2; ++j) {
      const double d = max_diff(outs[0][j], outs[1][j], H * D);
      worst = d > worst ? d : worst;
    }
    CHECK(max_diff(outs[1][0], outs[1][1], H * D) == 0.0); /* the CPU's attention is its three stages */
    for (int i = 0; i < 2; ++i) free(outs[i][0]), free(outs[i][1]);
    free(q), free(k), free(v);
  }
  if (worst > 1e-4) {
    fprintf(stderr, "kv cache decode: max |diff| %g > 1e-4\n", worst);
    ++g_failures;
  }
  /* The bookkeeping: 12 positions per sequence through 8 slots, one of them a sink. */
  for (int i = 0; i < 2; ++i) {
    struct side* s = &sides[i];
    int32_t next = -1, slots[CAP];
    size_t length = 0, slot = 0, bytes = 0;
    OK(vkattn_kv_cache_next_position(s->cache, 1, &next));
    OK(vkattn_kv_cache_length(s->cache, 1, &length));
    OK(vkattn_kv_cache_slot_positions(s->cache, 1, slots, CAP));
    OK(vkattn_kv_cache_slot(s->cache, 11, &slot));
    OK(vkattn_kv_cache_bytes(s->cache, &bytes));
    CHECK(next == 12 && length == CAP && slots[0] == 0 && slot == 1 + (11 - 1) % (CAP - 1));
    CHECK(slots[slot] == 11 && bytes == 2 * 2 * CAP * HK * D * sizeof(float));
    /* Sequence 0 again from scratch: four tokens, two rejected, then a copy of sequence 1. */
    OK(vkattn_kv_cache_reset(s->cache, 0));
    const int32_t positions[4] = {0, 1, 2, 3}, seqs[4] = {0, 0, 0, 0};
    vkattn_tensor *k4 = tensor(s->b, 4, HK, D, VKATTN_DTYPE_F32), *v4 = tensor(s->b, 4, HK, D, VKATTN_DTYPE_F32);
    vkattn_command_list* list = NULL;
    OK(vkattn_command_list_create(s->b, NULL, &list));
    OK(vkattn_cmd_kv_append(list, s->cache, k4, v4, positions, 4, seqs, 4, 0));
    OK(vkattn_submit_and_wait(list));
    OK(vkattn_kv_cache_truncate(s->cache, 0, 2));
    OK(vkattn_kv_cache_next_position(s->cache, 0, &next));
    OK(vkattn_kv_cache_length(s->cache, 0, &length));
    CHECK(next == 2 && length == 2);
    OK(vkattn_cmd_kv_copy_sequence(list, s->cache, 1, 0));
    OK(vkattn_kv_cache_next_position(s->cache, 0, &next));
    CHECK(next == 12);
    OK(vkattn_kv_cache_reset(s->cache, 0));
    OK(vkattn_kv_cache_length(s->cache, 0, &length));
    CHECK(length == 0);
    vkattn_command_list_destroy(list);
    vkattn_tensor_destroy(k4), vkattn_tensor_destroy(v4);
  }
  for (int i = 0; i < 2; ++i) {
    struct side* s = &sides[i];
    vkattn_kv_cache_destroy(s->cache);
    vkattn_tensor_destroy(s->q), vkattn_tensor_destroy(s->k), vkattn_tensor_destroy(s->v);
    vkattn_tensor_destroy(s->out), vkattn_tensor_destroy(s->scores), vkattn_tensor_destroy(s->out3);
  }
}

/* A latent cache (absorbed MLA): V is the first 32 dims of each 64-dim key row, appended
 * as K alone (v NULL); q8_0, 4 query heads over one KV head, a ring of 8 that wraps. */
static void test_latent_cache(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { H = 4, DK = 64, DV = 32, CAP = 8, STEPS = 12 };
  vkattn_kv_cache_config cc;
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  cc.n_kv_heads = 1, cc.head_dim = DK, cc.v_head_dim = DV, cc.latent = 1, cc.capacity = CAP, cc.dtype = VKATTN_DTYPE_Q8_0;
  vkattn_backend* backends[2] = {gpu, cpu};
  vkattn_kv_cache* caches[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i) {
    size_t bytes = 0;
    OK(vkattn_kv_cache_create(backends[i], &cc, &caches[i]));
    OK(vkattn_kv_cache_bytes(caches[i], &bytes));
    CHECK(bytes == CAP * DK / 32 * 34); /* K alone: 34 bytes per block of 32 */
  }
  double worst = 0.0;
  for (int step = 0; step < STEPS; ++step) {
    const int32_t pos = step;
    float* q = random_values(H * DK, 400u + (unsigned)step);
    float* k = random_values(DK, 500u + (unsigned)step);
    vkattn_attention_tokens tokens;
    OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
    tokens.q_positions = &pos, tokens.n_q_positions = 1;
    float* outs[2];
    for (int i = 0; i < 2; ++i) {
      vkattn_tensor *tq = filled(backends[i], 1, H, DK, VKATTN_DTYPE_F32, q),
                    *tk = filled(backends[i], 1, 1, DK, VKATTN_DTYPE_F32, k);
      vkattn_tensor* out = tensor(backends[i], 1, H, DV, VKATTN_DTYPE_F32);
      vkattn_command_list* list = NULL;
      OK(vkattn_command_list_create(backends[i], NULL, &list));
      OK(vkattn_cmd_kv_append(list, caches[i], tk, NULL, &pos, 1, NULL, 0, 0));
      OK(vkattn_cmd_attention_cache(list, tq, caches[i], out, &tokens, NULL, NULL));
      OK(vkattn_submit_and_wait(list));
      outs[i] = download(backends[i], out, H * DV);
      vkattn_command_list_destroy(list);
      vkattn_tensor_destroy(tq), vkattn_tensor_destroy(tk), vkattn_tensor_destroy(out);
    }
    const double d = max_diff(outs[0], outs[1], H * DV);
    worst = d > worst ? d : worst;
    free(outs[0]), free(outs[1]), free(q), free(k);
  }
  if (worst > 1e-4) {
    fprintf(stderr, "latent cache: max |diff| %g > 1e-4\n", worst);
    ++g_failures;
  }
  vkattn_kv_cache_destroy(caches[0]), vkattn_kv_cache_destroy(caches[1]);
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
  vkattn_command_stats stats;
  OK(vkattn_command_list_stats(list, &stats, sizeof stats));
  CHECK(stats.ops == 1 && stats.submits == 1);
  size_t rank = 0, dims[3] = {0, 0, 0}, numel = 0;
  vkattn_dtype dtype = -1;
  OK(vkattn_tensor_shape(x, &rank, dims, 3));
  OK(vkattn_tensor_numel(x, &numel));
  OK(vkattn_tensor_dtype(x, &dtype));
  CHECK(rank == 3 && dims[0] == 2 && dims[2] == 8 && numel == 32 && dtype == VKATTN_DTYPE_F32);
  float slopes[8];
  OK(vkattn_alibi_slopes(8, slopes, 8));
  CHECK(slopes[0] == 0.5f && slopes[7] == 1.0f / 256.0f);
  double theta[4], factor = 0.0;
  OK(vkattn_rope_frequencies(NULL, 8, 0, theta, 4, &factor));
  CHECK(theta[0] == 1.0 && fabs(theta[1] - 0.1) < 1e-15 && factor == 1.0);
  vkattn_tensor_destroy(x);
  vkattn_command_list_destroy(list);
}

/* ---- Every status C can provoke ---- */

/* A decode step recorded once and replayed (vkattn_command_list_set_tokens) gives what a
 * list recorded afresh gives, bit for bit, through a wrapping ring; the command buffer is
 * recorded once; a wrong token count is refused. */
static void test_replay(vkattn_backend* gpu) {
  enum { H = 4, HK = 2, D = 16, CAP = 8, STEPS = 20 };
  vkattn_kv_cache_config cc;
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  cc.n_kv_heads = HK, cc.head_dim = D, cc.capacity = CAP, cc.n_sinks = 2, cc.dtype = VKATTN_DTYPE_F16;
  vkattn_kv_cache *replayed = NULL, *fresh = NULL;
  OK(vkattn_kv_cache_create(gpu, &cc, &replayed));
  OK(vkattn_kv_cache_create(gpu, &cc, &fresh));
  vkattn_tensor *q = tensor(gpu, 1, H, D, VKATTN_DTYPE_F32), *k = tensor(gpu, 1, HK, D, VKATTN_DTYPE_F32);
  vkattn_tensor *v = tensor(gpu, 1, HK, D, VKATTN_DTYPE_F32), *out = tensor(gpu, 1, H, D, VKATTN_DTYPE_F32);
  vkattn_command_list* step_list = NULL;
  OK(vkattn_command_list_create(gpu, NULL, &step_list));
  for (int32_t pos = 0; pos < STEPS; ++pos) {
    vkattn_attention_tokens tokens;
    OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
    tokens.q_positions = &pos, tokens.n_q_positions = 1;
    float* outs[2];
    for (int i = 0; i < 2; ++i) {
      float* values = random_values(H * D, 400u + (unsigned)pos);
      OK(vkattn_upload_f32(gpu, q, values, H * D)); /* rope rotates q and k in place: fresh values each time */
      OK(vkattn_upload_f32(gpu, k, values, HK * D));
      OK(vkattn_upload_f32(gpu, v, values + HK * D, HK * D));
      free(values);
      vkattn_command_list* list = step_list;
      if (i == 1) OK(vkattn_command_list_create(gpu, NULL, &list));
      if (i == 0 && pos > 0) {
        OK(vkattn_command_list_set_tokens(step_list, &pos, 1, NULL, 0));
      } else {
        OK(vkattn_cmd_rope_qk(list, q, k, &pos, 1, NULL));
        OK(vkattn_cmd_kv_append(list, i == 0 ? replayed : fresh, k, v, &pos, 1, NULL, 0, 0));
        OK(vkattn_cmd_attention_cache(list, q, i == 0 ? replayed : fresh, out, &tokens, NULL, NULL));
      }
      OK(vkattn_submit_and_wait(list));
      if (i == 1) vkattn_command_list_destroy(list);
      outs[i] = download(gpu, out, H * D);
    }
    CHECK(max_diff(outs[0], outs[1], H * D) == 0.0);
    free(outs[0]), free(outs[1]);
  }
  vkattn_command_stats stats;
  OK(vkattn_command_list_stats(step_list, &stats, sizeof stats));
  CHECK(stats.encodings == 1 && stats.submits == STEPS);
  /* The step's one attention op and the kernels that ran it (lavapipe: the three stages). */
  size_t runs = 0;
  OK(vkattn_command_list_attention_count(step_list, &runs));
  CHECK(runs == 1);
  vkattn_attention_run run;
  OK(vkattn_command_list_attention_run(step_list, 0, &run, sizeof run));
  CHECK(run.struct_size == sizeof run && run.splits >= 1 && run.precision == VKATTN_ATTENTION_PRECISION_F32);
  CHECK(strcmp(vkattn_attention_kernel_name(run.kernel), "unknown") != 0);
  CHECK(strcmp(vkattn_attention_kernel_name(VKATTN_ATTENTION_KERNEL_TILED), "tiled") == 0);
  CHECK(strcmp(vkattn_attention_kernel_name(99), "unknown") == 0);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "index = 1; valid: [0, 0]",
                vkattn_command_list_attention_run(step_list, 1, &run, sizeof run));
  const int32_t two[2] = {STEPS, STEPS + 1};
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "positions.size() = 2",
                vkattn_command_list_set_tokens(step_list, two, 2, NULL, 0));
  vkattn_command_list_destroy(step_list);
  vkattn_tensor* all[4] = {q, k, v, out};
  for (int i = 0; i < 4; ++i) vkattn_tensor_destroy(all[i]);
  vkattn_kv_cache_destroy(replayed);
  vkattn_kv_cache_destroy(fresh);
}

int main(void) {
  vkattn_backend *gpu = NULL, *cpu = NULL;
  const int skip = open_backends(&gpu, &cpu);
  if (skip) return skip;

  test_queries(gpu);
  test_rope(gpu, cpu);
  test_mrope(gpu, cpu);
  test_rope_slice(gpu, cpu);
  test_attention(gpu, cpu);
  test_kv_cache_decode(gpu, cpu);
  test_latent_cache(gpu, cpu);
  test_replay(gpu);
  return close_backends(gpu, cpu, "C API");
}
