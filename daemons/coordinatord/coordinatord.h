/* SPDX-License-Identifier: MIT */
/*
 * coordinatord.h — private types of coordinatord, shared by its files.
 *
 * coordinatord owns the LMDB run log and drives runs: it accepts routerd
 * connections (RUN_* requests, RUN_EVENTS pushes), keeps one connection to the
 * shim (SANDBOX_*, EXEC_*), and turns harness output into AG-UI chunks.
 *
 * Log-first with group commit (commit.c): every chunk is queued as an Op; all
 * Ops queued during one event-loop turn are written in ONE LMDB transaction by
 * the lowest-priority commit event, and only after that commit returned are
 * they published to watchers (RUN_EVENTS) and acknowledged to clients. A run's
 * in-memory driver (Run) ends when the Op that makes it terminal completed.
 *
 * Files and layers: docs/HACKING.md "coordinatord: where a change goes".
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cgroup.h"
#include "conf-parser.h"
#include "coord-conf.h"
#include "daemon-util.h"
#include "harness.h"
#include "log.h"
#include "loop-lag.h"
#include "msg.h"
#include "peer-server.h"
#include "peer.h"
#include "peer-link.h"
#include "reason.h"
#include "runlog.h"
#include "tenant.h"
#include "shared-conf.h"
#include "time-util.h"

typedef struct Coordinator Coordinator;
typedef struct Client Client;
typedef struct Run Run;
typedef struct Harness Harness;
typedef struct Adapter Adapter;
typedef struct SbxExec SbxExec;

struct Client {
	Client *next;
	Coordinator *c;
	Peer *peer;
	/* cluster mode: the loopback connection that carries requests other
	 * nodes forwarded here (forward.c); they are served here, never
	 * forwarded again */
	bool forwarded;
};

typedef struct Watch {
	struct Watch *next;
	char run_id[RUN_ID_LEN + 1];
	Client *client;
	/* cluster mode, a run another node owns: its events from JetStream
	 * (remote.c), else NULL */
	struct RemoteWatch *remote;
} Watch;

/* Where a driven run is in its life. The usual path is WAIT_SHIM → ENSURING →
 * [FORWARDING] → [PROXYING] → STARTING → EXECUTING → DONE; a cancel (or
 * max_run_ms) goes through CANCELLING or CANCELLING_DETACHED, a lost
 * connection to the shim through SHIM_LOST, a restarted coordinatord starts
 * its runs in REATTACH. An adapter's post step (run_post_exec) goes through
 * STARTING and EXECUTING again, with Run.in_post_step set. */
typedef enum RunState {
	RUN_WAIT_SHIM,	/* waiting for containerd-shim to be connected */
	RUN_ENSURING,	/* SANDBOX_ENSURE in flight (maybe queued for a slot) */
	RUN_FORWARDING, /* SANDBOX_FORWARD in flight: the MCP bridge's loopback forward */
	RUN_PROXYING,	/* SANDBOX_PROXY in flight: the egress proxy */
	RUN_STARTING,	/* EXEC_START in flight */
	RUN_EXECUTING,	/* attached to its exec: output streaming */
	RUN_REATTACH,	/* after a coordinatord restart: waiting to EXEC_ATTACH */
	RUN_SHIM_LOST,	/* the shim's connection dropped: waiting for one to EXEC_ATTACH */
	RUN_CANCELLING, /* a cancel: EXEC_KILL of its exec in flight, its EXEC_EXIT ends it */
	/* a cancel of an exec it is not attached to (a re-attach was pending):
	 * the EXEC_KILL's reply ends it */
	RUN_CANCELLING_DETACHED,
	RUN_DONE, /* its terminal Op is queued; freed when it completed */
} RunState;

struct Run {
	Run *next;
	Coordinator *c;
	char run_id[RUN_ID_LEN + 1];
	char *thread_id;
	char tenant[TENANT_NAME_MAX + 1]; /* whose run (tenant.c); TENANT_DEFAULT when none */
	char *command;
	char *sandbox_id;
	uint64_t exec_id;
	RunState state;
	OutBuf out[3];		 /* [1] stdout, [2] stderr */
	uint64_t saved_taken[3]; /* out[].taken in the driver state last queued */
	bool dirty;		 /* output waiting for the end-of-turn flush */
	bool queued;		 /* waiting for a sandbox slot (not stale) */
	char tool_call_id[48];
	struct event *wait_timer;
	struct event *max_timer; /* max_run_ms after its start */
	/* The exec's id goes to the log with the run's next commit (its output,
	 * its end), or after DRIVE_SAVE_DELAY_MS in a commit of its own
	 * (driver.c exec_started); exec_saved: a driver state with it is queued. */
	struct event *drive_timer;
	bool exec_saved;
	bool run_timed_out; /* max_run_ms: the cancel path ends it run_timeout */
	uint64_t cpu_usec;  /* last SANDBOX_STATS reading */
	bool cpu_known;
	uint64_t cpu_round;	    /* the watchdog round whose scan spares it: its first
				     * CPU reading, or a failed one */
	uint64_t cpu_err_round;	    /* the last round whose reading failed */
	PeerDeferred *cancel_reply; /* a RUN_CANCEL answered at the run's end */
	LogCtx log;
	const Harness *harness;
	const Adapter *adapter;
	void *astate;	      /* the adapter's own state */
	unsigned id_counter;  /* run-scoped ids */
	char **secret_values; /* every configured secret and the bridge token: redacted */
	char stderr_tail[2048];
	size_t stderr_len;
	json_t *messages; /* the run request, for the adapter's begin() */
	json_t *metadata;
	char bridge_token[80]; /* the MCP bridge's bearer token (memory only) */
	bool bridge_live;
	int bridge_inflight; /* host tool calls running: the run is not stale */
	void *bridge_calls;
	uint64_t bridge_port; /* the forward to routerd inside the sandbox, 0 = none */
	uint64_t proxy_port;  /* the egress proxy inside the sandbox, 0 = none */
	/* The exec is an adapter's step after the main process (run_post_exec: a
	 * git diff), not the harness: its stdout is collected into post_step_out
	 * for post_step_done instead of being drained into chunks, and it is not
	 * re-attached. A bool beside the state, not a state: the post step goes
	 * through the same STARTING → EXECUTING (→ CANCELLING) as the main exec. */
	bool in_post_step;
	OutBuf post_step_out;
	void (*post_step_done)(Run *run, int64_t code, const char *out, size_t len);
	bool output_limited; /* over its output budget (drop mode: output is dropped) */
	uint64_t dropped;    /* output bytes dropped since then (this process's view) */
	json_t *agui;	     /* what the stored stream has open (agui-guard.c) */
};

/* Waiting to EXEC_ATTACH to its exec again (REATTACH or SHIM_LOST). */
static inline bool
run_reattaching(const Run *run)
{
	return run->state == RUN_REATTACH || run->state == RUN_SHIM_LOST;
}

/* A cancel (or max_run_ms) is killing its exec (CANCELLING or CANCELLING_DETACHED). */
static inline bool
run_cancelling(const Run *run)
{
	return run->state == RUN_CANCELLING || run->state == RUN_CANCELLING_DETACHED;
}

/* Output of one thread's runs in the current window (max_thread_output_bytes). */
typedef struct ThreadOutput {
	struct ThreadOutput *next;
	int64_t window_start_ms;
	uint64_t bytes;
	char thread_id[];
} ThreadOutput;

typedef struct Metrics {
	uint64_t runs_started;
	uint64_t runs_finished[3]; /* completed, failed, aborted */
	uint64_t events_appended;
	uint64_t commits;
	uint64_t commit_failures;
	uint64_t commit_usec_sum;
	uint64_t commit_buckets[8]; /* ≤ 0.5, 1, 2.5, 5, 10, 25, 100 ms, +Inf */
	uint64_t watchdog_kills;
	uint64_t runs_pruned;
	uint64_t tool_calls_refused;   /* 429: max_tool_calls(_per_run) */
	uint64_t runs_pruned_size;     /* by size retention */
	uint64_t output_dropped_bytes; /* over an output budget */
	uint64_t runs_output_limited;  /* runs that went over an output budget */
	uint64_t events_refused_full;  /* events of running runs refused past chunk_high_water */
	/* cluster mode (replicate.c, takeover.c; cluster-metrics.c prints them) */
	uint64_t cluster_fenced;	     /* runs fenced: another node wrote their log */
	uint64_t cluster_repl_failures;	     /* runs whose events could not be replicated */
	uint64_t cluster_runs_taken_over;    /* lost nodes' runs ended node_lost here */
	uint64_t cluster_purged;	     /* runs purged from the cluster by retention */
	uint64_t cluster_purge_failures;     /* ... that failed (the max age removes them) */
	uint64_t cluster_owner_known;	     /* forwarded on a remembered owner (forward_known) */
	uint64_t cluster_owner_stale;	     /* ... whose owner had changed: asked again */
	uint64_t cluster_publishes;	     /* batches acknowledged by JetStream */
	uint64_t cluster_publish_usec_sum;   /* their submit → acknowledgement time */
	uint64_t cluster_publish_buckets[8]; /* ≤ 0.5, 1, 2.5, 5, 10, 25, 100 ms, +Inf */
	/* the shim's SHIM_MEMORY, polled by metrics.c (sandbox_mem_known: a reply came) */
	bool sandbox_mem_known;
	uint64_t sandbox_mem[2], sandbox_count[2]; /* [0] idle, [1] busy */
} Metrics;
#define CLUSTER_PUB_BUCKETS 8

typedef struct Op Op;
typedef struct HarnessSet HarnessSet;

/* What a commit meant for the run an op belongs to (CommitHooks.committed). */
typedef enum CommitOutcome {
	COMMIT_ENDED,	       /* the op that made the run terminal is on disk */
	COMMIT_REFUSED_FULL,   /* an event refused past chunk_high_water */
	COMMIT_REFUSED,	       /* refused: the run is terminal already, gone, or the op invalid */
	COMMIT_STORAGE_FAILED, /* the commit failed; the run was marked failed where it could be */
	COMMIT_FENCED,	       /* cluster mode: its events were not replicated (another node
				* owns it, or no acknowledgement): stop its processes, end it */
} CommitOutcome;

/* The only way commit.c reaches the layers above it (it knows runs by id
 * alone). coordinator.c fills one in (coordinator_commit_hooks: the driver's
 * functions, the watchdog's and the delivery's choice) and hands it to
 * commit_setup(). Every member is called from within
 * a commit or a queuing call, never re-entering the queue it is called from. */
typedef struct CommitHooks {
	/* Queue the buffered output of every driven run (commit_now, before it writes). */
	void (*flush)(Coordinator *c);
	/* Is run_id driven here? Then *ret is its log context (borrowed). */
	bool (*run_log)(Coordinator *c, const char *run_id, LogCtx *ret);
	/* The values to redact from a client's event on run_id: the driven run's own
	 * (borrowed: *ret_owned false) or every configured secret (a new vector:
	 * *ret_owned true). May return NULL. */
	char **(*secrets)(Coordinator *c, const char *run_id, bool *ret_owned);
	/* What the commit of an op meant for run_id's driven Run, which exists:
	 * driven is true when the driver queued the op. The Run may be freed. */
	void (*committed)(Coordinator *c, const char *run_id, bool driven, CommitOutcome what);
	/* After a commit that succeeded: the bytes of live data in the run log
	 * (the watchdog warns and starts size retention). */
	void (*log_usage)(Coordinator *c, uint64_t used);
	/* How this commit's ops become visible (commit-int.h): single-host
	 * publishing (commit_delivery_local) or, in cluster mode, replication
	 * first (commit_delivery_replicated). Asked once per commit. */
	const struct CommitDelivery *(*delivery)(Coordinator *c);
} CommitHooks;

struct Coordinator {
	struct event_base *base;
	CoordConf conf;
	RunLog *runlog;
	PeerServer *server; /* routerd's socket (and tests' clients) */
	Client *clients;
	Watch *watches;
	Run *runs;
	SbxExec *sbx_execs; /* the sandbox API's execs (sandbox-exec.c) */
	/* Undo what the driver attached to a run (bridge, sandbox, listeners, a
	 * RUN_CANCEL waiting), from run_free(); coordinator_new() sets it to
	 * driver_run_teardown. NULL: nothing to undo. */
	void (*run_teardown)(Run *run);
	Peer *shim;	     /* the link's Peer once it said HELLO, else NULL */
	PeerLink *shim_link; /* to containerd-shim: reconnects, HELLO deadline */
	char shim_path[4096];
	struct event *flush_ev;
	struct event *commit_ev;
	const CommitHooks *commit_hooks; /* set by commit_setup() */
	Op *ops_head, *ops_tail;
	usec_t ops_since;	 /* when the oldest queued op was queued */
	struct event *linger_ev; /* cluster mode: the commit waits for more (commit.c) */
	struct event *watchdog_ev;
	int watchdog_pending;	 /* SANDBOX_STATS replies still expected this round */
	uint64_t watchdog_round; /* rounds started (watchdog_cb) */
	struct event *retention_ev;
	char prune_cursor[RUN_ID_LEN + 1];
	HarnessSet *harnesses;
	bool storage_ok;
	bool stopping;
	/* A commit failed after its events went to the cluster (commit.c): this
	 * process writes nothing more and stops; coordinator_run returns it. */
	int halted;
	Metrics m;
	int tool_calls; /* host tool processes running, all runs */
	/* the tools' cgroup (bridge.c), NULL when tool_cgroup is off or unavailable */
	CgroupHost *tool_cgh;
	Cgroup *tool_cg;
	uint64_t tool_call_seq; /* names the leaves: e<seq> */
	ThreadOutput *thread_output;
	uint64_t log_used, log_map; /* live bytes of the run log after the last commit, map size */
	bool log_warned;	    /* over map_warn_percent (warned once) */
	struct TenantStat *tenants; /* tenant.c: one per tenant seen */
	size_t n_tenants;
	RunLogTenantUsage *tenant_usage; /* the log by tenant, largest first (watchdog.c) */
	size_t n_tenant_usage;

	/* cluster mode ([cluster] nats), else NULL */
	struct Cluster *cluster;     /* [cluster] nats set: JetStream (replicate.c), else NULL */
	struct Replicator *repl;     /* replicate.c's state, with cluster */
	struct Placement *placement; /* placement.c's state, with cluster */
	struct Takeover *takeover;   /* takeover.c's state, with cluster */
	struct Forwarder *fwd;	     /* forward.c's state, with cluster */
	struct RemoteReads *remote;  /* remote.c's state, with cluster */
	struct Hydrate *hydrates;    /* chat.c: hydrates in progress */
	LoopLag *loop_lag;	     /* how late the loop runs a timer (/metrics) */
	/* egress.c: the sandboxes' own egress lists (SANDBOX_EGRESS) */
	struct SandboxEgress *egress;
	/* set while a held request is handled again after its thread's owner
	 * was looked up: route it here, do not look again */
	bool route_here;
};

/* tenant.c — tenants (docs/SECURITY.md "Tenants"): who owns a thread, the
 * per-tenant quotas checked before work or data is created, the counts
 * /metrics shows by tenant. */
enum { TENANT_REFUSED_THREADS, TENANT_REFUSED_RUNS, TENANT_REFUSED_OWNER, _TENANT_REFUSED_MAX };
typedef struct TenantStat {
	char name[TENANT_NAME_MAX + 1];
	uint64_t threads;      /* threads it owns (the run log's owners) */
	uint64_t runs_started; /* since start */
	uint64_t refused[_TENANT_REFUSED_MAX];
} TenantStat;
/* The tenant's entry, made when new (NULL when out of memory). */
TenantStat *tenant_stat(Coordinator *c, const char *name);
/* Count the threads each tenant owns and the log by tenant (start-up). */
int tenants_load(Coordinator *c);
void tenants_free(Coordinator *c);
/* The tenant a request names, TENANT_DEFAULT when none; false (answered
 * -EINVAL) when the name is not one. */
bool tenant_request_ok(Peer *p, const Frame *f, const char **tenant);
/* Before a request creates work or data in thread_id for tenant: the thread
 * is tenant's (claimed when it has no owner, within tenant_max_threads:
 * else 429 tenant_threads_quota) or 403 thread_forbidden; for a run, the
 * tenant's runs driven here are under tenant_max_running (else 429
 * tenant_runs_quota). false: refused and answered; *ret_err a storage error
 * the caller returns (0 otherwise). */
bool tenant_admit(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
		  const char *tenant, bool run, int *ret_err);
/* For a request that changes or reads from a thread without creating
 * anything (a sandbox stopped or deleted, the source of a restore): refused
 * 403 thread_forbidden when another tenant owns it; no claim. false: refused
 * and answered, or *ret_err a storage error. */
bool tenant_check(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
		  const char *tenant, int *ret_err);
/* Runs of tenant driven here (not ended). */
size_t tenant_running(Coordinator *c, const char *tenant);
/* The /metrics lines by tenant. */
void tenant_metrics(Coordinator *c, FILE *out);

/* egress.c: a sandbox's own egress (docs/SANDBOX-API.md "Egress"). */
typedef struct SandboxEgress SandboxEgress;
/* The pseudo run id of a sandbox's egress proxy (SANDBOX_PROXY/UNLISTEN). */
#define SANDBOX_EGRESS_RUN "sandbox-egress"
/* For an exec of the sandbox API in thread_id's sandbox: append
 * HTTPS_PROXY=… and https_proxy=… to the NULL-terminated vector *env when the
 * thread has an egress proxy (PUT /sandboxes/{id}/egress); 2 when appended,
 * 0 when it has none, -ENOMEM. */
int sandbox_egress_env(Coordinator *c, const char *thread_id, char ***env);
/* Forget thread_id's egress list (its sandbox destroyed); the shim closes
 * the listener with the sandbox. */
void sandbox_egress_forget(Coordinator *c, const char *thread_id);
void sandbox_egress_free_all(Coordinator *c);
int handle_sandbox_egress(Peer *p, const Frame *f, const Msg_SANDBOX_EGRESS *m, void *ud);

/* run-api.c: the direct run-log API (a client writes a run's log). */
int handle_run_open(Peer *p, const Frame *f, const Msg_RUN_OPEN *m, void *ud);
int handle_run_append(Peer *p, const Frame *f, const Msg_RUN_APPEND *m, void *ud);
int handle_run_finish(Peer *p, const Frame *f, const Msg_RUN_FINISH *m, void *ud);

/* coordinator.c */
int coordinator_run(const DaemonArgs *args);
/* A new run id (a UUID v4). */
void run_uuid(char out[RUN_ID_LEN + 1]);
/* commit.c's way up: the driver (runs) and the watchdog (usage). */
extern const CommitHooks coordinator_commit_hooks;

/* driver.c: append the value of every secret of every harness (≥ 4 bytes,
 * each once) to the NULL-terminated malloc'd vector *values. */
void secrets_collect(Coordinator *c, char ***values);
/* redact.c (values: a NULL-terminated vector of secret values). Does
 * s[0..len) hold any of them? */
bool redact_holds(char *const *values, const char *s, size_t len);
/* s[0..len) with every value replaced by [REDACTED] (malloc'd; its length in
 * *ret_len when not NULL), NULL when out of memory. */
char *redact_string(char *const *values, const char *s, size_t len, size_t *ret_len);
/* Redact every decoded string, key and number of j in place: true when
 * something changed. */
bool redact_tree(char *const *values, json_t *j);
/* Replace every occurrence of each value in *text (length *len,
 * NUL-terminated, malloc'd) with [REDACTED]; -ENOMEM leaves it as it was. */
int redact_text(char *const *values, char **text, size_t *len);
/* ... in every string (keys too) of a JSON value, in place. */
int redact_json(char *const *values, json_t *j);

/* run.c — the Run: new/free/find, and what it says (ops for the log). The
 * emit functions take ownership of chunk/fields/drive. */
/* A new Run in state RUN_WAIT_SHIM, listed in c->runs; NULL when out of memory. */
Run *run_new(Coordinator *c, const char *run_id, const char *thread_id);
/* Unlist and free it: its timers, its calls to the shim, and through
 * Coordinator.run_teardown what the driver attached to it. */
void run_free(Run *run);
Run *run_find(Coordinator *c, const char *run_id);
/* The run whose exec (main or post step) is exec_id, while it is attached or
 * being cancelled; NULL otherwise. */
Run *run_find_exec(Coordinator *c, uint64_t exec_id);
/* Queue an event of a driven run (no-op once the run is RUN_DONE). */
void run_emit(Run *run, json_t *chunk, json_t *drive);
/* The same, merging fields into the record in the same transaction. */
void run_emit_fields(Run *run, json_t *chunk, json_t *drive, json_t *fields);
/* An event given as JSON text, stored as it is (an NDJSON runner's line). */
void run_emit_text(Run *run, const char *text, size_t len, json_t *drive);
/* Queue the run's last event with its terminal status; the Run is freed when it committed. */
void run_end(Run *run, json_t *chunk, const char *status, json_t *fields);
/* run_end with RUN_ERROR {message, code} and status failed. */
void run_fail(Run *run, const char *message, const char *code);
/* Queue a driver-state update alone (no event). */
void run_save_drive(Run *run, json_t *drive);

/* commit.c — the op queue. All take ownership of chunk/fields/drive. */
/* Queue an op of run_id's driver: chunk (stamped with the time), or else a
 * copy of text[0..len) stored as it is, or neither (a driver-state update or a
 * status alone); status "" or NULL unless terminal; drive json_null() deletes
 * the driver state. Redacted with secrets (NULL-terminated, may be NULL).
 * -ENOMEM, with everything released, when it could not be queued. */
int commit_queue_run(Coordinator *c, const char *run_id, json_t *chunk, const char *text,
		     size_t len, const char *status, json_t *fields, json_t *drive,
		     char *const *secrets);

/* agui-guard.c: every stored stream a valid AG-UI stream */
typedef enum AguiVerdict { AGUI_KEEP, AGUI_CHANGED, AGUI_DROP } AguiVerdict;
/* Look at a chunk about to be queued: *ret_before = chunks to queue first
 * (or NULL); AGUI_CHANGED when the chunk was amended, AGUI_DROP to drop it. */
AguiVerdict agui_guard_chunk(Run *run, json_t *chunk, json_t **ret_before);
/* Before the terminal chunk: *chunk may be replaced (NULL → a RUN_FINISHED
 * for "completed"); returns the closing chunks to queue before it. */
json_t *agui_guard_end(Run *run, json_t **chunk, const char *status);
/* The chunks closing what is open (tool calls get an interrupted result). */
json_t *agui_guard_closers(Run *run, const char *why);
/* The same for a run not driven here (a lost node's, ended node_lost by a
 * takeover): *state (a guard state, NULL at first; the caller's to
 * json_decref) tracks the run's chunks one by one, in order; then the
 * chunks that close what they left open, as agui_guard_closers gives. */
void agui_state_track(json_t **state, const json_t *chunk);
json_t *agui_state_closers(json_t **state, const char *why);
/* After a restart: the state from the run's stored chunks. */
int agui_guard_rebuild(Run *run);
/* Is chunk an event @ag-ui/core's EventSchemas accepts (its type known, its
 * required fields there with their types)? 0, or -EBADMSG with why. */
int agui_chunk_check(const json_t *chunk, Reason *why);
/* RUN_START's run, created in the next group commit (before the ops queued
 * after this for it: RUN_STARTED, the driver state); RUN_START's reply goes
 * with that commit's acknowledgements, an error if the creation failed (then
 * the run's other ops of the commit fail -ENOENT). 0 or -ENOMEM. */
int commit_queue_create(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
			const char *thread_id, const char *harness, const char *tenant);
/* A client's RUN_APPEND / RUN_FINISH: acknowledged after the commit. */
void op_queue_client(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id, json_t *chunk,
		     const char *status, json_t *fields);
/* A client's RUN_APPEND: the chunk text is stored exactly as the client sent it. */
void op_queue_client_text(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
			  const char *text);
/* Write everything queued now (before a watchdog decision, at shutdown). */
void commit_now(Coordinator *c);
void commit_setup(Coordinator *c, const CommitHooks *hooks);
void commit_teardown(Coordinator *c);
/* Cluster mode: run_id was written by another node (fenced): fail it in the
 * local log alone with code fenced, and stop its processes (COMMIT_FENCED). */
void commit_fail_fenced(Coordinator *c, const char *run_id);
/* Events committed in a transaction of their own, outside the op queue (the
 * watchdog's end of a stalled run): made visible as a commit's are, by the
 * delivery (CommitDelivery.late: in cluster mode replicated first, in order
 * with the run's other batches, the terminal record mirrored), then
 * RUN_EVENTS to the watchers. Texts and rec are copied. */
void commit_publish_committed(Coordinator *c, const char *run_id, int64_t first_seq,
			      const char *const *texts, const size_t *lens, size_t n,
			      const json_t *rec);
/* The two deliveries of commits (commit-int.h; CommitHooks.delivery). */
extern const struct CommitDelivery commit_delivery_local, commit_delivery_replicated;

/* watch.c — the watch list (RUN_WATCH): a leaf. */
/* The watch of run_id by cl (any client's when cl is NULL), or NULL. */
Watch *watch_find(Coordinator *c, const Client *cl, const char *run_id);
/* cl watches run_id (once): 0 and the watch in *ret (may be NULL), or -ENOMEM. */
int watch_add(Coordinator *c, Client *cl, const char *run_id, Watch **ret);
/* Drop cl's watches of run_id (NULL: all of cl's), drop(c, w) on each first. */
void watch_remove(Coordinator *c, const Client *cl, const char *run_id,
		  void (*drop)(Coordinator *c, Watch *w));
/* RUN_EVENTS to the watchers of run_id. */
void publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	     const size_t *lens, size_t n, const json_t *record);

/* run-error.c — a run's terminal RUN_ERROR, built in one place (a leaf). */
/* threadId/runId onto a RUN_ERROR (runId, metadata.tanstack.{threadId,runId}). */
void agui_error_ids(json_t *chunk, const char *thread_id, const char *run_id);
/* {type RUN_ERROR, message, code[, timestamp]} naming run_id (and its thread)
 * as agui_error_ids does; run_id NULL: not named (the AG-UI guard does it);
 * timestamp 0: none (the commit stamps it). NULL when out of memory. */
json_t *run_error_chunk(const char *message, const char *code, const char *thread_id,
			const char *run_id, int64_t timestamp);
/* The record fields of that end: {"error": {message, code}}. */
json_t *run_error_fields(const char *message, const char *code);

/* driver.c */
void run_start_driving(Run *run, const json_t *messages, const json_t *metadata);
/* Start a second exec in the run's sandbox after the main one (argv fixed by
 * the adapter, never built from input); done gets its stdout. */
int run_post_exec(Run *run, char *const *argv,
		  void (*done)(Run *run, int64_t code, const char *out, size_t len));
int run_cancel(Run *run, PeerDeferred *d);
void driver_setup(Coordinator *c);
/* What commits mean for driven runs (CommitHooks, see there). */
bool driver_run_log(Coordinator *c, const char *run_id, LogCtx *ret);
char **driver_secrets(Coordinator *c, const char *run_id, bool *ret_owned);
void driver_committed(Coordinator *c, const char *run_id, bool driven, CommitOutcome what);
/* Coordinator.run_teardown: close its bridge, destroy its sandbox (reuse =
 * none), drop its listeners, answer a RUN_CANCEL waiting with the record. */
void driver_run_teardown(Run *run);
void driver_recover(Coordinator *c);
int shim_connect_now(Coordinator *c);
/* The shim's pushes to coordinatord (EXEC_OUTPUT, EXEC_EXIT, SANDBOX_QUEUED);
 * not the shim's own request table, shim.c's shim_handlers. */
extern const PeerHandler driver_shim_pushes[];
void driver_flush_all(Coordinator *c);
void driver_thread_output_free(Coordinator *c);

/* bridge.c */
/* The tools' cgroup per tool_cgroup: reap what a previous instance left, create
 * it. 0, or a negative errno (logged) when it is required and cannot be made. */
int bridge_setup(Coordinator *c);
/* Kill and remove it (after every run is freed). */
void bridge_teardown(Coordinator *c);
/* The host tools' lines of /metrics: calls running; with limits, the group's
 * OOM kills and refused forks. */
void bridge_metrics(Coordinator *c, FILE *f);
void bridge_open(Run *run);
void bridge_close(Run *run);
int handle_bridge_call(Peer *p, const Frame *f, const Msg_BRIDGE_CALL *m, void *ud);

/* files.c */
int handle_thread_file(Peer *p, const Frame *f, const Msg_THREAD_FILE *m, void *ud);
/* sandboxes.c: the sandbox API's lifecycle and capabilities */
int handle_sandbox_ctl(Peer *p, const Frame *f, const Msg_SANDBOX_CTL *m, void *ud);
int handle_capabilities_get(Peer *p, const Frame *f, const Msg_CAPABILITIES_GET *m, void *ud);
int handle_snapshot_list(Peer *p, const Frame *f, const Msg_SNAPSHOT_LIST *m, void *ud);
int handle_watch_poll(Peer *p, const Frame *f, const Msg_WATCH_POLL *m, void *ud);

/* sandbox-exec.c: the sandbox API's execs (not runs: no run log). */
int handle_sbx_exec(Peer *p, const Frame *f, const Msg_SBX_EXEC *m, void *ud);
int handle_sbx_exec_input(Peer *p, const Frame *f, const Msg_SBX_EXEC_INPUT *m, void *ud);
int handle_sbx_exec_kill(Peer *p, const Frame *f, const Msg_SBX_EXEC_KILL *m, void *ud);
int handle_sbx_exec_list(Peer *p, const Frame *f, const Msg_SBX_EXEC_LIST *m, void *ud);
/* The shim's pushes of an exec that is no run's: true when it was one of these. */
bool sbx_exec_output(Coordinator *c, const Msg_EXEC_OUTPUT *m);
bool sbx_exec_exit(Coordinator *c, const Msg_EXEC_EXIT *m);
/* routerd's connection cl is gone: its foreground execs are killed. */
void sbx_exec_client_gone(Coordinator *c, Client *cl);
/* The shim connection is lost: every running exec ends "lost". */
void sbx_exec_shim_lost(Coordinator *c);
/* The shim said HELLO: kill the execs it lists as ours that nobody here knows. */
void sbx_exec_shim_ready(Coordinator *c);
void sbx_exec_free_all(Coordinator *c);

/* snapshots.c: SNAPSHOT_CREATE and SNAPSHOT_RESTORE, relayed to the shim. */
int handle_snapshot_create(Peer *p, const Frame *f, const Msg_SNAPSHOT_CREATE *m, void *ud);
int handle_snapshot_restore(Peer *p, const Frame *f, const Msg_SNAPSHOT_RESTORE *m, void *ud);

/* coordinator.c: checks request handlers share. Each returns true to go on,
 * or answers the request with an ERROR (with reason, when not NULL) and
 * returns false: a thread id that thread_id_valid() refuses (-EINVAL), a shim
 * not connected (-ECONNRESET). */
bool request_thread_id_ok(Peer *p, const Frame *f, const char *thread_id, const char *reason);
bool request_shim_ready(Peer *p, const Frame *f, Coordinator *c, const char *reason);
/* with reuse = none (a thread has no workspace of its own): -EBUSY
 * "reuse_none" with message. */
bool request_reuse_ok(Peer *p, const Frame *f, Coordinator *c, const char *message);
/* Answer f later with the shim's outcome of the message in w (type; the
 * caller encodes and frees w), as ops says; the shim must be ready (else
 * request_shim_ready's ERROR, now). Returns the handler's result: 0, or
 * -ENOMEM with nothing answered. *ret_relay (may be NULL): peer_relay's
 * result (on a failure it answered f), or -ENOTCONN when nothing was sent. */
int request_shim_relay(Peer *p, const Frame *f, Coordinator *c, const char *reason, int type,
		       const MpWriter *w, usec_t timeout, const PeerRelayOps *ops, int *ret_relay);
/* A PeerRelayOps's answer when the shim does not answer. */
#define SHIM_RELAY_UNAVAILABLE                                                                     \
	.unavailable_reason = "shim_unavailable", .unavailable = "containerd-shim unavailable"

/* ---- chat.c ---- */
#define CHAT_HYDRATE_MAX_RUNS 100 /* the newest runs a hydrate rebuilds */
/* GET /chat?threadId= (CHAT_HYDRATE): {messages: UIMessage[], activeRun, interrupts:
 * null}, rebuilt from runs (the thread's records, newest first), to p's
 * request f. Answered later (or now), the rebuild in slices that yield to
 * the loop: an ERROR -EFBIG past read_max_bytes, -EFBIG "too_large" past
 * hydrate_read_max_bytes read. Cluster mode, a thread taken over: the runs
 * not in local (runId → true; NULL: every run is local) ran on a lost node
 * and are read from JetStream. 0, or -ENOMEM and nothing is answered. */
int chat_hydrate(Coordinator *c, Peer *p, const Frame *f, json_t *runs, json_t *local);
/* Drop the hydrates in progress (unanswered). */
void chat_teardown(Coordinator *c);

/* metrics.c */
/* Count a run reaching a terminal status. */
void metrics_count_finish(Coordinator *c, const char *status);
/* The Prometheus text of every counter and gauge (malloc'd, may be NULL after
 * a write error) and the number of runs driven now. -ENOMEM. */
int metrics_text(Coordinator *c, char **ret_text, size_t *ret_active);
/* Poll the shim's SHIM_MEMORY every 2 s for /metrics (runwarden_sandbox_*). */
void metrics_setup(Coordinator *c);
void metrics_teardown(Coordinator *c);

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

/* coordinator.c: a client connection on fd (the loopback of forward.c:
 * forwarded = true). 0 or a negative errno (fd closed). */
int coordinator_attach_client(Coordinator *c, int fd, bool forwarded);

/* forward.c — cluster mode: requests about a thread another node owns are
 * forwarded to that node's coordinatord over NATS request/reply
 * (rw.node.<node>.rpc), and this node serves the requests others forward
 * to it. No-ops without [cluster] nats. */
/* Serve rw.node.<this node>.rpc (after replicate_setup). 0 or a negative errno. */
int forward_setup(Coordinator *c);
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

/* watchdog.c */
/* After a commit: warn on crossing map_warn_percent, start size retention past its mark. */
void watchdog_log_usage(Coordinator *c, uint64_t used);
/* Count the run log by tenant into c->tenant_usage (size retention, /metrics). */
int watchdog_tenant_usage(Coordinator *c);
void watchdog_setup(Coordinator *c);
void watchdog_teardown(Coordinator *c);
