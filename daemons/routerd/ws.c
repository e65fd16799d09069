/* SPDX-License-Identifier: MIT */
/*
 * ws.c — the RFC 6455 side of a tail: handshake checks, the 101 answer, our
 * own frames, and a wslay_event session for what the client sends.
 *
 * An idle tail holds no wslay session (≈ 9.4 KB of heap: the 4 KiB output
 * buffer, the frame context's 4 KiB input buffer, the queues): the session
 * is made when client bytes arrive, and freed again once wslay has taken
 * every byte up to a frame boundary outside a fragmented message (our own
 * scan of the frame headers handed to it says where the boundaries are),
 * nothing of ours is queued in it and no close was sent or received. A
 * fresh session is then in the very state the freed one was in. The close
 * handshake keeps its session to the end.
 *
 * The frames routerd sends on an open connection (text, ping) are written
 * here, unmasked and unfragmented, byte for byte what wslay would write, by
 * http_conn_writev(): by hand because wslay's frame API needs a frame
 * context (with its own 4 KiB receive buffer) and writes the 2–10 header
 * bytes and the payload in two calls; a server's header is RFC 6455 §5.2's
 * FIN, opcode and length, nothing to parse. A session's queue is empty
 * between calls (its send callback never blocks), so the order is kept;
 * when it is not, the frame goes through the session. wslay answers pings
 * and the client's close frame itself; a client message larger than
 * WS_MAX_CLIENT_MSG is refused by wslay (1009).
 */
#include "config.h"

#include "transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <wslay/wslay.h>

#include "log.h"
#include "macro.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_MAX_CLIENT_MSG (64 * 1024) /* client messages are ignored anyway */
#define WS_CLOSE_DEADLINE_USEC (1 * USEC_PER_SEC)

/* A Sec-WebSocket-Key must be the base64 encoding of 16 bytes: 22 symbols and "==". */
static bool
ws_key_valid(const char *key)
{
	unsigned char raw[24];

	if (strlen(key) != 24 || strcmp(key + 22, "==") != 0)
		return false;
	for (size_t i = 0; i < 22; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
			    key[i]))
			return false;
	/* EVP_DecodeBlock counts the padding as zero bytes: 18 = 16 + 2. */
	return EVP_DecodeBlock(raw, (const unsigned char *)key, 24) == 18;
}

int
ws_check_handshake(const HttpConn *c, const char **ret_msg)
{
	const char *version = http_header(c, "Sec-WebSocket-Version");
	const char *key = http_header(c, "Sec-WebSocket-Key");

	if (!http_header_has_token(c, "Upgrade", "websocket")) {
		*ret_msg = "Upgrade must name websocket";
		return -EINVAL;
	}
	if (!http_header_has_token(c, "Connection", "upgrade")) {
		*ret_msg = "Connection must contain the upgrade token";
		return -EINVAL;
	}
	if (c->req.http_major != 1 || c->req.http_minor < 1) {
		*ret_msg = "WebSocket needs HTTP/1.1";
		return -EINVAL;
	}
	if (!version || strcmp(version, "13") != 0) {
		*ret_msg = "Sec-WebSocket-Version must be 13";
		return -EINVAL;
	}
	if (!key || !ws_key_valid(key)) {
		*ret_msg = "Sec-WebSocket-Key must be the base64 encoding of 16 bytes";
		return -EINVAL;
	}
	return 0;
}

static int
ws_accept_key(const char *key, char ret[static 29])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char buf[24 + sizeof(WS_GUID)];

	snprintf(buf, sizeof(buf), "%s%s", key, WS_GUID);
	if (EVP_Digest(buf, strlen(buf), md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
		return -EIO;
	EVP_EncodeBlock((unsigned char *)ret, md, 20); /* 28 chars + NUL */
	return 0;
}

/* Follow the frames in the client bytes handed to wslay: where a frame ends,
 * and whether a fragmented data message is open (RFC 6455 §5.2, §5.4). Only
 * the lengths are read; wslay judges the frames. */
static void
ws_scan(HttpConn *c, const uint8_t *p, size_t n)
{
	while (n > 0) {
		if (c->ws_in_left > 0) {
			size_t k = (size_t)MIN((uint64_t)n, c->ws_in_left);
			c->ws_in_left -= k;
			p += k;
			n -= k;
			continue;
		}
		uint8_t *h = c->ws_in_hdr;
		h[c->ws_in_hdr_len++] = *p++;
		n--;
		if (c->ws_in_hdr_len < 2)
			continue;
		uint8_t len7 = h[1] & 0x7f;
		size_t ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
		if (c->ws_in_hdr_len < 2 + ext + (h[1] & 0x80 ? 4 : 0))
			continue;
		uint64_t plen = len7;
		if (ext > 0) {
			plen = 0;
			for (size_t i = 0; i < ext; i++)
				plen = plen << 8 | h[2 + i];
		}
		if ((h[0] & 0x0f) < 8) /* a data or continuation frame */
			c->ws_in_frag = !(h[0] & 0x80);
		c->ws_in_left = plen;
		c->ws_in_hdr_len = 0;
	}
}

static ssize_t
ws_recv_cb(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *userdata)
{
	HttpConn *c = userdata;
	int n = evbuffer_remove(bufferevent_get_input(c->bev), buf, len);

	if (n <= 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	ws_scan(c, buf, (size_t)n);
	return n;
}

static ssize_t
ws_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *userdata)
{
	HttpConn *c = userdata;

	if (c->state == CONN_DEAD || http_conn_write(c, data, len) < 0) {
		c->ws_io_failed = true;
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)len;
}

static void
ws_msg_cb(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
	  void *userdata)
{
	HttpConn *c = userdata;

	/* Client data messages are ignored (the API allows them as nudges);
	 * pings and close frames are answered by wslay. Any pong answers our
	 * ping (RFC 6455 §5.5.3 allows an unsolicited one as a heartbeat). */
	if (arg->opcode == WSLAY_PONG)
		c->ws_ping_outstanding = false;
	/* a route's socket (/chat's conversation, an exec's): its messages are
	 * the route's (HttpConn.ws_app) */
	else if ((arg->opcode == WSLAY_TEXT_FRAME || arg->opcode == WSLAY_BINARY_FRAME) &&
		 c->ws_app)
		c->ws_app->on_message(c, arg->opcode == WSLAY_BINARY_FRAME, arg->msg,
				      arg->msg_length);
}

/* wslay echoes a close frame with a 1-byte payload as an empty close; RFC
 * 6455 §5.5.1 makes it a protocol error. Queued before wslay's own echo, our
 * 1002 is the close frame that goes out. */
static void
ws_frame_start_cb(wslay_event_context_ptr ctx,
		  const struct wslay_event_on_frame_recv_start_arg *arg, void *userdata)
{
	HttpConn *c = userdata;

	if (arg->opcode == WSLAY_CONNECTION_CLOSE && arg->payload_length == 1 &&
	    !c->ws_close_queued) {
		c->ws_close_queued = true;
		(void)wslay_event_queue_close(ctx, 1002, NULL, 0);
	}
}

static const struct wslay_event_callbacks ws_callbacks = {
    .recv_callback = ws_recv_cb,
    .send_callback = ws_send_cb,
    .on_frame_recv_start_callback = ws_frame_start_cb,
    .on_msg_recv_callback = ws_msg_cb,
};

/* A frame wslay's frame layer refuses (a control frame over 125 bytes or
 * fragmented, a 64-bit length with the top bit set) makes wslay_event_recv
 * fail after queueing a close without a status code. Answer 1002 as RFC 6455
 * §7.4.1 asks: write the close frame by hand (every earlier frame was fully
 * handed to the output, our send callback never blocks) and close. */
static void
ws_protocol_error(HttpConn *c)
{
	static const uint8_t close_1002[] = {0x88, 0x02, 0x03, 0xea};

	c->ws_drop = WS_DROP_PROTOCOL;
	if (!c->ws_close_queued && http_conn_write(c, close_1002, sizeof(close_1002)) < 0)
		return; /* the connection is gone */
	c->ws_close_queued = true;
	http_conn_close(c);
}

/* The session of c, made when there is none (see the top of the file). */
static int
ws_session(HttpConn *c)
{
	const RouterConf *conf = c->router->conf;

	if (c->ws)
		return 0;
	if (wslay_event_context_server_init(&c->ws, &ws_callbacks, c) != 0) {
		c->ws = NULL;
		return -ENOMEM;
	}
	/* a route's messages may carry a whole body (a /chat conversation's
	 * RunAgentInput frames): as much as a POST body may */
	wslay_event_config_set_max_recv_msg_length(
	    c->ws, c->ws_app && c->ws_app->body_sized
		       ? (uint64_t)MAX(conf->max_body, (int64_t)WS_MAX_CLIENT_MSG)
		       : WS_MAX_CLIENT_MSG);
	return 0;
}

/* Free the session when nothing in it differs from a fresh one. */
static void
ws_session_release(HttpConn *c)
{
	if (!c->ws || c->state != CONN_WS || c->ws_close_queued || c->ws_in_hdr_len > 0 ||
	    c->ws_in_left > 0 || c->ws_in_frag || !wslay_event_want_read(c->ws) ||
	    wslay_event_want_write(c->ws) || wslay_event_get_queued_msg_count(c->ws) > 0 ||
	    wslay_event_get_close_sent(c->ws) || wslay_event_get_close_received(c->ws))
		return;
	wslay_event_context_free(c->ws);
	c->ws = NULL;
}

/* Whether a frame of ours may be written now rather than queued in the
 * session: nothing is waiting there to go before it. */
static bool
ws_direct(const HttpConn *c)
{
	return !c->ws || wslay_event_get_queued_msg_count(c->ws) == 0;
}

/* One unfragmented, unmasked frame (a server's, RFC 6455 §5.2), as wslay
 * writes it. */
static int
ws_write_frame(HttpConn *c, uint8_t opcode, const void *data, size_t len)
{
	uint8_t h[10];
	size_t hl;

	h[0] = 0x80 | opcode;
	if (len < 126) {
		h[1] = (uint8_t)len;
		hl = 2;
	} else if (len <= 0xffff) {
		h[1] = 126;
		h[2] = (uint8_t)(len >> 8);
		h[3] = (uint8_t)len;
		hl = 4;
	} else {
		h[1] = 127;
		for (size_t i = 0; i < 8; i++)
			h[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
		hl = 10;
	}
	return http_conn_writev(c,
				(const struct iovec[]){{.iov_base = h, .iov_len = hl},
						       {.iov_base = (void *)data, .iov_len = len}},
				len > 0 ? 2 : 1);
}

/* Push queued frames into the output; end the connection when the close
 * handshake is over or wslay failed. */
static void
ws_flush(HttpConn *c)
{
	if (c->state != CONN_WS || !c->ws)
		return;
	if (wslay_event_want_write(c->ws) && wslay_event_send(c->ws) < 0) {
		log_debug("%s: WebSocket send failed, dropping", c->addr);
		http_conn_abort(c);
		return;
	}
	if (!wslay_event_want_read(c->ws) && !wslay_event_want_write(c->ws))
		http_conn_close(c);
}

static void
ws_ping_cb(evutil_socket_t fd, short what, void *arg)
{
	HttpConn *c = arg;
	struct wslay_event_msg m = {.opcode = WSLAY_PING};

	if (c->state != CONN_WS || c->ws_close_queued)
		return;
	if (c->ws_ping_outstanding) {
		/* A whole interval without the pong: the peer or the path is gone. */
		log_debug("%s: no pong within the ping interval, closing", c->addr);
		c->ws_drop = WS_DROP_PING;
		ws_close(c, 1011, "pong timeout");
		return;
	}
	/* the route's own keepalive frame follows (/chat: the stock
	 * webSocket() adapter's) */
	const char *ka = c->ws_app ? c->ws_app->keepalive_text : NULL;
	if (ws_direct(c)) {
		if (ws_write_frame(c, WSLAY_PING, NULL, 0) < 0)
			return;
		c->ws_ping_outstanding = true;
		if (ka)
			(void)ws_write_frame(c, WSLAY_TEXT_FRAME, ka, strlen(ka));
		return;
	}
	if (wslay_event_queue_msg(c->ws, &m) == 0) {
		c->ws_ping_outstanding = true;
		if (ka) {
			struct wslay_event_msg t = {.opcode = WSLAY_TEXT_FRAME,
						    .msg = (const uint8_t *)ka,
						    .msg_length = strlen(ka)};
			(void)wslay_event_queue_msg(c->ws, &t);
		}
		ws_flush(c);
	}
}

int
ws_protocol_token(const HttpConn *c, char **ret)
{
	const char *h = http_header(c, "Sec-WebSocket-Protocol");

	*ret = NULL;
	for (const char *s = h; s && *s;) {
		s += strspn(s, " \t,");
		size_t n = strcspn(s, " \t,");
		if (n > 7 && strncmp(s, "bearer.", 7) == 0) {
			size_t bl = n - 7, pl = (bl + 3) / 4 * 4;
			if (bl > 4096)
				return -EINVAL;
			_cleanup_free_ unsigned char *b64 = malloc(pl + 1), *out = malloc(pl + 1);
			if (!b64 || !out)
				return -ENOMEM;
			for (size_t i = 0; i < bl; i++) {
				char ch = s[7 + i];
				b64[i] = ch == '-' ? '+' : ch == '_' ? '/' : ch;
			}
			for (size_t i = bl; i < pl; i++)
				b64[i] = '=';
			b64[pl] = '\0';
			int k = EVP_DecodeBlock(out, b64, (int)pl);
			if (k < 0)
				return -EINVAL;
			k -= (int)(pl - bl); /* the padding decoded as zero bytes */
			if (k <= 0 || memchr(out, '\0', (size_t)k))
				return -EINVAL;
			out[k] = '\0';
			*ret = (char *)TAKE_PTR(out);
			return 0;
		}
		s += n;
	}
	return 0;
}

/* The first "bearer.…" item of Sec-WebSocket-Protocol, as offered (NULL when
 * none, or one too long to be a token ws_protocol_token accepts). */
static void
ws_protocol_bearer_item(const HttpConn *c, const char **ret, size_t *ret_len)
{
	const char *h = http_header(c, "Sec-WebSocket-Protocol");

	*ret = NULL;
	*ret_len = 0;
	for (const char *s = h; s && *s;) {
		s += strspn(s, " \t,");
		size_t n = strcspn(s, " \t,");
		if (n > 7 && n - 7 <= 4096 && strncmp(s, "bearer.", 7) == 0) {
			*ret = s;
			*ret_len = n;
			return;
		}
		s += n;
	}
}

static void ws_done(HttpConn *c);

static const ConnOps ws_conn_ops = {
    .on_read = ws_on_read,
    .on_free = ws_done,
};

int
ws_accept(HttpConn *c)
{
	const RouterConf *conf = c->router->conf;
	const char *key = http_header(c, "Sec-WebSocket-Key");
	char accept[29], head[256 + 4200];
	const char *proto = NULL;
	size_t proto_len = 0;
	int n, r;

	if (!key)
		return -EINVAL;
	r = ws_accept_key(key, accept);
	if (r < 0)
		return r;
	c->ops = &ws_conn_ops; /* counts the drop and frees any session, whatever happens next */
	if (conf->ws_ping_interval_ms > 0) {
		c->ping_timer = event_new(c->router->base, -1, EV_PERSIST, ws_ping_cb, c);
		if (!c->ping_timer)
			return -ENOMEM;
	}
	/* A browser fails the handshake unless the server selects one of the
	 * subprotocols it offered: "runwarden" when offered, else the token's
	 * own "bearer.…" item (a client offering the token alone), which goes
	 * back only to the client that sent it. */
	if (http_header_has_token(c, "Sec-WebSocket-Protocol", "runwarden")) {
		proto = "runwarden";
		proto_len = STRLEN("runwarden");
	} else {
		ws_protocol_bearer_item(c, &proto, &proto_len);
	}
	n = snprintf(head, sizeof(head),
		     "HTTP/1.1 101 Switching Protocols\r\n"
		     "Upgrade: websocket\r\n"
		     "Connection: Upgrade\r\n"
		     "Sec-WebSocket-Accept: %s\r\n%s%.*s%s\r\n",
		     accept, proto ? "Sec-WebSocket-Protocol: " : "", (int)proto_len,
		     proto ? proto : "", proto ? "\r\n" : "");
	if (n < 0 || n >= (int)sizeof(head))
		return -ENOMEM;
	r = http_conn_write(c, head, (size_t)n);
	if (r < 0)
		return r;
	http_conn_upgraded(c, 101, CONN_WS);
	return 0;
}

void
ws_on_read(HttpConn *c)
{
	if (c->state != CONN_WS)
		return;
	if (evbuffer_get_length(bufferevent_get_input(c->bev)) == 0)
		return;
	if (ws_session(c) < 0) {
		http_conn_abort(c);
		return;
	}
	int r = wslay_event_recv(c->ws);
	if (r == WSLAY_ERR_CALLBACK_FAILURE && !c->ws_io_failed) {
		log_debug("%s: WebSocket framing error, closing with 1002", c->addr);
		ws_protocol_error(c);
		return;
	}
	if (r < 0) {
		log_debug("%s: WebSocket session failed, dropping", c->addr);
		http_conn_abort(c);
		return;
	}
	ws_flush(c);
	ws_session_release(c);
}

int
ws_send_text(HttpConn *c, const char *text, size_t len)
{
	struct wslay_event_msg m = {
	    .opcode = WSLAY_TEXT_FRAME,
	    .msg = (const uint8_t *)text,
	    .msg_length = len,
	};

	if (c->state != CONN_WS || c->ws_close_queued)
		return -ECONNRESET;
	if (ws_direct(c))
		(void)ws_write_frame(c, WSLAY_TEXT_FRAME, text, len);
	else {
		if (wslay_event_queue_msg(c->ws, &m) != 0)
			return -ENOMEM;
		ws_flush(c);
	}
	return c->state == CONN_WS ? 0 : -ECONNRESET;
}

void
ws_close(HttpConn *c, uint16_t code, const char *reason)
{
	size_t len = reason ? MIN(strlen(reason), (size_t)120) : 0;

	if (c->state != CONN_WS || c->ws_close_queued)
		return;
	c->ws_close_queued = true;
	if (!c->ws_drop)
		c->ws_drop = code == 1008 || code == 1013 ? WS_DROP_SLOW
			     : code == 1001		  ? WS_DROP_SHUTDOWN
			     : code == 1000		  ? WS_DROP_NONE
							  : WS_DROP_ERROR;
	if (ws_session(c) < 0 ||
	    wslay_event_queue_close(c->ws, code, (const uint8_t *)reason, len) != 0) {
		http_conn_abort(c);
		return;
	}
	ws_flush(c);
	if (c->state == CONN_WS) {
		struct timeval tv;
		evtimer_add(c->timer, timeval_from_usec(&tv, WS_CLOSE_DEADLINE_USEC));
	}
}

size_t
ws_output_pending(const HttpConn *c)
{
	size_t n = http_conn_output_pending(c);
	if (c->ws)
		n += wslay_event_get_queued_msg_length(c->ws);
	return n;
}

static void
ws_done(HttpConn *c)
{
	if (c->ping_timer) {
		event_free(c->ping_timer);
		c->ping_timer = NULL;
	}
	WsDrop d = c->ws_drop;
	if (!d && !c->ws)
		d = WS_DROP_LOST; /* a session is kept from the first close frame on */
	else if (!d) {
		uint16_t sent = wslay_event_get_status_code_sent(c->ws);
		bool got = wslay_event_get_close_received(c->ws);
		if (!got && (sent == 1002 || sent == 1007 || sent == 1009))
			d = WS_DROP_PROTOCOL; /* wslay refused a frame */
		else if (!got && !wslay_event_get_close_sent(c->ws))
			d = WS_DROP_LOST;
	}
	c->router->ws_drops[d]++;
	wslay_event_context_free(c->ws);
	c->ws = NULL;
}

static int
ws_sink_send(HttpConn *c, int64_t seq, const char *msg, size_t len)
{
	return ws_send_text(c, msg, len);
}

static bool
ws_open(const HttpConn *c)
{
	return c->state == CONN_WS && !c->ws_close_queued;
}

const TailSink ws_tail_sink = {
    .send = ws_sink_send,
    .close = ws_close,
    .pending = ws_output_pending,
    .open = ws_open,
};
