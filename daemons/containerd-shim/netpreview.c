/* SPDX-License-Identifier: MIT */
/*
 * netpreview.c — the preview socket (netpreview.h): a hello line, a connect
 * inside the sandbox's netns, then a splice.
 *
 * A connection (PConn) has two bufferevents: down (the client, on the Unix
 * socket) and up (the TCP socket made in the sandbox's netns). Life:
 *   HELLO       reading "RUNWARDEN-PREVIEW <key> <port>\r\n" (HELLO_TIMEOUT_SEC)
 *   CONNECTING  up's connect to 127.0.0.1:<port> in flight
 *   OPEN        splicing
 *   CLOSING     flushing what is queued to one side, then free
 */
#include "config.h"

#include "netpreview.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "bev-splice.h"
#include "id-util.h"
#include "log.h"
#include "macro.h"
#include "netfwd.h"
#include "peer-server.h"

#define HELLO_TIMEOUT_SEC 10
#define CONNECT_TIMEOUT_SEC 10
#define HELLO_MAX 512 /* the hello word, a 256-byte key, a port */

typedef enum PState { P_HELLO, P_CONNECTING, P_OPEN, P_CLOSING } PState;
typedef struct PConn PConn;

struct PConn {
	PConn *prev, *next;
	NetPreview *np;
	PState state;
	BevSplice sp; /* down: the client; up: the sandbox port */
	char sandbox_id[17];
	uint16_t port;
};

struct NetPreview {
	struct event_base *base;
	struct evconnlistener *lev;
	char *path;
	int64_t gid;
	NetPreviewResolve resolve;
	void *userdata;
	PConn *conns;
	size_t n_conns;
};

static void
pconn_free(PConn *c)
{
	NetPreview *np = c->np;

	if (c->prev)
		c->prev->next = c->next;
	else
		np->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	np->n_conns--;
	if (c->sp.down)
		bufferevent_free(c->sp.down);
	if (c->sp.up)
		bufferevent_free(c->sp.up);
	free(c);
}

static void
pconn_splice_close(BevSplice *s)
{
	pconn_free(container_of(s, PConn, sp));
}

/* One side ended: the other flushes what it holds, then the whole goes. */
static void
pconn_finish(PConn *c, struct bufferevent *other)
{
	c->state = P_CLOSING;
	bev_splice_finish(&c->sp, other);
}

/* "ERR <code>\r\n" to the client, then close. */
static void
pconn_refuse(PConn *c, const char *code)
{
	if (c->sp.up) {
		bufferevent_free(c->sp.up);
		c->sp.up = NULL;
	}
	evbuffer_add_printf(bufferevent_get_output(c->sp.down), "ERR %s\r\n", code);
	pconn_finish(c, c->sp.down);
}

static void
up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	PConn *c = arg;

	if (!(what & BEV_EVENT_CONNECTED)) {
		log_full(LOG_INFO, "Preview: nothing listens on port %u of sandbox %s", c->port,
			 c->sandbox_id);
		pconn_refuse(c, "port_not_listening");
		return;
	}
	c->state = P_OPEN;
	evbuffer_add(bufferevent_get_output(c->sp.down), "OK\r\n", 4);
	/* bytes the client sent right behind its hello go first */
	bev_splice_open(&c->sp);
}

/* "<key> <port>" after the hello word: 0, or -EINVAL. */
static int
hello_parse(char *line, char **ret_key, uint16_t *ret_port)
{
	char *sp = strrchr(line, ' '), *end = NULL;
	unsigned long port;

	if (!sp || sp == line)
		return -EINVAL;
	*sp = '\0';
	errno = 0;
	port = strtoul(sp + 1, &end, 10);
	if (errno != 0 || !end || *end != '\0' || sp[1] < '1' || sp[1] > '9' || port > 65535)
		return -EINVAL;
	if (!thread_id_valid(line))
		return -EINVAL;
	*ret_key = line;
	*ret_port = (uint16_t)port;
	return 0;
}

static void
pconn_connect(PConn *c, const char *key)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(c->port)};
	struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_SEC};
	int pidfd = -1, fd = -1, r;

	r = c->np->resolve(key, &pidfd, c->sandbox_id, c->np->userdata);
	if (r < 0) {
		pconn_refuse(c, "sandbox_not_running");
		return;
	}
	r = netfwd_socket_in_netns(pidfd, &fd);
	if (r < 0) {
		log_full_errno(LOG_WARNING, r, "Preview: no socket in sandbox %s: %m",
			       c->sandbox_id);
		pconn_refuse(c, "sandbox_not_running");
		return;
	}
	c->sp.up = bufferevent_socket_new(c->np->base, fd,
					  BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!c->sp.up) {
		close(fd);
		pconn_free(c);
		return;
	}
	c->state = P_CONNECTING;
	bufferevent_disable(c->sp.down, EV_READ);
	bufferevent_setcb(c->sp.up, NULL, NULL, up_event_cb, c);
	bufferevent_set_timeouts(c->sp.up, NULL, &tv);
	/* the socket is the netns's: this connect() reaches the sandbox's lo */
	if (bufferevent_socket_connect(c->sp.up, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		pconn_refuse(c, "port_not_listening");
}

static void
hello_read_cb(struct bufferevent *bev, void *arg)
{
	PConn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = 0;
	char *line, *key = NULL;

	line = evbuffer_readln(in, &n, EVBUFFER_EOL_CRLF_STRICT);
	if (!line) {
		if (evbuffer_get_length(in) > HELLO_MAX)
			pconn_refuse(c, "bad_request");
		return;
	}
	if (n > HELLO_MAX || strncmp(line, NETPREVIEW_HELLO, STRLEN(NETPREVIEW_HELLO)) != 0 ||
	    hello_parse(line + STRLEN(NETPREVIEW_HELLO), &key, &c->port) < 0) {
		free(line);
		pconn_refuse(c, "bad_request");
		return;
	}
	pconn_connect(c, key);
	free(line);
}

static void
hello_event_cb(struct bufferevent *bev, short what, void *arg)
{
	pconn_free(arg);
}

static void
accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
	NetPreview *np = arg;
	struct timeval tv = {.tv_sec = HELLO_TIMEOUT_SEC};
	uid_t uid = (uid_t)-1;
	PConn *c;
	int r;

	r = peer_server_allowed(fd, np->gid, &uid);
	if (r <= 0) {
		log_notice("Preview: refused a connection of uid %d on %s", (int)uid, np->path);
		close(fd);
		return;
	}
	if (np->n_conns >= NETPREVIEW_MAX_CONNS) {
		log_warning("Preview: refusing a connection: %d open already",
			    NETPREVIEW_MAX_CONNS);
		close(fd);
		return;
	}
	c = bev_splice_accept(np->base, fd, sizeof(*c), offsetof(PConn, sp));
	if (!c)
		return;
	c->np = np;
	c->sp.high_water = NETPREVIEW_HIGH_WATER;
	c->sp.close = pconn_splice_close;
	c->next = np->conns;
	if (np->conns)
		np->conns->prev = c;
	np->conns = c;
	np->n_conns++;
	c->state = P_HELLO;
	bufferevent_setcb(c->sp.down, hello_read_cb, NULL, hello_event_cb, c);
	bufferevent_set_timeouts(c->sp.down, &tv, NULL);
	bufferevent_enable(c->sp.down, EV_READ | EV_WRITE);
}

int
netpreview_new(struct event_base *base, const char *path, unsigned mode, int64_t gid,
	       NetPreviewResolve resolve, void *userdata, NetPreview **ret)
{
	NetPreview *np;
	int fd;

	np = calloc(1, sizeof(*np));
	if (!np)
		return -ENOMEM;
	np->base = base;
	np->gid = gid;
	np->resolve = resolve;
	np->userdata = userdata;
	np->path = strdup(path);
	if (!np->path) {
		free(np);
		return -ENOMEM;
	}
	fd = peer_server_listen(path, mode, gid);
	if (fd < 0) {
		free(np->path);
		free(np);
		return fd;
	}
	np->lev = evconnlistener_new(base, accept_cb, np, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!np->lev) {
		close(fd);
		(void)unlink(path);
		free(np->path);
		free(np);
		return -ENOMEM;
	}
	*ret = np;
	return 0;
}

void
netpreview_stop_listening(NetPreview *np, bool unlink_path)
{
	if (!np || !np->lev)
		return;
	evconnlistener_free(np->lev);
	np->lev = NULL;
	if (unlink_path)
		(void)unlink(np->path);
}

NetPreview *
netpreview_free(NetPreview *np, bool unlink_path)
{
	if (!np)
		return NULL;
	netpreview_stop_listening(np, unlink_path);
	while (np->conns)
		pconn_free(np->conns);
	free(np->path);
	free(np);
	return NULL;
}
