/* SPDX-License-Identifier: MIT */
/*
 * driver.c — drives runs through containerd-shim, whatever their harness.
 *
 * A Run walks the states of RunState (coordinatord.h): WAIT_SHIM → ENSURING →
 * [FORWARDING → PROXYING] → STARTING → EXECUTING → DONE. This file takes it
 * as far as its exec (the sandbox, the bridge's forward, the egress proxy,
 * the harness's exec as its adapter describes it), and ends it early:
 * max_run_ms and cancels. What the exec says and its end are driver-output.c,
 * the shim connection and re-attaching driver-link.c (driver-int.h).
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

#include "driver-int.h"

static void start_main(Run *run);
static void prep_next(Run *run);
static void run_stop(Run *run);

/* ---------- the harness's exec ---------- */

static void
drive_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	Run *run = arg;

	if (run->state != RUN_DONE && run->exec_id && !run->exec_saved)
		run_save_drive(run, drive_state(run));
}

/* The exec's id must reach the log for a restarted coordinatord to re-attach
 * to it, but nobody waits for it: the run's next commit (its first output, or
 * its end) carries it, and a commit of its own only when none came within
 * DRIVE_SAVE_DELAY_MS (a `true` run is one commit fewer: issue 16's E2E).
 * A crash before it is stored is a crash before STARTED was answered — the
 * restart fails the run, sandbox_lost (driver-link.c recover_cb) — a window
 * that existed already and is a few milliseconds longer. */
static void
drive_save_soon(Run *run)
{
	struct timeval tv;

	run->exec_saved = false;
	if (!run->drive_timer)
		run->drive_timer = evtimer_new(run->c->base, drive_timer_cb, run);
	if (!run->drive_timer) {
		run_save_drive(run, drive_state(run)); /* out of memory: at once */
		return;
	}
	evtimer_add(run->drive_timer,
		    timeval_from_usec(&tv, (usec_t)DRIVE_SAVE_DELAY_MS * USEC_PER_MSEC));
}

static void
exec_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_EXEC_START rep = {};
	int k = err < 0 ? err : reply_decode_EXEC_START(body, &rep);
	MpReader r;
	const char *msg = NULL;

	reply_done_EXEC_START(&rep); /* nothing borrowed: exec_id is a number */
	if (run_cancelling(run)) {
		cancel_on_start(run, k, rep.exec_id);
		return;
	}
	if (err < 0) {
		char m[512];
		mp_reader_init(&r, body);
		mp_read_str_opt(&r, "message", &msg, NULL);
		snprintf(m, sizeof(m), "sandbox: could not start the command: %s",
			 msg ? msg : strerror(-err));
		mp_reader_done(&r);
		run_fail(run, m, err == -ECONNRESET ? RUN_ERR_SANDBOX_LOST : RUN_ERR_SANDBOX_ERROR);
		return;
	}
	if (k < 0) {
		run_fail(run, "sandbox: malformed EXEC_START reply", RUN_ERR_SANDBOX_ERROR);
		return;
	}
	run->exec_id = rep.exec_id;
	run->state = RUN_EXECUTING;
	drive_save_soon(run);
}

/* The end of a run's exec ends what it left running (`cmd &`, nohup, setsid:
 * its exec cgroup is killed), unless the harness keeps them (keep_processes).
 * A sandbox with no exec running can always be stopped for a queued request,
 * so what is kept never holds a slot. */
bool
run_kills_leftovers(const Run *run)
{
	return !run->harness || !run->harness->keep_processes;
}

static void
exec_start(Run *run, ExecSpec *spec)
{
	Coordinator *c = run->c;
	int64_t timeout = run->harness ? run->harness->timeout_ms : 0;
	Msg_EXEC_START m = {
	    .sandbox_id = run->sandbox_id,
	    .argv = spec->argv,
	    .env = spec->env,
	    .cwd = "/workspace",
	    .run_id = run->run_id,
	    .stdin = spec->stdin_data,
	    .stdin_len = spec->stdin_len,
	    .has_stdin = spec->stdin_data != NULL,
	    .timeout_ms = timeout,
	    .has_timeout_ms = timeout > 0,
	    .kill_leftovers = true,
	    .has_kill_leftovers = run_kills_leftovers(run),
	};

	int r = msg_call_EXEC_START(c->shim, &m, SHIM_CALL_TIMEOUT, exec_started, run);
	if (r < 0) {
		run_fail(run, "sandbox: containerd-shim connection lost", RUN_ERR_SANDBOX_LOST);
		return;
	}
	run->state = RUN_STARTING;
}

static void
sandbox_ensured(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_SANDBOX_ENSURE rep;
	MpReader r;
	const char *msg = NULL;
	bool created;

	run->queued = false;
	if (err < 0) {
		char m[512];
		mp_reader_init(&r, body);
		mp_read_str_opt(&r, "message", &msg, NULL);
		snprintf(m, sizeof(m), "sandbox: %s", msg ? msg : strerror(-err));
		mp_reader_done(&r);
		run_fail(run, m,
			 err == -ECONNRESET  ? RUN_ERR_SANDBOX_LOST
			 : err == -ETIMEDOUT ? RUN_ERR_QUEUE_TIMEOUT
					     : RUN_ERR_SANDBOX_ERROR);
		return;
	}
	if (reply_decode_SANDBOX_ENSURE(body, &rep) < 0 ||
	    !(run->sandbox_id = strdup(rep.sandbox_id))) {
		reply_done_SANDBOX_ENSURE(&rep);
		run_fail(run, "sandbox: malformed SANDBOX_ENSURE reply", RUN_ERR_SANDBOX_ERROR);
		return;
	}
	created = rep.created;
	reply_done_SANDBOX_ENSURE(&rep);
	run->log.sandbox_id = run->sandbox_id;
	log_ctx_msgid(LOG_INFO, &run->log, created ? RW_MESSAGE_SANDBOX_CREATED : NULL,
		      "Sandbox %s", created ? "created" : "resumed");

	json_t *chunk = json_pack("{s:s, s:s, s:{s:s, s:s}}", "type", "CUSTOM", "name",
				  created ? "sandbox.created" : "sandbox.resumed", "value",
				  "sandboxId", run->sandbox_id, "provider", "runwarden");
	/* the record learns its sandbox with this event */
	run_emit_fields(run, chunk, drive_state(run),
			json_pack("{s:s}", "sandboxId", run->sandbox_id));
	prep_next(run);
}

/* ---------- before the harness starts: forward, proxy, bridge file ---------- */

static void
prep_reply(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_SANDBOX_FORWARD rep = {}; /* SANDBOX_PROXY's reply is the same {port} */
	int k = err < 0 ? err : reply_decode_SANDBOX_FORWARD(body, &rep);
	uint64_t port = rep.port;
	bool forward = run->state == RUN_FORWARDING; /* else RUN_PROXYING */

	reply_done_SANDBOX_FORWARD(&rep);
	if (err == 0 && k == 0 && port > 0 && port < 65536) {
		if (forward)
			run->bridge_port = port;
		else
			run->proxy_port = port;
	} else if (err == -ENOMSG) {
		/* a shim without it: the harness just has no way out (fail closed) */
		log_ctx(LOG_WARNING, &run->log, "containerd-shim cannot %s, continuing without",
			forward ? "forward the bridge" : "proxy egress");
		if (forward)
			bridge_close(run); /* no way to reach it: no token handed out */
	} else {
		char m[160];
		snprintf(m, sizeof(m), "sandbox: could not set up the %s",
			 forward ? "bridge forward" : "egress proxy");
		run_fail(run, m, err == -ECONNRESET ? RUN_ERR_SANDBOX_LOST : RUN_ERR_SANDBOX_ERROR);
		return;
	}
	prep_next(run);
}

/* port: 0 for a new listener (the shim picks one), else exactly that port. */
int
listen_call(Run *run, bool proxy, uint64_t port, PeerReplyFn cb)
{
	char **priv = proxy ? run->harness->egress_allow_private : NULL;

	if (proxy)
		return msg_call_SANDBOX_PROXY(run->c->shim,
					      &(Msg_SANDBOX_PROXY){
						  .sandbox_id = run->sandbox_id,
						  .run_id = run->run_id,
						  .allow = run->harness->egress,
						  .allow_private = priv && priv[0] ? priv : NULL,
						  .port = (int64_t)port,
						  .has_port = port > 0,
					      },
					      SHIM_CALL_TIMEOUT, cb, run);
	/* routerd's bridge-only socket, never its public listener */
	char target[PATH_MAX];
	snprintf(target, sizeof(target), "%s/%s", run->c->conf.shared.runtime_dir, RW_SOCK_BRIDGE);
	return msg_call_SANDBOX_FORWARD(run->c->shim,
					&(Msg_SANDBOX_FORWARD){
					    .sandbox_id = run->sandbox_id,
					    .run_id = run->run_id,
					    .target = target,
					    .port = (int64_t)port,
					    .has_port = port > 0,
					},
					SHIM_CALL_TIMEOUT, cb, run);
}

/* After the sandbox: RUN_FORWARDING, a loopback forward to routerd for the MCP
 * bridge (when the run has one); RUN_PROXYING, the egress proxy (when its
 * harness names egress); then the harness (start_main). */
static void
prep_next(Run *run)
{
	int r;

	if (run->state == RUN_ENSURING && run->bridge_live) {
		run->state = RUN_FORWARDING;
		r = listen_call(run, false, 0, prep_reply);
	} else if (run->state != RUN_PROXYING && run->harness->egress && run->harness->egress[0]) {
		run->state = RUN_PROXYING;
		r = listen_call(run, true, 0, prep_reply);
	} else {
		start_main(run);
		return;
	}
	if (r < 0)
		run_fail(run, "sandbox: containerd-shim connection lost", RUN_ERR_SANDBOX_LOST);
}

/* The bridge's URL and token reach the harness on its fd 3, never through
 * argv, a file or the log: the harness's exec starts as a fixed /bin/sh
 * wrapper that turns RUNWARDEN_MCP_JSON (its environment, which only its own
 * exec can read — the shim gives every exec its own Landlock domain) into a
 * here-document on fd 3 (a pipe), unsets it and execs the harness's argv with
 * RUNWARDEN_MCP_CONFIG=/dev/fd/3. No other run of the thread sees either. */
static const char mcp_wrapper[] = "exec 3<<RUNWARDEN_MCP_EOF\n"
				  "$RUNWARDEN_MCP_JSON\n"
				  "RUNWARDEN_MCP_EOF\n"
				  "unset RUNWARDEN_MCP_JSON\n"
				  "exec \"$@\"";

static int
mcp_wrap(Run *run, ExecSpec *spec)
{
	char url[1024], base[300], *tq = evhttp_encode_uri(run->thread_id);
	if (!run->bridge_port) /* no forward, no bridge (bridge_close'd in prep_reply) */
		return -ENOENT;
	/* the forward inside the sandbox, to routerd's bridge socket */
	snprintf(base, sizeof(base), "http://127.0.0.1:%" PRIu64, run->bridge_port);
	snprintf(url, sizeof(url), "%s/_bridge/%s?threadId=%s", base, run->run_id, tq ? tq : "");
	free(tq);
	char auth[128];
	snprintf(auth, sizeof(auth), "Bearer %s", run->bridge_token);
	json_auto_t *cfg = json_pack("{s:{s:{s:s, s:s, s:{s:s}}}}", "mcpServers", "tanstack",
				     "type", "http", "url", url, "headers", "Authorization", auth);
	_cleanup_free_ char *text = cfg ? json_dump_compact(cfg) : NULL;
	/* one line: the here-document ends at the first line equal to its word */
	if (!text || strchr(text, '\n'))
		return -ENOMEM;
	char **argv = NULL;
	if (strv_push(&argv, "/bin/sh") < 0 || strv_push(&argv, "-c") < 0 ||
	    strv_push(&argv, mcp_wrapper) < 0 || strv_push(&argv, "runwarden-mcp") < 0)
		goto oom;
	for (size_t i = 0; spec->argv && spec->argv[i]; i++)
		if (strv_push(&argv, spec->argv[i]) < 0)
			goto oom;
	if (strv_pushf(&spec->env, "RUNWARDEN_MCP_JSON=%s", text) < 0 ||
	    strv_push(&spec->env, "RUNWARDEN_MCP_CONFIG=/dev/fd/3") < 0)
		goto oom;
	for (size_t i = 0; spec->argv && spec->argv[i]; i++)
		free(spec->argv[i]);
	free(spec->argv);
	spec->argv = argv;
	return 0;
oom:
	for (size_t i = 0; argv && argv[i]; i++)
		free(argv[i]);
	free(argv);
	return -ENOMEM;
}

/* The harness's process, after the sandbox (and the bridge's forward) are ready. */
static void
start_main(Run *run)
{
	ExecSpec spec = {0};
	if (run->adapter->init && !run->astate && run->adapter->init(run) < 0) {
		run_fail(run, "out of memory", RUN_ERR_INTERNAL);
		return;
	}
	if (run->adapter->begin(run, run->messages, run->metadata, &spec) < 0) {
		exec_spec_done(&spec);
		return; /* the adapter failed the run */
	}
	/* the harness's secrets reach the process through its environment only */
	for (size_t i = 0; run->harness->secrets && run->harness->secrets[i]; i++) {
		const char *v = getenv(run->harness->secrets[i]);
		if (!v || !*v) {
			char m[256];
			snprintf(m, sizeof(m),
				 "harness '%s': secret %s is not set for coordinatord",
				 run->harness->name, run->harness->secrets[i]);
			exec_spec_done(&spec);
			run_fail(run, m, RUN_ERR_HARNESS_ERROR);
			return;
		}
		strv_pushf(&spec.env, "%s=%s", run->harness->secrets[i], v);
	}
	for (size_t i = 0; run->harness->env && run->harness->env[i]; i++)
		strv_push(&spec.env, run->harness->env[i]);
	if (run->bridge_live && mcp_wrap(run, &spec) < 0) {
		exec_spec_done(&spec);
		run_fail(run, "sandbox: could not hand the MCP bridge configuration to the harness",
			 RUN_ERR_SANDBOX_ERROR);
		return;
	}
	if (run->proxy_port) {
		strv_pushf(&spec.env, "HTTPS_PROXY=http://127.0.0.1:%" PRIu64, run->proxy_port);
		strv_pushf(&spec.env, "https_proxy=http://127.0.0.1:%" PRIu64, run->proxy_port);
	}
	exec_start(run, &spec);
	exec_spec_done(&spec);
}

/* The shim's key of the run's sandbox: its thread's (reuse = thread), or its
 * own (reuse = none; "run:<runId>", a fresh sandbox and workspace). */
static const char *
run_sandbox_key(Run *run, char buf[static RUN_ID_LEN + 5])
{
	if (run->c->conf.reuse != REUSE_NONE)
		return run->thread_id;
	snprintf(buf, RUN_ID_LEN + 5, "run:%s", run->run_id);
	return buf;
}

void
run_drive(Run *run)
{
	Coordinator *c = run->c;
	char keybuf[RUN_ID_LEN + 5];

	if (!peer_is_ready(c->shim)) {
		run->state = RUN_WAIT_SHIM;
		return; /* shim_ready() kicks it, the wait timer fails it */
	}
	if (run->wait_timer)
		event_del(run->wait_timer);
	Msg_SANDBOX_ENSURE m = {
	    .key = run_sandbox_key(run, keybuf),
	    .run_id = run->run_id,
	    .thread_id = run->thread_id,
	    .tenant = run->tenant,
	    /* "": the host's binds; a thread's sandbox follows its runs' image */
	    .image = run->harness && run->harness->image ? run->harness->image : ""};
	/* no deadline: a queued ENSURE may wait for a slot; the shim's queue_timeout_ms ends it */
	int r = msg_call_SANDBOX_ENSURE(c->shim, &m, 0, sandbox_ensured, run);
	if (r < 0) {
		run->state = RUN_WAIT_SHIM;
		return;
	}
	run->state = RUN_ENSURING;
}

void
run_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
	Run *run = arg;
	if (run->state == RUN_WAIT_SHIM)
		run_fail(run, "sandbox: containerd-shim is not available",
			 RUN_ERR_SANDBOX_UNAVAILABLE);
	else if (run_reattaching(run)) /* the shim never came back to re-attach to */
		run_fail(run,
			 run->state == RUN_SHIM_LOST
			     ? "sandbox: containerd-shim did not come back within "
			       "sandbox_wait_ms"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 RUN_ERR_SANDBOX_LOST);
}

/* The values of every configured secret — of all harnesses, not just one
 * run's own: a shell run that prints another harness's key is redacted too
 * (values shorter than 4 bytes would redact ordinary text, and are not). */
void
secrets_collect(Coordinator *c, char ***values)
{
	const HarnessSet *set = c->harnesses;
	for (size_t h = 0; set && h < set->n; h++)
		for (size_t i = 0; set->v[h].secrets && set->v[h].secrets[i]; i++) {
			const char *v = getenv(set->v[h].secrets[i]);
			bool seen = false;
			if (!v || strlen(v) < 4)
				continue;
			for (size_t k = 0; *values && (*values)[k]; k++)
				seen = seen || streq((*values)[k], v);
			if (!seen)
				strv_push(values, v);
		}
}

void
collect_secrets(Run *run)
{
	secrets_collect(run->c, &run->secret_values);
}

void
run_start_driving(Run *run, const json_t *messages, const json_t *metadata)
{
	Coordinator *c = run->c;
	struct timeval tv;

	run->messages = json_deep_copy(messages);
	run->metadata = metadata ? json_deep_copy(metadata) : NULL;
	collect_secrets(run);

	bridge_open(run);
	if (run->bridge_live) /* the token is as secret as any */
		strv_push(&run->secret_values, run->bridge_token);
	/* the driver state marks the run as ours: a restart re-attaches or fails it */
	run_save_drive(run, drive_state(run));
	run->wait_timer = evtimer_new(c->base, run_wait_timeout, run);
	if (run->wait_timer)
		evtimer_add(
		    run->wait_timer,
		    timeval_from_usec(&tv, (usec_t)c->conf.sandbox_wait_ms * USEC_PER_MSEC));
	run_max_arm(run, now_epoch_ms());
	run_drive(run);
}

/* max_run_ms passed: kill the run's exec cgroup as a cancel does, then end it
 * failed with code run_timeout (cancel_finish). */
static void
run_max_cb(evutil_socket_t fd, short what, void *arg)
{
	Run *run = arg;

	if (run->state == RUN_DONE || run_cancelling(run))
		return; /* a cancel is ending it already */
	log_ctx(LOG_WARNING, &run->log,
		"Run exceeded max_run_ms=%" PRId64 "; killing its processes",
		run->c->conf.max_run_ms);
	run->run_timed_out = true;
	run_stop(run);
}

/* Arm max_run_ms for a run started at started_ms (epoch ms; a re-attached run
 * keeps its original start). */
void
run_max_arm(Run *run, int64_t started_ms)
{
	Coordinator *c = run->c;
	struct timeval tv;
	int64_t left;

	if (c->conf.max_run_ms <= 0)
		return;
	left = started_ms + c->conf.max_run_ms - now_epoch_ms();
	if (!run->max_timer)
		run->max_timer = evtimer_new(c->base, run_max_cb, run);
	if (run->max_timer)
		evtimer_add(run->max_timer,
			    timeval_from_usec(&tv, (usec_t)MAX(left, 0) * USEC_PER_MSEC));
}

/* ---------- cancel ---------- */

/* Answer a RUN_CANCEL with the run's record as committed. */
/* Answer a RUN_CANCEL (d, released) with the run's record. */
static void
cancel_reply_record(Coordinator *c, PeerDeferred *d, const char *run_id)
{
	json_t *rec = NULL;

	if (runlog_get(c->runlog, run_id, &rec) == 0) {
		_cleanup_free_ char *s = json_dump_compact(rec);
		(void)reply_deferred_RUN_CANCEL(d, &(Reply_RUN_CANCEL){.record = s ? s : "{}"});
	} else
		peer_deferred_error(d, -EIO, NULL, NULL);
	json_decref(rec);
}

void
cancel_finish(Run *run)
{
	PeerDeferred *d = TAKE_PTR(run->cancel_reply);
	Coordinator *c = run->c;
	char run_id[RUN_ID_LEN + 1];

	memcpy(run_id, run->run_id, sizeof(run_id));
	driver_flush_all(c);
	run->state = RUN_CANCELLING; /* flush may not end it; make sure run_end can */
	if (run->run_timed_out && !peer_deferred_peer(d)) {
		d = peer_deferred_free(d); /* its client left: a time limit's end */
		char msg[96];
		snprintf(msg, sizeof(msg), "run exceeded max_run_ms (%" PRId64 " ms)",
			 c->conf.max_run_ms);
		run_fail(run, msg, RUN_ERR_RUN_TIMEOUT);
		return;
	}
	log_ctx_msgid(LOG_NOTICE, &run->log, RW_MESSAGE_RUN_CANCELLED, "Run cancelled");
	run_end(run, run_error_chunk("run cancelled", RUN_ERR_ABORTED, NULL, NULL, 0), "aborted",
		json_pack("{s:b, s:{s:s, s:s}}", "cancelRequested", 1, "error", "message",
			  "run cancelled", "code", RUN_ERR_ABORTED));
	/* answer after the commit, with the record: commit right away */
	commit_now(c);
	if (d)
		cancel_reply_record(c, d, run_id);
}

static void
cancel_killed(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;

	if (err < 0 && err != -ENOENT)
		log_ctx_errno(LOG_WARNING, err, &run->log,
			      "Killing exec %" PRIu64
			      " for a cancel failed: %m; finishing the run anyway",
			      run->exec_id);
	/* -ENOENT: the exec is gone already. Else its EXEC_EXIT finishes the
	 * cancel (shim_exec_exit), unless we are not attached to it. */
	if (err < 0 || run->state == RUN_CANCELLING_DETACHED)
		cancel_finish(run);
}

/* EXEC_KILL SIGKILL of the run's exec: the shim kills the exec's cgroup, i.e.
 * everything it started and nothing of the sandbox's other execs. Attached,
 * the run goes RUN_CANCELLING (its EXEC_EXIT ends it), else
 * RUN_CANCELLING_DETACHED (the kill's reply does). */
static int
cancel_kill_exec(Run *run, bool attached)
{
	int r =
	    msg_call_EXEC_KILL(run->c->shim, &(Msg_EXEC_KILL){.exec_id = run->exec_id, .signal = 9},
			       10 * USEC_PER_SEC, cancel_killed, run);

	if (r == 0)
		run->state = attached ? RUN_CANCELLING : RUN_CANCELLING_DETACHED;
	return r;
}

/* A cancel came while the EXEC_START was in flight: kill what it started. */
void
cancel_on_start(Run *run, int err, uint64_t exec_id)
{
	if (err < 0 || exec_id == 0) {
		cancel_finish(run);
		return;
	}
	run->exec_id = exec_id;
	if (cancel_kill_exec(run, true) < 0)
		cancel_finish(run);
}

/* Cancel a run this coordinatord drives: kill its exec (EXEC_KILL SIGKILL, its
 * exec cgroup: setsid'd and double-forked descendants included, another run's
 * exec in the same sandbox untouched), then end it aborted once the exec's
 * EXEC_EXIT came. The reply (record) goes out once that is committed. */
int
run_cancel(Run *run, PeerDeferred *d)
{
	Coordinator *c = run->c;

	if (run->state == RUN_DONE || run_cancelling(run))
		return -EALREADY;
	run->cancel_reply = d;
	json_auto_t *flag = json_pack("{s:b}", "cancelRequested", 1);
	(void)runlog_update(c->runlog, run->run_id, flag, now_epoch_ms(), NULL);
	run_stop(run);
	return 0;
}

/* Kill what the run started (if anything) and end it in cancel_finish: aborted
 * for a cancel, run_timeout for max_run_ms. */
static void
run_stop(Run *run)
{
	Coordinator *c = run->c;

	if (run->sandbox_id && peer_is_ready(c->shim)) {
		if (run->state == RUN_STARTING) {
			/* exec_started / post_started kill it once its id is known */
			run->state = RUN_CANCELLING;
			return;
		}
		if ((run->state == RUN_EXECUTING || run_reattaching(run)) && run->exec_id) {
			bool attached = run->state == RUN_EXECUTING;
			if (!attached)
				peer_cancel_calls(c->shim, run); /* the EXEC_ATTACH */
			if (cancel_kill_exec(run, attached) == 0)
				return;
		}
	}
	/* no exec started yet (or the shim is gone): nothing to kill */
	if (c->shim)
		peer_cancel_calls(c->shim, run);
	cancel_finish(run);
}

/* ---------- what commits mean for driven runs (commit.c's hooks) ---------- */

bool
driver_run_log(Coordinator *c, const char *run_id, LogCtx *ret)
{
	Run *run = run_find(c, run_id);
	if (!run)
		return false;
	*ret = run->log;
	return true;
}

char **
driver_secrets(Coordinator *c, const char *run_id, bool *ret_owned)
{
	Run *run = run_find(c, run_id);
	char **values = NULL;
	if (run) {
		*ret_owned = false;
		return run->secret_values;
	}
	secrets_collect(c, &values);
	*ret_owned = true;
	return values;
}

void
driver_committed(Coordinator *c, const char *run_id, bool driven, CommitOutcome what)
{
	Run *run = run_find(c, run_id);
	if (!run)
		return;
	switch (what) {
	case COMMIT_ENDED:
	case COMMIT_REFUSED:
		if (driven)
			run_free(run);
		break;
	case COMMIT_REFUSED_FULL:
		if (driven && run->state != RUN_DONE) {
			run_kill_exec(run);
			run_fail(run, "run log is full", RUN_ERR_STORAGE_FULL);
		}
		break;
	case COMMIT_STORAGE_FAILED: run_free(run); break;
	case COMMIT_FENCED:
		run_kill_exec(run);
		run_free(run);
		break;
	}
}

/* Coordinator.run_teardown: what the driver attached to a run goes with it
 * (run_free()). */
void
driver_run_teardown(Run *run)
{
	Coordinator *c = run->c;

	bridge_close(run); /* later calls 404; tools still running are killed */
	/* reuse = none: the run's own sandbox and workspace go with its end (not
	 * when we stop: a restarted coordinatord re-attaches to the run). */
	if (!c->stopping && c->conf.reuse == REUSE_NONE && run->sandbox_id &&
	    peer_is_ready(c->shim)) {
		Msg_SANDBOX_DESTROY m = {
		    .sandbox_id = run->sandbox_id, .purge = true, .has_purge = true};
		(void)msg_call_SANDBOX_DESTROY(c->shim, &m, 30 * USEC_PER_SEC, NULL, NULL);
	}
	if ((run->bridge_port || run->proxy_port) && run->sandbox_id && peer_is_ready(c->shim)) {
		Msg_SANDBOX_UNLISTEN m = {.sandbox_id = run->sandbox_id, .run_id = run->run_id};
		(void)msg_call_SANDBOX_UNLISTEN(c->shim, &m, 10 * USEC_PER_SEC, NULL, NULL);
	}
	/* the run ended another way first (an output limit, storage_full, the
	 * watchdog): the cancel is answered as for a run already terminal, with
	 * the record of that end */
	if (run->cancel_reply)
		cancel_reply_record(c, TAKE_PTR(run->cancel_reply), run->run_id);
}
