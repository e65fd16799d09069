/* SPDX-License-Identifier: MIT */
/*
 * frame-evbuffer.c — frames in and out of libevent buffers (frame_write,
 * frame_read: frame.h). Apart from frame.c so that a blocking client of the
 * codecs (tools/shimctl) does not link libevent.
 */
#include "config.h"

#include "frame.h"

#include <errno.h>
#include <event2/buffer.h>
#include <stdlib.h>

int
frame_write(struct evbuffer *out, int type, uint64_t req_id, const void *body, size_t body_len,
	    size_t max)
{
	FrameParts fp;
	int r = frame_parts(&fp, type, req_id, body, body_len, max);

	if (r < 0)
		return r;
	if (evbuffer_add(out, &fp.be, 4) < 0 || evbuffer_add(out, fp.head, fp.hl) < 0 ||
	    evbuffer_add(out, fp.body, fp.body_len) < 0)
		return -ENOMEM;
	return 0;
}

int
frame_read(struct evbuffer *in, size_t max, Frame *ret)
{
	unsigned char hdr[4];
	uint32_t len;

	if (evbuffer_get_length(in) < 4)
		return 0;
	if (evbuffer_copyout(in, hdr, 4) != 4)
		return -EIO;
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (len > max)
		return -EMSGSIZE;
	if (len < 4) /* the smallest valid payload is [0,0,{}] = 4 bytes */
		return -EBADMSG;
	if (evbuffer_get_length(in) < 4 + (size_t)len)
		return 0;

	char *buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	evbuffer_drain(in, 4);
	evbuffer_remove(in, buf, len);
	int r = frame_take(buf, len, ret);
	return r < 0 ? r : 1;
}
