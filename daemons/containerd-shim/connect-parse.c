/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "connect-parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>

long
connect_head_end(const char *buf, size_t len)
{
	size_t n = len < CONNECT_HEAD_MAX ? len : CONNECT_HEAD_MAX;

	for (size_t i = 3; i < n; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' &&
		    buf[i - 3] == '\r')
			return (long)(i + 1);
	return len >= CONNECT_HEAD_MAX ? -EMSGSIZE : 0;
}

bool
connect_host_is_ip_literal(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;
	const char *last;
	bool digits = false;

	if (inet_pton(AF_INET6, host, &a6) == 1 || inet_aton(host, &a4) != 0)
		return true;
	/* "999.1.1.1", "1.2.3.4.5": not valid addresses, but no name either (no top
	 * level label is numeric) — some resolver might still take them for one. */
	last = strrchr(host, '.');
	last = last ? last + 1 : host;
	for (; *last; last++) {
		if (*last < '0' || *last > '9')
			return false;
		digits = true;
	}
	return digits;
}

static int
parse_port(const char *s, size_t len, uint16_t *ret)
{
	unsigned v = 0;

	if (len == 0 || len > 5)
		return -EBADMSG;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EBADMSG;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -EBADMSG;
	*ret = (uint16_t)v;
	return 0;
}

int
connect_parse_authority(const char *s, size_t len, uint16_t default_port, ConnectTarget *ret)
{
	const char *colon = NULL;
	size_t hlen;
	uint16_t port = default_port;
	char host[CONNECT_HOST_MAX + 1];

	if (len == 0 || len > CONNECT_HOST_MAX + 7)
		return -EBADMSG;
	if (s[0] == '[') {
		/* A bracketed IPv6 literal: parsed only to be refused as one. */
		const char *close = memchr(s, ']', len);
		char v6[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;
		if (!close || (size_t)(close - s - 1) >= sizeof(v6))
			return -EBADMSG;
		memcpy(v6, s + 1, (size_t)(close - s - 1));
		v6[close - s - 1] = '\0';
		return inet_pton(AF_INET6, v6, &a6) == 1 ? -EPERM : -EBADMSG;
	}
	for (size_t i = 0; i < len; i++)
		if (s[i] == ':') {
			if (colon) {
				/* more than one colon: an unbracketed IPv6 literal, or junk */
				char v6[INET6_ADDRSTRLEN + 8];
				struct in6_addr a6;
				size_t l2 = len < sizeof(v6) ? len : sizeof(v6) - 1;
				memcpy(v6, s, l2);
				v6[l2] = '\0';
				if (inet_pton(AF_INET6, v6, &a6) == 1)
					return -EPERM;
				/* the port cut off ("v6:port"); a colon beyond the copy
				 * leaves none in it, and that is no IPv6 literal */
				char *lc = strrchr(v6, ':');
				if (!lc)
					return -EBADMSG;
				*lc = '\0';
				return inet_pton(AF_INET6, v6, &a6) == 1 ? -EPERM : -EBADMSG;
			}
			colon = s + i;
		}
	hlen = colon ? (size_t)(colon - s) : len;
	if (colon) {
		if (parse_port(colon + 1, len - hlen - 1, &port) < 0)
			return -EBADMSG;
	} else if (default_port == 0)
		return -EBADMSG;
	if (hlen == 0 || hlen > CONNECT_HOST_MAX)
		return -EBADMSG;
	for (size_t i = 0; i < hlen; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '.'))
			return -EBADMSG;
	}
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	if (connect_host_is_ip_literal(host))
		return -EPERM;
	memcpy(ret->host, host, hlen + 1);
	ret->port = port;
	return 0;
}

int
connect_parse_head(const char *buf, size_t len, ConnectTarget *ret)
{
	const char *end = buf + len, *p = buf, *eol, *sp1, *sp2;
	bool is_connect;
	int r;

	if (len < 4 || len > CONNECT_HEAD_MAX || memchr(buf, '\0', len) ||
	    memcmp(end - 4, "\r\n\r\n", 4) != 0)
		return -EBADMSG;
	eol = memchr(p, '\r', len);
	if (!eol || eol + 1 >= end || eol[1] != '\n')
		return -EBADMSG;
	/* request line: METHOD SP TARGET SP HTTP/1.x */
	sp1 = memchr(p, ' ', (size_t)(eol - p));
	if (!sp1 || sp1 == p)
		return -EBADMSG;
	sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (!sp2 || sp2 == sp1 + 1)
		return -EBADMSG;
	for (const char *q = p; q < sp1; q++)
		if (*q < 'A' || *q > 'Z')
			return -EBADMSG;
	if ((size_t)(eol - sp2 - 1) != 8 ||
	    (memcmp(sp2 + 1, "HTTP/1.1", 8) != 0 && memcmp(sp2 + 1, "HTTP/1.0", 8) != 0))
		return -EBADMSG;
	for (const char *q = sp1 + 1; q < sp2; q++)
		if (*q == ' ' || (unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e)
			return -EBADMSG;
	is_connect = (size_t)(sp1 - p) == 7 && memcmp(p, "CONNECT", 7) == 0;
	/* header lines: "name: value", no obs-fold, no bare CR or LF */
	for (p = eol + 2; p < end - 2; p = eol + 2) {
		const char *colon;
		eol = memchr(p, '\r', (size_t)(end - p));
		if (!eol || eol[1] != '\n' || memchr(p, '\n', (size_t)(eol - p)))
			return -EBADMSG;
		colon = memchr(p, ':', (size_t)(eol - p));
		if (!colon || colon == p || *p == ' ' || *p == '\t')
			return -EBADMSG;
	}
	if (!is_connect)
		return -EOPNOTSUPP;
	ConnectTarget t;
	r = connect_parse_authority(sp1 + 1, (size_t)(sp2 - sp1 - 1), 0, &t);
	if (r < 0)
		return r;
	*ret = t;
	return 0;
}

bool
connect_allowed(const ConnectTarget *allow, size_t n, const ConnectTarget *t)
{
	for (size_t i = 0; i < n; i++)
		if (allow[i].port == t->port && strcasecmp(allow[i].host, t->host) == 0)
			return true;
	return false;
}
