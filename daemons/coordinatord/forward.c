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
 * through reasons.def). A request that reaches the owner after
 * its deadline (the owner was stopped) is dropped there unexecuted
 * (cluster.h), so a request reported unreachable never runs later.
 *
 * Serving: each node subscribes to its own subject and passes each request
 * through a loopback connection (a socketpair) to its own request handlers,
 * as routerd would (role router, so a read names its thread): the same
 * checks, the same deferred answers, nothing re-implemented. Requests that
 * came that way are marked (Client.forwarded) and never forwarded again: a
 * node that is not the owner any more answers not_owner (a by-thread request
 * is checked with an owner look-up unless this node knows it owns the
 * thread: the sender may have used a remembered owner that is stale).
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

#include "cluster-mode.h"

#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "buf.h"
#include "cluster/cluster.h"
#include "frame.h"
#include "id-util.h"
#include "json-util.h"
#include "macro.h"
#include "strv.h"

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
	int type; /* the request's message type */
	char owner[CLUSTER_NODE_MAX];
	/* sent on a remembered owner (forward_known): handled again when the
	 * request did not run there */
	PeerHandler h;
	void *ud;
	char *frame;
	size_t len;
	char *thread;
	uint64_t relay_sid; /* an SBX_EXEC whose output sbx-relay.c relays, or 0 */
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
	bool forwarded; /* came from another node: checked, never forwarded on */
	char *frame;
	size_t len;
	char thread[];
} Lookup;

typedef struct Gather Gather;

typedef struct Forwarder {
	Coordinator *c;
	Peer *loop; /* our end of the loopback (role router) */
	Outgoing *out;
	Incoming *in;
	Lookup *lookups;
	Gather *gathers;
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
out_free(Outgoing *o)
{
	free(o->frame);
	free(o->thread);
	free(o);
}

/* The reason of an ERROR frame's body is not_owner. */
static bool
refused_not_owner(const void *data, size_t len)
{
	Frame f;
	bool r = false;
	if (len < FRAME_HEADER_SIZE ||
	    frame_parse((const char *)data + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &f) < 0)
		return false;
	const msgpack_object *why = f.type == MSG_ERROR ? mp_map_get(f.body, "reason") : NULL;
	r = why && why->type == MSGPACK_OBJECT_STR &&
	    why->via.str.size == strlen(REASON_NOT_OWNER) &&
	    memcmp(why->via.str.ptr, REASON_NOT_OWNER, why->via.str.size) == 0;
	frame_done(&f);
	return r;
}

/* A request sent on a remembered owner that did not run there: forget the
 * owner, handle it again (a claim or a look-up now). true when done so. */
static bool
out_retry(Outgoing *o, int err, const void *data, size_t len)
{
	Coordinator *c = o->fw->c;
	Peer *p = peer_deferred_peer(o->d);
	Frame f;

	if (!o->h || !(err == -EHOSTUNREACH || (err == 0 && refused_not_owner(data, len))))
		return false;
	log_ctx(LOG_INFO, &(LogCtx){.thread_id = o->thread},
		"Cluster: node %s does not serve the thread any more (%s); asking again", o->owner,
		err ? "not running" : "not_owner");
	placement_forget(c, o->thread);
	c->m.cluster_owner_stale++;
	if (p && frame_parse(o->frame + FRAME_HEADER_SIZE, o->len - FRAME_HEADER_SIZE, &f) == 0) {
		int r = o->h(p, &f, o->ud);
		frame_done(&f);
		if (r < 0)
			(void)peer_deferred_error(TAKE_PTR(o->d), r, NULL, NULL);
	}
	o->d = peer_deferred_free(o->d); /* answered by the handler */
	return true;
}

static void
out_replied(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	Outgoing *o = userdata;
	PeerDeferred *d;
	Frame f;
	char m[200];

	out_unlink(o);
	if (out_retry(o, err, data, len)) {
		out_free(o);
		return;
	}
	d = TAKE_PTR(o->d);
	if (o->relay_sid && (err < 0 || len < FRAME_HEADER_SIZE))
		sbx_relay_forwarded(o->fw->c, o->relay_sid, NULL, NULL);
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
		if (err == -ETIMEDOUT && o->type == MSG_RUN_START)
			/* it reached a coordinatord (a "no responders" is at once),
			 * which may have started the run: not a failure (issue 35 F,
			 * the nemesis: a key whose every POST was refused had a run) */
			(void)peer_deferred_error(
			    d, -ETIMEDOUT, REASON_OUTCOME_UNKNOWN,
			    "the thread's owner did not answer in time; the run "
			    "may have started: post again with the same "
			    "Idempotency-Key, or list the thread's runs");
		else
			(void)peer_deferred_error(d, -EHOSTUNREACH, REASON_OWNER_UNREACHABLE, m);
	} else if (err < 0) {
		(void)peer_deferred_error(d, -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster (NATS) is not reachable");
	} else if (len < FRAME_HEADER_SIZE || frame_parse((const char *)data + FRAME_HEADER_SIZE,
							  len - FRAME_HEADER_SIZE, &f) < 0) {
		if (o->relay_sid)
			sbx_relay_forwarded(o->fw->c, o->relay_sid, NULL, NULL);
		(void)peer_deferred_error(d, -EIO, REASON_INTERNAL, "malformed answer from a node");
	} else {
		/* the relay learns the owner and pid before routerd sees the pid */
		if (o->relay_sid)
			sbx_relay_forwarded(o->fw->c, o->relay_sid, o->owner,
					    f.type == MSG_REPLY ? f.body : NULL);
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
	out_free(o);
}

/* The client went away first: nobody waits for the answer. */
static void
out_cancelled(PeerDeferred *d, void *userdata)
{
	Outgoing *o = userdata;
	cluster_request_cancel(o->rq);
	out_unlink(o);
	if (o->relay_sid)
		sbx_relay_forwarded(o->fw->c, o->relay_sid, NULL, NULL);
	peer_deferred_free(o->d);
	out_free(o);
}

static int64_t
forward_timeout(Coordinator *c, int type)
{
	switch (type) {
	case MSG_THREAD_FILE:
	case MSG_SBX_EXEC: return FORWARD_FILE_TIMEOUT_MS; /* may wait for the sandbox */
	case MSG_RUN_CANCEL: return FORWARD_CANCEL_TIMEOUT_MS;
	case MSG_SNAPSHOT_CREATE:
	case MSG_SNAPSHOT_RESTORE: return c->conf.snapshot_wait_ms + FORWARD_TIMEOUT_MS;
	default: return FORWARD_TIMEOUT_MS;
	}
}

static void send_outgoing(Coordinator *c, Outgoing *o, PeerDeferred *d, int type, const char *frame,
			  size_t len, const char *owner);

void
forward_deferred(Coordinator *c, PeerDeferred *d, int type, const char *frame, size_t len,
		 const char *owner)
{
	Forwarder *fw = c->fwd;
	Outgoing *o = fw ? calloc(1, sizeof(*o)) : NULL;

	if (!o) {
		(void)peer_deferred_error(d, -ENOMEM, NULL, NULL);
		return;
	}
	send_outgoing(c, o, d, type, frame, len, owner);
}

bool
forward_known(Coordinator *c, Peer *p, const Frame *f, const char *thread, const char *node,
	      PeerHandler h, void *ud)
{
	Outgoing *o = c->fwd ? calloc(1, sizeof(*o)) : NULL;
	PeerDeferred *d = NULL;

	if (!o || forward_encode(f, &o->frame, &o->len) < 0 || !(o->thread = strdup(thread)) ||
	    !(d = peer_defer(p, f))) {
		if (o)
			out_free(o);
		return false;
	}
	o->h = h;
	o->ud = ud;
	c->m.cluster_owner_known++;
	send_outgoing(c, o, d, f->type, o->frame, o->len, node);
	return true;
}

/* Send o's request (frame) to owner; o is answered through d, or freed. */
static void
send_outgoing(Coordinator *c, Outgoing *o, PeerDeferred *d, int type, const char *frame, size_t len,
	      const char *owner)
{
	Forwarder *fw = c->fwd;
	int r;

	o->fw = fw;
	o->d = d;
	o->type = type;
	o->timeout_ms = forward_timeout(c, type);
	if (type == MSG_SBX_EXEC && len > FRAME_HEADER_SIZE) {
		Frame f;
		if (frame_parse(frame + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &f) == 0) {
			const msgpack_object *sid = mp_map_get(f.body, "stream_id");
			if (sid && sid->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
			    sbx_relay_pending(c, sid->via.u64))
				o->relay_sid = sid->via.u64;
			frame_done(&f);
		}
	}
	snprintf(o->owner, sizeof(o->owner), "%s", owner);
	r = cluster_request(c->cluster, owner, frame, len, o->timeout_ms, out_replied, o, &o->rq);
	if (r == -EMSGSIZE) {
		(void)peer_deferred_error(d, -EMSGSIZE, REASON_TOO_LARGE,
					  "the request is larger than the cluster forwards between "
					  "nodes (NATS max_payload)");
		out_free(o);
		return;
	}
	if (r < 0) {
		(void)peer_deferred_error(d, -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster cannot forward the request now");
		out_free(o);
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

	if (err == 0 && !streq(owner->node, cluster_node(cluster)) && l->forwarded) {
		/* the sender's view (a remembered owner) is stale: it asks again */
		char m[160];
		snprintf(m, sizeof(m), "thread is owned by cluster node '%s'", owner->node);
		(void)peer_deferred_error(TAKE_PTR(l->d), -EREMOTE, REASON_NOT_OWNER, m);
	} else if (err == 0 && !streq(owner->node, cluster_node(cluster))) {
		placement_remember(c, l->thread, owner->node);
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
		(void)peer_deferred_error(TAKE_PTR(l->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
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

	if (!fw || c->route_here || !thread_id || placement_owns(c, thread_id))
		return false;
	if (placement_refuse_unready(c, p, f))
		return true;
	/* the owner as last heard (a claim, a look-up): no look-up; a request
	 * another node sent here on such a view is checked (a look-up unless
	 * this node knows it owns the thread), and refused not_owner when the
	 * view was stale, so that node asks again */
	const char *known = cl->forwarded ? NULL : placement_known_owner(c, thread_id);
	if (known && forward_known(c, p, f, thread_id, known, h, ud))
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
		l->forwarded = cl->forwarded;
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
	(void)peer_reply_error_reason(p, f->req_id, -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
				      "the cluster cannot look the thread's owner up now");
	return true;
}

/* ---------- requests no thread routes: asked of every node ----------
 *
 * RUN_GET with any_thread and no thread (/chat's join by run id alone) and
 * THREAD_LIST name no thread to route by. A join looks the run up in rw_runs
 * first (a run's own id: its record names its thread, and the request is
 * handled again naming it, so it goes to the thread's owner, or is read from
 * JetStream when the owner was lost); an id rw_runs does not have (a /chat
 * client's run id is an alias, kept in the log of the node that ran it) is
 * asked of every other live node, the first that has it answering. A
 * THREAD_LIST is asked of every other live node with the same query; the
 * pages and this node's own are merged. Requests that came from another node
 * are answered from this node's log alone (never asked again). */

typedef enum GatherKind { GATHER_JOIN, GATHER_THREADS } GatherKind;

typedef struct Ask {
	Gather *g;
	ClusterRequest *rq;
	char node[CLUSTER_NODE_MAX];
} Ask;

struct Gather {
	Gather *next;
	Forwarder *fw;
	GatherKind kind;
	PeerDeferred *d;
	char *frame; /* the request as it came (frame_encode) */
	size_t len;
	Ask *asks;
	size_t n_asks, left;
	/* GATHER_JOIN */
	PeerHandler h;
	void *ud;
	int fail_err;		       /* a node that did not answer: its error */
	char failed[CLUSTER_NODE_MAX]; /* ... and its name */
	/* GATHER_THREADS */
	json_t *items; /* every node's items */
	bool more;
	uint64_t limit;
};

static void
gather_free(Gather *g)
{
	for (Gather **pp = &g->fw->gathers; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	for (size_t i = 0; i < g->n_asks; i++)
		cluster_request_cancel(g->asks[i].rq);
	free(g->asks);
	peer_deferred_free(g->d);
	free(g->frame);
	json_decref(g->items);
	free(g);
}

static Gather *
gather_new(Forwarder *fw, GatherKind kind, Peer *p, const Frame *f)
{
	Gather *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->fw = fw;
	g->kind = kind;
	g->next = fw->gathers;
	fw->gathers = g;
	if (forward_encode(f, &g->frame, &g->len) < 0 || !(g->d = peer_defer(p, f))) {
		gather_free(g);
		return NULL;
	}
	return g;
}

typedef struct NodeList {
	const char *me;
	char (*names)[CLUSTER_NODE_MAX];
	size_t n, cap;
	bool oom;
} NodeList;

static void
list_node(Cluster *cluster, const char *node, const char *info, void *userdata)
{
	NodeList *nl = userdata;
	if (streq(node, nl->me) || strlen(node) >= CLUSTER_NODE_MAX || nl->oom)
		return;
	if (ARRAY_GROW(nl->names, nl->n, nl->cap, 8) < 0) {
		nl->oom = true;
		return;
	}
	snprintf(nl->names[nl->n++], CLUSTER_NODE_MAX, "%s", node);
}

static void gather_done(Gather *g);

/* The frame of a node's answer, or NULL (its error in *err). */
static bool
answer_frame(int err, const void *data, size_t len, Frame *f, int *ret_err)
{
	if (err < 0) {
		*ret_err = err;
		return false;
	}
	if (len < FRAME_HEADER_SIZE ||
	    frame_parse((const char *)data + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, f) < 0) {
		*ret_err = -EIO;
		return false;
	}
	return true;
}

static int
error_code(const Frame *f)
{
	const msgpack_object *code = mp_map_get(f->body, "code");
	if (code && code->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && code->via.i64 >= -4095)
		return (int)code->via.i64;
	return -EIO;
}

static void
on_asked(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	Ask *a = userdata;
	Gather *g = a->g;
	Frame f;
	int e = 0;

	a->rq = NULL;
	g->left--;
	bool ok = answer_frame(err, data, len, &f, &e);
	if (ok && f.type == MSG_ERROR)
		e = error_code(&f);
	if (ok && f.type == MSG_REPLY && g->kind == GATHER_JOIN && g->d) {
		/* the node that has the run: its answer is the answer */
		MpWriter w;
		mp_writer_init(&w);
		msgpack_pack_object(&w.pk, *f.body);
		(void)peer_deferred_reply(TAKE_PTR(g->d), &w);
		mp_writer_done(&w);
	} else if (ok && f.type == MSG_REPLY && g->kind == GATHER_THREADS) {
		Reply_THREAD_LIST rep = {0};
		if (reply_decode_THREAD_LIST(f.body, &rep) == 0) {
			for (char *const *t = rep.threads; t && *t; t++) {
				json_t *item = json_loads(*t, 0, NULL);
				if (json_is_object(item))
					json_array_append(g->items, item);
				json_decref(item);
			}
			g->more |= rep.more;
			reply_done_THREAD_LIST(&rep);
		} else
			e = -EIO;
	}
	if (ok)
		frame_done(&f);
	if (e < 0 && e != -ENOENT && !g->fail_err) {
		g->fail_err = e;
		snprintf(g->failed, sizeof(g->failed), "%s", a->node);
		log_warning_errno(e, "Cluster: node %s did not answer a %s asked of every node: %m",
				  a->node, g->kind == GATHER_JOIN ? "run look-up" : "thread list");
	}
	if (!g->d || g->left == 0)
		gather_done(g);
}

/* Ask every other live node (the request as it came); gather_done() when
 * they all answered, or when none is alive. */
static void
gather_ask(Gather *g)
{
	Coordinator *c = g->fw->c;
	NodeList nl = {.me = cluster_node(c->cluster)};

	cluster_foreach_node(c->cluster, list_node, &nl);
	g->asks = nl.n ? calloc(nl.n, sizeof(*g->asks)) : NULL;
	if (nl.oom || (nl.n && !g->asks)) {
		free(nl.names);
		(void)peer_deferred_error(TAKE_PTR(g->d), -ENOMEM, NULL, NULL);
		gather_free(g);
		return;
	}
	g->n_asks = nl.n;
	g->left = nl.n;
	for (size_t i = 0; i < nl.n; i++) {
		Ask *a = &g->asks[i];
		a->g = g;
		snprintf(a->node, sizeof(a->node), "%s", nl.names[i]);
	}
	free(nl.names);
	for (size_t i = 0; i < g->n_asks; i++) {
		Ask *a = &g->asks[i];
		int r = cluster_request(c->cluster, a->node, g->frame, g->len, FORWARD_TIMEOUT_MS,
					on_asked, a, &a->rq);
		if (r < 0) {
			g->left--;
			if (!g->fail_err) {
				g->fail_err = r;
				snprintf(g->failed, sizeof(g->failed), "%s", a->node);
			}
		}
	}
	if (g->left == 0)
		gather_done(g);
}

/* Every node's page merged: newest activity first, a thread listed by
 * several nodes (its runs are in several logs) once, with its newest run;
 * the first limit items. */
static void
threads_answer(Gather *g)
{
	size_t n = json_array_size(g->items), k = 0;
	json_t **v = n ? calloc(n, sizeof(*v)) : NULL;
	char **texts = calloc(MIN(n, (size_t)g->limit) + 1, sizeof(char *));
	bool more = g->more;
	int r = (n && !v) || !texts ? -ENOMEM : 0;

	for (size_t i = 0; r == 0 && i < n; i++)
		v[i] = json_array_get(g->items, i);
	if (r == 0 && n)
		qsort(v, n, sizeof(*v), runlog_thread_item_cmp);
	json_auto_t *seen = json_object(); /* the threads listed (a set) */
	if (!seen)
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		const char *t = json_string_value(json_object_get(v[i], "threadId"));
		if (!t || json_object_get(seen, t))
			continue; /* an older entry of a thread listed already */
		if (json_object_set_new(seen, t, json_true()) < 0) {
			r = -ENOMEM;
			break;
		}
		if (k == g->limit) {
			more = true;
			break;
		}
		if (!(texts[k++] = json_dump_compact(v[i])))
			r = -ENOMEM;
	}
	if (r == 0)
		(void)reply_deferred_THREAD_LIST(TAKE_PTR(g->d), &(Reply_THREAD_LIST){
								     .threads = texts,
								     .more = more,
								 });
	else
		(void)peer_deferred_error(TAKE_PTR(g->d), r, NULL, NULL);
	strv_free(texts);
	free(v);
}

static void
gather_done(Gather *g)
{
	if (g->d && g->kind == GATHER_THREADS)
		threads_answer(g);
	else if (g->d && g->fail_err == -ETIMEDOUT) {
		char m[200];
		snprintf(m, sizeof(m),
			 "cluster node '%s' did not answer within %d ms: the run may be there",
			 g->failed, FORWARD_TIMEOUT_MS);
		(void)peer_deferred_error(TAKE_PTR(g->d), -EHOSTUNREACH, REASON_OWNER_UNREACHABLE,
					  m);
	} else if (g->d && g->fail_err < 0 && g->fail_err != -EHOSTUNREACH) {
		(void)peer_deferred_error(TAKE_PTR(g->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster cannot look the run up now");
	} else if (g->d) /* no live node has it (one with no coordinatord has no run) */
		(void)peer_deferred_error(TAKE_PTR(g->d), -ENOENT, NULL, NULL);
	gather_free(g);
}

/* Whether the join's token scope (RUN_GET scope) allows thread. */
static bool
join_scope_allows(Gather *g, const char *thread)
{
	Frame orig;
	Msg_RUN_GET m = {0};
	bool ok = false;

	if (frame_parse(g->frame + FRAME_HEADER_SIZE, g->len - FRAME_HEADER_SIZE, &orig) < 0)
		return false;
	if (msg_decode_RUN_GET(orig.body, &m) == 0) {
		ok = runlog_scope_allows(m.scope, thread);
		msg_done_RUN_GET(&m);
	}
	frame_done(&orig);
	return ok;
}

/* The run's record in rw_runs: handled again naming its thread (forwarded to
 * the thread's owner, or read from JetStream), else asked of every node. */
static void
on_join_record(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	Gather *g = userdata;
	json_auto_t *rec = err == 0 ? json_loadb(data, len, 0, NULL) : NULL;
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	const char *thread = json_string_value(json_object_get(rec, "threadId"));
	Peer *p = peer_deferred_peer(g->d);

	if (!p) {
		gather_free(g); /* the client went away */
		return;
	}
	if (err < 0 && err != -ENOENT) {
		(void)peer_deferred_error(TAKE_PTR(g->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster cannot look the run up now");
		gather_free(g);
		return;
	}
	if (!run_id || strlen(run_id) != RUN_ID_LEN || !thread || !thread_id_valid(thread) ||
	    !join_scope_allows(g, thread)) {
		/* not a run's own id (a /chat alias), no record, or a run out of
		 * the caller's scope (its id may be an alias in the caller's) */
		gather_ask(g);
		return;
	}
	/* RUN_GET naming the run's thread, with the request's id: the normal
	 * path from here (its owner's answer, or the stream's) */
	_cleanup_free_ char *buf = NULL;
	size_t blen = 0;
	Frame orig, f;
	int r = frame_parse(g->frame + FRAME_HEADER_SIZE, g->len - FRAME_HEADER_SIZE, &orig);
	if (r == 0) {
		MpWriter w;
		mp_writer_init(&w);
		msg_encode_RUN_GET(
		    &w, &(Msg_RUN_GET){.run_id = (char *)run_id, .thread_id = (char *)thread});
		r = frame_encode(MSG_RUN_GET, orig.req_id, w.sbuf.data, w.sbuf.size, SIZE_MAX, &buf,
				 &blen);
		mp_writer_done(&w);
		frame_done(&orig);
	}
	if (r == 0)
		r = frame_parse(buf + FRAME_HEADER_SIZE, blen - FRAME_HEADER_SIZE, &f);
	if (r == 0) {
		r = g->h(p, &f, g->ud);
		frame_done(&f);
	}
	if (r < 0)
		(void)peer_deferred_error(TAKE_PTR(g->d), r, NULL, NULL);
	gather_free(g); /* answered by the handler (d dropped unanswered) */
}

bool
forward_any_thread(Coordinator *c, Peer *p, const Frame *f, const char *run_id, PeerHandler h,
		   void *ud)
{
	Forwarder *fw = c->fwd;
	Client *cl = ud;

	if (!fw || c->route_here || cl->forwarded)
		return false;
	if (placement_refuse_unready(c, p, f))
		return true;
	Gather *g = gather_new(fw, GATHER_JOIN, p, f);
	if (!g) {
		(void)peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	g->h = h;
	g->ud = ud;
	int r = cluster_get(c->cluster, CLUSTER_RUNS, run_id, on_join_record, g);
	if (r == -EINVAL) /* not a key: not a run's own id */
		gather_ask(g);
	else if (r < 0) {
		(void)peer_deferred_error(TAKE_PTR(g->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster cannot look the run up now");
		gather_free(g);
	}
	return true;
}

bool
forward_thread_list(Coordinator *c, Peer *p, const Frame *f, json_t *items, bool more,
		    uint64_t limit, void *ud)
{
	Forwarder *fw = c->fwd;
	Client *cl = ud;

	if (!fw || cl->forwarded)
		return false;
	if (placement_refuse_unready(c, p, f))
		return true;
	Gather *g = gather_new(fw, GATHER_THREADS, p, f);
	if (!g || !(g->items = json_array()) || json_array_extend(g->items, items) < 0) {
		if (g)
			gather_free(g);
		(void)peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	g->more = more;
	g->limit = limit;
	gather_ask(g);
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
	case MSG_THREAD_LIST:
	case MSG_CHAT_HYDRATE:
	case MSG_SBX_EXEC:
	case MSG_SBX_EXEC_INPUT:
	case MSG_SBX_EXEC_KILL:
	case MSG_SBX_EXEC_LIST:
	case MSG_SBX_RELAY_POLL:
	case MSG_SBX_EXEC_READ: return true;
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
		mp_w_str(&w, "reason", REASON_OWNER_UNREACHABLE);
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
		mp_w_str(&e, "reason", REASON_TOO_LARGE);
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
forward_setup(Coordinator *c, int (*attach_client)(Coordinator *c, int fd, bool forwarded))
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
	r = attach_client(c, sv[0], true);
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
		out_free(o);
	}
	while (fw->lookups)
		lookup_free(fw->lookups);
	while (fw->gathers)
		gather_free(fw->gathers);
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
