/* SPDX-License-Identifier: MIT */
/*
 * transport.h — the transports of tails (ws.c, sse.c): upgrade, framing,
 * TailSinks, ConnOps.
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "http-conn.h"

/* ws.c */

/* Validate the handshake headers of c->req. 0, or -EINVAL with a message
 * for the 400 in *ret_msg (static string). */
int ws_check_handshake(const HttpConn *c, const char **ret_msg);
/* Queue the 101 response and set up the wslay session on c. Input already
 * buffered after the request is processed as WebSocket data. 0 or -errno. */
int ws_accept(HttpConn *c);
/* The bearer token a browser sends as the WebSocket subprotocol item
 * "bearer.<base64url of the token>" beside "runwarden" (a page cannot set
 * Authorization on a WebSocket, and a token in the URL would land in logs and
 * history): a new string in *ret, NULL when there is none; -EINVAL when the
 * item is malformed. */
int ws_protocol_token(const HttpConn *c, char **ret);
/* Queue a text message and push it to the socket. 0 or negative errno. */
int ws_send_text(HttpConn *c, const char *text, size_t len);
/* Queue a close frame (once); the TCP connection is closed after the
 * client's answer or after a 1 s deadline, whichever comes first. */
void ws_close(HttpConn *c, uint16_t code, const char *reason);
/* Bytes not yet written to the socket for c. */
size_t ws_output_pending(const HttpConn *c);
/* Frames the client sent right behind its handshake (the route calls it
 * once the tail exists; later input arrives through ConnOps.on_read). */
void ws_on_read(HttpConn *c);

/* sse.c */

/* The request asks for text/event-stream. */
bool sse_wanted(const HttpConn *c);
/* Queue the 200 head of an event stream and switch c to CONN_SSE. */
int sse_accept(HttpConn *c);
/* One event: `id:` when id >= 0, `event:` when event, text as data lines. */
int sse_send(HttpConn *c, int64_t id, const char *event, const char *text, size_t len);
/* One line of a /chat?format=ndjson body: text and "\n". */
int sse_send_line(HttpConn *c, const char *text, size_t len);
/* The last line of an NDJSON body: with chunked framing, sent in one write
 * with the last chunk (a client sees the line and the body's end at once,
 * and keeps the connection). */
int sse_end_line(HttpConn *c, const char *text, size_t len);
/* End the stream: an `event: error` for code != 1000, then close (abort
 * for 1008: the reader is too slow to flush to). */
void sse_close(HttpConn *c, uint16_t code, const char *reason);

/* The tails' sinks (TailSink, routerd.h). */
extern const TailSink ws_tail_sink;	  /* ws.c */
extern const TailSink sse_tail_sink;	  /* sse.c: an error event before an abnormal end */
extern const TailSink sse_chat_tail_sink; /* sse.c: /chat's SSE (no error event) */
extern const TailSink ndjson_tail_sink;	  /* sse.c: /chat?format=ndjson (no error event) */
