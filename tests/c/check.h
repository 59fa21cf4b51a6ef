/* The C tests' one assertion: CHECK(cond, printf-format, ...) counts a pass or prints the failure
 * with its location and goes on; CHECK_SUMMARY(name) prints the counts and is main's exit status. */
#ifndef CTSTREAM_TESTS_C_CHECK_H
#define CTSTREAM_TESTS_C_CHECK_H
#include <stdio.h>

static int g_pass = 0, g_fail = 0;

#define CHECK(cond, ...)                                              \
  do {                                                                \
    if (cond) {                                                       \
      ++g_pass;                                                       \
    } else {                                                          \
      ++g_fail;                                                       \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fprintf(stderr, "\n");                                          \
    }                                                                 \
  } while (0)

#define CHECK_SUMMARY(name) (printf("%s: %d passed, %d failed\n", (name), g_pass, g_fail), g_fail == 0 ? 0 : 1)

#endif
