/* SPDX-License-Identifier: MIT */
/*
 * adapter-shell.c — the built-in `shell` harness: the last user message run
 * by the configured shell (`sh -c`) in /workspace, reported as one tool call:
 *   TOOL_CALL_START / TOOL_CALL_ARGS {"command":…} / TOOL_CALL_END,
 *   CUSTOM process.stdout|process.stderr {text} as output arrives (coalesced
 *   per loop turn, never split inside a UTF-8 sequence),
 *   TOOL_CALL_RESULT {exitCode, reason}, then RUN_FINISHED (exit 0) or
 *   RUN_ERROR {message, code} (code exit_status, or timeout/oom/pids_limit).
 * No state of its own: the tool call's id is in the driver state.
 */
#include "config.h"

#include "adapter.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

static int
shell_begin(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec)
{
	if (!run->command && shell_command_from_messages(messages, &run->command) < 0) {
		run_fail(run, "shell harness: the last user message has no text to run",
			 "harness_error");
		return -EINVAL;
	}
	run_emit(run,
		 json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_START", "toolCallId",
			   run->tool_call_id, "toolCallName", "shell"),
		 NULL);
	json_auto_t *args = json_pack("{s:s}", "command", run->command);
	_cleanup_free_ char *args_text = json_dump_compact(args);
	run_emit(run,
		 json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_ARGS", "toolCallId",
			   run->tool_call_id, "delta", args_text ? args_text : "{}"),
		 NULL);
	run_emit(run,
		 json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId", run->tool_call_id),
		 NULL);

	const char *sh = run->harness->argv ? run->harness->argv[0] : run->c->conf.shell;
	if (strv_push(&spec->argv, sh) < 0 || strv_push(&spec->argv, "-c") < 0 ||
	    strv_push(&spec->argv, run->command) < 0 ||
	    strv_push(&spec->env, "PATH=/usr/local/bin:/usr/bin:/bin") < 0 ||
	    strv_push(&spec->env, "HOME=/workspace") < 0 ||
	    strv_push(&spec->env, "LANG=C.UTF-8") < 0 || strv_push(&spec->env, "TERM=dumb") < 0 ||
	    strv_pushf(&spec->env, "RUNWARDEN_RUN_ID=%s", run->run_id) < 0) {
		run_fail(run, "out of memory", "internal");
		return -ENOMEM;
	}
	return 0;
}

/* Where output may be cut into a chunk without cutting a secret in two (a
 * secret split across chunks would escape redaction, which works per chunk):
 * not inside a complete occurrence in the buffer, and — unless this is the
 * end — not before a tail that could be the start of a secret still arriving. */
static size_t
safe_cut(Run *run, const OutBuf *b, size_t lim, bool final)
{
	size_t cut = MIN(lim, b->len);

	for (size_t i = 0; run->secret_values && run->secret_values[i]; i++) {
		const char *sv = run->secret_values[i];
		size_t sl = strlen(sv);
		if (!final)
			for (size_t k = MIN(sl - 1, b->len); k > 0; k--)
				if (memcmp(b->data + b->len - k, sv, k) == 0) {
					cut = MIN(cut, b->len - k);
					break;
				}
		for (size_t at = 0; at + sl <= b->len; at++)
			if (memcmp(b->data + at, sv, sl) == 0 && at < cut && cut < at + sl)
				cut = at > 0 ? at : at + sl;
	}
	return cut;
}

static void
shell_drain(Run *run, bool final)
{
	static const char *const names[3] = {NULL, "process.stdout", "process.stderr"};

	for (int s = 1; s <= 2; s++) {
		for (;;) {
			OutBuf *b = &run->out[s];
			size_t len;
			size_t lim = safe_cut(run, b, (size_t)run->c->conf.output_chunk_max, final);
			if (lim == 0)
				break;
			char *text = outbuf_take(b, lim, final, &len);
			if (!text)
				break;
			json_t *chunk = json_pack("{s:s, s:s, s:{s:s%}}", "type", "CUSTOM", "name",
						  names[s], "value", "text", text, len);
			free(text);
			run_emit(run, chunk, NULL); /* driver.c saves the state after the drain */
		}
	}
}

static void
shell_exit(Run *run, int64_t code, int64_t sig, const char *why)
{
	json_auto_t *content = json_pack("{s:I, s:s}", "exitCode", (json_int_t)code, "reason", why);
	if (sig)
		json_object_set_new(content, "signal", json_integer(sig));
	_cleanup_free_ char *content_text = json_dump_compact(content);
	run_emit(run,
		 json_pack("{s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT", "toolCallId",
			   run->tool_call_id, "role", "tool", "content",
			   content_text ? content_text : "{}"),
		 NULL);

	if (code == 0 && streq(why, "exit")) {
		run_end(run,
			json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "RUN_FINISHED", "threadId",
				  run->thread_id, "runId", run->run_id, "outcome", "type",
				  "success"),
			"completed", json_pack("{s:i}", "exitCode", 0));
		return;
	}
	char m[160];
	const char *errcode = "exit_status";
	if (streq(why, "exit"))
		snprintf(m, sizeof(m), "command exited with status %" PRId64, code);
	else if (streq(why, "timeout") || streq(why, "oom") || streq(why, "pids_limit")) {
		snprintf(m, sizeof(m), "command stopped: %s",
			 streq(why, "oom")	 ? "out of memory (sandbox memory limit)"
			 : streq(why, "timeout") ? "timed out"
						 : "process limit reached");
		errcode = why;
	} else if (sig)
		snprintf(m, sizeof(m), "command %s by signal %" PRId64,
			 streq(why, "killed") ? "killed" : "terminated", sig);
	else
		snprintf(m, sizeof(m), "command ended: %s", why);
	run_end(run,
		json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", m, "code", errcode),
		"failed",
		json_pack("{s:I, s:{s:s, s:s}}", "exitCode", (json_int_t)code, "error", "message",
			  m, "code", errcode));
}

const Adapter adapter_shell = {
    .kind = ADAPTER_SHELL,
    .driver_run_started = true,
    .begin = shell_begin,
    .drain = shell_drain,
    .exit = shell_exit,
};
