/* SPDX-License-Identifier: MIT */
/*
 * test-peer.c — common/proto/peer.c over a real socketpair and a real
 * event loop: HELLO and version checks, request/reply matching, error
 * replies, unknown types, deadlines (-ETIMEDOUT), and every pending call
 * failing with -ECONNRESET when the other side goes away; deferred answers
 * (answered later, cancelled when the requester's connection closes) and
 * relays (a reply, an ERROR with its reason, a deadline passed on).
 */
#include "config.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "fd-util.h"
#include "macro.h"
#include "frame.h"
#include "mp-cursor.h"
#include "peer.h"

typedef struct Side {
	Peer *p;
	bool ready;
	int closed;
	int close_err;
	int requests; /* RUN_GET seen */
	bool answer_later;
	uint64_t held_req;
	PeerDeferred *held; /* "defer": answered by the test */
	int cancelled;
	Peer *relay_to; /* "relay:…": passed on to this peer */
	usec_t relay_timeout;
} Side;

typedef struct Call {
	int done;
	int err;
	char run_id[64];
	char message[64];
	char reason[PEER_REASON_MAX]; /* "" when the ERROR had none */
} Call;

static struct event_base *base;

static const PeerRelayOps relay_ops = {
    .fallback = "relay failed",
    .unavailable_reason = "shim_unavailable",
    .unavailable = "other side unavailable",
};

/* The far side of a relay: "ok" answers {run_id: "relayed"}, "fail" an ERROR
 * with a reason, "bare" an ERROR without message, "never" nothing. */
static int
on_sandbox_file(Peer *p, const Frame *f, void *ud)
{
	MpReader r;
	const char *op = NULL;
	int err;

	((Side *)ud)->requests++;
	mp_reader_init(&r, f->body);
	mp_read_str(&r, "op", &op);
	err = r.err;
	if (err == 0 && strcmp(op, "ok") == 0) {
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "run_id", "relayed");
		peer_reply(p, f->req_id, &w);
		mp_writer_done(&w);
	} else if (err == 0 && strcmp(op, "fail") == 0)
		peer_reply_error_reason(p, f->req_id, -EEXIST, "exists", "it exists");
	else if (err == 0 && strcmp(op, "bare") == 0)
		peer_reply_error(p, f->req_id, -EPERM, NULL);
	mp_reader_done(&r);
	return err;
}

static int
on_run_get(Peer *p, const Frame *f, void *ud)
{
	Side *s = ud;
	MpReader r;
	const char *id = NULL;

	s->requests++;
	mp_reader_init(&r, f->body);
	mp_read_str(&r, "run_id", &id);
	int err = r.err;
	if (err == 0 && strcmp(id, "missing") == 0)
		err = -ENOENT;
	if (err == 0 && strncmp(id, "reason=", 7) == 0) {
		peer_reply_error_reason(p, f->req_id, -EBUSY, id + 7, "busy: human text");
		mp_reader_done(&r);
		return 0;
	}
	if (err == 0 && strcmp(id, "late") == 0) {
		s->answer_later = true;
		s->held_req = f->req_id;
		mp_reader_done(&r);
		return 0;
	}
	if (err == 0 && strcmp(id, "defer") == 0) {
		s->held = peer_defer(p, f);
		mp_reader_done(&r);
		return s->held ? 0 : -ENOMEM;
	}
	if (err == 0 && strncmp(id, "relay:", 6) == 0) {
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 3);
		mp_w_str(&w, "key", "k");
		mp_w_str(&w, "op", id + 6);
		mp_w_str(&w, "path", "p");
		PeerDeferred *d = peer_defer(p, f);
		err = d ? 0 : -ENOMEM;
		if (d)
			(void)peer_relay(s->relay_to, MSG_SANDBOX_FILE, &w, d, s->relay_timeout,
					 &relay_ops);
		mp_writer_done(&w);
		mp_reader_done(&r);
		return err;
	}
	if (err == 0) {
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "run_id", id);
		peer_reply(p, f->req_id, &w);
		mp_writer_done(&w);
	}
	mp_reader_done(&r);
	return err;
}

static const PeerHandler coord_handlers[_MSG_TYPE_MAX] = {[MSG_RUN_GET] = on_run_get};
static const PeerHandler router_handlers[_MSG_TYPE_MAX] = {0};

static void
on_ready(Peer *p, void *ud)
{
	((Side *)ud)->ready = true;
}

static void
on_close(Peer *p, int err, void *ud)
{
	Side *s = ud;
	s->closed++;
	s->close_err = err;
}

static const PeerHandler shim_handlers[_MSG_TYPE_MAX] = {[MSG_SANDBOX_FILE] = on_sandbox_file};

static const PeerOps coord_ops = {ROLE_COORD, coord_handlers, on_ready, on_close};
static const PeerOps router_ops = {ROLE_ROUTER, router_handlers, on_ready, on_close};
static const PeerOps shim_ops = {ROLE_SHIM, shim_handlers, on_ready, on_close};

static void
reply_cb(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Call *c = ud;
	c->done++;
	c->err = err;
	if (err == 0) {
		const msgpack_object *o = mp_map_get(body, "run_id");
		if (o && o->type == MSGPACK_OBJECT_STR)
			snprintf(c->run_id, sizeof(c->run_id), "%.*s", (int)o->via.str.size,
				 o->via.str.ptr);
	} else {
		const msgpack_object *m = body ? mp_map_get(body, "message") : NULL;
		const char *reason = peer_error_reason(body, c->reason);
		if (m && m->type == MSGPACK_OBJECT_STR)
			snprintf(c->message, sizeof(c->message), "%.*s", (int)m->via.str.size,
				 m->via.str.ptr);
		if (!reason)
			c->reason[0] = '\0';
	}
}

static void
spin_until(int *flag, int want)
{
	for (int i = 0; i < 2000 && *flag < want; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(500);
}

static void
spin_until_bool(bool *flag)
{
	for (int i = 0; i < 2000 && !*flag; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(500);
}

static int
setup(void **state)
{
	base = event_base_new();
	return base ? 0 : -1;
}

static int
teardown(void **state)
{
	event_base_free(base);
	return 0;
}

static void
pair(Side *router, Side *coord)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[0], &router_ops, router, 1 << 20, &router->p), 0);
	assert_int_equal(peer_new(base, sv[1], &coord_ops, coord, 1 << 20, &coord->p), 0);
	spin_until_bool(&router->ready);
	spin_until_bool(&coord->ready);
	assert_true(router->ready && coord->ready);
	assert_int_equal(peer_remote_role(router->p), ROLE_COORD);
	assert_int_equal(peer_remote_role(coord->p), ROLE_ROUTER);
	assert_int_equal(peer_remote_pid(router->p), getpid());
}

static int
call_get(Side *s, const char *id, usec_t timeout, Call *c)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", id);
	int r = peer_call(s->p, MSG_RUN_GET, &w, timeout, reply_cb, c);
	mp_writer_done(&w);
	return r;
}

static void
test_peer_request_reply_matching(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, b = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "run-a", 5 * USEC_PER_SEC, &a), 0);
	assert_int_equal(call_get(&router, "run-b", 5 * USEC_PER_SEC, &b), 0);
	spin_until(&b.done, 1);
	assert_int_equal(a.done, 1);
	assert_int_equal(a.err, 0);
	assert_string_equal(a.run_id, "run-a");
	assert_string_equal(b.run_id, "run-b");
	assert_int_equal(coord.requests, 2);
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_error_reply_carries_the_errno(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, bad = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "missing", 5 * USEC_PER_SEC, &a), 0);
	/* a body without its field: -EBADMSG, and the connection stays */
	assert_int_equal(peer_call(router.p, MSG_RUN_GET, NULL, 5 * USEC_PER_SEC, reply_cb, &bad),
			 0);
	spin_until(&bad.done, 1);
	assert_int_equal(a.err, -ENOENT);
	assert_int_equal(bad.err, -EBADMSG);
	assert_int_equal(coord.closed, 0);
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_error_reason_travels_beside_the_message(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, none = {0}, bad = {0}, longer = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "reason=thread_busy", 5 * USEC_PER_SEC, &a), 0);
	assert_int_equal(call_get(&router, "missing", 5 * USEC_PER_SEC, &none), 0);
	/* not snake_case, or too long: read as no reason (an older or odd peer) */
	assert_int_equal(call_get(&router, "reason=Not Snake", 5 * USEC_PER_SEC, &bad), 0);
	assert_int_equal(
	    call_get(&router, "reason=a_reason_that_is_thirty_two_long", 5 * USEC_PER_SEC, &longer),
	    0);
	spin_until(&longer.done, 1);
	assert_int_equal(a.err, -EBUSY);
	assert_string_equal(a.reason, "thread_busy");
	assert_string_equal(a.message, "busy: human text");
	assert_int_equal(none.err, -ENOENT);
	assert_string_equal(none.reason, "");
	assert_string_equal(none.message, strerror(ENOENT));
	assert_int_equal(bad.err, -EBUSY);
	assert_string_equal(bad.reason, "");
	assert_int_equal(longer.err, -EBUSY);
	assert_string_equal(longer.reason, "");
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_unhandled_type_is_enomsg(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, b = {0};

	pair(&router, &coord);
	/* coordinatord's table has no RUN_READ handler here */
	assert_int_equal(peer_call(router.p, MSG_RUN_READ, NULL, 5 * USEC_PER_SEC, reply_cb, &a),
			 0);
	/* and a shim-bound message from a router is refused by direction */
	assert_int_equal(peer_call(router.p, MSG_EXEC_START, NULL, 5 * USEC_PER_SEC, reply_cb, &b),
			 0);
	spin_until(&b.done, 1);
	assert_int_equal(a.err, -ENOMSG);
	assert_int_equal(b.err, -ENOMSG);
	peer_free(router.p);
	peer_free(coord.p);
}

/* A client is refused a message no ALLOW row gives it (messages.def), even
 * one the receiver has a handler for: the handler never runs. */
static void
test_peer_undeclared_message_refused_for_role(void **state)
{
	static const PeerHandler handlers[_MSG_TYPE_MAX] = {
	    [MSG_RUN_GET] = on_run_get, [MSG_EXEC_OUTPUT] = on_run_get};
	static const PeerOps client_ops = {ROLE_CLIENT, router_handlers, on_ready, on_close};
	static const PeerOps coord_all_ops = {ROLE_COORD, handlers, on_ready, on_close};
	Side client = {0}, coord = {0};
	Call a = {0}, b = {0};
	int sv[2];
	MpWriter w;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[0], &client_ops, &client, 1 << 20, &client.p), 0);
	assert_int_equal(peer_new(base, sv[1], &coord_all_ops, &coord, 1 << 20, &coord.p), 0);
	spin_until_bool(&client.ready);
	spin_until_bool(&coord.ready);
	assert_int_equal(peer_remote_role(coord.p), ROLE_CLIENT);
	/* declared: ALLOW(RUN_GET, CLIENT, COORD) */
	assert_int_equal(call_get(&client, "r1", 5 * USEC_PER_SEC, &a), 0);
	/* not declared for a client: EXEC_OUTPUT is the shim's push */
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", "r2");
	assert_int_equal(peer_call(client.p, MSG_EXEC_OUTPUT, &w, 5 * USEC_PER_SEC, reply_cb, &b),
			 0);
	mp_writer_done(&w);
	spin_until(&b.done, 1);
	spin_until(&a.done, 1);
	assert_int_equal(a.err, 0);
	assert_string_equal(a.run_id, "r1");
	assert_int_equal(b.err, -ENOMSG);
	assert_int_equal(coord.requests, 1);
	peer_free(client.p);
	peer_free(coord.p);
}

static void
test_peer_deadline_is_etimedout(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "late", 20 * USEC_PER_MSEC, &a), 0);
	spin_until(&a.done, 1);
	assert_int_equal(a.done, 1);
	assert_int_equal(a.err, -ETIMEDOUT);
	/* the late reply is ignored, not delivered twice */
	assert_true(coord.answer_later);
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", "late");
	peer_reply(coord.p, coord.held_req, &w);
	mp_writer_done(&w);
	for (int i = 0; i < 50; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(200);
	assert_int_equal(a.done, 1);
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_close_fails_pending_calls(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, b = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "late", 0, &a), 0);
	assert_int_equal(call_get(&router, "late", 0, &b), 0);
	spin_until(&coord.requests, 2);
	coord.p = peer_free(coord.p); /* the other daemon dies */
	spin_until(&router.closed, 1);
	assert_int_equal(a.err, -ECONNRESET);
	assert_int_equal(b.err, -ECONNRESET);
	assert_int_equal(a.done + b.done, 2);
	assert_int_equal(router.closed, 1);
	/* nothing can be sent on a closed peer */
	Call c = {0};
	assert_int_equal(call_get(&router, "x", 0, &c), -ECONNRESET);
	peer_free(router.p);
}

static void
test_peer_cancel_calls_drops_without_callback(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "run-a", 5 * USEC_PER_SEC, &a), 0);
	peer_cancel_calls(router.p, &a);
	for (int i = 0; i < 100; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(200);
	assert_int_equal(a.done, 0);
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_refuses_frames_before_hello_and_bad_versions(void **state)
{
	Side coord = {0};
	int sv[2];
	char *buf;
	size_t len;
	char in[4096];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[1], &coord_ops, &coord, 1 << 20, &coord.p), 0);
	/* a RUN_GET before any HELLO */
	assert_int_equal(frame_encode(MSG_RUN_GET, 7, NULL, 0, 1 << 20, &buf, &len), 0);
	assert_int_equal(write(sv[0], buf, len), (ssize_t)len);
	free(buf);
	spin_until(&coord.closed, 1);
	assert_int_equal(coord.closed, 1);
	assert_int_equal(coord.close_err, -EPROTO);
	assert_false(coord.ready);
	/* what came back: its HELLO, then an ERROR for request 7 */
	ssize_t n = read(sv[0], in, sizeof(in));
	assert_true(n > 8);
	close(sv[0]);
	peer_free(coord.p);

	/* a HELLO with another protocol version */
	Side c2 = {0};
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[1], &coord_ops, &c2, 1 << 20, &c2.p), 0);
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_uint(&w, "version", RW_PROTO_VERSION + 1);
	mp_w_str(&w, "role", "routerd");
	mp_w_uint(&w, "pid", 1);
	assert_int_equal(frame_encode(MSG_HELLO, 0, w.sbuf.data, w.sbuf.size, 1 << 20, &buf, &len),
			 0);
	mp_writer_done(&w);
	assert_int_equal(write(sv[0], buf, len), (ssize_t)len);
	free(buf);
	spin_until(&c2.closed, 1);
	assert_int_equal(c2.close_err, -EPROTO);
	close(sv[0]);
	peer_free(c2.p);
}

static void
test_peer_oversize_frame_drops_the_connection(void **state)
{
	Side coord = {0};
	int sv[2];
	unsigned char hdr[4] = {0x7f, 0xff, 0xff, 0xff};

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[1], &coord_ops, &coord, 4096, &coord.p), 0);
	assert_int_equal(write(sv[0], hdr, 4), 4);
	spin_until(&coord.closed, 1);
	assert_int_equal(coord.closed, 1);
	assert_int_equal(coord.close_err, -EMSGSIZE);
	close(sv[0]);
	peer_free(coord.p);
}

static void
on_cancel(PeerDeferred *d, void *ud)
{
	Side *s = ud;
	s->cancelled++;
	assert_null(peer_deferred_peer(d));
}

static void
test_peer_deferred_answer_later(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, b = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "defer", 5 * USEC_PER_SEC, &a), 0);
	spin_until(&coord.requests, 1);
	assert_non_null(coord.held);
	assert_ptr_equal(peer_deferred_peer(coord.held), coord.p);
	/* the connection serves other requests meanwhile */
	assert_int_equal(call_get(&router, "run-b", 5 * USEC_PER_SEC, &b), 0);
	spin_until(&b.done, 1);
	assert_int_equal(a.done, 0);
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", "later");
	assert_int_equal(peer_deferred_reply(TAKE_PTR(coord.held), &w), 0);
	mp_writer_done(&w);
	spin_until(&a.done, 1);
	assert_int_equal(a.err, 0);
	assert_string_equal(a.run_id, "later");

	/* an ERROR later, with its reason */
	Call c = {0};
	assert_int_equal(call_get(&router, "defer", 5 * USEC_PER_SEC, &c), 0);
	spin_until(&coord.requests, 3);
	assert_int_equal(peer_deferred_error(TAKE_PTR(coord.held), -EBUSY, "busy", "busy now"), 0);
	spin_until(&c.done, 1);
	assert_int_equal(c.err, -EBUSY);
	assert_string_equal(c.reason, "busy");
	assert_string_equal(c.message, "busy now");
	peer_free(router.p);
	peer_free(coord.p);
}

static void
test_peer_deferred_dropped_on_close(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0}, b = {0};
	PeerDeferred *first;

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "defer", 0, &a), 0);
	spin_until(&coord.requests, 1);
	first = TAKE_PTR(coord.held);
	peer_deferred_on_cancel(first, on_cancel, &coord);
	assert_int_equal(call_get(&router, "defer", 0, &b), 0);
	spin_until(&coord.requests, 2);
	/* without a cancel callback: detached silently */
	router.p = peer_free(router.p); /* the requester goes away */
	spin_until(&coord.closed, 1);
	assert_int_equal(coord.cancelled, 1);
	assert_int_equal(coord.closed, 1);
	assert_null(peer_deferred_peer(first));
	assert_null(peer_deferred_peer(coord.held));
	/* answering a detached one sends nothing, and releases it */
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 0);
	assert_int_equal(peer_deferred_reply(first, &w), -ECONNRESET);
	mp_writer_done(&w);
	assert_int_equal(peer_deferred_error(TAKE_PTR(coord.held), -EIO, NULL, NULL), -ECONNRESET);
	/* and a deferred taken on a closed peer is born detached */
	PeerDeferred *late = peer_defer_id(coord.p, 9);
	assert_non_null(late);
	assert_null(peer_deferred_peer(late));
	peer_deferred_free(late);
	peer_free(coord.p);
}

static void
test_peer_deferred_outlives_a_freed_peer(void **state)
{
	Side router = {0}, coord = {0};
	Call a = {0};

	pair(&router, &coord);
	assert_int_equal(call_get(&router, "defer", 0, &a), 0);
	spin_until(&coord.requests, 1);
	peer_deferred_on_cancel(coord.held, on_cancel, &coord);
	coord.p = peer_free(coord.p); /* freed by its owner: no callbacks, like calls */
	assert_int_equal(coord.cancelled, 0);
	assert_null(peer_deferred_peer(coord.held));
	assert_int_equal(peer_deferred_error(TAKE_PTR(coord.held), -EIO, NULL, NULL), -ECONNRESET);
	peer_free(router.p);
}

/* router -> coord (relays) -> shim */
static void
trio(Side *router, Side *coord, Side *coord2, Side *shim)
{
	int sv[2];

	pair(router, coord);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(peer_new(base, sv[0], &coord_ops, coord2, 1 << 20, &coord2->p), 0);
	assert_int_equal(peer_new(base, sv[1], &shim_ops, shim, 1 << 20, &shim->p), 0);
	spin_until_bool(&coord2->ready);
	spin_until_bool(&shim->ready);
	coord->relay_to = coord2->p;
	coord->relay_timeout = 30 * USEC_PER_MSEC;
}

static void
test_peer_relay_reply_error_and_deadline(void **state)
{
	Side router = {0}, coord = {0}, coord2 = {0}, shim = {0};
	Call ok = {0}, fail = {0}, bare = {0}, never = {0};

	trio(&router, &coord, &coord2, &shim);
	assert_int_equal(call_get(&router, "relay:ok", 5 * USEC_PER_SEC, &ok), 0);
	assert_int_equal(call_get(&router, "relay:fail", 5 * USEC_PER_SEC, &fail), 0);
	assert_int_equal(call_get(&router, "relay:bare", 5 * USEC_PER_SEC, &bare), 0);
	assert_int_equal(call_get(&router, "relay:never", 5 * USEC_PER_SEC, &never), 0);
	spin_until(&never.done, 1);
	/* the reply, as it is */
	assert_int_equal(ok.err, 0);
	assert_string_equal(ok.run_id, "relayed");
	/* an ERROR: its code, message and reason */
	assert_int_equal(fail.err, -EEXIST);
	assert_string_equal(fail.reason, "exists");
	assert_string_equal(fail.message, "it exists");
	/* the ERROR's own message (strerror here) */
	assert_int_equal(bare.err, -EPERM);
	assert_string_equal(bare.reason, "");
	assert_string_equal(bare.message, strerror(EPERM));
	/* no answer by the deadline: the errno, and the unavailable reason */
	assert_int_equal(never.err, -ETIMEDOUT);
	assert_string_equal(never.reason, "shim_unavailable");
	assert_string_equal(never.message, "other side unavailable");

	/* the far side gone: -ECONNRESET, same reason; sending fails at once */
	Call lost = {0}, refused = {0};
	coord.relay_timeout = 5 * USEC_PER_SEC;
	assert_int_equal(call_get(&router, "relay:never", 5 * USEC_PER_SEC, &lost), 0);
	spin_until(&shim.requests, 5);
	assert_int_equal(shim.requests, 5);
	shim.p = peer_free(shim.p);
	spin_until(&lost.done, 1);
	assert_int_equal(lost.err, -ECONNRESET);
	assert_string_equal(lost.reason, "shim_unavailable");
	assert_int_equal(call_get(&router, "relay:ok", 5 * USEC_PER_SEC, &refused), 0);
	spin_until(&refused.done, 1);
	assert_int_equal(refused.err, -ECONNRESET);
	assert_string_equal(refused.reason, "");
	peer_free(router.p);
	peer_free(coord.p);
	peer_free(coord2.p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_peer_request_reply_matching, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_error_reply_carries_the_errno, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_error_reason_travels_beside_the_message,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_unhandled_type_is_enomsg, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_deadline_is_etimedout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_close_fails_pending_calls, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_cancel_calls_drops_without_callback, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_refuses_frames_before_hello_and_bad_versions,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_oversize_frame_drops_the_connection, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_deferred_answer_later, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_deferred_dropped_on_close, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_undeclared_message_refused_for_role, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_deferred_outlives_a_freed_peer, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_relay_reply_error_and_deadline, setup,
					    teardown),
	};
	return cmocka_run_group_tests_name("peer", tests, NULL, NULL);
}
