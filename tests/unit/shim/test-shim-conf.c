/* SPDX-License-Identifier: MIT */
/*
 * test-shim-conf.c — max_instances = 0 sized from the host
 * (shim_conf_auto_instances): each of memory, CPUs, the per-user inotify
 * limits and the cap can be the least; never below 1; the arithmetic is
 * in the message.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shim-conf.h"

static ShimConf
conf(void)
{
	return (ShimConf){
	    .pool_size = 2, .userns_max_inotify_instances = 16, .userns_max_inotify_watches = 8192};
}

static void
test_each_bound_can_be_the_least(void **state)
{
	ShimConf c = conf();
	char msg[400];
	/* 24 GiB, 2 CPUs, generous inotify: the CPUs (2 x 512) */
	HostSize h = {24ULL << 30, 2, 1 << 20, 1 << 30};

	assert_int_equal(shim_conf_auto_instances(&c, &h, msg, sizeof(msg)), 1024);
	assert_non_null(strstr(msg, "2 CPUs x 512 = 1024"));
	/* 1 GiB: memory (512 MiB / 4 MiB) */
	h.mem_total = 1ULL << 30;
	assert_int_equal(shim_conf_auto_instances(&c, &h, msg, sizeof(msg)), 128);
	/* this host's inotify instances: 128 / 16 - 2 */
	h = (HostSize){24ULL << 30, 2, 128, 192530};
	assert_int_equal(shim_conf_auto_instances(&c, &h, msg, sizeof(msg)), 6);
	assert_non_null(strstr(msg, "max_instances = 6 from the host"));
	/* many CPUs and memory: the cap */
	h = (HostSize){1ULL << 40, 64, -1, -1};
	assert_int_equal(shim_conf_auto_instances(&c, &h, msg, sizeof(msg)), 4096);
	(void)state;
}

static void
test_never_below_one(void **state)
{
	ShimConf c = conf();
	HostSize h = {1ULL << 20, 1, 16, 8192}; /* 1 MiB; inotify for one minus the pool */

	assert_int_equal(shim_conf_auto_instances(&c, &h, NULL, 0), 1);
	(void)state;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_each_bound_can_be_the_least),
	    cmocka_unit_test(test_never_below_one),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
