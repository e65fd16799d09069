/* SPDX-License-Identifier: MIT */
/*
 * driver-output.c — what a run's exec says, and its end.
 *
 * EXEC_OUTPUT frames carry stream byte offsets: each stream is taken exactly
 * once (a replay after a re-attach is skipped, bytes the shim lost are noted),
 * counted against the run's and its thread's output budgets, and drained by
 * the adapter at the end of the loop turn (or sooner, past
 * output_chunk_max). The chunks a drain queued are stored with the driver
 * state (drive_state), so a restarted coordinatord re-attaches at exactly the
 * offsets consumed. EXEC_EXIT ends the main exec (the adapter's exit()) or an
 * adapter's post step (its done callback).
 */
#include "config.h"

#include "driver.h"

#include "adapter.h"

#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

#include "driver-int.h"

/* What a restarted coordinatord needs to re-attach and go on exactly where it
 * stopped: the exec, the offsets consumed, and everything the adapter made of
 * them that is not in the record yet (its parse state, the id counter, the
 * stderr tail kept for an error message). Stored after every drain, in the
 * transaction of the chunks that drain queued. NULL when out of memory. */
json_t *
drive_state(Run *run)
{
	json_t *d =
	    json_pack("{s:s, s:s, s:s, s:I, s:s, s:[I,I], s:I}", "threadId", run->thread_id,
		      "harness", run->harness ? run->harness->name : "shell", "sandboxId",
		      run->sandbox_id ? run->sandbox_id : "", "execId", (json_int_t)run->exec_id,
		      "toolCallId", run->tool_call_id, "consumed", (json_int_t)run->out[1].taken,
		      (json_int_t)run->out[2].taken, "ids", (json_int_t)run->id_counter);
	if (!d)
		return NULL;
	if (run->stderr_len) {
		/* as the record would get it: valid UTF-8, secrets redacted */
		size_t len;
		_cleanup_free_ char *t = utf8_sanitize(run->stderr_tail, run->stderr_len, &len);
		if (!t || redact_text(run->secret_values, &t, &len) < 0 ||
		    json_object_set_new(d, "stderrTail", json_stringn(t, len)) < 0) {
			json_decref(d);
			return NULL;
		}
	}
	if (run->adapter && run->adapter->save && run->astate) {
		json_t *a = run->adapter->save(run);
		if (!a || json_object_set_new(d, "adapter", a) < 0 ||
		    json_object_set_new(d, "adapterKind",
					json_string(adapter_name(run->adapter->kind))) < 0) {
			json_decref(d);
			return NULL;
		}
	}
	return d;
}

/* Let the adapter turn buffered output into chunks, then queue the state it
 * left behind: the same commit stores both, so after a crash the offsets, the
 * adapter's state and the events always agree. */
void
run_flush_output(Run *run, bool final)
{
	run->dirty = false;
	if (run->in_post_step)
		return; /* a post step's output is collected, not streamed */
	if (!run->adapter || run->state == RUN_DONE)
		return;
	run->adapter->drain(run, final);
	if (run->state == RUN_DONE ||
	    (run->out[1].taken == run->saved_taken[1] && run->out[2].taken == run->saved_taken[2]))
		return;
	json_t *d = drive_state(run);
	if (!d) {
		run_kill_exec(run);
		run_fail(run, "out of memory saving the driver state", RUN_ERR_INTERNAL);
		return;
	}
	run->saved_taken[1] = run->out[1].taken;
	run->saved_taken[2] = run->out[2].taken;
	run_save_drive(run, d);
}

void
driver_flush_cb(evutil_socket_t fd, short what, void *arg)
{
	driver_flush_all(arg);
}

void
driver_flush_all(Coordinator *c)
{
	for (Run *run = c->runs; run; run = run->next)
		if (run->dirty && run->state != RUN_DONE)
			run_flush_output(run, false);
}

/* ---------- output budgets ---------- */

static ThreadOutput *
thread_output(Coordinator *c, const char *thread_id, int64_t now)
{
	ThreadOutput **pp = &c->thread_output, *t;

	while ((t = *pp)) {
		if (streq(t->thread_id, thread_id))
			break;
		if (now - t->window_start_ms >= c->conf.thread_output_window_ms) {
			*pp = t->next; /* an idle thread's window is over: forget it */
			free(t);
			continue;
		}
		pp = &t->next;
	}
	if (!t) {
		size_t l = strlen(thread_id);
		t = calloc(1, sizeof(*t) + l + 1);
		if (!t)
			return NULL;
		memcpy(t->thread_id, thread_id, l + 1);
		t->window_start_ms = now;
		t->next = c->thread_output;
		c->thread_output = t;
	} else if (now - t->window_start_ms >= c->conf.thread_output_window_ms) {
		t->window_start_ms = now;
		t->bytes = 0;
	}
	return t;
}

void
driver_thread_output_free(Coordinator *c)
{
	while (c->thread_output) {
		ThreadOutput *n = c->thread_output->next;
		free(c->thread_output);
		c->thread_output = n;
	}
}

/* How many of n new output bytes fit the run's and its thread's budgets
 * (counting them against the thread's window). The run's count is the
 * stream offsets, which survive a restart with the driver state. */
static size_t
output_budget(Run *run, size_t n)
{
	Coordinator *c = run->c;
	uint64_t keep = n;

	if (run->output_limited)
		return 0;
	if (c->conf.max_run_output_bytes > 0) {
		/* n is already counted in neither added */
		uint64_t total = run->out[1].added + run->out[2].added;
		uint64_t max = (uint64_t)c->conf.max_run_output_bytes;
		keep = MIN(keep, total >= max ? 0 : max - total);
	}
	if (c->conf.max_thread_output_bytes > 0) {
		ThreadOutput *t = thread_output(c, run->thread_id, now_epoch_ms());
		uint64_t max = (uint64_t)c->conf.max_thread_output_bytes;
		if (t) {
			keep = MIN(keep, t->bytes >= max ? 0 : max - t->bytes);
			t->bytes += keep;
		}
	}
	return (size_t)keep;
}

/* n bytes of b's stream went over a budget: they are consumed (never read
 * again after a restart) but not stored. The first time, a marker event says
 * so, and output_limit_action applies: 'fail' kills the exec and ends the run
 * output_limit; 'drop' keeps it running (shell harness only: dropping bytes
 * of an NDJSON stream would cut its lines, so other harnesses always fail). */
static void
output_over_budget(Run *run, OutBuf *b, size_t n)
{
	Coordinator *c = run->c;
	bool drop = c->conf.output_limit_action == OUTPUT_LIMIT_DROP && run->adapter &&
		    run->adapter->kind == ADAPTER_SHELL;

	b->added += n;
	b->taken += n;
	run->dropped += n;
	c->m.output_dropped_bytes += n;
	if (run->output_limited)
		return;
	run->output_limited = true;
	c->m.runs_output_limited++;
	bool thread =
	    c->conf.max_run_output_bytes <= 0 ||
	    run->out[1].added + run->out[2].added - n < (uint64_t)c->conf.max_run_output_bytes;
	int64_t budget = thread ? c->conf.max_thread_output_bytes : c->conf.max_run_output_bytes;
	char m[200];
	snprintf(m, sizeof(m),
		 "[runwarden: output over the %s budget of %" PRId64 " bytes; dropped %zu bytes%s]",
		 thread ? "thread's" : "run's", budget, n,
		 drop ? "; further output is dropped" : "");
	log_ctx(LOG_WARNING, &run->log, "Run output over the %s budget (%" PRId64 " bytes): %s",
		thread ? "thread" : "run", budget, drop ? "dropping the rest" : "failing the run");
	run_flush_output(run, !drop);
	if (run->state == RUN_DONE)
		return; /* the adapter ended it meanwhile */
	run_emit(run,
		 json_pack("{s:s, s:s, s:{s:I, s:s, s:I, s:s}}", "type", "CUSTOM", "name",
			   "runwarden.output_dropped", "value", "droppedBytes", (json_int_t)n,
			   "budget", thread ? "thread" : "run", "budgetBytes", (json_int_t)budget,
			   "text", m),
		 drive_state(run));
	if (drop)
		return;
	run_kill_exec(run);
	snprintf(m, sizeof(m), "output over the %s budget of %" PRId64 " bytes",
		 thread ? "thread's" : "run's", budget);
	run_fail(run, m, RUN_ERR_OUTPUT_LIMIT);
}

/* ---------- shim pushes ---------- */

static int
shim_exec_output(Peer *p, const Frame *f, const Msg_EXEC_OUTPUT *m, void *ud)
{
	Coordinator *c = ud;
	uint64_t stream = m->stream, offset = m->offset;
	const void *data = m->data;
	size_t len = m->data_len;

	if (stream != 1 && stream != 2)
		return -EBADMSG;
	Run *run = run_find_exec(c, m->exec_id);
	if (!run && sbx_exec_output(c, m))
		return 0; /* the sandbox API's (sandbox-exec.c) */
	if (!run || run->state == RUN_DONE)
		return 0; /* not ours (any more) */
	OutBuf *b = &run->out[stream];
	/* exactly once: skip what we already have (a replay after re-attach),
	 * say so when the shim lost bytes we never saw */
	if (offset > b->added) {
		char note[96];
		int n = snprintf(note, sizeof(note),
				 "\n[runwarden: %" PRIu64 " bytes of output were lost]\n",
				 offset - b->added);
		if (outbuf_add(b, note, (size_t)n) < 0)
			return -ENOMEM;
		b->added = offset; /* the note stands for the lost bytes */
	}
	/* dropped > 0 needs nothing here: the shim's own note is in the stream */
	if (offset + len <= b->added)
		return 0;
	size_t skip = (size_t)(b->added - offset);
	if (run->in_post_step) {
		if (stream == 1 && run->post_step_out.len < (1u << 20))
			(void)outbuf_add(&run->post_step_out, (const char *)data + skip,
					 len - skip);
		b->added += len - skip;
		b->taken = b->added;
		return 0;
	}
	size_t n = len - skip, keep = output_budget(run, n);
	if (keep > 0 && outbuf_add(b, (const char *)data + skip, keep) < 0)
		return -ENOMEM;
	if (keep < n) {
		output_over_budget(run, b, n - keep);
		return 0;
	}
	if (b->len >= (size_t)c->conf.output_chunk_max) {
		run_flush_output(run, false);
		return 0;
	}
	if (!run->dirty) {
		run->dirty = true;
		event_active(c->flush_ev, 0, 0);
	}
	return 0;
}

static int
shim_exec_exit(Peer *p, const Frame *f, const Msg_EXEC_EXIT *m, void *ud)
{
	Coordinator *c = ud;
	int64_t code = m->exit_code, sig = m->signal; /* 0 when absent */
	char why[32];

	snprintf(why, sizeof(why), "%s", m->reason ? m->reason : "exit");
	Run *run = run_find_exec(c, m->exec_id);
	if (!run) {
		(void)sbx_exec_exit(c, m); /* the sandbox API's, or nobody's */
		return 0;
	}
	if (run_cancelling(run)) {
		/* the exec a cancel killed: now the run ends aborted */
		bool post = run->in_post_step;
		run->in_post_step = false;
		run->post_step_done = NULL;
		if (!post)
			run_flush_output(run, true);
		cancel_finish(run);
		return 0;
	}
	if (run->in_post_step) {
		run->in_post_step = false;
		void (*done)(Run *, int64_t, const char *, size_t) = run->post_step_done;
		run->post_step_done = NULL;
		if (done)
			done(run, code, run->post_step_out.data ? run->post_step_out.data : "",
			     run->post_step_out.len);
		return 0;
	}
	run_flush_output(run, true);
	if (run->state == RUN_DONE)
		return 0; /* the adapter ended the run */
	if (run->output_limited && run->dropped > 0) {
		/* drop mode: the total, before the run's end */
		char text[160];
		snprintf(text, sizeof(text),
			 "[runwarden: dropped %" PRIu64 " bytes of output in all]", run->dropped);
		run_emit(run,
			 json_pack("{s:s, s:s, s:{s:I, s:b, s:s}}", "type", "CUSTOM", "name",
				   "runwarden.output_dropped", "value", "droppedBytes",
				   (json_int_t)run->dropped, "total", 1, "text", text),
			 NULL);
	}
	run->adapter->exit(run, code, sig, why);
	return 0;
}

static void
post_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Run *run = ud;
	Reply_EXEC_START rep = {};
	int k = err < 0 ? err : reply_decode_EXEC_START(body, &rep);
	uint64_t exec_id = rep.exec_id;

	reply_done_EXEC_START(&rep);
	if (run_cancelling(run)) {
		run->in_post_step = false;
		run->post_step_done = NULL;
		cancel_on_start(run, k, exec_id);
		return;
	}
	if (k < 0) {
		void (*done)(Run *, int64_t, const char *, size_t) = run->post_step_done;
		run->in_post_step = false;
		run->post_step_done = NULL;
		if (done)
			done(run, -1, "", 0);
		return;
	}
	run->exec_id = exec_id;
	for (int i = 1; i <= 2; i++) {
		outbuf_done(&run->out[i]);
		run->out[i] = (OutBuf){0};
	}
	run->state = RUN_EXECUTING;
}

static int
run_aux_exec(Run *run, char *const *argv, char *const *env, const char *stdin_data,
	     size_t stdin_len, void (*done)(Run *run, int64_t code, const char *out, size_t len))
{
	Coordinator *c = run->c;

	if (!peer_is_ready(c->shim) || !run->sandbox_id)
		return -ENOTCONN;
	outbuf_done(&run->post_step_out);
	run->post_step_out = (OutBuf){0};
	Msg_EXEC_START m = {
	    .sandbox_id = run->sandbox_id,
	    .argv = argv,
	    .env = env,
	    .cwd = "/workspace",
	    .stdin = stdin_data,
	    .stdin_len = stdin_len,
	    .has_stdin = stdin_data != NULL,
	    .timeout_ms = 30000,
	    .has_timeout_ms = true,
	    .kill_leftovers = true,
	    .has_kill_leftovers = run_kills_leftovers(run),
	};
	int r = msg_call_EXEC_START(c->shim, &m, SHIM_CALL_TIMEOUT, post_started, run);
	if (r < 0)
		return r;
	run->in_post_step = true;
	run->post_step_done = done;
	run->state = RUN_STARTING;
	return 0;
}

int
run_post_exec(Run *run, char *const *argv,
	      void (*done)(Run *run, int64_t code, const char *out, size_t len))
{
	static char *const env[] = {(char *)"PATH=/usr/local/bin:/usr/bin:/bin",
				    (char *)"HOME=/workspace", (char *)"LANG=C.UTF-8", NULL};
	return run_aux_exec(run, argv, env, NULL, 0, done);
}

static int
shim_sandbox_queued(Peer *p, const Frame *f, const Msg_SANDBOX_QUEUED *m, void *ud)
{
	Coordinator *c = ud;

	if (m->run_id) {
		Run *run = run_find(c, m->run_id);
		if (run && run->state == RUN_ENSURING) {
			run->queued = true;
			run_emit(run,
				 json_pack("{s:s, s:s, s:{s:I}}", "type", "CUSTOM", "name",
					   "run.queued", "value", "position",
					   (json_int_t)m->position),
				 NULL);
		}
	}
	return 0;
}

MSG_HANDLER(dispatch_exec_output, EXEC_OUTPUT, shim_exec_output)
MSG_HANDLER(dispatch_exec_exit, EXEC_EXIT, shim_exec_exit)
MSG_HANDLER(dispatch_sandbox_queued, SANDBOX_QUEUED, shim_sandbox_queued)

const PeerHandler driver_shim_pushes[_MSG_TYPE_MAX] = {
    [MSG_EXEC_OUTPUT] = dispatch_exec_output,
    [MSG_EXEC_EXIT] = dispatch_exec_exit,
    [MSG_SANDBOX_QUEUED] = dispatch_sandbox_queued,
};
