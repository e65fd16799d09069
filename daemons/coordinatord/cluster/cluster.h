/* SPDX-License-Identifier: MIT */
/*
 * cluster.h — runwarden's layer over NATS JetStream (docs/CLUSTER.md).
 *
 * runwarden implements no consensus, election or replication: JetStream
 * does. This module names what runwarden keeps there and gives each use one
 * call with one guarantee:
 *
 *   stream RW_RUNS, subjects rw.run.<runId>, file storage, R = replicas, a
 *     duplicate window of CLUSTER_DUP_WINDOW_S: a run's events, one or more
 *     consecutive ones per message (cluster-msg.c), Nats-Msg-Id
 *     "<runId>/<seq>" ("<runId>/<first>-<last>"), headers Rw-Seq "<first>",
 *     Rw-Count "<n>" (absent: 1);
 *   KV rw_threads: thread → "<node>", its owner; the entry's KV revision is
 *     the owner's epoch (assigned by JetStream, unique and increasing with
 *     each new owner of the thread, so no read-modify-write sets it);
 *   KV rw_nodes:   node → heartbeat (cluster_set_node_info()'s text), bucket
 *     TTL = node_ttl_ms;
 *   KV rw_runs:    runId → the run's record (opaque bytes, the caller's).
 *
 * Threading. Everything here is called on the loop thread of the event_base
 * given to cluster_new(), and every callback runs on that thread, from the
 * loop. libnats does its socket I/O on that loop (its libevent adapter) but
 * delivers acknowledgements and KV watch entries on threads of its own, and
 * its JetStream management and KV calls are blocking request/replies whose
 * replies are read by the loop: so those calls run on worker threads of this
 * module — one for everything in submission order, one for reads of runs'
 * events (cluster_read_events, cluster_run_last), which depend on nothing
 * else and would otherwise wait behind it — acknowledgements and watch entries are
 * handed to the loop through an eventfd, and the loop thread never waits on
 * NATS after cluster_new() returns. Because the replies are read by the loop,
 * nothing completes while the loop is not running — but this node's
 * heartbeats: a thread and a connection of their own (no event loop), so
 * that a held loop or a slow lane never delays them (cluster-beat.c); they
 * stop when the loop made no progress for loop_stall_max_ms.
 *
 * cluster_global_init() must run once before the event_base is created
 * (libevent locking, evthread_use_pthreads(), which the adapter needs).
 *
 * Blocking, precisely: cluster_new() blocks the calling thread while it
 * connects, at most connect_wait_ms (default CLUSTER_CONNECT_WAIT_MS): it tries
 * the servers in turn until one accepts or the time is up, and then fails
 * (-ETIMEDOUT; -EACCES for refused credentials, -EPROTO for TLS): fail
 * closed, a daemon configured for a cluster does not start without it.
 * cluster_publish_events() waits at most 1 ms inside libnats when its window
 * of unacknowledged publishes is full (then the tick retries). cluster_free()
 * closes the connection and waits for libnats' closed callback (at most 5 s,
 * in practice at once), then for the worker's current call, which the closed
 * connection fails at once, and for the watcher thread (at most 250 ms).
 * Nothing else blocks the loop thread.
 *
 * Shutdown: libnats does not join its delivery threads when a connection
 * closes, so they post to a mailbox that outlives the Cluster: after
 * cluster_free() it is closed, and a thread still returning from a handler
 * drops its result there (a few dozen bytes per Cluster freed are kept for
 * the process's life).
 *
 * Callbacks and ownership. Every call that takes a callback returns 0 and
 * then calls it exactly once, later (never from inside the call), or returns
 * a negative errno and never calls it. cluster_free() drops the callbacks
 * still pending without calling them. Pointers given to a call (run ids,
 * event bytes, names) are copied; results passed to a callback are valid
 * during the callback only.
 *
 * Readiness. CLUSTER_READY once connected and the stream and buckets exist
 * (created, or checked, by the first worker job, which retries for
 * connect_wait_ms while a starting NATS cluster has no JetStream leader;
 * CLUSTER_FAILED after that); CLUSTER_DISCONNECTED while
 * libnats reconnects (it retries forever, every CLUSTER_RECONNECT_WAIT_MS, and
 * buffers publishes meanwhile); back to READY on reconnection. /readyz is
 * cluster_ready().
 *
 * Errors are negative errnos: -ESTALE is fencing (a stale expected sequence
 * or revision: another writer moved first), -EEXIST an existing key,
 * -ENOENT a missing one, -ETIMEDOUT no answer in time, -ENOTCONN not
 * ready, -EAGAIN too many publishes in flight, -EINVAL a run id, thread or
 * node that cannot be a subject token or KV key, -EIO anything else NATS
 * said (logged with its text, never with credentials).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster-conf.h"

struct event_base;
typedef struct Cluster Cluster;

#define CLUSTER_STREAM "RW_RUNS"
#define CLUSTER_SUBJECT_PREFIX "rw.run."
#define CLUSTER_BUCKET_THREADS "rw_threads"
#define CLUSTER_BUCKET_NODES "rw_nodes"
#define CLUSTER_BUCKET_RUNS "rw_runs"
#define CLUSTER_BUCKET_INPUTS "rw_inputs"
#define CLUSTER_BUCKET_IDEM "rw_idem"
#define CLUSTER_DUP_WINDOW_S 120
#define CLUSTER_CONNECT_WAIT_MS 10000
#define CLUSTER_RECONNECT_WAIT_MS 250
#define CLUSTER_OP_TIMEOUT_MS 5000
/* One attempt of a publish waits this long for its acknowledgement before it
 * is sent again (same Msg-Id: the stream drops the copy); a publish fails with
 * -ETIMEDOUT when no attempt was acknowledged within CLUSTER_PUBLISH_DEADLINE_MS. */
#define CLUSTER_ACK_WAIT_MS 2000
#define CLUSTER_PUBLISH_DEADLINE_MS 30000
/* Publish batches in flight at once (cluster_publish_events() beyond: -EAGAIN). */
#define CLUSTER_MAX_INFLIGHT 4096
#define CLUSTER_NODE_MAX 65

typedef enum ClusterState {
	CLUSTER_CONNECTING,   /* connected, stream and buckets not yet ensured */
	CLUSTER_READY,	      /* usable */
	CLUSTER_DISCONNECTED, /* libnats reconnecting; calls queue or time out */
	CLUSTER_FAILED,	      /* the stream or a bucket could not be ensured */
} ClusterState;

typedef struct ClusterOptions {
	const char *const *servers;		 /* NULL-terminated URLs, at least one */
	const char *node;			 /* this node's name (cluster_conf_node_name()) */
	int replicas;				 /* 1..5 */
	const char *creds;			 /* credentials file, or NULL/"" */
	const char *tls_ca, *tls_cert, *tls_key; /* PEM files, or NULL/"" */
	int64_t heartbeat_ms;			 /* 0 = no heartbeats from this node */
	int64_t node_ttl_ms;			 /* rw_nodes TTL (bucket creation only) */
	/* heartbeats stop once the event loop made no progress this long (a hung
	 * loop must lose the node); 0 = 3 × node_ttl_ms */
	int64_t loop_stall_max_ms;
	/* client pings on every connection: a server that answers no ping for
	 * max_pings_out + 1 intervals is left for another of the list (a
	 * silent, cut-off server keeps its socket open); 0 = node_ttl_ms / (2 ×
	 * (max_pings_out + 1)), at least 2 s, so that a dead connection is
	 * dropped within half the TTL; max_pings_out 0 = 2 */
	int64_t ping_interval_ms;
	int max_pings_out;
	int64_t connect_wait_ms; /* 0 = CLUSTER_CONNECT_WAIT_MS */
	int64_t op_timeout_ms;	 /* 0 = CLUSTER_OP_TIMEOUT_MS */
	bool watch_nodes;	 /* watch rw_nodes and report lost nodes (on_node_lost) */
	/* Retention's backstop (cluster-retain.c): with set_max_age, the first
	 * worker job sets the max age of RW_RUNS and of rw_runs' stream to
	 * max_age_ms (0 = none) when it differs; without it (readers, tools)
	 * they are left as they are. The stream's setting is cluster-wide:
	 * the last node to start sets it. */
	bool set_max_age;
	int64_t max_age_ms;
} ClusterOptions;

/* The library's options for this configuration (cluster_new()): servers
 * (urls from cluster_conf_urls(), still the caller's), node, replicas,
 * credentials and TLS files, heartbeat_ms and node_ttl_ms; the caller sets
 * what its use differs in (connect_wait_ms, watch_nodes, no heartbeats). */
ClusterOptions cluster_conf_options(const ClusterConf *c, char *const *urls, const char *node);

typedef struct ClusterCallbacks {
	/* The readiness changed (any thread's view of it is cluster_state()). */
	void (*on_state)(Cluster *c, ClusterState state, void *userdata);
	/* A node seen alive (a heartbeat in rw_nodes) stopped beating and its key
	 * is gone from the bucket (expired after node_ttl_ms, or deleted): once per
	 * disappearance. Its threads may now be taken (cluster_take_thread()).
	 * Latency: node_ttl_ms after its last beat, plus up to heartbeat_ms. */
	void (*on_node_lost)(Cluster *c, const char *node, void *userdata);
	/* First heartbeat seen of a node (or first after it was lost). */
	void (*on_node_up)(Cluster *c, const char *node, void *userdata);
} ClusterCallbacks;

/* Once per process, before the event_base is created. 0 or -EIO. */
int cluster_global_init(void);

/* Connect (blocking, bounded: see above), attach to base, and start the worker,
 * whose first job ensures the stream and the buckets (READY then). 0 and
 * *ret, or a negative errno (logged). */
int cluster_new(struct event_base *base, const ClusterOptions *opt, const ClusterCallbacks *cbs,
		void *userdata, Cluster **ret);
/* NULL-safe; returns NULL. Pending callbacks are dropped. This node's
 * rw_nodes key is left to expire (a crash looks the same). */
Cluster *cluster_free(Cluster *c);

ClusterState cluster_state(Cluster *c);
bool cluster_ready(Cluster *c);
const char *cluster_node(Cluster *c);
/* The URL of the server connected to now ("" when none). */
const char *cluster_connected_url(Cluster *c, char *buf, size_t len);

/* ---- a run's events ---- */

typedef struct ClusterEvent {
	const void *data;
	size_t len;
} ClusterEvent;

/* err 0: all n events are in the stream, acknowledged by a majority of its
 * replicas; last_stream_seq is the stream sequence of the last one (the
 * expected_last_subject_seq of this run's next publish). err < 0: the first
 * n_done events are durable (last_stream_seq is that of the n_done-th, or the
 * expected sequence given when none), the rest were not written. n_dup
 * counts events the stream already held (a re-publish of runId/seq). */
typedef struct ClusterPublishResult {
	int err;
	size_t n_done, n_dup;
	uint64_t last_stream_seq;
} ClusterPublishResult;
typedef void (*ClusterPublishFn)(Cluster *c, const ClusterPublishResult *r, void *userdata);

/* Append events first_seq .. first_seq+n-1 of run_id: as few messages on
 * rw.run.<runId> as the server's maximum payload allows (usually one), each
 * with Nats-Msg-Id "<runId>/<first>[-<last>]" (the stream keeps one copy per
 * id within CLUSTER_DUP_WINDOW_S, so resending after a lost acknowledgement
 * is safe) and Nats-Expected-Last-Subject-Sequence: the first carries
 * expected_last_subject_seq (0 = the run has no event in the stream yet),
 * each next one the stream sequence of the one before. A writer that is not
 * the last to have written the run is refused: -ESTALE, and nothing of the
 * batch after the refused message is written (fencing: one run, one writer).
 * Hence a run's messages go one round trip at a time; runs proceed in
 * parallel. The events are copied. run_id: 1..128 characters among
 * A-Z a-z 0-9 - _. */
int cluster_publish_events(Cluster *c, const char *run_id, uint64_t first_seq,
			   const ClusterEvent *events, size_t n, uint64_t expected_last_subject_seq,
			   ClusterPublishFn cb, void *userdata);

/* Write what publishes queued to the connection's socket now, without
 * waiting (libnats otherwise writes from the loop's next turn): called before
 * the loop thread blocks (a disk flush), so that the servers work meanwhile. */
void cluster_flush(Cluster *c);

/* Events as read back: seq is the run's (Rw-Seq), stream_seq the stream's. */
typedef struct ClusterReadEvent {
	uint64_t seq, stream_seq;
	const void *data;
	size_t len;
	const char *writer; /* its Rw-Writer ("" when none; cluster_read_events() only) */
} ClusterReadEvent;
/* err 0 with n events in seq order (n < max: the run has no more now);
 * next_stream_seq resumes the scan (pass it as start_stream_seq). */
typedef void (*ClusterReadFn)(Cluster *c, int err, const ClusterReadEvent *ev, size_t n,
			      uint64_t next_stream_seq, void *userdata);

/* Read up to max events of run_id with seq >= from_seq, by direct gets
 * (next message of the run's subject from a stream sequence; any replica
 * answers, so a follower may lag behind an acknowledgement, never show a
 * gap). start_stream_seq: where to start the scan (0 = the stream's start;
 * a previous call's next_stream_seq to continue). Runs on the worker. */
int cluster_read_events(Cluster *c, const char *run_id, uint64_t from_seq,
			uint64_t start_stream_seq, size_t max, ClusterReadFn cb, void *userdata);

/* A live read: the run's events from from_seq on, those in the stream now
 * and those published later, through an ordered consumer (JetStream
 * re-creates it from the last sequence delivered after a server loss or a
 * missed heartbeat, so the order holds across failures). The callback gets
 * each event once, in seq order, from from_seq without a gap: err 0 and one
 * event (n = 1); or err < 0 and n = 0 once, after which the watch is dead but
 * still the caller's to free (-EPROTO: the stream showed a gap, -ENOTCONN,
 * -EIO). start_stream_seq as for cluster_read_events() (0 = the stream's
 * start; a run's events are skipped until from_seq). The consumer is created
 * and deleted on the worker: the first event comes after a round trip or
 * two. For routerd's tails of runs another node owns. */
typedef struct ClusterWatch ClusterWatch;
typedef void (*ClusterWatchFn)(Cluster *c, ClusterWatch *w, int err, const ClusterReadEvent *ev,
			       size_t n, void *userdata);
int cluster_watch_run(Cluster *c, const char *run_id, uint64_t from_seq, uint64_t start_stream_seq,
		      ClusterWatchFn cb, void *userdata, ClusterWatch **ret);
/* NULL-safe; returns NULL. No callback after it. Must precede cluster_free(). */
ClusterWatch *cluster_watch_free(ClusterWatch *w);

/* The run's last event in the stream, read at the stream's leader (never a
 * lagging replica): what a new owner taking a run over, or a writer coming
 * back after a restart, needs to continue or end the run. */
typedef struct ClusterRunLast {
	uint64_t seq;			    /* its Rw-Seq: the run's next event is seq + 1 */
	uint64_t stream_seq;		    /* the expected_last_subject_seq of the next publish */
	char writer[CLUSTER_NODE_MAX + 20]; /* Rw-Writer of the process that wrote it */
	const void *data;		    /* its bytes (valid during the callback) */
	size_t len;
} ClusterRunLast;
/* err 0 and last; -ENOENT: the run has no event in the stream (its first
 * publish expects 0). */
typedef void (*ClusterRunLastFn)(Cluster *c, int err, const ClusterRunLast *last, void *userdata);
int cluster_run_last(Cluster *c, const char *run_id, ClusterRunLastFn cb, void *userdata);
/* This process's writer id ("<node>-<random>", the Rw-Writer of its publishes). */
const char *cluster_writer(Cluster *c);

/* ---- thread ownership (rw_threads) ---- */

typedef struct ClusterOwner {
	char node[CLUSTER_NODE_MAX];
	uint64_t epoch;	   /* = revision: increases with each new owner */
	uint64_t revision; /* KV revision of the entry: what a takeover names */
} ClusterOwner;
/* err 0: owner is the entry now. -EEXIST (claim) / -ESTALE (take): owner is
 * the entry that won, when it could be read (else owner->node is ""). */
typedef void (*ClusterOwnerFn)(Cluster *c, int err, const ClusterOwner *owner, void *userdata);

/* Claim a thread no one owns: KV create, so of any number of claimers exactly
 * one gets 0, the others -EEXIST. */
int cluster_claim_thread(Cluster *c, const char *thread, const char *node, ClusterOwnerFn cb,
			 void *userdata);
/* The node a take takes from, and the revision of its last heartbeat seen
 * before its loss (cluster_node_revision()). */
typedef struct ClusterLost {
	const char *node;
	uint64_t revision;
} ClusterLost;
/* Take a thread over from its owner (a lost node): KV update on
 * expected_revision, so of the takers naming one revision exactly one gets
 * 0; the others, and any taker naming an old revision, get -ESTALE. With
 * lost, the lost node's heartbeat key is read at the bucket's leader just
 * before: a beat since lost->revision (the node is back) is -EALREADY and
 * nothing is taken; the node is alive here from then on (on_node_up). */
int cluster_take_thread(Cluster *c, const char *thread, const char *node,
			uint64_t expected_revision, const ClusterLost *lost, ClusterOwnerFn cb,
			void *userdata);
/* The owner, or -ENOENT. */
int cluster_owner(Cluster *c, const char *thread, ClusterOwnerFn cb, void *userdata);

/* ---- nodes (rw_nodes) ---- */

#define CLUSTER_NODE_INFO_MAX 4096
/* What this node's heartbeats carry from the next one on (copied; NULL =
 * "{}"): e.g. a JSON object of its load and capacity, for placement and
 * `runwarden cluster status`. 0, -E2BIG beyond CLUSTER_NODE_INFO_MAX. */
int cluster_set_node_info(Cluster *c, const char *info);
/* This node's lease on its rw_nodes key, for caches of "this node owns that
 * thread": 0 while not assured (no heartbeat of this node acknowledged within
 * the last node_ttl_ms / 2: the key may have expired, and other nodes may be
 * taking this node's threads), else a generation that changes whenever
 * acknowledged heartbeats were more than node_ttl_ms / 2 apart (a pause, a
 * partition, a NATS failover: the key may have expired in between). A cache
 * filled under generation g is valid while cluster_lease() == g. */
uint64_t cluster_lease(Cluster *c);

/* The nodes alive now (watch_nodes), with their last heartbeat's value. */
typedef void (*ClusterNodeFn)(Cluster *c, const char *node, const char *info, void *userdata);
void cluster_foreach_node(Cluster *c, ClusterNodeFn fn, void *userdata);
/* The revision of node's last heartbeat seen here (alive or lost), 0: none. */
uint64_t cluster_node_revision(Cluster *c, const char *node);

/* ---- run records (rw_runs) and run inputs (rw_inputs) ---- */

typedef enum ClusterBucket {
	CLUSTER_THREADS, /* rw_threads: thread → owner node (revision = epoch) */
	CLUSTER_NODES,	 /* rw_nodes: node → last heartbeat (the live nodes) */
	CLUSTER_RUNS,	 /* rw_runs: runId → record */
	CLUSTER_INPUTS,	 /* rw_inputs: runId → the messages it started with (not listed) */
} ClusterBucket;

typedef void (*ClusterDoneFn)(Cluster *c, int err, uint64_t revision, void *userdata);
typedef void (*ClusterValueFn)(Cluster *c, int err, const void *data, size_t len, void *userdata);
/* Put key's value (bytes copied) in bucket CLUSTER_RUNS (a run's record, by
 * run id) or CLUSTER_INPUTS (the user messages a run was started with — a
 * /chat run's `input` —, put once at its start and read by the node that
 * takes its thread over: the /chat hydrate; purged with the run,
 * cluster_purge_run, under the same max age). */
int cluster_put(Cluster *c, ClusterBucket bucket, const char *key, const void *data, size_t len,
		ClusterDoneFn cb, void *userdata);
/* The value of key in bucket (CLUSTER_RUNS or CLUSTER_INPUTS): err 0 and its
 * bytes (valid during the callback), -ENOENT when the bucket has none, or
 * another negative errno. A KV get (direct: any replica may answer, a moment
 * behind a put). On the worker; cb on the loop thread. 0, or -EINVAL (another
 * bucket, or key cannot be a key: then no run has it), -ENOTCONN (the buckets
 * are not ensured yet), -ENOMEM. */
int cluster_get(Cluster *c, ClusterBucket bucket, const char *key, ClusterValueFn cb,
		void *userdata);

/* An Idempotency-Key across the cluster (issue 35 F): create the entry key
 * (a KV key, e.g. a hash of the thread and the client's key) in rw_idem with
 * run_id as its value, once. cb: 0 (this run id is the key's now), -EEXIST
 * with data, len the run id the key named already (read at the leader), or
 * an error (nothing known: the create may or may not have been stored). */
int cluster_idem_claim(Cluster *c, const char *key, const char *run_id, ClusterValueFn cb,
		       void *userdata);

/* ---- listing a bucket ---- */

typedef struct ClusterKv {
	const char *key;
	const void *value;
	size_t len;
	uint64_t revision;
} ClusterKv;
/* err 0 and every entry of the bucket (none deleted), in no particular order;
 * valid during the callback. */
typedef void (*ClusterListFn)(Cluster *c, int err, const ClusterKv *kv, size_t n, void *userdata);
/* List a bucket, on the worker: the bucket stream's subjects (stream info),
 * then each key's last message read at the stream's leader — one request per
 * entry, no consumer (an ephemeral consumer may be placed on a server that is
 * down). O(entries): for takeover and `runwarden cluster status`, not for a
 * request path. */
int cluster_list(Cluster *c, ClusterBucket bucket, ClusterListFn cb, void *userdata);

/* ---- node-to-node request/reply (rw.node.<node>.rpc) ----
 *
 * Core NATS request/reply, not JetStream: nothing is stored. A request goes
 * to one node's subject and is answered by that node's server (at most one
 * answer is used). Each request carries its deadline (header Rw-Deadline,
 * epoch ms): a server that receives it after the deadline (it was stopped or
 * slow) drops it unanswered and unexecuted, so a requester that gave up
 * never has its request run later. This assumes the hosts' clocks agree to
 * well under the timeout (NTP). */
#define CLUSTER_RPC_PREFIX "rw.node."
#define CLUSTER_RPC_SUFFIX ".rpc"
#define CLUSTER_RPC_MAX (8u << 20) /* request or reply bytes */

/* An incoming request, the server's to answer once (cluster_rpc_respond) or
 * drop (cluster_rpc_free). Both must precede cluster_free(). */
typedef struct ClusterRpc ClusterRpc;
typedef void (*ClusterServeFn)(Cluster *c, ClusterRpc *req, const void *data, size_t len,
			       void *userdata);
/* Serve this node's subject rw.node.<node>.rpc: fn gets each request (on the
 * loop thread), from now until cluster_free(). Once per Cluster: -EALREADY
 * the second time. 0 or a negative errno. */
int cluster_serve(Cluster *c, ClusterServeFn fn, void *userdata);
/* Answer req with data (copied) and release it. 0, or a negative errno
 * (req is released either way; the requester then times out). */
int cluster_rpc_respond(Cluster *c, ClusterRpc *req, const void *data, size_t len);
/* Release req unanswered. NULL-safe; returns NULL. */
ClusterRpc *cluster_rpc_free(ClusterRpc *req);
/* Milliseconds left before the requester gives up (≥ 0). */
int64_t cluster_rpc_remaining_ms(const ClusterRpc *req);

/* err 0 and the reply's data; -ETIMEDOUT: no answer within timeout_ms (the
 * node is stopped, partitioned or too slow); -EHOSTUNREACH: nothing serves
 * that node's subject (its daemon is not running: known at once, from the
 * server's "no responders"); -ENOTCONN: the connection closed meanwhile. */
typedef void (*ClusterReplyFn)(Cluster *c, int err, const void *data, size_t len, void *userdata);
typedef struct ClusterRequest ClusterRequest;
/* Send data (copied) to node's server; cb is called once, on the loop
 * thread. *ret (may be NULL) lets the caller cancel. 0, or -EINVAL (a node
 * name that cannot be a subject token), -EMSGSIZE (len over cluster_rpc_max()), -ENOTCONN,
 * -ENOMEM (cb never called). */
int cluster_request(Cluster *c, const char *node, const void *data, size_t len, int64_t timeout_ms,
		    ClusterReplyFn cb, void *userdata, ClusterRequest **ret);
/* No callback after it. NULL-safe; returns NULL. */
ClusterRequest *cluster_request_cancel(ClusterRequest *r);
/* The largest request or reply the servers accept (their max_payload, 1 MiB
 * by default; at most CLUSTER_RPC_MAX). cluster_request() refuses more with
 * -EMSGSIZE; a server must not answer with more (its requester would time
 * out). */
size_t cluster_rpc_max(Cluster *c);

/* ---- retention (cluster-retain.c) ---- */

typedef void (*ClusterPurgeFn)(Cluster *c, int err, void *userdata);
/* A run's events and record gone from the cluster (its owner's retention
 * pruned it): every message of rw.run.<runId> purged from RW_RUNS
 * (JetStream purge with a subject filter), then the run's rw_runs key
 * purged from the bucket's stream (no delete marker left). On the worker.
 * err 0 also when there was nothing to purge. */
int cluster_purge_run(Cluster *c, const char *run_id, ClusterPurgeFn cb, void *userdata);
