/* SPDX-License-Identifier: MIT */
/*
 * metrics.c — coordinatord's counters and the Prometheus text STATUS_GET
 * returns (routerd serves it as /metrics). The counters live in
 * Coordinator.m; the files that count increment them in place.
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <event2/event.h>

#include "macro.h"
#include "msg.h"
#include "strv.h"

#define SHIM_MEMORY_EVERY_USEC (2 * USEC_PER_SEC)

static struct event *shim_memory_ev; /* one coordinator per process */
static bool shim_memory_pending;
/* The shim's SHIM_IMAGES, "NAME DISK_BYTES" each (docs/IMAGES.md), read with the
 * memory; NULL while the shim is away. */
static char **shim_images;
static bool shim_images_pending;

static void
shim_images_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Reply_SHIM_IMAGES rep = {};

	(void)p;
	(void)ud;
	shim_images_pending = false;
	if (err == 0 && reply_decode_SHIM_IMAGES(body, &rep) == 0) {
		char **v = NULL;
		bool ok = true;
		for (char *const *l = rep.images; ok && l && *l; l++)
			ok = strv_push(&v, *l) >= 0;
		if (!ok)
			v = (strv_free(v), NULL);
		strv_free(shim_images);
		shim_images = v;
	}
	reply_done_SHIM_IMAGES(&rep);
}

static void
shim_memory_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Coordinator *c = ud;
	Reply_SHIM_MEMORY rep = {};

	shim_memory_pending = false;
	if (err == 0 && reply_decode_SHIM_MEMORY(body, &rep) == 0) {
		c->m.sandbox_mem[0] = rep.idle_bytes;
		c->m.sandbox_mem[1] = rep.busy_bytes;
		c->m.sandbox_count[0] = rep.idle;
		c->m.sandbox_count[1] = rep.busy;
		c->m.sandbox_mem_known = true;
	}
	reply_done_SHIM_MEMORY(&rep);
}

static void
shim_memory_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;

	if (!c->shim || !peer_is_ready(c->shim)) {
		c->m.sandbox_mem_known = false; /* no stale figures while it is away */
		strv_free(shim_images);
		shim_images = NULL;
		return;
	}
	if (!shim_images_pending &&
	    msg_call_SHIM_IMAGES(c->shim, &(Msg_SHIM_IMAGES){}, SHIM_MEMORY_EVERY_USEC,
				 shim_images_reply, c) == 0)
		shim_images_pending = true;
	if (shim_memory_pending)
		return;
	if (msg_call_SHIM_MEMORY(c->shim, &(Msg_SHIM_MEMORY){}, SHIM_MEMORY_EVERY_USEC,
				 shim_memory_reply, c) == 0)
		shim_memory_pending = true;
}

void
metrics_setup(Coordinator *c)
{
	struct timeval tv;

	shim_memory_ev = event_new(c->base, -1, EV_PERSIST, shim_memory_cb, c);
	if (shim_memory_ev) {
		event_priority_set(shim_memory_ev, 2); /* background */
		event_add(shim_memory_ev, timeval_from_usec(&tv, SHIM_MEMORY_EVERY_USEC));
	}
}

void
metrics_teardown(Coordinator *c)
{
	if (shim_memory_ev)
		event_free(shim_memory_ev);
	shim_memory_ev = NULL;
	shim_memory_pending = false;
	strv_free(shim_images);
	shim_images = NULL;
	shim_images_pending = false;
}

int
metrics_text(Coordinator *c, char **ret_text, size_t *ret_active)
{
	const Metrics *m = &c->m;
	size_t active = 0, queued = 0, busy = 0;
	char *text = NULL;
	size_t tlen = 0;
	FILE *mf;

	for (Run *run = c->runs; run; run = run->next) {
		active++;
		if (run->queued || run->state == RUN_WAIT_SHIM)
			queued++;
		else if (run->state == RUN_STARTING || run->state == RUN_EXECUTING ||
			 run_reattaching(run) || run_cancelling(run))
			busy++;
	}
	mf = open_memstream(&text, &tlen);
	if (!mf)
		return -ENOMEM;
	static const double le[7] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1};
	fprintf(mf,
		"# HELP runwarden_runs_started_total Runs registered by POST /runs.\n"
		"# TYPE runwarden_runs_started_total counter\n"
		"runwarden_runs_started_total %" PRIu64 "\n"
		"# HELP runwarden_runs_finished_total Runs that reached a terminal status.\n"
		"# TYPE runwarden_runs_finished_total counter\n"
		"runwarden_runs_finished_total{status=\"completed\"} %" PRIu64 "\n"
		"runwarden_runs_finished_total{status=\"failed\"} %" PRIu64 "\n"
		"runwarden_runs_finished_total{status=\"aborted\"} %" PRIu64 "\n"
		"# HELP runwarden_runs_active Runs driven by coordinatord right now.\n"
		"# TYPE runwarden_runs_active gauge\n"
		"runwarden_runs_active %zu\n"
		"# HELP runwarden_sandboxes_queued Runs waiting for containerd-shim or a sandbox "
		"slot.\n"
		"# TYPE runwarden_sandboxes_queued gauge\n"
		"runwarden_sandboxes_queued %zu\n"
		"# HELP runwarden_sandboxes_busy Sandboxes running a run's exec right now.\n"
		"# TYPE runwarden_sandboxes_busy gauge\n"
		"runwarden_sandboxes_busy %zu\n"
		"# HELP runwarden_events_appended_total Events committed to the run log.\n"
		"# TYPE runwarden_events_appended_total counter\n"
		"runwarden_events_appended_total %" PRIu64 "\n"
		"# HELP runwarden_commit_failures_total Run log transactions that failed.\n"
		"# TYPE runwarden_commit_failures_total counter\n"
		"runwarden_commit_failures_total %" PRIu64 "\n"
		"# HELP runwarden_watchdog_kills_total Runs failed by the stall watchdog.\n"
		"# TYPE runwarden_watchdog_kills_total counter\n"
		"runwarden_watchdog_kills_total %" PRIu64 "\n"
		"# HELP runwarden_tool_calls_refused_total Host tool calls refused with 429 "
		"(max_tool_calls_per_run, max_tool_calls).\n"
		"# TYPE runwarden_tool_calls_refused_total counter\n"
		"runwarden_tool_calls_refused_total %" PRIu64 "\n"
		"# HELP runwarden_runs_pruned_total Runs deleted by retention.\n"
		"# TYPE runwarden_runs_pruned_total counter\n"
		"runwarden_runs_pruned_total %" PRIu64 "\n"
		"# HELP runwarden_commit_seconds Run log group-commit latency (write + fsync).\n"
		"# TYPE runwarden_commit_seconds histogram\n",
		m->runs_started, m->runs_finished[0], m->runs_finished[1], m->runs_finished[2],
		active, queued, busy, m->events_appended, m->commit_failures, m->watchdog_kills,
		m->tool_calls_refused, m->runs_pruned);
	uint64_t cum = 0;
	for (int i = 0; i < 7; i++) {
		cum += m->commit_buckets[i];
		fprintf(mf, "runwarden_commit_seconds_bucket{le=\"%g\"} %" PRIu64 "\n", le[i], cum);
	}
	cum += m->commit_buckets[7];
	fprintf(mf,
		"runwarden_commit_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n"
		"runwarden_commit_seconds_sum %.6f\n"
		"runwarden_commit_seconds_count %" PRIu64 "\n",
		cum, (double)m->commit_usec_sum / 1e6, m->commits);
	fprintf(mf,
		"# HELP runwarden_runlog_used_bytes Live data in the run log (LMDB pages in use).\n"
		"# TYPE runwarden_runlog_used_bytes gauge\n"
		"runwarden_runlog_used_bytes %" PRIu64 "\n"
		"# HELP runwarden_runlog_map_bytes Size of the run log's map (map_size).\n"
		"# TYPE runwarden_runlog_map_bytes gauge\n"
		"runwarden_runlog_map_bytes %" PRIu64 "\n"
		"# HELP runwarden_runlog_over_warn 1 while the run log is past map_warn_percent.\n"
		"# TYPE runwarden_runlog_over_warn gauge\n"
		"runwarden_runlog_over_warn %d\n"
		"# HELP runwarden_output_dropped_bytes_total Output bytes dropped over a budget.\n"
		"# TYPE runwarden_output_dropped_bytes_total counter\n"
		"runwarden_output_dropped_bytes_total %" PRIu64 "\n"
		"# HELP runwarden_runs_output_limited_total Runs that went over an output budget.\n"
		"# TYPE runwarden_runs_output_limited_total counter\n"
		"runwarden_runs_output_limited_total %" PRIu64 "\n"
		"# HELP runwarden_events_refused_full_total Events refused past chunk_high_water.\n"
		"# TYPE runwarden_events_refused_full_total counter\n"
		"runwarden_events_refused_full_total %" PRIu64 "\n"
		"# HELP runwarden_runs_pruned_size_total Runs deleted by size retention.\n"
		"# TYPE runwarden_runs_pruned_size_total counter\n"
		"runwarden_runs_pruned_size_total %" PRIu64 "\n",
		c->log_used, c->log_map, c->log_warned ? 1 : 0, m->output_dropped_bytes,
		m->runs_output_limited, m->events_refused_full, m->runs_pruned_size);
	if (m->sandbox_mem_known)
		fprintf(
		    mf,
		    "# HELP runwarden_sandbox_memory_bytes Memory charged to the sandboxes' "
		    "cgroups (memory.current, v1 memory.usage_in_bytes), by state: busy = an exec "
		    "runs or is about to, idle = the rest, the pool included (containerd-shim, "
		    "read every 2 s).\n"
		    "# TYPE runwarden_sandbox_memory_bytes gauge\n"
		    "runwarden_sandbox_memory_bytes{state=\"idle\"} %" PRIu64 "\n"
		    "runwarden_sandbox_memory_bytes{state=\"busy\"} %" PRIu64 "\n"
		    "# HELP runwarden_sandboxes Live sandboxes of containerd-shim by state (as "
		    "above).\n"
		    "# TYPE runwarden_sandboxes gauge\n"
		    "runwarden_sandboxes{state=\"idle\"} %" PRIu64 "\n"
		    "runwarden_sandboxes{state=\"busy\"} %" PRIu64 "\n",
		    m->sandbox_mem[0], m->sandbox_mem[1], m->sandbox_count[0], m->sandbox_count[1]);
	if (shim_images) {
		fprintf(mf, "# HELP runwarden_image_bytes Disk use of each sandbox image, "
			    "unpacked once on the shim's host and shared by its sandboxes "
			    "(docs/IMAGES.md).\n"
			    "# TYPE runwarden_image_bytes gauge\n");
		for (char **l = shim_images; *l; l++) {
			const char *sp = strchr(*l, ' ');
			if (sp) /* names are [a-z0-9._-]: nothing to escape in a label */
				fprintf(mf, "runwarden_image_bytes{image=\"%.*s\"} %s\n",
					(int)(sp - *l), *l, sp + 1);
		}
	}
	bridge_metrics(c, mf);
	cluster_metrics(c, mf);
	tenant_metrics(c, mf);
	/* last: routerd adds its samples of these families after ours */
	loop_lag_format(c->loop_lag, "coordinatord", mf);
	fclose(mf);
	*ret_text = text;
	*ret_active = active;
	return 0;
}
