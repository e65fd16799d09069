/* SPDX-License-Identifier: MIT */
/*
 * router-fixture.h — what routerd's unit tests (test-http, test-tail) share to
 * run a real Router in-process: its configuration on a free loopback port and
 * a private runtime directory, the event loop turned by hand, TCP clients,
 * and an HttpConn on a socketpair ready for the WebSocket upgrade.
 *
 * Header only (static inline functions): each test is one program, and includes it
 * once. Failures are cmocka assertions.
 */
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "router.h"

/* A free loopback TCP port (libevent's address parser refuses port 0). */
static inline int
fixture_free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(probe >= 0);
	assert_int_equal(bind(probe, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(probe, (struct sockaddr *)&sa, &len), 0);
	close(probe);
	return ntohs(sa.sin_port);
}

/* conf with its defaults, runtime_dir a new /tmp/rw-NAME.XXXXXX (its path in
 * dir) and listen on 127.0.0.1 at a free port (returned). */
static inline int
fixture_conf(RouterConf *conf, const char *name, char dir[static 64])
{
	int port;

	assert_int_equal(conf_apply_defaults(router_conf_items, router_conf_n_items, conf), 0);
	snprintf(dir, 64, "/tmp/rw-%s.XXXXXX", name);
	assert_non_null(mkdtemp(dir));
	free(conf->shared.runtime_dir);
	conf->shared.runtime_dir = strdup(dir);
	port = fixture_free_port();
	free(conf->listen);
	assert_true(asprintf(&conf->listen, "127.0.0.1:%u", (unsigned)port) > 0);
	return port;
}

/* Undo fixture_conf(): the sockets routerd (bridge.sock) and the test
 * (extra, may be NULL) made in dir, dir itself, conf's strings. */
static inline void
fixture_conf_done(RouterConf *conf, const char *dir, const char *extra)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/bridge.sock", dir);
	(void)unlink(path);
	if (extra) {
		snprintf(path, sizeof(path), "%s/%s", dir, extra);
		(void)unlink(path);
	}
	(void)rmdir(dir);
	router_conf_done(conf);
}

/* Turn base's loop without blocking, once a millisecond, ms times. */
static inline void
fixture_spin(struct event_base *base, int ms)
{
	for (int i = 0; i < ms; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		usleep(1000);
	}
}

/* Turn base's loop until r has no connection left (a closed client freed),
 * at most rounds half-milliseconds. */
static inline void
fixture_conns_gone(struct event_base *base, Router *r, int rounds)
{
	for (int i = 0; i < rounds && r->n_conns > 0; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		usleep(500);
	}
}

/* A non-blocking TCP connection to 127.0.0.1:port, under way (the loop of the
 * test finishes it); rcvbuf > 0 sets SO_RCVBUF first. */
static inline int
fixture_connect(int port, int rcvbuf)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (rcvbuf > 0)
		assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		assert_int_equal(errno, EINPROGRESS);
	return fd;
}

/* An HttpConn of r on one end of a socketpair (the other end returned in
 * *ret_peer) whose request is a complete WebSocket upgrade with RFC 6455's
 * sample key, as the route leaves it before ws_accept(). */
static inline HttpConn *
fixture_ws_conn(Router *r, int *ret_peer)
{
	struct sockaddr_un un = {.sun_family = AF_UNIX};
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
	assert_int_equal(http_conn_new(r, sv[0], (struct sockaddr *)&un, sizeof(un), false), 0);
	HttpConn *c = r->conns;
	c->req.headers = calloc(1, sizeof(HttpHeader));
	c->req.headers_cap = 1;
	c->req.headers[0].name = strdup("Sec-WebSocket-Key");
	c->req.headers[0].value = strdup("dGhlIHNhbXBsZSBub25jZQ==");
	c->req.n_headers = 1;
	c->req.complete = true;
	c->req.keep_alive = true;
	c->busy = true;
	*ret_peer = sv[1];
	return c;
}
