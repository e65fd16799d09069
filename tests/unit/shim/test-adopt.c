/* SPDX-License-Identifier: MIT */
/*
 * test-adopt.c — the init wire version in HELLO: a shim adopts an init of its
 * version, or one from before the field (0, the same wire), and refuses a
 * newer one (-EPROTONOSUPPORT) or anything that is not a HELLO (-EPROTO).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "adopt.h"

static void
test_hello_versions(void **state)
{
	InitMsg m = {.type = INIT_MSG_HELLO, .status = (int32_t)INIT_PROTO_VERSION};
	uint32_t v = 99;

	(void)state;
	assert_int_equal(adopt_hello_check(&m, &v), 0);
	assert_int_equal(v, INIT_PROTO_VERSION);
	m.status = 0;
	assert_int_equal(adopt_hello_check(&m, &v), 0);
	assert_int_equal(v, 0);
	m.status = (int32_t)(INIT_PROTO_VERSION + 1);
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTONOSUPPORT);
	assert_int_equal(v, INIT_PROTO_VERSION + 1);
	m.status = -1; /* 0xffffffff: not a version we speak either */
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTONOSUPPORT);
	m = (InitMsg){.type = INIT_MSG_ADOPT, .status = (int32_t)INIT_PROTO_VERSION};
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTO);
}

/* The HELLO's type and version stay where every shim looks for them. */
static void
test_hello_layout_frozen(void **state)
{
	(void)state;
	assert_int_equal(offsetof(InitMsg, type), 0);
	assert_int_equal(offsetof(InitMsg, status), 20);
	assert_int_equal(INIT_MSG_HELLO, 13);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hello_versions),
	    cmocka_unit_test(test_hello_layout_frozen),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
