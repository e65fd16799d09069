/* SPDX-License-Identifier: MIT */
/*
 * coordinator.h — the lifecycle and request layer (coordinator.c, run-api.c,
 * run-start.c, files.c, sandboxes.c, snapshots.c, chat.c, metrics.c,
 * egress.c, tenant.c). Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "watchdog.h"

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

/* run-start.c: RUN_START's body rules, for HTTP and socket clients alike. */
typedef struct RunStartBody {
	json_t *messages; /* a non-empty array of objects with a string role */
	json_t *metadata; /* an object, or NULL */
	const Harness *harness;
} RunStartBody;
/* Check req's body (all but the thread id and the tenant): true and *ret
 * (run_start_body_done releases it), or false after answering the ERROR. */
bool run_start_body(Coordinator *c, Peer *p, const Frame *f, const Msg_RUN_START *req,
		    RunStartBody *ret);
void run_start_body_done(RunStartBody *b);

/* run-api.c: the direct run-log API (a client writes a run's log). */
int handle_run_open(Peer *p, const Frame *f, const Msg_RUN_OPEN *m, void *ud);
int handle_run_append(Peer *p, const Frame *f, const Msg_RUN_APPEND *m, void *ud);
int handle_run_finish(Peer *p, const Frame *f, const Msg_RUN_FINISH *m, void *ud);

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
/* The lists kept in <state_dir>/egress, read at start (names the operator no
 * longer permits dropped). */
void sandbox_egress_load(Coordinator *c);
/* Whether thread_id has an egress list. */
bool sandbox_egress_listed(Coordinator *c, const char *thread_id);
/* The shim's connection is ready (again): proxies opened before may be gone. */
void sandbox_egress_shim_ready(Coordinator *c);
/* Whether thread_id has an egress list whose proxy may not be open in its
 * sandbox sandbox_id now (created: the ENSURE made the sandbox anew). */
bool sandbox_egress_stale(Coordinator *c, const char *thread_id, const char *sandbox_id,
			  bool created);
/* Open it again, one call a step (0: UNLISTEN, 1: PROXY on its port, 2: the
 * PROXY's reply in body): 0 when the step's call went out (cb(…, ud) then),
 * 1 when done, a negative errno. */
int sandbox_egress_reopen(Coordinator *c, const char *thread_id, const char *sandbox_id, int step,
			  const msgpack_object *body, PeerReplyFn cb, void *ud);
/* The same five for the layers below (sandbox-exec.c), which reach them
 * through Coordinator.egress_ops: coordinator_new() sets it to these. */
extern const SandboxEgressOps sandbox_egress_ops;

/* coordinator.c */
int coordinator_run(const DaemonArgs *args);
/* commit.c's way up: the driver (runs) and the watchdog (usage). */
extern const CommitHooks coordinator_commit_hooks;

/* files.c */
int handle_thread_file(Peer *p, const Frame *f, const Msg_THREAD_FILE *m, void *ud);

/* sandboxes.c: the sandbox API's lifecycle and capabilities */
int handle_sandbox_ctl(Peer *p, const Frame *f, const Msg_SANDBOX_CTL *m, void *ud);
int handle_capabilities_get(Peer *p, const Frame *f, const Msg_CAPABILITIES_GET *m, void *ud);
int handle_snapshot_list(Peer *p, const Frame *f, const Msg_SNAPSHOT_LIST *m, void *ud);
int handle_watch_poll(Peer *p, const Frame *f, const Msg_WATCH_POLL *m, void *ud);

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
/* The Prometheus text of every counter and gauge (malloc'd, may be NULL after
 * a write error) and the number of runs driven now. -ENOMEM. */
int metrics_text(Coordinator *c, char **ret_text, size_t *ret_active);
/* Poll the shim's SHIM_MEMORY every 2 s for /metrics (runwarden_sandbox_*). */
void metrics_setup(Coordinator *c);
void metrics_teardown(Coordinator *c);

/* coordinator.c: a client connection on fd (the loopback of forward.c:
 * forwarded = true). 0 or a negative errno (fd closed). */
int coordinator_attach_client(Coordinator *c, int fd, bool forwarded);
