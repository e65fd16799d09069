/* SPDX-License-Identifier: MIT */
/*
 * routes-exec.c — the sandbox API's execs (docs/SANDBOX-API.md "Exec",
 * "Processes"): POST /sandboxes/{id}/exec (NDJSON), GET …/exec (WebSocket,
 * full duplex), GET …/processes, POST …/processes/{pid}/kill.
 *
 * An exec's stream (SbxStream) is named by a number of this routerd's
 * (stream_id), sent with SBX_EXEC before coordinatord knows the exec, so
 * its SBX_EXEC_OUTPUT/EXIT pushes find the stream whenever they come. The
 * NDJSON answer is chunked when the request allows keep-alive (the exit line
 * and the last chunk in one write; the connection then serves the client's
 * next request: sse.c), else close-delimited; a blank line every
 * ws_ping_interval_ms is a keepalive.
 *
 * A foreground exec dies with its stream: the connection freed before the
 * exit sends SBX_EXEC_KILL (SIGKILL: its exec cgroup), and so does a reader
 * too slow for ws_max_queue bytes of output (the stream is dropped: nothing
 * is buffered past that), or whose stream the tails' budget drops
 * (tails_max_queued_bytes, all streams together: tail-budget.c). A stream whose link to
 * coordinatord is lost ends with {"type":"error","code":"unavailable"}.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "id-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "sbx-exec-body.h"

typedef struct SbxStream {
	struct SbxStream *next;
	Router *router;
	HttpConn *c;
	uint64_t id;
	char thread_id[THREAD_ID_MAX + 1];
	char tenant[TENANT_NAME_MAX + 1]; /* the token's (SBX_EXEC tenant) */
	uint64_t pid;			  /* 0 until SBX_EXEC was answered */
	bool ws;
	bool started; /* the WebSocket's start body was sent */
	bool background;
	bool ended;	  /* the exit was sent (or the stream failed): nothing to kill */
	char carry[3][4]; /* [1] stdout, [2] stderr: an unfinished UTF-8 sequence */
	size_t carry_len[3];
} SbxStream;

static SbxStream *
sbx_find(Router *r, uint64_t id)
{
	for (SbxStream *s = r->sbx_streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static void
sbx_unlink(SbxStream *s)
{
	for (SbxStream **pp = &s->router->sbx_streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			return;
		}
}

/* Kill the exec of s (by stream: its pid may not be known yet). */
static void
sbx_kill(SbxStream *s, int sig)
{
	if (!coord_ready(s->router))
		return;
	(void)COORD_CALL(s->router, SBX_EXEC_KILL,
			 &((Msg_SBX_EXEC_KILL){.thread_id = s->thread_id,
					       .stream_id = s->id,
					       .has_stream_id = true,
					       .signal = sig}),
			 NULL, NULL);
}

/* Router.on_conn_free, through routes_conn_free. */
void
sbx_conn_free(HttpConn *c)
{
	SbxStream *s = TAKE_PTR(c->sbx);

	if (!s)
		return;
	coord_cancel(s->router, s);
	tail_budget_remove(c);
	c->budget_stream = false;
	if (!s->ended && !s->background && (s->pid || !s->ws || s->started))
		sbx_kill(s, SIGKILL);
	sbx_unlink(s);
	free(s);
}

/* One NDJSON line or WebSocket text message; last: the NDJSON body's last
 * line (with chunked framing, written with the body's end). */
static int
sbx_send_full(SbxStream *s, json_t *j, bool last)
{
	_cleanup_free_ char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	int k;

	json_decref(j);
	if (!text)
		return -ENOMEM;
	k = s->ws  ? ws_send_text(s->c, text, strlen(text))
	    : last ? sse_end_line(s->c, text, strlen(text))
		   : sse_send_line(s->c, text, strlen(text));
	if (k < 0)
		return k;
	size_t pending = http_conn_output_pending(s->c),
	       max = (size_t)s->router->conf->ws_max_queue;
	if (pending > max)
		return -ENOBUFS;
	if (s->c->budget_stream) {
		/* all streams' unsent output together (tails_max_queued_bytes): this
		 * may drop a stream backed up longer, this one included */
		tail_budget_stalled(s->c, pending > max / 2);
		tail_budget_note(s->c);
	}
	return 0;
}

static int
sbx_send(SbxStream *s, json_t *j)
{
	return sbx_send_full(s, j, false);
}

/* End the transport: a WebSocket close with code; the NDJSON body ends (its
 * error, if any, was the last line) with its last chunk or with the
 * connection, or is dropped at once for a reader too slow to flush to
 * (1008). A chunked body's stream is freed here (the connection may carry
 * another exec next): s is gone after it. */
static void
sbx_transport_close(SbxStream *s, uint16_t code, const char *reason)
{
	HttpConn *c = s->c;

	if (s->ws)
		ws_close(c, code, reason);
	else if (code == 1008)
		http_conn_abort(c);
	else {
		if (c->chunked) {
			s->ended = true; /* nothing to kill: its end was sent */
			sbx_conn_free(c);
		}
		sse_close(c, 1000, NULL);
	}
}

/* The end of the stream: after the exit (code 1000), or a failure. */
static void
sbx_close(SbxStream *s, uint16_t code, const char *reason)
{
	if (!s->ended && !s->background)
		sbx_kill(s, SIGKILL);
	s->ended = true;
	sbx_transport_close(s, code, reason);
}

/* Output of one stream as a line: text when it is UTF-8 (an unfinished
 * sequence at the end waits for the next chunk), else dataBase64. */
static int
sbx_output(SbxStream *s, int stream, const char *data, size_t len, bool final)
{
	const char *type = stream == 1 ? "stdout" : "stderr";
	size_t cl = s->carry_len[stream], n, total = cl + len;
	_cleanup_free_ char *buf = malloc(total + 1);

	if (!buf)
		return -ENOMEM;
	memcpy(buf, s->carry[stream], cl);
	if (len)
		memcpy(buf + cl, data, len);
	n = final ? total : utf8_complete_prefix(buf, total);
	if (total - n > sizeof(s->carry[stream]))
		n = total;
	s->carry_len[stream] = total - n;
	memcpy(s->carry[stream], buf + n, total - n);
	if (n == 0)
		return 0;
	if (utf8_valid(buf, n))
		return sbx_send(s, json_pack("{s:s, s:s%}", "type", type, "data", buf, n));
	_cleanup_free_ char *b64 = malloc((n + 2) / 3 * 4 + 1);
	if (!b64)
		return -ENOMEM;
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)buf, (int)n);
	return sbx_send(s, json_pack("{s:s, s:s}", "type", type, "dataBase64", b64));
}

static void
sbx_on_output(Router *r, const Frame *f)
{
	Msg_SBX_EXEC_OUTPUT m = {};
	SbxStream *s;

	if (msg_decode_SBX_EXEC_OUTPUT(f->body, &m) < 0) {
		log_warning("Malformed SBX_EXEC_OUTPUT push, ignoring");
		msg_done_SBX_EXEC_OUTPUT(&m);
		return;
	}
	s = sbx_find(r, m.stream_id);
	if (s && !s->ended && (m.stream == 1 || m.stream == 2)) {
		int k = sbx_output(s, (int)m.stream, m.data, m.data_len, false);
		if (k == -ENOBUFS) {
			log_info("%s: exec reader too slow (over ws_max_queue), ending it",
				 s->c->addr);
			sbx_kill(s, SIGKILL);
			s->ended = true;
			sbx_transport_close(s, 1008, "reader too slow");
		}
	}
	msg_done_SBX_EXEC_OUTPUT(&m);
}

static void
sbx_on_exit(Router *r, const Frame *f)
{
	Msg_SBX_EXEC_EXIT m = {};
	SbxStream *s;

	if (msg_decode_SBX_EXEC_EXIT(f->body, &m) < 0) {
		log_warning("Malformed SBX_EXEC_EXIT push, ignoring");
		msg_done_SBX_EXEC_EXIT(&m);
		return;
	}
	s = sbx_find(r, m.stream_id);
	if (s && !s->ended) {
		(void)sbx_output(s, 1, NULL, 0, true);
		(void)sbx_output(s, 2, NULL, 0, true);
		json_t *sig = m.has_signal && m.signal > 0 ? json_integer(m.signal) : json_null();
		(void)sbx_send_full(s,
				    json_pack("{s:s, s:I, s:o, s:s}", "type", "exit", "exitCode",
					      (json_int_t)m.exit_code, "signal", sig, "reason",
					      m.reason),
				    true);
		s->ended = true;
		sbx_close(s, 1000, NULL);
	}
	msg_done_SBX_EXEC_EXIT(&m);
}

static void
sbx_push(Router *r, int type, const Frame *f)
{
	if (type == MSG_SBX_EXEC_OUTPUT)
		sbx_on_output(r, f);
	else if (type == MSG_SBX_EXEC_EXIT)
		sbx_on_exit(r, f);
}

static void
sbx_lost(Router *r)
{
	for (SbxStream *s = r->sbx_streams, *next; s; s = next) {
		next = s->next;
		if (s->ended)
			continue;
		s->ended = true; /* coordinatord killed its foreground execs */
		(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
					    "unavailable", "error", "coordinator unavailable"));
		sbx_transport_close(s, 1011, "coordinator unavailable");
	}
}

void
routes_sandbox_attach(Router *r)
{
	r->sbx_push = sbx_push;
	r->sbx_lost = sbx_lost;
}

static SbxStream *
sbx_stream_new(HttpConn *c, const char *thread_id, bool ws)
{
	SbxStream *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->router = c->router;
	s->c = c;
	s->ws = ws;
	s->id = ++c->router->sbx_next_stream;
	snprintf(s->thread_id, sizeof(s->thread_id), "%s", thread_id);
	snprintf(s->tenant, sizeof(s->tenant), "%s", router_token_tenant(c->req.token));
	s->next = c->router->sbx_streams;
	c->router->sbx_streams = s;
	c->sbx = s;
	return s;
}

/* ---- POST /sandboxes/{id}/exec ---- */

static void
exec_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	SbxStream *s = userdata;
	HttpConn *c = s->c;
	Reply_SBX_EXEC rep = {};
	int k = err < 0 ? err : reply_decode_SBX_EXEC(body, &rep);

	reply_done_SBX_EXEC(&rep);
	if (k < 0 && s->ws) {
		char buf[PEER_REASON_MAX];
		const char *reason = body ? peer_error_reason(body, buf) : NULL;
		s->ended = true;
		(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
					    reason ? reason : "failed", "error",
					    "the exec could not be started"));
		ws_close(c, 1011, "exec not started");
		return;
	}
	if (k < 0) {
		s->ended = true;
		c->sbx = NULL;
		sbx_unlink(s);
		free(s);
		routes_coord_error(c, err < 0 ? err : -EIO, body, "no such sandbox");
		return;
	}
	s->pid = rep.pid;
	if (s->background && !s->ws) {
		json_auto_t *j = json_pack("{s:I}", "pid", (json_int_t)s->pid);
		c->sbx = NULL;
		sbx_unlink(s);
		free(s);
		http_respond_json(c, 202, j);
		return;
	}
	if (!s->ws) {
		c->ndjson = true;
		/* keep-alive: chunked (the request is reset by sse_accept) */
		c->chunked = c->req.keep_alive && c->req.http_minor >= 1 && !c->router->stopping;
		if (sse_accept(c) < 0) {
			sbx_kill(s, SIGKILL);
			s->ended = true;
			http_conn_abort(c);
			return;
		}
	}
	c->budget_stream = true; /* its output counts with the tails' (tail-budget.c) */
	tail_budget_add(c);
	if (sbx_send(s, json_pack("{s:s, s:I}", "type", "started", "pid", (json_int_t)s->pid)) < 0)
		sbx_close(s, 1011, "write failed");
}

/* SBX_EXEC for s from a checked body. 0 or negative errno. */
static int
exec_call(SbxStream *s, const SbxExecReq *q)
{
	return COORD_CALL(s->router, SBX_EXEC,
			  &((Msg_SBX_EXEC){
			      .thread_id = s->thread_id,
			      .stream_id = s->id,
			      .argv = q->argv,
			      .command = q->command,
			      .env = q->env,
			      .cwd = q->cwd,
			      .stdin = q->stdin_data,
			      .stdin_len = q->stdin_len,
			      .has_stdin = q->has_stdin,
			      .stdin_open = true,
			      .has_stdin_open = s->ws,
			      .timeout_ms = q->timeout_ms,
			      .has_timeout_ms = q->timeout_ms > 0,
			      .background = q->background,
			      .has_background = q->background,
			      .tenant = s->tenant,
			  }),
			  exec_reply, s);
}

static void
route_sbx_exec_post(HttpConn *c, Route *rt)
{
	_cleanup_(sbx_exec_req_done) SbxExecReq q = {};
	const char *why = NULL;
	SbxStream *s;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	json_auto_t *body = routes_json_request(c);
	if (!body)
		return;
	int k = sbx_exec_req_parse(body, true, &q, &why);
	if (k < 0) {
		http_respond_error(c, k == -ENOMEM ? 500 : 400,
				   k == -ENOMEM ? "internal" : "bad_request", why);
		return;
	}
	if (!coord_ready(c->router)) {
		routes_unavailable(c);
		return;
	}
	s = sbx_stream_new(c, rt->seg[1], false);
	if (!s) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	s->background = q.background;
	if (exec_call(s, &q) < 0) {
		s->ended = true;
		sbx_conn_free(c);
		routes_unavailable(c);
	}
}

/* ---- GET /sandboxes/{id}/exec: the WebSocket ---- */

static void sbx_ws_message(HttpConn *c, bool binary, const uint8_t *data, size_t len);

/* The exec socket's client messages: its start body, stdin, eof, kill. */
static const WsAppOps sbx_ws_app = {.on_message = sbx_ws_message};

static void
route_sbx_exec_ws(HttpConn *c, Route *rt)
{
	const char *msg;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	if (!http_header(c, "Upgrade")) {
		http_respond_error(c, 426, "upgrade_required",
				   "GET …/exec is a WebSocket; POST runs an exec with NDJSON");
		return;
	}
	if (ws_check_handshake(c, &msg) < 0) {
		http_respond_error_close(c, 400, "bad_request", msg);
		return;
	}
	if (!coord_ready(c->router)) {
		routes_unavailable(c);
		return;
	}
	if (!sbx_stream_new(c, rt->seg[1], true)) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	c->ws_app = &sbx_ws_app;
	if (ws_accept(c) < 0) {
		http_conn_abort(c);
		return;
	}
	ws_on_read(c);
}

static void
sbx_ws_start(SbxStream *s, const uint8_t *data, size_t len)
{
	_cleanup_(sbx_exec_req_done) SbxExecReq q = {};
	json_auto_t *body = json_loadb((const char *)data, len, 0, NULL);
	const char *why = "the first message must be the start body (JSON)";

	if (!body || sbx_exec_req_parse(body, false, &q, &why) < 0) {
		s->ended = true;
		(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
					    "bad_request", "error", why));
		ws_close(s->c, 1008, "bad start body");
		return;
	}
	s->started = true;
	s->background = q.background;
	if (exec_call(s, &q) < 0) {
		s->ended = true;
		ws_close(s->c, 1011, "coordinator unavailable");
	}
}

/* A refused SBX_EXEC_INPUT (over exec_stdin_max, the exec gone) is told to
 * the client as an error message; the exec goes on (its stdin stays open). */
static void
input_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	SbxStream *s = userdata;
	char buf[PEER_REASON_MAX];
	const char *reason = err < 0 && body ? peer_error_reason(body, buf) : NULL;

	if (err >= 0 || s->ended)
		return;
	(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
				    reason ? reason : "unavailable", "error",
				    reason && streq(reason, "stdin_too_large")
					? "stdin is over execStdinMaxBytes: dropped"
					: "stdin could not be delivered"));
}

static void
sbx_input(SbxStream *s, const void *data, size_t len, bool eof)
{
	(void)COORD_CALL(s->router, SBX_EXEC_INPUT,
			 &((Msg_SBX_EXEC_INPUT){.thread_id = s->thread_id,
						.stream_id = s->id,
						.data = data,
						.data_len = len,
						.has_data = len > 0,
						.eof = eof,
						.has_eof = eof}),
			 input_reply, s);
}

/* A text message after the start: {"type":"stdin"|"eof"|"kill"}. */
static void
sbx_ws_control(SbxStream *s, const uint8_t *data, size_t len)
{
	json_auto_t *j = json_loadb((const char *)data, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	json_t *v;

	if (!type) {
		(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
					    "bad_request", "error", "a message needs a type"));
		return;
	}
	if (streq(type, "stdin") && json_is_string(v = json_object_get(j, "data")))
		sbx_input(s, json_string_value(v), json_string_length(v), false);
	else if (streq(type, "eof"))
		sbx_input(s, NULL, 0, true);
	else if (streq(type, "kill")) {
		char num[24];
		v = json_object_get(j, "signal");
		if (json_is_integer(v))
			snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		int sig = sbx_signal_parse(json_is_integer(v) ? num : json_string_value(v));
		if (sig < 0)
			(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
						    "bad_request", "error", "unknown signal"));
		else
			sbx_kill(s, sig);
	} else
		(void)sbx_send(s, json_pack("{s:s, s:s, s:s}", "type", "error", "code",
					    "bad_request", "error", "unknown message type"));
}

static void
sbx_ws_message(HttpConn *c, bool binary, const uint8_t *data, size_t len)
{
	SbxStream *s = c->sbx;

	if (!s || s->ended)
		return;
	if (!s->started) {
		if (binary) {
			s->ended = true;
			ws_close(c, 1008, "the first message must be the start body");
		} else
			sbx_ws_start(s, data, len);
		return;
	}
	if (binary)
		sbx_input(s, data, len, false);
	else
		sbx_ws_control(s, data, len);
}

void
route_sbx_exec(HttpConn *c, Route *rt)
{
	if (c->req.method == HTTP_POST)
		route_sbx_exec_post(c, rt);
	else
		route_sbx_exec_ws(c, rt);
}

/* ---- GET /sandboxes/{id}/processes ---- */

static void
list_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_SBX_EXEC_LIST) Reply_SBX_EXEC_LIST rep = {};

	if (err < 0) {
		routes_coord_error(c, err, body, "no such sandbox");
		return;
	}
	if (reply_decode_SBX_EXEC_LIST(body, &rep) < 0) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	json_auto_t *list = json_loads(rep.processes, 0, NULL);
	json_auto_t *j = json_pack("{s:O}", "processes", list ? list : json_array());
	if (!j) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond_json(c, 200, j);
}

void
route_sbx_processes(HttpConn *c, Route *rt)
{
	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	if (COORD_CALL(c->router, SBX_EXEC_LIST, &((Msg_SBX_EXEC_LIST){.thread_id = rt->seg[1]}),
		       list_reply, c) < 0)
		routes_unavailable(c);
}

/* ---- POST /sandboxes/{id}/processes/{pid}/kill ---- */

static void
kill_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		routes_coord_error(c, err, body, "no such process");
		return;
	}
	http_respond(c, 200, "application/json; charset=utf-8", "{}", 2, NULL, false);
}

void
route_sbx_kill(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *sig_s = NULL;
	char *end;
	int sig;

	if (!routes_path_thread_id(c, rt->seg[1]) || !routes_json_content_type(c, true))
		return;
	errno = 0;
	unsigned long long pid = strtoull(rt->seg[3], &end, 10);
	if (!*rt->seg[3] || *end || errno || pid == 0) {
		http_respond_error(c, 404, "process_not_found", "no such process");
		return;
	}
	if (route_query(rt, "signal", &sig_s) < 0 || (sig = sbx_signal_parse(sig_s)) < 0) {
		http_respond_error(c, 400, "bad_request", "unknown signal");
		return;
	}
	if (COORD_CALL(c->router, SBX_EXEC_KILL,
		       &((Msg_SBX_EXEC_KILL){
			   .thread_id = rt->seg[1], .pid = pid, .has_pid = true, .signal = sig}),
		       kill_reply, c) < 0)
		routes_unavailable(c);
}

/* ---- GET /sandboxes/{id}/processes/{pid}/output ---- */

/* A stream's bytes into j: "<name>" when UTF-8, else "<name>Base64". */
static int
output_field(json_t *j, const char *name, const void *data, size_t len)
{
	char key[32];

	if (utf8_valid(data, len))
		return json_object_set_new(j, name, json_stringn(data ? data : "", len));
	_cleanup_free_ char *b64 = malloc((len + 2) / 3 * 4 + 1);
	if (!b64)
		return -1;
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)data, (int)len);
	snprintf(key, sizeof(key), "%sBase64", name);
	return json_object_set_new(j, key, json_string(b64));
}

static void
read_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_SBX_EXEC_READ) Reply_SBX_EXEC_READ rep = {};

	if (err < 0) {
		routes_coord_error(c, err, body, "no such process");
		return;
	}
	if (reply_decode_SBX_EXEC_READ(body, &rep) < 0) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	json_auto_t *j =
	    json_pack("{s:I, s:I, s:I, s:I, s:b}", "stdoutOffset", (json_int_t)rep.out_off,
		      "stderrOffset", (json_int_t)rep.err_off, "stdoutEnd", (json_int_t)rep.out_end,
		      "stderrEnd", (json_int_t)rep.err_end, "running", rep.running);
	if (!j || output_field(j, "stdout", rep.out, rep.out_len) < 0 ||
	    output_field(j, "stderr", rep.err, rep.err_len) < 0 ||
	    (rep.has_exit_code &&
	     json_object_set_new(j, "exitCode", json_integer(rep.exit_code)) < 0) ||
	    (rep.reason && json_object_set_new(j, "reason", json_string(rep.reason)) < 0)) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond_json(c, 200, j);
}

/* ?stdoutOffset=N&stderrOffset=M: the byte offsets the client has. */
static int
query_offset(Route *rt, const char *name, uint64_t *ret, bool *ret_has)
{
	_cleanup_free_ char *v = NULL;
	char *end;

	*ret_has = false;
	if (route_query(rt, name, &v) < 0)
		return -EINVAL;
	if (!v)
		return 0;
	errno = 0;
	*ret = strtoull(v, &end, 10);
	if (!*v || *end || errno || v[0] == '-')
		return -EINVAL;
	*ret_has = true;
	return 0;
}

void
route_sbx_output(HttpConn *c, Route *rt)
{
	Msg_SBX_EXEC_READ m = {.thread_id = rt->seg[1]};
	char *end;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	errno = 0;
	m.pid = strtoull(rt->seg[3], &end, 10);
	if (!*rt->seg[3] || *end || errno || m.pid == 0) {
		http_respond_error(c, 404, "process_not_found", "no such process");
		return;
	}
	if (query_offset(rt, "stdoutOffset", &m.out_off, &m.has_out_off) < 0 ||
	    query_offset(rt, "stderrOffset", &m.err_off, &m.has_err_off) < 0) {
		http_respond_error(c, 400, "bad_request",
				   "stdoutOffset and stderrOffset are byte offsets (0 or more)");
		return;
	}
	if (COORD_CALL(c->router, SBX_EXEC_READ, &m, read_reply, c) < 0)
		routes_unavailable(c);
}
