/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "router-conf.h"

#include <errno.h>
#include <event2/util.h>
#include <stddef.h>
#include <sys/socket.h>

#include "log.h"
#include "macro.h"

#define KIB 1024LL
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)

/* The rows below are also what conf/runwarden.conf documents. */
const ConfItem router_conf_items[] = {
    CONF_SHARED_ITEMS(RouterConf, shared),
    {"routerd", "listen", CONF_STR, offsetof(RouterConf, listen), "127.0.0.1:8787", 0, 0,
     "TCP address of the HTTP/WebSocket front: IPv4:port or [IPv6]:port (numeric)"},
    {"routerd", "max_body", CONF_SIZE, offsetof(RouterConf, max_body), "1M", 1 * KIB, 1 * GIB,
     "largest request body accepted; larger ones get 413 and the connection is closed"},
    {"routerd", "max_header_bytes", CONF_SIZE, offsetof(RouterConf, max_header_bytes), "16K",
     1 * KIB, 64 * KIB, "largest request line plus headers; larger ones get 431"},
    {"routerd", "max_connections", CONF_INT, offsetof(RouterConf, max_connections), "10000", 1,
     1000000,
     "client connections (HTTP and WebSocket) served at once; accepting pauses "
     "beyond"},
    {"routerd", "idle_timeout_ms", CONF_INT, offsetof(RouterConf, idle_timeout_ms), "60000", 100,
     3600000,
     "an idle keep-alive connection, a stalled request or a client not reading is closed "
     "after this"},
    {"routerd", "coord_timeout_ms", CONF_INT, offsetof(RouterConf, coord_timeout_ms), "10000", 100,
     600000, "deadline of each request to coordinatord (then 503)"},
    {"routerd", "ws_max_queue", CONF_SIZE, offsetof(RouterConf, ws_max_queue), "1M", 64 * KIB,
     256 * MIB, "unsent output a WebSocket tail may hold before it is closed with 1008"},
    {"routerd", "ws_ping_interval_ms", CONF_INT, offsetof(RouterConf, ws_ping_interval_ms), "30000",
     0, 3600000, "ping interval on WebSocket tails; 0 disables server pings"},
    {"routerd", "tail_read_batch", CONF_INT, offsetof(RouterConf, tail_read_batch), "256", 1, 4096,
     "most events a tail asks coordinatord for in one RUN_READ"},
};
const size_t router_conf_n_items = ELEMENTSOF(router_conf_items);

int
router_conf_load(const DaemonArgs *a, RouterConf *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	int r;

	r = daemon_load_config(a, router_conf_items, router_conf_n_items, c);
	if (r < 0)
		return r;
	if (!c->listen || evutil_parse_sockaddr_port(c->listen, (struct sockaddr *)&ss, &len) < 0)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.listen: '%s' is not a numeric host:port or "
				       "[IPv6]:port address",
				       c->listen ? c->listen : "");
	if (c->shared.runtime_dir == NULL || c->shared.runtime_dir[0] != '/')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "runwarden.runtime_dir must be an absolute path");
	return 0;
}

void
router_conf_done(RouterConf *c)
{
	conf_free_strings(router_conf_items, router_conf_n_items, c);
}
