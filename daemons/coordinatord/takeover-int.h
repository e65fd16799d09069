/* SPDX-License-Identifier: MIT */
/*
 * takeover-int.h — what takeover.c (node loss) and takeover-adopted.c (the
 * threads taken over, listed here) share.
 */
#pragma once

#include <stdbool.h>

#include "json-util.h"

typedef struct Coordinator Coordinator;

/* The runs of a thread taken over that ran elsewhere, kept per thread: the
 * newest ones (older ones are not listed by THREAD_RUNS; each is still read
 * by its id: RUN_GET, RUN_READ). */
#define ADOPTED_RUNS_MAX 256

/* The threads taken over here: thread → {"runs": the records of its runs
 * that ran elsewhere (the lost node), newest first, at most
 * ADOPTED_RUNS_MAX; "local": true once this node's log has a run of it}.
 * Listed in THREAD_LIST (its newest run) until "local", and in THREAD_RUNS
 * (merged with the log's) while this node owns it. */
typedef struct Adopted {
	Coordinator *c;
	json_t *threads;
	bool checked; /* their owners checked since this process started */
} Adopted;

/* Load what an earlier process kept (an empty set when none): 0 or -ENOMEM. */
int adopted_init(Adopted *a, Coordinator *c);
void adopted_done(Adopted *a);
/* thread was taken over: runs (records, in any order; copied) are its runs
 * that ran elsewhere, the newest ADOPTED_RUNS_MAX kept. Saved. */
void adopted_set(Adopted *a, const char *thread, const json_t *runs);
/* A record this node put (a run it ended): its adopted thread's entry has it
 * from then on. Saved. */
void adopted_update(Adopted *a, const char *run_id, json_t *rec);
/* Is each thread still this node's (after a lapse of its lease, and once
 * after a start: the file may be older)? Those another node owns now, or
 * nobody, are dropped when the answers come. */
void adopted_check(Adopted *a);

/* takeover.c: the threads taken over, of c's takeover; NULL without one. */
Adopted *takeover_adopted(Coordinator *c);
