/* The C API's caches from C11 (built as test_c_api.c is): a ring cache's decode loop, a
 * paged cache, a latent cache, a sparse mask and a replayed decode step, the Vulkan backend
 * against the CPU backend. Exit status 0: passed; 1: failed; 77: no Vulkan device (skipped,
 * unless VKATTN_REQUIRE_VULKAN=1, where it fails). */
#include <stddef.h>

#include "c_helpers.h"

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
  /* Saved on Vulkan and restored into a new cache on the CPU: the same bytes saved again,
   * the same bookkeeping; a cut or missing buffer refused, the cache untouched. */
  {
    void *saved = NULL, *again = NULL;
    size_t size = 0, size_again = 0;
    vkattn_kv_cache* restored = NULL;
    OK(vkattn_save_cache(gpu, sides[0].cache, &saved, &size));
    OK(vkattn_kv_cache_create(cpu, &cc, &restored));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "restore_cache: bytes", vkattn_restore_cache(cpu, restored, saved, size - 1));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "data = NULL", vkattn_restore_cache(cpu, restored, NULL, size));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "data = NULL", vkattn_save_cache(cpu, restored, NULL, &size_again));
    size_t length = 1;
    OK(vkattn_kv_cache_length(restored, 1, &length));
    CHECK(length == 0);
    OK(vkattn_restore_cache(cpu, restored, saved, size));
    OK(vkattn_save_cache(cpu, restored, &again, &size_again));
    int32_t next = -1;
    OK(vkattn_kv_cache_next_position(restored, 1, &next));
    CHECK(size_again == size && memcmp(saved, again, size) == 0 && next == 12);
    vkattn_free(saved), vkattn_free(again), vkattn_free(NULL);
    vkattn_kv_cache_destroy(restored);
  }
  /* The bookkeeping: 12 positions per sequence through 8 slots, one of them a sink. */
  for (int i = 0; i < 2; ++i) {
    struct side* s = &sides[i];
    int32_t next = -1, slots[CAP];
    size_t length = 0, slot = 0, bytes = 0;
    OK(vkattn_kv_cache_next_position(s->cache, 1, &next));
    OK(vkattn_kv_cache_length(s->cache, 1, &length));
    OK(vkattn_kv_cache_slot_positions(s->cache, 1, slots, CAP));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "count = 7; valid: capacity = 8",
                  vkattn_kv_cache_slot_positions(s->cache, 1, slots, CAP - 1));
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

/* A paged cache: blocks of 8 in a pool of 6; a prefill of 20 tokens (3 blocks), a fork
 * (shares 2, copies the third), decode of both sequences, Vulkan against the CPU; the
 * pool's queries; an append the pool cannot hold refused; a ring cache's pool refused. */
static void test_paged_cache(vkattn_backend* gpu, vkattn_backend* cpu) {
  enum { H = 4, HK = 2, D = 16, CAP = 32, BS = 8, PREFILL = 20 };
  vkattn_kv_cache_config cc;
  OK(vkattn_kv_cache_config_init(&cc, sizeof cc));
  CHECK(cc.paged == 0 && cc.block_size == 16 && cc.n_blocks == 0);
  cc.n_seqs = 2, cc.n_kv_heads = HK, cc.head_dim = D, cc.capacity = CAP, cc.dtype = VKATTN_DTYPE_F32;
  cc.paged = 1, cc.block_size = BS, cc.n_blocks = 6;
  vkattn_backend* backends[2] = {gpu, cpu};
  vkattn_kv_cache* caches[2] = {NULL, NULL};
  float* outs[2] = {NULL, NULL};
  float* k = random_values(PREFILL * HK * D, 41u);
  float* v = random_values(PREFILL * HK * D, 42u);
  float* q = random_values(2 * H * D, 43u);
  int32_t positions[PREFILL], seqs[PREFILL];
  for (int i = 0; i < PREFILL; ++i) positions[i] = i, seqs[i] = 0;
  for (int i = 0; i < 2; ++i) {
    vkattn_backend* b = backends[i];
    OK(vkattn_kv_cache_create(b, &cc, &caches[i]));
    vkattn_tensor* tk = filled(b, PREFILL, HK, D, VKATTN_DTYPE_F32, k);
    vkattn_tensor* tv = filled(b, PREFILL, HK, D, VKATTN_DTYPE_F32, v);
    vkattn_tensor* tq = filled(b, 2, H, D, VKATTN_DTYPE_F32, q);
    vkattn_tensor* out = tensor(b, 2, H, D, VKATTN_DTYPE_F32);
    size_t needs = 0, free_blocks = 0;
    OK(vkattn_kv_cache_blocks_to_append(caches[i], 0, PREFILL, &needs));
    CHECK(needs == 3);
    vkattn_command_list* list = NULL;
    OK(vkattn_command_list_create(b, NULL, &list));
    OK(vkattn_cmd_kv_append(list, caches[i], tk, tv, positions, PREFILL, seqs, PREFILL, 0));
    OK(vkattn_cmd_kv_copy_sequence(list, caches[i], 0, 1));
    /* One more token each, into the blocks they now own (K of the prefill's first rows as
     * both K and V). */
    const int32_t next_pos[2] = {PREFILL, PREFILL}, next_seq[2] = {0, 1};
    vkattn_tensor* k2 = filled(b, 2, HK, D, VKATTN_DTYPE_F32, k);
    OK(vkattn_cmd_kv_append(list, caches[i], k2, k2, next_pos, 2, next_seq, 2, 0));
    vkattn_attention_tokens tokens;
    OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
    tokens.q_positions = next_pos, tokens.n_q_positions = 2, tokens.q_seq_ids = next_seq, tokens.n_q_seq_ids = 2;
    OK(vkattn_cmd_attention_cache(list, tq, caches[i], out, &tokens, NULL, NULL));
    OK(vkattn_submit_and_wait(list));
    outs[i] = download(b, out, 2 * H * D);
    int32_t table0[CAP / BS], table1[CAP / BS], refs[6];
    OK(vkattn_kv_cache_block_table(caches[i], 0, table0, CAP / BS));
    OK(vkattn_kv_cache_block_table(caches[i], 1, table1, CAP / BS));
    OK(vkattn_kv_cache_block_refs(caches[i], refs, 6));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "vkattn_kv_cache_block_table: count = 3; valid: capacity / block_size = 4",
                  vkattn_kv_cache_block_table(caches[i], 0, table0, CAP / BS - 1));
    EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "vkattn_kv_cache_block_refs: count = 5; valid: n_blocks = 6",
                  vkattn_kv_cache_block_refs(caches[i], refs, 5));
    OK(vkattn_kv_cache_free_blocks(caches[i], &free_blocks));
    CHECK(table0[0] == table1[0] && table0[1] == table1[1] && table0[2] != table1[2] && table0[3] == -1 && table1[3] == -1);
    CHECK(refs[table0[0]] == 2 && refs[table0[2]] == 1 && refs[table1[2]] == 1 && free_blocks == 2);
    OK(vkattn_kv_cache_blocks_to_append(caches[i], 1, 11, &needs));
    CHECK(needs == 1); /* positions 24..31: a new run */
    OK(vkattn_kv_cache_blocks_to_append(caches[i], 1, 12, &needs));
    CHECK(needs == 2); /* and 32 wraps into run 0, shared: a copy */
    /* Both to 32: 3 blocks (the second writer of run 0 keeps it), 2 free: refused. */
    vkattn_tensor* k24 = tensor(b, 24, HK, D, VKATTN_DTYPE_F32);
    int32_t p24[24], s24[24];
    for (int t = 0; t < 24; ++t) p24[t] = 21 + t % 12, s24[t] = t / 12;
    EXPECT_STATUS(VKATTN_ERROR_OUT_OF_DEVICE_MEMORY, "free blocks",
                  vkattn_cmd_kv_append(list, caches[i], k24, k24, p24, 24, s24, 24, 0));
    OK(vkattn_kv_cache_free_blocks(caches[i], &free_blocks));
    CHECK(free_blocks == 2);
    vkattn_command_list_destroy(list);
    vkattn_tensor_destroy(tk), vkattn_tensor_destroy(tv), vkattn_tensor_destroy(tq), vkattn_tensor_destroy(out);
    vkattn_tensor_destroy(k2), vkattn_tensor_destroy(k24);
  }
  const double diff = max_diff(outs[0], outs[1], 2 * H * D);
  if (diff > 1e-4) {
    fprintf(stderr, "paged cache: max |diff| %g > 1e-4\n", diff);
    ++g_failures;
  }
  cc.paged = 0; /* a pool without paging (the flag forgotten) is refused, not ignored */
  vkattn_kv_cache* ring = NULL;
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "config.n_blocks = 6", vkattn_kv_cache_create(cpu, &cc, &ring));
  cc.n_blocks = 0;
  OK(vkattn_kv_cache_create(cpu, &cc, &ring));
  size_t free_blocks = 0;
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "a ring cache", vkattn_kv_cache_free_blocks(ring, &free_blocks));
  vkattn_kv_cache_destroy(ring);
  for (int i = 0; i < 2; ++i) vkattn_kv_cache_destroy(caches[i]), free(outs[i]);
  free(k), free(v), free(q);
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

/* A sparse mask (DeepSeek V3.2's top-k) on a Vulkan backend of the GPU shape, in its two
 * forms: an f32 mask with mask_keys, and a key list (an i32 mask of the kept keys, -1
 * padding). Two tokens (prefill) of 16 query heads over one KV head wider than 256 take
 * the group kernel, which reads only the 8 keys each token keeps and says so (sparse = 1);
 * against the CPU backend. */
static void test_sparse_mask(vkattn_backend* cpu) {
  enum { T = 2, H = 16, DK = 320, DV = 256, N = 64, KEPT = 8, WIDTH = KEPT + 3 };
  vkattn_device_options options;
  OK(vkattn_device_options_init(&options, sizeof options));
  const char* validation = getenv("VKATTN_TEST_VALIDATION");
  options.validation = !(validation && strcmp(validation, "0") == 0);
  options.kernels = VKATTN_KERNELS_GPU;
  vkattn_backend* gpu = NULL;
  OK(vkattn_backend_create(VKATTN_BACKEND_VULKAN, &options, &gpu));
  /* A row of the group kernel takes 8 lanes of the subgroups the kernels ask for (16, or
   * the nearest the device allows): on narrower ones the decode kernel reads every key. */
  vkattn_device_limits limits;
  OK(vkattn_backend_limits(gpu, &limits, sizeof limits));
  const uint32_t lanes = !limits.subgroup_size_control   ? limits.subgroup_size
                         : limits.subgroup_max_size < 16 ? limits.subgroup_max_size
                         : limits.subgroup_min_size > 16 ? limits.subgroup_min_size
                                                         : 16u;
  const int group = lanes >= 8;
  float* q = random_values(T * H * DK, 700u);
  float* k = random_values(N * DK, 701u);
  float* v = random_values(N * DV, 702u);
  float mask[T * N];
  int32_t keys[T * WIDTH];
  for (int t = 0; t < T; ++t) {
    int kept = 0;
    for (int j = 0; j < N; ++j) {
      const int keep = j % (N / KEPT) == 3 + t;
      mask[t * N + j] = keep ? 0.0f : -INFINITY;
      if (keep) keys[t * WIDTH + kept++] = j;
    }
    while (kept < WIDTH) keys[t * WIDTH + kept++] = -1;
  }
  const int32_t pos[T] = {N - 2, N - 1};
  vkattn_attention_tokens tokens;
  OK(vkattn_attention_tokens_init(&tokens, sizeof tokens));
  tokens.q_positions = pos, tokens.n_q_positions = T;
  vkattn_backend* backends[2] = {gpu, cpu};
  for (int form = 0; form < 2; ++form) { /* the f32 mask with mask_keys, the key list */
    vkattn_attention_config config;
    OK(vkattn_attention_config_init(&config, sizeof config));
    config.mask_keys = form == 0 ? KEPT : 0;
    float* outs[2];
    for (int i = 0; i < 2; ++i) {
      vkattn_tensor *tq = filled(backends[i], T, H, DK, VKATTN_DTYPE_F32, q),
                    *tk = filled(backends[i], N, 1, DK, VKATTN_DTYPE_F32, k),
                    *tv = filled(backends[i], N, 1, DV, VKATTN_DTYPE_F32, v),
                    *out = tensor(backends[i], T, H, DV, VKATTN_DTYPE_F32);
      const size_t mask_shape[2] = {T, form == 0 ? N : WIDTH};
      vkattn_tensor* tm = NULL;
      OK(vkattn_tensor_create(backends[i], mask_shape, 2, form == 0 ? VKATTN_DTYPE_F32 : VKATTN_DTYPE_I32, &tm));
      if (form == 0)
        OK(vkattn_upload_f32(backends[i], tm, mask, T * N));
      else
        OK(vkattn_upload_i32(backends[i], tm, keys, T * WIDTH));
      vkattn_command_list* list = NULL;
      OK(vkattn_command_list_create(backends[i], NULL, &list));
      OK(vkattn_cmd_attention(list, tq, tk, tv, out, &tokens, &config, tm));
      OK(vkattn_submit_and_wait(list));
      vkattn_attention_run run;
      OK(vkattn_command_list_attention_run(list, 0, &run, sizeof run));
      CHECK(run.sparse == (i == 0 && group ? 1u : 0u) && run.reserved == 0);
      CHECK(run.kernel == (i == 1  ? VKATTN_ATTENTION_KERNEL_REFERENCE
                           : group ? VKATTN_ATTENTION_KERNEL_GROUP
                                   : VKATTN_ATTENTION_KERNEL_DECODE));
      outs[i] = download(backends[i], out, T * H * DV);
      vkattn_command_list_destroy(list);
      vkattn_tensor_destroy(tq), vkattn_tensor_destroy(tk), vkattn_tensor_destroy(tv);
      vkattn_tensor_destroy(out), vkattn_tensor_destroy(tm);
    }
    const double d = max_diff(outs[0], outs[1], T * H * DV);
    if (d > 1e-4) {
      fprintf(stderr, "sparse mask (%s): max |diff| %g > 1e-4\n", form == 0 ? "mask_keys" : "key list", d);
      ++g_failures;
    }
    free(outs[0]), free(outs[1]);
  }
  const char* const* messages = NULL;
  size_t n_messages = 0;
  OK(vkattn_backend_validation_messages(gpu, &messages, &n_messages));
  CHECK(n_messages == 0);
  free(q), free(k), free(v);
  vkattn_backend_destroy(gpu);
}

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
  CHECK(run.sparse == 0 && run.reserved == 0); /* no mask_keys */
  /* 0.6's struct ended before sparse: what lies past it is left as it was. */
  run.sparse = 7;
  OK(vkattn_command_list_attention_run(step_list, 0, &run, offsetof(vkattn_attention_run, sparse)));
  CHECK(run.struct_size == offsetof(vkattn_attention_run, sparse) && run.sparse == 7);
  CHECK(strcmp(vkattn_attention_kernel_name(run.kernel), "unknown") != 0);
  CHECK(strcmp(vkattn_attention_kernel_name(VKATTN_ATTENTION_KERNEL_TILED), "tiled") == 0);
  CHECK(strcmp(vkattn_attention_kernel_name(99), "unknown") == 0);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "index = 1; valid: [0, 0]",
                vkattn_command_list_attention_run(step_list, 1, &run, sizeof run));
  const int32_t two[2] = {STEPS, STEPS + 1};
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "positions.size() = 2",
                vkattn_command_list_set_tokens(step_list, two, 2, NULL, 0));
  size_t n_tokens = 7;
  OK(vkattn_command_list_n_tokens(step_list, &n_tokens));
  CHECK(n_tokens == 1);
  EXPECT_STATUS(VKATTN_ERROR_INVALID_ARGUMENT, "n_tokens = NULL", vkattn_command_list_n_tokens(step_list, NULL));
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

  test_kv_cache_decode(gpu, cpu);
  test_latent_cache(gpu, cpu);
  test_sparse_mask(cpu);
  test_paged_cache(gpu, cpu);
  test_replay(gpu);
  return close_backends(gpu, cpu, "C API caches");
}
