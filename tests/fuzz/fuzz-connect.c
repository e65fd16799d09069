/* SPDX-License-Identifier: MIT */
/*
 * fuzz-connect.c — libFuzzer target: arbitrary bytes as what a sandbox sends
 * to its egress proxy before the tunnel opens (connect-parse.c, as netfwd.c's
 * head_read_cb uses it). Byte 0 picks the size of the reads; the head is
 * looked for after each one, on at most CONNECT_HEAD_MAX bytes, as netfwd.c
 * does. Besides crashes, checks that:
 *   - connect_head_end() finds the same end whatever the reads were, and the
 *     head it delimits ends in CRLFCRLF;
 *   - an accepted CONNECT has a host of 1..253 letters, digits, '-' and '.',
 *     that is no IP literal, and a port 1..65535, and "host:port" parses back
 *     to the same target;
 *   - the allowlist lets through exactly the entries' names and ports.
 * (The bridge forward has no parser: it splices bytes to a fixed target.)
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "connect-parse.h"

static void
fail(const char *what, const char *host)
{
	fprintf(stderr, "fuzz-connect: %s: %s\n", what, host);
	abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static ConnectTarget allow[3];
	static bool init;
	ConnectTarget t = {0}, t2;
	long end = 0, whole;

	if (!init) {
		if (connect_parse_authority("api.anthropic.com", 17, 443, &allow[0]) < 0 ||
		    connect_parse_authority("Example.COM:8443", 16, 443, &allow[1]) < 0 ||
		    connect_parse_authority("a-b.c", 5, 443, &allow[2]) < 0)
			abort();
		init = true;
	}
	if (size < 1 || size > 2 * CONNECT_HEAD_MAX)
		return 0;
	size_t step = data[0] ? data[0] : size;
	const char *buf = (const char *)data + 1;
	size_t len = size - 1;

	/* as the reads arrive */
	for (size_t have = step < len ? step : len;; have = have + step < len ? have + step : len) {
		size_t look = have < CONNECT_HEAD_MAX ? have : CONNECT_HEAD_MAX;
		end = connect_head_end(buf, look);
		if (end != 0 || have == len)
			break;
	}
	whole = connect_head_end(buf, len < CONNECT_HEAD_MAX ? len : CONNECT_HEAD_MAX);
	if (end != whole && !(end == 0 && whole == 0))
		fail("the head's end depends on the reads", "");
	if (end > 0) {
		if (end < 4 || (size_t)end > len || memcmp(buf + end - 4, "\r\n\r\n", 4) != 0)
			fail("a head that does not end in CRLFCRLF", "");
		int r = connect_parse_head(buf, (size_t)end, &t);
		if (r != 0 && r != -EBADMSG && r != -EOPNOTSUPP && r != -EPERM)
			fail("an unexpected error", "");
		if (r == 0) {
			size_t hl = strnlen(t.host, sizeof(t.host));
			char auth[CONNECT_HOST_MAX + 8];
			if (hl == 0 || hl > CONNECT_HOST_MAX || t.port == 0)
				fail("an empty or long host, or port 0", t.host);
			for (size_t i = 0; i < hl; i++) {
				char c = t.host[i];
				if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				      (c >= '0' && c <= '9') || c == '-' || c == '.'))
					fail("a host with a byte outside [A-Za-z0-9.-]", t.host);
			}
			if (connect_host_is_ip_literal(t.host))
				fail("an IP literal accepted", t.host);
			int n = snprintf(auth, sizeof(auth), "%s:%u", t.host, t.port);
			if (connect_parse_authority(auth, (size_t)n, 0, &t2) != 0 ||
			    strcmp(t2.host, t.host) != 0 || t2.port != t.port)
				fail("host:port does not parse back", auth);
			bool ok = connect_allowed(allow, 3, &t), want = false;
			for (size_t i = 0; i < 3; i++)
				want |= allow[i].port == t.port &&
					strcasecmp(allow[i].host, t.host) == 0;
			if (ok != want)
				fail("the allowlist disagrees", t.host);
		}
	}
	/* the same bytes as an authority ("host[:port]"), with and without a default port */
	if (len <= CONNECT_HOST_MAX + 16) {
		char *s = strndup(buf, len);
		if (!s)
			abort();
		size_t sl = strlen(s);
		if (connect_parse_authority(s, sl, 443, &t2) == 0 &&
		    connect_host_is_ip_literal(t2.host))
			fail("an IP literal accepted as an authority", t2.host);
		(void)connect_parse_authority(s, sl, 0, &t2);
		free(s);
	}
	return 0;
}
