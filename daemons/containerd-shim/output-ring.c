/* SPDX-License-Identifier: MIT */
/*
 * output-ring.c — bounded, offset-addressed byte ring (see output-ring.h).
 */
#include "config.h"

#include "output-ring.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

void
ring_init(Ring *r, size_t max)
{
	*r = (Ring){.max = max > 0 ? max : 1};
}

void
ring_done(Ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->cap = r->len = r->head = 0;
}

/* Copy [idx, idx + n) of the logical contents out (n <= len - idx). */
static void
copy_out(const Ring *r, size_t idx, char *dst, size_t n)
{
	size_t pos = (r->head + idx) % r->cap;
	size_t first = MIN(n, r->cap - pos);

	memcpy(dst, r->buf + pos, first);
	memcpy(dst + first, r->buf, n - first);
}

static int
grow(Ring *r, size_t need)
{
	size_t cap = MAX(MAX(need, r->cap * 2), (size_t)4096);
	char *nb;

	cap = MIN(cap, r->max);
	if (cap <= r->cap)
		return 0;
	nb = malloc(cap);
	if (!nb)
		return -ENOMEM;
	if (r->len > 0)
		copy_out(r, 0, nb, r->len);
	free(r->buf);
	r->buf = nb;
	r->cap = cap;
	r->head = 0;
	return 0;
}

/* Out of memory while growing: keep what fits in the current allocation (maybe
 * nothing), dropping the rest, so that the offsets stay exact. */
int
ring_append(Ring *r, const void *p, size_t n)
{
	const char *src = p;
	size_t pos, first;
	int ret = 0;

	if (n == 0)
		return 0;
	if (r->len + n > r->cap && r->cap < r->max && grow(r, MIN(r->len + n, r->max)) < 0)
		ret = -ENOMEM;
	if (r->cap == 0) {
		r->start += n; /* nothing can be kept */
		return ret;
	}
	if (n >= r->cap) {
		/* Only the tail of this piece survives. */
		r->start += r->len + (n - r->cap);
		src += n - r->cap;
		n = r->cap;
		r->len = 0;
		r->head = 0;
	} else if (r->len + n > r->cap) {
		size_t drop = r->len + n - r->cap;
		r->head = (r->head + drop) % r->cap;
		r->len -= drop;
		r->start += drop;
	}
	pos = (r->head + r->len) % r->cap;
	first = MIN(n, r->cap - pos);
	memcpy(r->buf + pos, src, first);
	memcpy(r->buf, src + first, n - first);
	r->len += n;
	return ret;
}

long
ring_read(const Ring *r, uint64_t off, void *dst, size_t n)
{
	size_t idx;

	if (off < r->start || off > ring_end(r))
		return -ERANGE;
	idx = (size_t)(off - r->start);
	n = MIN(n, r->len - idx);
	if (n > 0)
		copy_out(r, idx, dst, n);
	return (long)n;
}
