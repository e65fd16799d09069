/* SPDX-License-Identifier: MIT */
/*
 * sse.c — the Server-Sent Events transport of a tail (API.md extension): the
 * same stream route with `Accept: text/event-stream`.
 *
 * The response has no Content-Length and `Connection: close`: the body ends
 * when routerd closes the connection (a close-delimited HTTP/1.1 body, which
 * every EventSource accepts, and no chunked framing to get wrong). Each event
 * is `id: <seq>` plus `data:` lines; the end is `event: status`, a failure
 * `event: error` — then the connection is closed. A comment line (`: ping`)
 * every ws_ping_interval_ms keeps proxies from timing the stream out.
 * Flow control is the tail's: the bufferevent output is the queue.
 *
 * A sandbox exec's NDJSON (routes-sandbox.c) is chunked instead when the
 * request allows keep-alive (c->chunked): one chunk per line, the last line
 * and the last chunk in one write, and the connection then serves requests
 * again (http_conn_stream_done), so a client's keep-alive agent pays no TCP
 * set-up and teardown per exec. Bytes the client sends meanwhile wait,
 * unparsed, for that (at most SSE_HELD_INPUT_MAX of them).
 */
#include "config.h"

#include "transport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "log.h"
#include "macro.h"

/* A chunked stream's client may send its next request early (pipelining):
 * it waits in the input buffer; more than this is no request worth waiting
 * for. */
#define SSE_HELD_INPUT_MAX (64 * 1024)

/* The chunk-size line of a chunk of n bytes. */
static int
chunk_head(char buf[static 20], size_t n)
{
	return snprintf(buf, 20, "%zx\r\n", n);
}

bool
sse_wanted(const HttpConn *c)
{
	return http_header_has_token(c, "Accept", "text/event-stream") ||
	       /* "text/event-stream;q=1" and friends */
	       (http_header(c, "Accept") && strstr(http_header(c, "Accept"), "text/event-stream"));
}

static void
sse_ping_cb(evutil_socket_t fd, short what, void *arg)
{
	HttpConn *c = arg;

	if (c->state != CONN_SSE)
		return;
	/* NDJSON readers skip blank lines */
	if (c->chunked)
		(void)http_conn_write(c, "1\r\n\n\r\n", 6);
	else if (c->ndjson)
		(void)http_conn_write(c, "\n", 1);
	else
		(void)http_conn_write(c, ": ping\n\n", 8);
}

/* Nothing a client sends on an event stream means anything. */
static void
sse_on_read(HttpConn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	if (!c->chunked)
		evbuffer_drain(in, SIZE_MAX);
	else if (evbuffer_get_length(in) > SSE_HELD_INPUT_MAX) {
		log_debug("%s: too much input during a chunked stream, closing", c->addr);
		http_conn_abort(c);
	}
}

static const ConnOps sse_conn_ops = {
    .on_read = sse_on_read,
};

int
sse_accept(HttpConn *c)
{
	const RouterConf *conf = c->router->conf;
	struct evbuffer *head;
	int r;

	c->ops = &sse_conn_ops;
	if (conf->ws_ping_interval_ms > 0) {
		c->ping_timer = event_new(c->router->base, -1, EV_PERSIST, sse_ping_cb, c);
		if (!c->ping_timer)
			return -ENOMEM;
	}
	head = evbuffer_new();
	if (!head || evbuffer_add_printf(head,
					 "HTTP/1.1 200 OK\r\n"
					 "Content-Type: %s; charset=utf-8\r\n"
					 "Cache-Control: no-cache\r\n"
					 "X-Accel-Buffering: no\r\n"
					 "%s"
					 "%s\r\n"
					 /* the reconnection delay an EventSource uses */
					 "%s",
					 c->ndjson ? "application/x-ndjson" : "text/event-stream",
					 c->req.cors ? c->req.cors : "",
					 c->chunked ? "Transfer-Encoding: chunked\r\n"
						    : "Connection: close\r\n",
					 c->ndjson ? "" : "retry: 1000\n\n") < 0) {
		if (head)
			evbuffer_free(head);
		return -ENOMEM;
	}
	r = http_conn_write_buffer(c, head);
	evbuffer_free(head);
	if (r < 0)
		return r;
	http_conn_upgraded(c, 200, CONN_SSE);
	return 0;
}

/* `data:` lines for text: one per line of it (a JSON text has no raw newline
 * unless its producer pretty-printed it; split anyway, the client joins the
 * lines with "\n" again). */
static int
sse_add_data(struct evbuffer *out, const char *text, size_t len)
{
	size_t i = 0;

	do {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		if (n > 0 && text[i + n - 1] == '\r')
			n--; /* CR is a line end to SSE as well */
		if (evbuffer_add(out, "data: ", 6) < 0 || evbuffer_add(out, text + i, n) < 0 ||
		    evbuffer_add(out, "\n", 1) < 0)
			return -ENOMEM;
		i += (nl ? (size_t)(nl - (text + i)) + 1 : len - i);
	} while (i < len);
	return evbuffer_add(out, "\n", 1) < 0 ? -ENOMEM : 0;
}

/* One event, formatted whole, then written at once. */
int
sse_send(HttpConn *c, int64_t id, const char *event, const char *text, size_t len)
{
	struct evbuffer *out;
	int r = 0;

	if (c->state != CONN_SSE)
		return -ECONNRESET;
	out = evbuffer_new();
	if (!out)
		return -ENOMEM;
	if (id >= 0 && evbuffer_add_printf(out, "id: %" PRId64 "\n", id) < 0)
		r = -ENOMEM;
	if (r >= 0 && event && evbuffer_add_printf(out, "event: %s\n", event) < 0)
		r = -ENOMEM;
	if (r >= 0)
		r = sse_add_data(out, text, len);
	if (r >= 0)
		r = http_conn_write_buffer(c, out);
	evbuffer_free(out);
	return r;
}

static int
chunk_line(HttpConn *c, const char *text, size_t len, bool last)
{
	char head[20];
	static const char tail[] = "\n\r\n0\r\n\r\n";

	if (c->chunk_end)
		return -ECONNRESET;
	c->chunk_end = last;
	return http_conn_writev(
	    c,
	    (const struct iovec[]){{.iov_base = head, .iov_len = (size_t)chunk_head(head, len + 1)},
				   {.iov_base = (void *)text, .iov_len = len},
				   {.iov_base = (void *)tail, .iov_len = last ? 8 : 3}},
	    3);
}

int
sse_end_line(HttpConn *c, const char *text, size_t len)
{
	if (c->state != CONN_SSE)
		return -ECONNRESET;
	return c->chunked ? chunk_line(c, text, len, true) : sse_send_line(c, text, len);
}

int
sse_send_line(HttpConn *c, const char *text, size_t len)
{
	if (c->state != CONN_SSE)
		return -ECONNRESET;
	if (c->chunked)
		return chunk_line(c, text, len, false);
	return http_conn_writev(c,
				(const struct iovec[]){{.iov_base = (void *)text, .iov_len = len},
						       {.iov_base = "\n", .iov_len = 1}},
				2);
}

/* End the stream; error_event: an abnormal end is told in an `error` event
 * first (not on /chat's streams: the stock client would take it for a
 * chunk, and resumes with Last-Event-ID). */
static void
sse_end(HttpConn *c, uint16_t code, const char *reason, bool error_event)
{
	if (c->state != CONN_SSE)
		return;
	if (code == 1008 || code == 1013) {
		/* over its queue or the tails' budget: flushing would wait for the
		 * slow reader */
		http_conn_abort(c);
		return;
	}
	if (code != 1000 && error_event && !c->chunked) {
		json_auto_t *j = json_pack("{s:s, s:s}", "error", reason ? reason : "error", "code",
					   code == 1001 ? "shutting_down" : "stream_failed");
		_cleanup_free_ char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (s)
			(void)sse_send(c, -1, "error", s, strlen(s));
	}
	if (c->chunked) {
		/* the body's end (unless sse_end_line wrote it), then the next
		 * request */
		if (!c->chunk_end && http_conn_write(c, "0\r\n\r\n", 5) < 0)
			return;
		http_conn_stream_done(c);
		return;
	}
	c->state = CONN_HTTP; /* http_conn_close moves on from a serving state */
	http_conn_close(c);
}

void
sse_close(HttpConn *c, uint16_t code, const char *reason)
{
	sse_end(c, code, reason, true);
}

/* /chat's SSE and NDJSON streams end without an error event. */
static void
sse_close_chat(HttpConn *c, uint16_t code, const char *reason)
{
	sse_end(c, code, reason, false);
}

static size_t
sse_pending(const HttpConn *c)
{
	return http_conn_output_pending(c);
}

static int
sse_sink_send(HttpConn *c, int64_t seq, const char *msg, size_t len)
{
	return sse_send(c, seq, seq < 0 ? "status" : NULL, msg, len);
}

static int
ndjson_sink_send(HttpConn *c, int64_t seq, const char *msg, size_t len)
{
	return sse_send_line(c, msg, len);
}

static bool
sse_open(const HttpConn *c)
{
	return c->state == CONN_SSE;
}

const TailSink sse_tail_sink = {
    .send = sse_sink_send,
    .close = sse_close,
    .pending = sse_pending,
    .open = sse_open,
};

const TailSink sse_chat_tail_sink = {
    .send = sse_sink_send,
    .close = sse_close_chat,
    .pending = sse_pending,
    .open = sse_open,
};

const TailSink ndjson_tail_sink = {
    .send = ndjson_sink_send,
    .close = sse_close_chat,
    .pending = sse_pending,
    .open = sse_open,
};
