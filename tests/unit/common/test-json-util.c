/* SPDX-License-Identifier: MIT */
/*
 * test-json-util.c — common/json-util.c: UTF-8 helpers used on process output.
 *
 * Byte strings are written as escapes so every case says exactly which
 * sequence it is about.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "json-util.h"

#define FFFD "\xEF\xBF\xBD"
#define S(lit) lit, sizeof(lit) - 1

static void
test_json_util_complete_prefix_holds_back_truncated(void **state)
{
	/* € = E2 82 AC, é = C3 A9, 😀 = F0 9F 98 80 */
	assert_int_equal(utf8_complete_prefix(S("abc")), 3);
	assert_int_equal(utf8_complete_prefix(S("")), 0);
	assert_int_equal(utf8_complete_prefix(S("ab\xC3")), 2);
	assert_int_equal(utf8_complete_prefix(S("ab\xC3\xA9")), 4);
	assert_int_equal(utf8_complete_prefix(S("x\xE2")), 1);
	assert_int_equal(utf8_complete_prefix(S("x\xE2\x82")), 1);
	assert_int_equal(utf8_complete_prefix(S("x\xE2\x82\xAC")), 4);
	assert_int_equal(utf8_complete_prefix(S("\xF0")), 0);
	assert_int_equal(utf8_complete_prefix(S("\xF0\x9F")), 0);
	assert_int_equal(utf8_complete_prefix(S("\xF0\x9F\x98")), 0);
	assert_int_equal(utf8_complete_prefix(S("\xF0\x9F\x98\x80")), 4);
	assert_int_equal(utf8_complete_prefix(S("\xE2\x82\xAC\xF0\x9F\x98")), 3);
	/* a length that cuts a full buffer: only the buffer counts */
	assert_int_equal(utf8_complete_prefix("\xE2\x82\xAC", 2), 0);
}

static void
test_json_util_complete_prefix_passes_invalid(void **state)
{
	/* bytes no continuation can fix are not held back */
	assert_int_equal(utf8_complete_prefix(S("ab\xFF")), 3);
	assert_int_equal(utf8_complete_prefix(S("ab\x80")), 3); /* lone continuation */
	assert_int_equal(utf8_complete_prefix(S("ab\xC0")), 3); /* never valid lead */
	assert_int_equal(utf8_complete_prefix(S("ab\xC1")), 3);
	assert_int_equal(utf8_complete_prefix(S("ab\xF5")), 3);	    /* > U+10FFFF lead */
	assert_int_equal(utf8_complete_prefix(S("ab\xE0\x80")), 4); /* overlong already */
	assert_int_equal(utf8_complete_prefix(S("ab\xED\xA0")), 4); /* surrogate already */
	assert_int_equal(utf8_complete_prefix(S("ab\xF0\x80")), 4); /* overlong 4-byte */
	assert_int_equal(utf8_complete_prefix(S("ab\xF4\x90")), 4); /* > U+10FFFF */
	assert_int_equal(utf8_complete_prefix(S("ab\xE2\x41")), 4); /* broken by ASCII */
	/* but a valid truncated tail after garbage is still held back */
	assert_int_equal(utf8_complete_prefix(S("\xFF\xE2\x82")), 1);
}

static void
assert_sanitized(const char *in, size_t in_len, const char *want, size_t want_len)
{
	size_t n = 12345;
	char *out = utf8_sanitize(in, in_len, &n);
	assert_non_null(out);
	assert_int_equal(n, want_len);
	assert_memory_equal(out, want, want_len);
	assert_int_equal(out[n], '\0');
	assert_true(utf8_valid(out, n));
	free(out);
}

static void
test_json_util_sanitize(void **state)
{
	assert_sanitized(S("plain"), S("plain"));
	assert_sanitized(S(""), S(""));
	/* valid multi-byte text is kept byte for byte */
	assert_sanitized(S("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"),
			 S("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF"));
	/* each invalid byte becomes U+FFFD */
	assert_sanitized(S("a\xFF"
			   "b"),
			 S("a" FFFD "b"));
	assert_sanitized(S("\x80\x80"), S(FFFD FFFD));
	assert_sanitized(S("\xC0\x80"), S(FFFD FFFD));
	assert_sanitized(S("\xED\xA0\x80"), S(FFFD FFFD FFFD));
	/* NUL too (jansson refuses it in strings) */
	assert_sanitized(S("a\0b"), S("a" FFFD "b"));
	/* a truncated sequence at the very end is replaced too */
	assert_sanitized(S("ok\xE2\x82"), S("ok" FFFD FFFD));
	/* a broken sequence does not swallow the ASCII after it */
	assert_sanitized(S("\xE2\x82"
			   "A\xC3\xA9"),
			 S(FFFD FFFD "A\xC3\xA9"));

	/* NULL ret_len is allowed */
	char *out = utf8_sanitize(S("x\xFF"), NULL);
	assert_non_null(out);
	assert_string_equal(out, "x" FFFD);
	free(out);

	/* the result is accepted by jansson */
	out = utf8_sanitize(S("\xFF\0\xC3"), NULL);
	json_t *j = json_string(out);
	assert_non_null(j);
	json_decref(j);
	free(out);
}

static void
test_json_util_valid(void **state)
{
	assert_true(utf8_valid(S("")));
	assert_true(utf8_valid(S("ascii")));
	assert_true(utf8_valid(S("\xC2\x80"))); /* U+0080, smallest 2-byte */
	assert_true(utf8_valid(S("\xDF\xBF")));
	assert_true(utf8_valid(S("\xE0\xA0\x80"))); /* U+0800 */
	assert_true(utf8_valid(S("\xED\x9F\xBF"))); /* U+D7FF, just below surrogates */
	assert_true(utf8_valid(S("\xEE\x80\x80"))); /* U+E000, just above */
	assert_true(utf8_valid(S("\xEF\xBF\xBF")));
	assert_true(utf8_valid(S("\xF0\x90\x80\x80"))); /* U+10000 */
	assert_true(utf8_valid(S("\xF4\x8F\xBF\xBF"))); /* U+10FFFF */

	assert_false(utf8_valid(S("\xC0\x80")));	 /* overlong NUL */
	assert_false(utf8_valid(S("\xC1\xBF")));	 /* overlong */
	assert_false(utf8_valid(S("\xE0\x80\x80")));	 /* overlong 3-byte */
	assert_false(utf8_valid(S("\xE0\x9F\xBF")));	 /* overlong U+07FF */
	assert_false(utf8_valid(S("\xF0\x80\x80\x80"))); /* overlong 4-byte */
	assert_false(utf8_valid(S("\xF0\x8F\xBF\xBF"))); /* overlong U+FFFF */
	assert_false(utf8_valid(S("\xED\xA0\x80")));	 /* U+D800 */
	assert_false(utf8_valid(S("\xED\xBF\xBF")));	 /* U+DFFF */
	assert_false(utf8_valid(S("\xF4\x90\x80\x80"))); /* U+110000 */
	assert_false(utf8_valid(S("\xF5\x80\x80\x80")));
	assert_false(utf8_valid(S("\xFF")));
	assert_false(utf8_valid(S("\x80")));
	assert_false(utf8_valid(S("\xC3"))); /* truncated */
	assert_false(utf8_valid(S("\xE2\x82")));
	assert_false(utf8_valid(S("a\xE2\x82"
				  "b")));
	assert_false(utf8_valid(S("\xC3\xA9\xA9"))); /* extra continuation */
}

static void
test_json_util_dump_compact(void **state)
{
	json_t *j = json_pack("{s:i, s:s, s:[i,i]}", "z", 1, "a", "x", "m", 1, 2);
	char *s = json_dump_compact(j);
	assert_non_null(s);
	/* no spaces, insertion order kept */
	assert_string_equal(s, "{\"z\":1,\"a\":\"x\",\"m\":[1,2]}");
	free(s);
	json_decref(j);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_json_util_complete_prefix_holds_back_truncated),
	    cmocka_unit_test(test_json_util_complete_prefix_passes_invalid),
	    cmocka_unit_test(test_json_util_sanitize),
	    cmocka_unit_test(test_json_util_valid),
	    cmocka_unit_test(test_json_util_dump_compact),
	};
	return cmocka_run_group_tests_name("json-util", tests, NULL, NULL);
}
