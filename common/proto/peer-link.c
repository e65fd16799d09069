/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "peer-link.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>

#include "macro.h"
#include "unix-socket.h"

struct PeerLink {
	struct event_base *base;
	PeerLinkConf conf;
	Peer *peer;
	struct event *retry, *hello;
	usec_t backoff;
};

static void
link_event(PeerLink *l, PeerLinkEvent what, int err)
{
	if (l->conf.event)
		l->conf.event(what, err, l->conf.userdata);
}

static void
schedule_retry(PeerLink *l)
{
	struct timeval tv;

	evtimer_add(l->retry, timeval_from_usec(&tv, l->backoff));
	l->backoff = MIN(l->backoff * 2, l->conf.backoff_max);
}

static void
link_connect(PeerLink *l)
{
	int fd, r;

	fd = unix_connect(l->conf.path);
	if (fd < 0) {
		link_event(l, PEER_LINK_CONNECT_FAILED, fd);
		schedule_retry(l);
		return;
	}
	r = peer_new(l->base, fd, l->conf.ops, l->conf.userdata, l->conf.max_frame, &l->peer);
	if (r < 0) {
		l->peer = NULL;
		link_event(l, PEER_LINK_SETUP_FAILED, r);
		schedule_retry(l);
		return;
	}
	if (l->conf.hello_timeout > 0 && !peer_is_ready(l->peer)) {
		struct timeval tv;
		evtimer_add(l->hello, timeval_from_usec(&tv, l->conf.hello_timeout));
	}
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	link_connect(arg);
}

static void
hello_cb(evutil_socket_t fd, short what, void *arg)
{
	PeerLink *l = arg;

	if (!l->peer || peer_is_ready(l->peer))
		return;
	link_event(l, PEER_LINK_NO_HELLO, -ETIMEDOUT);
	l->peer = peer_free(l->peer);
	schedule_retry(l);
}

int
peer_link_new(struct event_base *base, const PeerLinkConf *conf, PeerLink **ret)
{
	PeerLink *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	l->base = base;
	l->conf = *conf;
	l->backoff = conf->backoff_min;
	l->retry = evtimer_new(base, retry_cb, l);
	l->hello = evtimer_new(base, hello_cb, l);
	if (!l->retry || !l->hello) {
		peer_link_free(l);
		return -ENOMEM;
	}
	*ret = l;
	link_connect(l);
	return 0;
}

PeerLink *
peer_link_free(PeerLink *l)
{
	if (!l)
		return NULL;
	peer_free(l->peer);
	if (l->retry)
		event_free(l->retry);
	if (l->hello)
		event_free(l->hello);
	free(l);
	return NULL;
}

Peer *
peer_link_peer(const PeerLink *l)
{
	return l ? l->peer : NULL;
}

void
peer_link_ready(PeerLink *l)
{
	evtimer_del(l->hello);
	l->backoff = l->conf.backoff_min;
}

void
peer_link_lost(PeerLink *l, bool retry)
{
	evtimer_del(l->hello);
	l->peer = peer_free(l->peer);
	if (retry)
		schedule_retry(l);
}
