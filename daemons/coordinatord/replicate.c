/* SPDX-License-Identifier: MIT */
/*
 * replicate.c — cluster mode's durability point (docs/CLUSTER.md).
 *
 * With [cluster] nats set, coordinatord connects to NATS JetStream at start
 * (fail closed: no cluster, no start), heartbeats this node, and sits between
 * the LMDB commit and visibility (CommitHooks.replicate): the events a commit
 * wrote for a run are published to the run's subject, fenced by the stream
 * sequence of the run's previous message (cluster_publish_events), and the
 * commit makes them visible — RUN_EVENTS to watchers, the acknowledgements of
 * RUN_APPEND — only once JetStream acknowledged them. A harness-driven
 * run's publish follows the commit; a direct-log client's events go while
 * the commit is flushed (replicate_early), and a restart takes back what
 * the stream got and the disk did not (takeback.c): docs/CLUSTER.md
 * "Publishing before the flush".
 *
 * One publish per run in flight, in commit order (the fence chains each
 * message to its predecessor); the batches queued behind it go together in
 * the next (publish_head); runs proceed in parallel. A run's expected sequence is
 * learned from the stream (cluster_run_last) the first time this process
 * writes it, except for a run's first batch (seq 0), which expects an empty
 * subject and asks the stream only when refused; a run whose last event in
 * the stream another node wrote is fenced (-ESTALE), not continued. A dead
 * run's entry is kept for the process's life. Events the stream already
 * holds (a restart after a publish that was acknowledged too late) are
 * skipped; events the local log holds and the stream lacks (a restart
 * before their publish) are read back from the run log and published first.
 *
 * Errors. -ESTALE: another writer moved first (fenced): the run's batch and
 * every later one fail with it; commit.c stops the run and fails it locally.
 * -ENOTCONN while the cluster is connecting: the batch waits for READY.
 * Any other error (no acknowledgement within CLUSTER_PUBLISH_DEADLINE_MS,
 * while the library resent and reconnected): the run fails as fenced does,
 * with replication_failed; readiness (STATUS_GET cluster_ok) is the
 * cluster's own state.
 */
#include "config.h"

#include "cluster-mode.h"

#include "replicate-int.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "json-util.h"
#include "macro.h"
#include "strv.h"

/* Idle run entries kept to skip cluster_run_last on the run's next batch. */
#define REPL_IDLE_MAX 4096
/* At start, the runs checked for an end the cluster lacks (check_at_start). */
#define REPL_START_THREADS 256
#define REPL_START_WINDOW_MS (24LL * 3600 * 1000)
/* The bounds of a commit's wait for the appends that the acknowledgements
 * of the publishes out are about to release (replicate_linger). */
#define REPL_LINGER_MIN_US 250
#define REPL_LINGER_MAX_US 5000
/* At shutdown, how long to wait for the publishes in flight. */
#define REPL_DRAIN_MS 3000
/* Slack in the streams' max age beyond retention + max_run_ms (a cancel's
 * grace after max_run_ms, clocks a little apart). */
#define REPL_MAX_AGE_SLACK_MS 3600000LL

typedef void (*ReplDoneFn)(Coordinator *c, int err, void *arg);

typedef struct Batch {
	struct Batch *next;
	int64_t first_seq;
	size_t n;
	ClusterEvent *ev; /* texts borrowed from the commit (or from own) */
	RunLogEvents own; /* a catch-up batch's texts, read from the run log */
	ReplDoneFn done;  /* NULL for a catch-up batch */
	void *arg;
	char *record; /* a put of the run's record to rw_runs instead (n = 0) */
	size_t record_len;
	bool purge;    /* the run's purge from the cluster instead (n = 0): retention */
	bool sync;     /* n = 0: the local log's events before first_seq, where the
			* stream lacks them (start-up, replicate_sync) */
	usec_t sent;   /* when its publish was submitted (the latency metric) */
	size_t merged; /* the batches after it that its publish carries too */
	uint64_t gen;  /* its place among all runs' batches (the shutdown drain) */
} Batch;

typedef struct RunRepl {
	struct RunRepl *next;
	struct Replicator *r;
	char run_id[RUN_ID_LEN + 1];
	bool known;	  /* last_* are the stream's */
	bool guessed;	  /* expecting an empty subject without having asked */
	bool no_guess;	  /* ... and refused: ask */
	bool busy;	  /* the head batch is in flight (or waits for READY) */
	bool waiting;	  /* ... waits for READY */
	int dead;	  /* replication ended with this error */
	int64_t last_seq; /* the run's seq of its last event in the stream, -1 none */
	uint64_t last_stream_seq;
	char mirrored[16]; /* the status last queued to rw_runs ("" none) */
	bool purged;	   /* purged from the cluster: the entry goes when idle */
	Batch *head, *tail;
} RunRepl;

typedef struct Replicator {
	Coordinator *c;
	RunRepl *runs;
	size_t nruns;
	ClusterState state;
	bool window_full; /* a run waits for room in the library's publish window */
	size_t inflight;  /* runs with a publish out */
	usec_t rtt;	  /* a publish's round trip, moving average (µs) */
	bool checked;	  /* the start-up check of this node's runs was made */
	uint64_t gen;	  /* batches queued so far */
	uint64_t drain_gen;
	usec_t drain_until;
	struct event *drain_ev;
	TakeBack *backs;	 /* runs whose events may be taken back (takeback.c) */
	struct InputPut *inputs; /* puts of runs' inputs out (replicate_input) */
} Replicator;

/* A put of a run's input to rw_inputs, until it is answered. */
typedef struct InputPut {
	struct InputPut *next;
	Replicator *r;
	char run_id[RUN_ID_LEN + 1];
} InputPut;

static void run_next(RunRepl *rr);

static void
batch_free(Batch *b)
{
	free(b->ev);
	free(b->record);
	runlog_events_done(&b->own);
	free(b);
}

static RunRepl *
run_repl_find(Replicator *r, const char *run_id)
{
	for (RunRepl *rr = r->runs; rr; rr = rr->next)
		if (streq(rr->run_id, run_id))
			return rr;
	return NULL;
}

static RunRepl *
run_repl_get(Replicator *r, const char *run_id)
{
	RunRepl *rr = run_repl_find(r, run_id);
	if (rr)
		return rr;
	rr = calloc(1, sizeof(*rr));
	if (!rr)
		return NULL;
	rr->r = r;
	snprintf(rr->run_id, sizeof(rr->run_id), "%s", run_id);
	rr->last_seq = -1;
	rr->next = r->runs;
	r->runs = rr;
	r->nruns++;
	return rr;
}

static void
run_repl_free(RunRepl *rr)
{
	Replicator *r = rr->r;
	for (RunRepl **p = &r->runs; *p; p = &(*p)->next)
		if (*p == rr) {
			*p = rr->next;
			break;
		}
	r->nruns--;
	while (rr->head) {
		Batch *b = rr->head;
		rr->head = b->next;
		batch_free(b);
	}
	free(rr);
}

/* The head batch ended with err: tell its commit (the run stays busy: what
 * its commit queues meanwhile waits). */
static void
head_pop(RunRepl *rr, int err)
{
	Coordinator *c = rr->r->c;
	Batch *b = rr->head;

	rr->head = b->next;
	if (!rr->head)
		rr->tail = NULL;
	if (b->done)
		b->done(c, err, b->arg);
	batch_free(b);
}

/* ... and go on with the next. */
static void
head_done(RunRepl *rr, int err)
{
	rr->busy = true;
	head_pop(rr, err);
	rr->busy = false;
	run_next(rr);
}

/* Replication of the run ended with err: this batch and every queued one fail. */
static void
run_dead(RunRepl *rr, int err)
{
	LogCtx lc = {.run_id = rr->run_id};

	rr->dead = err;
	if (err == -ESTALE)
		rr->r->c->m.cluster_fenced++;
	else
		rr->r->c->m.cluster_repl_failures++;
	if (err == -ESTALE)
		log_ctx(LOG_ERR, &lc,
			"Run fenced: another node wrote its log in the cluster; stopping it here");
	else
		log_ctx_errno(LOG_ERR, err, &lc, "Run's events could not be replicated: %m");
	head_done(rr, err); /* run_next fails the rest with rr->dead */
}

/* A batch's publish, submitted to acknowledged (runwarden_cluster_publish_seconds). */
static void
publish_latency(Coordinator *c, usec_t us)
{
	static const usec_t bounds[CLUSTER_PUB_BUCKETS - 1] = {500,   1000,  2500,  5000,
							       10000, 25000, 100000};
	size_t i = 0;
	while (i < CLUSTER_PUB_BUCKETS - 1 && us > bounds[i])
		i++;
	c->m.cluster_publish_buckets[i]++;
	c->m.cluster_publish_usec_sum += us;
	c->m.cluster_publishes++;
}

/* The runs that wait (for READY, or for room in the publish window) go on,
 * or fail when the cluster failed. */
static void
resume_waiting(Replicator *r)
{
	for (RunRepl *rr = r->runs, *n; rr; rr = n) {
		n = rr->next;
		if (!rr->waiting)
			continue;
		rr->waiting = rr->busy = false;
		if (r->state == CLUSTER_FAILED)
			run_dead(rr, -ENOTCONN);
		else
			run_next(rr);
	}
}

/* A publish ended: the runs that found the library's window of publishes
 * full (-EAGAIN: CLUSTER_MAX_INFLIGHT runs publishing at once) go on. */
static void
kick_window(Replicator *r)
{
	if (!r->window_full || r->state != CLUSTER_READY)
		return;
	r->window_full = false;
	resume_waiting(r);
}

static void
on_published(Cluster *cl, const ClusterPublishResult *res, void *userdata)
{
	RunRepl *rr = userdata;
	Batch *b = rr->head;

	rr->r->inflight--;
	kick_window(rr->r);
	if (res->err == 0) {
		Batch *last = b;
		for (size_t k = 0; k < b->merged; k++)
			last = last->next;
		usec_t us = now_usec() - b->sent;
		publish_latency(rr->r->c, us);
		rr->r->rtt = rr->r->rtt ? (7 * rr->r->rtt + us) / 8 : us;
		rr->last_stream_seq = res->last_stream_seq;
		rr->last_seq = last->first_seq + (int64_t)last->n - 1;
		rr->known = true;
		rr->guessed = false;
		for (size_t k = b->merged; k > 0; k--)
			head_pop(rr, 0);
		head_done(rr, 0);
		return;
	}
	if (res->err == -ESTALE && rr->guessed && res->n_done == 0) {
		/* the run is not new to the stream after all (a restart): ask */
		rr->known = rr->guessed = false;
		rr->no_guess = true;
		rr->busy = false;
		run_next(rr);
		return;
	}
	if (rr->dead) { /* fenced meanwhile (replicate_fence) */
		head_done(rr, rr->dead);
		return;
	}
	run_dead(rr, res->err);
}

static void
on_put(Cluster *cl, int err, uint64_t revision, void *userdata)
{
	RunRepl *rr = userdata;
	LogCtx lc = {.run_id = rr->run_id};

	/* the run goes on: its record is a mirror for takeover and status, the
	 * events are the log (a takeover finds a run with no record only if its
	 * owner died before its first event was published) */
	if (err < 0)
		log_ctx_errno(LOG_WARNING, err, &lc,
			      "Run's record not mirrored to the cluster: %m");
	head_done(rr, 0);
}

static void
on_purged(Cluster *cl, int err, void *userdata)
{
	RunRepl *rr = userdata;
	Coordinator *c = rr->r->c;

	if (err < 0) {
		c->m.cluster_purge_failures++;
		log_ctx_errno(LOG_WARNING, err, &(LogCtx){.run_id = rr->run_id},
			      "Retention: run not purged from the cluster: %m; the stream's max "
			      "age removes it later");
	} else {
		c->m.cluster_purged++;
		log_ctx(LOG_DEBUG, &(LogCtx){.run_id = rr->run_id},
			"Retention: run purged from the cluster (its events and record)");
	}
	rr->purged = true;
	head_done(rr, 0); /* may free rr */
}

/* Was writer (Rw-Writer, "<node>-<random>") this node: this process, or an
 * earlier one of this node (a restart)? */
static bool
own_writer(Cluster *cl, const char *writer)
{
	const char *node = cluster_node(cl);
	size_t n = strlen(node);
	return strncmp(writer, node, n) == 0 && writer[n] == '-' && !strchr(writer + n + 1, '-');
}

static void
on_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	RunRepl *rr = userdata;

	if (err == -ENOENT) {
		rr->last_seq = -1;
		rr->last_stream_seq = 0;
	} else if (err == 0 && !own_writer(cl, last->writer)) {
		/* another node wrote the run last: it is not ours to continue */
		run_dead(rr, -ESTALE);
		return;
	} else if (err == 0) {
		rr->last_seq = (int64_t)last->seq;
		rr->last_stream_seq = last->stream_seq;
	} else {
		run_dead(rr, err);
		return;
	}
	rr->known = true;
	rr->busy = false;
	run_next(rr);
}

/* Events the local log has before b and the stream lacks: a batch of them,
 * read from the run log, put before b. */
static int
catch_up(RunRepl *rr, Batch *b)
{
	Coordinator *c = rr->r->c;
	Batch *cb = calloc(1, sizeof(*cb));
	json_t *rec = NULL;
	int r;

	if (!cb)
		return -ENOMEM;
	r = runlog_read(c->runlog, rr->run_id, rr->last_seq,
			(size_t)(b->first_seq - rr->last_seq - 1), &cb->own, &rec);
	json_decref(rec);
	if (r == 0 && (cb->own.n == 0 || cb->own.first_seq != rr->last_seq + 1))
		r = -EPROTO; /* the local log itself has no such events */
	if (r == 0 && !(cb->ev = calloc(cb->own.n, sizeof(ClusterEvent))))
		r = -ENOMEM;
	if (r < 0) {
		batch_free(cb);
		return r;
	}
	cb->first_seq = cb->own.first_seq;
	cb->n = cb->own.n;
	for (size_t i = 0; i < cb->n; i++)
		cb->ev[i] = (ClusterEvent){cb->own.texts[i], cb->own.lens[i]};
	cb->next = b;
	rr->head = cb;
	LogCtx lc = {.run_id = rr->run_id};
	log_ctx(LOG_WARNING, &lc,
		"Run's events %" PRId64 "..%" PRId64 " were committed here but not replicated; "
		"publishing them first",
		cb->first_seq, b->first_seq - 1);
	return 0;
}

/* Publish b from its event off, and the event batches queued behind it
 * whose events follow (commits of the run while b's publish was out): one
 * publish, one message while they fit, rather than one round trip each. */
static int
publish_head(RunRepl *rr, Batch *b, size_t off)
{
	Coordinator *c = rr->r->c;
	size_t n = b->n - off;
	int64_t end = b->first_seq + (int64_t)b->n;
	ClusterEvent *ev = b->ev + off, *all = NULL;
	int err;

	b->merged = 0;
	for (Batch *x = b->next; x && x->n && !x->record && !x->purge && x->first_seq == end;
	     x = x->next) {
		n += x->n;
		end += (int64_t)x->n;
		b->merged++;
	}
	if (b->merged) {
		all = calloc(n, sizeof(*all));
		size_t i = 0;
		for (Batch *x = b; all && i < n; x = x->next)
			for (size_t k = x == b ? off : 0; k < x->n; k++)
				all[i++] = x->ev[k];
		if (all)
			ev = all;
		else { /* out of memory: b alone */
			b->merged = 0;
			n = b->n - off;
		}
	}
	err = cluster_publish_events(c->cluster, rr->run_id, (uint64_t)b->first_seq + off, ev, n,
				     rr->last_stream_seq, on_published, rr);
	free(all);
	return err;
}

static void
run_next(RunRepl *rr)
{
	Replicator *r = rr->r;
	Coordinator *c = r->c;
	Batch *b = rr->head;
	int err;

	if (rr->busy)
		return;
	if (!b) {
		/* a dead run's entry stays: its expectation must never be
		 * learned again from the stream, whose last writer is another */
		if ((r->nruns > REPL_IDLE_MAX || rr->purged) && !rr->dead)
			run_repl_free(rr);
		return;
	}
	if (rr->dead) {
		head_done(rr, rr->dead);
		return;
	}
	if (b->purge) { /* after every batch and record of the run before it */
		rr->busy = true;
		err = cluster_purge_run(c->cluster, rr->run_id, on_purged, rr);
		if (err == -ENOTCONN && r->state != CLUSTER_FAILED)
			rr->waiting = true; /* connecting: on_state(READY) goes on */
		else if (err < 0)
			on_purged(c->cluster, err, rr);
		return;
	}
	if (b->n == 0 && !b->record && !b->sync) { /* waited for the batches before it */
		rr->busy = true;
		head_done(rr, 0);
		return;
	}
	rr->busy = true;
	if (b->record) {
		err = cluster_put(c->cluster, CLUSTER_RUNS, rr->run_id, b->record, b->record_len,
				  on_put, rr);
		if (err == -ENOTCONN && r->state != CLUSTER_FAILED)
			rr->waiting = true; /* connecting: on_state(READY) goes on */
		else if (err < 0)
			on_put(c->cluster, err, 0, rr);
		return;
	}
	if (!rr->known && b->first_seq == 0 && !rr->no_guess) {
		rr->guessed = true; /* a new run: its subject is empty */
		rr->known = true;
	}
	if (!rr->known) {
		err = cluster_run_last(c->cluster, rr->run_id, on_last, rr);
		goto submitted;
	}
	/* skip what the stream holds already */
	size_t off = 0;
	if (rr->last_seq >= b->first_seq)
		off = (size_t)MIN((int64_t)b->n, rr->last_seq - b->first_seq + 1);
	if (off == b->n && !(b->sync && rr->last_seq + 1 < b->first_seq)) {
		head_done(rr, 0);
		return;
	}
	if (rr->last_seq + 1 < b->first_seq) {
		err = catch_up(rr, b);
		if (err < 0) {
			run_dead(rr, err);
			return;
		}
		rr->busy = false;
		run_next(rr);
		return;
	}
	b->sent = now_usec();
	err = publish_head(rr, b, off);
	r->inflight += err == 0;
submitted:
	if (err == -ENOTCONN && r->state != CLUSTER_FAILED) {
		rr->waiting = true; /* connecting: on_state(READY) goes on */
		return;
	}
	if (err == -EAGAIN) { /* the window is full: the next publish's end goes on */
		rr->waiting = true;
		r->window_full = true;
		return;
	}
	if (err < 0)
		run_dead(rr, err);
}

static int queue_record(RunRepl *rr, const json_t *rec, const char *status);
static void queue_batch(RunRepl *rr, Batch *b);

/* The local log's run_id up to rec's lastSeq, and its record, into the
 * cluster where they are not yet. */
static int
replicate_sync(Replicator *r, const char *run_id, const json_t *rec)
{
	RunRepl *rr = run_repl_get(r, run_id);
	Batch *b = calloc(1, sizeof(*b));
	const char *status = json_string_value(json_object_get(rec, "status"));
	if (!rr || !b || !status) {
		free(b);
		return -ENOMEM;
	}
	b->sync = true;
	b->first_seq = json_integer_value(json_object_get(rec, "lastSeq")) + 1;
	queue_batch(rr, b);
	if (queue_record(rr, rec, status) < 0)
		return -ENOMEM;
	run_next(rr);
	return 0;
}

/* At start: a run that ended here but whose end the last process did not get
 * acknowledged (it died first) will not commit here again, so its end would
 * stay local: publish what the stream lacks. Checked: the newest run of each
 * of the REPL_START_THREADS most recently active threads, when it ended
 * within REPL_START_WINDOW_MS (a thread runs one run at a time, so a run
 * that ended unreplicated is its thread's newest) — one cluster_run_last
 * each, on the worker. */
typedef struct StartCheck {
	Replicator *r;
	json_t *rec;
	char run_id[RUN_ID_LEN + 1];
} StartCheck;

static void
on_start_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	StartCheck *sc = userdata;
	int64_t local = json_integer_value(json_object_get(sc->rec, "lastSeq"));
	bool behind = (err == -ENOENT && local >= 0) ||
		      (err == 0 && own_writer(cl, last->writer) && (int64_t)last->seq < local);
	if (behind) {
		log_ctx(LOG_NOTICE, &(LogCtx){.run_id = sc->run_id},
			"Run ended here but its end is not in the cluster; publishing it");
		if (replicate_sync(sc->r, sc->run_id, sc->rec) < 0)
			log_ctx(LOG_ERR, &(LogCtx){.run_id = sc->run_id},
				"Out of memory publishing the run's end");
	}
	json_decref(sc->rec);
	free(sc);
}

static void
check_at_start(Replicator *r)
{
	Coordinator *c = r->c;
	json_auto_t *items = NULL;
	bool more = false;
	size_t i;
	json_t *it;
	int64_t since = now_epoch_ms() - REPL_START_WINDOW_MS;

	RunLogThreadQuery q = {.limit = REPL_START_THREADS};
	int e = runlog_threads(c->runlog, &q, &items, &more);
	if (e < 0) {
		log_warning_errno(e, "Cluster: runs that ended before this start not checked: %m");
		return;
	}
	json_array_foreach(items, i, it)
	{
		json_t *rec = json_object_get(it, "latestRun");
		const char *id = json_string_value(json_object_get(rec, "runId"));
		const char *st = json_string_value(json_object_get(rec, "status"));
		json_int_t fin = json_integer_value(json_object_get(rec, "finishedAt"));
		if (!id || strlen(id) > RUN_ID_LEN || !st || !run_status_terminal(st) ||
		    fin < since)
			continue;
		StartCheck *sc = calloc(1, sizeof(*sc));
		if (!sc)
			break;
		sc->r = r;
		sc->rec = json_incref(rec);
		snprintf(sc->run_id, sizeof(sc->run_id), "%s", id);
		if (cluster_run_last(c->cluster, sc->run_id, on_start_last, sc) < 0) {
			json_decref(sc->rec);
			free(sc);
		}
	}
}

static void
on_state(Cluster *cl, ClusterState state, void *userdata)
{
	Replicator *r = userdata;
	static const char *const names[] = {"connecting", "ready", "disconnected", "failed"};

	r->state = state;
	log_info("Cluster: %s (%s)", names[state], cluster_node(cl));
	if (state != CLUSTER_READY && state != CLUSTER_FAILED)
		return;
	if (state == CLUSTER_READY && !r->checked) {
		r->checked = true;
		takeback_start(r->backs);
		check_at_start(r);
	}
	if (state == CLUSTER_FAILED && !r->checked) /* never to be compared */
		takeback_fail(r->backs, -EIO);
	resume_waiting(r);
}

static void
queue_batch(RunRepl *rr, Batch *b)
{
	b->gen = ++rr->r->gen;
	if (rr->tail)
		rr->tail->next = b;
	else
		rr->head = b;
	rr->tail = b;
}

/* The run's record for rw_runs: the local record, and the node that runs it. */
static int
queue_record(RunRepl *rr, const json_t *rec, const char *status)
{
	Coordinator *c = rr->r->c;
	json_auto_t *copy = json_deep_copy(rec);
	Batch *b = calloc(1, sizeof(*b));
	if (!copy || !b ||
	    json_object_set_new(copy, "node", json_string(cluster_node(c->cluster))) < 0 ||
	    !(b->record = json_dump_compact(copy))) {
		free(b);
		return -ENOMEM;
	}
	b->record_len = strlen(b->record);
	snprintf(rr->mirrored, sizeof(rr->mirrored), "%s", status);
	queue_batch(rr, b);
	return 0;
}

static void
on_node_lost(Cluster *cl, const char *node, void *userdata)
{
	Replicator *r = userdata;
	takeover_node_lost(r->c, node);
}

int
replicate_events(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
		 const size_t *lens, size_t n, const json_t *rec, ReplDoneFn done, void *arg)
{
	Replicator *r = c->repl;
	if (!r)
		return 1;
	RunRepl *rr = run_repl_get(r, run_id);
	if (!rr)
		return -ENOMEM;
	if (rr->dead)
		return rr->dead;
	/* the record mirrored on each change of status: a live one before its
	 * events (a run with events in the stream has a record, for a takeover
	 * to find), a terminal one after them (a terminal record means a
	 * terminal log) */
	const char *status = json_string_value(json_object_get(rec, "status"));
	bool mirror = status && !streq(status, rr->mirrored);
	bool terminal = mirror && run_status_terminal(status);
	if (mirror && !terminal && queue_record(rr, rec, status) < 0)
		return -ENOMEM;
	if (n == 0 && !rr->head && !terminal)
		return 1; /* nothing before it, nothing of its own */
	Batch *b = calloc(1, sizeof(*b));
	if (!b || (n && !(b->ev = calloc(n, sizeof(ClusterEvent))))) {
		free(b);
		return -ENOMEM;
	}
	b->first_seq = first_seq;
	b->n = n;
	for (size_t i = 0; i < n; i++)
		b->ev[i] = (ClusterEvent){texts[i], lens[i]};
	b->done = done;
	b->arg = arg;
	queue_batch(rr, b);
	if (terminal && queue_record(rr, rec, status) < 0)
		log_ctx(LOG_WARNING, &(LogCtx){.run_id = run_id},
			"Out of memory mirroring the run's record");
	run_next(rr);
	return 0;
}

/* While publishes are out, their acknowledgements are about to release
 * appends (the clients and drivers they answer queue more): a commit may wait
 * for them about one publish round trip — the moving average, so that the
 * wait follows the cluster's pace: short on a quiet one, longer when the
 * servers are busy and each commit's publishes are costly — within
 * REPL_LINGER_MIN_US..REPL_LINGER_MAX_US. */
usec_t
replicate_linger(Coordinator *c)
{
	Replicator *r = c->repl;
	if (!r || r->inflight == 0)
		return 0;
	return MIN(MAX(r->rtt, (usec_t)REPL_LINGER_MIN_US), (usec_t)REPL_LINGER_MAX_US);
}

/* A client's events of run_id may go to JetStream before their commit's
 * flush (commit.c start_early) when the run goes on as this process knows
 * it: its stream position learned, its record mirrored as running, no end
 * of its replication. */
bool
replicate_early(Coordinator *c, const char *run_id, const json_t *rec)
{
	Replicator *r = c->repl;
	RunRepl *rr = r && r->state == CLUSTER_READY ? run_repl_find(r, run_id) : NULL;
	const char *status = json_string_value(json_object_get(rec, "status"));

	return rr && rr->known && !rr->dead && !rr->purged && status && streq(status, "running") &&
	       streq(status, rr->mirrored);
}

bool
replicate_held(Coordinator *c, const char *run_id)
{
	return c->repl && takeback_held(c->repl->backs, run_id);
}

void
replicate_known(Coordinator *c, const char *run_id, int64_t seq, uint64_t stream_seq)
{
	RunRepl *rr = c->repl ? run_repl_get(c->repl, run_id) : NULL;
	if (rr && !rr->known && !rr->head) {
		rr->known = true;
		rr->last_seq = seq;
		rr->last_stream_seq = stream_seq;
	}
}

void
replicate_refuse(Coordinator *c, const char *run_id, int err)
{
	RunRepl *rr = c->repl ? run_repl_get(c->repl, run_id) : NULL;
	if (rr && !rr->dead) {
		rr->dead = err;
		c->m.cluster_repl_failures++;
	}
}

void
replicate_flush(Coordinator *c)
{
	if (c->repl)
		cluster_flush(c->cluster);
}

void
replicate_fence(Coordinator *c, const char *run_id)
{
	Replicator *r = c->repl;
	RunRepl *rr = r ? run_repl_get(r, run_id) : NULL;

	if (!rr || rr->dead)
		return;
	rr->dead = -ESTALE;
	c->m.cluster_fenced++;
	log_ctx(LOG_ERR, &(LogCtx){.run_id = run_id},
		"Run fenced: another node wrote its log in the cluster; stopping it here");
	commit_fail_fenced(c, run_id); /* what it queues later fails with rr->dead */
}

void
replicate_pruned(Coordinator *c, const char *run_id, const json_t *rec)
{
	Replicator *r = c->repl;
	if (!r)
		return;
	/* a run fenced here is another node's in the cluster: never purged by
	 * this one (its new owner's record is not this node's to prune) */
	const char *code =
	    json_string_value(json_object_get(json_object_get(rec, "error"), "code"));
	if (code && streq(code, RUN_ERR_FENCED))
		return;
	RunRepl *rr = run_repl_get(r, run_id);
	if (!rr || rr->dead)
		return;
	Batch *b = calloc(1, sizeof(*b));
	if (!b)
		return;
	b->purge = true;
	queue_batch(rr, b);
	run_next(rr);
}

static void
input_put_free(InputPut *ip)
{
	for (InputPut **pp = &ip->r->inputs; *pp; pp = &(*pp)->next)
		if (*pp == ip) {
			*pp = ip->next;
			break;
		}
	free(ip);
}

static void
on_input_put(Cluster *cluster, int err, uint64_t revision, void *userdata)
{
	InputPut *ip = userdata;
	(void)cluster, (void)revision;
	if (err < 0)
		log_warning_errno(err,
				  "Run %s: its input could not be put in the cluster (%m): a node "
				  "that takes its thread over shows no user message of it",
				  ip->run_id);
	input_put_free(ip);
}

void
replicate_input(Coordinator *c, const char *run_id, const char *input)
{
	Replicator *r = c->repl;
	if (!r || !c->cluster)
		return;
	InputPut *ip = calloc(1, sizeof(*ip));
	if (!ip) {
		log_warning_errno(-ENOMEM, "Run %s: its input could not be put in the cluster: %m",
				  run_id);
		return;
	}
	ip->r = r;
	snprintf(ip->run_id, sizeof(ip->run_id), "%s", run_id);
	ip->next = r->inputs;
	r->inputs = ip;
	int e =
	    cluster_put(c->cluster, CLUSTER_INPUTS, run_id, input, strlen(input), on_input_put, ip);
	if (e < 0)
		on_input_put(c->cluster, e, 0, ip);
}

int64_t
replicate_max_age_ms(const CoordConf *cf)
{
	if (cf->retention_days <= 0 || cf->max_run_ms <= 0)
		return 0;
	return cf->retention_days * 86400000LL + cf->max_run_ms + cf->retention_interval_ms +
	       REPL_MAX_AGE_SLACK_MS;
}

bool
replicate_own_writer(Coordinator *c, const char *writer)
{
	return c->cluster && own_writer(c->cluster, writer);
}

int64_t
replicate_mark(Coordinator *c, const char *run_id)
{
	Replicator *r = c->repl;

	RunRepl *rr = r ? run_repl_find(r, run_id) : NULL;
	/* nothing in flight: all its commits of this process are in the
	 * stream; a dead run's log is the local one; not known yet: a
	 * restart's run, whose earlier events are in the stream or published
	 * first */
	if (!rr || !rr->head || rr->dead)
		return INT64_MAX;
	if (!rr->known) {
		/* a new run's first batch (event 0) may wait behind the put of
		 * its record (rw_runs): nothing of it is acknowledged yet, and the
		 * mark must not go from "all" back to -1 once that batch starts */
		for (Batch *b = rr->head; b; b = b->next)
			if (b->n > 0)
				return b->first_seq == 0 ? -1 : INT64_MAX;
		return INT64_MAX;
	}
	return rr->last_seq;
}

int
replicate_acked(Coordinator *c, const char *run_id, int64_t *seq, uint64_t *stream_seq)
{
	RunRepl *rr = c->repl ? run_repl_find(c->repl, run_id) : NULL;
	if (!rr || !rr->known)
		return -ENOENT;
	*seq = rr->last_seq;
	*stream_seq = rr->last_stream_seq;
	return 0;
}

bool
replicate_diverged(Coordinator *c, const json_t *rec)
{
	const char *code =
	    json_string_value(json_object_get(json_object_get(rec, "error"), "code"));
	if (!c->cluster)
		return false;
	if (code && (streq(code, RUN_ERR_FENCED) || streq(code, RUN_ERR_REPLICATION_FAILED)))
		return true;
	/* A run that ended here before its end was refused (another node wrote
	 * it meanwhile, or the end never got acknowledged): its record keeps
	 * its first terminal status, completed say, but the cluster's history
	 * is another — its replication is dead (a dead run's entry stays for
	 * the process's life). Issue 35 A, seen by the nemesis. */
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	RunRepl *rr = run_id && c->repl ? run_repl_find(c->repl, run_id) : NULL;
	return rr && rr->dead;
}

bool
replicate_active(Coordinator *c)
{
	return c->repl != NULL;
}

bool
replicate_ready(Coordinator *c)
{
	return !c->cluster || cluster_ready(c->cluster);
}

int
replicate_global_init(Coordinator *c)
{
	if (!cluster_conf_enabled(&c->conf.shared.cluster))
		return 0;
	return cluster_global_init();
}

int
replicate_setup(Coordinator *c)
{
	const ClusterConf *cc = &c->conf.shared.cluster;
	static const ClusterCallbacks cbs = {.on_state = on_state, .on_node_lost = on_node_lost};
	char node[CLUSTER_NODE_NAME_MAX];
	char **urls = NULL;
	int r;

	if (!cluster_conf_enabled(cc))
		return 0;
	r = cluster_conf_node_name(cc, node, sizeof(node));
	if (r < 0)
		return log_error_errno(r, "cluster: cannot name this node: %m");
	r = cluster_conf_urls(cc, &urls);
	if (r < 0)
		return log_error_errno(r, "cluster.nats: %m");
	c->repl = calloc(1, sizeof(*c->repl));
	if (!c->repl) {
		strv_free(urls);
		return -ENOMEM;
	}
	c->repl->c = c;
	c->repl->state = CLUSTER_CONNECTING;
	ClusterOptions o = cluster_conf_options(cc, urls, node);
	o.watch_nodes = true; /* node loss: takeover.c */
	o.set_max_age = true; /* retention's backstop */
	o.max_age_ms = replicate_max_age_ms(&c->conf);
	r = cluster_new(c->base, &o, &cbs, c->repl, &c->cluster);
	strv_free(urls);
	if (r < 0) /* fail closed: a node configured for a cluster needs it */
		return log_error_errno(r, "Cannot join the cluster (node %s): %m", node);
	log_info("Cluster: node %s, connected to %s", node,
		 cluster_connected_url(c->cluster, (char[256]){0}, 256));
	/* before anything is written: the runs to compare with the stream */
	r = takeback_collect(c, &c->repl->backs);
	if (r < 0)
		return log_error_errno(r, "Cannot list the running runs: %m");
	return takeover_setup(c);
}

/* The runs with a batch queued before the drain started still pending. */
static size_t
undrained(Replicator *r)
{
	size_t left = 0;
	for (RunRepl *rr = r->runs; rr; rr = rr->next)
		left += rr->head && !rr->dead && rr->head->gen <= r->drain_gen;
	return left;
}

static void
drain_cb(evutil_socket_t fd, short what, void *arg)
{
	Replicator *r = arg;
	size_t left = undrained(r);

	if (left && now_usec() < r->drain_until)
		return;
	if (left)
		log_warning("Stopping with %zu run(s)' events not acknowledged by the cluster "
			    "within %d ms; they are published on the run's next commit after the "
			    "next start",
			    left, REPL_DRAIN_MS);
	event_base_loopexit(r->c->base, NULL);
}

void
replicate_drain_and_exit(Coordinator *c)
{
	static const struct timeval tick = {0, 10000};
	Replicator *r = c->repl;

	if (r) {
		r->drain_gen = r->gen;
		r->drain_until = now_usec() + REPL_DRAIN_MS * USEC_PER_MSEC;
		if (!r->drain_ev)
			r->drain_ev = event_new(c->base, -1, EV_PERSIST, drain_cb, r);
	}
	if (!r || !undrained(r) || !r->drain_ev || event_add(r->drain_ev, &tick) < 0)
		event_base_loopexit(c->base, NULL);
}

void
replicate_teardown(Coordinator *c)
{
	Replicator *r = c->repl;

	if (r && r->drain_ev)
		event_free(r->drain_ev);
	if (r)
		r->drain_ev = NULL;
	placement_teardown(c);
	c->cluster = cluster_free(c->cluster); /* drops its pending callbacks */
	takeover_teardown(c);
	if (!r)
		return;
	while (r->runs) {
		RunRepl *rr = r->runs;
		while (rr->head) {
			Batch *b = rr->head;
			rr->head = b->next;
			if (b->done)
				b->done(c, -ECANCELED, b->arg);
			batch_free(b);
		}
		rr->tail = NULL;
		run_repl_free(rr);
	}
	r->backs = takeback_free(r->backs);
	while (r->inputs)
		input_put_free(r->inputs);
	free(r);
	c->repl = NULL;
}
