/* SPDX-License-Identifier: MIT */
/*
 * test-msg.c — the typed codecs of common/proto/msg.{h,c}.
 *
 * The round trip expands messages.def itself, so every MSG and REPLY row is
 * checked without touching this file: filled with every field, then with the
 * required ones only, encoded, decoded, compared member by member.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macro.h"
#include "msg.h"

static char *const sample_strv[] = {(char *)"a", (char *)"", (char *)"c d", NULL};
static const char sample_bin[] = {'b', '\0', 'i', 'n'};

/* --- fill: every field (all = true) or the required ones --- */

#define FILL_STR(n) m->n = "v:" #n;
#define FILL_BIN(n)                                                                                \
	m->n = sample_bin;                                                                         \
	m->n##_len = sizeof(sample_bin);
#define FILL_INT(n) m->n = -(int64_t)sizeof(#n);
#define FILL_UINT(n) m->n = 1000 + sizeof(#n);
#define FILL_BOOL(n) m->n = true;
#define FILL_STRV(n) m->n = sample_strv;
#define FILL_RAW(n)
#define SETHAS_STR(n)
#define SETHAS_BIN(n) m->has_##n = true;
#define SETHAS_INT(n) m->has_##n = true;
#define SETHAS_UINT(n) m->has_##n = true;
#define SETHAS_BOOL(n) m->has_##n = true;
#define SETHAS_STRV(n)
#define SETHAS_RAW(n)
#define FILL_REQ(type, n) FILL_##type(n)
#define FILL_OPT(type, n)                                                                          \
	if (all) {                                                                                 \
		FILL_##type(n) SETHAS_##type(n)                                                    \
	}

#define GEN_FILL(S, ...)                                                                           \
	static void fill_##S(S *m, bool all)                                                       \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}
#define F(type, name, req) FILL_##req(type, name)
#define MSG(name, id, dir, fields) GEN_FILL(Msg_##name, fields)
#define REPLY(name, fields) GEN_FILL(Reply_##name, fields)
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

/* --- compare what was sent with what was read --- */

static void
check_strv(char *const *want, char *const *got)
{
	if (!want) {
		assert_null(got);
		return;
	}
	assert_non_null(got);
	size_t i = 0;
	for (; want[i]; i++) {
		assert_non_null(got[i]);
		assert_string_equal(want[i], got[i]);
	}
	assert_null(got[i]);
}

#define CHECK_STR(n)                                                                               \
	if (want->n)                                                                               \
		assert_string_equal(want->n, got->n);                                              \
	else                                                                                       \
		assert_null(got->n);
#define CHECK_BIN(n)                                                                               \
	assert_int_equal(want->n##_len, got->n##_len);                                             \
	if (want->n##_len)                                                                         \
		assert_memory_equal(want->n, got->n, want->n##_len);
#define CHECK_INT(n) assert_int_equal(want->n, got->n);
#define CHECK_UINT(n) assert_int_equal(want->n, got->n);
#define CHECK_BOOL(n) assert_int_equal(want->n, got->n);
#define CHECK_STRV(n) check_strv(want->n, got->n);
#define CHECK_RAW(n)
#define CHECKHAS_STR(n)
#define CHECKHAS_BIN(n) assert_int_equal(want->has_##n, got->has_##n);
#define CHECKHAS_INT(n) assert_int_equal(want->has_##n, got->has_##n);
#define CHECKHAS_UINT(n) assert_int_equal(want->has_##n, got->has_##n);
#define CHECKHAS_BOOL(n) assert_int_equal(want->has_##n, got->has_##n);
#define CHECKHAS_STRV(n)
#define CHECKHAS_RAW(n)
#define CHECK_REQ(type, n) CHECK_##type(n)
#define CHECK_OPT(type, n) CHECK_##type(n) CHECKHAS_##type(n)

#define GEN_CHECK(S, ...)                                                                          \
	static void check_##S(const S *want, const S *got)                                         \
	{                                                                                          \
		__VA_ARGS__                                                                        \
	}
#define F(type, name, req) CHECK_##req(type, name)
#define MSG(name, id, dir, fields) GEN_CHECK(Msg_##name, fields)
#define REPLY(name, fields) GEN_CHECK(Reply_##name, fields)
#include "messages.def"
#undef MSG
#undef REPLY
#undef F

/* --- round trips --- */

static void
unpack(const MpWriter *w, msgpack_unpacked *un)
{
	msgpack_unpacked_init(un);
	assert_int_equal(msgpack_unpack_next(un, w->sbuf.data, w->sbuf.size, NULL),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(un->data.type, MSGPACK_OBJECT_MAP);
}

#define GEN_ROUNDTRIP(S, enc, dec, done)                                                           \
	static void roundtrip_##S(bool all)                                                        \
	{                                                                                          \
		S want = {0}, got;                                                                 \
		MpWriter w;                                                                        \
		msgpack_unpacked un;                                                               \
		fill_##S(&want, all);                                                              \
		mp_writer_init(&w);                                                                \
		enc(&w, &want);                                                                    \
		unpack(&w, &un);                                                                   \
		assert_int_equal(dec(&un.data, &got), 0);                                          \
		check_##S(&want, &got);                                                            \
		done(&got);                                                                        \
		msgpack_unpacked_destroy(&un);                                                     \
		mp_writer_done(&w);                                                                \
	}
#define F(type, name, req)
#define MSG(name, id, dir, fields)                                                                 \
	GEN_ROUNDTRIP(Msg_##name, msg_encode_##name, msg_decode_##name, msg_done_##name)
#define REPLY(name, fields)                                                                        \
	GEN_ROUNDTRIP(Reply_##name, reply_encode_##name, reply_decode_##name, reply_done_##name)
#include "messages.def"
#undef MSG
#undef REPLY

typedef struct Trip {
	const char *name;
	void (*fn)(bool all);
} Trip;

static const Trip trips[] = {
#define MSG(name, id, dir, fields) {"Msg_" #name, roundtrip_Msg_##name},
#define REPLY(name, fields) {"Reply_" #name, roundtrip_Reply_##name},
#include "messages.def"
#undef MSG
#undef REPLY
#undef F
};

static void
test_msg_roundtrip_every_row(void **state)
{
	assert_true(ELEMENTSOF(trips) > 30);
	for (size_t i = 0; i < ELEMENTSOF(trips); i++) {
		trips[i].fn(true);
		trips[i].fn(false);
	}
}

/* --- decoding by hand-made bodies --- */

static void
body_of(MpWriter *w, msgpack_unpacked *un)
{
	unpack(w, un);
}

static void
test_msg_missing_required_refused(void **state)
{
	MpWriter w;
	msgpack_unpacked un;
	Msg_EXEC_KILL m;

	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_uint(&w, "exec_id", 7);
	body_of(&w, &un);
	assert_int_equal(msg_decode_EXEC_KILL(&un.data, &m), -EBADMSG);
	assert_string_equal(m._r.field, "signal");
	msg_done_EXEC_KILL(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	/* nil counts as missing; a wrong type is refused too */
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "sandbox_id", NULL);
	mp_w_bool(&w, "purge", true);
	body_of(&w, &un);
	Msg_SANDBOX_DESTROY d;
	assert_int_equal(msg_decode_SANDBOX_DESTROY(&un.data, &d), -EBADMSG);
	assert_string_equal(d._r.field, "sandbox_id");
	msg_done_SANDBOX_DESTROY(&d);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_uint(&w, "exec_id", 7);
	mp_w_str(&w, "signal", "9");
	body_of(&w, &un);
	assert_int_equal(msg_decode_EXEC_KILL(&un.data, &m), -EBADMSG);
	assert_string_equal(m._r.field, "signal");
	msg_done_EXEC_KILL(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	/* a body that is not a map */
	msgpack_object nil = {.type = MSGPACK_OBJECT_NIL};
	assert_int_equal(msg_decode_EXEC_LIST(&nil, &(Msg_EXEC_LIST){0}), -EBADMSG);
	Msg_EXEC_LIST l;
	assert_int_equal(msg_decode_EXEC_LIST(NULL, &l), -EBADMSG);
	msg_done_EXEC_LIST(&l);
}

static void
test_msg_unknown_keys_ignored(void **state)
{
	MpWriter w;
	msgpack_unpacked un;
	Msg_EXEC_KILL m;

	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_str(&w, "from_the_future", "x");
	mp_w_uint(&w, "exec_id", 7);
	mp_w_int(&w, "signal", 9);
	mp_w_key(&w, "nested");
	mp_w_map(&w, 0);
	body_of(&w, &un);
	assert_int_equal(msg_decode_EXEC_KILL(&un.data, &m), 0);
	assert_int_equal(m.exec_id, 7);
	assert_int_equal(m.signal, 9);
	msg_done_EXEC_KILL(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);
}

static void
test_msg_optional_presence(void **state)
{
	MpWriter w;
	msgpack_unpacked un;
	Msg_SANDBOX_STATS m;

	/* absent */
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "sandbox_id", "0123456789abcdef");
	body_of(&w, &un);
	assert_int_equal(msg_decode_SANDBOX_STATS(&un.data, &m), 0);
	assert_false(m.has_exec_id);
	assert_int_equal(m.exec_id, 0);
	msg_done_SANDBOX_STATS(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	/* nil is absent */
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "sandbox_id", "0123456789abcdef");
	mp_w_key(&w, "exec_id");
	msgpack_pack_nil(&w.pk);
	body_of(&w, &un);
	assert_int_equal(msg_decode_SANDBOX_STATS(&un.data, &m), 0);
	assert_false(m.has_exec_id);
	msg_done_SANDBOX_STATS(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	/* present, even as 0 */
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "sandbox_id", "0123456789abcdef");
	mp_w_uint(&w, "exec_id", 0);
	body_of(&w, &un);
	assert_int_equal(msg_decode_SANDBOX_STATS(&un.data, &m), 0);
	assert_true(m.has_exec_id);
	assert_int_equal(m.exec_id, 0);
	msg_done_SANDBOX_STATS(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	/* the encoder counts its own entries: optional ones only when present */
	Msg_SANDBOX_ENSURE e = {.key = "k"};
	mp_writer_init(&w);
	msg_encode_SANDBOX_ENSURE(&w, &e);
	body_of(&w, &un);
	assert_int_equal(un.data.via.map.size, 1);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);
	e.thread_id = "t";
	mp_writer_init(&w);
	msg_encode_SANDBOX_ENSURE(&w, &e);
	body_of(&w, &un);
	assert_int_equal(un.data.via.map.size, 2);
	assert_non_null(mp_map_get(&un.data, "thread_id"));
	assert_null(mp_map_get(&un.data, "run_id"));
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);
}

/* EXEC_OUTPUT: `dropped` is in the table now, and the generated push is the
 * same bytes the shim wrote by hand before. */
static void
test_msg_exec_output_same_bytes(void **state)
{
	MpWriter old, gen;
	msgpack_unpacked un;

	assert_non_null(strstr(msg_type_fields(MSG_EXEC_OUTPUT), "dropped:int?"));
	for (uint64_t dropped = 0; dropped <= 300; dropped += 150) {
		mp_writer_init(&old);
		mp_w_map(&old, dropped ? 5 : 4);
		mp_w_uint(&old, "exec_id", 3);
		mp_w_uint(&old, "stream", 2);
		mp_w_uint(&old, "offset", 4096);
		mp_w_bin(&old, "data", "hi", 2);
		if (dropped)
			mp_w_uint(&old, "dropped", dropped);

		Msg_EXEC_OUTPUT m = {.exec_id = 3,
				     .stream = 2,
				     .offset = 4096,
				     .data = "hi",
				     .data_len = 2,
				     .dropped = (int64_t)dropped,
				     .has_dropped = dropped > 0};
		mp_writer_init(&gen);
		msg_encode_EXEC_OUTPUT(&gen, &m);
		assert_int_equal(old.sbuf.size, gen.sbuf.size);
		assert_memory_equal(old.sbuf.data, gen.sbuf.data, old.sbuf.size);

		Msg_EXEC_OUTPUT d;
		body_of(&gen, &un);
		assert_int_equal(msg_decode_EXEC_OUTPUT(&un.data, &d), 0);
		assert_int_equal(d.has_dropped, dropped > 0);
		assert_int_equal(d.dropped, dropped);
		assert_int_equal(d.data_len, 2);
		msg_done_EXEC_OUTPUT(&d);
		msgpack_unpacked_destroy(&un);
		mp_writer_done(&gen);
		mp_writer_done(&old);
	}
}

/* Strings are copies (NUL-terminated, NUL inside refused); str and bin are
 * both accepted where a row says STR or BIN, as mp-cursor did. */
static void
test_msg_strings(void **state)
{
	MpWriter w;
	msgpack_unpacked un;
	Msg_SANDBOX_FILE m;

	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_bin(&w, "key", "thread", 6);
	mp_w_str(&w, "op", "read");
	mp_w_str(&w, "path", "a/b");
	body_of(&w, &un);
	assert_int_equal(msg_decode_SANDBOX_FILE(&un.data, &m), 0);
	assert_string_equal(m.key, "thread");
	assert_int_equal(m.path_len, 3);
	assert_memory_equal(m.path, "a/b", 3);
	assert_false(m.has_to);
	assert_false(m.has_data);
	assert_false(m.has_mode);
	msg_done_SANDBOX_FILE(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);

	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_bin(&w, "key", "thr\0ead", 7);
	mp_w_str(&w, "op", "read");
	mp_w_str(&w, "path", "a/b");
	body_of(&w, &un);
	assert_int_equal(msg_decode_SANDBOX_FILE(&un.data, &m), -EBADMSG);
	assert_string_equal(m._r.field, "key");
	msg_done_SANDBOX_FILE(&m);
	msgpack_unpacked_destroy(&un);
	mp_writer_done(&w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_msg_roundtrip_every_row),
	    cmocka_unit_test(test_msg_missing_required_refused),
	    cmocka_unit_test(test_msg_unknown_keys_ignored),
	    cmocka_unit_test(test_msg_optional_presence),
	    cmocka_unit_test(test_msg_exec_output_same_bytes),
	    cmocka_unit_test(test_msg_strings),
	};
	return cmocka_run_group_tests_name("msg", tests, NULL, NULL);
}
