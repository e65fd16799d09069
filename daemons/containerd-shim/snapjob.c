/* SPDX-License-Identifier: MIT */
/*
 * snapjob.c — snapshot/restore jobs in a forked child. See snapjob.h.
 */
#include "config.h"

#include "snapjob.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "fd-util.h"
#include "macro.h"
#include "time-util.h"

#define RESULT_MAX (16 * 1024) /* a record is at most 2 KiB, a message 1 KiB */
#define KEEP_FDS_MAX 8

typedef struct ResultHdr {
	int32_t err;
	uint32_t len;
	char reason[SNAPJOB_REASON_MAX]; /* "" = none */
} ResultHdr;

struct SnapJob {
	SnapJob *next;
	SnapJobs *t;
	SnapJobKind kind;
	char id[17]; /* "" for an unkeyed job */
	pid_t pid;
	int pidfd, result_fd;
	struct event *exit_ev, *timer;
	int64_t timeout_ms;
	bool timed_out, stopping;
	SnapJobDone done;
	void *userdata;
	PeerDeferred *reply;
	SnapHeld *held;
};

#define CGROUP_FDS_MAX 4

struct SnapJobs {
	struct event_base *base;
	SnapJob *jobs;
	bool stopped;
	int cg_fds[CGROUP_FDS_MAX];
	size_t n_cg_fds;
};

static const char *const job_names[] = {
    [SNAPJOB_SNAPSHOT] = "rw-snapshot",
    [SNAPJOB_RESTORE] = "rw-restore",
    [SNAPJOB_CLEANUP] = "rw-cleanup",
};

SnapJobs *
snapjobs_new(struct event_base *base)
{
	SnapJobs *t = calloc(1, sizeof(*t));

	if (t)
		t->base = base;
	return t;
}

void
snapheld_free_all(SnapHeld *h)
{
	while (h) {
		SnapHeld *n = h->next;
		free(h->key);
		free(h->run_id);
		free(h->thread_id);
		peer_deferred_free(h->reply);
		free(h);
		h = n;
	}
}

static void
job_unlink(SnapJob *j)
{
	for (SnapJob **pp = &j->t->jobs; *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			return;
		}
}

static void
job_free(SnapJob *j)
{
	if (!j)
		return;
	if (j->exit_ev)
		event_free(j->exit_ev);
	if (j->timer)
		event_free(j->timer);
	safe_close(j->pidfd);
	safe_close(j->result_fd);
	snapheld_free_all(j->held);
	peer_deferred_free(j->reply);
	free(j);
}

/* ---------------------------------------------------------------------------
 * Child side.
 */

static int
int_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Close every fd >= 3 but the sorted keep[]. */
static int
close_others(int *keep, size_t n)
{
	unsigned lo = 3;

	qsort(keep, n, sizeof(*keep), int_cmp);
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < 3 || (unsigned)keep[i] < lo)
			continue;
		if ((unsigned)keep[i] > lo && syscall(SYS_close_range, lo, keep[i] - 1, 0) < 0)
			return -errno;
		lo = (unsigned)keep[i] + 1;
	}
	return syscall(SYS_close_range, lo, ~0U, 0) < 0 ? -errno : 0;
}

static void
child_result(int fd, int err, const char *reason, const char *text)
{
	char buf[sizeof(ResultHdr) + RESULT_MAX];
	size_t len = text ? strnlen(text, RESULT_MAX) : 0;
	ResultHdr h = {.err = err, .len = (uint32_t)len};

	if (reason)
		snprintf(h.reason, sizeof(h.reason), "%s", reason);
	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy(buf + sizeof(h), text, len);
	(void)loop_write(fd, buf, sizeof(h) + len);
}

static _noreturn_ void
child_main(SnapJobs *t, const SnapJobSpec *spec, pid_t parent, int result_fd)
{
	int keep[KEEP_FDS_MAX + 1];
	char *text = NULL;
	const char *reason = NULL;
	sigset_t all;
	int null_fd, r;

	/* Into the jobs' cgroup before anything else (before it has its name:
	 * a job seen by name is in it): fail closed. */
	for (size_t i = 0; i < t->n_cg_fds; i++)
		if (write(t->cg_fds[i], "0", 1) < 0) {
			child_result(result_fd, -errno, REASON_JOB_FAILED,
				     "job_failed: cannot enter the jobs' cgroup");
			_exit(1);
		}
	/* Dies with the shim; the parent may already be gone. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(127);
	for (int sig = 1; sig < _NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)signal(sig, SIG_DFL);
	sigemptyset(&all);
	(void)sigprocmask(SIG_SETMASK, &all, NULL);
	(void)prctl(PR_SET_NAME, job_names[spec->kind]);
	(void)setpriority(PRIO_PROCESS, 0, 10);
	/* Into the jobs' cgroup before any work: fail closed. */
	for (size_t i = 0; i < t->n_cg_fds; i++)
		if (write(t->cg_fds[i], "0", 1) < 0) {
			child_result(result_fd, -errno, REASON_JOB_FAILED,
				     "job_failed: cannot enter the jobs' cgroup");
			_exit(1);
		}

	for (size_t i = 0; i < spec->n_keep_fds; i++)
		keep[i] = spec->keep_fds[i];
	keep[spec->n_keep_fds] = result_fd;
	r = close_others(keep, spec->n_keep_fds + 1);
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (r < 0 || null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(null_fd, 1) < 0) {
		child_result(result_fd, r < 0 ? r : -errno, REASON_JOB_FAILED,
			     "job_failed: cannot set up the child");
		_exit(1);
	}
	if (null_fd > 2)
		close(null_fd);

	r = spec->fn(spec->arg, &text, &reason);
	child_result(result_fd, r < 0 ? r : 0, r < 0 ? reason : NULL, text ? text : "");
	_exit(0);
}

/* ---------------------------------------------------------------------------
 * Parent side.
 */

static void
job_finish(SnapJob *j, int err, const char *reason, const char *text)
{
	job_unlink(j);
	j->done(j, err, reason, text, j->userdata);
	job_free(j);
}

/* The child is gone (or about to be: wait for it). Reap, read, report. */
static void
job_reap(SnapJob *j, bool block)
{
	char buf[sizeof(ResultHdr) + RESULT_MAX + 1], msg[160];
	siginfo_t si = {0};
	size_t got = 0;
	ResultHdr h;
	int r;

	while ((r = waitid((idtype_t)P_PIDFD, (id_t)j->pidfd, &si,
			   WEXITED | (block ? 0 : WNOHANG))) < 0 &&
	       errno == EINTR)
		;
	if (r >= 0 && si.si_pid == 0) {
		(void)event_add(j->exit_ev, NULL); /* spurious: not dead yet */
		return;
	}
	/* The child wrote at most sizeof(buf) - 1 bytes into a pipe of 64 KiB and
	 * has exited: everything it wrote is there. */
	for (;;) {
		ssize_t n = read(j->result_fd, buf + got, sizeof(buf) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
		if (got == sizeof(buf) - 1)
			break;
	}
	if (got >= sizeof(h)) {
		memcpy(&h, buf, sizeof(h));
		/* Complete: the job's last act, so its work is done even if a
		 * kill (timeout) raced with its _exit. */
		if (h.len <= RESULT_MAX && got == sizeof(h) + h.len && h.err <= 0) {
			buf[got] = '\0';
			h.reason[sizeof(h.reason) - 1] = '\0';
			job_finish(j, h.err, h.err < 0 && h.reason[0] ? h.reason : NULL,
				   buf + sizeof(h));
			return;
		}
	}
	if (j->stopping)
		job_finish(j, -ESHUTDOWN, NULL, "containerd-shim is stopping");
	else if (j->timed_out) {
		snprintf(msg, sizeof(msg),
			 "job_timeout: the %s job took longer than snapshot_timeout_ms=%" PRId64
			 " and was killed",
			 job_names[j->kind] + 3, j->timeout_ms);
		job_finish(j, -ETIME, REASON_JOB_TIMEOUT, msg);
	} else if (r >= 0 && (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)) {
		snprintf(msg, sizeof(msg), "job_killed: the %s job was killed by signal %d",
			 job_names[j->kind] + 3, si.si_status);
		job_finish(j, -ECANCELED, REASON_JOB_KILLED, msg);
	} else {
		snprintf(msg, sizeof(msg), "job_failed: the %s job ended without a result",
			 job_names[j->kind] + 3);
		job_finish(j, -EIO, REASON_JOB_FAILED, msg);
	}
}

static void
job_exit_cb(evutil_socket_t fd, short what, void *arg)
{
	job_reap(arg, false);
}

static void
job_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	SnapJob *j = arg;

	j->timed_out = true;
	(void)syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	/* the pidfd turns readable: job_exit_cb reports it */
}

int
snapjob_start(SnapJobs *t, const SnapJobSpec *spec, SnapJob **ret)
{
	SnapJob *j;
	int p[2] = {-1, -1};
	pid_t parent = getpid();

	if (t->stopped)
		return -ESHUTDOWN;
	if (spec->n_keep_fds > KEEP_FDS_MAX || (unsigned)spec->kind >= ELEMENTSOF(job_names))
		return -EINVAL;
	if (spec->id && (strlen(spec->id) >= sizeof(j->id) || snapjob_find(t, spec->id)))
		return strlen(spec->id) >= sizeof(j->id) ? -EINVAL : -EBUSY;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->t = t;
	j->kind = spec->kind;
	j->pidfd = j->result_fd = -1;
	j->timeout_ms = spec->timeout_ms;
	j->done = spec->done;
	j->userdata = spec->userdata;
	if (spec->id)
		strcpy(j->id, spec->id);
	j->timer = evtimer_new(t->base, job_timeout_cb, j);
	if (!j->timer || pipe2(p, O_CLOEXEC) < 0) {
		job_free(j);
		return -ENOMEM;
	}
	j->result_fd = p[0];
	j->pid = fork();
	if (j->pid < 0) {
		int r = -errno;
		close(p[1]);
		job_free(j);
		return r;
	}
	if (j->pid == 0) {
		close(p[0]);
		child_main(t, spec, parent, p[1]);
	}
	close(p[1]);
	/* Nobody else reaps our children (no SIGCHLD handler, no waitpid(-1)):
	 * the pid cannot have been reused before this. */
	j->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
	if (j->pidfd >= 0)
		(void)fcntl(j->pidfd, F_SETFD, FD_CLOEXEC);
	j->exit_ev = j->pidfd >= 0 ? event_new(t->base, j->pidfd, EV_READ, job_exit_cb, j) : NULL;
	if (!j->exit_ev || fd_nonblock(j->result_fd, 1) < 0 || event_add(j->exit_ev, NULL) < 0) {
		int r = j->pidfd < 0 ? -errno : -ENOMEM;
		(void)kill(j->pid, SIGKILL);
		while (waitpid(j->pid, NULL, 0) < 0 && errno == EINTR)
			;
		job_free(j);
		return r < 0 ? r : -ENOMEM;
	}
	if (spec->timeout_ms > 0) {
		struct timeval tv;
		evtimer_add(j->timer,
			    timeval_from_usec(&tv, (usec_t)spec->timeout_ms * USEC_PER_MSEC));
	}
	j->reply = spec->reply; /* taken only now: on failure, the caller answers */
	j->next = t->jobs;
	t->jobs = j;
	if (ret)
		*ret = j;
	return 0;
}

void
snapjobs_stop(SnapJobs *t)
{
	if (!t || t->stopped)
		return;
	t->stopped = true;
	/* Kill all first, then reap one by one. */
	for (SnapJob *j = t->jobs; j; j = j->next) {
		j->stopping = true;
		(void)syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
	}
	while (t->jobs)
		job_reap(t->jobs, true);
}

SnapJobs *
snapjobs_free(SnapJobs *t)
{
	if (!t)
		return NULL;
	snapjobs_stop(t);
	free(t);
	return NULL;
}

void
snapjobs_set_cgroup(SnapJobs *t, const int *procs_fds, size_t n)
{
	t->n_cg_fds = MIN(n, (size_t)CGROUP_FDS_MAX);
	for (size_t i = 0; i < t->n_cg_fds; i++)
		t->cg_fds[i] = procs_fds[i];
}

size_t
snapjobs_count(const SnapJobs *t)
{
	size_t n = 0;

	for (const SnapJob *j = t ? t->jobs : NULL; j; j = j->next)
		n += j->id[0] != '\0';
	return n;
}

SnapJob *
snapjob_find(SnapJobs *t, const char *id)
{
	for (SnapJob *j = t ? t->jobs : NULL; j; j = j->next)
		if (j->id[0] && streq(j->id, id))
			return j;
	return NULL;
}

SnapJobKind
snapjob_kind(const SnapJob *j)
{
	return j->kind;
}

int
snapjob_pid(const SnapJob *j)
{
	return (int)j->pid;
}

PeerDeferred *
snapjob_take_reply(SnapJob *j)
{
	return TAKE_PTR(j->reply);
}

int
snapjob_hold(SnapJob *j, PeerDeferred **reply, const char *key, const char *run_id,
	     const char *thread_id)
{
	SnapHeld *h = calloc(1, sizeof(*h)), **pp;

	if (!h)
		return -ENOMEM;
	h->key = strdup(key);
	h->run_id = run_id ? strdup(run_id) : NULL;
	h->thread_id = thread_id ? strdup(thread_id) : NULL;
	if (!h->key || (run_id && !h->run_id) || (thread_id && !h->thread_id)) {
		snapheld_free_all(h);
		return -ENOMEM;
	}
	h->reply = TAKE_PTR(*reply);
	for (pp = &j->held; *pp; pp = &(*pp)->next)
		;
	*pp = h;
	return 0;
}

SnapHeld *
snapjob_take_held(SnapJob *j)
{
	return TAKE_PTR(j->held);
}
