/* SPDX-License-Identifier: MIT */
/*
 * routes-host.c — the Host and Origin checks every request passes before its
 * route (DNS rebinding, cross-site requests), CORS, and OPTIONS
 * (routes_dispatch in routes.c calls them).
 */
#include "config.h"

#include "routes-int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "id-util.h"
#include "log.h"
#include "macro.h"

/* The port of an "ip:port" / "[v6]:port" local address. */
static const char *
local_port(const HttpConn *c)
{
	const char *p = strrchr(c->local, ':');
	return p ? p + 1 : "";
}

static bool
strn_case_eq(const char *a, size_t al, const char *b)
{
	return al == strlen(b) && strncasecmp(a, b, al) == 0;
}

/* Whether host[0..hl) names this server: the address the client connected
 * to, localhost:PORT when that is a loopback one, or a server_names entry (a
 * bare name also as name:PORT). A page whose DNS name was rebound to this
 * address sends its own name as Host and gets 421. */
static bool
host_known(const HttpConn *c, const char *host, size_t hl)
{
	const char *list = c->router->conf->server_names;
	const char *port = local_port(c);
	char buf[300];

	if (strn_case_eq(host, hl, c->local))
		return true;
	if (c->local_loopback) {
		snprintf(buf, sizeof(buf), "localhost:%s", port);
		if (strn_case_eq(host, hl, buf))
			return true;
	}
	for (const char *s = list ? list : ""; *s;) {
		s += strspn(s, " ,");
		size_t n = strcspn(s, " ,");
		if (n == 0)
			break;
		if (n == 1 && *s == '*')
			return true;
		if (n == hl && strncasecmp(s, host, n) == 0)
			return true;
		snprintf(buf, sizeof(buf), "%.*s:%s", (int)MIN(n, (size_t)256), s, port);
		if (!memchr(s, ':', n) && strn_case_eq(host, hl, buf))
			return true;
		s += n;
	}
	return false;
}

/* A Host value without the blanks around it: *host moves past the leading
 * ones; returns the length up to the first trailing one. */
static size_t
host_trim(const char **host)
{
	*host += strspn(*host, " \t");
	return strcspn(*host, " \t");
}

/* The Host header: exactly one, naming this server (host_known). An
 * HTTP/1.0 request may leave it out (browsers always send it). false after
 * answering 400 or 421. */
bool
host_ok(HttpConn *c)
{
	const char *host = NULL;
	size_t n = 0;

	for (size_t i = 0; i < c->req.n_headers; i++)
		if (strcasecmp(c->req.headers[i].name, "Host") == 0) {
			host = c->req.headers[i].value;
			n++;
		}
	if (n > 1 || (n == 0 && (c->req.http_major > 1 || c->req.http_minor > 0))) {
		http_respond_error(c, 400, "bad_request", "exactly one Host header is required");
		return false;
	}
	if (!host)
		return true;
	size_t hl = host_trim(&host);
	if (host_known(c, host, hl))
		return true;
	http_respond_error(c, 421, "misdirected_request",
			   "the Host header does not name this server (routerd.server_names)");
	return false;
}

/* An Origin header, when present, must be this server's own origin
 * (http:// or https:// and the Host, already checked) or one of
 * cors_origins (cors_prepare set the CORS lines). A page of any other origin
 * gets 403 on every route, simple request, preflight, WebSocket or SSE
 * alike. false after answering 403. */
bool
origin_ok(HttpConn *c)
{
	const char *origin = http_header(c, "Origin");
	const char *host = http_header(c, "Host");
	char own[300];

	if (!origin || c->req.cors)
		return true;
	if (!host)
		host = c->local;
	size_t hl = host_trim(&host);
	for (int i = 0; i < 2; i++) {
		snprintf(own, sizeof(own), "%s://%.*s", i ? "https" : "http",
			 (int)MIN(hl, (size_t)256), host);
		if (strcasecmp(origin, own) == 0)
			return true;
	}
	/* The page's origin is named when it is printable ASCII (what a browser
	 * sends), so a developer behind a dev proxy that keeps Origin sees
	 * what to list. */
	char msg[400];
	bool printable = strlen(origin) <= 200;
	for (const char *p = origin; printable && *p; p++)
		printable = *p >= 0x20 && *p < 0x7f;
	snprintf(msg, sizeof(msg),
		 "requests from the Origin %s%s%s are not allowed: list it in "
		 "[routerd] cors_origins (or drop Origin at a same-origin dev proxy)",
		 printable ? "'" : "", printable ? origin : "(unprintable)", printable ? "'" : "");
	http_respond_error(c, 403, "origin_forbidden", msg);
	return false;
}

/* Access-Control-Allow-Origin for an Origin listed in cors_origins (or any,
 * with "*"): kept on the request, added to every response head. */
void
cors_prepare(HttpConn *c)
{
	const char *list = c->router->conf->cors_origins;
	const char *origin = http_header(c, "Origin");
	size_t ol;

	if (!list || !*list || !origin || !*origin || !string_printable(origin))
		return;
	ol = strlen(origin);
	for (const char *s = list; *s;) {
		s += strspn(s, " ,");
		size_t n = strcspn(s, " ,");
		if ((n == 1 && *s == '*') || (n == ol && memcmp(s, origin, n) == 0)) {
			if (asprintf(&c->req.cors,
				     "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n",
				     origin) < 0)
				c->req.cors = NULL;
			return;
		}
		s += n;
	}
}

void
route_options(HttpConn *c)
{
	static const char hdr[] =
	    "Allow: GET, PUT, POST, DELETE, OPTIONS\r\n"
	    "Access-Control-Allow-Methods: GET, PUT, POST, DELETE, OPTIONS\r\n"
	    "Access-Control-Allow-Headers: Authorization, Content-Type, "
	    "Idempotency-Key, Last-Event-ID, X-Run-Id\r\n"
	    "Access-Control-Max-Age: 600\r\n";
	/* without an allowed Origin the CORS lines are inert: the browser
	 * refuses the actual request for lack of Allow-Origin */
	http_respond(c, 204, NULL, NULL, 0, hdr, false);
}
