/* SPDX-License-Identifier: MIT */
/*
 * driver.c — drives runs of the shell harness through containerd-shim.
 *
 * A Run walks WAIT_SHIM → ENSURING → STARTING → EXECUTING → DONE. Its output
 * arrives as EXEC_OUTPUT frames with stream byte offsets; each process.stdout
 * or process.stderr chunk is committed together with the driver state (exec
 * id and the offsets consumed so far), so that after a crash coordinatord can
 * EXEC_ATTACH to the still running exec from exactly those offsets: no output
 * lost, none repeated.
 */
#include "config.h"

#include "coordinatord.h"

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

#define SHIM_CALL_TIMEOUT (60 * USEC_PER_SEC)
#define SHIM_BACKOFF_MIN (100 * USEC_PER_MSEC)
#define SHIM_BACKOFF_MAX (2 * USEC_PER_SEC)

static void start_main(Run *run);
static void prep_next(Run *run);
static void cancel_finish(Run *run);
static void cancel_on_start(Run *run, int err, uint64_t exec_id);
static void run_stop(Run *run);
static void run_max_arm(Run *run, int64_t started_ms);
int run_aux_exec(Run *run, char *const *argv, char *const *env, const char *stdin_data,
		 size_t stdin_len,
		 void (*done)(Run *run, int64_t code, const char *out, size_t len));

json_t *
chunk_new(const char *type)
{
	return json_pack("{s:s}", "type", type);
}

Run *
run_find(Coordinator *c, const char *run_id)
{
	for (Run *r = c->runs; r; r = r->next)
		if (streq(r->run_id, run_id))
			return r;
	return NULL;
}

static Run *
run_find_exec(Coordinator *c, uint64_t exec_id)
{
	for (Run *r = c->runs; r; r = r->next)
		if ((r->state == RUN_EXECUTING || r->state == RUN_CANCELLING) &&
		    r->exec_id == exec_id)
			return r;
	return NULL;
}

Run *
run_new(Coordinator *c, const char *run_id, const char *thread_id)
{
	Run *run = calloc(1, sizeof(*run));
	if (!run)
		return NULL;
	run->c = c;
	memcpy(run->run_id, run_id, RUN_ID_LEN + 1);
	run->thread_id = strdup(thread_id);
	if (!run->thread_id) {
		free(run);
		return NULL;
	}
	snprintf(run->tool_call_id, sizeof(run->tool_call_id), "call_%.8s", run->run_id);
	run->log = (LogCtx){.run_id = run->run_id, .thread_id = run->thread_id};
	run->next = c->runs;
	c->runs = run;
	return run;
}

/* Answer a RUN_CANCEL with the run's record as committed. */
static void
cancel_reply_record(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id)
{
	json_t *rec = NULL;

	if (runlog_get(c->runlog, run_id, &rec) == 0) {
		_cleanup_free_ char *s = json_dump_compact(rec);
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "record", s ? s : "{}");
		peer_reply(cl->peer, req_id, &w);
		mp_writer_done(&w);
	} else
		peer_reply_error(cl->peer, req_id, -EIO, NULL);
	json_decref(rec);
}

void
run_free(Run *run)
{
	Coordinator *c = run->c;

	for (Run **pp = &c->runs; *pp; pp = &(*pp)->next)
		if (*pp == run) {
			*pp = run->next;
			break;
		}
	if (c->shim)
		peer_cancel_calls(c->shim, run);
	if (run->wait_timer)
		event_free(run->wait_timer);
	if (run->max_timer)
		event_free(run->max_timer);
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
	if (run->cancel_client)
		cancel_reply_record(c, run->cancel_client, run->cancel_req_id, run->run_id);
	for (int i = 0; i < 3; i++)
		outbuf_done(&run->out[i]);
	outbuf_done(&run->post_out);
	if (run->adapter && run->adapter->free_state)
		run->adapter->free_state(run);
	mp_strv_free(run->secret_values);
	json_decref(run->messages);
	json_decref(run->metadata);
	free(run->thread_id);
	free(run->command);
	free(run->sandbox_id);
	json_decref(run->agui);
	free(run);
}

/* What a restarted coordinatord needs to re-attach and go on exactly where it
 * stopped: the exec, the offsets consumed, and everything the adapter made of
 * them that is not in the record yet (its parse state, the id counter, the
 * stderr tail kept for an error message). Stored after every drain, in the
 * transaction of the chunks that drain queued. NULL when out of memory. */
static json_t *
drive_state(Run *run)
{
	json_t *d =
	    json_pack("{s:s, s:s, s:s, s:I, s:s, s:[I,I], s:I}", "threadId", run->thread_id,
		      "harness", run->harness ? run->harness->name : "shell", "sandboxId",
		      run->sandbox_id ? run->sandbox_id : "", "execId", (json_int_t)run->exec_id,
		      "toolCallId", run->tool_call_id, "consumed", (json_int_t)run->out[1].taken,
		      (json_int_t)run->out[2].taken, "ids", (json_int_t)run->id_counter);
	if (!d)
		return NULL;
	if (run->stderr_len) {
		/* as the record would get it: valid UTF-8, secrets redacted */
		size_t len;
		_cleanup_free_ char *t = utf8_sanitize(run->stderr_tail, run->stderr_len, &len);
		if (!t || redact_text(run->secret_values, &t, &len) < 0 ||
		    json_object_set_new(d, "stderrTail", json_stringn(t, len)) < 0) {
			json_decref(d);
			return NULL;
		}
	}
	if (run->adapter && run->adapter->save && run->astate) {
		json_t *a = run->adapter->save(run);
		if (!a || json_object_set_new(d, "adapter", a) < 0 ||
		    json_object_set_new(d, "adapterKind",
					json_string(adapter_name(run->adapter->kind))) < 0) {
			json_decref(d);
			return NULL;
		}
	}
	return d;
}

/* Let the adapter turn buffered output into chunks, then queue the state it
 * left behind: the same commit stores both, so after a crash the offsets, the
 * adapter's state and the events always agree. */
static void
run_flush_output(Run *run, bool final)
{
	run->dirty = false;
	if (run->post_exec)
		return; /* a post step's output is collected, not streamed */
	if (!run->adapter || run->state == RUN_DONE)
		return;
	run->adapter->drain(run, final);
	if (run->state == RUN_DONE ||
	    (run->out[1].taken == run->saved_taken[1] && run->out[2].taken == run->saved_taken[2]))
		return;
	json_t *d = drive_state(run);
	if (!d) {
		run_kill_exec(run);
		run_fail(run, "out of memory saving the driver state", "internal");
		return;
	}
	run->saved_taken[1] = run->out[1].taken;
	run->saved_taken[2] = run->out[2].taken;
	run_save_drive(run, d);
}

static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	driver_flush_all(arg);
}

void
driver_flush_all(Coordinator *c)
{
	for (Run *run = c->runs; run; run = run->next)
		if (run->dirty && run->state != RUN_DONE)
			run_flush_output(run, false);
}

/* ---------- the shell harness ---------- */

static void
exec_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_EXEC_START rep = {};
	int k = err < 0 ? err : reply_decode_EXEC_START(body, &rep);
	MpReader r;
	const char *msg = NULL;

	reply_done_EXEC_START(&rep); /* nothing borrowed: exec_id is a number */
	if (run->state == RUN_CANCELLING) {
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
		run_fail(run, m, err == -ECONNRESET ? "sandbox_lost" : "sandbox_error");
		return;
	}
	if (k < 0) {
		run_fail(run, "sandbox: malformed EXEC_START reply", "sandbox_error");
		return;
	}
	run->exec_id = rep.exec_id;
	run->state = RUN_EXECUTING;
	run_save_drive(run, drive_state(run));
}

/* The end of a run's exec ends what it left running (`cmd &`, nohup, setsid:
 * its exec cgroup is killed), unless the harness keeps them (keep_processes).
 * A sandbox with no exec running can always be stopped for a queued request,
 * so what is kept never holds a slot. */
static bool
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
		run_fail(run, "sandbox: containerd-shim connection lost", "sandbox_lost");
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
			 err == -ECONNRESET  ? "sandbox_lost"
			 : err == -ETIMEDOUT ? "queue_timeout"
					     : "sandbox_error");
		return;
	}
	if (reply_decode_SANDBOX_ENSURE(body, &rep) < 0 ||
	    !(run->sandbox_id = strdup(rep.sandbox_id))) {
		reply_done_SANDBOX_ENSURE(&rep);
		run_fail(run, "sandbox: malformed SANDBOX_ENSURE reply", "sandbox_error");
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
	run->prep = 0;
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

	reply_done_SANDBOX_FORWARD(&rep);
	if (err == 0 && k == 0 && port > 0 && port < 65536) {
		if (run->prep == 1)
			run->bridge_port = port;
		else
			run->proxy_port = port;
	} else if (err == -ENOMSG) {
		/* a shim without it: the harness just has no way out (fail closed) */
		log_ctx(LOG_WARNING, &run->log, "containerd-shim cannot %s, continuing without",
			run->prep == 1 ? "forward the bridge" : "proxy egress");
		if (run->prep == 1)
			bridge_close(run); /* no way to reach it: no token handed out */
	} else {
		char m[160];
		snprintf(m, sizeof(m), "sandbox: could not set up the %s",
			 run->prep == 1 ? "bridge forward" : "egress proxy");
		run_fail(run, m, err == -ECONNRESET ? "sandbox_lost" : "sandbox_error");
		return;
	}
	prep_next(run);
}

/* port: 0 for a new listener (the shim picks one), else exactly that port. */
static int
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

static int
prep_call(Run *run, int type, bool proxy)
{
	return listen_call(run, proxy, 0, prep_reply);
}

/* Step 1: a loopback forward to routerd for the MCP bridge; step 2: the egress
 * proxy; then the harness. */
static void
prep_next(Run *run)
{
	int r = 0;
	switch (++run->prep) {
	case 1:
		if (!run->bridge_live) {
			prep_next(run);
			return;
		}
		r = prep_call(run, MSG_SANDBOX_FORWARD, false);
		break;
	case 2:
		if (!run->harness->egress || !run->harness->egress[0]) {
			prep_next(run);
			return;
		}
		r = prep_call(run, MSG_SANDBOX_PROXY, true);
		break;
	default: start_main(run); return;
	}
	if (r < 0)
		run_fail(run, "sandbox: containerd-shim connection lost", "sandbox_lost");
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
		run_fail(run, "out of memory", "internal");
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
			run_fail(run, m, "harness_error");
			return;
		}
		strv_pushf(&spec.env, "%s=%s", run->harness->secrets[i], v);
	}
	for (size_t i = 0; run->harness->env && run->harness->env[i]; i++)
		strv_push(&spec.env, run->harness->env[i]);
	if (run->bridge_live && mcp_wrap(run, &spec) < 0) {
		exec_spec_done(&spec);
		run_fail(run, "sandbox: could not hand the MCP bridge configuration to the harness",
			 "sandbox_error");
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

static void
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
	Msg_SANDBOX_ENSURE m = {.key = run_sandbox_key(run, keybuf),
				.run_id = run->run_id,
				.thread_id = run->thread_id};
	/* no deadline: a queued ENSURE may wait for a slot; the shim's queue_timeout_ms ends it */
	int r = msg_call_SANDBOX_ENSURE(c->shim, &m, 0, sandbox_ensured, run);
	if (r < 0) {
		run->state = RUN_WAIT_SHIM;
		return;
	}
	run->state = RUN_ENSURING;
}

static void
run_wait_timeout(evutil_socket_t fd, short what, void *arg)
{
	Run *run = arg;
	if (run->state == RUN_WAIT_SHIM)
		run_fail(run, "sandbox: containerd-shim is not available", "sandbox_unavailable");
	else if (run->state == RUN_REATTACH) /* the shim never came back to re-attach to */
		run_fail(run,
			 run->shim_lost
			     ? "sandbox: containerd-shim did not come back within "
			       "sandbox_wait_ms"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 "sandbox_lost");
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

static void
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

	if (run->state == RUN_DONE || run->state == RUN_CANCELLING)
		return; /* a cancel is ending it already */
	log_ctx(LOG_WARNING, &run->log,
		"Run exceeded max_run_ms=%" PRId64 "; killing its processes",
		run->c->conf.max_run_ms);
	run->run_timed_out = true;
	run_stop(run);
}

/* Arm max_run_ms for a run started at started_ms (epoch ms; a re-attached run
 * keeps its original start). */
static void
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

static void
cancel_finish(Run *run)
{
	Client *cl = run->cancel_client;
	uint64_t req_id = run->cancel_req_id;
	Coordinator *c = run->c;
	char run_id[RUN_ID_LEN + 1];

	memcpy(run_id, run->run_id, sizeof(run_id));
	run->cancel_client = NULL;
	driver_flush_all(c);
	run->state = RUN_CANCELLING; /* flush may not end it; make sure run_end can */
	if (run->run_timed_out && !cl) {
		char msg[96];
		snprintf(msg, sizeof(msg), "run exceeded max_run_ms (%" PRId64 " ms)",
			 c->conf.max_run_ms);
		run_fail(run, msg, "run_timeout");
		return;
	}
	log_ctx_msgid(LOG_NOTICE, &run->log, RW_MESSAGE_RUN_CANCELLED, "Run cancelled");
	run_end(run,
		json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", "run cancelled",
			  "code", "aborted"),
		"aborted",
		json_pack("{s:b, s:{s:s, s:s}}", "cancelRequested", 1, "error", "message",
			  "run cancelled", "code", "aborted"));
	/* answer after the commit, with the record: commit right away */
	commit_now(c);
	if (cl)
		cancel_reply_record(c, cl, req_id, run_id);
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
	if (err < 0 || !run->cancel_wait_exit)
		cancel_finish(run);
}

/* EXEC_KILL SIGKILL of the run's exec: the shim kills the exec's cgroup, i.e.
 * everything it started and nothing of the sandbox's other execs. */
static int
cancel_kill_exec(Run *run, bool wait_exit)
{
	run->cancel_wait_exit = wait_exit;
	return msg_call_EXEC_KILL(run->c->shim,
				  &(Msg_EXEC_KILL){.exec_id = run->exec_id, .signal = 9},
				  10 * USEC_PER_SEC, cancel_killed, run);
}

/* A cancel came while the EXEC_START was in flight: kill what it started. */
static void
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
run_cancel(Run *run, Client *cl, uint64_t req_id)
{
	Coordinator *c = run->c;

	if (run->state == RUN_DONE || run->state == RUN_CANCELLING)
		return -EALREADY;
	run->cancel_client = cl;
	run->cancel_req_id = req_id;
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
		if ((run->state == RUN_EXECUTING || run->state == RUN_REATTACH) && run->exec_id) {
			bool attached = run->state == RUN_EXECUTING;
			if (!attached)
				peer_cancel_calls(c->shim, run); /* the EXEC_ATTACH */
			if (cancel_kill_exec(run, attached) == 0) {
				run->state = RUN_CANCELLING;
				return;
			}
		}
	}
	/* no exec started yet (or the shim is gone): nothing to kill */
	if (c->shim)
		peer_cancel_calls(c->shim, run);
	cancel_finish(run);
}

/* ---------- output budgets ---------- */

static ThreadOutput *
thread_output(Coordinator *c, const char *thread_id, int64_t now)
{
	ThreadOutput **pp = &c->thread_output, *t;

	while ((t = *pp)) {
		if (streq(t->thread_id, thread_id))
			break;
		if (now - t->window_start_ms >= c->conf.thread_output_window_ms) {
			*pp = t->next; /* an idle thread's window is over: forget it */
			free(t);
			continue;
		}
		pp = &t->next;
	}
	if (!t) {
		size_t l = strlen(thread_id);
		t = calloc(1, sizeof(*t) + l + 1);
		if (!t)
			return NULL;
		memcpy(t->thread_id, thread_id, l + 1);
		t->window_start_ms = now;
		t->next = c->thread_output;
		c->thread_output = t;
	} else if (now - t->window_start_ms >= c->conf.thread_output_window_ms) {
		t->window_start_ms = now;
		t->bytes = 0;
	}
	return t;
}

void
driver_thread_output_free(Coordinator *c)
{
	while (c->thread_output) {
		ThreadOutput *n = c->thread_output->next;
		free(c->thread_output);
		c->thread_output = n;
	}
}

/* How many of n new output bytes fit the run's and its thread's budgets
 * (counting them against the thread's window). The run's count is the
 * stream offsets, which survive a restart with the driver state. */
static size_t
output_budget(Run *run, size_t n)
{
	Coordinator *c = run->c;
	uint64_t keep = n;

	if (run->output_limited)
		return 0;
	if (c->conf.max_run_output_bytes > 0) {
		/* n is already counted in neither added */
		uint64_t total = run->out[1].added + run->out[2].added;
		uint64_t max = (uint64_t)c->conf.max_run_output_bytes;
		keep = MIN(keep, total >= max ? 0 : max - total);
	}
	if (c->conf.max_thread_output_bytes > 0) {
		ThreadOutput *t = thread_output(c, run->thread_id, now_epoch_ms());
		uint64_t max = (uint64_t)c->conf.max_thread_output_bytes;
		if (t) {
			keep = MIN(keep, t->bytes >= max ? 0 : max - t->bytes);
			t->bytes += keep;
		}
	}
	return (size_t)keep;
}

/* n bytes of b's stream went over a budget: they are consumed (never read
 * again after a restart) but not stored. The first time, a marker event says
 * so, and output_limit_action applies: 'fail' kills the exec and ends the run
 * output_limit; 'drop' keeps it running (shell harness only: dropping bytes
 * of an NDJSON stream would cut its lines, so other harnesses always fail). */
static void
output_over_budget(Run *run, OutBuf *b, size_t n)
{
	Coordinator *c = run->c;
	bool drop = c->conf.output_limit_action == OUTPUT_LIMIT_DROP && run->adapter &&
		    run->adapter->kind == ADAPTER_SHELL;

	b->added += n;
	b->taken += n;
	run->dropped += n;
	c->m.output_dropped_bytes += n;
	if (run->output_limited)
		return;
	run->output_limited = true;
	c->m.runs_output_limited++;
	bool thread =
	    c->conf.max_run_output_bytes <= 0 ||
	    run->out[1].added + run->out[2].added - n < (uint64_t)c->conf.max_run_output_bytes;
	int64_t budget = thread ? c->conf.max_thread_output_bytes : c->conf.max_run_output_bytes;
	char m[200];
	snprintf(m, sizeof(m),
		 "[runwarden: output over the %s budget of %" PRId64 " bytes; dropped %zu bytes%s]",
		 thread ? "thread's" : "run's", budget, n,
		 drop ? "; further output is dropped" : "");
	log_ctx(LOG_WARNING, &run->log, "Run output over the %s budget (%" PRId64 " bytes): %s",
		thread ? "thread" : "run", budget, drop ? "dropping the rest" : "failing the run");
	run_flush_output(run, !drop);
	if (run->state == RUN_DONE)
		return; /* the adapter ended it meanwhile */
	run_emit(run,
		 json_pack("{s:s, s:s, s:{s:I, s:s, s:I, s:s}}", "type", "CUSTOM", "name",
			   "runwarden.output_dropped", "value", "droppedBytes", (json_int_t)n,
			   "budget", thread ? "thread" : "run", "budgetBytes", (json_int_t)budget,
			   "text", m),
		 drive_state(run));
	if (drop)
		return;
	run_kill_exec(run);
	snprintf(m, sizeof(m), "output over the %s budget of %" PRId64 " bytes",
		 thread ? "thread's" : "run's", budget);
	run_fail(run, m, "output_limit");
}

/* ---------- shim pushes ---------- */

static int
shim_exec_output(Peer *p, const Frame *f, const Msg_EXEC_OUTPUT *m, void *ud)
{
	Coordinator *c = ud;
	uint64_t stream = m->stream, offset = m->offset;
	const void *data = m->data;
	size_t len = m->data_len;

	if (stream != 1 && stream != 2)
		return -EBADMSG;
	Run *run = run_find_exec(c, m->exec_id);
	if (!run || run->state == RUN_DONE)
		return 0; /* not ours (any more) */
	OutBuf *b = &run->out[stream];
	/* exactly once: skip what we already have (a replay after re-attach),
	 * say so when the shim lost bytes we never saw */
	if (offset > b->added) {
		char note[96];
		int n = snprintf(note, sizeof(note),
				 "\n[runwarden: %" PRIu64 " bytes of output were lost]\n",
				 offset - b->added);
		if (outbuf_add(b, note, (size_t)n) < 0)
			return -ENOMEM;
		b->added = offset; /* the note stands for the lost bytes */
	} else if (m->dropped > 0) {
		/* the shim says so itself */
	}
	if (offset + len <= b->added)
		return 0;
	size_t skip = (size_t)(b->added - offset);
	if (run->post_exec) {
		if (stream == 1 && run->post_out.len < (1u << 20))
			(void)outbuf_add(&run->post_out, (const char *)data + skip, len - skip);
		b->added += len - skip;
		b->taken = b->added;
		return 0;
	}
	size_t n = len - skip, keep = output_budget(run, n);
	if (keep > 0 && outbuf_add(b, (const char *)data + skip, keep) < 0)
		return -ENOMEM;
	if (keep < n) {
		output_over_budget(run, b, n - keep);
		return 0;
	}
	if (b->len >= (size_t)c->conf.output_chunk_max) {
		run_flush_output(run, false);
		return 0;
	}
	if (!run->dirty) {
		run->dirty = true;
		event_active(c->flush_ev, 0, 0);
	}
	return 0;
}

static int
shim_exec_exit(Peer *p, const Frame *f, const Msg_EXEC_EXIT *m, void *ud)
{
	Coordinator *c = ud;
	int64_t code = m->exit_code, sig = m->signal; /* 0 when absent */
	char why[32];

	snprintf(why, sizeof(why), "%s", m->reason ? m->reason : "exit");
	Run *run = run_find_exec(c, m->exec_id);
	if (!run)
		return 0;
	if (run->state == RUN_CANCELLING) {
		/* the exec a cancel killed: now the run ends aborted */
		bool post = run->post_exec;
		run->post_exec = false;
		run->post_done = NULL;
		if (!post)
			run_flush_output(run, true);
		cancel_finish(run);
		return 0;
	}
	if (run->post_exec) {
		run->post_exec = false;
		void (*done)(Run *, int64_t, const char *, size_t) = run->post_done;
		run->post_done = NULL;
		if (done)
			done(run, code, run->post_out.data ? run->post_out.data : "",
			     run->post_out.len);
		return 0;
	}
	run_flush_output(run, true);
	if (run->state == RUN_DONE)
		return 0; /* the adapter ended the run */
	if (run->output_limited && run->dropped > 0) {
		/* drop mode: the total, before the run's end */
		char text[160];
		snprintf(text, sizeof(text),
			 "[runwarden: dropped %" PRIu64 " bytes of output in all]", run->dropped);
		run_emit(run,
			 json_pack("{s:s, s:s, s:{s:I, s:b, s:s}}", "type", "CUSTOM", "name",
				   "runwarden.output_dropped", "value", "droppedBytes",
				   (json_int_t)run->dropped, "total", 1, "text", text),
			 NULL);
	}
	run->adapter->exit(run, code, sig, why);
	return 0;
}

static void
post_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_EXEC_START rep = {};
	int k = err < 0 ? err : reply_decode_EXEC_START(body, &rep);
	uint64_t exec_id = rep.exec_id;

	reply_done_EXEC_START(&rep);
	if (run->state == RUN_CANCELLING) {
		run->post_exec = false;
		run->post_done = NULL;
		cancel_on_start(run, k, exec_id);
		return;
	}
	if (k < 0) {
		void (*done)(Run *, int64_t, const char *, size_t) = run->post_done;
		run->post_exec = false;
		run->post_done = NULL;
		if (done)
			done(run, -1, "", 0);
		return;
	}
	run->exec_id = exec_id;
	for (int i = 1; i <= 2; i++) {
		outbuf_done(&run->out[i]);
		run->out[i] = (OutBuf){0};
	}
	run->state = RUN_EXECUTING;
}

int
run_aux_exec(Run *run, char *const *argv, char *const *env, const char *stdin_data,
	     size_t stdin_len, void (*done)(Run *run, int64_t code, const char *out, size_t len))
{
	Coordinator *c = run->c;

	if (!peer_is_ready(c->shim) || !run->sandbox_id)
		return -ENOTCONN;
	outbuf_done(&run->post_out);
	run->post_out = (OutBuf){0};
	Msg_EXEC_START m = {
	    .sandbox_id = run->sandbox_id,
	    .argv = argv,
	    .env = env,
	    .cwd = "/workspace",
	    .stdin = stdin_data,
	    .stdin_len = stdin_len,
	    .has_stdin = stdin_data != NULL,
	    .timeout_ms = 30000,
	    .has_timeout_ms = true,
	    .kill_leftovers = true,
	    .has_kill_leftovers = run_kills_leftovers(run),
	};
	int r = msg_call_EXEC_START(c->shim, &m, SHIM_CALL_TIMEOUT, post_started, run);
	if (r < 0)
		return r;
	run->post_exec = true;
	run->post_done = done;
	run->state = RUN_STARTING;
	return 0;
}

int
run_post_exec(Run *run, char *const *argv,
	      void (*done)(Run *run, int64_t code, const char *out, size_t len))
{
	static char *const env[] = {(char *)"PATH=/usr/local/bin:/usr/bin:/bin",
				    (char *)"HOME=/workspace", (char *)"LANG=C.UTF-8", NULL};
	return run_aux_exec(run, argv, env, NULL, 0, done);
}

static int
shim_sandbox_queued(Peer *p, const Frame *f, const Msg_SANDBOX_QUEUED *m, void *ud)
{
	Coordinator *c = ud;

	if (m->run_id) {
		Run *run = run_find(c, m->run_id);
		if (run && run->state == RUN_ENSURING) {
			run->queued = true;
			run_emit(run,
				 json_pack("{s:s, s:s, s:{s:I}}", "type", "CUSTOM", "name",
					   "run.queued", "value", "position",
					   (json_int_t)m->position),
				 NULL);
		}
	}
	return 0;
}

MSG_HANDLER(dispatch_exec_output, EXEC_OUTPUT, shim_exec_output)
MSG_HANDLER(dispatch_exec_exit, EXEC_EXIT, shim_exec_exit)
MSG_HANDLER(dispatch_sandbox_queued, SANDBOX_QUEUED, shim_sandbox_queued)

const PeerHandler shim_handlers[_MSG_TYPE_MAX] = {
    [MSG_EXEC_OUTPUT] = dispatch_exec_output,
    [MSG_EXEC_EXIT] = dispatch_exec_exit,
    [MSG_SANDBOX_QUEUED] = dispatch_sandbox_queued,
};

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
		run->shim_lost = true;
		return;
	}
	if (err < 0) {
		log_ctx_errno(LOG_WARNING, err, &run->log,
			      "Cannot re-attach to exec %" PRIu64 ": %m", run->exec_id);
		run_fail(run,
			 run->shim_lost
			     ? "the run's sandbox process is gone (containerd-shim restarted)"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 "sandbox_lost");
		return;
	}
	log_ctx(LOG_NOTICE, &run->log,
		"Re-attached to exec %" PRIu64 " at offsets %" PRIu64 "/%" PRIu64, run->exec_id,
		run->out[1].taken, run->out[2].taken);
	if (run->wait_timer)
		event_del(run->wait_timer);
	run->state = RUN_EXECUTING;
	if (run->shim_lost)
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
			 run->shim_lost
			     ? "the run's sandbox process is gone (containerd-shim restarted)"
			     : "the run's sandbox process is gone (coordinatord restarted)",
			 "sandbox_lost");
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
			 "harness_error");
		return -EINVAL;
	}
	if (state && run->adapter->load)
		r = run->adapter->load(run, state);
	if (r < 0) {
		log_ctx_errno(LOG_ERR, r, &run->log, "Cannot restore the adapter's state: %m");
		run_fail(run, "coordinatord could not restore the run's adapter state", "internal");
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
	rc->n++;
	/* what the stored stream has open, so it ends valid (agui-guard.c) */
	if (agui_guard_rebuild(run) < 0)
		log_ctx(LOG_WARNING, &run->log, "Cannot read the run's events back");
	const char *hname = json_string_value(json_object_get(drive, "harness"));
	run->harness = harness_find(c->harnesses, hname ? hname : "shell");
	run->adapter = run->harness ? adapter_get(run->harness->adapter) : NULL;
	if (!run->adapter || (run->adapter->init && run->adapter->init(run) < 0)) {
		run_fail(run, "the run's harness is no longer configured", "harness_error");
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
			 "sandbox_lost");
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

static void shim_connect_later(Coordinator *c);

static void
shim_ready(Peer *p, void *ud)
{
	Coordinator *c = ud;

	log_info("Connected to containerd-shim (pid %d)", (int)peer_remote_pid(p));
	c->shim_backoff = SHIM_BACKOFF_MIN;
	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->state == RUN_WAIT_SHIM)
			run_drive(run);
		else if (run->state == RUN_REATTACH)
			reattach(run);
	}
}

static void
shim_closed(Peer *p, int err, void *ud)
{
	Coordinator *c = ud;
	struct timeval tv;

	if (!c->stopping)
		log_warning_errno(err, "Lost the connection to containerd-shim: %m");
	/* Pending ENSURE/START calls already failed with -ECONNRESET (their runs
	 * failed). Executing runs wait sandbox_wait_ms for a shim to re-attach to
	 * (it re-adopts its sandboxes after a crash, docs/DESIGN.md); a post step's
	 * exec is not re-attached. */
	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->state == RUN_EXECUTING && !run->post_exec && !c->stopping &&
		    run->wait_timer) {
			run->state = RUN_REATTACH;
			run->shim_lost = true;
			evtimer_add(run->wait_timer,
				    timeval_from_usec(&tv, (usec_t)c->conf.sandbox_wait_ms *
							       USEC_PER_MSEC));
			log_ctx(LOG_NOTICE, &run->log,
				"Waiting for containerd-shim to re-attach to exec %" PRIu64,
				run->exec_id);
		} else if (run->state == RUN_EXECUTING) {
			run_flush_output(run, true);
			run_fail(run, "sandbox: containerd-shim connection lost", "sandbox_lost");
		} else if (run->state == RUN_CANCELLING && !c->stopping) {
			cancel_finish(run);
		}
	}
	c->shim = peer_free(c->shim);
	if (!c->stopping)
		shim_connect_later(c);
}

static const PeerOps shim_ops = {
    .local_role = ROLE_COORD,
    .handlers = shim_handlers,
    .on_ready = shim_ready,
    .on_close = shim_closed,
};

static void
shim_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;
	char path[4096];

	snprintf(path, sizeof(path), "%s/%s", c->conf.shared.runtime_dir, RW_SOCK_SHIM);
	int sfd = unix_connect(path);
	if (sfd < 0) {
		log_debug_errno(sfd, "containerd-shim not reachable at '%s' yet: %m", path);
		shim_connect_later(c);
		return;
	}
	int r = peer_new(c->base, sfd, &shim_ops, c, (size_t)c->conf.shared.max_frame, &c->shim);
	if (r < 0) {
		log_warning_errno(r, "Failed to set up the containerd-shim connection: %m");
		shim_connect_later(c);
	}
}

static void
shim_connect_later(Coordinator *c)
{
	struct timeval tv;
	evtimer_add(c->shim_timer, timeval_from_usec(&tv, c->shim_backoff));
	c->shim_backoff = MIN(c->shim_backoff * 2, SHIM_BACKOFF_MAX);
}

void
shim_connect_now(Coordinator *c)
{
	shim_connect_cb(-1, 0, c);
}

void
driver_setup(Coordinator *c)
{
	c->shim_backoff = SHIM_BACKOFF_MIN;
	c->flush_ev = event_new(c->base, -1, 0, flush_cb, c);
	c->shim_timer = evtimer_new(c->base, shim_connect_cb, c);
}
