/* SPDX-License-Identifier: MIT */
/*
 * msg.h — the typed messages: messages.def's field rows expanded into one
 * struct per message body and its codecs.
 *
 * For each row MSG(NAME, id, dir, F(…) …):
 *
 *   typedef struct Msg_NAME { MpReader _r; <fields> } Msg_NAME;
 *   int  msg_decode_NAME(const msgpack_object *body, Msg_NAME *m);
 *   void msg_encode_NAME(MpWriter *w, const Msg_NAME *m);
 *   void msg_done_NAME(Msg_NAME *m);
 *   int  msg_push_NAME(Peer *p, const Msg_NAME *m);                  // peer_push
 *   int  msg_call_NAME(Peer *p, const Msg_NAME *m, usec_t timeout,
 *                      PeerReplyFn cb, void *userdata);             // peer_call
 *   int  msg_handle_NAME(Peer *p, const Frame *f, void *userdata,
 *                        MsgHandler_NAME fn);                        // decode, fn, done
 *
 * and for each REPLY(NAME, F(…) …) the same with Reply_NAME, reply_decode_NAME,
 * reply_encode_NAME, reply_done_NAME, reply_send_NAME(p, req_id, m)
 * (peer_reply) and reply_deferred_NAME(d, m) (peer_deferred_reply: answers a
 * PeerDeferred later and releases it). The names keep the row's spelling (MSG_RUN_GET, Msg_RUN_GET,
 * msg_decode_RUN_GET): one grep finds the enum, the struct and its codecs.
 *
 * Members, by field type (see messages.def): STR const char *, BIN const void *
 * + size_t NAME_len, INT int64_t, UINT uint64_t, BOOL bool, STRV char *const * (NULL-
 * terminated), RAW const msgpack_object *. An optional STR, STRV or RAW is NULL
 * when absent; an optional BIN, INT, UINT or BOOL has `bool has_NAME`. A nil
 * value counts as absent.
 *
 * Decoding: msg_decode_NAME() zeroes *m, then reads every field by key (unknown
 * keys are ignored; a missing required field, a wrong type or a NUL inside a
 * string is -EBADMSG and m->_r.field names the field). It returns 0 or
 * -EBADMSG; call msg_done_NAME() in both cases. Strings and string vectors are
 * copies owned by *m until msg_done_NAME(); BIN and RAW members borrow from the
 * frame (valid while the frame is: until the handler returns).
 *
 * Encoding: msg_encode_NAME() writes the map in row order, counting its own
 * entries: required fields always (a NULL required STR is nil, a NULL STRV an
 * empty array), optional ones when present. A designated initializer is the
 * usual way to fill a Msg_NAME for sending; its _r is not used.
 *
 * Handlers: a typed handler
 *     static int on_exec_kill(Peer *p, const Frame *f, const Msg_EXEC_KILL *m, void *userdata);
 * is put in a PeerHandler table through a wrapper the macro defines:
 *     MSG_HANDLER(handle_exec_kill, EXEC_KILL, on_exec_kill)
 *     … [MSG_EXEC_KILL] = handle_exec_kill,
 * The wrapper answers a body that does not decode with -EBADMSG (an ERROR
 * frame, as every handler did), and frees the decoded message after fn.
 *
 * The codecs (decode, encode, done) are in msg.c and need only msgpack-c; the
 * senders and handlers over a Peer are in msg-peer.c, so that a client of the
 * codecs alone (tools/shimctl) does not link the peer layer and libevent.
 */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "mp-cursor.h"
#include "peer.h"
#include "proto.h"
#include "time-util.h"

/* struct members */
#define MSG_MEMBER_STR(n) const char *n;
#define MSG_MEMBER_BIN(n)                                                                          \
	const void *n;                                                                             \
	size_t n##_len;
#define MSG_MEMBER_INT(n) int64_t n;
#define MSG_MEMBER_UINT(n) uint64_t n;
#define MSG_MEMBER_BOOL(n) bool n;
#define MSG_MEMBER_STRV(n) char *const *n;
#define MSG_MEMBER_RAW(n) const msgpack_object *n;
/* presence flags: optional value types only */
#define MSG_HAS_STR_REQ(n)
#define MSG_HAS_BIN_REQ(n)
#define MSG_HAS_INT_REQ(n)
#define MSG_HAS_UINT_REQ(n)
#define MSG_HAS_BOOL_REQ(n)
#define MSG_HAS_STRV_REQ(n)
#define MSG_HAS_RAW_REQ(n)
#define MSG_HAS_STR_OPT(n)
#define MSG_HAS_BIN_OPT(n) bool has_##n;
#define MSG_HAS_INT_OPT(n) bool has_##n;
#define MSG_HAS_UINT_OPT(n) bool has_##n;
#define MSG_HAS_BOOL_OPT(n) bool has_##n;
#define MSG_HAS_STRV_OPT(n)
#define MSG_HAS_RAW_OPT(n)

#define F(type, name, req) MSG_MEMBER_##type(name) MSG_HAS_##type##_##req(name)
#define MSG(name, id, dir, fields)                                                                 \
	typedef struct Msg_##name {                                                                \
		MpReader _r; /* private: owns the decoded strings */                               \
		fields                                                                             \
	} Msg_##name;
#define REPLY(name, fields)                                                                        \
	typedef struct Reply_##name {                                                              \
		MpReader _r;                                                                       \
		fields                                                                             \
	} Reply_##name;
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

#define F(type, name, req)
#define MSG(name, id, dir, fields)                                                                 \
	int msg_decode_##name(const msgpack_object *body, Msg_##name *m);                          \
	void msg_encode_##name(MpWriter *w, const Msg_##name *m);                                  \
	void msg_done_##name(Msg_##name *m);                                                       \
	int msg_push_##name(Peer *p, const Msg_##name *m);                                         \
	int msg_call_##name(Peer *p, const Msg_##name *m, usec_t timeout, PeerReplyFn cb,          \
			    void *userdata);                                                       \
	typedef int (*MsgHandler_##name)(Peer * p, const Frame *f, const Msg_##name *m,            \
					 void *userdata);                                          \
	int msg_handle_##name(Peer *p, const Frame *f, void *userdata, MsgHandler_##name fn);
#define REPLY(name, fields)                                                                        \
	int reply_decode_##name(const msgpack_object *body, Reply_##name *m);                      \
	void reply_encode_##name(MpWriter *w, const Reply_##name *m);                              \
	void reply_done_##name(Reply_##name *m);                                                   \
	int reply_send_##name(Peer *p, uint64_t req_id, const Reply_##name *m);                    \
	int reply_deferred_##name(PeerDeferred *d, const Reply_##name *m);
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

/* Define the PeerHandler `fn` that decodes a NAME frame and calls the typed
 * handler `typed` (see above). */
#define MSG_HANDLER(fn, NAME, typed)                                                               \
	static int fn(Peer *p, const Frame *f, void *userdata)                                     \
	{                                                                                          \
		return msg_handle_##NAME(p, f, userdata, typed);                                   \
	}
