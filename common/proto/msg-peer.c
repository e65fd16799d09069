/* SPDX-License-Identifier: MIT */
/*
 * msg-peer.c — the typed senders and handlers of msg.h, over a Peer (peer.c),
 * generated from messages.def on top of msg.c's codecs. Apart from msg.c so
 * that a blocking client of the codecs alone (tools/shimctl: frames on a plain
 * socket) links neither the peer layer nor, through it, libevent and the log.
 */
#include "config.h"

#include "msg.h"

#include "log.h"

/* A sender: the function `sig` encodes m into a writer w, sends it with
 * `send` (an expression naming w) and returns what that returned. */
#define GEN_SEND(sig, encode, send)                                                                \
	sig                                                                                        \
	{                                                                                          \
		MpWriter w;                                                                        \
		mp_writer_init(&w);                                                                \
		encode(&w, m);                                                                     \
		int r = send;                                                                      \
		mp_writer_done(&w);                                                                \
		return r;                                                                          \
	}

#define F(type, name, req)
#define MSG(name, id, dir, fields)                                                                 \
	GEN_SEND(int msg_push_##name(Peer *p, const Msg_##name *m), msg_encode_##name,             \
		 peer_push(p, MSG_##name, &w))                                                     \
	GEN_SEND(int msg_call_##name(Peer *p, const Msg_##name *m, usec_t timeout, PeerReplyFn cb, \
				     void *userdata),                                              \
		 msg_encode_##name, peer_call(p, MSG_##name, &w, timeout, cb, userdata))           \
	int msg_handle_##name(Peer *p, const Frame *f, void *userdata, MsgHandler_##name fn)       \
	{                                                                                          \
		Msg_##name m;                                                                      \
		int r = msg_decode_##name(f->body, &m);                                            \
		if (r < 0)                                                                         \
			log_debug("%s: bad field '%s'", #name, m._r.field ? m._r.field : "?");     \
		else                                                                               \
			r = fn(p, f, &m, userdata);                                                \
		msg_done_##name(&m);                                                               \
		return r;                                                                          \
	}
#define REPLY(name, fields)                                                                        \
	GEN_SEND(int reply_send_##name(Peer *p, uint64_t req_id, const Reply_##name *m),           \
		 reply_encode_##name, peer_reply(p, req_id, &w))                                   \
	GEN_SEND(int reply_deferred_##name(PeerDeferred *d, const Reply_##name *m),                \
		 reply_encode_##name, peer_deferred_reply(d, &w))
#include "messages.def"
#undef MSG
#undef REPLY
#undef F
