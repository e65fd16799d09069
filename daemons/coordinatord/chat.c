/* SPDX-License-Identifier: MIT */
/*
 * chat.c — the hydrate answer of GET /chat?threadId= (CHAT_HYDRATE): a
 * thread's runs rebuilt into TanStack AI UIMessages, the way the client's
 * StreamProcessor builds them from the same chunks.
 *
 * Per run, oldest first: the user messages stored with it (the `inputs`
 * database, written by RUN_START with client_run_id in the run's own
 * transaction), then one assistant message built from its events:
 *   TEXT_MESSAGE_CONTENT  appended to the last part when it is text, else a
 *                         new {type:"text", content} part;
 *   TOOL_CALL_START       a {type:"tool-call", id, name, arguments:"",
 *                         state:"awaiting-input"} part;
 *   TOOL_CALL_ARGS        arguments += delta, state "input-streaming";
 *   TOOL_CALL_END         state "input-complete", input = the parsed arguments;
 *   TOOL_CALL_RESULT      the call's output (content parsed as JSON when it is)
 *                         and state "complete" ("error" and output {error} for
 *                         an output-error result), plus a {type:"tool-result",
 *                         toolCallId, content, state} part;
 *   RUN_FINISHED          calls still streaming their input become
 *                         "input-complete".
 * The assistant message's id is the messageId of the run's first
 * TEXT_MESSAGE_START (else the run id). Runs without a stored input (POST
 * /runs) contribute their assistant message only. The newest
 * CHAT_HYDRATE_MAX_RUNS runs are rebuilt; the answer is refused (-EFBIG) past
 * read_max_bytes.
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

#define CHAT_HYDRATE_MAX_RUNS 100

/* The text of a wire message's content: a string, or the text parts of an
 * array joined. */
static char *
content_text(const json_t *content)
{
	size_t i;
	json_t *part;

	if (json_is_string(content))
		return strdup(json_string_value(content));
	char *out = strdup("");
	if (!out || !json_is_array(content))
		return out;
	json_array_foreach(content, i, part)
	{
		const char *t = json_string_value(json_object_get(part, "text"));
		if (!t)
			t = json_string_value(json_object_get(part, "content"));
		if (!t)
			continue;
		char *n = NULL;
		if (asprintf(&n, "%s%s", out, t) < 0) {
			free(out);
			return NULL;
		}
		free(out);
		out = n;
	}
	return out;
}

static int
add_user_messages(json_t *out, const char *run_id, const char *input)
{
	json_auto_t *arr = json_loads(input, 0, NULL);
	json_t *m;
	size_t i;

	if (!json_is_array(arr))
		return 0;
	json_array_foreach(arr, i, m)
	{
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role || !streq(role, "user"))
			continue;
		_cleanup_free_ char *text = content_text(json_object_get(m, "content"));
		const char *id = json_string_value(json_object_get(m, "id"));
		char fallback[RUN_ID_LEN + 32];
		if (!text)
			return -ENOMEM;
		if (!id) {
			snprintf(fallback, sizeof(fallback), "%s-user-%zu", run_id, i);
			id = fallback;
		}
		json_t *um = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "id", id, "role", "user",
				       "parts", "type", "text", "content", text);
		if (!um || json_array_append_new(out, um) < 0)
			return -ENOMEM;
	}
	return 0;
}

static json_t *
find_call(json_t *parts, const char *id)
{
	json_t *p;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		const char *t = json_string_value(json_object_get(p, "type"));
		const char *pid = json_string_value(json_object_get(p, "id"));
		if (t && pid && streq(t, "tool-call") && streq(pid, id))
			return p;
	}
	return NULL;
}

static void
append_string(json_t *obj, const char *key, const char *delta)
{
	const char *old = json_string_value(json_object_get(obj, key)) ?: "";
	char *n = NULL;
	if (asprintf(&n, "%s%s", old, delta) >= 0) {
		json_object_set_new(obj, key, json_string(n));
		free(n);
	}
}

/* One chunk into the assistant message being built (msg: {id?, parts}). */
static void
apply_chunk(json_t *msg, const json_t *ch)
{
	json_t *parts = json_object_get(msg, "parts");
	const char *type = json_string_value(json_object_get(ch, "type"));
	const char *call = json_string_value(json_object_get(ch, "toolCallId"));
	json_t *p;
	size_t i;

	if (!type)
		return;
	if (streq(type, "TEXT_MESSAGE_START")) {
		const char *mid = json_string_value(json_object_get(ch, "messageId"));
		if (mid && !json_object_get(msg, "id"))
			json_object_set_new(msg, "id", json_string(mid));
	} else if (streq(type, "TEXT_MESSAGE_CONTENT")) {
		const char *delta = json_string_value(json_object_get(ch, "delta"));
		size_t n = json_array_size(parts);
		json_t *last = n ? json_array_get(parts, n - 1) : NULL;
		if (!delta || !*delta)
			return;
		if (last && streq(json_string_value(json_object_get(last, "type")) ?: "", "text"))
			append_string(last, "content", delta);
		else
			json_array_append_new(
			    parts, json_pack("{s:s, s:s}", "type", "text", "content", delta));
	} else if (streq(type, "TOOL_CALL_START") && call && !find_call(parts, call)) {
		const char *name = json_string_value(json_object_get(ch, "toolCallName")) ?: "";
		json_array_append_new(parts, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type",
						       "tool-call", "id", call, "name", name,
						       "arguments", "", "state", "awaiting-input"));
	} else if (streq(type, "TOOL_CALL_ARGS") && call && (p = find_call(parts, call))) {
		const char *delta = json_string_value(json_object_get(ch, "delta"));
		if (delta && *delta) {
			append_string(p, "arguments", delta);
			if (streq(json_string_value(json_object_get(p, "state")) ?: "",
				  "awaiting-input"))
				json_object_set_new(p, "state", json_string("input-streaming"));
		}
	} else if (streq(type, "TOOL_CALL_END") && call && (p = find_call(parts, call))) {
		json_t *in = json_loads(json_string_value(json_object_get(p, "arguments")) ?: "",
					JSON_DECODE_ANY, NULL);
		json_object_set_new(p, "state", json_string("input-complete"));
		if (in)
			json_object_set_new(p, "input", in);
	} else if (streq(type, "TOOL_CALL_RESULT") && call && (p = find_call(parts, call))) {
		const char *content = json_string_value(json_object_get(ch, "content")) ?: "";
		const char *st = json_string_value(json_object_get(ch, "state"));
		bool err = st && streq(st, "output-error");
		json_t *out = json_loads(content, JSON_DECODE_ANY, NULL);
		if (!out)
			out = json_string(content);
		if (err) {
			const char *e = json_string_value(json_object_get(out, "error"));
			if (!e && json_is_string(out))
				e = json_string_value(out);
			json_object_set_new(
			    p, "output", json_pack("{s:s}", "error", e ?: "Tool execution failed"));
			json_decref(out);
		} else
			json_object_set_new(p, "output", out);
		json_object_set_new(p, "state", json_string(err ? "error" : "complete"));
		json_array_foreach(parts, i, p)
		{
			const char *pt = json_string_value(json_object_get(p, "type")) ?: "";
			const char *pc = json_string_value(json_object_get(p, "toolCallId")) ?: "";
			if (streq(pt, "tool-result") && streq(pc, call)) {
				json_array_remove(parts, i);
				break;
			}
		}
		json_array_append_new(parts,
				      json_pack("{s:s, s:s, s:s, s:s}", "type", "tool-result",
						"toolCallId", call, "content", content, "state",
						err ? "error" : "complete"));
	} else if (streq(type, "RUN_FINISHED")) {
		json_array_foreach(parts, i, p)
		{
			const char *pt = json_string_value(json_object_get(p, "type")) ?: "";
			const char *ps = json_string_value(json_object_get(p, "state")) ?: "";
			if (streq(pt, "tool-call") &&
			    (streq(ps, "awaiting-input") || streq(ps, "input-streaming")))
				json_object_set_new(p, "state", json_string("input-complete"));
		}
	}
}

static int
add_assistant_message(Coordinator *c, json_t *out, const char *run_id)
{
	json_auto_t *msg = json_pack("{s:[]}", "parts");
	int64_t from = -1;
	int r;

	if (!msg)
		return -ENOMEM;
	for (;;) {
		RunLogEvents ev = {0};
		json_t *rec = NULL;
		r = runlog_read(c->runlog, run_id, from, (size_t)c->conf.read_max, &ev, &rec);
		json_decref(rec);
		if (r < 0)
			return r;
		for (size_t i = 0; i < ev.n; i++) {
			json_auto_t *ch = json_loadb(ev.texts[i], ev.lens[i], 0, NULL);
			if (json_is_object(ch))
				apply_chunk(msg, ch);
		}
		size_t n = ev.n;
		from = ev.first_seq + (int64_t)n - 1;
		runlog_events_done(&ev);
		if (n == 0)
			break;
	}
	if (json_array_size(json_object_get(msg, "parts")) == 0)
		return 0;
	if (!json_object_get(msg, "id"))
		json_object_set_new(msg, "id", json_string(run_id));
	json_object_set_new(msg, "role", json_string("assistant"));
	return json_array_append(out, msg) < 0 ? -ENOMEM : 0;
}

int
chat_hydrate(Coordinator *c, const char *thread_id, char **ret_json)
{
	json_auto_t *runs = NULL, *messages = json_array();
	const char *active = NULL;
	size_t n;
	int r;

	if (!messages)
		return -ENOMEM;
	r = runlog_thread_runs(c->runlog, thread_id, NULL, &runs);
	if (r < 0)
		return r;
	n = MIN(json_array_size(runs), (size_t)CHAT_HYDRATE_MAX_RUNS);
	/* newest first: rebuild from the oldest kept */
	for (size_t k = n; k-- > 0;) {
		json_t *rec = json_array_get(runs, k);
		const char *run_id = json_string_value(json_object_get(rec, "runId"));
		const char *status = json_string_value(json_object_get(rec, "status"));
		_cleanup_free_ char *input = NULL;
		if (!run_id)
			continue;
		if (status && !run_status_terminal(status))
			active = run_id;
		r = runlog_input_get(c->runlog, run_id, &input);
		if (r == 0)
			r = add_user_messages(messages, run_id, input);
		if (r < 0 && r != -ENOENT)
			return r;
		r = add_assistant_message(c, messages, run_id);
		if (r < 0 && r != -ENOENT)
			return r;
	}
	json_auto_t *body =
	    json_pack("{s:O, s:o, s:n}", "messages", messages, "activeRun",
		      active ? json_pack("{s:s}", "runId", active) : json_null(), "interrupts");
	char *s = body ? json_dump_compact(body) : NULL;
	if (!s)
		return -ENOMEM;
	if ((int64_t)strlen(s) > c->conf.read_max_bytes) {
		free(s);
		return -EFBIG;
	}
	*ret_json = s;
	return 0;
}
