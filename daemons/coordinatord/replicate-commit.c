/* SPDX-License-Identifier: MIT */
/*
 * replicate-commit.c — cluster mode's delivery of commits
 * (commit_delivery_replicated, commit-int.h): JetStream between the commit
 * and visibility.
 *
 * Each run of a commit is a step: its committed events go to replicate.c
 * (replicate_events), and only once JetStream acknowledged them are they
 * published, their clients answered and their driver told (commit_visible);
 * a step that failed fails its run locally (fenced, replication_failed).
 * Runs whose events are being taken back from the cluster at start wait at
 * the queue's head (hold); a client's events of a run driven nowhere here
 * may go out before the flush (before_flush: docs/CLUSTER.md "Publishing
 * before the flush"), and a flush that fails after that stops the process
 * (failed). Events committed outside the queue (the watchdog's end, a
 * failed commit's run end) are replicated before they are published (late).
 */
#include "config.h"

#include "cluster-mode.h"
#include "commit-int.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

/* ---------- events committed outside the op queue ---------- */

typedef struct Late {
	char run_id[RUN_ID_LEN + 1];
	int64_t first_seq;
	size_t n;
	char **texts;
	size_t *lens;
	json_t *rec;
} Late;

static void
late_free(Late *l)
{
	for (size_t i = 0; l->texts && i < l->n; i++)
		free(l->texts[i]);
	free(l->texts);
	free(l->lens);
	json_decref(l->rec);
	free(l);
}

static void
late_replicated(Coordinator *c, int err, void *arg)
{
	Late *l = arg;
	if (err == 0)
		publish(c, l->run_id, l->first_seq, (const char *const *)l->texts, l->lens, l->n,
			l->rec);
	else if (err != -ECANCELED)
		log_ctx_errno(LOG_ERR, err, &(LogCtx){.run_id = l->run_id},
			      "Run's end was not replicated to the cluster: %m; it is in the "
			      "local log only");
	late_free(l);
}

static void
repl_late(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	  const size_t *lens, size_t n, const json_t *rec)
{
	Late *l = calloc(1, sizeof(*l));
	bool ok = l && (l->texts = calloc(n ? n : 1, sizeof(char *))) &&
		  (l->lens = calloc(n ? n : 1, sizeof(size_t)));
	if (l) {
		snprintf(l->run_id, sizeof(l->run_id), "%s", run_id);
		l->first_seq = first_seq;
		l->rec = json_deep_copy(rec);
	}
	for (size_t i = 0; ok && i < n; i++) {
		ok = (l->texts[i] = malloc(lens[i] ? lens[i] : 1)) != NULL;
		if (ok) {
			memcpy(l->texts[i], texts[i], lens[i]);
			l->lens[i] = lens[i];
			l->n = i + 1;
		}
	}
	int r = ok && l->rec ? replicate_events(c, run_id, first_seq, (const char *const *)l->texts,
						l->lens, l->n, l->rec, late_replicated, l)
			     : -ENOMEM;
	if (r == 1)
		late_replicated(c, 0, l);
	else if (r < 0 && l)
		late_replicated(c, r == -ECANCELED ? -EIO : r, l);
	else if (r < 0)
		log_ctx_errno(LOG_ERR, r, &(LogCtx){.run_id = run_id},
			      "Run's end was not replicated to the cluster: %m");
}

/* A run ended locally because its events were not replicated: its tails go
 * on with the cluster's history. */
static void
repl_ended_local(Coordinator *c, const char *run_id, int64_t seq, const char *text, size_t len,
		 const json_t *rec)
{
	const char *code =
	    json_string_value(json_object_get(json_object_get(rec, "error"), "code"));
	if (c->cluster && code && streq(code, RUN_ERR_REPLICATION_FAILED))
		takeover_end_unreplicated(c, rec); /* fenced: the other writer ends it */
	if (c->cluster)
		remote_watch_divert(c, run_id, json_string_value(json_object_get(rec, "threadId")));
	else
		publish(c, run_id, seq, &text, &len, 1, rec);
}

void
commit_fail_fenced(Coordinator *c, const char *run_id)
{
	commit_fail_local(c, run_id, true, RUN_ERR_FENCED,
			  "another node owns this run now; its processes here were stopped",
			  COMMIT_FENCED);
}

/* ---------- a commit's runs, each when replicated ---------- */

/* A run of a commit: its record as committed, and what its ops wait for. */
typedef struct RunStep {
	CommitGroup *g;
	const char *run_id; /* its first op's */
	json_t *rec;	    /* the run's record after the commit, or NULL */
	bool ended;	    /* replicated while the group was writing: err waits */
	int err;
} RunStep;

/* The replicate step of st's run ended. -ECANCELED: shutdown, drop it. An
 * error: what the local log has past JetStream's copy is seen by nobody
 * through this commit; its clients get the error, and the run is stopped
 * and failed locally (fenced: another node owns it now). */
static void
step_end(Coordinator *c, RunStep *st, int err)
{
	if (err == 0) {
		commit_visible(c, st->rec, st->g->ops, st->run_id);
		return;
	}
	if (err == -ECANCELED)
		return;
	bool fenced = err == -ESTALE, is_run = false;
	for (Op *op = st->g->ops; op; op = op->next)
		if (streq(op->run_id, st->run_id)) {
			is_run |= op->is_run;
			peer_deferred_error(TAKE_PTR(op->ack), fenced ? -ESTALE : -EIO,
					    fenced ? REASON_NOT_OWNER : REASON_REPLICATION_FAILED,
					    fenced ? "another node owns this run now (fenced)"
						   : "the cluster did not acknowledge the events");
		}
	commit_fail_local(c, st->run_id, is_run,
			  fenced ? RUN_ERR_FENCED : RUN_ERR_REPLICATION_FAILED,
			  fenced ? "another node owns this run now; its processes here were stopped"
				 : "the cluster did not acknowledge the run's events",
			  COMMIT_FENCED);
}

static void
step_replicated(Coordinator *c, int err, void *arg)
{
	RunStep *st = arg;
	CommitGroup *g = st->g;

	if (g->writing) { /* an early step: nothing is visible before the commit */
		st->ended = true;
		st->err = err;
		return;
	}
	step_end(c, st, err);
	json_decref(st->rec);
	free(st);
	commit_group_unref(g);
}

static RunStep *
step_new(CommitGroup *g, const char *run_id, json_t *rec)
{
	RunStep *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	*st = (RunStep){.g = g, .run_id = run_id, .rec = rec};
	commit_group_ref(g);
	return st;
}

/* Hand st's committed (or, early, written) events to the replicate step. */
static void
step_replicate(Coordinator *c, RunStep *st)
{
	CommitGroup *g = st->g;
	const char *run_id = st->run_id;
	size_t n = 0;
	for (Op *op = g->ops; op; op = op->next)
		if (op->err == 0 && op->text && streq(op->run_id, run_id))
			n++;
	const char **texts = calloc(n ? n : 1, sizeof(char *));
	size_t *lens = calloc(n ? n : 1, sizeof(size_t));
	int64_t first = -1;
	int r = -ENOMEM;
	if (texts && lens) {
		size_t i = 0;
		for (Op *op = g->ops; op; op = op->next)
			if (op->err == 0 && op->text && streq(op->run_id, run_id)) {
				if (first < 0)
					first = op->seq;
				texts[i] = op->text;
				lens[i++] = op->len;
			}
		r = replicate_events(c, run_id, first < 0 ? 0 : first, texts, lens, n, st->rec,
				     step_replicated, st);
	}
	free(texts);
	free(lens);
	if (r != 0)
		step_replicated(c, r > 0 ? 0 : r, st);
}

/* A run's step after the commit (rec: taken). */
static void
step_start(Coordinator *c, CommitGroup *g, const char *run_id, json_t *rec)
{
	RunStep *st = step_new(g, run_id, rec);
	if (!st) { /* out of memory: fail closed */
		RunStep tmp = {.g = g, .run_id = run_id, .rec = rec};
		step_end(c, &tmp, -ENOMEM);
		json_decref(rec);
		return;
	}
	step_replicate(c, st);
}

/* ---------- the delivery ---------- */

/* At start: the ops of runs whose events are being taken back from the
 * cluster (replicate.c) wait, in order, at the queue's head until that is
 * done; the others are returned. */
static Op *
repl_hold(Coordinator *c, Op *ops)
{
	Op *keep = NULL, **kt = &keep, *held = NULL, *held_last = NULL;

	if (!replicate_held(c, NULL)) /* only while some run is being taken back */
		return ops;
	while (ops) {
		Op *op = ops;
		ops = op->next;
		op->next = NULL;
		if (replicate_held(c, op->run_id)) {
			if (held_last)
				held_last->next = op;
			else
				held = op;
			held_last = op;
		} else {
			*kt = op;
			kt = &op->next;
		}
	}
	if (held) {
		held_last->next = c->ops_head;
		if (!c->ops_head)
			c->ops_tail = held_last;
		c->ops_head = held;
	}
	return keep;
}

/* The runs of this commit whose events may go to JetStream before the
 * transaction is on disk, their steps started with the group writing (their
 * ends wait for the commit: nothing is visible before it): a direct-log
 * client's events of a run that is not driven here and whose record is
 * mirrored as it is (replicate_early): a restart after a flush that never
 * happened needs nothing but those events to take them back
 * (docs/CLUSTER.md "Publishing before the flush"). */
static void
repl_before_flush(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b)
{
	size_t n = 0;
	LogCtx rl;

	if (!runs->k || runlog_batch_seal(b) < 0) /* a failed seal fails the commit */
		return;
	for (size_t i = 0; i < runs->k; i++) {
		RunStep *st;
		if (!runs->plain[i] || !replicate_early(c, runs->ids[i], runs->recs[i]) ||
		    c->commit_hooks->run_log(c, runs->ids[i], &rl) ||
		    !(st = step_new(g, runs->ids[i], runs->recs[i])))
			continue;
		runs->state[i] = st;
		runs->recs[i] = NULL; /* the step's now */
		step_replicate(c, st);
		n++;
	}
	if (n)
		replicate_flush(c);
}

static size_t
early_count(const CommitRuns *runs)
{
	size_t n = 0;
	for (size_t i = 0; i < runs->k; i++)
		n += runs->state[i] != NULL;
	return n;
}

/* The flush failed after early steps: JetStream may hold events this log
 * now lacks: going on (even failing the runs here) would write other events
 * at their seqs. Write nothing more and stop; the next start takes them back
 * from the cluster before anything else is written to them (replicate.c,
 * take_back). Clients get no answer: their connections close with the
 * process. Without early steps the core fails the runs as usual. */
static bool
repl_failed(Coordinator *c, CommitGroup *g, CommitRuns *runs, int r)
{
	size_t n_early = early_count(runs);

	if (!n_early)
		return false;
	log_error_errno(r,
			"Run log commit failed after the events of %zu run(s) went to the "
			"cluster; stopping: the next start takes them back from JetStream",
			n_early);
	c->halted = r;
	event_base_loopbreak(c->base);
	for (size_t i = 0; i < runs->k; i++) {
		RunStep *st = runs->state[i];
		if (st && st->ended) /* else its done comes at teardown */
			step_replicated(c, -ECANCELED, st);
	}
	return true;
}

/* Each run when replicated (an early one's end waited for the flush). */
static void
repl_committed(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b)
{
	if (runs->degraded) { /* out of memory: fail closed, run by run */
		for (Op *op = g->ops; op; op = op->next) {
			if (!commit_first_of_run(g->ops, op))
				continue;
			json_t *rec = runlog_batch_get_record(b, op->run_id);
			step_end(c, &(RunStep){.g = g, .run_id = op->run_id, .rec = rec}, -ENOMEM);
			json_decref(rec);
		}
		return;
	}
	size_t n_early = 0;
	for (size_t i = 0; i < runs->k; i++) {
		RunStep *st = runs->state[i];
		if (!st) {
			step_start(c, g, runs->ids[i], TAKE_PTR(runs->recs[i]));
			continue;
		}
		n_early++;
		if (st->ended)
			step_replicated(c, st->err, st);
	}
	if (runs->k > n_early)
		replicate_flush(c);
}

/* While other runs' publishes are out, their acknowledgements are about to
 * let their clients and drivers queue more; a commit now would be followed
 * by one per run as each acknowledgement comes (one flush each, on this
 * thread). Wait for them — at most replicate_linger() (about one publish
 * round trip) from the oldest queued op — so that they share one commit, as
 * single-host mode's appends share theirs. A commit with no publish out (a
 * serial client, an idle cluster) goes at once. */
const CommitDelivery commit_delivery_replicated = {
    .hold = repl_hold,
    .before_flush = repl_before_flush,
    .failed = repl_failed,
    .committed = repl_committed,
    .linger = replicate_linger,
    .late = repl_late,
    .ended_local = repl_ended_local,
};
