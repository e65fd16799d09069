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
typedef struct SbxRelay SbxRelay;

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
typedef struct CommitHooks CommitHooks;
typedef struct HarnessSet HarnessSet;

/* What the sandbox API's execs (sandbox-exec.c) ask of a sandbox's egress
 * proxy (egress.c; coordinator.h says what each does). */
typedef struct SandboxEgressOps {
	bool (*stale)(Coordinator *c, const char *thread_id, const char *sandbox_id, bool created);
	int (*reopen)(Coordinator *c, const char *thread_id, const char *sandbox_id, int step,
		      const msgpack_object *body, PeerReplyFn cb, void *ud);
	int (*env)(Coordinator *c, const char *thread_id, char ***env);
	bool (*listed)(Coordinator *c, const char *thread_id);
	void (*shim_ready)(Coordinator *c);
} SandboxEgressOps;

struct Coordinator {
	struct event_base *base;
	CoordConf conf;
	RunLog *runlog;
	PeerServer *server; /* routerd's socket (and tests' clients) */
	Client *clients;
	Watch *watches;
	Run *runs;
	SbxExec *sbx_execs; /* the sandbox API's execs (sandbox-exec.c) */
	SbxRelay
	    *sbx_relays; /* cluster: execs this node's clients run on other nodes (sbx-relay.c) */
	struct StrCache
	    *sbx_ids; /* thread → its sandbox id, as the last ENSURE said (sandbox-exec.c) */
	/* Undo what the driver attached to a run (bridge, sandbox, listeners, a
	 * RUN_CANCEL waiting), from run_free(); coordinator_new() sets it to
	 * driver_run_teardown. NULL: nothing to undo. */
	void (*run_teardown)(Run *run);
	/* A sandbox's own egress proxy (egress.c, above the driver), as the
	 * sandbox API's execs need it: coordinator_new() sets it to
	 * &sandbox_egress_ops. NULL: no egress lists. */
	const struct SandboxEgressOps *egress_ops;
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
