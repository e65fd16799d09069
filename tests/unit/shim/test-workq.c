/* SPDX-License-Identifier: MIT */
/*
 * test-workq.c — the file API's worker threads: items run off the loop and
 * come back on it in order, the in-flight cap refuses with -EBUSY (and frees
 * a slot once done() ran), a worker's umask and fsuid are its own, and
 * workq_free() cancels what never ran.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "workq.h"

typedef struct Item {
	WorkItem w;
	struct event_base *base;
	pthread_t loop, ran_on;
	int *order, *n_done;
	int idx;
	bool cancelled;
	mode_t umask_seen;
	int *gate; /* run() waits while *gate */
	pthread_mutex_t *gate_lock;
	int stop_after; /* loopbreak once *n_done reaches it */
} Item;

static void
item_run(WorkItem *w)
{
	Item *it = (Item *)w;

	it->ran_on = pthread_self();
	it->umask_seen = umask(0);
	if (it->gate) {
		for (;;) {
			pthread_mutex_lock(it->gate_lock);
			int g = *it->gate;
			pthread_mutex_unlock(it->gate_lock);
			if (!g)
				break;
			usleep(1000);
		}
	}
}

static void
item_done(WorkItem *w, bool cancelled)
{
	Item *it = (Item *)w;

	assert_true(pthread_equal(pthread_self(), it->loop));
	it->cancelled = cancelled;
	it->order[(*it->n_done)++] = it->idx;
	if (it->base && *it->n_done == it->stop_after)
		event_base_loopbreak(it->base);
}

static void
test_runs_off_loop_back_on_loop(void **state)
{
	struct event_base *base = event_base_new();
	WorkQ *q = NULL;
	Item it[8];
	int order[8], n = 0;
	mode_t mine = umask(022);

	(void)state;
	assert_int_equal(workq_new(base, 1, 8, &q), 0);
	for (int i = 0; i < 8; i++) {
		it[i] = (Item){.w = {.run = item_run, .done = item_done},
			       .base = base,
			       .loop = pthread_self(),
			       .order = order,
			       .n_done = &n,
			       .idx = i,
			       .stop_after = 8};
		assert_int_equal(workq_submit(q, &it[i].w), 0);
	}
	assert_int_equal(workq_in_flight(q), 8);
	event_base_dispatch(base);
	assert_int_equal(n, 8);
	assert_int_equal(workq_in_flight(q), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(order[i], i); /* one worker: FIFO */
		assert_false(it[i].cancelled);
		assert_false(pthread_equal(it[i].ran_on, pthread_self()));
		assert_int_equal(it[i].umask_seen, 0); /* the worker's own umask: 0 */
	}
	/* ...and the loop's is untouched. */
	assert_int_equal(umask(mine), 022);
	workq_free(q);
	event_base_free(base);
}

static void
test_cap_is_busy(void **state)
{
	struct event_base *base = event_base_new();
	pthread_mutex_t gl = PTHREAD_MUTEX_INITIALIZER;
	int gate = 1, order[4], n = 0;
	WorkQ *q = NULL;
	Item it[4];

	(void)state;
	assert_int_equal(workq_new(base, 2, 3, &q), 0);
	for (int i = 0; i < 4; i++)
		it[i] = (Item){.w = {.run = item_run, .done = item_done},
			       .base = base,
			       .loop = pthread_self(),
			       .order = order,
			       .n_done = &n,
			       .idx = i,
			       .gate = &gate,
			       .gate_lock = &gl,
			       .stop_after = 3};
	for (int i = 0; i < 3; i++)
		assert_int_equal(workq_submit(q, &it[i].w), 0);
	/* Two running (blocked), one queued: the fourth is refused. */
	assert_int_equal(workq_submit(q, &it[3].w), -EBUSY);
	pthread_mutex_lock(&gl);
	gate = 0;
	pthread_mutex_unlock(&gl);
	event_base_dispatch(base);
	assert_int_equal(n, 3);
	/* Room again once done() ran. */
	it[3].stop_after = 4;
	it[3].gate = NULL;
	assert_int_equal(workq_submit(q, &it[3].w), 0);
	event_base_dispatch(base);
	assert_int_equal(n, 4);
	workq_free(q);
	event_base_free(base);
}

static void
test_free_cancels_queued(void **state)
{
	struct event_base *base = event_base_new();
	pthread_mutex_t gl = PTHREAD_MUTEX_INITIALIZER;
	int gate = 1, order[3], n = 0;
	WorkQ *q = NULL;
	Item it[3];

	(void)state;
	assert_int_equal(workq_new(base, 1, 3, &q), 0);
	for (int i = 0; i < 3; i++) {
		it[i] = (Item){.w = {.run = item_run, .done = item_done},
			       .loop = pthread_self(),
			       .order = order,
			       .n_done = &n,
			       .idx = i,
			       .gate = i == 0 ? &gate : NULL,
			       .gate_lock = &gl};
		assert_int_equal(workq_submit(q, &it[i].w), 0);
	}
	/* Let the first one start, then release it and free: it completes,
	 * the two behind it are cancelled (or ran: the worker may have taken
	 * them before it saw the stop) — every done() is called exactly once. */
	while (!it[0].ran_on)
		usleep(1000);
	pthread_mutex_lock(&gl);
	gate = 0;
	pthread_mutex_unlock(&gl);
	workq_free(q);
	assert_int_equal(n, 3);
	assert_false(it[0].cancelled);
	event_base_free(base);
}

static void *
fsuid_thread(void *arg)
{
	(void)arg;
	(void)setfsuid(12345);
	return (void *)(intptr_t)setfsuid((uid_t)-1);
}

/* wsfs_as_user on a worker relies on fsuid being per thread. */
static void
test_fsuid_is_per_thread(void **state)
{
	pthread_t t;
	void *ret;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(pthread_create(&t, NULL, fsuid_thread, NULL), 0);
	assert_int_equal(pthread_join(t, &ret), 0);
	assert_int_equal((intptr_t)ret, 12345);
	assert_int_equal(setfsuid((uid_t)-1), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_runs_off_loop_back_on_loop),
	    cmocka_unit_test(test_cap_is_busy),
	    cmocka_unit_test(test_free_cancels_queued),
	    cmocka_unit_test(test_fsuid_is_per_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
