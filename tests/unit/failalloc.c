/* SPDX-License-Identifier: MIT */
/* failalloc.c — see failalloc.h. */
#include "config.h"

#include "failalloc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

#define LIVE_MAX 4096

static long countdown = -1;
static bool fired;
static void *live[LIVE_MAX];
static size_t n_live;

void
failalloc_arm(long n)
{
	countdown = n;
	fired = false;
}

bool
failalloc_fired(void)
{
	return fired;
}

size_t
failalloc_live(void)
{
	return n_live;
}

/* true when this allocation is the one to fail */
static bool
fail_now(void)
{
	if (countdown < 0)
		return false;
	if (countdown-- > 0)
		return false;
	fired = true;
	errno = ENOMEM;
	return true;
}

static void *
track(void *p)
{
	if (p && n_live < LIVE_MAX)
		live[n_live++] = p;
	return p;
}

/* Forget p; false when it was not ours (allocated by a system library). */
static bool
untrack(void *p)
{
	for (size_t i = n_live; i-- > 0;)
		if (live[i] == p) {
			live[i] = live[--n_live];
			return true;
		}
	return false;
}

void *
__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : track(__real_malloc(n));
}

void *
__wrap_calloc(size_t n, size_t size)
{
	return fail_now() ? NULL : track(__real_calloc(n, size));
}

void *
__wrap_realloc(void *p, size_t n)
{
	if (fail_now())
		return NULL; /* p stays the caller's */
	bool ours = p && untrack(p);
	void *q = __real_realloc(p, n);
	if (q || n == 0)
		return ours || !p ? track(q) : q;
	if (ours)
		track(p); /* failed for real: p is still there */
	return NULL;
}

void
__wrap_free(void *p)
{
	if (p)
		(void)untrack(p);
	__real_free(p);
}

char *
__wrap_strdup(const char *s)
{
	return fail_now() ? NULL : track(__real_strdup(s));
}

char *
__wrap_strndup(const char *s, size_t n)
{
	return fail_now() ? NULL : track(__real_strndup(s, n));
}
