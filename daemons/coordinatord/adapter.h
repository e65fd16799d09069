/* SPDX-License-Identifier: MIT */
/*
 * adapter.h — harnesses and their adapters.
 *
 * A harness ([harness.NAME] in runwarden.conf, or the built-in `shell`) names
 * an adapter and what to run. The adapter turns the harness's process output
 * into AG-UI chunks (tanstack-protocol.md §3, §6):
 *
 *   shell        the last user message run by `sh -c` (built in)
 *   ndjson       TanStack's colocated runner protocol: the run request as JSON
 *                on stdin, one chunk per stdout line (§1.6)
 *   claude-code  `claude -p --output-format stream-json --verbose` (§6.1)
 *   codex        `codex exec --experimental-json` (§6.2)
 *
 * The driver (driver.c) owns the process: it starts the exec the adapter
 * describes, feeds it the bytes of each stream in order exactly once (after a
 * re-attach too), calls drain() at the end of every loop turn and exit() when
 * the process ended. Adapters emit with run_emit()/run_end() (run.c).
 *
 * After every drain that consumed bytes, the driver stores its state with
 * the adapter's save() in the same transaction as the chunks the drain
 * queued (docs/DESIGN.md "Driver state beside the record"); a restarted
 * coordinatord hands it to load() and re-attaches at the saved offsets, so
 * the stream goes on exactly as if nothing had happened. Bytes a drain did
 * not consume (a partial line) are not counted in the offsets: the shim
 * sends them again.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "run.h"
#include "strv.h"

void exec_spec_done(ExecSpec *s);

const Adapter *adapter_get(AdapterKind k);

/* Shared helpers for line-based adapters. */
/* Take the next complete line of stream s (without its newline); NULL when
 * none. *ret_len is its length. The bytes count as consumed. */
char *run_take_line(Run *run, int s, size_t *ret_len);
/* Keep the last bytes of stderr for error messages (consumed). */
void run_keep_stderr(Run *run);
/* The last lines of stderr kept, for a RUN_ERROR message. */
const char *run_stderr_tail(Run *run);
/* Ask the shim to kill the run's exec (the stream is over for us). */
void run_kill_exec(Run *run);
/* How an agent's run will end: decided when the agent says so (its result
 * line), applied when its process has exited (and any post step ran). */
typedef struct RunEnding {
	json_t *chunk;	/* RUN_FINISHED or RUN_ERROR; NULL while undecided */
	json_t *fields; /* merged into the record */
	char status[16];
} RunEnding;

/* completed with this RUN_FINISHED chunk (taken) and usage (taken, may be NULL) */
void ending_complete(RunEnding *e, json_t *chunk, json_t *usage);
/* failed with RUN_ERROR {message, code}; exit_code >= 0 goes into the record */
void ending_fail(RunEnding *e, const char *message, const char *code, int64_t exit_code);
/* failed because the process ended first: "<what> (<why> <code>)[: stderr tail]" */
void ending_fail_exit(Run *run, RunEnding *e, const char *what, int64_t code, const char *why);
/* run_end() with what was decided */
void ending_apply(Run *run, RunEnding *e);
void ending_done(RunEnding *e);
/* An ending as JSON for an adapter's save() (null while undecided), and back. */
json_t *ending_save(const RunEnding *e);
int ending_load(RunEnding *e, const json_t *j);

/* The state an agent CLI adapter (claude, codex) keeps, first in its own
 * state struct: the object of what is open (its save() writes it whole) and
 * the ending. */
typedef struct AgentState {
	json_t *open;	  /* the adapter's: claude's open tool calls, codex's items */
	RunEnding ending; /* decided by the agent's result, applied after its exit */
} AgentState;

/* run->astate = a zeroed state of size bytes (an AgentState first) with an
 * empty object; -ENOMEM. */
int agent_state_new(Run *run, size_t size);
/* Frees run->astate (NULL allowed) and clears it. */
void agent_state_free(Run *run);
/* load()'s end: a->open becomes a copy of open (checked by the caller), the
 * ending is state's "ending". 0, -ENOMEM or ending_load()'s -EBADMSG. */
int agent_state_load(AgentState *a, const json_t *open, const json_t *state);

/* The start of an agent CLI's exec (claude, codex): the last user message's
 * text in *ret_prompt (for stdin), spec->argv the harness's command (or dflt)
 * then fixed (NULL-terminated), spec->env PATH, HOME and LANG, and
 * metadata.sessionId in *ret_session (NULL when absent or empty). -EINVAL
 * after run_fail() when the message has no text ("<what> harness: …") or the
 * session id starts with '-'. */
int agent_cli_begin(Run *run, const char *what, const json_t *messages, const json_t *metadata,
		    const char *dflt, const char *const *fixed, ExecSpec *spec, char **ret_prompt,
		    const char **ret_session);
/* agent_cli_begin() with the prompt as the exec's stdin (claude, codex). */
int agent_cli_start(Run *run, const char *what, const json_t *messages, const json_t *metadata,
		    const char *dflt, const char *const *fixed, ExecSpec *spec,
		    const char **ret_session);

/* A run-scoped id: "<runId8>-<n>" (n, run->id_counter, is kept in the
 * driver state: an id is never handed out twice, after a restart neither). */
void run_gen_id(Run *run, char *buf, size_t len);
