/* SPDX-License-Identifier: MIT */
/*
 * publish.c — making committed ops visible, and the single-host delivery.
 *
 * After a commit, each run's committed events go to its watchers as
 * RUN_EVENTS (publish_run), then each op's client gets its answer and the
 * driver learns what the op meant for its run (commit_answer). A single
 * host does that at once for the whole commit (commit_delivery_local);
 * cluster mode does it per run once JetStream has the events
 * (replicate-commit.c), with the same functions.
 */
#include "config.h"

#include "commit-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

/* Counted here: every terminal status is committed (or ends a run outside
 * the queue: the watchdog, a takeover), then counted once. */
void
metrics_count_finish(Coordinator *c, const char *status)
{
	if (streq(status, "completed"))
		c->m.runs_finished[0]++;
	else if (streq(status, "failed"))
		c->m.runs_finished[1]++;
	else if (streq(status, "aborted"))
		c->m.runs_finished[2]++;
}

void
publish_run(Coordinator *c, const json_t *rec, Op *ops, const char *run_id)
{
	size_t n = 0;
	bool status_change = false;

	if (!watch_find(c, NULL, run_id)) /* publish's own test, before going over the ops */
		return;
	for (Op *op = ops; op; op = op->next)
		if (op->err == 0 && streq(op->run_id, run_id)) {
			if (op->text)
				n++;
			else if (op->status[0])
				status_change = true;
		}
	if (n == 0 && !status_change)
		return; /* a driver-state update alone: nothing for the tails */
	if (!rec)
		return;
	const char **texts = calloc(n ? n : 1, sizeof(char *));
	size_t *lens = calloc(n ? n : 1, sizeof(size_t));
	int64_t first = -1;
	size_t i = 0;
	if (texts && lens) {
		for (Op *op = ops; op; op = op->next)
			if (op->err == 0 && op->text && streq(op->run_id, run_id)) {
				if (first < 0)
					first = op->seq;
				texts[i] = op->text;
				lens[i++] = op->len;
			}
		if (first < 0)
			first = json_integer_value(json_object_get(rec, "lastSeq")) + 1;
		/* one push per slice of at most read_max_bytes (and at least one
		 * event): a flood's batch never makes a frame over max_frame */
		size_t at = 0;
		do {
			size_t k = 0, bytes = 0;
			while (at + k < n &&
			       (k == 0 || bytes + lens[at + k] <= (size_t)c->conf.read_max_bytes))
				bytes += lens[at + k++];
			publish(c, run_id, first + (int64_t)at, texts + at, lens + at, k, rec);
			at += k;
		} while (at < n);
	}
	free(texts);
	free(lens);
}

/* Answer the client that queued op: its seq (RUN_APPEND), the record
 * (RUN_FINISH, and a direct-log run's RUN_CANCEL: the same {record} body), or
 * the error. */
static void
commit_ack(Coordinator *c, const json_t *run_rec, Op *op)
{
	if (op->create_thread) { /* RUN_START: the 202 */
		if (op->err < 0)
			peer_deferred_error(TAKE_PTR(op->ack), op->err, NULL, NULL);
		else
			(void)reply_deferred_RUN_START(TAKE_PTR(op->ack),
						       &(Reply_RUN_START){.run_id = op->run_id});
		return;
	}
	if (op->err < 0 && op->err == -ESTALE && op->status[0]) {
		/* RUN_FINISH on a terminal run: the first status won; answer the
		 * record */
		json_t *rec = NULL;
		if (runlog_get(c->runlog, op->run_id, &rec) == 0) {
			_cleanup_free_ char *s = json_dump_compact(rec);
			(void)reply_deferred_RUN_FINISH(
			    TAKE_PTR(op->ack), &(Reply_RUN_FINISH){.record = s ? s : "{}"});
		} else
			peer_deferred_error(TAKE_PTR(op->ack), -ENOENT, NULL, NULL);
		json_decref(rec);
	} else if (op->err < 0) {
		peer_deferred_error(TAKE_PTR(op->ack), op->err, NULL,
				    op->err == -ESTALE ? "run is terminal" : NULL);
	} else if (op->status[0]) {
		_cleanup_free_ char *s = run_rec ? json_dump_compact(run_rec) : NULL;
		(void)reply_deferred_RUN_FINISH(TAKE_PTR(op->ack),
						&(Reply_RUN_FINISH){.record = s ? s : "{}"});
	} else {
		(void)reply_deferred_RUN_APPEND(TAKE_PTR(op->ack),
						&(Reply_RUN_APPEND){.seq = op->seq});
	}
}

/* What op's outcome means for its run: a terminal record ends the driver, a
 * refusal at the high-water mark fails the run (the reserve lets its end
 * commit), an op on a run already terminal or gone ends the driver. Storage
 * errors are handled for all runs at once by the caller. */
static void
commit_settle(Coordinator *c, Op *op)
{
	const CommitHooks *h = c->commit_hooks;

	if (op->err == 0 && op->status[0]) {
		metrics_count_finish(c, op->status);
		LogCtx rl = {0};
		bool driven = h->run_log(c, op->run_id, &rl);
		LogCtx lc = {.run_id = op->run_id,
			     .thread_id = driven ? rl.thread_id : NULL,
			     .sandbox_id = driven ? rl.sandbox_id : NULL};
		log_ctx_msgid(LOG_INFO, &lc, RW_MESSAGE_RUN_FINISHED, "Run finished: %s",
			      op->status);
		if (driven && op->is_run)
			h->committed(c, op->run_id, true, COMMIT_ENDED);
	} else if (op->refused_full && op->is_run) {
		h->committed(c, op->run_id, true, COMMIT_REFUSED_FULL);
	} else if (op->err < 0 && op->err != -ESTALE && op->err != -ENOENT && op->err != -EINVAL &&
		   op->err != -EUCLEAN && op->err != -EMSGSIZE) {
		/* storage: handled for all runs at once */
	} else if (op->err < 0 && op->is_run) {
		/* terminal already (cancel or watchdog won) or gone: the driver ends */
		h->committed(c, op->run_id, true, COMMIT_REFUSED);
	}
}

void
commit_answer(Coordinator *c, const json_t *rec, Op *op)
{
	if (op->err == 0 && op->text)
		c->m.events_appended++;
	if (peer_deferred_peer(op->ack)) /* its client is still there */
		commit_ack(c, rec, op);
	commit_settle(c, op);
}

void
commit_visible(Coordinator *c, const json_t *rec, Op *ops, const char *run_id)
{
	publish_run(c, rec, ops, run_id);
	for (Op *op = ops; op; op = op->next)
		if (streq(op->run_id, run_id))
			commit_answer(c, rec, op);
}

/* Single host: publish every run, then answer and settle in op order (the
 * order clients' pipelined requests are answered in). */
static void
local_committed(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b)
{
	if (runs->degraded) { /* out of memory: run by run */
		for (Op *op = g->ops; op; op = op->next) {
			if (!commit_first_of_run(g->ops, op))
				continue;
			json_t *rec = runlog_batch_get_record(b, op->run_id);
			commit_visible(c, rec, g->ops, op->run_id);
			json_decref(rec);
		}
		return;
	}
	for (Op *op = g->ops; op; op = op->next) {
		size_t i = op->run_ix;
		if (runs->ids[i] == op->run_id && op->err == 0) /* a run's first op, committed */
			publish_run(c, runs->recs[i], g->ops, runs->ids[i]);
	}
	for (Op *op = g->ops; op; op = op->next)
		commit_answer(c, runs->recs[op->run_ix], op);
}

static void
local_ended(Coordinator *c, const char *run_id, int64_t seq, const char *text, size_t len,
	    const json_t *rec)
{
	publish(c, run_id, seq, &text, &len, 1, rec);
}

const CommitDelivery commit_delivery_local = {
    .committed = local_committed,
    .late = publish,
    .ended_local = local_ended,
};
