/* SPDX-License-Identifier: MIT */
/*
 * test-harness-shell.c — daemons/coordinatord/harness-shell.c: the command a
 * shell run executes, and the output buffer that turns raw process bytes into
 * publishable UTF-8 chunks.
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
#include <jansson.h>

#include "harness.h"
#include "json-util.h"

#define FFFD "\xEF\xBF\xBD"
#define EURO "\xE2\x82\xAC" /* U+20AC, 3 bytes */

static int
cmd_of(const char *messages_json, char **ret)
{
	json_error_t e;
	json_t *m = json_loads(messages_json, JSON_DECODE_ANY, &e);
	if (!m)
		fail_msg("bad test JSON: %s", e.text);
	int r = shell_command_from_messages(m, ret);
	json_decref(m);
	return r;
}

static void
expect_cmd(const char *messages_json, const char *want)
{
	char *s = NULL;
	int r = cmd_of(messages_json, &s);
	if (r != 0)
		fail_msg("%d for %s", r, messages_json);
	assert_string_equal(s, want);
	free(s);
}

static void
expect_cmd_err(const char *messages_json, int want)
{
	char *s = (char *)0x1;
	assert_int_equal(cmd_of(messages_json, &s), want);
	assert_ptr_equal(s, (char *)0x1);
}

static void
test_harness_shell_command_string_content(void **state)
{
	expect_cmd("[{\"role\":\"user\",\"content\":\"echo hi\"}]", "echo hi");
	/* the last user message wins */
	expect_cmd("[{\"role\":\"user\",\"content\":\"first\"},"
		   "{\"role\":\"assistant\",\"content\":\"ok\"},"
		   "{\"role\":\"user\",\"content\":\"second\"}]",
		   "second");
	/* assistant / tool / system messages after it are ignored */
	expect_cmd("[{\"role\":\"system\",\"content\":\"sys\"},"
		   "{\"role\":\"user\",\"content\":\"ls -l\"},"
		   "{\"role\":\"assistant\",\"content\":\"rm -rf /\"},"
		   "{\"role\":\"tool\",\"content\":\"x\"}]",
		   "ls -l");
	/* messages without a role, or with a non-string role, are skipped */
	expect_cmd("[{\"role\":\"user\",\"content\":\"ok\"},{\"content\":\"x\"},{\"role\":3},"
		   "\"junk\"]",
		   "ok");
	/* empty string content is a (trivial) command */
	expect_cmd("[{\"role\":\"user\",\"content\":\"\"}]", "");
	/* UTF-8 passes through */
	expect_cmd("[{\"role\":\"user\",\"content\":\"echo \\u20ac\"}]", "echo " EURO);
}

static void
test_harness_shell_command_text_parts(void **state)
{
	expect_cmd("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"echo \"},"
		   "{\"type\":\"text\",\"text\":\"hello\"}]}]",
		   "echo hello");
	/* "content" works in place of "text"; "text" is preferred when both exist */
	expect_cmd("[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"content\":\"a\"},"
		   "{\"type\":\"text\",\"text\":\"b\",\"content\":\"X\"}]}]",
		   "ab");
	/* non-text parts are skipped */
	expect_cmd("[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"text\":\"no\"},"
		   "{\"type\":\"text\",\"text\":\"yes\"},{\"text\":\"untyped\"},7]}]",
		   "yes");
	/* the last user message counts even when an earlier one had text */
	expect_cmd("[{\"role\":\"user\",\"content\":\"old\"},"
		   "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"new\"}]}]",
		   "new");
}

static void
test_harness_shell_command_errors(void **state)
{
	/* no user message at all */
	expect_cmd_err("[]", -ENOENT);
	expect_cmd_err("[{\"role\":\"assistant\",\"content\":\"x\"}]", -ENOENT);
	/* a user message without usable text */
	expect_cmd_err("[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]", -ENOENT);
	expect_cmd_err("[{\"role\":\"user\",\"content\":[]}]", -ENOENT);
	expect_cmd_err("[{\"role\":\"user\"}]", -ENOENT);
	expect_cmd_err("[{\"role\":\"user\",\"content\":42}]", -ENOENT);
	/* not an array */
	expect_cmd_err("{\"role\":\"user\",\"content\":\"x\"}", -EINVAL);
	expect_cmd_err("\"echo\"", -EINVAL);
	char *s = (char *)0x1;
	assert_int_equal(shell_command_from_messages(NULL, &s), -EINVAL);
	assert_ptr_equal(s, (char *)0x1);
}

/* take and compare; want NULL means "nothing ready" */
static void
expect_take(OutBuf *b, size_t max, bool final, const char *want, size_t want_len)
{
	size_t n = 999;
	char *s = outbuf_take(b, max, final, &n);
	if (!want) {
		assert_null(s);
		assert_int_equal(n, 0);
		return;
	}
	assert_non_null(s);
	assert_int_equal(n, want_len);
	assert_memory_equal(s, want, want_len);
	assert_int_equal(s[n], '\0');
	assert_true(utf8_valid(s, n));
	free(s);
}
#define TAKE(b, max, final, lit) expect_take(b, max, final, lit, sizeof(lit) - 1)

static void
test_harness_shell_outbuf_coalesces(void **state)
{
	OutBuf b = {0};

	expect_take(&b, 100, false, NULL, 0);
	expect_take(&b, 100, true, NULL, 0);
	assert_int_equal(outbuf_add(&b, "hello ", 6), 0);
	assert_int_equal(outbuf_add(&b, "wor", 3), 0);
	assert_int_equal(outbuf_add(&b, "ld\n", 3), 0);
	assert_int_equal(b.len, 12);
	TAKE(&b, 100, false, "hello world\n");
	assert_int_equal(b.len, 0);
	expect_take(&b, 100, false, NULL, 0);

	/* growing past the initial capacity keeps every byte */
	char big[10000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	for (size_t off = 0; off < sizeof(big); off += 1000)
		assert_int_equal(outbuf_add(&b, big + off, 1000), 0);
	assert_int_equal(b.len, sizeof(big));
	size_t n = 0;
	char *s = outbuf_take(&b, sizeof(big), false, &n);
	assert_int_equal(n, sizeof(big));
	assert_memory_equal(s, big, sizeof(big));
	free(s);
	outbuf_done(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
}

static void
test_harness_shell_outbuf_never_splits_utf8(void **state)
{
	OutBuf b = {0};

	/* € split after its first byte, then after its second */
	for (size_t cut = 1; cut < 3; cut++) {
		assert_int_equal(outbuf_add(&b, "ab", 2), 0);
		assert_int_equal(outbuf_add(&b, EURO, cut), 0);
		TAKE(&b, 100, false, "ab");
		assert_int_equal(b.len, cut); /* the partial char waits */
		expect_take(&b, 100, false, NULL, 0);
		assert_int_equal(outbuf_add(&b, EURO + cut, 3 - cut), 0);
		assert_int_equal(outbuf_add(&b, "c", 1), 0);
		TAKE(&b, 100, false, EURO "c");
		assert_int_equal(b.len, 0);
	}

	/* a 4-byte char arriving one byte per turn */
	static const char emoji[] = "\xF0\x9F\x98\x80";
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(outbuf_add(&b, emoji + i, 1), 0);
		expect_take(&b, 100, false, NULL, 0);
	}
	assert_int_equal(outbuf_add(&b, emoji + 3, 1), 0);
	TAKE(&b, 100, false, "\xF0\x9F\x98\x80");

	/* invalid bytes are not held back: they come out as U+FFFD */
	assert_int_equal(outbuf_add(&b, "x\xFF", 2), 0);
	TAKE(&b, 100, false, "x" FFFD);
	assert_int_equal(b.len, 0);
	outbuf_done(&b);
}

static void
test_harness_shell_outbuf_final_flushes_tail(void **state)
{
	OutBuf b = {0};

	assert_int_equal(outbuf_add(&b, "end" EURO, 5), 0); /* € truncated to 2 bytes */
	/* not final: only the complete prefix */
	TAKE(&b, 100, false, "end");
	assert_int_equal(b.len, 2);
	/* final: the incomplete tail comes out as replacement characters */
	size_t n = 0;
	char *s = outbuf_take(&b, 100, true, &n);
	assert_non_null(s);
	assert_true(n >= 3 && n % 3 == 0);
	for (size_t i = 0; i < n; i += 3)
		assert_memory_equal(s + i, FFFD, 3);
	assert_true(utf8_valid(s, n));
	free(s);
	assert_int_equal(b.len, 0);
	expect_take(&b, 100, true, NULL, 0);

	/* final with nothing pending but valid text is the same as not final */
	assert_int_equal(outbuf_add(&b, "ok" EURO, 5), 0);
	TAKE(&b, 100, true, "ok" EURO);
	outbuf_done(&b);
}

static void
test_harness_shell_outbuf_max_cuts_at_boundary(void **state)
{
	OutBuf b = {0};

	/* "a€€b": a | E2 82 AC | E2 82 AC | b  (8 bytes) */
	assert_int_equal(outbuf_add(&b, "a" EURO EURO "b", 8), 0);
	/* max 3 would end inside the first €: cut before it */
	TAKE(&b, 3, false, "a");
	TAKE(&b, 3, false, EURO);
	/* max 5 with € b left (4 bytes): everything fits */
	TAKE(&b, 5, false, EURO "b");
	assert_int_equal(b.len, 0);

	/* cuts at every max from 4 (the longest character) up reassemble to the original text */
	static const char text[] = "x" EURO "y\xF0\x9F\x98\x80z" EURO EURO "\xC3\xA9";
	for (size_t max = 4; max <= 8; max++) {
		char out[64];
		size_t o = 0;
		assert_int_equal(outbuf_add(&b, text, sizeof(text) - 1), 0);
		for (int guard = 0; b.len > 0 && guard < 64; guard++) {
			size_t n = 0;
			char *s = outbuf_take(&b, max, false, &n);
			assert_non_null(s);
			assert_true(n > 0 && n <= max);
			assert_true(utf8_valid(s, n)); /* every chunk is whole characters */
			memcpy(out + o, s, n);
			o += n;
			free(s);
		}
		assert_int_equal(o, sizeof(text) - 1);
		assert_memory_equal(out, text, o);
	}

	/* final with max: still cut at a boundary, the tail follows */
	assert_int_equal(outbuf_add(&b, "ab" EURO, 5), 0);
	TAKE(&b, 4, true, "ab");
	TAKE(&b, 4, true, EURO);
	outbuf_done(&b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_harness_shell_command_string_content),
	    cmocka_unit_test(test_harness_shell_command_text_parts),
	    cmocka_unit_test(test_harness_shell_command_errors),
	    cmocka_unit_test(test_harness_shell_outbuf_coalesces),
	    cmocka_unit_test(test_harness_shell_outbuf_never_splits_utf8),
	    cmocka_unit_test(test_harness_shell_outbuf_final_flushes_tail),
	    cmocka_unit_test(test_harness_shell_outbuf_max_cuts_at_boundary),
	};
	return cmocka_run_group_tests_name("harness-shell", tests, NULL, NULL);
}
