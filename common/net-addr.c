/* SPDX-License-Identifier: MIT */
/*
 * net-addr.c — address classes and CIDR lists (see net-addr.h).
 */
#include "config.h"

#include "net-addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

static const char *const class_names[_NET_ADDR_CLASS_MAX] = {
    [NET_ADDR_PUBLIC] = "public",
    [NET_ADDR_UNSPECIFIED] = "unspecified",
    [NET_ADDR_LOOPBACK] = "loopback",
    [NET_ADDR_LINK_LOCAL] = "link-local",
    [NET_ADDR_PRIVATE] = "private",
    [NET_ADDR_SHARED] = "shared (CGNAT)",
    [NET_ADDR_UNIQUE_LOCAL] = "unique-local",
    [NET_ADDR_MULTICAST] = "multicast",
    [NET_ADDR_RESERVED] = "reserved",
    [NET_ADDR_NOT_IP] = "not IP",
};

const char *
net_addr_class_name(NetAddrClass c)
{
	return (unsigned)c < _NET_ADDR_CLASS_MAX ? class_names[c] : "?";
}

/* The first `bits` bits of a and b are equal. */
static bool
prefix_eq(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned bytes = bits / 8, rest = bits % 8;

	if (memcmp(a, b, bytes) != 0)
		return false;
	if (rest == 0)
		return true;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));
	return (a[bytes] & mask) == (b[bytes] & mask);
}

typedef struct Range4 {
	uint8_t net[4];
	unsigned prefix;
	NetAddrClass cls;
} Range4;

/* RFC 6890 and its updates; first match wins. */
static const Range4 ranges4[] = {
    {{0, 0, 0, 0}, 8, NET_ADDR_UNSPECIFIED},
    {{10, 0, 0, 0}, 8, NET_ADDR_PRIVATE},
    {{100, 64, 0, 0}, 10, NET_ADDR_SHARED},
    {{127, 0, 0, 0}, 8, NET_ADDR_LOOPBACK},
    {{169, 254, 0, 0}, 16, NET_ADDR_LINK_LOCAL},
    {{172, 16, 0, 0}, 12, NET_ADDR_PRIVATE},
    {{192, 0, 0, 0}, 24, NET_ADDR_RESERVED},   /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24, NET_ADDR_RESERVED},   /* TEST-NET-1 */
    {{192, 88, 99, 0}, 24, NET_ADDR_RESERVED}, /* 6to4 relay anycast (deprecated) */
    {{192, 168, 0, 0}, 16, NET_ADDR_PRIVATE},
    {{198, 18, 0, 0}, 15, NET_ADDR_RESERVED},	/* benchmarking */
    {{198, 51, 100, 0}, 24, NET_ADDR_RESERVED}, /* TEST-NET-2 */
    {{203, 0, 113, 0}, 24, NET_ADDR_RESERVED},	/* TEST-NET-3 */
    {{224, 0, 0, 0}, 4, NET_ADDR_MULTICAST},
    {{240, 0, 0, 0}, 4, NET_ADDR_RESERVED}, /* and 255.255.255.255 */
};

NetAddrClass
net_addr_classify4(const uint8_t a[4])
{
	for (size_t i = 0; i < sizeof(ranges4) / sizeof(ranges4[0]); i++)
		if (prefix_eq(a, ranges4[i].net, ranges4[i].prefix))
			return ranges4[i].cls;
	return NET_ADDR_PUBLIC;
}

/* The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4): true and *ret. */
static bool
embedded4(const uint8_t a[16], uint8_t ret[4])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};

	if (memcmp(a, mapped, 12) == 0 || memcmp(a, nat64, 12) == 0) {
		memcpy(ret, a + 12, 4);
		return true;
	}
	if (a[0] == 0x20 && a[1] == 0x02) { /* 2002:AABB:CCDD::/48 */
		memcpy(ret, a + 2, 4);
		return true;
	}
	return false;
}

NetAddrClass
net_addr_classify6(const uint8_t a[16])
{
	static const uint8_t zero[16] = {0};
	static const uint8_t nat64_local[6] = {0, 0x64, 0xff, 0x9b, 0, 1};
	static const uint8_t discard[8] = {0x01, 0x00};
	static const uint8_t doc[4] = {0x20, 0x01, 0x0d, 0xb8};
	uint8_t v4[4];

	if (memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1))
		return a[15] == 0 ? NET_ADDR_UNSPECIFIED : NET_ADDR_LOOPBACK;
	if (embedded4(a, v4))
		return net_addr_classify4(v4);
	if (memcmp(a, zero, 12) == 0) /* IPv4-compatible (deprecated) */
		return NET_ADDR_RESERVED;
	if (a[0] == 0xff)
		return NET_ADDR_MULTICAST;
	if ((a[0] & 0xfe) == 0xfc)
		return NET_ADDR_UNIQUE_LOCAL;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
		return NET_ADDR_LINK_LOCAL;
	if (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0)
		return NET_ADDR_PRIVATE; /* site-local (deprecated) */
	if (prefix_eq(a, nat64_local, 48) || prefix_eq(a, discard, 64) || prefix_eq(a, doc, 32))
		return NET_ADDR_RESERVED;
	return NET_ADDR_PUBLIC;
}

NetAddrClass
net_addr_classify(const struct sockaddr *sa)
{
	if (!sa)
		return NET_ADDR_NOT_IP;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		return net_addr_classify4((const uint8_t *)&in->sin_addr);
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		return net_addr_classify6(in6->sin6_addr.s6_addr);
	}
	return NET_ADDR_NOT_IP;
}

int
net_cidr_parse(const char *s, NetCidr *ret)
{
	char buf[INET6_ADDRSTRLEN + 8];
	const char *slash;
	unsigned long prefix;
	NetCidr c = {0};
	size_t alen;
	char *end;
	uint8_t v4[4];

	if (!s)
		return -EINVAL;
	slash = strchr(s, '/');
	alen = slash ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= INET6_ADDRSTRLEN)
		return -EINVAL;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	/* inet_pton(AF_INET) takes the dotted quad only, never "127.1" or hex */
	if (inet_pton(AF_INET, buf, c.addr) == 1)
		c.family = AF_INET;
	else if (inet_pton(AF_INET6, buf, c.addr) == 1)
		c.family = AF_INET6;
	else
		return -EINVAL;
	if (c.family == AF_INET6 && embedded4(c.addr, v4) &&
	    !(c.addr[0] == 0x20 && c.addr[1] == 0x02))
		return -EINVAL; /* ::ffff:… or 64:ff9b::…: write the IPv4 network */
	c.prefix = c.family == AF_INET ? 32 : 128;
	if (slash) {
		const char *p = slash + 1;
		if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] != '\0'))
			return -EINVAL;
		errno = 0;
		prefix = strtoul(p, &end, 10);
		if (errno || *end || prefix > c.prefix)
			return -EINVAL;
		c.prefix = (unsigned)prefix;
	}
	/* host bits must be zero */
	for (unsigned bit = c.prefix; bit < (c.family == AF_INET ? 32u : 128u); bit++)
		if (c.addr[bit / 8] & (0x80 >> (bit % 8)))
			return -EINVAL;
	*ret = c;
	return 0;
}

bool
net_cidr_match(const NetCidr *c, const struct sockaddr *sa)
{
	const uint8_t *a;
	uint8_t v4[4];

	if (sa->sa_family == AF_INET) {
		a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
		return c->family == AF_INET && prefix_eq(a, c->addr, c->prefix);
	}
	if (sa->sa_family != AF_INET6)
		return false;
	a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
	if (c->family == AF_INET6)
		return prefix_eq(a, c->addr, c->prefix);
	return embedded4(a, v4) && prefix_eq(v4, c->addr, c->prefix);
}

bool
net_cidr_list_match(const NetCidr *list, size_t n, const struct sockaddr *sa)
{
	for (size_t i = 0; i < n; i++)
		if (net_cidr_match(&list[i], sa))
			return true;
	return false;
}
