/* SPDX-License-Identifier: MIT */
/*
 * router.c — routerd's lifecycle: configuration, the TCP listener, the
 * bridge-only Unix socket, the connection count, readiness and shutdown.
 *
 * Readiness (READY=1 and the "ready" log line) needs both the listener and a
 * ready coordinator link; until the link is up routerd already serves, and
 * answers what needs the coordinator with 503.
 */
#include "config.h"

#include "router.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "daemon-util.h"
#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "peer.h"
#include "preview.h"
#include "unix-socket.h"

#define SD_LISTEN_FDS_START 3
#define ACCEPT_RETRY_USEC (100 * USEC_PER_MSEC)
#define STOP_DEADLINE_USEC (1500 * USEC_PER_MSEC)

static void
router_update_accepting(Router *r)
{
	bool full = r->n_conns >= (size_t)r->conf->max_connections;

	if (!r->listener || r->stopping)
		return;
	if (full && !r->accept_paused) {
		evconnlistener_disable(r->listener);
		if (r->bridge_listener)
			evconnlistener_disable(r->bridge_listener);
		r->accept_paused = true;
		log_warning("%zu client connections: not accepting more until some close",
			    r->n_conns);
	} else if (!full && r->accept_paused && !evtimer_pending(r->accept_retry, NULL)) {
		evconnlistener_enable(r->listener);
		if (r->bridge_listener)
			evconnlistener_enable(r->bridge_listener);
		r->accept_paused = false;
	}
}

/* http.c keeps r->conns and r->n_conns; the lifecycle watches the count. */
static void
router_conn_added(Router *r, HttpConn *c)
{
	(void)c;
	router_update_accepting(r);
}

static void
router_conn_removed(Router *r, HttpConn *c)
{
	(void)c;
	router_update_accepting(r);
	if (r->stopping && r->n_conns == 0)
		event_base_loopbreak(r->base);
}

/* A connection closed at accept (max_unserved_per_address): counted, and
 * logged at most once per REFUSED_LOG_USEC with the number since the last. */
#define REFUSED_LOG_USEC (10 * USEC_PER_SEC)
static void
router_conn_refused(Router *r, const char *addr)
{
	usec_t now = now_usec();

	r->conns_refused++;
	r->refused_unlogged++;
	if (r->refused_logged_at && now - r->refused_logged_at < REFUSED_LOG_USEC)
		return;
	log_warning("Closed %" PRIu64 " connection(s) at accept: too many without a request "
		    "head from one address (latest %s; max_unserved_per_address=%" PRId64 ")",
		    r->refused_unlogged, addr, r->conf->max_unserved_per_address);
	r->refused_unlogged = 0;
	r->refused_logged_at = now;
}

static void
accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
	  void *userdata)
{
	Router *r = userdata;
	int rr;

	if (r->stopping) {
		safe_close(fd);
		return;
	}
	rr = http_conn_new(r, fd, sa, salen, l == r->bridge_listener);
	if (rr < 0)
		log_warning_errno(rr, "Failed to set up a client connection: %m");
}

static void
accept_error_cb(struct evconnlistener *l, void *userdata)
{
	Router *r = userdata;
	struct timeval tv;
	int err = EVUTIL_SOCKET_ERROR();

	/* EMFILE & co: pause instead of spinning on a listener that stays readable. */
	log_warning_errno(err, "accept() failed: %m; pausing for 100 ms");
	if (r->listener)
		evconnlistener_disable(r->listener);
	if (r->bridge_listener)
		evconnlistener_disable(r->bridge_listener);
	r->accept_paused = true;
	evtimer_add(r->accept_retry, timeval_from_usec(&tv, ACCEPT_RETRY_USEC));
}

static void
accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	router_update_accepting(arg);
}

static void
router_check_ready(Router *r)
{
	char status[300];

	if (r->ready_sent || !r->listener || r->stopping || !coord_ready(r))
		return;
	r->ready_sent = true;
	snprintf(status, sizeof(status), "serving on http://%s", r->listen_desc);
	notify_ready(status);
	log_info("routerd ready on http://%s", r->listen_desc);
}

/* systemd socket activation (sd_listen_fds(3) semantics, parsed here so
 * libsystemd stays optional): LISTEN_PID must be us, LISTEN_FDS the number
 * of sockets from fd 3 on. routerd serves one: the first listening stream
 * socket. The variables are removed so no child inherits them. Returns the
 * fd, 0 when not activated, or a negative errno. */
static int
listen_fd_from_systemd(void)
{
	const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
	long want_pid, nfds;
	char *end;
	int fd = 0;

	if (!pid || !n)
		return 0;
	errno = 0;
	want_pid = strtol(pid, &end, 10);
	if (errno || *end || want_pid != (long)getpid())
		goto out;
	nfds = strtol(n, &end, 10);
	if (errno || *end || nfds < 1 || nfds > 64) {
		fd = log_error_errno(SYNTHETIC_ERRNO(EINVAL), "LISTEN_FDS='%s' is not valid", n);
		goto out;
	}
	for (int i = SD_LISTEN_FDS_START; i < SD_LISTEN_FDS_START + nfds; i++) {
		int acc = 0, type = 0;
		socklen_t l = sizeof(acc), tl = sizeof(type);
		if (fd == 0 && getsockopt(i, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l) == 0 && acc &&
		    getsockopt(i, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM) {
			fd = i;
			continue;
		}
		log_warning("Ignoring socket-activated fd %d: not the first listening stream "
			    "socket",
			    i);
		safe_close(i);
	}
	if (fd == 0)
		fd = log_error_errno(SYNTHETIC_ERRNO(ENOTSOCK),
				     "LISTEN_FDS holds no listening stream socket");
	else if (evutil_make_socket_nonblocking(fd) < 0 || evutil_make_socket_closeonexec(fd) < 0)
		fd = log_error_errno(errno, "Cannot set up the activated socket: %m");
out:
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	return fd;
}

static bool
sockaddr_is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
	return ss->ss_family == AF_UNIX;
}

/* The bridge-only socket, $runtime_dir/bridge.sock, where the shim's bridge
 * forwards lead (never to the public listener): mode 0600, so that only our
 * user and root (the shim) connect. What is served there: the route table's
 * bridge routes (routes.c). */
static int
bridge_listen(Router *r)
{
	if (asprintf(&r->bridge_path, "%s/%s", r->conf->shared.runtime_dir, RW_SOCK_BRIDGE) < 0) {
		r->bridge_path = NULL;
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	/* coordinatord makes the directory too: whoever starts first */
	int fd = mkdir_p(r->conf->shared.runtime_dir, 0755);
	if (fd < 0)
		return log_error_errno(fd, "Failed to create '%s': %m",
				       r->conf->shared.runtime_dir);
	fd = unix_listen(r->bridge_path, 0600);
	if (fd < 0)
		return log_error_errno(fd, "Cannot listen on %s: %m", r->bridge_path);
	r->bridge_listener = evconnlistener_new(
	    r->base, accept_cb, r, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	if (!r->bridge_listener) {
		safe_close(fd);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	evconnlistener_set_error_cb(r->bridge_listener, accept_error_cb);
	return 0;
}

static void
bridge_unlisten(Router *r)
{
	if (r->bridge_listener) {
		evconnlistener_free(r->bridge_listener);
		r->bridge_listener = NULL;
		(void)unlink(r->bridge_path);
	}
}

int
router_new(struct event_base *base, RouterConf *conf, Router **ret)
{
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	Router *r;

	r = calloc(1, sizeof(*r));
	if (!r)
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	r->conf = conf;
	r->base = base;
	r->on_conn_added = router_conn_added;
	r->on_conn_removed = router_conn_removed;
	r->on_conn_refused = router_conn_refused;
	r->on_coord_ready = router_check_ready;
	routes_attach(r);
	if (asprintf(&r->coord_path, "%s/%s", conf->shared.runtime_dir, RW_SOCK_COORD) < 0) {
		r->coord_path = NULL;
		router_free(r);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	r->accept_retry = evtimer_new(base, accept_retry_cb, r);
	r->loop_lag = loop_lag_new(base);
	r->unserved = addr_table_new();
	if (!r->accept_retry || !r->unserved || !r->loop_lag) {
		router_free(r);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	int rr = bridge_listen(r);
	if (rr < 0) {
		router_free(r);
		return rr;
	}
	if (conf->preview_listen[0] != '\0') {
		rr = preview_new(r, &r->preview);
		if (rr < 0) {
			router_free(r);
			return rr;
		}
	}
	int afd = listen_fd_from_systemd();
	if (afd < 0) {
		router_free(r);
		return afd;
	}
	if (afd > 0) {
		socklen_t l = sizeof(ss);
		char host[INET6_ADDRSTRLEN] = "?";
		if (getsockname(afd, (struct sockaddr *)&ss, &l) < 0)
			ss.ss_family = AF_UNSPEC;
		/* the configuration check saw routerd.listen, not this socket */
		if (conf->n_tokens == 0 && !sockaddr_is_loopback(&ss)) {
			safe_close(afd);
			router_free(r);
			return log_error_errno(
			    SYNTHETIC_ERRNO(EPERM),
			    "Refusing to serve the socket-activated non-loopback "
			    "socket without authentication: set "
			    "routerd.tokens_file");
		}
		if (ss.ss_family == AF_INET)
			evutil_inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host,
					 sizeof(host));
		else if (ss.ss_family == AF_INET6)
			evutil_inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, host,
					 sizeof(host));
		snprintf(r->listen_desc, sizeof(r->listen_desc),
			 ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", host,
			 ntohs(((struct sockaddr_in *)&ss)->sin_port));
		r->listener = evconnlistener_new(
		    base, accept_cb, r, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, afd);
		if (!r->listener) {
			safe_close(afd);
			router_free(r);
			return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
		}
		log_info("Using the socket-activated listener on %s", r->listen_desc);
		evconnlistener_set_error_cb(r->listener, accept_error_cb);
		*ret = r;
		return 0;
	}
	snprintf(r->listen_desc, sizeof(r->listen_desc), "%s", conf->listen);
	if (evutil_parse_sockaddr_port(conf->listen, (struct sockaddr *)&ss, &sslen) < 0) {
		router_free(r);
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL), "Invalid listen address '%s'",
				       conf->listen);
	}
	r->listener = evconnlistener_new_bind(
	    base, accept_cb, r, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
	    1024, (struct sockaddr *)&ss, sslen);
	if (!r->listener) {
		int err = errno;
		router_free(r);
		return log_error_errno(err ? err : EADDRNOTAVAIL, "Cannot listen on %s: %m",
				       conf->listen);
	}
	evconnlistener_set_error_cb(r->listener, accept_error_cb);
	*ret = r;
	return 0;
}

int
router_start(Router *r)
{
	log_debug("Listening on %s; coordinatord at %s", r->listen_desc, r->coord_path);
	return coord_start(r);
}

void
router_stop(Router *r)
{
	struct timeval tv;

	if (r->stopping)
		return;
	r->stopping = true;
	notify_stopping();
	if (r->listener) {
		evconnlistener_free(r->listener);
		r->listener = NULL;
	}
	bridge_unlisten(r);
	preview_stop(r->preview);
	coord_stop(r);
	for (HttpConn *c = r->conns; c; c = c->next) {
		if (c->state == CONN_WS)
			ws_close(c, 1001, "server shutting down");
		else if (c->state == CONN_SSE)
			sse_close(c, 1001, "server shutting down");
		else
			http_conn_abort(c);
	}
	if (r->n_conns == 0)
		event_base_loopbreak(r->base);
	else
		event_base_loopexit(r->base, timeval_from_usec(&tv, STOP_DEADLINE_USEC));
}

Router *
router_free(Router *r)
{
	if (!r)
		return NULL;
	r->stopping = true;
	while (r->conns)
		http_conn_free(r->conns);
	coord_stop(r);
	if (r->listener)
		evconnlistener_free(r->listener);
	bridge_unlisten(r);
	r->preview = preview_free(r->preview);
	free(r->bridge_path);
	tenant_rate_free(r);
	if (r->accept_retry)
		event_free(r->accept_retry);
	loop_lag_free(r->loop_lag);
	r->unserved = addr_table_free(r->unserved);
	if (r->cork_buf)
		evbuffer_free(r->cork_buf);
	if (r->pass_corked)
		peer_uncork();
	if (r->pass_uncork)
		event_free(r->pass_uncork);
	free(r->coord_path);
	free(r);
	return NULL;
}

static void
on_term(void *userdata)
{
	router_stop(userdata);
}

int
router_run(const DaemonArgs *args)
{
	_cleanup_(router_conf_done) RouterConf conf = {0};
	struct event_base *base = NULL;
	Router *r = NULL;
	int rr;

	rr = router_conf_load(args, &conf);
	if (rr < 0)
		return rr;
	if (args->check_config) {
		if (!args->dump_config)
			log_info("Configuration is valid");
		return 0;
	}
	log_set_max_level(conf.shared.log_level);
	base = event_base_new();
	if (!base)
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Cannot create the event loop");
	rr = router_new(base, &conf, &r);
	if (rr >= 0)
		rr = daemon_setup_signals(base, on_term, NULL, r);
	if (rr >= 0)
		rr = router_start(r);
	if (rr >= 0) {
		notify_status("waiting for coordinatord");
		if (event_base_dispatch(base) < 0)
			rr = log_error_errno(SYNTHETIC_ERRNO(EIO), "Event loop failed");
		else
			log_info("routerd stopped");
	} else if (rr < 0 && r)
		log_error_errno(rr, "Startup failed: %m");
	router_free(r);
	daemon_teardown_signals();
	event_base_free(base);
	return rr < 0 ? rr : 0;
}
