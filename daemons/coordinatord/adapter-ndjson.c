/* SPDX-License-Identifier: MIT */
/*
 * adapter-ndjson.c — TanStack's colocated runner protocol (tanstack-protocol.md
 * §1.6): the run request {runId, threadId, messages, metadata, toolDescriptors,
 * toolExecUrl} as JSON on stdin; each stdout line is one chunk, stored as the
 * runner wrote it. Blank lines are skipped. An unparseable line, a line that
 * is not a chunk (no string "type"), a chunk @ag-ui/core's EventSchemas would
 * refuse (agui_chunk_check: unknown type, a required field missing or of the
 * wrong type), a chunk after RUN_FINISHED, or a line longer than max_line
 * ends the run with a RUN_ERROR, and the stream stops after the first
 * RUN_ERROR. A non-zero
 * exit without one becomes RUN_ERROR with the exit status and the last stderr
 * lines.
 */
#include "config.h"

#include "driver.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

typedef struct NdState {
	bool finished; /* a RUN_FINISHED went by */
} NdState;

static int
nd_begin(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec)
{
	json_auto_t *req =
	    json_pack("{s:s, s:s, s:O, s:[], s:s}", "runId", run->run_id, "threadId",
		      run->thread_id, "messages", messages, "toolDescriptors", "toolExecUrl", "");
	if (req && metadata)
		json_object_set(req, "metadata", (json_t *)metadata);
	char *text = req ? json_dump_compact(req) : NULL;
	if (!text) {
		free(text);
		run_fail(run, "out of memory", RUN_ERR_INTERNAL);
		return -ENOMEM;
	}
	spec->stdin_data = text;
	spec->stdin_len = strlen(text);
	for (size_t i = 0; run->harness->command[i]; i++)
		strv_push(&spec->argv, run->harness->command[i]);
	strv_push(&spec->env, "PATH=/usr/local/bin:/usr/bin:/bin");
	strv_push(&spec->env, "HOME=/workspace");
	strv_push(&spec->env, "LANG=C.UTF-8");
	strv_pushf(&spec->env, "RUNWARDEN_RUN_ID=%s", run->run_id);
	return 0;
}

static void
nd_error(Run *run, const char *message, const char *code)
{
	run_kill_exec(run); /* the stream is over */
	run_fail(run, message, code);
}

static void
nd_line(Run *run, char *line, size_t len)
{
	NdState *st = run->astate;
	json_error_t e;

	size_t i = 0;
	while (i < len && (line[i] == ' ' || line[i] == '\t'))
		i++;
	if (i == len)
		return; /* blank */
	json_t *j = json_loadb(line, len, 0, &e);
	if (!j) {
		char m[300];
		snprintf(m, sizeof(m), "runner sent unparseable NDJSON: %.200s", line);
		nd_error(run, m, RUN_ERR_HARNESS_ERROR);
		return;
	}
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!json_is_object(j) || !type) {
		json_decref(j);
		nd_error(run, "runner sent a non-chunk line", RUN_ERR_HARNESS_ERROR);
		return;
	}
	Reason why = {""};
	if (agui_chunk_check(j, &why) < 0) {
		char m[300];
		snprintf(m, sizeof(m), "runner sent an invalid AG-UI chunk: %s", why.msg);
		json_decref(j);
		nd_error(run, m, RUN_ERR_HARNESS_ERROR);
		return;
	}
	if (st->finished) {
		json_decref(j);
		nd_error(run, "runner sent a chunk after RUN_FINISHED", RUN_ERR_HARNESS_ERROR);
		return;
	}
	if (streq(type, "RUN_ERROR")) {
		/* the runner's own error ends the run, as it wrote it */
		const char *msg = json_string_value(json_object_get(j, "message"));
		const char *code = json_string_value(json_object_get(j, "code"));
		json_t *fields =
		    json_pack("{s:{s:s}}", "error", "message", msg ? msg : "runner error");
		if (code)
			json_object_set_new(json_object_get(fields, "error"), "code",
					    json_string(code));
		run_kill_exec(run);
		run_end(run, j, "failed", fields);
		return;
	}
	if (streq(type, "RUN_FINISHED"))
		st->finished = true;
	json_decref(j);
	/* stored as the runner wrote it (leading blanks aside) */
	run_emit_text(run, line + i, len - i, NULL); /* the driver saves the state */
}

static void
nd_drain(Run *run, bool final)
{
	size_t len;
	char *line;

	run_keep_stderr(run);
	OutBuf *b = &run->out[1];
	while (run->state != RUN_DONE && (line = run_take_line(run, 1, &len))) {
		if (len > (size_t)run->harness->max_line) {
			free(line);
			goto too_long;
		}
		nd_line(run, line, len);
		free(line);
	}
	if (run->state == RUN_DONE)
		return;
	if (b->len > (size_t)run->harness->max_line)
		goto too_long;
	if (final && b->len) { /* a last line without its newline */
		char *rest = strndup(b->data, b->len);
		b->taken += b->len;
		b->len = 0;
		if (rest)
			nd_line(run, rest, strlen(rest));
		free(rest);
	}
	return;
too_long:;
	char m[128];
	snprintf(m, sizeof(m), "runner sent a line longer than %" PRId64 " bytes",
		 run->harness->max_line);
	nd_error(run, m, RUN_ERR_HARNESS_ERROR);
}

static void
nd_exit(Run *run, int64_t code, int64_t sig, const char *why)
{
	NdState *st = run->astate;

	if (code == 0 && streq(why, "exit")) {
		/* the runner's stream ended; its last chunk is the run's last */
		run_end(run, NULL, "completed", json_pack("{s:i}", "exitCode", 0));
		(void)st;
		return;
	}
	char m[1024];
	const char *tail = run_stderr_tail(run);
	if (streq(why, "exit"))
		snprintf(m, sizeof(m), "runner exited with status %" PRId64 "%s%s", code,
			 *tail ? ": " : "", tail);
	else
		snprintf(m, sizeof(m), "runner ended: %s%s%s", why, *tail ? ": " : "", tail);
	run_end(run,
		run_error_chunk(m, streq(why, "exit") ? RUN_ERR_EXIT_STATUS : why, NULL, NULL, 0),
		"failed",
		json_pack("{s:I, s:{s:s, s:s}}", "exitCode", (json_int_t)code, "error", "message",
			  m, "code", streq(why, "exit") ? RUN_ERR_EXIT_STATUS : why));
}

static int
nd_init(Run *run)
{
	run->astate = calloc(1, sizeof(NdState));
	return run->astate ? 0 : -ENOMEM;
}

static void
nd_free(Run *run)
{
	free(run->astate);
	run->astate = NULL;
}

static json_t *
nd_save(Run *run)
{
	NdState *st = run->astate;
	return json_pack("{s:b}", "finished", st->finished);
}

static int
nd_load(Run *run, const json_t *state)
{
	NdState *st = run->astate;
	const json_t *f = json_object_get(state, "finished");
	if (!json_is_boolean(f))
		return -EBADMSG;
	st->finished = json_is_true(f);
	return 0;
}

const Adapter adapter_ndjson = {
    .kind = ADAPTER_NDJSON,
    .driver_run_started = false,
    .init = nd_init,
    .begin = nd_begin,
    .drain = nd_drain,
    .exit = nd_exit,
    .free_state = nd_free,
    .save = nd_save,
    .load = nd_load,
};
