/* SPDX-License-Identifier: MIT */
/*
 * cluster-mode.h — the cluster layer (replicate.c, replicate-commit.c,
 * takeback.c, placement.c, takeover*.c, forward.c, remote.c,
 * cluster-metrics.c): cluster mode, docs/CLUSTER.md. Every function is a
 * no-op without [cluster] nats. Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "driver.h"

/* replicate.c — cluster mode (docs/CLUSTER.md): JetStream at the commit's
 * durability point. Every function is a no-op without [cluster] nats. */
/* Before the event base exists (cluster_global_init). 0 or -EIO. */
int replicate_global_init(Coordinator *c);
/* Connect (blocking, bounded; fail closed: < 0 stops the start) and start
 * this node's heartbeats. */
int replicate_setup(Coordinator *c);
/* Pending replications are dropped (done(-ECANCELED)); the cluster is freed. */
void replicate_teardown(Coordinator *c);
/* At shutdown: leave the loop once the batches queued so far were
 * acknowledged, or REPL_DRAIN_MS passed; at once without a cluster. */
void replicate_drain_and_exit(Coordinator *c);
/* Readiness for STATUS_GET's cluster_ok: true without cluster mode. */
bool replicate_ready(Coordinator *c);
bool replicate_active(Coordinator *c);
/* The seq of run_id's last event JetStream acknowledged while later ones
 * of this process's commits are still in flight (-1: none yet); INT64_MAX
 * when nothing waits (no cluster, nothing in flight, or a run whose
 * replication ended: its log is the local one). Reads serve no event past
 * it: nothing is visible before it is durable in the cluster. */
int64_t replicate_mark(Coordinator *c, const char *run_id);
/* The run's last event JetStream acknowledged from this process, dead
 * replication or not: 0 and its seq and stream seq, or -ENOENT when this
 * process does not know it (a restart's run, never published). */
int replicate_acked(Coordinator *c, const char *run_id, int64_t *seq, uint64_t *stream_seq);
/* Cluster mode: a record whose run ended here fenced or replication_failed
 * (issue 35, A): its local log past what JetStream acknowledged is another
 * history than the cluster's, so reads of it are served from JetStream. */
bool replicate_diverged(Coordinator *c, const json_t *rec);
int replicate_events(Coordinator *c, const char *run_id, int64_t first_seq,
		     const char *const *texts, const size_t *lens, size_t n, const json_t *rec,
		     void (*done)(Coordinator *c, int err, void *arg), void *arg);
/* The run's last event in the stream was written by another node (found by
 * a check after this node's lease lapsed, takeover.c): fence it as a refused
 * publish would — no batch of it is published again, its processes are
 * stopped and it is failed locally with code fenced. */
void replicate_fence(Coordinator *c, const char *run_id);
void replicate_flush(Coordinator *c);
usec_t replicate_linger(Coordinator *c);
bool replicate_early(Coordinator *c, const char *run_id, const json_t *rec);
bool replicate_held(Coordinator *c, const char *run_id);
/* Was writer (an Rw-Writer) a process of this node? */
bool replicate_own_writer(Coordinator *c, const char *writer);
/* Retention pruned run_id (rec: its record as it was) from the local log:
 * purge its events and rw_runs record from the cluster, after whatever of
 * it is still queued for JetStream — not for a run fenced here (its
 * cluster copy is another node's). No-op without [cluster]. */
void replicate_pruned(Coordinator *c, const char *run_id, const json_t *rec);
/* A run created with input (the user messages of a /chat run): put it in
 * rw_inputs, for the /chat hydrate of a node that takes its thread over
 * (failure: a warning). No-op without [cluster]. */
void replicate_input(Coordinator *c, const char *run_id, const char *input);
/* The max age of RW_RUNS and rw_runs for these settings, the backstop of
 * retention: retention_days + max_run_ms + retention_interval_ms + 1 h, so
 * a run's first event never expires before its owner's retention pruned
 * it; 0 (none) when retention_days or max_run_ms is 0. */
int64_t replicate_max_age_ms(const CoordConf *cf);

/* cluster-metrics.c: the cluster's lines of /metrics (nothing without
 * [cluster]). */
void cluster_metrics(Coordinator *c, FILE *mf);

/* takeover.c — node loss in cluster mode (docs/CLUSTER.md "Node loss and
 * takeover"): the lost node's threads taken, its running runs failed
 * node_lost once; this node's own lease watched (its threads re-checked,
 * its runs fenced when another node wrote them); its load in its heartbeat. */
int takeover_setup(Coordinator *c);
void takeover_teardown(Coordinator *c);
void takeover_node_lost(Coordinator *c, const char *node);
/* This node's own run rec failed locally with replication_failed (its events
 * not acknowledged: a partition, a NATS failover): its end goes to the
 * cluster as a takeover's would — RUN_ERROR replication_failed after the
 * cluster's last event of it, fenced on it, and its record in rw_runs —
 * retried while JetStream does not answer; nothing when another node ended
 * it meanwhile (a taker: node_lost). Else the cluster's copy of the run
 * would stay open (issue 35 H). */
void takeover_end_unreplicated(Coordinator *c, const json_t *rec);
/* THREAD_LIST's page of this node's log (list, *more: runlog_threads() for
 * q) with the threads this node took over and has no run of in its log yet
 * (their latest run ran on the lost node): merged, newest first, cut to
 * q->limit. 0 or -ENOMEM. */
int takeover_thread_list(Coordinator *c, const RunLogThreadQuery *q, json_t *list, bool *more);
/* THREAD_RUNS' list of this node's log (runlog_thread_runs() for thread_id,
 * status) with the runs of thread_id that ran on the node it was taken over
 * from (at most 256, the newest): merged, newest first. 0 or -ENOMEM. */
int takeover_thread_runs(Coordinator *c, const char *thread_id, const char *status, json_t *list);

/* placement.c — thread ownership in cluster mode. Before RUN_START's work:
 * true when it took the request (answered it with an ERROR, or holds it
 * while it claims the thread, then calls h(p, f, ud) again, once this node
 * owns it); false to go on (no cluster, or this node owns the thread). */
bool placement_run_start(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
			 PeerHandler h, void *ud);
/* This node owns thread now (a takeover won it). */
void placement_own(Coordinator *c, const char *thread);
/* How many threads this node knows it owns (its cache). */
size_t placement_owned_count(Coordinator *c);
/* Runs this node drives that are not done (its load, for placement and its
 * heartbeats). */
size_t placement_active_runs(Coordinator *c);
/* A cluster that is not ready (connecting, NATS unreachable): the request is
 * answered ERROR reason cluster_unavailable (HTTP 503) and true returned. */
bool placement_refuse_unready(Coordinator *c, Peer *p, const Frame *f);
/* Forget the claims in flight (their requests are dropped). */
void placement_teardown(Coordinator *c);
/* Does this node own the thread (as far as this process knew or claimed,
 * while its lease held)? placement_own() remembers that it does (a takeover
 * won, a lookup that found this node). */
bool placement_owns(Coordinator *c, const char *thread_id);

/* Other nodes' threads, as a claim or an owner look-up said (the cache that
 * spares RUN_START a refused KV create, and reads an owner look-up): thread
 * is node's (not this node's). Forgotten when node is lost
 * (placement_forget_node, on every node loss), when this node owns the
 * thread, and when a request forwarded on it was refused not_owner or found
 * nobody serving the node (placement_forget; forward_known). */
void placement_remember(Coordinator *c, const char *thread, const char *node);
/* The node thread was last heard to belong to, or NULL. */
const char *placement_known_owner(Coordinator *c, const char *thread);
void placement_forget(Coordinator *c, const char *thread);
void placement_forget_node(Coordinator *c, const char *node);

/* forward.c — cluster mode: requests about a thread another node owns are
 * forwarded to that node's coordinatord over NATS request/reply
 * (rw.node.<node>.rpc), and this node serves the requests others forward
 * to it. No-ops without [cluster] nats. */
/* Serve rw.node.<this node>.rpc (after replicate_setup), the requests
 * handled as a client's of attach_client (coordinator_attach_client, set
 * from above: forwarded = true). 0 or a negative errno. */
int forward_setup(Coordinator *c, int (*attach_client)(Coordinator *c, int fd, bool forwarded));
/* Drop requests in flight both ways (before replicate_teardown). */
void forward_teardown(Coordinator *c);
/* Before a request's work (RUN_GET with a thread, RUN_CANCEL, THREAD_RUNS,
 * CHAT_HYDRATE): true when it took the request — forwarded it to the
 * thread's owner, or holds it while the owner is looked up (then h(p, f, ud)
 * runs again with route_here set, when this node owns it or no node does);
 * false to go on here. */
bool forward_by_thread(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
		       PeerHandler h, void *ud);
/* RUN_GET with any_thread naming no thread (/chat's join by run id alone) of
 * a run this node's log lacks: true when it took the request — the run's
 * record in rw_runs names its thread, and h(p, f', ud) runs with f' naming
 * it (so it goes to the thread's owner); an id rw_runs lacks (a /chat
 * client's alias) is asked of every other live node, the first that holds
 * it answering (-ENOENT when none does). false: not a cluster, or a request
 * another node forwarded here (answered from this log alone). */
bool forward_any_thread(Coordinator *c, Peer *p, const Frame *f, const char *run_id, PeerHandler h,
			void *ud);
/* THREAD_LIST in cluster mode: items/more are this node's page (items are
 * copied); true when it took the request — the same query asked of every
 * other live node, the pages merged (newest activity first, each thread
 * once, with its newest run, limit items). false: not a cluster, or a
 * request another node forwarded here. */
bool forward_thread_list(Coordinator *c, Peer *p, const Frame *f, json_t *items, bool more,
			 uint64_t limit, void *ud);
/* Forward the request to node, which was last heard to own thread
 * (placement_known_owner): true when it took the request. An answer that
 * says the request never ran there — not_owner (its owner changed), or
 * nobody serving the node (-EHOSTUNREACH) — drops the cache entry and runs
 * h(p, f, ud) again (then without it: a claim or an owner look-up). false:
 * out of memory (go on without the cache). */
bool forward_known(Coordinator *c, Peer *p, const Frame *f, const char *thread, const char *node,
		   PeerHandler h, void *ud);
/* Forward a request (frame: frame_encode()'s bytes) held as d to node owner;
 * d is answered with the owner's answer, or owner_unreachable. Takes d. */
void forward_deferred(Coordinator *c, PeerDeferred *d, int type, const char *frame, size_t len,
		      const char *owner);
/* The request as frame_encode() bytes (req_id 0); 0 or -ENOMEM. */
int forward_encode(const Frame *f, char **ret, size_t *ret_len);

/* Re-reads of a replica behind the stream's leader before a read of a run
 * from the cluster stops waiting for it: remote.c then answers with what it
 * has, chat.c's hydrate fails. */
#define REMOTE_LAG_RETRIES 40

/* remote.c — cluster mode: RUN_READ and RUN_WATCH of a run this node's run
 * log does not hold are served from the run's JetStream subject (gap-free,
 * duplicate-free, from a seq), with a record derived from the stream: its
 * lastSeq is the run's last event at the stream's leader, its status that of
 * the terminal event when it is there. true: taken (answered now or later). */
bool remote_run_read(Coordinator *c, Peer *p, const Frame *f, const Msg_RUN_READ *m);
/* RUN_GET of a run this node's log lacks (a run of a node that was lost and
 * whose thread this node took over): its record derived from its events in
 * JetStream, as remote_run_read's. false: not a cluster, or a local run. */
bool remote_run_get(Coordinator *c, Peer *p, const Frame *f, const char *run_id,
		    const char *thread_id);
bool remote_run_watch(Coordinator *c, Client *cl, Peer *p, const Frame *f, const char *run_id,
		      const char *thread_id);
/* Stop a watch's JetStream consumer (before freeing the Watch). */
void remote_watch_drop(Coordinator *c, Watch *w);
/* The run diverged here (replicate_diverged): its local watches go on from
 * JetStream, from the event after the last one they were sent. */
void remote_watch_divert(Coordinator *c, const char *run_id, const char *thread_id);
void remote_teardown(Coordinator *c);

/* replicate-commit.c: the cluster's delivery of commits (JetStream first). */
extern const struct CommitDelivery commit_delivery_replicated;
/* Cluster mode: run_id was written by another node (fenced): fail it in the
 * local log alone with code fenced, and stop its processes (COMMIT_FENCED). */
void commit_fail_fenced(Coordinator *c, const char *run_id);

/* sbx-relay.c — cluster mode: an exec whose thread another node owns.
 * sbx_relay_exec: true when it took the SBX_EXEC (forwarded to the owner,
 * its output relayed to cl; or held for a claim); false: served here.
 * sbx_relay_input/sbx_relay_kill: true when the stream is such an exec's
 * (the request forwarded or answered). sbx_relay_forwarded (forward.c): the
 * owner's answer to the SBX_EXEC of relay id sid (reply NULL: none, or an
 * error). sbx_relay_pending: sid is a relay's. */
bool sbx_relay_exec(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC *m);
bool sbx_relay_input(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC_INPUT *m);
bool sbx_relay_kill(Client *cl, Peer *p, const Frame *f, const Msg_SBX_EXEC_KILL *m);
void sbx_relay_forwarded(Coordinator *c, uint64_t sid, const char *owner,
			 const msgpack_object *reply);
bool sbx_relay_pending(Coordinator *c, uint64_t sid);
void sbx_relay_client_gone(Coordinator *c, Client *cl);
void sbx_relay_free_all(Coordinator *c);
/* The PeerHandlers of SBX_EXEC_READ, _INPUT, _KILL and _LIST: routed in
 * cluster mode (sbx-relay.c), then sandbox-exec.c's handlers. */
int sbx_dispatch_exec_read(Peer *p, const Frame *f, void *ud);
int sbx_dispatch_exec_input(Peer *p, const Frame *f, void *ud);
int sbx_dispatch_exec_kill(Peer *p, const Frame *f, void *ud);
int sbx_dispatch_exec_list(Peer *p, const Frame *f, void *ud);
/* idem-cluster.c — Idempotency-Keys across the cluster (issue 35 F). Before
 * RUN_START creates a keyed run its log does not know: true when it took the
 * request (holds it while rw_idem records the key, then calls h(p, f, ud)
 * again, or answers the run id the key named, or an ERROR); false to go on
 * (no cluster, or the request is that second call). */
bool idem_cluster_run_start(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
			    const char *key, PeerHandler h, void *ud);
/* In that second call: the run id rw_idem recorded for the key; else NULL. */
const char *idem_cluster_run_id(Coordinator *c, const char *thread_id, const char *key);
