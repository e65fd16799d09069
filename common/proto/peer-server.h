/* SPDX-License-Identifier: MIT */
/*
 * peer-server.h — the daemons' IPC server: a Unix socket, who may connect,
 * and a Peer for every connection that may.
 *
 * The socket is bound with its mode and group given at creation (umask and
 * fsgid), never by chown/chmod of a name that could have been swapped for a
 * symlink meanwhile; a stale socket file is replaced. Who may connect is
 * decided on SO_PEERCRED, the credentials of connect() time (no /proc race):
 * root, our own uid, or — with a group — a peer whose primary or
 * supplementary groups (SO_PEERGROUPS) include it.
 *
 * Each accepted connection becomes a Peer with the server's PeerOps; the
 * owner's accepted() gives the object it keeps for it (the Peer's userdata)
 * and links it where it keeps its connections; its on_close frees it. The
 * server itself logs nothing above debug (common/): refusals and failures go
 * to the owner's event(), which logs them in its words.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "peer.h"

struct event_base;
typedef struct PeerServer PeerServer;

typedef enum PeerServerEvent {
	PEER_SERVER_REFUSED,	   /* not allowed: uid ((uid_t)-1 when unknown), err <= 0 */
	PEER_SERVER_ACCEPT_FAILED, /* accept() failed (not EAGAIN/EINTR): err */
	PEER_SERVER_SETUP_FAILED,  /* peer_new() failed: err */
} PeerServerEvent;

typedef struct PeerServerConf {
	const char *path;
	unsigned mode; /* of the socket file: 0600, 0660 */
	int64_t gid;   /* >= 0: the socket's group, and its members may connect; < 0: none */
	const PeerOps *ops;
	size_t max_frame;
	/* A connection that may: the owner's object for p (becomes its
	 * userdata), or NULL to drop it (out of memory). */
	void *(*accepted)(Peer *p, void *userdata);
	/* Optional: a connection refused or lost before it was set up. */
	void (*event)(PeerServerEvent what, int err, uid_t uid, void *userdata);
	void *userdata;
} PeerServerConf;

/* Bind, listen and watch conf->path (conf is copied; its strings must outlive
 * the server). A negative errno when the socket cannot be made. */
int peer_server_new(struct event_base *base, const PeerServerConf *conf, PeerServer **ret);
/* Stop listening (the connections already made are the owner's and stay);
 * unlink_path: remove the socket file too (not when a successor binds it
 * anew). NULL-safe; returns NULL. */
PeerServer *peer_server_free(PeerServer *srv, bool unlink_path);

/* The socket itself, for a server that is no Peer server (the shim's
 * preview socket): bound at path with mode and (gid >= 0) that group, set
 * listening; a non-blocking CLOEXEC fd or a negative errno. */
int peer_server_listen(const char *path, unsigned mode, int64_t gid);

/* The check itself, on a connected socket: 1 (allowed), 0 (refused) or a
 * negative errno; *ret_uid is set when SO_PEERCRED answered. */
int peer_server_allowed(int fd, int64_t gid, uid_t *ret_uid);
