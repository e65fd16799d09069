/* SPDX-License-Identifier: MIT */
/*
 * takeover.c — node loss in cluster mode (docs/CLUSTER.md "Node loss and
 * takeover").
 *
 * Every node watches rw_nodes (ClusterOptions.watch_nodes). When the library
 * reports a node lost (its key expired: the server's own verdict), this node
 * lists rw_threads for the threads the lost node owned and rw_runs for the
 * lost node's runs that are not terminal (their records, mirrored by their
 * owner on each change of status: replicate.c), and tries
 * cluster_take_thread() on each thread, naming the revision it read. Of all
 * live nodes trying, one wins each thread. The winner owns the thread from
 * then on (placement_own(): its next run runs here, with an empty workspace)
 * and ends each of the lost node's running runs of that thread: the run's last
 * event is read at the stream's leader; if it is terminal already (the owner
 * died between its last event and its record's put), only the record is
 * corrected; otherwise a RUN_ERROR with code node_lost is published as the
 * run's next seq, fenced on that last event's stream sequence (so a lost
 * node that comes back is refused from then on, and two enders cannot both
 * succeed), and the record is put as failed/node_lost. Exactly once: the
 * take (one winner per thread), the terminal check and the fence. A run of
 * the lost node on a thread it did not own (RUN_OPEN does not claim) is
 * ended by the thread's owner, or, when nobody owns it, by the node whose
 * claim of the thread wins (end_unowned_run). When the thread's owner is lost
 * too (a double loss), the owner's taker ends it: a take lists the other
 * nodes' runs on the taken thread and ends those whose node this node saw
 * lost, or that had no key in rw_nodes before the takes (on_taken).
 * Whichever loss comes first, the one node that owns the thread in the end
 * ends the run: a take answered before the run's node's loss is reported
 * here is in that loss's listing (owner: this node); one answered after
 * finds the run's node lost. A run reached both ways is ended once
 * (ended_here). The taker also keeps the records rw_runs has of the runs of
 * each thread it took that ran elsewhere, for THREAD_RUNS and THREAD_LIST
 * (takeover-adopted.c).
 * A step that fails otherwise (no JetStream leader during a NATS failover)
 * is tried again a second later, up to TAKEOVER_RETRIES times; the end of a
 * run then goes on every OWN_END_PERIOD_S for up to an hour (the thread is
 * this node's: nobody else ends it).
 *
 * This node's own lease (cluster_lease()): when it lapsed (a pause or a
 * partition past half the TTL), the threads it owns are checked again
 * (placement.c) and every run it drives is checked: a run whose thread
 * another node owns now, or whose last event another node wrote, is fenced
 * (replicate_fence(): its processes are stopped, it is failed locally with
 * code fenced) even if it would not publish again soon. If such a run
 * published in between, the taker's node_lost is refused; the taker reads
 * the log again and ends it after those events.
 *
 * Every tick (heartbeat_ms) this node's load goes into its heartbeat
 * (cluster_set_node_info()): {"runs": driven runs not done, "sandboxes":
 * their distinct sandboxes, "threads": threads it knows it owns,
 * "max_runs": its capacity, [cluster] max_runs, 0 = no limit}: placement.c
 * reads them to place new threads when this node is at capacity.
 */
#include "config.h"

#include "cluster-mode.h"

#include "takeover-int.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "json-util.h"
#include "macro.h"
#include "strv.h"

#define NODE_LOST_MSG_FMT "cluster node '%s' was lost while the run ran there"
/* A step that failed for another reason than losing the race (a NATS
 * failover: no leader for a few seconds) is tried again a second later, this
 * many times. */
#define TAKEOVER_RETRIES 30
/* This node's own run that failed replication_failed (not fenced): its end
 * goes to the cluster once JetStream answers again — tried every
 * OWN_END_PERIOD_S, for as long as a partition may last, up to
 * OWN_END_RETRIES times (an hour). */
#define OWN_END_PERIOD_S 5
#define OWN_END_RETRIES 720
#define UNREPLICATED_MSG "the cluster did not acknowledge the run's events"

typedef struct Loss Loss;

typedef struct Takeover {
	Coordinator *c;
	struct event *tick;
	uint64_t lease;	 /* the lease generation last seen (0: none yet) */
	bool lapsed;	 /* cluster_lease() was 0 since */
	Loss *losses;	 /* takeovers in progress */
	json_t *lost;	 /* nodes whose loss was reported here: node → true */
	json_t *ended;	 /* runs this node ends or ended: runId → epoch ms */
	Adopted adopted; /* the threads taken over here (takeover-adopted.c) */
} Takeover;

/* One lost node's takeover: what it owned, the runs it ran; freed when the
 * last of its calls answered. */
struct Loss {
	Loss *next;
	Takeover *t;
	char node[CLUSTER_NODE_MAX];
	uint64_t node_rev; /* the revision of its last beat seen before the loss */
	size_t refs;
	int attempts;
	size_t n_threads;
	char **threads;
	uint64_t *revs;
	json_t *runs;	       /* records (rw_runs) not terminal: its runs, and other
				* nodes' runs on the threads it owned */
	json_t *owners;	       /* every thread's owner (rw_threads): thread → node */
	json_t *newest;	       /* each thread it owned, or ran a run of nobody's
				* thread on: thread → the records of its runs that
				* ran elsewhere than here (its own; other nodes'
				* ended ones), newest first (adopt_thread) */
	json_t *alive;	       /* the live nodes (rw_nodes) listed before the takes,
				* when other nodes' runs are on its threads; or NULL */
	ClusterBucket listing; /* what it lists now (loss_list) */
	bool own;	       /* not a loss: this node's runs whose replication
				* failed, ended in the cluster (takeover_end_unreplicated) */
};

/* One run of a lost node being ended here. */
typedef struct Ending {
	Loss *loss;
	char run_id[RUN_ID_LEN + 1];
	json_t *rec;
	int64_t seq;	 /* the run's last seq (after the end: the end's) */
	uint64_t expect; /* the stream sequence of the run's last event */
	json_t *agui;	 /* what the run's events left open (agui_state_track) */
	char **texts;	 /* the end: closers, then the RUN_ERROR */
	size_t n_texts;
	int attempts;
} Ending;

/* Events of a run read per request while its open messages are rebuilt. */
#define ENDING_READ_MAX 256

typedef struct Taking {
	Loss *loss;
	size_t i;
	int attempts;
} Taking;

/* fn(arg) in a second, for a retry: 0, or < 0 (then not). */
static int
later(Coordinator *c, int *attempts, event_callback_fn fn, void *arg)
{
	struct timeval tv = {1, 0};
	if ((*attempts)++ >= TAKEOVER_RETRIES)
		return -ETIMEDOUT;
	return event_base_once(c->base, -1, EV_TIMEOUT, fn, arg, &tv) < 0 ? -ENOMEM : 0;
}

static void last_again(evutil_socket_t fd, short what, void *arg);

/* An ending's next try, from its last event: a second later for a lost
 * node's run (TAKEOVER_RETRIES), then — and for this node's own run from the
 * first — every OWN_END_PERIOD_S, up to OWN_END_RETRIES more. A run ended
 * here belongs to a thread this node took or claimed: if it gave up after
 * TAKEOVER_RETRIES (a flapping owner that kept writing while its lease
 * held; a second loss of that node finds the run "already being ended
 * here"), nobody would end it (the nemesis, `flap` with 2.10.27: a run left
 * `running` in the cluster). 0, or < 0 (then not). */
static int
ending_later_fn(Ending *e, event_callback_fn fn)
{
	if (!e->loss->own && e->attempts < TAKEOVER_RETRIES)
		return later(e->loss->t->c, &e->attempts, fn, e);
	struct timeval tv = {OWN_END_PERIOD_S, 0};
	if (e->attempts++ >= (e->loss->own ? 0 : TAKEOVER_RETRIES) + OWN_END_RETRIES)
		return -ETIMEDOUT;
	return event_base_once(e->loss->t->c->base, -1, EV_TIMEOUT, fn, e, &tv) < 0 ? -ENOMEM : 0;
}

static int
ending_later(Ending *e)
{
	return ending_later_fn(e, last_again);
}

static void on_threads(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata);
static void on_runs(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata);
static void on_taken(Cluster *cl, int err, const ClusterOwner *owner, void *userdata);
static void on_nodes(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata);
static void on_lost_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata);
static void on_lost_published(Cluster *cl, const ClusterPublishResult *res, void *userdata);

/* A loss's listings, in their order: rw_threads (on_threads), rw_runs
 * (on_runs), and rw_nodes (on_nodes) when other nodes' runs are on its
 * threads. Each answer, or the failure to ask, goes to its callback. */
static void
loss_list(Loss *l, ClusterBucket bucket)
{
	Cluster *cl = l->t->c->cluster;
	ClusterListFn fn = bucket == CLUSTER_THREADS ? on_threads
			   : bucket == CLUSTER_RUNS  ? on_runs
						     : on_nodes;
	l->listing = bucket;
	int r = cluster_list(cl, bucket, fn, l);
	if (r < 0)
		fn(cl, r, NULL, 0, l);
}

/* The listing again, a second after it failed. */
static void
list_again(evutil_socket_t fd, short what, void *arg)
{
	Loss *l = arg;
	loss_list(l, l->listing);
}

static void
node_alive_cb(Cluster *cl, const char *node, const char *info, void *userdata)
{
	const char **want = userdata;
	if (*want && streq(node, *want))
		*want = NULL;
}

/* Is the lost node beating again (issue 35, D)? The view of rw_nodes the
 * watch keeps: a put of its key since the loss makes it alive again. Each
 * take checks it just before it goes to the cluster, the first and every
 * retry: a node back is not taken over, whatever its loss started. The watch
 * may lag (after a heal, its consumer catches up late): the take itself
 * reads the node's key at the bucket's leader too (ClusterLost), and is
 * refused -EALREADY when the node beat since the revision seen at its loss. */
static bool
node_back(Loss *l)
{
	const char *want = l->node;
	cluster_foreach_node(l->t->c->cluster, node_alive_cb, &want);
	return want == NULL;
}

/* A take that does not go ahead: the node beats again. -EALREADY. */
static int
take_thread(Taking *tk)
{
	Loss *l = tk->loss;
	Cluster *cl = l->t->c->cluster;
	if (node_back(l))
		return -EALREADY;
	return cluster_take_thread(cl, l->threads[tk->i], cluster_node(cl), l->revs[tk->i],
				   &(ClusterLost){l->node, l->node_rev}, on_taken, tk);
}

static void
take_again(evutil_socket_t fd, short what, void *arg)
{
	Taking *tk = arg;
	Cluster *cl = tk->loss->t->c->cluster;
	int r = take_thread(tk);
	if (r < 0)
		on_taken(cl, r, &(ClusterOwner){0}, tk);
}

static void
last_again(evutil_socket_t fd, short what, void *arg)
{
	Ending *e = arg;
	Cluster *cl = e->loss->t->c->cluster;
	int r = cluster_run_last(cl, e->run_id, on_lost_last, e);
	if (r < 0)
		on_lost_last(cl, r, &(ClusterRunLast){0}, e);
}

static Loss *
loss_ref(Loss *l)
{
	l->refs++;
	return l;
}

static void
loss_unref(Loss *l)
{
	if (--l->refs > 0)
		return;
	for (Loss **p = &l->t->losses; *p; p = &(*p)->next)
		if (*p == l) {
			*p = l->next;
			break;
		}
	for (size_t i = 0; i < l->n_threads; i++)
		free(l->threads[i]);
	free(l->threads);
	free(l->revs);
	json_decref(l->runs);
	json_decref(l->owners);
	json_decref(l->newest);
	json_decref(l->alive);
	free(l);
}

static void
ending_reset(Ending *e)
{
	strv_free_n(e->texts, e->n_texts);
	e->texts = NULL;
	e->n_texts = 0;
	json_decref(e->agui);
	e->agui = NULL;
}

static void
ending_free(Ending *e)
{
	Loss *l = e->loss;
	json_decref(e->rec);
	ending_reset(e);
	free(e);
	loss_unref(l);
}

/* The node e ran on (its record's; a run of another lost node than the
 * loss being handled: on_taken). */
static const char *
ending_node(const Ending *e)
{
	return json_string_value(json_object_get(e->rec, "node")) ?: e->loss->node;
}

/* The code and message of e's end: node_lost, or this node's own
 * replication_failed (msg: room for the message). */
static const char *
ending_code(const Ending *e, char *msg, size_t size)
{
	if (e->loss->own) {
		snprintf(msg, size, "%s", UNREPLICATED_MSG);
		return RUN_ERR_REPLICATION_FAILED;
	}
	snprintf(msg, size, NODE_LOST_MSG_FMT, ending_node(e));
	return RUN_ERR_NODE_LOST;
}

/* e could not be ended: forgotten (a later loss's takeover may end it). */
static void
ending_give_up(Ending *e)
{
	json_object_del(e->loss->t->ended, e->run_id);
	ending_free(e);
}

/* This node owns thread now (a take, a claim): the records of its runs the
 * listing of rw_runs found (they ran on the lost node: no live log has
 * them) are listed in THREAD_RUNS, and its newest in THREAD_LIST until this
 * node's log has a run of the thread. */
static void
adopt_thread(Loss *l, const char *thread)
{
	json_t *runs = json_object_get(l->newest, thread);
	if (json_array_size(runs) == 0)
		return;
	if (json_array_size(runs) > ADOPTED_RUNS_MAX)
		log_ctx(LOG_NOTICE, &(LogCtx){.thread_id = thread},
			"Thread taken over from lost node %s: its %d newest of %zu runs listed",
			l->node, ADOPTED_RUNS_MAX, json_array_size(runs));
	adopted_set(&l->t->adopted, thread, runs);
}

static void put_record(Ending *e);

static void
put_again(evutil_socket_t fd, short what, void *arg)
{
	put_record(arg);
}

static void
on_record_put(Cluster *cl, int err, uint64_t revision, void *userdata)
{
	Ending *e = userdata;
	char msg[160];
	const char *code = ending_code(e, msg, sizeof(msg));
	/* the end is in the stream: its record follows, tried again while
	 * JetStream does not answer (else rw_runs says running for good) */
	if (err < 0 && err != -ENOMEM && ending_later_fn(e, put_again) == 0)
		return;
	if (!e->loss->own)
		adopted_update(&e->loss->t->adopted, e->run_id, e->rec);
	if (err < 0)
		log_ctx_errno(LOG_WARNING, err, &(LogCtx){.run_id = e->run_id},
			      "Run's record (%s) not mirrored to the cluster: %m", code);
	ending_free(e);
}

static void
put_record(Ending *e)
{
	Coordinator *c = e->loss->t->c;
	_cleanup_free_ char *s = json_dump_compact(e->rec);
	int r = s ? cluster_put(c->cluster, CLUSTER_RUNS, e->run_id, s, strlen(s), on_record_put, e)
		  : -ENOMEM;
	if (r < 0)
		on_record_put(c->cluster, r, 0, e);
}

/* Put e's record with status and error (code, message) as the run's end. */
static void
put_end(Ending *e, const char *status, const char *code, const char *message)
{
	Coordinator *c = e->loss->t->c;
	int64_t now = now_epoch_ms();

	json_object_set_new(e->rec, "status", json_string(status));
	if (code)
		json_object_set_new(e->rec, "error",
				    json_pack("{s:s, s:s}", "message", message, "code", code));
	if (e->seq >= 0)
		json_object_set_new(e->rec, "lastSeq", json_integer(e->seq));
	json_object_set_new(e->rec, "updatedAt", json_integer(now));
	json_object_set_new(e->rec, "finishedAt", json_integer(now));
	json_object_set_new(e->rec, "endedBy", json_string(cluster_node(c->cluster)));
	put_record(e);
}

static void
on_lost_published(Cluster *cl, const ClusterPublishResult *res, void *userdata)
{
	Ending *e = userdata;
	Coordinator *c = e->loss->t->c;
	LogCtx lc = {.run_id = e->run_id,
		     .thread_id = json_string_value(json_object_get(e->rec, "threadId"))};
	char msg[160];
	const char *code = ending_code(e, msg, sizeof(msg));

	/* (a duplicate is this writer's own copy, resent after a lost
	 * acknowledgement: another writer's would have been refused) */
	if (res->err == 0 && e->loss->own) {
		/* failed and counted here already (commit_fail_local) */
		log_ctx(LOG_NOTICE, &lc, "Run's end (replication_failed) is in the cluster now");
		put_end(e, "failed", code, msg);
		return;
	}
	if (res->err == 0) {
		log_ctx(LOG_WARNING, &lc, "Run failed: %s (node_lost)", msg);
		metrics_count_finish(c, "failed");
		c->m.cluster_runs_taken_over++;
		put_end(e, "failed", code, msg);
		return;
	}
	/* -ESTALE: the log moved on since it was read (the lost node came back
	 * and wrote, or ended the run): read it again, and end it unless it
	 * ended. Else (no leader for a while): the same. This node owns the
	 * thread now; its stale owner stops the run by itself (its lease
	 * check), and is fenced once this end is in. */
	if (res->err == -ESTALE)
		log_ctx(LOG_NOTICE, &lc, "Run of node %s: its log moved on; reading it again",
			ending_node(e));
	ending_reset(e);
	e->seq = -1;
	if (ending_later(e) == 0)
		return;
	log_ctx_errno(LOG_ERR, res->err, &lc,
		      "Run of node %s could not be ended in the cluster: %m", ending_node(e));
	ending_give_up(e);
}

/* Is text (an event) terminal: its status, or NULL. */
static const char *
terminal_status(const void *data, size_t len, const char **code)
{
	json_auto_t *j = json_loadb(data, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	*code = NULL;
	if (type && streq(type, "RUN_FINISHED"))
		return "completed";
	if (type && streq(type, "RUN_ERROR")) {
		static char buf[64];
		snprintf(buf, sizeof(buf), "%s",
			 json_string_value(json_object_get(j, "code")) ?: "error");
		*code = buf;
		return "failed";
	}
	return NULL;
}

/* Publish e's end after its last event (e->seq, -1 none; fenced on
 * e->expect): the closers of what its events left open (e->agui), then
 * RUN_ERROR node_lost (replication_failed for this node's own run) — a
 * valid AG-UI stream, as agui_guard_end leaves a run ended here. */
static void
publish_end(Ending *e)
{
	Coordinator *c = e->loss->t->c;
	const char *thread = json_string_value(json_object_get(e->rec, "threadId"));
	int64_t now = now_epoch_ms();
	char msg[160];
	const char *code = ending_code(e, msg, sizeof(msg));

	json_auto_t *all = agui_state_closers(&e->agui, msg);
	json_t *chunk = run_error_chunk(msg, code, thread, e->run_id, now);
	int r = all && chunk && json_array_append_new(all, chunk) == 0 ? 0 : -ENOMEM;
	if (r < 0 && !all)
		json_decref(chunk);
	size_t n = r == 0 ? json_array_size(all) : 0;
	ClusterEvent *ev = n ? calloc(n, sizeof(*ev)) : NULL;
	e->texts = n ? calloc(n, sizeof(char *)) : NULL;
	if (!ev || !e->texts)
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		json_t *x = json_array_get(all, i);
		if (!json_object_get(x, "timestamp"))
			json_object_set_new(x, "timestamp", json_integer(now));
		if (!(e->texts[i] = json_dump_compact(x)))
			r = -ENOMEM;
		else
			ev[i] = (ClusterEvent){e->texts[i], strlen(e->texts[i])};
		e->n_texts = i + 1;
	}
	uint64_t first = (uint64_t)(e->seq + 1);
	if (r == 0) {
		e->seq += (int64_t)n; /* the end's seq: the record's lastSeq */
		r = cluster_publish_events(c->cluster, e->run_id, first, ev, n, e->expect,
					   on_lost_published, e);
	}
	free(ev);
	if (r < 0)
		on_lost_published(c->cluster, &(ClusterPublishResult){.err = r}, e);
}

/* A page of the run's events (from seq 0): tracked until its last event
 * (e->seq, read at the leader) is in; a replica that lags behind it is
 * read again a second later. */
static void
on_lost_events(Cluster *cl, int err, const ClusterReadEvent *ev, size_t n, uint64_t next_stream_seq,
	       void *userdata)
{
	Ending *e = userdata;
	bool done = false;

	for (size_t i = 0; err == 0 && i < n && !done; i++) {
		if ((int64_t)ev[i].seq > e->seq)
			break;
		json_auto_t *j = json_loadb(ev[i].data, ev[i].len, 0, NULL);
		if (j)
			agui_state_track(&e->agui, j);
		done = (int64_t)ev[i].seq == e->seq;
	}
	if (done) {
		publish_end(e);
		return;
	}
	if (err == 0 && n == ENDING_READ_MAX) {
		int r = cluster_read_events(cl, e->run_id, ev[n - 1].seq + 1, next_stream_seq,
					    ENDING_READ_MAX, on_lost_events, e);
		if (r == 0)
			return;
		err = r;
	}
	/* an error, or a replica behind the leader: from the last event again */
	ending_reset(e);
	e->seq = -1;
	LogCtx lc = {.run_id = e->run_id};
	if (ending_later(e) == 0)
		return;
	log_ctx_errno(LOG_ERR, err ? err : -EAGAIN, &lc,
		      "Run of lost node %s: its events unread: %m", ending_node(e));
	ending_give_up(e);
}

static void
on_lost_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	Ending *e = userdata;
	Coordinator *c = e->loss->t->c;
	const char *thread = json_string_value(json_object_get(e->rec, "threadId"));
	LogCtx lc = {.run_id = e->run_id, .thread_id = thread};
	uint64_t expect = 0;

	if (err == 0) {
		const char *code, *status = terminal_status(last->data, last->len, &code);
		e->seq = (int64_t)last->seq;
		if (status && e->loss->own) { /* a taker ended it: its record is its */
			log_ctx(LOG_NOTICE, &lc, "Run's end in the cluster: %s (%s)", status,
				code ?: "-");
			ending_free(e);
			return;
		}
		if (status) { /* its owner ended it, and died before the record */
			log_ctx(LOG_NOTICE, &lc,
				"Run of lost node %s had ended (%s); record corrected",
				ending_node(e), status);
			put_end(e, status, code, code ? "the run failed" : NULL);
			return;
		}
		expect = last->stream_seq;
	} else if (err != -ENOENT) {
		if (ending_later(e) == 0)
			return;
		log_ctx_errno(LOG_ERR, err, &lc, "Run of lost node %s: its last event unread: %m",
			      ending_node(e));
		ending_give_up(e);
		return;
	}
	e->expect = expect;
	if (err == -ENOENT) {
		publish_end(e);
		return;
	}
	/* what the run left open, from its events: closed before the end */
	int r =
	    cluster_read_events(c->cluster, e->run_id, 0, 0, ENDING_READ_MAX, on_lost_events, e);
	if (r < 0)
		on_lost_events(c->cluster, r, NULL, 0, 0, e);
}

/* How long a run this node ended is remembered (not ended again here). */
#define ENDED_KEEP_MS (10 * 60 * 1000)

/* Has this node begun to end run_id (or ended it within ENDED_KEEP_MS)?
 * Else it is noted now. Two of this node's paths may reach one run: the
 * loss of its node (its thread is owned here) and the take of its thread
 * from its lost owner (on_taken). */
static bool
ended_here(Takeover *t, const char *run_id)
{
	int64_t now = now_epoch_ms();
	const char *k;
	void *tmp;
	json_t *v;

	if (json_object_get(t->ended, run_id))
		return true;
	json_object_foreach_safe(t->ended, tmp, k, v)
	{
		if (now - json_integer_value(v) > ENDED_KEEP_MS)
			json_object_del(t->ended, k);
	}
	(void)json_object_set_new(t->ended, run_id, json_integer(now));
	return false;
}

static void
end_run(Loss *l, json_t *rec)
{
	Coordinator *c = l->t->c;
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	if (!run_id || strlen(run_id) != RUN_ID_LEN)
		return;
	if (ended_here(l->t, run_id)) {
		log_ctx(LOG_DEBUG, &(LogCtx){.run_id = run_id},
			"Run of lost node %s: already being ended here", l->node);
		return;
	}
	Ending *e = calloc(1, sizeof(*e));
	if (!e) {
		json_object_del(l->t->ended, run_id);
		return;
	}
	e->loss = loss_ref(l);
	memcpy(e->run_id, run_id, RUN_ID_LEN + 1);
	e->rec = json_incref(rec);
	e->seq = -1;
	int r = cluster_run_last(c->cluster, e->run_id, on_lost_last, e);
	if (r < 0)
		on_lost_last(c->cluster, r, &(ClusterRunLast){0}, e);
}

/* Is node lost, for a run of it on a thread l's take won: reported lost
 * here and not beating since, or without a key in rw_nodes when l listed it
 * (before its takes: a node lost before this process started, whose loss
 * it never saw). */
static bool
node_lost_here(Loss *l, const char *node)
{
	const char *want = node;
	if (!node)
		return false;
	if (l->alive && !json_object_get(l->alive, node))
		return true;
	if (!json_object_get(l->t->lost, node))
		return false;
	cluster_foreach_node(l->t->c->cluster, node_alive_cb, &want);
	return want != NULL;
}

static void
on_taken(Cluster *cl, int err, const ClusterOwner *owner, void *userdata)
{
	Taking *tk = userdata;
	Loss *l = tk->loss;
	Coordinator *c = l->t->c;
	const char *thread = l->threads[tk->i];
	LogCtx lc = {.thread_id = thread};

	if (err == 0) {
		log_ctx(LOG_NOTICE, &lc, "Thread taken over from lost node %s (epoch %" PRIu64 ")",
			l->node, owner->epoch);
		placement_own(c, thread);
		adopt_thread(l, thread);
		size_t i;
		json_t *rec;
		json_array_foreach(l->runs, i, rec)
		{
			const char *t = json_string_value(json_object_get(rec, "threadId"));
			const char *node = json_string_value(json_object_get(rec, "node"));
			if (!t || !streq(t, thread) || !node)
				continue;
			/* its owner's runs; and a run another lost node opened
			 * on it (RUN_OPEN), which that node's loss left to the
			 * owner (step 3b): lost too, it is this taker's */
			if (streq(node, l->node))
				end_run(l, rec);
			else if (node_lost_here(l, node)) {
				LogCtx rc = {.run_id =
						 json_string_value(json_object_get(rec, "runId")),
					     .thread_id = thread};
				log_ctx(LOG_NOTICE, &rc,
					"Run of lost node %s on a thread of lost node %s: ended "
					"by its taker",
					node, l->node);
				end_run(l, rec);
			}
		}
	} else if (err == -ESTALE) {
		log_ctx(LOG_DEBUG, &lc, "Thread of lost node %s: node %s took it", l->node,
			owner->node[0] ? owner->node : "(another)");
	} else if (err == -EALREADY) {
		log_ctx(LOG_NOTICE, &lc,
			"Thread of node %s not taken over: the node beats again; it keeps it",
			l->node);
	} else {
		if (later(c, &tk->attempts, take_again, tk) == 0)
			return;
		log_ctx_errno(LOG_ERR, err, &lc, "Thread of lost node %s not taken: %m", l->node);
	}
	free(tk);
	loss_unref(l);
}

/* A run of the lost node on a thread nobody owns (the direct run-log API,
 * RUN_OPEN, does not claim): the node that claims the thread ends it. */
typedef struct Orphan {
	Loss *loss;
	json_t *rec;
	int attempts;
	char thread[];
} Orphan;

static void on_orphan_claimed(Cluster *cl, int err, const ClusterOwner *owner, void *userdata);

static void
claim_orphan(Orphan *o)
{
	Cluster *cl = o->loss->t->c->cluster;
	int r = cluster_claim_thread(cl, o->thread, cluster_node(cl), on_orphan_claimed, o);
	if (r < 0)
		on_orphan_claimed(cl, r, &(ClusterOwner){0}, o);
}

static void
claim_orphan_again(evutil_socket_t fd, short what, void *arg)
{
	claim_orphan(arg);
}

static void
on_orphan_claimed(Cluster *cl, int err, const ClusterOwner *owner, void *userdata)
{
	Orphan *o = userdata;
	Loss *l = o->loss;
	Coordinator *c = l->t->c;
	LogCtx lc = {.run_id = json_string_value(json_object_get(o->rec, "runId")),
		     .thread_id = o->thread};

	if (err == 0 || (err == -EEXIST && streq(owner->node, cluster_node(cl)))) {
		log_ctx(LOG_NOTICE, &lc,
			"Thread claimed to end the run lost node %s ran on it (epoch %" PRIu64 ")",
			l->node, owner->epoch);
		placement_own(c, o->thread);
		adopt_thread(l, o->thread);
		end_run(l, o->rec);
	} else if (err == -EEXIST) {
		log_ctx(LOG_DEBUG, &lc, "Run of lost node %s: node %s ends it", l->node,
			owner->node[0] ? owner->node : "(another)");
	} else {
		if (later(c, &o->attempts, claim_orphan_again, o) == 0)
			return;
		log_ctx_errno(LOG_ERR, err, &lc, "Run of lost node %s not ended: %m", l->node);
	}
	json_decref(o->rec);
	free(o);
	loss_unref(l);
}

/* A run of the lost node whose thread it did not own (RUN_OPEN registers a
 * run without claiming): ended by the thread's owner, or, when nobody owns
 * the thread, by the node that claims it now (a KV create: one winner). A
 * run on a thread the lost node owned is ended by the thread's taker
 * (on_taken). */
static void
end_unowned_run(Loss *l, json_t *rec)
{
	Coordinator *c = l->t->c;
	const char *thread = json_string_value(json_object_get(rec, "threadId"));
	const char *owner = json_string_value(json_object_get(l->owners, thread ? thread : ""));

	if (!thread || (owner && streq(owner, l->node)))
		return; /* the taker's */
	if (owner) {
		if (streq(owner, cluster_node(c->cluster)))
			end_run(l, rec);
		return; /* else its owner ends it */
	}
	size_t tl = strlen(thread) + 1;
	Orphan *o = calloc(1, sizeof(*o) + tl);
	if (!o)
		return;
	o->loss = loss_ref(l);
	o->rec = json_incref(rec);
	memcpy(o->thread, thread, tl);
	claim_orphan(o);
}

static void
take_threads(Loss *l)
{
	Coordinator *c = l->t->c;
	for (size_t i = 0; i < l->n_threads; i++) {
		Taking *tk = calloc(1, sizeof(*tk));
		if (!tk)
			break;
		tk->loss = loss_ref(l);
		tk->i = i;
		int r = take_thread(tk);
		if (r < 0)
			on_taken(c->cluster, r, &(ClusterOwner){0}, tk);
	}
}

static void
on_nodes(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata)
{
	Loss *l = userdata;

	if (err < 0) {
		if (later(l->t->c, &l->attempts, list_again, l) == 0)
			return;
		log_warning_errno(err,
				  "Cluster: live nodes not listed: %m; only the nodes seen lost "
				  "here count as lost for the runs on node %s's threads",
				  l->node);
	} else if ((l->alive = json_object()))
		for (size_t i = 0; i < n; i++)
			(void)json_object_set_new(l->alive, kv[i].key, json_true());
	take_threads(l);
	loss_unref(l);
}

static void
on_runs(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata)
{
	Loss *l = userdata;
	Coordinator *c = l->t->c;

	if (err < 0) {
		if (later(c, &l->attempts, list_again, l) == 0)
			return;
		log_error_errno(err,
				"Cluster: runs of lost node %s not listed: %m; its threads "
				"are not taken here",
				l->node);
		loss_unref(l);
		return;
	}
	size_t own = 0;
	json_auto_t *all = json_array(), *want = json_object();
	if (!all || !want) {
		loss_unref(l);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *rec = json_loadb(kv[i].value, kv[i].len, 0, NULL);
		const char *node = json_string_value(json_object_get(rec, "node"));
		const char *st = json_string_value(json_object_get(rec, "status"));
		const char *th = json_string_value(json_object_get(rec, "threadId"));
		const char *ow = json_string_value(json_object_get(l->owners, th ? th : ""));
		if (!node || !st || !th) {
			json_decref(rec);
			continue;
		}
		/* its runs; and other nodes' runs on its threads (RUN_OPEN):
		 * the taker ends those whose node is lost too (on_taken) */
		bool mine = streq(node, l->node), running = !run_status_terminal(st);
		if (running &&
		    (mine || (ow && streq(ow, l->node) && !streq(node, cluster_node(cl))))) {
			json_array_append(l->runs, rec);
			own += mine;
		}
		/* the threads this node may come to own: their runs
		 * (adopt_thread) */
		if ((ow && streq(ow, l->node)) || (!ow && mine && running))
			(void)json_object_set_new(want, th, json_true());
		(void)json_array_append_new(all, rec);
	}
	/* of those threads, the lost node's runs, and the other nodes' ended
	 * ones (a thread taken over before: its earlier owners'); not this
	 * node's (its log has them), nor another node's running run (its
	 * node's log lists it; one lost too is added when it is ended here:
	 * adopted_update) */
	size_t ai;
	json_t *arec;
	json_array_foreach(all, ai, arec)
	{
		const char *th = json_string_value(json_object_get(arec, "threadId"));
		const char *node = json_string_value(json_object_get(arec, "node"));
		const char *st = json_string_value(json_object_get(arec, "status"));
		if (!json_object_get(want, th) || streq(node, cluster_node(cl)) ||
		    (!streq(node, l->node) && !run_status_terminal(st)))
			continue;
		json_t *had = json_object_get(l->newest, th);
		if (!had && json_object_set_new(l->newest, th, had = json_array()) < 0)
			continue;
		(void)json_array_append(had, arec);
	}
	log_notice("Cluster: node %s lost: taking over its %zu thread(s), %zu run(s) running",
		   l->node, l->n_threads, own);
	size_t ri;
	json_t *rec;
	json_array_foreach(l->runs, ri, rec)
	{
		const char *node = json_string_value(json_object_get(rec, "node"));
		if (streq(node, l->node))
			end_unowned_run(l, rec);
	}
	if (json_array_size(l->runs) > own && l->n_threads > 0) {
		/* other nodes' runs on its threads: which of those nodes are
		 * alive, before the takes (on_taken) */
		loss_list(l, CLUSTER_NODES);
		return;
	}
	take_threads(l);
	loss_unref(l);
}

static void
on_threads(Cluster *cl, int err, const ClusterKv *kv, size_t n, void *userdata)
{
	Loss *l = userdata;
	Coordinator *c = l->t->c;
	size_t k = 0;

	if (err < 0) {
		if (later(c, &l->attempts, list_again, l) == 0)
			return;
		log_error_errno(err, "Cluster: threads of lost node %s not listed: %m", l->node);
		loss_unref(l);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		k += kv[i].len == strlen(l->node) && memcmp(kv[i].value, l->node, kv[i].len) == 0;
		json_object_set_new(l->owners, kv[i].key,
				    json_stringn((const char *)kv[i].value, kv[i].len));
	}
	l->threads = calloc(k ? k : 1, sizeof(char *));
	l->revs = calloc(k ? k : 1, sizeof(uint64_t));
	if (!l->threads || !l->revs) {
		loss_unref(l);
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (kv[i].len == strlen(l->node) && memcmp(kv[i].value, l->node, kv[i].len) == 0 &&
		    (l->threads[l->n_threads] = strdup(kv[i].key)))
			l->revs[l->n_threads++] = kv[i].revision;
	/* its runs, also when it owned no thread (a run opened there with
	 * RUN_OPEN, which does not claim) */
	loss_list(l, CLUSTER_RUNS);
}

/* A Loss (refs 1, linked), for node; NULL when out of memory. */
static Loss *
loss_new(Takeover *t, const char *node)
{
	Loss *l = calloc(1, sizeof(*l));
	if (!l || !(l->runs = json_array()) || !(l->owners = json_object()) ||
	    !(l->newest = json_object())) {
		if (l) {
			json_decref(l->runs);
			json_decref(l->owners);
		}
		free(l);
		return NULL;
	}
	l->t = t;
	l->refs = 1;
	snprintf(l->node, sizeof(l->node), "%s", node);
	l->next = t->losses;
	t->losses = l;
	return l;
}

void
takeover_end_unreplicated(Coordinator *c, const json_t *rec)
{
	Takeover *t = c->takeover;
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	if (!t || !c->cluster || !run_id)
		return;
	Loss *l = NULL;
	for (Loss *x = t->losses; x && !l; x = x->next)
		if (x->own)
			l = loss_ref(x);
	if (!l && (l = loss_new(t, cluster_node(c->cluster))))
		l->own = true;
	json_auto_t *copy = json_deep_copy(rec);
	if (l && copy &&
	    json_object_set_new(copy, "node", json_string(cluster_node(c->cluster))) == 0) {
		log_ctx(LOG_NOTICE, &(LogCtx){.run_id = run_id},
			"Run failed unreplicated: its end goes to the cluster when it answers");
		end_run(l, copy);
	} else
		log_ctx(LOG_ERR, &(LogCtx){.run_id = run_id},
			"Out of memory: the run's end (replication_failed) stays local");
	if (l)
		loss_unref(l);
}

void
takeover_node_lost(Coordinator *c, const char *node)
{
	Takeover *t = c->takeover;

	if (!t || !c->cluster)
		return;
	if (streq(node, cluster_node(c->cluster))) {
		/* this node's own key expired (a pause): its lease check
		 * re-verifies its threads and runs; it takes nothing */
		log_warning("Cluster: this node's own heartbeat key expired; its threads may "
			    "have been taken over");
		return;
	}
	/* what other nodes' threads it owned are not its any more */
	placement_forget_node(c, node);
	/* before its listings: a take whose answer comes after this sees it
	 * lost (on_taken), one that came before is in the listing */
	(void)json_object_set_new(t->lost, node, json_true());
	Loss *l = loss_new(t, node);
	if (!l) {
		log_error("Cluster: out of memory taking over node %s", node);
		return;
	}
	l->node_rev = cluster_node_revision(c->cluster, node);
	loss_list(l, CLUSTER_THREADS);
}

/* ---- this node's lease, its load ---- */

typedef struct OwnCheck {
	Coordinator *c;
	char run_id[RUN_ID_LEN + 1];
	char thread[]; /* for a check of the thread's owner */
} OwnCheck;

static void
on_own_thread(Cluster *cl, int err, const ClusterOwner *owner, void *userdata)
{
	OwnCheck *oc = userdata;
	LogCtx lc = {.run_id = oc->run_id, .thread_id = oc->thread};

	if (err == 0 && !streq(owner->node, cluster_node(cl))) {
		log_ctx(LOG_WARNING, &lc,
			"Run's thread was taken over by %s while this node's lease lapsed",
			owner->node);
		replicate_fence(oc->c, oc->run_id);
	}
	free(oc);
}

static void
on_own_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	OwnCheck *oc = userdata;

	if (err == 0 && !replicate_own_writer(oc->c, last->writer)) {
		log_ctx(LOG_WARNING, &(LogCtx){.run_id = oc->run_id},
			"Run was written by %s while this node's lease lapsed", last->writer);
		replicate_fence(oc->c, oc->run_id);
	}
	free(oc);
}

/* After a lapse of the lease: is each run driven here still this node's —
 * its thread (a taker owns it now, even if it has not ended the run yet),
 * and its log (another node wrote it last)? */
static void
check_own_runs(Coordinator *c)
{
	for (Run *run = c->runs; run; run = run->next) {
		if (run->state == RUN_DONE)
			continue;
		size_t tl = strlen(run->thread_id) + 1;
		OwnCheck *oc = calloc(1, sizeof(*oc));
		OwnCheck *ot = calloc(1, sizeof(*ot) + tl);
		if (oc) {
			oc->c = c;
			memcpy(oc->run_id, run->run_id, RUN_ID_LEN + 1);
			if (cluster_run_last(c->cluster, oc->run_id, on_own_last, oc) < 0)
				free(oc);
		}
		if (ot) {
			ot->c = c;
			memcpy(ot->run_id, run->run_id, RUN_ID_LEN + 1);
			memcpy(ot->thread, run->thread_id, tl);
			if (cluster_owner(c->cluster, ot->thread, on_own_thread, ot) < 0)
				free(ot);
		}
	}
}

static void
set_info(Coordinator *c)
{
	size_t runs = 0, sandboxes = 0;
	for (Run *run = c->runs; run; run = run->next) {
		if (run->state == RUN_DONE)
			continue;
		runs++;
		bool seen = !run->sandbox_id;
		for (Run *p = c->runs; !seen && p != run; p = p->next)
			seen = p->state != RUN_DONE && p->sandbox_id &&
			       streq(p->sandbox_id, run->sandbox_id);
		sandboxes += !seen;
	}
	char info[128];
	snprintf(info, sizeof(info),
		 "{\"runs\":%zu,\"sandboxes\":%zu,\"threads\":%zu,\"max_runs\":%" PRId64 "}", runs,
		 sandboxes, placement_owned_count(c), c->conf.shared.cluster.max_runs);
	(void)cluster_set_node_info(c->cluster, info);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	Takeover *t = arg;
	Coordinator *c = t->c;
	uint64_t g = cluster_lease(c->cluster);

	set_info(c);
	if (g == 0) {
		if (t->lease && !t->lapsed)
			log_warning("Cluster: this node's lease on its heartbeat key lapsed "
				    "(no heartbeat acknowledged for half its TTL)");
		t->lapsed = t->lease != 0;
		return;
	}
	if (t->lease && (t->lapsed || g != t->lease)) {
		log_notice("Cluster: lease back; checking that this node's runs are still its own");
		check_own_runs(c);
		adopted_check(&t->adopted);
	} else if (!t->adopted.checked && cluster_ready(c->cluster))
		adopted_check(&t->adopted);
	t->lease = g;
	t->lapsed = false;
}

int
takeover_setup(Coordinator *c)
{
	if (!c->cluster)
		return 0;
	Takeover *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->c = c;
	t->lost = json_object();
	t->ended = json_object();
	if (!t->lost || !t->ended || adopted_init(&t->adopted, c) < 0) {
		json_decref(t->lost);
		json_decref(t->ended);
		adopted_done(&t->adopted);
		free(t);
		return -ENOMEM;
	}
	int64_t ms = c->conf.shared.cluster.heartbeat_ms;
	if (ms <= 0)
		ms = 1000;
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	t->tick = event_new(c->base, -1, EV_PERSIST, on_tick, t);
	if (!t->tick || event_add(t->tick, &tv) < 0) {
		if (t->tick)
			event_free(t->tick);
		json_decref(t->lost);
		json_decref(t->ended);
		adopted_done(&t->adopted);
		free(t);
		return -ENOMEM;
	}
	c->takeover = t;
	return 0;
}

Adopted *
takeover_adopted(Coordinator *c)
{
	return c->takeover ? &c->takeover->adopted : NULL;
}

/* After cluster_free(): no callback of a takeover in progress comes any more
 * (the calls it had in flight are dropped with their small contexts). */
void
takeover_teardown(Coordinator *c)
{
	Takeover *t = c->takeover;
	if (!t)
		return;
	if (t->tick)
		event_free(t->tick);
	while (t->losses) {
		Loss *l = t->losses;
		l->refs = 1;
		loss_unref(l); /* unlinks it */
	}
	json_decref(t->lost);
	json_decref(t->ended);
	adopted_done(&t->adopted);
	free(t);
	c->takeover = NULL;
}
