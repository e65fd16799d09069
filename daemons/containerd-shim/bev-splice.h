/* SPDX-License-Identifier: MIT */
/*
 * bev-splice.h — two bufferevents spliced both ways (netfwd.c, netpreview.c).
 *
 * The owner embeds a BevSplice, fills down, up, high_water and the callbacks,
 * and calls bev_splice_open() once both sides are connected. Bytes read on
 * one side are queued on the other; when the receiving side holds high_water
 * bytes unsent, reading stops until it drained to half of that. When one side
 * ends (EOF, error, timeout), what it read is passed on, the other side
 * flushes what it holds, then close() frees the owner.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct bufferevent;
struct event_base;

typedef struct BevSplice BevSplice;
struct BevSplice {
	struct bufferevent *down, *up;
	bool open; /* splicing: set by bev_splice_open(), cleared by bev_splice_finish() */
	size_t high_water;
	/* Frees the owner and both bufferevents. */
	void (*close)(BevSplice *s);
	/* Optional: len bytes read from from (s->down or s->up) are passed on. */
	void (*count)(BevSplice *s, struct bufferevent *from, size_t len);
};

/* Both sides connected: splice from now on. Bytes already read from down
 * (sent right behind a head or hello) go first. */
void bev_splice_open(BevSplice *s);

/* One side is done: the other (NULL: none) flushes what it has queued, then
 * s->close(s). The side that is not other is freed now. */
void bev_splice_finish(BevSplice *s, struct bufferevent *other);

/* A connection accepted on fd: a zeroed owner of size bytes whose BevSplice
 * stands offset bytes into it, with down a bufferevent on fd (closed with it).
 * Returns the owner (the caller frees it), or NULL when out of memory: fd is
 * closed then. */
void *bev_splice_accept(struct event_base *base, int fd, size_t size, size_t offset);
