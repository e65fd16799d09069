/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "client.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "buf.h"

#define HEAD_MAX (64 * 1024)

static int
fail(Client *c, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return r;
}

int
client_init(Client *c, const char *url, const char *token)
{
	const char *p, *hostend, *slash;
	size_t n;

	memset(c, 0, sizeof(*c));
	c->token = token && *token ? token : NULL;
	n = strlen(url);
	while (n > 0 && url[n - 1] == '/')
		n--;
	if (n >= sizeof(c->url))
		return fail(c, -EINVAL, "URL too long");
	memcpy(c->url, url, n);
	if (strncmp(c->url, "http://", 7) != 0)
		return fail(c, -EINVAL, "unsupported URL '%s' (only http://HOST[:PORT])", url);
	p = c->url + 7;
	slash = strchr(p, '/');
	if (!slash)
		slash = p + strlen(p);
	snprintf(c->prefix, sizeof(c->prefix), "%s", slash);
	if (*p == '[') {
		hostend = memchr(p, ']', (size_t)(slash - p));
		if (!hostend)
			return fail(c, -EINVAL, "bad URL '%s'", url);
		snprintf(c->host, sizeof(c->host), "%.*s", (int)(hostend - p - 1), p + 1);
		p = hostend + 1;
	} else {
		hostend = p;
		while (hostend < slash && *hostend != ':')
			hostend++;
		snprintf(c->host, sizeof(c->host), "%.*s", (int)(hostend - p), p);
		p = hostend;
	}
	if (!c->host[0])
		return fail(c, -EINVAL, "bad URL '%s': no host", url);
	if (p < slash && *p == ':') {
		snprintf(c->port, sizeof(c->port), "%.*s", (int)(slash - p - 1), p + 1);
		if (!c->port[0] || strspn(c->port, "0123456789") != strlen(c->port))
			return fail(c, -EINVAL, "bad URL '%s': bad port", url);
	} else if (p != slash)
		return fail(c, -EINVAL, "bad URL '%s'", url);
	else
		snprintf(c->port, sizeof(c->port), "80");
	snprintf(c->hosthdr, sizeof(c->hosthdr), strchr(c->host, ':') ? "[%s]:%s" : "%s:%s",
		 c->host, c->port);
	return 0;
}

static int
do_connect(Client *c)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int fd = -1, err = ECONNREFUSED, r;

	r = getaddrinfo(c->host, c->port, &hints, &res);
	if (r != 0)
		return fail(c, -EHOSTUNREACH, "cannot connect to %s: %s", c->url, gai_strerror(r));
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return fail(c, -err, "cannot connect to %s: %s", c->url, strerror(err));
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The request head; extra headers (CRLF-terminated) may be NULL. */
static char *
build_head(Client *c, const char *method, const char *path, const char *extra, size_t body_len,
	   const char *content_type)
{
	char *head = NULL;
	char auth[600] = "";
	char clen[96] = "";

	if (c->token)
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", c->token);
	if (content_type)
		snprintf(clen, sizeof(clen), "Content-Type: %s\r\nContent-Length: %zu\r\n",
			 content_type, body_len);
	if (asprintf(&head,
		     "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: runwarden/%s\r\n%s%s%s\r\n",
		     method, c->prefix, path, c->hosthdr, PACKAGE_VERSION, auth, clen,
		     extra ? extra : "") < 0)
		return NULL;
	return head;
}

/* Read until the end of the head. *head_len = its size (with the blank line);
 * bytes after it stay in b. */
static int
read_head(int fd, Buf *b, size_t *head_len)
{
	char tmp[4096];
	for (;;) {
		char *e = b->data ? strstr(b->data, "\r\n\r\n") : NULL;
		if (e) {
			*head_len = (size_t)(e - b->data) + 4;
			return 0;
		}
		if (b->len > HEAD_MAX)
			return -E2BIG;
		ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		if (buf_append(b, tmp, (size_t)n) < 0)
			return -ENOMEM;
	}
}

static const char *
header_value(const char *head, const char *name)
{
	size_t nl = strlen(name);
	for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
		const char *h = l + 2;
		if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
			h += nl + 1;
			while (*h == ' ' || *h == '\t')
				h++;
			return h;
		}
	}
	return NULL;
}

/* Decode a chunked body in place; returns its length or -EBADMSG. */
static ssize_t
dechunk(char *p, size_t len)
{
	size_t in = 0, out = 0;
	for (;;) {
		char *end;
		unsigned long n = strtoul(p + in, &end, 16);
		char *crlf = memmem(p + in, len - in, "\r\n", 2);
		if (!crlf || end == p + in)
			return -EBADMSG;
		in = (size_t)(crlf - p) + 2;
		if (n == 0)
			return (ssize_t)out;
		if (in + n + 2 > len)
			return -EBADMSG;
		memmove(p + out, p + in, n);
		out += n;
		in += n + 2;
	}
}

int
client_request(Client *c, const char *method, const char *path, const char *json_body,
	       Response *ret)
{
	return client_request_raw(c, method, path, json_body ? "application/json" : NULL, json_body,
				  json_body ? strlen(json_body) : 0, ret);
}

int
client_request_raw(Client *c, const char *method, const char *path, const char *content_type,
		   const void *req_body, size_t body_len, Response *ret)
{
	Buf b = {0};
	size_t head_len = 0;
	char tmp[16384];
	int fd, r;
	char *head;

	memset(ret, 0, sizeof(*ret));
	fd = do_connect(c);
	if (fd < 0)
		return fd;
	head = build_head(c, method, path, "Connection: close\r\n", body_len, content_type);
	if (!head) {
		close(fd);
		return fail(c, -ENOMEM, "out of memory");
	}
	r = write_all(fd, head, strlen(head));
	if (r >= 0 && body_len > 0)
		r = write_all(fd, req_body, body_len);
	free(head);
	if (r >= 0)
		r = read_head(fd, &b, &head_len);
	if (r >= 0) {
		/* Connection: close — the body ends at EOF (or at Content-Length). */
		for (;;) {
			ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				r = -errno;
				break;
			}
			if (n == 0)
				break;
			if (buf_append(&b, tmp, (size_t)n) < 0) {
				r = -ENOMEM;
				break;
			}
		}
	}
	close(fd);
	if (r < 0) {
		free(b.data);
		return fail(c, r, "%s %s: %s", method, c->url, strerror(-r));
	}
	if (sscanf(b.data, "HTTP/1.%*d %d", &ret->status) != 1) {
		free(b.data);
		return fail(c, -EBADMSG, "%s: not an HTTP response", c->url);
	}
	b.data[head_len - 2] = '\0'; /* headers end at the blank line */
	const char *te = header_value(b.data, "Transfer-Encoding");
	const char *cl = header_value(b.data, "Content-Length");
	size_t blen = b.len - head_len;
	char *body = malloc(blen + 1);
	if (!body) {
		free(b.data);
		return fail(c, -ENOMEM, "out of memory");
	}
	memcpy(body, b.data + head_len, blen);
	body[blen] = '\0';
	if (te && strncasecmp(te, "chunked", 7) == 0) {
		ssize_t n = dechunk(body, blen);
		if (n < 0) {
			free(body);
			free(b.data);
			return fail(c, -EBADMSG, "%s: bad chunked body", c->url);
		}
		blen = (size_t)n;
		body[blen] = '\0';
	} else if (cl) {
		size_t want = strtoull(cl, NULL, 10);
		if (want < blen) {
			blen = want;
			body[blen] = '\0';
		}
	}
	free(b.data);
	ret->body = body;
	ret->len = blen;
	return 0;
}

void
response_free(Response *r)
{
	free(r->body);
	r->body = NULL;
	r->len = 0;
}

/* ---------- WebSocket ---------- */

typedef struct WsCtx {
	int fd;
	Buf pre; /* bytes received with the handshake response */
	size_t pre_off;
	ws_text_cb on_text;
	void *userdata;
	int stop; /* WS_STOPPED or a negative errno from on_text */
	bool eof;
	char reason[124]; /* of the server's close frame */
} WsCtx;

/* A socket call of the wslay callbacks failed with errno: tell wslay (would
 * block, or a failure) and return its -1. */
static ssize_t
ws_io_failed(wslay_event_context_ptr ctx)
{
	wslay_event_set_error(ctx, (errno == EAGAIN || errno == EWOULDBLOCK)
				       ? WSLAY_ERR_WOULDBLOCK
				       : WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static ssize_t
ws_recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user_data)
{
	WsCtx *w = user_data;
	if (w->pre_off < w->pre.len) {
		size_t n = w->pre.len - w->pre_off;
		if (n > len)
			n = len;
		memcpy(buf, w->pre.data + w->pre_off, n);
		w->pre_off += n;
		return (ssize_t)n;
	}
	ssize_t n;
	do
		n = recv(w->fd, buf, len, MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return ws_io_failed(ctx);
	if (n == 0) {
		w->eof = true;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return n;
}

static ssize_t
ws_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user_data)
{
	WsCtx *w = user_data;
	ssize_t n;
	do
		n = send(w->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return ws_io_failed(ctx);
	return n;
}

static int
ws_genmask_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user_data)
{
	return RAND_bytes(buf, (int)len) == 1 ? 0 : -1;
}

static void
ws_msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
	  void *user_data)
{
	WsCtx *w = user_data;
	if (arg->opcode == WSLAY_CONNECTION_CLOSE && arg->msg_length > 2) {
		size_t n = arg->msg_length - 2;
		if (n >= sizeof(w->reason))
			n = sizeof(w->reason) - 1;
		memcpy(w->reason, arg->msg + 2, n);
		w->reason[n] = '\0';
	}
	if (w->stop || arg->opcode != WSLAY_TEXT_FRAME)
		return;
	char *text = malloc(arg->msg_length + 1);
	if (!text) {
		w->stop = -ENOMEM;
		return;
	}
	memcpy(text, arg->msg, arg->msg_length);
	text[arg->msg_length] = '\0';
	int r = w->on_text(text, arg->msg_length, w->userdata);
	free(text);
	if (r != 0)
		w->stop = r > 0 ? WS_STOPPED : r;
}

int
client_ws_run(Client *c, const char *path, ws_text_cb on_text, void *userdata, Response *http_ret,
	      char *close_reason, size_t reason_size)
{
	unsigned char rnd[16];
	char key[32], accept_want[64], extra[256];
	unsigned char sha[EVP_MAX_MD_SIZE];
	unsigned sha_len = 0;
	size_t head_len = 0;
	WsCtx w = {.fd = -1, .on_text = on_text, .userdata = userdata};
	wslay_event_context_ptr ctx = NULL;
	int r, result = WS_DROPPED;
	char *head;

	if (http_ret)
		memset(http_ret, 0, sizeof(*http_ret));
	if (close_reason && reason_size)
		close_reason[0] = '\0';
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return fail(c, -EIO, "no randomness for the WebSocket key");
	EVP_EncodeBlock((unsigned char *)key, rnd, sizeof(rnd));
	{
		char cat[128];
		snprintf(cat, sizeof(cat), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
		EVP_Digest(cat, strlen(cat), sha, &sha_len, EVP_sha1(), NULL);
		EVP_EncodeBlock((unsigned char *)accept_want, sha, (int)sha_len);
	}
	snprintf(extra, sizeof(extra),
		 "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
		 "Sec-WebSocket-Key: %s\r\n",
		 key);
	w.fd = do_connect(c);
	if (w.fd < 0)
		return w.fd;
	head = build_head(c, "GET", path, extra, 0, NULL);
	if (!head) {
		close(w.fd);
		return fail(c, -ENOMEM, "out of memory");
	}
	r = write_all(w.fd, head, strlen(head));
	free(head);
	if (r >= 0)
		r = read_head(w.fd, &w.pre, &head_len);
	if (r < 0) {
		r = fail(c, r, "GET %s: %s", c->url, strerror(-r));
		goto out;
	}
	int status = 0;
	if (sscanf(w.pre.data, "HTTP/1.%*d %d", &status) != 1) {
		r = fail(c, -EBADMSG, "%s: not an HTTP response", c->url);
		goto out;
	}
	if (status != 101) {
		/* An HTTP error for the upgrade: hand the JSON body back. */
		char *nl = w.pre.data + head_len;
		const char *cl =
		    (w.pre.data[head_len - 2] = '\0', header_value(w.pre.data, "Content-Length"));
		size_t want = cl ? strtoull(cl, NULL, 10) : 0;
		char tmp[4096];
		Buf body = {0};
		buf_append(&body, nl, w.pre.len - head_len);
		while (body.len < want) {
			ssize_t n = recv(w.fd, tmp, sizeof(tmp), 0);
			if (n <= 0)
				break;
			buf_append(&body, tmp, (size_t)n);
		}
		if (http_ret) {
			http_ret->status = status;
			http_ret->body = body.data ? body.data : strdup("");
			http_ret->len = body.len;
		} else
			free(body.data);
		r = fail(c, -EPROTO, "%s: HTTP %d", c->url, status);
		goto out;
	}
	const char *acc =
	    (w.pre.data[head_len - 2] = '\0', header_value(w.pre.data, "Sec-WebSocket-Accept"));
	if (!acc || strncmp(acc, accept_want, strlen(accept_want)) != 0) {
		r = fail(c, -EPROTO, "%s: bad Sec-WebSocket-Accept", c->url);
		goto out;
	}
	w.pre_off = head_len;

	struct wslay_event_callbacks cbs = {
	    .recv_callback = ws_recv_cb,
	    .send_callback = ws_send_cb,
	    .genmask_callback = ws_genmask_cb,
	    .on_msg_recv_callback = ws_msg_cb,
	};
	if (wslay_event_context_client_init(&ctx, &cbs, &w) != 0) {
		r = fail(c, -ENOMEM, "out of memory");
		goto out;
	}
	wslay_event_config_set_max_recv_msg_length(ctx, 256u * 1024 * 1024);
	for (;;) {
		/* Bytes left over from the handshake are consumed first. */
		if (w.pre_off < w.pre.len && wslay_event_recv(ctx) != 0)
			break;
		if (w.stop)
			break;
		if (!wslay_event_want_read(ctx) && !wslay_event_want_write(ctx))
			break;
		struct pollfd pfd = {.fd = w.fd,
				     .events =
					 (short)((wslay_event_want_read(ctx) ? POLLIN : 0) |
						 (wslay_event_want_write(ctx) ? POLLOUT : 0))};
		if (poll(&pfd, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if ((pfd.revents & (POLLIN | POLLHUP | POLLERR)) && wslay_event_recv(ctx) != 0)
			break;
		if (w.stop)
			break;
		if ((pfd.revents & POLLOUT) && wslay_event_send(ctx) != 0)
			break;
	}
	if (w.stop) {
		result = w.stop;
	} else if (wslay_event_get_close_received(ctx)) {
		result = wslay_event_get_status_code_received(ctx);
		if (result == WSLAY_CODE_NO_STATUS_RCVD)
			result = 1005;
		if (close_reason && reason_size)
			snprintf(close_reason, reason_size, "%s", w.reason);
	}
	r = result;
out:
	if (ctx)
		wslay_event_context_free(ctx);
	free(w.pre.data);
	if (w.fd >= 0)
		close(w.fd);
	return r;
}
