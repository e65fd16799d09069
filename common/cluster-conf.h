/* SPDX-License-Identifier: MIT */
/*
 * cluster-conf.h — the [cluster] section (docs/CLUSTER.md), read by every
 * daemon through CONF_SHARED_ITEMS (shared-conf.h).
 *
 * Without `nats` the section is inert: runwarden is the single-host product.
 * The table checks each value with its file:line (URL syntax, node name
 * characters, ranges); cluster_conf_check() checks what spans keys and is
 * called by each daemon's *_conf_load() after the files are layered.
 *
 * This file has no libnats dependency: it is part of libcommon, so that every
 * daemon validates the section whether or not it links the cluster library
 * (daemons/coordinatord/cluster/, which turns it into ClusterOptions).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ClusterConf {
	char *nats;		   /* comma-separated nats:// or tls:// URLs; "" = no cluster */
	char *node;		   /* this node's name; "" = the host name */
	int64_t replicas;	   /* JetStream replicas of the stream and buckets */
	char *creds;		   /* NATS credentials file (JWT + nkey seed), or "" */
	char *tls_ca;		   /* CA bundle to verify the servers, or "" */
	char *tls_cert;		   /* client certificate chain (PEM), or "" */
	char *tls_key;		   /* its private key (PEM), or "" */
	int64_t heartbeat_ms;	   /* period of this node's rw_nodes put */
	int64_t node_ttl_ms;	   /* rw_nodes bucket TTL: a silent node is lost after it */
	int64_t loop_stall_max_ms; /* no loop progress this long: heartbeats stop; 0 = 3 × TTL */
	int64_t ping_interval_ms;  /* client pings; 0 = node_ttl_ms / (2 × (max_pings_out + 1)) */
	int64_t max_pings_out;	   /* unanswered pings before a connection is left */
	int64_t max_runs; /* runs not done past which new threads go elsewhere; 0 = no limit */
} ClusterConf;

/* Table validators (ConfItem.valid, CONF_STR). */
bool cluster_conf_valid_urls(const char *s);
bool cluster_conf_valid_node(const char *s);

/* The table's "expected" texts, shared with the tests. */
#define CLUSTER_CONF_URLS_EXPECTED                                                                 \
	"expected comma-separated nats://HOST:PORT or tls://HOST:PORT URLs (optionally "           \
	"USER@HOST; no password in the URL, use creds)"
#define CLUSTER_CONF_NODE_EXPECTED                                                                 \
	"expected 1 to 64 characters among A-Z a-z 0-9 - _ (a NATS subject token and KV key)"

/* Whether the section turns cluster mode on (nats set). */
static inline bool
cluster_conf_enabled(const ClusterConf *c)
{
	return c->nats && c->nats[0];
}

/* A node name's size, its NUL included (cluster_conf_node_name()). */
#define CLUSTER_NODE_NAME_MAX 65

/* Keys that bound each other: tls_cert and tls_key together; node_ttl_ms at
 * least 3 × heartbeat_ms (two missed beats are not a loss); loop_stall_max_ms
 * 0 or at least 2 × heartbeat_ms (the loop ticks every heartbeat_ms); a warning
 * when ping_interval_ms × (max_pings_out + 1) reaches node_ttl_ms. 0, or
 * -EINVAL after logging "cluster.KEY: reason". */
int cluster_conf_check(const ClusterConf *c);

/* This node's name: node, or the host name cut at its first '.' (with
 * characters a KV key refuses turned into '-'). 0 or a negative errno. */
int cluster_conf_node_name(const ClusterConf *c, char *buf, size_t len);

/* Split nats into a NULL-terminated vector of URLs (caller frees with
 * strv_free()). 0 or -ENOMEM/-EINVAL. */
int cluster_conf_urls(const ClusterConf *c, char ***ret);
