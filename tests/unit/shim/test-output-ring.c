/* SPDX-License-Identifier: MIT */
/*
 * test-output-ring.c — daemons/containerd-shim/output-ring.c: the bounded,
 * offset-addressed buffer behind exec re-attach.
 *
 * A reference model (the whole stream kept in a flat array) is fed the same
 * pseudo-random appends (fixed seed; sizes around and across the capacity) and
 * after each one every held offset range is read back and compared.
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

#include "output-ring.h"

static void
test_empty_and_simple(void **state)
{
	Ring r;
	char buf[16];

	(void)state;
	ring_init(&r, 8);
	assert_int_equal(ring_start(&r), 0);
	assert_int_equal(ring_end(&r), 0);
	assert_int_equal(ring_read(&r, 0, buf, sizeof(buf)), 0);
	assert_int_equal(ring_read(&r, 1, buf, sizeof(buf)), -ERANGE);
	assert_int_equal(ring_append(&r, "hello", 5), 0);
	assert_int_equal(ring_read(&r, 0, buf, sizeof(buf)), 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(ring_read(&r, 3, buf, 1), 1);
	assert_int_equal(buf[0], 'l');
	/* overflow: 5 + 6 = 11 > 8, the oldest 3 are dropped */
	assert_int_equal(ring_append(&r, " world", 6), 0);
	assert_int_equal(ring_start(&r), 3);
	assert_int_equal(ring_end(&r), 11);
	assert_int_equal(ring_read(&r, 2, buf, sizeof(buf)), -ERANGE);
	assert_int_equal(ring_read(&r, 3, buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "lo world", 8);
	/* one piece larger than the ring keeps its tail */
	assert_int_equal(ring_append(&r, "0123456789AB", 12), 0);
	assert_int_equal(ring_start(&r), 15);
	assert_int_equal(ring_end(&r), 23);
	assert_int_equal(ring_read(&r, 15, buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "456789AB", 8);
	assert_int_equal(ring_read(&r, 23, buf, sizeof(buf)), 0);
	assert_int_equal(ring_read(&r, 24, buf, sizeof(buf)), -ERANGE);
	ring_done(&r);
}

static void
test_against_a_model(void **state)
{
	const size_t max = 1000, total = 200000;
	unsigned char *model = malloc(total + 4096), *out = malloc(max + 1);
	uint64_t end = 0;
	unsigned seed = 12345;
	Ring r;

	(void)state;
	assert_non_null(model);
	assert_non_null(out);
	ring_init(&r, max);
	while (end < total) {
		size_t n;
		seed = seed * 1103515245 + 12345;
		switch ((seed >> 16) % 4) {
		case 0: n = (seed >> 8) % 7; break;	      /* tiny */
		case 1: n = (seed >> 8) % (max / 2); break;   /* below the capacity */
		case 2: n = max - 1 + (seed >> 8) % 3; break; /* around it */
		default: n = (seed >> 8) % (3 * max); break;  /* across it */
		}
		for (size_t i = 0; i < n; i++)
			model[end + i] = (unsigned char)((end + i) * 7 + (end + i) / 251);
		assert_int_equal(ring_append(&r, model + end, n), 0);
		end += n;
		assert_int_equal(ring_end(&r), end);
		uint64_t start = end > max ? end - max : 0;
		assert_int_equal(ring_start(&r), start);
		assert_true(r.cap <= max);
		/* read every offset range from start, in pieces */
		for (uint64_t off = start; off < end; off += 97) {
			long k = ring_read(&r, off, out, 200);
			assert_true(k > 0);
			assert_memory_equal(out, model + off, (size_t)k);
		}
		if (start > 0)
			assert_int_equal(ring_read(&r, start - 1, out, 1), -ERANGE);
	}
	ring_done(&r);
	free(model);
	free(out);
}

static void
test_memory_grows_with_use(void **state)
{
	Ring r;

	(void)state;
	ring_init(&r, 1024 * 1024);
	assert_int_equal(ring_append(&r, "x", 1), 0);
	assert_true(r.cap <= 4096); /* a quiet exec costs a page, not the maximum */
	ring_done(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_empty_and_simple),
	    cmocka_unit_test(test_against_a_model),
	    cmocka_unit_test(test_memory_grows_with_use),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
