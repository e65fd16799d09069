/* SPDX-License-Identifier: MIT */
/*
 * routes.c — the public routes (docs: API.md) and their handlers.
 *
 * The path is split on '/', empty segments dropped, each segment
 * percent-decoded; the route table (route_table, at the end) matches on the
 * segments and says, per route, who may call it, its methods, its body limit
 * and its handler: a new route is one row there. Handlers that
 * need coordinatord send one request with the HttpConn as userdata and answer
 * from the reply callback; a connection that goes away first cancels it.
 *
 * Before any route: Host must name this server (421), an Origin must be
 * ours or in cors_origins (403), then the bearer token (401). Per route: the
 * token's thread scope (403 thread_forbidden), the run's threadId on every
 * /runs/{id} route (400 thread_required) and, for JSON bodies, Content-Type
 * application/json (415). docs/SECURITY.md says why.
 *
 * Coordinator errors map to statuses in one place: an ERROR's reason
 * (docs/PROTOCOL.md "Errors") through the one table common/proto/reasons.def, its text
 * the ERROR's message; without a reason known there (routes_coord_error), by
 * errno: -EINVAL 400, -EPERM 403 harness_forbidden (RUN_START with a harness
 * the token may not use), -ENOENT 404, -EBUSY 409 conflict, -ETIME 504
 * job_timeout and -ECANCELED 500 job_killed (a snapshot/restore job, from an
 * older shim), -ENOMSG (a coordinatord without that message) and -EOPNOTSUPP
 * 501, -ECONNRESET/-ETIMEDOUT 503, anything else 500. The file API has its
 * own errno fallback (routes-files.c).
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <strings.h>

#include "id-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

static void
route_done(Route *rt)
{
	for (size_t i = 0; i < rt->n_seg; i++)
		free(rt->seg[i]);
	free(rt->query);
	free(rt->rest);
	*rt = (Route){0};
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode s[0..len) into a new string; '+' is a space in queries.
 * -EINVAL on a bad escape or a decoded NUL. */
static int
url_decode(const char *s, size_t len, bool plus_space, char **ret)
{
	char *d = malloc(len + 1), *o = d;

	if (!d)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi = i + 2 < len ? hexval(s[i + 1]) : -1;
			int lo = i + 2 < len ? hexval(s[i + 2]) : -1;
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
				free(d);
				return -EINVAL;
			}
			*o++ = (char)(hi * 16 + lo);
			i += 2;
		} else if (plus_space && s[i] == '+')
			*o++ = ' ';
		else
			*o++ = s[i];
	}
	*o = '\0';
	*ret = d;
	return 0;
}

/* Split a request target into decoded path segments and the raw query;
 * *ret_path (when not NULL) gets the undecoded path, for logs. */
static int
route_split(const char *url, size_t url_len, Route *rt, char **ret_path)
{
	struct http_parser_url u;
	int r;

	if (!url)
		return -EINVAL;
	http_parser_url_init(&u);
	if (http_parser_parse_url(url, url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_PATH)))
		return -EINVAL;
	const char *p = url + u.field_data[UF_PATH].off;
	size_t plen = u.field_data[UF_PATH].len;
	if (ret_path) {
		*ret_path = strndup(p, plen);
		if (!*ret_path)
			return -ENOMEM;
	}
	for (size_t i = 0; i < plen;) {
		size_t n = 0;
		while (i + n < plen && p[i + n] != '/')
			n++;
		if (n > 0) {
			if (rt->n_seg >= ROUTE_MAX_SEGMENTS)
				return -E2BIG;
			r = url_decode(p + i, n, false, &rt->seg[rt->n_seg]);
			if (r < 0)
				return r;
			rt->n_seg++;
			/* a file path is taken whole (routes-files.c) */
			if (rt->n_seg == 3 &&
			    (streq(rt->seg[0], "threads") || streq(rt->seg[0], "sandboxes")) &&
			    streq(rt->seg[2], "files")) {
				rt->rest = strndup(p + i + n, plen - i - n);
				if (!rt->rest)
					return -ENOMEM;
				break;
			}
		}
		i += n + 1;
	}
	if (u.field_set & (1 << UF_QUERY)) {
		rt->query = strndup(url + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
		if (!rt->query)
			return -ENOMEM;
	}
	return 0;
}

static int
route_parse(HttpConn *c, Route *rt)
{
	return route_split(c->req.url, c->req.url_len, rt, &c->req.path);
}

/* The decoded value of query parameter name (the first one), or NULL when it
 * is absent. -EINVAL on a malformed escape. */
int
route_query(const Route *rt, const char *name, char **ret)
{
	size_t nl = strlen(name);

	*ret = NULL;
	for (const char *s = rt->query; s && *s;) {
		size_t n = strcspn(s, "&");
		const char *eq = memchr(s, '=', n);
		size_t kl = eq ? (size_t)(eq - s) : n;
		_cleanup_free_ char *key = NULL;
		int r = url_decode(s, kl, true, &key);
		if (r < 0)
			return r;
		if (strlen(key) == nl && memcmp(key, name, nl) == 0)
			return url_decode(eq ? eq + 1 : s + n, eq ? n - kl - 1 : 0, true, ret);
		s += n;
		if (*s == '&')
			s++;
	}
	return 0;
}

bool
routes_run_id_plausible(const char *s)
{
	return *s && strlen(s) <= ROUTER_MAX_ID && string_printable(s);
}

void
routes_unavailable(HttpConn *c)
{
	http_respond_error(c, 503, "unavailable", "coordinator unavailable");
}

/* Answer an ERROR by its reason (reasons.def: the HTTP status and code; the
 * text is the ERROR's message, else the row's help); false (nothing sent)
 * when it has none or one of a newer peer: the caller falls back to the
 * errno. */
bool
routes_coord_reason(HttpConn *c, const msgpack_object *body)
{
	char buf[PEER_REASON_MAX], msg[512];
	const char *reason = peer_error_reason(body, buf);
	size_t ml = 0;
	const char *m;

	const PeerReasonInfo *row = peer_reason_lookup(reason);
	if (!row)
		return false;
	m = coord_error_message(body, &ml);
	snprintf(msg, sizeof(msg), "%.*s", (int)(m ? ml : 0), m ? m : "");
	http_respond_error(c, row->status, row->code, m ? msg : row->help);
	return true;
}

void
routes_coord_error(HttpConn *c, int err, const msgpack_object *body, const char *not_found)
{
	size_t ml = 0;
	const char *m = coord_error_message(body, &ml);
	char msg[256];

	if (routes_coord_reason(c, body))
		return;
	snprintf(msg, sizeof(msg), "%.*s", (int)(m ? ml : 0), m ? m : "");
	switch (err) {
	case -EINVAL: http_respond_error(c, 400, "bad_request", m ? msg : "bad request"); break;
	case -ENOENT: http_respond_error(c, 404, "not_found", not_found); break;
	case -EPERM: http_respond_error(c, 403, "harness_forbidden", m ? msg : "forbidden"); break;
	case -ETIME: http_respond_error(c, 504, "job_timeout", m ? msg : "timed out"); break;
	case -ECANCELED: http_respond_error(c, 500, "job_killed", m ? msg : "killed"); break;
	case -EBUSY: http_respond_error(c, 409, "conflict", m ? msg : "busy"); break;
	case -ENOMSG:
	case -EOPNOTSUPP:
		http_respond_error(c, 501, "not_implemented", m ? msg : "not implemented");
		break;
	case -ECONNRESET:
	case -ETIMEDOUT:
		log_warning_errno(err, "%s: coordinatord did not answer: %m", c->addr);
		routes_unavailable(c);
		break;
	default:
		log_warning_errno(err, "%s: coordinatord failed a request: %m", c->addr);
		http_respond_error(c, 500, "internal", "internal error");
	}
}

/* The first checks of the RUN_GET reply to a request whose parameters (start)
 * waited on the connection: true after answering, 500 when start is gone, or
 * coordinatord's error ("unknown run" for -ENOENT). */
bool
routes_run_get_answered(HttpConn *c, const void *start, int err, const msgpack_object *body)
{
	if (!start) {
		http_respond_error(c, 500, "internal", "internal error");
		return true;
	}
	if (err < 0) {
		routes_coord_error(c, err, body, "unknown run");
		return true;
	}
	return false;
}

/* ---- /_bridge/{runId} and /tool-exec/{runId}: host tools ---- */

/* ---- request bodies ---- */

/* A JSON body must come as Content-Type: application/json (parameters such
 * as charset allowed). A browser sends text/plain, multipart/form-data or
 * application/x-www-form-urlencoded cross-site without a CORS preflight;
 * refusing every other type keeps such a "simple" request from acting. An
 * empty body without Content-Type passes when empty_ok. false after 415. */
bool
routes_json_content_type(HttpConn *c, bool empty_ok)
{
	const char *ct = http_header(c, "Content-Type");

	if (!ct && empty_ok && c->req.body_len == 0)
		return true;
	if (ct) {
		ct += strspn(ct, " \t");
		size_t n = strcspn(ct, "; \t");
		if (n == STRLEN("application/json") && strncasecmp(ct, "application/json", n) == 0)
			return true;
	}
	http_respond_error(c, 415, "unsupported_media_type",
			   "the body must be JSON sent as Content-Type: application/json");
	return false;
}

/* Whether the request's token may touch thread_id; false after answering
 * 403 thread_forbidden. */
bool
routes_thread_allowed(HttpConn *c, const char *thread_id)
{
	if (router_token_allows_thread(c->req.token, thread_id))
		return true;
	http_respond_error(c, 403, "thread_forbidden", "this token may not use this thread");
	return false;
}

/* ---- POST /runs ---- */

static void
run_start_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_RUN_START) Reply_RUN_START rep = {};
	_cleanup_free_ char *thread_id = TAKE_PTR(c->run_thread_id);

	if (err == -ETIMEDOUT || err == -ECONNRESET) {
		/* the request went: coordinatord may start the run yet (held in a
		 * thread's claim, a lease check, an Idempotency-Key look-up in the
		 * cluster) — not a failure, an unknown outcome (issue 35 F) */
		log_warning_errno(err, "%s: RUN_START not answered: %m", c->addr);
		http_respond_error(c, 503, "outcome_unknown",
				   "coordinatord did not answer in time: the run may have started; "
				   "post again with the same Idempotency-Key, or list the "
				   "thread's runs");
		return;
	}
	if (err < 0) {
		routes_coord_error(c, err, body, "not found");
		return;
	}
	if (reply_decode_RUN_START(body, &rep) < 0) {
		log_warning("%s: RUN_START reply without run_id", c->addr);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	json_auto_t *j = json_pack("{s:s}", "runId", rep.run_id);
	/* the run's story in the journal starts here (RUN_ID=, THREAD_ID=) */
	LogCtx lc = {.run_id = rep.run_id, .thread_id = thread_id};
	log_ctx(LOG_INFO, &lc, "Run accepted from %s", c->addr);
	if (!j) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond_json(c, 202, j);
}

/* The thread id of a POST /runs body: the one body rule routerd applies
 * itself, for the token's thread scope; the others are coordinatord's
 * (run-start.c), for HTTP and socket clients alike. NULL when valid. */
static const char *
run_body_thread_problem(json_t *body)
{
	if (!json_is_object(body))
		return "body must be a JSON object";
	json_t *tid = json_object_get(body, "threadId");
	if (!json_is_string(tid))
		return "threadId must be a non-empty string";
	if (strlen(json_string_value(tid)) != json_string_length(tid))
		return "threadId must not contain control characters";
	return thread_id_problem(json_string_value(tid));
}

/* A member of the body as JSON text for RUN_START (any JSON value: its rules
 * are coordinatord's); NULL when absent. -ENOMEM when it cannot be. */
static int
run_body_member(json_t *body, const char *key, char **ret)
{
	json_t *v = json_object_get(body, key);

	*ret = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	return v && !*ret ? -ENOMEM : 0;
}

/* POST /runs: the HTTP facts (the token, the content type, the JSON, the
 * thread the token may use) are checked here, the body's rules and the
 * Idempotency-Key by coordinatord (its -EINVAL: 400 bad_request). */
static void
route_runs_post(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *msgs = NULL, *meta = NULL;
	int r;

	json_auto_t *body = routes_json_request(c);
	if (!body)
		return;
	const char *why = run_body_thread_problem(body);
	if (why) {
		http_respond_error(c, 400, routes_problem_code(why), why);
		return;
	}
	const char *thread_id = json_string_value(json_object_get(body, "threadId"));
	if (!routes_thread_allowed(c, thread_id))
		return;
	if (!coord_ready(c->router)) {
		routes_unavailable(c);
		return;
	}
	free(c->run_thread_id);
	c->run_thread_id = strdup(thread_id);
	if (!c->run_thread_id || run_body_member(body, "messages", &msgs) < 0 ||
	    run_body_member(body, "metadata", &meta) < 0) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	/* the harness is resolved by coordinatord (metadata.harness or its
	 * default_harness): it gets the token's list and refuses the others */
	r = COORD_CALL(c->router, RUN_START,
		       &((Msg_RUN_START){
			   .thread_id = thread_id,
			   .messages = msgs,
			   .metadata = meta,
			   .idempotency_key = http_header(c, "Idempotency-Key"),
			   .harnesses = c->req.token ? c->req.token->harnesses : NULL,
			   .tenant = router_token_tenant(c->req.token),
		       }),
		       run_start_reply, c);
	if (r < 0)
		routes_coord_error(c, r == -ECONNRESET ? r : -EIO, NULL, "not found");
}

/* ---- GET /runs/{runId} ---- */

static int
send_run_get(HttpConn *c, const char *run_id, const char *thread_id, PeerReplyFn cb)
{
	return COORD_CALL(c->router, RUN_GET,
			  &((Msg_RUN_GET){.run_id = run_id, .thread_id = thread_id}), cb, c);
}

/* A reply carrying a run's "record" (JSON text), answered with status; what names
 * the request in the log line of a reply without one ("" for none). */
static void
record_reply(HttpConn *c, int err, const msgpack_object *body, int status, const char *what)
{
	const msgpack_object *rec = body ? mp_map_get(body, "record") : NULL;

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown run");
		return;
	}
	if (!rec || rec->type != MSGPACK_OBJECT_STR) {
		log_warning("%s: %sreply without record", c->addr, what);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond(c, status, "application/json; charset=utf-8", rec->via.str.ptr,
		     rec->via.str.size, NULL, false);
}

static void
run_get_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	record_reply(userdata, err, body, 200, "RUN_GET ");
}

/* threadId from the query (required), validated and within the token's
 * threads; false after answering 400 or 403. */
bool
routes_get_thread_id(HttpConn *c, const Route *rt, char **ret)
{
	int r = route_query(rt, "threadId", ret);
	const char *why;

	if (r == -ENOMEM) {
		http_respond_error(c, 500, "internal", "out of memory");
		return false;
	}
	if (r < 0) {
		http_respond_error(c, 400, "bad_request", "malformed query string");
		return false;
	}
	if (!*ret) {
		/* the run's thread is its owner: without it any run would be
		 * readable by whoever learns its id */
		http_respond_error(c, 400, "thread_required",
				   "threadId is required: add ?threadId=<the run's thread>");
		return false;
	}
	if ((why = thread_id_problem(*ret))) {
		http_respond_error(c, 400, "invalid_thread_id", why);
		return false;
	}
	return routes_thread_allowed(c, *ret);
}

static void
route_run_get(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *thread_id = NULL;

	if (!routes_get_thread_id(c, rt, &thread_id))
		return;
	if (!routes_run_id_plausible(rt->seg[1])) {
		http_respond_error(c, 404, "not_found", "unknown run");
		return;
	}
	if (send_run_get(c, rt->seg[1], thread_id, run_get_reply) < 0)
		routes_unavailable(c);
}

/* ---- GET /runs/{runId}/stream ---- */

/* What the stream handler keeps while RUN_GET is in flight. */
typedef struct StreamStart {
	char *run_id;
	char *thread_id;
	int64_t last_seq;
	bool sse;
} StreamStart;

static StreamStart *
stream_start_free(StreamStart *s)
{
	if (s) {
		free(s->run_id);
		free(s->thread_id);
		free(s);
	}
	return NULL;
}

static void stream_get_reply(Peer *p, int err, const msgpack_object *body, void *userdata);

bool
routes_parse_last_seq(const char *s, int64_t *ret)
{
	char *end;

	if (!s) {
		*ret = -1;
		return true;
	}
	if (!*s || !(*s == '-' || (*s >= '0' && *s <= '9')))
		return false;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < -1)
		return false;
	*ret = v;
	return true;
}

static void
route_run_stream(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *thread_id = NULL, *last = NULL;
	const char *msg;
	int64_t last_seq;
	int r;

	if (!routes_get_thread_id(c, rt, &thread_id))
		return;
	r = route_query(rt, "lastSeq", &last);
	if (r < 0 || !routes_parse_last_seq(last, &last_seq)) {
		http_respond_error(c, 400, "bad_request", "lastSeq must be an integer >= -1");
		return;
	}
	bool sse = !http_header(c, "Upgrade") && sse_wanted(c);
	/* An EventSource reconnecting sends the id of the last event it got;
	 * it is newer than the lastSeq of the URL it reuses. */
	const char *leid = sse ? http_header(c, "Last-Event-ID") : NULL;
	if (leid && *leid && !routes_parse_last_seq(leid, &last_seq)) {
		http_respond_error(c, 400, "bad_request", "Last-Event-ID must be an integer >= -1");
		return;
	}
	if (!sse && !http_header(c, "Upgrade")) {
		http_respond_error(c, 426, "upgrade_required",
				   "expected a websocket upgrade or Accept: text/event-stream");
		return;
	}
	if (!sse && ws_check_handshake(c, &msg) < 0) {
		http_respond_error_close(c, 400, "bad_request", msg);
		return;
	}
	if (!routes_run_id_plausible(rt->seg[1])) {
		http_respond_error(c, 404, "not_found", "unknown run");
		return;
	}
	StreamStart *s = calloc(1, sizeof(*s));
	if (!s || !(s->run_id = strdup(rt->seg[1])) || !(s->thread_id = strdup(thread_id))) {
		stream_start_free(s);
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	s->last_seq = last_seq;
	s->sse = sse;
	if (send_run_get(c, rt->seg[1], thread_id, stream_get_reply) < 0) {
		stream_start_free(s);
		routes_unavailable(c);
		return;
	}
	/* c is the call's userdata; the parameters wait on the connection (one
	 * request at a time) and are freed with it if it goes away first. */
	c->stream_start = s;
}

static void
stream_get_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	StreamStart *s = TAKE_PTR(c->stream_start);
	const msgpack_object *rec = body ? mp_map_get(body, "record") : NULL;
	_cleanup_free_ char *rec_text = NULL;
	int r;

	if (routes_run_get_answered(c, s, err, body)) {
		stream_start_free(s);
		return;
	}
	if (rec && !(rec_text = mp_obj_strdup(rec))) {
		stream_start_free(s);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	bool sse = s->sse;
	const TailSink *sink = sse ? &sse_tail_sink : &ws_tail_sink;
	r = sse ? sse_accept(c) : ws_accept(c);
	if (r < 0) {
		stream_start_free(s);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	r = tail_new(c, sink, TAIL_SEQ, s->run_id, s->thread_id, s->last_seq, rec_text, &c->tail);
	stream_start_free(s);
	if (r < 0) {
		sink->close(c, 1011,
			    r == -ECONNRESET ? "coordinator unavailable" : "internal error");
		return;
	}
	/* Frames the client sent right behind its handshake. */
	if (!sse)
		ws_on_read(c);
}

/* ---- POST /runs/{runId}/cancel ---- */

static void
run_cancel_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	record_reply(userdata, err, body, 202, "");
}

static void
route_run_cancel(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *thread_id = NULL;
	int r;

	if (!routes_get_thread_id(c, rt, &thread_id) || !routes_json_content_type(c, true))
		return;
	if (!routes_run_id_plausible(rt->seg[1])) {
		http_respond_error(c, 404, "not_found", "unknown run");
		return;
	}
	r = COORD_CALL(c->router, RUN_CANCEL,
		       &((Msg_RUN_CANCEL){.run_id = rt->seg[1], .thread_id = thread_id}),
		       run_cancel_reply, c);
	if (r < 0)
		routes_unavailable(c);
}

const char *
routes_problem_code(const char *why)
{
	return strncmp(why, "threadId ", 9) == 0 ? "invalid_thread_id" : "bad_request";
}

/* threadId from the path segment, within the token's threads; false after
 * answering 400 or 403. */
bool
routes_path_thread_id(HttpConn *c, const char *tid)
{
	const char *why = thread_id_problem(tid);
	if (why) {
		http_respond_error(c, 400, "invalid_thread_id", why);
		return false;
	}
	return routes_thread_allowed(c, tid);
}

/* The request body as JSON (any value). NULL after answering 400. */
json_t *
routes_body_json(HttpConn *c)
{
	json_error_t jerr;
	json_t *j = json_loadb(c->req.body ? c->req.body : "", c->req.body_len, 0, &jerr);

	if (!j)
		http_respond_error(c, 400, "invalid_json", jerr.text);
	return j;
}

/* The body of a request that must carry JSON (routes_json_content_type, no
 * empty body), parsed. NULL after answering 415 or 400. */
json_t *
routes_json_request(HttpConn *c)
{
	return routes_json_content_type(c, false) ? routes_body_json(c) : NULL;
}

/* The request body as a JSON object; an empty body counts as {} when
 * empty_ok. NULL after answering 400. */
json_t *
routes_body_object(HttpConn *c, bool empty_ok)
{
	json_t *j;

	if (c->req.body_len == 0 && empty_ok)
		return json_object();
	j = routes_body_json(c);
	if (!j)
		return NULL;
	if (!json_is_object(j)) {
		json_decref(j);
		http_respond_error(c, 400, "bad_request", "body must be a JSON object");
		return NULL;
	}
	return j;
}

/* ---- GET /readyz and /metrics ---- */

int
routes_url_decode(const char *s, size_t len, bool plus_space, char **ret)
{
	return url_decode(s, len, plus_space, ret);
}

int
routes_query(const char *query, const char *name, char **ret)
{
	const Route rt = {.query = (char *)query};
	return route_query(&rt, name, ret);
}

/* Router.on_conn_free: what handlers and the tail keep on c. */
static void
routes_conn_free(HttpConn *c)
{
	c->stream_start = stream_start_free(c->stream_start);
	chat_start_free(c);
	ds_read_free(c);
	sbx_conn_free(c);
	c->tail = tail_free(c->tail);
}

/* ---- auth and CORS ---- */

/* The bearer token of the request: the Authorization header, or for the
 * stream route (browsers' WebSocket and EventSource cannot set headers) the
 * RFC 6750 access_token query parameter. Compared as SHA-256 digests with
 * CRYPTO_memcmp against every configured token, so neither the length nor
 * the content of a token leaks through timing. Tokens are never logged. */
static bool
auth_ok(HttpConn *c, const Route *rt, bool stream)
{
	const RouterConf *conf = c->router->conf;
	const char *h = http_header(c, "Authorization");
	_cleanup_free_ char *qt = NULL;
	const char *tok = NULL;
	unsigned char d[32];
	size_t match = 0;
	int ok = 0;

	if (conf->n_tokens == 0)
		return true;
	if (h && strncasecmp(h, "Bearer ", 7) == 0) {
		tok = h + 7;
		tok += strspn(tok, " ");
	} else if (!h && stream && route_query(rt, "access_token", &qt) == 0 && qt)
		tok = qt;
	else if (!h && stream && ws_protocol_token(c, &qt) == 0 && qt)
		tok = qt; /* a browser's WebSocket cannot send Authorization */
	if (!tok || !*tok)
		return false;
	if (EVP_Digest(tok, strlen(tok), d, NULL, EVP_sha256(), NULL) != 1)
		return false;
	/* every token is compared, the match picked without a branch on it */
	for (size_t i = 0; i < conf->n_tokens; i++) {
		int eq = CRYPTO_memcmp(d, conf->tokens[i].digest, sizeof(d)) == 0;
		size_t mask = (size_t)0 - (size_t)(eq & !ok);
		match = (match & ~mask) | (i & mask);
		ok |= eq;
	}
	OPENSSL_cleanse(d, sizeof(d));
	if (ok)
		c->req.token = &conf->tokens[match];
	return ok;
}

/* ---- dispatch: the route table ---- */

/* Who may call a route (checked after Host and Origin, before the method). */
typedef enum RouteAuth {
	AUTH_TOKEN,   /* a bearer token of tokens_file, when it has any */
	AUTH_STREAM,  /* ... also as ?access_token= or the WebSocket subprotocol: a
		       * browser's WebSocket or EventSource cannot set Authorization */
	AUTH_CHAT,    /* AUTH_STREAM for a WebSocket upgrade, AUTH_TOKEN otherwise */
	AUTH_UPGRADE, /* the same, without /chat's refusal on the socket (sandbox exec) */
	AUTH_NONE,    /* /healthz, and the viewer's files (they hold no data) */
	AUTH_RUN,     /* /_bridge, /tool-exec: the run's own token (coordinatord) */
} RouteAuth;

typedef struct RouteDef {
	/* Segments after the first '/': a literal, "*" for any one segment, or
	 * (last) "**" for any number of further segments, none included. */
	const char *pattern;
	unsigned methods;  /* 1 << HTTP_*; 0: the handler checks the method */
	const char *allow; /* the Allow header of a 405 */
	RouteAuth auth;
	unsigned big_body; /* 1 << HTTP_*: these may carry max_file_body bytes, not max_body */
	void (*fn)(HttpConn *c, Route *rt); /* NULL: 404 (a family's unknown paths) */
} RouteDef;

static void
route_threads_list(HttpConn *c, Route *rt)
{
	route_threads(c, rt->query);
}

static void
route_chat_any(HttpConn *c, Route *rt)
{
	route_chat(c, rt->query);
}

static void
route_files_any(HttpConn *c, Route *rt)
{
	if (routes_path_thread_id(c, rt->seg[1]))
		route_files(c, rt->seg[1], rt->rest, rt->query);
}

static void
route_bridge_call(HttpConn *c, Route *rt)
{
	route_bridge(c, rt, streq(rt->seg[0], "_bridge") ? "bridge" : "tool_exec");
}

static void
route_ds_read(HttpConn *c, Route *rt)
{
	/* Durable Streams reads of a run (routes-ds.c) */
	if (!routes_path_thread_id(c, rt->seg[3]))
		return;
	if (!routes_run_id_plausible(rt->seg[5]))
		http_respond_error(c, 404, "not_found", "no such run");
	else
		route_ds(c, c->req.method == HTTP_HEAD, rt->seg[3], rt->seg[5], rt->query);
}

static void
route_ui_files(HttpConn *c, Route *rt)
{
	size_t pl = c->req.path ? strlen(c->req.path) : 0;
	route_ui(c, rt->seg + 1, rt->n_seg - 1, pl > 0 && c->req.path[pl - 1] == '/');
}

#define M(m) (1u << HTTP_##m)

/* Every public route (API.md), matched in order; the first whose pattern
 * matches the path decides authentication, methods and body limit. */
static const RouteDef route_table[] = {
    {"ui/**", 0, NULL, AUTH_NONE, 0, route_ui_files},
    {"healthz", M(GET), "GET", AUTH_NONE, 0, route_healthz},
    {"readyz", M(GET), "GET", AUTH_TOKEN, 0, route_readyz},
    {"metrics", M(GET), "GET", AUTH_TOKEN, 0, route_metrics},
    {"threads", 0, NULL, AUTH_TOKEN, 0, route_threads_list},
    {"chat", 0, NULL, AUTH_CHAT, 0, route_chat_any},
    {"runs", M(POST), "POST", AUTH_TOKEN, 0, route_runs_post},
    {"runs/*", M(GET), "GET", AUTH_TOKEN, 0, route_run_get},
    {"runs/*/stream", M(GET), "GET", AUTH_STREAM, 0, route_run_stream},
    {"runs/*/cancel", M(POST), "POST", AUTH_TOKEN, 0, route_run_cancel},
    {"threads/*/runs", M(GET), "GET", AUTH_TOKEN, 0, route_thread_runs},
    {"threads/*/snapshots", M(GET) | M(POST), "GET, POST", AUTH_TOKEN, 0, route_snapshots},
    {"threads/*/snapshots/*", M(DELETE), "DELETE", AUTH_TOKEN, 0, route_snapshot_delete},
    {"threads/*/restore", M(POST), "POST", AUTH_TOKEN, 0, route_snapshot_restore},
    /* the path after "files" is Route.rest (route_split), not segments */
    {"threads/*/files", 0, NULL, AUTH_TOKEN, M(PUT), route_files_any},
    {"sandboxes/*/files", 0, NULL, AUTH_TOKEN, M(PUT), route_files_any},
    {"capabilities", M(GET), "GET", AUTH_TOKEN, 0, route_capabilities},
    {"sandboxes/*", M(GET) | M(PUT) | M(DELETE), "GET, PUT, DELETE", AUTH_TOKEN, 0, route_sandbox},
    {"sandboxes/*/stop", M(POST), "POST", AUTH_TOKEN, 0, route_sandbox_stop},
    {"sandboxes/*/restore", M(POST), "POST", AUTH_TOKEN, 0, route_sandbox_restore},
    {"sandboxes/*/watch", M(GET), "GET", AUTH_TOKEN, 0, route_sandbox_watch},
    {"sandboxes/*/ports/*", M(POST), "POST", AUTH_TOKEN, 0, route_sandbox_port},
    {"sandboxes/*/egress", M(PUT), "PUT", AUTH_TOKEN, 0, route_sandbox_egress},
    /* the sandbox API (routes-exec.c): a sandbox id is a thread id */
    {"sandboxes/*/exec", M(GET) | M(POST), "GET, POST", AUTH_UPGRADE, M(POST), route_sbx_exec},
    {"sandboxes/*/processes", M(GET), "GET", AUTH_TOKEN, 0, route_sbx_processes},
    {"sandboxes/*/processes/*/kill", M(POST), "POST", AUTH_TOKEN, 0, route_sbx_kill},
    {"sandboxes/*/processes/*/output", M(GET), "GET", AUTH_TOKEN, 0, route_sbx_output},
    {"ds/v1/threads/*/runs/*", M(GET) | M(HEAD), "GET, HEAD", AUTH_TOKEN, 0, route_ds_read},
    {"_bridge/*", M(POST), "POST", AUTH_RUN, 0, route_bridge_call},
    {"tool-exec/*", M(POST), "POST", AUTH_RUN, 0, route_bridge_call},
    {"_bridge/**", 0, NULL, AUTH_RUN, 0, NULL},
    {"tool-exec/**", 0, NULL, AUTH_RUN, 0, NULL},
};

#undef M

static bool
pattern_matches(const char *pattern, const Route *rt)
{
	size_t i = 0;

	for (const char *p = pattern; *p; i++) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '*' && p[1] == '*')
			return true; /* the rest, however long */
		if (i >= rt->n_seg || !((n == 1 && p[0] == '*') ||
					(strlen(rt->seg[i]) == n && memcmp(rt->seg[i], p, n) == 0)))
			return false;
		p += n + (p[n] == '/');
	}
	return i == rt->n_seg;
}

static const RouteDef *
route_find(const Route *rt)
{
	for (size_t i = 0; i < ELEMENTSOF(route_table); i++)
		if (pattern_matches(route_table[i].pattern, rt))
			return &route_table[i];
	return NULL;
}

/* Router.big_body: whether a request of method on url may carry
 * max_file_body bytes (a file PUT), from the route table. */
static bool
routes_file_body(const char *url, size_t len, int method)
{
	_cleanup_(route_done) Route rt = {0};
	const RouteDef *d;

	if ((method != HTTP_PUT && method != HTTP_POST) || route_split(url, len, &rt, NULL) < 0)
		return false;
	d = route_find(&rt);
	return d && (d->big_body & (1u << method));
}

static bool
route_auth_ok(HttpConn *c, const Route *rt, RouteAuth auth)
{
	switch (auth) {
	case AUTH_NONE:
	case AUTH_RUN: return true;
	case AUTH_STREAM: return auth_ok(c, rt, true);
	case AUTH_CHAT:
	case AUTH_UPGRADE:
		return auth_ok(c, rt, c->req.method == HTTP_GET && http_header(c, "Upgrade"));
	case AUTH_TOKEN: break;
	}
	return auth_ok(c, rt, false);
}

static void
routes_dispatch(HttpConn *c)
{
	_cleanup_(route_done) Route rt = {0};
	const RouteDef *d;
	int r;

	r = route_parse(c, &rt);
	if (r == -ENOMEM) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	if (r < 0) {
		/* a malformed path (or escape) names no resource */
		if (r == -E2BIG)
			http_respond_error(c, 404, "not_found", "not found");
		else
			http_respond_error(c, 400, "bad_request", "malformed request target");
		return;
	}
	if (c->bridge) {
		route_bridge_only(c, &rt);
		return;
	}
	/* Sandboxes reach their bridge through bridge.sock (above), so the public
	 * listener checks Host on every route, /_bridge included. */
	if (!host_ok(c))
		return;
	cors_prepare(c);
	if (!origin_ok(c))
		return;
	if (c->req.method == HTTP_OPTIONS) {
		route_options(c);
		return;
	}
	d = route_find(&rt);
	/* an unknown path needs the token too: a 404 says nothing to strangers */
	if (!route_auth_ok(c, &rt, d ? d->auth : AUTH_TOKEN)) {
		if (d && d->auth == AUTH_CHAT && c->req.method == HTTP_GET &&
		    http_header(c, "Upgrade")) {
			chat_ws_refuse_unauthorized(c); /* says why on the socket */
			return;
		}
		http_respond(
		    c, 401, "application/json; charset=utf-8",
		    "{\"error\":\"missing or invalid bearer token\",\"code\":\"unauthorized\"}",
		    STRLEN("{\"error\":\"missing or invalid bearer token\",\"code\":"
			   "\"unauthorized\"}"),
		    "WWW-Authenticate: Bearer realm=\"runwarden\"\r\n", false);
		return;
	}
	if (!d || !d->fn)
		http_respond_error(c, 404, "not_found", "not found");
	else if (d->methods && !(d->methods & (1u << c->req.method)))
		http_respond_405(c, d->allow);
	else if (tenant_rate_expensive(d->pattern, c->req.method,
				       http_header(c, "Upgrade") != NULL) &&
		 !tenant_rate_ok(c))
		return; /* 429 tenant_rate_limited */
	else
		d->fn(c, &rt);
}

void
routes_attach(Router *r)
{
	r->on_request = routes_dispatch;
	r->on_conn_free = routes_conn_free;
	r->big_body = routes_file_body;
	routes_sandbox_attach(r);
}
