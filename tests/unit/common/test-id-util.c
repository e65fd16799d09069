/* SPDX-License-Identifier: MIT */
/*
 * test-id-util.c — common/id-util.c: hex, uuids, tokens and the thread id
 * rules. The formats are the ones the daemons produced before they shared
 * this code (snprintf "%02x"), so ids on disk and on the wire keep their shape.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "id-util.h"

/* The reference: what the daemons wrote by hand. */
static void
hex_by_snprintf(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static bool
is_uuid_v4(const char *s)
{
	if (strlen(s) != UUID_STRING_LEN)
		return false;
	for (int i = 0; i < UUID_STRING_LEN; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return s[14] == '4' && strchr("89ab", s[19]);
}

static void
test_hex_encode_matches_snprintf(void **state)
{
	unsigned char b[256];
	char out[2 * sizeof(b) + 1], want[2 * sizeof(b) + 1];

	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (unsigned char)i;
	hex_encode(b, sizeof(b), out);
	hex_by_snprintf(b, sizeof(b), want);
	assert_string_equal(out, want);
	hex_encode(b, 0, out);
	assert_string_equal(out, "");
	hex_encode((const unsigned char[]){0xde, 0xad, 0x0f}, 3, out);
	assert_string_equal(out, "dead0f");
}

static void
test_uuid_v4_from_bytes_sets_the_bits(void **state)
{
	unsigned char b[16];
	char out[UUID_STRING_LEN + 1];

	memset(b, 0xff, sizeof(b));
	uuid_v4_from_bytes(b, out);
	assert_string_equal(out, "ffffffff-ffff-4fff-bfff-ffffffffffff");
	memset(b, 0, sizeof(b));
	uuid_v4_from_bytes(b, out);
	assert_string_equal(out, "00000000-0000-4000-8000-000000000000");
	for (int i = 0; i < 16; i++)
		b[i] = (unsigned char)(i * 17);
	uuid_v4_from_bytes(b, out);
	assert_string_equal(out, "00112233-4455-4677-8899-aabbccddeeff");
}

static void
test_uuid_v4_and_token_are_random_and_well_formed(void **state)
{
	char a[UUID_STRING_LEN + 1], b[UUID_STRING_LEN + 1];
	char t[RANDOM_TOKEN_LEN + 1], u[RANDOM_TOKEN_LEN + 1];

	assert_int_equal(uuid_v4(a), 0);
	assert_int_equal(uuid_v4(b), 0);
	assert_true(is_uuid_v4(a));
	assert_true(is_uuid_v4(b));
	assert_string_not_equal(a, b);

	assert_int_equal(random_token(t), 0);
	assert_int_equal(random_token(u), 0);
	assert_int_equal(strlen(t), RANDOM_TOKEN_LEN);
	assert_string_not_equal(t, u);
	/* a uuid, then a second one's 32 hex digits (its version and variant set) */
	char first[UUID_STRING_LEN + 1];
	memcpy(first, t, UUID_STRING_LEN);
	first[UUID_STRING_LEN] = '\0';
	assert_true(is_uuid_v4(first));
	assert_int_equal(strspn(t + UUID_STRING_LEN, "0123456789abcdef"), 32);
	assert_int_equal(t[UUID_STRING_LEN + 12], '4');
	assert_non_null(strchr("89ab", t[UUID_STRING_LEN + 16]));
}

static void
test_thread_id_rules(void **state)
{
	char longest[THREAD_ID_MAX + 2];

	memset(longest, 'x', sizeof(longest));
	longest[THREAD_ID_MAX] = '\0';
	assert_null(thread_id_problem(longest));
	assert_true(thread_id_valid(longest));
	longest[THREAD_ID_MAX] = 'x';
	longest[THREAD_ID_MAX + 1] = '\0';
	assert_string_equal(thread_id_problem(longest), "threadId must be at most 256 bytes");

	assert_string_equal(thread_id_problem(NULL), "threadId must be a non-empty string");
	assert_string_equal(thread_id_problem(""), "threadId must be a non-empty string");
	assert_string_equal(thread_id_problem("a\tb"),
			    "threadId must not contain control characters");
	assert_string_equal(thread_id_problem("a\x7f"),
			    "threadId must not contain control characters");
	assert_false(thread_id_valid("a\nb"));
	assert_true(thread_id_valid("thread-1 with spaces"));
	assert_true(thread_id_valid("caf\xc3\xa9")); /* UTF-8 beyond ASCII is fine */
	assert_true(string_printable(""));
	assert_false(string_printable("\x1f"));
}

/* Issue 30 item 9: valid UTF-8, no C0/DEL/C1 controls, no bidi controls,
 * not a dot segment; everything else is an id (URLs encode it). */
static void
test_thread_id_utf8_controls_and_bidi(void **state)
{
	static const char *const utf8[] = {
	    "a-\xff",		  /* not a UTF-8 byte */
	    "a-\xc0\xaf",	  /* overlong '/' */
	    "a-\xe0\x80\xaf",	  /* overlong, three bytes */
	    "a-\xc3",		  /* truncated */
	    "a-\xe2\x82",	  /* truncated */
	    "a-\x80",		  /* stray continuation */
	    "a-\xed\xa0\x80",	  /* surrogate U+D800 */
	    "a-\xf4\x90\x80\x80", /* past U+10FFFF */
	    "a-\xf5\x80\x80\x80",
	};
	static const char *const controls[] = {
	    "a-\x01", "a-\x1b[31m", "a-\x7f", "a-\xc2\x80", "a-\xc2\x9f", "\xc2\x85x",
	};
	static const char *const bidi[] = {
	    "a-\xe2\x80\xae"
	    "evil",	      /* U+202E RIGHT-TO-LEFT OVERRIDE */
	    "a-\xe2\x80\xaa", /* U+202A */
	    "a-\xe2\x80\xac", /* U+202C */
	    "a-\xe2\x80\xad", /* U+202D */
	    "a-\xe2\x81\xa6", /* U+2066 */
	    "a-\xe2\x81\xa9", /* U+2069 */
	    "a-\xe2\x80\x8e", /* U+200E LRM */
	    "a-\xe2\x80\x8f", /* U+200F RLM */
	    "a-\xd8\x9c",     /* U+061C ARABIC LETTER MARK */
	};
	static const char *const fine[] = {
	    "a-1",
	    "a-/../b-x",
	    "a b?c#d%2F%e",
	    "caf\xc3\xa9",
	    "\xc2\xa0nbsp",	/* U+00A0, past C1 */
	    "\xe2\x80\x8d",	/* U+200D ZWJ (emoji sequences) */
	    "\xe2\x81\xa5",	/* U+2065, unassigned, between the bidi ranges */
	    "\xf0\x9f\x98\x80", /* U+1F600 */
	    "\xf4\x8f\xbf\xbf", /* U+10FFFF */
	    "...",
	    ".a",
	};

	for (size_t i = 0; i < sizeof(utf8) / sizeof(*utf8); i++)
		assert_string_equal(thread_id_problem(utf8[i]), "threadId must be valid UTF-8");
	for (size_t i = 0; i < sizeof(controls) / sizeof(*controls); i++)
		assert_string_equal(thread_id_problem(controls[i]),
				    "threadId must not contain control characters");
	for (size_t i = 0; i < sizeof(bidi) / sizeof(*bidi); i++)
		assert_string_equal(thread_id_problem(bidi[i]),
				    "threadId must not contain bidirectional control characters");
	for (size_t i = 0; i < sizeof(fine) / sizeof(*fine); i++)
		assert_null(thread_id_problem(fine[i]));
	assert_string_equal(thread_id_problem("."), "threadId must not be '.' or '..'");
	assert_string_equal(thread_id_problem(".."), "threadId must not be '.' or '..'");
}

static void
test_idempotency_key_rules(void **state)
{
	char longest[IDEMPOTENCY_KEY_MAX + 2];
	const char *bad = "Idempotency-Key must be 1 to 256 printable bytes";

	memset(longest, 'k', IDEMPOTENCY_KEY_MAX);
	longest[IDEMPOTENCY_KEY_MAX] = '\0';
	assert_null(idempotency_key_problem(longest));
	assert_null(idempotency_key_problem("k-1 with spaces/and:punct"));
	longest[IDEMPOTENCY_KEY_MAX] = 'k';
	longest[IDEMPOTENCY_KEY_MAX + 1] = '\0';
	assert_string_equal(idempotency_key_problem(longest), bad);
	assert_string_equal(idempotency_key_problem(NULL), bad);
	assert_string_equal(idempotency_key_problem(""), bad);
	assert_string_equal(idempotency_key_problem("a\tb"), bad);
	assert_string_equal(idempotency_key_problem("a\x7f"), bad);
}

static void
test_client_run_id_rules(void **state)
{
	char longest[CLIENT_RUN_ID_MAX + 2];

	memset(longest, 'r', CLIENT_RUN_ID_MAX);
	longest[CLIENT_RUN_ID_MAX] = '\0';
	assert_true(client_run_id_valid(longest));
	longest[CLIENT_RUN_ID_MAX] = 'r';
	longest[CLIENT_RUN_ID_MAX + 1] = '\0';
	assert_false(client_run_id_valid(longest));
	assert_false(client_run_id_valid(NULL));
	assert_false(client_run_id_valid(""));
	assert_false(client_run_id_valid("a\nb"));
	assert_true(client_run_id_valid("run 1/2"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hex_encode_matches_snprintf),
	    cmocka_unit_test(test_uuid_v4_from_bytes_sets_the_bits),
	    cmocka_unit_test(test_uuid_v4_and_token_are_random_and_well_formed),
	    cmocka_unit_test(test_thread_id_rules),
	    cmocka_unit_test(test_thread_id_utf8_controls_and_bidi),
	    cmocka_unit_test(test_idempotency_key_rules),
	    cmocka_unit_test(test_client_run_id_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
