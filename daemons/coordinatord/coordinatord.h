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
 * Files: coordinator.c (loop, router and client requests), commit.c (ops,
 * group commit, publishing), driver.c (shell harness driver, shim link,
 * crash re-attach), watchdog.c (stall watchdog, retention), files.c (THREAD_FILE
 * passed to the shim).
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
#include "msg.h"
#include "peer.h"
#include "runlog.h"
#include "shared-conf.h"
#include "time-util.h"

typedef struct Coordinator Coordinator;
typedef struct Client Client;
typedef struct Run Run;
typedef struct Harness Harness;
typedef struct Adapter Adapter;

struct Client {
	Client *next;
	Coordinator *c;
	Peer *peer;
};

typedef struct Watch {
	struct Watch *next;
	char run_id[RUN_ID_LEN + 1];
	Client *client;
} Watch;

typedef enum RunState {
	RUN_WAIT_SHIM,	/* waiting for containerd-shim to be connected */
	RUN_ENSURING,	/* SANDBOX_ENSURE in flight (maybe queued for a slot) */
	RUN_STARTING,	/* EXEC_START in flight */
	RUN_EXECUTING,	/* output streaming */
	RUN_REATTACH,	/* after a restart: waiting to EXEC_ATTACH */
	RUN_CANCELLING, /* a cancel: EXEC_KILL of its exec in flight, or its EXEC_EXIT awaited */
	RUN_DONE,	/* its terminal Op is queued; freed when it completed */
} RunState;

struct Run {
	Run *next;
	Coordinator *c;
	char run_id[RUN_ID_LEN + 1];
	char *thread_id;
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
	bool run_timed_out;	 /* max_run_ms: the cancel path ends it run_timeout */
	bool shim_lost;	   /* RUN_REATTACH after the shim's connection dropped (not a restart) */
	uint64_t cpu_usec; /* last SANDBOX_STATS reading */
	bool cpu_known;
	Client *cancel_client; /* a RUN_CANCEL waiting for the destroy */
	uint64_t cancel_req_id;
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
	uint64_t bridge_port;  /* the forward to routerd inside the sandbox, 0 = none */
	uint64_t proxy_port;   /* the egress proxy inside the sandbox, 0 = none */
	int prep;	       /* the preparation step before the harness starts */
	bool post_exec;	       /* an adapter's step after the main process (git diff) */
	bool cancel_wait_exit; /* cancel: finish on the killed exec's EXEC_EXIT */
	OutBuf post_out;
	void (*post_done)(Run *run, int64_t code, const char *out, size_t len);
	bool output_limited; /* over its output budget (drop mode: output is dropped) */
	uint64_t dropped;    /* output bytes dropped since then (this process's view) */
	json_t *agui;	     /* what the stored stream has open (agui-guard.c) */
};

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
} Metrics;

typedef struct Op Op;
typedef struct HarnessSet HarnessSet;

struct Coordinator {
	struct event_base *base;
	CoordConf conf;
	RunLog *runlog;
	int listen_fd;
	struct event *listen_ev;
	Client *clients;
	Watch *watches;
	Run *runs;
	Peer *shim;
	struct event *shim_timer;
	usec_t shim_backoff;
	struct event *flush_ev;
	struct event *commit_ev;
	Op *ops_head, *ops_tail;
	struct event *watchdog_ev;
	int watchdog_pending; /* SANDBOX_STATS replies still expected this round */
	struct event *retention_ev;
	char prune_cursor[RUN_ID_LEN + 1];
	HarnessSet *harnesses;
	bool storage_ok;
	bool stopping;
	Metrics m;
	int tool_calls; /* host tool processes running, all runs */
	/* the tools' cgroup (bridge.c), NULL when tool_cgroup is off or unavailable */
	CgroupHost *tool_cgh;
	Cgroup *tool_cg;
	uint64_t tool_call_seq; /* names the leaves: e<seq> */
	ThreadOutput *thread_output;
	uint64_t log_used, log_map; /* live bytes of the run log after the last commit, map size */
	bool log_warned;	    /* over map_warn_percent (warned once) */
};

/* coordinator.c */
int coordinator_run(const DaemonArgs *args);

/* driver.c: append the value of every secret of every harness (≥ 4 bytes,
 * each once) to the NULL-terminated malloc'd vector *values. */
void secrets_collect(Coordinator *c, char ***values);
/* commit.c: replace every occurrence of each value in *text (length *len,
 * NUL-terminated, malloc'd) with [REDACTED]; -ENOMEM leaves it as it was. */
int redact_text(char *const *values, char **text, size_t *len);
/* ... in every string (keys too) of a JSON value, in place. */
int redact_json(char *const *values, json_t *j);

/* commit.c — the op queue. All take ownership of chunk/fields/drive. */
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
/* threadId/runId onto a RUN_ERROR (runId, metadata.tanstack.{threadId,runId}). */
void agui_error_ids(json_t *chunk, const char *thread_id, const char *run_id);
/* After a restart: the state from the run's stored chunks. */
int agui_guard_rebuild(Run *run);
/* Is chunk an event @ag-ui/core's EventSchemas accepts (its type known, its
 * required fields there with their types)? 0, or -EBADMSG with why. */
int agui_chunk_check(const json_t *chunk, char *why, size_t len);
/* Queue a driver-state update alone (no event). */
void run_save_drive(Run *run, json_t *drive);
/* A client's RUN_APPEND / RUN_FINISH: acknowledged after the commit. */
void op_queue_client(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id, json_t *chunk,
		     const char *status, json_t *fields);
/* A client's RUN_APPEND: the chunk text is stored exactly as the client sent it. */
void op_queue_client_text(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
			  const char *text);
/* A client went away: its queued acknowledgements are dropped. */
void commit_forget_client(Coordinator *c, Client *cl);
/* cl if it is still connected (a reply may come after its client left), else NULL. */
Client *coordinator_client_live(Coordinator *c, Client *cl);
/* Write everything queued now (before a watchdog decision, at shutdown). */
void commit_now(Coordinator *c);
void commit_setup(Coordinator *c);
void commit_teardown(Coordinator *c);
/* RUN_EVENTS to the watchers of run_id. */
void publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	     const size_t *lens, size_t n, const json_t *record);
void metrics_count_finish(Coordinator *c, const char *status);

/* driver.c */
Run *run_new(Coordinator *c, const char *run_id, const char *thread_id);
void run_free(Run *run);
Run *run_find(Coordinator *c, const char *run_id);
void run_start_driving(Run *run, const json_t *messages, const json_t *metadata);
/* Start a second exec in the run's sandbox after the main one (argv fixed by
 * the adapter, never built from input); done gets its stdout. */
int run_post_exec(Run *run, char *const *argv,
		  void (*done)(Run *run, int64_t code, const char *out, size_t len));
int run_cancel(Run *run, Client *cl, uint64_t req_id);
void driver_setup(Coordinator *c);
void driver_recover(Coordinator *c);
void shim_connect_now(Coordinator *c);
extern const PeerHandler shim_handlers[];
json_t *chunk_new(const char *type);
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
void bridge_forget_client(Run *run, Client *cl);
int handle_bridge_call(Peer *p, const Frame *f, const Msg_BRIDGE_CALL *m, void *ud);

/* files.c */
int handle_thread_file(Peer *p, const Frame *f, const Msg_THREAD_FILE *m, void *ud);

/* ---- chat.c ---- */
/* GET /chat?threadId= (CHAT_HYDRATE): {messages: UIMessage[], activeRun, interrupts:
 * null} as a new JSON text. -EFBIG past read_max_bytes. */
int chat_hydrate(Coordinator *c, const char *thread_id, char **ret_json);

/* watchdog.c */
/* After a commit: warn on crossing map_warn_percent, start size retention past its mark. */
void watchdog_log_usage(Coordinator *c, uint64_t used);
void watchdog_setup(Coordinator *c);
void watchdog_teardown(Coordinator *c);
