/* SPDX-License-Identifier: MIT */
/*
 * test-http.c — routerd's front without coordinatord: http.c, the checks of
 * routes.c that come before any route (Host, Origin, media type, limits), the
 * route table's answers that need no coordinator, and the RFC 6455 handshake
 * of ws.c.
 *
 * A real Router (router_new) listens on a free loopback port and the test talks to it
 * over TCP, running the event loop until the answer is complete; nothing is
 * mocked. Without coordinatord every route that needs it answers 503
 * "unavailable", which is itself one of the answers checked.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "log.h"
#include "router-fixture.h"
#include "router.h"

static struct {
	struct event_base *base;
	RouterConf conf;
	Router *r;
	char dir[64];
	int port;
} T;

static int
setup(void **state)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	log_open("test-http");
	log_set_max_level(LOG_CRIT);
	(void)fixture_conf(&T.conf, "test-http", T.dir);
	T.base = event_base_new();
	assert_non_null(T.base);
	assert_int_equal(router_new(T.base, &T.conf, &T.r), 0);
	assert_int_equal(
	    getsockname(evconnlistener_get_fd(T.r->listener), (struct sockaddr *)&sa, &len), 0);
	T.port = ntohs(sa.sin_port);
	*state = &T;
	return 0;
}

static int
teardown(void **state)
{
	router_free(T.r);
	event_base_free(T.base);
	fixture_conf_done(&T.conf, T.dir, NULL);
	return 0;
}

/* Send req (printf-style; "@HOST@" is not expanded: callers pass the Host
 * line themselves) and run the loop until routerd has answered and closed,
 * or the answer has its head and Content-Length body. Returns the answer. */
static char *
exchange(const char *req, size_t req_len)
{
	static char out[65536];
	size_t got = 0;
	int fd = fixture_connect(T.port, 0);
	size_t off = 0;
	for (int round = 0; round < 4000; round++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		if (off < req_len) {
			ssize_t n = write(fd, req + off, req_len - off);
			if (n > 0)
				off += (size_t)n;
		}
		ssize_t n = read(fd, out + got, sizeof(out) - 1 - got);
		if (n == 0)
			break; /* routerd closed */
		if (n > 0) {
			got += (size_t)n;
			out[got] = '\0';
			const char *end = strstr(out, "\r\n\r\n");
			const char *cl = strcasestr(out, "\r\nContent-Length: ");
			if (end && strncmp(out, "HTTP/1.1 101", 12) == 0)
				break;
			if (end && cl && cl < end &&
			    got >= (size_t)(end + 4 - out) + strtoul(cl + 18, NULL, 10))
				break;
		}
		usleep(200);
	}
	out[got] = '\0';
	close(fd);
	/* let routerd see the close and free the connection */
	fixture_conns_gone(T.base, T.r, 2000);
	return out;
}

static char *
request(const char *fmt, ...)
{
	char buf[16384];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	assert_true(n > 0 && (size_t)n < sizeof(buf));
	return exchange(buf, (size_t)n);
}

/* The answer's status line is status, and its JSON body names code. */
static void
assert_answer(const char *ans, int status, const char *code)
{
	char line[32], c[128];

	snprintf(line, sizeof(line), "HTTP/1.1 %d ", status);
	if (strncmp(ans, line, strlen(line)) != 0)
		fail_msg("expected %d, got: %.300s", status, ans);
	if (code) {
		snprintf(c, sizeof(c), "\"code\":\"%s\"", code);
		if (!strstr(ans, c))
			fail_msg("expected code %s in: %.600s", code, ans);
		assert_non_null(strcasestr(ans, "\r\nContent-Type: application/json"));
	}
}

static void
test_http_healthz_without_coordinatord(void **state)
{
	/* the process is alive: 200 even with coordinatord down; /readyz is not */
	assert_answer(request("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 200,
		      NULL);
	assert_answer(request("GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 503,
		      NULL);
}

static void
test_http_route_table(void **state)
{
	/* no such route; a known path with another method names what is allowed */
	assert_answer(request("GET /nope HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 404,
		      "not_found");
	char *ans = request("DELETE /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port);
	assert_answer(ans, 405, "method_not_allowed");
	assert_non_null(strcasestr(ans, "\r\nAllow: "));
	/* a run route without its thread */
	assert_answer(request("GET /runs/0b9c3b5e-6c36-4c43-9d2b-5e0f3a0c1d2e HTTP/1.1\r\n"
			      "Host: 127.0.0.1:%d\r\n\r\n",
			      T.port),
		      400, "thread_required");
	/* a route that needs coordinatord, which is not there */
	assert_answer(request("GET /runs/0b9c3b5e-6c36-4c43-9d2b-5e0f3a0c1d2e?threadId=t1 "
			      "HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n",
			      T.port),
		      503, "unavailable");
}

static void
test_http_host_and_origin(void **state)
{
	/* DNS rebinding: a name that is not this server's */
	assert_answer(request("GET /healthz HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n", T.port),
		      421, NULL);
	/* HTTP/1.1 without Host, or with two */
	assert_answer(request("GET /healthz HTTP/1.1\r\n\r\n"), 400, NULL);
	assert_answer(request("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nHost: "
			      "127.0.0.1:%d\r\n\r\n",
			      T.port, T.port),
		      400, NULL);
	/* a page of another origin */
	assert_answer(request("GET /runs/x?threadId=t HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Origin: https://evil.example\r\n\r\n",
			      T.port),
		      403, "origin_forbidden");
	/* localhost:PORT is this server on loopback */
	assert_answer(request("GET /healthz HTTP/1.1\r\nHost: localhost:%d\r\n\r\n", T.port), 200,
		      NULL);
}

static void
test_http_body_checks(void **state)
{
	/* a JSON route takes application/json only (no cross-site simple request) */
	assert_answer(request("POST /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
			      T.port),
		      415, NULL);
	/* bad JSON, and a body that is not a run */
	assert_answer(request("POST /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 5\r\n\r\n{nope",
			      T.port),
		      400, NULL);
	assert_answer(request("POST /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
			      T.port),
		      400, NULL);
	/* over max_body: refused from its Content-Length, before reading it */
	assert_answer(request("POST /runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: %lld\r\n\r\n",
			      T.port, (long long)T.conf.max_body + 1),
		      413, NULL);
	/* a file PUT may carry max_file_body (the route table says so); the same
	 * size anywhere else is 413 before a byte of it is read */
	assert_true(T.conf.max_file_body > T.conf.max_body);
	size_t blen = (size_t)T.conf.max_body + 1, hlen;
	char *big = malloc(blen + 256);
	assert_non_null(big);
	hlen = (size_t)snprintf(big, 256,
				"PUT /threads/t1/files/big.bin HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
				"Content-Length: %zu\r\n\r\n",
				T.port, blen);
	memset(big + hlen, 'x', blen);
	/* read whole, then the handler needs coordinatord */
	assert_answer(exchange(big, hlen + blen), 503, "unavailable");
	free(big);
	assert_answer(request("PUT /threads/t1/filesx/big.bin HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Length: %lld\r\n\r\n",
			      T.port, (long long)T.conf.max_body + 1),
		      413, NULL);
	/* not HTTP at all */
	assert_answer(request("\x16\x03\x01 hello\r\n\r\n"), 400, NULL);
}

static void
test_http_header_limit(void **state)
{
	static char req[70000];
	int n =
	    snprintf(req, sizeof(req), "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", T.port);
	/* more header bytes than max_header_bytes */
	while ((size_t)n + 64 < sizeof(req) - 8 && n < T.conf.max_header_bytes + 1024)
		n += snprintf(req + n, sizeof(req) - (size_t)n, "X-Pad-%d: %040d\r\n", n, 0);
	n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n");
	assert_answer(exchange(req, (size_t)n), 431, NULL);
}

static void
test_ws_handshake(void **state)
{
	/* RFC 6455 §1.3's example key and accept value */
	char *ans = request("GET /runs/0b9c3b5e-6c36-4c43-9d2b-5e0f3a0c1d2e/stream?threadId=t1 "
			    "HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
			    "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
			    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
			    T.port);
	/* the stream route checks the handshake first, then needs coordinatord */
	assert_answer(ans, 503, "unavailable");
	/* the upgrade itself, on an accepted connection: the accept value */
	int peer;
	char buf[4096] = "";
	HttpConn *c = fixture_ws_conn(T.r, &peer);
	assert_int_equal(ws_accept(c), 0);
	size_t got = 0;
	for (int i = 0; i < 200 && !strstr(buf, "\r\n\r\n"); i++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		ssize_t n = read(peer, buf + got, sizeof(buf) - 1 - got);
		if (n > 0)
			got += (size_t)n;
		usleep(200);
	}
	assert_int_equal(strncmp(buf, "HTTP/1.1 101 ", 13), 0);
	assert_non_null(strcasestr(buf, "\r\nUpgrade: websocket\r\n"));
	if (!strstr(buf, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"))
		fail_msg("no accept value in %s", buf);
	close(peer);
	fixture_conns_gone(T.base, T.r, 200);
	assert_int_equal(T.r->n_conns, 0);

	/* what the handshake refuses, with the reason */
	static const struct {
		const char *headers;
		const char *why;
	} bad[] = {
	    {"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 12\r\n"
	     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
	     "Sec-WebSocket-Version must be 13"},
	    {"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
	     "Sec-WebSocket-Key: c2hvcnQ=\r\n",
	     "Sec-WebSocket-Key must be the base64 encoding of 16 bytes"},
	    {"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
	     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=!\r\n",
	     "Sec-WebSocket-Key must be the base64 encoding of 16 bytes"},
	    {"Upgrade: h2c\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
	     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
	     NULL},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ans = request("GET /runs/0b9c3b5e-6c36-4c43-9d2b-5e0f3a0c1d2e/stream?threadId=t1 "
			      "HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n",
			      T.port, bad[i].headers);
		if (strncmp(ans, "HTTP/1.1 400 ", 13) != 0 &&
		    strncmp(ans, "HTTP/1.1 426 ", 13) != 0)
			fail_msg("handshake %zu: expected 400 or 426, got %.300s", i, ans);
		if (bad[i].why && !strstr(ans, bad[i].why))
			fail_msg("handshake %zu: no '%s' in %.600s", i, bad[i].why, ans);
	}
}

/* Run the loop until want bytes came from the peer (or a while passed). */
static size_t
ws_pump(int peer, uint8_t *buf, size_t cap, size_t want)
{
	size_t got = 0;

	for (int i = 0; i < 400 && got < want; i++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		ssize_t n = read(peer, buf + got, cap - got);
		if (n > 0)
			got += (size_t)n;
		else
			usleep(200);
	}
	return got;
}

/* A client frame (masked, RFC 6455 §5.3), or its first part bytes when part > 0. */
static void
ws_client_send(int peer, uint8_t b0, const char *payload, size_t len, size_t off, size_t part)
{
	static const uint8_t key[4] = {1, 2, 3, 4};
	uint8_t f[6 + 125];
	size_t n = 0;

	assert_true(len <= 125);
	f[n++] = b0;
	f[n++] = 0x80 | (uint8_t)len;
	memcpy(f + n, key, 4);
	n += 4;
	for (size_t i = 0; i < len; i++)
		f[n++] = (uint8_t)payload[i] ^ key[i % 4];
	if (part > 0)
		n = MIN(n, off + part);
	assert_int_equal(write(peer, f + off, n - off), (ssize_t)(n - off));
}

/* An idle WebSocket holds no wslay session: one is made for the client's
 * bytes and freed at a frame boundary outside a fragmented message. */
static void
test_ws_idle_session(void **state)
{
	int peer;
	uint8_t buf[4096];
	HttpConn *c = fixture_ws_conn(T.r, &peer);

	assert_int_equal(ws_accept(c), 0);
	size_t n = ws_pump(peer, buf, sizeof(buf), 12);
	assert_true(n > 12 && memcmp(buf, "HTTP/1.1 101 ", 13) == 0);
	assert_null(c->ws);
	assert_null(c->req.headers); /* the request is gone with its header array */

	/* a ping: answered, and the session freed after it */
	ws_client_send(peer, 0x89, "hi", 2, 0, 0);
	n = ws_pump(peer, buf, sizeof(buf), 4);
	assert_int_equal(n, 4);
	assert_memory_equal(buf, "\x8a\x02hi", 4);
	assert_null(c->ws);
	/* a fragmented message keeps it until its last fragment */
	ws_client_send(peer, 0x01, "ab", 2, 0, 0);
	ws_pump(peer, buf, sizeof(buf), 1);
	assert_non_null(c->ws);
	ws_client_send(peer, 0x89, "", 0, 0, 0); /* a control frame in between */
	n = ws_pump(peer, buf, sizeof(buf), 2);
	assert_int_equal(n, 2);
	assert_memory_equal(buf, "\x8a\x00", 2);
	assert_non_null(c->ws);
	ws_client_send(peer, 0x80, "c", 1, 0, 0);
	ws_pump(peer, buf, sizeof(buf), 1);
	assert_null(c->ws);
	/* half a frame keeps it; the rest frees it */
	ws_client_send(peer, 0x89, "yo", 2, 0, 3);
	ws_pump(peer, buf, sizeof(buf), 1);
	assert_non_null(c->ws);
	ws_client_send(peer, 0x89, "yo", 2, 3, 0);
	n = ws_pump(peer, buf, sizeof(buf), 4);
	assert_int_equal(n, 4);
	assert_memory_equal(buf, "\x8a\x02yo", 4);
	assert_null(c->ws);
	/* routerd's own frame, without a session: what wslay would write */
	assert_int_equal(ws_send_text(c, "hello", 5), 0);
	n = ws_pump(peer, buf, sizeof(buf), 7);
	assert_int_equal(n, 7);
	assert_memory_equal(buf, "\x81\x05hello", 7);
	assert_null(c->ws);
	/* the client's close is echoed and the connection ends */
	ws_client_send(peer, 0x88, "\x03\xe8", 2, 0, 0);
	n = ws_pump(peer, buf, sizeof(buf), 4);
	assert_int_equal(n, 4);
	assert_memory_equal(buf, "\x88\x02\x03\xe8", 4);
	close(peer);
	fixture_conns_gone(T.base, T.r, 200);
	assert_int_equal(T.r->n_conns, 0);
}

/* The sandbox network routes routerd answers alone: without preview_listen
 * previews are off; a bad port or body is refused before coordinatord. */
static void
test_http_sandbox_net_routes(void **state)
{
	assert_answer(request("POST /sandboxes/s1/ports/8000 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "\r\n",
			      T.port),
		      501, "ports_disabled");
	assert_answer(
	    request("POST /sandboxes/s1/ports/0 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port),
	    400, "bad_request");
	assert_answer(request("POST /sandboxes/s1/ports/65536 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "\r\n",
			      T.port),
		      400, "bad_request");
	assert_answer(
	    request("GET /sandboxes/s1/ports/80 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port),
	    405, "method_not_allowed");
	assert_answer(
	    request("PUT /sandboxes/s1/egress HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
		    "Content-Type: text/plain\r\nContent-Length: 12\r\n\r\n{\"allow\":[]}",
		    T.port),
	    415, NULL);
	assert_answer(request("PUT /sandboxes/s1/egress HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 13\r\n\r\n"
			      "{\"allow\":\"x\"}",
			      T.port),
		      400, "bad_request");
	assert_answer(request("PUT /sandboxes/s1/egress HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"
			      "{\"allow\":[]}",
			      T.port),
		      503, "unavailable");
}

/* The sandbox API's routes routerd answers alone: methods, bad queries and
 * bodies before coordinatord; with it absent, 503. */
static void
test_http_sandbox_api_routes(void **state)
{
	static const struct {
		const char *req;
		int status;
		const char *code;
	} cases[] = {
	    {"POST /capabilities HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 405,
	     "method_not_allowed"},
	    {"GET /capabilities HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 503, "unavailable"},
	    {"POST /sandboxes/s1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 405,
	     "method_not_allowed"},
	    {"GET /sandboxes/s1/stop HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 405,
	     "method_not_allowed"},
	    {"DELETE /sandboxes/s1?keep=all HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 400,
	     "bad_request"},
	    {"GET /sandboxes/%%01/watch HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 400,
	     "invalid_thread_id"},
	    {"GET /sandboxes/s1/watch?waitMs=60001 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 400,
	     "bad_request"},
	    {"GET /sandboxes/s1/watch?cursor=-1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 400,
	     "bad_request"},
	    {"GET /sandboxes/s1/watch?cursor=7 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 503,
	     "unavailable"},
	    {"POST /sandboxes/s1/restore HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
	     "Content-Type: application/json\r\nContent-Length: 17\r\n\r\n{\"snapshotId\":\"x\"}",
	     400, "bad_request"},
	    {"DELETE /threads/t/snapshots/not-a-uuid HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 404,
	     "snapshot_not_found"},
	    {"PUT /threads/t/snapshots HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Length: 0\r\n\r\n",
	     405, "method_not_allowed"},
	    {"GET /sandboxes/s1/files/x?stat=1 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", 503,
	     "unavailable"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_answer(request(cases[i].req, T.port), cases[i].status, cases[i].code);
}

/* The sandbox exec routes routerd answers alone: the body's shape, the
 * methods, a GET that is no upgrade; the rest needs coordinatord (503). */
static void
test_http_sandbox_exec_routes(void **state)
{
	assert_answer(request("POST /sandboxes/s1/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"
			      "{\"argv\":\"x\"}",
			      T.port),
		      400, "bad_request");
	assert_answer(request("POST /sandboxes/s1/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
			      T.port),
		      415, NULL);
	assert_answer(request("POST /sandboxes/s1/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 15\r\n\r\n"
			      "{\"argv\":[\"ls\"]}",
			      T.port),
		      503, "unavailable");
	assert_answer(request("POST /sandboxes/bad%%01id/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
			      "Content-Type: application/json\r\nContent-Length: 15\r\n\r\n"
			      "{\"argv\":[\"ls\"]}",
			      T.port),
		      400, "invalid_thread_id");
	assert_answer(
	    request("GET /sandboxes/s1/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 426,
	    "upgrade_required");
	assert_answer(
	    request("PUT /sandboxes/s1/exec HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 405,
	    "method_not_allowed");
	assert_answer(request("POST /sandboxes/s1/processes/x1/kill HTTP/1.1\r\n"
			      "Host: 127.0.0.1:%d\r\n\r\n",
			      T.port),
		      404, "process_not_found");
	assert_answer(request("POST /sandboxes/s1/processes/7/kill?signal=SIGNOPE HTTP/1.1\r\n"
			      "Host: 127.0.0.1:%d\r\n\r\n",
			      T.port),
		      400, "bad_request");
	assert_answer(
	    request("GET /sandboxes/s1/processes HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port),
	    503, "unavailable");
}

/* A malformed request never stops the next client from being served. */
static void
test_http_garbage_then_service(void **state)
{
	static const char *const junk[] = {
	    "GET / HTTP/9.9\r\n\r\n",
	    "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
	    "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	    "POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\nContent-Length: "
	    "11\r\n\r\n",
	    "\r\n\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		char *ans = exchange(junk[i], strlen(junk[i]));
		if (ans[0] && strncmp(ans, "HTTP/1.1 4", 10) != 0 &&
		    strncmp(ans, "HTTP/1.1 505 ", 13) != 0)
			fail_msg("junk %zu: expected a 4xx, 505 or a close, got %.300s", i, ans);
	}
	assert_answer(request("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", T.port), 200,
		      NULL);
	assert_int_equal(T.r->n_conns, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_http_healthz_without_coordinatord),
	    cmocka_unit_test(test_http_route_table),
	    cmocka_unit_test(test_http_host_and_origin),
	    cmocka_unit_test(test_http_body_checks),
	    cmocka_unit_test(test_http_header_limit),
	    cmocka_unit_test(test_ws_handshake),
	    cmocka_unit_test(test_ws_idle_session),
	    cmocka_unit_test(test_http_garbage_then_service),
	    cmocka_unit_test(test_http_sandbox_net_routes),
	    cmocka_unit_test(test_http_sandbox_api_routes),
	    cmocka_unit_test(test_http_sandbox_exec_routes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
