/* SPDX-License-Identifier: MIT */
/*
 * test-net-addr.c — common/net-addr.c: the address classes the egress proxy
 * refuses after resolution (IPv4, IPv6, and the IPv6 forms that carry an IPv4
 * address), CIDR parsing (strict: dotted quads only, host bits zero) and
 * matching (an IPv4 network matches the mapped form too).
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

#include "net-addr.h"

/* The class of a textual address, through a sockaddr like getaddrinfo gives. */
static NetAddrClass
cls(const char *text)
{
	struct sockaddr_storage ss = {0};

	if (inet_pton(AF_INET, text, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (inet_pton(AF_INET6, text, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	else
		fail_msg("not an address: %s", text);
	return net_addr_classify((struct sockaddr *)&ss);
}

static void
test_net_addr_ipv4_classes(void **state)
{
	assert_int_equal(cls("0.0.0.0"), NET_ADDR_UNSPECIFIED);
	assert_int_equal(cls("0.1.2.3"), NET_ADDR_UNSPECIFIED);
	assert_int_equal(cls("127.0.0.1"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("127.255.255.254"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("169.254.169.254"), NET_ADDR_LINK_LOCAL);
	assert_int_equal(cls("10.0.0.1"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("10.255.255.255"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("172.16.0.1"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("172.31.255.255"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("192.168.1.1"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("100.64.0.1"), NET_ADDR_SHARED);
	assert_int_equal(cls("100.127.255.255"), NET_ADDR_SHARED);
	assert_int_equal(cls("224.0.0.1"), NET_ADDR_MULTICAST);
	assert_int_equal(cls("239.255.255.250"), NET_ADDR_MULTICAST);
	assert_int_equal(cls("255.255.255.255"), NET_ADDR_RESERVED);
	assert_int_equal(cls("240.0.0.1"), NET_ADDR_RESERVED);
	assert_int_equal(cls("192.0.2.1"), NET_ADDR_RESERVED);
	assert_int_equal(cls("198.18.0.1"), NET_ADDR_RESERVED);
	/* the edges just outside */
	assert_int_equal(cls("172.15.255.255"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("172.32.0.0"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("100.63.255.255"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("100.128.0.0"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("169.253.255.255"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("11.0.0.1"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("1.1.1.1"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("223.255.255.255"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("128.0.0.1"), NET_ADDR_PUBLIC);
}

static void
test_net_addr_ipv6_classes(void **state)
{
	assert_int_equal(cls("::"), NET_ADDR_UNSPECIFIED);
	assert_int_equal(cls("::1"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("fe80::1"), NET_ADDR_LINK_LOCAL);
	assert_int_equal(cls("febf::1"), NET_ADDR_LINK_LOCAL);
	assert_int_equal(cls("fec0::1"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("fc00::1"), NET_ADDR_UNIQUE_LOCAL);
	assert_int_equal(cls("fd12:3456::1"), NET_ADDR_UNIQUE_LOCAL);
	assert_int_equal(cls("ff02::1"), NET_ADDR_MULTICAST);
	assert_int_equal(cls("2001:db8::1"), NET_ADDR_RESERVED);
	assert_int_equal(cls("100::1"), NET_ADDR_RESERVED);
	assert_int_equal(cls("::2"), NET_ADDR_RESERVED);      /* IPv4-compatible */
	assert_int_equal(cls("::7f00:1"), NET_ADDR_RESERVED); /* ::127.0.0.1 */
	assert_int_equal(cls("64:ff9b:1::1"), NET_ADDR_RESERVED);
	assert_int_equal(cls("2606:4700::1111"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("2a00:1450:4001::1"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("fbff::1"), NET_ADDR_PUBLIC);
}

static void
test_net_addr_ipv6_carrying_ipv4(void **state)
{
	/* IPv4-mapped: judged by the IPv4 address */
	assert_int_equal(cls("::ffff:127.0.0.1"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("::ffff:7f00:1"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("::ffff:169.254.169.254"), NET_ADDR_LINK_LOCAL);
	assert_int_equal(cls("::ffff:10.1.2.3"), NET_ADDR_PRIVATE);
	assert_int_equal(cls("::ffff:0.0.0.0"), NET_ADDR_UNSPECIFIED);
	assert_int_equal(cls("::ffff:8.8.8.8"), NET_ADDR_PUBLIC);
	/* NAT64 well-known prefix and 6to4 */
	assert_int_equal(cls("64:ff9b::127.0.0.1"), NET_ADDR_LOOPBACK);
	assert_int_equal(cls("64:ff9b::a9fe:a9fe"), NET_ADDR_LINK_LOCAL);
	assert_int_equal(cls("64:ff9b::8.8.8.8"), NET_ADDR_PUBLIC);
	assert_int_equal(cls("2002:c0a8:0101::1"), NET_ADDR_PRIVATE); /* 192.168.1.1 */
	assert_int_equal(cls("2002:0808:0808::1"), NET_ADDR_PUBLIC);
}

static void
test_net_addr_not_ip(void **state)
{
	struct sockaddr sa = {.sa_family = AF_UNIX};
	assert_int_equal(net_addr_classify(&sa), NET_ADDR_NOT_IP);
	assert_int_equal(net_addr_classify(NULL), NET_ADDR_NOT_IP);
	assert_string_equal(net_addr_class_name(NET_ADDR_LOOPBACK), "loopback");
	assert_string_equal(net_addr_class_name(NET_ADDR_PUBLIC), "public");
	assert_string_equal(net_addr_class_name((NetAddrClass)99), "?");
}

static void
test_net_addr_cidr_parse(void **state)
{
	NetCidr c;

	assert_int_equal(net_cidr_parse("10.0.0.0/8", &c), 0);
	assert_int_equal(c.family, AF_INET);
	assert_int_equal(c.prefix, 8);
	assert_int_equal(net_cidr_parse("127.0.0.1", &c), 0);
	assert_int_equal(c.prefix, 32);
	assert_int_equal(net_cidr_parse("127.0.0.1/32", &c), 0);
	assert_int_equal(net_cidr_parse("0.0.0.0/0", &c), 0);
	assert_int_equal(net_cidr_parse("fd00::/8", &c), 0);
	assert_int_equal(c.family, AF_INET6);
	assert_int_equal(c.prefix, 8);
	assert_int_equal(net_cidr_parse("::1", &c), 0);
	assert_int_equal(c.prefix, 128);
	assert_int_equal(net_cidr_parse("2002:7f00::/24", &c), 0);
	/* refused */
	const char *bad[] = {"",
			     "/8",
			     "10.0.0.0/",
			     "10.0.0.0/33",
			     "10.0.0.0/08",
			     "10.0.0.0/-1",
			     "10.0.0.0/8x",
			     "10.0.0.1/8", /* host bits */
			     "127.1",
			     "0x7f000001",
			     "10.0.0.0 /8",
			     "localhost",
			     "[::1]",
			     "::1/129",
			     "fe80::1/10",
			     "::ffff:127.0.0.1", /* write 127.0.0.1 */
			     "::ffff:0:0/96",
			     "64:ff9b::a00:1/128",
			     "fe80::1%eth0"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (net_cidr_parse(bad[i], &c) != -EINVAL)
			fail_msg("accepted '%s'", bad[i]);
	assert_int_equal(net_cidr_parse(NULL, &c), -EINVAL);
}

static bool
match(const char *cidr, const char *addr)
{
	struct sockaddr_storage ss = {0};
	NetCidr c;

	assert_int_equal(net_cidr_parse(cidr, &c), 0);
	if (inet_pton(AF_INET, addr, &((struct sockaddr_in *)&ss)->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (inet_pton(AF_INET6, addr, &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	else
		fail_msg("not an address: %s", addr);
	return net_cidr_match(&c, (struct sockaddr *)&ss);
}

static void
test_net_addr_cidr_match(void **state)
{
	assert_true(match("127.0.0.1/32", "127.0.0.1"));
	assert_false(match("127.0.0.1/32", "127.0.0.2"));
	assert_true(match("10.0.0.0/8", "10.200.1.1"));
	assert_false(match("10.0.0.0/8", "11.0.0.1"));
	assert_true(match("172.16.0.0/12", "172.31.0.1"));
	assert_false(match("172.16.0.0/12", "172.32.0.1"));
	assert_true(match("10.1.2.0/23", "10.1.3.255"));
	assert_false(match("10.1.2.0/23", "10.1.4.0"));
	assert_true(match("0.0.0.0/0", "8.8.8.8"));
	/* the IPv4 network covers the mapped form; never the other family */
	assert_true(match("127.0.0.1/32", "::ffff:127.0.0.1"));
	assert_true(match("127.0.0.0/8", "64:ff9b::7f00:5"));
	assert_false(match("127.0.0.1/32", "::1"));
	assert_false(match("::1", "127.0.0.1"));
	assert_false(match("0.0.0.0/0", "fd00::1"));
	assert_true(match("fd00::/8", "fd12::1"));
	assert_false(match("fd00::/8", "fc00::1"));
	assert_true(match("::1", "::1"));
	assert_true(match("fe80::/10", "febf::1"));

	NetCidr list[2];
	struct sockaddr_in in = {.sin_family = AF_INET};
	assert_int_equal(net_cidr_parse("10.0.0.0/8", &list[0]), 0);
	assert_int_equal(net_cidr_parse("169.254.169.254", &list[1]), 0);
	inet_pton(AF_INET, "169.254.169.254", &in.sin_addr);
	assert_true(net_cidr_list_match(list, 2, (struct sockaddr *)&in));
	assert_false(net_cidr_list_match(list, 1, (struct sockaddr *)&in));
	assert_false(net_cidr_list_match(NULL, 0, (struct sockaddr *)&in));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_net_addr_ipv4_classes),
	    cmocka_unit_test(test_net_addr_ipv6_classes),
	    cmocka_unit_test(test_net_addr_ipv6_carrying_ipv4),
	    cmocka_unit_test(test_net_addr_not_ip),
	    cmocka_unit_test(test_net_addr_cidr_parse),
	    cmocka_unit_test(test_net_addr_cidr_match),
	};
	return cmocka_run_group_tests_name("net-addr", tests, NULL, NULL);
}
