/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "peer.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fd-util.h"
#include "log.h"
#include "macro.h"

typedef struct Pending {
	struct Pending *next;
	Peer *peer;
	uint64_t req_id;
	PeerReplyFn cb;
	void *userdata;
	struct event *timer;
} Pending;

/* A request held for a later answer: linked into its peer until answered,
 * freed or cancelled (peer = NULL then). */
struct PeerDeferred {
	PeerDeferred *next, **pprev;
	Peer *peer;
	uint64_t req_id;
	PeerCancelFn cancel;
	void *userdata;
};

struct Peer {
	struct event_base *base;
	struct bufferevent *bev; /* its output and input buffers; writes (flush) */
	struct event *rev;	 /* reads (sock_read_cb), not the bufferevent's */
	const PeerOps *ops;
	void *userdata;
	size_t max_frame;
	uint64_t next_req_id;
	Pending *pending;
	PeerDeferred *deferred;
	bool ready;
	bool closed;
	bool write_armed; /* output left over: the bufferevent's write event drains it */
	bool cork_listed; /* in cork_list, its output leaves at the uncork */
	Peer *cork_next;
	int dispatching;
	bool free_requested;
	PeerRole remote_role;
	pid_t remote_pid;
};

/* Frames sent while a cork is held wait in their peer's output buffer and
 * leave at the last peer_uncork(), one write per peer (per thread: a loop's
 * peers are all on its thread). */
static _Thread_local unsigned cork_depth;
static _Thread_local Peer *cork_list, *cork_last; /* first touched first */

static void
cork_unlist(Peer *p)
{
	if (!p->cork_listed)
		return;
	Peer *prev = NULL;
	for (Peer *q = cork_list; q; prev = q, q = q->cork_next)
		if (q == p) {
			if (prev)
				prev->cork_next = p->cork_next;
			else
				cork_list = p->cork_next;
			if (cork_last == p)
				cork_last = prev;
			break;
		}
	p->cork_listed = false;
	p->cork_next = NULL;
}

/* Write what p's output holds straight to the socket while it takes it; what
 * is left (EAGAIN, an error) arms the bufferevent's write event, which
 * drains it, or reports the error through event_cb as before. No epoll
 * change at all while the socket keeps up. */
static void
flush(Peer *p)
{
	if (p->closed || p->free_requested || p->write_armed)
		return;
	struct evbuffer *out = bufferevent_get_output(p->bev);
	evutil_socket_t fd = bufferevent_getfd(p->bev);
	/* the bufferevent keeps its output's start frozen but while it writes
	 * itself: the same here */
	evbuffer_unfreeze(out, 1);
	while (evbuffer_get_length(out) > 0) {
		int n = evbuffer_write(out, fd);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
	}
	evbuffer_freeze(out, 1);
	if (evbuffer_get_length(out) > 0) {
		p->write_armed = true;
		bufferevent_enable(p->bev, EV_WRITE);
	}
}

static void
kick(Peer *p)
{
	if (cork_depth == 0) {
		flush(p);
		return;
	}
	if (!p->cork_listed) {
		p->cork_listed = true;
		p->cork_next = NULL;
		if (cork_last)
			cork_last->cork_next = p;
		else
			cork_list = p;
		cork_last = p;
	}
}

void
peer_cork(void)
{
	cork_depth++;
}

void
peer_uncork(void)
{
	if (cork_depth == 0 || --cork_depth > 0)
		return;
	/* in the order their first frame was sent: an answer to the client
	 * that asked before the requests its handling made of others */
	while (cork_list) {
		Peer *p = cork_list;
		cork_list = p->cork_next;
		if (!cork_list)
			cork_last = NULL;
		p->cork_listed = false;
		p->cork_next = NULL;
		flush(p);
	}
}

/* The output drained: writes go straight to the socket again. */
static void
write_cb(struct bufferevent *bev, void *arg)
{
	Peer *p = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return;
	p->write_armed = false;
	bufferevent_disable(bev, EV_WRITE);
}

static void
pending_free(Pending *e)
{
	if (!e)
		return;
	if (e->timer)
		event_free(e->timer);
	free(e);
}

static Pending *
pending_take(Peer *p, uint64_t req_id)
{
	for (Pending **pp = &p->pending; *pp; pp = &(*pp)->next)
		if ((*pp)->req_id == req_id) {
			Pending *e = *pp;
			*pp = e->next;
			return e;
		}
	return NULL;
}

static void
deferred_detach(PeerDeferred *d)
{
	if (!d->peer)
		return;
	*d->pprev = d->next;
	if (d->next)
		d->next->pprev = d->pprev;
	d->next = NULL;
	d->pprev = NULL;
	d->peer = NULL;
}

static void
really_free(Peer *p)
{
	while (p->deferred) /* their owners still hold them, now detached */
		deferred_detach(p->deferred);
	while (p->pending) {
		Pending *e = p->pending;
		p->pending = e->next;
		pending_free(e);
	}
	cork_unlist(p);
	if (p->rev)
		event_free(p->rev); /* before the bufferevent closes the fd */
	if (p->bev)
		bufferevent_free(p->bev);
	free(p);
}

Peer *
peer_free(Peer *p)
{
	if (!p)
		return NULL;
	if (p->dispatching > 0) {
		p->free_requested = true;
		if (p->rev)
			event_del(p->rev);
		if (p->bev)
			bufferevent_disable(p->bev, EV_READ | EV_WRITE);
		return NULL;
	}
	really_free(p);
	return NULL;
}

/* Fail everything pending and tell the owner; called once. */
static void
peer_close(Peer *p, int err)
{
	if (p->closed)
		return;
	p->closed = true;
	if (p->rev)
		event_del(p->rev);
	bufferevent_disable(p->bev, EV_READ | EV_WRITE);
	p->dispatching++;
	while (p->deferred) {
		PeerDeferred *d = p->deferred;
		deferred_detach(d);
		if (d->cancel)
			d->cancel(d, d->userdata); /* may free d */
	}
	while (p->pending) {
		Pending *e = p->pending;
		p->pending = e->next;
		PeerReplyFn cb = e->cb;
		void *ud = e->userdata;
		pending_free(e);
		if (cb)
			cb(p, -ECONNRESET, NULL, ud);
	}
	if (p->ops->on_close)
		p->ops->on_close(p, err, p->userdata);
	p->dispatching--;
}

static int
send_frame(Peer *p, int type, uint64_t req_id, const MpWriter *body)
{
	if (p->closed)
		return -ECONNRESET;
	int r =
	    frame_write(bufferevent_get_output(p->bev), type, req_id, body ? body->sbuf.data : NULL,
			body ? body->sbuf.size : 0, p->max_frame);
	if (r == 0)
		kick(p);
	return r;
}

int
peer_reply(Peer *p, uint64_t req_id, const MpWriter *body)
{
	if (req_id == 0)
		return 0;
	return send_frame(p, MSG_REPLY, req_id, body);
}

int
peer_reply_error(Peer *p, uint64_t req_id, int err, const char *message)
{
	return peer_reply_error_reason(p, req_id, err, NULL, message);
}

int
peer_reply_error_reason(Peer *p, uint64_t req_id, int err, const char *reason, const char *message)
{
	MpWriter w;
	int r;

	if (req_id == 0)
		return 0;
	if (err > 0)
		err = -err;
	mp_writer_init(&w);
	mp_w_map(&w, reason ? 3 : 2);
	mp_w_int(&w, "code", err ? err : -EIO);
	mp_w_str(&w, "message", message ? message : strerror(err ? -err : EIO));
	if (reason)
		mp_w_str(&w, "reason", reason);
	r = send_frame(p, MSG_ERROR, req_id, &w);
	mp_writer_done(&w);
	return r;
}

int
peer_relay_error(Peer *p, uint64_t req_id, int err, const msgpack_object *body,
		 const char *fallback)
{
	const msgpack_object *m = body ? mp_map_get(body, "message") : NULL;
	_cleanup_free_ char *msg = m && m->type == MSGPACK_OBJECT_STR ? mp_obj_strdup(m) : NULL;
	char reason[PEER_REASON_MAX];

	return peer_reply_error_reason(p, req_id, err, peer_error_reason(body, reason),
				       msg ? msg : fallback);
}

const char *
peer_error_reason(const msgpack_object *body, char buf[static PEER_REASON_MAX])
{
	const msgpack_object *o = body ? mp_map_get(body, "reason") : NULL;

	if (!o || o->type != MSGPACK_OBJECT_STR || o->via.str.size == 0 ||
	    o->via.str.size >= PEER_REASON_MAX)
		return NULL;
	for (uint32_t i = 0; i < o->via.str.size; i++) {
		char ch = o->via.str.ptr[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_'))
			return NULL;
	}
	memcpy(buf, o->via.str.ptr, o->via.str.size);
	buf[o->via.str.size] = '\0';
	return buf;
}

int
peer_push(Peer *p, int type, const MpWriter *body)
{
	return send_frame(p, type, 0, body);
}

PeerDeferred *
peer_defer_id(Peer *p, uint64_t req_id)
{
	PeerDeferred *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->req_id = req_id;
	if (p->closed)
		return d; /* born detached: answering it sends nothing */
	d->peer = p;
	d->next = p->deferred;
	if (d->next)
		d->next->pprev = &d->next;
	d->pprev = &p->deferred;
	p->deferred = d;
	return d;
}

PeerDeferred *
peer_defer(Peer *p, const Frame *f)
{
	return peer_defer_id(p, f->req_id);
}

void
peer_deferred_on_cancel(PeerDeferred *d, PeerCancelFn cb, void *userdata)
{
	d->cancel = cb;
	d->userdata = userdata;
}

Peer *
peer_deferred_peer(const PeerDeferred *d)
{
	return d ? d->peer : NULL;
}

PeerDeferred *
peer_deferred_free(PeerDeferred *d)
{
	if (!d)
		return NULL;
	deferred_detach(d);
	free(d);
	return NULL;
}

int
peer_deferred_reply(PeerDeferred *d, const MpWriter *body)
{
	int r;

	if (!d)
		return -EINVAL;
	if (!d->peer)
		r = -ECONNRESET;
	else if ((r = peer_reply(d->peer, d->req_id, body)) < 0 && !d->peer->closed)
		(void)peer_reply_error_reason(d->peer, d->req_id, -EIO, REASON_INTERNAL,
					      "reply too large");
	peer_deferred_free(d);
	return r;
}

int
peer_deferred_error(PeerDeferred *d, int err, const char *reason, const char *message)
{
	int r;

	if (!d)
		return -EINVAL;
	r = d->peer ? peer_reply_error_reason(d->peer, d->req_id, err, reason, message)
		    : -ECONNRESET;
	peer_deferred_free(d);
	return r;
}

int
peer_deferred_relay_error(PeerDeferred *d, int err, const msgpack_object *body,
			  const char *fallback)
{
	int r;

	if (!d)
		return -EINVAL;
	r = d->peer ? peer_relay_error(d->peer, d->req_id, err, body, fallback) : -ECONNRESET;
	peer_deferred_free(d);
	return r;
}

typedef struct Relay {
	PeerDeferred *d;
	const PeerRelayOps *ops;
} Relay;

static void
relay_replied(Peer *to, int err, const msgpack_object *body, void *userdata)
{
	Relay *rl = userdata;
	PeerDeferred *d = TAKE_PTR(rl->d);
	const PeerRelayOps *ops = rl->ops;

	free(rl);
	if (err == -ECONNRESET || err == -ETIMEDOUT) {
		/* no answer from the other daemon: say so by reason, keep the errno */
		(void)peer_deferred_error(d, err, ops->unavailable_reason, ops->unavailable);
		return;
	}
	if (err < 0) {
		(void)peer_deferred_relay_error(d, err, body, ops->fallback);
		return;
	}
	if (ops->reply) {
		ops->reply(d, body);
		return;
	}
	MpWriter w;
	mp_writer_init(&w);
	if (body)
		msgpack_pack_object(&w.pk, *body);
	else
		mp_w_map(&w, 0);
	(void)peer_deferred_reply(d, &w);
	mp_writer_done(&w);
}

int
peer_relay(Peer *to, int type, const MpWriter *body, PeerDeferred *d, usec_t timeout,
	   const PeerRelayOps *ops)
{
	Relay *rl = calloc(1, sizeof(*rl));
	int r;

	if (!rl) {
		(void)peer_deferred_error(d, -ENOMEM, NULL, NULL);
		return -ENOMEM;
	}
	*rl = (Relay){.d = d, .ops = ops};
	r = peer_call(to, type, body, timeout, relay_replied, rl);
	if (r < 0) {
		free(rl);
		(void)peer_deferred_error(d, r, NULL, NULL);
	}
	return r;
}

static void
pending_timeout(evutil_socket_t fd, short what, void *arg)
{
	Pending *e = arg;
	Peer *p = e->peer;

	e = pending_take(p, e->req_id);
	if (!e)
		return;
	PeerReplyFn cb = e->cb;
	void *ud = e->userdata;
	pending_free(e);
	p->dispatching++;
	if (cb)
		cb(p, -ETIMEDOUT, NULL, ud);
	p->dispatching--;
	if (p->dispatching == 0 && p->free_requested)
		really_free(p);
}

int
peer_call(Peer *p, int type, const MpWriter *body, usec_t timeout, PeerReplyFn cb, void *userdata)
{
	if (!p || p->closed)
		return -ECONNRESET;
	Pending *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->peer = p;
	e->req_id = ++p->next_req_id;
	e->cb = cb;
	e->userdata = userdata;
	int r = send_frame(p, type, e->req_id, body);
	if (r < 0) {
		free(e);
		return r;
	}
	if (timeout > 0) {
		struct timeval tv;
		e->timer = evtimer_new(p->base, pending_timeout, e);
		if (!e->timer) {
			free(e);
			return -ENOMEM;
		}
		evtimer_add(e->timer, timeval_from_usec(&tv, timeout));
	}
	e->next = p->pending;
	p->pending = e;
	return 0;
}

void
peer_cancel_calls(Peer *p, void *userdata)
{
	if (!p)
		return;
	for (Pending **pp = &p->pending; *pp;) {
		if ((*pp)->userdata == userdata) {
			Pending *e = *pp;
			*pp = e->next;
			pending_free(e);
		} else
			pp = &(*pp)->next;
	}
}

static int
handle_hello(Peer *p, const Frame *f)
{
	MpReader r;
	uint64_t version = 0, pid = 0;
	const char *role = NULL;
	int rl;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "version", &version);
	mp_read_str(&r, "role", &role);
	mp_read_uint(&r, "pid", &pid);
	if (r.err < 0) {
		mp_reader_done(&r);
		return -EBADMSG;
	}
	rl = peer_role_from_name(role);
	mp_reader_done(&r);
	if (version != RW_PROTO_VERSION || rl < 0) {
		log_debug("peer HELLO refused: version %llu role %d", (unsigned long long)version,
			  rl);
		return -EPROTO;
	}
	p->remote_role = rl;
	p->remote_pid = (pid_t)pid;
	p->ready = true;
	return 0;
}

static void
dispatch(Peer *p, const Frame *f)
{
	if (!p->ready) {
		int r = f->type == MSG_HELLO ? handle_hello(p, f) : -EPROTO;
		if (r < 0) {
			peer_reply_error(p, f->req_id, r, "HELLO with protocol version expected");
			peer_close(p, r);
			return;
		}
		if (p->ops->on_ready)
			p->ops->on_ready(p, p->userdata);
		return;
	}
	if (f->type == MSG_REPLY || f->type == MSG_ERROR) {
		Pending *e = pending_take(p, f->req_id);
		if (!e)
			return; /* late reply after a timeout: ignore */
		PeerReplyFn cb = e->cb;
		void *ud = e->userdata;
		pending_free(e);
		if (!cb)
			return;
		if (f->type == MSG_REPLY) {
			cb(p, 0, f->body, ud);
		} else {
			const msgpack_object *c = mp_map_get(f->body, "code");
			int err = -EIO;
			if (c && c->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && c->via.i64 >= -4095)
				err = (int)c->via.i64;
			cb(p, err, f->body, ud);
		}
		return;
	}
	if (f->type == MSG_HELLO) {
		peer_reply_error(p, f->req_id, -EPROTO, "HELLO sent twice");
		return;
	}
	PeerHandler h =
	    msg_type_valid(f->type) && msg_allowed(f->type, p->remote_role, p->ops->local_role)
		? p->ops->handlers[f->type]
		: NULL;
	if (!h) {
		peer_reply_error(p, f->req_id, -ENOMSG, "message type not handled here");
		return;
	}
	int r = h(p, f, p->userdata);
	if (r < 0)
		peer_reply_error(p, f->req_id, r, NULL);
}

static void
read_cb(Peer *p)
{
	struct evbuffer *in = bufferevent_get_input(p->bev);

	/* the answers to one read leave in one write per peer */
	peer_cork();
	p->dispatching++;
	while (!p->closed && !p->free_requested) {
		Frame f;
		int r = frame_read(in, p->max_frame, &f);
		if (r == 0)
			break;
		if (r < 0) {
			log_debug_errno(r, "dropping %s peer after a framing error: %m",
					peer_role_name(p->remote_role));
			peer_close(p, r);
			break;
		}
		dispatch(p, &f);
		frame_done(&f);
	}
	p->dispatching--;
	peer_uncork();
	if (p->dispatching == 0 && p->free_requested)
		really_free(p);
}

static void event_cb(struct bufferevent *bev, short what, void *arg);

/* Up to this much per read: a bigger frame takes several reads */
#define READ_MAX 65536

/* The socket is readable: one readv into the input buffer, then dispatch.
 * The bufferevent's own read asks the socket's size (FIONREAD) before each
 * read: a system call per request of a client with one request in flight. */
static void
sock_read_cb(evutil_socket_t fd, short what, void *arg)
{
	Peer *p = arg;
	struct evbuffer *in = bufferevent_get_input(p->bev);
	struct evbuffer_iovec v[2];
	struct iovec iov[2];
	ssize_t n = -1;
	int err = ENOMEM;

	if (p->closed || p->free_requested)
		return;
	/* a socket bufferevent keeps its input's end frozen: but while it
	 * reads itself, as here */
	evbuffer_unfreeze(in, 0);
	int nv = evbuffer_reserve_space(in, READ_MAX, v, 2);
	if (nv > 0) {
		for (int i = 0; i < nv; i++)
			iov[i] = (struct iovec){v[i].iov_base, v[i].iov_len};
		n = readv(fd, iov, nv);
		err = errno;
		int used = 0;
		if (n > 0) {
			size_t left = (size_t)n;
			for (; used < nv && left > 0; used++) {
				v[used].iov_len = MIN(left, v[used].iov_len);
				left -= v[used].iov_len;
			}
		}
		(void)evbuffer_commit_space(in, v, used);
	}
	evbuffer_freeze(in, 0);
	if (n > 0) {
		read_cb(p);
		return;
	}
	if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
		return;
	errno = n == 0 ? 0 : err;
	event_cb(p->bev, BEV_EVENT_READING | (n == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), p);
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	Peer *p = arg;

	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	int err = (what & BEV_EVENT_ERROR) && errno ? -errno : -ECONNRESET;
	p->dispatching++;
	peer_close(p, err);
	p->dispatching--;
	if (p->dispatching == 0 && p->free_requested)
		really_free(p);
}

int
peer_new(struct event_base *base, int fd, const PeerOps *ops, void *userdata, size_t max_frame,
	 Peer **ret)
{
	Peer *p = calloc(1, sizeof(*p));
	MpWriter w;
	int r;

	if (!p) {
		safe_close(fd);
		return -ENOMEM;
	}
	fd_nonblock(fd, 1);
	p->base = base;
	p->ops = ops;
	p->userdata = userdata;
	p->max_frame = max_frame < FRAME_MIN_MAX ? FRAME_MIN_MAX : max_frame;
	p->remote_role = ROLE_CLIENT;
	p->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!p->bev) {
		safe_close(fd);
		free(p);
		return -ENOMEM;
	}
	/* reading is sock_read_cb's; writing is armed only while output waits
	 * for the socket (flush) */
	bufferevent_setcb(p->bev, NULL, write_cb, event_cb, p);
	p->rev = event_new(base, fd, EV_READ | EV_PERSIST, sock_read_cb, p);
	if (!p->rev || event_add(p->rev, NULL) < 0) {
		really_free(p);
		return -ENOMEM;
	}

	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_uint(&w, "version", RW_PROTO_VERSION);
	mp_w_str(&w, "role", peer_role_name(ops->local_role));
	mp_w_uint(&w, "pid", (uint64_t)getpid());
	r = peer_push(p, MSG_HELLO, &w);
	mp_writer_done(&w);
	if (r < 0) {
		really_free(p);
		return r;
	}
	*ret = p;
	return 0;
}

void *
peer_get_userdata(Peer *p)
{
	return p->userdata;
}

void
peer_set_userdata(Peer *p, void *userdata)
{
	p->userdata = userdata;
}

bool
peer_is_ready(Peer *p)
{
	return p && p->ready && !p->closed;
}

PeerRole
peer_remote_role(Peer *p)
{
	return p->remote_role;
}

pid_t
peer_remote_pid(Peer *p)
{
	return p->remote_pid;
}

size_t
peer_output_pending(Peer *p)
{
	return evbuffer_get_length(bufferevent_get_output(p->bev));
}
