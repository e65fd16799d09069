/* SPDX-License-Identifier: MIT */
/*
 * test-strcache.c — common/strcache.h: look-up, replacement, the bound (the
 * oldest goes), drops by key and by value, against a plain model.
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

#include "strcache.h"

static void
test_get_put_replace(void **state)
{
	StrCache *sc = strcache_new(8);

	assert_non_null(sc);
	assert_null(strcache_get(sc, "t1"));
	assert_int_equal(strcache_put(sc, "t1", "node-a"), 0);
	assert_int_equal(strcache_put(sc, "t2", "node-b"), 0);
	assert_string_equal(strcache_get(sc, "t1"), "node-a");
	assert_int_equal(strcache_put(sc, "t1", "node-c"), 0);
	assert_string_equal(strcache_get(sc, "t1"), "node-c");
	assert_int_equal(strcache_size(sc), 2);
	assert_true(strcache_drop(sc, "t1"));
	assert_false(strcache_drop(sc, "t1"));
	assert_null(strcache_get(sc, "t1"));
	assert_string_equal(strcache_get(sc, "t2"), "node-b");
	strcache_free(sc);
	strcache_free(NULL);
}

static void
test_the_oldest_goes(void **state)
{
	StrCache *sc = strcache_new(3);
	char k[16];

	for (int i = 0; i < 3; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		assert_int_equal(strcache_put(sc, k, "v"), 0);
	}
	/* k0 put again: the newest; k1 is the oldest now */
	assert_int_equal(strcache_put(sc, "k0", "w"), 0);
	assert_int_equal(strcache_put(sc, "k3", "v"), 0);
	assert_int_equal(strcache_size(sc), 3);
	assert_null(strcache_get(sc, "k1"));
	assert_string_equal(strcache_get(sc, "k0"), "w");
	assert_non_null(strcache_get(sc, "k2"));
	assert_non_null(strcache_get(sc, "k3"));
	/* a bound of one keeps the last put */
	StrCache *one = strcache_new(1);
	assert_int_equal(strcache_put(one, "a", "1"), 0);
	assert_int_equal(strcache_put(one, "b", "2"), 0);
	assert_null(strcache_get(one, "a"));
	assert_string_equal(strcache_get(one, "b"), "2");
	strcache_free(one);
	strcache_free(sc);
}

static void
test_drop_by_value(void **state)
{
	StrCache *sc = strcache_new(16);

	assert_int_equal(strcache_put(sc, "t1", "a"), 0);
	assert_int_equal(strcache_put(sc, "t2", "b"), 0);
	assert_int_equal(strcache_put(sc, "t3", "a"), 0);
	assert_int_equal(strcache_put(sc, "t4", "a"), 0);
	assert_int_equal(strcache_drop_value(sc, "a"), 3);
	assert_int_equal(strcache_size(sc), 1);
	assert_string_equal(strcache_get(sc, "t2"), "b");
	assert_int_equal(strcache_drop_value(sc, "a"), 0);
	/* still a working cache after the drops */
	assert_int_equal(strcache_put(sc, "t1", "c"), 0);
	assert_string_equal(strcache_get(sc, "t1"), "c");
	strcache_free(sc);
}

/* Many keys in few buckets, against a model: what a long-lived cache sees. */
static void
test_against_a_model(void **state)
{
	enum { MAX = 64, KEYS = 200, STEPS = 20000 };
	StrCache *sc = strcache_new(MAX);
	int val[KEYS], age[KEYS], clock = 0;
	char k[16], v[16];

	for (int i = 0; i < KEYS; i++)
		val[i] = -1;
	srand(7);
	for (int s = 0; s < STEPS; s++) {
		int i = rand() % KEYS, op = rand() % 10;
		snprintf(k, sizeof(k), "key-%d", i);
		if (op < 6) {
			snprintf(v, sizeof(v), "%d", s);
			assert_int_equal(strcache_put(sc, k, v), 0);
			val[i] = s;
			age[i] = ++clock;
			int live = 0, oldest = -1;
			for (int j = 0; j < KEYS; j++)
				if (val[j] >= 0) {
					live++;
					if (oldest < 0 || age[j] < age[oldest])
						oldest = j;
				}
			if (live > MAX)
				val[oldest] = -1;
		} else if (op < 8) {
			assert_int_equal(strcache_drop(sc, k), val[i] >= 0);
			val[i] = -1;
		}
		const char *got = strcache_get(sc, k);
		if (val[i] < 0)
			assert_null(got);
		else
			assert_int_equal(atoi(got), val[i]);
	}
	size_t live = 0;
	for (int j = 0; j < KEYS; j++)
		live += val[j] >= 0;
	assert_int_equal(strcache_size(sc), live);
	strcache_free(sc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_get_put_replace),
	    cmocka_unit_test(test_the_oldest_goes),
	    cmocka_unit_test(test_drop_by_value),
	    cmocka_unit_test(test_against_a_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
