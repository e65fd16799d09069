/* SPDX-License-Identifier: MIT */
/*
 * cluster-internal.h — shared by the files of daemons/coordinatord/cluster/ only.
 *
 * Three queues of Jobs: two work lanes (each run by a worker thread of its
 * own: exec, which may block on NATS) — the main lane, in submission order,
 * and the read lane for reads of runs' events that depend on nothing else
 * (cluster_read_events, cluster_run_last), so that a tail's first reads do
 * not wait behind a consumer's creation or a bucket's listing — and the done
 * queue (run by the loop thread: done, which calls the user's callback and
 * frees the job). A job without exec goes
 * straight to the done queue (acknowledgements, watch entries, posted from
 * libnats threads). When c->closing, done only frees.
 */
#pragma once

#include <nats/nats.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cluster.h"
#include "time-util.h"

typedef struct Job Job;
struct Job {
	Job *next;
	void (*exec)(Cluster *c, Job *j); /* worker thread; NULL = none */
	void (*done)(Cluster *c, Job *j); /* loop thread; frees j */
};

/* The done queue: filled by any thread, run by the loop. libnats' delivery
 * threads post to it through their closure; it outlives its Cluster (closed,
 * then kept on a list for the process's life) so that a delivery thread
 * still returning from a handler after cluster_free() finds it closed and
 * drops its job, instead of touching freed memory. */
typedef struct Mailbox Mailbox;
struct Mailbox {
	pthread_mutex_t lock;
	Job *head, **tail;
	int efd;
	bool closed;
	Mailbox *next_dead;
};
void mailbox_post(Mailbox *mb, Job *j); /* any thread; frees j when closed */

typedef struct ClusterPub ClusterPub;
typedef struct NodeSeen NodeSeen;

struct Cluster {
	struct event_base *base;
	char node[CLUSTER_NODE_MAX];
	/* this Cluster's writer id: header Rw-Writer of its publishes, "<node>-<random>" */
	char writer[CLUSTER_NODE_MAX + 20];
	int replicas;
	int64_t heartbeat_ms, node_ttl_ms, op_timeout_ms, connect_wait_ms;
	bool watch_nodes;
	ClusterCallbacks cbs;
	void *userdata;

	natsOptions *nopts;
	natsConnection *nc;
	jsCtx *js;
	kvStore *kv_threads, *kv_nodes, *kv_runs, *kv_inputs, *kv_idem;
	atomic_int state;
	bool closing;

	Mailbox *mb; /* the done queue */
	struct event *ev_done;
	/* work queue: filled by the loop, run by the worker */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct Lane {
		Cluster *c;
		Job *head, **tail;
		pthread_cond_t cond;
		pthread_t thread;
		bool started;
	} lanes[2]; /* main, read */
	bool stop;
	bool nc_closed; /* the closed callback ran */
	/* rw_nodes watcher thread */
	pthread_t watcher;
	bool watcher_started;
	atomic_bool watch_stop;

	/* publishes in flight (loop thread only) */
	ClusterPub **slots; /* CLUSTER_MAX_INFLIGHT, by tag */
	ClusterPub *pubs;
	uint64_t next_tag;
	size_t n_inflight;
	bool orphans; /* a time-based resend since the last purge */
	/* an async publish was made: libnats 3.4 creates its pending list then,
	 * and js_PublishAsyncGetPendingList() crashes without it (NULL map) */
	bool published_async;
	usec_t orphans_purged;
	struct event *ev_tick;

	/* this node's heartbeats: a thread and a connection of their own
	 * (cluster-beat.c), never behind the loop or the lanes */
	natsOptions *beat_nopts; /* no event loop: libnats' threads read it */
	natsConnection *beat_nc; /* set by the beater, under beat_lock */
	pthread_t beater;
	bool beater_started;
	int64_t loop_stall_ms;		/* no loop tick this long: no heartbeat */
	atomic_uint_fast64_t loop_seen; /* the loop's last tick (usec) */
	pthread_mutex_t beat_lock;	/* what follows, beater and loop */
	pthread_cond_t beat_cond;	/* wakes the beater to stop (monotonic) */
	bool beat_stop;
	char *node_info;     /* the heartbeat's value, or NULL for "{}" */
	usec_t beat_ok_sent; /* when the last acknowledged heartbeat was sent */
	uint64_t lease_gen;  /* cluster_lease() */
	/* the other nodes' liveness (loop thread only) */
	struct event *ev_beat; /* every heartbeat_ms: the loop's tick, the sweep */
	NodeSeen *nodes;

	/* live watches of runs (loop thread only), by id */
	ClusterWatch *watches;
	uint64_t next_watch_id;

	/* request/reply between nodes (cluster-rpc.c; loop thread only) */
	natsSubscription *rpc_serve_sub; /* rw.node.<node>.rpc */
	ClusterServeFn rpc_fn;
	void *rpc_ud;
	natsSubscription *rpc_inbox_sub; /* <inbox>.*: replies to our requests */
	char rpc_inbox[64];
	ClusterRequest *requests;
	uint64_t next_request_id;
	/* retention: the max age of RW_RUNS and rw_runs, ms; -1 = not set here */
	int64_t run_max_age_ms;
};

void cluster_submit(Cluster *c, Job *j);      /* loop thread: the main lane */
void cluster_submit_read(Cluster *c, Job *j); /* loop thread: the read lane */
void cluster_post(Cluster *c, Job *j);	      /* any thread */
void cluster_set_state(Cluster *c, ClusterState s);
/* natsStatus (+ JetStream error code) → negative errno, logged when unexpected. */
int cluster_errno(natsStatus s, jsErrCode code, const char *what);
bool cluster_valid_token(const char *s, size_t max);

/* cluster-msg.c: a message of RW_RUNS holds events first..first+count-1 */
#define CLUSTER_HDR_SEQ "Rw-Seq"     /* one event: its seq */
#define CLUSTER_HDR_FIRST "Rw-First" /* more: the first one's seq ... */
#define CLUSTER_HDR_COUNT "Rw-Count" /* ... and how many */
#define CLUSTER_MSG_MAX_EVENTS 4096
/* How many of ev[0..n) one message holds within max_bytes (at least 1). */
size_t cluster_msg_fit(const ClusterEvent *ev, size_t n, size_t max_bytes);
/* The payload of m > 1 events (malloc'ed). */
int cluster_msg_pack(const ClusterEvent *ev, size_t m, char **ret, size_t *ret_len);
/* data/len → count events pointing into data; -EBADMSG when it is not that. */
int cluster_msg_unpack(const void *data, size_t len, size_t count, ClusterEvent *out);
/* A header's decimal value: -ENOENT when absent, -EBADMSG when not a number. */
int cluster_header_u64(natsMsg *m, const char *name, uint64_t *ret);
/* A message's first seq and how many events it holds, from its headers. */
int cluster_msg_span(natsMsg *m, uint64_t *first_seq, uint64_t *count);
/* A message's first seq and its events (malloc'ed array pointing into m's
 * data); -EBADMSG for a message without Rw-Seq or with a bad payload. */
int cluster_msg_events(natsMsg *m, uint64_t *first_seq, ClusterEvent **ret, size_t *ret_n);

/* cluster-publish.c */
int cluster_publish_setup(Cluster *c, jsOptions *jo);
void cluster_publish_free_all(Cluster *c);
/* after a reconnection: forget libnats' pending acknowledgements, resend */
void cluster_publish_reconnected(Cluster *c);
/* cluster-watch.c: the watches the caller left (their consumers die with
 * the connection) */
void cluster_watch_free_all(Cluster *c);
/* cluster-rpc.c: at cluster_free(), after the connection closed */
void cluster_rpc_free_all(Cluster *c);
/* cluster-kv.c */
int cluster_ensure(Cluster *c); /* worker: stream + buckets */
/* cluster-version.c: the oldest nats-server a node joins (direct gets, KV
 * creates: 2.9); the one tested is 2.9.10 (docs/CLUSTER.md "nats-server
 * versions"). The check: 0, or -EPROTONOSUPPORT (logged) when older. */
#define CLUSTER_NATS_MIN "2.9.0"
/* The oldest server measured whose stream replicas did not diverge under
 * the nemesis' partitions (issue 35 G: 2.9.10's did, in 3 of 10 runs); an
 * older one is logged with a warning, and works. */
#define CLUSTER_NATS_RECOMMENDED "2.10.27"
int cluster_check_server_version(Cluster *c); /* worker */
int cluster_version_cmp(const char *a, const char *b);
int cluster_nodes_start(Cluster *c);
void cluster_nodes_stop(Cluster *c);
/* cluster-beat.c: the heartbeat thread (after the buckets were ensured); its
 * stop closes its connection and joins it; the loop's tick (loop thread) */
int cluster_beat_start(Cluster *c);
void cluster_beat_stop(Cluster *c);
void cluster_beat_loop_tick(Cluster *c);
/* cluster-retain.c: worker, from cluster_ensure(): the streams' max age */
int cluster_apply_max_age(Cluster *c);
