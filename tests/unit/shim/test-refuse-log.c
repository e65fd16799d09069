/* SPDX-License-Identifier: MIT */
/*
 * test-refuse-log.c — the proxy's refusal lines: the first few per sandbox
 * and kind are logged, the rest counted; the global limit holds across
 * sandboxes; the window's end (a real timer) and a flush forget the counts.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>
#include <event2/event.h>

#include "refuse-log.h"

static unsigned
flood(RefuseLog *rl, const char *sb, RefuseKind k, int n)
{
	LogCtx ctx = {.run_id = "r", .sandbox_id = sb};
	unsigned logged = 0;

	for (int i = 0; i < n; i++)
		logged += refuse_log(rl, k, LOG_DEBUG, &ctx, "refused %d", i);
	return logged;
}

static void
test_burst_then_count(void **state)
{
	struct event_base *base = event_base_new();
	RefuseLog *rl = NULL;

	assert_int_equal(refuse_log_new(base, 60 * USEC_PER_SEC, 3, 100, &rl), 0);
	assert_int_equal(flood(rl, "s1", REFUSE_NOT_CONNECT, 1000), 3);
	assert_int_equal(refuse_log_held(rl, "s1", REFUSE_NOT_CONNECT), 997);
	/* another kind, another sandbox: their own few */
	assert_int_equal(flood(rl, "s1", REFUSE_MALFORMED, 10), 3);
	assert_int_equal(flood(rl, "s2", REFUSE_NOT_CONNECT, 10), 3);
	assert_int_equal(refuse_log_held(rl, "s2", REFUSE_NOT_CONNECT), 7);
	/* the flush forgets the sandbox: it starts again */
	refuse_log_flush_sandbox(rl, "s1");
	assert_int_equal(refuse_log_held(rl, "s1", REFUSE_NOT_CONNECT), 0);
	assert_int_equal(refuse_log_held(rl, "s2", REFUSE_NOT_CONNECT), 7);
	assert_int_equal(flood(rl, "s1", REFUSE_NOT_CONNECT, 10), 3);
	refuse_log_free(rl);
	event_base_free(base);
}

static void
test_global_limit(void **state)
{
	struct event_base *base = event_base_new();
	RefuseLog *rl = NULL;
	unsigned logged = 0;
	char sb[32];

	assert_int_equal(refuse_log_new(base, 60 * USEC_PER_SEC, 3, 20, &rl), 0);
	for (int i = 0; i < 50; i++) {
		snprintf(sb, sizeof(sb), "sb%d", i);
		logged += flood(rl, sb, REFUSE_IP_LITERAL, 5);
	}
	assert_int_equal(logged, 20);
	refuse_log_free(rl);
	event_base_free(base);
}

static void
test_window_end_starts_again(void **state)
{
	struct event_base *base = event_base_new();
	RefuseLog *rl = NULL;

	assert_int_equal(refuse_log_new(base, 50 * 1000, 2, 100, &rl), 0);
	assert_int_equal(flood(rl, "s1", REFUSE_ADDRESS, 10), 2);
	assert_int_equal(refuse_log_held(rl, "s1", REFUSE_ADDRESS), 8);
	/* the timer: the summary is written and the counts start again */
	assert_true(event_base_dispatch(base) >= 0);
	assert_int_equal(refuse_log_held(rl, "s1", REFUSE_ADDRESS), 0);
	assert_int_equal(flood(rl, "s1", REFUSE_ADDRESS, 10), 2);
	refuse_log_free(rl);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_burst_then_count),
	    cmocka_unit_test(test_global_limit),
	    cmocka_unit_test(test_window_end_starts_again),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
