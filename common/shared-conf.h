/* SPDX-License-Identifier: MIT */
/*
 * shared-conf.h — the [runwarden] section, read by every daemon.
 * Each daemon embeds a SharedConf in its config struct and lists
 * CONF_SHARED_ITEMS(ItsType, member) in its ConfItem table.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "cluster-conf.h"
#include "conf-parser.h"

typedef struct SharedConf {
	char *runtime_dir; /* Unix sockets live here */
	char *state_dir;   /* LMDB, sandboxes */
	int log_level;
	int64_t max_frame;   /* largest IPC frame accepted, bytes */
	ClusterConf cluster; /* [cluster]: cluster-conf.h */
} SharedConf;

#define RW_DEFAULT_CONF SYSCONFDIR "/runwarden/runwarden.conf"

#define CONF_SHARED_ITEMS(T, m)                                                                    \
	{"runwarden",                                                                              \
	 "runtime_dir",                                                                            \
	 CONF_STR,                                                                                 \
	 offsetof(T, m.runtime_dir),                                                               \
	 "/run/runwarden",                                                                         \
	 0,                                                                                        \
	 0,                                                                                        \
	 "directory of the daemons' Unix sockets"},                                                \
	    {"runwarden",                                                                          \
	     "state_dir",                                                                          \
	     CONF_STR,                                                                             \
	     offsetof(T, m.state_dir),                                                             \
	     "/var/lib/runwarden",                                                                 \
	     0,                                                                                    \
	     0,                                                                                    \
	     "durable state: run log (LMDB) and sandbox workspaces"},                              \
	    {"runwarden", "log_level", CONF_LEVEL, offsetof(T, m.log_level),                       \
	     "info",	  0,	       0,	   "debug, info, notice, warning or error"},       \
	    {"runwarden",                                                                          \
	     "max_frame",                                                                          \
	     CONF_SIZE,                                                                            \
	     offsetof(T, m.max_frame),                                                             \
	     "16M",                                                                                \
	     4096,                                                                                 \
	     1024LL * 1024 * 1024,                                                                 \
	     "largest frame accepted between daemons"},                                            \
	    CONF_CLUSTER_ITEMS(T, m.cluster)

/* [cluster] (docs/CLUSTER.md); part of CONF_SHARED_ITEMS. */
#define CONF_CLUSTER_ITEMS(T, m)                                                                   \
	{"cluster",                                                                                \
	 "nats",                                                                                   \
	 CONF_STR,                                                                                 \
	 offsetof(T, m.nats),                                                                      \
	 "",                                                                                       \
	 0,                                                                                        \
	 0,                                                                                        \
	 "NATS JetStream servers, comma-separated nats://HOST:PORT or tls://HOST:PORT URLs; "      \
	 "empty = single-host mode (no cluster)",                                                  \
	 NULL,                                                                                     \
	 cluster_conf_valid_urls,                                                                  \
	 CLUSTER_CONF_URLS_EXPECTED},                                                              \
	    {"cluster",                                                                            \
	     "node",                                                                               \
	     CONF_STR,                                                                             \
	     offsetof(T, m.node),                                                                  \
	     "",                                                                                   \
	     0,                                                                                    \
	     0,                                                                                    \
	     "this node's unique name; empty = the host name (up to its first '.')",               \
	     NULL,                                                                                 \
	     cluster_conf_valid_node,                                                              \
	     CLUSTER_CONF_NODE_EXPECTED},                                                          \
	    {"cluster",                                                                            \
	     "replicas",                                                                           \
	     CONF_INT,                                                                             \
	     offsetof(T, m.replicas),                                                              \
	     "3",                                                                                  \
	     1,                                                                                    \
	     5,                                                                                    \
	     "JetStream replicas of the run stream and the KV buckets (an event is acknowledged "  \
	     "once a majority of them stored it)"},                                                \
	    {"cluster", "creds",                                                                   \
	     CONF_STR,	offsetof(T, m.creds),                                                      \
	     "",	0,                                                                         \
	     0,		"NATS credentials file (user JWT and nkey seed); empty = none"},           \
	    {"cluster",                                                                            \
	     "tls_ca",                                                                             \
	     CONF_STR,                                                                             \
	     offsetof(T, m.tls_ca),                                                                \
	     "",                                                                                   \
	     0,                                                                                    \
	     0,                                                                                    \
	     "CA certificates (PEM file) the NATS servers' certificates must chain to; "           \
	     "empty = the system's"},                                                              \
	    {"cluster",                                                                            \
	     "tls_cert",                                                                           \
	     CONF_STR,                                                                             \
	     offsetof(T, m.tls_cert),                                                              \
	     "",                                                                                   \
	     0,                                                                                    \
	     0,                                                                                    \
	     "client certificate chain (PEM file) presented to the NATS servers; with tls_key"},   \
	    {"cluster", "tls_key", CONF_STR, offsetof(T, m.tls_key),                               \
	     "",	0,	   0,	     "private key (PEM file) of tls_cert"},                \
	    {"cluster", "heartbeat_ms",                                                            \
	     CONF_INT,	offsetof(T, m.heartbeat_ms),                                               \
	     "1000",	100,                                                                       \
	     60000,	"how often this node refreshes its key in the rw_nodes bucket"},           \
	    {"cluster",                                                                            \
	     "node_ttl_ms",                                                                        \
	     CONF_INT,                                                                             \
	     offsetof(T, m.node_ttl_ms),                                                           \
	     "10000",                                                                              \
	     1000,                                                                                 \
	     3600000,                                                                              \
	     "age of rw_nodes keys: a node silent this long is lost and its threads may "          \
	     "be taken "                                                                           \
	     "over; at least 3 x heartbeat_ms"},                                                   \
	    {"cluster",                                                                            \
	     "loop_stall_max_ms",                                                                  \
	     CONF_INT,                                                                             \
	     offsetof(T, m.loop_stall_max_ms),                                                     \
	     "0",                                                                                  \
	     0,                                                                                    \
	     3600000,                                                                              \
	     "heartbeats go from a thread of their own, so a busy event loop does not lose the "   \
	     "node; a loop that made no progress this long stops them (the node is lost "          \
	     "node_ttl_ms later, as a crashed one); 0 = 3 x node_ttl_ms, else at least 2 x "       \
	     "heartbeat_ms"},                                                                      \
	    {"cluster",                                                                            \
	     "ping_interval_ms",                                                                   \
	     CONF_INT,                                                                             \
	     offsetof(T, m.ping_interval_ms),                                                      \
	     "0",                                                                                  \
	     0,                                                                                    \
	     600000,                                                                               \
	     "how often each NATS connection pings its server; a server that answered none "       \
	     "of max_pings_out + 1 pings is left for another of the list (a cut-off server "       \
	     "keeps the socket open); 0 = node_ttl_ms / (2 x (max_pings_out + 1)), at least "      \
	     "2 s: a dead connection left within half the TTL"},                                   \
	    {"cluster", "max_pings_out",                                                           \
	     CONF_INT,	offsetof(T, m.max_pings_out),                                              \
	     "2",	1,                                                                         \
	     10,	"pings a NATS connection may leave unanswered before it is left"},         \
	{                                                                                          \
		"cluster", "max_runs", CONF_INT, offsetof(T, m.max_runs), "0", 0, 1000000,         \
		    "capacity of this node: with this many runs not done here, a new thread's "    \
		    "first run is placed on the live node with the fewest runs that has room "     \
		    "(per the heartbeats) and forwarded there; 0 = no limit (a new thread stays "  \
		    "on the node its request reached)"                                             \
	}

/* Socket paths inside runtime_dir. */
#define RW_SOCK_COORD "coordinatord.sock"
#define RW_SOCK_SHIM "containerd-shim.sock"
/* routerd's bridge-only socket: where the shim's bridge forwards lead */
#define RW_SOCK_BRIDGE "bridge.sock"
/* the shim's preview socket: routerd's way into a sandbox's loopback ports */
#define RW_SOCK_PREVIEW "preview.sock"
