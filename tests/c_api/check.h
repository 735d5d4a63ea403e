/* The C tests' checks: CHECK counts a failure and goes on, OK stops the program when a call
 * that must succeed fails, EXPECT_STATUS wants a failure with a message containing a text.
 * Each test program is one translation unit, with its own count. */
#ifndef VKATTN_TESTS_C_API_CHECK_H
#define VKATTN_TESTS_C_API_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkattn/vkattn.h"

static int g_failures = 0;

#define CHECK(cond)                                                                                                         \
  do {                                                                                                                      \
    if (!(cond)) {                                                                                                          \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond, vkattn_last_error_message()); \
      ++g_failures;                                                                                                         \
    }                                                                                                                       \
  } while (0)

/* A call that must succeed; the test cannot go on without it. */
#define OK(call)                                                                                            \
  do {                                                                                                      \
    vkattn_status ok_status_ = (call);                                                                      \
    if (ok_status_ != VKATTN_OK) {                                                                          \
      fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, vkattn_status_string(ok_status_), \
              vkattn_last_error_message());                                                                 \
      exit(1);                                                                                              \
    }                                                                                                       \
  } while (0)

/* A call that must fail with |want| and a message containing |text|. */
#define EXPECT_STATUS(want, text, call) expect_status((want), (text), (call), #call, __LINE__)

static inline void expect_status(vkattn_status want, const char* text, vkattn_status got, const char* call, int line) {
  const char* message = vkattn_last_error_message();
  if (got != want || message == NULL || strstr(message, text) == NULL) {
    fprintf(stderr, "%s:%d: %s -> %s, message \"%s\"; want %s with \"%s\"\n", __FILE__, line, call, vkattn_status_string(got),
            message ? message : "(null)", vkattn_status_string(want), text);
    ++g_failures;
  }
}

#endif /* VKATTN_TESTS_C_API_CHECK_H */
