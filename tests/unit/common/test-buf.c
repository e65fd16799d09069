/* SPDX-License-Identifier: MIT */
/*
 * test-buf.c — common/buf.c: appends keep the data NUL-terminated and
 * whole across growth; reserve leaves room; a size that would overflow is
 * -EFBIG with the buffer unchanged; done empties it (NULL-safe). And
 * array_grow(): room for one more element, doubling from its minimum, the
 * elements kept; an overflowing size refused with the array unchanged.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "buf.h"

static void
test_buf_appends(void **state)
{
	Buf b = {0};
	char chunk[100];

	assert_int_equal(buf_append(&b, "", 0), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
	for (int i = 0; i < 1000; i++) {
		memset(chunk, 'a' + i % 26, sizeof(chunk));
		assert_int_equal(buf_append(&b, chunk, sizeof(chunk)), 0);
	}
	assert_int_equal(b.len, 100000);
	assert_int_equal(strlen(b.data), 100000);
	assert_true(b.cap > b.len);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(b.data[i * 100 + 99], 'a' + i % 26);
	buf_done(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	buf_done(NULL);
}

static void
test_buf_reserve_and_overflow(void **state)
{
	Buf b = {0};

	assert_int_equal(buf_reserve(&b, 5000), 0);
	assert_true(b.cap >= 5001);
	assert_int_equal(b.len, 0);
	size_t cap = b.cap;
	assert_int_equal(buf_append(&b, "xyz", 3), 0);
	assert_int_equal(b.cap, cap); /* no growth while it fits */
	assert_int_equal(buf_reserve(&b, SIZE_MAX - 2), -EFBIG);
	assert_int_equal(buf_append(&b, "x", SIZE_MAX / 2), -EFBIG);
	assert_int_equal(b.len, 3);
	assert_string_equal(b.data, "xyz");
	buf_done(&b);
}

static void
test_array_grow(void **state)
{
	int *a = NULL;
	size_t n = 0, cap = 0;
	for (int i = 0; i < 1000; i++) {
		assert_int_equal(ARRAY_GROW(a, n, cap, 8), 0);
		assert_true(cap > n);
		a[n++] = i;
	}
	assert_int_equal(cap, 1024); /* 8, 16, … */
	for (int i = 0; i < 1000; i++)
		assert_int_equal(a[i], i);
	/* full, and its doubling would overflow: refused, unchanged */
	int *keep = a;
	size_t big = SIZE_MAX / sizeof(*a) / 2 + 1;
	size_t c2 = big;
	assert_int_equal(array_grow((void **)&a, big, &c2, sizeof(*a), 8), -EFBIG);
	assert_ptr_equal(a, keep);
	assert_int_equal(c2, big);
	free(a);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_buf_appends),
	    cmocka_unit_test(test_buf_reserve_and_overflow),
	    cmocka_unit_test(test_array_grow),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
