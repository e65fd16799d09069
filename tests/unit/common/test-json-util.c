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
#include <stdio.h>
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

/* What jansson says of buf: an object whose last "type" is a string. */
static bool
jansson_verdict(const char *buf, size_t len, bool *ret_object)
{
	json_t *j = json_loadb(buf, len, 0, NULL);
	bool obj = json_is_object(j);
	bool type = obj && json_is_string(json_object_get(j, "type"));
	json_decref(j);
	*ret_object = obj;
	return type;
}

static void
check_same(const char *buf, size_t len)
{
	bool obj, type = false;
	bool want_type = jansson_verdict(buf, len, &obj);
	bool ok = json_object_check(buf, len, "type", &type);
	if (ok != obj || (ok && type != want_type)) {
		fprintf(stderr,
			"json_object_check disagrees with jansson (%d/%d vs %d/%d) on: ", ok, type,
			obj, want_type);
		fwrite(buf, 1, len < 400 ? len : 400, stderr);
		fputc('\n', stderr);
		fail();
	}
}

#define SAME(lit) check_same(lit, sizeof(lit) - 1)

static void
test_json_util_object_check_cases(void **state)
{
	SAME("{\"type\":\"CUSTOM\",\"name\":\"b\",\"value\":\"xxxx\"}");
	SAME("{}");
	SAME(" \t\r\n{ \"type\" : \"x\" } \n");
	SAME("[]");
	SAME("[1]");
	SAME("\"s\"");
	SAME("1");
	SAME("");
	SAME("   ");
	SAME("{\"type\":1}");
	SAME("{\"type\":null}");
	SAME("{\"type\":\"a\",\"type\":2}");
	SAME("{\"type\":2,\"type\":\"a\"}");
	SAME("{\"t\\u0079pe\":\"a\"}");
	SAME("{\"typ\\u0065\":\"a\"}");
	SAME("{\"type\\u0000\":\"a\"}");
	SAME("{\"types\":\"a\"}");
	SAME("{\"typ\":\"a\"}");
	SAME("{\"x\":{\"type\":\"a\"}}");
	SAME("{\"type\":\"a\"}x");
	SAME("{\"type\":\"a\"}{}");
	SAME("{\"type\":\"a\",}");
	SAME("{,}");
	SAME("{\"a\"}");
	SAME("{\"a\":}");
	SAME("{\"a\" 1}");
	SAME("{1:2}");
	SAME("{\"a\":[1,2,]}");
	SAME("{\"a\":[,]}");
	SAME("{\"a\":[1 2]}");
	SAME("{\"a\":[[[[]]]]}");
	SAME("{\"a\":[{}]}");
	SAME("{\"a\":true,\"b\":false,\"c\":null}");
	SAME("{\"a\":tru}");
	SAME("{\"a\":truex}");
	SAME("{\"a\":True}");
	SAME("{\"a\":true1}");
	SAME("{\"a\":nul}");
	/* numbers */
	SAME("{\"a\":0}");
	SAME("{\"a\":-0}");
	SAME("{\"a\":01}");
	SAME("{\"a\":-01}");
	SAME("{\"a\":-}");
	SAME("{\"a\":+1}");
	SAME("{\"a\":.5}");
	SAME("{\"a\":1.}");
	SAME("{\"a\":1.5}");
	SAME("{\"a\":1e5}");
	SAME("{\"a\":1E+5}");
	SAME("{\"a\":1e-5}");
	SAME("{\"a\":1e}");
	SAME("{\"a\":1e+}");
	SAME("{\"a\":0x10}");
	SAME("{\"a\":9223372036854775807}");
	SAME("{\"a\":9223372036854775808}");
	SAME("{\"a\":-9223372036854775808}");
	SAME("{\"a\":-9223372036854775809}");
	SAME("{\"a\":99999999999999999999}");
	SAME("{\"a\":1e308}");
	SAME("{\"a\":1e309}");
	SAME("{\"a\":-1e309}");
	SAME("{\"a\":1e-400}");
	SAME("{\"a\":123456789012345678901234567890.5}");
	SAME("{\"a\":Infinity}");
	SAME("{\"a\":NaN}");
	/* strings */
	SAME("{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}");
	SAME("{\"a\":\"\\x\"}");
	SAME("{\"a\":\"\\u00e9\"}");
	SAME("{\"a\":\"\\u00E9\"}");
	SAME("{\"a\":\"\\u00g9\"}");
	SAME("{\"a\":\"\\u00e\"}");
	SAME("{\"a\":\"\\u0000\"}");
	SAME("{\"a\":\"\\ud83d\\ude00\"}");
	SAME("{\"a\":\"\\ud83d\"}");
	SAME("{\"a\":\"\\ud83dx\"}");
	SAME("{\"a\":\"\\ud83d\\u0041\"}");
	SAME("{\"a\":\"\\ude00\"}");
	SAME("{\"a\":\"\\ude00\\ud83d\"}");
	SAME("{\"a\":\"tab\there\"}");
	SAME("{\"a\":\"nl\nhere\"}");
	SAME("{\"a\":\"\x7f\"}");
	SAME("{\"a\":\"unterminated}");
	SAME("{\"a\":\"\\");
	SAME("{\"a\":\"\xc3\xa9\"}");
	SAME("{\"a\":\"\xc3\"}");
	SAME("{\"a\":\"\xe2\x82\xac\"}");
	SAME("{\"a\":\"\xed\xa0\x80\"}"); /* an encoded surrogate */
	SAME("{\"a\":\"\xc0\xaf\"}");	  /* overlong */
	SAME("{\"a\":\"\xf4\x90\x80\x80\"}");
	SAME("{\"a\":\"\xf0\x9f\x98\x80\"}");
	SAME("{\"a\":\"\xff\"}");
	SAME("{\"a\":1}\xc3\xa9");
	SAME("\xef\xbb\xbf{\"a\":1}"); /* BOM */
	/* a NUL byte is refused wherever it is (jansson drops one that follows
	 * a number: a quirk of its lexer's unget; the protocol's strings never
	 * hold one) */
	assert_false(json_object_check("{\"a\":\"\0\"}", 8, NULL, NULL));
	assert_false(json_object_check("{\"a\":1}\0", 8, NULL, NULL));
	assert_false(json_object_check("{\"a\":1\0}", 8, NULL, NULL));
	assert_false(json_object_check("\0{}", 3, NULL, NULL));
	/* a key decoded to "type" through a surrogate-free escape of each letter */
	SAME("{\"\\u0074\\u0079\\u0070\\u0065\":\"x\"}");
	SAME("{\"\\u0074\\u0079\\u0070\\u0065\":[]}");
	SAME("{\"\\u00e9\":\"x\",\"type\":\"y\"}");
}

/* The nesting limit, on both sides of it, with an empty and a scalar innermost
 * value, in arrays and in objects. */
static void
test_json_util_object_check_depth(void **state)
{
	for (size_t d = 2044; d <= 2051; d++)
		for (int inner = 0; inner < 4; inner++) {
			size_t cap = d * 8 + 64, n = 0;
			char *b = malloc(cap);
			assert_non_null(b);
			n += (size_t)sprintf(b + n, "{\"type\":\"x\",\"a\":");
			for (size_t i = 1; i < d; i++)
				n += (size_t)sprintf(b + n, inner & 2 ? "{\"k\":" : "[");
			n += (size_t)sprintf(b + n, inner & 1 ? "1" : "[]");
			for (size_t i = 1; i < d; i++)
				b[n++] = inner & 2 ? '}' : ']';
			b[n++] = '}';
			check_same(b, n);
			free(b);
		}
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Mutations of valid chunks, each judged by both: they must agree. */
static void
test_json_util_object_check_mutations(void **state)
{
	static const char *const seeds[] = {
	    "{\"type\":\"CUSTOM\",\"name\":\"b\",\"value\":\"xxxxxxxx\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m1\",\"delta\":\"h\\u00e9 "
	    "\\ud83d\\ude00\"}",
	    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"t\",\"delta\":\"{\\\"a\\\":1}\",\"n\":["
	    "1,-2.5e3,"
	    "true,false,null,{}]}",
	    "{\"a\":{\"b\":[{\"type\":\"x\"}]},\"type\":\"y\",\"z\":0.0001}",
	    "{\"t\\u0079pe\":\"x\",\"v\":\"\xc3\xa9\xe2\x82\xac\"}",
	};
	static const char alphabet[] =
	    "{}[]:,\"\\/ \t\n0123456789-+.eEtrufalsnxu\x01\x7f\x80\xc3\xa9"
	    "\xed\xa0\xf0\x9f\xff";
	uint64_t st = 0x9e3779b97f4a7c15ULL;
	char buf[512];
	size_t accepted = 0, typed = 0;

	for (int iter = 0; iter < 300000; iter++) {
		const char *seed = seeds[rnd(&st) % (sizeof(seeds) / sizeof(seeds[0]))];
		size_t n = strlen(seed);
		memcpy(buf, seed, n);
		int muts = 1 + (int)(rnd(&st) % 4);
		for (int m = 0; m < muts && n > 0; m++) {
			size_t at = rnd(&st) % n;
			char ch = alphabet[rnd(&st) % (sizeof(alphabet) - 1)];
			switch (rnd(&st) % 4) {
			case 0: buf[at] = ch; break;
			case 1:
				if (n + 1 < sizeof(buf)) {
					memmove(buf + at + 1, buf + at, n - at);
					buf[at] = ch;
					n++;
				}
				break;
			case 2:
				memmove(buf + at, buf + at + 1, n - at - 1);
				n--;
				break;
			default: n = at; /* truncate */
			}
		}
		check_same(buf, n);
		bool type = false;
		if (json_object_check(buf, n, "type", &type)) {
			accepted++;
			typed += type;
		}
	}
	/* both answers (and both "type" answers) were exercised */
	assert_true(accepted > 10000 && accepted < 290000);
	assert_true(typed > 1000 && typed < accepted);
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
	    cmocka_unit_test(test_json_util_object_check_cases),
	    cmocka_unit_test(test_json_util_object_check_depth),
	    cmocka_unit_test(test_json_util_object_check_mutations),
	};
	return cmocka_run_group_tests_name("json-util", tests, NULL, NULL);
}
