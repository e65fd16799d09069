/* SPDX-License-Identifier: MIT */
/*
 * watchdog.c — the stall watchdog and retention.
 *
 * Every min(30 s, stall_timeout_ms) the watchdog first asks the shim how much
 * CPU each executing run's exec used (SANDBOX_STATS with its exec_id: its exec
 * cgroup; the sandbox's as a whole when the shim cannot tell): CPU used since
 * the previous check is progress (a silent build), and bumps updatedAt.
 * Processes another exec left running are not this run's progress. Then it
 * commits everything queued (so an append that raced it wins) and fails, each
 * in one transaction (runlog_finish_if_stale), every non-terminal run whose
 * updatedAt is strictly older than now − timeout — except runs waiting for the
 * shim or for a sandbox slot, being cancelled, or whose CPU use is not known
 * yet or was first read in this round (one round of grace while the baseline
 * is taken: the reply comes before the scan, and a run whose exec started
 * just before the round must not be judged on a baseline of no interval),
 * or whose reading failed this round but not the round before (a reply past
 * its deadline is no evidence of a stall; two in a row are judged by events).
 *
 * Retention deletes terminal runs finished more than retention_days ago in
 * batches of a few runs per transaction, yielding to the event loop between
 * batches so appends are never held up for long. Size retention deletes the
 * terminal runs that finished first, whatever their age, while the log's live
 * data is past size_retention_high_water percent of the map (checked after
 * every commit and at every retention tick): those of the largest tenant over
 * its share (tenant_log_share) first, never a tenant's within its share
 * while one over it holds the log (size_victim); the journal warns once
 * when the log crosses map_warn_percent.
 */
#include "config.h"

#include "watchdog.h"

#include "adapter.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

#define WATCHDOG_MSG "run watchdog: no progress; orchestrator presumed dead"

static struct event *watchdog_fallback;
static struct event *prune_work;
static struct event *prune_size_work;
static bool round_scanned;
static bool prune_running;

static bool
run_protected(const Run *run)
{
	return run->state == RUN_WAIT_SHIM || run->queued || run_cancelling(run) ||
	       run->bridge_inflight > 0 || run->state == RUN_DONE || run_reattaching(run) ||
	       (run->state == RUN_EXECUTING && run->c->shim &&
		(!run->cpu_known || run->cpu_round == run->c->watchdog_round));
}

typedef struct Stale {
	Coordinator *c;
	char (*ids)[RUN_ID_LEN + 1];
	size_t n, cap;
} Stale;

static void
collect(const char *run_id, json_t *record, void *ud)
{
	Stale *s = ud;
	if (replicate_held(s->c, run_id))
		return; /* its events are being taken back from the cluster: not stale */
	if (ARRAY_GROW(s->ids, s->n, s->cap, 16) < 0)
		return;
	snprintf(s->ids[s->n++], RUN_ID_LEN + 1, "%s", run_id);
}

static void
kill_sandbox(Coordinator *c, const char *sandbox_id)
{
	if (!peer_is_ready(c->shim))
		return;
	(void)msg_call_SANDBOX_DESTROY(c->shim, &(Msg_SANDBOX_DESTROY){.sandbox_id = sandbox_id},
				       10 * USEC_PER_SEC, NULL, NULL);
}

static void
watchdog_scan(Coordinator *c)
{
	Stale s = {.c = c};
	int64_t now, cutoff;

	round_scanned = true;
	commit_now(c); /* appends that arrived first win */
	now = now_epoch_ms();
	cutoff = now - c->conf.stall_timeout_ms;
	if (runlog_foreach_running(c->runlog, collect, &s) < 0) {
		free(s.ids);
		return;
	}
	json_auto_t *fields = json_pack("{s:{s:s}}", "error", "message", WATCHDOG_MSG);
	for (size_t i = 0; i < s.n; i++) {
		Run *run = run_find(c, s.ids[i]);
		if (run && run_protected(run))
			continue;
		/* the RUN_ERROR names its run; a driven run's open messages and
		 * tool calls are closed before it (agui-guard.c), all in the
		 * one transaction that checks the run is still stale */
		json_auto_t *chunk = run_error_chunk(WATCHDOG_MSG, RUN_ERR_STALLED,
						     run ? run->thread_id : NULL, s.ids[i], now);
		json_auto_t *all = run ? agui_guard_closers(run, WATCHDOG_MSG) : json_array();
		if (!chunk || !all || json_array_append(all, chunk) < 0)
			continue;
		size_t n = json_array_size(all);
		char **texts = calloc(n, sizeof(char *));
		size_t *lens = calloc(n, sizeof(size_t));
		bool ok = texts && lens;
		for (size_t k = 0; ok && k < n; k++) {
			json_t *e = json_array_get(all, k);
			if (!json_object_get(e, "timestamp"))
				json_object_set_new(e, "timestamp", json_integer(now));
			ok = (texts[k] = json_dump_compact(e)) != NULL;
			if (ok)
				lens[k] = strlen(texts[k]);
		}
		json_t *rec = NULL;
		int64_t seq;
		int r = ok ? runlog_finish_if_stale_n(c->runlog, s.ids[i], cutoff,
						      (const char *const *)texts, lens, n, fields,
						      now, &rec, &seq)
			   : -ENOMEM;
		if (r == 0)
			commit_publish_committed(c, s.ids[i], seq, (const char *const *)texts, lens,
						 n, rec);
		for (size_t k = 0; texts && k < n; k++)
			free(texts[k]);
		free(texts);
		free(lens);
		if (r < 0) {
			LogCtx lc = {.run_id = s.ids[i]};
			log_ctx_errno(LOG_ERR, r, &lc, "Watchdog could not fail a stale run: %m");
			continue;
		}
		if (r > 0)
			continue;
		c->m.watchdog_kills++;
		metrics_count_finish(c, "failed");
		LogCtx lc = {.run_id = s.ids[i],
			     .thread_id = json_string_value(json_object_get(rec, "threadId")),
			     .sandbox_id = run ? run->sandbox_id : NULL};
		log_ctx_msgid(LOG_WARNING, &lc, RW_MESSAGE_RUN_WATCHDOG,
			      "Run failed by the stall watchdog (no progress for %" PRId64 " ms)",
			      c->conf.stall_timeout_ms);
		json_decref(rec);
		if (run) {
			/* kill: the run's exec cgroup (everything it started, not the
			 * sandbox's other runs); the whole sandbox only when no exec
			 * of it is known yet (its start is in flight). */
			if (c->conf.stall_action == STALL_KILL && run->exec_id &&
			    (run->state == RUN_EXECUTING || run_reattaching(run)))
				run_kill_exec(run);
			else if (c->conf.stall_action == STALL_KILL && run->sandbox_id)
				kill_sandbox(c, run->sandbox_id);
			run_free(run);
		}
	}
	free(s.ids);
}

static void
stats_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Coordinator *c = run->c;
	Reply_SANDBOX_STATS rep = {};

	if (err == 0 && reply_decode_SANDBOX_STATS(body, &rep) == 0) {
		/* the run's own exec, when the shim can tell (its exec cgroup) */
		uint64_t cpu = rep.has_exec_cpu_usec ? rep.exec_cpu_usec : rep.cpu_usec;
		if (run->cpu_known && cpu > run->cpu_usec && run->state == RUN_EXECUTING)
			(void)runlog_touch(c->runlog, run->run_id, now_epoch_ms());
		if (!run->cpu_known) /* the baseline: this round's scan spares the run */
			run->cpu_round = c->watchdog_round;
		run->cpu_usec = cpu;
		run->cpu_known = true;
	} else if (err == -ENOMSG) {
		run->cpu_known = true; /* the shim cannot tell: judge by events alone */
		run->cpu_usec = 0;
	} else {
		/* no reading (a reply late past its deadline on a loaded host):
		 * that is no evidence of a stall; this round spares the run, a
		 * second failed round in a row judges it by its events */
		bool again = run->cpu_err_round && run->cpu_err_round + 1 == c->watchdog_round;
		if (run->cpu_known && !again)
			run->cpu_round = c->watchdog_round;
		run->cpu_err_round = c->watchdog_round;
	}
	reply_done_SANDBOX_STATS(&rep);
	if (--c->watchdog_pending == 0 && !round_scanned)
		watchdog_scan(c);
}

static void
fallback_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	if (!round_scanned)
		watchdog_scan(c);
}

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	struct timeval tv;

	if (c->conf.stall_timeout_ms <= 0)
		return;
	round_scanned = false;
	c->watchdog_pending = 0;
	c->watchdog_round++;
	for (Run *run = c->runs; run; run = run->next) {
		if (run->state != RUN_EXECUTING || !run->sandbox_id || !peer_is_ready(c->shim))
			continue;
		Msg_SANDBOX_STATS m = {.sandbox_id = run->sandbox_id,
				       .exec_id = run->exec_id,
				       .has_exec_id = run->exec_id != 0};
		if (msg_call_SANDBOX_STATS(c->shim, &m, 2 * USEC_PER_SEC, stats_reply, run) == 0)
			c->watchdog_pending++;
	}
	if (c->watchdog_pending == 0)
		watchdog_scan(c);
	else /* a run freed meanwhile drops its reply: never wait forever */
		evtimer_add(watchdog_fallback, timeval_from_usec(&tv, 2500 * USEC_PER_MSEC));
}

/* RunLogPrunedFn: a pruned run's copy in the cluster goes too. */
static void
pruned(const char *run_id, const json_t *record, void *ud)
{
	replicate_pruned(ud, run_id, record);
}

static void
prune_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	size_t n = 0;
	int64_t cutoff = now_epoch_ms() - c->conf.retention_days * 86400000LL;

	int r = runlog_prune(c->runlog, cutoff, 16, 512, c->prune_cursor, &n, pruned, c);
	if (r < 0) {
		log_warning_errno(r, "Retention: pruning failed: %m; trying again later");
		c->prune_cursor[0] = '\0';
		return;
	}
	if (n) {
		c->m.runs_pruned += n;
		log_info("Retention: pruned %zu run(s) older than %" PRId64 " days", n,
			 c->conf.retention_days);
	}
	prune_running = c->prune_cursor[0] != '\0';
	if (prune_running) /* more to scan: next loop turn, after pending work */
		event_active(prune_work, 0, 0);
}

int
watchdog_tenant_usage(Coordinator *c)
{
	RunLogTenantUsage *u = NULL;
	size_t n = 0;
	int r = runlog_tenant_usage(c->runlog, &u, &n);
	if (r < 0)
		return r;
	free(c->tenant_usage);
	c->tenant_usage = u;
	c->n_tenant_usage = n;
	return 0;
}

/* Whose runs size retention deletes now (docs/SECURITY.md "Tenants"): with
 * data of more than one tenant, a tenant's share is tenant_log_share percent
 * of the mark; the largest tenant over its share that has a terminal run,
 * and none when the tenants over their share have none (their running
 * output fills the log up to chunk_high_water and is refused there: no
 * other tenant pays for it); with no tenant over its share (or one tenant),
 * the largest that has one. NULL: nothing to prune. */
static const char *
size_victim(Coordinator *c, uint64_t mark)
{
	size_t with_data = 0;
	for (size_t i = 0; i < c->n_tenant_usage; i++)
		with_data += c->tenant_usage[i].runs > 0;
	uint64_t share =
	    with_data > 1 ? mark / 100 * (uint64_t)c->conf.tenant_log_share : UINT64_MAX;
	bool over = false;
	for (size_t i = 0; i < c->n_tenant_usage; i++) { /* largest first */
		const RunLogTenantUsage *u = &c->tenant_usage[i];
		if (u->bytes <= share)
			continue;
		over = true;
		if (u->prunable)
			return u->tenant;
	}
	if (over)
		return NULL;
	for (size_t i = 0; i < c->n_tenant_usage; i++)
		if (c->tenant_usage[i].prunable)
			return c->tenant_usage[i].tenant;
	return NULL;
}

/* Size retention: while the log's live data is past
 * size_retention_high_water, delete the terminal runs that finished first
 * of the tenant size_victim() names, a few per transaction and one
 * transaction per loop turn. */
static void
prune_size_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	uint64_t used = 0, map = 0;
	size_t n = 0;

	if (c->conf.size_retention_high_water <= 0 || runlog_usage(c->runlog, &used, &map) < 0)
		return;
	c->log_used = used;
	uint64_t mark = map / 100 * (uint64_t)c->conf.size_retention_high_water;
	if (used <= mark)
		return;
	int r = watchdog_tenant_usage(c);
	if (r < 0) {
		log_warning_errno(r, "Retention: cannot count the log by tenant: %m; trying again "
				     "later");
		return;
	}
	const char *victim = size_victim(c, mark);
	if (!victim) {
		log_debug("Retention: run log at %" PRIu64 "%% of its map; the tenants over their "
			  "share have no terminal run to prune",
			  used * 100 / (map ? map : 1));
		return;
	}
	char who[TENANT_NAME_MAX + 1];
	snprintf(who, sizeof(who), "%s", victim);
	/* as much as brings the log under the mark, a few runs at most: the
	 * tenant's newest runs stay while its older ones suffice */
	r = runlog_prune_oldest_of(c->runlog, who, 8, used - mark, &n, pruned, c);
	if (r < 0) {
		log_warning_errno(r, "Retention: pruning by size failed: %m; trying again later");
		return;
	}
	if (n == 0) {
		log_debug("Retention: run log at %" PRIu64 "%% of its map, no terminal run left "
			  "to prune",
			  used * 100 / (map ? map : 1));
		return;
	}
	c->m.runs_pruned += n;
	c->m.runs_pruned_size += n;
	log_info("Retention: pruned the %zu oldest terminal run(s) of tenant %s: the run log was "
		 "at %" PRIu64 "%% of its map",
		 n, who, used * 100 / (map ? map : 1));
	event_active(prune_size_work, 0, 0);
}

void
watchdog_log_usage(Coordinator *c, uint64_t used)
{
	uint64_t map = c->log_map ? c->log_map : 1;
	uint64_t pct = used * 100 / map;

	c->log_used = used;
	if (!c->log_warned && pct >= (uint64_t)c->conf.map_warn_percent) {
		c->log_warned = true;
		log_warning("Run log at %" PRIu64 "%% of its map (%" PRIu64 " of %" PRIu64
			    " bytes); events of running runs stop at %" PRId64 "%%",
			    pct, used, c->log_map, c->conf.chunk_high_water);
	} else if (c->log_warned && pct + 5 < (uint64_t)c->conf.map_warn_percent) {
		c->log_warned = false; /* some hysteresis: one warning per crossing */
		log_notice("Run log back at %" PRIu64 "%% of its map", pct);
	}
	if (c->conf.size_retention_high_water > 0 && prune_size_work &&
	    used > c->log_map / 100 * (uint64_t)c->conf.size_retention_high_water)
		event_active(prune_size_work, 0, 0);
}

static void
retention_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	prune_size_cb(-1, 0, c);
	(void)watchdog_tenant_usage(c); /* /metrics by tenant */
	if (c->conf.retention_days > 0 && !prune_running) {
		c->prune_cursor[0] = '\0';
		prune_cb(-1, 0, c);
	}
}

void
watchdog_setup(Coordinator *c)
{
	struct timeval tv;

	if (c->conf.stall_timeout_ms > 0) {
		usec_t every = (usec_t)MIN(c->conf.stall_timeout_ms, 30000) * USEC_PER_MSEC;
		c->watchdog_ev = event_new(c->base, -1, EV_PERSIST, watchdog_cb, c);
		watchdog_fallback = evtimer_new(c->base, fallback_cb, c);
		if (c->watchdog_ev)
			event_add(c->watchdog_ev, timeval_from_usec(&tv, every));
		log_info(
		    "Stall watchdog: timeout %" PRId64 " ms, action %s, check every %" PRIu64 " ms",
		    c->conf.stall_timeout_ms, coord_conf_choices_stall_action[c->conf.stall_action],
		    (uint64_t)(every / USEC_PER_MSEC));
	} else
		log_info("Stall watchdog is off");
	c->retention_ev = event_new(c->base, -1, EV_PERSIST, retention_cb, c);
	prune_work = event_new(c->base, -1, 0, prune_cb, c);
	if (prune_work)
		event_priority_set(prune_work, 2); /* after appends */
	prune_size_work = event_new(c->base, -1, 0, prune_size_cb, c);
	if (prune_size_work)
		event_priority_set(prune_size_work, 2);
	if (c->retention_ev)
		event_add(
		    c->retention_ev,
		    timeval_from_usec(&tv, (usec_t)c->conf.retention_interval_ms * USEC_PER_MSEC));
}

void
watchdog_teardown(Coordinator *c)
{
	if (c->watchdog_ev)
		event_free(c->watchdog_ev);
	if (watchdog_fallback)
		event_free(watchdog_fallback);
	if (c->retention_ev)
		event_free(c->retention_ev);
	if (prune_work)
		event_free(prune_work);
	if (prune_size_work)
		event_free(prune_size_work);
	prune_size_work = NULL;
	c->watchdog_ev = c->retention_ev = watchdog_fallback = prune_work = NULL;
}
