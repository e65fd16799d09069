/* SPDX-License-Identifier: MIT */
/*
 * failalloc.h — a failing allocator for unit tests: the code under test gets
 * NULL (errno ENOMEM) from the Nth malloc/calloc/realloc/strdup/strndup after
 * failalloc_arm(N), so that its ENOMEM paths run, one after the other.
 *
 * A test program links tests/unit/failalloc.c and wraps the allocator with
 * the linker (FAILALLOC_WRAP in tests/unit/unit.am: -Wl,--wrap=malloc …),
 * which reroutes the calls made from the test's objects and from the
 * convenience libraries it links (libcommon.a, …); libraries of the system
 * (libc, jansson, msgpack, libevent) keep their own allocator. What the
 * wrapped calls hand out is counted until freed, so a test also sees a leak
 * on a failure path: failalloc_live() must come back to what it was.
 *
 * The sweep, for a function f that allocates:
 *
 *     for (long n = 0;; n++) {
 *             size_t before = failalloc_live();
 *             failalloc_arm(n);
 *             int r = f();
 *             bool failed = failalloc_fired();
 *             failalloc_arm(-1);
 *             ...undo f's effect...
 *             assert_int_equal(failalloc_live(), before);
 *             if (!failed)
 *                     break;        // f made every allocation it needs
 *             assert_true(r < 0);  // and said so when one failed
 *     }
 *
 * Not thread-safe (unit tests are single-threaded); asprintf/vasprintf and
 * allocations inside system libraries are not failed.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Fail the nth allocation from now (0: the next one), and only that one;
 * n < 0: fail none. Resets failalloc_fired(). */
void failalloc_arm(long n);
/* Did the armed failure happen? */
bool failalloc_fired(void);
/* Allocations made through the wrapped functions and not yet freed. */
size_t failalloc_live(void);
