/* SPDX-License-Identifier: MIT */
/*
 * buf.h — a growing byte buffer: appends double its capacity (amortized
 * linear), and its data stays NUL-terminated so that text in it can be read
 * as a C string. The one growable buffer of the tree: a module that collects
 * bytes of unknown size uses it rather than its own realloc loop; an array
 * of elements grows with array_grow() (below).
 *
 *     Buf b = {0};
 *     if (buf_append(&b, "hello", 5) < 0) …
 *     use(b.data, b.len);
 *     buf_done(&b);
 */
#pragma once

#include <stddef.h>

typedef struct Buf {
	char *data; /* NULL until the first append or reserve */
	size_t len, cap;
} Buf;

/* Room for n more bytes and a NUL after them. 0, -ENOMEM, or -EFBIG when the
 * size would overflow. */
int buf_reserve(Buf *b, size_t n);
/* Append p[0..n). 0 or buf_reserve()'s error (b unchanged). */
int buf_append(Buf *b, const void *p, size_t n);
/* Free the data; b is empty again. NULL-safe. */
void buf_done(Buf *b);

/* Room for one more element in an array of n elements of size bytes at *p,
 * *cap allocated: doubled when full (first to min). 0, -ENOMEM or -EFBIG (on
 * overflow); *p and *cap unchanged on failure. The one array growth of the
 * tree: ARRAY_GROW(b->calls, b->n_calls, b->cap_calls, 8). */
int array_grow(void **p, size_t n, size_t *cap, size_t size, size_t min);
#define ARRAY_GROW(p, n, cap, min) array_grow((void **)&(p), (n), &(cap), sizeof(*(p)), (min))
