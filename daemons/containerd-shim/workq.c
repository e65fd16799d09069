/* SPDX-License-Identifier: MIT */
/*
 * workq.c — worker threads for blocking work, results back on the loop
 * through an eventfd (see workq.h).
 */
#include "config.h"

#include "workq.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "fd-util.h"
#include "macro.h"

#define WORKQ_NICE 10

struct WorkQ {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	WorkItem *head, *tail; /* queued, FIFO */
	WorkItem *done;	       /* run, for the loop (LIFO; reversed there) */
	bool stop;
	pthread_t *threads;
	unsigned n_threads, max_items, in_flight; /* in_flight: the loop's */
	int efd;
	struct event *ev;
};

static void *
worker_main(void *arg)
{
	WorkQ *q = arg;

	/* Private umask and cwd: umask(0) here leaves the loop's alone. */
	if (unshare(CLONE_FS) == 0)
		(void)umask(0);
	/* Background work: on a busy host the loop that starts execs gets the CPU
	 * first (the nice value is per thread on Linux). */
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), WORKQ_NICE);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (!q->head && !q->stop)
			pthread_cond_wait(&q->cond, &q->lock);
		if (q->stop)
			break;
		WorkItem *w = q->head;
		q->head = w->next;
		if (!q->head)
			q->tail = NULL;
		pthread_mutex_unlock(&q->lock);

		w->run(w);

		pthread_mutex_lock(&q->lock);
		w->next = q->done;
		q->done = w;
		(void)eventfd_write(q->efd, 1);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

static void
deliver(WorkQ *q)
{
	WorkItem *list, *fifo = NULL;

	pthread_mutex_lock(&q->lock);
	list = q->done;
	q->done = NULL;
	pthread_mutex_unlock(&q->lock);
	while (list) {
		WorkItem *n = list->next;
		list->next = fifo;
		fifo = list;
		list = n;
	}
	while (fifo) {
		WorkItem *n = fifo->next;
		q->in_flight--;
		fifo->done(fifo, false);
		fifo = n;
	}
}

static void
efd_cb(evutil_socket_t fd, short what, void *arg)
{
	eventfd_t v;

	(void)what;
	(void)eventfd_read(fd, &v);
	deliver(arg);
}

int
workq_new(struct event_base *base, unsigned threads, unsigned max_items, WorkQ **ret)
{
	WorkQ *q;
	sigset_t all, old;
	int r = 0;

	if (threads == 0 || max_items == 0)
		return -EINVAL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->cond, NULL);
	q->max_items = max_items;
	q->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	q->threads = calloc(threads, sizeof(pthread_t));
	if (q->efd < 0 || !q->threads) {
		r = q->efd < 0 ? -errno : -ENOMEM;
		goto fail;
	}
	q->ev = event_new(base, q->efd, EV_READ | EV_PERSIST, efd_cb, q);
	if (!q->ev || event_add(q->ev, NULL) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	/* Signals stay with the loop (the workers inherit this mask). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (; q->n_threads < threads; q->n_threads++) {
		r = -pthread_create(&q->threads[q->n_threads], NULL, worker_main, q);
		if (r < 0)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		goto fail;
	*ret = q;
	return 0;
fail:
	workq_free(q);
	return r;
}

WorkQ *
workq_free(WorkQ *q)
{
	if (!q)
		return NULL;
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < q->n_threads; i++)
		pthread_join(q->threads[i], NULL);
	deliver(q);
	while (q->head) {
		WorkItem *w = q->head;
		q->head = w->next;
		q->in_flight--;
		w->done(w, true);
	}
	if (q->ev)
		event_free(q->ev);
	safe_close(q->efd);
	free(q->threads);
	pthread_cond_destroy(&q->cond);
	pthread_mutex_destroy(&q->lock);
	free(q);
	return NULL;
}

int
workq_submit(WorkQ *q, WorkItem *w)
{
	if (q->in_flight >= q->max_items)
		return -EBUSY;
	q->in_flight++;
	w->next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = w;
	else
		q->head = w;
	q->tail = w;
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

unsigned
workq_in_flight(const WorkQ *q)
{
	return q ? q->in_flight : 0;
}
