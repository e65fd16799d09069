/* SPDX-License-Identifier: MIT */
/*
 * driver-link.c — the connection to containerd-shim, and re-attaching.
 *
 * One Peer to the shim, reconnected with a backoff. When it drops, runs
 * attached to an exec wait in RUN_SHIM_LOST (at most sandbox_wait_ms) for a
 * shim that re-adopted its sandboxes; a restarted coordinatord finds its runs
 * by their driver state in the log (driver_recover) and waits in
 * RUN_REATTACH. Either way EXEC_ATTACH resumes at the offsets consumed.
 */
#include "config.h"

#include "driver.h"

#include "adapter.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "peer-link.h"

#include "driver-int.h"

#define SHIM_BACKOFF_MIN (100 * USEC_PER_MSEC)
#define SHIM_BACKOFF_MAX (2 * USEC_PER_SEC)
/* a shim that accepts and says nothing (hung, or a stranger on the path) */
#define SHIM_HELLO_TIMEOUT (10 * USEC_PER_SEC)

/* ---------- re-attach after a restart ---------- */

/* The run's forward and proxy listeners died with the shim; the harness's
 * environment names their ports, so they come back on exactly those ports or
 * not at all (fail closed: the run goes on without). Known only while this
 * coordinatord stayed up (bridge_port/proxy_port are memory only). */
static void
relisten_reply(Run *run, int err, bool proxy)
{
	uint64_t port = proxy ? run->proxy_port : run->bridge_port;
	const char *what = proxy ? "egress proxy" : "bridge forward";

	if (err == 0)
		log_ctx(LOG_INFO, &run->log, "Re-opened the %s on sandbox port %" PRIu64, what,
			port);
	else
		log_ctx_errno(LOG_WARNING, err, &run->log,
			      "Cannot re-open the %s on sandbox port %" PRIu64
			      " after the containerd-shim restart, continuing without: %m",
			      what, port);
}

static void
relisten_fwd_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	relisten_reply(ud, err, false);
}

static void
relisten_proxy_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	relisten_reply(ud, err, true);
}

static void
relisten(Run *run)
{
	if (run->bridge_port && listen_call(run, false, run->bridge_port, relisten_fwd_reply) < 0)
		relisten_reply(run, -ECONNRESET, false);
	if (run->proxy_port && run->harness && run->harness->egress &&
	    listen_call(run, true, run->proxy_port, relisten_proxy_reply) < 0)
		relisten_reply(run, -ECONNRESET, true);
}

static void
exec_attached(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	if (err == -ECONNRESET && !run->c->stopping && run->wait_timer &&
	    evtimer_pending(run->wait_timer, NULL)) {
		/* the shim went away again: wait for the next one (still bounded) */
		run->state = RUN_SHIM_LOST;
		return;
	}
	if (err < 0) {
		log_ctx_errno(LOG_WARNING, err, &run->log,
			      "Cannot re-attach to exec %" PRIu64 ": %m", run->exec_id);
		run_fail(run,
			 run->state == RUN_SHIM_LOST
			     ? "the run's sandbox process is gone (containerd-shim restarted)"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 RUN_ERR_SANDBOX_LOST);
		return;
	}
	log_ctx(LOG_NOTICE, &run->log,
		"Re-attached to exec %" PRIu64 " at offsets %" PRIu64 "/%" PRIu64, run->exec_id,
		run->out[1].taken, run->out[2].taken);
	if (run->wait_timer)
		event_del(run->wait_timer);
	bool shim_lost = run->state == RUN_SHIM_LOST;
	run->state = RUN_EXECUTING;
	if (shim_lost)
		relisten(run);
}

static void
reattach(Run *run)
{
	Msg_EXEC_ATTACH m = {.exec_id = run->exec_id,
			     .stdout_offset = run->out[1].taken,
			     .stderr_offset = run->out[2].taken};
	int r = msg_call_EXEC_ATTACH(run->c->shim, &m, SHIM_CALL_TIMEOUT, exec_attached, run);
	if (r < 0)
		run_fail(run,
			 run->state == RUN_SHIM_LOST
			     ? "the run's sandbox process is gone (containerd-shim restarted)"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 RUN_ERR_SANDBOX_LOST);
}

/* What the adapter had made of the output consumed (a driver state written
 * before adapters saved theirs has none: they start afresh, as they did). */
static int
restore_adapter(Run *run, const json_t *drive)
{
	const json_t *state = json_object_get(drive, "adapter");
	const char *kind = json_string_value(json_object_get(drive, "adapterKind"));
	const char *tail = json_string_value(json_object_get(drive, "stderrTail"));
	int r = 0;

	run->id_counter = (unsigned)json_integer_value(json_object_get(drive, "ids"));
	if (tail) {
		size_t len = MIN(strlen(tail), sizeof(run->stderr_tail) - 1);
		memcpy(run->stderr_tail, tail + strlen(tail) - len, len);
		run->stderr_tail[len] = '\0';
		run->stderr_len = len;
	}
	if (state && (!kind || !streq(kind, adapter_name(run->adapter->kind)))) {
		run_fail(run, "the run's harness changed its adapter across the restart",
			 RUN_ERR_HARNESS_ERROR);
		return -EINVAL;
	}
	if (state && run->adapter->load)
		r = run->adapter->load(run, state);
	if (r < 0) {
		log_ctx_errno(LOG_ERR, r, &run->log, "Cannot restore the adapter's state: %m");
		run_fail(run, "coordinatord could not restore the run's adapter state",
			 RUN_ERR_INTERNAL);
	}
	return r;
}

typedef struct RecoverCtx {
	Coordinator *c;
	size_t n;
} RecoverCtx;

static void
recover_cb(const char *run_id, json_t *record, void *ud)
{
	RecoverCtx *rc = ud;
	Coordinator *c = rc->c;
	json_t *drive = NULL;

	if (runlog_drive_get(c->runlog, run_id, &drive) < 0)
		return; /* not driven by us (a direct-log client's run): it goes on */
	const char *thread = json_string_value(json_object_get(record, "threadId"));
	Run *run = run_new(c, run_id, thread ? thread : "");
	if (!run) {
		json_decref(drive);
		return;
	}
	const char *tenant = json_string_value(json_object_get(record, "tenant"));
	if (tenant_name_valid(tenant))
		snprintf(run->tenant, sizeof(run->tenant), "%s", tenant);
	rc->n++;
	/* what the stored stream has open, so it ends valid (agui-guard.c) */
	if (agui_guard_rebuild(run) < 0)
		log_ctx(LOG_WARNING, &run->log, "Cannot read the run's events back");
	const char *hname = json_string_value(json_object_get(drive, "harness"));
	run->harness = harness_find(c->harnesses, hname ? hname : "shell");
	run->adapter = run->harness ? adapter_get(run->harness->adapter) : NULL;
	if (!run->adapter || (run->adapter->init && run->adapter->init(run) < 0)) {
		run_fail(run, "the run's harness is no longer configured", RUN_ERR_HARNESS_ERROR);
		json_decref(drive);
		return;
	}
	collect_secrets(run);
	if (restore_adapter(run, drive) < 0) {
		json_decref(drive);
		return;
	}
	json_int_t exec_id = json_integer_value(json_object_get(drive, "execId"));
	const char *sb = json_string_value(json_object_get(drive, "sandboxId"));
	const char *tc = json_string_value(json_object_get(drive, "toolCallId"));
	json_t *consumed = json_object_get(drive, "consumed");
	if (tc)
		snprintf(run->tool_call_id, sizeof(run->tool_call_id), "%s", tc);
	if (sb && *sb) {
		run->sandbox_id = strdup(sb);
		run->log.sandbox_id = run->sandbox_id;
	}
	if (exec_id <= 0 || !run->sandbox_id) {
		/* it never got as far as a running process we could find again */
		run_fail(run, "coordinatord restarted before the run's process started",
			 RUN_ERR_SANDBOX_LOST);
		json_decref(drive);
		return;
	}
	run->exec_id = (uint64_t)exec_id;
	for (int s = 1; s <= 2; s++)
		run->out[s].taken = run->out[s].added = run->saved_taken[s] =
		    (uint64_t)json_integer_value(json_array_get(consumed, (size_t)s - 1));
	run->state = RUN_REATTACH;
	{
		json_int_t started = json_integer_value(json_object_get(record, "startedAt"));
		run_max_arm(run, started > 0 ? (int64_t)started : now_epoch_ms());
	}
	/* re-attaching waits for the shim at most sandbox_wait_ms (the watchdog spares it) */
	struct timeval tv;
	run->wait_timer = evtimer_new(c->base, run_wait_timeout, run);
	if (run->wait_timer)
		evtimer_add(
		    run->wait_timer,
		    timeval_from_usec(&tv, (usec_t)c->conf.sandbox_wait_ms * USEC_PER_MSEC));
	json_decref(drive);
}

void
driver_recover(Coordinator *c)
{
	RecoverCtx rc = {.c = c};
	int r = runlog_foreach_running(c->runlog, recover_cb, &rc);
	if (r < 0)
		log_error_errno(r, "Failed to scan the run log for active runs: %m");
	if (rc.n)
		log_notice("%zu run(s) were active when coordinatord stopped; re-attaching", rc.n);
}

/* ---------- shim link ---------- */

/* c->shim is the link's Peer from its HELLO to its loss (NULL otherwise): a
 * request is only ever sent to a shim that said HELLO. */
static void
shim_ready(Peer *p, void *ud)
{
	Coordinator *c = ud;

	peer_link_ready(c->shim_link);
	c->shim = p;
	log_info("Connected to containerd-shim (pid %d)", (int)peer_remote_pid(p));
	sbx_exec_shim_ready(c);
	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->state == RUN_WAIT_SHIM)
			run_drive(run);
		else if (run_reattaching(run))
			reattach(run);
	}
}

static void
shim_closed(Peer *p, int err, void *ud)
{
	Coordinator *c = ud;
	struct timeval tv;

	if (!c->stopping && c->shim)
		log_warning_errno(err, "Lost the connection to containerd-shim: %m");
	/* Pending ENSURE/START calls already failed with -ECONNRESET (their runs
	 * failed). Executing runs wait sandbox_wait_ms for a shim to re-attach to
	 * (it re-adopts its sandboxes after a crash, docs/DESIGN.md); a post step's
	 * exec is not re-attached. */
	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->state == RUN_EXECUTING && !run->in_post_step && !c->stopping &&
		    run->wait_timer) {
			run->state = RUN_SHIM_LOST;
			evtimer_add(run->wait_timer,
				    timeval_from_usec(&tv, (usec_t)c->conf.sandbox_wait_ms *
							       USEC_PER_MSEC));
			log_ctx(LOG_NOTICE, &run->log,
				"Waiting for containerd-shim to re-attach to exec %" PRIu64,
				run->exec_id);
		} else if (run->state == RUN_EXECUTING) {
			run_flush_output(run, true);
			run_fail(run, "sandbox: containerd-shim connection lost",
				 RUN_ERR_SANDBOX_LOST);
		} else if (run_cancelling(run) && !c->stopping) {
			cancel_finish(run);
		}
	}
	sbx_exec_shim_lost(c);
	c->shim = NULL;
	peer_link_lost(c->shim_link, !c->stopping);
}

static const PeerOps shim_ops = {
    .local_role = ROLE_COORD,
    .handlers = driver_shim_pushes,
    .on_ready = shim_ready,
    .on_close = shim_closed,
};

/* What the link met on its way (peer-link.h), in coordinatord's words. */
static void
shim_link_event(PeerLinkEvent what, int err, void *ud)
{
	Coordinator *c = ud;

	switch (what) {
	case PEER_LINK_CONNECT_FAILED:
		log_debug_errno(err, "containerd-shim not reachable at '%s' yet: %m", c->shim_path);
		break;
	case PEER_LINK_SETUP_FAILED:
		log_warning_errno(err, "Failed to set up the containerd-shim connection: %m");
		break;
	case PEER_LINK_NO_HELLO:
		log_warning("containerd-shim at '%s' accepted but said no HELLO in %d s, "
			    "reconnecting",
			    c->shim_path, (int)(SHIM_HELLO_TIMEOUT / USEC_PER_SEC));
		break;
	}
}

int
shim_connect_now(Coordinator *c)
{
	snprintf(c->shim_path, sizeof(c->shim_path), "%s/%s", c->conf.shared.runtime_dir,
		 RW_SOCK_SHIM);
	int r = peer_link_new(c->base,
			      &(PeerLinkConf){.path = c->shim_path,
					      .ops = &shim_ops,
					      .max_frame = (size_t)c->conf.shared.max_frame,
					      .hello_timeout = SHIM_HELLO_TIMEOUT,
					      .backoff_min = SHIM_BACKOFF_MIN,
					      .backoff_max = SHIM_BACKOFF_MAX,
					      .event = shim_link_event,
					      .userdata = c},
			      &c->shim_link);
	if (r < 0)
		return log_error_errno(r, "Out of memory");
	return 0;
}

void
driver_setup(Coordinator *c)
{
	c->flush_ev = event_new(c->base, -1, 0, driver_flush_cb, c);
}
