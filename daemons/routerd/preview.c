/* SPDX-License-Identifier: MIT */
/*
 * preview.c — live previews (preview.h): the token table and the preview
 * listener.
 *
 * A connection (PvConn) has the client's bufferevent (cli, TCP) and, once
 * its first request head named a live preview, the shim's (shim, the Unix
 * preview socket). Life:
 *   PV_HEAD     parsing the first request head; nothing sent anywhere yet
 *   PV_SHIM     hello sent to the shim, waiting for its "OK" or "ERR" line;
 *               what the client sends meanwhile is parsed and queued
 *   PV_OPEN     client → shim through the request filter (http-parser:
 *               heads rebuilt, bodies passed; after an upgrade, `upgraded`,
 *               as it comes), shim → client as it comes
 *   PV_CLOSING  flushing one side, then free
 * A new connection's first head must be complete within PV_HEAD_TIMEOUT_SEC;
 * an open one carrying no byte either way for PV_IDLE_TIMEOUT_SEC is closed.
 * The client's bytes are parsed while the shim's output holds less than
 * PV_HIGH_WATER; each direction pauses its reading at that mark and resumes
 * at half of it.
 */
#include "config.h"

#include "preview.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <http_parser.h>

#include "id-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "tail.h"
#include "shared-conf.h"
#include "time-util.h"

#define PV_BUCKETS 256
#define PV_HEAD_MAX (16 * 1024)
#define PV_HEAD_TIMEOUT_SEC 20
/* an open connection with no byte either way this long is closed (each
 * side's read timeout, forgiven while the other side moves) */
#define PV_IDLE_TIMEOUT_SEC 300
#define PV_HIGH_WATER (256 * 1024)
#define PV_HOST_MAX 255
#define PV_NAME_MAX 256
#define PV_SHIM_HELLO "RUNWARDEN-PREVIEW "

typedef struct PreviewToken PreviewToken;
struct PreviewToken {
	PreviewToken *next;
	char token[PREVIEW_TOKEN_BYTES * 2 + 1];
	char *thread_id;
	uint16_t port;
	usec_t expires;
	int64_t expires_ms;
};

typedef enum PvState { PV_HEAD, PV_SHIM, PV_OPEN, PV_CLOSING } PvState;
typedef struct PvConn PvConn;

struct PvConn {
	PvConn *prev, *next;
	Preview *pv;
	PvState state;
	struct bufferevent *cli, *shim;
	char addr[64];
	http_parser parser;
	/* the request being parsed: its target, its rebuilt header lines */
	struct evbuffer *url, *head;
	char name[PV_NAME_MAX + 1];
	size_t name_len;
	bool in_value, skip_header, is_host, host_seen, chunked, first_done;
	bool upgraded;		    /* client → shim: past an upgrade request, raw */
	usec_t last_io;		    /* PV_OPEN: the last bytes carried, either way */
	char host[PV_HOST_MAX + 1]; /* this request's Host */
	size_t host_len;
	size_t head_bytes;
	char token[PREVIEW_TOKEN_BYTES * 2 + 1]; /* the preview of the connection */
	/* decided inside a parser callback: answer the client (PV_HEAD) or close */
	int fail_status;
	const char *fail_code, *fail_msg;
};

struct Preview {
	Router *router;
	struct evconnlistener *lev;
	uint16_t port;
	char *shim_path;
	PreviewToken *buckets[PV_BUCKETS];
	size_t n_tokens;
	PvConn *conns;
	size_t n_conns;
};

/* ---------------------------------------------------------------------------
 * Tokens.
 */

static unsigned
bucket_of(const char *token)
{
	unsigned h = 2166136261u;

	for (const char *p = token; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h % PV_BUCKETS;
}

static void
token_free(PreviewToken *t)
{
	free(t->thread_id);
	free(t);
}

static PreviewToken *
token_find(Preview *pv, const char *token)
{
	for (PreviewToken *t = pv->buckets[bucket_of(token)]; t; t = t->next)
		if (streq(t->token, token))
			return t;
	return NULL;
}

/* Drop what expired before `before` (expired ones are kept a while to be
 * answered 410 rather than 404). */
static void
tokens_purge(Preview *pv, usec_t before)
{
	for (size_t i = 0; i < PV_BUCKETS; i++)
		for (PreviewToken **pp = &pv->buckets[i]; *pp;) {
			PreviewToken *t = *pp;
			if (t->expires < before) {
				*pp = t->next;
				token_free(t);
				pv->n_tokens--;
			} else
				pp = &t->next;
		}
}

static int
preview_url(Preview *pv, const PreviewToken *t, char **ret)
{
	const RouterConf *conf = pv->router->conf;

	if (asprintf(ret, "http://%s.%s:%u/", t->token, conf->preview_domain, pv->port) < 0) {
		*ret = NULL;
		return -ENOMEM;
	}
	return 0;
}

int
preview_mint(Preview *pv, const char *thread_id, uint16_t port, char **ret_url,
	     int64_t *ret_expires_ms)
{
	const RouterConf *conf = pv->router->conf;
	usec_t now = now_usec(), ttl = (usec_t)conf->preview_ttl_ms * USEC_PER_MSEC;
	PreviewToken *t = NULL;
	int r;

	for (size_t i = 0; i < PV_BUCKETS && !t; i++)
		for (PreviewToken *x = pv->buckets[i]; x; x = x->next)
			if (x->port == port && x->expires > now && streq(x->thread_id, thread_id)) {
				t = x;
				break;
			}
	if (!t) {
		if (pv->n_tokens >= PREVIEW_MAX_TOKENS)
			tokens_purge(pv, now > ttl ? now - ttl : 0);
		if (pv->n_tokens >= PREVIEW_MAX_TOKENS)
			tokens_purge(pv, now);
		if (pv->n_tokens >= PREVIEW_MAX_TOKENS)
			return -ENOSPC;
		t = calloc(1, sizeof(*t));
		if (!t)
			return -ENOMEM;
		r = random_hex(PREVIEW_TOKEN_BYTES, t->token);
		t->thread_id = strdup(thread_id);
		if (r < 0 || !t->thread_id) {
			token_free(t);
			return r < 0 ? r : -ENOMEM;
		}
		t->port = port;
		unsigned b = bucket_of(t->token);
		t->next = pv->buckets[b];
		pv->buckets[b] = t;
		pv->n_tokens++;
		log_info("Preview %.8s… of port %u of thread %s minted", t->token, port, thread_id);
	}
	t->expires = now + ttl;
	t->expires_ms = now_epoch_ms() + conf->preview_ttl_ms;
	*ret_expires_ms = t->expires_ms;
	return preview_url(pv, t, ret_url);
}

/* The token of a Host "<token>.<domain>[:port]", or NULL (not ours). */
static bool
host_token(const Preview *pv, const char *host, size_t len,
	   char out[static PREVIEW_TOKEN_BYTES * 2 + 1])
{
	const char *domain = pv->router->conf->preview_domain;
	size_t dl = strlen(domain), tl = PREVIEW_TOKEN_BYTES * 2;
	const char *colon = memchr(host, ':', len);

	if (colon)
		len = (size_t)(colon - host);
	if (len > 0 && host[len - 1] == '.')
		len--; /* the absolute form */
	if (len != tl + 1 + dl || host[tl] != '.' || strncasecmp(host + tl + 1, domain, dl) != 0)
		return false;
	for (size_t i = 0; i < tl; i++) {
		char ch = host[i];
		if (ch >= 'A' && ch <= 'F')
			ch = (char)(ch - 'A' + 'a');
		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
			return false;
		out[i] = ch;
	}
	out[tl] = '\0';
	return true;
}

/* ---------------------------------------------------------------------------
 * Connections: life and the bytes from the shim.
 */

static void
pv_free(PvConn *c)
{
	Preview *pv = c->pv;

	if (c->prev)
		c->prev->next = c->next;
	else
		pv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pv->n_conns--;
	if (c->cli)
		bufferevent_free(c->cli);
	if (c->shim)
		bufferevent_free(c->shim);
	if (c->url)
		evbuffer_free(c->url);
	if (c->head)
		evbuffer_free(c->head);
	if (pv->lev && pv->n_conns + 1 == PREVIEW_MAX_CONNS)
		evconnlistener_enable(pv->lev);
	free(c);
}

static void
flushed_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		pv_free(arg);
}

static void
flush_event_cb(struct bufferevent *bev, short what, void *arg)
{
	pv_free(arg);
}

/* Flush what `keep` holds to its peer, drop the other side, then free. */
static void
pv_finish(PvConn *c, struct bufferevent *keep)
{
	c->state = PV_CLOSING;
	if (!keep || evbuffer_get_length(bufferevent_get_output(keep)) == 0) {
		pv_free(c);
		return;
	}
	if (keep == c->cli && c->shim) {
		bufferevent_free(c->shim);
		c->shim = NULL;
	} else if (keep == c->shim && c->cli) {
		bufferevent_free(c->cli);
		c->cli = NULL;
	}
	bufferevent_disable(keep, EV_READ);
	bufferevent_setwatermark(keep, EV_WRITE, 0, 0);
	bufferevent_setcb(keep, NULL, flushed_cb, flush_event_cb, c);
	bufferevent_enable(keep, EV_WRITE);
}

/* routerd's own answer (before any byte of the sandbox's), then close. No
 * CORS header: the preview origin is no client of the API. */
static void
pv_respond_error(PvConn *c, int status, const char *code, const char *message)
{
	json_auto_t *j = json_pack("{s:s,s:s}", "error", message, "code", code);
	_cleanup_free_ char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
	const char *reason = status == 404   ? "Not Found"
			     : status == 410 ? "Gone"
			     : status == 421 ? "Misdirected Request"
			     : status == 431 ? "Request Header Fields Too Large"
			     : status == 502 ? "Bad Gateway"
			     : status == 503 ? "Service Unavailable"
					     : "Bad Request";

	log_info("Preview %s: %d %s", c->addr, status, code);
	if (c->shim) {
		bufferevent_free(c->shim);
		c->shim = NULL;
	}
	evbuffer_add_printf(bufferevent_get_output(c->cli),
			    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			    "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
			    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			    status, reason, body ? strlen(body) : 0, body ? body : "");
	pv_finish(c, c->cli);
}

static bool cli_feed(PvConn *c);
static void cli_read_cb(struct bufferevent *bev, void *arg);

/* The shim's bytes: its answer line first (PV_SHIM), then to the client.
 * false when c was answered and is closing (or gone): touch it no more. */
static bool
shim_feed(PvConn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->shim), *out;

	if (c->state == PV_SHIM) {
		size_t n = 0;
		_cleanup_free_ char *line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF_STRICT);
		if (!line) {
			if (evbuffer_get_length(in) <= 128)
				return true;
			pv_respond_error(c, 502, "unavailable", "the preview socket misbehaved");
			return false;
		}
		if (streq(line, "ERR sandbox_not_running"))
			pv_respond_error(c, 503, "sandbox_not_running",
					 "the sandbox is not running");
		else if (streq(line, "ERR port_not_listening"))
			pv_respond_error(c, 502, "port_not_listening",
					 "nothing listens on that port in the sandbox");
		else if (!streq(line, "OK"))
			pv_respond_error(c, 502, "unavailable", "the preview socket refused");
		else {
			struct timeval idle = {.tv_sec = PV_IDLE_TIMEOUT_SEC};
			c->state = PV_OPEN;
			bufferevent_set_timeouts(c->cli, &idle, NULL);
			bufferevent_set_timeouts(c->shim, &idle, NULL);
		}
		if (c->state != PV_OPEN)
			return false;
	}
	c->last_io = now_usec();
	out = bufferevent_get_output(c->cli);
	evbuffer_add_buffer(out, in);
	if (evbuffer_get_length(out) >= PV_HIGH_WATER) {
		bufferevent_disable(c->shim, EV_READ);
		bufferevent_setwatermark(c->cli, EV_WRITE, PV_HIGH_WATER / 2, 0);
	}
	return true;
}

static void
shim_read_cb(struct bufferevent *bev, void *arg)
{
	(void)shim_feed(arg);
}

static void
shim_write_cb(struct bufferevent *bev, void *arg)
{
	PvConn *c = arg;

	/* below the mark again: read the client on */
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_enable(c->cli, EV_READ);
	if (evbuffer_get_length(bufferevent_get_input(c->cli)) > 0)
		(void)cli_feed(c);
}

/* A side's read timed out: while the other side moved within the idle
 * time, read on (a WebSocket whose server alone speaks); else it is idle. */
static bool
pv_still_active(PvConn *c, struct bufferevent *bev, short what)
{
	if (!(what & BEV_EVENT_TIMEOUT) || c->state != PV_OPEN ||
	    now_usec() - c->last_io >= (usec_t)PV_IDLE_TIMEOUT_SEC * USEC_PER_SEC)
		return false;
	bufferevent_enable(bev, EV_READ);
	return true;
}

static void
shim_event_cb(struct bufferevent *bev, short what, void *arg)
{
	PvConn *c = arg;

	if (what & BEV_EVENT_CONNECTED)
		return;
	if (pv_still_active(c, bev, what))
		return;
	/* what came before the end (an ERR line, the last bytes of an answer) */
	if (evbuffer_get_length(bufferevent_get_input(bev)) > 0 && !shim_feed(c))
		return;
	if (c->state == PV_SHIM) {
		pv_respond_error(c, 503, "unavailable", "containerd-shim is not reachable");
		return;
	}
	pv_finish(c, c->cli);
}

static void
cli_write_cb(struct bufferevent *bev, void *arg)
{
	PvConn *c = arg;

	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	if (c->shim)
		bufferevent_enable(c->shim, EV_READ);
}

static void
cli_event_cb(struct bufferevent *bev, short what, void *arg)
{
	PvConn *c = arg;

	if (pv_still_active(c, bev, what))
		return;
	if ((what & BEV_EVENT_EOF) && c->shim && c->state != PV_HEAD) {
		/* what came before the end goes first, then the shim is flushed */
		if (cli_feed(c))
			pv_finish(c, c->shim);
		return;
	}
	pv_free(c);
}

/* The first head named a live preview: the shim's preview socket, and the
 * hello line. */
static int
pv_connect_shim(PvConn *c, const PreviewToken *t)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (strlen(c->pv->shim_path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, c->pv->shim_path);
	c->shim = bufferevent_socket_new(bufferevent_get_base(c->cli), -1,
					 BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!c->shim)
		return -ENOMEM;
	bufferevent_setcb(c->shim, shim_read_cb, shim_write_cb, shim_event_cb, c);
	bufferevent_enable(c->shim, EV_READ | EV_WRITE);
	if (bufferevent_socket_connect(c->shim, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -ECONNREFUSED;
	evbuffer_add_printf(bufferevent_get_output(c->shim), PV_SHIM_HELLO "%s %u\r\n",
			    t->thread_id, t->port);
	c->state = PV_SHIM;
	return 0;
}

/* ---------------------------------------------------------------------------
 * The request filter: client → shim.
 */

static int
pv_fail(http_parser *p, int status, const char *code, const char *msg)
{
	PvConn *c = p->data;

	c->fail_status = status;
	c->fail_code = code;
	c->fail_msg = msg;
	http_parser_pause(p, 1);
	return 0;
}

/* Counts len bytes of the head; the connection, or NULL after refusing a head
 * over the limit. */
static PvConn *
head_budget(http_parser *p, size_t len)
{
	PvConn *c = p->data;

	c->head_bytes += len;
	if (c->head_bytes > PV_HEAD_MAX)
		return pv_fail(p, 431, "headers_too_large", "request head too large"), NULL;
	return c;
}

static int
on_message_begin(http_parser *p)
{
	PvConn *c = p->data;

	evbuffer_drain(c->url, evbuffer_get_length(c->url));
	evbuffer_drain(c->head, evbuffer_get_length(c->head));
	c->name_len = c->host_len = c->head_bytes = 0;
	c->in_value = c->skip_header = c->is_host = c->host_seen = c->chunked = false;
	return 0;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
	PvConn *c = head_budget(p, len);

	if (!c)
		return 0;
	evbuffer_add(c->url, at, len);
	return 0;
}

/* The header whose value just ended. */
static void
header_end(PvConn *c)
{
	if (c->in_value && !c->skip_header)
		evbuffer_add(c->head, "\r\n", 2);
	c->in_value = false;
	c->name_len = 0;
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	PvConn *c = head_budget(p, len);

	if (!c)
		return 0;
	if (c->in_value)
		header_end(c);
	if (c->name_len + len > PV_NAME_MAX)
		return pv_fail(p, 431, "headers_too_large", "header name too long");
	memcpy(c->name + c->name_len, at, len);
	c->name_len += len;
	return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	PvConn *c = head_budget(p, len);

	if (!c)
		return 0;
	if (!c->in_value) {
		c->name[c->name_len] = '\0';
		/* the API's credentials never reach a sandbox */
		c->skip_header = strcasecmp(c->name, "Authorization") == 0 ||
				 strcasecmp(c->name, "Proxy-Authorization") == 0;
		c->is_host = strcasecmp(c->name, "Host") == 0;
		if (c->is_host && c->host_seen)
			return pv_fail(p, 400, "bad_request", "more than one Host");
		c->host_seen |= c->is_host;
		if (!c->skip_header)
			evbuffer_add_printf(c->head, "%s: ", c->name);
		c->in_value = true;
	}
	if (!c->skip_header)
		evbuffer_add(c->head, at, len);
	if (c->is_host) {
		if (c->host_len + len > PV_HOST_MAX)
			return pv_fail(p, 400, "bad_request", "Host too long");
		memcpy(c->host + c->host_len, at, len);
		c->host_len += len;
	}
	return 0;
}

/* Which preview the request names; on a later request, the same one, live. */
static const PreviewToken *
head_preview(PvConn *c, http_parser *p)
{
	char tok[PREVIEW_TOKEN_BYTES * 2 + 1];
	const PreviewToken *t;

	if (!c->host_seen)
		return pv_fail(p, 400, "bad_request", "no Host"), NULL;
	if (!host_token(c->pv, c->host, c->host_len, tok))
		return pv_fail(p, 421, "misdirected_request",
			       "this listener serves previews only (<token>.preview_domain)"),
		       NULL;
	if (c->first_done && !streq(tok, c->token))
		return pv_fail(p, 421, "misdirected_request", "another preview"), NULL;
	t = token_find(c->pv, tok);
	if (!t)
		return pv_fail(p, 404, "preview_not_found", "no such preview"), NULL;
	if (t->expires <= now_usec())
		return pv_fail(p, 410, "preview_expired", "this preview expired"), NULL;
	memcpy(c->token, tok, sizeof(tok));
	return t;
}

static int
on_headers_complete(http_parser *p)
{
	PvConn *c = p->data;
	const PreviewToken *t;
	struct evbuffer *out;
	int r;

	header_end(c);
	c->host[c->host_len] = '\0';
	t = head_preview(c, p);
	if (!t)
		return 0;
	if (!c->first_done) {
		r = pv_connect_shim(c, t);
		if (r < 0)
			return pv_fail(p, 503, "unavailable", "containerd-shim is not reachable");
		c->first_done = true;
	}
	c->chunked = (p->flags & F_CHUNKED) != 0;
	out = bufferevent_get_output(c->shim);
	evbuffer_add_printf(out, "%s ", http_method_str((enum http_method)p->method));
	evbuffer_add_buffer(out, c->url);
	evbuffer_add_printf(out, " HTTP/%u.%u\r\n", p->http_major, p->http_minor);
	evbuffer_add_buffer(out, c->head);
	evbuffer_add(out, "\r\n", 2);
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	PvConn *c = p->data;
	struct evbuffer *out = bufferevent_get_output(c->shim);

	if (c->chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add(out, at, len);
	if (c->chunked)
		evbuffer_add(out, "\r\n", 2);
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	PvConn *c = p->data;

	if (c->chunked)
		evbuffer_add(bufferevent_get_output(c->shim), "0\r\n\r\n", 5);
	return 0;
}

static const http_parser_settings pv_parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* A request refused inside the parser: answered when nothing was sent yet,
 * else the connection ends. */
static void
pv_failed(PvConn *c)
{
	if (c->state == PV_HEAD || c->state == PV_SHIM) {
		pv_respond_error(c, c->fail_status, c->fail_code, c->fail_msg);
		return;
	}
	log_info("Preview %s: closed: %s", c->addr, c->fail_msg);
	pv_free(c);
}

/* The client's bytes through the request filter (or, past an upgrade, as
 * they are) to the shim. false when c was answered, closed or freed. */
static bool
cli_feed(PvConn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->cli);

	while (evbuffer_get_length(in) > 0) {
		struct evbuffer *out = c->shim ? bufferevent_get_output(c->shim) : NULL;
		if (out && evbuffer_get_length(out) >= PV_HIGH_WATER) {
			/* backpressure: read on once the shim took half of it */
			bufferevent_disable(c->cli, EV_READ);
			bufferevent_setwatermark(c->shim, EV_WRITE, PV_HIGH_WATER / 2, 0);
			return true;
		}
		c->last_io = now_usec();
		if (c->upgraded) {
			evbuffer_add_buffer(out, in);
			return true;
		}
		size_t len = MIN(evbuffer_get_length(in), (size_t)64 * 1024);
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
		size_t n = http_parser_execute(&c->parser, &pv_parser_settings, data, len);
		enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
		if (!c->fail_status && err != HPE_OK) {
			c->fail_status = 400;
			c->fail_code = "bad_request";
			c->fail_msg = http_errno_description(err);
		}
		if (c->fail_status) {
			pv_failed(c);
			return false;
		}
		evbuffer_drain(in, n);
		/* after an upgrade the rest is another protocol (WebSocket): raw */
		if (c->parser.upgrade)
			c->upgraded = true;
		else if (n < len)
			return true; /* cannot happen without an error */
	}
	return true;
}

static void
cli_read_cb(struct bufferevent *bev, void *arg)
{
	(void)cli_feed(arg);
}

static void
accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	Preview *pv = arg;
	struct timeval tv = {.tv_sec = PV_HEAD_TIMEOUT_SEC};
	PvConn *c;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return;
	}
	c->pv = pv;
	c->url = evbuffer_new();
	c->head = evbuffer_new();
	c->cli = bufferevent_socket_new(pv->router->base, fd,
					BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!c->cli)
		close(fd);
	c->next = pv->conns;
	if (pv->conns)
		pv->conns->prev = c;
	pv->conns = c;
	if (++pv->n_conns >= PREVIEW_MAX_CONNS) {
		log_warning("Preview: %d connections open: not accepting more until some close",
			    PREVIEW_MAX_CONNS);
		evconnlistener_disable(lev);
	}
	if (!c->cli || !c->url || !c->head) {
		pv_free(c);
		return;
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
		char host[64] = "?";
		const void *ap = sa->sa_family == AF_INET
				     ? (const void *)&((struct sockaddr_in *)sa)->sin_addr
				     : (const void *)&((struct sockaddr_in6 *)sa)->sin6_addr;
		(void)evutil_inet_ntop(sa->sa_family, ap, host, sizeof(host));
		snprintf(c->addr, sizeof(c->addr), "%s", host);
	}
	http_parser_init(&c->parser, HTTP_REQUEST);
	c->parser.data = c;
	c->state = PV_HEAD;
	bufferevent_setcb(c->cli, cli_read_cb, cli_write_cb, cli_event_cb, c);
	bufferevent_set_timeouts(c->cli, &tv, NULL);
	bufferevent_enable(c->cli, EV_READ | EV_WRITE);
}

/* ---------------------------------------------------------------------------
 * The listener.
 */

int
preview_new(Router *r, Preview **ret)
{
	const RouterConf *conf = r->conf;
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	socklen_t l = sizeof(ss);
	Preview *pv;

	pv = calloc(1, sizeof(*pv));
	if (!pv)
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	pv->router = r;
	if (asprintf(&pv->shim_path, "%s/%s", conf->shared.runtime_dir, RW_SOCK_PREVIEW) < 0) {
		free(pv);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	if (evutil_parse_sockaddr_port(conf->preview_listen, (struct sockaddr *)&ss, &sslen) < 0) {
		preview_free(pv);
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL), "Invalid preview_listen '%s'",
				       conf->preview_listen);
	}
	pv->lev = evconnlistener_new_bind(r->base, accept_cb, pv,
					  LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE |
					      LEV_OPT_CLOSE_ON_EXEC,
					  128, (struct sockaddr *)&ss, sslen);
	if (!pv->lev) {
		int err = errno;
		preview_free(pv);
		return log_error_errno(err ? err : EADDRNOTAVAIL, "Cannot listen on %s: %m",
				       conf->preview_listen);
	}
	if (getsockname(evconnlistener_get_fd(pv->lev), (struct sockaddr *)&ss, &l) == 0)
		pv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							  : ((struct sockaddr_in *)&ss)->sin_port);
	log_info("Previews on %s, as http://<token>.%s:%u/", conf->preview_listen,
		 conf->preview_domain, pv->port);
	*ret = pv;
	return 0;
}

void
preview_stop(Preview *pv)
{
	if (pv && pv->lev) {
		evconnlistener_free(pv->lev);
		pv->lev = NULL;
	}
}

Preview *
preview_free(Preview *pv)
{
	if (!pv)
		return NULL;
	preview_stop(pv);
	while (pv->conns)
		pv_free(pv->conns);
	tokens_purge(pv, (usec_t)-1);
	free(pv->shim_path);
	free(pv);
	return NULL;
}
