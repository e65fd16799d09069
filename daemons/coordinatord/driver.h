/* SPDX-License-Identifier: MIT */
/*
 * driver.h — the driver layer (driver.c, driver-output.c, driver-link.c,
 * bridge.c, sandbox-exec.c): a run's way to its exec, the shim link, the
 * MCP bridge, the sandbox API's execs. Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "adapter.h"

/* driver.c: append the value of every secret of every harness (≥ 4 bytes,
 * each once) to the NULL-terminated malloc'd vector *values. */
void secrets_collect(Coordinator *c, char ***values);

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
/* Cluster mode, on the thread's owner: another node asks for the output and
 * end of an exec it forwarded (sandbox-exec.c; the asking side is sbx-relay.c). */
int handle_sbx_relay_poll(Peer *p, const Frame *f, const Msg_SBX_RELAY_POLL *m, void *ud);
/* The last output of a background exec (sandbox-exec.c). */
int handle_sbx_exec_read(Peer *p, const Frame *f, const Msg_SBX_EXEC_READ *m, void *ud);
/* The shim connection is lost: every running exec ends "lost". */
void sbx_exec_shim_lost(Coordinator *c);
/* The shim said HELLO: kill the execs it lists as ours that nobody here knows. */
void sbx_exec_shim_ready(Coordinator *c);
void sbx_exec_free_all(Coordinator *c);
