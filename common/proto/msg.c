/* SPDX-License-Identifier: MIT */
/*
 * msg.c — the typed codecs of msg.h, generated from messages.def in three
 * passes over the rows (each pass gives F its own meaning): count the entries
 * a body will have, write them, read them.
 */
#include "config.h"

#include "msg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

static void
msg_fail(MpReader *r, const char *key)
{
	if (r->err == 0) {
		r->err = -EBADMSG;
		r->field = key;
	}
}

static const msgpack_object *
msg_get(const MpReader *r, const char *key)
{
	const msgpack_object *o = mp_map_get(r->map, key);
	return o && o->type != MSGPACK_OBJECT_NIL ? o : NULL;
}

static bool
msg_present(const MpReader *r, const char *key)
{
	return r->err == 0 && msg_get(r, key);
}

static void
msg_begin(MpReader *r, void *m, size_t size, const msgpack_object *body)
{
	memset(m, 0, size);
	mp_reader_init(r, body);
}

static void
msg_read_bool(MpReader *r, const char *key, bool *ret)
{
	if (r->err < 0)
		return;
	const msgpack_object *o = msg_get(r, key);
	if (!o || o->type != MSGPACK_OBJECT_BOOLEAN) {
		msg_fail(r, key);
		return;
	}
	*ret = o->via.boolean;
}

/* A string array into the reader's arena: the vector and each string. */
static void
msg_read_strv(MpReader *r, const char *key, char ***ret, bool required)
{
	char **v = NULL;

	if (required)
		mp_read_strv(r, key, &v);
	else
		mp_read_strv_opt(r, key, &v);
	if (r->err < 0 || !v)
		return;
	for (size_t i = 0; v[i]; i++)
		if (mp_reader_keep(r, v[i]) < 0) {
			for (size_t j = i + 1; v[j]; j++)
				free(v[j]);
			free(v);
			msg_fail(r, key);
			return;
		}
	if (mp_reader_keep(r, v) < 0) {
		msg_fail(r, key);
		return;
	}
	*ret = v;
}

/* RAW: no row uses it today */
_unused_ static void
msg_read_raw(MpReader *r, const char *key, const msgpack_object **ret, bool required)
{
	if (r->err < 0)
		return;
	const msgpack_object *o = msg_get(r, key);
	if (!o && required)
		msg_fail(r, key);
	*ret = o;
}

_unused_ static void
msg_w_raw(MpWriter *w, const char *key, const msgpack_object *o)
{
	mp_w_key(w, key);
	if (o)
		msgpack_pack_object(&w->pk, *o);
	else
		msgpack_pack_nil(&w->pk);
}

/* --- pass 1: how many entries a body has --- */

#define MSG_COUNT_STR_REQ(n) msg_n_++;
#define MSG_COUNT_BIN_REQ(n) msg_n_++;
#define MSG_COUNT_INT_REQ(n) msg_n_++;
#define MSG_COUNT_UINT_REQ(n) msg_n_++;
#define MSG_COUNT_BOOL_REQ(n) msg_n_++;
#define MSG_COUNT_STRV_REQ(n) msg_n_++;
#define MSG_COUNT_RAW_REQ(n) msg_n_++;
#define MSG_COUNT_STR_OPT(n) msg_n_ += m->n != NULL;
#define MSG_COUNT_BIN_OPT(n) msg_n_ += m->has_##n;
#define MSG_COUNT_INT_OPT(n) msg_n_ += m->has_##n;
#define MSG_COUNT_UINT_OPT(n) msg_n_ += m->has_##n;
#define MSG_COUNT_BOOL_OPT(n) msg_n_ += m->has_##n;
#define MSG_COUNT_STRV_OPT(n) msg_n_ += m->n != NULL;
#define MSG_COUNT_RAW_OPT(n) msg_n_ += m->n != NULL;

#define GEN_COUNT(S, ...)                                                                          \
	static uint32_t S##_count(const S *m)                                                      \
	{                                                                                          \
		uint32_t msg_n_ = 0;                                                               \
		__VA_ARGS__                                                                        \
		return msg_n_;                                                                     \
	}
#define F(type, name, req) MSG_COUNT_##type##_##req(name)
#define MSG(name, id, dir, fields) GEN_COUNT(Msg_##name, fields)
#define REPLY(name, fields) GEN_COUNT(Reply_##name, fields)
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

/* --- pass 2: write a body --- */

#define MSG_W_STR(n) mp_w_str(w, #n, m->n);
#define MSG_W_BIN(n) mp_w_bin(w, #n, m->n ? m->n : "", m->n##_len);
#define MSG_W_INT(n) mp_w_int(w, #n, m->n);
#define MSG_W_UINT(n) mp_w_uint(w, #n, m->n);
#define MSG_W_BOOL(n) mp_w_bool(w, #n, m->n);
#define MSG_W_STRV(n) mp_w_str_array(w, #n, m->n);
#define MSG_W_RAW(n) msg_w_raw(w, #n, m->n);
#define MSG_PRESENT_STR(n) m->n
#define MSG_PRESENT_BIN(n) m->has_##n
#define MSG_PRESENT_INT(n) m->has_##n
#define MSG_PRESENT_UINT(n) m->has_##n
#define MSG_PRESENT_BOOL(n) m->has_##n
#define MSG_PRESENT_STRV(n) m->n
#define MSG_PRESENT_RAW(n) m->n
#define MSG_ENC_REQ(type, n) MSG_W_##type(n)
#define MSG_ENC_OPT(type, n)                                                                       \
	if (MSG_PRESENT_##type(n)) {                                                               \
		MSG_W_##type(n)                                                                    \
	}

#define GEN_ENCODE(S, fn, ...)                                                                     \
	void fn(MpWriter *w, const S *m)                                                           \
	{                                                                                          \
		mp_w_map(w, S##_count(m));                                                         \
		__VA_ARGS__                                                                        \
	}
#define F(type, name, req) MSG_ENC_##req(type, name)
#define MSG(name, id, dir, fields) GEN_ENCODE(Msg_##name, msg_encode_##name, fields)
#define REPLY(name, fields) GEN_ENCODE(Reply_##name, reply_encode_##name, fields)
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

/* --- pass 3: read a body (the senders and handlers built on these codecs: msg-peer.c) --- */

#define MSG_DEC_STR_REQ(n) mp_read_str(&m->_r, #n, &m->n);
#define MSG_DEC_STR_OPT(n) mp_read_str_opt(&m->_r, #n, &m->n, NULL);
#define MSG_DEC_BIN_REQ(n) mp_read_bin(&m->_r, #n, &m->n, &m->n##_len);
#define MSG_DEC_BIN_OPT(n)                                                                         \
	m->has_##n = msg_present(&m->_r, #n);                                                      \
	mp_read_bin_opt(&m->_r, #n, &m->n, &m->n##_len);
#define MSG_DEC_INT_REQ(n) mp_read_int(&m->_r, #n, &m->n);
#define MSG_DEC_INT_OPT(n)                                                                         \
	m->has_##n = msg_present(&m->_r, #n);                                                      \
	mp_read_int_opt(&m->_r, #n, &m->n, 0);
#define MSG_DEC_UINT_REQ(n) mp_read_uint(&m->_r, #n, &m->n);
#define MSG_DEC_UINT_OPT(n)                                                                        \
	m->has_##n = msg_present(&m->_r, #n);                                                      \
	if (m->has_##n)                                                                            \
		mp_read_uint(&m->_r, #n, &m->n);
#define MSG_DEC_BOOL_REQ(n) msg_read_bool(&m->_r, #n, &m->n);
#define MSG_DEC_BOOL_OPT(n)                                                                        \
	m->has_##n = msg_present(&m->_r, #n);                                                      \
	mp_read_bool_opt(&m->_r, #n, &m->n, false);
#define MSG_DEC_STRV_REQ(n) msg_read_strv(&m->_r, #n, (char ***)&m->n, true);
#define MSG_DEC_STRV_OPT(n) msg_read_strv(&m->_r, #n, (char ***)&m->n, false);
#define MSG_DEC_RAW_REQ(n) msg_read_raw(&m->_r, #n, &m->n, true);
#define MSG_DEC_RAW_OPT(n) msg_read_raw(&m->_r, #n, &m->n, false);

#define GEN_DECODE(S, fn, ...)                                                                     \
	int fn(const msgpack_object *body, S *m)                                                   \
	{                                                                                          \
		msg_begin(&m->_r, m, sizeof(*m), body);                                            \
		__VA_ARGS__                                                                        \
		return m->_r.err < 0 ? -EBADMSG : 0;                                               \
	}

#define F(type, name, req) MSG_DEC_##type##_##req(name)
#define MSG(name, id, dir, fields)                                                                 \
	GEN_DECODE(Msg_##name, msg_decode_##name, fields)                                          \
	void msg_done_##name(Msg_##name *m)                                                        \
	{                                                                                          \
		mp_reader_done(&m->_r);                                                            \
	}
#define REPLY(name, fields)                                                                        \
	GEN_DECODE(Reply_##name, reply_decode_##name, fields)                                      \
	void reply_done_##name(Reply_##name *m)                                                    \
	{                                                                                          \
		mp_reader_done(&m->_r);                                                            \
	}
#include "messages.def"
#undef MSG
#undef REPLY
#undef F
