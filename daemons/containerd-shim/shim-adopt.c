/* SPDX-License-Identifier: MIT */
/*
 * shim-adopt.c — start-up: adopt or reap what a killed predecessor left
 * (shim-int.h, under shim.c: only shim_new calls it).
 *
 * adopt.h reads the records under <runtime_dir>/sandboxes and speaks to the
 * surviving inits; this file turns what it finds into Sandboxes (READY,
 * adopted: not our children) and Execs (their ids and offsets kept), or reaps
 * them, and removes the pool mount points and cgroups no sandbox owns any
 * more. Runs once, from shim_new, before the control socket accepts.
 *
 * Calls down into shim-capacity.c, shim-exec.c and shim-sandbox.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <openssl/evp.h>

#include "shim-int.h"

/* ---------------------------------------------------------------------------
 * Re-adoption of the sandboxes a killed predecessor left (adopt.h).
 */

static Exec *
exec_adopt(Shim *s, Sandbox *sb, AdoptedExec *x, uint64_t window)
{
	Exec *e = calloc(1, sizeof(*e));
	struct timeval tv;

	if (!e)
		return NULL;
	e->shim = s;
	e->id = x->id;
	exec_bind_sandbox(e, sb);
	e->pid = x->pid;
	e->started = true;
	e->window = window;
	e->fds[STREAM_STDIN] = -1; /* stdin went with the old shim: EOF */
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
		e->fds[i] = TAKE_FD(x->mem[i]);
		e->offset[i] = x->size[i];
		e->eof[i] = x->eof[i];
		e->eof_at[i] = x->size[i];
	}
	memcpy(e->sandbox_id, sb->id, sizeof(e->sandbox_id));
	e->run_id = TAKE_PTR(x->run_id);
	e->thread_id = TAKE_PTR(x->thread_id);
	e->kill_leftovers = x->kill_leftovers;
	e->drain_timer = evtimer_new(s->base, exec_drain_cb, e);
	e->bp_timer = evtimer_new(s->base, exec_bp_cb, e);
	e->hold_timer = evtimer_new(s->base, exec_hold_cb, e);
	if (x->deadline_ms > 0)
		e->timeout_timer = evtimer_new(s->base, exec_timeout_cb, e);
	if (!e->drain_timer || !e->bp_timer || !e->hold_timer ||
	    (x->deadline_ms > 0 && !e->timeout_timer))
		return exec_free(e);
	if (sb->cg && cgroup_counters(sb->cg, &e->oom_base, &e->pids_base) >= 0)
		e->have_base = true;
	e->leaf = sb->cg && cgroup_leaf_exists(sb->cg, e->id); /* found again by name */
	if (e->timeout_timer) {
		int64_t left = MAX(x->deadline_ms - realtime_ms(), (int64_t)0);
		evtimer_add(e->timeout_timer, timeval_from_usec(&tv, (usec_t)left * USEC_PER_MSEC));
	}
	return e;
}

static int
adopt_cb(Adopted *a, void *ud)
{
	Shim *s = ud;
	Sandbox *sb;
	char id[17];
	size_t live = 0;

	if (a->n_execs == 0) {
		log_info("Sandbox %s left by a previous instance has no exec to re-attach to",
			 a->id);
		return 0;
	}
	if (shim_sandbox_id(a->key, strlen(a->key), id) < 0 || !streq(id, a->id) ||
	    sandbox_find(s, a->id))
		return 0;
	sb = calloc(1, sizeof(*sb));
	if (!sb || !(sb->key = strdup(a->key))) {
		free(sb);
		return 0;
	}
	sb->shim = s;
	memcpy(sb->id, a->id, sizeof(sb->id));
	memcpy(sb->cg_id, a->cg_id, sizeof(sb->cg_id));
	set_str(&sb->run_id, a->run_id);
	set_str(&sb->thread_id, a->thread_id);
	shim_image_adopted(s, sb); /* the image it was started on, from its record */
	sb->state = SANDBOX_READY;
	sb->adopted = true;
	sb->pid = a->pid;
	sb->pidfd = TAKE_FD(a->pidfd);
	sb->sock = TAKE_FD(a->sock);
	{
		/* Taken from a predecessor's pool: its workspace bind sits on this
		 * directory, removed (with the bind) only when the sandbox is gone. */
		char *dir = NULL;
		struct stat st;
		if (asprintf(&dir, "%s/%s", s->pool_root, sb->cg_id) >= 0 && lstat(dir, &st) == 0 &&
		    S_ISDIR(st.st_mode))
			sb->pool_dir = dir;
		else
			free(dir);
	}
	if (cgroup_open(s->cgroups, sb->cg_id, &sb->cg) < 0)
		sb->cg = NULL; /* no stats; the namespace still dies with its init */
	/* A previous instance that died during a snapshot job left it frozen;
	 * no job of ours runs yet. */
	if (sb->cg) {
		int k = cgroup_freeze(sb->cg, false);
		if (k < 0 && k != -EOPNOTSUPP)
			log_warning_errno(k, "Cannot thaw re-adopted sandbox %s: %m", sb->id);
	}
	sb->leaves_pending = sb->cg != NULL; /* leaves of released execs: pruned */
	sb->sock_ev = event_new(s->base, sb->sock, EV_READ | EV_PERSIST, sandbox_sock_cb, sb);
	sb->pidfd_ev = event_new(s->base, sb->pidfd, EV_READ, sandbox_pidfd_cb, sb);
	if (!sb->sock_ev || !sb->pidfd_ev) {
		a->pidfd = TAKE_FD(sb->pidfd); /* adopt_scan kills it */
		sandbox_free(sb);
		return 0;
	}
	event_add(sb->sock_ev, NULL);
	event_add(sb->pidfd_ev, NULL);
	sandbox_link(s, sb);
	for (size_t i = 0; i < a->n_execs; i++) {
		AdoptedExec *x = &a->execs[i];
		Exec *e = exec_adopt(s, sb, x, a->window);
		if (!e) {
			InitMsg m = {.type = INIT_MSG_KILL, .exec_id = x->id, .status = SIGKILL};
			(void)fd_send(sb->sock, &m, sizeof(m), NULL, 0);
			continue;
		}
		exec_link(s, e);
		s->next_exec_id = MAX(s->next_exec_id, e->id);
		if (!x->exited)
			live++;
		{
			LogCtx ctx = exec_ctx(e);
			log_ctx(LOG_INFO, &ctx,
				"Re-adopted exec %" PRIu64 " (%s) at offsets %" PRIu64 "/%" PRIu64,
				e->id, x->exited ? "ended while the shim was away" : "running",
				e->offset[STREAM_STDOUT], e->offset[STREAM_STDERR]);
		}
		exec_read_streams(e); /* EOF already? (may not free e: not ended yet) */
		if (x->exited)
			exec_end(e, x->status, NULL); /* held for a re-attach */
	}
	{
		LogCtx ctx = sandbox_ctx(sb);
		log_ctx(LOG_NOTICE, &ctx,
			"Re-adopted sandbox %s (init pid %d, %zu exec(s) running)", sb->id,
			(int)sb->pid, live);
	}
	return 1;
}

bool
adopt_keep_cgroup(const char *name, void *ud)
{
	Shim *s = ud;
	if (strlen(name) <= 3)
		return false;
	/* An adopted sandbox's cgroup is sb-<its id> (cg_id = id but for a
	 * pooled one, whose cg_id is its pool id): the index first. */
	Sandbox *sb = sandbox_find(s, name + 3);
	if (sb && streq(sb->cg_id, name + 3))
		return true;
	for (sb = s->sandboxes; sb; sb = sb->next)
		if (streq(sb->cg_id, name + 3))
			return true;
	return false;
}

/* Pool mount points a predecessor left: keep those of the sandboxes we
 * re-adopted (see pool_dir_make), remove the rest. */
void
pool_dirs_clean(Shim *s)
{
	DIR *d = opendir(s->pool_root);

	for (struct dirent *de; d && (de = readdir(d));) {
		bool keep = de->d_name[0] == '.';
		for (Sandbox *sb = s->sandboxes; sb && !keep; sb = sb->next)
			keep = streq(sb->cg_id, de->d_name);
		if (!keep && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			log_warning_errno(errno, "Failed to remove '%s/%s': %m", s->pool_root,
					  de->d_name);
	}
	if (d)
		closedir(d);
}

/* Open the runtime state, then adopt or reap what a predecessor left. */
int
shim_adopt(Shim *s)
{
	uint64_t last = 0;
	int r;

	r = adopt_dir_open(s->conf->shared.runtime_dir, &s->rt_dfd);
	if (r < 0)
		return log_error_errno(
		    r, "Failed to set up '%s/sandboxes' (a directory of ours, 0700): %m",
		    s->conf->shared.runtime_dir);
	r = adopt_counter_open(s->conf->sandbox_dir, &s->counter_fd, &last);
	if (r < 0)
		return log_error_errno(r, "Failed to open the exec id counter in '%s': %m",
				       s->conf->sandbox_dir);
	s->next_exec_id = last;
	r = adopt_scan(s->rt_dfd, adopt_cb, s);
	if (r > 0)
		log_notice("Re-adopted %d sandbox(es) left by a previous instance", r);
	return 0;
}
