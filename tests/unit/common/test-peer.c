/* SPDX-License-Identifier: MIT */
/*
 * test-peer.c — common/proto/peer.c over a real socketpair and a real
 * event loop: HELLO and version checks, request/reply matching, error
 * replies, unknown types, deadlines (-ETIMEDOUT), and every pending call
 * failing with -ECONNRESET when the other side goes away.
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
} Side;

typedef struct Call {
	int done;
	int err;
	char run_id[64];
	char message[64];
	char reason[PEER_REASON_MAX]; /* "" when the ERROR had none */
} Call;

static struct event_base *base;

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

static const PeerOps coord_ops = {ROLE_COORD, coord_handlers, on_ready, on_close};
static const PeerOps router_ops = {ROLE_ROUTER, router_handlers, on_ready, on_close};

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
	};
	return cmocka_run_group_tests_name("peer", tests, NULL, NULL);
}
