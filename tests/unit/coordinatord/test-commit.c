/* SPDX-License-Identifier: MIT */
/*
 * test-commit.c — coordinatord's commit core (commit.c) and its outcomes.
 *
 * The real op queue commits to a real LMDB run log in a mkdtemp() directory;
 * the CommitHooks are the test's (they record what each commit meant for each
 * run), and so is the CommitDelivery: it records each step the core takes
 * (before_flush, failed, committed) and then does what the single-host
 * delivery does (commit_delivery_local). A flush that fails is made by
 * wrapping mdb_txn_commit (-Wl,--wrap, tests/unit/unit.am): MDB_MAP_FULL is
 * what a full map gives (-ENOSPC), EIO any other write error. A client's
 * RUN_APPENDs come over a real socketpair (common/proto/peer.h) and are queued
 * as run-api.c queues them, so each waiter's answer is checked as it arrives.
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
#include <lmdb.h>

#include "commit-int.h"
#include "coord-fixture.h"
#include "json-util.h"
#include "macro.h"
#include "msg.h"
#include "peer.h"

#define RUN_A "00000000-0000-4000-8000-00000000000a"
#define RUN_B "00000000-0000-4000-8000-00000000000b"
#define THREAD "thread-1"
#define MAX_CALLS 32

/* What the hooks and the delivery heard, in order. */
typedef struct Outcome {
	char run_id[RUN_ID_LEN + 1];
	bool driven;
	CommitOutcome what;
} Outcome;

typedef struct Fix {
	char dir[64];
	Coordinator c;
	HarnessSet harnesses;
	Outcome outcomes[MAX_CALLS];
	size_t n_outcomes;
	int n_before_flush, n_committed, n_failed, n_late, n_ended_local;
	bool writing_before_flush; /* the group was still "writing" in before_flush */
	int failed_r;
	bool failed_dealt;  /* what the delivery's failed answers */
	bool undeliverable; /* the delivery cannot deliver what was committed */
	char committed_runs[MAX_CALLS][RUN_ID_LEN + 1];
	size_t n_committed_runs;
} Fix;

static Fix *fix; /* the hooks get the Coordinator alone */

/* ---------- a flush that fails on demand ---------- */

static int fail_next_commit; /* an LMDB code for the next top-level commit, or 0 */

int __real_mdb_txn_commit(MDB_txn *txn);
int __wrap_mdb_txn_commit(MDB_txn *txn);

int
__wrap_mdb_txn_commit(MDB_txn *txn)
{
	int rc = fail_next_commit;

	if (rc == 0)
		return __real_mdb_txn_commit(txn);
	fail_next_commit = 0; /* once: the runs' ends after it must commit */
	mdb_txn_abort(txn);
	return rc;
}

/* ---------- the hooks ---------- */

static void
hook_flush(Coordinator *c)
{
}

static bool
hook_run_log(Coordinator *c, const char *run_id, LogCtx *ret)
{
	*ret = (LogCtx){.thread_id = THREAD};
	return true;
}

static char **
hook_secrets(Coordinator *c, const char *run_id, bool *ret_owned)
{
	*ret_owned = false;
	return NULL;
}

static void
hook_committed(Coordinator *c, const char *run_id, bool driven, CommitOutcome what)
{
	assert_true(fix->n_outcomes < MAX_CALLS);
	Outcome *o = &fix->outcomes[fix->n_outcomes++];
	snprintf(o->run_id, sizeof(o->run_id), "%s", run_id);
	o->driven = driven;
	o->what = what;
}

static void
hook_log_usage(Coordinator *c, uint64_t used)
{
}

/* ---------- the delivery: record, then do the single host's ---------- */

static void
test_before_flush(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b)
{
	fix->n_before_flush++;
	fix->writing_before_flush = g->writing;
}

static bool
test_failed(Coordinator *c, CommitGroup *g, CommitRuns *runs, int r)
{
	fix->n_failed++;
	fix->failed_r = r;
	return fix->failed_dealt;
}

static void
test_committed(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b)
{
	fix->n_committed++;
	for (size_t i = 0; i < runs->k && fix->n_committed_runs < MAX_CALLS; i++)
		snprintf(fix->committed_runs[fix->n_committed_runs++], RUN_ID_LEN + 1, "%s",
			 runs->ids[i]);
	if (fix->undeliverable) { /* as replication that got no acknowledgement */
		for (size_t i = 0; i < runs->k; i++)
			commit_fail_local(c, runs->ids[i], true, RUN_ERR_REPLICATION_FAILED,
					  "the cluster did not acknowledge the events",
					  COMMIT_FENCED);
		return;
	}
	commit_delivery_local.committed(c, g, runs, b);
}

static void
test_late(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	  const size_t *lens, size_t n, const json_t *rec)
{
	fix->n_late++;
	commit_delivery_local.late(c, run_id, first_seq, texts, lens, n, rec);
}

static void
test_ended_local(Coordinator *c, const char *run_id, int64_t seq, const char *text, size_t len,
		 const json_t *rec)
{
	fix->n_ended_local++;
	commit_delivery_local.ended_local(c, run_id, seq, text, len, rec);
}

static const CommitDelivery test_delivery = {
    .before_flush = test_before_flush,
    .failed = test_failed,
    .committed = test_committed,
    .late = test_late,
    .ended_local = test_ended_local, /* a fenced run's end (cluster mode only) */
};

static const CommitDelivery *
hook_delivery(Coordinator *c)
{
	return &test_delivery;
}

static const CommitHooks test_hooks = {
    .flush = hook_flush,
    .run_log = hook_run_log,
    .secrets = hook_secrets,
    .committed = hook_committed,
    .log_usage = hook_log_usage,
    .delivery = hook_delivery,
};

/* ---------- helpers ---------- */

static void
create_run(Fix *f, const char *run_id)
{
	bool created = false;
	assert_int_equal(
	    runlog_create(f->c.runlog, run_id, THREAD, "shell", now_epoch_ms(), &created), 0);
	assert_true(created);
}

/* Queue a driver's text chunk {"type":"TEXT_MESSAGE_CONTENT","delta":d}. */
static void
queue_delta(Fix *f, const char *run_id, const char *d)
{
	assert_int_equal(
	    commit_queue_run(&f->c, run_id,
			     json_pack("{s:s, s:s}", "type", "TEXT_MESSAGE_CONTENT", "delta", d),
			     NULL, 0, NULL, NULL, NULL, NULL),
	    0);
}

static void
queue_end(Fix *f, const char *run_id)
{
	assert_int_equal(commit_queue_run(&f->c, run_id, json_pack("{s:s}", "type", "RUN_FINISHED"),
					  NULL, 0, "completed", NULL, NULL, NULL),
			 0);
}

static void
show_delta(FILE *m, const json_t *j, size_t i)
{
	const char *d = json_string_value(json_object_get(j, "delta"));
	const char *type = json_string_value(json_object_get(j, "type"));
	fprintf(m, "%s%s", i ? "," : "", d ? d : type ? type : "?");
}

/* run_id's stored events: their "delta" or else "type", comma-separated. */
static char *
events(Fix *f, const char *run_id)
{
	return coord_fixture_events(f->c.runlog, run_id, show_delta);
}

static json_t *
record(Fix *f, const char *run_id)
{
	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->c.runlog, run_id, &rec), 0);
	return rec;
}

static const char *
rec_str(const json_t *rec, const char *key)
{
	return json_string_value(json_object_get(rec, key)) ?: "";
}

static bool
heard(Fix *f, const char *run_id, CommitOutcome what)
{
	for (size_t i = 0; i < f->n_outcomes; i++)
		if (streq(f->outcomes[i].run_id, run_id) && f->outcomes[i].what == what &&
		    f->outcomes[i].driven)
			return true;
	return false;
}

/* ---------- a client waiting for its answers ---------- */

/* One RUN_APPEND's answer as the client got it. */
typedef struct Answer {
	int done;
	int err;
	int64_t seq;
} Answer;

static Client client;	  /* coordinatord's side of the connection */
static Peer *client_peer; /* the client's side */

/* coordinatord's RUN_APPEND, as run-api.c queues it: acknowledged after the
 * commit */
static int
on_append(Peer *p, const Frame *f, const Msg_RUN_APPEND *m, void *ud)
{
	op_queue_client_text(&fix->c, &client, f->req_id, m->run_id, m->chunk);
	return 0;
}

MSG_HANDLER(dispatch_append, RUN_APPEND, on_append)

static const PeerHandler coord_handlers[_MSG_TYPE_MAX] = {[MSG_RUN_APPEND] = dispatch_append};
static const PeerHandler client_handlers[_MSG_TYPE_MAX] = {0};
static const PeerOps coord_side_ops = {.local_role = ROLE_COORD, .handlers = coord_handlers};
static const PeerOps client_side_ops = {.local_role = ROLE_CLIENT, .handlers = client_handlers};

static void
append_answered(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Answer *a = ud;
	Reply_RUN_APPEND rep = {0};

	a->done++;
	a->err = err;
	if (err == 0 && reply_decode_RUN_APPEND(body, &rep) == 0)
		a->seq = rep.seq;
}

static void
connect_client(Fix *f)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	client = (Client){.c = &f->c};
	assert_int_equal(
	    peer_new(f->c.base, sv[0], &coord_side_ops, &client, 1 << 20, &client.peer), 0);
	assert_int_equal(peer_new(f->c.base, sv[1], &client_side_ops, NULL, 1 << 20, &client_peer),
			 0);
}

static void
send_append(const char *run_id, const char *chunk, Answer *a)
{
	assert_int_equal(
	    msg_call_RUN_APPEND(client_peer,
				&(Msg_RUN_APPEND){.run_id = (char *)run_id, .chunk = (char *)chunk},
				5 * USEC_PER_SEC, append_answered, a),
	    0);
}

static void
disconnect_client(void)
{
	client.peer = peer_free(client.peer);
	client_peer = peer_free(client_peer);
}

/* ---------- fixture ---------- */

static int
setup(void **state)
{
	Fix *f = calloc(1, sizeof(*f));

	if (!f || coord_fixture_setup(f->dir, &f->c, &f->harnesses, "test-commit", NULL) < 0)
		return -1;
	commit_setup(&f->c, &test_hooks);
	fail_next_commit = 0;
	fix = f;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	Fix *f = *state;

	commit_teardown(&f->c);
	coord_fixture_teardown(f->dir, &f->c, &f->harnesses);
	free(f);
	fix = NULL;
	return 0;
}

/* ---------- tests ---------- */

/* Appends queued in one loop turn share one commit, are stored in the order
 * they were queued, and only then delivered; the terminal op ends the run
 * (COMMIT_ENDED) and its status is the record's. */
static void
test_appends_in_order(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	queue_delta(f, RUN_A, "1");
	queue_delta(f, RUN_A, "2");
	queue_delta(f, RUN_A, "3");
	assert_int_equal(f->n_committed, 0); /* nothing before the loop turns */
	PUMP_UNTIL(f, f->n_committed > 0);
	assert_int_equal(f->n_committed, 1); /* one group commit */
	assert_int_equal(f->n_before_flush, 1);
	assert_true(f->writing_before_flush);
	assert_int_equal(f->n_failed, 0);
	_cleanup_free_ char *e = events(f, RUN_A);
	assert_string_equal(e, "1,2,3");
	assert_int_equal(f->n_outcomes, 0); /* appends mean nothing more for the run */

	queue_end(f, RUN_A);
	PUMP_UNTIL(f, f->n_committed == 2);
	json_auto_t *rec = record(f, RUN_A);
	assert_string_equal(rec_str(rec, "status"), "completed");
	assert_int_equal(f->n_outcomes, 1);
	assert_true(heard(f, RUN_A, COMMIT_ENDED));
	assert_int_equal(f->c.m.runs_finished[0], 1);
}

/* Ops of two runs interleaved in one commit: each run's events in its own
 * order, the runs delivered in the order of their first ops. */
static void
test_order_across_runs(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	create_run(f, RUN_B);
	queue_delta(f, RUN_B, "b1");
	queue_delta(f, RUN_A, "a1");
	queue_delta(f, RUN_B, "b2");
	queue_delta(f, RUN_A, "a2");
	queue_end(f, RUN_A);
	commit_now(&f->c);
	assert_int_equal(f->n_committed, 1);
	assert_int_equal(f->n_committed_runs, 2);
	assert_string_equal(f->committed_runs[0], RUN_B);
	assert_string_equal(f->committed_runs[1], RUN_A);
	_cleanup_free_ char *ea = events(f, RUN_A);
	_cleanup_free_ char *eb = events(f, RUN_B);
	assert_string_equal(ea, "a1,a2,RUN_FINISHED");
	assert_string_equal(eb, "b1,b2");
	json_auto_t *ra = record(f, RUN_A);
	json_auto_t *rb = record(f, RUN_B);
	assert_string_equal(rec_str(ra, "status"), "completed");
	assert_string_equal(rec_str(rb, "status"), "running");
	/* only A ended */
	assert_int_equal(f->n_outcomes, 1);
	assert_true(heard(f, RUN_A, COMMIT_ENDED));
}

/* A flush that fails: nothing of the commit is stored, the delivery hears it
 * first, then (the delivery leaving it to the core) each of the commit's runs
 * is failed in a transaction of its own with code and message, made visible
 * as a late commit, and the driver hears COMMIT_STORAGE_FAILED. */
static void
check_storage_failure(Fix *f, int mdb_rc, int err, const char *code, const char *message)
{
	create_run(f, RUN_A);
	create_run(f, RUN_B);
	fail_next_commit = mdb_rc;
	queue_delta(f, RUN_A, "a1");
	queue_delta(f, RUN_B, "b1");
	commit_now(&f->c);
	assert_int_equal(f->n_failed, 1);
	assert_int_equal(f->failed_r, err);
	assert_int_equal(f->n_committed, 0);
	assert_false(f->c.storage_ok);
	assert_int_equal(f->c.m.commit_failures, 1);
	assert_int_equal(f->n_late, 2); /* each run's end, made visible */
	assert_int_equal(f->n_ended_local, 0);
	assert_int_equal(f->c.m.runs_finished[1], 2);
	const char *runs[] = {RUN_A, RUN_B};
	for (size_t i = 0; i < 2; i++) {
		json_auto_t *rec = record(f, runs[i]);
		assert_string_equal(rec_str(rec, "status"), "failed");
		json_t *error = json_object_get(rec, "error");
		assert_string_equal(rec_str(error, "code"), code);
		assert_string_equal(rec_str(error, "message"), message);
		_cleanup_free_ char *e = events(f, runs[i]);
		assert_string_equal(e, "RUN_ERROR"); /* the delta was never stored */
		assert_true(heard(f, runs[i], COMMIT_STORAGE_FAILED));
	}
	assert_int_equal(f->n_outcomes, 2);

	/* the next commit succeeds again */
	create_run(f, "00000000-0000-4000-8000-00000000000c");
	queue_delta(f, "00000000-0000-4000-8000-00000000000c", "c1");
	commit_now(&f->c);
	assert_int_equal(f->n_committed, 1);
	assert_true(f->c.storage_ok);
}

static void
test_storage_full(void **state)
{
	check_storage_failure(*state, MDB_MAP_FULL, -ENOSPC, "storage_full", "run log is full");
}

static void
test_storage_error(void **state)
{
	check_storage_failure(*state, EIO, -EIO, "storage_error", "run log write failed");
}

/* A delivery that deals with the failed flush itself (cluster mode's halt):
 * the core fails no run and writes nothing more. */
static void
test_failure_dealt_by_delivery(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	f->failed_dealt = true;
	fail_next_commit = EIO;
	queue_delta(f, RUN_A, "a1");
	commit_now(&f->c);
	assert_int_equal(f->n_failed, 1);
	assert_int_equal(f->n_committed, 0);
	assert_int_equal(f->n_late, 0);
	assert_int_equal(f->n_outcomes, 0);
	json_auto_t *rec = record(f, RUN_A);
	assert_string_equal(rec_str(rec, "status"), "running");
	_cleanup_free_ char *e = events(f, RUN_A);
	assert_string_equal(e, "");
}

/* A commit its delivery cannot make visible (commit_fail_local with
 * COMMIT_FENCED, as replication without an acknowledgement): the run ends
 * failed in the local log alone, its end handed to the delivery's
 * ended_local (not made visible as a commit's), the driver hears
 * COMMIT_FENCED. */
static void
test_undeliverable(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	f->undeliverable = true;
	queue_delta(f, RUN_A, "a1");
	commit_now(&f->c);
	assert_int_equal(f->n_committed, 1);
	assert_int_equal(f->n_ended_local, 1);
	assert_int_equal(f->n_late, 0);
	assert_int_equal(f->n_outcomes, 1);
	assert_true(heard(f, RUN_A, COMMIT_FENCED));
	json_auto_t *rec = record(f, RUN_A);
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_string_equal(rec_str(json_object_get(rec, "error"), "code"), "replication_failed");
	_cleanup_free_ char *e = events(f, RUN_A);
	assert_string_equal(e, "a1,RUN_ERROR");
}

/* An op on a run already terminal is refused and its driver ends
 * (COMMIT_REFUSED); the first status stays. */
static void
test_refused_after_end(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	queue_end(f, RUN_A);
	commit_now(&f->c);
	queue_delta(f, RUN_A, "late");
	commit_now(&f->c);
	assert_int_equal(f->n_outcomes, 2);
	assert_true(heard(f, RUN_A, COMMIT_ENDED));
	assert_int_equal(f->outcomes[1].what, COMMIT_REFUSED);
	_cleanup_free_ char *e = events(f, RUN_A);
	assert_string_equal(e, "RUN_FINISHED");
}

/* Past chunk_high_water a running run's events are refused
 * (COMMIT_REFUSED_FULL) while its terminal op still commits. */
static void
test_refused_full(void **state)
{
	Fix *f = *state;

	create_run(f, RUN_A);
	f->c.conf.chunk_high_water = 0; /* every byte used is above the mark */
	queue_delta(f, RUN_A, "a1");
	queue_end(f, RUN_A);
	commit_now(&f->c);
	assert_int_equal(f->c.m.events_refused_full, 1);
	assert_true(heard(f, RUN_A, COMMIT_REFUSED_FULL));
	assert_true(heard(f, RUN_A, COMMIT_ENDED));
	_cleanup_free_ char *e = events(f, RUN_A);
	assert_string_equal(e, "RUN_FINISHED");
	json_auto_t *rec = record(f, RUN_A);
	assert_string_equal(rec_str(rec, "status"), "completed");
}

/* Every waiter gets its own op's outcome once the commit is flushed: the
 * appends their seqs in order, one on a run that does not exist -ENOENT; a
 * flush that fails answers each of its waiters the error, none success. */
static void
test_waiters_answered(void **state)
{
	Fix *f = *state;
	Answer a[3] = {{0}}, gone = {0}, failed[2] = {{0}};

	create_run(f, RUN_A);
	connect_client(f);
	send_append(RUN_A, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":0}", &a[0]);
	send_append(RUN_A, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":1}", &a[1]);
	send_append(RUN_B, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":2}", &gone);
	send_append(RUN_A, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":3}", &a[2]);
	PUMP_UNTIL(f, a[0].done && a[1].done && a[2].done && gone.done);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(a[i].done, 1);
		assert_int_equal(a[i].err, 0);
		if (i > 0)
			assert_int_equal(a[i].seq, a[i - 1].seq + 1);
	}
	assert_int_equal(gone.err, -ENOENT);

	fail_next_commit = EIO;
	send_append(RUN_A, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":4}", &failed[0]);
	send_append(RUN_A, "{\"type\":\"CUSTOM\",\"name\":\"x\",\"value\":5}", &failed[1]);
	PUMP_UNTIL(f, failed[0].done && failed[1].done);
	assert_int_equal(f->n_failed, 1);
	assert_int_equal(failed[0].err, -EIO);
	assert_int_equal(failed[1].err, -EIO);
	/* a client's run is failed too: its events are not "running" on */
	json_auto_t *rec = record(f, RUN_A);
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_int_equal(f->n_outcomes, 1);
	assert_false(f->outcomes[0].driven); /* the client queued it, not the driver */
	disconnect_client();
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_appends_in_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_order_across_runs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_storage_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_storage_error, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_failure_dealt_by_delivery, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_undeliverable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused_after_end, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_refused_full, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_waiters_answered, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
