/* What the C tests share: random values, tensors made and read back, and the two
 * backends (Vulkan with validation, CPU) opened and closed with the checks every program
 * ends with. Static functions: each test program is one translation unit. */
#ifndef VKATTN_TESTS_C_API_C_HELPERS_H
#define VKATTN_TESTS_C_API_C_HELPERS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "vkattn/vkattn.h"

static inline float next_random(unsigned* state) { /* uniform in [-1, 1) */
  *state = *state * 1664525u + 1013904223u;
  return (float)(*state >> 8) / (float)(1u << 23) - 1.0f;
}

static inline vkattn_tensor* tensor(vkattn_backend* b, size_t d0, size_t d1, size_t d2, vkattn_dtype dtype) {
  const size_t shape[3] = {d0, d1, d2};
  vkattn_tensor* t = NULL;
  OK(vkattn_tensor_create(b, shape, 3, dtype, &t));
  return t;
}

static inline vkattn_tensor* filled(vkattn_backend* b, size_t d0, size_t d1, size_t d2, vkattn_dtype dtype, const float* values) {
  vkattn_tensor* t = tensor(b, d0, d1, d2, dtype);
  OK(vkattn_upload_f32(b, t, values, d0 * d1 * d2));
  return t;
}

static inline float* random_values(size_t n, unsigned seed) {
  float* v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) v[i] = next_random(&seed);
  return v;
}

/* The largest |a - b| over n values (infinite when either is not finite). */
static inline double max_diff(const float* a, const float* b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = fabs((double)a[i] - (double)b[i]);
    m = isfinite(d) ? (d > m ? d : m) : INFINITY;
  }
  return m;
}

static inline float* download(vkattn_backend* b, const vkattn_tensor* t, size_t n) {
  float* v = malloc(n * sizeof(float));
  OK(vkattn_download_f32(b, t, v, n));
  return v;
}

/* Opens the Vulkan backend (validation on, unless VKATTN_TEST_VALIDATION=0: see
 * tests/support/backends.hpp) and the CPU one. Returns 0, or the exit status when there is
 * no Vulkan device: 77 (skipped), 1 under VKATTN_REQUIRE_VULKAN=1. */
static inline int open_backends(vkattn_backend** gpu, vkattn_backend** cpu) {
  CHECK(strcmp(vkattn_last_error_message(), "") == 0);
  vkattn_device_options options;
  OK(vkattn_device_options_init(&options, sizeof options));
  const char* validation = getenv("VKATTN_TEST_VALIDATION");
  options.validation = !(validation && strcmp(validation, "0") == 0);
  options.submit_timeout_ms = 600000; /* lavapipe compiles pipelines inside submissions */
  const vkattn_status s = vkattn_backend_create(VKATTN_BACKEND_VULKAN, &options, gpu);
  if (s == VKATTN_ERROR_NO_DEVICE || s == VKATTN_ERROR_UNSUPPORTED) {
    const char* required = getenv("VKATTN_REQUIRE_VULKAN");
    fprintf(stderr, "no Vulkan device: %s\n", vkattn_last_error_message());
    return required && strcmp(required, "1") == 0 ? 1 : 77;
  }
  OK(s);
  OK(vkattn_backend_create(VKATTN_BACKEND_CPU, NULL, cpu));
  return 0;
}

/* Checks that the validation layer stayed silent, closes both backends, and returns the
 * exit status: 0 when every check passed. */
static inline int close_backends(vkattn_backend* gpu, vkattn_backend* cpu, const char* what) {
  const char* const* messages = NULL;
  size_t n_messages = 0;
  OK(vkattn_backend_validation_messages(gpu, &messages, &n_messages));
  for (size_t i = 0; i < n_messages; ++i) fprintf(stderr, "validation: %s\n", messages[i]);
  CHECK(n_messages == 0);
  vkattn_backend_destroy(gpu);
  vkattn_backend_destroy(cpu);
  if (g_failures) {
    fprintf(stderr, "%d failures\n", g_failures);
    return 1;
  }
  printf("%s: all checks passed\n", what);
  return 0;
}

#endif /* VKATTN_TESTS_C_API_C_HELPERS_H */
