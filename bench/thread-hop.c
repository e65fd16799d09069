/* SPDX-License-Identifier: MIT */
/*
 * thread-hop.c — what the two thread hops of a cluster publish's
 * acknowledgement cost on this machine (docs/CLUSTER.md "Publishing before
 * the flush, measured"): libnats' reader hands the acknowledgement to the
 * ack subscription's delivery thread (a condition variable), whose callback
 * posts it back to the loop (the mailbox, an eventfd). Here: the same two
 * hand-offs between two threads, 2,000 times, each after a 0.5 ms sleep
 * (both threads asleep, as between serial appends).
 *
 *   cc -O2 -pthread -o /tmp/thread-hop bench/thread-hop.c && /tmp/thread-hop
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define N 2000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int turn, back_fd;

static void *
delivery(void *arg __attribute__((unused)))
{
	for (;;) {
		uint64_t one = 1;
		pthread_mutex_lock(&mu);
		while (turn != 1)
			pthread_cond_wait(&cv, &mu);
		turn = 0;
		pthread_mutex_unlock(&mu);
		if (write(back_fd, &one, sizeof(one)) != sizeof(one))
			abort();
	}
	return NULL;
}

static double
now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int
main(void)
{
	static double took[N];
	pthread_t t;

	back_fd = eventfd(0, 0);
	if (back_fd < 0 || pthread_create(&t, NULL, delivery, NULL) != 0)
		return 1;
	for (int i = 0; i < N; i++) {
		uint64_t v;
		double t0 = now_us();
		pthread_mutex_lock(&mu);
		turn = 1;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
		if (read(back_fd, &v, sizeof(v)) != sizeof(v))
			return 1;
		took[i] = now_us() - t0;
		usleep(500);
	}
	qsort(took, N, sizeof(took[0]), cmp);
	printf("two thread hops: p50 %.1f us, p90 %.1f us, p99 %.1f us\n", took[N / 2],
	       took[N * 9 / 10], took[N * 99 / 100]);
	return 0;
}
