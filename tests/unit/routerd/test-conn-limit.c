/* SPDX-License-Identifier: MIT */
/*
 * test-conn-limit.c — daemons/routerd/conn-limit.c: unserved connections
 * counted per client address (IPv4 per address, IPv6 per /64), refused past
 * the cap, forgotten when the count reaches zero.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "conn-limit.h"

static struct sockaddr_storage
addr(const char *text)
{
	struct sockaddr_storage ss = {0};

	if (strchr(text, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, text, &s6->sin6_addr), 1);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, text, &s4->sin_addr), 1);
	}
	return ss;
}

static void
test_cap_per_address(void **state)
{
	AddrTable *t = addr_table_new();
	AddrSlot *s[3], *other, *x;
	struct sockaddr_storage a = addr("192.0.2.1"), b = addr("192.0.2.2");

	assert_non_null(t);
	for (int i = 0; i < 3; i++)
		assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 3, &s[i]), 0);
	assert_ptr_equal(s[0], s[2]); /* one slot per address */
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 3, &x), -EBUSY);
	/* another address is not limited by the first */
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&b, 3, &other), 0);
	assert_int_equal(addr_table_size(t), 2);
	/* one released: room for one more */
	assert_null(addr_unserved_release(t, s[2]));
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 3, &x), 0);
	/* all released: the address is forgotten */
	for (int i = 0; i < 3; i++)
		addr_unserved_release(t, s[0]);
	assert_int_equal(addr_table_size(t), 1);
	addr_unserved_release(t, other);
	assert_int_equal(addr_table_size(t), 0);
	assert_null(addr_unserved_release(t, NULL));
	addr_table_free(t);
}

static void
test_no_cap_still_counts(void **state)
{
	AddrTable *t = addr_table_new();
	AddrSlot *s = NULL;
	struct sockaddr_storage a = addr("127.0.0.1");

	for (int i = 0; i < 1000; i++)
		assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 0, &s), 0);
	assert_int_equal(addr_table_size(t), 1);
	/* a cap applied later (under pressure) sees the count */
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 1000, &s), -EBUSY);
	for (int i = 0; i < 1000; i++)
		addr_unserved_release(t, s);
	assert_int_equal(addr_table_size(t), 0);
	addr_table_free(t);
}

static void
test_ipv6_per_64(void **state)
{
	AddrTable *t = addr_table_new();
	AddrSlot *s1, *s2, *s3;
	struct sockaddr_storage a = addr("2001:db8:1:2::1"), b = addr("2001:db8:1:2:ffff::9"),
				c = addr("2001:db8:1:3::1");

	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&a, 2, &s1), 0);
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&b, 2, &s2), 0);
	assert_ptr_equal(s1, s2); /* the same /64 */
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&b, 2, &s2), -EBUSY);
	assert_int_equal(addr_unserved_take(t, (struct sockaddr *)&c, 2, &s3), 0);
	assert_ptr_not_equal(s1, s3);
	assert_int_equal(addr_table_size(t), 2);
	addr_table_free(t); /* frees what is still counted */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_cap_per_address),
	    cmocka_unit_test(test_no_cap_still_counts),
	    cmocka_unit_test(test_ipv6_per_64),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
