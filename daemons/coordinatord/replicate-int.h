/* SPDX-License-Identifier: MIT */
/*
 * replicate-int.h — what replicate.c (publishing runs' events) and
 * takeback.c (taking a run's events back from the cluster at start) share.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

typedef struct Coordinator Coordinator;
typedef struct TakeBack TakeBack;

/* takeback.c. At setup, before anything is written: the runs to compare
 * with the stream (running, no driver state). 0, or < 0 from the run log. */
int takeback_collect(Coordinator *c, TakeBack **ret);
/* At the cluster's first READY: compare each with the stream and commit
 * what the local log lacks. */
void takeback_start(TakeBack *tb);
/* The cluster failed before it was ever READY: refuse (err) every run not
 * compared yet. */
void takeback_fail(TakeBack *tb, int err);
/* Is run_id (NULL: any run) still to compare? Its ops wait meanwhile. */
bool takeback_held(const TakeBack *tb, const char *run_id);
/* Returns NULL. */
TakeBack *takeback_free(TakeBack *tb);

/* replicate.c. run_id's last event in the stream is seq, at stream sequence
 * stream_seq: its next publish expects it (unless this process queued or
 * learned anything of the run already). */
void replicate_known(Coordinator *c, const char *run_id, int64_t seq, uint64_t stream_seq);
/* run_id's events are refused from now on (err): its replication ended. */
void replicate_refuse(Coordinator *c, const char *run_id, int err);
