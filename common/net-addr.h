/* SPDX-License-Identifier: MIT */
/*
 * net-addr.h — what an IP address is (loopback, private, link-local, …) and
 * CIDR lists, for the egress proxy's check after resolution (netfwd.c) and
 * the harness key that lifts it (egress_allow_private, harness-conf.c).
 * Pure functions: no I/O, no logging, no allocation.
 *
 * An address is "special" when it is not a globally routed unicast address:
 * a name on the egress allowlist that resolves to one would reach the host
 * itself or its networks (metadata services, the LAN, other tenants' ports
 * on loopback) instead of the internet. IPv4-mapped (::ffff:a.b.c.d),
 * NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses are judged by the IPv4
 * address they carry; the rest of ::/96 (IPv4-compatible) is reserved.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef enum NetAddrClass {
	NET_ADDR_PUBLIC = 0,   /* none of the below: allowed */
	NET_ADDR_UNSPECIFIED,  /* 0.0.0.0/8 ("this network"), :: */
	NET_ADDR_LOOPBACK,     /* 127.0.0.0/8, ::1 */
	NET_ADDR_LINK_LOCAL,   /* 169.254.0.0/16 (cloud metadata), fe80::/10 */
	NET_ADDR_PRIVATE,      /* 10/8, 172.16/12, 192.168/16, fec0::/10 (site-local) */
	NET_ADDR_SHARED,       /* 100.64.0.0/10 (carrier-grade NAT) */
	NET_ADDR_UNIQUE_LOCAL, /* fc00::/7 */
	NET_ADDR_MULTICAST,    /* 224.0.0.0/4, ff00::/8 */
	NET_ADDR_RESERVED,     /* 192.0.0/24, documentation, benchmarking, 240/4, broadcast,
				* the rest of ::/96, 64:ff9b:1::/48, 100::/64, 2001:db8::/32 */
	NET_ADDR_NOT_IP,       /* neither AF_INET nor AF_INET6 */
	_NET_ADDR_CLASS_MAX,
} NetAddrClass;

/* "loopback", "link-local", …; "public" for NET_ADDR_PUBLIC. */
const char *net_addr_class_name(NetAddrClass c);

/* Classify an IPv4 address (4 bytes, network order) or an IPv6 one (16). */
NetAddrClass net_addr_classify4(const uint8_t a[4]);
NetAddrClass net_addr_classify6(const uint8_t a[16]);
/* Classify sa (AF_INET or AF_INET6; anything else is NET_ADDR_NOT_IP). */
NetAddrClass net_addr_classify(const struct sockaddr *sa);

typedef struct NetCidr {
	int family; /* AF_INET or AF_INET6 */
	uint8_t addr[16];
	unsigned prefix; /* 0..32 or 0..128 */
} NetCidr;

/* Parse "a.b.c.d/n" or "v6addr/n" (dotted quad only: no inet_aton forms; no
 * brackets); a bare address is /32 or /128. Bits past the prefix must be zero
 * ("10.0.0.1/8" is refused: it likely means something else). An IPv4-mapped
 * IPv6 network is refused too (write the IPv4 network: it matches both
 * forms). Returns 0 or -EINVAL. */
int net_cidr_parse(const char *s, NetCidr *ret);

/* True when sa lies in c. An IPv4-mapped/NAT64/6to4 IPv6 address also
 * matches the IPv4 network of the address it carries. */
bool net_cidr_match(const NetCidr *c, const struct sockaddr *sa);
/* True when sa lies in one of the n networks. */
bool net_cidr_list_match(const NetCidr *list, size_t n, const struct sockaddr *sa);
