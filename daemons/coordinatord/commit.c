/* SPDX-License-Identifier: MIT */
/*
 * commit.c — the op queue and group commit.
 *
 * Every event (a harness chunk, a client's RUN_APPEND, a terminal RUN_ERROR)
 * becomes an Op at the tail of one queue. Queuing activates commit_ev, which
 * has the lowest priority of the event base: it runs once every other active
 * callback of this loop turn ran, so all appends that arrived in one turn —
 * across all runs and connections — share one write transaction and one fsync.
 * Only after the commit returned are events made visible: how, and when,
 * is the delivery's (CommitDelivery, commit-int.h: publish.c on a single
 * host, replicate-commit.c in cluster mode; CommitHooks.delivery picks one
 * per commit). The core knows nothing of the cluster. A failed commit is
 * never reported as success nor retried as if it had succeeded: its runs
 * are failed with storage_error/storage_full in a transaction of their own
 * where that can still be written.
 */
#include "config.h"

#include "commit-int.h"

#include <errno.h>
#include <stdio.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

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

void
commit_publish_committed(Coordinator *c, const char *run_id, int64_t first_seq,
			 const char *const *texts, const size_t *lens, size_t n, const json_t *rec)
{
	c->commit_hooks->delivery(c)->late(c, run_id, first_seq, texts, lens, n, rec);
}

bool
commit_first_of_run(Op *ops, Op *op)
{
	for (Op *p = ops; p != op; p = p->next)
		if (streq(p->run_id, op->run_id))
			return false;
	return true;
}

void
commit_fail_local(Coordinator *c, const char *run_id, bool is_run, const char *code,
		  const char *message, CommitOutcome what)
{
	if (c->halted)
		return; /* nothing more is written (commit_ops) */
	LogCtx rl = {0};
	bool driven = c->commit_hooks->run_log(c, run_id, &rl);
	LogCtx lc = {.run_id = run_id, .thread_id = driven ? rl.thread_id : NULL};
	json_auto_t *chunk = run_error_chunk(message, code, lc.thread_id, run_id, now_epoch_ms());
	json_auto_t *fields = run_error_fields(message, code);
	_cleanup_free_ char *text = json_dump_compact(chunk);
	json_t *rec = NULL;
	int64_t seq;
	int r = text ? runlog_append_finish(c->runlog, run_id, text, strlen(text), "failed", fields,
					    now_epoch_ms(), &seq, &rec)
		     : -ENOMEM;
	if (r == 0) {
		const char *t = text;
		size_t len = strlen(text);
		/* a storage failure's end is the run's end everywhere (made
		 * visible as a commit's); a fenced or undelivered run's is the
		 * delivery's to show */
		if (what == COMMIT_STORAGE_FAILED)
			commit_publish_committed(c, run_id, seq, &t, &len, 1, rec);
		else
			c->commit_hooks->delivery(c)->ended_local(c, run_id, seq, t, len, rec);
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
	const char *code = err == -ENOSPC ? RUN_ERR_STORAGE_FULL : RUN_ERR_STORAGE_ERROR;
	const char *message = err == -ENOSPC ? "run log is full" : "run log write failed";

	for (Op *op = ops; op; op = op->next)
		if (commit_first_of_run(ops, op))
			commit_fail_local(c, op->run_id, op->is_run, code, message,
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

void
commit_group_ref(CommitGroup *g)
{
	g->refs++;
}

static void
op_list_free(Op *ops)
{
	while (ops) {
		Op *n = ops->next;
		op_free(ops);
		ops = n;
	}
}

void
commit_group_unref(CommitGroup *g)
{
	if (--g->refs > 0)
		return;
	op_list_free(g->ops);
	free(g);
}

/* The commit's runs, in the order of their first ops, each with its record
 * as written (degraded when out of memory). */
static void
commit_runs_collect(CommitRuns *runs, Op *ops, RunLogBatch *b)
{
	size_t nops = 0, k = 0;
	for (Op *op = ops; op; op = op->next)
		nops++;
	runs->ids = calloc(nops, sizeof(char *));
	runs->recs = calloc(nops, sizeof(json_t *));
	runs->plain = calloc(nops, sizeof(bool));
	runs->state = calloc(nops, sizeof(void *));
	if (!runs->ids || !runs->recs || !runs->plain || !runs->state) {
		free(runs->ids);
		free(runs->recs);
		free(runs->plain);
		free(runs->state);
		*runs = (CommitRuns){.degraded = true};
		return;
	}
	for (Op *op = ops; op; op = op->next) {
		/* its run among those seen so far (a commit has far fewer runs
		 * than ops) */
		size_t i = 0;
		while (i < k && !streq(runs->ids[i], op->run_id))
			i++;
		op->run_ix = i;
		if (i == k) {
			runs->ids[k] = op->run_id;
			runs->plain[k] = true;
			/* no batch: it could not begin (the commit fails) */
			runs->recs[k++] = b ? runlog_batch_get_record(b, op->run_id) : NULL;
		}
		if (op->is_run || op->create_thread || op->status[0] || op->drive || !op->text)
			runs->plain[i] = false;
	}
	runs->k = k;
}

static void
commit_runs_done(CommitRuns *runs)
{
	for (size_t i = 0; i < runs->k; i++)
		json_decref(runs->recs[i]);
	free(runs->ids);
	free(runs->recs);
	free(runs->plain);
	free(runs->state);
}

/* The flush failed (r): every client gets the error, then each run is
 * failed in a transaction of its own. */
static void
commit_failed(Coordinator *c, Op *ops, int r)
{
	for (Op *op = ops; op; op = op->next)
		commit_answer(c, NULL, op);
	fail_runs_after_storage_error(c, ops, r);
}

/* The group commit: write every queued op in one transaction, flush it, then
 * hand the commit to its delivery (publish, acknowledge, settle). */
static void
commit_ops(Coordinator *c)
{
	const CommitDelivery *d = c->commit_hooks->delivery(c);
	Op *ops = c->ops_head;
	RunLogBatch *b = NULL;
	CommitGroup fallback = {0};
	CommitRuns runs = {0};
	usec_t t0 = now_usec();
	int r;

	if (!ops || c->halted) /* halted: what is queued is never written */
		return;
	c->ops_head = c->ops_tail = NULL;
	if (d->hold)
		ops = d->hold(c, ops);
	if (!ops)
		return;

	r = commit_write(c, ops, &b);
	/* ops live in the group until each of its deliveries ended; out of
	 * memory, each run's ops end one by one, after the commit */
	CommitGroup *g = calloc(1, sizeof(*g));
	if (g)
		commit_runs_collect(&runs, ops, b);
	if (!g || runs.degraded) {
		free(g);
		g = &fallback;
		runs = (CommitRuns){.degraded = true};
	}
	*g = (CommitGroup){.ops = ops, .refs = 1, .writing = true};
	if (r == 0 && d->before_flush)
		d->before_flush(c, g, &runs, b);
	r = commit_flush(c, ops, b, r, t0);
	g->writing = false;
	if (r < 0 && !(d->failed && d->failed(c, g, &runs, r)))
		commit_failed(c, ops, r);
	else if (r == 0)
		d->committed(c, g, &runs, b);
	runlog_batch_free(b);
	commit_runs_done(&runs);
	if (g != &fallback)
		commit_group_unref(g);
	else
		op_list_free(ops);
}

/* The delivery may ask a commit to wait for more ops (CommitDelivery.linger,
 * from the oldest queued op) so that they share one flush. */
static bool
commit_linger(Coordinator *c)
{
	const CommitDelivery *d = c->commit_hooks->delivery(c);
	usec_t waited = now_usec() - c->ops_since;
	usec_t bound = d->linger ? d->linger(c) : 0;
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
