/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "cluster-conf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "strv.h"

static bool
node_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
	       ch == '-' || ch == '_';
}

bool
cluster_conf_valid_node(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!node_char(s[i]))
			return false;
	return true;
}

/* One URL: scheme nats:// or tls://, optional USER@ (no ':' password: a
 * secret does not belong in a config file read by three daemons and echoed
 * in errors), a host (name, IPv4 or [IPv6]) and a numeric port. */
static bool
valid_url(const char *u)
{
	const char *p;
	if (strncmp(u, "nats://", 7) == 0)
		p = u + 7;
	else if (strncmp(u, "tls://", 6) == 0)
		p = u + 6;
	else
		return false;
	const char *at = strchr(p, '@');
	if (at) {
		if (memchr(p, ':', (size_t)(at - p)) || at == p)
			return false;
		p = at + 1;
	}
	const char *colon;
	if (*p == '[') {
		const char *close = strchr(p, ']');
		if (!close || close[1] != ':')
			return false;
		colon = close + 1;
	} else {
		colon = strrchr(p, ':');
		if (!colon || colon == p)
			return false;
		for (const char *h = p; h < colon; h++)
			if (!(node_char(*h) || *h == '.'))
				return false;
	}
	char *end;
	long port = strtol(colon + 1, &end, 10);
	return colon[1] && !*end && port > 0 && port < 65536;
}

bool
cluster_conf_valid_urls(const char *s)
{
	_cleanup_free_ char *copy = strdup(s);
	char *save = NULL;
	size_t n = 0;
	if (!copy)
		return false;
	for (char *w = strtok_r(copy, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
		if (!valid_url(w))
			return false;
		n++;
	}
	return n > 0;
}

int
cluster_conf_urls(const ClusterConf *c, char ***ret)
{
	_cleanup_free_ char *copy = strdup(c->nats ? c->nats : "");
	char **v = NULL, *save = NULL;
	if (!copy)
		return -ENOMEM;
	for (char *w = strtok_r(copy, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save))
		if (strv_push(&v, w) < 0) {
			strv_free(v);
			return -ENOMEM;
		}
	if (!v)
		return -EINVAL;
	*ret = v;
	return 0;
}

static bool
set(const char *s)
{
	return s && *s;
}

int
cluster_conf_check(const ClusterConf *c)
{
	if (set(c->tls_cert) != set(c->tls_key))
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "cluster.tls_cert and cluster.tls_key go together: set both "
				       "or neither");
	if (c->node_ttl_ms < 3 * c->heartbeat_ms)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "cluster.node_ttl_ms (%lld) must be at least 3 × "
				       "cluster.heartbeat_ms (%lld)",
				       (long long)c->node_ttl_ms, (long long)c->heartbeat_ms);
	if (c->loop_stall_max_ms != 0 && c->loop_stall_max_ms < 2 * c->heartbeat_ms)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "cluster.loop_stall_max_ms (%lld) must be 0 or at least 2 × "
				       "cluster.heartbeat_ms (%lld)",
				       (long long)c->loop_stall_max_ms, (long long)c->heartbeat_ms);
	if (c->ping_interval_ms * (c->max_pings_out + 1) >= c->node_ttl_ms)
		log_warning("cluster.ping_interval_ms (%lld) × (cluster.max_pings_out (%lld) + "
			    "1) is not under cluster.node_ttl_ms (%lld): a node whose server "
			    "goes silent is lost before it leaves that server",
			    (long long)c->ping_interval_ms, (long long)c->max_pings_out,
			    (long long)c->node_ttl_ms);
	if (!cluster_conf_enabled(c) &&
	    (set(c->creds) || set(c->tls_ca) || set(c->tls_cert) || set(c->node)))
		log_warning("[cluster] has keys but no 'nats': cluster mode is off");
	return 0;
}

int
cluster_conf_node_name(const ClusterConf *c, char *buf, size_t len)
{
	if (set(c->node)) {
		if (strlen(c->node) >= len)
			return -ENAMETOOLONG;
		strcpy(buf, c->node);
		return 0;
	}
	char host[256];
	if (gethostname(host, sizeof(host)) < 0)
		return -errno;
	host[sizeof(host) - 1] = 0;
	host[strcspn(host, ".")] = 0;
	for (char *h = host; *h; h++)
		if (!node_char(*h))
			*h = '-';
	if (!host[0] || strlen(host) >= len || strlen(host) > 64)
		return -EINVAL;
	strcpy(buf, host);
	return 0;
}
