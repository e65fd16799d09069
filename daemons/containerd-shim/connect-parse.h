/* SPDX-License-Identifier: MIT */
/*
 * connect-parse.h — the request head of the egress proxy (SANDBOX_PROXY) and
 * its allowlist. Pure functions: no I/O, no logging, no allocation.
 *
 * The proxy speaks exactly one request per connection:
 *     CONNECT host:port HTTP/1.1 CRLF
 *     (header lines CRLF)*
 *     CRLF
 * after which the connection is a byte tunnel. Only the request line matters;
 * the header lines are skipped (Proxy-Authorization is not used: the proxy
 * listens inside one sandbox only). A head larger than CONNECT_HEAD_MAX is
 * refused before it is parsed. http-parser is not used: it rejects nothing we
 * would accept, but also parses bodies, chunking and URLs that a CONNECT-only
 * proxy must refuse anyway, and the request line is the whole job.
 *
 * Allowlist entries are "host" or "host:port" (port 443 when none is given).
 * A host matches an entry when the names are equal ignoring ASCII case and
 * the ports are equal: no wildcards, no suffix matching, no trailing-dot
 * folding. IP literals (dotted or any inet_aton() form such as "127.1" or
 * "0x7f000001", IPv6, bracketed IPv6) are refused whatever the list says:
 * egress goes to names the host resolves, never to addresses the sandbox
 * chooses.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest request head (request line + headers + the blank line), bytes. */
#define CONNECT_HEAD_MAX 8192
/* Longest host name (RFC 1035 text form). */
#define CONNECT_HOST_MAX 253

typedef struct ConnectTarget {
	char host[CONNECT_HOST_MAX + 1]; /* as sent (case kept) */
	uint16_t port;
} ConnectTarget;

/* Find the end of the head in buf[0..len): returns the head's length
 * including the final CRLFCRLF, 0 when more bytes are needed, or -EMSGSIZE
 * when len reached CONNECT_HEAD_MAX without a complete head. */
long connect_head_end(const char *buf, size_t len);

/* Parse a complete head (buf[0..len), as delimited by connect_head_end).
 * Returns 0 and fills *ret for a well-formed CONNECT; -EOPNOTSUPP for a
 * well-formed request with another method (the proxy answers 405);
 * -EBADMSG for anything malformed (400); -EPERM when the target is an IP
 * literal (403). *ret is untouched on failure. */
int connect_parse_head(const char *buf, size_t len, ConnectTarget *ret);

/* Parse "host[:port]" (a CONNECT authority: port required, or an allowlist
 * entry: port optional, default_port when absent; pass 0 to require it).
 * Host: 1..253 bytes of letters, digits, '-' and '.'; or "[v6]" (parsed so
 * that it can be refused as a literal). Returns 0, -EBADMSG, or -EPERM for an
 * IP literal. */
int connect_parse_authority(const char *s, size_t len, uint16_t default_port, ConnectTarget *ret);

/* True when host is an IPv4 (any inet_aton form) or IPv6 literal. */
bool connect_host_is_ip_literal(const char *host);

/* True when t matches one of the n entries (already parsed). */
bool connect_allowed(const ConnectTarget *allow, size_t n, const ConnectTarget *t);
