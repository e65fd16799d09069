/* SPDX-License-Identifier: MIT */
/*
 * adapter-codex.c — OpenAI Codex CLI (tanstack-protocol.md §6.2):
 *
 *   codex exec --experimental-json --skip-git-repo-check
 *              --sandbox danger-full-access [resume <sessionId>]
 *
 * with the prompt on stdin (the runwarden sandbox is the sandbox: codex's own
 * bubblewrap cannot nest in it). Events map to the same chunk families:
 *   thread.started              → RUN_STARTED + CUSTOM codex.session-id {sessionId}
 *   item.* agent_message        → TEXT_MESSAGE_START / CONTENT / END
 *   item.* reasoning            → REASONING_* blocks
 *   item.* command_execution    → TOOL_CALL_* "command_execution" {command} + RESULT
 *                                 {aggregated_output, exit_code, status}
 *   item.* mcp_tool_call        → TOOL_CALL_* <tool> (mcp__<server>__<tool> unless the
 *                                 bridged "tanstack" server) + RESULT (text or error)
 *   item.* web_search           → TOOL_CALL_* "web_search" {query}
 *   item.* file_change          → TOOL_CALL_* "file_change" {changes} + RESULT
 *                                 {changes, status}, and CUSTOM file.changed
 *                                 {type, path, timestamp} per change
 *   item.* todo_list            → TOOL_CALL_* "todo_list" + RESULT {items}
 * (tool names and result shapes as @tanstack/ai-codex's; a failed item's
 * result has metadata.tanstack.state "output-error").
 *   turn.completed              → RUN_FINISHED (usage)
 *   turn.failed, error          → RUN_ERROR
 * Text is streamed from item.updated as the growth of the item's text.
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

/* a.open: item id → {"sent": length of text already emitted, "kind": …};
 * a.ending: from turn.completed / turn.failed */
typedef struct CodexState {
	AgentState a;
} CodexState;

static int
codex_begin(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec)
{
	const char *session;
	static const char *const fixed[] = {
	    "exec",	 "--experimental-json", "--skip-git-repo-check",
	    "--sandbox", "danger-full-access",	NULL};

	if (agent_cli_start(run, "codex", messages, metadata, "codex", fixed, spec, &session) < 0)
		return -EINVAL;
	if (session) { /* a positional */
		strv_push(&spec->argv, "resume");
		strv_push(&spec->argv, session);
	}
	return 0;
}

/* the driver saves the state (ours included) after the drain */
static void
emit(Run *run, json_t *chunk)
{
	run_emit(run, chunk, NULL);
}

/* The state of an item, created on first sight. */
static json_t *
item_state(CodexState *st, const char *id, bool *ret_new)
{
	json_t *s = json_object_get(st->a.open, id);
	*ret_new = !s;
	if (!s) {
		s = json_pack("{s:i}", "sent", 0);
		json_object_set_new(st->a.open, id, s);
	}
	return s;
}

static void
text_item(Run *run, const char *id, const json_t *item, bool completed, bool reasoning)
{
	CodexState *st = run->astate;
	bool fresh;
	json_t *s = item_state(st, id, &fresh);
	const char *text = json_string_value(json_object_get(item, "text")) ?: "";
	size_t sent = (size_t)json_integer_value(json_object_get(s, "sent"));
	size_t len = strlen(text);

	if (fresh) {
		if (reasoning) {
			emit(run,
			     json_pack("{s:s, s:s}", "type", "REASONING_START", "messageId", id));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_START",
					    "messageId", id, "role", "reasoning"));
		} else
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_START",
					    "messageId", id, "role", "assistant"));
	}
	if (len > sent) {
		emit(run,
		     json_pack("{s:s, s:s, s:s}", "type",
			       reasoning ? "REASONING_MESSAGE_CONTENT" : "TEXT_MESSAGE_CONTENT",
			       "messageId", id, "delta", text + sent));
		json_object_set_new(s, "sent", json_integer((json_int_t)len));
	}
	if (completed) {
		if (reasoning) {
			emit(run, json_pack("{s:s, s:s}", "type", "REASONING_MESSAGE_END",
					    "messageId", id));
			emit(run,
			     json_pack("{s:s, s:s}", "type", "REASONING_END", "messageId", id));
		} else
			emit(run,
			     json_pack("{s:s, s:s}", "type", "TEXT_MESSAGE_END", "messageId", id));
	}
}

static void
tool_item(Run *run, const char *id, const json_t *item, bool completed, const char *name,
	  json_t *args, json_t *result)
{
	CodexState *st = run->astate;
	bool fresh;
	json_t *s = item_state(st, id, &fresh);

	if (fresh) {
		_cleanup_free_ char *a = json_dump_compact(args);
		emit(run, json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_START", "toolCallId", id,
				    "toolCallName", name));
		emit(run, json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_ARGS", "toolCallId", id,
				    "delta", a ? a : "{}"));
		emit(run, json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId", id));
	}
	if (completed && !json_is_true(json_object_get(s, "done"))) {
		char mid[64];
		_cleanup_free_ char *r = json_is_string(result) ? NULL : json_dump_compact(result);
		const char *content = json_is_string(result) ? json_string_value(result) : r;
		run_gen_id(run, mid, sizeof(mid));
		json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT",
				      "messageId", mid, "toolCallId", id, "content",
				      content ? content : "{}", "role", "tool");
		const char *status = json_string_value(json_object_get(item, "status"));
		const json_t *err = json_object_get(item, "error");
		if ((status && streq(status, "failed")) || (err && !json_is_null(err)))
			json_object_set_new(
			    c, "metadata",
			    json_pack("{s:{s:s}}", "tanstack", "state", "output-error"));
		emit(run, c);
		json_object_set_new(s, "done", json_true());
	}
	json_decref(args);
	json_decref(result);
}

/* An MCP tool call's result as @tanstack/ai-codex gives it: the error's
 * message, the text blocks joined, the structured content, or {status}. */
static json_t *
mcp_result(const json_t *item)
{
	const json_t *err = json_object_get(item, "error");
	if (err && !json_is_null(err)) {
		const char *m = json_string_value(json_object_get(err, "message"));
		return json_string(m ? m : "tool call failed");
	}
	const json_t *res = json_object_get(item, "result");
	_cleanup_free_ char *text = NULL;
	size_t len = 0, i;
	json_t *b;
	json_array_foreach(json_object_get(res, "content"), i, b)
	{
		const char *t = json_string_value(json_object_get(b, "text"));
		if (!t)
			continue;
		size_t n = strlen(t);
		char *p = realloc(text, len + n + 1);
		if (!p)
			break;
		memcpy(p + len, t, n + 1);
		text = p;
		len += n;
	}
	if (text && len)
		return json_string(text);
	if (json_object_get(res, "structured_content"))
		return json_incref(json_object_get(res, "structured_content"));
	return json_pack("{s:O?}", "status", json_object_get(item, "status"));
}

/* A running command's output as it grows (item.updated's aggregated_output):
 * the new part as CUSTOM process.stdout {text, toolCallId}, as the shell
 * harness streams it, so a client shows it on the tool call while it runs. */
static void
command_output(Run *run, const char *id, const json_t *item)
{
	CodexState *st = run->astate;
	bool fresh;
	json_t *s = item_state(st, id, &fresh);
	const char *out = json_string_value(json_object_get(item, "aggregated_output"));
	size_t len = out ? strlen(out) : 0;
	size_t shown = (size_t)json_integer_value(json_object_get(s, "shown"));

	if (json_is_true(json_object_get(s, "done")) || len <= shown)
		return;
	/* NULL when the output was rewritten and the cut is not a character's
	 * start: nothing shown then, the result has it all */
	json_t *chunk = json_pack("{s:s, s:s, s:{s:s, s:s}}", "type", "CUSTOM", "name",
				  "process.stdout", "value", "text", out + shown, "toolCallId", id);
	if (chunk)
		emit(run, chunk);
	json_object_set_new(s, "shown", json_integer((json_int_t)len));
}

static void
item_event(Run *run, const json_t *item, bool completed)
{
	const char *id = json_string_value(json_object_get(item, "id"));
	const char *kind = json_string_value(json_object_get(item, "type"));
	if (!id || !kind)
		return;
	if (streq(kind, "agent_message"))
		text_item(run, id, item, completed, false);
	else if (streq(kind, "reasoning"))
		text_item(run, id, item, completed, true);
	else if (streq(kind, "command_execution")) {
		const json_t *code = json_object_get(item, "exit_code");
		json_t *res =
		    json_pack("{s:s, s:O?}", "aggregated_output",
			      json_string_value(json_object_get(item, "aggregated_output")) ?: "",
			      "exit_code", code);
		if (res && json_is_null(code))
			json_object_del(res, "exit_code");
		if (res && json_object_get(item, "status"))
			json_object_set(res, "status", json_object_get(item, "status"));
		tool_item(run, id, item, completed, "command_execution",
			  json_pack("{s:O?}", "command", json_object_get(item, "command")), res);
		if (!completed)
			command_output(run, id, item);
	} else if (streq(kind, "mcp_tool_call")) {
		/* as @tanstack/ai-codex names it: the bridged server's tools by
		 * their name, another server's as mcp__<server>__<tool> */
		const char *tool = json_string_value(json_object_get(item, "tool")) ?: "tool";
		const char *server = json_string_value(json_object_get(item, "server")) ?: "";
		char name[256];
		if (streq(server, "tanstack") || !*server)
			snprintf(name, sizeof(name), "%s", tool);
		else
			snprintf(name, sizeof(name), "mcp__%s__%s", server, tool);
		tool_item(run, id, item, completed, name,
			  json_incref(json_object_get(item, "arguments")) ?: json_object(),
			  mcp_result(item));
	} else if (streq(kind, "web_search"))
		tool_item(run, id, item, completed, "web_search",
			  json_pack("{s:O?}", "query", json_object_get(item, "query")),
			  json_pack("{s:s}", "status", "completed"));
	else if (streq(kind, "file_change")) {
		tool_item(run, id, item, completed, "file_change",
			  json_pack("{s:O?}", "changes", json_object_get(item, "changes")),
			  json_pack("{s:O?, s:O?}", "changes", json_object_get(item, "changes"),
				    "status", json_object_get(item, "status")));
		/* and CUSTOM file.changed in @tanstack/ai's typed shape
		 * {type: create|change|delete, path, timestamp} per change */
		size_t i;
		json_t *ch;
		if (completed)
			json_array_foreach(json_object_get(item, "changes"), i, ch)
			{
				const char *k =
				    json_string_value(json_object_get(ch, "kind")) ?: "";
				const char *path = json_string_value(json_object_get(ch, "path"));
				if (!path)
					continue;
				emit(run,
				     json_pack("{s:s, s:s, s:{s:s, s:s, s:I}}", "type", "CUSTOM",
					       "name", "file.changed", "value", "type",
					       streq(k, "add")	    ? "create"
					       : streq(k, "delete") ? "delete"
								    : "change",
					       "path", path, "timestamp",
					       (json_int_t)now_epoch_ms()));
			}
	} else if (streq(kind, "todo_list"))
		tool_item(run, id, item, completed, "todo_list", json_object(),
			  json_pack("{s:O?}", "items", json_object_get(item, "items")));
}

static void
codex_line(Run *run, const char *line, size_t len)
{
	CodexState *st = run->astate;
	json_t *j = json_loadb(line, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));

	if (!type) {
		if (len)
			log_ctx(LOG_DEBUG, &run->log, "codex: non-event line: %.200s", line);
		json_decref(j);
		return;
	}
	if (streq(type, "thread.started")) {
		emit(run, json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId",
				    run->thread_id, "runId", run->run_id));
		emit(run, json_pack("{s:s, s:s, s:{s:s}}", "type", "CUSTOM", "name",
				    "codex.session-id", "value", "sessionId",
				    json_string_value(json_object_get(j, "thread_id")) ?: ""));
	} else if (streq(type, "item.started") || streq(type, "item.updated")) {
		item_event(run, json_object_get(j, "item"), false);
	} else if (streq(type, "item.completed")) {
		item_event(run, json_object_get(j, "item"), true);
	} else if (streq(type, "turn.completed") && !st->a.ending.chunk) {
		const json_t *u = json_object_get(j, "usage");
		json_int_t in = json_integer_value(json_object_get(u, "input_tokens"));
		json_int_t out = json_integer_value(json_object_get(u, "output_tokens"));
		json_int_t cached = json_integer_value(json_object_get(u, "cached_input_tokens"));
		json_t *usage = json_pack("[{s:I, s:I, s:I, s:I, s:s}]", "inputTokens", in,
					  "outputTokens", out, "totalTokens", in + out,
					  "cachedInputTokens", cached, "provider", "openai");
		ending_complete(&st->a.ending,
				json_pack("{s:s, s:s, s:s, s:{s:s}, s:O, s:{s:{s:s}}}", "type",
					  "RUN_FINISHED", "threadId", run->thread_id, "runId",
					  run->run_id, "outcome", "type", "success", "usage", usage,
					  "metadata", "tanstack", "finishReason", "stop"),
				usage);
	} else if ((streq(type, "turn.failed") || streq(type, "error")) && !st->a.ending.chunk) {
		const char *m =
		    json_string_value(json_object_get(json_object_get(j, "error"), "message"));
		if (!m)
			m = json_string_value(json_object_get(j, "message"));
		ending_fail(&st->a.ending, m ? m : "codex turn failed",
			    streq(type, "error") ? RUN_ERR_CODEX_ERROR : RUN_ERR_TURN_FAILED, -1);
	}
	json_decref(j);
}

static void
codex_drain(Run *run, bool final)
{
	size_t len;
	char *line;

	run_keep_stderr(run);
	while ((line = run_take_line(run, 1, &len))) {
		codex_line(run, line, len);
		free(line);
	}
	OutBuf *b = &run->out[1];
	if ((final && b->len) || b->len > (size_t)run->harness->max_line) {
		char *rest = final ? strndup(b->data, b->len) : NULL;
		b->taken += b->len;
		b->len = 0;
		if (rest)
			codex_line(run, rest, strlen(rest));
		free(rest);
	}
}

static void
codex_exit(Run *run, int64_t code, int64_t sig, const char *why)
{
	CodexState *st = run->astate;

	if (!st->a.ending.chunk)
		ending_fail_exit(run, &st->a.ending, "codex ended without completing its turn",
				 code, why);
	ending_apply(run, &st->a.ending);
}

static int
codex_init(Run *run)
{
	return agent_state_new(run, sizeof(CodexState));
}

static json_t *
codex_save(Run *run)
{
	CodexState *st = run->astate;
	return json_pack("{s:O, s:o}", "items", st->a.open, "ending", ending_save(&st->a.ending));
}

static int
codex_load(Run *run, const json_t *state)
{
	CodexState *st = run->astate;
	const json_t *items = json_object_get(state, "items");
	const char *id;
	const json_t *v;

	if (!json_is_object(items))
		return -EBADMSG;
	json_object_foreach((json_t *)items, id, v)
	{
		if (!json_is_object(v) || !json_is_integer(json_object_get(v, "sent")))
			return -EBADMSG;
	}
	return agent_state_load(&st->a, items, state);
}

const Adapter adapter_codex = {
    .kind = ADAPTER_CODEX,
    .driver_run_started = false,
    .init = codex_init,
    .begin = codex_begin,
    .drain = codex_drain,
    .exit = codex_exit,
    .free_state = agent_state_free,
    .save = codex_save,
    .load = codex_load,
};
