/* SPDX-License-Identifier: MIT */
/*
 * run-api.c — the direct run-log API: RUN_OPEN, RUN_APPEND, RUN_FINISH (a
 * client that writes a run's log itself; coordinator.c's handler table).
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <string.h>

#include "id-util.h"
#include "json-util.h"
#include "macro.h"

int
handle_run_open(Peer *p, const Frame *f, const Msg_RUN_OPEN *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *thread_id = m->thread_id, *want = m->run_id;
	char run_id[RUN_ID_LEN + 1];
	bool created = false;
	int ret = 0;

	if (!thread_id_valid(thread_id) || (want && strlen(want) != RUN_ID_LEN))
		ret = -EINVAL;
	if (ret == 0) {
		if (want)
			memcpy(run_id, want, RUN_ID_LEN + 1);
		else
			run_uuid(run_id);
		ret = runlog_create(c->runlog, run_id, thread_id, NULL, now_epoch_ms(), &created);
	}
	if (ret == 0) {
		ret = reply_send_RUN_OPEN(p, f->req_id,
					  &(Reply_RUN_OPEN){.run_id = run_id, .created = created});
		if (created)
			c->m.runs_started++;
	}
	return ret;
}

int
handle_run_append(Peer *p, const Frame *f, const Msg_RUN_APPEND *m, void *ud)
{
	Client *cl = ud;
	bool type = false;

	/* checked here, where it enters, without building it (the rules of
	 * json_loads); from here on the text travels as opaque bytes */
	if (!json_object_check(m->chunk, strlen(m->chunk), "type", &type) || !type) {
		peer_reply_error(p, f->req_id, -EINVAL,
				 "chunk must be a JSON object with a string 'type'");
		return 0;
	}
	if (strlen(m->run_id) != RUN_ID_LEN)
		return -ENOENT;
	op_queue_client_text(cl->c, cl, f->req_id, m->run_id, m->chunk);
	return 0;
}

int
handle_run_finish(Peer *p, const Frame *f, const Msg_RUN_FINISH *m, void *ud)
{
	Client *cl = ud;
	const char *run_id = m->run_id, *status = m->status, *error = m->error;
	int ret = 0;

	if (!run_status_terminal(status) || strlen(run_id) != RUN_ID_LEN)
		ret = -EINVAL;
	if (ret == 0) {
		json_t *err = error ? json_loads(error, 0, NULL) : NULL;
		const char *msg = json_string_value(json_object_get(err, "message"));
		const char *code = json_string_value(json_object_get(err, "code"));
		json_t *chunk, *fields = NULL;
		if (streq(status, "completed")) {
			chunk = json_pack("{s:s, s:s}", "type", "RUN_FINISHED", "runId", run_id);
		} else {
			if (!msg)
				msg = streq(status, "aborted") ? "run cancelled" : "run failed";
			chunk = json_pack("{s:s, s:s}", "type", "RUN_ERROR", "message", msg);
			fields = json_pack("{s:{s:s}}", "error", "message", msg);
			if (code) {
				json_object_set_new(chunk, "code", json_string(code));
				json_object_set_new(json_object_get(fields, "error"), "code",
						    json_string(code));
			}
		}
		json_decref(err);
		/* the terminal chunk names its thread and run (RUN_FINISHED
		 * requires both; RUN_ERROR gets them in metadata.tanstack too) */
		json_t *rec = NULL;
		const char *thread = NULL;
		if (runlog_get(cl->c->runlog, run_id, &rec) == 0)
			thread = json_string_value(json_object_get(rec, "threadId"));
		if (chunk && streq(status, "completed"))
			json_object_set_new(chunk, "threadId", json_string(thread ? thread : ""));
		else if (chunk)
			agui_error_ids(chunk, thread, run_id);
		json_decref(rec);
		op_queue_client(cl->c, cl, f->req_id, run_id, chunk, status, fields);
	}
	return ret;
}
