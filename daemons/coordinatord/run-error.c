/* SPDX-License-Identifier: MIT */
/*
 * run-error.c — the RUN_ERROR chunk that ends a run, built in one place.
 *
 * A leaf: every layer that ends a run (run.c, the driver, the commit core,
 * the watchdog, the cluster's takeover, a client's cancel) builds its
 * terminal RUN_ERROR and its record fields here.
 */
#include "config.h"

#include "commit.h"

json_t *
run_error_chunk(const char *message, const char *code, const char *thread_id, const char *run_id,
		int64_t timestamp)
{
	json_t *chunk =
	    json_pack("{s:s, s:s, s:s}", "type", "RUN_ERROR", "message", message, "code", code);
	if (chunk && timestamp)
		json_object_set_new(chunk, "timestamp", json_integer(timestamp));
	if (chunk && run_id)
		agui_error_ids(chunk, thread_id, run_id);
	return chunk;
}

json_t *
run_error_fields(const char *message, const char *code)
{
	return json_pack("{s:{s:s, s:s}}", "error", "message", message, "code", code);
}

void
agui_error_ids(json_t *chunk, const char *thread_id, const char *run_id)
{
	json_t *md = json_object_get(chunk, "metadata");
	if (!md) {
		md = json_object();
		json_object_set_new(chunk, "metadata", md);
	}
	if (!json_is_object(md))
		return;
	json_t *ts = json_object_get(md, "tanstack");
	if (!ts) {
		ts = json_object();
		json_object_set_new(md, "tanstack", ts);
	}
	if (!json_is_object(ts))
		return;
	if (thread_id && *thread_id && !json_object_get(ts, "threadId"))
		json_object_set_new(ts, "threadId", json_string(thread_id));
	if (run_id && !json_object_get(ts, "runId"))
		json_object_set_new(ts, "runId", json_string(run_id));
	if (!json_object_get(chunk, "runId"))
		json_object_set_new(chunk, "runId", json_string(run_id));
}
