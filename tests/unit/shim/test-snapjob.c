/* SPDX-License-Identifier: MIT */
/*
 * test-snapjob.c — jobs in a forked child: the result comes back, only the
 * listed fds reach the child, one keyed job per id, a timeout and a foreign
 * kill are typed errors, snapjobs_stop() kills and reports, held ENSUREs.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "snapjob.h"

typedef struct Outcome {
	int calls;
	int err;
	char reason[SNAPJOB_REASON_MAX]; /* "" for none */
	char text[256];
	struct event_base *base;
} Outcome;

static void
done(SnapJob *j, int err, const char *reason, const char *text, void *userdata)
{
	Outcome *o = userdata;

	o->calls++;
	o->err = err;
	snprintf(o->reason, sizeof(o->reason), "%s", reason ? reason : "");
	snprintf(o->text, sizeof(o->text), "%s", text);
	snapheld_free_all(snapjob_take_held(j));
	if (o->base)
		event_base_loopbreak(o->base);
}

/* Child: "kept=<yes|no> other=<open|closed>" about two fds. */
static int
fds_child(void *arg, char **ret_text, const char **ret_reason)
{
	const int *fds = arg;
	return asprintf(ret_text, "kept=%s other=%s", fcntl(fds[0], F_GETFD) >= 0 ? "yes" : "no",
			fcntl(fds[1], F_GETFD) >= 0 ? "open" : "closed") < 0
		   ? -ENOMEM
		   : 0;
}

static int
fail_child(void *arg, char **ret_text, const char **ret_reason)
{
	*ret_text = strdup("not_a_backup_record: nope");
	*ret_reason = "not_a_backup_record";
	return -EINVAL;
}

static int
sleep_child(void *arg, char **ret_text, const char **ret_reason)
{
	pause();
	return 0;
}

static void
run(struct event_base *base, Outcome *o)
{
	o->base = base;
	event_base_dispatch(base);
}

static void
test_result_and_fds(void **state)
{
	struct event_base *base = event_base_new();
	SnapJobs *t = snapjobs_new(base);
	int keep = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int other = open("/dev/null", O_RDONLY); /* not CLOEXEC: closed anyway */
	int fds[2] = {keep, other};
	Outcome o = {0};
	SnapJob *j = NULL;

	(void)state;
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_SNAPSHOT,
						      .id = "0123456789abcdef",
						      .keep_fds = &keep,
						      .n_keep_fds = 1,
						      .fn = fds_child,
						      .arg = fds,
						      .done = done,
						      .userdata = &o},
				       &j),
			 0);
	assert_ptr_equal(snapjob_find(t, "0123456789abcdef"), j);
	assert_int_equal(snapjob_kind(j), SNAPJOB_SNAPSHOT);
	/* one keyed job per id; another id is fine */
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_RESTORE,
						      .id = "0123456789abcdef",
						      .fn = fail_child,
						      .done = done,
						      .userdata = &o},
				       NULL),
			 -EBUSY);
	PeerDeferred *none = NULL; /* a held ENSURE without a connection */
	assert_int_equal(snapjob_hold(j, &none, "key", NULL, "thread"), 0);
	run(base, &o);
	assert_int_equal(o.calls, 1);
	assert_int_equal(o.err, 0);
	assert_string_equal(o.reason, "");
	assert_string_equal(o.text, "kept=yes other=closed");
	assert_null(snapjob_find(t, "0123456789abcdef"));

	o.calls = 0;
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_RESTORE,
						      .id = "0123456789abcdef",
						      .fn = fail_child,
						      .done = done,
						      .userdata = &o},
				       NULL),
			 0);
	run(base, &o);
	assert_int_equal(o.err, -EINVAL);
	assert_string_equal(o.reason, "not_a_backup_record");
	assert_string_equal(o.text, "not_a_backup_record: nope");
	close(keep);
	close(other);
	snapjobs_free(t);
	event_base_free(base);
}

static void
test_timeout_kill_and_stop(void **state)
{
	struct event_base *base = event_base_new();
	SnapJobs *t = snapjobs_new(base);
	Outcome o = {0};
	SnapJob *j = NULL;

	(void)state;
	/* timeout */
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_SNAPSHOT,
						      .id = "aaaaaaaaaaaaaaaa",
						      .timeout_ms = 50,
						      .fn = sleep_child,
						      .done = done,
						      .userdata = &o},
				       NULL),
			 0);
	run(base, &o);
	assert_int_equal(o.err, -ETIME);
	assert_string_equal(o.reason, "job_timeout");
	assert_non_null(strstr(o.text, "job_timeout"));

	/* killed by someone else */
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_SNAPSHOT,
						      .id = "aaaaaaaaaaaaaaaa",
						      .fn = sleep_child,
						      .done = done,
						      .userdata = &o},
				       &j),
			 0);
	assert_int_equal(kill(snapjob_pid(j), SIGKILL), 0);
	run(base, &o);
	assert_int_equal(o.err, -ECANCELED);
	assert_string_equal(o.reason, "job_killed");
	assert_non_null(strstr(o.text, "signal 9"));

	/* stop: killed, reaped, reported; the held ENSURE goes with the job */
	o.calls = 0;
	o.base = NULL;
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_RESTORE,
						      .id = "bbbbbbbbbbbbbbbb",
						      .fn = sleep_child,
						      .done = done,
						      .userdata = &o},
				       &j),
			 0);
	PeerDeferred *none = NULL; /* a held ENSURE without a connection */
	assert_int_equal(snapjob_hold(j, &none, "k", "r", NULL), 0);
	assert_null(snapjob_take_reply(j)); /* none was given */
	{
		pid_t pid = snapjob_pid(j);
		snapjobs_stop(t);
		assert_int_equal(o.calls, 1);
		assert_int_equal(o.err, -ESHUTDOWN);
		assert_int_equal(kill(pid, 0), -1); /* reaped */
	}
	assert_int_equal(snapjob_start(t,
				       &(SnapJobSpec){.kind = SNAPJOB_CLEANUP,
						      .fn = sleep_child,
						      .done = done,
						      .userdata = &o},
				       NULL),
			 -ESHUTDOWN);
	snapjobs_free(t);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_result_and_fds),
	    cmocka_unit_test(test_timeout_kill_and_stop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
