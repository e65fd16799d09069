/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

/* [type, req_id] as a msgpack array header plus two uint64 */
static size_t
pack_head(char *out, int type, uint64_t req_id)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	size_t n;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 3);
	msgpack_pack_uint32(&pk, (uint32_t)type);
	msgpack_pack_uint64(&pk, req_id);
	n = sb.size;
	memcpy(out, sb.data, n);
	msgpack_sbuffer_destroy(&sb);
	return n;
}

static const char empty_map = (char)0x80;

int
frame_parts(FrameParts *fp, int type, uint64_t req_id, const void *body, size_t body_len,
	    size_t max)
{
	fp->hl = pack_head(fp->head, type, req_id);
	if (!body || body_len == 0) {
		body = &empty_map;
		body_len = 1;
	}
	fp->body = body;
	fp->body_len = body_len;
	fp->total = fp->hl + body_len;
	if (fp->total > max || fp->total > UINT32_MAX)
		return -EMSGSIZE;
	fp->be = htonl((uint32_t)fp->total);
	return 0;
}

int
frame_encode(int type, uint64_t req_id, const void *body, size_t body_len, size_t max, char **ret,
	     size_t *ret_len)
{
	FrameParts fp;
	int r = frame_parts(&fp, type, req_id, body, body_len, max);

	if (r < 0)
		return r;
	char *b = malloc(4 + fp.total);
	if (!b)
		return -ENOMEM;
	memcpy(b, &fp.be, 4);
	memcpy(b + 4, fp.head, fp.hl);
	memcpy(b + 4 + fp.hl, fp.body, fp.body_len);
	*ret = b;
	*ret_len = 4 + fp.total;
	return 0;
}

/* Walk the msgpack text without decoding it: 0 when buf[0..len) holds whole
 * objects whose containers announce no more elements than there are bytes
 * left (every element takes at least one). msgpack-c allocates a container's
 * elements from its announced count before reading them: without this a
 * 10-byte frame announcing a map of 2^32 pairs asks for 100 GB. */
static int
precheck(const unsigned char *b, size_t len)
{
	size_t off = 0, pending = 1;

	while (pending > 0) {
		if (off >= len)
			return -EBADMSG;
		unsigned char c = b[off++];
		size_t head = 0, skip = 0, n = 0;
		pending--;
		if (c <= 0x7f || c >= 0xe0 || (c >= 0xc0 && c <= 0xc3))
			continue; /* fixint, nil, bool (0xc1 is refused by msgpack-c) */
		if (c >= 0x80 && c <= 0x8f)
			n = 2 * (size_t)(c & 0x0f);
		else if (c >= 0x90 && c <= 0x9f)
			n = c & 0x0f;
		else if (c >= 0xa0 && c <= 0xbf)
			skip = c & 0x1f;
		else {
			switch (c) {
			case 0xc4:
			case 0xd9: head = 1; break; /* bin8, str8 */
			case 0xc5:
			case 0xda:
			case 0xdc:
			case 0xde: head = 2; break;
			case 0xc6:
			case 0xdb:
			case 0xdd:
			case 0xdf: head = 4; break;
			case 0xc7:
				head = 1;
				skip = 1;
				break; /* ext8: + type */
			case 0xc8:
				head = 2;
				skip = 1;
				break;
			case 0xc9:
				head = 4;
				skip = 1;
				break;
			case 0xca:
			case 0xce:
			case 0xd2: skip = 4; break;
			case 0xcb:
			case 0xcf:
			case 0xd3: skip = 8; break;
			case 0xcc:
			case 0xd0: skip = 1; break;
			case 0xcd:
			case 0xd1: skip = 2; break;
			case 0xd4: skip = 2; break; /* fixext: type + data */
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			default: return -EBADMSG;
			}
			if (head) {
				uint64_t v = 0;
				if (len - off < head)
					return -EBADMSG;
				for (size_t i = 0; i < head; i++)
					v = v << 8 | b[off + i];
				off += head;
				if (c == 0xdc || c == 0xdd)
					n = (size_t)v;
				else if (c == 0xde || c == 0xdf)
					n = 2 * (size_t)v;
				else
					skip += (size_t)v;
			}
		}
		if (len - off < skip || n > len - off - skip || pending > len - off - skip - n)
			return -EBADMSG;
		off += skip;
		pending += n;
	}
	return 0;
}

static int
decode(Frame *f)
{
	size_t off = 0;
	msgpack_unpack_return ur;

	msgpack_unpacked_init(&f->un);
	if (precheck((const unsigned char *)f->buf, f->req_id /* stash: len */) < 0)
		return -EBADMSG;
	ur = msgpack_unpack_next(&f->un, f->buf, f->req_id /* stash: len */, &off);
	if (ur != MSGPACK_UNPACK_SUCCESS || off != f->req_id)
		return -EBADMSG;
	const msgpack_object *o = &f->un.data;
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
		return -EBADMSG;
	const msgpack_object *t = &o->via.array.ptr[0], *id = &o->via.array.ptr[1],
			     *b = &o->via.array.ptr[2];
	if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > INT32_MAX ||
	    id->type != MSGPACK_OBJECT_POSITIVE_INTEGER || b->type != MSGPACK_OBJECT_MAP)
		return -EBADMSG;
	f->type = (int)t->via.u64;
	f->req_id = id->via.u64;
	f->body = b;
	return 0;
}

int
frame_take(char *buf, size_t len, Frame *ret)
{
	Frame fr = {.buf = buf}, *f = &fr;

	f->req_id = len;
	int r = decode(f);
	if (r < 0) {
		frame_done(f);
		return r;
	}
	*ret = *f;
	return 0;
}

int
frame_parse(const void *payload, size_t len, Frame *ret)
{
	char *buf = malloc(len ? len : 1);

	if (!buf)
		return -ENOMEM;
	memcpy(buf, payload, len);
	return frame_take(buf, len, ret);
}

void
frame_done(Frame *f)
{
	if (f->buf) {
		msgpack_unpacked_destroy(&f->un);
		free(f->buf);
	}
	f->buf = NULL;
	f->body = NULL;
}
