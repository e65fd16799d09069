/* SPDX-License-Identifier: MIT */
/*
 * snapjob.h — snapshot and restore jobs run in a child process, off the
 * shim's event loop (docs/DESIGN.md "Snapshot jobs").
 *
 * snapjob_start() forks the (single-threaded) shim. The child:
 *   - joins the jobs' cgroup (snapjobs_set_cgroup: cpu.max, io.weight), or
 *     fails;
 *   - gets PR_SET_PDEATHSIG(SIGKILL) (it dies with the shim), every signal
 *     back to SIG_DFL and unblocked (libevent's handlers are the parent's),
 *     nice 10, a name ("rw-snapshot", "rw-restore", "rw-cleanup");
 *   - keeps only fds 0-2 (0 and 1 on /dev/null), the result pipe and the fds
 *     the caller lists (close_range over everything else: no peer socket,
 *     sandbox pidfd, exec pipe or listener of the parent stays open in it);
 *   - never touches the event loop, runs fn(arg) and writes one result
 *     {int32 err, uint32 len, char reason[32], text} to the pipe, then
 *     _exit()s.
 * The parent watches the child's pidfd; when it is readable the child is
 * reaped, the result read, and done() called once with err, reason and text
 * (a record, or a message). A child that ended without a result is an error
 * (reason, message):
 *   -ETIME      killed at timeout_ms        (job_timeout, "job_timeout: …")
 *   -ECANCELED  killed by someone else      (job_killed, "job_killed: …")
 *   -ESHUTDOWN  killed by snapjobs_stop()   (none, "containerd-shim is stopping")
 *   -EIO        exited without a result     (job_failed, "job_failed: …")
 *
 * A job may be keyed by a sandbox id: at most one keyed job per id
 * (snapjob_find() is the "busy" check), and it holds the SANDBOX_ENSUREs of
 * that key (snapjob_hold) for its owner to replay after done(). Unkeyed jobs
 * (cleanups) have no reply and no key.
 *
 * Functions return 0 or a negative errno and do not log, except
 * snapjobs_stop() and the done() callbacks (which are the owner's).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "peer.h"

struct event_base;
typedef struct SnapJobs SnapJobs;
typedef struct SnapJob SnapJob;

typedef enum SnapJobKind {
	SNAPJOB_SNAPSHOT,
	SNAPJOB_RESTORE,
	SNAPJOB_CLEANUP,
} SnapJobKind;

/* A SANDBOX_ENSURE held while a job of its key runs. */
typedef struct SnapHeld {
	struct SnapHeld *next;
	PeerDeferred *reply; /* detached once its connection closed */
	char *key, *run_id, *thread_id;
} SnapHeld;

/* The longest reason + 1 (the ERROR reason of docs/PROTOCOL.md). */
#define SNAPJOB_REASON_MAX 32

/* Runs in the child: 0 or a negative errno; *ret_text (malloc'd, may stay
 * NULL) is the result on success and the message on failure; *ret_reason (a
 * static snake_case code, shorter than SNAPJOB_REASON_MAX, may stay NULL)
 * names a failure the requester may act on. */
typedef int (*SnapJobFn)(void *arg, char **ret_text, const char **ret_reason);
/* Runs in the parent, once. text is never NULL (may be ""); reason is NULL
 * when the failure has none (and on success). The job and its held list are
 * freed after it returns: take the held list first. */
typedef void (*SnapJobDone)(SnapJob *j, int err, const char *reason, const char *text,
			    void *userdata);

typedef struct SnapJobSpec {
	SnapJobKind kind;
	const char *id;	     /* sandbox id (keyed job), or NULL */
	int64_t timeout_ms;  /* 0 = none */
	const int *keep_fds; /* fds the child needs (besides 0-2) */
	size_t n_keep_fds;
	SnapJobFn fn;
	void *arg;
	SnapJobDone done;
	void *userdata;
	PeerDeferred *reply; /* who waits for the answer (snapjob_take_reply), or NULL;
				the job takes it when it starts */
} SnapJobSpec;

SnapJobs *snapjobs_new(struct event_base *base);
/* Kill every child (SIGKILL), reap it and call its done() with -ESHUTDOWN.
 * Idempotent; later snapjob_start() calls fail with -ESHUTDOWN. */
void snapjobs_stop(SnapJobs *t);
/* snapjobs_stop(), then free. NULL-safe; returns NULL. */
SnapJobs *snapjobs_free(SnapJobs *t);

/* The cgroup.procs fds of the jobs' cgroup (borrowed; n 0 = none): each
 * child writes "0" to every one before anything else and fails
 * ("job_failed: cannot enter the jobs' cgroup") when it cannot. */
void snapjobs_set_cgroup(SnapJobs *t, const int *procs_fds, size_t n);
/* Keyed jobs (snapshots and restores) running now, for snapshot_max_jobs. */
size_t snapjobs_count(const SnapJobs *t);

/* Fork the child. -EBUSY when a keyed job of spec->id runs already. */
int snapjob_start(SnapJobs *t, const SnapJobSpec *spec, SnapJob **ret);

/* The running keyed job of a sandbox id, or NULL. */
SnapJob *snapjob_find(SnapJobs *t, const char *id);
SnapJobKind snapjob_kind(const SnapJob *j);
/* The child's pid (for the logs). */
int snapjob_pid(const SnapJob *j);
/* The request waiting for the job's answer, handed to the caller (NULL when
 * taken already, or when there was none). */
PeerDeferred *snapjob_take_reply(SnapJob *j);

/* Hold an ENSURE until the job ends (appended: replayed in arrival order);
 * takes *reply (NULL) on success. */
int snapjob_hold(SnapJob *j, PeerDeferred **reply, const char *key, const char *run_id,
		 const char *thread_id);
/* Take the held list (the caller frees it with snapheld_free_all). */
SnapHeld *snapjob_take_held(SnapJob *j);
void snapheld_free_all(SnapHeld *h);
