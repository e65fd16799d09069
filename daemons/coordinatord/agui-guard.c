/* SPDX-License-Identifier: MIT */
/*
 * agui-guard.c — every stream a driven run stores is a valid AG-UI stream
 * (docs/DESIGN.md "Every chunk valid").
 *
 * Each chunk a run emits goes by agui_guard_chunk() before it is queued; the
 * guard keeps what the stream has open (text messages, reasoning spans and
 * messages, tool calls without a result, steps) and:
 *   - RUN_STARTED comes first: a chunk before it gets one in front; a second
 *     one (an agent announcing its own start) is dropped;
 *   - a TOOL_CALL_RESULT without messageId gets "<toolCallId>-result";
 *   - before the terminal chunk (agui_guard_end), everything still open is
 *     closed: TEXT_MESSAGE_END, REASONING_MESSAGE_END/REASONING_END,
 *     TOOL_CALL_END, STEP_FINISHED, and a TOOL_CALL_RESULT
 *     {"status":"interrupted","error":…} (metadata.tanstack.state
 *     "output-error") for every tool call that got none;
 *   - RUN_ERROR carries runId, and threadId and runId in metadata.tanstack
 *     (where @tanstack/ai puts them); RUN_FINISHED carries the run's own
 *     threadId and runId (an agent's own ids replaced: they would not match
 *     the RUN_STARTED, and a client would never see its run end); a run
 *     that ends completed without a terminal chunk gets a RUN_FINISHED;
 *   - nothing follows a RUN_FINISHED.
 * The state is a function of the stored stream: a restarted coordinatord
 * rebuilds it from the run's chunks (agui_guard_rebuild).
 */
#include "config.h"

#include "run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "runlog.h"

static json_t *
guard(Run *run)
{
	if (!run->agui)
		run->agui = json_pack("{s:b, s:b, s:{}, s:{}, s:{}, s:{}}", "started", 0,
				      "finished", 0, "texts", "tools", "reasoning", "steps");
	return run->agui;
}

static json_t *
set_of(Run *run, const char *name)
{
	json_t *g = guard(run);
	return g ? json_object_get(g, name) : NULL;
}

static const char *
str_of(const json_t *chunk, const char *key)
{
	return json_string_value(json_object_get(chunk, key));
}

/* Record what the chunk opens or closes. */
static void
track(Run *run, const char *type, const json_t *chunk)
{
	json_t *g = guard(run);
	if (!g)
		return;
	const char *mid = str_of(chunk, "messageId"), *tid = str_of(chunk, "toolCallId");
	json_t *texts = set_of(run, "texts"), *tools = set_of(run, "tools");
	json_t *reasoning = set_of(run, "reasoning"), *steps = set_of(run, "steps");

	if (streq(type, "RUN_STARTED"))
		json_object_set_new(g, "started", json_true());
	else if (streq(type, "RUN_FINISHED"))
		json_object_set_new(g, "finished", json_true());
	else if (streq(type, "TEXT_MESSAGE_START") && mid)
		json_object_set_new(texts, mid, json_true());
	else if (streq(type, "TEXT_MESSAGE_END") && mid)
		json_object_del(texts, mid);
	else if (streq(type, "TOOL_CALL_START") && tid)
		json_object_set_new(tools, tid, json_false()); /* false: not ended */
	else if (streq(type, "TOOL_CALL_END") && tid && json_object_get(tools, tid))
		json_object_set_new(tools, tid, json_true());
	else if (streq(type, "TOOL_CALL_RESULT") && tid)
		json_object_del(tools, tid);
	else if ((streq(type, "REASONING_START") || streq(type, "REASONING_MESSAGE_START")) &&
		 mid) {
		json_t *r = json_object_get(reasoning, mid);
		if (!r) {
			r = json_pack("{s:b, s:b}", "span", 0, "msg", 0);
			json_object_set_new(reasoning, mid, r);
		}
		if (r)
			json_object_set_new(r, streq(type, "REASONING_START") ? "span" : "msg",
					    json_true());
	} else if (streq(type, "REASONING_MESSAGE_END") && mid) {
		json_t *r = json_object_get(reasoning, mid);
		if (r)
			json_object_set_new(r, "msg", json_false());
	} else if (streq(type, "REASONING_END") && mid)
		json_object_del(reasoning, mid);
	else if (streq(type, "STEP_STARTED") && str_of(chunk, "stepName"))
		json_object_set_new(steps, str_of(chunk, "stepName"), json_true());
	else if (streq(type, "STEP_FINISHED") && str_of(chunk, "stepName"))
		json_object_del(steps, str_of(chunk, "stepName"));
}

static bool
flag(Run *run, const char *name)
{
	return json_is_true(json_object_get(guard(run), name));
}

/* The chunks that close what is open, in order; why: the terminal chunk's
 * message (for an interrupted tool call's result). New reference. */
json_t *
agui_guard_closers(Run *run, const char *why)
{
	json_t *out = json_array();
	const char *k;
	json_t *v;

	if (!out || !guard(run))
		return out;
	json_object_foreach(set_of(run, "texts"), k, v) json_array_append_new(
	    out, json_pack("{s:s, s:s}", "type", "TEXT_MESSAGE_END", "messageId", k));
	json_object_foreach(set_of(run, "reasoning"), k, v)
	{
		if (json_is_true(json_object_get(v, "msg")))
			json_array_append_new(out,
					      json_pack("{s:s, s:s}", "type",
							"REASONING_MESSAGE_END", "messageId", k));
		if (json_is_true(json_object_get(v, "span")))
			json_array_append_new(
			    out, json_pack("{s:s, s:s}", "type", "REASONING_END", "messageId", k));
	}
	json_object_foreach(set_of(run, "tools"), k, v)
	{
		if (!json_is_true(v))
			json_array_append_new(
			    out, json_pack("{s:s, s:s}", "type", "TOOL_CALL_END", "toolCallId", k));
	}
	json_object_foreach(set_of(run, "tools"), k, v)
	{
		char mid[128], err[512];
		snprintf(mid, sizeof(mid), "%s-result", k);
		snprintf(err, sizeof(err),
			 "interrupted: the run ended before the tool call did%s%s",
			 why && *why ? " (" : "", why && *why ? why : "");
		if (why && *why)
			strncat(err, ")", sizeof(err) - strlen(err) - 1);
		json_auto_t *content =
		    json_pack("{s:s, s:s}", "status", "interrupted", "error", err);
		_cleanup_free_ char *text = content ? json_dump_compact(content) : NULL;
		json_array_append_new(
		    out, json_pack("{s:s, s:s, s:s, s:s, s:s, s:{s:{s:s}}}", "type",
				   "TOOL_CALL_RESULT", "messageId", mid, "toolCallId", k, "role",
				   "tool", "content", text ? text : "{\"status\":\"interrupted\"}",
				   "metadata", "tanstack", "state", "output-error"));
	}
	json_object_foreach(set_of(run, "steps"), k, v) json_array_append_new(
	    out, json_pack("{s:s, s:s}", "type", "STEP_FINISHED", "stepName", k));
	return out;
}

/* The guard's functions work on run->agui alone: a Run that carries the
 * state and nothing else stands in for a run driven elsewhere. */
void
agui_state_track(json_t **state, const json_t *chunk)
{
	Run shadow = {.agui = *state};
	const char *type = str_of(chunk, "type");
	if (type)
		track(&shadow, type, chunk);
	else
		(void)guard(&shadow);
	*state = shadow.agui;
}

json_t *
agui_state_closers(json_t **state, const char *why)
{
	Run shadow = {.agui = *state};
	json_t *out = agui_guard_closers(&shadow, why);
	*state = shadow.agui;
	return out;
}

static json_t *
run_started(Run *run)
{
	return json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId", run->thread_id,
			 "runId", run->run_id);
}

AguiVerdict
agui_guard_chunk(Run *run, json_t *chunk, json_t **ret_before)
{
	const char *type = str_of(chunk, "type");
	*ret_before = NULL;
	if (!type)
		return AGUI_KEEP;
	if (flag(run, "finished"))
		return AGUI_DROP; /* nothing follows RUN_FINISHED */
	if (streq(type, "RUN_STARTED")) {
		if (flag(run, "started"))
			return AGUI_DROP;
		track(run, type, chunk);
		return AGUI_KEEP;
	}
	AguiVerdict v = AGUI_KEEP;
	if (!flag(run, "started")) {
		*ret_before = json_array();
		if (*ret_before)
			json_array_append_new(*ret_before, run_started(run));
		track(run, "RUN_STARTED", NULL);
	}
	if (streq(type, "TOOL_CALL_RESULT") && str_of(chunk, "toolCallId") &&
	    !str_of(chunk, "messageId")) {
		char mid[128];
		snprintf(mid, sizeof(mid), "%s-result", str_of(chunk, "toolCallId"));
		json_object_set_new(chunk, "messageId", json_string(mid));
		v = AGUI_CHANGED;
	}
	if (streq(type, "RUN_FINISHED")) {
		/* the run's ids, as on the RUN_STARTED the stream began with (an
		 * agent's own run id would leave a client's run open) */
		if (!streq(str_of(chunk, "threadId") ?: "", run->thread_id) ||
		    !streq(str_of(chunk, "runId") ?: "", run->run_id)) {
			json_object_set_new(chunk, "threadId", json_string(run->thread_id));
			json_object_set_new(chunk, "runId", json_string(run->run_id));
			v = AGUI_CHANGED;
		}
		/* an agent's own RUN_FINISHED (ndjson) mid-stream: close first */
		json_t *cl = agui_guard_closers(run, "run finished");
		if (!*ret_before)
			*ret_before = cl;
		else {
			json_array_extend(*ret_before, cl);
			json_decref(cl);
		}
		for (size_t i = 0; i < json_array_size(*ret_before); i++) {
			const json_t *c = json_array_get(*ret_before, i);
			track(run, str_of(c, "type"), c);
		}
	}
	track(run, type, chunk);
	return v;
}

json_t *
agui_guard_end(Run *run, json_t **chunk, const char *status)
{
	const char *type = *chunk ? str_of(*chunk, "type") : NULL;
	if (flag(run, "finished")) {
		/* the stream ended already (an agent's RUN_FINISHED) */
		if (type && streq(type, "RUN_FINISHED")) {
			json_decref(*chunk);
			*chunk = NULL;
		} else if (type && streq(type, "RUN_ERROR")) /* allowed after it */
			agui_error_ids(*chunk, run->thread_id, run->run_id);
		return json_array();
	}
	if (!*chunk || !type) {
		json_decref(*chunk);
		if (streq(status, "completed"))
			*chunk = json_pack("{s:s, s:s, s:s, s:{s:s}}", "type", "RUN_FINISHED",
					   "threadId", run->thread_id, "runId", run->run_id,
					   "outcome", "type", "success");
		else
			*chunk = run_error_chunk(streq(status, "aborted") ? "run cancelled"
									  : "run failed",
						 status, NULL, NULL, 0);
		type = str_of(*chunk, "type");
		if (!type)
			return json_array();
	}
	json_t *before = json_array();
	if (!before)
		return NULL;
	if (!flag(run, "started")) {
		json_array_append_new(before, run_started(run));
		track(run, "RUN_STARTED", NULL);
	}
	const char *why = str_of(*chunk, "message");
	if (!why)
		why = streq(type, "RUN_FINISHED") ? "run finished" : status;
	json_t *cl = agui_guard_closers(run, why);
	json_array_extend(before, cl);
	json_decref(cl);
	for (size_t i = 0; i < json_array_size(before); i++) {
		const json_t *c = json_array_get(before, i);
		track(run, str_of(c, "type"), c);
	}
	if (streq(type, "RUN_ERROR") || streq(type, "RUN_FINISHED")) {
		if (streq(type, "RUN_FINISHED")) {
			if (!json_object_get(*chunk, "threadId"))
				json_object_set_new(*chunk, "threadId",
						    json_string(run->thread_id));
			if (!json_object_get(*chunk, "runId"))
				json_object_set_new(*chunk, "runId", json_string(run->run_id));
		} else
			agui_error_ids(*chunk, run->thread_id, run->run_id);
	}
	track(run, type, *chunk);
	return before;
}

int
agui_guard_rebuild(Run *run)
{
	int64_t from = -1;
	for (;;) {
		RunLogEvents ev = {0};
		int r = runlog_read(run->c->runlog, run->run_id, from, 256, &ev, NULL);
		if (r < 0)
			return r;
		for (size_t i = 0; i < ev.n; i++) {
			json_auto_t *j = json_loadb(ev.texts[i], ev.lens[i], 0, NULL);
			const char *type = str_of(j, "type");
			if (type)
				track(run, type, j);
		}
		size_t n = ev.n;
		from = ev.first_seq + (int64_t)n - 1;
		runlog_events_done(&ev);
		if (n < 256)
			return 0;
	}
}

/* ---------- the ndjson runner's chunks against @ag-ui/core's EventSchemas ---------- */

typedef enum FieldKind { F_STR, F_ARRAY, F_ANY, F_CONTENT, F_REASONING, F_SUBTYPE } FieldKind;
typedef struct EventField {
	const char *name;
	FieldKind kind;
} EventField;
typedef struct EventShape {
	const char *type;
	EventField req[3];
} EventShape;

/* required fields per type (TOOL_CALL_RESULT's messageId and RUN_FINISHED's
 * ids are filled in by the guard when missing) */
static const EventShape shapes[] = {
    {"TEXT_MESSAGE_START", {{"messageId", F_STR}}},
    {"TEXT_MESSAGE_CONTENT", {{"messageId", F_STR}, {"delta", F_STR}}},
    {"TEXT_MESSAGE_END", {{"messageId", F_STR}}},
    {"TEXT_MESSAGE_CHUNK", {{0}}},
    {"TOOL_CALL_START", {{"toolCallId", F_STR}, {"toolCallName", F_STR}}},
    {"TOOL_CALL_ARGS", {{"toolCallId", F_STR}, {"delta", F_STR}}},
    {"TOOL_CALL_END", {{"toolCallId", F_STR}}},
    {"TOOL_CALL_CHUNK", {{0}}},
    {"TOOL_CALL_RESULT", {{"toolCallId", F_STR}, {"content", F_CONTENT}}},
    {"STATE_SNAPSHOT", {{"snapshot", F_ANY}}},
    {"STATE_DELTA", {{"delta", F_ARRAY}}},
    {"MESSAGES_SNAPSHOT", {{"messages", F_ARRAY}}},
    {"ACTIVITY_SNAPSHOT", {{"messageId", F_STR}, {"activityType", F_STR}, {"content", F_ANY}}},
    {"ACTIVITY_DELTA", {{"messageId", F_STR}, {"activityType", F_STR}, {"patch", F_ARRAY}}},
    {"RAW", {{"event", F_ANY}}},
    {"CUSTOM", {{"name", F_STR}, {"value", F_ANY}}},
    {"RUN_STARTED", {{0}}},
    {"RUN_FINISHED", {{0}}},
    {"RUN_ERROR", {{"message", F_STR}}},
    {"STEP_STARTED", {{"stepName", F_STR}}},
    {"STEP_FINISHED", {{"stepName", F_STR}}},
    {"REASONING_START", {{"messageId", F_STR}}},
    {"REASONING_MESSAGE_START", {{"messageId", F_STR}, {"role", F_REASONING}}},
    {"REASONING_MESSAGE_CONTENT", {{"messageId", F_STR}, {"delta", F_STR}}},
    {"REASONING_MESSAGE_END", {{"messageId", F_STR}}},
    {"REASONING_MESSAGE_CHUNK", {{0}}},
    {"REASONING_END", {{"messageId", F_STR}}},
    {"REASONING_ENCRYPTED_VALUE",
     {{"subtype", F_SUBTYPE}, {"entityId", F_STR}, {"encryptedValue", F_STR}}},
    {"SUBAGENT_STARTED", {{"subagentRunId", F_STR}, {"name", F_STR}}},
    {"SUBAGENT_FINISHED", {{"subagentRunId", F_STR}}},
    {"SUBAGENT_ERROR", {{"subagentRunId", F_STR}, {"message", F_STR}}},
};

static bool
field_ok(const json_t *v, FieldKind k)
{
	switch (k) {
	case F_STR: return json_is_string(v);
	case F_ARRAY: return json_is_array(v);
	case F_ANY: return v != NULL;
	case F_CONTENT: return json_is_string(v) || json_is_array(v);
	case F_REASONING: return json_is_string(v) && streq(json_string_value(v), "reasoning");
	case F_SUBTYPE:
		return json_is_string(v) && (streq(json_string_value(v), "tool-call") ||
					     streq(json_string_value(v), "message"));
	}
	return false;
}

int
agui_chunk_check(const json_t *chunk, Reason *why)
{
	const char *type = str_of(chunk, "type");
	if (!json_is_object(chunk) || !type) {
		reason_set(why, "not an AG-UI event (no string \"type\")");
		return -EBADMSG;
	}
	const json_t *ts = json_object_get(chunk, "timestamp");
	if (ts && !json_is_integer(ts)) {
		reason_set(why, "%.40s: \"timestamp\" is not an integer", type);
		return -EBADMSG;
	}
	const json_t *sub = json_object_get(chunk, "subagentRunId");
	if (sub && !json_is_string(sub)) {
		reason_set(why, "%.40s: \"subagentRunId\" is not a string", type);
		return -EBADMSG;
	}
	for (size_t i = 0; i < ELEMENTSOF(shapes); i++) {
		if (!streq(shapes[i].type, type))
			continue;
		for (size_t f = 0; f < ELEMENTSOF(shapes[i].req) && shapes[i].req[f].name; f++) {
			const EventField *ef = &shapes[i].req[f];
			if (!field_ok(json_object_get(chunk, ef->name), ef->kind)) {
				reason_set(why, "%s: \"%s\" is missing or of the wrong type", type,
					   ef->name);
				return -EBADMSG;
			}
		}
		/* the ids the guard fills in must be strings when given */
		static const char *const ids[] = {"threadId", "runId", "messageId"};
		for (size_t k = 0; k < ELEMENTSOF(ids); k++) {
			const json_t *v = json_object_get(chunk, ids[k]);
			if (v && !json_is_string(v)) {
				reason_set(why, "%s: \"%s\" is not a string", type, ids[k]);
				return -EBADMSG;
			}
		}
		return 0;
	}
	reason_set(why, "unknown event type \"%.40s\"", type);
	return -EBADMSG;
}
