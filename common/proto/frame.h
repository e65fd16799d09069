/* SPDX-License-Identifier: MIT */
/*
 * frame.h — length-prefixed msgpack frames.
 *
 *   | u32 big-endian N | N bytes: msgpack array [type:uint, req_id:uint, body:map] |
 *
 * frame_read() decodes incrementally from a libevent input buffer: it never
 * allocates for a frame before its length passed the maximum check, consumes
 * nothing until a whole frame is there, and consumes exactly one frame when it
 * returns one. A frame that is not exactly one 3-element array with an unsigned
 * type and req_id and a map body is -EBADMSG (the peer is then dropped: after a
 * framing error the stream cannot be trusted).
 */
#pragma once

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

struct evbuffer;

#define FRAME_HEADER_SIZE 4
#define FRAME_MIN_MAX 64

typedef struct Frame {
	int type;
	uint64_t req_id;
	const msgpack_object *body; /* a map; valid until frame_done() */
	msgpack_unpacked un;
	char *buf; /* owned copy of the payload */
} Frame;

/* A frame's parts: the length prefix (big-endian), the head and the body (an
 * empty map for none). */
typedef struct FrameParts {
	uint32_t be;
	char head[32];
	size_t hl;
	const void *body;
	size_t body_len;
	size_t total; /* head + body: the prefix's value */
} FrameParts;

/* Fill fp for a frame of type, req_id and body/body_len (an already packed
 * msgpack map, NULL/0 for an empty map). -EMSGSIZE when the frame would exceed
 * max (or 4 GiB). */
int frame_parts(FrameParts *fp, int type, uint64_t req_id, const void *body, size_t body_len,
		size_t max);

/* Append one frame to out (frame-evbuffer.c, as frame_read). body/body_len is an already packed
 * msgpack map (NULL/0 for an empty map). -EMSGSIZE when the frame would exceed max. */
int frame_write(struct evbuffer *out, int type, uint64_t req_id, const void *body, size_t body_len,
		size_t max);

/* Encode one frame into a malloc'd buffer (*ret, *ret_len). For blocking users and tests. */
int frame_encode(int type, uint64_t req_id, const void *body, size_t body_len, size_t max,
		 char **ret, size_t *ret_len);

/* 1: *ret holds a frame (call frame_done); 0: need more bytes; -EMSGSIZE: the
 * announced length is over max (or under the minimum); -EBADMSG: malformed. */
int frame_read(struct evbuffer *in, size_t max, Frame *ret);

/* Decode a payload (without the length prefix). 0 or -EBADMSG. Takes a copy. */
int frame_parse(const void *payload, size_t len, Frame *ret);
/* The same without a copy: takes buf (malloc'd), freed when it does not decode. */
int frame_take(char *buf, size_t len, Frame *ret);

void frame_done(Frame *f);
