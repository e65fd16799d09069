/* SPDX-License-Identifier: MIT */
/*
 * test-tail.c — a run's tail in routerd (tail.c through ws.c): flow control,
 * the slow-client cut-off, and live pushes, end to end inside one process.
 *
 * A real Router listens on a free loopback port; a fake coordinatord in the
 * same event loop listens on <runtime_dir>/coordinatord.sock and speaks the
 * real frames (common/proto/peer.h): RUN_GET and RUN_READ answered from an
 * in-memory log, RUN_WATCH/UNWATCH acknowledged, RUN_EVENTS pushed by the
 * test. The client is a raw TCP socket that upgrades to WebSocket and reads
 * (or does not read) the frames itself. What is checked is what a client and
 * coordinatord can observe: the bytes routerd queues for a client that stops
 * reading stay bounded by the high mark (half of ws_max_queue) plus one
 * event, routerd stops asking for more, every event arrives exactly once and
 * in order once the client reads again, a client that never reads is cut
 * off after ws_stall_timeout_ms, and all tails together stay under
 * tails_max_queued_bytes (tail-budget.c: the one backed up longest goes).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/bufferevent.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "log.h"
#include "peer.h"
#include "router-fixture.h"
#include "router.h"
#include "unix-socket.h"

#define RUN_ID "0b7d6a3e-5f0c-4d7e-9a51-3c2f1e0d9b8a"
#define THREAD "thread-tail"
#define EVENT_TEXT 2048 /* bytes of padding per event */
#define N_EVENTS 300

static struct {
	struct event_base *base;
	RouterConf conf;
	Router *r;
	char dir[64];
	int port;
	/* the fake coordinatord */
	int lfd;
	struct event *accept_ev;
	Peer *coord;
	int n_events;  /* the log holds seqs 0 .. n_events-1 */
	bool terminal; /* the record says completed */
	unsigned reads;
	uint64_t read_events; /* events handed out by RUN_READ */
} T;

static char *
event_text(int seq)
{
	static char buf[EVENT_TEXT + 128];
	int n =
	    snprintf(buf, sizeof(buf), "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":\"%d:", seq);
	memset(buf + n, 'x', EVENT_TEXT);
	snprintf(buf + n + EVENT_TEXT, sizeof(buf) - (size_t)n - EVENT_TEXT, "\"}");
	return buf;
}

static void
w_record(MpWriter *w)
{
	char rec[256];

	snprintf(rec, sizeof(rec),
		 "{\"runId\":\"" RUN_ID "\",\"threadId\":\"" THREAD
		 "\",\"status\":\"%s\",\"lastSeq\":%d}",
		 T.terminal ? "completed" : "running", T.n_events - 1);
	mp_w_str(w, "record", rec);
}

static int
fake_run_get(Peer *p, const Frame *f, void *userdata)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 1);
	w_record(&w);
	int r = peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return r;
}

static int
fake_run_watch(Peer *p, const Frame *f, void *userdata)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	int r = peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return r;
}

static int
fake_run_read(Peer *p, const Frame *f, void *userdata)
{
	int64_t from = 0, max_bytes = INT64_MAX;
	uint64_t max = 0;
	MpReader mr;
	MpWriter w;
	size_t bytes = 0;
	int n = 0;

	mp_reader_init(&mr, f->body);
	mp_read_int(&mr, "from_seq", &from);
	mp_read_uint(&mr, "max", &max);
	mp_read_int(&mr, "max_bytes", &max_bytes);
	assert_int_equal(mr.err, 0);
	mp_reader_done(&mr);
	T.reads++;
	/* coordinatord's rule: up to max events and max_bytes, at least one */
	for (int64_t s = from + 1; s < T.n_events && (uint64_t)n < max; s++) {
		size_t len = strlen(event_text((int)s));
		if (n > 0 && (int64_t)(bytes + len) > max_bytes)
			break;
		bytes += len;
		n++;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_int(&w, "first_seq", from + 1);
	mp_w_key(&w, "events");
	msgpack_pack_array(&w.pk, (size_t)n);
	for (int i = 0; i < n; i++)
		mp_w_strv(&w, event_text((int)from + 1 + i));
	w_record(&w);
	int r = peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	T.read_events += (uint64_t)n;
	return r;
}

static const PeerHandler fake_handlers[_MSG_TYPE_MAX] = {
    [MSG_RUN_GET] = fake_run_get,
    [MSG_RUN_WATCH] = fake_run_watch,
    [MSG_RUN_UNWATCH] = fake_run_watch,
    [MSG_RUN_READ] = fake_run_read,
};

static void
fake_closed(Peer *p, int err, void *userdata)
{
	T.coord = peer_free(T.coord);
}

static const PeerOps fake_ops = {
    .local_role = ROLE_COORD,
    .handlers = fake_handlers,
    .on_close = fake_closed,
};

static void
fake_accept(evutil_socket_t fd, short what, void *arg)
{
	int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (cfd < 0)
		return;
	assert_null(T.coord);
	assert_int_equal(peer_new(T.base, cfd, &fake_ops, NULL, 16 << 20, &T.coord), 0);
}

/* Push seqs [first, n_events) as coordinatord does after a commit. */
static void
fake_push(int first)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_str(&w, "run_id", RUN_ID);
	mp_w_int(&w, "first_seq", first);
	mp_w_key(&w, "events");
	msgpack_pack_array(&w.pk, (size_t)(T.n_events - first));
	for (int s = first; s < T.n_events; s++)
		mp_w_strv(&w, event_text(s));
	w_record(&w);
	assert_int_equal(peer_push(T.coord, MSG_RUN_EVENTS, &w), 0);
	mp_writer_done(&w);
}

static void
spin(int ms)
{
	fixture_spin(T.base, ms);
}

static int
setup(void **state)
{
	char path[128];

	log_open("test-tail");
	log_set_max_level(LOG_CRIT);
	memset(&T, 0, sizeof(T));
	T.port = fixture_conf(&T.conf, "test-tail", T.dir);
	T.conf.ws_max_queue = 64 * 1024; /* high mark 32 KiB, low mark 16 KiB */
	T.conf.ws_stall_timeout_ms = 400;
	T.conf.tail_read_batch = 256;
	T.base = event_base_new();
	assert_non_null(T.base);
	snprintf(path, sizeof(path), "%s/%s", T.dir, RW_SOCK_COORD);
	T.lfd = unix_listen(path, 0600);
	assert_true(T.lfd >= 0);
	T.accept_ev = event_new(T.base, T.lfd, EV_READ | EV_PERSIST, fake_accept, NULL);
	event_add(T.accept_ev, NULL);
	assert_int_equal(router_new(T.base, &T.conf, &T.r), 0);
	assert_int_equal(router_start(T.r), 0);
	for (int i = 0; i < 3000 && !(T.coord && peer_is_ready(T.coord)); i++)
		spin(1);
	assert_non_null(T.coord);
	*state = &T;
	return 0;
}

static int
teardown(void **state)
{
	router_free(T.r);
	T.coord = peer_free(T.coord);
	event_free(T.accept_ev);
	close(T.lfd);
	event_base_free(T.base);
	fixture_conf_done(&T.conf, T.dir, RW_SOCK_COORD);
	return 0;
}

/* Connect with a small receive buffer and upgrade; returns the fd once the
 * 101 head was read (the loop keeps running meanwhile). */
static int
ws_open(int64_t last_seq)
{
	int fd = fixture_connect(T.port, 4096);
	char req[512], head[1024];
	size_t got = 0, off = 0;

	int n = snprintf(req, sizeof(req),
			 "GET /runs/" RUN_ID "/stream?threadId=" THREAD "&lastSeq=%" PRId64
			 " HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			 "Sec-WebSocket-Version: 13\r\n\r\n",
			 last_seq, T.port);
	/* read the head byte by byte: nothing of the frames after it */
	for (int round = 0; round < 5000; round++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		if (off < (size_t)n) {
			ssize_t k = write(fd, req + off, (size_t)n - off);
			if (k > 0)
				off += (size_t)k;
		}
		ssize_t k = read(fd, head + got, 1);
		if (k == 1) {
			got++;
			head[got] = '\0';
			if (got >= 4 && memcmp(head + got - 4, "\r\n\r\n", 4) == 0)
				break;
			assert_true(got < sizeof(head) - 1);
			continue;
		}
		usleep(200);
	}
	assert_true(got > 12);
	assert_memory_equal(head, "HTTP/1.1 101", 12);
	return fd;
}

/* Bytes routerd holds for the one tail's client, not yet written. */
static size_t
queued(void)
{
	if (!T.r->conns || !T.r->conns->bev)
		return 0;
	return evbuffer_get_length(bufferevent_get_output(T.r->conns->bev));
}

/* A client reading frames: every text frame must be the next seq; returns
 * after the close frame (its code in *close_code) or when ms ran out. */
typedef struct Reader {
	uint8_t buf[1 << 16];
	size_t len;
	int64_t next_seq;
	int statuses;
	int close_code;
} Reader;

static void
reader_take(Reader *rd)
{
	for (;;) {
		if (rd->len < 2)
			return;
		uint8_t op = rd->buf[0] & 0x0f;
		uint64_t plen = rd->buf[1] & 0x7f;
		size_t hl = 2;
		assert_int_equal(rd->buf[1] & 0x80, 0); /* a server never masks */
		if (plen == 126) {
			if (rd->len < 4)
				return;
			plen = (uint64_t)rd->buf[2] << 8 | rd->buf[3];
			hl = 4;
		} else if (plen == 127) {
			if (rd->len < 10)
				return;
			plen = 0;
			for (int i = 0; i < 8; i++)
				plen = plen << 8 | rd->buf[2 + i];
			hl = 10;
		}
		assert_true(hl + plen <= sizeof(rd->buf));
		if (rd->len < hl + plen)
			return;
		const char *p = (const char *)rd->buf + hl;
		if (op == 0x1) {
			if (plen > 7 && memcmp(p, "{\"seq\":", 7) == 0) {
				/* exactly the next event, exactly its text */
				int64_t seq = strtoll(p + 7, NULL, 10);
				assert_int_equal(seq, rd->next_seq);
				const char *want = event_text((int)seq);
				const char *chunk = strstr(p, "\"chunk\":");
				assert_non_null(chunk);
				assert_memory_equal(chunk + 8, want, strlen(want));
				rd->next_seq++;
			} else {
				assert_true(plen > 16 &&
					    memcmp(p, "{\"type\":\"status\"", 16) == 0);
				rd->statuses++;
			}
		} else if (op == 0x8) {
			rd->close_code = plen >= 2 ? ((uint8_t)p[0] << 8 | (uint8_t)p[1]) : 1005;
		}
		memmove(rd->buf, rd->buf + hl + plen, rd->len - hl - plen);
		rd->len -= hl + plen;
	}
}

static void
reader_run(Reader *rd, int fd, int ms)
{
	for (int i = 0; i < ms * 5 && !rd->close_code; i++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		ssize_t k = read(fd, rd->buf + rd->len, sizeof(rd->buf) - rd->len);
		if (k > 0) {
			rd->len += (size_t)k;
			reader_take(rd);
			continue;
		}
		if (k == 0)
			break;
		usleep(200);
	}
}

/* A client that stops reading: routerd queues no more than the high mark plus
 * one event and stops reading the log; reading again delivers every event once,
 * in order, then the status and close 1000. */
static void
test_backpressure_then_drain(void **state)
{
	T.n_events = N_EVENTS;
	T.terminal = true;
	T.reads = 0;
	T.read_events = 0;
	T.conf.ws_stall_timeout_ms = 60000; /* not this test's subject */
	int fd = ws_open(-1);
	size_t high = (size_t)T.conf.ws_max_queue / 2, peak = 0;
	uint64_t served = 0;
	int still = 0;

	/* not reading: the loop runs until routerd stops asking for events */
	for (int i = 0; i < 3000 && still < 300; i++) {
		spin(1);
		peak = MAX(peak, queued());
		still = T.read_events == served ? still + 1 : 0;
		served = T.read_events;
	}
	assert_int_equal(still, 300); /* it stopped reading the log */
	assert_true(served < N_EVENTS);
	assert_true(peak > 0);
	assert_true(peak <= high + EVENT_TEXT + 128);
	assert_int_equal(T.r->n_tails, 1);

	Reader *rd = calloc(1, sizeof(*rd));
	rd->next_seq = 0;
	reader_run(rd, fd, 10000);
	assert_int_equal(rd->next_seq, N_EVENTS);
	assert_int_equal(rd->statuses, 1);
	assert_int_equal(rd->close_code, 1000);
	/* a paused delivery drops the rest of its batch, read again later:
	 * some events are read twice, never many */
	assert_true(T.read_events >= N_EVENTS && T.read_events < 2 * N_EVENTS);
	free(rd);
	close(fd);
	for (int i = 0; i < 2000 && T.r->n_tails > 0; i++)
		spin(1);
	assert_int_equal(T.r->n_tails, 0);
}

/* A client that never reads is cut off after ws_stall_timeout_ms. */
static void
test_stalled_client_dropped(void **state)
{
	T.n_events = N_EVENTS;
	T.terminal = false;
	T.conf.ws_stall_timeout_ms = 300;
	int fd = ws_open(-1);
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 5000 && T.r->n_tails > 0; i++)
		spin(1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(T.r->n_tails, 0);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	assert_true(ms >= 300); /* not before its time */
	close(fd);
	for (int i = 0; i < 2000 && T.r->n_conns > 0; i++)
		spin(1);
}

/* Live: pushes after the catch-up arrive in order without a RUN_READ; a push
 * that starts past the cursor (a gap routerd did not see) makes it read the
 * missing events first; nothing is delivered twice. */
static void
test_live_pushes(void **state)
{
	T.n_events = 5;
	T.terminal = false;
	T.conf.ws_stall_timeout_ms = 60000;
	int fd = ws_open(1); /* resumes after seq 1 */
	Reader *rd = calloc(1, sizeof(*rd));

	rd->next_seq = 2;
	reader_run(rd, fd, 300);
	assert_int_equal(rd->next_seq, 5);
	unsigned reads = T.reads;

	T.n_events = 8; /* commit of 5..7, pushed */
	fake_push(5);
	reader_run(rd, fd, 300);
	assert_int_equal(rd->next_seq, 8);
	assert_int_equal(T.reads, reads); /* delivered from the push */

	T.n_events = 12; /* 8..9 committed but their push lost; 10..11 pushed */
	fake_push(10);
	reader_run(rd, fd, 300);
	assert_int_equal(rd->next_seq, 12);
	assert_true(T.reads > reads); /* the gap was read */

	T.n_events = 13;
	T.terminal = true;
	fake_push(11); /* overlaps the cursor: 11 is not sent again */
	reader_run(rd, fd, 2000);
	assert_int_equal(rd->next_seq, 13);
	assert_int_equal(rd->statuses, 1);
	assert_int_equal(rd->close_code, 1000);
	free(rd);
	close(fd);
	for (int i = 0; i < 2000 && T.r->n_tails > 0; i++)
		spin(1);
	assert_int_equal(T.r->n_tails, 0);
}

/* Whether a tail of routerd serves the client socket fd (its port in the
 * connection's address). */
static bool
tail_of(int fd)
{
	struct sockaddr_in sa;
	socklen_t l = sizeof(sa);
	char port[16];

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &l), 0);
	snprintf(port, sizeof(port), ":%u", ntohs(sa.sin_port));
	for (HttpConn *c = T.r->budget_first; c; c = c->budget_next) {
		const char *a = c->addr;
		size_t al = strlen(a), pl = strlen(port);
		if (al >= pl && streq(a + al - pl, port) && c->tail && !c->tail->finished)
			return true;
	}
	return false;
}

/* tails_max_queued_bytes: with four clients that do not read and room for
 * about two, the tail backed up longest is closed first and the total comes
 * back under the budget; a client that reads still gets every event. */
static void
test_total_budget_closes_the_longest_backed_up(void **state)
{
	int fds[4];
	Reader *rd = calloc(1, sizeof(*rd));

	T.n_events = N_EVENTS;
	T.terminal = true;
	T.conf.ws_stall_timeout_ms = 60000;
	T.conf.tails_max_queued_bytes = 80 * 1024; /* each holds ~34 KiB */
	fds[0] = ws_open(-1);
	for (int i = 0; i < 300; i++)
		spin(1); /* the first backs up before the others open */
	assert_true(T.r->tails_queued > 16 * 1024);
	for (int k = 1; k < 4; k++) {
		fds[k] = ws_open(-1);
		for (int i = 0; i < 100; i++)
			spin(1);
	}
	for (int i = 0; i < 5000 && T.r->tails_budget_closed < 2; i++)
		spin(1);
	assert_true(T.r->tails_budget_closed >= 2 && T.r->tails_budget_closed <= 3);
	assert_true(T.r->tails_queued <= (size_t)T.conf.tails_max_queued_bytes);
	assert_false(tail_of(fds[0])); /* backed up first, closed first */
	assert_true(tail_of(fds[3]));
	/* a reader is not held back by them (it drains below the low mark) */
	int fd = ws_open(-1);
	rd->next_seq = 0;
	reader_run(rd, fd, 5000);
	assert_int_equal(rd->next_seq, N_EVENTS);
	assert_int_equal(rd->close_code, 1000);
	free(rd);
	close(fd);
	for (int k = 0; k < 4; k++)
		close(fds[k]);
	for (int i = 0; i < 2000 && T.r->n_tails > 0; i++)
		spin(1);
	assert_int_equal(T.r->n_tails, 0);
	assert_int_equal(T.r->tails_queued, 0);
	T.conf.tails_max_queued_bytes = 64 * 1024 * 1024;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_backpressure_then_drain),
	    cmocka_unit_test(test_stalled_client_dropped),
	    cmocka_unit_test(test_live_pushes),
	    cmocka_unit_test(test_total_budget_closes_the_longest_backed_up),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
