/* SPDX-License-Identifier: MIT */
/*
 * test-enomem.c — the ENOMEM paths of common/, run one by one with the
 * failing allocator (tests/unit/failalloc.h): for each allocation a function
 * makes, the run where exactly that one fails must end in an error, leave
 * nothing allocated behind and not crash; the run where none fails must
 * succeed.
 *
 * Covered: frame_parse() (a frame's copy), the typed decoder of a message
 * with strings and a string vector (msg_decode_EXEC_START: a copy each),
 * conf_load_string() (CONF_STR values), strv_push().
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

#include "conf-parser.h"
#include "failalloc.h"
#include "frame.h"
#include "macro.h"
#include "msg.h"
#include "strv.h"

/* f(ud) under a failure at every allocation in turn; undo(ud) after each
 * run. Returns how many allocations the successful run made. */
static long
sweep(int (*f)(void *ud), void (*undo)(void *ud), void *ud)
{
	for (long n = 0; n < 1000; n++) {
		size_t before = failalloc_live();
		failalloc_arm(n);
		int r = f(ud);
		bool failed = failalloc_fired();
		failalloc_arm(-1);
		undo(ud);
		if (failalloc_live() != before)
			fail_msg("allocation %ld failed: %zu block(s) leaked", n,
				 failalloc_live() - before);
		if (!failed) {
			assert_int_equal(r, 0);
			return n;
		}
		if (r >= 0)
			fail_msg("allocation %ld failed, yet the call returned %d", n, r);
	}
	fail_msg("no end to the allocations");
	return -1;
}

/* ---- a frame and its typed decoder ---- */

typedef struct FrameCase {
	char *payload;
	size_t len;
	Frame f;
	bool parsed;
	Msg_EXEC_START m;
	bool decoded;
} FrameCase;

static void
frame_case_init(FrameCase *fc)
{
	static char *const argv[] = {"/bin/sh", "-c", "echo hi", NULL};
	static char *const env[] = {"PATH=/usr/bin:/bin", "HOME=/workspace", NULL};
	MpWriter w;
	char *buf;
	size_t len;

	memset(fc, 0, sizeof(*fc));
	mp_writer_init(&w);
	msg_encode_EXEC_START(&w, &(Msg_EXEC_START){.sandbox_id = "0123456789abcdef",
						    .argv = argv,
						    .env = env,
						    .cwd = "/workspace",
						    .run_id = "run-1"});
	assert_int_equal(
	    frame_encode(MSG_EXEC_START, 7, w.sbuf.data, w.sbuf.size, 1 << 20, &buf, &len), 0);
	mp_writer_done(&w);
	fc->payload = buf;
	fc->len = len;
}

static int
do_frame_parse(void *ud)
{
	FrameCase *fc = ud;
	int r = frame_parse(fc->payload + 4, fc->len - 4, &fc->f);
	fc->parsed = r >= 0;
	return r;
}

static void
undo_frame_parse(void *ud)
{
	FrameCase *fc = ud;
	if (fc->parsed)
		frame_done(&fc->f);
	fc->parsed = false;
}

static void
test_enomem_frame_parse(void **state)
{
	FrameCase fc;

	frame_case_init(&fc);
	assert_true(sweep(do_frame_parse, undo_frame_parse, &fc) >= 1);
	free(fc.payload);
}

static int
do_decode(void *ud)
{
	FrameCase *fc = ud;
	int r = msg_decode_EXEC_START(fc->f.body, &fc->m);
	fc->decoded = true; /* msg_done either way (msg.h) */
	if (r == 0) {
		assert_string_equal(fc->m.cwd, "/workspace");
		assert_string_equal(fc->m.argv[2], "echo hi");
	}
	/* NB: a failed copy is reported as -EBADMSG (mp-cursor's fail()), the
	 * code a malformed body gets: the peer is told "bad message" for what
	 * was the daemon's own shortage. */
	return r;
}

static void
undo_decode(void *ud)
{
	FrameCase *fc = ud;
	if (fc->decoded)
		msg_done_EXEC_START(&fc->m);
	fc->decoded = false;
}

static void
test_enomem_msg_decode(void **state)
{
	FrameCase fc;

	frame_case_init(&fc);
	assert_int_equal(do_frame_parse(&fc), 0);
	/* strings, two vectors of strings, the reader's list of copies */
	assert_true(sweep(do_decode, undo_decode, &fc) >= 6);
	undo_frame_parse(&fc);
	free(fc.payload);
}

/* ---- configuration ---- */

typedef struct TConf {
	char *name;
	char *state_dir;
	int64_t port;
} TConf;

static const ConfItem items[] = {
    {"runwarden", "state_dir", CONF_STR, offsetof(TConf, state_dir), "/var/lib/rw", 0, 0, "state"},
    {"coordinatord", "name", CONF_STR, offsetof(TConf, name), "", 0, 0, "a name"},
    {"coordinatord", "port", CONF_INT, offsetof(TConf, port), "8080", 1, 65535, "a port"},
};

static int
do_conf(void *ud)
{
	TConf *c = ud;
	char err[512];
	int r = conf_apply_defaults(items, ELEMENTSOF(items), c);
	if (r < 0)
		return r;
	return conf_load_string(items, ELEMENTSOF(items), c, "t.conf",
				"[runwarden]\nstate_dir = /srv/rw\n[coordinatord]\nname = hello\n"
				"port = 9\n",
				err, sizeof(err));
}

static void
undo_conf(void *ud)
{
	conf_free_strings(items, ELEMENTSOF(items), ud);
}

static void
test_enomem_conf_load(void **state)
{
	TConf c = {0};

	assert_true(sweep(do_conf, undo_conf, &c) >= 3);
}

/* ---- strv ---- */

static int
do_strv(void *ud)
{
	char ***v = ud;
	for (int i = 0; i < 5; i++) {
		int r = strv_push(v, "word");
		if (r < 0)
			return r;
	}
	return 0;
}

static void
undo_strv(void *ud)
{
	char ***v = ud;
	strv_free(*v);
	*v = NULL;
}

static void
test_enomem_strv(void **state)
{
	char **v = NULL;

	assert_true(sweep(do_strv, undo_strv, &v) >= 5);
}

/* The allocator itself: a failure is one allocation only, and counted. */
static void
test_failalloc_counts(void **state)
{
	size_t before = failalloc_live();
	failalloc_arm(1);
	void *a = malloc(8);
	void *b = malloc(8);
	void *c = malloc(8);
	assert_true(failalloc_fired());
	failalloc_arm(-1);
	assert_non_null(a);
	assert_null(b);
	assert_non_null(c);
	assert_int_equal(failalloc_live(), before + 2);
	free(a);
	free(c);
	assert_int_equal(failalloc_live(), before);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_failalloc_counts),  cmocka_unit_test(test_enomem_frame_parse),
	    cmocka_unit_test(test_enomem_msg_decode), cmocka_unit_test(test_enomem_conf_load),
	    cmocka_unit_test(test_enomem_strv),
	};
	return cmocka_run_group_tests_name("enomem", tests, NULL, NULL);
}
