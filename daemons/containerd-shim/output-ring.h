/* SPDX-License-Identifier: MIT */
/*
 * output-ring.h — the bounded output buffer of one exec stream, addressed by
 * byte offsets of the stream.
 *
 * A Ring keeps the last `max` bytes appended to it. Every byte of the stream
 * has an offset (0 for the first byte ever appended); the ring holds the bytes
 * [ring_start(r), ring_end(r)). When an append overflows it, the oldest bytes
 * are dropped and ring_start() moves on; ring_end() is the total appended.
 * Memory grows with use (doubling) up to max, so a quiet exec costs little.
 *
 * Not thread-safe; no logging. Embedded by value; ring_done() frees the bytes.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct Ring {
	char *buf;
	size_t cap;	/* allocated bytes, <= max */
	size_t max;	/* most bytes kept */
	size_t head;	/* index in buf of the byte at offset start */
	size_t len;	/* bytes held */
	uint64_t start; /* stream offset of buf[head] */
} Ring;

/* An empty ring keeping at most max bytes (max > 0). */
void ring_init(Ring *r, size_t max);
void ring_done(Ring *r);

/* Append n bytes (dropping the oldest beyond max). Returns 0, or -ENOMEM when
 * the buffer could not grow: then more was dropped than max asks for, but
 * ring_end() still advanced by n (offsets always stay exact). */
int ring_append(Ring *r, const void *p, size_t n);

static inline uint64_t
ring_start(const Ring *r)
{
	return r->start;
}
static inline uint64_t
ring_end(const Ring *r)
{
	return r->start + r->len;
}

/* Copy up to n bytes from stream offset off (ring_start <= off <= ring_end) into
 * dst. Returns the count copied (0 at the end), or -ERANGE for an offset outside
 * what is held. */
long ring_read(const Ring *r, uint64_t off, void *dst, size_t n);
