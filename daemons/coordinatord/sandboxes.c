/* SPDX-License-Identifier: MIT */
/*
 * sandboxes.c — the sandbox API's lifecycle and capabilities (docs/SANDBOX-API.md):
 *
 *   SANDBOX_CTL {thread_id, action, keep_workspace?, image?}, routerd's
 *     PUT/GET/DELETE /sandboxes/{id} and POST /sandboxes/{id}/stop: "put" is
 *     passed to the shim as SANDBOX_FILE op create (it makes the workspace as a
 *     file write would), or with an image as SANDBOX_ENSURE with it (the
 *     sandbox starts on that image: docs/IMAGES.md); "get", "stop" and
 *     "delete" as SANDBOX_STATE; the shim's reply is the answer, as it is.
 *   CAPABILITIES_GET {}: the shim's SHIM_LIMITS (its file cap) with the exec
 *     limits added (sandbox_exec_limits below).
 *   WATCH_POLL {thread_id, path?, cursor?, wait_ms}: the shim's SANDBOX_WATCH
 *     long poll, relayed with a deadline 10 s past wait_ms.
 *
 * A sandbox id is a thread id, the key of SANDBOX_ENSURE: in cluster mode the
 * thread is claimed for (or forwarded to) its owner first, as files.c does.
 * Nothing here touches the run log: a run of a thread whose sandbox is
 * stopped or deleted loses its sandbox as on any destroy (its exec ends
 * killed, the run fails) — its record stays.
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "mp-cursor.h"

/* A stop or delete waits for the sandbox's init to be reaped, a delete for
 * the removal of the directory too. */
#define CTL_CALL_TIMEOUT (60 * USEC_PER_SEC)
#define LIMITS_CALL_TIMEOUT (10 * USEC_PER_SEC)

/* The contract's exec limits until [coordinatord] has keys for them (the exec
 * routes' work wires them here: the one place they are read). */
/* The sandbox API's exec limits ([coordinatord] max_execs_per_sandbox,
 * exec_stdin_max, exec_timeout_max_ms: sandbox-exec.c enforces them) and the
 * shell a `command` runs in, as GET /capabilities reports them. */
static void
sandbox_exec_limits(const Coordinator *c, Reply_CAPABILITIES_GET *rep)
{
	rep->exec_stdin_max_bytes = (uint64_t)c->conf.exec_stdin_max;
	rep->max_execs_per_sandbox = (uint64_t)c->conf.max_execs_per_sandbox;
	rep->exec_timeout_max_ms = (uint64_t)c->conf.exec_timeout_max_ms;
	rep->shell = c->conf.sandbox_shell;
}

static const PeerRelayOps ctl_relay = {
    .fallback = "sandbox operation failed",
    SHIM_RELAY_UNAVAILABLE,
};

static int dispatch_ctl_again(Peer *p, const Frame *f, void *userdata);

int
handle_sandbox_ctl(Peer *p, const Frame *f, const Msg_SANDBOX_CTL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *a = m->action;
	MpWriter w;
	int r, ret;

	if (!request_thread_id_ok(p, f, m->thread_id, REASON_BAD_REQUEST))
		return 0;
	if (!streq(a, "put") && !streq(a, "get") && !streq(a, "stop") && !streq(a, "delete")) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					"action must be put, get, stop or delete");
		return 0;
	}
	/* cluster mode: the thread's workspace is on its owner */
	if (placement_run_start(c, p, f, m->thread_id, dispatch_ctl_again, ud))
		return 0;
	/* put makes the thread's workspace: the thread becomes the tenant's
	 * (tenant.c, as a file write); stop and delete only by its owner; get is
	 * the token's scope's to allow */
	const char *tenant = m->tenant;
	if (!tenant_request_ok(p, f, &tenant))
		return 0;
	if (streq(a, "put") ? !tenant_admit(c, p, f, m->thread_id, tenant, false, &r)
			    : !streq(a, "get") && !tenant_check(c, p, f, m->thread_id, tenant, &r))
		return r;
	if (!request_reuse_ok(p, f, c,
			      "with reuse = none each run has its own workspace and a "
			      "thread has no sandbox of its own"))
		return 0;
	mp_writer_init(&w);
	if (streq(a, "put") && m->image)
		msg_encode_SANDBOX_ENSURE(&w, &(Msg_SANDBOX_ENSURE){.key = m->thread_id,
								    .thread_id = m->thread_id,
								    .tenant = tenant,
								    .image = m->image});
	else if (streq(a, "put"))
		msg_encode_SANDBOX_FILE(
		    &w, &(Msg_SANDBOX_FILE){
			    .key = m->thread_id, .op = "create", .path = "", .path_len = 0});
	else
		msg_encode_SANDBOX_STATE(
		    &w, &(Msg_SANDBOX_STATE){.key = m->thread_id,
					     .action = a,
					     .keep_workspace = m->keep_workspace,
					     .has_keep_workspace = m->has_keep_workspace});
	ret =
	    request_shim_relay(p, f, c, REASON_SHIM_UNAVAILABLE,
			       streq(a, "put") ? (m->image ? MSG_SANDBOX_ENSURE : MSG_SANDBOX_FILE)
					       : MSG_SANDBOX_STATE,
			       &w, CTL_CALL_TIMEOUT, &ctl_relay, &r);
	mp_writer_done(&w);
	if (r >= 0 && !streq(a, "get")) {
		LogCtx lc = {.thread_id = m->thread_id};
		log_ctx(LOG_INFO, &lc, "Sandbox %s requested", a);
	}
	return ret;
}

MSG_HANDLER(dispatch_ctl_again, SANDBOX_CTL, handle_sandbox_ctl)

/* The shim's {file_api_max_bytes} and our exec limits. */
static void
limits_reply(PeerDeferred *d, const msgpack_object *body)
{
	Peer *asker = peer_deferred_peer(d);
	Client *cl = asker ? peer_get_userdata(asker) : NULL;
	Reply_SHIM_LIMITS sl;
	Reply_CAPABILITIES_GET rep = {0};

	if (!cl) { /* the asker is gone: nothing to answer */
		peer_deferred_free(d);
		return;
	}
	if (reply_decode_SHIM_LIMITS(body, &sl) < 0) {
		peer_deferred_error(d, -EIO, NULL, "bad reply from containerd-shim");
		return;
	}
	rep.file_api_max_bytes = sl.file_api_max_bytes;
	reply_done_SHIM_LIMITS(&sl);
	sandbox_exec_limits(cl->c, &rep);
	/* a sandbox's own egress can be set (egress.c) */
	rep.network_policy =
	    cl->c->conf.sandbox_egress_allow && cl->c->conf.sandbox_egress_allow[0];
	rep.has_network_policy = true;
	(void)reply_deferred_CAPABILITIES_GET(d, &rep);
}

static const PeerRelayOps limits_relay = {
    .reply = limits_reply,
    .fallback = "capabilities failed",
    SHIM_RELAY_UNAVAILABLE,
};

int
handle_capabilities_get(Peer *p, const Frame *f, const Msg_CAPABILITIES_GET *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpWriter w;
	int r;

	(void)m;
	mp_writer_init(&w);
	msg_encode_SHIM_LIMITS(&w, &(Msg_SHIM_LIMITS){});
	r = request_shim_relay(p, f, c, REASON_SHIM_UNAVAILABLE, MSG_SHIM_LIMITS, &w,
			       LIMITS_CALL_TIMEOUT, &limits_relay, NULL);
	mp_writer_done(&w);
	return r;
}

static const PeerRelayOps watch_relay = {
    .fallback = "watch failed",
    SHIM_RELAY_UNAVAILABLE,
};

static int dispatch_watch_again(Peer *p, const Frame *f, void *userdata);

/* WATCH_POLL: the shim's SANDBOX_WATCH, its long poll waited for a little
 * longer than its wait_ms. */
int
handle_watch_poll(Peer *p, const Frame *f, const Msg_WATCH_POLL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpWriter w;
	int r;

	if (!request_thread_id_ok(p, f, m->thread_id, REASON_BAD_REQUEST))
		return 0;
	if (m->wait_ms > 60000) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					"wait_ms must be at most 60000");
		return 0;
	}
	if (placement_run_start(c, p, f, m->thread_id, dispatch_watch_again, ud))
		return 0;
	if (!request_reuse_ok(p, f, c, "with reuse = none a thread has no workspace to watch"))
		return 0;
	mp_writer_init(&w);
	msg_encode_SANDBOX_WATCH(&w, &(Msg_SANDBOX_WATCH){.key = m->thread_id,
							  .path = m->path,
							  .path_len = m->path_len,
							  .has_path = m->has_path,
							  .cursor = m->cursor,
							  .has_cursor = m->has_cursor,
							  .wait_ms = m->wait_ms});
	r = request_shim_relay(p, f, c, REASON_SHIM_UNAVAILABLE, MSG_SANDBOX_WATCH, &w,
			       m->wait_ms * USEC_PER_MSEC + 10 * USEC_PER_SEC, &watch_relay, NULL);
	mp_writer_done(&w);
	return r;
}

MSG_HANDLER(dispatch_watch_again, WATCH_POLL, handle_watch_poll)
