/* SPDX-License-Identifier: MIT */
/*
 * routes-ds.c — GET|HEAD /ds/v1/threads/{threadId}/runs/{runId}: a run's
 * stored chunks as a Durable Streams JSON-mode stream (read-only), for
 * @durable-streams/client and @durable-streams/tanstack-ai-transport
 * (docs/DESIGN.md "Durable Streams reads of a run").
 *
 * Offsets are "0000000000000000_<next seq, 16 digits>" (the seq the next
 * message will have; they sort as strings), plus "-1" (the start) and "now"
 * (the current end). Each message is the chunk as stored — the response body
 * is the stored texts joined into a JSON array, never re-serialized.
 *   - catch-up (no live): the messages after offset (a batch), with
 *     Stream-Next-Offset, Stream-Up-To-Date when that is the end so far,
 *     Stream-Closed when the run is terminal and nothing follows, and an ETag
 *     (If-None-Match → 304);
 *   - live=long-poll: as catch-up when there is something; else waits up to
 *     DS_LONG_POLL_MS for the next chunk (204 with Stream-Up-To-Date when none
 *     came), 204 with Stream-Closed at the end of a terminal run;
 *   - live=sse: text/event-stream, "event: data" (a JSON array of messages)
 *     each followed by "event: control" {streamNextOffset, upToDate,
 *     streamClosed}; closed after the control that says streamClosed;
 *   - HEAD: the headers only (Stream-Next-Offset of the current end).
 * While live, the reader re-reads the log every DS_POLL_MS (RUN_READ), and
 * an SSE reader waits while more than ws_max_queue/2 bytes are unsent.
 * Auth, thread scoping, CORS and the connection limits are those of the
 * other routes (routes.c checks them before route_ds()).
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
#include <event2/event.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "mp-cursor.h"

#define DS_POLL_MS 100
#define DS_LONG_POLL_MS 20000
#define DS_READ_MAX 256
#define DS_READ_BYTES (1024 * 1024)

typedef enum DsMode { DS_CATCHUP, DS_LONG_POLL, DS_SSE } DsMode;

struct DsRead {
	HttpConn *c;
	char *run_id, *thread_id;
	int64_t cursor; /* the seq of the last message delivered (-1: none) */
	DsMode mode;
	bool head, now, sse_started, sent_up_to_date;
	char *if_none_match;
	struct event *timer;
	usec_t deadline;
};

void
ds_read_free(HttpConn *c)
{
	DsRead *d = c->ds;
	if (!d)
		return;
	tail_budget_remove(c);
	if (d->timer)
		event_free(d->timer);
	free(d->run_id);
	free(d->thread_id);
	free(d->if_none_match);
	free(d);
	c->ds = NULL;
}

static void
offset_fmt(char *buf, size_t len, int64_t next)
{
	snprintf(buf, len, "0000000000000000_%016" PRId64, next);
}

/* "-1", "now" or "0000000000000000_<16 digits>"; cursor = next - 1 */
static int
offset_parse(const char *s, int64_t *ret_cursor, bool *ret_now)
{
	*ret_now = false;
	if (!s || streq(s, "-1")) {
		*ret_cursor = -1;
		return 0;
	}
	if (streq(s, "now")) {
		*ret_now = true;
		return 0;
	}
	if (strlen(s) != 33 || strncmp(s, "0000000000000000_", 17) != 0)
		return -EINVAL;
	int64_t n = 0;
	for (size_t i = 17; i < 33; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		n = n * 10 + (s[i] - '0');
	}
	*ret_cursor = n - 1;
	return 0;
}

static void ds_read(DsRead *d);

static void
ds_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	ds_read(arg);
}

static void
ds_arm(DsRead *d, int64_t ms)
{
	struct timeval tv;
	if (!d->timer)
		d->timer = evtimer_new(d->c->router->base, ds_timer_cb, d);
	if (d->timer)
		evtimer_add(d->timer, timeval_from_usec(&tv, (usec_t)ms * USEC_PER_MSEC));
}

static void
ds_error(HttpConn *c, int err, const msgpack_object *body)
{
	if (c->state == CONN_SSE) {
		sse_close(c, 1011, "storage read failed");
		return;
	}
	if (err == -ENOENT)
		http_respond_error(c, 404, "not_found", "no such run");
	else if (err == -ECONNRESET || err == -ETIMEDOUT)
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
	else
		http_respond_error(c, 500, "internal", "storage read failed");
	(void)body;
}

/* The response headers common to every answer (after the status line). */
static void
ds_headers(char *buf, size_t len, int64_t next, bool up_to_date, bool closed, const char *etag)
{
	char off[48];
	offset_fmt(off, sizeof(off), next);
	snprintf(buf, len,
		 "Stream-Next-Offset: %s\r\n%s%s%s%s%sCache-Control: no-cache\r\n"
		 "Access-Control-Expose-Headers: Stream-Next-Offset, Stream-Up-To-Date, "
		 "Stream-Closed, Stream-Cursor, ETag\r\n",
		 off, up_to_date ? "Stream-Up-To-Date: true\r\n" : "",
		 closed ? "Stream-Closed: true\r\n" : "", etag ? "ETag: " : "", etag ? etag : "",
		 etag ? "\r\n" : "");
}

static void
ds_sse_control(DsRead *d, bool up_to_date, bool closed)
{
	char off[48];
	offset_fmt(off, sizeof(off), d->cursor + 1);
	json_auto_t *j = json_pack("{s:s, s:b}", "streamNextOffset", off, "upToDate", up_to_date);
	if (j && closed)
		json_object_set_new(j, "streamClosed", json_true());
	_cleanup_free_ char *s = j ? json_dump_compact(j) : NULL;
	if (s)
		(void)sse_send(d->c, -1, "control", s, strlen(s));
}

/* The read a coordinatord reply answers: c's, or NULL when there is none
 * left (the client went) or the reply was an ERROR (answered). */
static DsRead *
ds_answered(HttpConn *c, int err, const msgpack_object *body)
{
	if (!c->ds)
		return NULL;
	if (err < 0) {
		ds_error(c, err, body);
		return NULL;
	}
	return c->ds;
}

static void
ds_read_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	DsRead *d = ds_answered(c, err, body);
	const msgpack_object_array *events = NULL;
	const char *rec_text = NULL;
	int64_t first_seq = 0;
	RunRecord rec;
	MpReader mr;

	if (!d)
		return;
	mp_reader_init(&mr, body);
	mp_read_int(&mr, "first_seq", &first_seq);
	mp_read_array(&mr, "events", &events);
	mp_read_str(&mr, "record", &rec_text);
	if (mr.err < 0 || run_record_parse(rec_text, strlen(rec_text), &rec) < 0 ||
	    (events && events->size > 0 && first_seq != d->cursor + 1)) {
		mp_reader_done(&mr);
		log_warning("Malformed RUN_READ reply for run %s", d->run_id);
		ds_error(c, -EBADMSG, NULL);
		return;
	}
	size_t n = events ? events->size : 0;
	int64_t from = d->cursor;
	/* the array of the stored texts, as stored */
	struct evbuffer *arr = evbuffer_new();
	if (!arr) {
		mp_reader_done(&mr);
		ds_error(c, -ENOMEM, NULL);
		return;
	}
	evbuffer_add(arr, "[", 1);
	for (size_t i = 0; i < n; i++) {
		const msgpack_object *e = &events->ptr[i];
		if (e->type != MSGPACK_OBJECT_STR) {
			evbuffer_free(arr);
			mp_reader_done(&mr);
			ds_error(c, -EBADMSG, NULL);
			return;
		}
		if (i)
			evbuffer_add(arr, ",", 1);
		evbuffer_add(arr, e->via.str.ptr, e->via.str.size);
	}
	evbuffer_add(arr, "]", 1);
	mp_reader_done(&mr);
	d->cursor += (int64_t)n;
	bool up_to_date = d->cursor >= rec.last_seq;
	bool closed = up_to_date && rec.terminal;
	size_t blen = evbuffer_get_length(arr);
	const char *btext = (const char *)evbuffer_pullup(arr, -1);

	if (d->mode == DS_SSE) {
		if (n > 0) {
			(void)sse_send(c, -1, "data", btext, blen);
			ds_sse_control(d, up_to_date, closed);
			d->sent_up_to_date = up_to_date;
		} else if (closed || !d->sent_up_to_date) {
			ds_sse_control(d, true, closed);
			d->sent_up_to_date = true;
		}
		evbuffer_free(arr);
		tail_budget_note(c); /* may end c (the tails' budget) */
		if (c->state != CONN_SSE)
			return;
		if (closed) {
			sse_close(c, 1000, NULL);
			return;
		}
		ds_arm(d, n > 0 && !up_to_date ? 0 : DS_POLL_MS);
		return;
	}
	if (d->mode == DS_LONG_POLL && n == 0) {
		char h[512];
		evbuffer_free(arr);
		if (!closed && now_usec() < d->deadline) {
			ds_arm(d, DS_POLL_MS);
			return;
		}
		ds_headers(h, sizeof(h), d->cursor + 1, true, closed, NULL);
		http_respond(c, 204, NULL, NULL, 0, h, false);
		return;
	}
	char etag[128], h[640];
	snprintf(etag, sizeof(etag), "\"%s:%" PRId64 ":%" PRId64 "%s\"", d->run_id, from + 1,
		 d->cursor + 1, closed ? ":c" : "");
	if (d->if_none_match && streq(d->if_none_match, etag)) {
		ds_headers(h, sizeof(h), d->cursor + 1, up_to_date, closed, etag);
		http_respond(c, 304, NULL, NULL, 0, h, false);
	} else {
		ds_headers(h, sizeof(h), d->cursor + 1, up_to_date, closed, etag);
		http_respond(c, 200, "application/json", d->head ? NULL : btext, d->head ? 0 : blen,
			     h, false);
	}
	evbuffer_free(arr);
}

static void
ds_read(DsRead *d)
{
	HttpConn *c = d->c;

	if (d->mode == DS_SSE && c->state == CONN_SSE) {
		bool backed_up = evbuffer_get_length(bufferevent_get_output(c->bev)) >
				 (size_t)c->router->conf->ws_max_queue / 2;
		tail_budget_stalled(c, backed_up);
		tail_budget_note(c); /* what drained since; may end c */
		if (c->state != CONN_SSE)
			return;
		if (backed_up) {
			ds_arm(d, DS_POLL_MS); /* a slow reader: let it drain first */
			return;
		}
	}
	int r = COORD_CALL(c->router, RUN_READ,
			   &((Msg_RUN_READ){
			       .run_id = d->run_id,
			       .thread_id = d->thread_id,
			       .from_seq = d->cursor,
			       .max = d->head ? 0 : DS_READ_MAX,
			       .max_bytes = DS_READ_BYTES,
			       .has_max_bytes = true,
			   }),
			   ds_read_reply, c);
	if (r < 0)
		ds_error(c, -ECONNRESET, NULL);
}

static void
ds_start(DsRead *d)
{
	if (d->mode == DS_SSE && !d->sse_started) {
		d->sse_started = true;
		if (sse_accept(d->c) < 0) {
			http_conn_abort(d->c);
			return;
		}
		tail_budget_add(d->c);
	}
	ds_read(d);
}

static void
ds_get_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	DsRead *d = ds_answered(c, err, body);
	const char *rec_text = NULL;
	RunRecord rec;
	MpReader mr;

	if (!d)
		return;
	mp_reader_init(&mr, body);
	mp_read_str(&mr, "record", &rec_text);
	if (mr.err < 0 || run_record_parse(rec_text, strlen(rec_text), &rec) < 0) {
		mp_reader_done(&mr);
		ds_error(c, -EBADMSG, NULL);
		return;
	}
	mp_reader_done(&mr);
	if (d->head) {
		char h[512];
		ds_headers(h, sizeof(h), rec.last_seq + 1, true, rec.terminal, NULL);
		http_respond(c, 200, "application/json", NULL, 0, h, false);
		return;
	}
	d->cursor = rec.last_seq; /* offset=now */
	ds_start(d);
}

void
route_ds(HttpConn *c, bool head, const char *thread_id, const char *run_id, const char *query)
{
	_cleanup_free_ char *offset = NULL, *live = NULL;
	int64_t cursor = -1;
	bool now = false;

	if (routes_query(query, "offset", &offset) < 0 || offset_parse(offset, &cursor, &now) < 0) {
		http_respond_error(c, 400, "bad_offset",
				   "offset must be -1, now or 0000000000000000_<16 digits>");
		return;
	}
	if (routes_query(query, "live", &live) < 0 ||
	    (live && !streq(live, "long-poll") && !streq(live, "sse"))) {
		http_respond_error(c, 400, "bad_request", "live must be long-poll or sse");
		return;
	}
	if (head && live) {
		http_respond_error(c, 400, "bad_request", "HEAD takes no live mode");
		return;
	}
	DsRead *d = calloc(1, sizeof(*d));
	if (!d || !(d->run_id = strdup(run_id)) || !(d->thread_id = strdup(thread_id))) {
		if (d) {
			free(d->run_id);
			free(d);
		}
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	ds_read_free(c);
	c->ds = d;
	d->c = c;
	d->cursor = cursor;
	d->now = now;
	d->head = head;
	d->mode = !live ? DS_CATCHUP : streq(live, "sse") ? DS_SSE : DS_LONG_POLL;
	d->deadline = now_usec() + (usec_t)DS_LONG_POLL_MS * USEC_PER_MSEC;
	const char *inm = http_header(c, "If-None-Match");
	if (inm && !(d->if_none_match = strdup(inm))) {
		ds_read_free(c);
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	if (head || now) {
		int r = COORD_CALL(c->router, RUN_GET,
				   &((Msg_RUN_GET){.run_id = run_id, .thread_id = thread_id}),
				   ds_get_reply, c);
		if (r < 0)
			ds_error(c, -ECONNRESET, NULL);
		return;
	}
	ds_start(d);
}
