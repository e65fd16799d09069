/* SPDX-License-Identifier: MIT */
/*
 * coord-link.h — the coordinatord link layer (coord-link.c): the link, calls,
 * the shared watches of runs.
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "routerd.h"

/* coord_call() and coord_call_timeout() of a typed request (msg.h), e.g.
 *     COORD_CALL(r, RUN_GET, &(Msg_RUN_GET){.run_id = id}, cb, userdata)
 * The body is encoded by msg_encode_NAME(): a field renamed in messages.def
 * breaks the build here. */
#define COORD_CALL_TIMEOUT(r, NAME, m, cb, userdata, timeout)                                      \
	({                                                                                         \
		MpWriter _w;                                                                       \
		mp_writer_init(&_w);                                                               \
		msg_encode_##NAME(&_w, (m));                                                       \
		int _k = coord_call_timeout((r), MSG_##NAME, &_w, (cb), (userdata), (timeout));    \
		mp_writer_done(&_w);                                                               \
		_k;                                                                                \
	})

#define COORD_CALL(r, NAME, m, cb, userdata)                                                       \
	({                                                                                         \
		MpWriter _w;                                                                       \
		mp_writer_init(&_w);                                                               \
		msg_encode_##NAME(&_w, (m));                                                       \
		int _k = coord_call((r), MSG_##NAME, &_w, (cb), (userdata));                       \
		mp_writer_done(&_w);                                                               \
		_k;                                                                                \
	})

/* coord-link.c */

/* Connect now (or schedule a retry with backoff). 0 or -ENOMEM. */
int coord_start(Router *r);
/* Drop the link and its retry timer; detach every watch. */
void coord_stop(Router *r);
/* true when requests can be sent (HELLO exchanged, not closed). */
bool coord_ready(Router *r);
/* peer_call() on the link with the configured deadline; -ECONNRESET when
 * down. On success cb runs exactly once unless coord_cancel(userdata). */
int coord_call(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata);
/* The same with its own deadline (host tools may run for minutes). */
int coord_call_timeout(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata,
		       usec_t timeout);
void coord_cancel(Router *r, void *userdata);
/* The message of an ERROR reply body, or NULL. Borrowed from the body. */
const char *coord_error_message(const msgpack_object *body, size_t *ret_len);

/* Parse lastSeq and status out of a record JSON text. 0 or -EBADMSG. */
int run_record_parse(const char *text, size_t len, RunRecord *ret);

/* Attach s to run_id's shared watch, creating it (RUN_WATCH, owner-checked
 * against thread_id) when it is the first; ops->active once the watch is
 * active. 0 or negative errno. */
int watch_attach(Router *r, WatchSub *s, const char *run_id, const char *thread_id);
/* Detach s; the last one leaving sends RUN_UNWATCH. No-op when detached. */
void watch_detach(WatchSub *s);
/* Whether s is attached to an active watch. */
bool watch_active(const WatchSub *s);
