/* SPDX-License-Identifier: MIT */
/*
 * cluster-version.c — the version of the nats-server a node connected to,
 * checked before the stream and buckets are ensured (issue 35 G;
 * docs/CLUSTER.md "nats-server versions").
 *
 * libnats keeps the server's INFO to itself, so the INFO line is read again
 * over a plain TCP connection to the connected URL: a server sends it first,
 * in clear text, also when TLS follows (nats-server 2.9; a server with TLS
 * "handshake_first" sends nothing in clear: the version is then unknown, and
 * only logged so). Older than CLUSTER_NATS_MIN: the cluster fails
 * (-EPROTONOSUPPORT), since what runwarden relies on (direct gets, KV
 * creates, per-subject limits) is not there. Older than
 * CLUSTER_NATS_RECOMMENDED: a warning (its replicas can diverge: issue 35 G).
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

#define INFO_WAIT_MS 2000

/* "scheme://[user@]host:port" → host and port. */
static int
split_url(const char *url, char *host, size_t hl, char *port, size_t pl)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	const char *at = strrchr(p, '@');
	if (at)
		p = at + 1;
	const char *colon = strrchr(p, ':');
	const char *end = p + strcspn(p, "/");
	if (!colon || colon > end || (size_t)(colon - p) >= hl || (size_t)(end - colon - 1) >= pl)
		return -EINVAL;
	snprintf(host, hl, "%.*s", (int)(colon - p), p);
	if (host[0] == '[') { /* [v6] */
		memmove(host, host + 1, strlen(host));
		host[strcspn(host, "]")] = '\0';
	}
	snprintf(port, pl, "%.*s", (int)(end - colon - 1), colon + 1);
	return 0;
}

/* The INFO line's "version" of the server at url, into buf. */
static int
read_version(const char *url, char *buf, size_t len)
{
	char host[256], port[16], line[4096];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int r = split_url(url, host, sizeof(host), port, sizeof(port));
	if (r < 0)
		return r;
	hints.ai_flags = AI_NUMERICSERV;
	if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
		return -EHOSTUNREACH;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		r = -errno;
		freeaddrinfo(ai);
		if (fd >= 0)
			close(fd);
		return r;
	}
	freeaddrinfo(ai);
	size_t n = 0;
	r = -ETIMEDOUT;
	while (n < sizeof(line) - 1) {
		struct pollfd pfd = {fd, POLLIN, 0};
		if (poll(&pfd, 1, INFO_WAIT_MS) <= 0)
			break;
		ssize_t k = read(fd, line + n, sizeof(line) - 1 - n);
		if (k <= 0) {
			r = -ECONNRESET;
			break;
		}
		n += (size_t)k;
		line[n] = '\0';
		if (strchr(line, '\n')) {
			r = 0;
			break;
		}
	}
	close(fd);
	if (r < 0)
		return r;
	if (strncmp(line, "INFO ", 5) != 0)
		return -EPROTO;
	json_t *j = json_loads(line + 5, JSON_DISABLE_EOF_CHECK, NULL);
	const char *v = json_string_value(json_object_get(j, "version"));
	if (v)
		snprintf(buf, len, "%s", v);
	json_decref(j);
	return v ? 0 : -EPROTO;
}

/* -1, 0, 1 as version a is older than, the same as, newer than b ("x.y.z"). */
int
cluster_version_cmp(const char *a, const char *b)
{
	for (int i = 0; i < 3; i++) {
		long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);
		if (x != y)
			return x < y ? -1 : 1;
		a += *a == '.';
		b += *b == '.';
	}
	return 0;
}

int
cluster_check_server_version(Cluster *c)
{
	char url[512], v[64];
	cluster_connected_url(c, url, sizeof(url));
	if (!url[0])
		return 0; /* not connected now: the next start checks */
	int r = read_version(url, v, sizeof(v));
	if (r < 0) {
		log_warning_errno(r, "cluster: version of the nats-server at %s unknown: %m", url);
		return 0;
	}
	if (cluster_version_cmp(v, CLUSTER_NATS_MIN) < 0)
		return log_error_errno(SYNTHETIC_ERRNO(EPROTONOSUPPORT),
				       "cluster: nats-server %s at %s is older than %s, the "
				       "minimum (docs/CLUSTER.md \"nats-server versions\")",
				       v, url, CLUSTER_NATS_MIN);
	if (cluster_version_cmp(v, CLUSTER_NATS_RECOMMENDED) < 0)
		log_warning("cluster: nats-server %s at %s: older than %s, whose stream replicas "
			    "were not seen to diverge under network partitions (this one's can: "
			    "docs/CLUSTER.md \"nats-server versions\")",
			    v, url, CLUSTER_NATS_RECOMMENDED);
	else
		log_info("cluster: nats-server %s at %s", v, url);
	return 0;
}
