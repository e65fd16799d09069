/* SPDX-License-Identifier: MIT */
/*
 * coordinator.c — the coordinatord event loop: router clients, the shim link,
 * and the run driver for the shell harness.
 *
 * Log-first: every chunk goes through run_append()/run_finish(), which commit
 * to LMDB and only then publish RUN_EVENTS to the routers watching the run.
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fd-util.h"
#include "harness.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "mp-cursor.h"
#include "peer.h"
#include "runlog.h"
#include "time-util.h"

#define SHIM_CALL_TIMEOUT (60 * USEC_PER_SEC)
#define SHIM_BACKOFF_MIN (100 * USEC_PER_MSEC)
#define SHIM_BACKOFF_MAX (2 * USEC_PER_SEC)

typedef struct Coordinator Coordinator;

typedef struct Client {
	struct Client *next;
	Coordinator *c;
	Peer *peer;
} Client;

typedef struct Watch {
	struct Watch *next;
	char run_id[RUN_ID_LEN + 1];
	Client *client;
} Watch;

typedef enum RunState {
	RUN_WAIT_SHIM, /* waiting for containerd-shim to be connected */
	RUN_ENSURING,  /* SANDBOX_ENSURE in flight */
	RUN_STARTING,  /* EXEC_START in flight */
	RUN_EXECUTING, /* output streaming */
	RUN_DONE,
} RunState;

typedef struct Run {
	struct Run *next;
	Coordinator *c;
	char run_id[RUN_ID_LEN + 1];
	char *thread_id;
	char *command;
	char *sandbox_id;
	uint64_t exec_id;
	RunState state;
	OutBuf out[3]; /* [1] stdout, [2] stderr */
	bool dirty;    /* output waiting for the end-of-turn flush */
	char tool_call_id[48];
	struct event *wait_timer;
	LogCtx log;
} Run;

struct Coordinator {
	struct event_base *base;
	CoordConf conf;
	RunLog *runlog;
	int listen_fd;
	struct event *listen_ev;
	Client *clients;
	Watch *watches;
	Run *runs;
	Peer *shim;
	struct event *shim_timer;
	usec_t shim_backoff;
	struct event *flush_ev;
	bool stopping;
};

static void run_fail(Run *run, const char *message, const char *code);
static void run_drive(Run *run);

/* ---------- chunks ---------- */

static void
chunk_stamp(json_t *chunk)
{
	json_object_set_new(chunk, "timestamp", json_integer(now_epoch_ms()));
}

/* ---------- publishing ---------- */

static void
publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	const size_t *lens, size_t n, const json_t *record)
{
	_cleanup_free_ char *rec = NULL;
	MpWriter w;
	bool any = false;

	for (Watch *wt = c->watches; wt; wt = wt->next)
		if (streq(wt->run_id, run_id)) {
			any = true;
			break;
		}
	if (!any)
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

/* ---------- runs ---------- */

static Run *
run_find_exec(Coordinator *c, uint64_t exec_id)
{
	for (Run *r = c->runs; r; r = r->next)
		if (r->state == RUN_EXECUTING && r->exec_id == exec_id)
			return r;
	return NULL;
}

static void
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
	for (int i = 0; i < 3; i++)
		outbuf_done(&run->out[i]);
	free(run->thread_id);
	free(run->command);
	free(run->sandbox_id);
	free(run);
}

/* Commit one chunk, then publish it. On any error the run is over and has
 * been released: a storage failure fails it (when that can still be
 * written), -ESTALE means it was already terminal. Callers must not touch
 * run after a negative return. */
static int
run_append(Run *run, json_t *chunk)
{
	Coordinator *c = run->c;
	json_t *rec = NULL;
	int64_t seq;
	int r;

	chunk_stamp(chunk);
	_cleanup_free_ char *text = json_dump_compact(chunk);
	json_decref(chunk);
	if (!text)
		return -ENOMEM;
	size_t len = strlen(text);
	r = runlog_append(c->runlog, run->run_id, text, len, now_epoch_ms(), &seq, &rec);
	if (r == -ESTALE) { /* terminal already: a late append is rejected, as it must be */
		run->state = RUN_DONE;
		run_free(run);
		return r;
	}
	if (r < 0) {
		log_ctx_errno(LOG_ERR, r, &run->log, "Failed to append to run log: %m");
		run_fail(run, r == -ENOSPC ? "run log is full" : "run log write failed",
			 r == -ENOSPC ? "storage_full" : "storage_error");
		return r;
	}
	const char *t = text;
	publish(c, run->run_id, seq, &t, &len, 1, rec);
	json_decref(rec);
	return 0;
}

/* Commit the final chunk with the terminal status and publish; the run is done. */
static void
run_finish(Run *run, json_t *chunk, const char *status, json_t *fields)
{
	Coordinator *c = run->c;
	json_t *rec = NULL;
	int64_t seq;
	int r;

	chunk_stamp(chunk);
	char *text = json_dump_compact(chunk);
	json_decref(chunk);
	if (text) {
		size_t len = strlen(text);
		r = runlog_append_finish(c->runlog, run->run_id, text, len, status, fields,
					 now_epoch_ms(), &seq, &rec);
		if (r == 0) {
			const char *t = text;
			publish(c, run->run_id, seq, &t, &len, 1, rec);
			json_decref(rec);
			log_ctx_msgid(LOG_INFO, &run->log, RW_MESSAGE_RUN_FINISHED,
				      "Run finished: %s", status);
		} else if (r != -ESTALE)
			log_ctx_errno(LOG_ERR, r, &run->log,
				      "Failed to write the end of the run (%s): %m", status);
		free(text);
	}
	json_decref(fields);
	run->state = RUN_DONE;
	run_free(run);
}

static void
run_fail(Run *run, const char *message, const char *code)
{
	json_t *chunk = json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", message,
				  "code", code);
	json_t *fields = json_pack("{s:{s:s, s:s}}", "error", "message", message, "code", code);
	log_ctx(LOG_WARNING, &run->log, "Run failed: %s (%s)", message, code);
	run_finish(run, chunk, "failed", fields);
}

/* Turn buffered output into process.stdout/stderr chunks. */
static int
run_flush_output(Run *run, bool final)
{
	static const char *const names[3] = { NULL, "process.stdout", "process.stderr" };

	for (int s = 1; s <= 2; s++) {
		for (;;) {
			size_t len;
			char *text = outbuf_take(&run->out[s], (size_t)run->c->conf.output_chunk_max,
						 final, &len);
			if (!text)
				break;
			json_t *chunk = json_pack("{s:s, s:s, s:{s:s%}}", "type", "CUSTOM", "name",
						  names[s], "value", "text", text, len);
			free(text);
			if (!chunk)
				return -ENOMEM;
			int r = run_append(run, chunk);
			if (r < 0)
				return r; /* the run may be gone */
		}
	}
	run->dirty = false;
	return 0;
}

static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	Coordinator *c = arg;

	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->dirty)
			(void)run_flush_output(run, false);
	}
}

/* ---------- shim link ---------- */

static void shim_connect_later(Coordinator *c);

static void
exec_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	MpReader r;
	uint64_t exec_id = 0;
	const char *msg = NULL;

	mp_reader_init(&r, body);
	if (err < 0) {
		mp_read_str_opt(&r, "message", &msg, NULL);
		char m[512];
		snprintf(m, sizeof(m), "sandbox: could not start the command: %s",
			 msg ? msg : strerror(-err));
		mp_reader_done(&r);
		run_fail(run, m, err == -ECONNRESET ? "sandbox_lost" : "sandbox_error");
		return;
	}
	mp_read_uint(&r, "exec_id", &exec_id);
	mp_reader_done(&r);
	if (r.err < 0) {
		run_fail(run, "sandbox: malformed EXEC_START reply", "sandbox_error");
		return;
	}
	run->exec_id = exec_id;
	run->state = RUN_EXECUTING;
}

static void
sandbox_ensured(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Coordinator *c = run->c;
	MpReader r;
	const char *sandbox_id = NULL, *msg = NULL;
	bool created = false;

	mp_reader_init(&r, body);
	if (err < 0) {
		char m[512];
		mp_read_str_opt(&r, "message", &msg, NULL);
		snprintf(m, sizeof(m), "sandbox: %s", msg ? msg : strerror(-err));
		mp_reader_done(&r);
		run_fail(run, m, err == -ECONNRESET ? "sandbox_lost" : "sandbox_error");
		return;
	}
	mp_read_str(&r, "sandbox_id", &sandbox_id);
	mp_read_bool_opt(&r, "created", &created, false);
	if (r.err < 0 || !(run->sandbox_id = strdup(sandbox_id))) {
		mp_reader_done(&r);
		run_fail(run, "sandbox: malformed SANDBOX_ENSURE reply", "sandbox_error");
		return;
	}
	mp_reader_done(&r);
	run->log.sandbox_id = run->sandbox_id;

	json_auto_t *fields = json_pack("{s:s}", "sandboxId", run->sandbox_id);
	if (runlog_update(c->runlog, run->run_id, fields, now_epoch_ms(), NULL) < 0) {
		run_fail(run, "run log write failed", "storage_error");
		return;
	}
	json_t *chunk = json_pack("{s:s, s:s, s:{s:s, s:s}}", "type", "CUSTOM", "name",
				  created ? "sandbox.created" : "sandbox.resumed", "value",
				  "sandboxId", run->sandbox_id, "provider", "runwarden");
	if (run_append(run, chunk) < 0)
		return;

	/* the command as one tool call */
	snprintf(run->tool_call_id, sizeof(run->tool_call_id), "call_%.8s", run->run_id);
	json_t *start = json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_START", "toolCallId",
				  run->tool_call_id, "toolCallName", "shell");
	if (run_append(run, start) < 0)
		return;
	json_auto_t *args = json_pack("{s:s}", "command", run->command);
	_cleanup_free_ char *args_text = json_dump_compact(args);
	json_t *argc = json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_ARGS", "toolCallId",
				 run->tool_call_id, "delta", args_text ? args_text : "{}");
	if (run_append(run, argc) < 0)
		return;
	json_t *end = json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId",
				run->tool_call_id);
	if (run_append(run, end) < 0)
		return;

	char env_run[64];
	snprintf(env_run, sizeof(env_run), "RUNWARDEN_RUN_ID=%s", run->run_id);
	char *argv[] = { c->conf.shell, (char *)"-c", run->command, NULL };
	char *env[] = { (char *)"PATH=/usr/local/bin:/usr/bin:/bin", (char *)"HOME=/workspace",
			(char *)"LANG=C.UTF-8", (char *)"TERM=dumb", env_run, NULL };
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 5);
	mp_w_str(&w, "sandbox_id", run->sandbox_id);
	mp_w_str_array(&w, "argv", argv);
	mp_w_str_array(&w, "env", env);
	mp_w_str(&w, "cwd", "/workspace");
	mp_w_str(&w, "run_id", run->run_id);
	int rr = peer_call(c->shim, MSG_EXEC_START, &w, SHIM_CALL_TIMEOUT, exec_started, run);
	mp_writer_done(&w);
	if (rr < 0) {
		run_fail(run, "sandbox: containerd-shim connection lost", "sandbox_lost");
		return;
	}
	run->state = RUN_STARTING;
}

static void
run_drive(Run *run)
{
	Coordinator *c = run->c;
	MpWriter w;

	if (!peer_is_ready(c->shim)) {
		run->state = RUN_WAIT_SHIM;
		return; /* shim_ready() kicks it, the wait timer fails it */
	}
	if (run->wait_timer)
		event_del(run->wait_timer);
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_str(&w, "key", run->thread_id);
	mp_w_str(&w, "run_id", run->run_id);
	mp_w_str(&w, "thread_id", run->thread_id);
	int r = peer_call(c->shim, MSG_SANDBOX_ENSURE, &w, SHIM_CALL_TIMEOUT, sandbox_ensured, run);
	mp_writer_done(&w);
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
}

static int
shim_exec_output(Peer *p, const Frame *f, void *ud)
{
	Coordinator *c = ud;
	MpReader r;
	uint64_t exec_id = 0, stream = 0, offset = 0;
	const void *data = NULL;
	size_t len = 0;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &exec_id);
	mp_read_uint(&r, "stream", &stream);
	mp_read_uint(&r, "offset", &offset);
	mp_read_bin(&r, "data", &data, &len);
	mp_reader_done(&r);
	if (r.err < 0 || (stream != 1 && stream != 2))
		return -EBADMSG;
	Run *run = run_find_exec(c, exec_id);
	if (!run)
		return 0; /* not ours (any more) */
	if (outbuf_add(&run->out[stream], data, len) < 0)
		return -ENOMEM;
	if (run->out[stream].len >= (size_t)c->conf.output_chunk_max) {
		(void)run_flush_output(run, false);
		return 0;
	}
	if (!run->dirty) {
		run->dirty = true;
		event_active(c->flush_ev, 0, 0);
	}
	return 0;
}

static int
shim_exec_exit(Peer *p, const Frame *f, void *ud)
{
	Coordinator *c = ud;
	MpReader r;
	uint64_t exec_id = 0;
	int64_t code = -1, sig = 0;
	const char *reason = NULL;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &exec_id);
	mp_read_int(&r, "exit_code", &code);
	mp_read_int_opt(&r, "signal", &sig, 0);
	mp_read_str_opt(&r, "reason", &reason, "exit");
	if (r.err < 0) {
		mp_reader_done(&r);
		return -EBADMSG;
	}
	Run *run = run_find_exec(c, exec_id);
	if (!run) {
		mp_reader_done(&r);
		return 0;
	}
	char why[64];
	snprintf(why, sizeof(why), "%s", reason);
	mp_reader_done(&r);

	if (run_flush_output(run, true) < 0)
		return 0;
	json_auto_t *content = json_pack("{s:I, s:s}", "exitCode", (json_int_t)code, "reason", why);
	if (sig)
		json_object_set_new(content, "signal", json_integer(sig));
	_cleanup_free_ char *content_text = json_dump_compact(content);
	json_t *result = json_pack("{s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT", "toolCallId",
				   run->tool_call_id, "role", "tool", "content",
				   content_text ? content_text : "{}");
	if (run_append(run, result) < 0)
		return 0;

	if (code == 0 && streq(why, "exit")) {
		json_t *fin = json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "RUN_FINISHED",
					"threadId", run->thread_id, "runId", run->run_id, "outcome",
					"type", "success");
		run_finish(run, fin, "completed", json_pack("{s:i}", "exitCode", 0));
		return 0;
	}
	char m[160];
	if (streq(why, "exit"))
		snprintf(m, sizeof(m), "command exited with status %" PRId64, code);
	else if (sig)
		snprintf(m, sizeof(m), "command %s by signal %" PRId64, streq(why, "killed") ? "killed" : "terminated", sig);
	else
		snprintf(m, sizeof(m), "command ended: %s", why);
	json_t *err = json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", m, "code",
				"exit_status");
	run_finish(run, err, "failed",
		   json_pack("{s:I, s:{s:s, s:s}}", "exitCode", (json_int_t)code, "error",
			     "message", m, "code", "exit_status"));
	return 0;
}

static const PeerHandler shim_handlers[_MSG_TYPE_MAX] = {
	[MSG_EXEC_OUTPUT] = shim_exec_output,
	[MSG_EXEC_EXIT] = shim_exec_exit,
};

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
	}
}

static void
shim_closed(Peer *p, int err, void *ud)
{
	Coordinator *c = ud;

	log_warning_errno(err, "Lost the connection to containerd-shim: %m");
	/* Pending ENSURE/START calls already failed with -ECONNRESET (their runs
	 * failed). Executing runs lose their output stream. */
	for (Run *run = c->runs, *next; run; run = next) {
		next = run->next;
		if (run->state == RUN_EXECUTING && run_flush_output(run, true) == 0)
			run_fail(run, "sandbox: containerd-shim connection lost", "sandbox_lost");
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

/* ---------- router requests ---------- */

static void
uuid_v4(char out[RUN_ID_LEN + 1])
{
	unsigned char b[16];
	if (RAND_bytes(b, sizeof(b)) != 1) {
		/* getrandom-backed fallback; RAND_bytes failing is near impossible */
		FILE *f = fopen("/dev/urandom", "re");
		if (!f || fread(b, 1, sizeof(b), f) != sizeof(b))
			abort();
		fclose(f);
	}
	b[6] = (b[6] & 0x0F) | 0x40;
	b[8] = (b[8] & 0x3F) | 0x80;
	snprintf(out, RUN_ID_LEN + 1,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
}

static bool
thread_id_valid(const char *t)
{
	size_t n = strlen(t);
	if (n == 0 || n > THREAD_ID_MAX)
		return false;
	for (const unsigned char *p = (const unsigned char *)t; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

static int
reply_record(Peer *p, uint64_t req_id, const char *key, const json_t *rec)
{
	_cleanup_free_ char *s = json_dump_compact(rec);
	MpWriter w;
	if (!s)
		return -ENOMEM;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, key, s);
	int r = peer_reply(p, req_id, &w);
	mp_writer_done(&w);
	return r;
}

static int
reply_run_id(Peer *p, uint64_t req_id, const char *run_id)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", run_id);
	int r = peer_reply(p, req_id, &w);
	mp_writer_done(&w);
	return r;
}

static int
handle_run_start(Peer *p, const Frame *f, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpReader r;
	const char *thread_id = NULL, *messages = NULL, *metadata = NULL, *idem = NULL;
	char run_id[RUN_ID_LEN + 1];
	json_t *msgs = NULL, *meta = NULL;
	int ret;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "thread_id", &thread_id);
	mp_read_str(&r, "messages", &messages);
	mp_read_str_opt(&r, "metadata", &metadata, NULL);
	mp_read_str_opt(&r, "idempotency_key", &idem, NULL);
	if (r.err < 0) {
		ret = r.err;
		goto out;
	}
	if (!thread_id_valid(thread_id)) {
		peer_reply_error(p, f->req_id, -EINVAL,
				 "threadId must be a non-empty printable string of at most 256 bytes");
		ret = 0;
		goto out;
	}
	msgs = json_loads(messages, 0, NULL);
	if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
		peer_reply_error(p, f->req_id, -EINVAL, "messages must be a non-empty array");
		ret = 0;
		goto out;
	}
	meta = metadata ? json_loads(metadata, 0, NULL) : NULL;
	if (metadata && !json_is_object(meta)) {
		peer_reply_error(p, f->req_id, -EINVAL, "metadata must be an object");
		ret = 0;
		goto out;
	}
	const char *harness = "shell";
	const json_t *h = json_object_get(meta, "harness");
	if (h && (!json_is_string(h) || !streq(json_string_value(h), "shell"))) {
		peer_reply_error(p, f->req_id, -EINVAL, "unknown harness (configured: shell)");
		ret = 0;
		goto out;
	}

	if (idem && *idem) {
		ret = runlog_idem_get(c->runlog, thread_id, idem, run_id);
		if (ret == 0) {
			ret = reply_run_id(p, f->req_id, run_id);
			goto out;
		}
		if (ret != -ENOENT)
			goto out;
	}

	uuid_v4(run_id);
	ret = runlog_create(c->runlog, run_id, thread_id, harness, now_epoch_ms(), NULL);
	if (ret < 0) {
		log_error_errno(ret, "Failed to register a run: %m");
		goto out;
	}
	if (idem && *idem)
		(void)runlog_idem_put(c->runlog, thread_id, idem, run_id);

	Run *run = calloc(1, sizeof(*run));
	if (!run) {
		ret = -ENOMEM;
		goto out;
	}
	run->c = c;
	memcpy(run->run_id, run_id, sizeof(run_id));
	run->thread_id = strdup(thread_id);
	run->log = (LogCtx){ .run_id = run->run_id, .thread_id = run->thread_id };
	run->next = c->runs;
	c->runs = run;
	ret = reply_run_id(p, f->req_id, run_id);
	log_ctx_msgid(LOG_INFO, &run->log, RW_MESSAGE_RUN_STARTED, "Run started (harness %s)",
		      harness);

	json_t *started = json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId",
				    thread_id, "runId", run_id);
	if (!run->thread_id || run_append(run, started) < 0)
		goto out;
	int cr = shell_command_from_messages(msgs, &run->command);
	if (cr < 0) {
		run_fail(run, "shell harness: the last user message has no text to run",
			 "harness_error");
		goto out;
	}
	struct timeval tv;
	run->wait_timer = evtimer_new(c->base, run_wait_timeout, run);
	if (run->wait_timer)
		evtimer_add(run->wait_timer,
			    timeval_from_usec(&tv, (usec_t)c->conf.sandbox_wait_ms * USEC_PER_MSEC));
	run_drive(run);
out:
	json_decref(msgs);
	json_decref(meta);
	mp_reader_done(&r);
	return ret;
}

static int
handle_run_get(Peer *p, const Frame *f, void *ud)
{
	Client *cl = ud;
	MpReader r;
	const char *run_id = NULL, *thread_id = NULL;
	json_t *rec = NULL;
	int ret;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "run_id", &run_id);
	mp_read_str_opt(&r, "thread_id", &thread_id, NULL);
	ret = r.err;
	if (ret == 0)
		ret = runlog_get(cl->c->runlog, run_id, &rec);
	if (ret == 0 && thread_id &&
	    !streq(thread_id, json_string_value(json_object_get(rec, "threadId")) ?: ""))
		ret = -ENOENT; /* do not reveal that the run exists */
	if (ret == 0)
		ret = reply_record(p, f->req_id, "record", rec);
	json_decref(rec);
	mp_reader_done(&r);
	return ret;
}

static int
handle_run_read(Peer *p, const Frame *f, void *ud)
{
	Client *cl = ud;
	MpReader r;
	const char *run_id = NULL, *thread_id = NULL;
	int64_t from = -1;
	uint64_t max = 0;
	json_t *rec = NULL;
	RunLogEvents ev = { 0 };
	int ret;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "run_id", &run_id);
	mp_read_str_opt(&r, "thread_id", &thread_id, NULL);
	mp_read_int(&r, "from_seq", &from);
	mp_read_uint(&r, "max", &max);
	ret = r.err;
	if (ret == 0 && from < -1)
		ret = -EINVAL;
	if (ret == 0) {
		if (max == 0 || max > (uint64_t)cl->c->conf.read_max)
			max = (uint64_t)cl->c->conf.read_max;
		ret = runlog_read(cl->c->runlog, run_id, from, max, &ev, &rec);
	}
	if (ret == 0 && thread_id &&
	    !streq(thread_id, json_string_value(json_object_get(rec, "threadId")) ?: ""))
		ret = -ENOENT;
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
		log_error_errno(ret, "Failed to read run '%s': %m", run_id ? run_id : "?");
	}
	runlog_events_done(&ev);
	json_decref(rec);
	mp_reader_done(&r);
	return ret;
}

static int
handle_watch(Peer *p, const Frame *f, void *ud, bool watch)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpReader r;
	const char *run_id = NULL;
	int ret;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "run_id", &run_id);
	ret = r.err;
	if (ret == 0 && strlen(run_id) != RUN_ID_LEN)
		ret = -ENOENT;
	if (ret == 0 && watch) {
		bool have = false;
		for (Watch *w = c->watches; w; w = w->next)
			if (w->client == cl && streq(w->run_id, run_id))
				have = true;
		if (!have) {
			Watch *w = calloc(1, sizeof(*w));
			if (!w)
				ret = -ENOMEM;
			else {
				memcpy(w->run_id, run_id, RUN_ID_LEN + 1);
				w->client = cl;
				w->next = c->watches;
				c->watches = w;
			}
		}
	} else if (ret == 0) {
		for (Watch **pp = &c->watches; *pp;) {
			if ((*pp)->client == cl && streq((*pp)->run_id, run_id)) {
				Watch *w = *pp;
				*pp = w->next;
				free(w);
			} else
				pp = &(*pp)->next;
		}
	}
	if (ret == 0)
		ret = peer_reply(p, f->req_id, NULL);
	mp_reader_done(&r);
	return ret;
}

static int
handle_run_watch(Peer *p, const Frame *f, void *ud)
{
	return handle_watch(p, f, ud, true);
}

static int
handle_run_unwatch(Peer *p, const Frame *f, void *ud)
{
	return handle_watch(p, f, ud, false);
}

static int
handle_status_get(Peer *p, const Frame *f, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpWriter w;
	size_t n = 0;
	for (Run *run = c->runs; run; run = run->next)
		n++;
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_bool(&w, "shim_connected", peer_is_ready(c->shim));
	mp_w_uint(&w, "active_runs", n);
	int r = peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return r;
}

static const PeerHandler client_handlers[_MSG_TYPE_MAX] = {
	[MSG_RUN_START] = handle_run_start,   [MSG_RUN_GET] = handle_run_get,
	[MSG_RUN_READ] = handle_run_read,     [MSG_RUN_WATCH] = handle_run_watch,
	[MSG_RUN_UNWATCH] = handle_run_unwatch, [MSG_STATUS_GET] = handle_status_get,
};

static void
client_closed(Peer *p, int err, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;

	log_debug("routerd connection closed");
	for (Watch **pp = &c->watches; *pp;) {
		if ((*pp)->client == cl) {
			Watch *w = *pp;
			*pp = w->next;
			free(w);
		} else
			pp = &(*pp)->next;
	}
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

static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	Coordinator *c = arg;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
				log_warning_errno(-errno, "accept failed: %m");
			return;
		}
		uid_t uid;
		if (unix_peer_uid(fd, &uid, NULL) < 0 || (uid != 0 && uid != geteuid())) {
			log_warning("Refusing a connection from uid %u", (unsigned)uid);
			close(fd);
			continue;
		}
		Client *cl = calloc(1, sizeof(*cl));
		if (!cl) {
			close(fd);
			continue;
		}
		cl->c = c;
		if (peer_new(c->base, fd, &client_ops, cl, (size_t)c->conf.shared.max_frame,
			     &cl->peer) < 0) {
			free(cl);
			continue;
		}
		cl->next = c->clients;
		c->clients = cl;
	}
}

/* ---------- start-up and shutdown ---------- */

static void
recover_cb(const char *run_id, json_t *record, void *ud)
{
	Coordinator *c = ud;
	LogCtx lc = { .run_id = run_id,
		      .thread_id = json_string_value(json_object_get(record, "threadId")) };
	const char *m = "coordinator restarted; the run's process was lost";
	_cleanup_free_ char *chunk = NULL;
	json_auto_t *j = json_pack("{s:s, s:s, s:s, s:I}", "type", "RUN_ERROR", "message", m,
				   "code", "sandbox_lost", "timestamp", (json_int_t)now_epoch_ms());
	chunk = json_dump_compact(j);
	json_auto_t *fields = json_pack("{s:{s:s, s:s}}", "error", "message", m, "code",
					"sandbox_lost");
	if (!chunk)
		return;
	int r = runlog_append_finish(c->runlog, run_id, chunk, strlen(chunk), "failed", fields,
				     now_epoch_ms(), NULL, NULL);
	if (r < 0)
		log_ctx_errno(LOG_ERR, r, &lc, "Failed to close a lost run: %m");
	else
		log_ctx(LOG_WARNING, &lc, "Run was active when coordinatord stopped; marked failed");
}

static void
on_term(void *ud)
{
	Coordinator *c = ud;
	c->stopping = true;
	notify_stopping();
	/* drain: whatever output arrived is committed before we go */
	flush_cb(-1, 0, c);
	event_base_loopexit(c->base, NULL);
}

int
coordinator_run(const DaemonArgs *args)
{
	Coordinator c = { .listen_fd = -1, .shim_backoff = SHIM_BACKOFF_MIN };
	char path[4096];
	int r;

	r = daemon_load_config(args, coord_conf_items, coord_conf_n_items, &c.conf);
	if (r < 0)
		goto out;
	log_set_max_level(c.conf.shared.log_level);
	if (args->check_config) {
		if (!args->dump_config)
			log_info("Configuration is valid");
		goto out;
	}

	snprintf(path, sizeof(path), "%s/runlog", c.conf.shared.state_dir);
	RunLogOptions o = { .map_size = (size_t)c.conf.map_size, .sync = c.conf.sync };
	r = runlog_open(path, &o, &c.runlog);
	if (r < 0) {
		log_error_errno(r, "Failed to open the run log in '%s': %m", path);
		goto out;
	}
	r = runlog_foreach_running(c.runlog, recover_cb, &c);
	if (r < 0) {
		log_error_errno(r, "Failed to scan the run log: %m");
		goto out;
	}

	c.base = event_base_new();
	if (!c.base) {
		r = -ENOMEM;
		goto out;
	}
	r = mkdir_p(c.conf.shared.runtime_dir, 0755);
	if (r < 0) {
		log_error_errno(r, "Failed to create '%s': %m", c.conf.shared.runtime_dir);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/%s", c.conf.shared.runtime_dir, RW_SOCK_COORD);
	c.listen_fd = unix_listen(path, 0660);
	if (c.listen_fd < 0) {
		r = log_error_errno(c.listen_fd, "Failed to listen on '%s': %m", path);
		goto out;
	}
	c.listen_ev = event_new(c.base, c.listen_fd, EV_READ | EV_PERSIST, accept_cb, &c);
	c.flush_ev = event_new(c.base, -1, 0, flush_cb, &c);
	c.shim_timer = evtimer_new(c.base, shim_connect_cb, &c);
	if (!c.listen_ev || !c.flush_ev || !c.shim_timer) {
		r = -ENOMEM;
		goto out;
	}
	event_add(c.listen_ev, NULL);
	r = daemon_setup_signals(c.base, on_term, NULL, &c);
	if (r < 0)
		goto out;
	shim_connect_cb(-1, 0, &c);

	notify_ready("serving");
	log_info("coordinatord ready on %s (run log in %s/runlog)", path, c.conf.shared.state_dir);
	event_base_dispatch(c.base);
	log_info("coordinatord stopped");
	r = 0;
out:
	while (c.runs)
		run_free(c.runs);
	while (c.clients) {
		Client *cl = c.clients;
		c.clients = cl->next;
		peer_free(cl->peer);
		free(cl);
	}
	while (c.watches) {
		Watch *w = c.watches;
		c.watches = w->next;
		free(w);
	}
	peer_free(c.shim);
	daemon_teardown_signals();
	if (c.listen_ev)
		event_free(c.listen_ev);
	if (c.flush_ev)
		event_free(c.flush_ev);
	if (c.shim_timer)
		event_free(c.shim_timer);
	safe_close(c.listen_fd);
	if (c.base)
		event_base_free(c.base);
	runlog_free(c.runlog);
	conf_free_strings(coord_conf_items, coord_conf_n_items, &c.conf);
	return r;
}
