/* SPDX-License-Identifier: MIT */
/*
 * http.c — client connections: HTTP/1.1 request parsing with http-parser on a
 * raw bufferevent, responses, keep-alive, pipelining and limits.
 *
 * Why not evhttp: it cannot hand a connection over to a WebSocket, answers
 * pipelined requests only after reading them all, and enforces no header
 * byte limit while parsing.
 *
 * One request at a time per connection: on_message_complete pauses the
 * parser, the request is dispatched, and what arrives before its response is
 * queued stays unparsed (reading stops at the first such bytes); then parsing
 * resumes on the input already buffered. Responses are therefore queued in
 * request order.
 */
#include "config.h"

#include "http-conn.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <http_parser.h>

#include "fd-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

#define LINGER_USEC (1 * USEC_PER_SEC)
/* A pipelining client that does not read its answers stops being parsed
 * once this much output waits; the write-drained callback resumes it. */
#define HTTP_OUTPUT_PAUSE (256 * 1024)

static void conn_process(HttpConn *c);
static void conn_uncork_discard(HttpConn *c);

static void
req_reset(HttpRequest *q)
{
	free(q->url);
	for (size_t i = 0; i < q->n_headers; i++) {
		free(q->headers[i].name);
		free(q->headers[i].value);
	}
	free(q->headers);
	free(q->body);
	free(q->path);
	free(q->cors);
	*q = (HttpRequest){0};
}

/* Append len bytes to a NUL-terminated heap string *s of length *n of c's
 * request. 0, or -1 (http-parser's failure) with a 500 for c when out of
 * memory. */
static int
req_append(HttpConn *c, char **s, size_t *n, const char *at, size_t len)
{
	char *p = realloc(*s, *n + len + 1);
	if (!p) {
		c->fail_status = 500;
		return -1;
	}
	memcpy(p + *n, at, len);
	*n += len;
	p[*n] = '\0';
	*s = p;
	return 0;
}

/* Counts len bytes of the head; the connection, or NULL (431 set) over the limit. */
static HttpConn *
header_budget(http_parser *p, size_t len)
{
	HttpConn *c = p->data;

	c->req.header_bytes += len;
	if (c->req.header_bytes > (size_t)c->router->conf->max_header_bytes) {
		c->fail_status = 431;
		return NULL;
	}
	return c;
}

static int
on_message_begin(http_parser *p)
{
	HttpConn *c = p->data;
	struct timeval tv;

	req_reset(&c->req);
	c->req.started = now_usec();
	/* The idle timeout restarts with every byte; this one bounds the whole
	 * head, so a client trickling a header a byte at a time is cut off. The
	 * first request keeps the deadline set at accept (first_request_timeout_ms)
	 * when that comes sooner. */
	usec_t head = (usec_t)c->router->conf->header_timeout_ms * USEC_PER_MSEC;
	if (c->unserved) {
		usec_t first = c->accepted_at +
			       (usec_t)c->router->conf->first_request_timeout_ms * USEC_PER_MSEC;
		if (first < c->req.started + head)
			head = first > c->req.started ? first - c->req.started : 1;
	}
	evtimer_add(c->head_timer, timeval_from_usec(&tv, head));
	return 0;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
	HttpConn *c = header_budget(p, len);
	if (!c)
		return -1;
	return req_append(c, &c->req.url, &c->req.url_len, at, len);
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	HttpConn *c = header_budget(p, len);
	HttpRequest *q;

	if (!c)
		return -1;
	q = &c->req;
	if (q->n_headers == 0 || q->in_value) {
		if (q->n_headers >= ROUTER_MAX_HEADERS) {
			c->fail_status = 431;
			return -1;
		}
		if (q->n_headers == q->headers_cap) {
			size_t cap =
			    MIN(MAX(q->headers_cap * 2, (size_t)16), (size_t)ROUTER_MAX_HEADERS);
			HttpHeader *h = realloc(q->headers, cap * sizeof(*h));
			if (!h) {
				c->fail_status = 500;
				return -1;
			}
			memset(h + q->headers_cap, 0, (cap - q->headers_cap) * sizeof(*h));
			q->headers = h;
			q->headers_cap = cap;
		}
		q->n_headers++;
		q->n_name = q->n_value = 0;
		q->in_value = false;
		q->header_bytes += 4; /* ": " and CRLF */
	}
	return req_append(c, &q->headers[q->n_headers - 1].name, &q->n_name, at, len);
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	HttpConn *c = header_budget(p, len);

	if (!c || c->req.n_headers == 0)
		return -1;
	c->req.in_value = true;
	return req_append(c, &c->req.headers[c->req.n_headers - 1].value, &c->req.n_value, at, len);
}

/* RFC 9110 token characters (a header field name). */
static bool
is_token(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!strchr("!#$%&'*+-.^_`|~", *s) && !(*s >= '0' && *s <= '9') &&
		    !((*s | 0x20) >= 'a' && (*s | 0x20) <= 'z'))
			return false;
	return true;
}

static int
fail_400(HttpConn *c, int status, const char *msg)
{
	c->fail_status = status;
	c->fail_msg = msg;
	return -1;
}

/* The body limit of the request being parsed: max_body, or max_file_body
 * where the route table says so (a file PUT, routes-files.c). Decided once
 * per request, when its head is complete. */
static uint64_t
body_limit(const HttpConn *c, const http_parser *p)
{
	const RouterConf *conf = c->router->conf;

	if (c->router->big_body && c->router->big_body(c->req.url, c->req.url_len, p->method))
		return (uint64_t)MAX(conf->max_body, conf->max_file_body);
	return (uint64_t)conf->max_body;
}

static int
on_headers_complete(http_parser *p)
{
	HttpConn *c = p->data;
	HttpRequest *q = &c->req;
	size_t n_host = 0, n_te = 0;

	c->in_body = true;
	evtimer_del(c->head_timer);
	c->unserved = addr_unserved_release(c->router->unserved, c->unserved);
	if (p->http_major != 1)
		return fail_400(c, 505, "only HTTP/1.0 and HTTP/1.1 are served");
	for (size_t i = 0; i < q->n_headers; i++) {
		/* http-parser (built lenient) lets a space into a field name:
		 * "Content-Length : 5" must be refused (RFC 9112 §5.1). */
		if (!q->headers[i].name || !is_token(q->headers[i].name))
			return fail_400(c, 400, "malformed header field name");
		if (strcasecmp(q->headers[i].name, "Host") == 0)
			n_host++;
		else if (strcasecmp(q->headers[i].name, "Transfer-Encoding") == 0)
			n_te++;
	}
	if (n_host > 1 || (n_host == 0 && p->http_minor >= 1))
		return fail_400(c, 400, "an HTTP/1.1 request needs exactly one Host header");
	if (n_te > 1)
		return fail_400(c, 400, "repeated Transfer-Encoding header");
	for (size_t i = 0; i < q->n_headers; i++) {
		/* a field without value ("X-A:") still gets an empty string */
		if (!q->headers[i].value && !(q->headers[i].value = strdup(""))) {
			c->fail_status = 500;
			return -1;
		}
		char *v = q->headers[i].value;
		size_t n = strlen(v);
		while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			v[--n] = '\0';
	}
	/* Refuse an announced oversize body before reading a byte of it. */
	q->body_max = body_limit(c, p);
	if ((p->flags & F_CONTENTLENGTH) && p->content_length != ULLONG_MAX &&
	    p->content_length > q->body_max) {
		c->fail_status = 413;
		return -1;
	}
	const char *expect = http_header(c, "Expect");
	if (expect && strcasecmp(expect, "100-continue") == 0 && p->http_major == 1 &&
	    p->http_minor >= 1)
		if (http_conn_write(c, "HTTP/1.1 100 Continue\r\n\r\n",
				    STRLEN("HTTP/1.1 100 Continue\r\n\r\n")) < 0)
			return -1; /* the connection is gone */
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	HttpConn *c = p->data;
	HttpRequest *q = &c->req;

	if (q->body_len + len > q->body_max) {
		c->fail_status = 413;
		return -1;
	}
	if (q->body_len + len + 1 > q->body_cap) {
		size_t cap = MAX(q->body_cap * 2, q->body_len + len + 1);
		cap = MAX(cap, (size_t)4096);
		char *b = realloc(q->body, cap);
		if (!b) {
			c->fail_status = 500;
			return -1;
		}
		q->body = b;
		q->body_cap = cap;
	}
	memcpy(q->body + q->body_len, at, len);
	q->body_len += len;
	q->body[q->body_len] = '\0';
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	HttpConn *c = p->data;
	HttpRequest *q = &c->req;

	q->method = p->method;
	q->http_major = p->http_major;
	q->http_minor = p->http_minor;
	q->keep_alive = http_should_keep_alive(p);
	q->upgrade = p->upgrade;
	q->complete = true;
	c->in_body = false;
	c->line_start = false;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

const char *
http_header(const HttpConn *c, const char *name)
{
	for (size_t i = 0; i < c->req.n_headers; i++)
		if (c->req.headers[i].name && strcasecmp(c->req.headers[i].name, name) == 0)
			return c->req.headers[i].value;
	return NULL;
}

bool
http_header_has_token(const HttpConn *c, const char *name, const char *token)
{
	size_t tl = strlen(token);

	for (size_t i = 0; i < c->req.n_headers; i++) {
		const HttpHeader *h = &c->req.headers[i];
		if (!h->name || !h->value || strcasecmp(h->name, name) != 0)
			continue;
		for (const char *s = h->value; *s;) {
			s += strspn(s, " \t,");
			size_t n = strcspn(s, ",");
			size_t m = n;
			while (m > 0 && (s[m - 1] == ' ' || s[m - 1] == '\t'))
				m--;
			if (m == tl && strncasecmp(s, token, tl) == 0)
				return true;
			s += n;
		}
	}
	return false;
}

static void
conn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	/* Every use of the connection timer ends the connection: deferred free,
	 * lingering-close deadline, WebSocket close deadline. */
	http_conn_free(arg);
}

static void
head_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	HttpConn *c = arg;

	if (c->state != CONN_HTTP || c->busy || c->in_body)
		return;
	log_debug("%s: request head not complete in time", c->addr);
	c->busy = true;
	http_respond_error_close(c, 408, "request_timeout", "request head not received in time");
}

static void
conn_arm_timer(HttpConn *c, usec_t usec)
{
	struct timeval tv;
	evtimer_add(c->timer, timeval_from_usec(&tv, usec));
}

void
http_conn_abort(HttpConn *c)
{
	if (c->state == CONN_DEAD)
		return;
	c->state = CONN_DEAD;
	conn_uncork_discard(c);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	conn_arm_timer(c, 0);
}

/* Whether bytes for c may go straight to the socket now: it is open for
 * output and nothing written earlier still waits in the bufferevent. */
static bool
conn_direct_ok(HttpConn *c, struct evbuffer *out)
{
	return c->state != CONN_DEAD && !c->half_closed && evbuffer_get_length(out) == 0;
}

/* A failed write(): EAGAIN is not an error (the caller buffers what is left);
 * anything else (EPIPE, ECONNRESET, ...) ends the connection, as a write
 * error of the bufferevent does. */
static int
conn_write_failed(HttpConn *c, int err)
{
	if (err == EAGAIN || err == EWOULDBLOCK)
		return 0;
	log_debug_errno(err, "%s: write failed: %m", c->addr);
	http_conn_abort(c);
	return -err;
}

/* Drop what a corked connection gathered (it is being aborted or freed). */
static void
conn_uncork_discard(HttpConn *c)
{
	if (c->router->corked != c)
		return;
	c->router->corked = NULL;
	evbuffer_drain(c->router->cork_buf, SIZE_MAX);
}

void
http_conn_cork(HttpConn *c)
{
	Router *r = c->router;

	if (r->corked == c || c->state == CONN_DEAD)
		return;
	if (r->corked)
		(void)http_conn_uncork(r->corked);
	if (!r->cork_buf && !(r->cork_buf = evbuffer_new()))
		return; /* not corked: each write goes on its own */
	r->corked = c;
}

int
http_conn_uncork(HttpConn *c)
{
	if (c->router->corked != c)
		return 0;
	c->router->corked = NULL;
	return http_conn_write_buffer(c, c->router->cork_buf);
}

size_t
http_conn_output_pending(const HttpConn *c)
{
	size_t n = evbuffer_get_length(bufferevent_get_output(c->bev));
	if (c->router->corked == c)
		n += evbuffer_get_length(c->router->cork_buf);
	return n;
}

int
http_conn_writev(HttpConn *c, const struct iovec *iov, int n)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	size_t done = 0;
	int i = 0;

	if (c->state == CONN_DEAD)
		return -ECONNRESET;
	if (c->router->corked == c)
		out = c->router->cork_buf; /* written at http_conn_uncork() */
	else if (conn_direct_ok(c, out)) {
		ssize_t k;
		do
			k = writev(bufferevent_getfd(c->bev), iov, n);
		while (k < 0 && errno == EINTR);
		if (k < 0) {
			int r = conn_write_failed(c, errno);
			if (r < 0)
				return r;
		} else
			done = (size_t)k;
	}
	/* the rest, in order, for libevent to flush when the socket takes it */
	for (; i < n; i++) {
		if (done >= iov[i].iov_len) {
			done -= iov[i].iov_len;
			continue;
		}
		if (evbuffer_add(out, (const char *)iov[i].iov_base + done, iov[i].iov_len - done) <
		    0) {
			http_conn_abort(c);
			return -ENOMEM;
		}
		done = 0;
	}
	return 0;
}

int
http_conn_write(HttpConn *c, const void *data, size_t len)
{
	struct iovec v = {.iov_base = (void *)data, .iov_len = len};
	return http_conn_writev(c, &v, 1);
}

int
http_conn_write_buffer(HttpConn *c, struct evbuffer *buf)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);

	if (c->state == CONN_DEAD) {
		evbuffer_drain(buf, SIZE_MAX);
		return -ECONNRESET;
	}
	if (c->router->corked == c)
		out = c->router->cork_buf; /* written at http_conn_uncork() */
	else if (conn_direct_ok(c, out) && evbuffer_get_length(buf) > 0) {
		int k;
		do
			k = evbuffer_write(buf, bufferevent_getfd(c->bev));
		while (k < 0 && errno == EINTR);
		if (k < 0) {
			int r = conn_write_failed(c, errno);
			if (r < 0) {
				evbuffer_drain(buf, SIZE_MAX);
				return r;
			}
		}
	}
	if (evbuffer_get_length(buf) > 0 && evbuffer_add_buffer(out, buf) < 0) {
		evbuffer_drain(buf, SIZE_MAX);
		http_conn_abort(c);
		return -ENOMEM;
	}
	return 0;
}

/* After the last response of the connection is queued: flush it, half-close,
 * and read (discarding) for a moment, so a client still sending its body is
 * not answered with a RST that would destroy the response it has not read. */
/* Output flushed: send FIN and give the client at most LINGER_USEC to close. */
static void
conn_half_close(HttpConn *c)
{
	if (c->half_closed)
		return;
	c->half_closed = true;
	shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	if (!evtimer_pending(c->timer, NULL))
		conn_arm_timer(c, LINGER_USEC);
}

void
http_conn_close(HttpConn *c)
{
	if (c->state == CONN_CLOSING || c->state == CONN_DEAD)
		return;
	if (http_conn_uncork(c) < 0) /* what it gathered goes before the FIN */
		return;
	c->state = CONN_CLOSING;
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	evbuffer_drain(bufferevent_get_input(c->bev), SIZE_MAX);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_half_close(c);
}

static void
log_request(HttpConn *c, int status)
{
	const HttpRequest *q = &c->req;
	const char *path = q->path;
	size_t plen;

	if (!path) {
		path = q->url ? q->url : "";
		plen = strcspn(path, "?");
	} else
		plen = strlen(path);
	plen = MIN(plen, (size_t)256);
	if (status >= 100 && status < 600)
		c->router->http_responses[status / 100]++;
	/* 503 while the coordinator is down is logged once, by the link */
	log_full(status >= 500 && status != 503 ? LOG_WARNING : LOG_DEBUG, "%s: %s '%.*s' %d",
		 c->addr, q->complete ? http_method_str(q->method) : "-", (int)plen, path, status);
}

static const char *
status_reason(int status)
{
	switch (status) {
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 426: return "Upgrade Required";
	case 431: return "Request Header Fields Too Large";
	default: return http_status_str((enum http_status)status);
	}
}

/* The status line and headers of a response, snprintf-style. */
static int
response_head(const HttpConn *c, char *buf, size_t size, int status, const char *content_type,
	      size_t len, const char *extra_headers, bool close)
{
	const HttpRequest *q = &c->req;

	return snprintf(buf, size, "HTTP/1.1 %d %s\r\n%s%s%sContent-Length: %zu\r\n%s%s%s\r\n",
			status, status_reason(status), content_type ? "Content-Type: " : "",
			content_type ? content_type : "", content_type ? "\r\n" : "", len,
			close		     ? "Connection: close\r\n"
			: q->http_minor == 0 ? "Connection: keep-alive\r\n"
					     : "",
			q->cors ? q->cors : "", extra_headers ? extra_headers : "");
}

void
http_respond(HttpConn *c, int status, const char *content_type, const char *body, size_t len,
	     const char *extra_headers, bool close)
{
	HttpRequest *q = &c->req;
	char stack[512];
	_cleanup_free_ char *heap = NULL;
	char *head = stack;
	int n, r;

	if (c->state != CONN_HTTP)
		return;
	if (!q->complete || !q->keep_alive || q->upgrade || c->router->stopping)
		close = true;
	/* the head formatted once (on the heap when long), then head and body
	 * in one write */
	n = response_head(c, stack, sizeof(stack), status, content_type, len, extra_headers, close);
	if (n >= (int)sizeof(stack)) {
		head = heap = malloc((size_t)n + 1);
		n = heap ? response_head(c, heap, (size_t)n + 1, status, content_type, len,
					 extra_headers, close)
			 : -1;
	}
	log_request(c, status);
	if (n < 0) {
		log_warning("%s: failed to format a response, dropping the connection", c->addr);
		http_conn_abort(c);
		return;
	}
	r = http_conn_writev(c,
			     (const struct iovec[]){{.iov_base = head, .iov_len = (size_t)n},
						    {.iov_base = (void *)body, .iov_len = len}},
			     len > 0 ? 2 : 1);
	if (r < 0) /* the connection is gone (http_conn_writev said why) */
		return;
	req_reset(q);
	c->busy = false;
	if (close) {
		http_conn_close(c);
		return;
	}
	bufferevent_enable(c->bev, EV_READ);
	conn_process(c);
}

void
http_respond_json(HttpConn *c, int status, const json_t *j)
{
	_cleanup_free_ char *s = json_dump_compact(j);
	if (!s) {
		static const char oom[] = "{\"error\":\"out of memory\",\"code\":\"internal\"}";
		http_respond(c, 500, "application/json; charset=utf-8", oom, STRLEN(oom), NULL,
			     true);
		return;
	}
	http_respond(c, status, "application/json; charset=utf-8", s, strlen(s), NULL, false);
}

static void
respond_error(HttpConn *c, int status, const char *code, const char *message, const char *extra,
	      bool close)
{
	json_auto_t *j = json_pack("{s:s, s:s}", "error", message, "code", code);
	_cleanup_free_ char *s = j ? json_dump_compact(j) : NULL;

	if (!s) {
		static const char oom[] = "{\"error\":\"out of memory\",\"code\":\"internal\"}";
		http_respond(c, 500, "application/json; charset=utf-8", oom, STRLEN(oom), NULL,
			     true);
		return;
	}
	http_respond(c, status, "application/json; charset=utf-8", s, strlen(s), extra, close);
}

void
http_respond_error(HttpConn *c, int status, const char *code, const char *message)
{
	respond_error(c, status, code, message, NULL, false);
}

void
http_respond_error_headers(HttpConn *c, int status, const char *code, const char *message,
			   const char *extra_headers)
{
	respond_error(c, status, code, message, extra_headers, false);
}

void
http_respond_error_close(HttpConn *c, int status, const char *code, const char *message)
{
	respond_error(c, status, code, message, NULL, true);
}

void
http_respond_405(HttpConn *c, const char *allow)
{
	char hdr[128];
	snprintf(hdr, sizeof(hdr), "Allow: %s\r\n", allow);
	respond_error(c, 405, "method_not_allowed", "method not allowed", hdr, false);
}

void
http_conn_upgraded(HttpConn *c, int status, HttpConnState state)
{
	const RouterConf *conf = c->router->conf;
	struct timeval tv;

	log_request(c, status);
	req_reset(&c->req);
	c->busy = false;
	c->state = state;
	/* no request head is read any more */
	event_free(c->head_timer);
	c->head_timer = NULL;
	if (c->ping_timer)
		event_add(c->ping_timer, timeval_from_usec(&tv, (usec_t)conf->ws_ping_interval_ms *
								    USEC_PER_MSEC));
	/* A tail may be silent for long: only a client that stops reading
	 * (write timeout) or stops answering at TCP level is dropped. */
	timeval_from_usec(&tv, (usec_t)conf->idle_timeout_ms * USEC_PER_MSEC);
	bufferevent_set_timeouts(c->bev, NULL, &tv);
	bufferevent_setwatermark(c->bev, EV_WRITE, (size_t)conf->ws_max_queue / 4, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

void
http_conn_stream_done(HttpConn *c)
{
	const RouterConf *conf = c->router->conf;
	struct timeval tv;

	if (c->state != CONN_SSE)
		return;
	if (c->ping_timer) {
		event_free(c->ping_timer);
		c->ping_timer = NULL;
	}
	c->ops = NULL;
	c->on_drained = NULL;
	c->ndjson = c->chunked = c->chunk_end = false;
	c->state = CONN_HTTP;
	c->busy = false;
	if (c->router->stopping ||
	    !(c->head_timer = evtimer_new(c->router->base, head_timer_cb, c))) {
		http_conn_close(c);
		return;
	}
	/* as between any two requests (http_conn_new) */
	timeval_from_usec(&tv, (usec_t)conf->idle_timeout_ms * USEC_PER_MSEC);
	bufferevent_set_timeouts(c->bev, &tv, &tv);
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	conn_process(c); /* a request the client sent meanwhile */
}

/* A parse failure: the stream cannot be trusted any more, answer and close. */
static void
conn_parse_failed(HttpConn *c, enum http_errno e)
{
	c->busy = true;
	switch (c->fail_status) {
	case 400:
	case 505:
		http_respond_error_close(c, c->fail_status,
					 c->fail_status == 400 ? "bad_request"
							       : "http_version_not_supported",
					 c->fail_msg);
		break;
	case 413:
		http_respond_error_close(c, 413, "payload_too_large",
					 "request body exceeds the configured limit");
		break;
	case 431:
		http_respond_error_close(c, 431, "headers_too_large",
					 "request headers exceed the configured limit");
		break;
	case 500: http_respond_error_close(c, 500, "internal", "out of memory"); break;
	default:
		if (e == HPE_HEADER_OVERFLOW)
			http_respond_error_close(c, 431, "headers_too_large",
						 "request headers exceed the configured limit");
		else
			http_respond_error_close(c, 400, "bad_request", http_errno_description(e));
	}
}

/* A bridge connection's first line, from the shim (never from the sandbox,
 * whose bytes follow it): which run's forward the connection came through.
 * 1 when read, 0 when more bytes are needed, negative errno when it is not
 * such a line (the connection is dropped: only the shim connects here). */
static int
bridge_hello(HttpConn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	const size_t max = STRLEN(BRIDGE_HELLO) + BRIDGE_RUN_MAX + 2;
	size_t len = evbuffer_get_length(in), n = len < max ? len : max;
	char *p = (char *)evbuffer_pullup(in, (ssize_t)n);
	char *lf = p ? memchr(p, '\n', n) : NULL;

	if (!lf)
		return n < max ? 0 : -EBADMSG;
	size_t idl = (size_t)(lf - p) - STRLEN(BRIDGE_HELLO) - 1;
	if ((size_t)(lf - p) < STRLEN(BRIDGE_HELLO) + 2 || lf[-1] != '\r' ||
	    memcmp(p, BRIDGE_HELLO, STRLEN(BRIDGE_HELLO)) != 0)
		return -EBADMSG;
	const char *id = p + STRLEN(BRIDGE_HELLO);
	for (size_t i = 0; i < idl; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
			    id[i]) ||
		    !id[i])
			return -EBADMSG;
	memcpy(c->bridge_run, id, idl);
	c->bridge_run[idl] = '\0';
	evbuffer_drain(in, (size_t)(lf - p) + 1);
	return 1;
}

static void
conn_process(HttpConn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);

	if (c->in_process)
		return;
	if (c->bridge && !c->bridge_run[0] && c->state == CONN_HTTP) {
		int r = bridge_hello(c);
		if (r == 0)
			return;
		if (r < 0) {
			log_warning("%s: not a bridge forward's first line, closing", c->addr);
			http_conn_abort(c);
			return;
		}
		snprintf(c->addr, sizeof(c->addr), "bridge:%.40s", c->bridge_run);
	}
	c->in_process = true;
	while (c->state == CONN_HTTP && !c->busy) {
		struct evbuffer_iovec v;
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) > HTTP_OUTPUT_PAUSE) {
			bufferevent_disable(c->bev, EV_READ);
			break;
		}
		if (evbuffer_get_length(in) == 0 || evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		const char *at = v.iov_base;
		size_t len = v.iov_len;
		if (!c->in_body) {
			/* In the head, feed one line at a time so that what the
			 * lenient http-parser accepts can be refused: a bare LF
			 * (request smuggling via line-ending disagreement) and
			 * obs-fold continuation lines (RFC 9112 §2.2, §5.2). */
			const char *lf = memchr(at, '\n', len);
			if (c->line_start && (at[0] == ' ' || at[0] == '\t')) {
				fail_400(c, 400, "obsolete line folding in the request head");
				conn_parse_failed(c, HPE_UNKNOWN);
				break;
			}
			if (lf) {
				if (lf == at ? !c->prev_cr : lf[-1] != '\r') {
					fail_400(c, 400, "bare LF in the request head");
					conn_parse_failed(c, HPE_UNKNOWN);
					break;
				}
				len = (size_t)(lf - at) + 1;
			}
		}
		size_t n = http_parser_execute(&c->parser, &parser_settings, at, len);
		enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
		if (n > 0 && !c->in_body && e != HPE_PAUSED) {
			c->prev_cr = at[n - 1] == '\r';
			c->line_start = at[n - 1] == '\n';
		}
		evbuffer_drain(in, n);
		if (e == HPE_PAUSED) {
			http_parser_pause(&c->parser, 0);
			/* Reading stays enabled: turning it off and on again for
			 * every request cost two epoll_ctl calls. Bytes that do
			 * arrive meanwhile turn it off (read_cb), an EOF or idle
			 * timeout waits for the answer (event_cb). */
			c->busy = true;
			c->router->on_request(c);
			continue;
		}
		if (e != HPE_OK) {
			conn_parse_failed(c, e);
			break;
		}
		if (n < len) /* cannot happen without an error; do not spin */
			break;
	}
	c->in_process = false;
}

static void
pass_uncork_cb(evutil_socket_t fd, short what, void *arg)
{
	Router *r = arg;

	r->pass_corked = false;
	peer_uncork();
}

/* Hold the IPC frames that the requests read in this loop pass send (to
 * coordinatord) until the pass's other callbacks ran, then send them in one
 * write per peer: the event made active here runs after the ones already
 * active (one priority), so under load the requests of one epoll_wait share
 * one write and one wake-up of coordinatord instead of one each. */
static void
pass_cork(Router *r)
{
	if (r->pass_corked)
		return;
	if (!r->pass_uncork && !(r->pass_uncork = event_new(r->base, -1, 0, pass_uncork_cb, r)))
		return; /* not corked: each frame leaves when sent */
	r->pass_corked = true;
	peer_cork();
	event_active(r->pass_uncork, EV_TIMEOUT, 1);
}

static void
read_cb(struct bufferevent *bev, void *arg)
{
	HttpConn *c = arg;

	switch (c->state) {
	case CONN_HTTP:
		/* a request is being answered: what came now waits in the input
		 * buffer, and no more is read until the answer (http_respond) */
		if (c->busy)
			bufferevent_disable(bev, EV_READ);
		else {
			pass_cork(c->router);
			conn_process(c);
		}
		break;
	case CONN_WS:
	case CONN_SSE: c->ops->on_read(c); break;
	case CONN_CLOSING: evbuffer_drain(bufferevent_get_input(bev), SIZE_MAX); break;
	case CONN_DEAD: break;
	}
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	HttpConn *c = arg;

	if (c->state == CONN_CLOSING && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		conn_half_close(c);
	else if ((c->state == CONN_WS || c->state == CONN_SSE) && c->on_drained)
		c->on_drained(c);
	else if (c->state == CONN_HTTP && !c->busy) {
		bufferevent_enable(bev, EV_READ);
		conn_process(c);
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	HttpConn *c = arg;

	/* While a request is answered, reading is not a wait for the client:
	 * its EOF or idle timeout is seen again once the answer re-enables
	 * reading (libevent turned reading off before telling). */
	if ((what & BEV_EVENT_READING) && (what & (BEV_EVENT_EOF | BEV_EVENT_TIMEOUT)) &&
	    c->state == CONN_HTTP && c->busy)
		return;
	if (what & BEV_EVENT_TIMEOUT)
		log_debug("%s: connection timed out", c->addr);
	else if (what & BEV_EVENT_ERROR)
		log_debug_errno(errno, "%s: connection error: %m", c->addr);
	http_conn_free(c);
}

/* The local address of the connection, as a Host header names it: the
 * Host check (routes.c) compares against it, so a wildcard listen address
 * accepts the address each client actually reached. */
static void
conn_local_address(HttpConn *c, int fd)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	char a[INET6_ADDRSTRLEN] = "";

	if (getsockname(fd, (struct sockaddr *)&ss, &l) < 0)
		return;
	if (ss.ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)&ss;
		evutil_inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(c->local, sizeof(c->local), "%s:%u", a, ntohs(s4->sin_port));
		c->local_loopback = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	} else if (ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&ss;
		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			evutil_inet_ntop(AF_INET, &s6->sin6_addr.s6_addr[12], a, sizeof(a));
			c->local_loopback = s6->sin6_addr.s6_addr[12] == 127;
			snprintf(c->local, sizeof(c->local), "%s:%u", a, ntohs(s6->sin6_port));
		} else {
			evutil_inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
			c->local_loopback = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
			snprintf(c->local, sizeof(c->local), "[%s]:%u", a, ntohs(s6->sin6_port));
		}
	}
}

int
http_conn_new(Router *r, int fd, const struct sockaddr *sa, int salen, bool bridge)
{
	_cleanup_close_ int sfd = fd;
	struct timeval tv;
	AddrSlot *slot = NULL;
	HttpConn *c;
	int one = 1, rr;

	/* The per-address cap holds once half of max_connections is in use: a
	 * burst of tails from one client is fine, a flood cannot take the rest. */
	rr = bridge ? 0 /* the shim's, on bridge.sock: not a client address */
		    : addr_unserved_take(r->unserved, sa,
					 r->n_conns * 2 >= (size_t)r->conf->max_connections
					     ? (size_t)r->conf->max_unserved_per_address
					     : 0,
					 &slot);
	if (rr < 0) {
		c = NULL;
		if (rr == -EBUSY) {
			char a[INET6_ADDRSTRLEN] = "?";
			if (sa->sa_family == AF_INET)
				evutil_inet_ntop(AF_INET,
						 &((const struct sockaddr_in *)sa)->sin_addr, a,
						 sizeof(a));
			else if (sa->sa_family == AF_INET6)
				evutil_inet_ntop(AF_INET6,
						 &((const struct sockaddr_in6 *)sa)->sin6_addr, a,
						 sizeof(a));
			if (r->on_conn_refused)
				r->on_conn_refused(r, a);
			return 0; /* closed: not an error of routerd's */
		}
		return rr;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		addr_unserved_release(r->unserved, slot);
		return -ENOMEM;
	}
	c->router = r;
	c->state = CONN_HTTP;
	c->unserved = slot;
	c->accepted_at = now_usec();
	c->bridge = bridge;
	if (sa->sa_family == AF_INET6) {
		char a[INET6_ADDRSTRLEN] = "?";
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		evutil_inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof(a));
		snprintf(c->addr, sizeof(c->addr), "[%s]:%u", a, ntohs(s6->sin6_port));
	} else if (sa->sa_family == AF_INET) {
		char a[INET_ADDRSTRLEN] = "?";
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		evutil_inet_ntop(AF_INET, &s4->sin_addr, a, sizeof(a));
		snprintf(c->addr, sizeof(c->addr), "%s:%u", a, ntohs(s4->sin_port));
	} else
		snprintf(c->addr, sizeof(c->addr), bridge ? "bridge" : "client");
	conn_local_address(c, sfd);
	if (sa->sa_family != AF_UNIX)
		(void)setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->timer = evtimer_new(r->base, conn_timer_cb, c);
	c->head_timer = evtimer_new(r->base, head_timer_cb, c);
	c->bev = c->timer && c->head_timer
		     ? bufferevent_socket_new(r->base, sfd, BEV_OPT_CLOSE_ON_FREE)
		     : NULL;
	if (!c->bev) {
		if (c->timer)
			event_free(c->timer);
		if (c->head_timer)
			event_free(c->head_timer);
		addr_unserved_release(r->unserved, c->unserved);
		free(c);
		return -ENOMEM;
	}
	TAKE_FD(sfd);
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	timeval_from_usec(&tv, (usec_t)r->conf->idle_timeout_ms * USEC_PER_MSEC);
	bufferevent_set_timeouts(c->bev, &tv, &tv);
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	/* the first head must be complete by then, however it trickles in */
	evtimer_add(
	    c->head_timer,
	    timeval_from_usec(&tv, (usec_t)r->conf->first_request_timeout_ms * USEC_PER_MSEC));
	c->prev = NULL;
	c->next = r->conns;
	if (r->conns)
		r->conns->prev = c;
	r->conns = c;
	r->n_conns++;
	if (r->on_conn_added)
		r->on_conn_added(r, c);
	return 0;
}

void
http_conn_free(HttpConn *c)
{
	if (!c)
		return;
	conn_uncork_discard(c);
	coord_cancel(c->router, c);
	if (c->router->on_conn_free)
		c->router->on_conn_free(c);
	if (c->ops && c->ops->on_free)
		c->ops->on_free(c);
	if (c->ping_timer)
		event_free(c->ping_timer);
	if (c->timer)
		event_free(c->timer);
	if (c->head_timer)
		event_free(c->head_timer);
	if (c->bev)
		bufferevent_free(c->bev);
	req_reset(&c->req);
	c->unserved = addr_unserved_release(c->router->unserved, c->unserved);
	if (c->prev)
		c->prev->next = c->next;
	else
		c->router->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->router->n_conns--;
	if (c->router->on_conn_removed)
		c->router->on_conn_removed(c->router, c);
	free(c->sandbox_id);
	free(c->run_thread_id);
	free(c);
}
