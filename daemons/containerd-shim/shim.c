/* SPDX-License-Identifier: MIT */
/*
 * shim.c — control socket, sandbox table, exec table, request handlers.
 *
 * Lifetimes. A Sandbox lives from SANDBOX_ENSURE until its init has been
 * reaped (pidfd readable ⇒ the whole pid namespace is gone, the kernel zaps it
 * before the init becomes a zombie). An Exec lives from EXEC_START until its
 * EXEC_EXIT was pushed, which needs both (a) its end — an exit status from
 * the init, or the sandbox's death — and (b) EOF on both output pipes, or the
 * drain timeout after (a) (a background child may hold the pipes forever).
 * Execs outlive the Conn that started them and may outlive their Sandbox
 * briefly while draining. Output: the init reads the exec's pipes into one
 * memfd per stream (sandbox.h), so a stream offset is a file offset; we pread
 * it on INIT_MSG_DATA and answer INIT_MSG_CONSUMED. The memfd keeps the last
 * exec_output_buffer bytes: while no peer is attached the exec keeps running
 * and only the oldest bytes are lost (counted by offsets); EXEC_ATTACH replays
 * from a given offset and re-attaches. An exec that ended while detached is
 * held (EXEC_LIST shows it) until a peer attaches and gets its EXEC_EXIT, or
 * for EXEC_HOLD_USEC at most.
 *
 * Re-adoption (adopt.h): the inits survive a crash of the shim; on start the
 * sandboxes left behind with execs not yet released are taken over (the
 * Sandbox is READY again, the Execs come back with their ids and offsets),
 * the others are reaped.
 *
 * Tables are plain linked lists: a host runs a handful of sandboxes.
 */
#include "config.h"

#include "shim.h"

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

#include "adopt.h"
#include "cgroup.h"
#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "netfwd.h"
#include "peer.h"
#include "quota.h"
#include "sandbox-key.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "shim-files.h"
#include "snapjob.h"
#include "snapshot.h"

#define EXEC_ARGV_MAX 4096 /* argv + env entries */
#define OUTPUT_CHUNK (64 * 1024)
#define BACKPRESSURE_RECHECK_USEC (20 * USEC_PER_MSEC)
#define GRAVE_RETRY_USEC (10 * USEC_PER_MSEC)
#define EXEC_HOLD_USEC (600 * USEC_PER_SEC) /* an ended exec nobody re-attached to */
#define IDLE_SCAN_USEC (200 * USEC_PER_MSEC)
#define ENSURE_RESERVE_USEC (10 * USEC_PER_SEC)	    /* an ENSURE'd sandbox awaits its exec */
#define POOL_REFILL_DELAY_USEC (20 * USEC_PER_MSEC) /* after a claim */
#define GRAVE_MAX_TRIES 500 /* 5 s until a cgroup that does not empty is given up */

typedef struct Conn Conn;
typedef struct Sandbox Sandbox;
typedef struct Exec Exec;

/* A request waiting for a sandbox state change. */
typedef struct Waiter {
	struct Waiter *next;
	Conn *conn;
	uint64_t req_id;
} Waiter;

struct Conn {
	Conn *next;
	Shim *shim;
	Peer *peer;
};

typedef enum SandboxState {
	SANDBOX_STARTING, /* init spawned, setup running */
	SANDBOX_READY,	  /* serving execs */
	SANDBOX_DYING,	  /* init exiting or killed; waiting for the pidfd */
} SandboxState;

struct Sandbox {
	Sandbox *next;
	Shim *shim;
	char id[17];
	char *key;
	SandboxState state;
	bool destroy_requested;
	pid_t pid;
	int pidfd;
	int sock;
	struct event *sock_ev, *pidfd_ev;
	Waiter *ensure_waiters;	  /* replied on READY or on death */
	Waiter *destroy_waiters;  /* replied on death */
	Waiter *reensure_waiters; /* ENSUREs that arrived while dying: a new sandbox after */
	int fail_err;		  /* setup failure, for the ensure waiters */
	char *fail_msg;
	Cgroup *cg;	   /* the sandbox's cgroup; removed after the init was reaped */
	usec_t idle_since; /* when it was first seen idle (no exec, only the init); 0 = busy */
	usec_t last_used;  /* its last exec ended or started, or an ENSURE named it */
	bool stopping;	   /* stopped by the shim (idle, or for a queued request) */
	bool adopted;	   /* taken over from a previous instance: not our child */
	/* The run it serves now (the last SANDBOX_ENSURE's run_id/thread_id), for
	 * the journald fields of every log line about it; may be NULL. next_*: the
	 * run of ENSUREs that wait for a dying one, for its successor. */
	char *run_id, *thread_id;
	char *next_run_id, *next_thread_id;
	/* Pool (see "The pool" below): pooled = started ahead, bound to no key yet;
	 * pool_dir = its workspace mount point, kept (and released on free) after
	 * it was claimed. */
	bool pooled;
	char *pool_dir;
	char cg_id[17]; /* its cgroup is sb-<cg_id>: the id, or the pooled one's own */
	/* An ENSURE was answered (or is pending) and no EXEC_START came yet: the
	 * sandbox is about to be used, never "idle" (evicted for the queue). */
	usec_t reserved_until;
	bool purge;	     /* SANDBOX_DESTROY purge: remove its directory once dead */
	int landlock_abi;    /* from READY */
	bool leaves_pending; /* exec cgroup leaves left to remove (idle_cb prunes) */
};

/* An ENSURE waiting for a free slot (max_instances), in FIFO order. */
typedef struct Queued {
	struct Queued *next;
	Shim *shim;
	Conn *conn;
	uint64_t req_id;
	char *key, *run_id, *thread_id;
	struct event *timer; /* queue_timeout_ms */
	uint64_t position;   /* last one pushed in SANDBOX_QUEUED */
} Queued;

/* A dead sandbox's cgroup waiting to become removable (members still exiting). */
typedef struct Grave {
	struct Grave *next;
	Cgroup *cg;
	unsigned tries;
} Grave;

enum { STREAM_STDIN = 0, STREAM_STDOUT = 1, STREAM_STDERR = 2 };

struct Exec {
	Exec *next;
	Shim *shim;
	uint64_t id;
	Sandbox *sandbox;      /* NULL once the sandbox is gone */
	Conn *conn;	       /* who started it; NULL once that connection closed */
	uint64_t start_req_id; /* pending EXEC_START reply; 0 once answered */
	pid_t pid;
	bool ended;		/* exit status known, or lost with its sandbox */
	bool kill_requested;	/* EXEC_KILL or SANDBOX_DESTROY */
	bool paused;		/* output reading paused for backpressure */
	int status;		/* wait status when ended normally */
	const char *end_reason; /* overrides "exit"/"signal": "killed", "lost", "failed" */
	int fds[3];		/* stdin write end, stdout/stderr memfds; -1 when closed */
	struct event *ev[3];	/* [0] only: stdin */
	uint64_t offset[3];	/* stdout/stderr: read up to here (= memfd offset) */
	bool started;		/* STARTED seen (or adopted): output may be pushed */
	bool done[3];		/* stdout/stderr: read to the end (the memfd stays) */
	bool eof[3];		/* the init saw EOF on the pipe at eof_at */
	uint64_t eof_at[3];
	uint64_t window; /* the memfd's intact tail (the init's output_window) */
	char *stdin_data;
	size_t stdin_len, stdin_off;
	struct event *drain_timer, *bp_timer;
	struct event *timeout_timer; /* wall timeout (timeout_ms), or NULL */
	bool timed_out;
	bool have_base;		      /* oom_base/pids_base were read at start */
	uint64_t oom_base, pids_base; /* cgroup event counters at start */
	char sandbox_id[17];
	char *run_id;		  /* for EXEC_LIST and the logs; may be NULL */
	char *thread_id;	  /* the sandbox's thread, for the logs; may be NULL */
	struct event *hold_timer; /* ended while detached: release after EXEC_HOLD_USEC */
	/* Its cgroup2 leaf <sandbox cgroup>/e<id> (execcg.c): every process it
	 * started; SIGKILL and the wall timeout kill the leaf. kill_pending: a kill
	 * came before STARTED (the child may not be in the leaf yet). */
	bool leaf;
	bool leaf_kill_pending;
	/* Killed: EXEC_EXIT waits (bounded) until the leaf is empty and removed,
	 * so that whoever killed it sees all of its processes gone. */
	bool leaf_gone;
	unsigned leaf_tries;
	struct event *leaf_timer;
	/* EXEC_START kill_leftovers: when the leader exits, what it left running
	 * in its leaf (`cmd &`, nohup, setsid) is killed, and EXEC_EXIT (with the
	 * leader's status) waits until the leaf is empty. leftovers_killed: done. */
	bool kill_leftovers;
	bool leftovers_killed;
};

struct Shim {
	struct event_base *base;
	const ShimConf *conf;
	char *sock_path;
	char *root_mnt;
	int listen_fd;
	int64_t socket_gid; /* socket_group's gid, or -1 */
	struct event *listen_ev;
	Conn *conns;
	Sandbox *sandboxes;
	Exec *execs;
	uint64_t next_exec_id;
	bool stopped;
	struct sock_fprog seccomp;	/* the init's variant (seccomp-policy.h) */
	struct sock_fprog seccomp_exec; /* the layer each exec adds */
	CgroupHost *cgroups;
	Grave *graves;
	struct event *grave_timer;
	char create_err[320]; /* why the last sandbox_create failed, for the reply */
	Queued *queue;
	struct event *idle_timer; /* periodic: sleep_after and evictions for the queue */
	NetFwd *net;		  /* SANDBOX_FORWARD/PROXY listeners */
	Sandbox *pool;		  /* started ahead, not yet claimed */
	struct event *pool_ev;	  /* refill, at background priority */
	unsigned pool_failures;	  /* consecutive pool sandboxes that failed */
	usec_t pool_retry_at;	  /* no refill before (backoff after failures) */
	char *pool_root;	  /* <sandbox_dir>/.pool */
	SnapJobs *jobs;		  /* snapshot/restore children (snapjob.h) */
	Cgroup *jobs_cg;	  /* their cgroup (cpu.max, io.weight) */
	ShimFiles *files;	  /* the file API's worker threads (shim-files.h) */
	int rt_dfd;		  /* <runtime_dir>/sandboxes (adopt.h) */
	int counter_fd;		  /* <sandbox_dir>/.exec-id */
};

static void sandbox_sock_cb(evutil_socket_t fd, short what, void *arg);
static void pool_dir_release(const char *dir);
static void pool_kick(Shim *s);
static void pool_dead(Sandbox *sb);
static void sandbox_kill(Sandbox *sb);
static void sandbox_log_created(Sandbox *sb);
static int sandbox_purge(Shim *s, const char *id);
static int ensure_key(Shim *s, Conn *c, uint64_t req_id, const char *key, const char *run_id,
		      const char *thread_id, bool may_queue);
static void queue_kick(Shim *s);
static void sandbox_pidfd_cb(evutil_socket_t fd, short what, void *arg);
static void exec_maybe_finish(Exec *e);
static void exec_release(Exec *e);
static int exec_leaf_create(Exec *e, int *ret_fd);
static void exec_leaf_done(Exec *e);
static void exec_leaf_kill(Exec *e);
static int exec_signal(Exec *e, int sig);
static void exec_leaves_prune(Sandbox *sb);
static bool exec_leaf_wait(Exec *e);
static bool exec_leftovers_kill(Exec *e);

/* ---------------------------------------------------------------------------
 * Small helpers.
 */

/* Replace *p with a copy of v (NULL clears). On ENOMEM the old value stays: a
 * log line with a stale run id beats none. */
static void
set_str(char **p, const char *v)
{
	char *n = NULL;

	if (v == *p || (v && *p && streq(v, *p)))
		return;
	if (v && !(n = strdup(v)))
		return;
	free(*p);
	*p = n;
}

static int64_t
realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static LogCtx
sandbox_ctx(const Sandbox *sb)
{
	return (LogCtx){.run_id = sb->run_id, .thread_id = sb->thread_id, .sandbox_id = sb->id};
}

static LogCtx
exec_ctx(const Exec *e)
{
	return (LogCtx){
	    .run_id = e->run_id, .thread_id = e->thread_id, .sandbox_id = e->sandbox_id};
}

int
shim_sandbox_id(const char *key, size_t len, char ret_id[static 17])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (len == 0 || len > SANDBOX_KEY_MAX || memchr(key, '\0', len))
		return -EINVAL;
	if (!EVP_Digest(key, len, md, &mdlen, EVP_sha256(), NULL) || mdlen < 8)
		return -EIO;
	for (int i = 0; i < 8; i++)
		snprintf(ret_id + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static void
waiters_free(Waiter **l)
{
	while (*l) {
		Waiter *w = *l;
		*l = w->next;
		free(w);
	}
}

static int
waiter_add(Waiter **l, Conn *c, uint64_t req_id)
{
	Waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->conn = c;
	w->req_id = req_id;
	/* append: replies go out in request order */
	while (*l)
		l = &(*l)->next;
	*l = w;
	return 0;
}

static void
waiters_drop_conn(Waiter **l, Conn *c)
{
	while (*l) {
		if ((*l)->conn == c) {
			Waiter *w = *l;
			*l = w->next;
			free(w);
		} else
			l = &(*l)->next;
	}
}

static void
reply_ensure(Conn *c, uint64_t req_id, const char *id, bool created)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "sandbox_id", id);
	mp_w_bool(&w, "created", created);
	(void)peer_reply(c->peer, req_id, &w);
	mp_writer_done(&w);
}

static void
reply_empty(Conn *c, uint64_t req_id)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	(void)peer_reply(c->peer, req_id, &w);
	mp_writer_done(&w);
}

/* ---------------------------------------------------------------------------
 * Execs.
 */

static Exec *
exec_find(Shim *s, uint64_t id)
{
	for (Exec *e = s->execs; e; e = e->next)
		if (e->id == id)
			return e;
	return NULL;
}

/* stdin: close the pipe. stdout/stderr: nothing more will be read (the memfd
 * stays until exec_free, for a replay). */
static void
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

static Exec *
exec_free(Exec *e)
{
	if (!e)
		return NULL;
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
	free(e);
	return NULL;
}

static void
exec_unlink(Exec *e)
{
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
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, dropped ? 5 : 4);
	mp_w_uint(&w, "exec_id", e->id);
	mp_w_uint(&w, "stream", (uint64_t)stream);
	mp_w_uint(&w, "offset", offset);
	mp_w_bin(&w, "data", data, len);
	if (dropped)
		mp_w_uint(&w, "dropped", dropped);
	(void)peer_push(e->conn->peer, MSG_EXEC_OUTPUT, &w);
	mp_writer_done(&w);
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
	if (fd_send(e->sandbox->sock, &m, sizeof(m), NULL, 0) < 0 &&
	    !evtimer_pending(e->bp_timer, NULL)) /* full: try again (exec_bp_cb reads) */
		evtimer_add(e->bp_timer, timeval_from_usec(&tv, BACKPRESSURE_RECHECK_USEC));
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
	return e->conn && peer_output_pending(e->conn->peer) > (size_t)e->shim->conf->max_pending;
}

/* Read what the memfds hold now (bounded per call), unless paused; tell the init.
 * May free e (through exec_maybe_finish). */
static void
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

static void
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
exec_stdin_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;

	while (e->stdin_off < e->stdin_len) {
		ssize_t n = write(e->fds[STREAM_STDIN], e->stdin_data + e->stdin_off,
				  e->stdin_len - e->stdin_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return; /* wait for room */
		if (n < 0)
			break; /* EPIPE: the process closed stdin, fine */
		e->stdin_off += (size_t)n;
	}
	exec_close_stream(e, STREAM_STDIN);
	free(e->stdin_data);
	e->stdin_data = NULL;
}

static void
exec_push_exit(Exec *e)
{
	const char *reason = e->end_reason;
	int64_t code = -1;
	int sig = 0;
	MpWriter w;

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
	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_uint(&w, "exec_id", e->id);
	mp_w_int(&w, "exit_code", code);
	mp_w_int(&w, "signal", sig);
	mp_w_str(&w, "reason", reason);
	(void)peer_push(e->conn->peer, MSG_EXEC_EXIT, &w);
	mp_writer_done(&w);
}

/* The drain deadline after the end: take what is buffered, then give up on EOF. */
static void
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
			evtimer_add(e->drain_timer,
				    timeval_from_usec(&tv, (usec_t)e->shim->conf->drain_timeout *
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

static void
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
static void
exec_end(Exec *e, int status, const char *reason)
{
	const char *limit;

	if (e->ended)
		return;
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
static void
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

/* ---------------------------------------------------------------------------
 * Sandboxes.
 */

static Sandbox *
sandbox_find(Shim *s, const char *id)
{
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		if (streq(sb->id, id))
			return sb;
	return NULL;
}

static Sandbox *
sandbox_free(Sandbox *sb)
{
	if (!sb)
		return NULL;
	if (sb->sock_ev)
		event_free(sb->sock_ev);
	if (sb->pidfd_ev)
		event_free(sb->pidfd_ev);
	safe_close(sb->sock);
	safe_close(sb->pidfd);
	waiters_free(&sb->ensure_waiters);
	waiters_free(&sb->destroy_waiters);
	waiters_free(&sb->reensure_waiters);
	cgroup_free(sb->cg);
	free(sb->fail_msg);
	free(sb->key);
	free(sb->run_id);
	free(sb->thread_id);
	free(sb->next_run_id);
	free(sb->next_thread_id);
	if (sb->pool_dir) {
		pool_dir_release(sb->pool_dir);
		free(sb->pool_dir);
	}
	free(sb);
	return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Sandbox *, sandbox_free);

/* Prepare <sandbox_dir>/<id>/workspace, owned by host_uid: it persists across
 * re-creations of the sandbox for the same key. */
static int
sandbox_prepare_workspace(Shim *s, const char *id, char **ret_path)
{
	const ShimConf *c = s->conf;
	_cleanup_free_ char *dir = NULL, *ws = NULL;
	_cleanup_close_ int fd = -1;
	uint32_t projid;
	int r;

	if (asprintf(&dir, "%s/%s", c->sandbox_dir, id) < 0 ||
	    asprintf(&ws, "%s/workspace", dir) < 0)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return log_error_errno(r, "Failed to create '%s': %m", dir);
	if (mkdir(ws, 0700) < 0 && errno != EEXIST)
		return log_error_errno(errno, "Failed to create '%s': %m", ws);
	/* O_NOFOLLOW + fchown: never chown through a planted symlink. */
	fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return log_error_errno(errno, "Failed to open '%s': %m", ws);
	if (fchown(fd, (uid_t)c->host_uid, (gid_t)c->host_uid) < 0)
		return log_error_errno(errno, "Failed to chown '%s': %m", ws);
	r = quota_workspace_apply(c, id, fd, ws, &projid, s->create_err, sizeof(s->create_err));
	if (r < 0)
		return r;
	*ret_path = TAKE_PTR(ws);
	return 0;
}

/* <sandbox_dir>/<id> belongs to key (sandbox-key.h), else -EEXIST (logged:
 * two keys with one id). create: make and claim the directory when absent. */
static int
sandbox_key_check(Shim *s, const LogCtx *ctx, const char *id, const char *key, bool create)
{
	_cleanup_close_ int dfd = open(s->conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r;

	if (dfd < 0)
		return log_ctx_errno(LOG_ERR, -errno, ctx, "Failed to open '%s': %m",
				     s->conf->sandbox_dir);
	r = sandbox_key_claim(dfd, id, key, strlen(key), SANDBOX_KEY_MAX, create);
	if (r == -EEXIST)
		return log_ctx_errno(LOG_ERR, r, ctx,
				     "Sandbox id collision: the directory of %s belongs to another "
				     "key than '%s'",
				     id, key);
	if (r < 0)
		return log_ctx_errno(LOG_ERR, r, ctx, "Cannot check the key of sandbox %s: %m", id);
	return 0;
}

/* Remove <sandbox_dir>/<id> (the workspace of a key whose sandbox is gone)
 * without following anything the sandbox may have planted. */
static int
sandbox_purge(Shim *s, const char *id)
{
	_cleanup_close_ int dfd = open(s->conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r;

	if (dfd < 0)
		return log_error_errno(errno, "Failed to open '%s': %m", s->conf->sandbox_dir);
	r = snapshot_rm_rf(dfd, id);
	if (r < 0 && r != -ENOENT)
		return log_error_errno(r, "Failed to remove the directory of sandbox %s: %m", id);
	log_debug("Sandbox %s: directory removed", id);
	return 0;
}

/* Forget graves of this name: the cgroup directory is about to be reused. */
static void
graves_forget(Shim *s, const char *name)
{
	for (Grave **pp = &s->graves; *pp;) {
		Grave *g = *pp;
		if (streq(cgroup_name(g->cg), name)) {
			*pp = g->next;
			cgroup_free(g->cg);
			free(g);
		} else
			pp = &g->next;
	}
}

/* Retry removing the cgroups of dead sandboxes until they are empty. */
static void
graves_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	struct timeval tv;

	for (Grave **pp = &s->graves; *pp;) {
		Grave *g = *pp;
		int r = cgroup_remove(g->cg);
		if (r == -EBUSY && ++g->tries < GRAVE_MAX_TRIES) {
			if (g->tries % 50 == 0)
				(void)cgroup_kill(g->cg);
			pp = &g->next;
			continue;
		}
		if (r < 0)
			log_warning_errno(r, "Failed to remove cgroup %s, leaving it: %m",
					  cgroup_name(g->cg));
		*pp = g->next;
		cgroup_free(g->cg);
		free(g);
	}
	if (s->graves && !evtimer_pending(s->grave_timer, NULL))
		evtimer_add(s->grave_timer, timeval_from_usec(&tv, GRAVE_RETRY_USEC));
}

/* Take ownership of cg: remove it now or keep retrying. */
static void
graves_add(Shim *s, Cgroup *cg)
{
	Grave *g;
	int r;

	if (!cg)
		return;
	r = cgroup_remove(cg);
	if (r != -EBUSY) {
		if (r < 0)
			log_warning_errno(r, "Failed to remove cgroup %s: %m", cgroup_name(cg));
		cgroup_free(cg);
		return;
	}
	g = calloc(1, sizeof(*g));
	if (!g) {
		cgroup_free(cg);
		return;
	}
	g->cg = cg;
	g->next = s->graves;
	s->graves = g;
	graves_cb(-1, 0, s);
}

/* Re-adoption (adopt.h): the init's listening socket and the sandbox's record. */
static int
adopt_prepare_spec(Shim *s, Sandbox *sb, SandboxSpec *spec)
{
	LogCtx ctx = sandbox_ctx(sb);
	int r;

	spec->orphan_ms = s->conf->orphan_ms;
	spec->output_window = (uint64_t)s->conf->output_buffer;
	r = adopt_listen(s->rt_dfd, sb->id, &spec->listen_fd);
	if (r >= 0)
		r = adopt_save_sandbox(s->rt_dfd, sb->id, sb->key, sb->run_id, sb->thread_id,
				       sb->cg_id);
	if (r < 0) {
		snprintf(s->create_err, sizeof(s->create_err), "runtime state: %s", strerror(-r));
		log_ctx_errno(LOG_ERR, r, &ctx, "Failed to prepare the re-adoption state: %m");
	}
	return r;
}

/* Create the cgroup (named sb-<cg_id>) and spawn the init of sb with the
 * workspace ws (slave: a pool mount point, see below). Does not link sb. */
static int
sandbox_start(Shim *s, Sandbox *sb, const char *ws, bool slave, const char *cg_id,
	      const LogCtx *ctx)
{
	const ShimConf *c = s->conf;
	SandboxSpec spec;
	int r;

	{
		CgroupError cerr = {""};
		char name[32];
		snprintf(name, sizeof(name), "sb-%s", cg_id);
		graves_forget(s, name);
		r = cgroup_create(s->cgroups, cg_id, &sb->cg, &cerr);
		if (r < 0) {
			snprintf(s->create_err, sizeof(s->create_err), "cgroup: %s",
				 cerr.msg[0] ? cerr.msg : strerror(-r));
			return log_ctx_errno(LOG_ERR, r, ctx, "Failed to set up the cgroup: %s",
					     s->create_err);
		}
	}
	spec = (SandboxSpec){
	    .root_mnt = s->root_mnt,
	    .workspace = ws,
	    .workspace_slave = slave,
	    .ro_binds = c->ro_binds,
	    .etc_entries = c->etc_entries,
	    .sandbox_user = c->sandbox_user,
	    .userns_inotify_instances = c->userns_inotify_instances,
	    .userns_inotify_watches = c->userns_inotify_watches,
	    .userns_namespaces = c->userns_namespaces,
	    .tmp_size = c->tmp_size,
	    .tmp_inodes = c->tmp_inodes,
	    .sandbox_uid = (uid_t)c->sandbox_uid,
	    .host_uid = (uid_t)c->host_uid,
	    .seccomp = &s->seccomp,
	    .seccomp_exec = &s->seccomp_exec,
	    .rlimit_nofile = c->rlimit_nofile,
	    .rlimit_fsize = c->rlimit_fsize,
	    .rlimit_memlock = c->rlimit_memlock,
	    .listen_fd = -1,
	};
	cgroup_spawn_fds(sb->cg, &spec.cgroup_fd, &spec.procs_fds, &spec.n_procs_fds);
	r = adopt_prepare_spec(s, sb, &spec);
	if (r >= 0)
		r = sandbox_spawn(&spec, &sb->pid, &sb->pidfd, &sb->sock);
	safe_close(spec.listen_fd); /* the init has its copy */
	if (r < 0) {
		adopt_forget_sandbox(s->rt_dfd, sb->id);
		snprintf(s->create_err, sizeof(s->create_err), "spawn: %s", strerror(-r));
		graves_add(s, TAKE_PTR(sb->cg));
		return log_ctx_errno(LOG_ERR, r, ctx, "Failed to spawn the sandbox init: %m");
	}
	sb->sock_ev = event_new(s->base, sb->sock, EV_READ | EV_PERSIST, sandbox_sock_cb, sb);
	sb->pidfd_ev = event_new(s->base, sb->pidfd, EV_READ, sandbox_pidfd_cb, sb);
	if (!sb->sock_ev || !sb->pidfd_ev) {
		(void)sandbox_pidfd_kill(sb->pidfd, SIGKILL);
		(void)waitpid(sb->pid, NULL, 0);
		graves_add(s, TAKE_PTR(sb->cg));
		return -ENOMEM;
	}
	event_add(sb->sock_ev, NULL);
	event_add(sb->pidfd_ev, NULL);
	sb->state = SANDBOX_STARTING;
	return 0;
}

static Sandbox *
sandbox_alloc(Shim *s)
{
	Sandbox *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return NULL;
	sb->shim = s;
	sb->pidfd = sb->sock = -1;
	return sb;
}

static int
sandbox_create(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	       Sandbox **ret)
{
	_cleanup_(sandbox_freep) Sandbox *sb = NULL;
	_cleanup_free_ char *ws = NULL;
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	int r;

	sb = sandbox_alloc(s);
	if (!sb)
		return -ENOMEM;
	memcpy(sb->id, id, sizeof(sb->id));
	sb->key = strdup(key);
	if (!sb->key)
		return -ENOMEM;
	set_str(&sb->run_id, run_id);
	set_str(&sb->thread_id, thread_id);

	s->create_err[0] = '\0';
	r = sandbox_prepare_workspace(s, id, &ws);
	if (r < 0) {
		if (!s->create_err[0])
			snprintf(s->create_err, sizeof(s->create_err), "workspace: %s",
				 strerror(-r));
		return r;
	}
	memcpy(sb->cg_id, id, sizeof(sb->cg_id));
	r = sandbox_start(s, sb, ws, false, id, &ctx);
	if (r < 0)
		return r;
	sb->next = s->sandboxes;
	s->sandboxes = sb;
	log_ctx(LOG_DEBUG, &ctx, "Sandbox init spawned as pid %d", (int)sb->pid);
	*ret = TAKE_PTR(sb);
	return 0;
}

/* ---------------------------------------------------------------------------
 * The pool: pool_size sandboxes started ahead and bound to no key, so that a
 * thread's sandbox is ready in the time it takes to bind its workspace (the
 * namespaces, mounts, cgroups and init cost tens of milliseconds; see
 * docs/DESIGN.md "The sandbox pool"). Never shared: a pooled sandbox has run
 * nothing, and once claimed it is an ordinary sandbox of one key.
 *
 * The shim runs in a mount namespace of its own (shim_new), a slave of the
 * host's. There each pooled sandbox has a mount point <sandbox_dir>/.pool/<n>,
 * a bind of the directory onto itself made private and then shared (its own
 * peer group), and the sandbox's /workspace is a slave clone of it
 * (SandboxSpec.workspace_slave). Claiming binds the thread's workspace onto
 * the mount point (nosuid, nodev): the mount propagates into that sandbox only
 * — to the host nothing propagates at all. Its cgroup keeps the random name it
 * was created with (cgroup2 has no rename); the reaper knows every sb-* name.
 */

/* Unmount whatever is stacked on dir, then remove it. */
static void
pool_dir_release(const char *dir)
{
	for (int i = 0; i < 8 && umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
		;
	if (rmdir(dir) < 0 && errno != ENOENT)
		log_warning_errno(errno, "Failed to remove pool mount point '%s': %m", dir);
}

/* <sandbox_dir>/.pool/<cg_id>: named by the sandbox's own random id, never
 * reused. It must outlive us while its sandbox lives: removing a directory
 * detaches every mount on it in every namespace (vfs_rmdir), and the bind of the
 * workspace in the sandbox sits on this directory. */
static int
pool_dir_make(Shim *s, const char *cg_id, char **ret)
{
	_cleanup_free_ char *dir = NULL;

	if (asprintf(&dir, "%s/%s", s->pool_root, cg_id) < 0)
		return -ENOMEM;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return log_error_errno(errno, "Failed to create '%s': %m", dir);
	if (mount(dir, dir, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, dir, NULL, MS_PRIVATE, NULL) < 0 ||
	    mount(NULL, dir, NULL, MS_SHARED, NULL) < 0) {
		int r = -errno;
		pool_dir_release(dir);
		return log_error_errno(r, "Failed to make '%s' a shared mount point: %m", dir);
	}
	*ret = TAKE_PTR(dir);
	return 0;
}

static size_t
list_count(const Sandbox *head)
{
	size_t n = 0;
	for (; head; head = head->next)
		n++;
	return n;
}

static void
list_unlink(Sandbox **head, Sandbox *sb)
{
	for (Sandbox **pp = head; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			return;
		}
}

static int
pool_spawn(Shim *s)
{
	_cleanup_(sandbox_freep) Sandbox *sb = NULL;
	uint8_t rnd[8];
	LogCtx ctx = {0};
	int r;

	sb = sandbox_alloc(s);
	if (!sb)
		return -ENOMEM;
	sb->pooled = true;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -errno;
	for (size_t i = 0; i < sizeof(rnd); i++)
		snprintf(sb->id + 2 * i, 3, "%02x", rnd[i]);
	ctx.sandbox_id = sb->id;
	memcpy(sb->cg_id, sb->id, sizeof(sb->cg_id));
	r = pool_dir_make(s, sb->cg_id, &sb->pool_dir);
	if (r < 0)
		return r;
	r = sandbox_start(s, sb, sb->pool_dir, true, sb->id, &ctx);
	if (r < 0)
		return r;
	sb->next = s->pool;
	s->pool = TAKE_PTR(sb);
	return 0;
}

static void
pool_refill_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	usec_t now = now_usec();

	if (s->stopped || list_count(s->pool) >= (size_t)s->conf->pool_size)
		return;
	if (now < s->pool_retry_at) {
		struct timeval tv;
		event_add(s->pool_ev, timeval_from_usec(&tv, s->pool_retry_at - now));
		return;
	}
	if (pool_spawn(s) < 0) {
		s->pool_failures++;
		s->pool_retry_at =
		    now + MIN((usec_t)1 << MIN(s->pool_failures, 6U), 60U) * USEC_PER_SEC;
	}
	pool_kick(s); /* one per loop turn: the loop stays responsive */
}

static void
pool_kick(Shim *s)
{
	usec_t now = now_usec();
	struct timeval tv;

	if (s->stopped || !s->pool_ev || list_count(s->pool) >= (size_t)s->conf->pool_size)
		return;
	if (now < s->pool_retry_at)
		event_add(s->pool_ev, timeval_from_usec(&tv, s->pool_retry_at - now));
	else if (!event_pending(s->pool_ev, EV_TIMEOUT, NULL))
		event_active(s->pool_ev, EV_TIMEOUT, 0);
}

/* Bind the workspace ws onto the pool mount point dir (nosuid, nodev). */
static int
pool_bind_workspace(const char *dir, const char *ws)
{
	struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
	_cleanup_close_ int fd =
	    open_tree(AT_FDCWD, ws, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);

	if (fd < 0)
		return -errno;
	if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 ||
	    move_mount(fd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return -errno;
	return 0;
}

/* Whether the top mount on /workspace in the mount namespace of pid is the
 * workspace of sandbox id (mountinfo's root field ends with "/<id>/workspace").
 * 0, or -ENOENT when it is not (the bind did not propagate). */
static int
pool_check_workspace(pid_t pid, const char *id)
{
	_cleanup_fclose_ FILE *f = NULL;
	char path[64], want[64], line[4096];
	bool ok = false;

	snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
	snprintf(want, sizeof(want), "/%s/workspace", id);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char root[4096], mnt[4096];
		size_t rl;
		if (sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) != 2 ||
		    !streq(mnt, "/workspace"))
			continue;
		rl = strlen(root);
		/* the last one listed is the top of the stack */
		ok = rl >= strlen(want) && streq(root + rl - strlen(want), want);
	}
	return ok ? 0 : -ENOENT;
}

/* Take a pooled sandbox for key (a ready one):
 * bind the key's workspace in and move it to the sandbox table. Returns 1 and
 * *ret, 0 when the pool has none (or binding failed: the caller creates one),
 * or a negative errno for the workspace (s->create_err says why). */
static int
pool_claim(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	   Sandbox **ret)
{
	_cleanup_free_ char *ws = NULL;
	Sandbox *sb = NULL;
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	int r;

	/* Only a ready one: while its init still builds its root, the clone of the
	 * mount point may be detached, and a bind does not propagate into it. */
	for (Sandbox *p = s->pool; p && !sb; p = p->next)
		if (p->state == SANDBOX_READY)
			sb = p;
	if (!sb)
		return 0;
	s->create_err[0] = '\0';
	r = sandbox_prepare_workspace(s, id, &ws);
	if (r < 0) {
		if (!s->create_err[0])
			snprintf(s->create_err, sizeof(s->create_err), "workspace: %s",
				 strerror(-r));
		return r;
	}
	sb->key = strdup(key);
	if (!sb->key)
		return -ENOMEM;
	r = pool_bind_workspace(sb->pool_dir, ws);
	if (r >= 0) /* fail closed: the sandbox must see it, not the empty mount point */
		r = pool_check_workspace(sb->pid, id);
	if (r >= 0) /* its re-adoption state follows it to its new id */
		r = adopt_rename_sandbox(s->rt_dfd, sb->id, id);
	if (r >= 0) {
		r = adopt_save_sandbox(s->rt_dfd, id, key, run_id, thread_id, sb->cg_id);
		if (r < 0)
			(void)adopt_rename_sandbox(s->rt_dfd, id, sb->id);
	}
	if (r < 0) {
		log_ctx_errno(LOG_WARNING, r, &ctx,
			      "Failed to hand pooled sandbox %s over (workspace bind, runtime "
			      "state), creating one instead: %m",
			      sb->id);
		free(sb->key);
		sb->key = NULL;
		sandbox_kill(sb);
		return 0;
	}
	list_unlink(&s->pool, sb);
	sb->pooled = false;
	memcpy(sb->id, id, sizeof(sb->id));
	set_str(&sb->run_id, run_id);
	set_str(&sb->thread_id, thread_id);
	sb->next = s->sandboxes;
	s->sandboxes = sb;
	log_ctx(LOG_DEBUG, &ctx, "Sandbox %s taken from the pool (init pid %d)", id, (int)sb->pid);
	/* Refill a little later: building a sandbox keeps this loop busy for a few
	 * milliseconds, and the exec that follows a claim should not wait for it. */
	s->pool_retry_at = MAX(s->pool_retry_at, now_usec() + POOL_REFILL_DELAY_USEC);
	pool_kick(s);
	*ret = sb;
	return 1;
}

/* A pooled sandbox died (setup failed, killed, or the shim stops). */
static void
pool_dead(Sandbox *sb)
{
	Shim *s = sb->shim;

	sandbox_sock_cb(sb->sock, EV_READ, sb);
	(void)waitpid(sb->pid, NULL, WNOHANG);
	list_unlink(&s->pool, sb);
	adopt_forget_sandbox(s->rt_dfd, sb->id);
	if (!s->stopped && !sb->destroy_requested) {
		if (!sb->fail_msg)
			log_warning("Pooled sandbox %s died unexpectedly", sb->id);
		s->pool_failures++;
		s->pool_retry_at =
		    now_usec() + MIN((usec_t)1 << MIN(s->pool_failures, 6U), 60U) * USEC_PER_SEC;
	}
	graves_add(s, TAKE_PTR(sb->cg));
	sandbox_free(sb);
	pool_kick(s);
}

/* Obtain a sandbox for key: from the pool, else a new one. *ret_ready: it is
 * serving already (the caller replies now rather than waiting for READY). */
static int
sandbox_obtain(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	       Sandbox **ret, bool *ret_ready)
{
	int r = pool_claim(s, key, id, run_id, thread_id, ret);

	if (r < 0)
		return r;
	if (r > 0) {
		*ret_ready = (*ret)->state == SANDBOX_READY;
		if (*ret_ready)
			sandbox_log_created(*ret);
		return 0;
	}
	*ret_ready = false;
	return sandbox_create(s, key, id, run_id, thread_id, ret);
}

/* Whether the init still runs (a pidfd polls readable once it exited; that
 * works for an adopted init too, which is not our child). */
static bool
sandbox_alive(Sandbox *sb)
{
	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};

	return poll(&p, 1, 0) == 0;
}

/* Wait until the init exited (and reap it when it is our child). */
static void
sandbox_wait_exit(Sandbox *sb)
{
	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	if (!sb->adopted)
		while (waitpid(sb->pid, NULL, 0) < 0 && errno == EINTR)
			;
}

static void
sandbox_kill(Sandbox *sb)
{
	if (sb->state != SANDBOX_DYING || !sb->destroy_requested) {
		sb->destroy_requested = true;
		sb->state = SANDBOX_DYING;
	}
	/* Every process of the namespace dies with its init. ESRCH: already gone.
	 * cgroup.kill (or freezer + SIGKILL) on top, for anything that escaped the
	 * pid namespace's teardown. */
	(void)sandbox_pidfd_kill(sb->pidfd, SIGKILL);
	if (sb->cg)
		(void)cgroup_kill(sb->cg);
	for (Exec *e = sb->shim->execs; e; e = e->next)
		if (e->sandbox == sb)
			e->kill_requested = true;
}

/* Idle: serving, no exec running and none about to come (an ENSURE waiting or
 * answered without its EXEC_START yet). Only live execs are activity: what an
 * ended exec left running (a harness with keep_processes, or a client that
 * did not ask for kill_leftovers) never keeps a sandbox, or its slot, busy —
 * it is stopped with the sandbox (sleep_after_ms, or for a queued request). */
static bool
sandbox_idle(Sandbox *sb)
{
	if (sb->state != SANDBOX_READY || sb->ensure_waiters || now_usec() < sb->reserved_until ||
	    snapjob_find(sb->shim->jobs, sb->id))
		return false;
	for (Exec *e = sb->shim->execs; e; e = e->next)
		if (e->sandbox == sb && !e->ended)
			return false;
	return true;
}

/* Stop a sandbox's processes (idle, or to make room): the workspace stays. */
static void
sandbox_stop(Sandbox *sb, const char *why)
{
	LogCtx ctx = sandbox_ctx(sb);

	log_ctx(LOG_INFO, &ctx, "Stopping sandbox %s (%s)", sb->id, why);
	sb->stopping = true;
	sb->state = SANDBOX_DYING;
	(void)sandbox_pidfd_kill(sb->pidfd, SIGKILL);
	if (sb->cg)
		(void)cgroup_kill(sb->cg);
}

static Queued *
queued_free(Queued *q)
{
	if (!q)
		return NULL;
	if (q->timer)
		event_free(q->timer);
	free(q->key);
	free(q->run_id);
	free(q->thread_id);
	free(q);
	return NULL;
}

static void
queue_unlink(Shim *s, Queued *q)
{
	for (Queued **pp = &s->queue; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			return;
		}
}

/* Tell each waiting requester its place when it changed (1 = next). */
static void
queue_push_positions(Shim *s)
{
	uint64_t pos = 0;

	for (Queued *q = s->queue; q; q = q->next) {
		MpWriter w;
		if (++pos == q->position)
			continue;
		q->position = pos;
		mp_writer_init(&w);
		mp_w_map(&w, q->run_id ? 3 : 2);
		mp_w_str(&w, "key", q->key);
		if (q->run_id)
			mp_w_str(&w, "run_id", q->run_id);
		mp_w_uint(&w, "position", pos);
		(void)peer_push(q->conn->peer, MSG_SANDBOX_QUEUED, &w);
		mp_writer_done(&w);
	}
}

static void
queue_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	Queued *q = arg;
	Shim *s = q->shim;
	char msg[160];

	snprintf(msg, sizeof(msg),
		 "no sandbox slot within queue_timeout_ms=%" PRId64 " (max_instances=%" PRId64 ")",
		 s->conf->queue_timeout, s->conf->max_instances);
	{
		LogCtx ctx = {.run_id = q->run_id, .thread_id = q->thread_id};
		log_ctx(LOG_INFO, &ctx, "Queued request for '%s' timed out", q->key);
	}
	(void)peer_reply_error(q->conn->peer, q->req_id, -ETIMEDOUT, msg);
	queue_unlink(s, q);
	queued_free(q);
	queue_push_positions(s);
}

static int
queue_add(Shim *s, Conn *c, uint64_t req_id, const char *key, const char *run_id,
	  const char *thread_id)
{
	Queued *q = calloc(1, sizeof(*q)), **pp;
	struct timeval tv;

	if (!q)
		return -ENOMEM;
	q->shim = s;
	q->conn = c;
	q->req_id = req_id;
	q->key = strdup(key);
	q->run_id = run_id ? strdup(run_id) : NULL;
	q->thread_id = thread_id ? strdup(thread_id) : NULL;
	q->timer = evtimer_new(s->base, queue_timeout_cb, q);
	if (!q->key || (run_id && !q->run_id) || (thread_id && !q->thread_id) || !q->timer) {
		queued_free(q);
		return -ENOMEM;
	}
	if (s->conf->queue_timeout > 0)
		evtimer_add(q->timer,
			    timeval_from_usec(&tv, (usec_t)s->conf->queue_timeout * USEC_PER_MSEC));
	for (pp = &s->queue; *pp; pp = &(*pp)->next)
		;
	*pp = q;
	{
		LogCtx ctx = {.run_id = run_id, .thread_id = thread_id};
		log_ctx(LOG_INFO, &ctx,
			"Request for '%s' queued: %zu sandboxes live, max_instances %" PRId64, key,
			list_count(s->sandboxes), s->conf->max_instances);
	}
	queue_push_positions(s);
	queue_kick(s);
	return 0;
}

/* How many sandboxes (live or being created) serve thread_id. */
static size_t
thread_sandboxes(Shim *s, const char *thread_id)
{
	size_t n = 0;

	if (!thread_id)
		return 0;
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		if (sb->state != SANDBOX_DYING && sb->thread_id && streq(sb->thread_id, thread_id))
			n++;
	return n;
}

/* The queued request to serve next. One whose key has a serving sandbox by now
 * needs no slot (the first of a thread's queued runs created it): it goes
 * first, whatever its place. Otherwise, when a slot is free, round-robin over
 * threads: the oldest request of the thread holding the fewest sandboxes, so
 * that one thread's many runs never hold back another thread's. */
static Queued *
queue_next(Shim *s, bool slot_free)
{
	Queued *best = NULL;
	size_t best_n = SIZE_MAX;

	for (Queued *q = s->queue; q; q = q->next) {
		char id[17];
		Sandbox *sb;
		if (shim_sandbox_id(q->key, strlen(q->key), id) >= 0 &&
		    (sb = sandbox_find(s, id)) && sb->state != SANDBOX_DYING)
			return q;
	}
	if (!slot_free)
		return NULL;
	for (Queued *q = s->queue; q; q = q->next) {
		size_t n = thread_sandboxes(s, q->thread_id);
		if (n < best_n) {
			best = q;
			best_n = n;
		}
	}
	return best;
}

/* Serve queued requests while they can be; if there is no slot, stop the
 * least recently used idle sandbox to make one (never one with a live exec;
 * processes an ended exec left behind do not count, see sandbox_idle). */
static void
queue_kick(Shim *s)
{
	while (s->queue && !s->stopped) {
		Queued *q =
		    queue_next(s, list_count(s->sandboxes) < (size_t)s->conf->max_instances);
		if (q) {
			int k;
			queue_unlink(s, q);
			k = ensure_key(s, q->conn, q->req_id, q->key, q->run_id, q->thread_id,
				       false);
			if (k < 0)
				(void)peer_reply_error(q->conn->peer, q->req_id, k,
						       "sandbox creation failed");
			queued_free(q);
			continue;
		}
		/* the idle sandbox used longest ago (last_used, stamped when its
		 * exec ends: the periodic scan's idle_since has a 200 ms grain, and
		 * a tie went to whichever came first in the list) */
		Sandbox *victim = NULL;
		usec_t best = 0;
		for (Sandbox *sb = s->sandboxes; sb; sb = sb->next) {
			if (sb->state == SANDBOX_DYING)
				return; /* a slot is being freed already */
			if (!sandbox_idle(sb))
				continue;
			usec_t since = sb->last_used;
			if (!victim || since < best) {
				victim = sb;
				best = since;
			}
		}
		if (victim)
			sandbox_stop(victim, "idle, its slot is needed by a queued request");
		break;
	}
	queue_push_positions(s);
}

/* Periodic: stop sandboxes idle for sleep_after_ms; make room for the queue. */
static void
idle_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	usec_t now = now_usec();
	struct timeval tv;

	for (Sandbox *sb = s->sandboxes, *next; sb; sb = next) {
		next = sb->next;
		if (sb->leaves_pending)
			exec_leaves_prune(sb);
		if (!sandbox_idle(sb)) {
			sb->idle_since = 0;
			continue;
		}
		if (!sb->idle_since)
			sb->idle_since = now;
		else if (s->conf->sleep_after > 0 &&
			 now - sb->idle_since >= (usec_t)s->conf->sleep_after * USEC_PER_MSEC)
			sandbox_stop(sb, "idle for sleep_after_ms");
	}
	queue_kick(s);
	evtimer_add(s->idle_timer, timeval_from_usec(&tv, IDLE_SCAN_USEC));
}

static void
sandbox_fail_ensures(Sandbox *sb)
{
	char msg[600];

	snprintf(msg, sizeof(msg), "sandbox setup failed: %s",
		 sb->fail_msg		 ? sb->fail_msg
		 : sb->destroy_requested ? "destroyed during setup"
					 : "the sandbox init died");
	while (sb->ensure_waiters) {
		Waiter *w = sb->ensure_waiters;
		sb->ensure_waiters = w->next;
		(void)peer_reply_error(w->conn->peer, w->req_id, sb->fail_err ? sb->fail_err : -EIO,
				       msg);
		free(w);
	}
}

static void
sandbox_log_created(Sandbox *sb)
{
	LogCtx ctx = sandbox_ctx(sb);
	char ll[32] = "no Landlock";

	if (sb->landlock_abi > 0)
		snprintf(ll, sizeof(ll), "Landlock ABI %d", sb->landlock_abi);
	if (sb->pool_dir)
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_CREATED,
			      "Sandbox %s created (%s; from the pool, cgroup sb-%s)", sb->id, ll,
			      sb->cg_id);
	else
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_CREATED, "Sandbox %s created (%s)",
			      sb->id, ll);
}

static void
sandbox_on_msg(Sandbox *sb, const InitMsg *m, const char *payload, size_t len)
{
	LogCtx ctx = sandbox_ctx(sb);
	Exec *e;

	switch (m->type) {
	case INIT_MSG_READY:
		if (sb->state != SANDBOX_STARTING)
			break;
		sb->state = SANDBOX_READY;
		sb->landlock_abi = MAX(m->status, 0);
		if (sb->pooled) {
			sb->shim->pool_failures = 0;
			log_debug("Pooled sandbox %s ready", sb->id);
			break;
		}
		sandbox_log_created(sb);
		while (sb->ensure_waiters) {
			Waiter *w = sb->ensure_waiters;
			sb->ensure_waiters = w->next;
			reply_ensure(w->conn, w->req_id, sb->id, true);
			free(w);
		}
		break;
	case INIT_MSG_SETUP_FAILED:
		free(sb->fail_msg);
		sb->fail_msg = strndup(payload, len);
		sb->fail_err = -(m->err > 0 ? m->err : EIO);
		log_ctx(LOG_ERR, &ctx, "Sandbox %s setup failed: %s", sb->id,
			sb->fail_msg ? sb->fail_msg : "?");
		sb->state = SANDBOX_DYING;
		sandbox_fail_ensures(sb);
		break;
	case INIT_MSG_STARTED:
		e = exec_find(sb->shim, m->exec_id);
		if (!e || e->sandbox != sb)
			break;
		e->pid = m->pid;
		if (e->start_req_id && e->conn) {
			MpWriter w;
			mp_writer_init(&w);
			mp_w_map(&w, 1);
			mp_w_uint(&w, "exec_id", e->id);
			(void)peer_reply(e->conn->peer, e->start_req_id, &w);
			mp_writer_done(&w);
		}
		e->start_req_id = 0;
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
		if (e->start_req_id && e->conn) {
			MpWriter w;
			mp_writer_init(&w);
			mp_w_map(&w, 1);
			mp_w_uint(&w, "exec_id", e->id);
			(void)peer_reply(e->conn->peer, e->start_req_id, &w);
			mp_writer_done(&w);
		}
		e->start_req_id = 0;
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

static void
sandbox_sock_cb(evutil_socket_t fd, short what, void *arg)
{
	Sandbox *sb = arg;
	char buf[sizeof(InitMsg) + 1024];

	for (;;) {
		int fds[3];
		size_t nfds = 0;
		InitMsg m;
		ssize_t n = fd_recv(sb->sock, buf, sizeof(buf), fds, ELEMENTSOF(fds), &nfds);

		for (size_t i = 0; i < nfds; i++)
			close(fds[i]); /* the init never sends fds */
		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n <= 0) {
			/* The init is exiting; the pidfd tells when the namespace is gone. */
			event_del(sb->sock_ev);
			if (sb->state != SANDBOX_DYING)
				sb->state = SANDBOX_DYING;
			return;
		}
		if ((size_t)n < sizeof(InitMsg))
			continue;
		memcpy(&m, buf, sizeof(m));
		sandbox_on_msg(sb, &m, buf + sizeof(m), (size_t)n - sizeof(m));
	}
}

/* The init is dead and so is every process of the sandbox. */
static void
sandbox_dead(Sandbox *sb)
{
	Shim *s = sb->shim;
	LogCtx ctx = sandbox_ctx(sb);
	Waiter *re;
	Exec *next;

	if (sb->pooled) {
		pool_dead(sb);
		return;
	}
	/* Drain the socket: an EXITED may still sit there before the EOF. */
	sandbox_sock_cb(sb->sock, EV_READ, sb);
	if (!sb->adopted) /* else not our child: its parent now reaps it */
		(void)waitpid(sb->pid, NULL, WNOHANG);
	list_unlink(&s->sandboxes, sb);
	adopt_forget_sandbox(s->rt_dfd, sb->id);
	if (sb->destroy_requested)
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_DESTROYED, "Sandbox %s destroyed",
			      sb->id);
	else if (sb->stopping)
		log_ctx(LOG_INFO, &ctx, "Sandbox %s stopped", sb->id);
	else if (!sb->fail_msg)
		log_ctx(LOG_WARNING, &ctx, "Sandbox %s init died unexpectedly", sb->id);

	for (Exec *e = s->execs; e; e = next) {
		const char *limit;
		next = e->next;
		if (e->sandbox != sb)
			continue;
		limit = exec_limit_reason(e); /* an OOM group kill takes the init too */
		e->sandbox = NULL;
		if (e->start_req_id && e->conn)
			(void)peer_reply_error(e->conn->peer, e->start_req_id, -ESRCH,
					       "the sandbox died before the exec started");
		e->start_req_id = 0;
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
	graves_add(s, TAKE_PTR(sb->cg));
	netfwd_sandbox_gone(s->net, sb->id);
	if (sb->purge) {
		if (sb->pool_dir) { /* its workspace is still bound there: let go first */
			pool_dir_release(sb->pool_dir);
			free(sb->pool_dir);
			sb->pool_dir = NULL;
		}
		(void)sandbox_purge(s, sb->id);
	}
	sandbox_fail_ensures(sb);
	while (sb->destroy_waiters) {
		Waiter *w = sb->destroy_waiters;
		sb->destroy_waiters = w->next;
		reply_empty(w->conn, w->req_id);
		free(w);
	}

	/* ENSUREs that came in while it was dying get a fresh sandbox now. */
	re = TAKE_PTR(sb->reensure_waiters);
	if (re && !s->stopped) {
		Sandbox *nsb = NULL;
		bool ready = false;
		int r = sandbox_obtain(s, sb->key, sb->id, sb->next_run_id, sb->next_thread_id,
				       &nsb, &ready);
		if (r >= 0)
			nsb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
		if (r >= 0 && ready) {
			for (Waiter *w = re; w; w = w->next)
				reply_ensure(w->conn, w->req_id, nsb->id, true);
		} else if (r >= 0) {
			nsb->ensure_waiters = re;
			re = NULL;
		} else
			for (Waiter *w = re; w; w = w->next)
				(void)peer_reply_error(w->conn->peer, w->req_id, r,
						       "sandbox creation failed");
	}
	waiters_free(&re);
	sandbox_free(sb);
	queue_kick(s); /* a slot is free */
}

static void
sandbox_pidfd_cb(evutil_socket_t fd, short what, void *arg)
{
	sandbox_dead(arg);
}

/* ---------------------------------------------------------------------------
 * Request handlers. Each returns < 0 for "answer ERROR with this errno".
 */

/* Serve an ENSURE for key now: reuse, wait for a starting one, or create. With
 * may_queue, a new sandbox beyond max_instances waits in the FIFO queue
 * instead. Replies (or registers a waiter) itself; < 0 = reply ERROR. */
static int
ensure_key(Shim *s, Conn *c, uint64_t req_id, const char *key, const char *run_id,
	   const char *thread_id, bool may_queue)
{
	char id[17];
	Sandbox *sb;
	int k;

	k = shim_sandbox_id(key, strlen(key), id);
	if (k < 0) {
		(void)peer_reply_error(c->peer, req_id, k, "key must be 1..256 bytes without NUL");
		return 0;
	}
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	sb = sandbox_find(s, id);
	if (sb && !streq(sb->key, key))
		return log_ctx_errno(LOG_ERR, -EEXIST, &ctx, "Sandbox id collision for '%s'", key);
	if (!sb) {
		/* No live one: the directory on disk must be this key's too. */
		k = sandbox_key_check(s, &ctx, id, key, true);
		if (k < 0) {
			(void)peer_reply_error(c->peer, req_id, k,
					       k == -EEXIST ? "sandbox id collision: the workspace "
							      "belongs to another key"
							    : "cannot check the sandbox's key");
			return 0;
		}
	}
	if (sb && sb->state == SANDBOX_READY && !sandbox_alive(sb))
		sb->state = SANDBOX_DYING;
	{
		/* A restore of the key, or a snapshot of it with no serving sandbox:
		 * wait for its end (snapshot section). */
		SnapJob *j = snapjob_find(s->jobs, id);
		if (j &&
		    (snapjob_kind(j) == SNAPJOB_RESTORE || !sb || sb->state != SANDBOX_READY)) {
			log_ctx(LOG_INFO, &ctx, "Request for '%s' waits for its snapshot/restore",
				key);
			return snapjob_hold(j, c, req_id, key, run_id, thread_id);
		}
	}
	if (sb) {
		sb->idle_since = 0; /* in use */
		sb->last_used = now_usec();
		sb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
		switch (sb->state) {
		case SANDBOX_READY:
			if (run_id && (!sb->run_id || !streq(run_id, sb->run_id)))
				log_ctx(LOG_INFO, &ctx, "Sandbox %s resumed", id);
			set_str(&sb->run_id, run_id);
			set_str(&sb->thread_id, thread_id);
			reply_ensure(c, req_id, id, false);
			return 0;
		case SANDBOX_STARTING:
			set_str(&sb->run_id, run_id);
			set_str(&sb->thread_id, thread_id);
			return waiter_add(&sb->ensure_waiters, c, req_id);
		case SANDBOX_DYING:
			set_str(&sb->next_run_id, run_id);
			set_str(&sb->next_thread_id, thread_id);
			return waiter_add(&sb->reensure_waiters, c, req_id);
		}
	}
	if (may_queue && (s->queue || list_count(s->sandboxes) >= (size_t)s->conf->max_instances))
		return queue_add(s, c, req_id, key, run_id, thread_id);
	bool ready = false;
	k = sandbox_obtain(s, key, id, run_id, thread_id, &sb, &ready);
	if (k >= 0)
		sb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
	if (k >= 0 && ready) {
		reply_ensure(c, req_id, id, true);
		return 0;
	}
	if (k < 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "sandbox creation failed: %s",
			 s->create_err[0] ? s->create_err : strerror(-k));
		(void)peer_reply_error(c->peer, req_id, k, msg);
		return 0;
	}
	k = waiter_add(&sb->ensure_waiters, c, req_id);
	if (k >= 0)
		log_ctx(LOG_DEBUG, &ctx, "Creating sandbox %s", id);
	return k;
}

static int
handle_sandbox_ensure(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	const char *key = NULL, *run_id = NULL, *thread_id = NULL;
	MpReader r;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "key", &key);
	mp_read_str_opt(&r, "run_id", &run_id, NULL);
	mp_read_str_opt(&r, "thread_id", &thread_id, NULL);
	k = r.err < 0 ? -EBADMSG : ensure_key(c->shim, c, f->req_id, key, run_id, thread_id, true);
	mp_reader_done(&r);
	return k;
}

static int
handle_sandbox_destroy(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	const char *id = NULL;
	bool purge = false;
	char idbuf[17];
	MpReader r;
	Sandbox *sb;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &id);
	mp_read_bool_opt(&r, "purge", &purge, false);
	if (r.err < 0) {
		mp_reader_done(&r);
		return -EBADMSG;
	}
	if (strlen(id) != 16 || strspn(id, "0123456789abcdef") != 16) {
		mp_reader_done(&r);
		return purge ? -EINVAL : -ENOENT; /* no sandbox has such an id */
	}
	memcpy(idbuf, id, sizeof(idbuf));
	sb = sandbox_find(c->shim, idbuf);
	mp_reader_done(&r);
	if (!sb && purge) {
		k = sandbox_purge(c->shim, idbuf);
		if (k < 0)
			return k;
		reply_empty(c, f->req_id);
		return 0;
	}
	if (!sb) {
		/* Gone already (stopped when idle, or its init died): what was asked
		 * holds. Only an id no sandbox can have is an error (above). */
		reply_empty(c, f->req_id);
		return 0;
	}
	k = waiter_add(&sb->destroy_waiters, c, f->req_id);
	if (k < 0)
		return k;
	sb->purge = sb->purge || purge;
	sandbox_kill(sb);
	return 0;
}

/* Validate argv/env/cwd and pack them as the init wants them. */
static int
exec_pack(const char *cwd, char **argv, char **env, char **ret, size_t *ret_len, uint32_t *ret_argc,
	  uint32_t *ret_envc)
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

static int
handle_exec_start(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const char *id = NULL, *cwd = NULL, *run_id = NULL;
	char **argv = NULL, **env = NULL;
	const void *in = NULL;
	size_t in_len = 0, msg_len = 0;
	_cleanup_free_ char *msg = NULL;
	int child_fds[4] = {-1, -1, -1, -1}; /* [3]: the exec's cgroup leaf */
	Exec *e = NULL;
	InitMsg m = {.type = INIT_MSG_EXEC};
	MpReader r;
	Sandbox *sb;
	int64_t timeout_ms = -1;
	bool kill_leftovers = false;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &id);
	mp_read_strv(&r, "argv", &argv);
	mp_read_strv(&r, "env", &env);
	mp_read_str(&r, "cwd", &cwd);
	mp_read_bin_opt(&r, "stdin", &in, &in_len);
	mp_read_str_opt(&r, "run_id", &run_id, NULL);
	mp_read_int_opt(&r, "timeout_ms", &timeout_ms, -1);
	mp_read_bool_opt(&r, "kill_leftovers", &kill_leftovers, false);
	if (r.err < 0) {
		k = -EBADMSG;
		goto out;
	}
	/* present but negative is an error; absent (or nil) means the default */
	if ((timeout_ms < 0 && mp_map_get(f->body, "timeout_ms") &&
	     mp_map_get(f->body, "timeout_ms")->type != MSGPACK_OBJECT_NIL) ||
	    timeout_ms > INT32_MAX) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "timeout_ms out of range");
		k = 0;
		goto out;
	}
	if (timeout_ms < 0)
		timeout_ms = s->conf->exec_timeout;
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
	k = exec_pack(cwd, argv, env, &msg, &msg_len, &m.argc, &m.envc);
	if (k < 0) {
		(void)peer_reply_error(p, f->req_id, k,
				       k == -E2BIG ? "argv and env too large"
						   : "bad argv, env (K=V) or cwd (absolute path)");
		k = 0;
		goto out;
	}

	e = calloc(1, sizeof(*e));
	if (!e) {
		k = -ENOMEM;
		goto out;
	}
	e->shim = s;
	e->sandbox = sb;
	e->conn = c;
	e->kill_leftovers = kill_leftovers;
	sb->idle_since = 0;
	e->fds[0] = e->fds[1] = e->fds[2] = -1;
	e->drain_timer = evtimer_new(s->base, exec_drain_cb, e);
	e->bp_timer = evtimer_new(s->base, exec_bp_cb, e);
	e->hold_timer = evtimer_new(s->base, exec_hold_cb, e);
	e->window = (uint64_t)s->conf->output_buffer;
	memcpy(e->sandbox_id, sb->id, sizeof(e->sandbox_id));
	if (!run_id)
		run_id = sb->run_id; /* the run the sandbox serves */
	if (run_id)
		e->run_id = strdup(run_id);
	if (sb->thread_id)
		e->thread_id = strdup(sb->thread_id);
	if (!e->drain_timer || !e->bp_timer || !e->hold_timer || (run_id && !e->run_id) ||
	    (sb->thread_id && !e->thread_id)) {
		k = -ENOMEM;
		goto out;
	}
	if (timeout_ms > 0) {
		e->timeout_timer = evtimer_new(s->base, exec_timeout_cb, e);
		if (!e->timeout_timer) {
			k = -ENOMEM;
			goto out;
		}
	}
	/* Baseline of the limit counters: a hit after this is this exec's. */
	if (sb->cg && cgroup_counters(sb->cg, &e->oom_base, &e->pids_base) >= 0)
		e->have_base = true;
	{
		int pp[2];
		/* stdin: a pipe, the child reads pp[0]. */
		if (pipe2(pp, O_CLOEXEC) < 0) {
			k = -errno;
			goto out;
		}
		child_fds[STREAM_STDIN] = pp[0];
		e->fds[STREAM_STDIN] = pp[1];
		(void)fd_nonblock(pp[1], 1);
	}
	/* stdout/stderr: memfds the init fills from the pipes it gives the child;
	 * no sandbox process ever holds them. F_SEAL_SHRINK: offsets only grow. */
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++) {
		e->fds[i] = memfd_create(i == STREAM_STDOUT ? "exec-stdout" : "exec-stderr",
					 MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (e->fds[i] < 0 ||
		    fcntl(e->fds[i], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
			k = -errno;
			goto out;
		}
		child_fds[i] = e->fds[i]; /* sent, not closed: the same open file */
	}
	e->id = ++s->next_exec_id;
	adopt_counter_store(s->counter_fd, e->id);
	m.exec_id = e->id;
	memcpy(msg, &m, sizeof(m));
	k = exec_leaf_create(e, &child_fds[3]);
	if (k < 0) {
		char em[400];
		snprintf(em, sizeof(em), "exec_cgroup: %s", s->create_err);
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
	if (in_len > 0) {
		e->stdin_data = malloc(in_len);
		e->ev[STREAM_STDIN] = event_new(s->base, e->fds[STREAM_STDIN],
						EV_WRITE | EV_PERSIST, exec_stdin_cb, e);
		if (!e->stdin_data || !e->ev[STREAM_STDIN]) {
			k = -ENOMEM;
			goto out;
		}
		memcpy(e->stdin_data, in, in_len);
		e->stdin_len = in_len;
		event_add(e->ev[STREAM_STDIN], NULL);
	} else
		exec_close_stream(e, STREAM_STDIN); /* EOF right away */

	e->start_req_id = f->req_id; /* answered on STARTED / START_FAILED */
	e->next = s->execs;
	s->execs = e;
	if (e->timeout_timer) {
		struct timeval tv;
		evtimer_add(e->timeout_timer,
			    timeval_from_usec(&tv, (usec_t)timeout_ms * USEC_PER_MSEC));
	}
	{
		LogCtx ctx = exec_ctx(e);
		log_ctx(LOG_DEBUG, &ctx, "exec %" PRIu64 ": '%s'", e->id, argv[0]);
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
	safe_close(child_fds[STREAM_STDIN]);
	safe_close(child_fds[3]);
	mp_strv_free(argv);
	mp_strv_free(env);
	mp_reader_done(&r);
	return k;
}

static int
handle_exec_kill(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	uint64_t id = 0;
	int64_t sig = 0;
	MpReader r;
	Exec *e;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &id);
	mp_read_int(&r, "signal", &sig);
	mp_reader_done(&r);
	if (r.err < 0)
		return -EBADMSG;
	if (sig <= 0 || sig >= NSIG)
		return -EINVAL;
	e = exec_find(c->shim, id);
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

static int
handle_exec_attach(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	uint64_t id = 0, off[3] = {0};
	MpReader r;
	Exec *e;

	mp_reader_init(&r, f->body);
	mp_read_uint(&r, "exec_id", &id);
	mp_read_uint(&r, "stdout_offset", &off[STREAM_STDOUT]);
	mp_read_uint(&r, "stderr_offset", &off[STREAM_STDERR]);
	mp_reader_done(&r);
	if (r.err < 0)
		return -EBADMSG;
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
	e->start_req_id = 0;
	evtimer_del(e->hold_timer);
	reply_empty(c, f->req_id);
	for (int i = STREAM_STDOUT; i <= STREAM_STDERR; i++)
		exec_replay(e, i, off[i]);
	exec_maybe_finish(e); /* ended and drained: EXEC_EXIT now, and release */
	return 0;
}

static int
handle_exec_list(Peer *p, const Frame *f, void *userdata)
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

static int
handle_sandbox_stats(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	const char *id = NULL;
	uint64_t cpu = 0, procs = 0, exec_id = 0, exec_cpu = 0;
	bool have_exec_cpu = false;
	MpReader r;
	MpWriter w;
	Sandbox *sb;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &id);
	if (mp_map_get(f->body, "exec_id"))
		mp_read_uint(&r, "exec_id", &exec_id);
	if (r.err < 0) {
		mp_reader_done(&r);
		return -EBADMSG;
	}
	sb = sandbox_find(c->shim, id);
	mp_reader_done(&r);
	if (!sb || !sb->cg)
		return -ENOENT;
	k = cgroup_stats(sb->cg, &cpu, &procs);
	if (k < 0)
		return k;
	/* the exec's own CPU (its leaf): what other execs, or processes an ended
	 * one left behind, use is no progress of this one */
	if (exec_id) {
		Exec *e = exec_find(c->shim, exec_id);
		have_exec_cpu = e && e->sandbox == sb && e->leaf &&
				cgroup_leaf_cpu(sb->cg, exec_id, &exec_cpu) >= 0;
	}
	mp_writer_init(&w);
	mp_w_map(&w, have_exec_cpu ? 3 : 2);
	mp_w_uint(&w, "cpu_usec", cpu);
	mp_w_uint(&w, "procs", procs);
	if (have_exec_cpu)
		mp_w_uint(&w, "exec_cpu_usec", exec_cpu);
	(void)peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return 0;
}

/* SANDBOX_FORWARD and SANDBOX_PROXY: the common part. */
static int
handle_listen(Peer *p, const Frame *f, void *userdata, bool proxy)
{
	Conn *c = userdata;
	const char *id = NULL, *run_id = NULL, *target = NULL;
	char **allow = NULL, **allow_private = NULL, err[256] = "";
	uint16_t port = 0;
	int64_t want = 0;
	size_t n_allow = 0;
	MpReader r;
	MpWriter w;
	Sandbox *sb;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &id);
	mp_read_str(&r, "run_id", &run_id);
	if (proxy) {
		mp_read_strv(&r, "allow", &allow);
		mp_read_strv_opt(&r, "allow_private", &allow_private);
	} else
		mp_read_str(&r, "target", &target);
	mp_read_int_opt(&r, "port", &want, 0); /* re-listen on exactly this port */
	if (r.err < 0) {
		k = -EBADMSG;
		goto out;
	}
	if (want < 0 || want > UINT16_MAX) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "port out of range");
		k = 0;
		goto out;
	}
	port = (uint16_t)want;
	if (run_id[0] == '\0' || strlen(run_id) > 128) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "run_id must be 1..128 bytes");
		k = 0;
		goto out;
	}
	sb = sandbox_find(c->shim, id);
	if (!sb || sb->state != SANDBOX_READY) {
		k = -ENOENT;
		goto out;
	}
	LogCtx ctx = {.run_id = run_id, .thread_id = sb->thread_id, .sandbox_id = sb->id};
	if (proxy) {
		size_t n_private = 0;
		while (allow[n_allow])
			n_allow++;
		while (allow_private && allow_private[n_private])
			n_private++;
		k = netfwd_proxy(c->shim->net, sb->pidfd, &ctx, allow, n_allow, allow_private,
				 n_private, &port, err, sizeof(err));
	} else
		k = netfwd_forward(c->shim->net, sb->pidfd, &ctx, target, &port, err, sizeof(err));
	if (k < 0) {
		if (k != -EINVAL)
			log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot open a %s listener: %s",
				      proxy ? "proxy" : "forward", err);
		(void)peer_reply_error(p, f->req_id, k, err[0] ? err : strerror(-k));
		k = 0;
		goto out;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_uint(&w, "port", port);
	(void)peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	k = 0;
out:
	mp_strv_free(allow);
	mp_strv_free(allow_private);
	mp_reader_done(&r);
	return k;
}

static int
handle_sandbox_forward(Peer *p, const Frame *f, void *userdata)
{
	return handle_listen(p, f, userdata, false);
}

static int
handle_sandbox_proxy(Peer *p, const Frame *f, void *userdata)
{
	return handle_listen(p, f, userdata, true);
}

static int
handle_sandbox_unlisten(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	const char *id = NULL, *run_id = NULL;
	uint64_t out = 0, in = 0;
	MpReader r;
	MpWriter w;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "sandbox_id", &id);
	mp_read_str(&r, "run_id", &run_id);
	if (r.err < 0) {
		mp_reader_done(&r);
		return -EBADMSG;
	}
	/* No sandbox check: it may be gone already; its counters are still here. */
	(void)netfwd_unlisten(c->shim->net, id, run_id, &out, &in);
	mp_reader_done(&r);
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_uint(&w, "bytes_out", out);
	mp_w_uint(&w, "bytes_in", in);
	(void)peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return 0;
}

/* ---------------------------------------------------------------------------
 * Snapshots (snapshot.h), run as jobs (snapjob.h): the archive and the unpack
 * (with the record's check) happen in a child process and the loop keeps
 * serving. While a job of a key runs, another SNAPSHOT/RESTORE of it is
 * -EBUSY; its ENSUREs are held (ensure_key) until the job ended — for a
 * snapshot only when the sandbox is not serving, for a restore always, so that
 * a run started meanwhile gets the restored workspace — and an EXEC_START into
 * a sandbox being restored is -EBUSY. A live sandbox stays frozen for the
 * whole archive and is thawed when the job ends, however it ends. The swap
 * (RENAME_EXCHANGE), the pruning (backups_keep) and the replies happen here.
 */

typedef struct SnapOp {
	Shim *s;
	char id[17];
	char *key, *label, *bdir, *record;
	int ws_fd;   /* snapshot: the workspace (-1: none); closed once the child has it */
	bool frozen; /* snapshot: the live sandbox was frozen for it */
	int dfd;     /* restore: <sandbox_dir>/<id>; the staging directory is made in it */
	char staging[48];
	uid_t uid;
	uint64_t max_bytes, max_entries;
} SnapOp;

static SnapOp *
snapop_free(SnapOp *o)
{
	if (!o)
		return NULL;
	safe_close(o->ws_fd);
	safe_close(o->dfd);
	free(o->key);
	free(o->label);
	free(o->bdir);
	free(o->record);
	free(o);
	return NULL;
}

static char *
backups_dir(Shim *s)
{
	char *p = NULL;
	return asprintf(&p, "%s/backups", s->conf->shared.state_dir) < 0 ? NULL : p;
}

static bool
label_ok(const char *l)
{
	if (strlen(l) > SNAPSHOT_LABEL_MAX)
		return false;
	for (const unsigned char *p = (const unsigned char *)l; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* Start-up: the temporaries (.<uuid>.tar.zst.tmp) of snapshot jobs killed with
 * a previous instance (kill -9, crash, power loss) are removed; the jobs of a
 * key are serialised and none runs yet. */
static void
backups_clean_tmp(Shim *s)
{
	_cleanup_free_ char *bdir = backups_dir(s);
	DIR *d = bdir ? opendir(bdir) : NULL;
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		/* sandbox ids: 16 lowercase hex digits */
		if (strlen(de->d_name) != 16 || strspn(de->d_name, "0123456789abcdef") != 16)
			continue;
		int k = snapshot_prune(bdir, de->d_name, 0, NULL, NULL);
		if (k < 0)
			log_warning_errno(k, "Cannot clean the backups of %s: %m", de->d_name);
	}
	closedir(d);
}

/* ENSUREs held during a job: served now (or refused when stopping). */
static void
snap_release_held(Shim *s, SnapJob *j)
{
	SnapHeld *held = snapjob_take_held(j);

	for (SnapHeld *h = held; h; h = h->next) {
		Conn *c = h->conn;
		int k = s->stopped
			    ? -ESHUTDOWN
			    : ensure_key(s, c, h->req_id, h->key, h->run_id, h->thread_id, true);
		if (k < 0)
			(void)peer_reply_error(c->peer, h->req_id, k,
					       k == -ESHUTDOWN ? "containerd-shim is stopping"
							       : "sandbox creation failed");
	}
	snapheld_free_all(held);
}

static void
snap_reply_error(SnapJob *j, int err, const char *text)
{
	Conn *c = snapjob_conn(j);

	if (c)
		(void)peer_reply_error(c->peer, snapjob_req_id(j), err, text);
}

/* Child: archive the workspace. */
static int
snapshot_child(void *arg, char **ret_text)
{
	SnapOp *o = arg;
	SnapshotErr err = {""};
	int k;

	k = snapshot_create_limited(o->bdir, o->id, o->ws_fd, o->label, o->max_bytes,
				    o->max_entries, ret_text, &err);
	if (k == -SNAPSHOT_NOT_RESTORABLE) {
		/* What the restore would refuse is refused now, not at restore time. */
		if (asprintf(ret_text, "not_restorable: %s", err.msg) < 0)
			*ret_text = NULL;
		return -EINVAL;
	}
	if (k < 0) {
		if (asprintf(ret_text, "snapshot failed: %s", err.msg[0] ? err.msg : strerror(-k)) <
		    0)
			*ret_text = NULL;
		return k == -ENOMEM ? k : -EIO;
	}
	return 0;
}

/* The uuid in a record we made ("id":"…"), for snapshot_prune's spare. */
static void
record_uuid(const char *rec, char out[static 37])
{
	const char *p = strstr(rec, "\"id\":\"");

	out[0] = '\0';
	if (p && strlen(p + 6) > 36) {
		memcpy(out, p + 6, 36);
		out[36] = '\0';
		if (!snapshot_uuid_ok(out))
			out[0] = '\0';
	}
}

static void
snapshot_done(SnapJob *j, int err, const char *text, void *userdata)
{
	SnapOp *o = userdata;
	Shim *s = o->s;
	LogCtx ctx = {.thread_id = o->key, .sandbox_id = o->id};
	Sandbox *sb = o->frozen ? sandbox_find(s, o->id) : NULL;
	unsigned pruned = 0;
	char spare[37] = "";
	int k;

	if (sb && sb->cg) {
		k = cgroup_freeze(sb->cg, false);
		if (k < 0)
			log_ctx_errno(LOG_ERR, k, &ctx, "Cannot thaw sandbox %s: %m", o->id);
	}
	if (err >= 0)
		record_uuid(text, spare);
	/* Always: the temporary of a killed job; after a success: backups_keep. */
	k = snapshot_prune(o->bdir, o->id, err < 0 ? 0 : (unsigned)s->conf->backups_keep,
			   spare[0] ? spare : NULL, &pruned);
	if (k < 0)
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot prune the backups of %s: %m", o->id);
	else if (pruned)
		log_ctx(LOG_INFO, &ctx, "Pruned %u old backup(s) of %s (backups_keep=%" PRId64 ")",
			pruned, o->id, s->conf->backups_keep);
	if (err < 0) {
		log_ctx_errno(LOG_WARNING, err, &ctx, "Snapshot of %s failed: %s: %m", o->id, text);
		snap_reply_error(j, err, text[0] ? text : "snapshot failed");
	} else {
		Conn *c = snapjob_conn(j);
		log_ctx(LOG_INFO, &ctx, "Snapshot of sandbox %s: %s", o->id, text);
		if (c) {
			MpWriter w;
			mp_writer_init(&w);
			mp_w_map(&w, 1);
			mp_w_str(&w, "record", text);
			(void)peer_reply(c->peer, snapjob_req_id(j), &w);
			mp_writer_done(&w);
		}
	}
	snap_release_held(s, j);
	snapop_free(o);
}

/* What a snapshot or restore of key must pass before its job starts: none of
 * the key's running, its directory is the key's own (sandbox-key.h),
 * snapshot_max_jobs not reached, no file API change of the key in flight.
 * false after replying the error. */
static bool
job_may_start(Shim *s, Peer *p, const Frame *f, LogCtx *ctx, const char *id, const char *key,
	      bool restore)
{
	int k;

	if (snapjob_find(s->jobs, id)) {
		(void)peer_reply_error(p, f->req_id, -EBUSY,
				       "busy: a snapshot or restore of this thread is in progress");
		return false;
	}
	k = sandbox_key_check(s, ctx, id, key, restore);
	if (k < 0) {
		(void)peer_reply_error(p, f->req_id, k,
				       k == -EEXIST ? "sandbox id collision: the workspace belongs "
						      "to another key"
						    : "cannot check the sandbox's key");
		return false;
	}
	if (snapjobs_count(s->jobs) >= (size_t)s->conf->snapshot_max_jobs) {
		(void)peer_reply_error(p, f->req_id, -EAGAIN,
				       "too_many_jobs: snapshot_max_jobs snapshot/restore jobs are "
				       "running; retry later");
		return false;
	}
	if (shim_files_changing(s->files, id)) {
		(void)peer_reply_error(p, f->req_id, -EBUSY,
				       "busy: a file API change of this thread is in progress");
		return false;
	}
	return true;
}

static int
handle_sandbox_snapshot(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const char *key = NULL, *label = NULL;
	_cleanup_free_ char *ws = NULL;
	SnapOp *o = NULL;
	SnapJob *j = NULL;
	Sandbox *sb;
	char id[17];
	MpReader r;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "key", &key);
	mp_read_str_opt(&r, "label", &label, NULL);
	if (r.err < 0) {
		k = -EBADMSG;
		goto out;
	}
	if (shim_sandbox_id(key, strlen(key), id) < 0 || (label && !label_ok(label))) {
		(void)peer_reply_error(
		    p, f->req_id, -EINVAL,
		    "key must be 1..256 bytes, label printable and at most 256 bytes");
		k = 0;
		goto out;
	}
	LogCtx ctx = {.thread_id = key, .sandbox_id = id};
	if (!job_may_start(s, p, f, &ctx, id, key, false)) {
		k = 0;
		goto out;
	}
	o = calloc(1, sizeof(*o));
	if (!o || asprintf(&ws, "%s/%s/workspace", s->conf->sandbox_dir, id) < 0) {
		ws = NULL;
		k = -ENOMEM;
		goto out;
	}
	*o = (SnapOp){.s = s,
		      .ws_fd = -1,
		      .dfd = -1,
		      .max_bytes = (uint64_t)s->conf->restore_max_bytes,
		      .max_entries = (uint64_t)s->conf->restore_max_entries};
	memcpy(o->id, id, sizeof(id));
	if (!(o->key = strdup(key)) || (label && !(o->label = strdup(label))) ||
	    !(o->bdir = backups_dir(s))) {
		k = -ENOMEM;
		goto out;
	}
	/* A key that never had a sandbox has an empty workspace: an empty archive. */
	o->ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (o->ws_fd < 0 && errno != ENOENT) {
		k = -errno;
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot open the workspace of %s: %m", id);
		(void)peer_reply_error(p, f->req_id, k, "cannot open the workspace");
		k = 0;
		goto out;
	}
	sb = sandbox_find(s, id);
	if (sb && sb->cg && sb->state != SANDBOX_DYING) {
		k = cgroup_freeze(sb->cg, true);
		o->frozen = true; /* thaw even after a partial freeze */
		if (k < 0) {
			log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot freeze sandbox %s: %m", id);
			(void)cgroup_freeze(sb->cg, false);
			(void)peer_reply_error(
			    p, f->req_id, -EIO,
			    "cannot freeze the sandbox for a consistent snapshot");
			k = 0;
			goto out;
		}
	}
	k = snapjob_start(s->jobs,
			  &(SnapJobSpec){.kind = SNAPJOB_SNAPSHOT,
					 .id = id,
					 .timeout_ms = s->conf->snapshot_timeout,
					 .keep_fds = &o->ws_fd,
					 .n_keep_fds = o->ws_fd >= 0 ? 1 : 0,
					 .fn = snapshot_child,
					 .arg = o,
					 .done = snapshot_done,
					 .userdata = o,
					 .conn = c,
					 .req_id = f->req_id},
			  &j);
	if (k < 0) {
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot start the snapshot job of %s: %m", id);
		if (o->frozen && sb->cg)
			(void)cgroup_freeze(sb->cg, false);
		(void)peer_reply_error(p, f->req_id, k, "snapshot failed: cannot start the job");
		k = 0;
		goto out;
	}
	o->ws_fd = safe_close(o->ws_fd); /* the child has it */
	log_ctx(LOG_DEBUG, &ctx, "Snapshot of %s running as pid %d", id, snapjob_pid(j));
	o = NULL; /* snapshot_done() frees it */
	k = 0;
out:
	snapop_free(o);
	mp_reader_done(&r);
	return k;
}

/* Kill the sandbox's processes and wait for them, now (the pid namespace is
 * gone once its init can be reaped). The caller then calls sandbox_dead(). */
static void
sandbox_kill_wait(Sandbox *sb)
{
	sandbox_kill(sb);
	sandbox_wait_exit(sb);
}

/* Child: check the record, unpack the archive into the staging directory. */
static int
restore_child(void *arg, char **ret_text)
{
	SnapOp *o = arg;
	SnapshotErr err = {""};
	_cleanup_close_ int afd = -1;
	int k;

	const char *code;

	/* not_a_backup_record: the id is not one of ours for this thread;
	 * restore_rejected: it is, but its archive is damaged or holds what the
	 * restorer refuses; "backup_not_found: …" (pruned) says so itself. */
	k = snapshot_verify(o->bdir, o->id, o->record, strlen(o->record), &afd, &err);
	code = k == -EINVAL    ? "not_a_backup_record: "
	       : k == -EBADMSG ? "restore_rejected: "
	       : k == -ENOENT  ? ""
			       : "restore failed: ";
	if (k >= 0) {
		k = snapshot_unpack(afd, o->dfd, o->staging, o->uid, o->uid, o->max_bytes,
				    o->max_entries, &err);
		code = k == -EINVAL ? "restore_rejected: " : "restore failed: ";
	}
	if (k == -EBADMSG)
		k = -EINVAL;
	if (k < 0 && asprintf(ret_text, "%s%s", code, err.msg[0] ? err.msg : strerror(-k)) < 0)
		*ret_text = NULL;
	return k;
}

typedef struct Cleanup {
	int dfd;
	char name[48];
} Cleanup;

static int
cleanup_child(void *arg, char **ret_text)
{
	Cleanup *cl = arg;
	return snapshot_rm_rf(cl->dfd, cl->name);
}

static void
cleanup_done(SnapJob *j, int err, const char *text, void *userdata)
{
	Cleanup *cl = userdata;

	if (err == -ESHUTDOWN) /* killed by shim_stop(): finish here, not leave half a tree */
		err = snapshot_rm_rf(cl->dfd, cl->name);
	if (err < 0)
		log_warning_errno(err, "Cannot remove %s: %s: %m", cl->name, text);
	safe_close(cl->dfd);
	free(cl);
}

/* Remove name (a staging or old workspace tree) below dfd in a child: a large
 * tree takes a while. Synchronously when no job can start (stopping). */
static void
snap_remove_tree(Shim *s, int dfd, const char *name)
{
	Cleanup *cl = calloc(1, sizeof(*cl));
	int k = -ENOMEM;

	if (cl && (cl->dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3)) >= 0) {
		snprintf(cl->name, sizeof(cl->name), "%s", name);
		k = snapjob_start(s->jobs,
				  &(SnapJobSpec){.kind = SNAPJOB_CLEANUP,
						 .keep_fds = &cl->dfd,
						 .n_keep_fds = 1,
						 .fn = cleanup_child,
						 .arg = cl,
						 .done = cleanup_done,
						 .userdata = cl},
				  NULL);
	}
	if (k >= 0)
		return;
	if (cl)
		safe_close(cl->dfd);
	free(cl);
	k = snapshot_rm_rf(dfd, name);
	if (k < 0)
		log_warning_errno(k, "Cannot remove %s: %m", name);
}

/* Start-up: the staging trees (.restore-*) of restores killed with a previous
 * instance, partial or holding the swapped-out workspace, are removed (by
 * cleanup children: a tree may be large). */
static void
staging_clean(Shim *s)
{
	DIR *d = opendir(s->conf->sandbox_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		_cleanup_close_ int dfd = -1;
		struct dirent *e;
		DIR *sd;
		int fd;
		if (strlen(de->d_name) != 16 || strspn(de->d_name, "0123456789abcdef") != 16)
			continue;
		dfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		fd = dfd >= 0 ? fcntl(dfd, F_DUPFD_CLOEXEC, 3) : -1;
		sd = fd >= 0 ? fdopendir(fd) : NULL;
		if (!sd) {
			safe_close(fd);
			continue;
		}
		while ((e = readdir(sd)))
			if (strncmp(e->d_name, ".restore-", 9) == 0 && strlen(e->d_name) == 17) {
				log_notice("Removing %s/%s, left by a restore that was killed",
					   de->d_name, e->d_name);
				snap_remove_tree(s, dfd, e->d_name);
			}
		closedir(sd);
	}
	closedir(d);
}

static void
restore_done(SnapJob *j, int err, const char *text, void *userdata)
{
	SnapOp *o = userdata;
	Shim *s = o->s;
	LogCtx ctx = {.thread_id = o->key, .sandbox_id = o->id};
	Sandbox *sb;
	int k;

	if (err < 0) {
		if (err == -EINVAL)
			log_ctx(LOG_WARNING, &ctx, "Restore of %s refused: %s", o->id, text);
		else if (err == -ENOENT)
			log_ctx(LOG_INFO, &ctx, "Restore of %s refused: %s", o->id, text);
		else
			log_ctx_errno(err == -ETIME || err == -ECANCELED || err == -ESHUTDOWN
					  ? LOG_WARNING
					  : LOG_ERR,
				      err, &ctx, "Restore of %s failed: %s", o->id, text);
		snap_reply_error(j, err, text[0] ? text : "restore failed");
		/* A killed job leaves its partial staging directory. */
		if (err != -EINVAL && err != -ENOENT)
			snap_remove_tree(s, o->dfd, o->staging);
		goto out;
	}
	/* The live sandbox binds the old directory: its processes go first. */
	sb = sandbox_find(s, o->id);
	if (sb) {
		log_ctx(LOG_INFO, &ctx, "Destroying sandbox %s for a restore", o->id);
		sandbox_kill_wait(sb);
	}
	k = 0;
	if (renameat2(o->dfd, o->staging, o->dfd, "workspace", RENAME_EXCHANGE) < 0 &&
	    (errno != ENOENT ||
	     renameat2(o->dfd, o->staging, o->dfd, "workspace", RENAME_NOREPLACE) < 0))
		k = -errno;
	/* After the swap: an ENSURE that waited for the dying sandbox gets its
	 * successor on the restored workspace. */
	if (sb)
		sandbox_dead(sb);
	if (k < 0) {
		log_ctx_errno(LOG_ERR, k, &ctx, "Cannot swap in the restored workspace: %m");
		snap_reply_error(j, k, "restore failed: cannot swap in the restored workspace");
		snap_remove_tree(s, o->dfd, o->staging);
		goto out;
	}
	(void)fsync(o->dfd);
	log_ctx(LOG_INFO, &ctx, "Workspace of sandbox %s restored", o->id);
	if (snapjob_conn(j))
		reply_empty(snapjob_conn(j), snapjob_req_id(j));
	snap_remove_tree(s, o->dfd, o->staging); /* the old workspace now */
out:
	snap_release_held(s, j);
	snapop_free(o);
}

static int
handle_sandbox_restore(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const ShimConf *conf = s->conf;
	const char *key = NULL, *record = NULL;
	_cleanup_free_ char *dir = NULL;
	SnapOp *o = NULL;
	SnapJob *j = NULL;
	char id[17];
	unsigned char b[4];
	MpReader r;
	int k;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "key", &key);
	mp_read_str(&r, "record", &record);
	if (r.err < 0) {
		k = -EBADMSG;
		goto out;
	}
	if (shim_sandbox_id(key, strlen(key), id) < 0) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "key must be 1..256 bytes");
		k = 0;
		goto out;
	}
	LogCtx ctx = {.thread_id = key, .sandbox_id = id};
	if (!job_may_start(s, p, f, &ctx, id, key, true)) {
		k = 0;
		goto out;
	}
	o = calloc(1, sizeof(*o));
	if (!o || asprintf(&dir, "%s/%s", conf->sandbox_dir, id) < 0) {
		dir = NULL;
		k = -ENOMEM;
		goto out;
	}
	*o = (SnapOp){.s = s,
		      .ws_fd = -1,
		      .dfd = -1,
		      .uid = (uid_t)conf->host_uid,
		      .max_bytes = (uint64_t)conf->restore_max_bytes,
		      .max_entries = (uint64_t)conf->restore_max_entries};
	memcpy(o->id, id, sizeof(id));
	if (!(o->key = strdup(key)) || !(o->record = strdup(record)) ||
	    !(o->bdir = backups_dir(s))) {
		k = -ENOMEM;
		goto out;
	}
	k = mkdir_p(dir, 0700);
	if (k < 0)
		goto out;
	o->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (o->dfd < 0) {
		k = -errno;
		goto out;
	}
	if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
		k = -EIO;
		goto out;
	}
	snprintf(o->staging, sizeof(o->staging), ".restore-%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3]);
	/* Unpack first: a refused archive leaves the sandbox and its workspace alone. */
	k = snapjob_start(s->jobs,
			  &(SnapJobSpec){.kind = SNAPJOB_RESTORE,
					 .id = id,
					 .timeout_ms = conf->snapshot_timeout,
					 .keep_fds = &o->dfd,
					 .n_keep_fds = 1,
					 .fn = restore_child,
					 .arg = o,
					 .done = restore_done,
					 .userdata = o,
					 .conn = c,
					 .req_id = f->req_id},
			  &j);
	if (k < 0) {
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot start the restore job of %s: %m", id);
		(void)peer_reply_error(p, f->req_id, k, "restore failed: cannot start the job");
		k = 0;
		goto out;
	}
	log_ctx(LOG_DEBUG, &ctx, "Restore of %s running as pid %d", id, snapjob_pid(j));
	o = NULL; /* restore_done() frees it */
	k = 0;
out:
	snapop_free(o);
	mp_reader_done(&r);
	return k;
}

/* SANDBOX_FILE: the workspace file API (shim-files.c). */
static bool
workspace_busy(Shim *s, const char *id)
{
	return snapjob_find(s->jobs, id) != NULL;
}

static int
handle_sandbox_file(Peer *p, const Frame *f, void *userdata)
{
	Conn *c = userdata;
	return shim_files_handle(c->shim->files, c->shim, c->shim->conf, sandbox_prepare_workspace,
				 workspace_busy, p, f, c);
}

static const PeerHandler shim_handlers[_MSG_TYPE_MAX] = {
    [MSG_SANDBOX_ENSURE] = handle_sandbox_ensure,
    [MSG_SANDBOX_DESTROY] = handle_sandbox_destroy,
    [MSG_EXEC_START] = handle_exec_start,
    [MSG_EXEC_KILL] = handle_exec_kill,
    [MSG_SANDBOX_STATS] = handle_sandbox_stats,
    [MSG_EXEC_ATTACH] = handle_exec_attach,
    [MSG_EXEC_LIST] = handle_exec_list,
    [MSG_SANDBOX_FORWARD] = handle_sandbox_forward,
    [MSG_SANDBOX_PROXY] = handle_sandbox_proxy,
    [MSG_SANDBOX_UNLISTEN] = handle_sandbox_unlisten,
    [MSG_SANDBOX_SNAPSHOT] = handle_sandbox_snapshot,
    [MSG_SANDBOX_RESTORE] = handle_sandbox_restore,
    [MSG_SANDBOX_FILE] = handle_sandbox_file,
};

/* ---------------------------------------------------------------------------
 * Connections.
 */

static void
conn_on_close(Peer *p, int err, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;

	log_debug_errno(err, "Connection from %s closed: %m", peer_role_name(peer_remote_role(p)));
	/* Execs keep running; their output is buffered (bounded) for EXEC_ATTACH. */
	for (Exec *e = s->execs; e; e = e->next)
		if (e->conn == c) {
			e->conn = NULL;
			e->start_req_id = 0;
			if (e->paused)
				exec_bp_cb(-1, 0, e);
		}
	for (Queued *q = s->queue, *next; q; q = next) {
		next = q->next;
		if (q->conn == c) {
			queue_unlink(s, q);
			queued_free(q);
		}
	}
	queue_push_positions(s);
	snapjobs_forget_conn(s->jobs, c);
	shim_files_forget_conn(s->files, c);
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next) {
		waiters_drop_conn(&sb->ensure_waiters, c);
		waiters_drop_conn(&sb->destroy_waiters, c);
		waiters_drop_conn(&sb->reensure_waiters, c);
	}
	for (Conn **pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	peer_free(p); /* deferred by the peer until its dispatch unwinds */
	free(c);
}

static const PeerOps shim_peer_ops = {
    .local_role = ROLE_SHIM,
    .handlers = shim_handlers,
    .on_close = conn_on_close,
};

/* SO_PEERCRED (+ SO_PEERGROUPS) check: root, our own uid, or — with
 * socket_group — a peer whose primary or supplementary groups include it. The
 * credentials are the ones of connect() time, so there is no /proc race.
 * Returns 1 (accept), 0 (refuse) or a negative errno. */
static int
peer_allowed(Shim *s, int fd, uid_t *ret_uid)
{
	struct ucred uc;
	socklen_t l = sizeof(uc);
	gid_t gid, small[64];
	_cleanup_free_ gid_t *big = NULL;
	gid_t *groups = small;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
		return -errno;
	*ret_uid = uc.uid;
	if (uc.uid == 0 || uc.uid == geteuid())
		return 1;
	if (s->socket_gid < 0)
		return 0;
	gid = (gid_t)s->socket_gid;
	if (uc.gid == gid)
		return 1;
	l = sizeof(small);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, small, &l) < 0) {
		if (errno != ERANGE || l == 0 || l > 65536 * sizeof(gid_t))
			return -errno;
		big = malloc(l);
		if (!big)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, big, &l) < 0)
			return -errno;
		groups = big;
	}
	for (size_t i = 0; i < l / sizeof(gid_t); i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/* Bind the control socket: mode 0600 (root:root), or 0660 root:<gid> when
 * gid >= 0. The runtime directory may belong to another user (the shared
 * /run/runwarden), so nothing here follows a path after bind(): the group and
 * the mode are given at creation (fsgid and umask), never by chown/chmod of a
 * name that could have been swapped for a symlink meanwhile. */
static int
control_listen(const char *path, int64_t gid)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	gid_t old_fsgid = 0;
	mode_t old_umask;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	if (gid >= 0) {
		old_fsgid = (gid_t)setfsgid((gid_t)gid);
		if ((gid_t)setfsgid((gid_t)gid) != (gid_t)gid) {
			(void)setfsgid(old_fsgid);
			return -EPERM;
		}
	}
	old_umask = umask(gid >= 0 ? 0117 : 0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old_umask);
	if (gid >= 0)
		(void)setfsgid(old_fsgid);
	if (r < 0)
		return r;
	if (listen(fd, SOMAXCONN) < 0)
		return -errno;
	return TAKE_FD(fd);
}

static void
listen_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;

	for (;;) {
		int cfd = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		uid_t uid = (uid_t)-1;
		Conn *c;
		int r;

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warning_errno(errno, "accept() failed, ignoring: %m");
			return;
		}
		r = peer_allowed(s, cfd, &uid);
		if (r <= 0) {
			log_warning("Refusing a connection from uid %d", r < 0 ? -1 : (int)uid);
			close(cfd);
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(cfd);
			continue;
		}
		c->shim = s;
		r = peer_new(s->base, cfd, &shim_peer_ops, c, (size_t)s->conf->shared.max_frame,
			     &c->peer);
		if (r < 0) {
			log_warning_errno(r, "Failed to set up a connection, ignoring: %m");
			free(c);
			continue;
		}
		c->next = s->conns;
		s->conns = c;
	}
}

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
	e->sandbox = sb;
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
	sb->next = s->sandboxes;
	s->sandboxes = sb;
	for (size_t i = 0; i < a->n_execs; i++) {
		AdoptedExec *x = &a->execs[i];
		Exec *e = exec_adopt(s, sb, x, a->window);
		if (!e) {
			InitMsg m = {.type = INIT_MSG_KILL, .exec_id = x->id, .status = SIGKILL};
			(void)fd_send(sb->sock, &m, sizeof(m), NULL, 0);
			continue;
		}
		e->next = s->execs;
		s->execs = e;
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

static bool
adopt_keep_cgroup(const char *name, void *ud)
{
	Shim *s = ud;
	if (strlen(name) <= 3)
		return false;
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		if (streq(sb->cg_id, name + 3))
			return true;
	return false;
}

/* Pool mount points a predecessor left: keep those of the sandboxes we
 * re-adopted (see pool_dir_make), remove the rest. */
static void
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
static int
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

/* ---------------------------------------------------------------------------
 * Lifecycle.
 */

static int
check_ro_binds(const char *list)
{
	_cleanup_free_ char *buf = strdup(list);
	char *save = NULL;

	if (!buf)
		return -ENOMEM;
	for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (t[0] != '/' || t[1] == '\0' || strstr(t, "/.") || streq(t, "/proc") ||
		    streq(t, "/dev") || streq(t, "/tmp") || streq(t, "/workspace"))
			return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
					       "ro_binds: '%s' is not an allowed path", t);
		else if (streq(t, "/etc") || strncmp(t, "/etc/", 5) == 0)
			return log_error_errno(
			    SYNTHETIC_ERRNO(EINVAL),
			    "ro_binds: '%s': the sandbox's /etc is generated; name "
			    "what to carry over from the host's in etc_entries",
			    t);
	return 0;
}

int
shim_new(struct event_base *base, const ShimConf *conf, Shim **ret)
{
	Shim *s;
	int r;

	r = check_ro_binds(conf->ro_binds);
	if (r < 0)
		return r;
	{
		char msg[512];
		if (!shim_conf_userns_budget(conf, msg, sizeof(msg)))
			log_warning("Sandboxes at their own limits could exhaust host_uid's: %s; "
				    "one sandbox could then starve the others (lower the "
				    "userns_max_* keys or raise the host's)",
				    msg);
	}
	/* The inits inherit our credentials: no host group (root!) may ride along into
	 * a sandbox, and setgroups() is denied in there. */
	if (setgroups(0, NULL) < 0 && getgroups(0, NULL) > 0)
		return log_error_errno(errno, "Failed to drop supplementary groups: %m");

	/* A mount namespace of our own, a slave of the host's: the pool's mount
	 * points (and anything else we mount) never show on the host, and they go
	 * away with us however we end. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return log_error_errno(errno, "Failed to enter a mount namespace of our own: %m");

	s = calloc(1, sizeof(*s));
	if (!s)
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	s->base = base;
	s->conf = conf;
	s->listen_fd = -1;
	s->rt_dfd = s->counter_fd = -1;
	s->grave_timer = evtimer_new(base, graves_cb, s);
	s->idle_timer = evtimer_new(base, idle_cb, s);
	s->pool_ev = evtimer_new(base, pool_refill_cb, s);
	if (s->pool_ev)
		(void)event_priority_set(s->pool_ev, 2); /* background (main.c) */
	s->jobs = snapjobs_new(base);
	if (!s->grave_timer || !s->idle_timer || !s->pool_ev || !s->jobs ||
	    netfwd_new(base, &s->net) < 0 || shim_files_new(base, &s->files) < 0) {
		shim_free(s);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	if (asprintf(&s->sock_path, "%s/%s", conf->shared.runtime_dir, RW_SOCK_SHIM) < 0 ||
	    /* The mount point of each sandbox's root tmpfs, in the shim's own 0700
	     * sandbox_dir: runtime_dir may be shared with (and owned by) the
	     * unprivileged daemons' user. */
	    asprintf(&s->root_mnt, "%s/.sandbox-root", conf->sandbox_dir) < 0 ||
	    asprintf(&s->pool_root, "%s/.pool", conf->sandbox_dir) < 0) {
		s->sock_path = s->root_mnt = s->pool_root = NULL;
		shim_free(s);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	r = mkdir_p(conf->shared.runtime_dir, 0755);
	if (r < 0) {
		log_error_errno(r, "Failed to create '%s': %m", conf->shared.runtime_dir);
		shim_free(s);
		return r;
	}
	r = mkdir_p(conf->sandbox_dir, 0700);
	if (r >= 0)
		r = mkdir_p(s->root_mnt, 0700);
	if (r >= 0) /* what a predecessor left there is cleaned after re-adoption */
		r = mkdir_p(s->pool_root, 0700);
	if (r < 0) {
		log_error_errno(r, "Failed to create '%s': %m", s->root_mnt);
		shim_free(s);
		return r;
	}
	s->socket_gid = -1;
	if (conf->socket_group[0] != '\0') {
		struct group gr, *res = NULL;
		char buf[4096];
		r = getgrnam_r(conf->socket_group, &gr, buf, sizeof(buf), &res);
		if (r != 0 || !res || gr.gr_gid == 0) {
			shim_free(s);
			return log_error_errno(r ? r : SYNTHETIC_ERRNO(ENOENT),
					       "socket_group: no group '%s' (or it is gid 0)",
					       conf->socket_group);
		}
		s->socket_gid = (int64_t)gr.gr_gid;
	}
	s->listen_fd = control_listen(s->sock_path, s->socket_gid);
	if (s->listen_fd < 0) {
		r = log_error_errno(s->listen_fd, "Failed to listen on '%s': %m", s->sock_path);
		s->listen_fd = -1;
		shim_free(s);
		return r;
	}
	s->listen_ev = event_new(base, s->listen_fd, EV_READ | EV_PERSIST, listen_cb, s);
	if (!s->listen_ev || event_add(s->listen_ev, NULL) < 0) {
		shim_free(s);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Failed to watch the socket");
	}
	/* Fail closed: without the filter or the cgroups no sandbox may exist. (After
	 * listen(): clients may connect already, they are served once we run.) */
	r = seccomp_policy_compile_variant(SECCOMP_POLICY_INIT, &s->seccomp);
	if (r >= 0)
		r = seccomp_policy_compile_variant(SECCOMP_POLICY_EXEC_LAYER, &s->seccomp_exec);
	if (r < 0) {
		shim_free(s);
		return log_error_errno(r, "Failed to compile the seccomp filter: %m");
	}
	{
		CgroupError cerr = {""};
		r = cgroup_host_new(conf, &s->cgroups, &cerr, false);
		if (r < 0) {
			log_error_errno(r, "Failed to set up cgroups: %s",
					cerr.msg[0] ? cerr.msg : strerror(-r));
			shim_free(s);
			return r;
		}
		log_info("Using cgroup %s; seccomp filter of %u instructions",
			 cgroup_host_describe(s->cgroups), (unsigned)s->seccomp.len);
		if (!cgroup_host_has_leaves(s->cgroups))
			log_warning("No cgroup2 hierarchy: execs get no cgroup of their own, "
				    "EXEC_KILL and exec timeouts kill the process group only "
				    "(a setsid'd descendant survives them)");
		r = shim_adopt(s);
		if (r < 0) {
			shim_free(s);
			return r;
		}
		r = cgroup_host_reap_stale(s->cgroups, adopt_keep_cgroup, s);
		if (r > 0)
			log_notice("Reaped %d sandbox(es) left by a previous instance", r);
		pool_dirs_clean(s);
		/* Snapshot/restore jobs run in a cgroup of their own: fail closed. */
		r = cgroup_jobs_create(s->cgroups, &s->jobs_cg, &cerr);
		if (r < 0) {
			log_error_errno(r, "Failed to set up the snapshot jobs' cgroup: %s",
					cerr.msg[0] ? cerr.msg : strerror(-r));
			shim_free(s);
			return r;
		}
		{
			int cgfd;
			const int *fds;
			size_t n;
			cgroup_spawn_fds(s->jobs_cg, &cgfd, &fds, &n);
			snapjobs_set_cgroup(s->jobs, fds, n);
		}
		if (cgroup_host_mode(s->cgroups) == CGROUP_MODE_V2 &&
		    !cgroup_host_has_io(s->cgroups))
			log_warning("No io controller delegated: snapshot/restore jobs get no "
				    "io.weight (snapshot_io_weight), only nice 10 and cpu.max");
		backups_clean_tmp(s);
		staging_clean(s);
	}
	pool_kick(s);
	{
		struct timeval tv;
		evtimer_add(s->idle_timer, timeval_from_usec(&tv, IDLE_SCAN_USEC));
	}
	*ret = s;
	return 0;
}

/* Stopping or handing over: every queued SANDBOX_ENSURE gets -ESHUTDOWN. */
static void
queue_refuse_all(Shim *s)
{
	while (s->queue) {
		Queued *q = s->queue;
		s->queue = q->next;
		(void)peer_reply_error(q->conn->peer, q->req_id, -ESHUTDOWN,
				       "containerd-shim is stopping");
		queued_free(q);
	}
}

void
shim_stop(Shim *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = true;
	if (s->listen_ev) {
		event_free(s->listen_ev);
		s->listen_ev = NULL;
	}
	if (s->listen_fd >= 0) {
		s->listen_fd = safe_close(s->listen_fd);
		(void)unlink(s->sock_path);
	}
	if (s->idle_timer)
		evtimer_del(s->idle_timer);
	queue_refuse_all(s);
	if (s->pool_ev)
		event_del(s->pool_ev);
	/* Snapshot jobs first: their done() thaws the sandboxes they froze. */
	snapjobs_stop(s->jobs);
	/* File operations: the running ones finish, the queued ones are refused. */
	s->files = shim_files_free(s->files);
	/* Kill all first, then wait: the kernel tears the namespaces down in parallel. */
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		sandbox_kill(sb);
	for (Sandbox *sb = s->pool; sb; sb = sb->next)
		sandbox_kill(sb);
	while (s->sandboxes) {
		sandbox_wait_exit(s->sandboxes);
		sandbox_dead(s->sandboxes);
	}
	while (s->pool) {
		(void)waitpid(s->pool->pid, NULL, 0);
		sandbox_dead(s->pool);
	}
	s->net = netfwd_free(s->net); /* after sandbox_dead(), which closes listeners */
	/* Their cgroups empty within milliseconds; wait (bounded) to remove them. */
	for (int i = 0; s->graves && i < GRAVE_MAX_TRIES; i++) {
		struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
		(void)nanosleep(&ts, NULL);
		graves_cb(-1, 0, s);
	}
}

void
shim_handover(Shim *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = true;
	if (s->listen_ev) {
		event_free(s->listen_ev);
		s->listen_ev = NULL;
	}
	s->listen_fd = safe_close(s->listen_fd); /* the next shim binds it anew */
	queue_refuse_all(s);
	snapjobs_stop(s->jobs);
	s->files = shim_files_free(s->files);
	log_notice("Exiting for an upgrade: the sandboxes and their execs are left running for "
		   "the next containerd-shim to re-adopt");
}

Shim *
shim_free(Shim *s)
{
	if (!s)
		return NULL;
	shim_stop(s);
	while (s->execs) {
		Exec *e = s->execs;
		s->execs = e->next;
		exec_free(e);
	}
	while (s->conns) {
		Conn *c = s->conns;
		s->conns = c->next;
		peer_free(c->peer);
		free(c);
	}
	while (s->graves) {
		Grave *g = s->graves;
		s->graves = g->next;
		cgroup_free(g->cg);
		free(g);
	}
	if (s->grave_timer)
		event_free(s->grave_timer);
	if (s->idle_timer)
		event_free(s->idle_timer);
	if (s->pool_ev)
		event_free(s->pool_ev);
	free(s->pool_root);
	s->jobs = snapjobs_free(s->jobs);
	if (s->jobs_cg) {
		(void)cgroup_remove(s->jobs_cg); /* empty: every job was reaped */
		s->jobs_cg = cgroup_free(s->jobs_cg);
	}
	s->cgroups = cgroup_host_free(s->cgroups);
	safe_close(s->rt_dfd);
	safe_close(s->counter_fd);
	free(s->seccomp.filter);
	free(s->seccomp_exec.filter);
	free(s->sock_path);
	free(s->root_mnt);
	free(s);
	return NULL;
}

/* ---------------------------------------------------------------------------
 * Per-exec cgroups (cgroup.h "Exec leaves"; docs/DESIGN.md "Cancel kills the
 * run's exec cgroup").
 */

/* Create e's leaf before INIT_MSG_EXEC: *ret_fd (its directory) goes with the
 * exec's other fds. Fail closed: on a host with cgroup2 an exec without its
 * leaf never starts (s->create_err says why). */
static int
exec_leaf_create(Exec *e, int *ret_fd)
{
	Shim *s = e->shim;
	Sandbox *sb = e->sandbox;
	CgroupError cerr = {""};
	int r;

	*ret_fd = -1;
	if (!cgroup_host_has_leaves(s->cgroups))
		return 0; /* no cgroup2 at all: the process group it is (logged at start) */
	if (!sb->cg || !cgroup_has_leaves(sb->cg)) {
		snprintf(s->create_err, sizeof(s->create_err),
			 "the sandbox has no cgroup2 directory for the exec");
		return -EOPNOTSUPP;
	}
	r = cgroup_leaf_create(sb->cg, e->id, ret_fd, &cerr);
	if (r < 0) {
		LogCtx ctx = exec_ctx(e);
		snprintf(s->create_err, sizeof(s->create_err), "%s",
			 cerr.msg[0] ? cerr.msg : strerror(-r));
		log_ctx_errno(LOG_ERR, r, &ctx,
			      "Failed to create the cgroup of exec %" PRIu64 ": %s", e->id,
			      s->create_err);
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

	if (!e->leaf || !sb || !sb->cg)
		return;
	r = cgroup_leaf_remove(sb->cg, e->id);
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

	for (Exec *e = sb->shim->execs; e; e = e->next)
		if (e->id == exec_id && e->sandbox == sb && !e->ended)
			return true;
	return false;
}

/* Remove the leaves of ended execs whose last processes have exited since. */
static void
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
