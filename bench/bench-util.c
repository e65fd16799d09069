/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "bench-util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fd-util.h"
#include "mp-cursor.h"
#include "peer.h"
#include "proto.h"
#include "unix-socket.h"

int
bench_connect(BenchConn *c, const char *path)
{
	MpWriter w;
	Frame f;
	int r;

	*c = (BenchConn){.fd = unix_connect(path)};
	if (c->fd < 0)
		return c->fd;
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_uint(&w, "version", RW_PROTO_VERSION);
	mp_w_str(&w, "role", "client");
	mp_w_uint(&w, "pid", (uint64_t)getpid());
	char *buf;
	size_t len;
	r = frame_encode(MSG_HELLO, 0, w.sbuf.data, w.sbuf.size, 1 << 20, &buf, &len);
	mp_writer_done(&w);
	if (r < 0)
		return r;
	r = loop_write(c->fd, buf, len);
	free(buf);
	if (r < 0)
		return r;
	r = bench_recv(c, &f);
	if (r < 0)
		return r;
	r = f.type == MSG_HELLO ? 0 : -EPROTO;
	frame_done(&f);
	return r;
}

void
bench_close(BenchConn *c)
{
	safe_close(c->fd);
	free(c->buf);
	*c = (BenchConn){.fd = -1};
}

int64_t
bench_send(BenchConn *c, int type, const void *body, size_t len)
{
	char *buf;
	size_t n;
	uint64_t id = ++c->next_id;
	int r = frame_encode(type, id, body, len, 64 << 20, &buf, &n);
	if (r < 0)
		return r;
	r = loop_write(c->fd, buf, n);
	free(buf);
	return r < 0 ? r : (int64_t)id;
}

int
bench_try_frame(BenchConn *c, Frame *ret)
{
	if (c->len < 4)
		return 0;
	uint32_t n = (uint32_t)(unsigned char)c->buf[0] << 24 |
		     (uint32_t)(unsigned char)c->buf[1] << 16 |
		     (uint32_t)(unsigned char)c->buf[2] << 8 | (unsigned char)c->buf[3];
	if (c->len < 4 + (size_t)n)
		return 0;
	int r = frame_parse(c->buf + 4, n, ret);
	memmove(c->buf, c->buf + 4 + n, c->len - 4 - n);
	c->len -= 4 + n;
	return r < 0 ? r : 1;
}

int
bench_fill(BenchConn *c)
{
	if (c->cap - c->len < 65536) {
		size_t cap = c->cap ? c->cap * 2 : 1 << 20;
		char *b = realloc(c->buf, cap);
		if (!b)
			return -ENOMEM;
		c->buf = b;
		c->cap = cap;
	}
	ssize_t k = read(c->fd, c->buf + c->len, c->cap - c->len);
	if (k < 0)
		return -errno;
	if (k == 0)
		return -ECONNRESET;
	c->len += (size_t)k;
	return 0;
}

int
bench_buffered(BenchConn *c)
{
	return c->len > 0;
}

int
bench_recv(BenchConn *c, Frame *ret)
{
	for (;;) {
		int r = bench_try_frame(c, ret);
		if (r != 0)
			return r < 0 ? r : 0;
		r = bench_fill(c);
		if (r < 0)
			return r;
	}
}

int
bench_run_open(BenchConn *c, const char *thread, char run_id[37])
{
	MpWriter w;
	Frame f;
	MpReader rd;
	const char *id = NULL;

	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "thread_id", thread);
	int64_t req = bench_send(c, MSG_RUN_OPEN, w.sbuf.data, w.sbuf.size);
	mp_writer_done(&w);
	if (req < 0)
		return (int)req;
	int r = bench_recv(c, &f);
	if (r < 0)
		return r;
	mp_reader_init(&rd, f.body);
	mp_read_str(&rd, "run_id", &id);
	r = f.type == MSG_REPLY && rd.err == 0 ? 0 : -EPROTO;
	if (r == 0)
		snprintf(run_id, 37, "%s", id);
	mp_reader_done(&rd);
	frame_done(&f);
	return r;
}

double
bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double
bench_percentile(double *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(double), cmp_double);
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}
