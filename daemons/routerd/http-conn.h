/* SPDX-License-Identifier: MIT */
/*
 * http-conn.h — the HTTP layer (http.c): parsing and limits, responses,
 * writes to the socket, connection lifetime.
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "coord-link.h"

/* http.c */

/* Accepted socket → new connection (takes the fd). bridge: accepted on the
 * bridge socket (see HttpConn.bridge). 0 or negative errno. */
int http_conn_new(Router *r, int fd, const struct sockaddr *sa, int salen, bool bridge);
/* Release now: only from the top of a libevent callback or teardown. */
void http_conn_free(HttpConn *c);
/* Drop the connection from anywhere: I/O off now, freed next turn. */
void http_conn_abort(HttpConn *c);

int http_conn_writev(HttpConn *c, const struct iovec *iov, int n);
int http_conn_write(HttpConn *c, const void *data, size_t len);
int http_conn_write_buffer(HttpConn *c, struct evbuffer *buf);
/* Gather c's writes until http_conn_uncork(c), which writes them at once (a
 * tail delivering several events: one writev for all of them). One
 * connection at a time: corking another uncorks the first; closing or
 * freeing c uncorks it. uncork: 0 or negative errno, as http_conn_write. */
void http_conn_cork(HttpConn *c);
int http_conn_uncork(HttpConn *c);
/* Bytes written to c that the socket has not taken yet. */
size_t http_conn_output_pending(const HttpConn *c);

/* Queue a complete response for the current request. body may be NULL/0.
 * extra_headers: already formatted "Name: value\r\n" lines or NULL. Ends the
 * request (logs it, resumes parsing pipelined input unless close). */
void http_respond(HttpConn *c, int status, const char *content_type, const char *body, size_t len,
		  const char *extra_headers, bool close);
/* {"error": message, "code": code} with application/json. */
void http_respond_error(HttpConn *c, int status, const char *code, const char *message);
void http_respond_error_close(HttpConn *c, int status, const char *code, const char *message);
/* The same with extra headers ("Name: value\r\n" lines: Retry-After). */
void http_respond_error_headers(HttpConn *c, int status, const char *code, const char *message,
				const char *extra_headers);
/* A jansson value as the JSON body (steals nothing; j is borrowed). */
void http_respond_json(HttpConn *c, int status, const json_t *j);
/* 405 with an Allow header listing allow ("GET"). */
void http_respond_405(HttpConn *c, const char *allow);
/* End the connection gracefully: flush output, half-close, discard input for
 * at most 1 s (or until the client closes), then free. */
void http_conn_close(HttpConn *c);
/* Value of a request header (case-insensitive name) or NULL. */
const char *http_header(const HttpConn *c, const char *name);
/* true when the comma-separated header list contains token (case-insensitive). */
bool http_header_has_token(const HttpConn *c, const char *name, const char *token);
/* Switch c to a streaming state (CONN_WS after a 101, CONN_SSE after the
 * 200 head) once its response head was queued: the request is logged with
 * status, parsing stops for good; the transport's ping_timer (if it made one)
 * starts, and the write timeout and the write-drained mark of a tail apply. */
void http_conn_upgraded(HttpConn *c, int status, HttpConnState state);
/* The end of a chunked CONN_SSE body (its last chunk written): c serves
 * requests again, as after any keep-alive answer (closed when routerd is
 * stopping). */
void http_conn_stream_done(HttpConn *c);
