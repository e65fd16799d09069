/* SPDX-License-Identifier: MIT */
/*
 * workq.h — a small pool of worker threads for blocking work (the file API's
 * reads, writes, fsyncs, renames), so that it never runs on the event loop
 * that starts execs.
 *
 * The loop submits a WorkItem; a worker calls item->run(item) off the loop;
 * then the loop calls item->done(item, false) (an eventfd wakes it). At most
 * max_items are in flight (queued or running, done not yet called): beyond,
 * workq_submit() refuses with -EBUSY and the caller answers "busy".
 *
 * Thread rules for run(): it touches only its item (no loop state, no log
 * lines, no peer), and frees only memory it allocated itself: the shim clones
 * sandbox inits from the loop thread with a raw clone3, after which only the
 * main thread's malloc arena must be unlocked — a worker that freed a chunk of
 * the loop's arena could hold its lock at that instant (glibc gives each thread
 * its own arena otherwise). The item and what the loop put in it are freed by
 * done(), on the loop.
 *
 * Each worker has its own fs attributes (unshare(CLONE_FS)) with umask 0, so
 * that exact modes can be given without touching the loop's umask, all
 * signals blocked, and nice 10: copying megabytes into the page cache must not
 * take the CPU from the loop on a small host.
 */
#pragma once

#include <stdbool.h>

struct event_base;
typedef struct WorkQ WorkQ;

typedef struct WorkItem WorkItem;
struct WorkItem {
	WorkItem *next; /* the queue's */
	void (*run)(WorkItem *w);
	/* cancelled: workq_free() dropped it before it ran. */
	void (*done)(WorkItem *w, bool cancelled);
};

int workq_new(struct event_base *base, unsigned threads, unsigned max_items, WorkQ **ret);
/* Waits for the running items, calls done() of every item (cancelled for
 * those that never ran). NULL-safe; returns NULL. */
WorkQ *workq_free(WorkQ *q);
/* 0, or -EBUSY at max_items (done() will not be called then). */
int workq_submit(WorkQ *q, WorkItem *w);
/* Items submitted whose done() has not run yet. */
unsigned workq_in_flight(const WorkQ *q);
