/* SPDX-License-Identifier: MIT */
/*
 * test-loop-lag.c — common/loop-lag.h: the histogram's buckets (cumulative,
 * +Inf, sum, count) and max, the lines that are a family's samples, and the
 * timer on a real event base measuring a callback that holds the loop.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "loop-lag.h"

static char *
format(const LoopLag *l)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	loop_lag_format(l, "testd", f);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void
test_buckets(void **state)
{
	struct event_base *base = event_base_new();
	LoopLag *l = loop_lag_new(base);
	(void)state;

	assert_non_null(l);
	loop_lag_record(l, 0.0002);
	loop_lag_record(l, 0.003);
	loop_lag_record(l, 0.003);
	loop_lag_record(l, 0.7);
	loop_lag_record(l, 42);
	char *t = format(l);
	assert_non_null(strstr(t, "# TYPE runwarden_loop_lag_seconds histogram\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"0.001\"} 1\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"0.0025\"} 1\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"0.005\"} 3\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"0.5\"} 3\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"1\"} 4\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"10\"} 4\n"));
	assert_non_null(
	    strstr(t, "runwarden_loop_lag_seconds_bucket{daemon=\"testd\",le=\"+Inf\"} 5\n"));
	assert_non_null(strstr(t, "runwarden_loop_lag_seconds_count{daemon=\"testd\"} 5\n"));
	assert_non_null(strstr(t, "runwarden_loop_lag_seconds_sum{daemon=\"testd\"} 42.706200\n"));
	assert_non_null(strstr(t, "# TYPE runwarden_loop_lag_max_seconds gauge\n"));
	assert_non_null(strstr(t, "runwarden_loop_lag_max_seconds{daemon=\"testd\"} 42.000000\n"));
	free(t);
	loop_lag_free(l);
	loop_lag_free(NULL);
	event_base_free(base);
}

static void
test_is_sample(void **state)
{
	static const char *const hist[] = {
	    "runwarden_loop_lag_seconds_bucket{daemon=\"x\",le=\"1\"} 3",
	    "runwarden_loop_lag_seconds_sum{daemon=\"x\"} 1",
	    "runwarden_loop_lag_seconds_count{daemon=\"x\"} 1",
	};
	static const char *const neither[] = {
	    "# TYPE runwarden_loop_lag_seconds histogram",
	    "runwarden_loop_lag_seconds_total 1",
	    "runwarden_loop_lag_seconds_sum",
	    "runwarden_runs_active 0",
	    "",
	};
	(void)state;

	for (size_t i = 0; i < sizeof(hist) / sizeof(*hist); i++) {
		assert_true(loop_lag_is_sample(hist[i], strlen(hist[i]), LOOP_LAG_HISTOGRAM));
		assert_false(loop_lag_is_sample(hist[i], strlen(hist[i]), LOOP_LAG_MAX));
	}
	for (size_t i = 0; i < sizeof(neither) / sizeof(*neither); i++)
		for (LoopLagFamily f = 0; f < _LOOP_LAG_FAMILY_MAX; f++)
			assert_false(loop_lag_is_sample(neither[i], strlen(neither[i]), f));
	const char *m = "runwarden_loop_lag_max_seconds{daemon=\"x\"} 0.1";
	assert_true(loop_lag_is_sample(m, strlen(m), LOOP_LAG_MAX));
	assert_false(loop_lag_is_sample(m, strlen(m), LOOP_LAG_HISTOGRAM));
	/* the length counts, not a NUL */
	assert_false(loop_lag_is_sample(hist[1], 30, LOOP_LAG_HISTOGRAM));
}

static void
hold(evutil_socket_t fd, short what, void *userdata)
{
	(void)fd;
	(void)what;
	(void)userdata;
	usleep(300 * 1000); /* a callback that holds the loop 300 ms */
}

static void
stop(evutil_socket_t fd, short what, void *userdata)
{
	(void)fd;
	(void)what;
	event_base_loopbreak(userdata);
}

static void
test_timer_measures_a_held_loop(void **state)
{
	struct event_base *base = event_base_new();
	LoopLag *l = loop_lag_new(base);
	struct event *h = evtimer_new(base, hold, NULL), *s = evtimer_new(base, stop, base);
	const struct timeval at = {0, 50 * 1000}, end = {0, 700 * 1000};
	(void)state;

	assert_non_null(l);
	evtimer_add(h, &at);
	evtimer_add(s, &end);
	event_base_dispatch(base);
	char *t = format(l);
	double max = -1;
	const char *p = strstr(t, "runwarden_loop_lag_max_seconds{daemon=\"testd\"} ");
	assert_non_null(p);
	max = strtod(strchr(p, '}') + 2, NULL);
	/* due at 100 ms, run after the hold (50 ms + at least 300 ms) */
	assert_true(max >= 0.25);
	free(t);
	event_free(h);
	event_free(s);
	loop_lag_free(l);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_buckets),
	    cmocka_unit_test(test_is_sample),
	    cmocka_unit_test(test_timer_measures_a_held_loop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
