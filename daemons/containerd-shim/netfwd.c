/* SPDX-License-Identifier: MIT */
/*
 * netfwd.c — listeners in a sandbox netns, the forward and the CONNECT proxy.
 *
 * A connection (NetConn) has two bufferevents: down (the sandbox side, the
 * accepted socket) and up (the host side, connected by us). Life:
 *   HEAD       proxy only: reading the CONNECT head from down
 *   RESOLVING  proxy only: evdns_getaddrinfo in flight
 *   CONNECTING up's non-blocking connect in flight (next address on failure)
 *   OPEN       splicing
 *   CLOSING    one side ended: flushing what is queued to the other, then free
 * A DNS answer is always handled from a zero-timeout event, never inside
 * evdns_getaddrinfo() (which may answer synchronously from /etc/hosts), and a
 * connection closed while its lookup is in flight stays allocated (detached,
 * "zombie") until evdns reports the cancellation.
 *
 * The answer is checked, address by address, before anything is connected
 * (net-addr.h): an address that is not public unicast (loopback, private,
 * link-local, CGNAT, unique-local, multicast, unspecified, reserved, and
 * IPv4-mapped/NAT64/6to4 forms of them) is skipped unless it lies in the
 * listener's allow_private networks. The sockaddr connected is the one
 * checked: a name is resolved once per CONNECT, never again for the connect.
 * When no address is left the client gets 403 with the reason in the body and
 * a Proxy-Status header (RFC 9209, destination_ip_prohibited). Every refusal's
 * log line (this one, and the 405/403/400/431/502s and closes of the head
 * checks) goes through refuse-log.h: a few per sandbox and kind, then a count.
 *
 * evdns reads /etc/hosts when its base is made and not again by itself: the
 * file is re-read before a lookup when its inode, size or mtime changed, so an
 * administrator's edit applies without a restart (a stat() and, rarely, a
 * read of a small local file on the loop; the name service itself is never
 * waited for on the loop).
 */
#include "config.h"

#include "netfwd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "bev-splice.h"
#include "connect-parse.h"
#include "fd-util.h"
#include "macro.h"
#include "net-addr.h"
#include "refuse-log.h"
#include "time-util.h"

#define HEAD_TIMEOUT_SEC 10
#define CONNECT_TIMEOUT_SEC 10
#define HOSTS_FILE "/etc/hosts"

typedef struct NetRun NetRun;
typedef struct NetConn NetConn;
typedef struct Listener Listener;

typedef enum ListenKind { LISTEN_FORWARD, LISTEN_PROXY } ListenKind;
typedef enum ConnState { C_HEAD, C_RESOLVING, C_CONNECTING, C_OPEN, C_CLOSING } ConnState;

struct Listener {
	Listener *next;
	NetRun *run;
	ListenKind kind;
	struct evconnlistener *lev;
	uint16_t port;
	struct sockaddr_storage target; /* forward */
	int target_len;
	bool hello;	      /* forward to a Unix socket: "RUNWARDEN-BRIDGE <runId>\r\n" first */
	ConnectTarget *allow; /* proxy */
	size_t n_allow;
	NetCidr *allow_private; /* proxy: special addresses that may be reached anyway */
	size_t n_allow_private;
};

struct NetConn {
	NetConn *next;
	NetFwd *fwd;
	NetRun *run;	    /* NULL once detached (a zombie waiting for its DNS cancel) */
	Listener *listener; /* lives as long as the run's connections */
	ListenKind kind;
	ConnState state;
	BevSplice sp; /* down: the sandbox side; up: the host side */
	ConnectTarget t;
	struct evdns_getaddrinfo_request *dns;
	bool dns_done;
	int dns_err;
	struct evutil_addrinfo *ai, *ai_next;
	struct event *step; /* the deferred DNS answer */
};

struct NetRun {
	NetRun *next;
	NetFwd *fwd;
	char sandbox_id[17];
	char *run_id, *thread_id;
	uint64_t bytes_out, bytes_in;
	Listener *listeners;
	NetConn *conns;
	size_t n_conns;
};

struct NetFwd {
	struct event_base *base;
	struct evdns_base *dns; /* created on the first proxy connection */
	struct stat hosts_st;	/* /etc/hosts as evdns last read it */
	NetRun *runs;
	RefuseLog *refusals;
};

static void conn_close(NetConn *c);

static LogCtx
run_ctx(const NetRun *r)
{
	return (LogCtx){
	    .run_id = r->run_id, .thread_id = r->thread_id, .sandbox_id = r->sandbox_id};
}

/* ---------------------------------------------------------------------------
 * The listening socket, made inside the sandbox netns by a helper thread.
 */

typedef struct NsListen {
	int pidfd;
	int fd;
	uint16_t port;
	bool listen; /* false: only the socket (netfwd_socket_in_netns) */
	int err;
} NsListen;

static void *
ns_listen_thread(void *arg)
{
	NsListen *a = arg;
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(a->port)};
	socklen_t l = sizeof(sa);
	int fd, one = 1;

	/* This thread alone enters the netns; it ends right after. */
	if (setns(a->pidfd, CLONE_NEWNET) < 0) {
		a->err = -errno;
		return NULL;
	}
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		a->err = -errno;
		return NULL;
	}
	if (!a->listen) {
		a->fd = fd;
		return NULL;
	}
	/* A fixed port (re-listen after a shim restart): the dead shim's
	 * connections may linger on it (FIN_WAIT, TIME_WAIT); they inherit the
	 * listener's SO_REUSEADDR, so every listener sets it. It still refuses a
	 * port someone listens on (EADDRINUSE). */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &l) < 0) {
		a->err = -errno;
		close(fd);
		return NULL;
	}
	a->fd = fd;
	a->port = ntohs(sa.sin_port);
	return NULL;
}

static int
ns_thread_run(NsListen *a)
{
	pthread_t t;
	int r;

	r = pthread_create(&t, NULL, ns_listen_thread, a);
	if (r != 0)
		return -r;
	r = pthread_join(t, NULL);
	if (r != 0)
		return -r; /* cannot happen: the thread is ours and joinable */
	if (a->fd < 0)
		return a->err < 0 ? a->err : -EIO;
	return 0;
}

int
netfwd_socket_in_netns(int pidfd, int *ret_fd)
{
	NsListen a = {.pidfd = pidfd, .fd = -1};
	int r = ns_thread_run(&a);

	if (r < 0)
		return r;
	*ret_fd = a.fd;
	return 0;
}

int
netfwd_listen_in_netns(int pidfd, int *ret_fd, uint16_t *ret_port)
{
	NsListen a = {.pidfd = pidfd, .fd = -1, .port = *ret_port, .listen = true};
	int r;

	r = ns_thread_run(&a);
	if (r < 0)
		return r;
	*ret_fd = a.fd;
	*ret_port = a.port;
	return 0;
}

/* ---------------------------------------------------------------------------
 * Runs.
 */

static NetRun *
run_find(NetFwd *n, const char *sandbox_id, const char *run_id)
{
	for (NetRun *r = n->runs; r; r = r->next)
		if (streq(r->sandbox_id, sandbox_id) && streq(r->run_id, run_id))
			return r;
	return NULL;
}

static NetRun *
run_get(NetFwd *n, const LogCtx *ctx)
{
	NetRun *r = run_find(n, ctx->sandbox_id, ctx->run_id);

	if (r)
		return r;
	if (strlen(ctx->sandbox_id) >= sizeof(r->sandbox_id))
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	strcpy(r->sandbox_id, ctx->sandbox_id);
	r->fwd = n;
	r->run_id = strdup(ctx->run_id);
	r->thread_id = ctx->thread_id ? strdup(ctx->thread_id) : NULL;
	if (!r->run_id || (ctx->thread_id && !r->thread_id)) {
		free(r->run_id);
		free(r->thread_id);
		free(r);
		return NULL;
	}
	r->next = n->runs;
	n->runs = r;
	return r;
}

static void
listener_free(Listener *l)
{
	if (l->lev)
		evconnlistener_free(l->lev); /* closes the fd */
	free(l->allow);
	free(l->allow_private);
	free(l);
}

/* Close the run's listeners and connections; the counters stay. */
static void
run_close_all(NetRun *r)
{
	while (r->listeners) {
		Listener *l = r->listeners;
		r->listeners = l->next;
		listener_free(l);
	}
	while (r->conns)
		conn_close(r->conns); /* unlinks itself */
}

static void
run_free(NetFwd *n, NetRun *r)
{
	bool last = true;

	run_close_all(r);
	for (NetRun **pp = &n->runs; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	/* The sandbox's last run: the refusals held back are told now. */
	for (NetRun *x = n->runs; x; x = x->next)
		if (streq(x->sandbox_id, r->sandbox_id))
			last = false;
	if (last)
		refuse_log_flush_sandbox(n->refusals, r->sandbox_id);
	free(r->run_id);
	free(r->thread_id);
	free(r);
}

/* ---------------------------------------------------------------------------
 * Connections.
 */

static void
conn_unlink(NetConn *c)
{
	if (!c->run)
		return;
	for (NetConn **pp = &c->run->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	c->run->n_conns--;
	c->run = NULL;
}

static void
conn_free(NetConn *c)
{
	conn_unlink(c);
	if (c->sp.down)
		bufferevent_free(c->sp.down);
	if (c->sp.up)
		bufferevent_free(c->sp.up);
	if (c->ai)
		evutil_freeaddrinfo(c->ai);
	if (c->step)
		event_free(c->step);
	free(c);
}

/* Free now, or — with a lookup in flight — once evdns reported its end. */
static void
conn_close(NetConn *c)
{
	if (c->dns) {
		struct evdns_getaddrinfo_request *req = c->dns;
		conn_unlink(c);
		if (c->sp.down) {
			bufferevent_free(c->sp.down);
			c->sp.down = NULL;
		}
		evdns_getaddrinfo_cancel(req); /* its callback frees c, maybe right now */
		return;
	}
	conn_free(c);
}

static void
conn_splice_close(BevSplice *s)
{
	conn_close(container_of(s, NetConn, sp));
}

/* The proxy's byte counts (netfwd_run_bytes). */
static void
conn_splice_count(BevSplice *s, struct bufferevent *from, size_t len)
{
	NetConn *c = container_of(s, NetConn, sp);

	if (c->kind == LISTEN_PROXY && c->run) {
		if (from == c->sp.down)
			c->run->bytes_out += len;
		else
			c->run->bytes_in += len;
	}
}

/* One side is done: let the other flush what it has queued, then close. */
static void
conn_finish(NetConn *c, struct bufferevent *other)
{
	c->state = C_CLOSING;
	bev_splice_finish(&c->sp, other);
}

/* An HTTP answer from the proxy itself, with an optional text body, then
 * close. */
static void
conn_answer_body(NetConn *c, const char *status, const char *extra, const char *body)
{
	struct evbuffer *out = bufferevent_get_output(c->sp.down);

	if (c->sp.up) {
		bufferevent_free(c->sp.up);
		c->sp.up = NULL;
	}
	body = body ? body : "";
	evbuffer_add_printf(out, "HTTP/1.1 %s\r\n%s", status, extra ? extra : "");
	if (body[0])
		evbuffer_add_printf(out, "Content-Type: text/plain; charset=utf-8\r\n");
	evbuffer_add_printf(out, "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body),
			    body);
	conn_finish(c, c->sp.down);
}

static void
conn_answer(NetConn *c, const char *status, const char *extra)
{
	conn_answer_body(c, status, extra, NULL);
}

static void
conn_open(NetConn *c)
{
	c->state = C_OPEN;
	/* Bytes the client sent right behind its CONNECT head go first. */
	bev_splice_open(&c->sp);
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg);

/* Connect up to the next address (proxy) or the target (forward). */
static int
conn_connect(NetConn *c, const struct sockaddr *sa, int salen)
{
	struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_SEC};

	if (c->sp.up)
		bufferevent_free(c->sp.up);
	c->sp.up = bufferevent_socket_new(bufferevent_get_base(c->sp.down), -1,
					  BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!c->sp.up)
		return -ENOMEM;
	c->state = C_CONNECTING;
	bufferevent_setcb(c->sp.up, NULL, NULL, up_event_cb, c);
	bufferevent_set_timeouts(c->sp.up, NULL, &tv);
	if (bufferevent_socket_connect(c->sp.up, sa, salen) < 0) {
		bufferevent_free(c->sp.up);
		c->sp.up = NULL;
		return -ECONNREFUSED;
	}
	return 0;
}

/* NET_ADDR_PUBLIC when the proxy may connect to sa, else the class that
 * forbids it. */
static NetAddrClass
addr_verdict(const Listener *l, const struct sockaddr *sa)
{
	NetAddrClass cls = net_addr_classify(sa);

	if (cls == NET_ADDR_PUBLIC || cls == NET_ADDR_NOT_IP)
		return cls;
	return net_cidr_list_match(l->allow_private, l->n_allow_private, sa) ? NET_ADDR_PUBLIC
									     : cls;
}

/* Connect to the next address the check let through: exactly the sockaddr
 * checked, never a name again. */
static bool
conn_try_next(NetConn *c)
{
	while (c->ai_next) {
		struct evutil_addrinfo *a = c->ai_next;
		c->ai_next = a->ai_next;
		if (!a->ai_addr || addr_verdict(c->listener, a->ai_addr) != NET_ADDR_PUBLIC)
			continue;
		if (conn_connect(c, a->ai_addr, (int)a->ai_addrlen) >= 0)
			return true;
	}
	return false;
}

/* Every address of the answer was refused: 403, and a rate-limited log line. */
static void
conn_refuse_addr(NetConn *c, NetAddrClass cls, const struct sockaddr *sa)
{
	char addr[INET6_ADDRSTRLEN] = "?", body[512];
	const void *p = NULL;

	if (sa && sa->sa_family == AF_INET)
		p = &((const struct sockaddr_in *)sa)->sin_addr;
	else if (sa && sa->sa_family == AF_INET6)
		p = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (p)
		(void)inet_ntop(sa->sa_family, p, addr, sizeof(addr));
	{
		LogCtx ctx = c->run ? run_ctx(c->run) : (LogCtx){0};
		refuse_log(c->fwd->refusals, REFUSE_ADDRESS, LOG_WARNING, &ctx,
			   "Proxy: refused CONNECT %s:%u: it resolves to %s, a %s address (not in "
			   "egress_allow_private)",
			   c->t.host, c->t.port, addr, net_addr_class_name(cls));
	}
	snprintf(body, sizeof(body),
		 "runwarden egress proxy: %s resolves to %s, a %s address; the proxy "
		 "reaches public addresses only (egress_allow_private)\n",
		 c->t.host, addr, net_addr_class_name(cls));
	conn_answer_body(c, "403 Forbidden",
			 "Proxy-Status: runwarden; error=destination_ip_prohibited\r\n", body);
}

static void
up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	NetConn *c = arg;

	if (what & BEV_EVENT_CONNECTED) {
		/* before any byte of the sandbox's: the run the connection belongs to */
		if (c->kind == LISTEN_FORWARD && c->listener->hello && c->run)
			evbuffer_add_printf(bufferevent_get_output(c->sp.up),
					    "RUNWARDEN-BRIDGE %s\r\n", c->run->run_id);
		if (c->kind == LISTEN_PROXY) {
			LogCtx ctx = c->run ? run_ctx(c->run) : (LogCtx){0};
			log_ctx(LOG_INFO, &ctx, "Proxy: CONNECT %s:%u established", c->t.host,
				c->t.port);
			evbuffer_add_printf(bufferevent_get_output(c->sp.down),
					    "HTTP/1.1 200 Connection Established\r\n\r\n");
		}
		conn_open(c);
		return;
	}
	/* connect failed or timed out */
	if (c->kind == LISTEN_PROXY && conn_try_next(c))
		return;
	if (c->kind == LISTEN_PROXY) {
		LogCtx ctx = c->run ? run_ctx(c->run) : (LogCtx){0};
		refuse_log(c->fwd->refusals, REFUSE_CONNECT_FAILED, LOG_WARNING, &ctx,
			   "Proxy: cannot connect to %s:%u", c->t.host, c->t.port);
		conn_answer(c, "502 Bad Gateway", NULL);
	} else {
		LogCtx ctx = c->run ? run_ctx(c->run) : (LogCtx){0};
		refuse_log(c->fwd->refusals, REFUSE_FORWARD_FAILED, LOG_NOTICE, &ctx,
			   "Forward: cannot connect to the target: %s",
			   evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		conn_close(c);
	}
}

/* The deferred DNS answer. */
static void
dns_step_cb(evutil_socket_t fd, short what, void *arg)
{
	NetConn *c = arg;
	LogCtx ctx = c->run ? run_ctx(c->run) : (LogCtx){0};

	if (c->dns_err != 0 || !c->ai) {
		refuse_log(c->fwd->refusals, REFUSE_UNRESOLVED, LOG_WARNING, &ctx,
			   "Proxy: refused CONNECT %s:%u: cannot resolve it: %s", c->t.host,
			   c->t.port, evutil_gai_strerror(c->dns_err));
		conn_answer(c, "502 Bad Gateway", NULL);
		return;
	}
	{
		/* Refused when no address of the answer passes the check. */
		NetAddrClass first = NET_ADDR_PUBLIC;
		const struct sockaddr *first_sa = NULL;
		bool any = false;
		for (struct evutil_addrinfo *a = c->ai; a; a = a->ai_next) {
			NetAddrClass v =
			    a->ai_addr ? addr_verdict(c->listener, a->ai_addr) : NET_ADDR_NOT_IP;
			if (v == NET_ADDR_PUBLIC) {
				any = true;
				break;
			}
			if (!first_sa) {
				first = v;
				first_sa = a->ai_addr;
			}
		}
		if (!any) {
			conn_refuse_addr(c, first, first_sa);
			return;
		}
	}
	c->ai_next = c->ai;
	if (!conn_try_next(c))
		conn_answer(c, "502 Bad Gateway", NULL);
}

static void
dns_cb(int err, struct evutil_addrinfo *ai, void *arg)
{
	NetConn *c = arg;
	struct timeval tv = {0};

	c->dns = NULL;
	c->dns_done = true;
	if (!c->run) { /* closed meanwhile (err is EVUTIL_EAI_CANCEL) */
		if (ai)
			evutil_freeaddrinfo(ai);
		conn_free(c);
		return;
	}
	c->dns_err = err;
	c->ai = ai;
	evtimer_add(c->step, &tv);
}

static void
conn_resolve(NetConn *c)
{
	NetFwd *n = c->fwd;
	struct evutil_addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP};
	struct evdns_getaddrinfo_request *req;
	char port[8];

	if (!n->dns) {
		(void)stat(HOSTS_FILE, &n->hosts_st);
		n->dns = evdns_base_new(n->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
						     EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	} else {
		struct stat st = {0};
		(void)stat(HOSTS_FILE, &st);
		if (st.st_ino != n->hosts_st.st_ino || st.st_size != n->hosts_st.st_size ||
		    st.st_mtim.tv_sec != n->hosts_st.st_mtim.tv_sec ||
		    st.st_mtim.tv_nsec != n->hosts_st.st_mtim.tv_nsec) {
			evdns_base_clear_host_addresses(n->dns);
			/* gone or unreadable: no entries, as evdns does at start */
			(void)evdns_base_load_hosts(n->dns, HOSTS_FILE);
			n->hosts_st = st;
		}
	}
	c->step = evtimer_new(n->base, dns_step_cb, c);
	if (!n->dns || !c->step) {
		LogCtx ctx = run_ctx(c->run);
		log_ctx(LOG_WARNING, &ctx, "Proxy: no resolver for CONNECT %s:%u", c->t.host,
			c->t.port);
		conn_answer(c, "502 Bad Gateway", NULL);
		return;
	}
	c->state = C_RESOLVING;
	bufferevent_disable(c->sp.down, EV_READ);
	snprintf(port, sizeof(port), "%u", c->t.port);
	req = evdns_getaddrinfo(n->dns, c->t.host, port, &hints, dns_cb, c);
	if (!c->dns_done)
		c->dns = req;
}

static void
head_read_cb(struct bufferevent *bev, void *arg)
{
	NetConn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t avail = evbuffer_get_length(in);
	size_t look = MIN(avail, (size_t)CONNECT_HEAD_MAX);
	const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
	LogCtx ctx = run_ctx(c->run);
	long end;
	int r;

	end = connect_head_end(buf, look);
	if (end == 0)
		return; /* more to come */
	if (end < 0) {
		refuse_log(c->fwd->refusals, REFUSE_HEAD_TOO_LARGE, LOG_WARNING, &ctx,
			   "Proxy: refused a request: head over %d bytes", CONNECT_HEAD_MAX);
		conn_answer(c, "431 Request Header Fields Too Large", NULL);
		return;
	}
	r = connect_parse_head(buf, (size_t)end, &c->t);
	evbuffer_drain(in, (size_t)end);
	switch (r) {
	case 0: break;
	case -EOPNOTSUPP:
		refuse_log(c->fwd->refusals, REFUSE_NOT_CONNECT, LOG_WARNING, &ctx,
			   "Proxy: refused a request that is not CONNECT");
		conn_answer(c, "405 Method Not Allowed", "Allow: CONNECT\r\n");
		return;
	case -EPERM:
		refuse_log(c->fwd->refusals, REFUSE_IP_LITERAL, LOG_WARNING, &ctx,
			   "Proxy: refused CONNECT to an IP literal");
		conn_answer(c, "403 Forbidden", NULL);
		return;
	default:
		refuse_log(c->fwd->refusals, REFUSE_MALFORMED, LOG_WARNING, &ctx,
			   "Proxy: refused a malformed request");
		conn_answer(c, "400 Bad Request", NULL);
		return;
	}
	{
		if (!connect_allowed(c->listener->allow, c->listener->n_allow, &c->t)) {
			refuse_log(c->fwd->refusals, REFUSE_NOT_ALLOWED, LOG_WARNING, &ctx,
				   "Proxy: refused CONNECT '%s:%u': not on the allowlist",
				   c->t.host, c->t.port);
			conn_answer(c, "403 Forbidden", NULL);
			return;
		}
	}
	log_ctx(LOG_DEBUG, &ctx, "Proxy: CONNECT %s:%u allowed, resolving", c->t.host, c->t.port);
	conn_resolve(c);
}

static void
head_event_cb(struct bufferevent *bev, short what, void *arg)
{
	NetConn *c = arg;

	if (what & BEV_EVENT_TIMEOUT) {
		LogCtx ctx = run_ctx(c->run);
		refuse_log(c->fwd->refusals, REFUSE_HEAD_TIMEOUT, LOG_NOTICE, &ctx,
			   "Proxy: no complete request within %d s", HEAD_TIMEOUT_SEC);
	}
	conn_close(c);
}

static void
accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	Listener *l = arg;
	NetRun *run = l->run;
	NetConn *c;

	if (run->n_conns >= NETFWD_MAX_CONNS) {
		LogCtx ctx = run_ctx(run);
		refuse_log(run->fwd->refusals, REFUSE_CONN_LIMIT, LOG_WARNING, &ctx,
			   "Refusing a connection on port %u: %d open already", l->port,
			   NETFWD_MAX_CONNS);
		close(fd);
		return;
	}
	c = bev_splice_accept(evconnlistener_get_base(lev), fd, sizeof(*c), offsetof(NetConn, sp));
	if (!c)
		return;
	c->kind = l->kind;
	c->listener = l;
	c->sp.high_water = NETFWD_HIGH_WATER;
	c->sp.close = conn_splice_close;
	c->sp.count = conn_splice_count;
	c->run = run;
	c->next = run->conns;
	run->conns = c;
	run->n_conns++;
	c->fwd = run->fwd;
	if (l->kind == LISTEN_FORWARD) {
		if (conn_connect(c, (struct sockaddr *)&l->target, l->target_len) < 0)
			conn_close(c);
		return;
	}
	{
		struct timeval tv = {.tv_sec = HEAD_TIMEOUT_SEC};
		c->state = C_HEAD;
		bufferevent_setwatermark(c->sp.down, EV_READ, 0, CONNECT_HEAD_MAX);
		bufferevent_setcb(c->sp.down, head_read_cb, NULL, head_event_cb, c);
		bufferevent_set_timeouts(c->sp.down, &tv, NULL);
		bufferevent_enable(c->sp.down, EV_READ | EV_WRITE);
	}
}

/* ---------------------------------------------------------------------------
 * The public side.
 */

int
netfwd_new(struct event_base *base, NetFwd **ret)
{
	NetFwd *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	n->base = base;
	if (refuse_log_new(base, REFUSE_WINDOW_USEC, REFUSE_BURST, REFUSE_GLOBAL_BURST,
			   &n->refusals) < 0) {
		free(n);
		return -ENOMEM;
	}
	*ret = n;
	return 0;
}

NetFwd *
netfwd_free(NetFwd *n)
{
	if (!n)
		return NULL;
	while (n->runs)
		run_free(n, n->runs);
	if (n->dns)
		/* Fails the lookups still in flight: their callbacks free the zombies. */
		evdns_base_free(n->dns, 1);
	refuse_log_free(n->refusals);
	free(n);
	return NULL;
}

/* Make the listener in the netns and register it with the run. */
static int
listener_add(NetFwd *n, int pidfd, const LogCtx *ctx, Listener *l, uint16_t *ret_port)
{
	NetRun *run;
	size_t count = 0;
	int fd = -1, r;

	run = run_get(n, ctx);
	if (!run)
		return -ENOMEM;
	for (Listener *x = run->listeners; x; x = x->next)
		count++;
	if (count >= NETFWD_MAX_LISTENERS)
		return -EMFILE;
	l->port = *ret_port; /* 0: the kernel chooses */
	r = netfwd_listen_in_netns(pidfd, &fd, &l->port);
	if (r < 0)
		return r;
	l->run = run;
	l->lev = evconnlistener_new(n->base, accept_cb, l, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!l->lev) {
		close(fd);
		return -ENOMEM;
	}
	l->next = run->listeners;
	run->listeners = l;
	*ret_port = l->port;
	return 0;
}

int
netfwd_forward(NetFwd *n, int pidfd, const LogCtx *ctx, const char *target, uint16_t *ret_port,
	       Reason *why)
{
	Listener *l;
	int r;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->kind = LISTEN_FORWARD;
	l->target_len = (int)sizeof(l->target);
	if (target[0] == '/') {
		/* routerd's bridge socket: each connection opens with the run's id,
		 * which therefore must be one plain word */
		struct sockaddr_un *su = (struct sockaddr_un *)&l->target;
		size_t tl = strlen(target), rl = strlen(ctx->run_id);
		if (tl >= sizeof(su->sun_path) || rl == 0 || rl > 128 ||
		    strspn(ctx->run_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					"0123456789-_") != rl) {
			reason_set(
			    why,
			    tl >= sizeof(su->sun_path)
				? "target '%.100s' is too long a socket path"
				: "target '%.100s': run_id must be letters, digits, '-' or '_'",
			    target);
			free(l);
			return -EINVAL;
		}
		memset(su, 0, sizeof(*su));
		su->sun_family = AF_UNIX;
		memcpy(su->sun_path, target, tl);
		l->target_len = (int)sizeof(*su);
		l->hello = true;
	} else if (!strchr(target, ':') ||
		   /* numeric only ("127.0.0.1:8787", "[::1]:8787"): resolved nowhere */
		   evutil_parse_sockaddr_port(target, (struct sockaddr *)&l->target,
					      &l->target_len) < 0 ||
		   (l->target.ss_family == AF_INET &&
		    ((struct sockaddr_in *)&l->target)->sin_port == 0) ||
		   (l->target.ss_family == AF_INET6 &&
		    ((struct sockaddr_in6 *)&l->target)->sin6_port == 0)) {
		reason_set(why, "target '%.100s' is not a numeric host:port", target);
		free(l);
		return -EINVAL;
	}
	r = listener_add(n, pidfd, ctx, l, ret_port);
	if (r < 0) {
		reason_set(why, "listen in the sandbox: %s", strerror(-r));
		free(l);
		return r;
	}
	log_ctx(LOG_INFO, ctx, "Forwarding sandbox port %u to %s", *ret_port, target);
	return 0;
}

int
netfwd_proxy(NetFwd *n, int pidfd, const LogCtx *ctx, char *const *allow, size_t n_allow,
	     char *const *allow_private, size_t n_allow_private, uint16_t *ret_port, Reason *why)
{
	Listener *l;
	int r;

	if (n_allow > 256 || n_allow_private > 256) {
		reason_set(why, "%s: more than 256 entries",
			   n_allow > 256 ? "allow" : "allow_private");
		return -EINVAL;
	}
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->kind = LISTEN_PROXY;
	l->allow = calloc(n_allow ? n_allow : 1, sizeof(*l->allow));
	if (!l->allow) {
		free(l);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_allow; i++) {
		r = connect_parse_authority(allow[i], strlen(allow[i]), 443, &l->allow[i]);
		if (r < 0) {
			reason_set(why, "allow: '%.100s' is %s", allow[i],
				   r == -EPERM ? "an IP literal (names only)" : "not host[:port]");
			free(l->allow);
			free(l);
			return -EINVAL;
		}
	}
	l->n_allow = n_allow;
	l->allow_private = calloc(n_allow_private ? n_allow_private : 1, sizeof(*l->allow_private));
	if (!l->allow_private) {
		listener_free(l);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_allow_private; i++)
		if (net_cidr_parse(allow_private[i], &l->allow_private[i]) < 0) {
			reason_set(why,
				   "allow_private: '%.100s' is not an IPv4 or IPv6 network "
				   "(address/prefix, host bits zero)",
				   allow_private[i]);
			listener_free(l);
			return -EINVAL;
		}
	l->n_allow_private = n_allow_private;
	r = listener_add(n, pidfd, ctx, l, ret_port);
	if (r < 0) {
		reason_set(why, "listen in the sandbox: %s", strerror(-r));
		listener_free(l);
		return r;
	}
	log_ctx(LOG_INFO, ctx,
		"Egress proxy on sandbox port %u for %zu allowed name(s), %zu private network(s) "
		"allowed",
		*ret_port, n_allow, n_allow_private);
	return 0;
}

int
netfwd_unlisten(NetFwd *n, const char *sandbox_id, const char *run_id, uint64_t *ret_out,
		uint64_t *ret_in)
{
	NetRun *r = run_find(n, sandbox_id, run_id);

	*ret_out = r ? r->bytes_out : 0;
	*ret_in = r ? r->bytes_in : 0;
	if (r) {
		LogCtx ctx = run_ctx(r);
		log_ctx(LOG_INFO, &ctx,
			"Closed the run's listeners: proxy carried %" PRIu64 " bytes out, %" PRIu64
			" in",
			r->bytes_out, r->bytes_in);
		run_free(n, r);
	}
	return 0;
}

void
netfwd_sandbox_gone(NetFwd *n, const char *sandbox_id)
{
	if (!n)
		return;
	for (NetRun *r = n->runs; r; r = r->next)
		if (streq(r->sandbox_id, sandbox_id))
			run_close_all(r);
}
