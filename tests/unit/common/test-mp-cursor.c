/* SPDX-License-Identifier: MIT */
/*
 * test-mp-cursor.c — common/proto/mp-cursor.c: typed reads with a sticky error.
 *
 * Bodies are built with MpWriter and unpacked with msgpack-c, so every test
 * goes through the same bytes a peer would send.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "mp-cursor.h"

typedef struct Body {
	MpWriter w;
	msgpack_unpacked un;
} Body;

/* Unpack what was written into b->w; the object lives in b->un. */
static const msgpack_object *
body_finish(Body *b)
{
	size_t off = 0;
	msgpack_unpacked_init(&b->un);
	assert_int_equal(msgpack_unpack_next(&b->un, b->w.sbuf.data, b->w.sbuf.size, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, b->w.sbuf.size);
	return &b->un.data;
}

static void
body_done(Body *b)
{
	msgpack_unpacked_destroy(&b->un);
	mp_writer_done(&b->w);
}

/* The map used by most tests: one field of every kind. */
static const msgpack_object *
full_body(Body *b)
{
	static char *const strv[] = {"ls", "-l", "", NULL};
	static const unsigned char bin[] = {0x00, 0xff, 0x10, 0x00};

	mp_writer_init(&b->w);
	mp_w_map(&b->w, 11);
	mp_w_str(&b->w, "run_id", "0123");
	mp_w_int(&b->w, "neg", -42);
	mp_w_int(&b->w, "pos", 7);
	mp_w_uint(&b->w, "big", UINT64_MAX);
	mp_w_bool(&b->w, "yes", true);
	mp_w_bool(&b->w, "no", false);
	mp_w_bin(&b->w, "data", bin, sizeof(bin));
	mp_w_str_array(&b->w, "argv", strv);
	mp_w_str(&b->w, "nothing", NULL); /* nil */
	mp_w_key(&b->w, "nulstr");
	mp_w_strn(&b->w, "a\0b", 3);
	mp_w_str_array(&b->w, "empty", NULL);
	return body_finish(b);
}

static void
test_mp_cursor_reads_each_type(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const char *s = NULL;
	int64_t neg = 0, pos = 0;
	uint64_t big = 0, upos = 0;
	bool yes = false, no = true;
	const void *bin = NULL;
	size_t bin_len = 0;
	char **argv = NULL, **empty = NULL;
	const msgpack_object_array *arr = NULL;

	mp_reader_init(&r, m);
	assert_int_equal(r.err, 0);
	assert_null(r.field);
	mp_read_str(&r, "run_id", &s);
	mp_read_int(&r, "neg", &neg);
	mp_read_int(&r, "pos", &pos);
	mp_read_uint(&r, "big", &big);
	mp_read_uint(&r, "pos", &upos);
	mp_read_bool_opt(&r, "yes", &yes, false);
	mp_read_bool_opt(&r, "no", &no, true);
	mp_read_bin(&r, "data", &bin, &bin_len);
	mp_read_strv(&r, "argv", &argv);
	mp_read_strv(&r, "empty", &empty);
	mp_read_array(&r, "argv", &arr);
	assert_int_equal(r.err, 0);
	assert_null(r.field);

	assert_string_equal(s, "0123");
	assert_int_equal(neg, -42);
	assert_int_equal(pos, 7);
	assert_true(big == UINT64_MAX);
	assert_int_equal(upos, 7);
	assert_true(yes);
	assert_false(no);
	assert_int_equal(bin_len, 4);
	assert_memory_equal(bin, "\x00\xff\x10\x00", 4);
	/* bin borrows from the unpacked object */
	assert_ptr_equal(bin, m->via.map.ptr[6].val.via.bin.ptr);
	assert_non_null(argv);
	assert_string_equal(argv[0], "ls");
	assert_string_equal(argv[1], "-l");
	assert_string_equal(argv[2], "");
	assert_null(argv[3]);
	assert_non_null(empty);
	assert_null(empty[0]);
	assert_non_null(arr);
	assert_int_equal(arr->size, 3);

	/* strings are copies owned by the reader, NUL-terminated */
	assert_ptr_not_equal(s, m->via.map.ptr[0].val.via.str.ptr);
	assert_int_equal(r.n_strs, 1);

	mp_strv_free(argv);
	mp_strv_free(empty);
	mp_reader_done(&r);
	assert_null(r.strs);
	assert_int_equal(r.n_strs, 0);
	body_done(&b);
}

static void
test_mp_cursor_missing_required(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	const char *s = "untouched";
	int64_t i = 5;
	uint64_t u = 5;
	const void *p = "x";
	size_t plen = 9;
	char **v = (char **)0x1;
	const msgpack_object_array *a = (const msgpack_object_array *)0x1;

	MpReader r;
	mp_reader_init(&r, m);
	mp_read_str(&r, "thread_id", &s);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "thread_id");
	assert_string_equal(s, "untouched");
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_int(&r, "from_seq", &i);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "from_seq");
	assert_int_equal(i, 5);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_uint(&r, "exec_id", &u);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "exec_id");
	assert_int_equal(u, 5);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_bin(&r, "stdin", &p, &plen);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "stdin");
	assert_int_equal(plen, 9);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_strv(&r, "env", &v);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "env");
	assert_ptr_equal(v, (char **)0x1);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_array(&r, "events", &a);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "events");
	assert_ptr_equal(a, (const msgpack_object_array *)0x1);
	mp_reader_done(&r);

	body_done(&b);
}

/* nil for a required field is as good as missing, for every reader: the _opt
 * readers treat nil as absent, so a required read must not accept it. */
static void
test_mp_cursor_required_rejects_nil(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const char *s = "untouched";
	int64_t i = 5;
	uint64_t u = 5;
	const void *p = "x";
	size_t plen = 9;
	char **v = NULL;

	mp_reader_init(&r, m);
	mp_read_str(&r, "nothing", &s);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "nothing");
	assert_string_equal(s, "untouched");
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_int(&r, "nothing", &i);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "nothing");
	assert_int_equal(i, 5);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_uint(&r, "nothing", &u);
	assert_int_equal(r.err, -EBADMSG);
	assert_int_equal(u, 5);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_bin(&r, "nothing", &p, &plen);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "nothing");
	assert_int_equal(plen, 9);
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_strv(&r, "nothing", &v);
	assert_int_equal(r.err, -EBADMSG);
	assert_null(v);
	mp_reader_done(&r);

	body_done(&b);
}

static void
test_mp_cursor_error_is_sticky(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const char *s = "keep", *s2 = "keep2";
	int64_t i = 11, i2 = 12;
	uint64_t u = 13;
	bool bo = true;
	const void *p = "keep";
	size_t plen = 99;
	char **v = NULL;

	mp_reader_init(&r, m);
	mp_read_int(&r, "missing_first", &i);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "missing_first");

	/* later reads of present fields do nothing ... */
	mp_read_str(&r, "run_id", &s);
	mp_read_int(&r, "neg", &i);
	mp_read_uint(&r, "big", &u);
	mp_read_bin(&r, "data", &p, &plen);
	mp_read_strv(&r, "argv", &v);
	/* ... optional reads do not apply their defaults ... */
	mp_read_str_opt(&r, "absent", &s2, "default");
	mp_read_int_opt(&r, "absent", &i2, 99);
	mp_read_bool_opt(&r, "absent", &bo, false);
	/* ... and a second failure does not replace the first */
	mp_read_str(&r, "also_missing", &s);
	mp_read_uint(&r, "neg", &u);

	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "missing_first");
	assert_string_equal(s, "keep");
	assert_string_equal(s2, "keep2");
	assert_int_equal(i, 11);
	assert_int_equal(i2, 12);
	assert_int_equal(u, 13);
	assert_true(bo);
	assert_string_equal(p, "keep");
	assert_int_equal(plen, 99);
	assert_null(v);
	assert_int_equal(r.n_strs, 0); /* nothing copied either */
	mp_reader_done(&r);
	body_done(&b);
}

static void
test_mp_cursor_optional_defaults(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const char *s = NULL, *snil = "x", *snull = "x";
	int64_t i = 0, inil = 0;
	bool bo = false, bnil = true;
	const void *p = "x";
	size_t plen = 5;
	char **v = (char **)0x1;

	mp_reader_init(&r, m);
	mp_read_str_opt(&r, "absent", &s, "dflt");
	mp_read_str_opt(&r, "nothing", &snil, "dnil"); /* nil → default */
	mp_read_str_opt(&r, "absent", &snull, NULL);
	mp_read_int_opt(&r, "absent", &i, -1);
	mp_read_int_opt(&r, "nothing", &inil, 77);
	mp_read_bool_opt(&r, "absent", &bo, true);
	mp_read_bool_opt(&r, "nothing", &bnil, false);
	mp_read_bin_opt(&r, "absent", &p, &plen);
	mp_read_strv_opt(&r, "absent", &v);
	assert_int_equal(r.err, 0);
	assert_string_equal(s, "dflt");
	assert_string_equal(snil, "dnil");
	assert_null(snull);
	assert_int_equal(i, -1);
	assert_int_equal(inil, 77);
	assert_true(bo);
	assert_false(bnil);
	assert_null(p);
	assert_int_equal(plen, 0);
	assert_null(v);

	/* present optional values win over the default */
	int64_t pos = 0;
	mp_read_int_opt(&r, "pos", &pos, 1000);
	mp_read_str_opt(&r, "run_id", &s, "dflt");
	assert_int_equal(r.err, 0);
	assert_int_equal(pos, 7);
	assert_string_equal(s, "0123");
	mp_reader_done(&r);
	body_done(&b);
}

/* Each wrong-typed read fails with -EBADMSG naming its field. */
static void
expect_wrong(const msgpack_object *m, int which, const char *key)
{
	MpReader r;
	const char *s;
	int64_t i;
	uint64_t u;
	bool bo;
	const void *p;
	size_t plen;
	char **v = NULL;
	const msgpack_object_array *a;

	mp_reader_init(&r, m);
	switch (which) {
	case 0: mp_read_str(&r, key, &s); break;
	case 1: mp_read_str_opt(&r, key, &s, "d"); break;
	case 2: mp_read_int(&r, key, &i); break;
	case 3: mp_read_int_opt(&r, key, &i, 0); break;
	case 4: mp_read_uint(&r, key, &u); break;
	case 5: mp_read_bool_opt(&r, key, &bo, false); break;
	case 6: mp_read_bin(&r, key, &p, &plen); break;
	case 7: mp_read_strv(&r, key, &v); break;
	case 8: mp_read_strv_opt(&r, key, &v); break;
	case 9: mp_read_array(&r, key, &a); break;
	default: fail();
	}
	if (r.err != -EBADMSG)
		fail_msg("reader %d on '%s': err %d, expected -EBADMSG", which, key, r.err);
	assert_string_equal(r.field, key);
	assert_null(v);
	mp_reader_done(&r);
}

static void
test_mp_cursor_wrong_types(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);

	expect_wrong(m, 0, "pos");    /* str ← int */
	expect_wrong(m, 0, "argv");   /* str ← array */
	expect_wrong(m, 1, "yes");    /* str ← bool */
	expect_wrong(m, 2, "run_id"); /* int ← str */
	expect_wrong(m, 2, "big");    /* int ← uint over INT64_MAX */
	expect_wrong(m, 3, "yes");    /* int ← bool */
	expect_wrong(m, 4, "run_id"); /* uint ← str */
	expect_wrong(m, 5, "pos");    /* bool ← int */
	expect_wrong(m, 5, "run_id"); /* bool ← str */
	expect_wrong(m, 6, "pos");    /* bin ← int */
	expect_wrong(m, 6, "argv");   /* bin ← array */
	expect_wrong(m, 7, "run_id"); /* strv ← str */
	expect_wrong(m, 8, "pos");    /* strv ← int */
	expect_wrong(m, 9, "run_id"); /* array ← str */
	body_done(&b);
}

static void
test_mp_cursor_uint_vs_negative(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	int64_t i = 0;
	uint64_t u = 3;

	/* int reads a negative */
	mp_reader_init(&r, m);
	mp_read_int(&r, "neg", &i);
	assert_int_equal(r.err, 0);
	assert_int_equal(i, -42);
	mp_reader_done(&r);

	/* uint refuses it and leaves the output alone */
	mp_reader_init(&r, m);
	mp_read_uint(&r, "neg", &u);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "neg");
	assert_int_equal(u, 3);
	mp_reader_done(&r);

	/* INT64_MIN and INT64_MAX survive int; INT64_MAX+1 does not */
	Body b2;
	mp_writer_init(&b2.w);
	mp_w_map(&b2.w, 3);
	mp_w_int(&b2.w, "min", INT64_MIN);
	mp_w_uint(&b2.w, "max", (uint64_t)INT64_MAX);
	mp_w_uint(&b2.w, "over", (uint64_t)INT64_MAX + 1);
	const msgpack_object *m2 = body_finish(&b2);
	int64_t mn = 0, mx = 0, ov = 1;
	mp_reader_init(&r, m2);
	mp_read_int(&r, "min", &mn);
	mp_read_int(&r, "max", &mx);
	assert_int_equal(r.err, 0);
	assert_true(mn == INT64_MIN);
	assert_true(mx == INT64_MAX);
	mp_read_int(&r, "over", &ov);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "over");
	mp_reader_done(&r);
	body_done(&b2);
	body_done(&b);
}

static void
test_mp_cursor_rejects_embedded_nul(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const char *s = "keep";

	mp_reader_init(&r, m);
	mp_read_str(&r, "nulstr", &s);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "nulstr");
	assert_string_equal(s, "keep");
	mp_reader_done(&r);

	mp_reader_init(&r, m);
	mp_read_str_opt(&r, "nulstr", &s, "d");
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(s, "keep");
	mp_reader_done(&r);

	/* bin reads may carry NULs: they are bytes */
	const void *p = NULL;
	size_t plen = 0;
	mp_reader_init(&r, m);
	mp_read_bin(&r, "nulstr", &p, &plen);
	assert_int_equal(r.err, 0);
	assert_int_equal(plen, 3);
	assert_memory_equal(p, "a\0b", 3);
	mp_reader_done(&r);

	/* a strv element with a NUL rejects the whole vector */
	Body b2;
	char **v = NULL;
	mp_writer_init(&b2.w);
	mp_w_map(&b2.w, 1);
	mp_w_key(&b2.w, "argv");
	msgpack_pack_array(&b2.w.pk, 2);
	mp_w_strv(&b2.w, "ok");
	mp_w_strn(&b2.w, "x\0y", 3);
	const msgpack_object *m2 = body_finish(&b2);
	mp_reader_init(&r, m2);
	mp_read_strv(&r, "argv", &v);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "argv");
	assert_null(v);
	mp_reader_done(&r);
	body_done(&b2);

	/* mp_obj_strdup: the same rule */
	msgpack_object o = {.type = MSGPACK_OBJECT_STR, .via.str = {.size = 3, .ptr = "a\0b"}};
	assert_null(mp_obj_strdup(&o));
	o.via.str.size = 1;
	char *d = mp_obj_strdup(&o);
	assert_string_equal(d, "a");
	free(d);
	o.type = MSGPACK_OBJECT_POSITIVE_INTEGER;
	o.via.u64 = 1;
	assert_null(mp_obj_strdup(&o));

	body_done(&b);
}

static void
test_mp_cursor_strv_rejects_non_string_element(void **state)
{
	Body b;
	MpReader r;
	char **v = NULL;

	mp_writer_init(&b.w);
	mp_w_map(&b.w, 1);
	mp_w_key(&b.w, "env");
	msgpack_pack_array(&b.w.pk, 3);
	mp_w_strv(&b.w, "A=1");
	msgpack_pack_int(&b.w.pk, 5);
	mp_w_strv(&b.w, "B=2");
	const msgpack_object *m = body_finish(&b);

	mp_reader_init(&r, m);
	mp_read_strv(&r, "env", &v);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "env");
	assert_null(v);
	mp_reader_done(&r);
	body_done(&b);
}

static void
test_mp_cursor_bin_accepts_str(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);
	MpReader r;
	const void *p = NULL;
	size_t n = 0;

	mp_reader_init(&r, m);
	mp_read_bin(&r, "run_id", &p, &n);
	assert_int_equal(r.err, 0);
	assert_int_equal(n, 4);
	assert_memory_equal(p, "0123", 4);
	mp_read_bin_opt(&r, "data", &p, &n);
	assert_int_equal(n, 4);
	assert_memory_equal(p, "\x00\xff\x10\x00", 4);
	assert_int_equal(r.err, 0);
	mp_reader_done(&r);
	body_done(&b);
}

static void
test_mp_cursor_map_get(void **state)
{
	Body b;
	const msgpack_object *m = full_body(&b);

	const msgpack_object *o = mp_map_get(m, "pos");
	assert_non_null(o);
	assert_int_equal(o->type, MSGPACK_OBJECT_POSITIVE_INTEGER);
	assert_int_equal(o->via.u64, 7);
	/* prefixes and extensions of a key do not match */
	assert_null(mp_map_get(m, "run"));
	assert_null(mp_map_get(m, "run_id_"));
	assert_null(mp_map_get(m, ""));
	/* non-map objects and NULL */
	assert_null(mp_map_get(NULL, "pos"));
	assert_null(mp_map_get(mp_map_get(m, "argv"), "ls"));
	assert_null(mp_map_get(mp_map_get(m, "run_id"), "run_id"));
	body_done(&b);

	/* a non-string key is skipped, a later string key still found */
	Body b2;
	mp_writer_init(&b2.w);
	mp_w_map(&b2.w, 2);
	msgpack_pack_int(&b2.w.pk, 1);
	msgpack_pack_int(&b2.w.pk, 2);
	mp_w_int(&b2.w, "k", 3);
	const msgpack_object *m2 = body_finish(&b2);
	o = mp_map_get(m2, "k");
	assert_non_null(o);
	assert_int_equal(o->via.u64, 3);
	body_done(&b2);
}

static void
test_mp_cursor_reader_on_non_map(void **state)
{
	MpReader r;
	const char *s = "keep";
	msgpack_object arr = {.type = MSGPACK_OBJECT_ARRAY};

	mp_reader_init(&r, NULL);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "(body)");
	mp_read_str_opt(&r, "x", &s, "d");
	assert_string_equal(s, "keep");
	assert_string_equal(r.field, "(body)");
	mp_reader_done(&r);

	mp_reader_init(&r, &arr);
	assert_int_equal(r.err, -EBADMSG);
	assert_string_equal(r.field, "(body)");
	mp_reader_done(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_mp_cursor_reads_each_type),
	    cmocka_unit_test(test_mp_cursor_missing_required),
	    cmocka_unit_test(test_mp_cursor_required_rejects_nil),
	    cmocka_unit_test(test_mp_cursor_error_is_sticky),
	    cmocka_unit_test(test_mp_cursor_optional_defaults),
	    cmocka_unit_test(test_mp_cursor_wrong_types),
	    cmocka_unit_test(test_mp_cursor_uint_vs_negative),
	    cmocka_unit_test(test_mp_cursor_rejects_embedded_nul),
	    cmocka_unit_test(test_mp_cursor_strv_rejects_non_string_element),
	    cmocka_unit_test(test_mp_cursor_bin_accepts_str),
	    cmocka_unit_test(test_mp_cursor_map_get),
	    cmocka_unit_test(test_mp_cursor_reader_on_non_map),
	};
	return cmocka_run_group_tests_name("mp-cursor", tests, NULL, NULL);
}
