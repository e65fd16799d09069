/* SPDX-License-Identifier: MIT */
/*
 * coordinator.c — the coordinatord event loop and the requests of routerd and
 * of direct run-log clients (their RUN_OPEN, RUN_APPEND, RUN_FINISH in
 * run-api.c). See coordinatord.h for how the files divide the work.
 */
#include "config.h"

#include "coordinator.h"

#include "adapter.h"

#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fd-util.h"
#include "id-util.h"
#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "strv.h"

/* ---------- router requests ---------- */

#define THREAD_LIST_MAX 1000

/* The {record} reply of RUN_GET and RUN_CANCEL (the same body). */
static int
reply_record(Peer *p, uint64_t req_id, const json_t *rec)
{
	_cleanup_free_ char *s = json_dump_compact(rec);
	if (!s)
		return -ENOMEM;
	return reply_send_RUN_GET(p, req_id, &(Reply_RUN_GET){.record = s});
}

static int
reply_run_id(Peer *p, uint64_t req_id, const char *run_id)
{
	return reply_send_RUN_START(p, req_id, &(Reply_RUN_START){.run_id = run_id});
}

/* A run read, watch or cancel from routerd must name the run's thread: the
 * thread is the owner check (routerd answers 400 thread_required before
 * asking, this is the second line). Test and tool clients may omit it.
 * false after replying -EINVAL. */
static bool
thread_named(Peer *p, const Frame *f, const char *thread_id)
{
	if (thread_id || peer_remote_role(p) != ROLE_ROUTER)
		return true;
	peer_reply_error(p, f->req_id, -EINVAL, "thread_required: thread_id is required");
	return false;
}

bool
request_thread_id_ok(Peer *p, const Frame *f, const char *thread_id, const char *reason)
{
	const char *why = thread_id_problem(thread_id);

	if (!why)
		return true;
	peer_reply_error_reason(p, f->req_id, -EINVAL, reason, why);
	return false;
}

bool
request_shim_ready(Peer *p, const Frame *f, Coordinator *c, const char *reason)
{
	if (peer_is_ready(c->shim))
		return true;
	peer_reply_error_reason(p, f->req_id, -ECONNRESET, reason, "containerd-shim unavailable");
	return false;
}

int
request_shim_relay(Peer *p, const Frame *f, Coordinator *c, const char *reason, int type,
		   const MpWriter *w, usec_t timeout, const PeerRelayOps *ops, int *ret_relay)
{
	PeerDeferred *d;
	int r = -ENOTCONN;

	if (ret_relay)
		*ret_relay = r;
	if (!request_shim_ready(p, f, c, reason))
		return 0;
	d = peer_defer(p, f);
	if (!d)
		return -ENOMEM;
	r = peer_relay(c->shim, type, w, d, timeout, ops);
	if (ret_relay)
		*ret_relay = r;
	return 0;
}

bool
request_reuse_ok(Peer *p, const Frame *f, Coordinator *c, const char *message)
{
	if (c->conf.reuse != REUSE_NONE)
		return true;
	peer_reply_error_reason(p, f->req_id, -EBUSY, REASON_REUSE_NONE, message);
	return false;
}

/* RUN_START's entry in the handler table (below): placement re-dispatches a
 * request it held while the thread was being claimed. */
static int dispatch_run_start(Peer *p, const Frame *f, void *userdata);
/* ... and forward.c those it held while it looked the thread's owner up */
static int dispatch_run_get(Peer *p, const Frame *f, void *userdata);
static int dispatch_run_cancel(Peer *p, const Frame *f, void *userdata);
static int dispatch_thread_runs(Peer *p, const Frame *f, void *userdata);
static int dispatch_chat_hydrate(Peer *p, const Frame *f, void *userdata);

static int
handle_run_start(Peer *p, const Frame *f, const Msg_RUN_START *req, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *thread_id = req->thread_id, *idem = req->idempotency_key;
	const char *alias = req->client_run_id, *input = req->input;
	const char *tenant = req->tenant;
	char run_id[RUN_ID_LEN + 1];
	_cleanup_(run_start_body_done) RunStartBody body = {0};
	int ret = 0;

	if (!request_thread_id_ok(p, f, thread_id, NULL))
		return 0;
	if (placement_run_start(c, p, f, thread_id, dispatch_run_start, ud))
		return 0; /* cluster mode: refused, or held while the thread is claimed */
	if (!tenant_request_ok(p, f, &tenant) || !run_start_body(c, p, f, req, &body))
		return 0;
	const Harness *hs = body.harness;
	const char *harness = hs->name;

	/* a retry of a run that exists (its key or client run id known) is no
	 * new run for the quota */
	char prev[RUN_ID_LEN + 1];
	bool retry = (idem && runlog_idem_get(c->runlog, thread_id, idem, prev) == 0) ||
		     (alias && runlog_alias_get(c->runlog, alias, thread_id, prev) == 0);
	/* cluster mode: a key this log lacks may name another node's run (the
	 * thread was taken over): held while rw_idem is asked (idem-cluster.c) */
	if (idem && !retry &&
	    idem_cluster_run_start(c, p, f, thread_id, idem, dispatch_run_start, ud))
		return 0;
	const char *claimed = idem ? idem_cluster_run_id(c, thread_id, idem) : NULL;
	if (!tenant_admit(c, p, f, thread_id, tenant, !retry, &ret))
		return ret;
	if (claimed)
		snprintf(run_id, sizeof(run_id), "%s", claimed);
	else
		run_uuid(run_id);
	/* durable before the 202: without a key or an alias (single host),
	 * the run is created in the group commit with its first events and the
	 * 202 goes with that commit's acknowledgements (the shim's work starts
	 * meanwhile; nothing of the run is seen before the commit); else one
	 * transaction with its idempotency key (or the /chat client's run id and
	 * input), fsync'd, now */
	bool created = false;
	bool in_commit = !alias && !idem && !replicate_active(c);
	if (in_commit) {
		ret = commit_queue_create(c, cl, f->req_id, run_id, thread_id, harness, tenant);
		created = ret == 0;
	} else if (alias)
		ret = runlog_create_aliased(c->runlog, run_id, thread_id, harness, tenant,
					    now_epoch_ms(), alias, input, &created);
	else
		ret = runlog_create_keyed(c->runlog, run_id, thread_id, harness, tenant,
					  now_epoch_ms(), idem, &created);
	if (ret < 0) {
		log_error_errno(ret, "Failed to register a run: %m");
		return ret;
	}
	/* the key named an earlier run (an alias: of this thread, runlog-alias.c):
	 * that is the answer */
	if (!created) {
		ret = reply_run_id(p, f->req_id, run_id);
		return ret;
	}
	c->m.runs_started++;
	if (input)
		replicate_input(c, run_id, input);
	Run *run = run_new(c, run_id, thread_id);
	if (!run) {
		ret = -ENOMEM;
		return ret;
	}
	snprintf(run->tenant, sizeof(run->tenant), "%s", tenant);
	TenantStat *ts = tenant_stat(c, tenant);
	if (ts)
		ts->runs_started++;
	if (!in_commit)
		ret = reply_run_id(p, f->req_id, run_id);
	log_ctx_msgid(LOG_INFO, &run->log, RW_MESSAGE_RUN_STARTED, "Run started (harness %s)",
		      harness);
	run->harness = hs;
	run->adapter = adapter_get(hs->adapter);
	/* RUN_STARTED first, whatever the harness (agui-guard.c drops an
	 * agent's own later one) */
	run_emit(run,
		 json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId", thread_id, "runId",
			   run_id),
		 NULL);
	run_start_driving(run, body.messages, body.metadata);
	return ret;
}

/* Cluster mode: what a read shows of a run whose last committed events
 * JetStream has not acknowledged yet — the events up to the replicated mark
 * (ev may be NULL), and a record with that lastSeq, still running. */
static void
cap_to_replicated(Coordinator *c, json_t *rec, RunLogEvents *ev)
{
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	int64_t mark = run_id ? replicate_mark(c, run_id) : INT64_MAX;
	json_int_t last = json_integer_value(json_object_get(rec, "lastSeq"));

	if (mark == INT64_MAX || mark >= last)
		return;
	json_object_set_new(rec, "lastSeq", json_integer(mark));
	json_object_set_new(rec, "status", json_string("running"));
	json_object_del(rec, "error");
	if (ev && ev->n > 0) {
		int64_t keep = mark - ev->first_seq + 1;
		size_t k = keep <= 0 ? 0 : MIN((size_t)keep, ev->n);
		for (size_t i = k; i < ev->n; i++)
			free(ev->texts[i]);
		ev->n = k;
	}
}

/* The record run_id names for a caller of thread_id (when given) or of
 * scope (RUN_GET's token scope; NULL: any thread): the run of that id when
 * it is the caller's, else the run a /chat client's run id names in the
 * caller's thread (or, with no thread, the newest in its scope). A run that
 * is not the caller's is answered exactly as one that does not exist
 * (-ENOENT), also when its id is an alias of the caller's. */
static int
owned_record(Coordinator *c, const char *run_id, const char *thread_id, char *const *scope,
	     json_t **ret)
{
	json_t *rec = NULL;
	char real[RUN_ID_LEN + 1];
	int r = runlog_get(c->runlog, run_id, &rec);

	if (r == 0) {
		const char *t = json_string_value(json_object_get(rec, "threadId")) ?: "";
		if (thread_id ? !streq(thread_id, t) : !runlog_scope_allows(scope, t)) {
			json_decref(rec);
			rec = NULL;
			r = -ENOENT;
		}
	}
	if (r == -ENOENT) {
		int a = thread_id ? runlog_alias_get(c->runlog, run_id, thread_id, real)
				  : runlog_alias_find(c->runlog, run_id, scope, real);
		r = a == 0 ? runlog_get(c->runlog, real, &rec) : a;
	}
	if (r == 0)
		*ret = rec;
	return r;
}

static int
handle_run_get(Peer *p, const Frame *f, const Msg_RUN_GET *m, void *ud)
{
	Client *cl = ud;
	char real[RUN_ID_LEN + 1];
	const char *text;
	json_t *rec = NULL;
	int ret = 0;

	/* any_thread: routerd's /chat join by run id alone checks the token's
	 * thread scope against the record it gets (docs/SECURITY.md) */
	if (!m->any_thread && !thread_named(p, f, m->thread_id))
		return 0;
	/* cluster mode: a thread another node owns is answered by it */
	if (m->thread_id && forward_by_thread(cl->c, p, f, m->thread_id, dispatch_run_get, ud))
		return 0;
	if (cl->c->cluster || !m->thread_id) {
		/* the record as far as JetStream acknowledged it (cap_to_replicated) */
		ret = owned_record(cl->c, m->run_id, m->thread_id, m->scope, &rec);
		/* a run that diverged here (fenced, replication_failed): the
		 * cluster's record, not this log's end (a tool's read, naming no
		 * thread, still gets the local one) */
		if (ret == 0 && m->thread_id && replicate_diverged(cl->c, rec) &&
		    remote_run_get(cl->c, p, f, m->run_id, m->thread_id)) {
			json_decref(rec);
			return 0;
		}
		if (ret == 0) {
			cap_to_replicated(cl->c, rec, NULL);
			ret = reply_record(p, f->req_id, rec);
		}
		json_decref(rec);
		/* not in this node's log: a lost node's run (its thread is ours
		 * now); a tool's RUN_GET naming no thread reads this log only */
		if (ret == -ENOENT && m->thread_id &&
		    remote_run_get(cl->c, p, f, m->run_id, m->thread_id))
			return 0;
		/* a /chat join by run id alone: rw_runs names its thread, or
		 * another node holds it */
		if (ret == -ENOENT && m->any_thread && !m->thread_id &&
		    forward_any_thread(cl->c, p, f, m->run_id, dispatch_run_get, ud))
			return 0;
		return ret;
	}
	/* the stored text, unparsed (runlog_get_text: GET polling, B7) */
	ret = runlog_get_text(cl->c->runlog, m->run_id, m->thread_id, &text);
	/* a /chat client's run id names its run too (RUN_START client_run_id) */
	if (ret == -ENOENT && runlog_alias_get(cl->c->runlog, m->run_id, m->thread_id, real) == 0)
		ret = runlog_get_text(cl->c->runlog, real, m->thread_id, &text);
	if (ret == 0)
		ret = reply_send_RUN_GET(p, f->req_id, &(Reply_RUN_GET){.record = text});
	return ret;
}

static int
handle_run_read(Peer *p, const Frame *f, const Msg_RUN_READ *m, void *ud)
{
	Client *cl = ud;
	const char *run_id = m->run_id, *thread_id = m->thread_id;
	int64_t from = m->from_seq;
	uint64_t max = m->max;
	int64_t max_bytes = m->max_bytes; /* 0 when absent */
	json_t *rec = NULL;
	RunLogEvents ev = {0};
	int ret = 0;

	if (!thread_named(p, f, thread_id))
		goto out;
	/* cluster mode: a run this node does not hold is read from JetStream */
	if (remote_run_read(cl->c, p, f, m))
		goto out;
	if (ret == 0 && from < -1)
		ret = -EINVAL;
	if (ret == 0) {
		if (max == 0 || max > (uint64_t)cl->c->conf.read_max)
			max = (uint64_t)cl->c->conf.read_max;
		if (max_bytes <= 0 || max_bytes > cl->c->conf.read_max_bytes)
			max_bytes = cl->c->conf.read_max_bytes;
		ret = runlog_read_bytes(cl->c->runlog, run_id, from, max, (size_t)max_bytes, &ev,
					&rec);
	}
	if (ret == 0 && thread_id &&
	    !streq(thread_id, json_string_value(json_object_get(rec, "threadId")) ?: ""))
		ret = -ENOENT;
	if (ret == 0)
		cap_to_replicated(cl->c, rec, &ev);
	if (ret == 0) {
		_cleanup_free_ char *rs = json_dump_compact(rec);
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 3);
		mp_w_int(&w, "first_seq", ev.first_seq);
		mp_w_key(&w, "events");
		msgpack_pack_array(&w.pk, ev.n);
		for (size_t i = 0; i < ev.n; i++)
			mp_w_strn(&w, ev.texts[i], ev.lens[i]);
		mp_w_str(&w, "record", rs ? rs : "{}");
		ret = peer_reply(p, f->req_id, &w);
		mp_writer_done(&w);
	} else if (ret != -ENOENT && ret != -EINVAL && ret != -EBADMSG) {
		log_error_errno(ret, "Failed to read run '%s': %m", run_id);
	}
out:
	runlog_events_done(&ev);
	json_decref(rec);
	return ret;
}

/* RUN_WATCH (watch) and RUN_UNWATCH: the common part. */
static int
handle_watch(Peer *p, const Frame *f, void *ud, bool watch, const char *run_id,
	     const char *thread_id)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	json_t *rec = NULL;
	int ret = 0;

	if (watch && !thread_named(p, f, thread_id))
		goto out;
	if (ret == 0 && strlen(run_id) != RUN_ID_LEN)
		ret = -ENOENT;
	/* cluster mode: a run this node does not hold is watched in JetStream */
	if (ret == 0 && watch && remote_run_watch(c, cl, p, f, run_id, thread_id))
		goto out;
	/* a watch delivers the run's events: only to its thread */
	if (ret == 0 && watch && thread_id)
		ret = owned_record(c, run_id, thread_id, NULL, &rec);
	if (ret == 0 && watch)
		ret = watch_add(c, cl, run_id, NULL);
	else if (ret == 0)
		watch_remove(c, cl, run_id, remote_watch_drop);
	if (ret == 0)
		ret = peer_reply(p, f->req_id, NULL);
out:
	json_decref(rec);
	return ret;
}

static int
handle_run_watch(Peer *p, const Frame *f, const Msg_RUN_WATCH *m, void *ud)
{
	return handle_watch(p, f, ud, true, m->run_id, m->thread_id);
}

static int
handle_run_unwatch(Peer *p, const Frame *f, const Msg_RUN_UNWATCH *m, void *ud)
{
	return handle_watch(p, f, ud, false, m->run_id, NULL);
}

static int
handle_status_get(Peer *p, const Frame *f, const Msg_STATUS_GET *req, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	size_t active = 0;
	char *text = NULL;

	if (metrics_text(c, &text, &active) < 0)
		return -ENOMEM;

	int r = reply_send_STATUS_GET(p, f->req_id,
				      &(Reply_STATUS_GET){
					  .shim_connected = peer_is_ready(c->shim),
					  .storage_ok = c->storage_ok,
					  .cluster_ok = replicate_ready(c),
					  .active_runs = active,
					  .metrics = text ? text : "",
				      });
	free(text);
	return r;
}

static int
handle_run_cancel(Peer *p, const Frame *f, const Msg_RUN_CANCEL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *run_id = m->run_id;
	json_t *rec = NULL;
	int ret = 0;

	if (!thread_named(p, f, m->thread_id))
		goto out;
	if (m->thread_id && forward_by_thread(c, p, f, m->thread_id, dispatch_run_cancel, ud))
		goto out;
	ret = owned_record(c, run_id, m->thread_id, NULL, &rec);
	if (ret < 0)
		goto out;
	/* the record's own id: run_id may be a /chat client's alias (copied:
	 * rec may be replaced below) */
	char real_id[RUN_ID_LEN + 1];
	snprintf(real_id, sizeof(real_id), "%s",
		 json_string_value(json_object_get(rec, "runId")) ?: run_id);
	run_id = real_id;
	const char *status = json_string_value(json_object_get(rec, "status"));
	Run *run = run_find(c, run_id);
	if (run_status_terminal(status) ||
	    (run && (run->state == RUN_DONE || run_cancelling(run)))) {
		/* idempotent: a terminal run is left as it is */
		if (run && run->state != RUN_DONE) {
			/* a cancel is already on its way: answer when it lands */
			ret = reply_record(p, f->req_id, rec);
		} else {
			commit_now(c);
			json_decref(rec);
			rec = NULL;
			ret = runlog_get(c->runlog, run_id, &rec);
			if (ret == 0)
				ret = reply_record(p, f->req_id, rec);
		}
		goto out;
	}
	if (run) {
		PeerDeferred *d = peer_defer(p, f);
		if (!d) {
			ret = -ENOMEM;
			goto out;
		}
		ret = run_cancel(run, d);
		if (ret == -EALREADY) {
			/* already being stopped (an output or time limit, the
			 * watchdog): the run is ending; answer as for a cancel on
			 * its way, not an error */
			peer_deferred_free(d);
			ret = reply_record(p, f->req_id, rec);
		}
		goto out;
	}
	/* not driven here (a direct-log client's run): end it in the log */
	{
		LogCtx lc = {.run_id = run_id,
			     .thread_id = json_string_value(json_object_get(rec, "threadId"))};
		log_ctx_msgid(LOG_NOTICE, &lc, RW_MESSAGE_RUN_CANCELLED, "Run cancelled");
	}
	json_t *cancel_chunk =
	    run_error_chunk("run cancelled", RUN_ERR_ABORTED,
			    json_string_value(json_object_get(rec, "threadId")), run_id, 0);
	op_queue_client(c, cl, f->req_id, run_id, cancel_chunk, "aborted",
			json_pack("{s:b, s:{s:s, s:s}}", "cancelRequested", 1, "error", "message",
				  "run cancelled", "code", RUN_ERR_ABORTED));
out:
	json_decref(rec);
	return ret;
}

static int
handle_chat_hydrate(Peer *p, const Frame *f, const Msg_CHAT_HYDRATE *m, void *ud)
{
	Client *cl = ud;
	const char *thread_id = m->thread_id;
	json_auto_t *runs = NULL, *local = NULL;
	size_t n_local;
	int ret = 0;

	if (!thread_id_valid(thread_id))
		ret = -EINVAL;
	if (ret == 0 && forward_by_thread(cl->c, p, f, thread_id, dispatch_chat_hydrate, ud))
		goto out;
	/* the newest runs only (the hydrate's), unless a lost node's runs
	 * are merged in */
	if (ret == 0)
		ret = cl->c->cluster ? runlog_thread_runs(cl->c->runlog, thread_id, NULL, &runs)
				     : runlog_thread_runs_newest(cl->c->runlog, thread_id,
								 CHAT_HYDRATE_MAX_RUNS, &runs);
	n_local = json_array_size(runs);
	if (ret == 0 && cl->c->cluster) {
		/* a thread taken over: the runs its lost node ran are read from
		 * JetStream */
		size_t i;
		json_t *rec;
		if (!(local = json_object()))
			ret = -ENOMEM;
		json_array_foreach(runs, i, rec)
		{
			const char *id = json_string_value(json_object_get(rec, "runId"));
			if (ret == 0 && id && json_object_set_new(local, id, json_true()) < 0)
				ret = -ENOMEM;
		}
		if (ret == 0)
			ret = takeover_thread_runs(cl->c, thread_id, NULL, runs);
		if (ret == 0 && json_array_size(runs) == n_local)
			json_decref(TAKE_PTR(local)); /* every run is local */
	}
	if (ret == 0) /* answered later, the rebuild in slices */
		ret = chat_hydrate(cl->c, p, f, runs, local);
	if (ret < 0 && ret != -EINVAL)
		log_error_errno(ret, "Failed to rebuild thread '%s': %m", thread_id);
out:
	return ret;
}

/* A JSON array as a vector of its elements' compact JSON texts ("{}" for
 * one that cannot be dumped); NULL when out of memory. strv_free() it. */
static char **
json_texts(const json_t *list)
{
	char **v = calloc(json_array_size(list) + 1, sizeof(char *));
	size_t i;
	json_t *item;

	if (!v)
		return NULL;
	json_array_foreach(list, i, item)
	{
		char *s = json_dump_compact(item);
		v[i] = s ? s : strdup("{}");
		if (!v[i]) {
			strv_free(v);
			return NULL;
		}
	}
	return v;
}

static int
handle_thread_runs(Peer *p, const Frame *f, const Msg_THREAD_RUNS *m, void *ud)
{
	Client *cl = ud;
	const char *thread_id = m->thread_id, *status = m->status;
	json_t *list = NULL;
	int ret = 0;

	if (!thread_id_valid(thread_id))
		ret = -EINVAL;
	if (ret == 0 && status && !streq(status, "running") && !run_status_terminal(status) &&
	    !streq(status, "interrupted")) {
		peer_reply_error(p, f->req_id, -EINVAL,
				 "status must be running, completed, failed or aborted");
		goto out;
	}
	if (ret == 0 && forward_by_thread(cl->c, p, f, thread_id, dispatch_thread_runs, ud))
		goto out;
	if (ret == 0)
		ret = runlog_thread_runs(cl->c->runlog, thread_id, status, &list);
	if (ret == 0) /* cluster mode: the runs of a thread taken over that ran on its
		       * lost node */
		ret = takeover_thread_runs(cl->c, thread_id, status, list);
	if (ret == 0) {
		char **texts = json_texts(list);
		ret = texts ? reply_send_THREAD_RUNS(p, f->req_id,
						     &(Reply_THREAD_RUNS){.records = texts})
			    : -ENOMEM;
		strv_free(texts);
	}
out:
	json_decref(list);
	return ret;
}

/* THREAD_LIST: the host's threads, newest activity first, one page. */
static int
handle_thread_list(Peer *p, const Frame *f, const Msg_THREAD_LIST *m, void *ud)
{
	Client *cl = ud;
	RunLogThreadQuery q = {.prefix = m->prefix,
			       .status = m->status,
			       .scope = m->scope,
			       .after_ms = m->after_ms,
			       .after_thread = m->after_thread,
			       .limit = m->limit};
	json_t *list = NULL;
	bool more = false;
	int ret = 0;

	if (q.limit == 0 || q.limit > THREAD_LIST_MAX ||
	    (q.prefix && strlen(q.prefix) > THREAD_ID_MAX) ||
	    (q.after_thread && !thread_id_valid(q.after_thread))) {
		peer_reply_error(p, f->req_id, -EINVAL,
				 "limit must be 1..1000, ids at most 256 bytes");
		goto out;
	}
	if (q.status && !streq(q.status, "running") && !run_status_terminal(q.status)) {
		peer_reply_error(p, f->req_id, -EINVAL,
				 "status must be running, completed, failed or aborted");
		goto out;
	}
	ret = runlog_threads(cl->c->runlog, &q, &list, &more);
	if (ret == 0) /* cluster mode: threads taken over, no run of them here yet */
		ret = takeover_thread_list(cl->c, &q, list, &more);
	/* cluster mode: every node's page, merged */
	if (ret == 0 && forward_thread_list(cl->c, p, f, list, more, q.limit, ud))
		goto out;
	if (ret == 0) {
		char **texts = json_texts(list);
		ret = texts
			  ? reply_send_THREAD_LIST(
				p, f->req_id, &(Reply_THREAD_LIST){.threads = texts, .more = more})
			  : -ENOMEM;
		strv_free(texts);
	}
out:
	json_decref(list);
	return ret;
}

/* The handlers see the decoded request (msg.h); a body that does not decode
 * is answered -EBADMSG before them. */
MSG_HANDLER(dispatch_run_start, RUN_START, handle_run_start)
MSG_HANDLER(dispatch_run_get, RUN_GET, handle_run_get)
MSG_HANDLER(dispatch_run_read, RUN_READ, handle_run_read)
MSG_HANDLER(dispatch_run_watch, RUN_WATCH, handle_run_watch)
MSG_HANDLER(dispatch_run_unwatch, RUN_UNWATCH, handle_run_unwatch)
MSG_HANDLER(dispatch_status_get, STATUS_GET, handle_status_get)
MSG_HANDLER(dispatch_chat_hydrate, CHAT_HYDRATE, handle_chat_hydrate)
MSG_HANDLER(dispatch_run_cancel, RUN_CANCEL, handle_run_cancel)
MSG_HANDLER(dispatch_thread_runs, THREAD_RUNS, handle_thread_runs)
MSG_HANDLER(dispatch_snapshot_create, SNAPSHOT_CREATE, handle_snapshot_create)
MSG_HANDLER(dispatch_snapshot_restore, SNAPSHOT_RESTORE, handle_snapshot_restore)
MSG_HANDLER(dispatch_run_open, RUN_OPEN, handle_run_open)
MSG_HANDLER(dispatch_run_append, RUN_APPEND, handle_run_append)
MSG_HANDLER(dispatch_run_finish, RUN_FINISH, handle_run_finish)
MSG_HANDLER(dispatch_bridge_call, BRIDGE_CALL, handle_bridge_call)
MSG_HANDLER(dispatch_thread_file, THREAD_FILE, handle_thread_file)
MSG_HANDLER(dispatch_thread_list, THREAD_LIST, handle_thread_list)
MSG_HANDLER(dispatch_sandbox_ctl, SANDBOX_CTL, handle_sandbox_ctl)
MSG_HANDLER(dispatch_capabilities_get, CAPABILITIES_GET, handle_capabilities_get)
MSG_HANDLER(dispatch_snapshot_list, SNAPSHOT_LIST, handle_snapshot_list)
MSG_HANDLER(dispatch_watch_poll, WATCH_POLL, handle_watch_poll)
/* SBX_EXEC ensures the thread's sandbox (work in the thread): the thread is
 * the tenant's (claimed when it has no owner, tenant.c) and its sandbox
 * counts for the tenant's share of the slots (SANDBOX_ENSURE tenant). The
 * exec's own checks (sandbox-exec.c) come after. */
static int
handle_sbx_exec_tenant(Peer *p, const Frame *f, const Msg_SBX_EXEC *m, void *ud)
{
	Client *cl = ud;
	Msg_SBX_EXEC m2 = *m;
	int ret = 0;

	if (thread_id_valid(m->thread_id) && !cl->c->cluster) {
		if (!tenant_request_ok(p, f, &m2.tenant) ||
		    !tenant_admit(cl->c, p, f, m->thread_id, m2.tenant, false, &ret))
			return ret;
	}
	/* cluster mode: the sandbox is on the thread's owner (sbx-relay.c) */
	if (sbx_relay_exec(cl, p, f, &m2))
		return 0;
	return handle_sbx_exec(p, f, &m2, ud);
}

MSG_HANDLER(dispatch_sbx_exec, SBX_EXEC, handle_sbx_exec_tenant)
MSG_HANDLER(dispatch_sbx_relay_poll, SBX_RELAY_POLL, handle_sbx_relay_poll)
MSG_HANDLER(dispatch_sandbox_egress, SANDBOX_EGRESS, handle_sandbox_egress)

static const PeerHandler client_handlers[_MSG_TYPE_MAX] = {
    [MSG_RUN_START] = dispatch_run_start,
    [MSG_RUN_GET] = dispatch_run_get,
    [MSG_RUN_READ] = dispatch_run_read,
    [MSG_RUN_WATCH] = dispatch_run_watch,
    [MSG_RUN_UNWATCH] = dispatch_run_unwatch,
    [MSG_STATUS_GET] = dispatch_status_get,
    [MSG_CHAT_HYDRATE] = dispatch_chat_hydrate,
    [MSG_RUN_CANCEL] = dispatch_run_cancel,
    [MSG_THREAD_RUNS] = dispatch_thread_runs,
    [MSG_SNAPSHOT_CREATE] = dispatch_snapshot_create,
    [MSG_SNAPSHOT_RESTORE] = dispatch_snapshot_restore,
    [MSG_RUN_OPEN] = dispatch_run_open,
    [MSG_RUN_APPEND] = dispatch_run_append,
    [MSG_RUN_FINISH] = dispatch_run_finish,
    [MSG_BRIDGE_CALL] = dispatch_bridge_call,
    [MSG_THREAD_FILE] = dispatch_thread_file,
    [MSG_THREAD_LIST] = dispatch_thread_list,
    [MSG_SANDBOX_CTL] = dispatch_sandbox_ctl,
    [MSG_CAPABILITIES_GET] = dispatch_capabilities_get,
    [MSG_SNAPSHOT_LIST] = dispatch_snapshot_list,
    [MSG_WATCH_POLL] = dispatch_watch_poll,
    [MSG_SBX_EXEC] = dispatch_sbx_exec,
    [MSG_SBX_EXEC_INPUT] = sbx_dispatch_exec_input,
    [MSG_SBX_EXEC_KILL] = sbx_dispatch_exec_kill,
    [MSG_SBX_EXEC_LIST] = sbx_dispatch_exec_list,
    [MSG_SBX_RELAY_POLL] = dispatch_sbx_relay_poll,
    [MSG_SBX_EXEC_READ] = sbx_dispatch_exec_read,
    [MSG_SANDBOX_EGRESS] = dispatch_sandbox_egress,
};

static void
client_closed(Peer *p, int err, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;

	log_debug("routerd connection closed");
	sbx_exec_client_gone(c, cl);
	sbx_relay_client_gone(c, cl);
	watch_remove(c, cl, NULL, remote_watch_drop);
	for (Client **pp = &c->clients; *pp; pp = &(*pp)->next)
		if (*pp == cl) {
			*pp = cl->next;
			break;
		}
	peer_free(cl->peer);
	free(cl);
}

static const PeerOps client_ops = {
    .local_role = ROLE_COORD,
    .handlers = client_handlers,
    .on_close = client_closed,
};

int
coordinator_attach_client(Coordinator *c, int fd, bool forwarded)
{
	Client *cl = calloc(1, sizeof(*cl));
	int r;

	if (!cl) {
		close(fd);
		return -ENOMEM;
	}
	cl->c = c;
	cl->forwarded = forwarded;
	r = peer_new(c->base, fd, &client_ops, cl, (size_t)c->conf.shared.max_frame, &cl->peer);
	if (r < 0) {
		free(cl);
		return r;
	}
	cl->next = c->clients;
	c->clients = cl;
	return 0;
}

/* PeerServerConf.accepted: a connection from root or our own uid. */
static void *
client_accepted(Peer *p, void *ud)
{
	Coordinator *c = ud;
	Client *cl = calloc(1, sizeof(*cl));

	if (!cl)
		return NULL;
	cl->c = c;
	cl->peer = p;
	cl->next = c->clients;
	c->clients = cl;
	return cl;
}

static void
client_refused(PeerServerEvent what, int err, uid_t uid, void *ud)
{
	if (what == PEER_SERVER_REFUSED)
		log_warning("Refusing a connection from uid %u", (unsigned)uid);
	else if (what == PEER_SERVER_ACCEPT_FAILED && err != -ECONNABORTED)
		log_warning_errno(err, "accept failed: %m");
}

/* ---------- start-up and shutdown ---------- */

/* Cluster mode's commits are replicated before they are visible. */
static const struct CommitDelivery *
commit_delivery(Coordinator *c)
{
	return replicate_active(c) ? &commit_delivery_replicated : &commit_delivery_local;
}

const CommitHooks coordinator_commit_hooks = {
    .flush = driver_flush_all,
    .run_log = driver_run_log,
    .secrets = driver_secrets,
    .committed = driver_committed,
    .log_usage = watchdog_log_usage,
    .delivery = commit_delivery,
};

static void
on_term(void *ud)
{
	Coordinator *c = ud;
	c->stopping = true;
	notify_stopping();
	/* drain: whatever arrived is committed before we go; live runs stay
	 * 'running' in the log and are re-attached by the next start */
	commit_now(c);
	replicate_drain_and_exit(c); /* in cluster mode, after what is in flight */
}

/* The run log in state_dir (map_size reserved unless preallocate = no). */
static int
coordinator_open_runlog(Coordinator *c)
{
	char path[4096];
	int r;

	snprintf(path, sizeof(path), "%s/runlog", c->conf.shared.state_dir);
	RunLogOptions o = {.map_size = (size_t)c->conf.map_size,
			   .sync = c->conf.sync,
			   .preallocate = c->conf.preallocate};
	r = runlog_open(path, &o, &c->runlog);
	if (r == -ENOSPC)
		return log_error_errno(r,
				       "Cannot reserve coordinatord.map_size (%" PRId64
				       " bytes) for the run "
				       "log in '%s': %m; free disk space, lower map_size, or set "
				       "coordinatord.preallocate = no",
				       c->conf.map_size, path);
	if (r < 0)
		return log_error_errno(r, "Failed to open the run log in '%s': %m", path);
	if (c->conf.preallocate && !runlog_preallocated(c->runlog))
		log_warning(
		    "The filesystem of '%s' cannot preallocate: a disk filled by workspaces "
		    "or backups can make run log commits fail; put the state directory on "
		    "its own filesystem",
		    path);
	(void)runlog_usage(c->runlog, &c->log_used, &c->log_map);
	c->log_map = (uint64_t)c->conf.map_size;
	r = tenants_load(c);
	if (r < 0)
		return log_error_errno(r, "Failed to read the threads' owners in '%s': %m", path);
	return 0;
}

/* Commit what is queued, free every run, client and watch, then the rest.
 * NULL-safe; returns NULL. */
static Coordinator *
coordinator_free(Coordinator *c)
{
	if (!c)
		return NULL;
	if (c->base)
		commit_now(c);
	forward_teardown(c);
	remote_teardown(c);
	chat_teardown(c);
	replicate_teardown(c); /* what waits for JetStream is dropped, not acknowledged */
	while (c->runs)
		run_free(c->runs);
	sbx_exec_free_all(c);
	sbx_relay_free_all(c);
	while (c->clients) {
		Client *cl = c->clients;
		c->clients = cl->next;
		peer_free(cl->peer);
		free(cl);
	}
	while (c->watches) {
		Watch *w = c->watches;
		c->watches = w->next;
		free(w);
	}
	c->stopping = true;
	bridge_teardown(c);
	c->shim_link = peer_link_free(c->shim_link);
	c->shim = NULL;
	sandbox_egress_free_all(c);
	watchdog_teardown(c);
	metrics_teardown(c);
	commit_teardown(c);
	driver_thread_output_free(c);
	daemon_teardown_signals();
	c->server = peer_server_free(c->server, false);
	if (c->flush_ev)
		event_free(c->flush_ev);
	loop_lag_free(c->loop_lag);
	if (c->base)
		event_base_free(c->base);
	runlog_free(c->runlog);
	tenants_free(c);
	if (c->harnesses)
		harness_set_done(c->harnesses);
	free(c->harnesses);
	coord_conf_done(&c->conf);
	free(c);
	return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(Coordinator *, coordinator_free);

/* Load the configuration; unless only checking it (then *ret = NULL), open
 * the run log, the event base, the tools' cgroup, the commit queue and the
 * driver, and take over the runs a previous instance left running. */
static int
coordinator_new(const DaemonArgs *args, Coordinator **ret)
{
	_cleanup_(coordinator_freep) Coordinator *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	c->run_teardown = driver_run_teardown;
	c->harnesses = calloc(1, sizeof(*c->harnesses));
	if (!c->harnesses)
		return -ENOMEM;
	r = coord_conf_load(args, &c->conf, c->harnesses);
	if (r < 0)
		return r;
	log_set_max_level(c->conf.shared.log_level);
	if (args->check_config) {
		if (!args->dump_config)
			log_info("Configuration is valid");
		*ret = NULL;
		return 0;
	}
	for (size_t i = 0; i < c->harnesses->n; i++)
		log_info("Harness '%s': adapter %s%s", c->harnesses->v[i].name,
			 adapter_name(c->harnesses->v[i].adapter),
			 streq(c->harnesses->v[i].name, c->conf.default_harness) ? " (default)"
										 : "");
	r = coordinator_open_runlog(c);
	if (r < 0)
		return r;
	c->egress_ops = &sandbox_egress_ops;
	sandbox_egress_load(c); /* the sandboxes' egress lists (egress.c) */

	r = replicate_global_init(c); /* before the event base */
	if (r < 0)
		return log_error_errno(r, "Cannot initialise the cluster client: %m");
	struct event_config *cfg = event_config_new();
	if (cfg) {
		c->base = event_base_new_with_config(cfg);
		event_config_free(cfg);
	}
	if (!c->base || event_base_priority_init(c->base, 3) < 0)
		return -ENOMEM;
	if (!(c->loop_lag = loop_lag_new(c->base)))
		return -ENOMEM;
	r = bridge_setup(c);
	if (r < 0)
		return r;
	r = replicate_setup(c); /* cluster mode: connect or fail closed */
	if (r < 0)
		return r;
	/* cluster mode: serve what other nodes forward, over a loopback client */
	r = forward_setup(c, coordinator_attach_client);
	if (r < 0)
		return r;
	commit_setup(c, &coordinator_commit_hooks);
	driver_setup(c);
	driver_recover(c);
	*ret = TAKE_PTR(c);
	return 0;
}

int
coordinator_run(const DaemonArgs *args)
{
	_cleanup_(coordinator_freep) Coordinator *c = NULL;
	char path[4096];
	int r;

	r = coordinator_new(args, &c);
	if (r < 0 || !c)
		return r;
	r = mkdir_p(c->conf.shared.runtime_dir, 0755);
	if (r < 0)
		return log_error_errno(r, "Failed to create '%s': %m", c->conf.shared.runtime_dir);
	snprintf(path, sizeof(path), "%s/%s", c->conf.shared.runtime_dir, RW_SOCK_COORD);
	if (!c->flush_ev || !c->commit_ev)
		return -ENOMEM;
	/* 0660, but only root and our own uid may connect */
	r = peer_server_new(c->base,
			    &(PeerServerConf){.path = path,
					      .mode = 0660,
					      .gid = -1,
					      .ops = &client_ops,
					      .max_frame = (size_t)c->conf.shared.max_frame,
					      .accepted = client_accepted,
					      .event = client_refused,
					      .userdata = c},
			    &c->server);
	if (r < 0)
		return log_error_errno(r, "Failed to listen on '%s': %m", path);
	r = daemon_setup_signals(c->base, on_term, NULL, c);
	if (r < 0)
		return r;
	watchdog_setup(c);
	metrics_setup(c);
	watchdog_log_usage(c, c->log_used); /* a log past its marks since the last start */
	r = shim_connect_now(c);
	if (r < 0)
		return r;

	notify_ready("serving");
	log_info("coordinatord ready on %s (run log in %s/runlog)", path, c->conf.shared.state_dir);
	event_base_dispatch(c->base);
	if (c->halted)
		return c->halted; /* logged where it happened; systemd restarts us */
	log_info("coordinatord stopped");
	return 0;
}
