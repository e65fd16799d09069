/* SPDX-License-Identifier: MIT */
/*
 * adapter-claude.c — Claude Code in its JSON streaming mode (tanstack-protocol.md §6.1):
 *
 *   claude -p --output-format stream-json --verbose --include-partial-messages
 *          --permission-mode bypassPermissions [--resume=<sessionId>]
 *
 * in /workspace, the prompt (the last user message) on stdin, IS_SANDBOX=1.
 * stream-json lines map to chunks:
 *   system/init            → RUN_STARTED + CUSTOM claude-code.session-id {sessionId, model, tools}
 *   stream_event partials  → TEXT_MESSAGE_* / REASONING_* / TOOL_CALL_START, _ARGS, _END
 *   assistant (whole)      → the same, for blocks the partials did not stream
 *   user tool_result       → TOOL_CALL_RESULT {toolCallId, content, role:"tool"[, state]}
 *   result success         → RUN_FINISHED (usage; finishReason stop, or length for error_max_turns)
 *   result other subtypes  → RUN_ERROR {message: the errors, code: the subtype}
 * Tool names lose the mcp__tanstack__ prefix; messages of sub-agents (a
 * parent_tool_use_id) are skipped; non-JSON lines are only logged. Tool calls
 * still open at the result get TOOL_CALL_RESULT {"status":"interrupted"}.
 * Afterwards, when /workspace is a git repository, `git diff` becomes
 * CUSTOM file.changed {type:"change", path:".", diff, timestamp} (@tanstack/ai's
 * typed shape).
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

#define MCP_PREFIX "mcp__tanstack__"
#define MAX_BLOCKS 64

typedef enum BlockKind { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING, BLOCK_TOOL } BlockKind;

typedef struct Block {
	BlockKind kind;
	char id[128]; /* message id (text/thinking) or tool call id */
} Block;

typedef struct ClaudeState {
	/* a.open: toolCallId → true, until their result; a.ending: from the
	 * result line, applied after git diff */
	AgentState a;
	char message_id[128];	  /* Anthropic's message.id of the streaming message */
	Block blocks[MAX_BLOCKS]; /* by content block index */
	bool streamed;		  /* partials streamed the current message */
	bool mid_used;		  /* the message id named a text block already */
} ClaudeState;

static void close_open_blocks(Run *run);

static ClaudeState *
st_of(Run *run)
{
	return run->astate;
}

static const char *
strip_prefix(const char *name)
{
	if (name && strncmp(name, MCP_PREFIX, strlen(MCP_PREFIX)) == 0)
		return name + strlen(MCP_PREFIX);
	return name ? name : "";
}

static int
claude_begin(Run *run, const json_t *messages, const json_t *metadata, ExecSpec *spec)
{
	const char *session;
	static const char *const fixed[] = {"-p",
					    "--output-format",
					    "stream-json",
					    "--verbose",
					    "--include-partial-messages",
					    "--permission-mode",
					    "bypassPermissions",
					    NULL};

	if (agent_cli_start(run, "claude-code", messages, metadata, "claude", fixed, spec,
			    &session) < 0)
		return -EINVAL;
	if (session) /* glued to its option: never read as an option of its own */
		strv_pushf(&spec->argv, "--resume=%s", session);
	if (run->bridge_live) { /* host tools: the file holds the URL and the token */
		strv_push(&spec->argv, "--mcp-config");
		strv_push(&spec->argv, "/dev/fd/3"); /* driver.c's wrapper */
	}
	strv_push(&spec->env, "IS_SANDBOX=1");
	strv_push(&spec->env, "CLAUDE_CODE_SANDBOXED=1");
	return 0;
}

/* the driver saves the state (ours included) after the drain */
static void
emit(Run *run, json_t *chunk)
{
	run_emit(run, chunk, NULL);
}

static void
tool_start(Run *run, const char *id, const char *name, const char *parent)
{
	json_t *c = json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_START", "toolCallId", id,
			      "toolCallName", strip_prefix(name));
	if (parent && *parent)
		json_object_set_new(c, "parentMessageId", json_string(parent));
	emit(run, c);
	json_object_set_new(st_of(run)->a.open, id, json_true());
}

/* The END chunks of an open block (nothing for a closed one). */
static void
block_end(Run *run, Block *b)
{
	if (b->kind == BLOCK_TEXT)
		emit(run, json_pack("{s:s, s:s}", "type", "TEXT_MESSAGE_END", "messageId", b->id));
	else if (b->kind == BLOCK_THINKING) {
		emit(run,
		     json_pack("{s:s, s:s}", "type", "REASONING_MESSAGE_END", "messageId", b->id));
		emit(run, json_pack("{s:s, s:s}", "type", "REASONING_END", "messageId", b->id));
	} else if (b->kind == BLOCK_TOOL)
		emit(run, json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId", b->id));
	b->kind = BLOCK_NONE;
}

static void
stream_event(Run *run, const json_t *ev)
{
	ClaudeState *st = st_of(run);
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_int_t idx = json_integer_value(json_object_get(ev, "index"));

	if (!type)
		return;
	if (streq(type, "message_start")) {
		const char *id =
		    json_string_value(json_object_get(json_object_get(ev, "message"), "id"));
		if (id)
			snprintf(st->message_id, sizeof(st->message_id), "%s", id);
		else
			run_gen_id(run, st->message_id, sizeof(st->message_id));
		st->streamed = true;
		st->mid_used = false;
		return;
	}
	if (idx < 0 || idx >= MAX_BLOCKS)
		return;
	Block *b = &st->blocks[idx];
	if (streq(type, "content_block_start")) {
		const json_t *cb = json_object_get(ev, "content_block");
		const char *bt = json_string_value(json_object_get(cb, "type"));
		if (!bt)
			return;
		if (streq(bt, "text")) {
			b->kind = BLOCK_TEXT;
			/* the first text block of a message is named by Anthropic's message id */
			if (!st->mid_used && st->message_id[0]) {
				memcpy(b->id, st->message_id, sizeof(b->id));
				st->mid_used = true;
			} else
				run_gen_id(run, b->id, sizeof(b->id));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_START",
					    "messageId", b->id, "role", "assistant"));
		} else if (streq(bt, "thinking")) {
			b->kind = BLOCK_THINKING;
			run_gen_id(run, b->id, sizeof(b->id));
			emit(run, json_pack("{s:s, s:s}", "type", "REASONING_START", "messageId",
					    b->id));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_START",
					    "messageId", b->id, "role", "reasoning"));
		} else if (streq(bt, "tool_use")) {
			b->kind = BLOCK_TOOL;
			const char *id = json_string_value(json_object_get(cb, "id"));
			if (id)
				snprintf(b->id, sizeof(b->id), "%s", id);
			else
				run_gen_id(run, b->id, sizeof(b->id));
			tool_start(run, b->id, json_string_value(json_object_get(cb, "name")),
				   st->message_id);
		}
		return;
	}
	if (streq(type, "content_block_delta")) {
		const json_t *d = json_object_get(ev, "delta");
		const char *dt = json_string_value(json_object_get(d, "type"));
		if (!dt)
			return;
		if (b->kind == BLOCK_TEXT && streq(dt, "text_delta"))
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_CONTENT",
					    "messageId", b->id, "delta",
					    json_string_value(json_object_get(d, "text")) ?: ""));
		else if (b->kind == BLOCK_THINKING && streq(dt, "thinking_delta"))
			emit(run,
			     json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_CONTENT",
				       "messageId", b->id, "delta",
				       json_string_value(json_object_get(d, "thinking")) ?: ""));
		else if (b->kind == BLOCK_TOOL && streq(dt, "input_json_delta"))
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_ARGS",
					    "toolCallId", b->id, "delta",
					    json_string_value(json_object_get(d, "partial_json"))
						?: ""));
		return;
	}
	if (streq(type, "content_block_stop"))
		block_end(run, b);
}

/* A whole assistant message: what the partials did not already stream. */
static void
assistant_message(Run *run, const json_t *msg)
{
	ClaudeState *st = st_of(run);
	const json_t *content = json_object_get(msg, "content");
	const char *mid = json_string_value(json_object_get(msg, "id"));
	bool streamed = st->streamed && mid && streq(mid, st->message_id);
	bool mid_used = false;
	size_t i;
	json_t *blk;

	if (streamed)
		return;
	json_array_foreach(content, i, blk)
	{
		const char *bt = json_string_value(json_object_get(blk, "type"));
		char id[128];
		if (!bt)
			continue;
		if (streq(bt, "text")) {
			if (!mid_used && mid) {
				snprintf(id, sizeof(id), "%s", mid);
				mid_used = true;
			} else
				run_gen_id(run, id, sizeof(id));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_START",
					    "messageId", id, "role", "assistant"));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TEXT_MESSAGE_CONTENT",
					    "messageId", id, "delta",
					    json_string_value(json_object_get(blk, "text")) ?: ""));
			emit(run,
			     json_pack("{s:s, s:s}", "type", "TEXT_MESSAGE_END", "messageId", id));
		} else if (streq(bt, "thinking")) {
			run_gen_id(run, id, sizeof(id));
			emit(run,
			     json_pack("{s:s, s:s}", "type", "REASONING_START", "messageId", id));
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_START",
					    "messageId", id, "role", "reasoning"));
			emit(run,
			     json_pack("{s:s, s:s, s:s}", "type", "REASONING_MESSAGE_CONTENT",
				       "messageId", id, "delta",
				       json_string_value(json_object_get(blk, "thinking")) ?: ""));
			emit(run, json_pack("{s:s, s:s}", "type", "REASONING_MESSAGE_END",
					    "messageId", id));
			emit(run,
			     json_pack("{s:s, s:s}", "type", "REASONING_END", "messageId", id));
		} else if (streq(bt, "tool_use")) {
			const char *tid = json_string_value(json_object_get(blk, "id"));
			if (tid)
				snprintf(id, sizeof(id), "%s", tid);
			else
				run_gen_id(run, id, sizeof(id));
			tool_start(run, id, json_string_value(json_object_get(blk, "name")), mid);
			const json_t *in = json_object_get(blk, "input");
			_cleanup_free_ char *input = in ? json_dump_compact(in) : strdup("{}");
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "TOOL_CALL_ARGS",
					    "toolCallId", id, "delta", input ? input : "{}"));
			emit(run,
			     json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId", id));
		}
	}
}

static char *
result_text(const json_t *content)
{
	if (json_is_string(content))
		return strdup(json_string_value(content));
	if (json_is_array(content)) {
		/* [{type:"text", text}, …]: the texts joined */
		size_t i, len = 0;
		json_t *p;
		char *acc = strdup("");
		json_array_foreach(content, i, p)
		{
			const char *t = json_string_value(json_object_get(p, "text"));
			if (!t || !acc)
				continue;
			size_t tl = strlen(t);
			char *n = realloc(acc, len + tl + 1);
			if (!n)
				break;
			acc = n;
			memcpy(acc + len, t, tl + 1);
			len += tl;
		}
		return acc;
	}
	return json_dump_compact(content ? content : json_null());
}

static void
user_message(Run *run, const json_t *msg)
{
	ClaudeState *st = st_of(run);
	size_t i;
	json_t *blk;

	json_array_foreach(json_object_get(msg, "content"), i, blk)
	{
		const char *bt = json_string_value(json_object_get(blk, "type"));
		const char *tid = json_string_value(json_object_get(blk, "tool_use_id"));
		if (!bt || !streq(bt, "tool_result") || !tid)
			continue;
		char mid[64];
		run_gen_id(run, mid, sizeof(mid));
		_cleanup_free_ char *text = result_text(json_object_get(blk, "content"));
		json_t *c =
		    json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "TOOL_CALL_RESULT", "messageId",
			      mid, "toolCallId", tid, "content", text ? text : "", "role", "tool");
		if (json_is_true(json_object_get(blk, "is_error")))
			json_object_set_new(c, "state", json_string("output-error"));
		emit(run, c);
		json_object_del(st->a.open, tid);
	}
}

static void
interrupt_open_tools(Run *run)
{
	ClaudeState *st = st_of(run);
	const char *tid;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(st->a.open, tmp, tid, v)
	{
		char mid[64];
		run_gen_id(run, mid, sizeof(mid));
		/* as agui-guard.c closes one: a failed result, with why */
		emit(run,
		     json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:{s:s}}}", "type", "TOOL_CALL_RESULT",
			       "messageId", mid, "toolCallId", tid, "content",
			       "{\"status\":\"interrupted\",\"error\":\"interrupted: the "
			       "agent ended its turn before the tool call finished\"}",
			       "role", "tool", "metadata", "tanstack", "state", "output-error"));
		json_object_del(st->a.open, tid);
	}
}

static json_t *
usage_of(const json_t *result, const char *model)
{
	const json_t *u = json_object_get(result, "usage");
	json_int_t in = json_integer_value(json_object_get(u, "input_tokens"));
	json_int_t out = json_integer_value(json_object_get(u, "output_tokens"));
	json_int_t cached = json_integer_value(json_object_get(u, "cache_read_input_tokens"));
	json_t *e = json_pack("{s:I, s:I, s:I}", "inputTokens", in, "outputTokens", out,
			      "totalTokens", in + out);
	if (cached)
		json_object_set_new(e, "cachedInputTokens", json_integer(cached));
	if (model)
		json_object_set_new(e, "model", json_string(model));
	json_object_set_new(e, "provider", json_string("anthropic"));
	return json_pack("[o]", e);
}

static void
result_message(Run *run, const json_t *res)
{
	ClaudeState *st = st_of(run);
	const char *subtype = json_string_value(json_object_get(res, "subtype")) ?: "unknown";

	close_open_blocks(run);
	interrupt_open_tools(run);
	if (streq(subtype, "success") || streq(subtype, "error_max_turns")) {
		json_t *usage = usage_of(res, NULL);
		json_t *fin =
		    json_pack("{s:s, s:s, s:s, s:{s:s}, s:O, s:{s:{s:s}}}", "type", "RUN_FINISHED",
			      "threadId", run->thread_id, "runId", run->run_id, "outcome", "type",
			      "success", "usage", usage, "metadata", "tanstack", "finishReason",
			      streq(subtype, "success") ? "stop" : "length");
		const json_t *cost = json_object_get(res, "total_cost_usd");
		if (json_is_number(cost))
			json_object_set_new(
			    json_object_get(json_object_get(fin, "metadata"), "tanstack"),
			    "providerUsageDetails", json_pack("{s:O}", "totalCostUsd", cost));
		ending_complete(&st->a.ending, fin, usage);
		return;
	}
	/* error subtypes: the errors joined, the subtype as the code */
	char msg[1024] = "";
	size_t i, o = 0;
	json_t *e;
	json_array_foreach(json_object_get(res, "errors"), i, e)
	{
		const char *t = json_is_string(e)
				    ? json_string_value(e)
				    : json_string_value(json_object_get(e, "message"));
		if (t && o < sizeof(msg))
			o += (size_t)snprintf(msg + o, sizeof(msg) - o, "%s%s", o ? "; " : "", t);
	}
	if (!o) {
		const char *r = json_string_value(json_object_get(res, "result"));
		snprintf(msg, sizeof(msg), "%s", r ? r : subtype);
	}
	ending_fail(&st->a.ending, msg, subtype, -1);
}

static void
claude_line(Run *run, const char *line, size_t len)
{
	json_t *j = json_loadb(line, len, 0, NULL);
	if (!json_is_object(j)) {
		if (len)
			log_ctx(LOG_DEBUG, &run->log, "claude: non-JSON line: %.200s", line);
		json_decref(j);
		return;
	}
	const char *type = json_string_value(json_object_get(j, "type"));
	const json_t *parent = json_object_get(j, "parent_tool_use_id");
	if (!type || (parent && !json_is_null(parent))) {
		json_decref(j); /* sub-agent traffic is not the run's */
		return;
	}
	if (streq(type, "system")) {
		const char *sub = json_string_value(json_object_get(j, "subtype"));
		if (sub && streq(sub, "init")) {
			emit(run, json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId",
					    run->thread_id, "runId", run->run_id));
			json_t *v =
			    json_pack("{s:s}", "sessionId",
				      json_string_value(json_object_get(j, "session_id")) ?: "");
			if (json_object_get(j, "model"))
				json_object_set(v, "model", json_object_get(j, "model"));
			if (json_object_get(j, "tools"))
				json_object_set(v, "tools", json_object_get(j, "tools"));
			emit(run, json_pack("{s:s, s:s, s:o}", "type", "CUSTOM", "name",
					    "claude-code.session-id", "value", v));
		}
	} else if (streq(type, "stream_event")) {
		stream_event(run, json_object_get(j, "event"));
	} else if (streq(type, "assistant")) {
		assistant_message(run, json_object_get(j, "message"));
		st_of(run)->streamed = false;
	} else if (streq(type, "user")) {
		user_message(run, json_object_get(j, "message"));
	} else if (streq(type, "result")) {
		result_message(run, j);
	}
	json_decref(j);
}

static void
claude_drain(Run *run, bool final)
{
	size_t len;
	char *line;

	run_keep_stderr(run);
	while (run->state != RUN_DONE && (line = run_take_line(run, 1, &len))) {
		claude_line(run, line, len);
		free(line);
	}
	OutBuf *b = &run->out[1];
	if (final && b->len) {
		char *rest = strndup(b->data, b->len);
		b->taken += b->len;
		b->len = 0;
		if (rest)
			claude_line(run, rest, strlen(rest));
		free(rest);
	} else if (b->len > (size_t)run->harness->max_line) {
		b->taken += b->len; /* an endless line: drop it, say so */
		b->len = 0;
		log_ctx(LOG_WARNING, &run->log,
			"claude: dropped a line longer than %" PRId64 " bytes",
			run->harness->max_line);
	}
}

static void
finish_run(Run *run)
{
	ending_apply(run, &st_of(run)->a.ending);
}

static void
diff_done(Run *run, int64_t code, const char *out, size_t len)
{
	if (code == 0 && len > 0) {
		_cleanup_free_ char *text = utf8_sanitize(out, len, &len);
		if (text)
			run_emit(run,
				 json_pack("{s:s, s:s, s:{s:s, s:s, s:s%, s:I}}", "type", "CUSTOM",
					   "name", "file.changed", "value", "type", "change",
					   "path", ".", "diff", text, len, "timestamp",
					   (json_int_t)now_epoch_ms()),
				 NULL);
	}
	finish_run(run);
}

/* A stream cut short: end the blocks it opened, so a client's view is whole. */
static void
close_open_blocks(Run *run)
{
	ClaudeState *st = st_of(run);
	for (int i = 0; i < MAX_BLOCKS; i++)
		block_end(run, &st->blocks[i]);
}

static void
claude_exit(Run *run, int64_t code, int64_t sig, const char *why)
{
	ClaudeState *st = st_of(run);

	if (!st->a.ending.chunk) {
		close_open_blocks(run);
		interrupt_open_tools(run);
		ending_fail_exit(run, &st->a.ending, "claude ended without a result", code, why);
	}
	/* the whole change set, when the workspace is a git repository */
	static char *const diff[] = {(char *)"/bin/sh", (char *)"-c",
				     (char *)"git rev-parse --is-inside-work-tree >/dev/null 2>&1 "
					     "&& exec git --no-pager diff",
				     NULL};
	if (run_post_exec(run, diff, diff_done) < 0)
		finish_run(run);
}

static int
claude_init(Run *run)
{
	return agent_state_new(run, sizeof(ClaudeState));
}

static const char *const block_names[] = {[BLOCK_NONE] = "none",
					  [BLOCK_TEXT] = "text",
					  [BLOCK_THINKING] = "thinking",
					  [BLOCK_TOOL] = "tool"};

/* {messageId, streamed, midUsed, blocks: [[index, kind, id]…] (the open
 * ones), openTools: {id: true} (in order), ending} */
static json_t *
claude_save(Run *run)
{
	ClaudeState *st = st_of(run);
	json_t *blocks = json_array();
	for (int i = 0; blocks && i < MAX_BLOCKS; i++)
		if (st->blocks[i].kind != BLOCK_NONE &&
		    json_array_append_new(blocks,
					  json_pack("[i, s, s]", i, block_names[st->blocks[i].kind],
						    st->blocks[i].id)) < 0) {
			json_decref(blocks);
			return NULL;
		}
	return json_pack("{s:s, s:b, s:b, s:o, s:O, s:o}", "messageId", st->message_id, "streamed",
			 st->streamed, "midUsed", st->mid_used, "blocks", blocks, "openTools",
			 st->a.open, "ending", ending_save(&st->a.ending));
}

static int
claude_load(Run *run, const json_t *state)
{
	ClaudeState *st = st_of(run);
	const char *mid = json_string_value(json_object_get(state, "messageId"));
	const json_t *blocks = json_object_get(state, "blocks");
	const json_t *tools = json_object_get(state, "openTools");
	size_t i;
	json_t *b;

	if (!mid || strlen(mid) >= sizeof(st->message_id) || !json_is_array(blocks) ||
	    !json_is_object(tools) || !json_is_boolean(json_object_get(state, "streamed")) ||
	    !json_is_boolean(json_object_get(state, "midUsed")))
		return -EBADMSG;
	snprintf(st->message_id, sizeof(st->message_id), "%s", mid);
	st->streamed = json_is_true(json_object_get(state, "streamed"));
	st->mid_used = json_is_true(json_object_get(state, "midUsed"));
	json_array_foreach(blocks, i, b)
	{
		json_int_t idx = json_integer_value(json_array_get(b, 0));
		const char *kind = json_string_value(json_array_get(b, 1));
		const char *id = json_string_value(json_array_get(b, 2));
		BlockKind k = BLOCK_NONE;
		for (size_t n = 1; kind && n < ELEMENTSOF(block_names); n++)
			if (streq(kind, block_names[n]))
				k = (BlockKind)n;
		if (!json_is_integer(json_array_get(b, 0)) || idx < 0 || idx >= MAX_BLOCKS ||
		    k == BLOCK_NONE || !id || strlen(id) >= sizeof(st->blocks[idx].id))
			return -EBADMSG;
		st->blocks[idx].kind = k;
		snprintf(st->blocks[idx].id, sizeof(st->blocks[idx].id), "%s", id);
	}
	return agent_state_load(&st->a, tools, state);
}

const Adapter adapter_claude = {
    .kind = ADAPTER_CLAUDE,
    .driver_run_started = false,
    .init = claude_init,
    .begin = claude_begin,
    .drain = claude_drain,
    .exit = claude_exit,
    .free_state = agent_state_free,
    .save = claude_save,
    .load = claude_load,
};
