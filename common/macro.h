/* SPDX-License-Identifier: MIT */
/*
 * macro.h — small language helpers used everywhere.
 *
 * _cleanup_(fn)  run fn(&var) when var leaves scope (GCC/Clang cleanup attribute).
 * TAKE_PTR(p)    return p and set it to NULL: hands ownership out of a cleanup variable.
 * TAKE_FD(fd)    the same for file descriptors (-1 means "none").
 * ELEMENTSOF(a)  number of elements of a true array.
 * container_of(p, T, m)  the T whose member m p points to (an embedded hook).
 */
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _unused_ __attribute__((unused))
#define _noreturn_ __attribute__((noreturn))
#define _likely_(x) __builtin_expect(!!(x), 1)
#define _unlikely_(x) __builtin_expect(!!(x), 0)
#define _warn_unused_result_ __attribute__((warn_unused_result))

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define container_of(p, T, m) ((T *)(void *)((char *)(p)-offsetof(T, m)))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p_ = (p);                                                           \
		(p) = NULL;                                                                        \
		_p_;                                                                               \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd_ = (fd);                                                                   \
		(fd) = -1;                                                                         \
		_fd_;                                                                              \
	})

/* Declares name##p(type **p) calling func(*p) when *p is set. */
#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}

static inline void
freep(void *p)
{
	free(*(void **)p);
}
#define _cleanup_free_ _cleanup_(freep)

/* Errors the code detects itself, in the negative-errno scheme. */
#define SYNTHETIC_ERRNO(e) (-(e))

/* Convert a libc "-1 and errno" result into a negative errno. */
#define RET_NERRNO(expr)                                                                           \
	({                                                                                         \
		long _r_ = (long)(expr);                                                           \
		_r_ < 0 ? -errno : (int)_r_;                                                       \
	})

#define STRLEN(s) (sizeof(s) - 1)
#define streq(a, b) (strcmp((a), (b)) == 0)
