/* SPDX-License-Identifier: MIT */
/*
 * test-reason.c — common/reason.h: the text beside an errno, NULL-safe,
 * bounded, and strerror() when the callee gave none.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "reason.h"

static int
fails(Reason *why, bool explain)
{
	if (explain)
		return reason_set(why, "mkdir %s: %s", "/x", strerror(EACCES)), -EACCES;
	return -ENOENT;
}

static void
test_reason_set_and_text(void **state)
{
	Reason why = {""};
	int r;

	r = fails(&why, true);
	assert_int_equal(r, -EACCES);
	assert_string_equal(reason_text(&why, r), "mkdir /x: Permission denied");
	/* none given: the errno's own words */
	Reason none = {""};
	r = fails(&none, false);
	assert_string_equal(reason_text(&none, r), strerror(ENOENT));
	assert_string_equal(reason_text(NULL, -EIO), strerror(EIO));
	/* the callee may be given no Reason at all */
	assert_int_equal(fails(NULL, true), -EACCES);
}

static void
test_reason_is_bounded(void **state)
{
	Reason why = {""};
	char big[1000];

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(reason_set(&why, "%s", big), 0);
	assert_int_equal(strlen(why.msg), sizeof(why.msg) - 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reason_set_and_text),
	    cmocka_unit_test(test_reason_is_bounded),
	};
	return cmocka_run_group_tests_name("reason", tests, NULL, NULL);
}
