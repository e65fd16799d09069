/* SPDX-License-Identifier: MIT */
/*
 * test-frame.c — common/proto/frame.c: length-prefixed msgpack frames.
 *
 * The incremental reader is the part that matters: a peer's bytes arrive in
 * arbitrary pieces, and frame_read() must neither return a frame early nor
 * consume anything it did not return. The split tests feed the same encoded
 * bytes one at a time and in pseudo-random (fixed-seed) pieces.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <msgpack.h>

#include "frame.h"
#include "mp-cursor.h"

#define MAX_FRAME (64 * 1024)

/* A body {"run_id": id, "n": n} packed with the project's writer. */
static void
pack_body(MpWriter *w, const char *id, int64_t n)
{
	mp_writer_init(w);
	mp_w_map(w, 2);
	mp_w_str(w, "run_id", id);
	mp_w_int(w, "n", n);
}

static void
assert_body(const Frame *f, const char *id, int64_t n)
{
	MpReader r;
	const char *s = NULL;
	int64_t v = -12345;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "run_id", &s);
	mp_read_int(&r, "n", &v);
	assert_int_equal(r.err, 0);
	assert_string_equal(s, id);
	assert_int_equal(v, n);
	mp_reader_done(&r);
}

/* Raw frame: 4-byte BE length + payload. */
static void
add_raw(struct evbuffer *b, const void *payload, size_t len)
{
	unsigned char h[4] = {(unsigned char)(len >> 24), (unsigned char)(len >> 16),
			      (unsigned char)(len >> 8), (unsigned char)len};
	assert_int_equal(evbuffer_add(b, h, 4), 0);
	assert_int_equal(evbuffer_add(b, payload, len), 0);
}

/* Deterministic xorshift so "random" splits are the same on every run. */
static uint32_t
rnd(uint32_t *s)
{
	uint32_t x = *s;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return *s = x;
}

static void
test_frame_round_trip(void **state)
{
	MpWriter w;
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();

	pack_body(&w, "abc", -7);
	assert_int_equal(frame_write(b, 12, 99, w.sbuf.data, w.sbuf.size, MAX_FRAME), 0);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), 1);
	assert_int_equal(f.type, 12);
	assert_int_equal(f.req_id, 99);
	assert_non_null(f.body);
	assert_int_equal(f.body->type, MSGPACK_OBJECT_MAP);
	assert_body(&f, "abc", -7);
	assert_int_equal(evbuffer_get_length(b), 0);
	frame_done(&f);
	assert_null(f.buf);
	assert_null(f.body);

	/* NULL body: an empty map; a large req_id survives (uint64) */
	assert_int_equal(frame_write(b, 1, UINT64_MAX, NULL, 0, MAX_FRAME), 0);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), 1);
	assert_int_equal(f.type, 1);
	assert_true(f.req_id == UINT64_MAX);
	assert_int_equal(f.body->type, MSGPACK_OBJECT_MAP);
	assert_int_equal(f.body->via.map.size, 0);
	frame_done(&f);

	/* frame_encode produces the same bytes as frame_write */
	char *enc = NULL;
	size_t enc_len = 0;
	assert_int_equal(frame_encode(12, 99, w.sbuf.data, w.sbuf.size, MAX_FRAME, &enc, &enc_len),
			 0);
	assert_int_equal(frame_write(b, 12, 99, w.sbuf.data, w.sbuf.size, MAX_FRAME), 0);
	assert_int_equal(evbuffer_get_length(b), enc_len);
	assert_memory_equal(evbuffer_pullup(b, -1), enc, enc_len);
	/* and the length prefix counts exactly the payload */
	uint32_t n = (uint32_t)(unsigned char)enc[0] << 24 | (uint32_t)(unsigned char)enc[1] << 16 |
		     (uint32_t)(unsigned char)enc[2] << 8 | (unsigned char)enc[3];
	assert_int_equal(n, enc_len - 4);
	free(enc);

	mp_writer_done(&w);
	evbuffer_free(b);
}

static void
test_frame_read_empty_and_short_header(void **state)
{
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();

	assert_int_equal(frame_read(b, MAX_FRAME, &f), 0);
	evbuffer_add(b, "\0\0", 2);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), 0);
	assert_int_equal(evbuffer_get_length(b), 2);
	evbuffer_free(b);
}

/* Feed enc in pieces given by next_piece; frame_read must say 0 and consume
 * nothing until the last byte is there, then return the frame and drain all. */
static void
feed_split(const char *enc, size_t enc_len, uint32_t seed)
{
	struct evbuffer *b = evbuffer_new();
	Frame f = {0};
	size_t off = 0;
	uint32_t s = seed;

	while (off < enc_len) {
		size_t piece = seed == 0 ? 1 : 1 + rnd(&s) % 7;
		if (piece > enc_len - off)
			piece = enc_len - off;
		assert_int_equal(evbuffer_add(b, enc + off, piece), 0);
		off += piece;
		int r = frame_read(b, MAX_FRAME, &f);
		if (off < enc_len) {
			assert_int_equal(r, 0);
			assert_int_equal(evbuffer_get_length(b), off); /* nothing consumed */
		} else {
			assert_int_equal(r, 1);
		}
	}
	assert_int_equal(f.type, 13);
	assert_int_equal(f.req_id, 4242);
	assert_body(&f, "split-me", 123456789);
	assert_int_equal(evbuffer_get_length(b), 0);
	frame_done(&f);
	/* nothing more */
	assert_int_equal(frame_read(b, MAX_FRAME, &f), 0);
	evbuffer_free(b);
}

static void
test_frame_split_reads(void **state)
{
	MpWriter w;
	char *enc = NULL;
	size_t enc_len = 0;

	pack_body(&w, "split-me", 123456789);
	assert_int_equal(
	    frame_encode(13, 4242, w.sbuf.data, w.sbuf.size, MAX_FRAME, &enc, &enc_len), 0);
	assert_true(enc_len > 20);
	feed_split(enc, enc_len, 0); /* one byte at a time */
	for (uint32_t seed = 1; seed <= 50; seed++)
		feed_split(enc, enc_len, seed * 2654435761u);
	free(enc);
	mp_writer_done(&w);
}

static void
test_frame_two_back_to_back(void **state)
{
	MpWriter w1, w2;
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();

	pack_body(&w1, "first", 1);
	pack_body(&w2, "second", 2);
	assert_int_equal(frame_write(b, 10, 1, w1.sbuf.data, w1.sbuf.size, MAX_FRAME), 0);
	size_t first_len = evbuffer_get_length(b);
	assert_int_equal(frame_write(b, 11, 2, w2.sbuf.data, w2.sbuf.size, MAX_FRAME), 0);
	/* plus a partial third frame header */
	evbuffer_add(b, "\0\0", 2);
	size_t total = evbuffer_get_length(b);

	assert_int_equal(frame_read(b, MAX_FRAME, &f), 1);
	assert_int_equal(f.type, 10);
	assert_body(&f, "first", 1);
	frame_done(&f);
	assert_int_equal(evbuffer_get_length(b), total - first_len);

	assert_int_equal(frame_read(b, MAX_FRAME, &f), 1);
	assert_int_equal(f.type, 11);
	assert_int_equal(f.req_id, 2);
	assert_body(&f, "second", 2);
	frame_done(&f);
	assert_int_equal(evbuffer_get_length(b), 2);

	assert_int_equal(frame_read(b, MAX_FRAME, &f), 0);
	assert_int_equal(evbuffer_get_length(b), 2);

	mp_writer_done(&w1);
	mp_writer_done(&w2);
	evbuffer_free(b);
}

static void
test_frame_rejects_oversize(void **state)
{
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();
	/* announce max+1 bytes but send only the header: the answer must not
	 * wait for a body that may never come */
	uint32_t n = MAX_FRAME + 1;
	unsigned char h[4] = {(unsigned char)(n >> 24), (unsigned char)(n >> 16),
			      (unsigned char)(n >> 8), (unsigned char)n};
	evbuffer_add(b, h, 4);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), -EMSGSIZE);
	assert_null(f.buf);

	/* 0xFFFFFFFF */
	evbuffer_drain(b, evbuffer_get_length(b));
	evbuffer_add(b, "\xff\xff\xff\xff", 4);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), -EMSGSIZE);

	/* exactly max is fine (the check is inclusive) */
	evbuffer_drain(b, evbuffer_get_length(b));
	unsigned char h2[4] = {0, 0, 0, 64};
	evbuffer_add(b, h2, 4);
	assert_int_equal(frame_read(b, 64, &f), 0); /* waits for the body */
	assert_int_equal(frame_read(b, 63, &f), -EMSGSIZE);
	evbuffer_free(b);
}

static void
test_frame_rejects_short_length(void **state)
{
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();

	for (unsigned len = 0; len < 4; len++) {
		unsigned char h[4] = {0, 0, 0, (unsigned char)len};
		evbuffer_drain(b, evbuffer_get_length(b));
		evbuffer_add(b, h, 4);
		/* even with the announced bytes present */
		evbuffer_add(b, "\x93\x00\x00", len);
		assert_int_equal(frame_read(b, MAX_FRAME, &f), -EBADMSG);
	}
	/* the smallest valid payload [0,0,{}] is exactly 4 bytes */
	evbuffer_drain(b, evbuffer_get_length(b));
	add_raw(b, "\x93\x00\x00\x80", 4);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), 1);
	assert_int_equal(f.type, 0);
	assert_int_equal(f.req_id, 0);
	frame_done(&f);
	evbuffer_free(b);
}

static void
expect_bad_payload(const void *payload, size_t len)
{
	Frame f = {0};
	struct evbuffer *b = evbuffer_new();

	add_raw(b, payload, len);
	assert_int_equal(frame_read(b, MAX_FRAME, &f), -EBADMSG);
	assert_null(f.buf);
	evbuffer_free(b);

	assert_int_equal(frame_parse(payload, len, &f), -EBADMSG);
	assert_null(f.buf);
}

static void
test_frame_rejects_garbage(void **state)
{
	/* not an array: a map, a string, an integer */
	expect_bad_payload("\x83\x00\x00\x01\x01\x02\x80", 7);
	expect_bad_payload("\xa4\x61\x62\x63\x64", 5);
	expect_bad_payload("\xcd\x01\x02\x03", 4);
	/* array of wrong arity: 2 and 4 elements */
	expect_bad_payload("\x92\x01\x02\x80", 4);
	expect_bad_payload("\x94\x01\x02\x80\x80", 5);
	/* body not a map: array, string, nil */
	expect_bad_payload("\x93\x01\x02\x90", 4);
	expect_bad_payload("\x93\x01\x02\xa1x", 5);
	expect_bad_payload("\x93\x01\x02\xc0", 4);
	/* negative type (fixint -1), negative req_id */
	expect_bad_payload("\x93\xff\x02\x80", 4);
	expect_bad_payload("\x93\x01\xff\x80", 4);
	/* type as a string, a float */
	expect_bad_payload("\x93\xa1\x31\x02\x80", 5);
	/* type over INT32_MAX (uint32 0x80000000) */
	expect_bad_payload("\x93\xce\x80\x00\x00\x00\x02\x80", 8);
	/* trailing bytes after the object */
	expect_bad_payload("\x93\x01\x02\x80\x00", 5);
	expect_bad_payload("\x93\x01\x02\x80\x93\x01\x02\x80", 8);
	/* truncated object inside a complete frame */
	expect_bad_payload("\x93\x01\x02\x81\xa1", 5);
	/* not msgpack at all: reserved byte 0xc1 */
	expect_bad_payload("\xc1\xc1\xc1\xc1", 4);
}

static void
test_frame_rejects_huge_counts(void **state)
{
	/* Found by tests/fuzz/fuzz-coord-frames: msgpack-c allocates a container
	 * from its announced count; more elements than bytes left is refused first */
	expect_bad_payload("\x93\x01\x02\xdf\xff\xff\xff\xff", 8);		 /* map32 */
	expect_bad_payload("\x93\x01\x02\x81\xa1k\xdd\x10\x00\x00\x00\x01", 12); /* array32 */
	expect_bad_payload("\x93\x01\x02\xde\x00\x02\xa1k\x01", 9);		 /* map16 short */
	expect_bad_payload("\x93\x01\x02\x81\xa1k\xdb\x7f\xff\xff\xff", 11);	 /* str32 */
	expect_bad_payload("\x93\x01\x02\x81\xa1k\xc6\xff\xff\xff\xff", 11);	 /* bin32 */
	expect_bad_payload("\x93\x01\x02\x81\xa1k\xc9\xff\xff\xff\xff\x01", 12); /* ext32 */
}

static void
test_frame_parse_every_type(void **state)
{
	/* {f: 1.5, b: bin "xy", s: str8 "abc", a: [nil, true, -1, -100, 70000, 2.0f],
	 *  m: {}, e: fixext1} passes the count check */
	Frame f = {0};
	static const char p[] =
	    "\x93\x0a\x01\x86\xa1\x66\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00\xa1\x62\xc4\x02\x78\x79"
	    "\xa1\x73\xd9\x03\x61\x62\x63\xa1\x61\x96\xc0\xc3\xff\xd0\x9c\xce\x00\x01\x11\x70\xca"
	    "\x40\x00\x00\x00\xa1\x6d\x80\xa1\x65\xd4\x01\x02";
	assert_int_equal(frame_parse(p, sizeof(p) - 1, &f), 0);
	assert_int_equal(f.body->via.map.size, 6);
	frame_done(&f);
}

static void
test_frame_parse_ok(void **state)
{
	Frame f = {0};
	assert_int_equal(frame_parse("\x93\x0a\xcd\x01\x00\x81\xa1k\x05", 9, &f), 0);
	assert_int_equal(f.type, 10);
	assert_int_equal(f.req_id, 256);
	assert_int_equal(f.body->via.map.size, 1);
	frame_done(&f);
}

static void
test_frame_write_rejects_oversize(void **state)
{
	struct evbuffer *b = evbuffer_new();
	char body[200];
	char *enc = (char *)0x1;
	size_t enc_len = 77;

	/* frame_write does not look into the body; only its size matters here */
	memset(body, 0, sizeof(body));
	body[0] = (char)0x80;
	/* payload = head (3 bytes for [3-array, fixint, fixint]) + body */
	assert_int_equal(frame_write(b, 1, 1, body, sizeof(body), 100), -EMSGSIZE);
	assert_int_equal(evbuffer_get_length(b), 0); /* nothing half-written */
	assert_int_equal(frame_encode(1, 1, body, sizeof(body), 100, &enc, &enc_len), -EMSGSIZE);
	assert_ptr_equal(enc, (char *)0x1);
	assert_int_equal(enc_len, 77);

	/* the limit is on the payload (without the 4-byte prefix), inclusive */
	assert_int_equal(frame_write(b, 1, 1, NULL, 0, 4), 0);
	assert_int_equal(evbuffer_get_length(b), 8);
	assert_int_equal(frame_write(b, 1, 1, NULL, 0, 3), -EMSGSIZE);
	assert_int_equal(evbuffer_get_length(b), 8);
	evbuffer_free(b);
}

/* A child process writes frames with frame_encode + write(2) through a
 * socketpair in awkward pieces; the parent reads with blocking read(2) into
 * an evbuffer and decodes them with frame_read. */
#define SOCK_FRAMES 200

static void
child_writer(int fd)
{
	for (int i = 0; i < SOCK_FRAMES; i++) {
		MpWriter w;
		char id[32];
		char *enc;
		size_t len;

		snprintf(id, sizeof(id), "frame-%d", i);
		pack_body(&w, id, (int64_t)i * -3);
		if (frame_encode(10 + i % 5, (uint64_t)i + 1, w.sbuf.data, w.sbuf.size, MAX_FRAME,
				 &enc, &len) < 0)
			_exit(2);
		mp_writer_done(&w);
		/* write in pieces of 1..5 bytes for the first frames, then whole */
		size_t off = 0;
		while (off < len) {
			size_t piece = i < 20 ? (size_t)(i % 5) + 1 : len - off;
			if (piece > len - off)
				piece = len - off;
			ssize_t n = write(fd, enc + off, piece);
			if (n <= 0)
				_exit(3);
			off += (size_t)n;
		}
		free(enc);
	}
	close(fd);
	_exit(0);
}

static void
test_frame_socketpair_fork(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		child_writer(sv[1]);
	}
	close(sv[1]);

	struct evbuffer *b = evbuffer_new();
	int got = 0;
	for (;;) {
		char buf[37]; /* odd size: reads end mid-frame */
		ssize_t n = read(sv[0], buf, sizeof(buf));
		assert_true(n >= 0);
		if (n == 0)
			break;
		evbuffer_add(b, buf, (size_t)n);
		Frame f = {0};
		int r;
		while ((r = frame_read(b, MAX_FRAME, &f)) == 1) {
			char id[32];
			snprintf(id, sizeof(id), "frame-%d", got);
			assert_int_equal(f.type, 10 + got % 5);
			assert_int_equal(f.req_id, (uint64_t)got + 1);
			assert_body(&f, id, (int64_t)got * -3);
			frame_done(&f);
			got++;
		}
		assert_int_equal(r, 0);
	}
	close(sv[0]);
	assert_int_equal(got, SOCK_FRAMES);
	assert_int_equal(evbuffer_get_length(b), 0);
	evbuffer_free(b);

	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_frame_round_trip),
	    cmocka_unit_test(test_frame_read_empty_and_short_header),
	    cmocka_unit_test(test_frame_split_reads),
	    cmocka_unit_test(test_frame_two_back_to_back),
	    cmocka_unit_test(test_frame_rejects_oversize),
	    cmocka_unit_test(test_frame_rejects_short_length),
	    cmocka_unit_test(test_frame_rejects_garbage),
	    cmocka_unit_test(test_frame_parse_ok),
	    cmocka_unit_test(test_frame_rejects_huge_counts),
	    cmocka_unit_test(test_frame_parse_every_type),
	    cmocka_unit_test(test_frame_write_rejects_oversize),
	    cmocka_unit_test(test_frame_socketpair_fork),
	};
	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
