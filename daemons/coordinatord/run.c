/* SPDX-License-Identifier: MIT */
/*
 * run.c — the Run: one run this coordinatord drives.
 *
 * A Run is made by run_new() (a RUN_START, or a restart finding the run's
 * driver state in the log), found by run id or exec id, and freed by
 * run_free() once the op that made it terminal committed (driver.c's
 * CommitHooks), or when it could not be queued. What a run says goes to the
 * log through the emit functions below, which check the stream with the
 * AG-UI guard, redact the run's secrets and queue ops (commit.c); run_end()
 * moves the Run to RUN_DONE, after which it emits nothing.
 *
 * Layering: run.c calls commit.c and agui-guard.c by name; the driver and the
 * adapters call it. What the driver attached to a run is undone through
 * Coordinator.run_teardown, which coordinator.c points at the driver.
 */
#include "config.h"

#include "run.h"

#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

Run *
run_find(Coordinator *c, const char *run_id)
{
	for (Run *r = c->runs; r; r = r->next)
		if (streq(r->run_id, run_id))
			return r;
	return NULL;
}

Run *
run_find_exec(Coordinator *c, uint64_t exec_id)
{
	for (Run *r = c->runs; r; r = r->next)
		if ((r->state == RUN_EXECUTING || run_cancelling(r)) && r->exec_id == exec_id)
			return r;
	return NULL;
}

Run *
run_new(Coordinator *c, const char *run_id, const char *thread_id)
{
	Run *run = calloc(1, sizeof(*run));
	if (!run)
		return NULL;
	run->c = c;
	memcpy(run->run_id, run_id, RUN_ID_LEN + 1);
	run->thread_id = strdup(thread_id);
	strcpy(run->tenant, TENANT_DEFAULT);
	if (!run->thread_id) {
		free(run);
		return NULL;
	}
	snprintf(run->tool_call_id, sizeof(run->tool_call_id), "call_%.8s", run->run_id);
	run->log = (LogCtx){.run_id = run->run_id, .thread_id = run->thread_id};
	run->next = c->runs;
	c->runs = run;
	return run;
}

void
run_free(Run *run)
{
	Coordinator *c = run->c;

	for (Run **pp = &c->runs; *pp; pp = &(*pp)->next)
		if (*pp == run) {
			*pp = run->next;
			break;
		}
	if (c->shim)
		peer_cancel_calls(c->shim, run);
	if (run->wait_timer)
		event_free(run->wait_timer);
	if (run->max_timer)
		event_free(run->max_timer);
	if (run->drive_timer)
		event_free(run->drive_timer);
	/* what the driver attached: bridge, sandbox, listeners, a cancel waiting */
	if (c->run_teardown)
		c->run_teardown(run);
	for (int i = 0; i < 3; i++)
		outbuf_done(&run->out[i]);
	outbuf_done(&run->post_step_out);
	if (run->adapter && run->adapter->free_state)
		run->adapter->free_state(run);
	mp_strv_free(run->secret_values);
	json_decref(run->messages);
	json_decref(run->metadata);
	free(run->thread_id);
	free(run->command);
	free(run->sandbox_id);
	json_decref(run->agui);
	free(run);
}

/* ---------- what a run says: ops for the log ---------- */

/* A driver state queued with the exec's id in it (drive_state() read it). */
static void
note_drive(Run *run, const json_t *drive)
{
	if (drive && json_is_object(drive) && run->exec_id)
		run->exec_saved = true;
}

void
run_emit(Run *run, json_t *chunk, json_t *drive)
{
	run_emit_fields(run, chunk, drive, NULL);
}

/* Queue chunks the guard put before another (each with its own timestamp). */
static void
queue_before(Run *run, json_t *before)
{
	size_t i;
	json_t *c;
	json_array_foreach(before, i, c)
	{
		if (commit_queue_run(run->c, run->run_id, json_incref(c), NULL, 0, NULL, NULL, NULL,
				     run->secret_values) < 0)
			log_ctx(LOG_ERR, &run->log, "Out of memory queuing an event");
	}
	json_decref(before);
}

void
run_emit_fields(Run *run, json_t *chunk, json_t *drive, json_t *fields)
{
	if (run->state == RUN_DONE) {
		json_decref(chunk);
		json_decref(drive);
		json_decref(fields);
		return;
	}
	if (chunk) {
		json_t *before = NULL;
		if (agui_guard_chunk(run, chunk, &before) == AGUI_DROP) {
			json_decref(chunk);
			chunk = NULL;
		}
		queue_before(run, before);
		if (!chunk && !drive && !fields)
			return;
	}
	note_drive(run, drive);
	if (commit_queue_run(run->c, run->run_id, chunk, NULL, 0, NULL, fields, drive,
			     run->secret_values) < 0)
		log_ctx(LOG_ERR, &run->log, "Out of memory queuing an event");
}

void
run_emit_text(Run *run, const char *text, size_t len, json_t *drive)
{
	if (run->state == RUN_DONE) {
		json_decref(drive);
		return;
	}
	/* stored as written unless the guard amends it (then re-serialized) */
	json_auto_t *j = json_loadb(text, len, 0, NULL);
	_cleanup_free_ char *amended = NULL;
	if (j) {
		json_t *before = NULL;
		AguiVerdict v = agui_guard_chunk(run, j, &before);
		queue_before(run, before);
		if (v == AGUI_DROP) {
			if (drive)
				run_save_drive(run, drive);
			return;
		}
		if (v == AGUI_CHANGED && (amended = json_dump_compact(j))) {
			text = amended;
			len = strlen(amended);
		}
	}
	note_drive(run, drive);
	if (commit_queue_run(run->c, run->run_id, NULL, text, len, NULL, NULL, drive,
			     run->secret_values) < 0)
		log_ctx(LOG_ERR, &run->log, "Out of memory queuing an event");
}

void
run_save_drive(Run *run, json_t *drive)
{
	run_emit(run, NULL, drive);
}

void
run_end(Run *run, json_t *chunk, const char *status, json_t *fields)
{
	if (run->state == RUN_DONE) {
		json_decref(chunk);
		json_decref(fields);
		return;
	}
	/* close what the stream left open; a terminal chunk it lacks */
	queue_before(run, agui_guard_end(run, &chunk, status));
	run->state = RUN_DONE;
	/* the driver state goes with the run's end: nothing to re-attach to */
	if (commit_queue_run(run->c, run->run_id, chunk, NULL, 0, status, fields, json_null(),
			     run->secret_values) < 0) {
		log_ctx(LOG_ERR, &run->log, "Out of memory queuing the end of the run");
		run_free(run);
	}
}

void
run_fail(Run *run, const char *message, const char *code)
{
	/* a stderr tail may hold a secret: the log gets what the record gets */
	size_t len = strlen(message);
	_cleanup_free_ char *own = strdup(message);
	if (own && redact_text(run->secret_values, &own, &len) == 0)
		message = own;
	else
		message = "[REDACTED]";
	json_t *chunk = run_error_chunk(message, code, NULL, NULL, 0);
	json_t *fields = run_error_fields(message, code);
	if (run->state != RUN_DONE)
		log_ctx(LOG_WARNING, &run->log, "Run failed: %s (%s)", message, code);
	run_end(run, chunk, "failed", fields);
}

/* A new run id (a UUID v4). */
void
run_uuid(char out[RUN_ID_LEN + 1])
{
	unsigned char b[16];

	if (uuid_v4(out) == 0)
		return;
	/* getrandom-backed fallback; RAND_bytes failing is near impossible */
	FILE *f = fopen("/dev/urandom", "re");
	if (!f || fread(b, 1, sizeof(b), f) != sizeof(b))
		abort();
	fclose(f);
	uuid_v4_from_bytes(b, out);
}
