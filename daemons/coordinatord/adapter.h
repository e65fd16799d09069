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

#include "coordinatord.h"
#include "strv.h"

typedef enum AdapterKind {
	ADAPTER_SHELL,
	ADAPTER_NDJSON,
	ADAPTER_CLAUDE,
	ADAPTER_CODEX,
	_ADAPTER_MAX,
} AdapterKind;

struct Harness {
	char *name;
	AdapterKind adapter;
	char **command; /* the argv; NULL = the adapter's default */
	char **env;	/* extra environment, "K=V" */
	char **secrets; /* names of coordinatord's environment variables handed over */
	char **egress;	/* host[:port] the harness may reach through the proxy */
	/* egress_allow_private: networks the proxy may reach although not public */
	char **egress_allow_private;
	int64_t timeout_ms;
	int64_t max_line;
	bool keep_processes; /* what its process leaves running outlives the run */
	char **tools;	     /* names of [tool.NAME] host tools offered over the MCP bridge */
	char *image;	     /* the sandbox image of its runs (docs/IMAGES.md); NULL/"" = host */
};

/* A host tool ([tool.NAME]): a command run on the host, outside every sandbox,
 * with the call's JSON arguments on stdin; its stdout (JSON, or text) is the
 * result. */
typedef struct Tool {
	char *name;
	char *description;
	json_t *schema; /* JSON Schema of the arguments (an object) */
	char **command; /* the argv */
	int64_t timeout_ms;
} Tool;

typedef struct HarnessSet {
	Harness *v;
	size_t n;
	Tool *tools;
	size_t n_tools;
} HarnessSet;

const Tool *tool_find(const HarnessSet *set, const char *name);

/* Read every [harness.NAME] section of the configuration files (the same
 * files, in the same order, as the daemon's keys); the built-in `shell` is
 * always there. Errors are logged as "file:line: key: reason". */
int harness_load(const DaemonArgs *a, HarnessSet *ret);
int harness_load_string(const char *name, const char *text, HarnessSet *ret, char *err,
			size_t errlen);
/* Print the keys of [harness.NAME] and [tool.NAME], with their help and
 * defaults, as commented-out template sections (--dump-config). */
void harness_conf_dump(FILE *f);
const Harness *harness_find(const HarnessSet *set, const char *name);
void harness_set_done(HarnessSet *set);
const char *adapter_name(AdapterKind k);

/* What to exec, filled by the adapter's begin(). */
typedef struct ExecSpec {
	char **argv; /* malloc'd vector */
	char **env;  /* malloc'd vector, "K=V" */
	char *stdin_data;
	size_t stdin_len;
} ExecSpec;

void exec_spec_done(ExecSpec *s);

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

/* The start of an agent CLI's exec (claude, codex): the last user message's
 * text in *ret_prompt (for stdin), spec->argv the harness's command (or dflt)
 * then fixed (NULL-terminated), spec->env PATH, HOME and LANG, and
 * metadata.sessionId in *ret_session (NULL when absent or empty). -EINVAL
 * after run_fail() when the message has no text ("<what> harness: …") or the
 * session id starts with '-'. */
int agent_cli_begin(Run *run, const char *what, const json_t *messages, const json_t *metadata,
		    const char *dflt, const char *const *fixed, ExecSpec *spec, char **ret_prompt,
		    const char **ret_session);

/* A run-scoped id: "<runId8>-<n>" (n, run->id_counter, is kept in the
 * driver state: an id is never handed out twice, after a restart neither). */
void run_gen_id(Run *run, char *buf, size_t len);
