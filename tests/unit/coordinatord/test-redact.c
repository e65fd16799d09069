/* SPDX-License-Identifier: MIT */
/*
 * test-redact.c — daemons/coordinatord/redact.c: secret values out of
 * strings, texts and JSON trees, in values and in keys, in numbers, in the
 * escaped spellings a search of serialized JSON would miss, and behind an
 * embedded NUL.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "commit.h"
#include "json-util.h"
#include "macro.h"

static char *const secrets[] = {"sk-secret", "4242", NULL};

static void
test_holds_and_string(void **state)
{
	size_t n;
	assert_true(redact_holds(secrets, "a sk-secret b", 13));
	assert_false(redact_holds(secrets, "a sk-secre", 10));
	/* the length bounds the search */
	assert_false(redact_holds(secrets, "sk-secret", 8));
	char *t = redact_string(secrets, "x sk-secret y sk-secret 4242", 28, &n);
	assert_string_equal(t, "x [REDACTED] y [REDACTED] [REDACTED]");
	assert_int_equal(n, strlen(t));
	free(t);
}

static void
test_text(void **state)
{
	char *t = strdup("pre sk-secretsk-secret post");
	size_t len = strlen(t);
	assert_int_equal(redact_text(secrets, &t, &len), 0);
	assert_string_equal(t, "pre [REDACTED][REDACTED] post");
	assert_int_equal(len, strlen(t));
	free(t);
	/* no values change nothing */
	t = strdup("sk-secret");
	len = strlen(t);
	assert_int_equal(redact_text(NULL, &t, &len), 0);
	assert_string_equal(t, "sk-secret");
	free(t);
}

static void
test_tree_values_keys_and_numbers(void **state)
{
	/* "\u0073k-secret" is the escaped spelling of the secret: the decoded
	 * tree holds it plainly */
	json_auto_t *j =
	    json_loads("{\"a\":\"\\u0073k-secret!\",\"n\":4242,\"m\":14242.5,"
		       "\"sk-secret-key\":1,\"l\":[\"ok\",\"x sk-secret\",{\"d\":4242}],"
		       "\"keep\":42}",
		       0, NULL);
	assert_non_null(j);
	assert_true(redact_tree(secrets, j));
	assert_string_equal(json_string_value(json_object_get(j, "a")), "[REDACTED]!");
	assert_string_equal(json_string_value(json_object_get(j, "n")), "[REDACTED]");
	assert_string_equal(json_string_value(json_object_get(j, "m")), "[REDACTED]");
	assert_null(json_object_get(j, "sk-secret-key"));
	assert_int_equal(json_integer_value(json_object_get(j, "[REDACTED]-key")), 1);
	json_t *l = json_object_get(j, "l");
	assert_string_equal(json_string_value(json_array_get(l, 0)), "ok");
	assert_string_equal(json_string_value(json_array_get(l, 1)), "x [REDACTED]");
	assert_string_equal(json_string_value(json_object_get(json_array_get(l, 2), "d")),
			    "[REDACTED]");
	assert_int_equal(json_integer_value(json_object_get(j, "keep")), 42);
	/* nothing left to redact: unchanged */
	assert_false(redact_tree(secrets, j));
}

static void
test_json_in_place(void **state)
{
	json_auto_t *j =
	    json_loads("{\"sk-secret\":[\"a sk-secret\",{\"k\":\"sk-secret\"}]}", 0, NULL);
	assert_int_equal(redact_json(secrets, j), 0);
	_cleanup_free_ char *s = json_dump_compact(j);
	assert_string_equal(s, "{\"[REDACTED]\":[\"a [REDACTED]\",{\"k\":\"[REDACTED]\"}]}");
	/* an embedded NUL would hide what follows it: the whole string goes */
	json_auto_t *n = json_stringn("ok\0sk-secret", 12);
	assert_int_equal(redact_json(secrets, n), 0);
	assert_string_equal(json_string_value(n), "[REDACTED]");
	/* no values: untouched */
	json_auto_t *u = json_string("sk-secret");
	assert_int_equal(redact_json(NULL, u), 0);
	assert_string_equal(json_string_value(u), "sk-secret");
}

/* An empty secret is skipped: it would be found everywhere (the search of
 * redact_string looped forever on it). The alarm makes a hang a failure. */
static void
test_empty_secret(void **state)
{
	static char *const with_empty[] = {"", "sk-secret", NULL};
	static char *const only_empty[] = {"", NULL};
	size_t n;

	alarm(5);
	assert_false(redact_holds(only_empty, "abc", 3));
	assert_true(redact_holds(with_empty, "a sk-secret", 11));
	char *t = redact_string(with_empty, "a sk-secret b", 13, &n);
	assert_string_equal(t, "a [REDACTED] b");
	assert_int_equal(n, strlen(t));
	free(t);
	t = redact_string(only_empty, "abc", 3, &n);
	assert_string_equal(t, "abc");
	free(t);
	json_auto_t *j = json_loads("{\"k\":\"a sk-secret\",\"n\":1}", 0, NULL);
	assert_true(redact_tree(with_empty, j));
	_cleanup_free_ char *s = json_dump_compact(j);
	assert_string_equal(s, "{\"k\":\"a [REDACTED]\",\"n\":1}");
	assert_false(redact_tree(only_empty, j));
	alarm(0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_holds_and_string),
	    cmocka_unit_test(test_text),
	    cmocka_unit_test(test_tree_values_keys_and_numbers),
	    cmocka_unit_test(test_json_in_place),
	    cmocka_unit_test(test_empty_secret),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
