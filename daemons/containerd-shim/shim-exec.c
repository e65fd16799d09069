/* SPDX-License-Identifier: MIT */
/*
 * shim-exec.c — the exec table and EXEC_START/KILL/ATTACH/LIST (shim-int.h,
 * above shim-sandbox.c).
 *
 * An Exec lives from EXEC_START until its EXEC_EXIT was pushed, which needs
 * both (a) its end — an exit status from the init, or the sandbox's death —
 * and (b) EOF on both output pipes, or the drain timeout after (a) (a
 * background child may hold the pipes forever).
 *
 * Output: the init reads the exec's pipes into one memfd per stream
 * (sandbox.h), so a stream offset is a file offset; we pread it on
 * INIT_MSG_DATA and answer INIT_MSG_CONSUMED. The memfd keeps the last
 * exec_output_buffer bytes: while no peer is attached the exec keeps running
 * and only the oldest bytes are lost (counted by offsets); EXEC_ATTACH replays
 * from a given offset and re-attaches. Backpressure: reading pauses while the
 * connection's output exceeds max_pending_output. An exec that ended while
 * detached is held (EXEC_LIST shows it) until a peer attaches and gets its
 * EXEC_EXIT, or for EXEC_HOLD_USEC at most.
 *
 * Per-exec cgroups (cgroup.h "Exec leaves"): every exec runs in the leaf
 * <sandbox cgroup>/e<id>; SIGKILL and the wall timeout kill the leaf, and a
 * killed exec's EXEC_EXIT waits (bounded) until the leaf is empty.
 *
 * Calls down into shim-sandbox.c only; the sandbox layer reaches this file
 * through SandboxHooks.exec_msg (exec_on_init_msg) and .execs_lost
 * (exec_sandbox_lost).
 */
#include "config.h"

#include <errno.h>
#include <search.h>
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
#include "strv.h"

static void exec_maybe_finish(Exec *e);
static void exec_release(Exec *e);
static int exec_leaf_create(Exec *e, int *ret_fd, Reason *why);
static void exec_leaf_done(Exec *e);
static int exec_signal(Exec *e, int sig);
static bool exec_leftovers_kill(Exec *e);
static bool exec_leaf_wait(Exec *e);
static void exec_leaf_kill(Exec *e);

/* ---------------------------------------------------------------------------
 * Execs.
 */

static int
exec_cmp(const void *a, const void *b)
{
	uint64_t x = ((const Exec *)a)->id, y = ((const Exec *)b)->id;
	return x < y ? -1 : x > y;
}

Exec *
exec_find(Shim *s, uint64_t id)
{
	Exec key = {.id = id};
	void **n = tfind(&key, &s->exec_index, exec_cmp);
	return n ? *n : NULL;
}

void
exec_link(Shim *s, Exec *e)
{
	void **n;

	e->next = s->execs;
	s->execs = e;
	n = tsearch(e, &s->exec_index, exec_cmp);
	if (n)
		*n = e;
	else
		log_warning("Out of memory indexing exec %" PRIu64, e->id);
}

void
exec_bind_sandbox(Exec *e, Sandbox *sb)
{
	if (e->sandbox && !e->ended)
		e->sandbox->live_execs--;
	e->sandbox = sb;
	if (sb && !e->ended)
		sb->live_execs++;
}

/* stdin: close the pipe. stdout/stderr: nothing more will be read (the memfd
 * stays until exec_free, for a replay). */
void
exec_close_stream(Exec *e, int i)
{
	if (i != STREAM_STDIN) {
		e->done[i] = true;
		return;
	}
	if (e->ev[i]) {
		event_free(e->ev[i]);
		e->ev[i] = NULL;
	}
	e->fds[i] = safe_close(e->fds[i]);
}

Exec *
exec_free(Exec *e)
{
	if (!e)
		return NULL;
	exec_bind_sandbox(e, NULL);
	exec_close_stream(e, STREAM_STDIN);
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++)
		safe_close(e->fds[i]);
	if (e->drain_timer)
		event_free(e->drain_timer);
	if (e->bp_timer)
		event_free(e->bp_timer);
	if (e->timeout_timer)
		event_free(e->timeout_timer);
	if (e->hold_timer)
		event_free(e->hold_timer);
	if (e->leaf_timer)
		event_free(e->leaf_timer);
	free(e->run_id);
	free(e->thread_id);
	free(e->stdin_data);
	peer_deferred_free(e->start);
	free(e);
	return NULL;
}

static void
exec_unlink(Exec *e)
{
	void **n = tfind(e, &e->shim->exec_index, exec_cmp);

	if (n && *n == e)
		(void)tdelete(e, &e->shim->exec_index, exec_cmp);
	for (Exec **pp = &e->shim->execs; *pp; pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			return;
		}
}

static void
exec_send_output(Exec *e, int stream, uint64_t offset, const void *data, size_t len,
		 uint64_t dropped)
{
	Msg_EXEC_OUTPUT m = {
	    .exec_id = e->id,
	    .stream = (uint64_t)stream,
	    .offset = offset,
	    .data = data,
	    .data_len = len,
	    .dropped = (int64_t)dropped,
	    .has_dropped = dropped > 0,
	};

	(void)msg_push_EXEC_OUTPUT(e->conn->peer, &m);
}

static void
exec_push_output(Exec *e, int stream, const void *data, size_t len)
{
	/* The memfd keeps it for a re-attach whether or not anybody listens now. */
	if (e->conn)
		exec_send_output(e, stream, e->offset[stream], data, len, 0);
	e->offset[stream] += len;
}

/* The lowest offset of a stream still held, given its size now: the init keeps
 * [size - window, size) intact whatever else it punched (sandbox.h). */
static uint64_t
exec_held_from(const Exec *e, int stream)
{
	struct stat st;

	if (e->fds[stream] < 0 || fstat(e->fds[stream], &st) < 0)
		return e->offset[stream];
	return (uint64_t)st.st_size > e->window ? (uint64_t)st.st_size - e->window : 0;
}

/* pread [off, off + n) of a stream and trim what may have been punched
 * meanwhile: returns the bytes valid from *off (moved up past a hole), or a
 * negative errno. */
static ssize_t
exec_pread(Exec *e, int stream, uint64_t *off, char *buf, size_t n)
{
	ssize_t k;
	uint64_t lo;

	do
		k = pread(e->fds[stream], buf, n, (off_t)*off);
	while (k < 0 && errno == EINTR);
	if (k <= 0)
		return k < 0 ? -errno : 0;
	lo = exec_held_from(e, stream);
	if (lo > *off) {
		uint64_t skip = lo - *off;
		if (skip >= (uint64_t)k) {
			*off += (uint64_t)k;
			return 0;
		}
		memmove(buf, buf + skip, (size_t)((uint64_t)k - skip));
		k -= (ssize_t)skip;
		*off = lo;
	}
	return k;
}

/* Tell the init how far we read (it punches and reads the pipe on). */
static void
exec_send_consumed(Exec *e, int stream)
{
	InitMsg m = {.type = INIT_MSG_CONSUMED,
		     .exec_id = e->id,
		     .stream = (uint32_t)stream,
		     .off = e->offset[stream]};
	struct timeval tv;

	if (!e->sandbox || e->sandbox->state == SANDBOX_DYING)
		return;
	/* Nothing new read: the init has nothing to punch nor to read on for, and
	 * a message would only wake it (3 of them per `true` before). */
	if (e->offset[stream] == e->told[stream])
		return;
	if (fd_send(e->sandbox->sock, &m, sizeof(m), NULL, 0) < 0) {
		if (!evtimer_pending(e->bp_timer, NULL)) /* full: again from exec_bp_cb */
			evtimer_add(e->bp_timer, timeval_from_usec(&tv, BACKPRESSURE_RECHECK_USEC));
		return;
	}
	e->told[stream] = e->offset[stream];
}

/* Read one chunk. Returns 2 after data, 1 when more may follow later, 0 when
 * the stream is closed (EOF reached and read). */
static int
exec_read_once(Exec *e, int stream)
{
	char buf[OUTPUT_CHUNK];
	uint64_t off;
	bool gap;
	ssize_t n;

	if (e->fds[stream] < 0 || e->done[stream])
		return 0;
	off = e->offset[stream];
	n = exec_pread(e, stream, &off, buf, sizeof(buf));
	gap = off > e->offset[stream];
	if (gap)
		e->offset[stream] = off; /* the peer sees the offset jump */
	if (n > 0) {
		exec_push_output(e, stream, buf, (size_t)n);
		return 2;
	}
	if (n == 0 && gap)
		return 2;
	if (n < 0 || (e->eof[stream] && e->offset[stream] >= e->eof_at[stream])) {
		exec_close_stream(e, stream);
		return 0;
	}
	return 1;
}

static bool
exec_backpressured(Exec *e)
{
	return e->conn &&
	       peer_output_pending(e->conn->peer) > (size_t)e->shim->conf->max_pending_output;
}

/* Read what the memfds hold now (bounded per call), unless paused; tell the init.
 * May free e (through exec_maybe_finish). */
void
exec_read_streams(Exec *e)
{
	struct timeval tv;
	bool closed = false;

	if (!e->started)
		return;
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
		int k = 1;
		if (e->fds[i] < 0 || e->done[i])
			continue;
		for (int guard = 0; guard < 16 && !e->paused; guard++) {
			k = exec_read_once(e, i);
			if (k != 2)
				break;
			if (exec_backpressured(e)) {
				/* Stop reading: the init stops reading the pipe a window later,
				 * the process blocks — memory stays bounded. */
				e->paused = true;
				evtimer_add(e->bp_timer,
					    timeval_from_usec(&tv, BACKPRESSURE_RECHECK_USEC));
			}
		}
		if (k == 0)
			closed = true;
		else
			exec_send_consumed(e, i);
	}
	if (closed)
		exec_maybe_finish(e); /* may free e */
}

void
exec_bp_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;
	struct timeval tv;

	if (exec_backpressured(e)) {
		evtimer_add(e->bp_timer, timeval_from_usec(&tv, BACKPRESSURE_RECHECK_USEC));
		return;
	}
	e->paused = false;
	exec_read_streams(e); /* may free e */
}

static void
exec_push_exit(Exec *e)
{
	const char *reason = e->end_reason;
	int64_t code = -1;
	int sig = 0;

	if (WIFEXITED(e->status)) {
		code = WEXITSTATUS(e->status);
		if (!reason)
			reason = "exit";
	} else if (WIFSIGNALED(e->status)) {
		sig = WTERMSIG(e->status);
		code = 128 + sig;
		if (!reason)
			reason = "signal";
	}
	if (!reason)
		reason = "lost";
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_DEBUG, &ctx,
			"exec %" PRIu64 " ended: %s, exit code %" PRId64 ", signal %d", e->id,
			reason, code, sig);
	}
	(void)msg_push_EXEC_EXIT(e->conn->peer, &(Msg_EXEC_EXIT){
						    .exec_id = e->id,
						    .exit_code = code,
						    .signal = sig,
						    .has_signal = true,
						    .reason = reason,
						});
}

/* The drain deadline after the end: take what is buffered, then give up on EOF. */
void
exec_drain_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;

	e->started = true;
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
		int guard = 64; /* at most 4 MiB more per stream */
		while (!e->done[i] && guard-- > 0 && exec_read_once(e, i) == 2)
			;
		exec_close_stream(e, i);
	}
	exec_maybe_finish(e);
}

/* Push EXEC_EXIT and free e once it ended and its output is drained. */
static void
exec_maybe_finish(Exec *e)
{
	struct timeval tv;

	if (!e->ended)
		return;
	if (exec_leaf_wait(e))
		return; /* again from leaf_timer */
	if (!e->done[STREAM_STDOUT] || !e->done[STREAM_STDERR]) {
		if (!evtimer_pending(e->drain_timer, NULL))
			evtimer_add(
			    e->drain_timer,
			    timeval_from_usec(&tv, (usec_t)e->shim->conf->exec_drain_timeout_ms *
						       USEC_PER_MSEC));
		return;
	}
	if (!e->conn) {
		/* Nobody to tell: hold the exit (and the output) for a re-attach. */
		if (!evtimer_pending(e->hold_timer, NULL)) {
			LogCtx ctx = exec_ctx(e);
			log_ctx(LOG_DEBUG, &ctx,
				"exec %" PRIu64 " ended while detached, holding it", e->id);
			evtimer_add(e->hold_timer, timeval_from_usec(&tv, EXEC_HOLD_USEC));
		}
		return;
	}
	exec_push_exit(e);
	exec_release(e);
}

void
exec_hold_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;

	LogCtx ctx = exec_ctx(e);

	log_ctx(LOG_DEBUG, &ctx, "exec %" PRIu64 ": nobody re-attached, releasing it", e->id);
	exec_release(e);
}

/* Done with e for good: its record (adopt.h) and the init's copy go, then e. */
static void
exec_release(Exec *e)
{
	adopt_forget_exec(e->shim->rt_dfd, e->sandbox_id, e->id);
	if (e->sandbox && e->sandbox->state != SANDBOX_DYING) {
		InitMsg m = {.type = INIT_MSG_FORGET, .exec_id = e->id};
		(void)fd_send(e->sandbox->sock, &m, sizeof(m), NULL, 0);
	}
	exec_unlink(e);
	exec_free(e);
}

/* "oom" or "pids_limit" when the sandbox's cgroup counted such an event since
 * the exec started (whatever its exit status: a hit is never reported as a
 * clean exit), else NULL. */
static const char *
exec_limit_reason(const Exec *e)
{
	uint64_t oom = 0, pids = 0;

	if (!e->have_base || !e->sandbox || !e->sandbox->cg ||
	    cgroup_counters(e->sandbox->cg, &oom, &pids) < 0)
		return NULL;
	if (oom > e->oom_base)
		return "oom";
	if (pids > e->pids_base)
		return "pids_limit";
	return NULL;
}

/* The exec's process is gone (or will never run). status is a wait status. */
void
exec_end(Exec *e, int status, const char *reason)
{
	const char *limit;

	if (e->ended)
		return;
	if (e->sandbox)
		e->sandbox->live_execs--;
	e->ended = true;
	if (e->sandbox)
		e->sandbox->last_used = now_usec();
	e->status = status;
	if (e->timeout_timer)
		evtimer_del(e->timeout_timer);
	if (!exec_leftovers_kill(e))
		exec_leaf_done(e);
	limit = exec_limit_reason(e);
	if (reason && streq(reason, "failed"))
		e->end_reason = reason; /* never started */
	else if (e->timed_out)
		e->end_reason = "timeout";
	else if (limit)
		e->end_reason = limit;
	else
		e->end_reason = reason ? reason : e->kill_requested ? "killed" : NULL;
	exec_maybe_finish(e); /* may free e */
}

/* The wall timeout passed: kill everything the exec started (its leaf). Its
 * EXEC_EXIT then carries reason "timeout". */
void
exec_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;

	if (e->ended)
		return;
	e->timed_out = true;
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_INFO, &ctx, "exec %" PRIu64 " timed out, killing it", e->id);
	}
	if (e->sandbox && e->sandbox->state == SANDBOX_READY)
		(void)exec_signal(e, SIGKILL);
}

/* Validate argv/env/cwd and pack them as the init wants them. */
static int
exec_pack(const char *cwd, char *const *argv, char *const *env, char **ret, size_t *ret_len,
	  uint32_t *ret_argc, uint32_t *ret_envc)
{
	size_t len = strlen(cwd) + 1, argc = 0, envc = 0;
	char *buf, *p;

	if (cwd[0] != '/' || len > PATH_MAX)
		return -EINVAL;
	for (; argv[argc]; argc++)
		len += strlen(argv[argc]) + 1;
	for (; env[envc]; envc++) {
		const char *eq = strchr(env[envc], '=');
		if (!eq || eq == env[envc])
			return -EINVAL; /* "K=V" with a non-empty K */
		len += strlen(env[envc]) + 1;
	}
	if (argc == 0 || argv[0][0] == '\0' || argc + envc > EXEC_ARGV_MAX)
		return -EINVAL;
	if (len > INIT_PAYLOAD_MAX)
		return -E2BIG;
	buf = malloc(sizeof(InitMsg) + len);
	if (!buf)
		return -ENOMEM;
	p = buf + sizeof(InitMsg);
	p = stpcpy(p, cwd) + 1;
	for (size_t i = 0; i < argc; i++)
		p = stpcpy(p, argv[i]) + 1;
	for (size_t i = 0; i < envc; i++)
		p = stpcpy(p, env[i]) + 1;
	*ret = buf;
	*ret_len = sizeof(InitMsg) + len;
	*ret_argc = (uint32_t)argc;
	*ret_envc = (uint32_t)envc;
	return 0;
}

/* A new Exec for sb, started by c (not linked, no id yet): its timers, the
 * run it serves and the baseline of the sandbox's limit counters. */
static int
exec_new(Shim *s, Sandbox *sb, Conn *c, const char *run_id, bool kill_leftovers, int64_t timeout_ms,
	 Exec **ret)
{
	_cleanup_(exec_freep) Exec *e = NULL;

	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->shim = s;
	exec_bind_sandbox(e, sb);
	e->conn = c;
	e->kill_leftovers = kill_leftovers;
	sb->idle_since = 0;
	e->fds[0] = e->fds[1] = e->fds[2] = -1;
	e->drain_timer = evtimer_new(s->base, exec_drain_cb, e);
	e->bp_timer = evtimer_new(s->base, exec_bp_cb, e);
	e->hold_timer = evtimer_new(s->base, exec_hold_cb, e);
	e->window = (uint64_t)s->conf->exec_output_buffer;
	memcpy(e->sandbox_id, sb->id, sizeof(e->sandbox_id));
	if (!run_id)
		run_id = sb->run_id; /* the run the sandbox serves */
	if (run_id)
		e->run_id = strdup(run_id);
	if (sb->thread_id)
		e->thread_id = strdup(sb->thread_id);
	if (!e->drain_timer || !e->bp_timer || !e->hold_timer || (run_id && !e->run_id) ||
	    (sb->thread_id && !e->thread_id))
		return -ENOMEM;
	if (timeout_ms > 0) {
		e->timeout_timer = evtimer_new(s->base, exec_timeout_cb, e);
		if (!e->timeout_timer)
			return -ENOMEM;
	}
	/* Baseline of the limit counters: a hit after this is this exec's. */
	if (sb->cg && cgroup_counters(sb->cg, &e->oom_base, &e->pids_base) >= 0)
		e->have_base = true;
	*ret = TAKE_PTR(e);
	return 0;
}

/* The exec's stdin pipe and its stdout/stderr memfds: e->fds[] keeps our
 * ends, child_fds[0..2] what goes to the init with INIT_MSG_EXEC. */
static int
exec_open_streams(Exec *e, int child_fds[static 3])
{
	int pp[2];

	/* stdin: a pipe, the child reads pp[0]. */
	if (pipe2(pp, O_CLOEXEC) < 0)
		return -errno;
	child_fds[STREAM_STDIN] = pp[0];
	e->fds[STREAM_STDIN] = pp[1];
	(void)fd_nonblock(pp[1], 1);
	/* stdout/stderr: memfds the init fills from the pipes it gives the child;
	 * no sandbox process ever holds them. F_SEAL_SHRINK: offsets only grow. */
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
		e->fds[i] = memfd_create(i == STREAM_STDOUT ? "exec-stdout" : "exec-stderr",
					 MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (e->fds[i] < 0 || fcntl(e->fds[i], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0)
			return -errno;
		child_fds[i] = e->fds[i]; /* sent, not closed: the same open file */
	}
	return 0;
}

int
handle_exec_start(Peer *p, const Frame *f, const Msg_EXEC_START *m, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const char *id = m->sandbox_id;
	size_t msg_len = 0;
	_cleanup_free_ char *msg = NULL;
	char **image_env = NULL;
	int child_fds[4] = {-1, -1, -1, -1}; /* [3]: the exec's cgroup leaf */
	Exec *e = NULL;
	InitMsg im = {.type = INIT_MSG_EXEC};
	Reason why = {""};
	Sandbox *sb;
	int64_t timeout_ms = m->has_timeout_ms ? m->timeout_ms : -1;
	int k;

	/* present but negative is an error; absent (or nil) means the default */
	if ((m->has_timeout_ms && m->timeout_ms < 0) || timeout_ms > INT32_MAX) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "timeout_ms out of range");
		k = 0;
		goto out;
	}
	if (timeout_ms < 0)
		timeout_ms = s->conf->exec_timeout_ms;
	sb = sandbox_find(s, id);
	if (!sb || sb->state == SANDBOX_DYING) {
		k = -ENOENT;
		goto out;
	}
	sb->reserved_until = 0; /* its exec came: idle again once it ends */
	sb->last_used = now_usec();
	if (sb->state != SANDBOX_READY) {
		k = -EAGAIN;
		goto out;
	}
	if (snapjob_find(s->jobs, id) &&
	    snapjob_kind(snapjob_find(s->jobs, id)) == SNAPJOB_RESTORE) {
		(void)peer_reply_error(p, f->req_id, -EBUSY,
				       "busy: the workspace of this sandbox is being restored");
		k = 0;
		goto out;
	}
	k = shim_image_env(sb, m->env, &image_env); /* the image's Env under the exec's */
	if (k < 0)
		goto out;
	k = exec_pack(m->cwd, m->argv, image_env ? image_env : m->env, &msg, &msg_len, &im.argc,
		      &im.envc);
	if (k < 0) {
		(void)peer_reply_error(p, f->req_id, k,
				       k == -E2BIG ? "argv and env too large"
						   : "bad argv, env (K=V) or cwd (absolute path)");
		k = 0;
		goto out;
	}

	k = exec_new(s, sb, c, m->run_id, m->kill_leftovers, timeout_ms, &e);
	if (k < 0)
		goto out;
	e->start = peer_defer(p, f); /* answered on STARTED / START_FAILED */
	if (!e->start) {
		k = -ENOMEM;
		goto out;
	}
	k = exec_open_streams(e, child_fds);
	if (k < 0)
		goto out;
	if (leafpool_take(sb, &e->id, &child_fds[3]) > 0) {
		e->leaf = true; /* made ahead, id counted (shim-leafpool.c) */
		k = 0;
	} else {
		e->id = ++s->next_exec_id;
		adopt_counter_store(s->counter_fd, e->id);
		k = exec_leaf_create(e, &child_fds[3], &why);
	}
	im.exec_id = e->id;
	memcpy(msg, &im, sizeof(im));
	if (k < 0) {
		char em[400];
		snprintf(em, sizeof(em), "exec_cgroup: %s", reason_text(&why, k));
		(void)peer_reply_error(p, f->req_id, k, em);
		k = 0;
		goto out;
	}
	k = adopt_save_exec(s->rt_dfd, sb->id, e->id, e->run_id, e->thread_id,
			    timeout_ms > 0 ? realtime_ms() + timeout_ms : 0, e->kill_leftovers);
	if (k < 0) {
		LogCtx ctx = exec_ctx(e);
		log_ctx_errno(LOG_WARNING, k, &ctx, "Failed to record exec %" PRIu64 ": %m", e->id);
		goto out;
	}
	k = (int)fd_send(sb->sock, msg, msg_len, child_fds, child_fds[3] >= 0 ? 4 : 3);
	if (k < 0) {
		LogCtx ctx = exec_ctx(e);
		log_ctx_errno(LOG_WARNING, k, &ctx, "Failed to send exec to sandbox %s: %m",
			      sb->id);
		adopt_forget_exec(s->rt_dfd, sb->id, e->id);
		goto out;
	}
	child_fds[STREAM_STDIN] = safe_close(child_fds[STREAM_STDIN]);
	child_fds[STREAM_STDOUT] = child_fds[STREAM_STDERR] = -1; /* e->fds */
	/* Output is read from STARTED on: no EXEC_OUTPUT may precede the reply. */
	k = exec_stdin_start(e, m->stdin, m->stdin_len, m->stdin_open);
	if (k < 0)
		goto out;

	exec_link(s, e);
	if (e->timeout_timer) {
		struct timeval tv;
		evtimer_add(e->timeout_timer,
			    timeval_from_usec(&tv, (usec_t)timeout_ms * USEC_PER_MSEC));
	}
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_DEBUG, &ctx, "exec %" PRIu64 ": '%s'", e->id, m->argv[0]);
	}
	e = NULL;
	k = 0;
out:
	if (e && e->id && k < 0)
	/* The init never saw it (send failed): it cannot be running. */
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_DEBUG, &ctx, "exec %" PRIu64 " not started", e->id);
	}
	if (e && e->leaf)
		exec_leaf_done(e); /* never started: remove it again */
	exec_free(e);
	strv_free(image_env);
	safe_close(child_fds[STREAM_STDIN]);
	safe_close(child_fds[3]);
	return k;
}

int
handle_exec_kill(Peer *p, const Frame *f, const Msg_EXEC_KILL *m, void *userdata)
{
	Conn *c = userdata;
	int64_t sig = m->signal;
	Exec *e;

	if (sig <= 0 || sig >= NSIG)
		return -EINVAL;
	e = exec_find(c->shim, m->exec_id);
	if (!e)
		return -ENOENT;
	if (!e->ended && e->sandbox && e->sandbox->state == SANDBOX_READY) {
		int k = exec_signal(e, (int)sig);
		if (k < 0)
			return k;
		e->kill_requested = true;
	} else if (e->ended && sig == SIGKILL && e->leaf && !e->leaf_gone && e->sandbox &&
		   e->sandbox->state == SANDBOX_READY)
		exec_leaf_kill(e); /* the leader is gone; what it left (draining) is not */
	reply_empty(c, f->req_id);
	return 0;
}

/* Replay one stream from offset off (<= what was read) to the now attached peer. */
static void
exec_replay(Exec *e, int stream, uint64_t off)
{
	uint64_t dropped = 0, lo = exec_held_from(e, stream), end = e->offset[stream];
	char *buf;

	lo = MIN(lo, end);
	if (off < lo) {
		dropped = lo - off;
		off = lo;
	}
	if (off == end) {
		if (dropped) /* all of it is gone: say so with an empty chunk */
			exec_send_output(e, stream, off, "", 0, dropped);
		return;
	}
	buf = malloc(OUTPUT_CHUNK);
	if (!buf)
		return;
	while (off < end) {
		uint64_t at = off;
		ssize_t k = exec_pread(e, stream, &at, buf, (size_t)MIN(OUTPUT_CHUNK, end - off));
		if (k < 0)
			break;
		if (k == 0 && at == off)
			break;	     /* cannot happen (sealed against shrinking): never spin */
		dropped += at - off; /* punched meanwhile */
		off = at;
		if (k == 0) {
			if (off >= end && dropped)
				exec_send_output(e, stream, off, "", 0, dropped);
			continue;
		}
		k = (ssize_t)MIN((uint64_t)k, end - off);
		exec_send_output(e, stream, off, buf, (size_t)k, dropped);
		dropped = 0;
		off += (uint64_t)k;
	}
	free(buf);
}

int
handle_exec_attach(Peer *p, const Frame *f, const Msg_EXEC_ATTACH *m, void *userdata)
{
	Conn *c = userdata;
	uint64_t id = m->exec_id, off[3] = {0};
	Exec *e;

	off[STREAM_STDOUT] = m->stdout_offset;
	off[STREAM_STDERR] = m->stderr_offset;
	e = exec_find(c->shim, id);
	if (!e)
		return -ENOENT;
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++)
		if (off[i] > e->offset[i]) {
			(void)peer_reply_error(p, f->req_id, -EINVAL,
					       "offset beyond the end of the stream");
			return 0;
		}
	if (e->conn && e->conn != c)
		log_debug("exec %" PRIu64 " re-attached to another connection", id);
	e->conn = c;
	e->start = peer_deferred_free(e->start);
	evtimer_del(e->hold_timer);
	reply_empty(c, f->req_id);
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++)
		exec_replay(e, i, off[i]);
	exec_maybe_finish(e); /* ended and drained: EXEC_EXIT now, and release */
	return 0;
}

/* The reply, an array of maps, is written by hand (no REPLY row). */
int
handle_exec_list(Peer *p, const Frame *f, const Msg_EXEC_LIST *m, void *userdata)
{
	Conn *c = userdata;
	uint32_t n = 0;
	MpWriter w;

	for (Exec *e = c->shim->execs; e; e = e->next)
		n++;
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_key(&w, "execs");
	msgpack_pack_array(&w.pk, n);
	for (Exec *e = c->shim->execs; e; e = e->next) {
		mp_w_map(&w, 4);
		mp_w_uint(&w, "exec_id", e->id);
		mp_w_str(&w, "sandbox_id", e->sandbox_id);
		mp_w_str(&w, "run_id", e->run_id ? e->run_id : "");
		mp_w_bool(&w, "running", !e->ended);
	}
	(void)peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return 0;
}

/* Answer the pending EXEC_START {exec_id} (STARTED, or START_FAILED: the exec
 * exists and will end with an EXEC_EXIT either way). */
static void
exec_reply_started(Exec *e)
{
	if (e->start)
		(void)reply_deferred_EXEC_START(TAKE_PTR(e->start),
						&(Reply_EXEC_START){.exec_id = e->id});
}

/* SandboxHooks.exec_msg: an init message about one of sb's execs. */
void
exec_on_init_msg(Sandbox *sb, const InitMsg *m, const char *payload, size_t len)
{
	Exec *e;

	switch (m->type) {
	case INIT_MSG_STARTED:
		e = exec_find(sb->shim, m->exec_id);
		if (!e || e->sandbox != sb)
			break;
		e->pid = m->pid;
		exec_reply_started(e);
		e->started = true;
		if (e->leaf_kill_pending)
			exec_leaf_kill(e);
		exec_read_streams(e); /* may free e */
		break;
	case INIT_MSG_DATA:
		e = exec_find(sb->shim, m->exec_id);
		if (e && e->sandbox == sb)
			exec_read_streams(e); /* may free e */
		break;
	case INIT_MSG_EOF:
		e = exec_find(sb->shim, m->exec_id);
		if (!e || e->sandbox != sb || (m->stream != 1 && m->stream != 2))
			break;
		e->eof[m->stream] = true;
		e->eof_at[m->stream] = m->off;
		exec_read_streams(e); /* may free e */
		break;
	case INIT_MSG_START_FAILED:
		e = exec_find(sb->shim, m->exec_id);
		if (!e || e->sandbox != sb)
			break;
		/* Answer like STARTED, then tell the story the way a shell would: the
		 * message on stderr, and an EXEC_EXIT with reason "failed". */
		exec_reply_started(e);
		{
			char msg[600];
			int n = snprintf(msg, sizeof(msg), "containerd-shim: %.*s\n",
					 (int)MIN(len, 512), payload);
			/* Into the (never used) stderr memfd: a re-attach replays it too. */
			if (n > 0 && pwrite(e->fds[STREAM_STDERR], msg, (size_t)n,
					    (off_t)e->offset[STREAM_STDERR]) == n) {
				e->started = true;
				(void)exec_read_once(e, STREAM_STDERR);
			}
		}
		/* Nothing else will be written: close ours so the exit goes out now. */
		for (int i = 0; i < 3; i++)
			exec_close_stream(e, i);
		exec_end(e, W_EXITCODE(m->err == ENOENT ? 127 : 126, 0), "failed");
		break;
	case INIT_MSG_EXITED:
		e = exec_find(sb->shim, m->exec_id);
		if (!e || e->sandbox != sb)
			break;
		exec_end(e, m->status, NULL);
		break;
	default: break;
	}
}

/* SandboxHooks.execs_lost: sb's init is dead, and every process with it: each
 * of its execs ends with what its memfds hold. */
void
exec_sandbox_lost(Sandbox *sb)
{
	Shim *s = sb->shim;
	Exec *next;

	for (Exec *e = s->execs; e; e = next) {
		const char *limit;
		next = e->next;
		if (e->sandbox != sb)
			continue;
		limit = exec_limit_reason(e); /* an OOM group kill takes the init too */
		exec_bind_sandbox(e, NULL);
		if (e->start)
			(void)peer_deferred_error(TAKE_PTR(e->start), -ESRCH, NULL,
						  "the sandbox died before the exec started");
		/* Nothing writes any more: what the memfds hold is all there is. */
		e->started = true;
		for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
			int guard = 64;
			while (!e->done[i] && guard-- > 0 && exec_read_once(e, i) == 2)
				;
			exec_close_stream(e, i);
		}
		/* No exit status will come: SIGKILL from the namespace teardown. */
		exec_end(e, W_EXITCODE(0, SIGKILL),
			 limit		     ? limit
			 : e->kill_requested ? "killed"
					     : "lost");
	}
}

/* ---------------------------------------------------------------------------
 * Per-exec cgroups (cgroup.h "Exec leaves"; docs/DESIGN.md "Cancel kills the
 * run's exec cgroup").
 */

/* Create e's leaf before INIT_MSG_EXEC: *ret_fd (its directory) goes with the
 * exec's other fds. Fail closed: on a host with cgroup2 an exec without its
 * leaf never starts (why says why). */
static int
exec_leaf_create(Exec *e, int *ret_fd, Reason *why)
{
	Shim *s = e->shim;
	Sandbox *sb = e->sandbox;
	Reason cerr = {""};
	int r;

	*ret_fd = -1;
	if (!cgroup_host_has_leaves(s->cgroups))
		return 0; /* no cgroup2 at all: the process group it is (logged at start) */
	if (!sb->cg || !cgroup_has_leaves(sb->cg)) {
		reason_set(why, "the sandbox has no cgroup2 directory for the exec");
		return -EOPNOTSUPP;
	}
	r = cgroup_leaf_create(sb->cg, e->id, ret_fd, &cerr);
	if (r < 0) {
		LogCtx ctx = exec_ctx(e);
		reason_set(why, "%s", reason_text(&cerr, r));
		log_ctx_errno(LOG_ERR, r, &ctx,
			      "Failed to create the cgroup of exec %" PRIu64 ": %s", e->id,
			      reason_text(&cerr, r));
		return r;
	}
	e->leaf = true;
	return 0;
}

/* The exec ended (or never started): remove its leaf, now or once the rest of
 * its processes are gone (idle_cb). */
static void
exec_leaf_done(Exec *e)
{
	Sandbox *sb = e->sandbox;
	int r;

	if (!e->leaf || e->leaf_gone || !sb || !sb->cg)
		return;
	r = cgroup_leaf_remove(sb->cg, e->id);
	e->leaf_gone = r >= 0;
	if (r == -EBUSY)
		sb->leaves_pending = true;
	else if (r < 0) {
		LogCtx ctx = exec_ctx(e);
		log_ctx_errno(LOG_WARNING, r, &ctx,
			      "Failed to remove the cgroup of exec %" PRIu64 ": %m", e->id);
	}
}

static void
exec_leaf_kill(Exec *e)
{
	int r;

	e->leaf_kill_pending = !e->started; /* again at STARTED */
	if (!e->sandbox || !e->sandbox->cg)
		return;
	r = cgroup_leaf_kill(e->sandbox->cg, e->id);
	if (r < 0) {
		LogCtx ctx = exec_ctx(e);
		log_ctx_errno(LOG_ERR, r, &ctx, "Failed to kill the cgroup of exec %" PRIu64 ": %m",
			      e->id);
	}
}

/* EXEC_KILL and the wall timeout: SIGKILL kills the exec's leaf (everything it
 * started, setsid'd or not); other signals go to its process group through
 * the init. */
static int
exec_signal(Exec *e, int sig)
{
	InitMsg m = {.type = INIT_MSG_KILL, .exec_id = e->id, .status = sig};
	ssize_t n;

	if (sig == SIGKILL && e->leaf) {
		exec_leaf_kill(e);
		return 0;
	}
	n = fd_send(e->sandbox->sock, &m, sizeof(m), NULL, 0);
	return n < 0 ? (int)n : 0;
}

static bool
leaf_busy(uint64_t exec_id, void *ud)
{
	Sandbox *sb = ud;
	Exec *e = exec_find(sb->shim, exec_id);

	if (e && e->sandbox == sb && !e->ended)
		return true;
	return leafpool_has(sb, exec_id); /* made ahead for the next exec */
}

/* Remove the leaves of ended execs whose last processes have exited since. */
void
exec_leaves_prune(Sandbox *sb)
{
	if (!sb->cg || sb->state == SANDBOX_DYING) {
		sb->leaves_pending = false; /* they go with the sandbox cgroup */
		return;
	}
	sb->leaves_pending = cgroup_prune_leaves(sb->cg, leaf_busy, sb) != 0;
}

/* The leader of a kill_leftovers exec exited: remove its leaf, or — when
 * processes it left behind are still in it — kill them (the leaf) and let
 * exec_leaf_wait hold EXEC_EXIT until they are gone. True: they were killed. */
static bool
exec_leftovers_kill(Exec *e)
{
	Sandbox *sb = e->sandbox;
	int r;

	if (!e->kill_leftovers || !e->leaf || !sb || !sb->cg || sb->state != SANDBOX_READY)
		return false;
	if (e->kill_requested || e->timed_out)
		return false; /* killed already: exec_leaf_wait holds EXEC_EXIT */
	r = cgroup_leaf_remove(sb->cg, e->id);
	if (r != -EBUSY) {
		e->leaf_gone = r >= 0;
		if (r < 0) {
			LogCtx ctx = exec_ctx(e);
			log_ctx_errno(LOG_WARNING, r, &ctx,
				      "Failed to remove the cgroup of exec %" PRIu64 ": %m", e->id);
		}
		return false;
	}
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_INFO, &ctx,
			"exec %" PRIu64 " ended; killing the processes it left running", e->id);
	}
	e->leftovers_killed = true;
	exec_leaf_kill(e);
	return true;
}

static void
exec_leaf_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	exec_maybe_finish(arg); /* may free it */
}

/* A killed exec's EXEC_EXIT goes out once its leaf is empty (removed), at most
 * GRAVE_MAX_TRIES * GRAVE_RETRY_USEC later. True: wait (leaf_timer is set). */
static bool
exec_leaf_wait(Exec *e)
{
	struct timeval tv;
	int r;

	if (!e->leaf || e->leaf_gone ||
	    !(e->kill_requested || e->timed_out || e->leftovers_killed) || !e->sandbox ||
	    !e->sandbox->cg)
		return false;
	r = cgroup_leaf_remove(e->sandbox->cg, e->id);
	if (r != -EBUSY || ++e->leaf_tries >= GRAVE_MAX_TRIES) {
		e->leaf_gone = true;
		if (r == -EBUSY)
			e->sandbox->leaves_pending = true;
		return false;
	}
	if (!e->leaf_timer)
		e->leaf_timer = evtimer_new(e->shim->base, exec_leaf_timer_cb, e);
	if (!e->leaf_timer)
		return false;
	if (e->leaf_tries % 50 == 0)
		exec_leaf_kill(e); /* forked while being killed (no cgroup.kill) */
	evtimer_add(e->leaf_timer, timeval_from_usec(&tv, GRAVE_RETRY_USEC));
	return true;
}
