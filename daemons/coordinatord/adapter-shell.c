/* SPDX-License-Identifier: MIT */
/*
 * adapter-shell.c — the built-in `shell` harness: the last user message run
 * by the configured shell (`sh -c`) in /workspace, reported as one tool call:
 *   TOOL_CALL_START / TOOL_CALL_ARGS {"command":…} / TOOL_CALL_END,
 *   CUSTOM process.stdout|process.stderr {text, toolCallId} as output arrives
 *   (toolCallId: the tool call it belongs to, for onCustomEvent's context and
 *   @runwarden/tanstack-client's live tool results; coalesced
 *   per loop turn, never split inside a UTF-8 sequence),
 *   TOOL_CALL_RESULT {exitCode, reason, stdout, stderr[, truncated, error]}
 *   (the output's last SHELL_KEEP bytes per stream, so a client shows it
 *   without reading the CUSTOM events; metadata.tanstack.state
 *   "output-error" when the command failed), then RUN_FINISHED (exit 0) or
 *   RUN_ERROR {message, code} (code exit_status, or timeout/oom/pids_limit).
 * Its state: the output kept for the result (saved with the driver state);
 * the tool call's id is in the driver state.
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

/* the last bytes of each stream kept for the tool result */
#define SHELL_KEEP (16 * 1024)

typedef struct ShellState {
	char *kept[3]; /* [1] stdout, [2] stderr: valid UTF-8, NUL-terminated */
	size_t len[3];
	bool truncated;
} ShellState;

static void
keep_output(Run *run, int s, const char *text, size_t n)
{
	ShellState *st = run->astate;
	if (!st)
		return;
	size_t total = st->len[s] + n, drop = total > SHELL_KEEP ? total - SHELL_KEEP : 0;
	char *p = malloc(total - drop + 1);
	if (!p)
		return;
	/* the concatenation minus its first drop bytes, cut at a character */
	size_t from_old = drop < st->len[s] ? st->len[s] - drop : 0;
	size_t skip_new = drop > st->len[s] ? drop - st->len[s] : 0;
	if (from_old)
		memcpy(p, st->kept[s] + (st->len[s] - from_old), from_old);
	memcpy(p + from_old, text + skip_new, n - skip_new);
	size_t len = from_old + n - skip_new, start = 0;
	while (drop && start < len && ((unsigned char)p[start] & 0xC0) == 0x80)
		start++;
	memmove(p, p + start, len - start);
	len -= start;
	p[len] = '\0';
	free(st->kept[s]);
	st->kept[s] = p;
	st->len[s] = len;
	if (drop)
		st->truncated = true;
}

static int
shell_begin(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec)
{
	if (!run->command && shell_command_from_messages(messages, &run->command) < 0) {
		run_fail(run, "shell harness: the last user message has no text to run",
			 RUN_ERR_HARNESS_ERROR);
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

	const char *sh = run->harness->command ? run->harness->command[0] : run->c->conf.shell;
	if (strv_push(&spec->argv, sh) < 0 || strv_push(&spec->argv, "-c") < 0 ||
	    strv_push(&spec->argv, run->command) < 0 ||
	    strv_push(&spec->env, "PATH=/usr/local/bin:/usr/bin:/bin") < 0 ||
	    strv_push(&spec->env, "HOME=/workspace") < 0 ||
	    strv_push(&spec->env, "LANG=C.UTF-8") < 0 || strv_push(&spec->env, "TERM=dumb") < 0 ||
	    strv_pushf(&spec->env, "RUNWARDEN_RUN_ID=%s", run->run_id) < 0) {
		run_fail(run, "out of memory", RUN_ERR_INTERNAL);
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
			json_t *chunk = json_pack("{s:s, s:s, s:{s:s%, s:s}}", "type", "CUSTOM",
						  "name", names[s], "value", "text", text, len,
						  "toolCallId", run->tool_call_id);
			keep_output(run, s, text, len);
			free(text);
			run_emit(run, chunk, NULL); /* the driver saves the state after the drain */
		}
	}
}

static void
shell_exit(Run *run, int64_t code, int64_t sig, const char *why)
{
	ShellState *st = run->astate;
	bool ok = code == 0 && streq(why, "exit");
	char m[160];
	const char *errcode = RUN_ERR_EXIT_STATUS;
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

	json_auto_t *content = json_pack(
	    "{s:I, s:s, s:s, s:s}", "exitCode", (json_int_t)code, "reason", why, "stdout",
	    st && st->kept[1] ? st->kept[1] : "", "stderr", st && st->kept[2] ? st->kept[2] : "");
	if (sig)
		json_object_set_new(content, "signal", json_integer(sig));
	if (st && st->truncated)
		json_object_set_new(content, "truncated", json_true());
	if (!ok)
		json_object_set_new(content, "error", json_string(m));
	_cleanup_free_ char *content_text = json_dump_compact(content);
	char mid[128];
	snprintf(mid, sizeof(mid), "%s-result", run->tool_call_id);
	json_t *result = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT",
				   "messageId", mid, "toolCallId", run->tool_call_id, "role",
				   "tool", "content", content_text ? content_text : "{}");
	if (result && !ok)
		json_object_set_new(result, "metadata",
				    json_pack("{s:{s:s}}", "tanstack", "state", "output-error"));
	run_emit(run, result, NULL);

	if (ok) {
		run_end(run,
			json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "RUN_FINISHED", "threadId",
				  run->thread_id, "runId", run->run_id, "outcome", "type",
				  "success"),
			"completed", json_pack("{s:i}", "exitCode", 0));
		return;
	}
	run_end(run, run_error_chunk(m, errcode, NULL, NULL, 0), "failed",
		json_pack("{s:I, s:{s:s, s:s}}", "exitCode", (json_int_t)code, "error", "message",
			  m, "code", errcode));
}

static int
shell_init(Run *run)
{
	run->astate = calloc(1, sizeof(ShellState));
	return run->astate ? 0 : -ENOMEM;
}

static void
shell_free(Run *run)
{
	ShellState *st = run->astate;
	if (st) {
		free(st->kept[1]);
		free(st->kept[2]);
	}
	free(st);
	run->astate = NULL;
}

static json_t *
shell_save(Run *run)
{
	ShellState *st = run->astate;
	return json_pack("{s:s, s:s, s:b}", "stdout", st->kept[1] ? st->kept[1] : "", "stderr",
			 st->kept[2] ? st->kept[2] : "", "truncated", st->truncated);
}

static int
shell_load(Run *run, const json_t *state)
{
	ShellState *st = run->astate;
	const char *o = json_string_value(json_object_get(state, "stdout"));
	const char *e = json_string_value(json_object_get(state, "stderr"));
	if (!o || !e || strlen(o) > SHELL_KEEP || strlen(e) > SHELL_KEEP)
		return -EBADMSG;
	keep_output(run, 1, o, strlen(o));
	keep_output(run, 2, e, strlen(e));
	st->truncated = json_is_true(json_object_get(state, "truncated"));
	return 0;
}

const Adapter adapter_shell = {
    .kind = ADAPTER_SHELL,
    .driver_run_started = true,
    .init = shell_init,
    .free_state = shell_free,
    .save = shell_save,
    .load = shell_load,
    .begin = shell_begin,
    .drain = shell_drain,
    .exit = shell_exit,
};
