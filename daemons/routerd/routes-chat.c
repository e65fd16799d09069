/* SPDX-License-Identifier: MIT */
/*
 * routes-chat.c — /chat, the AG-UI endpoint the stock connection adapters of
 * @tanstack/ai-client talk to with no code of the user's (docs/GUIDE.md,
 * "Use it from TanStack AI"):
 *
 *   POST /chat                 a RunAgentInput body → 200 text/event-stream,
 *                              `id: <seq>` + `data: <the bare chunk>` per event,
 *                              closed after the terminal chunk (whatever Accept
 *                              says); ?format=ndjson → {"id":"<seq>","chunk":…}
 *                              lines (fetchHttpStream)
 *   GET  /chat?runId=&offset=  join a run (joinRun, a second tab, a resume);
 *                              Last-Event-ID may stand for offset
 *   GET  /chat?threadId=       hydrate: {messages, activeRun, interrupts:null}
 *   GET  /chat (Upgrade)       the conversation socket of webSocket():
 *                              RunAgentInput frames in, {id,chunk} frames out,
 *                              {type:"ping"} keepalives, {type:"abort",runId}
 *                              cancels; with ?offset= it is a join/resume socket
 *
 * The client's run id (X-Run-Id, else the body's runId) is registered as an
 * alias of the run in the run's own transaction (RUN_START client_run_id): a
 * re-POST of the same body — the stock engine's retry after a drop, with
 * Last-Event-ID — finds the same run and resumes it strictly after that seq;
 * it never starts a second one. The harness and sessionId come from
 * forwardedProps.metadata (or forwardedProps.harness / .sessionId).
 *
 * Streaming reuses the tail (tail.c) in its chat mode; every check of the
 * other routes (Host, Origin, CORS, bearer token, thread scope, the token's
 * harnesses, body limits) applies unchanged.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <wslay/wslay.h>

#include "id-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

typedef enum ChatMode {
	CHAT_SSE,
	CHAT_NDJSON,
	CHAT_WS,      /* a join/resume socket: closed after the run */
	CHAT_WS_CONV, /* the conversation socket: stays open */
} ChatMode;

/* What a /chat request keeps while its coordinator call is in flight. */
typedef struct ChatStart {
	char *thread_id; /* NULL for a join by run id alone */
	int64_t last_seq;
	ChatMode mode;
	bool abort; /* the conversation socket's abort came before RUN_START's reply */
} ChatStart;

void
chat_start_free(HttpConn *c)
{
	if (c->chat_start) {
		free(c->chat_start->thread_id);
		free(c->chat_start);
		c->chat_start = NULL;
	}
}

static int
chat_set_start(HttpConn *c, const char *thread_id, int64_t last_seq, ChatMode mode)
{
	ChatStart *s = calloc(1, sizeof(*s));
	if (!s || (thread_id && !(s->thread_id = strdup(thread_id)))) {
		free(s);
		return -ENOMEM;
	}
	s->last_seq = last_seq;
	s->mode = mode;
	chat_start_free(c);
	c->chat_start = s;
	return 0;
}

/* ---- errors on a conversation socket ---- */

/* A refused frame on the conversation socket: a bare RUN_ERROR chunk the
 * stock client shows. Inside wslay's receive (flush false) it is only queued; the
 * receive loop sends it. */
static void
chat_ws_error(HttpConn *c, const char *thread_id, const char *run_id, const char *code,
	      const char *message, bool flush)
{
	json_auto_t *j =
	    /* a bare chunk: it has no seq (nothing was logged), and the stock
	     * client takes a frame without the {id, chunk} envelope as the chunk */
	    json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "RUN_ERROR", "threadId", thread_id ?: "",
		      "runId", run_id ?: "", "message", message, "code", code);
	_cleanup_free_ char *s = j ? json_dump_compact(j) : NULL;
	struct wslay_event_msg m;

	if (!s || c->state != CONN_WS || c->ws_close_queued)
		return;
	if (flush) {
		(void)ws_send_text(c, s, strlen(s));
		return;
	}
	m = (struct wslay_event_msg){
	    .opcode = WSLAY_TEXT_FRAME, .msg = (const uint8_t *)s, .msg_length = strlen(s)};
	(void)wslay_event_queue_msg(c->ws, &m);
}

static void chat_cancel(HttpConn *c, const char *run_id, const char *thread_id);

/* ---- starting the tail ---- */

static void
chat_tail_start(HttpConn *c, const char *run_id, const char *thread_id, int64_t last_seq,
		ChatMode mode, const char *record)
{
	/* SSE: the bare chunk with its seq as id; NDJSON and the WebSocket: the
	 * stock clients' durable envelope {"id":"<seq>","chunk":…} */
	const TailSink *sink = mode == CHAT_SSE	     ? &sse_chat_tail_sink
			       : mode == CHAT_NDJSON ? &ndjson_tail_sink
						     : &ws_tail_sink;
	int r = 0;

	if (mode == CHAT_SSE || mode == CHAT_NDJSON) {
		c->ndjson = mode == CHAT_NDJSON;
		r = sse_accept(c);
	} else if (mode == CHAT_WS) {
		r = ws_accept(c);
	} else if (c->tail) {
		/* the conversation's previous run: its tail is done with */
		c->tail = tail_free(c->tail);
	}
	if (r < 0) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	r = tail_new(c, sink, mode == CHAT_SSE ? TAIL_BARE : TAIL_ID, run_id, thread_id, last_seq,
		     record, &c->tail);
	if (r < 0) {
		sink->close(c, 1011,
			    r == -ECONNRESET ? "coordinator unavailable" : "internal error");
		return;
	}
	c->tail->keep_open = mode == CHAT_WS_CONV;
	tail_pump(c->tail);
}

/* ---- POST /chat and RunAgentInput frames ---- */

static void
chat_run_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	ChatStart *s = TAKE_PTR(c->chat_start);
	const char *run_id = NULL;
	MpReader mr;

	if (!s) {
		if (c->state == CONN_HTTP)
			http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	if (err >= 0) {
		mp_reader_init(&mr, body);
		mp_read_str(&mr, "run_id", &run_id);
		if (mr.err < 0)
			err = -EBADMSG;
	}
	if (err < 0) {
		if (s->mode == CHAT_WS_CONV) {
			size_t ml = 0;
			const char *m = err == -EBADMSG ? NULL : coord_error_message(body, &ml);
			char msg[256];
			snprintf(msg, sizeof(msg), "%.*s", (int)(m ? ml : 0),
				 m ? m : "the run could not be started");
			chat_ws_error(c, s->thread_id, NULL,
				      err == -EPERM ? "harness_forbidden" : "run_refused", msg,
				      true);
		} else if (err == -EBADMSG) {
			http_respond_error(c, 500, "internal", "internal error");
		} else
			routes_coord_error(c, err, body, "not found");
		if (err == -EBADMSG)
			mp_reader_done(&mr);
		free(s->thread_id);
		free(s);
		return;
	}
	LogCtx lc = {.run_id = run_id, .thread_id = s->thread_id};
	log_ctx(LOG_INFO, &lc, "Chat run accepted from %s", c->addr);
	chat_tail_start(c, run_id, s->thread_id, s->last_seq, s->mode, NULL);
	if (s->abort && c->state == CONN_WS)
		chat_cancel(c, run_id, s->thread_id);
	mp_reader_done(&mr);
	free(s->thread_id);
	free(s);
}

/* The run's metadata: forwardedProps.metadata, plus forwardedProps.harness
 * and .sessionId when the metadata does not name them. NULL when none. */
static json_t *
chat_metadata(json_t *fp)
{
	json_t *meta = json_object_get(fp, "metadata");
	json_t *out = json_is_object(meta) ? json_deep_copy(meta) : json_object();
	const char *keys[] = {"harness", "sessionId"};

	if (!out)
		return NULL;
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		json_t *v = json_object_get(fp, keys[i]);
		if (v && !json_object_get(out, keys[i]))
			json_object_set(out, keys[i], v);
	}
	return out;
}

/* The checks on a RunAgentInput; NULL when valid. */
static const char *
chat_body_problem(json_t *body, const char *header_run_id, char *buf, size_t bufsz)
{
	json_t *tid, *rid, *msgs, *m, *fp;
	size_t i;

	if (!json_is_object(body))
		return "body must be a JSON object (an AG-UI RunAgentInput)";
	tid = json_object_get(body, "threadId");
	if (!json_is_string(tid) || strlen(json_string_value(tid)) != json_string_length(tid))
		return "threadId must be a non-empty string";
	const char *why = thread_id_problem(json_string_value(tid));
	if (why)
		return why;
	rid = json_object_get(body, "runId");
	if (rid &&
	    (!json_is_string(rid) || strlen(json_string_value(rid)) != json_string_length(rid) ||
	     !client_run_id_valid(json_string_value(rid))))
		return "runId must be 1 to 128 printable bytes";
	if (header_run_id && !client_run_id_valid(header_run_id))
		return "X-Run-Id must be 1 to 128 printable bytes";
	if (header_run_id && rid && !streq(header_run_id, json_string_value(rid)))
		return "X-Run-Id and the body's runId differ";
	if (!header_run_id && !rid)
		return "runId is required (the body's runId or X-Run-Id)";
	msgs = json_object_get(body, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return "messages must be a non-empty array";
	json_array_foreach(msgs, i, m)
	{
		if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
			snprintf(buf, bufsz, "messages[%zu] must be an object with a string role",
				 i);
			return buf;
		}
	}
	fp = json_object_get(body, "forwardedProps");
	if (fp && !json_is_null(fp) && !json_is_object(fp))
		return "forwardedProps must be an object";
	if (json_object_get(fp, "metadata") && !json_is_object(json_object_get(fp, "metadata")))
		return "forwardedProps.metadata must be an object";
	return NULL;
}

/* Validate body and send RUN_START; the reply starts the tail in mode. On a
 * refusal: an HTTP error (POST) or a RUN_ERROR frame (conversation socket). */
static void
chat_start_run(HttpConn *c, json_t *body, const char *header_run_id, int64_t last_seq,
	       ChatMode mode)
{
	_cleanup_free_ char *msgs = NULL, *meta = NULL, *input = NULL;
	json_auto_t *meta_j = NULL, *in = NULL;
	char buf[128];
	bool ws = mode == CHAT_WS_CONV;
	int r;

	const char *why = chat_body_problem(body, header_run_id, buf, sizeof(buf));
	const char *thread_id = json_string_value(json_object_get(body, "threadId"));
	const char *run_id = header_run_id ?: json_string_value(json_object_get(body, "runId"));
	if (why) {
		if (ws)
			chat_ws_error(c, thread_id, run_id, routes_problem_code(why), why, false);
		else
			http_respond_error(c, 400, routes_problem_code(why), why);
		return;
	}
	const RouterToken *token = ws ? c->chat_token : c->req.token;
	if (!router_token_allows_thread(token, thread_id)) {
		if (ws)
			chat_ws_error(c, thread_id, run_id, "thread_forbidden",
				      "this token may not use this thread", false);
		else
			http_respond_error(c, 403, "thread_forbidden",
					   "this token may not use this thread");
		return;
	}
	if (ws && tenant_rate_take(c->router, token)) { /* POST /chat: at dispatch */
		chat_ws_error(c, thread_id, run_id, "tenant_rate_limited",
			      "this tenant's requests are over tenant_rate_per_second", false);
		return;
	}
	if (!coord_ready(c->router)) {
		if (ws)
			chat_ws_error(c, thread_id, run_id, "unavailable",
				      "coordinator unavailable", false);
		else
			http_respond_error(c, 503, "unavailable", "coordinator unavailable");
		return;
	}
	/* the run's input, stored with it for the hydrate: the user messages
	 * after the last message of another role (what this turn adds) */
	json_t *all = json_object_get(body, "messages");
	size_t first = json_array_size(all);
	while (first > 0 &&
	       streq(json_string_value(json_object_get(json_array_get(all, first - 1), "role")),
		     "user"))
		first--;
	in = json_array();
	for (size_t i = first; in && i < json_array_size(all); i++)
		json_array_append(in, json_array_get(all, i));
	meta_j = chat_metadata(json_object_get(body, "forwardedProps"));
	msgs = json_dump_compact(all);
	meta = meta_j ? json_dump_compact(meta_j) : NULL;
	input = in ? json_dump_compact(in) : NULL;
	if (!msgs || !meta || !input || chat_set_start(c, thread_id, last_seq, mode) < 0) {
		if (ws)
			chat_ws_error(c, thread_id, run_id, "internal", "out of memory", false);
		else
			http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	char *const *harnesses = token ? token->harnesses : NULL;
	r = COORD_CALL(c->router, RUN_START,
		       &((Msg_RUN_START){
			   .thread_id = thread_id,
			   .messages = msgs,
			   .metadata = meta,
			   .harnesses = harnesses,
			   .client_run_id = run_id,
			   .input = input,
			   .tenant = router_token_tenant(token),
		       }),
		       chat_run_reply, c);
	if (r < 0) {
		chat_start_free(c);
		if (ws)
			chat_ws_error(c, thread_id, run_id, "unavailable",
				      "coordinator unavailable", false);
		else
			http_respond_error(c, 503, "unavailable", "coordinator unavailable");
	}
}

static void
chat_post(HttpConn *c, const char *query)
{
	_cleanup_free_ char *format = NULL;
	const char *leid = http_header(c, "Last-Event-ID");
	int64_t last_seq = -1;

	if (routes_query(query, "format", &format) < 0 ||
	    (format && !streq(format, "ndjson") && !streq(format, "sse"))) {
		http_respond_error(c, 400, "bad_request", "format must be sse or ndjson");
		return;
	}
	/* the stock engine's retry after a drop: resume strictly after it */
	if (leid && *leid && !routes_parse_last_seq(leid, &last_seq)) {
		http_respond_error(c, 400, "bad_request", "Last-Event-ID must be an integer >= -1");
		return;
	}
	json_auto_t *body = routes_json_request(c);
	if (!body)
		return;
	chat_start_run(c, body, http_header(c, "X-Run-Id"), last_seq,
		       format && streq(format, "ndjson") ? CHAT_NDJSON : CHAT_SSE);
}

/* ---- GET /chat?runId=&offset=: a join ---- */

static void
chat_join_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	ChatStart *s = TAKE_PTR(c->chat_start);
	const msgpack_object *rec = body ? mp_map_get(body, "record") : NULL;
	_cleanup_free_ char *rec_text = NULL;
	json_auto_t *j = NULL;

	if (routes_run_get_answered(c, s, err, body)) {
		if (!s)
			return;
		goto out;
	}
	if (rec && rec->type == MSGPACK_OBJECT_STR && (rec_text = mp_obj_strdup(rec)))
		j = json_loads(rec_text, 0, NULL);
	const char *run_id = json_string_value(json_object_get(j, "runId"));
	const char *thread_id = json_string_value(json_object_get(j, "threadId"));
	if (!run_id || !thread_id) {
		http_respond_error(c, 500, "internal", "internal error");
		goto out;
	}
	/* a join by run id alone: the token's thread scope is checked on the
	 * run's own thread, and a run out of it does not exist for this token */
	if (!router_token_allows_thread(c->req.token, thread_id)) {
		http_respond_error(c, 404, "not_found", "unknown run");
		goto out;
	}
	chat_tail_start(c, run_id, thread_id, s->last_seq, s->mode, rec_text);
out:
	free(s->thread_id);
	free(s);
}

static void
chat_join(HttpConn *c, const char *query, const char *run_id, const char *thread_id,
	  const char *offset, bool upgrade)
{
	const char *leid = http_header(c, "Last-Event-ID");
	const char *msg;
	int64_t last_seq = -1;
	int r;

	if (!offset && !(leid && *leid)) {
		http_respond_error(
		    c, 400, "bad_request",
		    "offset is required: -1 for the whole run, or the last seq seen");
		return;
	}
	if ((offset && !routes_parse_last_seq(offset, &last_seq)) ||
	    (!offset && !routes_parse_last_seq(leid, &last_seq))) {
		http_respond_error(c, 400, "bad_request",
				   "offset (or Last-Event-ID) must be an integer >= -1");
		return;
	}
	/* the stock engine's reconnect: Last-Event-ID is newer than the URL's */
	if (leid && *leid && !routes_parse_last_seq(leid, &last_seq)) {
		http_respond_error(c, 400, "bad_request", "Last-Event-ID must be an integer >= -1");
		return;
	}
	if (upgrade && ws_check_handshake(c, &msg) < 0) {
		http_respond_error_close(c, 400, "bad_request", msg);
		return;
	}
	if (!client_run_id_valid(run_id)) {
		http_respond_error(c, 404, "not_found", "unknown run");
		return;
	}
	if (thread_id) {
		const char *why = thread_id_problem(thread_id);
		if (why) {
			http_respond_error(c, 400, "invalid_thread_id", why);
			return;
		}
		if (!routes_thread_allowed(c, thread_id))
			return;
	}
	_cleanup_free_ char *format = NULL;
	if (routes_query(query, "format", &format) < 0 ||
	    (format && !streq(format, "ndjson") && !streq(format, "sse"))) {
		http_respond_error(c, 400, "bad_request", "format must be sse or ndjson");
		return;
	}
	ChatMode mode = upgrade				    ? CHAT_WS
			: format && streq(format, "ndjson") ? CHAT_NDJSON
							    : CHAT_SSE;
	if (chat_set_start(c, thread_id, last_seq, mode) < 0) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	r = COORD_CALL(
	    c->router, RUN_GET,
	    &((Msg_RUN_GET){.run_id = run_id,
			    .thread_id = thread_id,
			    .any_thread = true,
			    .has_any_thread = !thread_id,
			    /* a join by id alone looks in the token's
			     * threads only (a client run id is per
			     * thread: another tenant's is not seen) */
			    .scope = !thread_id && c->req.token ? c->req.token->threads : NULL}),
	    chat_join_reply, c);
	if (r < 0) {
		chat_start_free(c);
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
	}
}

/* ---- GET /chat?threadId=: the hydrate ---- */

static void
chat_hydrate_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *b = body ? mp_map_get(body, "body") : NULL;

	if (err == -EFBIG && !routes_coord_reason(c, body)) {
		http_respond_error(c, 413, "too_large",
				   "the thread's messages exceed coordinatord.read_max_bytes");
		return;
	}
	if (err < 0) {
		routes_coord_error(c, err, body, "unknown thread");
		return;
	}
	if (!b || b->type != MSGPACK_OBJECT_STR) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond(c, 200, "application/json; charset=utf-8", b->via.str.ptr, b->via.str.size,
		     "Cache-Control: no-store\r\n", false);
}

static void
chat_hydrate(HttpConn *c, const char *thread_id)
{
	const char *why = thread_id_problem(thread_id);
	int r;

	if (why) {
		http_respond_error(c, 400, "invalid_thread_id", why);
		return;
	}
	if (!routes_thread_allowed(c, thread_id))
		return;
	r = COORD_CALL(c->router, CHAT_HYDRATE, &((Msg_CHAT_HYDRATE){.thread_id = thread_id}),
		       chat_hydrate_reply, c);
	if (r < 0)
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
}

/* ---- the conversation WebSocket ---- */

static void
chat_cancel_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	if (err < 0)
		log_debug("%s: /chat abort refused: %d", c->addr, err);
}

static void
chat_cancel(HttpConn *c, const char *run_id, const char *thread_id)
{
	if (COORD_CALL(c->router, RUN_CANCEL,
		       &((Msg_RUN_CANCEL){.run_id = run_id, .thread_id = thread_id}),
		       chat_cancel_reply, c) < 0)
		log_debug("%s: /chat abort: coordinator unavailable", c->addr);
}

static void
chat_ws_message(HttpConn *c, const char *text, size_t len)
{
	json_auto_t *j = json_loadb(text, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));

	if (!json_is_object(j)) {
		chat_ws_error(c, NULL, NULL, "invalid_json", "a frame must be a JSON object",
			      false);
		return;
	}
	if (type && streq(type, "ping"))
		return;
	if (type && streq(type, "abort")) {
		/* the stock Stop: cancel the run of this socket (by the client's id
		 * or ours, within the tail's thread) */
		const char *rid = json_string_value(json_object_get(j, "runId"));
		if (c->chat_start) {
			/* Stop right after send: cancel once the run exists */
			c->chat_start->abort = true;
			return;
		}
		if (c->tail && c->tail->thread_id && rid && client_run_id_valid(rid))
			chat_cancel(c, rid, c->tail->thread_id);
		return;
	}
	if (c->chat_start) {
		chat_ws_error(c, json_string_value(json_object_get(j, "threadId")),
			      json_string_value(json_object_get(j, "runId")), "busy",
			      "a run is being started on this socket", false);
		return;
	}
	chat_start_run(c, j, NULL, -1, CHAT_WS_CONV);
}

/* The conversation socket's client messages: RunAgentInput and abort text
 * frames (binary ones are ignored); the stock webSocket() adapter's
 * keepalive after each ping. */
static void
chat_ws_on_message(HttpConn *c, bool binary, const uint8_t *data, size_t len)
{
	if (!binary)
		chat_ws_message(c, (const char *)data, len);
}

static const WsAppOps chat_ws_app = {
    .on_message = chat_ws_on_message,
    .body_sized = true,
    .keepalive_text = "{\"type\":\"ping\"}",
};

static void
chat_ws_open(HttpConn *c)
{
	const char *msg;

	if (ws_check_handshake(c, &msg) < 0) {
		http_respond_error_close(c, 400, "bad_request", msg);
		return;
	}
	c->chat_token = c->req.token; /* the request is reset by the upgrade */
	c->chat_ws = true;
	c->ws_app = &chat_ws_app;
	if (ws_accept(c) < 0) {
		c->chat_ws = false;
		c->ws_app = NULL;
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	/* frames the client sent right behind its handshake */
	ws_on_read(c);
}

/* A conversation socket whose token is missing or wrong: a browser's
 * WebSocket shows nothing of a refused handshake (the stock client says
 * "Stream response body read failed"), so the upgrade is accepted only to
 * say why in a RUN_ERROR chunk, and closed at once (1008). Nothing the
 * client sends is read: the socket is not a conversation (chat_ws false). */
void
chat_ws_refuse_unauthorized(HttpConn *c)
{
	const char *msg;

	if (ws_check_handshake(c, &msg) < 0) {
		http_respond_error_close(c, 400, "bad_request", msg);
		return;
	}
	if (ws_accept(c) < 0) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	chat_ws_error(c, NULL, NULL, "unauthorized", "missing or invalid bearer token", true);
	c->ws_drop = WS_DROP_ERROR;
	ws_close(c, 1008, "unauthorized");
}

/* ---- dispatch ---- */

void
route_chat(HttpConn *c, const char *query)
{
	_cleanup_free_ char *run_id = NULL, *thread_id = NULL, *offset = NULL;
	bool upgrade = http_header(c, "Upgrade") != NULL;

	if (c->req.method == HTTP_POST) {
		chat_post(c, query);
		return;
	}
	if (c->req.method != HTTP_GET) {
		http_respond_405(c, "GET, POST");
		return;
	}
	if (routes_query(query, "runId", &run_id) < 0 ||
	    routes_query(query, "threadId", &thread_id) < 0 ||
	    routes_query(query, "offset", &offset) < 0) {
		http_respond_error(c, 400, "bad_request", "malformed query string");
		return;
	}
	/* webSocket()'s send() opens ?runId=<the run it is about to send> and
	 * its reconnect ?runId=&offset=: only an offset makes it a join */
	if (upgrade && !offset) {
		chat_ws_open(c);
		return;
	}
	if (run_id) {
		chat_join(c, query, run_id, thread_id, offset, upgrade);
		return;
	}
	if (thread_id && !upgrade) {
		chat_hydrate(c, thread_id);
		return;
	}
	http_respond_error(c, 400, "bad_request",
			   "GET /chat needs runId and offset (a join) or threadId (the hydrate)");
}
