/* SPDX-License-Identifier: MIT */
/*
 * client.h — the runwarden CLI's HTTP and WebSocket client: blocking sockets,
 * one request per connection ("Connection: close"), wslay for the frames.
 *
 * Every function returns 0 on success or a negative errno. On failure the
 * client writes a one-line human message into Client.err ("cannot connect to
 * http://127.0.0.1:8787: Connection refused"), which the caller prints.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct Client {
	char url[512];	   /* as given, without a trailing '/': "http://host:port[/prefix]" */
	char host[256];	   /* for getaddrinfo: "127.0.0.1", "::1", "example.org" */
	char port[16];	   /* "8787" */
	char hosthdr[300]; /* the Host header: "host:port" ("[::1]:port" for IPv6) */
	char prefix[256];  /* path prefix ("" or "/api"), prepended to every path */
	const char *token; /* RUNWARDEN_TOKEN, or NULL: "Authorization: Bearer" */
	char err[768];
} Client;

typedef struct Response {
	int status; /* HTTP status code */
	char *body; /* NUL-terminated, owned; free with response_free() */
	size_t len;
} Response;

/* Parse "http://host[:port][/prefix]". Returns -EINVAL (with err) otherwise. */
int client_init(Client *c, const char *url, const char *token);

/* One request: method, path ("/runs?threadId=t"), optional JSON body. Fills
 * *ret for any HTTP status; negative errno only for transport failures. */
int client_request(Client *c, const char *method, const char *path, const char *json_body,
		   Response *ret);
/* The same with any body (content_type NULL: none). */
int client_request_raw(Client *c, const char *method, const char *path, const char *content_type,
		       const void *body, size_t body_len, Response *ret);
void response_free(Response *r);

/* A WebSocket tail. on_text gets every text message (NUL-terminated). It
 * returns 0 to go on, 1 to stop (WS_STOPPED) or a negative errno to abort.
 * client_ws_run() returns the close code the server sent (1000, 1011…),
 * WS_DROPPED when the connection ended without a close frame, WS_STOPPED, or a
 * negative errno: a failed connect or handshake (with err; when the server
 * answered the upgrade with an HTTP error, *http_ret gets it, status > 0) or
 * on_text's own error. */
#define WS_DROPPED 0
#define WS_STOPPED 1
typedef int (*ws_text_cb)(const char *text, size_t len, void *userdata);
int client_ws_run(Client *c, const char *path, ws_text_cb on_text, void *userdata,
		  Response *http_ret, char *close_reason, size_t reason_size);
