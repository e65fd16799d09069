/* SPDX-License-Identifier: MIT */
/*
 * append-floor — the floor of a run-log daemon for B2 (BENCH-RELIABILITY):
 * the least a server speaking coordinatord's IPC (HELLO, RUN_OPEN,
 * RUN_APPEND) to append-bench can do per event, and nothing else.
 *
 *   append-floor SOCK DIR
 *       serves SOCK until killed; LMDB in DIR, the flags coordinatord uses
 *
 * One thread, epoll; per readable connection one read(), its frames decoded
 * (msgpack, frame.c); every append read until no socket has more in one write
 * transaction (the key coordinatord writes, runId ‖ seq, the chunk as the
 * value, MDB_NOOVERWRITE), each touched run's 200-byte record rewritten,
 * one commit with fdatasync, then one reply frame ({seq}) per append and
 * one write() per connection. No JSON check of the chunk, no record parse
 * or serialisation, no nested transaction, no libevent: B2's own LMDB work
 * (lmdb-ref DIR N 64 16 200) plus the 64 round trips' socket and framing
 * work. coordinatord against it: how much of the rest is its own.
 */
#include "config.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "mp-cursor.h"
#include "proto.h"

#define MAX_RUNS 1024

typedef struct Conn {
	int fd;
	char *in;
	size_t len, cap;
	char *out;
	size_t olen, ocap;
	struct Conn *next_out; /* in the round's list of connections to write */
	int listed;
} Conn;

typedef struct Pend {
	Conn *c;
	uint64_t req_id;
	int run;
	int64_t seq;
} Pend;

static MDB_env *env;
static MDB_dbi events, runs;
static char run_ids[MAX_RUNS][37];
static int64_t last_seq[MAX_RUNS];
static int run_dirty[MAX_RUNS];
static int n_runs;
static Pend *pend;
static size_t n_pend, cap_pend;
static Conn *out_list;

static int
out_add(Conn *c, const char *p, size_t n)
{
	if (c->ocap - c->olen < n) {
		size_t cap = (c->ocap ? c->ocap * 2 : 4096) + n;
		char *b = realloc(c->out, cap);
		if (!b)
			return -ENOMEM;
		c->out = b;
		c->ocap = cap;
	}
	memcpy(c->out + c->olen, p, n);
	c->olen += n;
	if (!c->listed) {
		c->listed = 1;
		c->next_out = out_list;
		out_list = c;
	}
	return 0;
}

static MDB_txn *cur_txn; /* the round's write transaction, once it has an append */

static MDB_txn *
round_txn(void)
{
	if (!cur_txn && mdb_txn_begin(env, NULL, 0, &cur_txn))
		cur_txn = NULL;
	return cur_txn;
}

static int
reply(Conn *c, int type, uint64_t req_id, MpWriter *w)
{
	char *buf;
	size_t n;
	int r = frame_encode(type, req_id, w->sbuf.data, w->sbuf.size, 1 << 20, &buf, &n);
	if (r == 0) {
		r = out_add(c, buf, n);
		free(buf);
	}
	return r;
}

static int
handle(Conn *c, Frame *f)
{
	MpWriter w;
	MpReader rd;
	const char *run_id = NULL, *chunk = NULL;
	int r = 0;

	mp_writer_init(&w);
	if (f->type == MSG_HELLO) {
		mp_w_map(&w, 3);
		mp_w_uint(&w, "version", RW_PROTO_VERSION);
		mp_w_str(&w, "role", "coordinatord");
		mp_w_uint(&w, "pid", (uint64_t)getpid());
		r = reply(c, MSG_HELLO, 0, &w);
	} else if (f->type == MSG_RUN_OPEN && n_runs < MAX_RUNS) {
		int i = n_runs++;
		snprintf(run_ids[i], 37, "%08x-0000-4000-8000-%012x", (unsigned)(i * 2654435761U),
			 (unsigned)i);
		last_seq[i] = -1;
		mp_w_map(&w, 2);
		mp_w_str(&w, "run_id", run_ids[i]);
		mp_w_bool(&w, "created", true);
		r = reply(c, MSG_REPLY, f->req_id, &w);
	} else if (f->type == MSG_RUN_APPEND) {
		mp_reader_init(&rd, f->body);
		mp_read_str(&rd, "run_id", &run_id);
		mp_read_str(&rd, "chunk", &chunk);
		int run = -1;
		for (int i = 0; rd.err == 0 && i < n_runs && run < 0; i++)
			if (memcmp(run_ids[i], run_id, 36) == 0)
				run = i;
		if (run < 0 || rd.err < 0) {
			mp_reader_done(&rd);
			mp_writer_done(&w);
			return -EINVAL;
		}
		if (n_pend == cap_pend) {
			cap_pend = cap_pend ? cap_pend * 2 : 256;
			pend = realloc(pend, cap_pend * sizeof(*pend));
			if (!pend)
				abort();
		}
		/* the put now: the transaction is open for the round */
		MDB_txn *txn = round_txn();
		int64_t seq = ++last_seq[run];
		char key[44];
		memcpy(key, run_id, 36);
		for (int k = 0; k < 8; k++)
			key[36 + k] = (char)((uint64_t)seq >> (56 - 8 * k));
		MDB_val kv = {sizeof(key), key}, vv = {strlen(chunk), (void *)chunk};
		if (!txn || mdb_put(txn, events, &kv, &vv, MDB_NOOVERWRITE))
			abort();
		run_dirty[run] = 1;
		pend[n_pend++] = (Pend){.c = c, .req_id = f->req_id, .run = run, .seq = seq};
		mp_reader_done(&rd);
	} else {
		r = -ENOMSG;
	}
	mp_writer_done(&w);
	return r;
}

static void
conn_close(int ep, Conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1; /* freed never: a benchmark's connections live as long as it */
}

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: append-floor SOCK DIR\n");
		return 2;
	}
	MDB_txn *txn;
	mkdir(argv[2], 0700);
	if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) ||
	    mdb_env_set_mapsize(env, (size_t)1 << 32) ||
	    mdb_env_open(env, argv[2], MDB_NOTLS, 0600) || mdb_txn_begin(env, NULL, 0, &txn) ||
	    mdb_dbi_open(txn, "events", MDB_CREATE, &events) ||
	    mdb_dbi_open(txn, "runs", MDB_CREATE, &runs) || mdb_txn_commit(txn)) {
		fprintf(stderr, "append-floor: cannot open %s\n", argv[2]);
		return 1;
	}
	char rec[200];
	memset(rec, 'r', sizeof(rec));
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
	unlink(argv[1]);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0) {
		perror("append-floor: listen");
		return 1;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[256];
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	for (;;) {
		/* with appends waiting, poll (timeout 0) until no socket has more,
		 * then commit: what coordinatord's lowest-priority commit event
		 * does in libevent's loop */
		int n = epoll_wait(ep, evs, 256, cur_txn ? 0 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return 1;
		for (int i = 0; i < n; i++) {
			Conn *c = evs[i].data.ptr;
			if (!c) {
				int fd;
				while ((fd = accept4(lfd, NULL, NULL,
						     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
					c = calloc(1, sizeof(*c));
					c->fd = fd;
					ev = (struct epoll_event){.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
				}
				continue;
			}
			if (c->fd < 0)
				continue;
			if (c->cap - c->len < 65536) {
				c->cap = c->cap ? c->cap * 2 : 1 << 17;
				c->in = realloc(c->in, c->cap);
			}
			ssize_t k = read(c->fd, c->in + c->len, c->cap - c->len);
			if (k <= 0) {
				if (k == 0 || (errno != EAGAIN && errno != EINTR))
					conn_close(ep, c);
				continue;
			}
			c->len += (size_t)k;
			size_t at = 0;
			while (c->len - at >= 4) {
				const unsigned char *h = (const unsigned char *)c->in + at;
				uint32_t fl = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 |
					      (uint32_t)h[2] << 8 | h[3];
				if (c->len - at < 4 + (size_t)fl)
					break;
				Frame f;
				if (frame_parse(c->in + at + 4, fl, &f) < 0) {
					conn_close(ep, c);
					break;
				}
				if (handle(c, &f) < 0)
					abort();
				frame_done(&f);
				at += 4 + fl;
			}
			if (c->fd >= 0) {
				memmove(c->in, c->in + at, c->len - at);
				c->len -= at;
			}
		}
		if (cur_txn && n == 0) {
			for (int r = 0; r < n_runs; r++)
				if (run_dirty[r]) {
					MDB_val kv = {36, run_ids[r]}, vv = {sizeof(rec), rec};
					if (mdb_put(cur_txn, runs, &kv, &vv, 0))
						abort();
					run_dirty[r] = 0;
				}
			if (mdb_txn_commit(cur_txn)) /* with fdatasync */
				abort();
			cur_txn = NULL;
			for (size_t i = 0; i < n_pend; i++) {
				MpWriter w;
				mp_writer_init(&w);
				mp_w_map(&w, 1);
				mp_w_int(&w, "seq", pend[i].seq);
				if (pend[i].c->fd >= 0 &&
				    reply(pend[i].c, MSG_REPLY, pend[i].req_id, &w) < 0)
					abort();
				mp_writer_done(&w);
			}
			n_pend = 0;
		}
		/* one write per connection */
		for (Conn *c = out_list; c; c = c->next_out) {
			size_t off = 0;
			while (c->fd >= 0 && off < c->olen) {
				ssize_t k = write(c->fd, c->out + off, c->olen - off);
				if (k < 0 && errno == EINTR)
					continue;
				if (k <= 0)
					break; /* a client that does not read: not in this benchmark
						*/
				off += (size_t)k;
			}
			c->olen = 0;
			c->listed = 0;
		}
		out_list = NULL;
	}
}
