/* SPDX-License-Identifier: MIT */
/*
 * takeback.c — cluster mode: taking a run's events back from the cluster at
 * start (docs/CLUSTER.md "Publishing before the flush").
 *
 * A client's events may go to JetStream before their commit is on disk
 * (replicate_early: the two overlap). A process that stopped in between
 * (kill -9, a failed commit: commit.c exits then) leaves the stream ahead of
 * the local log by what that commit wrote. Before anything else is written
 * to such a run, the next process reads the run's last event at the leader
 * and commits what the local log lacks, exactly as the stream has it — the
 * events alone are enough: an early commit holds nothing else (no driver
 * state, no change of record). Checked: every running run with no driver
 * state (a driven run's events are never published early); their ops wait
 * meanwhile (replicate_held), the others' do not.
 *
 * replicate.c collects the runs at setup (takeback_collect), starts the
 * comparison at the cluster's first READY (takeback_start) and refuses them
 * all when the cluster failed first (takeback_fail). A run compared is
 * either known to replicate.c (replicate_known: its next publish expects the
 * stream's last event) or refused (replicate_refuse: fail closed).
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

/* A run this node writes that the last process may have left behind the
 * stream: its events went to JetStream before their commit's flush
 * (replicate_early), and the process stopped in between. */
typedef struct Back {
	struct Back *next;
	struct TakeBack *tb;
	char run_id[RUN_ID_LEN + 1];
	int64_t local;	     /* the local log's last seq */
	uint64_t want;	     /* the stream's */
	uint64_t stream_seq; /* ... and its stream sequence */
	unsigned tries;	     /* reads that found nothing new (a lagging replica) */
	struct event *retry;
} Back;

struct TakeBack {
	Coordinator *c;
	Back *backs; /* the runs still to compare */
};

static void back_read(Back *bk);

static void
back_free(Back *bk)
{
	if (bk->retry)
		event_free(bk->retry);
	free(bk);
}

static void
back_done(Back *bk, int err)
{
	TakeBack *tb = bk->tb;
	Coordinator *c = tb->c;
	LogCtx lc = {.run_id = bk->run_id};

	if (err < 0) {
		/* fail closed: the run's next events could collide with what
		 * the stream holds */
		log_ctx_errno(LOG_ERR, err, &lc,
			      "Cannot compare the run's log with the cluster's at start: %m; its "
			      "events are refused");
		replicate_refuse(c, bk->run_id, err);
	}
	for (Back **p = &tb->backs; *p; p = &(*p)->next)
		if (*p == bk) {
			*p = bk->next;
			break;
		}
	back_free(bk);
	if (!tb->backs && c->commit_ev) /* the ops held go on */
		event_active(c->commit_ev, 0, 0);
}

/* The run's last event in the stream is known to be bk->want, at stream
 * sequence bk->stream_seq: the run's next publish expects it. */
static void
back_known(Back *bk)
{
	replicate_known(bk->tb->c, bk->run_id, (int64_t)bk->want, bk->stream_seq);
}

/* Commit events read back (seq order, from bk->local + 1), publish them to
 * the local watchers. */
static int
back_commit(Back *bk, const ClusterReadEvent *ev, size_t n)
{
	Coordinator *c = bk->tb->c;
	RunLogBatch *b = NULL;
	int64_t first = bk->local + 1, seq = -1, now = now_epoch_ms();
	int r = runlog_batch_begin(c->runlog, &b);

	for (size_t i = 0; r == 0 && i < n; i++) {
		if (ev[i].seq != (uint64_t)(first + (int64_t)i))
			r = -EPROTO;
		else if ((r = runlog_batch_append(b, bk->run_id, ev[i].data, ev[i].len, NULL, NULL,
						  now, &seq)) == 0 &&
			 seq != first + (int64_t)i)
			r = -EPROTO; /* the local log moved meanwhile: never */
	}
	json_t *rec = r == 0 ? runlog_batch_get_record(b, bk->run_id) : NULL;
	if (r == 0)
		r = runlog_batch_commit(b);
	runlog_batch_free(b);
	if (r < 0) {
		json_decref(rec);
		return r;
	}
	const char **texts = calloc(n, sizeof(char *));
	size_t *lens = calloc(n, sizeof(size_t));
	for (size_t i = 0; texts && lens && i < n; i++) {
		texts[i] = ev[i].data;
		lens[i] = ev[i].len;
	}
	if (texts && lens)
		publish(c, bk->run_id, first, texts, lens, n, rec);
	free(texts);
	free(lens);
	json_decref(rec);
	bk->local += (int64_t)n;
	return 0;
}

static void
back_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	back_read(arg);
}

static void
on_back_read(Cluster *cl, int err, const ClusterReadEvent *ev, size_t n, uint64_t next_stream_seq,
	     void *userdata)
{
	Back *bk = userdata;
	LogCtx lc = {.run_id = bk->run_id};
	int64_t from = bk->local + 1;

	while (err == 0 && n && ev->seq < (uint64_t)from) { /* before what was asked: skip */
		ev++;
		n--;
	}
	if (err == 0 && n > bk->want - (uint64_t)bk->local)
		n = (size_t)(bk->want - (uint64_t)bk->local);
	if (err == 0 && n)
		err = back_commit(bk, ev, n);
	if (err < 0) {
		back_done(bk, err);
		return;
	}
	if (n)
		log_ctx(LOG_NOTICE, &lc,
			"Run's events %" PRId64 "..%" PRId64 " were in the cluster but not in the "
			"local log (the last process stopped before their commit was on disk); "
			"taken back from JetStream",
			from, bk->local);
	if ((uint64_t)bk->local >= bk->want) {
		back_known(bk);
		back_done(bk, 0);
		return;
	}
	/* a replica behind the leader's acknowledgement: ask again, shortly */
	if (n == 0 && ++bk->tries > 100) {
		back_done(bk, -ETIMEDOUT);
		return;
	}
	static const struct timeval again = {0, 50000};
	if (n)
		back_read(bk);
	else if (!bk->retry && !(bk->retry = evtimer_new(bk->tb->c->base, back_retry_cb, bk)))
		back_done(bk, -ENOMEM);
	else
		evtimer_add(bk->retry, &again);
}

static void
back_read(Back *bk)
{
	uint64_t left = bk->want - (uint64_t)bk->local;
	int err = cluster_read_events(bk->tb->c->cluster, bk->run_id, (uint64_t)(bk->local + 1), 0,
				      (size_t)MIN(left, (uint64_t)1024), on_back_read, bk);
	if (err < 0)
		back_done(bk, err);
}

static void
on_back_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	Back *bk = userdata;

	if (err == -ENOENT) { /* nothing in the stream: its first publish expects 0 */
		back_done(bk, 0);
		return;
	}
	if (err < 0) {
		back_done(bk, err);
		return;
	}
	/* another node's now: the run's next publish here is fenced */
	if (!replicate_own_writer(bk->tb->c, last->writer)) {
		back_done(bk, 0);
		return;
	}
	bk->want = last->seq;
	bk->stream_seq = last->stream_seq;
	if ((int64_t)last->seq <= bk->local) { /* the stream has no more than the log */
		back_known(bk);
		back_done(bk, 0);
		return;
	}
	back_read(bk);
}

static void
back_collect(const char *run_id, json_t *record, void *ud)
{
	TakeBack *tb = ud;
	json_t *drive = NULL;

	if (runlog_drive_get(tb->c->runlog, run_id, &drive) == 0) {
		json_decref(drive); /* a driven run: never published early */
		return;
	}
	Back *bk = calloc(1, sizeof(*bk));
	if (!bk)
		return; /* out of memory at start: its next publish is fenced if need be */
	bk->tb = tb;
	snprintf(bk->run_id, sizeof(bk->run_id), "%s", run_id);
	bk->local = json_integer_value(json_object_get(record, "lastSeq"));
	bk->next = tb->backs;
	tb->backs = bk;
}

int
takeback_collect(Coordinator *c, TakeBack **ret)
{
	TakeBack *tb = calloc(1, sizeof(*tb));
	if (!tb)
		return -ENOMEM;
	tb->c = c;
	int r = runlog_foreach_running(c->runlog, back_collect, tb);
	if (r < 0) {
		takeback_free(tb);
		return r;
	}
	*ret = tb;
	return 0;
}

void
takeback_start(TakeBack *tb)
{
	Back *next;
	for (Back *bk = tb ? tb->backs : NULL; bk; bk = next) {
		next = bk->next;
		int err = cluster_run_last(tb->c->cluster, bk->run_id, on_back_last, bk);
		if (err < 0)
			back_done(bk, err);
	}
}

void
takeback_fail(TakeBack *tb, int err)
{
	while (tb && tb->backs)
		back_done(tb->backs, err);
}

bool
takeback_held(const TakeBack *tb, const char *run_id)
{
	if (!tb || !tb->backs)
		return false;
	if (!run_id)
		return true;
	for (const Back *bk = tb->backs; bk; bk = bk->next)
		if (streq(bk->run_id, run_id))
			return true;
	return false;
}

TakeBack *
takeback_free(TakeBack *tb)
{
	if (!tb)
		return NULL;
	while (tb->backs) {
		Back *bk = tb->backs;
		tb->backs = bk->next;
		back_free(bk);
	}
	free(tb);
	return NULL;
}
