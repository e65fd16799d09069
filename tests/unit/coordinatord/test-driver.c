/* SPDX-License-Identifier: MIT */
/*
 * test-driver.c — coordinatord's run driver (driver*.c, run.c, commit.c)
 * against a fake containerd-shim.
 *
 * The fake shim listens on the runtime directory's shim socket and speaks
 * real frames through common/proto/peer.h; the driver connects to it with
 * its own code (shim_connect_now) and commits to a real LMDB run log in a
 * mkdtemp() directory. The fake holds every request until the test answers
 * it, so each test can check the state the Run is in between two messages,
 * then the events the run log holds at the end.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <ftw.h>
#include <jansson.h>

#include "coord-fixture.h"
#include "coordinator.h"
#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "peer.h"
#include "unix-socket.h"

#define RUN_A "00000000-0000-4000-8000-00000000000a"
#define THREAD "thread-1"
#define EXEC_ID 42

/* The fake containerd-shim: requests are kept (last one of each type) until
 * the test replies. */
typedef struct FakeShim {
	int listen_fd;
	struct event *accept_ev;
	Peer *peer;
	int n_ensure, n_start, n_kill, n_attach, n_proxy;
	uint64_t ensure_req, start_req, kill_req, attach_req, proxy_req;
	char **proxy_allow;
	char **start_env;
	char ensure_key[64], ensure_run[64];
	char start_sandbox[64];
	char **start_argv;
	int64_t kill_signal;
	uint64_t kill_exec, attach_exec, attach_stdout;
} FakeShim;

typedef struct Fix {
	char dir[64];
	Coordinator c;
	HarnessSet harnesses;
	FakeShim shim;
} Fix;

/* ---------- the fake shim ---------- */

static int
fake_ensure(Peer *p, const Frame *f, void *ud)
{
	FakeShim *s = ud;
	MpReader r;
	const char *key = NULL, *run_id = NULL;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "key", &key);
	mp_read_str_opt(&r, "run_id", &run_id, "");
	if (r.err == 0) {
		snprintf(s->ensure_key, sizeof(s->ensure_key), "%s", key);
		snprintf(s->ensure_run, sizeof(s->ensure_run), "%s", run_id);
	}
	mp_reader_done(&r);
	s->ensure_req = f->req_id;
	s->n_ensure++;
	return 0;
}

static int
fake_exec_start(Peer *p, const Frame *f, void *ud)
{
	FakeShim *s = ud;
	MpReader r;
	const char *sandbox_id = NULL;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &sandbox_id);
	if (r.err == 0)
		snprintf(s->start_sandbox, sizeof(s->start_sandbox), "%s", sandbox_id);
	mp_strv_free(s->start_argv);
	s->start_argv = NULL;
	mp_read_strv(&r, "argv", &s->start_argv);
	mp_strv_free(s->start_env);
	s->start_env = NULL;
	mp_read_strv(&r, "env", &s->start_env);
	mp_reader_done(&r);
	s->start_req = f->req_id;
	s->n_start++;
	return 0;
}

static int
fake_exec_kill(Peer *p, const Frame *f, void *ud)
{
	FakeShim *s = ud;
	MpReader r;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &s->kill_exec);
	mp_read_int(&r, "signal", &s->kill_signal);
	mp_reader_done(&r);
	s->kill_req = f->req_id;
	s->n_kill++;
	return 0;
}

static int
fake_exec_attach(Peer *p, const Frame *f, void *ud)
{
	FakeShim *s = ud;
	MpReader r;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &s->attach_exec);
	mp_read_uint(&r, "stdout_offset", &s->attach_stdout);
	mp_reader_done(&r);
	s->attach_req = f->req_id;
	s->n_attach++;
	return 0;
}

static int
fake_proxy(Peer *p, const Frame *f, void *ud)
{
	FakeShim *s = ud;
	MpReader r;

	mp_reader_init(&r, f->body);
	mp_strv_free(s->proxy_allow);
	s->proxy_allow = NULL;
	mp_read_strv(&r, "allow", &s->proxy_allow);
	mp_reader_done(&r);
	s->proxy_req = f->req_id;
	s->n_proxy++;
	return 0;
}

/* SANDBOX_DESTROY, SANDBOX_UNLISTEN: done */
static int
fake_ok(Peer *p, const Frame *f, void *ud)
{
	return peer_reply(p, f->req_id, NULL);
}

static const PeerHandler fake_handlers[_MSG_TYPE_MAX] = {
    [MSG_SANDBOX_ENSURE] = fake_ensure, [MSG_EXEC_START] = fake_exec_start,
    [MSG_EXEC_KILL] = fake_exec_kill,	[MSG_EXEC_ATTACH] = fake_exec_attach,
    [MSG_SANDBOX_PROXY] = fake_proxy,	[MSG_SANDBOX_DESTROY] = fake_ok,
    [MSG_SANDBOX_UNLISTEN] = fake_ok,
};

static void
fake_closed(Peer *p, int err, void *ud)
{
	FakeShim *s = ud;
	s->peer = peer_free(s->peer);
}

static const PeerOps fake_ops = {
    .local_role = ROLE_SHIM,
    .handlers = fake_handlers,
    .on_close = fake_closed,
};

static void
fake_accept(evutil_socket_t lfd, short what, void *arg)
{
	Fix *f = arg;
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	assert_null(f->shim.peer); /* one coordinatord at a time */
	assert_int_equal(peer_new(f->c.base, fd, &fake_ops, &f->shim,
				  (size_t)f->c.conf.shared.max_frame, &f->shim.peer),
			 0);
}

static void
fake_reply_ensure(Fix *f, const char *sandbox_id)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "sandbox_id", sandbox_id);
	mp_w_bool(&w, "created", true);
	assert_int_equal(peer_reply(f->shim.peer, f->shim.ensure_req, &w), 0);
	mp_writer_done(&w);
}

static void
fake_reply_exec(Fix *f, uint64_t req_id, uint64_t exec_id)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_uint(&w, "exec_id", exec_id);
	assert_int_equal(peer_reply(f->shim.peer, req_id, &w), 0);
	mp_writer_done(&w);
}

static void
fake_output(Fix *f, uint64_t offset, const char *data)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_uint(&w, "exec_id", EXEC_ID);
	mp_w_uint(&w, "stream", 1);
	mp_w_uint(&w, "offset", offset);
	mp_w_bin(&w, "data", data, strlen(data));
	assert_int_equal(peer_push(f->shim.peer, MSG_EXEC_OUTPUT, &w), 0);
	mp_writer_done(&w);
}

static void
fake_exit(Fix *f, int64_t code, int64_t sig, const char *reason)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_uint(&w, "exec_id", EXEC_ID);
	mp_w_int(&w, "exit_code", code);
	mp_w_int(&w, "signal", sig);
	mp_w_str(&w, "reason", reason);
	assert_int_equal(peer_push(f->shim.peer, MSG_EXEC_EXIT, &w), 0);
	mp_writer_done(&w);
}

/* ---------- the loop ---------- */

/* A few turns, for what must NOT happen. */
static void
pump_a_little(Fix *f)
{
	for (int i = 0; i < 50; i++) {
		event_base_loop(f->c.base, EVLOOP_NONBLOCK);
		usleep(1000);
	}
}

static Run *
run_a(Fix *f)
{
	return run_find(&f->c, RUN_A);
}

static RunState
state_a(Fix *f)
{
	Run *run = run_a(f);
	return run ? run->state : RUN_DONE;
}

static void
show_type(FILE *m, const json_t *j, size_t i)
{
	const char *type = json_string_value(json_object_get(j, "type"));
	const char *name = json_string_value(json_object_get(j, "name"));
	fprintf(m, "%s%s%s%s", i ? "," : "", type ? type : "?", name ? ":" : "", name ? name : "");
}

/* The stored events of RUN_A as "TYPE" or "CUSTOM:name", comma-separated. */
static char *
event_types(Fix *f)
{
	return coord_fixture_events(f->c.runlog, RUN_A, show_type);
}

static void
show_stdout(FILE *m, const json_t *j, size_t i)
{
	const char *name = json_string_value(json_object_get(j, "name"));
	if (name && streq(name, "process.stdout"))
		fputs(json_string_value(json_object_get(json_object_get(j, "value"), "text")) ?: "",
		      m);
}

/* The concatenated "text" of RUN_A's process.stdout events. */
static char *
stdout_text(Fix *f)
{
	return coord_fixture_events(f->c.runlog, RUN_A, show_stdout);
}

static char *
record_status(Fix *f)
{
	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->c.runlog, RUN_A, &rec), 0);
	char *s = strdup(json_string_value(json_object_get(rec, "status")) ?: "");
	json_decref(rec);
	return s;
}

/* ---------- fixture ---------- */

static int
setup(void **state)
{
	Fix *f = calloc(1, sizeof(*f));
	char path[256];

	if (!f)
		return -1;
	if (coord_fixture_setup(f->dir, &f->c, &f->harnesses, "test-driver",
				"tool_cgroup = off\n"
				"[harness.net]\nadapter = shell\negress = example.com\n") < 0)
		return -1;
	f->c.run_teardown = driver_run_teardown;
	commit_setup(&f->c, &coordinator_commit_hooks);
	driver_setup(&f->c);

	snprintf(path, sizeof(path), "%s/%s", f->dir, RW_SOCK_SHIM);
	f->shim.listen_fd = unix_listen(path, 0600);
	if (f->shim.listen_fd < 0)
		return -1;
	f->shim.accept_ev =
	    event_new(f->c.base, f->shim.listen_fd, EV_READ | EV_PERSIST, fake_accept, f);
	if (!f->shim.accept_ev || event_add(f->shim.accept_ev, NULL) < 0)
		return -1;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	Fix *f = *state;

	f->c.stopping = true;
	commit_now(&f->c);
	while (f->c.runs)
		run_free(f->c.runs);
	f->c.shim_link = peer_link_free(f->c.shim_link);
	f->c.shim = NULL;
	f->shim.peer = peer_free(f->shim.peer);
	mp_strv_free(f->shim.start_argv);
	mp_strv_free(f->shim.start_env);
	mp_strv_free(f->shim.proxy_allow);
	event_free(f->shim.accept_ev);
	close(f->shim.listen_fd);
	commit_teardown(&f->c);
	driver_thread_output_free(&f->c);
	event_free(f->c.flush_ev);
	coord_fixture_teardown(f->dir, &f->c, &f->harnesses);
	free(f);
	return 0;
}

/* RUN_A registered and driven as a RUN_START does (coordinator.c), running
 * `echo hello` with the built-in shell harness, before any shim is there. */
static void
start_run_with(Fix *f, const char *harness)
{
	bool created = false;
	assert_int_equal(
	    runlog_create(f->c.runlog, RUN_A, THREAD, "shell", now_epoch_ms(), &created), 0);
	assert_true(created);
	Run *run = run_new(&f->c, RUN_A, THREAD);
	assert_non_null(run);
	run->harness = harness_find(&f->harnesses, harness);
	assert_non_null(run->harness);
	run->adapter = adapter_get(run->harness->adapter);
	run_emit(
	    run,
	    json_pack("{s:s, s:s, s:s}", "type", "RUN_STARTED", "threadId", THREAD, "runId", RUN_A),
	    NULL);
	json_auto_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "echo hello");
	run_start_driving(run, msgs, NULL);
}

static void
start_run(Fix *f)
{
	start_run_with(f, "shell");
}

/* From WAIT_SHIM to EXECUTING: the shim connects, the sandbox is ensured,
 * the exec started. */
static void
drive_to_executing(Fix *f)
{
	start_run(f);
	assert_int_equal(state_a(f), RUN_WAIT_SHIM);

	shim_connect_now(&f->c);
	PUMP_UNTIL(f, f->shim.n_ensure == 1);
	assert_int_equal(state_a(f), RUN_ENSURING);
	assert_string_equal(f->shim.ensure_key, THREAD); /* reuse = thread */
	assert_string_equal(f->shim.ensure_run, RUN_A);

	fake_reply_ensure(f, "sb-test");
	/* no bridge, no egress: straight from the sandbox to the harness */
	PUMP_UNTIL(f, f->shim.n_start == 1);
	assert_int_equal(state_a(f), RUN_STARTING);
	assert_string_equal(f->shim.start_sandbox, "sb-test");
	assert_non_null(f->shim.start_argv);
	assert_string_equal(f->shim.start_argv[1], "-c");
	assert_string_equal(f->shim.start_argv[2], "echo hello");

	fake_reply_exec(f, f->shim.start_req, EXEC_ID);
	PUMP_UNTIL(f, state_a(f) == RUN_EXECUTING);
	assert_int_equal(run_a(f)->exec_id, EXEC_ID);
}

/* ---------- tests ---------- */

static void
test_driver_runs_shell_to_completion(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *out = NULL, *types = NULL, *status = NULL;
	json_t *drive = NULL;

	drive_to_executing(f);

	fake_output(f, 0, "hello\n");
	PUMP_UNTIL(f,
		   run_a(f) && run_a(f)->out[1].taken == 6 && !run_a(f)->dirty && !f->c.ops_head);
	/* the offsets consumed are stored with the events */
	assert_int_equal(runlog_drive_get(f->c.runlog, RUN_A, &drive), 0);
	assert_int_equal(json_integer_value(json_object_get(drive, "execId")), EXEC_ID);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(drive, "consumed"), 0)),
			 6);
	json_decref(drive);

	/* a replay of bytes already taken (after a re-attach) is skipped */
	fake_output(f, 0, "hello\n");
	fake_output(f, 6, "world\n");
	PUMP_UNTIL(f, run_a(f) && run_a(f)->out[1].taken == 12 && !f->c.ops_head);

	fake_exit(f, 0, 0, "exit");
	PUMP_UNTIL(f, !run_a(f)); /* freed once its end committed */

	out = stdout_text(f);
	assert_string_equal(out, "hello\nworld\n");
	types = event_types(f);
	assert_string_equal(types, "RUN_STARTED,CUSTOM:sandbox.created,TOOL_CALL_START,"
				   "TOOL_CALL_ARGS,TOOL_CALL_END,CUSTOM:process.stdout,"
				   "CUSTOM:process.stdout,TOOL_CALL_RESULT,RUN_FINISHED");
	status = record_status(f);
	assert_string_equal(status, "completed");
	/* nothing left to re-attach to */
	assert_true(runlog_drive_get(f->c.runlog, RUN_A, &drive) < 0);
}

static void
test_driver_cancel_kills_the_exec_then_aborts(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *types = NULL, *status = NULL;

	drive_to_executing(f);

	assert_int_equal(run_cancel(run_a(f), NULL), 0);
	assert_int_equal(state_a(f), RUN_CANCELLING);
	assert_int_equal(run_cancel(run_a(f), NULL), -EALREADY);
	PUMP_UNTIL(f, f->shim.n_kill == 1);
	assert_int_equal(f->shim.kill_exec, EXEC_ID);
	assert_int_equal(f->shim.kill_signal, 9);

	/* attached: the kill's reply does not end it, the exec's end does */
	assert_int_equal(peer_reply(f->shim.peer, f->shim.kill_req, NULL), 0);
	pump_a_little(f);
	assert_int_equal(state_a(f), RUN_CANCELLING);

	fake_exit(f, -1, 9, "killed");
	PUMP_UNTIL(f, !run_a(f));
	status = record_status(f);
	assert_string_equal(status, "aborted");
	types = event_types(f);
	assert_string_equal(types, "RUN_STARTED,CUSTOM:sandbox.created,TOOL_CALL_START,"
				   "TOOL_CALL_ARGS,TOOL_CALL_END,TOOL_CALL_RESULT,RUN_ERROR");
}

static void
test_driver_waits_for_a_lost_shim_and_reattaches(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *out = NULL, *status = NULL;

	drive_to_executing(f);
	fake_output(f, 0, "hello\n");
	PUMP_UNTIL(f, run_a(f) && run_a(f)->out[1].taken == 6 && !f->c.ops_head);

	/* the shim goes away: the run waits for the next one */
	f->shim.peer = peer_free(f->shim.peer);
	PUMP_UNTIL(f, state_a(f) == RUN_SHIM_LOST);

	/* the driver reconnects by itself (backoff), then EXEC_ATTACHes where it stopped */
	PUMP_UNTIL(f, f->shim.n_attach == 1);
	assert_int_equal(state_a(f), RUN_SHIM_LOST);
	assert_int_equal(f->shim.attach_exec, EXEC_ID);
	assert_int_equal(f->shim.attach_stdout, 6);
	assert_int_equal(peer_reply(f->shim.peer, f->shim.attach_req, NULL), 0);
	PUMP_UNTIL(f, state_a(f) == RUN_EXECUTING);

	fake_output(f, 6, "again\n");
	fake_exit(f, 0, 0, "exit");
	PUMP_UNTIL(f, !run_a(f));
	out = stdout_text(f);
	assert_string_equal(out, "hello\nagain\n");
	status = record_status(f);
	assert_string_equal(status, "completed");
}

static void
test_driver_fails_a_run_whose_sandbox_fails(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *types = NULL, *status = NULL;

	start_run(f);
	shim_connect_now(&f->c);
	PUMP_UNTIL(f, f->shim.n_ensure == 1);
	assert_int_equal(peer_reply_error(f->shim.peer, f->shim.ensure_req, -ENOSPC, "disk full"),
			 0);
	PUMP_UNTIL(f, !run_a(f));
	assert_int_equal(f->shim.n_start, 0);
	status = record_status(f);
	assert_string_equal(status, "failed");
	types = event_types(f);
	assert_string_equal(types, "RUN_STARTED,RUN_ERROR");
}

static void
test_driver_cancel_while_reattaching_ends_on_the_kill_reply(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *status = NULL;

	drive_to_executing(f);
	f->shim.peer = peer_free(f->shim.peer);
	PUMP_UNTIL(f, f->shim.n_attach == 1); /* a new shim; the EXEC_ATTACH is held */
	assert_int_equal(state_a(f), RUN_SHIM_LOST);

	/* not attached: no EXEC_EXIT will come, the kill's reply ends it */
	assert_int_equal(run_cancel(run_a(f), NULL), 0);
	assert_int_equal(state_a(f), RUN_CANCELLING_DETACHED);
	PUMP_UNTIL(f, f->shim.n_kill == 1);
	assert_int_equal(f->shim.kill_exec, EXEC_ID);
	assert_int_equal(peer_reply(f->shim.peer, f->shim.kill_req, NULL), 0);
	PUMP_UNTIL(f, !run_a(f));
	status = record_status(f);
	assert_string_equal(status, "aborted");
}

/* A coordinatord restarted while RUN_A ran: the driver state in the log
 * brings it back in RUN_REATTACH, and it goes on from the offsets stored. */
static void
test_driver_recovers_a_run_after_a_restart(void **state)
{
	Fix *f = *state;
	_cleanup_free_ char *out = NULL, *status = NULL;
	bool created = false;

	assert_int_equal(
	    runlog_create(f->c.runlog, RUN_A, THREAD, "shell", now_epoch_ms(), &created), 0);
	json_auto_t *drive = json_pack(
	    "{s:s, s:s, s:s, s:I, s:s, s:[I,I], s:I}", "threadId", THREAD, "harness", "shell",
	    "sandboxId", "sb-old", "execId", (json_int_t)EXEC_ID, "toolCallId", "call_00000000",
	    "consumed", (json_int_t)4, (json_int_t)0, "ids", (json_int_t)0);
	RunLogBatch *b = NULL;
	assert_int_equal(runlog_batch_begin(f->c.runlog, &b), 0);
	assert_int_equal(runlog_batch_drive_put(b, RUN_A, drive), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);

	driver_recover(&f->c);
	assert_int_equal(state_a(f), RUN_REATTACH);
	assert_int_equal(run_a(f)->out[1].taken, 4);

	shim_connect_now(&f->c);
	PUMP_UNTIL(f, f->shim.n_attach == 1);
	assert_int_equal(f->shim.attach_exec, EXEC_ID);
	assert_int_equal(f->shim.attach_stdout, 4);
	assert_int_equal(f->shim.n_ensure, 0); /* no new sandbox */
	assert_int_equal(peer_reply(f->shim.peer, f->shim.attach_req, NULL), 0);
	PUMP_UNTIL(f, state_a(f) == RUN_EXECUTING);

	/* the shim replays from offset 4: the first 4 bytes were taken before */
	fake_output(f, 4, "tail\n");
	fake_exit(f, 0, 0, "exit");
	PUMP_UNTIL(f, !run_a(f));
	out = stdout_text(f);
	assert_string_equal(out, "tail\n");
	status = record_status(f);
	assert_string_equal(status, "completed");
}

static bool
strv_has(char **v, const char *s)
{
	for (size_t i = 0; v && v[i]; i++)
		if (streq(v[i], s))
			return true;
	return false;
}

static void
test_driver_opens_the_egress_proxy_before_the_exec(void **state)
{
	Fix *f = *state;

	start_run_with(f, "net");
	shim_connect_now(&f->c);
	PUMP_UNTIL(f, f->shim.n_ensure == 1);
	fake_reply_ensure(f, "sb-net");
	/* no bridge (no tools), but egress: the proxy comes first */
	PUMP_UNTIL(f, f->shim.n_proxy == 1);
	assert_int_equal(state_a(f), RUN_PROXYING);
	assert_int_equal(f->shim.n_start, 0);
	assert_true(strv_has(f->shim.proxy_allow, "example.com"));

	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_uint(&w, "port", 3128);
	assert_int_equal(peer_reply(f->shim.peer, f->shim.proxy_req, &w), 0);
	mp_writer_done(&w);
	PUMP_UNTIL(f, f->shim.n_start == 1);
	assert_int_equal(state_a(f), RUN_STARTING);
	assert_true(strv_has(f->shim.start_env, "HTTPS_PROXY=http://127.0.0.1:3128"));
	assert_int_equal(run_a(f)->proxy_port, 3128);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_driver_runs_shell_to_completion, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_driver_cancel_kills_the_exec_then_aborts, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_driver_waits_for_a_lost_shim_and_reattaches, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_driver_fails_a_run_whose_sandbox_fails, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_driver_opens_the_egress_proxy_before_the_exec,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_driver_cancel_while_reattaching_ends_on_the_kill_reply, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_driver_recovers_a_run_after_a_restart, setup,
					    teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
