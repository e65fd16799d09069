/* SPDX-License-Identifier: MIT */
/*
 * peer.h — one IPC connection between two daemons, on a libevent bufferevent
 * (reads; writes go to the socket directly while it keeps up, see peer_cork).
 *
 * A Peer sends HELLO {version, role, pid} as soon as it is created and
 * expects the same from the other side before any other frame; a version
 * mismatch or a frame before HELLO closes the connection (-EPROTO).
 *
 * Incoming requests and pushes are dispatched through a handler table indexed
 * by MsgType. A handler returns:
 *   < 0  the peer answers an ERROR frame with that errno (if the frame was a
 *        request) and keeps the connection;
 *   >= 0 the handler answered itself (peer_reply / peer_reply_error), now or
 *        later, keeping f->req_id.
 * Types not in the table, or not allowed between the two roles, are answered
 * with -ENOMSG. A framing error (oversize, garbage) drops the connection: the
 * byte stream can no longer be trusted. Nothing a peer sends can abort the daemon.
 *
 * Outgoing requests: peer_call() registers a pending entry keyed by a fresh
 * req_id; exactly one of these happens to it: the reply callback runs with
 * err = 0 and the REPLY body, or with a negative errno (the ERROR code,
 * -ETIMEDOUT at the deadline, -ECONNRESET when the connection is lost), or it
 * is cancelled silently by peer_cancel_calls(userdata) when the caller's
 * object goes away first.
 *
 * Incoming requests answered later: peer_defer() turns a request into a
 * PeerDeferred, the twin of a pending call. Its owner answers it once
 * (peer_deferred_reply/_error/_relay_error) or drops it (peer_deferred_free);
 * each of these releases it. When the connection closes first, the peer
 * detaches every deferred answer still held (answering one then sends nothing)
 * and calls its cancel callback, if one was set: nobody has to remember which
 * connection a request came from, or check that it is still there.
 *
 * Lifetime: ops->on_close runs once, after all pending calls failed and all
 * deferred answers were cancelled. The owner
 * may call peer_free() from any callback, including on_close; the peer defers
 * the release until its own dispatch loop unwinds.
 */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"
#include "mp-cursor.h"
#include "proto.h"
#include "reasons.h"
#include "time-util.h"

struct event_base;
typedef struct Peer Peer;

typedef int (*PeerHandler)(Peer *p, const Frame *f, void *userdata);
typedef void (*PeerReplyFn)(Peer *p, int err, const msgpack_object *body, void *userdata);

typedef struct PeerOps {
	PeerRole local_role;
	const PeerHandler *handlers;		   /* _MSG_TYPE_MAX entries, NULL = not handled */
	void (*on_ready)(Peer *p, void *userdata); /* the remote HELLO arrived */
	void (*on_close)(Peer *p, int err, void *userdata); /* connection gone */
} PeerOps;

/* Wrap a connected stream socket (takes ownership of fd). */
int peer_new(struct event_base *base, int fd, const PeerOps *ops, void *userdata, size_t max_frame,
	     Peer **ret);
/* NULL-safe; returns NULL. Pending calls are dropped without callbacks. */
Peer *peer_free(Peer *p);

void *peer_get_userdata(Peer *p);
void peer_set_userdata(Peer *p, void *userdata);
bool peer_is_ready(Peer *p);
PeerRole peer_remote_role(Peer *p);
pid_t peer_remote_pid(Peer *p);
/* Bytes queued for sending (backpressure hint). */
size_t peer_output_pending(Peer *p);

/* Frames go straight to the socket when they are sent, and to the output
 * buffer only for what the socket does not take yet (then the write event
 * drains it). Between peer_cork() and the matching peer_uncork() (they nest)
 * frames wait instead, and leave at the last uncork in one write per peer:
 * the answers to one read (the peer does this itself around its dispatch),
 * the acknowledgements of one commit, routerd's requests of one loop pass. */
void peer_cork(void);
void peer_uncork(void);

/* body may be NULL (empty map). Returns 0 or a negative errno (then cb is not called). */
int peer_call(Peer *p, int type, const MpWriter *body, usec_t timeout, PeerReplyFn cb,
	      void *userdata);
int peer_push(Peer *p, int type, const MpWriter *body);
int peer_reply(Peer *p, uint64_t req_id, const MpWriter *body);
int peer_reply_error(Peer *p, uint64_t req_id, int err, const char *message);
/* The same with a machine-readable reason: a stable snake_case code the
 * receiver may map (docs/PROTOCOL.md "Errors"); NULL sends none. message
 * stays human text. */
int peer_reply_error_reason(Peer *p, uint64_t req_id, int err, const char *reason,
			    const char *message);
/* Pass on an ERROR body received from another peer with code err: its message
 * (fallback when it has none) and its reason, if any. */
int peer_relay_error(Peer *p, uint64_t req_id, int err, const msgpack_object *body,
		     const char *fallback);
/* The reason of an ERROR body, copied into buf; NULL when it has none, or one
 * that is not 1..PEER_REASON_MAX-1 characters of [a-z0-9_] (an older peer). */
#define PEER_REASON_MAX 32
const char *peer_error_reason(const msgpack_object *body, char buf[static PEER_REASON_MAX]);
/* Drop pending calls made with this userdata, without calling them. */
void peer_cancel_calls(Peer *p, void *userdata);

/* ---- Deferred answers ---- */
typedef struct PeerDeferred PeerDeferred;
/* The connection closed before d was answered; d is detached (answering it
 * sends nothing) and still belongs to the owner, who may free it here. */
typedef void (*PeerCancelFn)(PeerDeferred *d, void *userdata);

/* Hold request f (or req_id) to answer later; NULL when out of memory (then
 * answer now, e.g. return -ENOMEM). A push (req_id 0) gives a deferred whose
 * answers send nothing. */
PeerDeferred *peer_defer(Peer *p, const Frame *f);
PeerDeferred *peer_defer_id(Peer *p, uint64_t req_id);
/* Called when the connection closes before d is answered or freed. */
void peer_deferred_on_cancel(PeerDeferred *d, PeerCancelFn cb, void *userdata);
/* The connection d came on, or NULL once it closed. */
Peer *peer_deferred_peer(const PeerDeferred *d);
/* Each of these releases d (NULL-safe). Once the connection is gone they send
 * nothing and return -ECONNRESET. peer_deferred_reply answers ERROR {-EIO,
 * reason "internal", "reply too large"} instead of a body that cannot be
 * framed, so d is always answered once. */
int peer_deferred_reply(PeerDeferred *d, const MpWriter *body);
int peer_deferred_error(PeerDeferred *d, int err, const char *reason, const char *message);
int peer_deferred_relay_error(PeerDeferred *d, int err, const msgpack_object *body,
			      const char *fallback);
/* Drop d without an answer (the requester will time out); returns NULL. */
PeerDeferred *peer_deferred_free(PeerDeferred *d);

/* ---- Relays ---- */
/* How peer_relay() passes a reply on. */
typedef struct PeerRelayOps {
	/* Answer d from the REPLY body (and release d); NULL passes the body
	 * on as it is. */
	void (*reply)(PeerDeferred *d, const msgpack_object *body);
	/* The message of a relayed ERROR that has none. */
	const char *fallback;
	/* When the other daemon does not answer (connection lost, or no answer
	 * by the deadline): the ERROR's reason and message; its code stays the
	 * errno (-ECONNRESET or -ETIMEDOUT). */
	const char *unavailable_reason;
	const char *unavailable;
} PeerRelayOps;

/* Forward a request to another peer and its outcome back to d: the REPLY
 * (through ops->reply), an ERROR with its code, message and reason
 * (peer_deferred_relay_error), or the unavailable ERROR. Always takes d: when
 * the request cannot be sent, d is answered with that errno (strerror text)
 * and the errno is returned. */
int peer_relay(Peer *to, int type, const MpWriter *body, PeerDeferred *d, usec_t timeout,
	       const PeerRelayOps *ops);
