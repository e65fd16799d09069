/* SPDX-License-Identifier: MIT */
/*
 * sbx-relay.c — cluster mode: the sandbox API's execs through any node
 * (docs/CLUSTER.md "Execs"; the owner's side is in sandbox-exec.c).
 *
 * A thread's sandbox lives on the thread's owner. An SBX_EXEC that reaches
 * another node is forwarded there like a file call (placement_run_start: a
 * claim, or the remembered owner), with its stream id replaced by a random
 * relay id of this node's, so that execs several nodes forward to one owner
 * (all through its one loopback client) never share a stream. The owner
 * answers {pid} as usual; its output and its end are kept there for this
 * node, which asks for them with SBX_RELAY_POLL (long polls over the same
 * request/reply, acknowledging by offsets, so that a lost answer is asked
 * again, never lost or doubled) and pushes them to its routerd as
 * SBX_EXEC_OUTPUT/SBX_EXEC_EXIT on the client's own stream. Stdin
 * (SBX_EXEC_INPUT) and a kill by stream (SBX_EXEC_KILL) are forwarded with
 * the relay id, in order (one NATS connection, one subject). The client
 * gone: a SIGKILL goes to the owner (a background exec runs on); this node
 * gone: the owner kills the exec when nobody asked for RELAY_LEASE_MS.
 * The owner unreachable for RELAY_POLL_TRIES polls: the exec ends "lost"
 * here (it may run on there until its lease ends).
 */
#include "config.h"

#include "cluster-mode.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/rand.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cluster/cluster.h"
#include "frame.h"
#include "id-util.h"
#include "time-util.h"
#include "log.h"
#include "macro.h"

#define RELAY_POLL_TIMEOUT_MS 5000 /* the owner holds a poll 1 s at most */
#define RELAY_POLL_TRIES 3	   /* polls in a row without an answer: "lost" */

struct SbxRelay {
	SbxRelay *next;
	Coordinator *c;
	Client *client;		 /* the routerd connection; NULL once gone */
	uint64_t stream_id, sid; /* the client's stream, the relay id at the owner */
	char thread_id[THREAD_ID_MAX + 1];
	char owner[CLUSTER_NODE_MAX]; /* "" until the owner answered */
	uint64_t pid;
	uint64_t off[2]; /* stdout, stderr bytes pushed to the client */
	int kill_signal; /* a kill by stream before the owner answered */
	bool background; /* runs on when its client goes */
	unsigned misses;
	ClusterRequest *rq; /* the poll in flight */
};

static SbxRelay *
relay_find(Coordinator *c, uint64_t sid)
{
	for (SbxRelay *r = c->sbx_relays; r; r = r->next)
		if (r->sid == sid)
			return r;
	return NULL;
}

static void
relay_free(SbxRelay *r)
{
	for (SbxRelay **pp = &r->c->sbx_relays; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	cluster_request_cancel(r->rq);
	free(r);
}

/* msg (a body written by msg_encode_NAME) as frame_encode() bytes. */
static int
relay_frame(int type, MpWriter *w, char **ret, size_t *ret_len)
{
	return frame_encode(type, 0, w->sbuf.data, w->sbuf.size, SIZE_MAX, ret, ret_len);
}

static void
relay_fire_done(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	/* a kill's answer: the exec's end (or "lost") tells the client */
}

/* SIGKILL-or-other to the exec at the owner, answered to nobody. */
static void
relay_send_kill(SbxRelay *r, int sig)
{
	_cleanup_free_ char *frame = NULL;
	size_t len;
	MpWriter w;

	mp_writer_init(&w);
	msg_encode_SBX_EXEC_KILL(&w, &(Msg_SBX_EXEC_KILL){.thread_id = r->thread_id,
							  .stream_id = r->sid,
							  .has_stream_id = true,
							  .signal = sig});
	if (relay_frame(MSG_SBX_EXEC_KILL, &w, &frame, &len) == 0)
		(void)cluster_request(r->c->cluster, r->owner, frame, len, RELAY_POLL_TIMEOUT_MS,
				      relay_fire_done, NULL, NULL);
	mp_writer_done(&w);
}

static void relay_poll(SbxRelay *r);

/* The end, to the client (when it listens); r freed. */
static void
relay_end(SbxRelay *r, int64_t code, int64_t sig, const char *reason)
{
	if (r->client)
		(void)msg_push_SBX_EXEC_EXIT(r->client->peer,
					     &(Msg_SBX_EXEC_EXIT){.stream_id = r->stream_id,
								  .exit_code = code,
								  .signal = sig,
								  .has_signal = sig > 0,
								  .reason = reason});
	relay_free(r);
}

static void
relay_push(SbxRelay *r, int i, uint64_t from, const void *data, size_t len)
{
	/* what the owner sends starts at from; only what is new goes out */
	if (from > r->off[i] || from + len <= r->off[i])
		return;
	size_t skip = (size_t)(r->off[i] - from);
	if (r->client)
		(void)msg_push_SBX_EXEC_OUTPUT(
		    r->client->peer, &(Msg_SBX_EXEC_OUTPUT){.stream_id = r->stream_id,
							    .stream = (uint64_t)i + 1,
							    .data = (const char *)data + skip,
							    .data_len = len - skip});
	r->off[i] += len - skip;
}

static void
relay_polled(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	SbxRelay *r = userdata;
	Reply_SBX_RELAY_POLL rep = {};
	Frame f;

	r->rq = NULL;
	if (err == -ETIMEDOUT && ++r->misses < RELAY_POLL_TRIES) {
		relay_poll(r);
		return;
	}
	if (err < 0 || len < FRAME_HEADER_SIZE ||
	    frame_parse((const char *)data + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &f) < 0) {
		log_ctx(LOG_WARNING, &(LogCtx){.thread_id = r->thread_id},
			"Cluster: exec %" PRIu64 " on node %s: %s", r->pid, r->owner,
			err < 0 ? "no answer" : "a malformed answer");
		relay_end(r, -1, 0, "lost");
		return;
	}
	r->misses = 0;
	if (f.type != MSG_REPLY || reply_decode_SBX_RELAY_POLL(f.body, &rep) < 0) {
		/* process_not_found: the owner restarted, or lost it */
		frame_done(&f);
		relay_end(r, -1, 0, "lost");
		return;
	}
	if (rep.has_out)
		relay_push(r, 0, rep.out_off, rep.out, rep.out_len);
	if (rep.has_err)
		relay_push(r, 1, rep.err_off, rep.err, rep.err_len);
	if (rep.has_ended && rep.ended) {
		char reason[16];
		snprintf(reason, sizeof(reason), "%s", rep.reason ? rep.reason : "exit");
		int64_t code = rep.exit_code, sig = rep.has_signal ? rep.signal : 0;
		reply_done_SBX_RELAY_POLL(&rep);
		frame_done(&f);
		relay_end(r, code, sig, reason);
		return;
	}
	reply_done_SBX_RELAY_POLL(&rep);
	frame_done(&f);
	relay_poll(r);
}

static void
relay_poll(SbxRelay *r)
{
	_cleanup_free_ char *frame = NULL;
	size_t len;
	MpWriter w;
	int k;

	mp_writer_init(&w);
	msg_encode_SBX_RELAY_POLL(&w, &(Msg_SBX_RELAY_POLL){.thread_id = r->thread_id,
							    .stream_id = r->sid,
							    .out_off = r->off[0],
							    .err_off = r->off[1]});
	k = relay_frame(MSG_SBX_RELAY_POLL, &w, &frame, &len);
	mp_writer_done(&w);
	if (k == 0)
		k = cluster_request(r->c->cluster, r->owner, frame, len, RELAY_POLL_TIMEOUT_MS,
				    relay_polled, r, &r->rq);
	if (k < 0) {
		log_ctx_errno(LOG_WARNING, k, &(LogCtx){.thread_id = r->thread_id},
			      "Cluster: cannot ask node %s for exec %" PRIu64 "'s output: %m",
			      r->owner, r->pid);
		relay_end(r, -1, 0, "lost");
	}
}

void
sbx_relay_forwarded(Coordinator *c, uint64_t sid, const char *owner, const msgpack_object *reply)
{
	SbxRelay *r = relay_find(c, sid);
	Reply_SBX_EXEC rep = {};

	if (!r)
		return;
	if (!owner || !reply || reply_decode_SBX_EXEC(reply, &rep) < 0) {
		relay_free(r); /* refused, unreachable, or its client went: nothing to relay */
		return;
	}
	snprintf(r->owner, sizeof(r->owner), "%s", owner);
	r->pid = rep.pid;
	reply_done_SBX_EXEC(&rep);
	if (!r->client) { /* gone meanwhile */
		if (!r->background)
			relay_send_kill(r, SIGKILL);
		relay_free(r);
		return;
	}
	if (r->kill_signal > 0)
		relay_send_kill(r, r->kill_signal);
	relay_poll(r);
}

bool
sbx_relay_pending(Coordinator *c, uint64_t sid)
{
	return relay_find(c, sid) != NULL;
}

static int relay_again(Peer *p, const Frame *f, void *ud);

bool
sbx_relay_exec(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC *m)
{
	Coordinator *c = cl->c;
	Msg_SBX_EXEC m2 = *m;
	_cleanup_free_ char *bytes = NULL;
	size_t len;
	SbxRelay *r;
	MpWriter w;
	Frame f2;
	bool taken;
	int k;

	if (!c->cluster || cl->forwarded || !thread_id_valid(m->thread_id) ||
	    placement_owns(c, m->thread_id))
		return false;
	if (m->background && !m->stdin_open) /* no stream: forwarded as it is */
		return placement_run_start(c, p, f, m->thread_id, relay_again, cl);
	r = calloc(1, sizeof(*r));
	if (!r) {
		peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	r->c = c;
	r->client = cl;
	r->stream_id = m->stream_id;
	r->background = m->background;
	snprintf(r->thread_id, sizeof(r->thread_id), "%s", m->thread_id);
	do {
		if (RAND_bytes((unsigned char *)&r->sid, sizeof(r->sid)) != 1 &&
		    getrandom(&r->sid, sizeof(r->sid), 0) != (ssize_t)sizeof(r->sid))
			r->sid = (uint64_t)now_usec() ^ (uint64_t)(uintptr_t)r;
		r->sid &= (UINT64_C(1) << 62) - 1; /* a positive msgpack integer either way */
	} while (r->sid == 0 || relay_find(c, r->sid));
	r->next = c->sbx_relays;
	c->sbx_relays = r;
	m2.stream_id = r->sid;
	mp_writer_init(&w);
	msg_encode_SBX_EXEC(&w, &m2);
	k = frame_encode(MSG_SBX_EXEC, f->req_id, w.sbuf.data, w.sbuf.size, SIZE_MAX, &bytes, &len);
	mp_writer_done(&w);
	if (k < 0 || frame_parse(bytes + FRAME_HEADER_SIZE, len - FRAME_HEADER_SIZE, &f2) < 0) {
		relay_free(r);
		peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	taken = placement_run_start(c, p, &f2, m->thread_id, relay_again, cl);
	frame_done(&f2);
	if (!taken) /* ours after all (a race with a claim): served here */
		relay_free(r);
	return taken;
}

/* placement_run_start's second try (a claim answered, a stale owner): the
 * request with the client's own stream, routed again (or served here). */
static int
handle_relay_again(Peer *p, const Frame *f, const Msg_SBX_EXEC *m, void *ud)
{
	Client *cl = ud;
	Msg_SBX_EXEC m2 = *m;
	SbxRelay *r = relay_find(cl->c, m->stream_id);

	if (r) {
		m2.stream_id = r->stream_id;
		relay_free(r);
	}
	if (sbx_relay_exec(cl, p, f, &m2))
		return 0;
	return handle_sbx_exec(p, f, &m2, ud);
}

MSG_HANDLER(relay_again, SBX_EXEC, handle_relay_again)

/* The relay of cl's stream, or NULL. */
static SbxRelay *
relay_of_stream(Coordinator *c, Client *cl, const char *thread_id, uint64_t stream_id)
{
	for (SbxRelay *r = c->sbx_relays; r; r = r->next)
		if (r->client == cl && r->stream_id == stream_id && streq(r->thread_id, thread_id))
			return r;
	return NULL;
}

bool
sbx_relay_input(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC_INPUT *m)
{
	SbxRelay *r = relay_of_stream(cl->c, cl, m->thread_id, m->stream_id);
	Msg_SBX_EXEC_INPUT m2 = *m;
	_cleanup_free_ char *frame = NULL;
	PeerDeferred *d;
	size_t len;
	MpWriter w;
	int k;

	if (!r)
		return false;
	if (!r->owner[0]) {
		peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_PROCESS_NOT_FOUND,
					"the exec has not started yet");
		return true;
	}
	m2.stream_id = r->sid;
	mp_writer_init(&w);
	msg_encode_SBX_EXEC_INPUT(&w, &m2);
	k = relay_frame(MSG_SBX_EXEC_INPUT, &w, &frame, &len);
	mp_writer_done(&w);
	if (k < 0 || !(d = peer_defer(p, f))) {
		peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	forward_deferred(cl->c, d, MSG_SBX_EXEC_INPUT, frame, len, r->owner);
	return true;
}

bool
sbx_relay_kill(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC_KILL *m)
{
	SbxRelay *r;

	if (m->has_pid || !m->has_stream_id)
		return false;
	r = relay_of_stream(cl->c, cl, m->thread_id, m->stream_id);
	if (!r)
		return false;
	if (m->signal <= 0 || m->signal >= NSIG) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					"unknown signal");
		return true;
	}
	if (!r->owner[0])
		r->kill_signal = (int)m->signal; /* sent once the owner answered */
	else
		relay_send_kill(r, (int)m->signal);
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 0);
	(void)peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return true;
}

void
sbx_relay_client_gone(Coordinator *c, Client *cl)
{
	for (SbxRelay *r = c->sbx_relays, *next; r; r = next) {
		next = r->next;
		if (r->client != cl)
			continue;
		r->client = NULL;
		if (r->owner[0]) {
			if (!r->background)
				relay_send_kill(r, SIGKILL);
			relay_free(r);
		}
		/* not answered yet: sbx_relay_forwarded kills it */
	}
}

void
sbx_relay_free_all(Coordinator *c)
{
	while (c->sbx_relays)
		relay_free(c->sbx_relays);
}

static int dispatch_sbx_exec_kill(Peer *p, const Frame *f, void *ud);
static int dispatch_sbx_exec_list(Peer *p, const Frame *f, void *ud);

/* ---------- routing (coordinator.c's table calls the sbx_dispatch_exec_*) ----------
 *
 * Cluster mode: stdin and a kill by stream of an exec another node runs go
 * there (above); a kill by pid, the list and a background exec's output to
 * the thread's owner (forward_by_thread). */
static int
handle_sbx_exec_input_routed(Peer *p, const Frame *f, const Msg_SBX_EXEC_INPUT *m, void *ud)
{
	if (sbx_relay_input(ud, p, f, m))
		return 0;
	return handle_sbx_exec_input(p, f, m, ud);
}

static int
handle_sbx_exec_kill_routed(Peer *p, const Frame *f, const Msg_SBX_EXEC_KILL *m, void *ud)
{
	Client *cl = ud;

	if (sbx_relay_kill(cl, p, f, m))
		return 0;
	if (m->has_pid && thread_id_valid(m->thread_id) &&
	    forward_by_thread(cl->c, p, f, m->thread_id, dispatch_sbx_exec_kill, ud))
		return 0;
	return handle_sbx_exec_kill(p, f, m, ud);
}

static int
handle_sbx_exec_list_routed(Peer *p, const Frame *f, const Msg_SBX_EXEC_LIST *m, void *ud)
{
	Client *cl = ud;

	if (thread_id_valid(m->thread_id) &&
	    forward_by_thread(cl->c, p, f, m->thread_id, dispatch_sbx_exec_list, ud))
		return 0;
	return handle_sbx_exec_list(p, f, m, ud);
}

static int dispatch_sbx_exec_read(Peer *p, const Frame *f, void *ud);

static int
handle_sbx_exec_read_routed(Peer *p, const Frame *f, const Msg_SBX_EXEC_READ *m, void *ud)
{
	Client *cl = ud;

	if (thread_id_valid(m->thread_id) &&
	    forward_by_thread(cl->c, p, f, m->thread_id, dispatch_sbx_exec_read, ud))
		return 0;
	return handle_sbx_exec_read(p, f, m, ud);
}

MSG_HANDLER(dispatch_sbx_exec_read, SBX_EXEC_READ, handle_sbx_exec_read_routed)
MSG_HANDLER(dispatch_sbx_exec_input, SBX_EXEC_INPUT, handle_sbx_exec_input_routed)
MSG_HANDLER(dispatch_sbx_exec_kill, SBX_EXEC_KILL, handle_sbx_exec_kill_routed)
MSG_HANDLER(dispatch_sbx_exec_list, SBX_EXEC_LIST, handle_sbx_exec_list_routed)

int
sbx_dispatch_exec_read(Peer *p, const Frame *f, void *ud)
{
	return dispatch_sbx_exec_read(p, f, ud);
}

int
sbx_dispatch_exec_input(Peer *p, const Frame *f, void *ud)
{
	return dispatch_sbx_exec_input(p, f, ud);
}

int
sbx_dispatch_exec_kill(Peer *p, const Frame *f, void *ud)
{
	return dispatch_sbx_exec_kill(p, f, ud);
}

int
sbx_dispatch_exec_list(Peer *p, const Frame *f, void *ud)
{
	return dispatch_sbx_exec_list(p, f, ud);
}
