/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "fuzz-common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"

static Router *router;
static RouterConf conf;

Router *
fuzz_router(void)
{
	struct event_base *base;

	if (router)
		return router;
	log_open("fuzz");
	log_set_max_level(LOG_CRIT); /* quiet: the inputs are garbage on purpose */
	signal(SIGPIPE, SIG_IGN);    /* as routerd (daemon_setup_signals) */
	if (conf_apply_defaults(router_conf_items, router_conf_n_items, &conf) < 0)
		abort();
	base = event_base_new();
	router = calloc(1, sizeof(*router));
	if (!base || !router || !(router->unserved = addr_table_new()))
		abort();
	/* the corpus names the server "x" (a socketpair has no local address
	 * for the Host check to compare with) */
	free(conf.server_names);
	conf.server_names = strdup("x");
	router->conf = &conf;
	router->base = base;
	routes_attach(router);
	snprintf(router->listen_desc, sizeof(router->listen_desc), "fuzz");
	return router;
}

HttpConn *
fuzz_conn(int *ret_peer)
{
	Router *r = fuzz_router();
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	/* big enough for any input libFuzzer hands us (-max_len) */
	int sz = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (http_conn_new(r, sv[0], (struct sockaddr *)&sa, sizeof(sa), false) < 0)
		abort();
	*ret_peer = sv[1];
	return r->conns;
}

static void
drain(int peer)
{
	char buf[65536];
	while (read(peer, buf, sizeof(buf)) > 0)
		;
}

void
fuzz_pump(int peer, const uint8_t *data, size_t len, bool eof)
{
	Router *r = fuzz_router();
	size_t off = 0;

	for (int round = 0; round < 64; round++) {
		if (off < len) {
			ssize_t n = write(peer, data + off, len - off);
			if (n > 0)
				off += (size_t)n;
		}
		if (off == len && eof) {
			shutdown(peer, SHUT_WR);
			eof = false;
		}
		event_base_loop(r->base, EVLOOP_NONBLOCK);
		drain(peer);
		if (off == len && !eof && round > 4)
			break;
	}
}

void
fuzz_reset(void)
{
	Router *r = fuzz_router();

	while (r->conns)
		http_conn_free(r->conns);
	event_base_loop(r->base, EVLOOP_NONBLOCK);
}
