/* SPDX-License-Identifier: MIT */
/*
 * forward.c — cluster mode: any node serves every thread (docs/CLUSTER.md
 * "Forwarding").
 *
 * routerd stays cluster-unaware: it asks its local coordinatord. A request
 * about a thread another node owns is forwarded to that node's coordinatord
 * over NATS request/reply (rw.node.<node>.rpc, cluster_request): the request
 * frame as it came (frame_encode()'s bytes), answered with the reply frame
 * (REPLY or ERROR) as the owner's handlers produced it, which is relayed to
 * the client. No answer within the timeout, or no coordinatord serving the
 * owner's subject: ERROR reason owner_unreachable (-EHOSTUNREACH; HTTP 503
 * through routerd's coord_reasons). A request that reaches the owner after
 * its deadline (the owner was stopped) is dropped there unexecuted
 * (cluster.h), so a request reported unreachable never runs later.
 *
 * Serving: each node subscribes to its own subject and passes each request
 * through a loopback connection (a socketpair) to its own request handlers,
 * as routerd would (role router, so a read names its thread): the same
 * checks, the same deferred answers, nothing re-implemented. Requests that
 * came that way are marked (Client.forwarded) and never forwarded again: a
 * node that is not the owner any more answers not_owner.
 *
 * Which node: RUN_START and a thread's file and snapshot calls claim the
 * thread (placement.c), and the claim's answer names the owner; RUN_GET,
 * RUN_CANCEL, THREAD_RUNS and CHAT_HYDRATE look the owner up
 * (cluster_owner(), at the bucket's leader) unless this node owns the
 * thread; a thread no node owns is served here (it has no runs anywhere).
 * RUN_READ and RUN_WATCH are not forwarded: remote.c serves them from
 * JetStream.
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cluster/cluster.h"
#include "frame.h"
#include "macro.h"

/* A forwarded request's answer, when the owner handles it at once (RUN_START,
 * reads, a cancel). Files and snapshots wait for the owner's shim. */
#define FORWARD_TIMEOUT_MS 4000
#define FORWARD_FILE_TIMEOUT_MS 65000
/* A cancel is answered when the run's processes are gone: longer than a read,
 * within routerd's coord_timeout_ms (10 s by default). */
#define FORWARD_CANCEL_TIMEOUT_MS 8000

typedef struct Outgoing {
	struct Outgoing *next;
	struct Forwarder *fw;
	PeerDeferred *d;
	ClusterRequest *rq;
	int64_t timeout_ms;
	char owner[CLUSTER_NODE_MAX];
} Outgoing;

typedef struct Incoming {
	struct Incoming *next;
	struct Forwarder *fw;
	ClusterRpc *req;
} Incoming;

typedef struct Lookup {
	struct Lookup *next;
	struct Forwarder *fw;
	PeerDeferred *d;
	PeerHandler h;
	void *ud;
	int type;
	char *frame;
	size_t len;
	char thread[];
} Lookup;

typedef struct Forwarder {
	Coordinator *c;
	Peer *loop; /* our end of the loopback (role router) */
	Outgoing *out;
	Incoming *in;
	Lookup *lookups;
} Forwarder;

int
forward_encode(const Frame *f, char **ret, size_t *ret_len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int r = -ENOMEM;

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	if (msgpack_pack_object(&pk, *f->body) == 0)
		r = frame_encode(f->type, f->req_id, sb.data, sb.size, SIZE_MAX, ret, ret_len);
	msgpack_sbuffer_destroy(&sb);
	return r;
}

/* ---------- sending: this node's clients, another node's thread ---------- */

static void
out_unlink(Outgoing *o)
{
	for (Outgoing **pp = &o->fw->out; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			break;
		}
}

static void
out_replied(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	Outgoing *o = userdata;
	PeerDeferred *d = TAKE_PTR(o->d);
	Frame f;
	char m[200];

	out_unlink(o);
	if (err == -ETIMEDOUT || err == -EHOSTUNREACH) {
		if (err == -ETIMEDOUT)
			snprintf(m, sizeof(m),
				 "cluster node '%s' (the thread's owner) did not answer within "
				 "%" PRId64 " ms",
				 o->owner, o->timeout_ms);
		else
			snprintf(m, sizeof(m),
				 "cluster node '%s' (the thread's owner) is not serving: its "
				 "coordinatord is not running",
				 o->owner);
		log_warning("Forwarding to node %s failed: %s", o->owner, m);
		(void)peer_deferred_error(d, -EHOSTUNREACH, "owner_unreachable", m);
	} else if (err < 0) {
		(void)peer_deferred_error(d, -EAGAIN, "cluster_unavailable",
					  "the cluster (NATS) is not reachable");
	} else if (len < FRAME_HEADER_SIZE || frame_parse((const char *)data + FRAME_HEADER_SIZE,
							  len - FRAME_HEADER_SIZE, &f) < 0) {
		(void)peer_deferred_error(d, -EIO, "internal", "malformed answer from a node");
	} else {
		if (f.type == MSG_REPLY) {
			MpWriter w;
			mp_writer_init(&w);
			msgpack_pack_object(&w.pk, *f.body);
			(void)peer_deferred_reply(d, &w);
			mp_writer_done(&w);
		} else {
			const msgpack_object *code = mp_map_get(f.body, "code");
			int e = -EIO;
			if (code && code->type == MSGPACK_OBJECT_NEGATIVE_INTEGER &&
			    code->via.i64 >= -4095)
				e = (int)code->via.i64;
			(void)peer_deferred_relay_error(d, e, f.body, "forwarded request failed");
		}
		frame_done(&f);
	}
	free(o);
}

/* The client went away first: nobody waits for the answer. */
static void
out_cancelled(PeerDeferred *d, void *userdata)
{
	Outgoing *o = userdata;
	cluster_request_cancel(o->rq);
	out_unlink(o);
	peer_deferred_free(o->d);
	free(o);
}

static int64_t
forward_timeout(Coordinator *c, int type)
{
	switch (type) {
	case MSG_THREAD_FILE: return FORWARD_FILE_TIMEOUT_MS;
	case MSG_RUN_CANCEL: return FORWARD_CANCEL_TIMEOUT_MS;
	case MSG_SNAPSHOT_CREATE:
	case MSG_SNAPSHOT_RESTORE: return c->conf.snapshot_wait_ms + FORWARD_TIMEOUT_MS;
	default: return FORWARD_TIMEOUT_MS;
	}
}

void
forward_deferred(Coordinator *c, PeerDeferred *d, int type, const char *frame, size_t len,
		 const char *owner)
{
	Forwarder *fw = c->fwd;
	Outgoing *o = fw ? calloc(1, sizeof(*o)) : NULL;
	int r;

	if (!o) {
		(void)peer_deferred_error(d, -ENOMEM, NULL, NULL);
		return;
	}
	o->fw = fw;
	o->d = d;
	o->timeout_ms = forward_timeout(c, type);
	snprintf(o->owner, sizeof(o->owner), "%s", owner);
	r = cluster_request(c->cluster, owner, frame, len, o->timeout_ms, out_replied, o, &o->rq);
	if (r == -EMSGSIZE) {
		(void)peer_deferred_error(d, -EMSGSIZE, "too_large",
					  "the request is larger than the cluster forwards between "
					  "nodes (NATS max_payload)");
		free(o);
		return;
	}
	if (r < 0) {
		(void)peer_deferred_error(d, -EAGAIN, "cluster_unavailable",
					  "the cluster cannot forward the request now");
		free(o);
		return;
	}
	peer_deferred_on_cancel(d, out_cancelled, o);
	o->next = fw->out;
	fw->out = o;
}

static void
lookup_free(Lookup *l)
{
	for (Lookup **pp = &l->fw->lookups; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	peer_deferred_free(l->d);
	free(l->frame);
	free(l);
}

static void
on_owner(Cluster *cluster, int err, const ClusterOwner *owner, void *userdata)
{
	Lookup *l = userdata;
	Coordinator *c = l->fw->c;

	if (err == 0 && !streq(owner->node, cluster_node(cluster))) {
		forward_deferred(c, TAKE_PTR(l->d), l->type, l->frame, l->len, owner->node);
	} else if (err == 0 || err == -ENOENT) {
		/* this node's, or nobody's (no runs anywhere): answered here */
		Peer *p = peer_deferred_peer(l->d);
		Frame f;
		if (err == 0)
			placement_own(c, l->thread);
		if (p && frame_parse(l->frame + FRAME_HEADER_SIZE, l->len - FRAME_HEADER_SIZE,
				     &f) == 0) {
			c->route_here = true;
			int r = l->h(p, &f, l->ud);
			c->route_here = false;
			frame_done(&f);
			if (r < 0)
				(void)peer_deferred_error(TAKE_PTR(l->d), r, NULL, NULL);
		}
	} else {
		(void)peer_deferred_error(TAKE_PTR(l->d), -EAGAIN, "cluster_unavailable",
					  "the cluster did not say who owns the thread");
	}
	lookup_free(l);
}

bool
forward_by_thread(Coordinator *c, Peer *p, const Frame *f, const char *thread_id, PeerHandler h,
		  void *ud)
{
	Forwarder *fw = c->fwd;
	Client *cl = ud;

	if (!fw || c->route_here || cl->forwarded || !thread_id || placement_owns(c, thread_id))
		return false;
	if (placement_refuse_unready(c, p, f))
		return true;
	size_t tl = strlen(thread_id) + 1;
	Lookup *l = calloc(1, sizeof(*l) + tl);
	int r = l ? forward_encode(f, &l->frame, &l->len) : -ENOMEM;
	if (r == 0 && !(l->d = peer_defer(p, f)))
		r = -ENOMEM;
	if (r == 0) {
		l->fw = fw;
		l->h = h;
		l->ud = ud;
		l->type = f->type;
		memcpy(l->thread, thread_id, tl);
		l->next = fw->lookups;
		fw->lookups = l;
		r = cluster_owner(c->cluster, thread_id, on_owner, l);
		if (r == 0)
			return true;
		l->d = peer_deferred_free(l->d); /* answered below */
		lookup_free(l);
	} else if (l) {
		peer_deferred_free(l->d);
		free(l->frame);
		free(l);
	}
	if (r == -EINVAL)
		return false; /* not a cluster key: no node can own it; the handler answers */
	(void)peer_reply_error_reason(p, f->req_id, -EAGAIN, "cluster_unavailable",
				      "the cluster cannot look the thread's owner up now");
	return true;
}

/* ---------- serving: requests other nodes forwarded here ---------- */

static bool
forwardable(int type)
{
	switch (type) {
	case MSG_RUN_START:
	case MSG_RUN_GET:
	case MSG_RUN_CANCEL:
	case MSG_THREAD_RUNS:
	case MSG_THREAD_FILE:
	case MSG_SNAPSHOT_CREATE:
	case MSG_SNAPSHOT_RESTORE:
	case MSG_CHAT_HYDRATE: return true;
	default: return false;
	}
}

static void
in_unlink(Incoming *in)
{
	for (Incoming **pp = &in->fw->in; *pp; pp = &(*pp)->next)
		if (*pp == in) {
			*pp = in->next;
			break;
		}
}

/* Answer in's requester with a frame of type and body (NULL: an ERROR of err). */
static void
in_answer(Incoming *in, int type, const msgpack_object *body, int err, const char *msg)
{
	Coordinator *c = in->fw->c;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	MpWriter w;

	mp_writer_init(&w);
	if (body)
		msgpack_pack_object(&w.pk, *body);
	else {
		mp_w_map(&w, 3);
		mp_w_int(&w, "code", err);
		mp_w_str(&w, "message", msg);
		mp_w_str(&w, "reason", "owner_unreachable");
	}
	if (frame_encode(type, 0, w.sbuf.data, w.sbuf.size, cluster_rpc_max(c->cluster), &buf,
			 &len) == 0)
		(void)cluster_rpc_respond(c->cluster, TAKE_PTR(in->req), buf, len);
	else {
		/* too big for NATS: say so rather than time out */
		_cleanup_free_ char *b2 = NULL;
		MpWriter e;
		mp_writer_init(&e);
		mp_w_map(&e, 3);
		mp_w_int(&e, "code", -EMSGSIZE);
		mp_w_str(&e, "message",
			 "the answer is larger than the cluster forwards between nodes (NATS "
			 "max_payload)");
		mp_w_str(&e, "reason", "too_large");
		if (frame_encode(MSG_ERROR, 0, e.sbuf.data, e.sbuf.size, SIZE_MAX, &b2, &len) == 0)
			(void)cluster_rpc_respond(c->cluster, TAKE_PTR(in->req), b2, len);
		mp_writer_done(&e);
	}
	mp_writer_done(&w);
	in->req = cluster_rpc_free(in->req);
}

static void
in_replied(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	Incoming *in = userdata;

	in_unlink(in);
	if (err == 0)
		in_answer(in, MSG_REPLY, body, 0, NULL);
	else if (body)
		in_answer(in, MSG_ERROR, body, err, NULL);
	else
		in_answer(in, MSG_ERROR, NULL, err == -ETIMEDOUT ? -EHOSTUNREACH : err,
			  "the owner's coordinatord did not answer in time");
	free(in);
}

static void
on_forwarded(Cluster *cluster, ClusterRpc *req, const void *data, size_t len, void *userdata)
{
	Forwarder *fw = userdata;
	Incoming *in = calloc(1, sizeof(*in));
	Frame f;
	int r;

	if (!in) {
		cluster_rpc_free(req);
		return;
	}
	in->fw = fw;
	in->req = req;
	if (len < FRAME_HEADER_SIZE ||
	    frame_parse((const char *)data + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &f) < 0) {
		log_warning("A malformed request from another node, dropped");
		cluster_rpc_free(in->req);
		free(in);
		return;
	}
	if (!forwardable(f.type)) {
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 2);
		mp_w_int(&w, "code", -ENOMSG);
		mp_w_str(&w, "message", "not a request nodes forward");
		msgpack_unpacked un;
		msgpack_unpacked_init(&un);
		if (msgpack_unpack_next(&un, w.sbuf.data, w.sbuf.size, NULL) ==
		    MSGPACK_UNPACK_SUCCESS)
			in_answer(in, MSG_ERROR, &un.data, -ENOMSG, NULL);
		msgpack_unpacked_destroy(&un);
		mp_writer_done(&w);
		cluster_rpc_free(in->req);
		free(in);
		frame_done(&f);
		return;
	}
	int64_t left = cluster_rpc_remaining_ms(req);
	MpWriter w;
	mp_writer_init(&w);
	msgpack_pack_object(&w.pk, *f.body);
	r = peer_call(fw->loop, f.type, &w, (usec_t)MAX(left, (int64_t)100) * USEC_PER_MSEC,
		      in_replied, in);
	mp_writer_done(&w);
	frame_done(&f);
	if (r < 0) {
		in_answer(in, MSG_ERROR, NULL, -EHOSTUNREACH, "the owner cannot serve it now");
		free(in);
		return;
	}
	in->next = fw->in;
	fw->in = in;
}

static const PeerHandler no_handlers[_MSG_TYPE_MAX];

static void
loop_closed(Peer *p, int err, void *userdata)
{
	Forwarder *fw = userdata;
	log_error_errno(err, "The forwarding loopback closed: %m");
	/* its pending calls failed (their Incoming answered and freed) */
	fw->loop = peer_free(fw->loop);
}

static const PeerOps loop_ops = {
    .local_role = ROLE_ROUTER,
    .handlers = no_handlers,
    .on_close = loop_closed,
};

int
forward_setup(Coordinator *c)
{
	int sv[2];
	int r;

	if (!c->cluster)
		return 0;
	Forwarder *fw = calloc(1, sizeof(*fw));
	if (!fw)
		return -ENOMEM;
	fw->c = c;
	c->fwd = fw;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		return log_error_errno(-errno, "socketpair: %m");
	r = coordinator_attach_client(c, sv[0], true);
	if (r < 0) {
		close(sv[1]);
		return log_error_errno(r, "Cannot attach the forwarding loopback: %m");
	}
	r = peer_new(c->base, sv[1], &loop_ops, fw, (size_t)c->conf.shared.max_frame, &fw->loop);
	if (r < 0)
		return log_error_errno(r, "Cannot attach the forwarding loopback: %m");
	r = cluster_serve(c->cluster, on_forwarded, fw);
	if (r < 0)
		return log_error_errno(r, "Cannot serve this node's requests in the cluster: %m");
	return 0;
}

void
forward_teardown(Coordinator *c)
{
	Forwarder *fw = c->fwd;

	if (!fw)
		return;
	while (fw->out) {
		Outgoing *o = fw->out;
		fw->out = o->next;
		cluster_request_cancel(o->rq);
		peer_deferred_free(o->d);
		free(o);
	}
	while (fw->lookups)
		lookup_free(fw->lookups);
	while (fw->in) {
		Incoming *in = fw->in;
		fw->in = in->next;
		cluster_rpc_free(in->req);
		peer_cancel_calls(fw->loop, in);
		free(in);
	}
	fw->loop = peer_free(fw->loop);
	free(fw);
	c->fwd = NULL;
}
