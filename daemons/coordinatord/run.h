/* SPDX-License-Identifier: MIT */
/*
 * run.h — the Run layer (run.c, agui-guard.c): a driven run's life and
 * what it emits. Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "commit.h"
#include "harness-conf.h"

/* The adapter interface a Run's driver calls (implemented by the adapters
 * above, adapter.h; chosen by adapter_get()). */
/* What to exec, filled by the adapter's begin(). */
typedef struct ExecSpec {
	char **argv; /* malloc'd vector */
	char **env;  /* malloc'd vector, "K=V" */
	char *stdin_data;
	size_t stdin_len;
} ExecSpec;

typedef struct Adapter {
	AdapterKind kind;
	/* Does the driver emit RUN_STARTED when the run starts? (claude, codex
	 * and ndjson runners announce their own.) */
	bool driver_run_started;
	/* Allocate run->astate (also for a run re-attached after a restart,
	 * before load()). May be NULL. */
	int (*init)(Run *run);
	/* Emit the opening chunks and describe the exec. 0 or a negative errno
	 * with the run failed (harness_error). */
	int (*begin)(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec);
	/* Turn what is buffered in run->out[1..2] into chunks; final at the end. */
	void (*drain)(Run *run, bool final);
	/* The process ended (after a final drain). Must end the run (run_end/run_fail)
	 * or start a post step. */
	void (*exit)(Run *run, int64_t code, int64_t sig, const char *reason);
	/* Release run->astate. */
	void (*free_state)(Run *run);
	/* The parse state as JSON (open messages and tool calls, the ending
	 * decided, …: everything drain() left behind), stored with the driver
	 * state. NULL = nothing to keep (or out of memory: the caller fails
	 * closed). May be NULL for a stateless adapter. */
	json_t *(*save)(Run *run);
	/* Restore, after init(), what save() returned before a restart. 0, or
	 * -EBADMSG for a state this adapter cannot have written. */
	int (*load)(Run *run, const json_t *state);
} Adapter;

/* run.c — the Run: new/free/find, and what it says (ops for the log). The
 * emit functions take ownership of chunk/fields/drive. */
/* A new Run in state RUN_WAIT_SHIM, listed in c->runs; NULL when out of memory. */
/* A new run id (a UUID v4). */
void run_uuid(char out[RUN_ID_LEN + 1]);
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
