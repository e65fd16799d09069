/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

int
buf_reserve(Buf *b, size_t n)
{
	if (n > SIZE_MAX / 2 - b->len - 1)
		return -EFBIG;
	if (b->len + n + 1 <= b->cap)
		return 0;
	size_t cap = MAX(b->cap * 2, MAX(b->len + n + 1, (size_t)64));
	char *d = realloc(b->data, cap);
	if (!d)
		return -ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

int
buf_append(Buf *b, const void *p, size_t n)
{
	int r = buf_reserve(b, n);
	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

void
buf_done(Buf *b)
{
	if (!b)
		return;
	free(b->data);
	*b = (Buf){0};
}

int
array_grow(void **p, size_t n, size_t *cap, size_t size, size_t min)
{
	if (n < *cap)
		return 0;
	size_t want = *cap ? *cap : MAX(min, (size_t)1);
	if (*cap && want > SIZE_MAX / 2 / size)
		return -EFBIG;
	if (*cap)
		want *= 2;
	if (want > SIZE_MAX / size)
		return -EFBIG;
	void *q = realloc(*p, want * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = want;
	return 0;
}
