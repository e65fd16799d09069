/* SPDX-License-Identifier: MIT */
/*
 * commit.c — the op queue and group commit.
 *
 * Every event (a harness chunk, a client's RUN_APPEND, a terminal RUN_ERROR)
 * becomes an Op at the tail of one queue. Queuing activates commit_ev, which
 * has the lowest priority of the event base: it runs once every other active
 * callback of this loop turn ran, so all appends that arrived in one turn —
 * across all runs and connections — share one write transaction and one fsync.
 * Only after the commit returned are events published and clients answered.
 * A failed commit is never reported as success nor retried as if it had
 * succeeded: its runs are failed with storage_error/storage_full in a
 * transaction of their own where that can still be written.
 */
#include "config.h"

#include "coordinatord.h"

#include "adapter.h"

#include <errno.h>
#include <stdio.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

struct Op {
	Op *next;
	char run_id[RUN_ID_LEN + 1];
	char *text; /* chunk JSON; NULL for a drive-only op */
	size_t len;
	char status[16]; /* terminal status, or "" */
	json_t *fields;
	json_t *drive;	     /* driver state to store with the event; json_null() deletes */
	PeerDeferred *ack;   /* the client's request to acknowledge, or NULL */
	char *create_thread; /* RUN_START's run to create first (its thread), or NULL */
	char *create_harness;
	char *create_tenant;
	bool is_run;	   /* queued by a Run driver */
	bool refused_full; /* refused past chunk_high_water */
	size_t run_ix;	   /* commit_ops: its run's index among the commit's runs */
	/* results */
	int err;
	int64_t seq;
};

static void
op_free(Op *op)
{
	free(op->text);
	free(op->create_thread);
	free(op->create_harness);
	free(op->create_tenant);
	json_decref(op->fields);
	json_decref(op->drive);
	peer_deferred_free(op->ack);
	free(op);
}

static Op *
op_new(const char *run_id, json_t *chunk, const char *status, json_t *fields, json_t *drive)
{
	Op *op = calloc(1, sizeof(*op));
	if (!op) {
		json_decref(chunk);
		json_decref(fields);
		json_decref(drive);
		return NULL;
	}
	memcpy(op->run_id, run_id, RUN_ID_LEN + 1);
	if (chunk) {
		/* chunks runwarden makes get the time; a client's chunk keeps its own */
		if (!json_object_get(chunk, "timestamp"))
			json_object_set_new(chunk, "timestamp", json_integer(now_epoch_ms()));
		op->text = json_dump_compact(chunk);
		json_decref(chunk);
		if (!op->text) {
			json_decref(fields);
			json_decref(drive);
			free(op);
			return NULL;
		}
		op->len = strlen(op->text);
	}
	if (status)
		snprintf(op->status, sizeof(op->status), "%s", status);
	op->fields = fields;
	op->drive = drive;
	return op;
}

static void
enqueue(Coordinator *c, Op *op)
{
	if (c->ops_tail)
		c->ops_tail->next = op;
	else {
		c->ops_head = op;
		c->ops_since = now_usec();
	}
	c->ops_tail = op;
	event_active(c->commit_ev, 0, 0);
}

/* Replace every secret value of the run with [REDACTED], in the chunk and in
 * the fields merged into the run's record (an error message quoting stderr).
 * A secret is looked for in the decoded strings, keys and numbers: a runner's
 * line is stored as it wrote it, and JSON can spell a secret with escapes
 * ("\u0073k-…", "\/") that no search of the text finds. A text without a
 * backslash decodes to itself, so when none of the secrets shows in it there
 * is nothing to do (the common case: no parse). A text redacted is stored
 * re-serialized (compact, key order kept). */
static void
redact_decoded(char *const *values, Op *op)
{
	if (!values || !values[0])
		return;
	if (op->fields)
		redact_tree(values, op->fields);
	if (!op->text || (!strchr(op->text, '\\') && !redact_holds(values, op->text, op->len)))
		return;
	json_t *j = json_loadb(op->text, op->len, 0, NULL);
	char *t = NULL;
	if (!j) /* not JSON (never stored as a chunk): the text itself */
		t = redact_string(values, op->text, op->len, NULL);
	else if (redact_tree(values, j))
		t = json_dump_compact(j);
	json_decref(j);
	if (t) {
		free(op->text);
		op->text = t;
		op->len = strlen(t);
	}
}

int
commit_queue_run(Coordinator *c, const char *run_id, json_t *chunk, const char *text, size_t len,
		 const char *status, json_t *fields, json_t *drive, char *const *secrets)
{
	Op *op = op_new(run_id, chunk, status, fields, drive);
	if (op && text && !(op->text = strndup(text, len))) {
		op_free(op);
		op = NULL;
	}
	if (!op)
		return -ENOMEM;
	if (text)
		op->len = strlen(op->text);
	/* Every text the op stores or returns — the chunk and the record fields
	 * (error.message from a stderr tail, …) — loses each secret value of
	 * every configured harness (the run's secret values), in the decoded
	 * JSON (redact_decoded): a byte-for-byte replacement in the serialized
	 * text would miss escaped spellings and could break an escape
	 * ("\\[REDACTED]"). */
	redact_decoded(secrets, op);
	op->is_run = true;
	enqueue(c, op);
	return 0;
}

/* A client's event (RUN_APPEND, a direct-log client's end): the driven run's
 * values when it is ours, else every configured secret. */
static void
redact_client(Coordinator *c, Op *op)
{
	bool owned = false;
	char **values = c->commit_hooks->secrets(c, op->run_id, &owned);
	redact_decoded(values, op);
	if (owned)
		mp_strv_free(values);
}

/* Queue a client's op (NULL: out of memory), acknowledged to req_id once
 * committed; -ENOMEM to the client when it cannot be. */
static void
queue_client_op(Coordinator *c, Client *cl, uint64_t req_id, Op *op)
{
	if (!op) {
		peer_reply_error(cl->peer, req_id, -ENOMEM, NULL);
		return;
	}
	op->ack = peer_defer_id(cl->peer, req_id);
	if (!op->ack) {
		op_free(op);
		peer_reply_error(cl->peer, req_id, -ENOMEM, NULL);
		return;
	}
	redact_client(c, op);
	enqueue(c, op);
}

void
op_queue_client_text(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
		     const char *text)
{
	Op *op = op_new(run_id, NULL, NULL, NULL, NULL);
	if (op && !(op->text = strdup(text))) {
		op_free(op);
		op = NULL;
	}
	if (op)
		op->len = strlen(op->text);
	queue_client_op(c, cl, req_id, op);
}

void
op_queue_client(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id, json_t *chunk,
		const char *status, json_t *fields)
{
	queue_client_op(c, cl, req_id, op_new(run_id, chunk, status, fields, NULL));
}

int
commit_queue_create(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
		    const char *thread_id, const char *harness, const char *tenant)
{
	Op *op = op_new(run_id, NULL, NULL, NULL, NULL);
	if (!op)
		return -ENOMEM;
	op->create_thread = strdup(thread_id);
	op->create_harness = harness ? strdup(harness) : NULL;
	op->create_tenant = tenant ? strdup(tenant) : NULL;
	op->ack = peer_defer_id(cl->peer, req_id);
	if (!op->create_thread || (harness && !op->create_harness) ||
	    (tenant && !op->create_tenant) || !op->ack) {
		op_free(op);
		return -ENOMEM;
	}
	enqueue(c, op);
	return 0;
}

void
publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	const size_t *lens, size_t n, const json_t *record)
{
	_cleanup_free_ char *rec = NULL;
	MpWriter w;

	if (!watch_find(c, NULL, run_id))
		return;
	rec = json_dump_compact(record);
	if (!rec)
		return;
	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_str(&w, "run_id", run_id);
	mp_w_int(&w, "first_seq", first_seq);
	mp_w_key(&w, "events");
	msgpack_pack_array(&w.pk, n);
	for (size_t i = 0; i < n; i++)
		mp_w_strn(&w, texts[i], lens[i]);
	mp_w_str(&w, "record", rec);
	for (Watch *wt = c->watches; wt; wt = wt->next)
		if (streq(wt->run_id, run_id))
			(void)peer_push(wt->client->peer, MSG_RUN_EVENTS, &w);
	mp_writer_done(&w);
}

static void
commit_latency(Coordinator *c, usec_t us)
{
	static const usec_t bounds[7] = {500, 1000, 2500, 5000, 10000, 25000, 100000};
	size_t i = 0;
	while (i < 7 && us > bounds[i])
		i++;
	c->m.commit_buckets[i]++;
	c->m.commit_usec_sum += us;
	c->m.commits++;
}

/* Publish the committed ops of one run, in seq order, as one RUN_EVENTS. */
static void
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

/* Events committed outside the op queue, on their way to visibility. */
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

void
commit_publish_committed(Coordinator *c, const char *run_id, int64_t first_seq,
			 const char *const *texts, const size_t *lens, size_t n, const json_t *rec)
{
	const CommitHooks *h = c->commit_hooks;
	if (!(h->replicating && h->replicating(c))) {
		publish(c, run_id, first_seq, texts, lens, n, rec);
		return;
	}
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
	int r = ok && l->rec ? h->replicate(c, run_id, first_seq, (const char *const *)l->texts,
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

/* Is op the first of ops for its run? */
static bool
first_of_run(Op *ops, Op *op)
{
	for (Op *p = ops; p != op; p = p->next)
		if (streq(p->run_id, op->run_id))
			return false;
	return true;
}

/* Mark run_id failed in the local log alone (code, message): after a failed
 * commit, or when its events could not be replicated. */
static void
fail_run_local(Coordinator *c, const char *run_id, bool is_run, const char *code,
	       const char *message, CommitOutcome what)
{
	if (c->halted)
		return; /* nothing more is written (commit_ops) */
	LogCtx rl = {0};
	bool driven = c->commit_hooks->run_log(c, run_id, &rl);
	LogCtx lc = {.run_id = run_id, .thread_id = driven ? rl.thread_id : NULL};
	json_auto_t *chunk =
	    json_pack("{s:s, s:s, s:s, s:I}", "type", "RUN_ERROR", "message", message, "code", code,
		      "timestamp", (json_int_t)now_epoch_ms());
	if (chunk)
		agui_error_ids(chunk, lc.thread_id, run_id);
	json_auto_t *fields =
	    json_pack("{s:{s:s, s:s}}", "error", "message", message, "code", code);
	_cleanup_free_ char *text = json_dump_compact(chunk);
	json_t *rec = NULL;
	int64_t seq;
	int r = text ? runlog_append_finish(c->runlog, run_id, text, strlen(text), "failed", fields,
					    now_epoch_ms(), &seq, &rec)
		     : -ENOMEM;
	if (r == 0) {
		const char *t = text;
		size_t len = strlen(text);
		/* a storage failure's end is the run's end in the cluster too; a
		 * fenced or unreplicated run's is local only (the cluster's copy
		 * is another writer's, or unreachable) */
		if (what == COMMIT_STORAGE_FAILED)
			commit_publish_committed(c, run_id, seq, &t, &len, 1, rec);
		else if (c->cluster) /* its tails go on with the cluster's history */
			remote_watch_divert(c, run_id,
					    json_string_value(json_object_get(rec, "threadId")));
		else
			publish(c, run_id, seq, &t, &len, 1, rec);
		json_decref(rec);
		metrics_count_finish(c, "failed");
		log_ctx(LOG_ERR, &lc, "Run failed: %s (%s)", message, code);
	} else if (r != -ESTALE && r != -ENOENT) {
		log_ctx_errno(LOG_ERR, r, &lc,
			      "Run could not be marked failed either: %m; it stays "
			      "'running' in the log until the watchdog or a restart ends it");
	}
	if (driven)
		c->commit_hooks->committed(c, run_id, is_run, what);
}

/* After a failed commit: fail each affected run in a transaction of its own
 * (the error may be transient, or the run's RUN_ERROR small enough to fit). */
static void
fail_runs_after_storage_error(Coordinator *c, Op *ops, int err)
{
	const char *code = err == -ENOSPC ? "storage_full" : "storage_error";
	const char *message = err == -ENOSPC ? "run log is full" : "run log write failed";

	for (Op *op = ops; op; op = op->next)
		if (first_of_run(ops, op))
			fail_run_local(c, op->run_id, op->is_run, code, message,
				       COMMIT_STORAGE_FAILED);
}

/* Write ops into one transaction: each op gets its err (and seq). The batch
 * stays open (commit_flush commits it). Returns 0 or the batch's error. */
static int
commit_write(Coordinator *c, Op *ops, RunLogBatch **ret_b)
{
	int64_t now = now_epoch_ms();
	uint64_t used = 0, high = c->log_map / 100 * (uint64_t)c->conf.chunk_high_water;
	RunLogBatch *b = NULL;
	int r;

	r = runlog_batch_begin(c->runlog, &b);
	*ret_b = b;
	for (Op *op = ops; r == 0 && op; op = op->next) {
		if (op->err < 0)
			continue; /* its run's creation failed */
		if (op->create_thread) {
			op->err = runlog_batch_create(b, op->run_id, op->create_thread,
						      op->create_harness, op->create_tenant, now);
			/* the run's other ops must not land in a run of that id
			 * that is not this one */
			for (Op *o = op->next; op->err < 0 && o; o = o->next)
				if (streq(o->run_id, op->run_id))
					o->err = -ENOENT;
			continue;
		}
		if (op->text && op->len > c->conf.event_max) {
			if (!op->is_run) {
				op->err = -EMSGSIZE;
				continue;
			}
			/* a runner's line too big for any frame: say so instead */
			_cleanup_free_ char *m = NULL;
			if (asprintf(&m,
				     "{\"type\":\"CUSTOM\",\"name\":\"runwarden.event_dropped\","
				     "\"value\":{\"bytes\":%zu,\"eventMax\":%zu}}",
				     op->len, c->conf.event_max) < 0) {
				op->err = -ENOMEM;
				continue;
			}
			free(op->text);
			op->text = TAKE_PTR(m);
			op->len = strlen(op->text);
		}
		if (op->text && !op->status[0]) {
			/* events of running runs stop at the high-water mark; what
			 * is above it is kept for run starts and terminal records */
			if (runlog_batch_usage_bound(b, &used) == 0 && used > high &&
			    runlog_batch_usage(b, &used) == 0 && used > high) {
				op->err = -ENOSPC;
				op->refused_full = true;
				c->m.events_refused_full++;
				continue;
			}
		}
		if (op->text && !op->status[0]) {
			op->err = runlog_batch_append_soft(b, op->run_id, op->text, op->len,
							   op->fields, now, &op->seq);
			if (op->err == -ENOSPC) { /* no room for it in the map after all */
				op->refused_full = true;
				c->m.events_refused_full++;
				continue;
			}
		} else if (op->text) {
			op->err = runlog_batch_append(b, op->run_id, op->text, op->len,
						      op->status[0] ? op->status : NULL, op->fields,
						      now, &op->seq);
		} else if (op->status[0]) {
			op->err = runlog_batch_finish(b, op->run_id, op->status, op->fields, now);
		}
		if (op->err == 0 && op->drive)
			op->err = runlog_batch_drive_put(
			    b, op->run_id, json_is_null(op->drive) ? NULL : op->drive);
	}
	return r;
}

/* Commit what commit_write wrote (r: its result), started at t0. Returns the
 * commit's result; on failure every op that had none gets it. */
static int
commit_flush(Coordinator *c, Op *ops, RunLogBatch *b, int r, usec_t t0)
{
	uint64_t used = 0;

	if (r == 0 && runlog_batch_usage(b, &used) < 0)
		used = c->log_used;
	if (r == 0)
		r = runlog_batch_commit(b);
	if (r == 0) {
		commit_latency(c, now_usec() - t0);
		c->storage_ok = true;
		c->commit_hooks->log_usage(c, used);
		return 0;
	}
	c->m.commit_failures++;
	c->storage_ok = false;
	log_error_errno(r, "Run log commit failed, nothing of it was acknowledged: %m");
	int rr = runlog_recover(c->runlog);
	if (rr > 0)
		log_warning("Run log environment was in doubt after the failure; reopened");
	else if (rr < 0)
		log_error_errno(rr, "Run log cannot be reopened: %m; serving reads only");
	for (Op *op = ops; op; op = op->next)
		if (op->err == 0)
			op->err = r;
	return r;
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

/* One commit's ops, until every run's step finished (the replicate step may
 * hold some runs while others go on). */
typedef struct CommitGroup {
	Op *ops;
	size_t steps; /* run steps not finished yet, + 1 while commit_cb sets up */
	bool writing; /* early steps started, the transaction not committed yet */
} CommitGroup;

/* A run of a commit: its record as committed, and what its ops wait for. */
typedef struct RunStep {
	CommitGroup *g;
	const char *run_id; /* its first op's */
	json_t *rec;	    /* the run's record after the commit, or NULL */
	bool ended;	    /* replicated while the group was writing: err waits */
	int err;
} RunStep;

static void
group_unref(CommitGroup *g)
{
	if (--g->steps > 0)
		return;
	while (g->ops) {
		Op *n = g->ops->next;
		op_free(g->ops);
		g->ops = n;
	}
	free(g);
}

/* Make a run's committed ops visible: publish them to its watchers, answer
 * their clients, settle what they mean for the run (nobody sees an event
 * before it is on disk, and in cluster mode before JetStream has it). */
static void
step_finish(Coordinator *c, RunStep *st)
{
	publish_run(c, st->rec, st->g->ops, st->run_id);
	for (Op *op = st->g->ops; op; op = op->next) {
		if (!streq(op->run_id, st->run_id))
			continue;
		if (op->err == 0 && op->text)
			c->m.events_appended++;
		if (peer_deferred_peer(op->ack)) /* its client is still there */
			commit_ack(c, st->rec, op);
		commit_settle(c, op);
	}
}

/* The replicate step of st's run ended. -ECANCELED: shutdown, drop it. An
 * error: what the local log has past JetStream's copy is seen by nobody
 * through this commit; its clients get the error, and the run is stopped
 * and failed locally (fenced: another node owns it now). */
static void
step_end(Coordinator *c, RunStep *st, int err)
{
	if (err == 0) {
		step_finish(c, st);
		return;
	}
	if (err == -ECANCELED)
		return;
	bool fenced = err == -ESTALE, is_run = false;
	for (Op *op = st->g->ops; op; op = op->next)
		if (streq(op->run_id, st->run_id)) {
			is_run |= op->is_run;
			peer_deferred_error(TAKE_PTR(op->ack), fenced ? -ESTALE : -EIO,
					    fenced ? "not_owner" : "replication_failed",
					    fenced ? "another node owns this run now (fenced)"
						   : "the cluster did not acknowledge the events");
		}
	fail_run_local(c, st->run_id, is_run, fenced ? "fenced" : "replication_failed",
		       fenced ? "another node owns this run now; its processes here were stopped"
			      : "the cluster did not acknowledge the run's events",
		       COMMIT_FENCED);
}

void
commit_fail_fenced(Coordinator *c, const char *run_id)
{
	fail_run_local(c, run_id, true, "fenced",
		       "another node owns this run now; its processes here were stopped",
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
	group_unref(g);
}

static RunStep *
step_new(CommitGroup *g, const char *run_id, json_t *rec)
{
	RunStep *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	*st = (RunStep){.g = g, .run_id = run_id, .rec = rec};
	g->steps++;
	return st;
}

static void step_replicate(Coordinator *c, RunStep *st);

/* A run's step: replicate its events first in cluster mode, else finish now. */
static void
step_start(Coordinator *c, CommitGroup *g, const char *run_id, json_t *rec)
{
	const CommitHooks *h = c->commit_hooks;
	bool replicating = h->replicating && h->replicating(c);
	RunStep *st = step_new(g, run_id, rec);
	if (!st) { /* out of memory: fail closed in cluster mode */
		RunStep tmp = {.g = g, .run_id = run_id, .rec = rec};
		step_end(c, &tmp, replicating ? -ENOMEM : 0);
		json_decref(rec);
		return;
	}
	if (!replicating) {
		step_replicated(c, 0, st);
		return;
	}
	step_replicate(c, st);
}

/* Hand st's committed (or, early, written) events to the replicate step. */
static void
step_replicate(Coordinator *c, RunStep *st)
{
	const CommitHooks *h = c->commit_hooks;
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
		r = h->replicate(c, run_id, first < 0 ? 0 : first, texts, lens, n, st->rec,
				 step_replicated, st);
	}
	free(texts);
	free(lens);
	if (r != 0)
		step_replicated(c, r > 0 ? 0 : r, st);
}

/* Cluster mode, at start: the ops of runs whose events are being taken back
 * from the cluster (replicate.c) wait, in order, at the queue's head until
 * that is done; the others are returned. */
static Op *
hold_back(Coordinator *c, Op *ops)
{
	const CommitHooks *h = c->commit_hooks;
	Op *keep = NULL, **kt = &keep, *held = NULL, *held_last = NULL;

	while (ops) {
		Op *op = ops;
		ops = op->next;
		op->next = NULL;
		if (h->replicate_held(c, op->run_id)) {
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

/* Cluster mode: the runs of this commit (ids[0..k), plain[i] false for one
 * with any op other than a client's event) whose events may go to JetStream
 * before the transaction is on disk, their steps started with the group
 * writing (their ends wait for the commit: nothing is visible before it):
 * a direct-log client's events of a run that is not driven here and whose
 * record is mirrored as it is (replicate_early): a restart after a flush
 * that never happened needs nothing but those events to take them back
 * (docs/CLUSTER.md "Publishing before the flush"). Returns how many. */
static size_t
start_early(Coordinator *c, CommitGroup *g, RunLogBatch *b, const char **ids, json_t **recs,
	    const bool *plain, size_t k, RunStep **early)
{
	const CommitHooks *h = c->commit_hooks;
	size_t n = 0;
	LogCtx rl;

	if (!h->replicate_early || runlog_batch_seal(b) < 0) /* a failed seal fails the commit */
		return 0;
	g->writing = true;
	for (size_t i = 0; i < k; i++) {
		if (!plain[i] || !h->replicate_early(c, ids[i], recs[i]) ||
		    h->run_log(c, ids[i], &rl) || !(early[i] = step_new(g, ids[i], recs[i])))
			continue;
		recs[i] = NULL; /* the step's now */
		step_replicate(c, early[i]);
		n++;
	}
	if (n && h->replicate_flush)
		h->replicate_flush(c);
	return n;
}

/* The group commit: write every queued op in one transaction, then per run
 * (replicate,) publish, acknowledge and settle, in that order. */
static void
commit_ops(Coordinator *c)
{
	const CommitHooks *h = c->commit_hooks;
	bool replicating = h->replicating && h->replicating(c);
	Op *ops = c->ops_head;
	RunLogBatch *b = NULL;
	usec_t t0 = now_usec();
	size_t n_early = 0;
	int r;

	if (!ops || c->halted) /* halted: what is queued is never written */
		return;
	c->ops_head = c->ops_tail = NULL;
	if (replicating && h->replicate_held && h->replicate_held(c, NULL))
		ops = hold_back(c, ops); /* only while some run is being taken back */
	if (!ops)
		return;

	r = commit_write(c, ops, &b);
	/* ops live in the group until each run's step ended */
	size_t nruns = 0;
	for (Op *op = ops; op; op = op->next)
		nruns++;
	CommitGroup *g = calloc(1, sizeof(*g));
	json_t **recs = calloc(nruns, sizeof(json_t *));
	const char **ids = calloc(nruns, sizeof(char *));
	RunStep **early = calloc(nruns, sizeof(RunStep *));
	bool *plain = calloc(nruns, sizeof(bool));
	CommitGroup fallback = {0};
	if (!g || !recs || !ids || !early || !plain) {
		/* out of memory: each run's ops end one by one, after the commit */
		free(g);
		g = &fallback;
	}
	g->ops = ops;
	g->steps = 1;
	size_t k = 0;
	for (Op *op = g == &fallback ? NULL : ops; op; op = op->next) {
		/* its run among those seen so far (a commit has far fewer runs
		 * than ops) */
		size_t i = 0;
		while (i < k && !streq(ids[i], op->run_id))
			i++;
		op->run_ix = i;
		if (i == k) {
			ids[k] = op->run_id;
			plain[k] = true;
			recs[k++] = runlog_batch_get_record(b, op->run_id);
		}
		if (op->is_run || op->create_thread || op->status[0] || op->drive || !op->text)
			plain[i] = false;
	}
	if (r == 0 && replicating && k)
		n_early = start_early(c, g, b, ids, recs, plain, k, early);
	r = commit_flush(c, ops, b, r, t0);
	g->writing = false;
	if (r < 0 && n_early) {
		/* JetStream may hold events this log now lacks: going on (even
		 * failing the runs here) would write other events at their seqs.
		 * Write nothing more and stop; the next start takes them back
		 * from the cluster before anything else is written to them
		 * (replicate.c, take_back). Clients get no answer: their
		 * connections close with the process. */
		log_error_errno(r,
				"Run log commit failed after the events of %zu run(s) went to "
				"the cluster; stopping: the next start takes them back from "
				"JetStream",
				n_early);
		c->halted = r;
		event_base_loopbreak(c->base);
		runlog_batch_free(b);
		for (size_t i = 0; i < k; i++) {
			json_decref(recs[i]);
			if (early[i] && early[i]->ended) /* else its done comes at teardown */
				step_replicated(c, -ECANCELED, early[i]);
		}
		k = 0;
	} else if (r < 0) {
		for (Op *op = ops; op; op = op->next) {
			if (peer_deferred_peer(op->ack))
				commit_ack(c, NULL, op);
			commit_settle(c, op);
		}
		fail_runs_after_storage_error(c, ops, r);
		runlog_batch_free(b);
		for (size_t i = 0; i < k; i++)
			json_decref(recs[i]);
		k = 0;
	} else if (g == &fallback) {
		for (Op *op = ops; op; op = op->next) {
			if (!first_of_run(ops, op))
				continue;
			json_t *rec = runlog_batch_get_record(b, op->run_id);
			RunStep st = {.g = g, .run_id = op->run_id, .rec = rec};
			step_end(c, &st, replicating ? -ENOMEM : 0);
			json_decref(rec);
		}
		runlog_batch_free(b);
	} else {
		runlog_batch_free(b);
	}
	if (r == 0 && g != &fallback && !replicating) {
		/* single host: publish every run, then answer and settle in op
		 * order (the order clients' pipelined requests are answered in) */
		for (Op *op = ops; op; op = op->next) {
			size_t i = op->run_ix;
			if (ids[i] == op->run_id && op->err == 0) /* a run's first op, committed */
				publish_run(c, recs[i], ops, ids[i]);
		}
		for (Op *op = ops; op; op = op->next) {
			if (op->err == 0 && op->text)
				c->m.events_appended++;
			if (peer_deferred_peer(op->ack)) /* its client is still there */
				commit_ack(c, recs[op->run_ix], op);
			commit_settle(c, op);
		}
		for (size_t i = 0; i < k; i++)
			json_decref(recs[i]);
		k = 0;
	}
	/* cluster mode: each run when replicated (an early one's end waited) */
	for (size_t i = 0; i < k; i++) {
		if (!early[i])
			step_start(c, g, ids[i], recs[i]);
		else if (early[i]->ended)
			step_replicated(c, early[i]->err, early[i]);
	}
	if (k > n_early && h->replicate_flush)
		h->replicate_flush(c);
	free(recs);
	free(ids);
	free(early);
	free(plain);
	if (g != &fallback) {
		group_unref(g);
		return;
	}
	while (ops) {
		Op *n = ops->next;
		op_free(ops);
		ops = n;
	}
}

/* Cluster mode: while other runs' publishes are out, their acknowledgements
 * are about to let their clients and drivers queue more; a commit now would
 * be followed by one per run as each acknowledgement comes (one flush each,
 * on this thread). Wait for them — at most replicate_linger() (about one
 * publish round trip) from the oldest queued op — so that they share one
 * commit, as single-host mode's appends share theirs. A commit with no
 * publish out (a serial client, an idle cluster) goes at once. */
static bool
commit_linger(Coordinator *c)
{
	const CommitHooks *h = c->commit_hooks;
	usec_t waited = now_usec() - c->ops_since;
	usec_t bound = h->replicate_linger ? h->replicate_linger(c) : 0;
	struct timeval tv;

	if (!c->linger_ev || c->stopping || waited >= bound)
		return false;
	if (!evtimer_pending(c->linger_ev, NULL))
		evtimer_add(c->linger_ev, timeval_from_usec(&tv, bound - waited));
	return true;
}

static void
commit_go(Coordinator *c)
{
	if (c->linger_ev)
		evtimer_del(c->linger_ev);
	/* what the commit publishes and acknowledges leaves in one write per
	 * connection, once it is all queued */
	peer_cork();
	commit_ops(c);
	peer_uncork();
}

static void
commit_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;

	if (c->ops_head && !commit_linger(c))
		commit_go(c);
}

void
commit_now(Coordinator *c)
{
	if (!c->commit_hooks)
		return; /* before commit_setup(): a start-up that failed early */
	c->commit_hooks->flush(c);
	commit_go(c); /* its callers read what it wrote: never lingers */
}

void
commit_setup(Coordinator *c, const CommitHooks *hooks)
{
	c->commit_hooks = hooks;
	c->commit_ev = event_new(c->base, -1, 0, commit_cb, c);
	c->linger_ev = evtimer_new(c->base, commit_cb, c);
	/* the lowest priority: after every other callback of this loop turn */
	if (c->commit_ev)
		event_priority_set(c->commit_ev, 2);
	c->storage_ok = true;
}

void
commit_teardown(Coordinator *c)
{
	while (c->ops_head) {
		Op *n = c->ops_head->next;
		op_free(c->ops_head);
		c->ops_head = n;
	}
	c->ops_tail = NULL;
	if (c->commit_ev)
		event_free(c->commit_ev);
	c->commit_ev = NULL;
	if (c->linger_ev)
		event_free(c->linger_ev);
	c->linger_ev = NULL;
}
