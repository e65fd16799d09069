/* SPDX-License-Identifier: MIT */
/*
 * coord-link.c — routerd's one IPC link to coordinatord, and the watches.
 *
 * The link (a PeerLink, peer-link.h) connects to <runtime_dir>/coordinatord.sock.
 * While it is missing, after it drops, or when a fresh connection says no
 * HELLO within coord_timeout_ms, a retry runs after 100 ms, doubling up to
 * 2 s; requests
 * that need the coordinator get 503 meanwhile (routes.c checks coord_ready).
 * A drop fails every pending call with -ECONNRESET (peer.c), then closes
 * every tail with 1011: their watches died with the connection, and clients
 * resume with lastSeq.
 *
 * Watches: coordinatord pushes RUN_EVENTS for a run to a routerd connection
 * that sent RUN_WATCH for it. routerd keeps one watch per run, shared by all
 * of that run's tails (a refcount by list); the last tail to leave sends
 * RUN_UNWATCH. A tail starts reading only once RUN_WATCH was answered, so a
 * commit is either in its first read or pushed after it. Subscribers are
 * told through their WatchSubOps; this file names no tail function.
 */
#include "config.h"

#include "coord-link.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"

#define COORD_BACKOFF_MIN (100 * USEC_PER_MSEC)
#define COORD_BACKOFF_MAX (2 * USEC_PER_SEC)

int
run_record_parse(const char *text, size_t len, RunRecord *ret)
{
	json_auto_t *j = json_loadb(text, len, 0, NULL);
	json_t *seq, *status;
	const char *s;

	if (!j || !json_is_object(j))
		return -EBADMSG;
	seq = json_object_get(j, "lastSeq");
	status = json_object_get(j, "status");
	if (!json_is_integer(seq) || json_integer_value(seq) < -1 || !json_is_string(status))
		return -EBADMSG;
	s = json_string_value(status);
	*ret = (RunRecord){
	    .text = text,
	    .len = len,
	    .last_seq = json_integer_value(seq),
	    .terminal = streq(s, "completed") || streq(s, "failed") || streq(s, "aborted"),
	};
	return 0;
}

static unsigned
watch_hash(const char *s)
{
	unsigned h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % ROUTER_WATCH_BUCKETS;
}

static Watch *
watch_find(Router *r, const char *run_id)
{
	for (Watch *w = r->watches[watch_hash(run_id)]; w; w = w->next)
		if (streq(w->run_id, run_id))
			return w;
	return NULL;
}

static void
watch_unlink_free(Watch *w)
{
	Router *r = w->router;

	for (Watch **pp = &r->watches[watch_hash(w->run_id)]; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	coord_cancel(r, w);
	free(w->run_id);
	free(w);
}

/* Detach every subscriber from w, tell each, and free it. */
static void
watch_fail(Watch *w, const char *reason)
{
	for (WatchSub *s = w->subs; s;) {
		WatchSub *next = s->next;
		s->watch = NULL;
		s->prev = s->next = NULL;
		s->ops->lost(s, reason);
		s = next;
	}
	w->subs = NULL;
	watch_unlink_free(w);
}

static void
watch_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	Watch *w = userdata;

	if (err < 0) {
		log_warning_errno(err, "RUN_WATCH of run %s failed: %m", w->run_id);
		watch_fail(w, err == -ECONNRESET ? "coordinator unavailable" : "watch failed");
		return;
	}
	w->active = true;
	for (WatchSub *s = w->subs; s; s = s->next)
		s->ops->active(s);
}

int
watch_attach(Router *r, WatchSub *s, const char *run_id, const char *thread_id)
{
	Watch *w = watch_find(r, run_id);
	int rr;

	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		w->router = r;
		w->run_id = strdup(run_id);
		if (!w->run_id) {
			free(w);
			return -ENOMEM;
		}
		/* the thread the tail was checked against (RUN_GET) is the run's
		 * owner: coordinatord checks it again */
		rr = COORD_CALL(r, RUN_WATCH,
				&((Msg_RUN_WATCH){.run_id = w->run_id,
						  .thread_id = thread_id ? thread_id : ""}),
				watch_reply, w);
		if (rr < 0) {
			free(w->run_id);
			free(w);
			return rr;
		}
		unsigned h = watch_hash(w->run_id);
		w->next = r->watches[h];
		r->watches[h] = w;
	}
	s->watch = w;
	s->prev = NULL;
	s->next = w->subs;
	if (w->subs)
		w->subs->prev = s;
	w->subs = s;
	if (w->active)
		s->ops->active(s);
	return 0;
}

bool
watch_active(const WatchSub *s)
{
	return s->watch && s->watch->active;
}

void
watch_detach(WatchSub *s)
{
	Watch *w = s->watch;

	if (!w)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		w->subs = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->watch = NULL;
	s->prev = s->next = NULL;
	if (w->subs)
		return;
	/* Last tail gone. Sent even while RUN_WATCH is in flight: the link is
	 * ordered, so the coordinator sees WATCH then UNWATCH. */
	if (coord_ready(w->router)) {
		(void)COORD_CALL(w->router, RUN_UNWATCH, &((Msg_RUN_UNWATCH){.run_id = w->run_id}),
				 NULL, NULL);
	}
	watch_unlink_free(w);
}

/* RUN_EVENTS push: fan out to every tail of the run. */
static int
coord_on_run_events(Peer *p, const Frame *f, void *userdata)
{
	Router *r = userdata;
	const msgpack_object_array *events = NULL;
	const char *run_id = NULL, *rec_text = NULL;
	int64_t first_seq = 0;
	RunRecord rec, *recp = NULL;
	MpReader mr;
	Watch *w;

	mp_reader_init(&mr, f->body);
	mp_read_str(&mr, "run_id", &run_id);
	mp_read_int(&mr, "first_seq", &first_seq);
	mp_read_array(&mr, "events", &events);
	mp_read_str_opt(&mr, "record", &rec_text, NULL);
	if (mr.err < 0) {
		log_warning("Malformed RUN_EVENTS push (field '%s'), ignoring",
			    mr.field ? mr.field : "?");
		mp_reader_done(&mr);
		return -EBADMSG;
	}
	if (rec_text) {
		if (run_record_parse(rec_text, strlen(rec_text), &rec) < 0)
			log_warning("RUN_EVENTS for run %s carries a malformed record, ignoring "
				    "the record",
				    run_id);
		else
			recp = &rec;
	}
	w = watch_find(r, run_id);
	/* next first: a subscriber may leave (and be freed) in its callback */
	if (w && w->active)
		for (WatchSub *s = w->subs, *next; s; s = next) {
			next = s->next;
			s->ops->events(s, first_seq, events, recp);
		}
	mp_reader_done(&mr);
	return 0;
}

/* SBX_EXEC_OUTPUT/EXIT pushes: to the exec streams (Router.sbx_push). */
static int
coord_on_sbx_push(Peer *p, const Frame *f, void *userdata)
{
	Router *r = userdata;

	if (r->sbx_push)
		r->sbx_push(r, f->type, f);
	return 0;
}

static const PeerHandler coord_handlers[_MSG_TYPE_MAX] = {
    [MSG_RUN_EVENTS] = coord_on_run_events,
    [MSG_SBX_EXEC_OUTPUT] = coord_on_sbx_push,
    [MSG_SBX_EXEC_EXIT] = coord_on_sbx_push,
};

static void
coord_on_ready(Peer *p, void *userdata)
{
	Router *r = userdata;

	peer_link_ready(r->coord_link);
	if (r->coord_down_logged)
		log_info("Connected to coordinatord at %s", r->coord_path);
	else
		log_debug("Connected to coordinatord at %s", r->coord_path);
	r->coord_down_logged = false;
	if (r->on_coord_ready)
		r->on_coord_ready(r); /* the lifecycle announces readiness once */
}

static void
coord_on_close(Peer *p, int err, void *userdata)
{
	Router *r = userdata;

	log_warning_errno(err, "Lost the connection to coordinatord: %m");
	r->coord_down_logged = true;
	for (size_t i = 0; i < ELEMENTSOF(r->watches); i++)
		while (r->watches[i])
			watch_fail(r->watches[i], "coordinator unavailable");
	if (r->sbx_lost)
		r->sbx_lost(r);
	peer_link_lost(r->coord_link, !r->stopping);
}

/* What the link met on its way (peer-link.h), in routerd's words. */
static void
coord_link_event(PeerLinkEvent what, int err, void *userdata)
{
	Router *r = userdata;

	switch (what) {
	case PEER_LINK_CONNECT_FAILED:
		if (!r->coord_down_logged)
			log_warning_errno(err,
					  "Cannot connect to coordinatord at %s (%m), retrying",
					  r->coord_path);
		else
			log_debug_errno(err, "Cannot connect to coordinatord at %s: %m",
					r->coord_path);
		r->coord_down_logged = true;
		break;
	case PEER_LINK_SETUP_FAILED:
		log_warning_errno(err, "Cannot set up the coordinatord link: %m");
		break;
	case PEER_LINK_NO_HELLO:
		/* a socket that accepts but never says HELLO (a hung coordinatord,
		 * a stranger on the path) must not hold the link forever */
		log_warning("coordinatord at %s sent no HELLO within %" PRId64 " ms; reconnecting",
			    r->coord_path, r->conf->coord_timeout_ms);
		r->coord_down_logged = true;
		break;
	}
}

static const PeerOps coord_ops = {
    .local_role = ROLE_ROUTER,
    .handlers = coord_handlers,
    .on_ready = coord_on_ready,
    .on_close = coord_on_close,
};

int
coord_start(Router *r)
{
	int k = peer_link_new(
	    r->base,
	    &(PeerLinkConf){.path = r->coord_path,
			    .ops = &coord_ops,
			    .max_frame = (size_t)r->conf->shared.max_frame,
			    .hello_timeout = (usec_t)r->conf->coord_timeout_ms * USEC_PER_MSEC,
			    .backoff_min = COORD_BACKOFF_MIN,
			    .backoff_max = COORD_BACKOFF_MAX,
			    .event = coord_link_event,
			    .userdata = r},
	    &r->coord_link);
	if (k < 0)
		return log_error_errno(k, "Out of memory");
	return 0;
}

void
coord_stop(Router *r)
{
	for (size_t i = 0; i < ELEMENTSOF(r->watches); i++)
		while (r->watches[i]) {
			Watch *w = r->watches[i];
			for (WatchSub *s = w->subs; s; s = s->next)
				s->watch = NULL;
			w->subs = NULL;
			watch_unlink_free(w);
		}
	r->coord_link = peer_link_free(r->coord_link);
}

bool
coord_ready(Router *r)
{
	return peer_is_ready(peer_link_peer(r->coord_link));
}

int
coord_call(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata)
{
	if (!coord_ready(r))
		return -ECONNRESET;
	return peer_call(peer_link_peer(r->coord_link), type, body,
			 (usec_t)r->conf->coord_timeout_ms * USEC_PER_MSEC, cb, userdata);
}

int
coord_call_timeout(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata,
		   usec_t timeout)
{
	if (!coord_ready(r))
		return -ECONNRESET;
	return peer_call(peer_link_peer(r->coord_link), type, body, timeout, cb, userdata);
}

void
coord_cancel(Router *r, void *userdata)
{
	if (peer_link_peer(r->coord_link))
		peer_cancel_calls(peer_link_peer(r->coord_link), userdata);
}

const char *
coord_error_message(const msgpack_object *body, size_t *ret_len)
{
	const msgpack_object *m = body ? mp_map_get(body, "message") : NULL;

	if (!m || m->type != MSGPACK_OBJECT_STR || m->via.str.size == 0 ||
	    memchr(m->via.str.ptr, '\0', m->via.str.size))
		return NULL;
	*ret_len = m->via.str.size;
	return m->via.str.ptr;
}
