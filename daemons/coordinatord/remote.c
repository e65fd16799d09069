/* SPDX-License-Identifier: MIT */
/*
 * remote.c — cluster mode: reads and tails of runs another node owns, served
 * from the run's JetStream subject (docs/CLUSTER.md "Reading runs other nodes
 * own").
 *
 * A run this node's run log does not hold is read from RW_RUNS: RUN_READ by
 * direct gets (cluster_read_events), RUN_WATCH by an ordered consumer
 * (cluster_watch_run) whose events are pushed as RUN_EVENTS, one event each.
 * The guarantees are the stream's: each event once, in seq order, no gap,
 * from any seq (lastSeq resumption).
 *
 * The thread check: a run's first event is its RUN_STARTED, which names its
 * thread; a read or watch naming another thread is -ENOENT, as for a local
 * run (the thread is the owner check). The thread of each run read is kept
 * (a bounded cache).
 *
 * The record a read or push carries is derived from the stream, not the
 * owner's record (which a node that is lost cannot give): runId, threadId,
 * lastSeq = the seq of the run's last event at the stream's leader
 * (cluster_run_last), read before the events, and status — running, or the
 * terminal event's when the read reached it (RUN_FINISHED: completed;
 * RUN_ERROR: aborted for code aborted, else failed, with its error). A read
 * returns every event up to that lastSeq (or its batch limit): a replica
 * that lags behind the leader is read again, so a tail never sees a record
 * claim an event the read does not return. RUN_GET of such a run is
 * forwarded to its owner (forward.c) and gives the owner's full record.
 */
#include "config.h"

#include "cluster-mode.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "strcache.h"

#define THREAD_CACHE_MAX 1024
/* A run just started on its owner may have no event in the stream yet (its
 * RUN_START is answered before its first commit is replicated): its first
 * event is looked for this often, this many times, before -ENOENT. */
#define FIRST_WAIT_MS 25
#define FIRST_TRIES 80
/* ... after quicker first looks (1, 2, 4, 8, 16 ms): a tail opened the
 * moment a forwarded POST's 202 came usually finds event 0 a few ms later */
#define FIRST_QUICK 5

typedef struct RemoteWatch RemoteWatch;

typedef enum Step { STEP_THREAD, STEP_LAST, STEP_EVENTS, STEP_STATUS } Step;

typedef struct RRead {
	struct RRead *next;
	struct RemoteReads *rr;
	PeerDeferred *d;
	Client *cl; /* a watch's client, else NULL */
	bool watch;
	bool get; /* RUN_GET: the record alone */
	Step step;
	char run_id[RUN_ID_LEN + 1];
	char *want_thread; /* NULL: not checked (a tool client) */
	char *thread;	   /* the run's */
	bool thread_read;  /* its first event was read (thread may be NULL) */
	bool have_last;	   /* last was read first (a run whose thread was unknown) */
	int64_t from;	   /* events with seq > from */
	size_t max, max_bytes, bytes;
	ClusterRunLast last;
	int tries, first_tries;
	struct event *timer; /* waiting for the run's first event */
	uint64_t next_sseq;
	char *last_text; /* the bytes of last (a copy), when read */
	size_t last_len;
	/* the events read */
	char **texts;
	size_t *lens, n;
	int64_t first_seq;
	json_t *status_event; /* the run's event lastSeq, when read */
} RRead;

struct RemoteWatch {
	Watch *w;
	Coordinator *c;
	ClusterWatch *cw;
	char *thread;
	/* the event the watch started after (seq next_seq - 1 then), kept until
	 * the first push: the client's read that follows the watch is answered
	 * with it, without a request to JetStream */
	char *start_text;
	size_t start_len;
	struct event *retry;
	int64_t next_seq;
	uint64_t next_sseq;
};

typedef struct RemoteReads {
	Coordinator *c;
	StrCache *known; /* runs read here → their thread */
	RRead *reads;
} RemoteReads;

static RemoteReads *
remote_get(Coordinator *c)
{
	if (!c->remote && c->cluster) {
		c->remote = calloc(1, sizeof(RemoteReads));
		if (c->remote)
			c->remote->c = c;
	}
	return c->remote;
}

static const char *
known_thread(RemoteReads *rr, const char *run_id)
{
	return rr->known ? strcache_get(rr->known, run_id) : NULL;
}

static void
known_add(RemoteReads *rr, const char *run_id, const char *thread)
{
	if (!rr->known)
		rr->known = strcache_new(THREAD_CACHE_MAX);
	if (rr->known) /* out of memory: read again next time */
		(void)strcache_put(rr->known, run_id, thread);
}

/* The record of a run read from the stream (see the top). */
static json_t *
derived_record(const char *run_id, const char *thread, int64_t last_seq, const json_t *last_event)
{
	const char *type = json_string_value(json_object_get(last_event, "type"));
	const char *status = "running";
	json_t *rec = json_pack("{s:s, s:s, s:I}", "runId", run_id, "threadId",
				thread ? thread : "", "lastSeq", (json_int_t)last_seq);
	if (!rec)
		return NULL;
	if (type && streq(type, "RUN_FINISHED"))
		status = "completed";
	else if (type && streq(type, "RUN_ERROR")) {
		const char *code = json_string_value(json_object_get(last_event, "code"));
		const char *msg = json_string_value(json_object_get(last_event, "message"));
		status = code && streq(code, "aborted") ? "aborted" : "failed";
		json_t *err = json_pack("{s:s}", "message", msg ? msg : "run failed");
		if (err && code)
			json_object_set_new(err, "code", json_string(code));
		json_object_set_new(rec, "error", err);
	}
	json_object_set_new(rec, "status", json_string(status));
	return rec;
}

static void
rread_free(RRead *r)
{
	for (RRead **pp = &r->rr->reads; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	peer_deferred_free(r->d);
	if (r->timer)
		event_free(r->timer);
	for (size_t i = 0; i < r->n; i++)
		free(r->texts[i]);
	free(r->texts);
	free(r->lens);
	free(r->want_thread);
	free(r->thread);
	free(r->last_text);
	json_decref(r->status_event);
	free(r);
}

static void rread_next(RRead *r);

static void
rread_fail(RRead *r, int err)
{
	if (err == -ENOENT)
		(void)peer_deferred_error(TAKE_PTR(r->d), -ENOENT, NULL, NULL);
	else
		(void)peer_deferred_error(TAKE_PTR(r->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the run's log in the cluster cannot be read now");
	rread_free(r);
}

static void on_first(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n, uint64_t next,
		     void *userdata);
static void on_last_first(Cluster *cluster, int err, const ClusterRunLast *last, void *userdata);

static void
first_again(evutil_socket_t fd, short what, void *arg)
{
	RRead *r = arg;
	int e = r->have_last
		    ? cluster_read_events(r->rr->c->cluster, r->run_id, 0, 0, 1, on_first, r)
		    : cluster_run_last(r->rr->c->cluster, r->run_id, on_last_first, r);
	if (e < 0)
		rread_fail(r, e);
}

/* Look for the run's first event again shortly (true), or give up. */
static bool
first_later(RRead *r)
{
	if (++r->first_tries >= FIRST_TRIES || !peer_deferred_peer(r->d))
		return false;
	if (!r->timer)
		r->timer = evtimer_new(r->rr->c->base, first_again, r);
	if (!r->timer)
		return false;
	int ms = r->first_tries <= FIRST_QUICK ? 1 << (r->first_tries - 1) : FIRST_WAIT_MS;
	struct timeval tv = {0, ms * 1000};
	evtimer_add(r->timer, &tv);
	return true;
}

/* A copy of the run's last event's bytes (for a watch's first read); none
 * when out of memory (the read then asks JetStream). */
static void
keep_last_text(RRead *r, const ClusterRunLast *last)
{
	free(r->last_text);
	r->last_text = last->data ? strndup(last->data, last->len) : NULL;
	r->last_len = r->last_text ? last->len : 0;
}

/* The run's thread from its first event (RUN_STARTED names it); NULL when
 * it names none. */
static void
first_thread(RRead *r, const void *data, size_t len)
{
	json_auto_t *j = json_loadb(data, len, 0, NULL);
	const char *thread = json_string_value(json_object_get(j, "threadId"));
	if (thread)
		known_add(r->rr, r->run_id, thread);
	r->thread = thread ? strdup(thread) : NULL;
}

/* A run whose thread is not known yet: its last event first, at the leader
 * (a run just started has one: event 0, which names the thread — one
 * request instead of two); event 0 then, when the run has more. */
static void
on_last_first(Cluster *cluster, int err, const ClusterRunLast *last, void *userdata)
{
	RRead *r = userdata;
	if (err == -ENOENT && first_later(r))
		return; /* not (yet) in the stream: a run its owner has just started? */
	if (err < 0)
		return rread_fail(r, err);
	r->last = *last;
	r->last.data = NULL;
	r->have_last = true;
	keep_last_text(r, last);
	if (last->seq != 0) {
		r->first_tries = 0;
		int e = cluster_read_events(cluster, r->run_id, 0, 0, 1, on_first, r);
		if (e < 0)
			rread_fail(r, e);
		return;
	}
	first_thread(r, last->data, last->len);
	rread_next(r);
}

static void
on_first(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n, uint64_t next,
	 void *userdata)
{
	RRead *r = userdata;
	if (err < 0)
		return rread_fail(r, err);
	if (n == 0 && first_later(r))
		return; /* a replica behind the leader */
	if (n == 0 || ev[0].seq != 0)
		return rread_fail(r, -ENOENT);
	first_thread(r, ev[0].data, ev[0].len);
	rread_next(r);
}

static void
on_last(Cluster *cluster, int err, const ClusterRunLast *last, void *userdata)
{
	RRead *r = userdata;
	if (err < 0)
		return rread_fail(r, err);
	r->last = *last;
	r->last.data = NULL;
	keep_last_text(r, last);
	r->step = STEP_EVENTS;
	rread_next(r);
}

static void on_watch_event(Cluster *cluster, ClusterWatch *cw, int err, const ClusterReadEvent *ev,
			   size_t n, void *userdata);
static void watch_retry(evutil_socket_t fd, short what, void *arg);

static int
remote_watch_start(RemoteWatch *rw)
{
	return cluster_watch_run(rw->c->cluster, rw->w->run_id, (uint64_t)rw->next_seq,
				 rw->next_sseq, on_watch_event, rw, &rw->cw);
}

/* The watch is up: its Watch joins c->watches, RUN_WATCH is answered. */
static void
watch_established(RRead *r)
{
	Coordinator *c = r->rr->c;
	Watch *w = calloc(1, sizeof(*w));
	RemoteWatch *rw = calloc(1, sizeof(*rw));
	int e = -ENOMEM;

	if (w && rw) {
		memcpy(w->run_id, r->run_id, RUN_ID_LEN + 1);
		w->client = r->cl;
		w->remote = rw;
		rw->w = w;
		rw->c = c;
		rw->thread = TAKE_PTR(r->thread);
		rw->next_seq = (int64_t)r->last.seq + 1;
		rw->next_sseq = r->last.stream_seq + 1;
		rw->start_text = TAKE_PTR(r->last_text);
		rw->start_len = r->last_len;
		e = remote_watch_start(rw);
	}
	if (e < 0) {
		free(rw);
		free(w);
		return rread_fail(r, e);
	}
	/* the client may have gone meanwhile: then nobody would unwatch */
	if (!peer_deferred_peer(r->d)) {
		remote_watch_drop(c, w);
		free(w);
	} else {
		w->next = c->watches;
		c->watches = w;
		(void)peer_deferred_reply(TAKE_PTR(r->d), NULL);
	}
	rread_free(r);
}

static void
read_answer(RRead *r)
{
	json_auto_t *rec =
	    derived_record(r->run_id, r->thread, (int64_t)r->last.seq, r->status_event);
	_cleanup_free_ char *rs = rec ? json_dump_compact(rec) : NULL;
	MpWriter w;

	if (!rs)
		return rread_fail(r, -ENOMEM);
	if (r->get) {
		(void)reply_deferred_RUN_GET(TAKE_PTR(r->d), &(Reply_RUN_GET){.record = rs});
		rread_free(r);
		return;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_int(&w, "first_seq", r->n > 0 ? r->first_seq : r->from + 1);
	mp_w_key(&w, "events");
	msgpack_pack_array(&w.pk, r->n);
	for (size_t i = 0; i < r->n; i++)
		mp_w_strn(&w, r->texts[i], r->lens[i]);
	mp_w_str(&w, "record", rs);
	(void)peer_deferred_reply(TAKE_PTR(r->d), &w);
	mp_writer_done(&w);
	rread_free(r);
}

static void
on_events(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n, uint64_t next,
	  void *userdata)
{
	RRead *r = userdata;
	bool full = false;

	if (err < 0)
		return rread_fail(r, err);
	for (size_t i = 0; i < n && !full; i++) {
		if ((int64_t)ev[i].seq != r->from + 1 + (int64_t)r->n) {
			/* the stream's order is the run's: a gap is not ours to paper over */
			log_warning("Run %s: its log in the cluster has a gap at seq %" PRId64,
				    r->run_id, r->from + 1 + (int64_t)r->n);
			return rread_fail(r, -EIO);
		}
		if (r->n > 0 && r->bytes + ev[i].len > r->max_bytes) {
			full = true;
			break;
		}
		char *t = strndup(ev[i].data, ev[i].len);
		if (!t)
			return rread_fail(r, -ENOMEM);
		if (r->n == 0)
			r->first_seq = (int64_t)ev[i].seq;
		r->texts[r->n] = t;
		r->lens[r->n++] = ev[i].len;
		r->bytes += ev[i].len;
		/* the event at lastSeq gives the status; one published since the
		 * leader was asked moves lastSeq (and the status) on */
		if (ev[i].seq >= r->last.seq) {
			json_decref(r->status_event);
			r->status_event = json_loadb(ev[i].data, ev[i].len, 0, NULL);
			r->last.seq = ev[i].seq;
		}
		full = r->n == r->max;
	}
	r->next_sseq = next;
	int64_t got = r->from + (int64_t)r->n; /* the last seq read */
	if (full || got >= (int64_t)r->last.seq)
		return read_answer(r);
	if (++r->tries > REMOTE_LAG_RETRIES) {
		log_warning("Run %s: a replica lags behind the leader; answering with seq "
			    "%" PRId64 " of %" PRIu64,
			    r->run_id, got, r->last.seq);
		r->last.seq = (uint64_t)MAX(got, (int64_t)0);
		json_decref(TAKE_PTR(r->status_event));
		return read_answer(r);
	}
	/* a replica behind the leader: read on from where it stopped */
	int e = cluster_read_events(cluster, r->run_id, (uint64_t)(got + 1), r->next_sseq,
				    r->max - r->n, on_events, r);
	if (e < 0)
		rread_fail(r, e);
}

static void
on_status(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n, uint64_t next,
	  void *userdata)
{
	RRead *r = userdata;
	if (err < 0)
		return rread_fail(r, err);
	if (n > 0 && ev[0].seq == r->last.seq)
		r->status_event = json_loadb(ev[0].data, ev[0].len, 0, NULL);
	read_answer(r);
}

static void
rread_next(RRead *r)
{
	Cluster *cl = r->rr->c->cluster;
	int e = 0;

	switch (r->step) {
	case STEP_THREAD:
		if (!r->thread && !r->thread_read) {
			const char *t = known_thread(r->rr, r->run_id);
			if (!t) {
				r->thread_read = true;
				e = cluster_run_last(cl, r->run_id, on_last_first, r);
				break;
			}
			r->thread = strdup(t);
			if (!r->thread) {
				e = -ENOMEM;
				break;
			}
		}
		if (r->want_thread && (!r->thread || !streq(r->want_thread, r->thread))) {
			e = -ENOENT; /* do not reveal that the run exists */
			break;
		}
		if (r->have_last) { /* read with the thread: on with it */
			r->step = STEP_EVENTS;
			return rread_next(r);
		}
		r->step = STEP_LAST;
		e = cluster_run_last(cl, r->run_id, on_last, r);
		break;
	case STEP_LAST: break;
	case STEP_EVENTS:
		if (r->watch)
			return watch_established(r);
		if (r->from >= (int64_t)r->last.seq) {
			/* nothing to return: the run's last event gives its status */
			r->step = STEP_STATUS;
			e = cluster_read_events(cl, r->run_id, r->last.seq, r->last.stream_seq, 1,
						on_status, r);
			break;
		}
		/* up to the last event known (one direct get each): what came
		 * after it comes with the next read, or a watch's pushes */
		e = cluster_read_events(cl, r->run_id, (uint64_t)(r->from + 1), 0,
					MIN(r->max, (size_t)((int64_t)r->last.seq - r->from)),
					on_events, r);
		break;
	case STEP_STATUS: break;
	}
	if (e < 0)
		rread_fail(r, e);
}

/* Is run_id this node's (in its run log)? Then it is served locally —
 * unless it ended here fenced or replication_failed: its local tail is not
 * the cluster's history (replicate_diverged). */
static bool
local_run(Coordinator *c, const char *run_id)
{
	json_t *rec = NULL;
	char real[RUN_ID_LEN + 1];
	int r = runlog_get(c->runlog, run_id, &rec);
	if (r == -ENOENT && runlog_alias_find(c->runlog, run_id, NULL, real) == 0)
		r = runlog_get(c->runlog, real, &rec);
	bool diverged = r == 0 && replicate_diverged(c, rec);
	/* its thread is the local record's (a RUN_OPEN run's event 0 names none) */
	const char *thread = json_string_value(json_object_get(rec, "threadId"));
	if (diverged && thread && remote_get(c))
		known_add(c->remote, run_id, thread);
	json_decref(rec);
	return r != -ENOENT && !diverged;
}

void
remote_watch_divert(Coordinator *c, const char *run_id, const char *thread_id)
{
	int64_t seq = -1;
	uint64_t sseq = 0;
	/* unknown: nothing of this process's was acknowledged, nothing sent */
	if (replicate_acked(c, run_id, &seq, &sseq) < 0)
		seq = -1, sseq = 0;
	for (Watch *w = c->watches; w; w = w->next) {
		if (w->remote || !streq(w->run_id, run_id))
			continue;
		RemoteWatch *rw = calloc(1, sizeof(*rw));
		if (!rw || !(rw->thread = strdup(thread_id ?: ""))) {
			free(rw);
			continue; /* no memory: the tail gets nothing more */
		}
		rw->w = w;
		rw->c = c;
		rw->next_seq = seq + 1;
		rw->next_sseq = seq >= 0 ? sseq + 1 : 0;
		w->remote = rw;
		if (remote_watch_start(rw) < 0) {
			rw->retry = evtimer_new(c->base, watch_retry, rw);
			if (rw->retry) {
				struct timeval tv = {1, 0};
				evtimer_add(rw->retry, &tv);
			}
		}
	}
}

static RRead *
rread_new(Coordinator *c, Peer *p, const Frame *f, const char *run_id, const char *thread_id)
{
	RemoteReads *rr = remote_get(c);
	RRead *r = rr ? calloc(1, sizeof(*r)) : NULL;

	if (!r)
		return NULL;
	r->rr = rr;
	snprintf(r->run_id, sizeof(r->run_id), "%s", run_id);
	r->d = peer_defer(p, f);
	r->want_thread = thread_id ? strdup(thread_id) : NULL;
	if (!r->d || (thread_id && !r->want_thread)) {
		peer_deferred_free(r->d);
		free(r->want_thread);
		free(r);
		return NULL;
	}
	r->next = rr->reads;
	rr->reads = r;
	return r;
}

bool
remote_run_read(Coordinator *c, Peer *p, const Frame *f, const Msg_RUN_READ *m)
{
	if (!c->cluster || strlen(m->run_id) != RUN_ID_LEN || m->from_seq < -1 ||
	    local_run(c, m->run_id))
		return false;
	RRead *r = rread_new(c, p, f, m->run_id, m->thread_id);
	if (!r) {
		(void)peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	r->from = m->from_seq;
	r->max = m->max == 0 || m->max > (uint64_t)c->conf.read_max ? (size_t)c->conf.read_max
								    : (size_t)m->max;
	r->max_bytes = m->max_bytes <= 0 || m->max_bytes > c->conf.read_max_bytes
			   ? (size_t)c->conf.read_max_bytes
			   : (size_t)m->max_bytes;
	r->texts = calloc(r->max, sizeof(*r->texts));
	r->lens = calloc(r->max, sizeof(*r->lens));
	if (!r->texts || !r->lens) {
		rread_fail(r, -ENOMEM);
		return true;
	}
	/* the client watches the run here (routerd watches, then reads): the
	 * read goes up to where the watch's pushes are, which send the rest —
	 * no read of the run's last event at the leader, fewer events read, and
	 * lastSeq never behind a push the client got */
	for (Watch *w = c->watches; w; w = w->next)
		if (w->remote && w->client->peer == p && streq(w->run_id, m->run_id) &&
		    w->remote->next_seq > 0) {
			RemoteWatch *rw = w->remote;
			r->last.seq = (uint64_t)rw->next_seq - 1;
			r->last.stream_seq = rw->next_sseq - 1;
			r->have_last = true;
			/* the read of the one event the watch started after (a tail
			 * of a run just started: its event 0) is answered with it */
			if (rw->start_text && r->from + 1 == rw->next_seq - 1 && rw->thread &&
			    (!r->want_thread || streq(r->want_thread, rw->thread)) &&
			    (r->thread = strdup(rw->thread)) &&
			    (r->texts[0] = strndup(rw->start_text, rw->start_len))) {
				r->lens[0] = rw->start_len;
				r->n = 1;
				r->first_seq = r->from + 1;
				r->status_event =
				    json_loadb(rw->start_text, rw->start_len, 0, NULL);
				read_answer(r);
				return true;
			}
			break;
		}
	rread_next(r);
	return true;
}

bool
remote_run_get(Coordinator *c, Peer *p, const Frame *f, const char *run_id, const char *thread_id)
{
	if (!c->cluster || strlen(run_id) != RUN_ID_LEN || local_run(c, run_id))
		return false;
	RRead *r = rread_new(c, p, f, run_id, thread_id);
	if (!r) {
		(void)peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	r->get = true;
	r->from = INT64_MAX; /* no events: the last one gives the status */
	rread_next(r);
	return true;
}

bool
remote_run_watch(Coordinator *c, Client *cl, Peer *p, const Frame *f, const char *run_id,
		 const char *thread_id)
{
	if (!c->cluster || strlen(run_id) != RUN_ID_LEN || local_run(c, run_id))
		return false;
	if (watch_find(c, cl, run_id)) {
		(void)peer_reply(p, f->req_id, NULL);
		return true; /* already watched */
	}
	RRead *r = rread_new(c, p, f, run_id, thread_id);
	if (!r) {
		(void)peer_reply_error(p, f->req_id, -ENOMEM, NULL);
		return true;
	}
	r->watch = true;
	r->cl = cl;
	rread_next(r);
	return true;
}

/* ---------- a watch's events ---------- */

static void
watch_retry(evutil_socket_t fd, short what, void *arg)
{
	RemoteWatch *rw = arg;
	if (remote_watch_start(rw) < 0) {
		struct timeval tv = {1, 0};
		evtimer_add(rw->retry, &tv);
	}
}

static void
on_watch_event(Cluster *cluster, ClusterWatch *cw, int err, const ClusterReadEvent *ev, size_t n,
	       void *userdata)
{
	RemoteWatch *rw = userdata;
	Watch *w = rw->w;

	if (err < 0) {
		/* the consumer is gone (NATS lost it): start another from the next
		 * event, after a pause */
		log_warning_errno(err, "Run %s: the cluster watch ended (%m); again in 1 s",
				  w->run_id);
		rw->cw = cluster_watch_free(rw->cw);
		if (!rw->retry)
			rw->retry = evtimer_new(rw->c->base, watch_retry, rw);
		if (rw->retry) {
			struct timeval tv = {1, 0};
			evtimer_add(rw->retry, &tv);
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		json_auto_t *j = json_loadb(ev[i].data, ev[i].len, 0, NULL);
		json_auto_t *rec = derived_record(w->run_id, rw->thread, (int64_t)ev[i].seq, j);
		_cleanup_free_ char *rs = rec ? json_dump_compact(rec) : NULL;
		MpWriter mw;
		mp_writer_init(&mw);
		mp_w_map(&mw, rs ? 4 : 3);
		mp_w_str(&mw, "run_id", w->run_id);
		mp_w_int(&mw, "first_seq", (int64_t)ev[i].seq);
		mp_w_key(&mw, "events");
		msgpack_pack_array(&mw.pk, 1);
		mp_w_strn(&mw, ev[i].data, ev[i].len);
		if (rs)
			mp_w_str(&mw, "record", rs);
		(void)peer_push(w->client->peer, MSG_RUN_EVENTS, &mw);
		mp_writer_done(&mw);
		rw->next_seq = (int64_t)ev[i].seq + 1;
		rw->next_sseq = ev[i].stream_seq + 1;
		free(rw->start_text);
		rw->start_text = NULL;
	}
}

void
remote_watch_drop(Coordinator *c, Watch *w)
{
	RemoteWatch *rw = w->remote;
	if (!rw)
		return;
	cluster_watch_free(rw->cw);
	if (rw->retry)
		event_free(rw->retry);
	free(rw->thread);
	free(rw->start_text);
	free(rw);
	w->remote = NULL;
}

void
remote_teardown(Coordinator *c)
{
	RemoteReads *rr = c->remote;
	if (!rr)
		return;
	for (Watch *w = c->watches; w; w = w->next)
		remote_watch_drop(c, w);
	while (rr->reads)
		rread_free(rr->reads);
	strcache_free(rr->known);
	free(rr);
	c->remote = NULL;
}
