/* SPDX-License-Identifier: MIT */
/*
 * peer-link.h — a daemon's IPC link to another one: connect to its Unix
 * socket, reconnect with a backoff when that fails or the link is lost, and
 * give up on a fresh connection that says no HELLO in time (a hung daemon, a
 * stranger on the path).
 *
 * The link owns the Peer (peer_link_peer(), NULL while there is none). The
 * owner's PeerOps stay the owner's: its on_ready calls peer_link_ready() (the
 * HELLO deadline stops, the backoff starts over) and its on_close calls
 * peer_link_lost() (the Peer is freed, a retry is scheduled). The link logs
 * nothing above debug (common/): what went wrong goes to the owner's event(),
 * which logs it in its words.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "peer.h"
#include "time-util.h"

struct event_base;
typedef struct PeerLink PeerLink;

typedef enum PeerLinkEvent {
	PEER_LINK_CONNECT_FAILED, /* connect() failed: err; a retry is scheduled */
	PEER_LINK_SETUP_FAILED,	  /* peer_new() failed: err; a retry is scheduled */
	PEER_LINK_NO_HELLO,	  /* no HELLO by hello_timeout: dropped, retry scheduled */
} PeerLinkEvent;

typedef struct PeerLinkConf {
	const char *path;   /* the other daemon's socket; must outlive the link */
	const PeerOps *ops; /* of the Peer; see above for on_ready/on_close */
	size_t max_frame;
	usec_t hello_timeout; /* 0: none */
	usec_t backoff_min;   /* first retry; doubled up to backoff_max */
	usec_t backoff_max;
	void (*event)(PeerLinkEvent what, int err, void *userdata); /* optional */
	void *userdata;						    /* the Peer's, and event()'s */
} PeerLinkConf;

/* Connect now (a failure schedules the first retry, reported by event()).
 * conf is copied. -ENOMEM only. */
int peer_link_new(struct event_base *base, const PeerLinkConf *conf, PeerLink **ret);
/* The Peer freed without on_close, no more retries. NULL-safe; returns NULL. */
PeerLink *peer_link_free(PeerLink *l);

/* The current Peer (maybe before its HELLO), or NULL. NULL-safe. */
Peer *peer_link_peer(const PeerLink *l);
/* The Peer said HELLO (call from ops->on_ready). */
void peer_link_ready(PeerLink *l);
/* The Peer closed (call from ops->on_close): it is freed; with retry, a new
 * connection is tried after the backoff. */
void peer_link_lost(PeerLink *l, bool retry);
