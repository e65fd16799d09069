/* SPDX-License-Identifier: MIT */
/*
 * sandbox-serve.c — the sandbox's PID 1 once it is set up (sandbox.h,
 * sandbox-init.h): it starts each exec (INIT_MSG_EXEC) in its cgroup leaf
 * with its own Landlock layer and the exec seccomp layer, reads the exec's
 * pipes into its memfds and tells the shim (DATA, EOF; CONSUMED lets it punch
 * what was read), reaps the execs (EXITED), and when the shim goes away keeps
 * running orphaned for orphan_ms, listening for a re-adopting shim (adopt.h).
 *
 * Runs only in the sandbox-init helper, like sandbox-setup.c: it never logs
 * and never returns; a failure it cannot report ends the init (the pidfd tells
 * the shim).
 */
#include "config.h"

#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec-direct.h"
#include "fd-util.h"
#include "macro.h"
#include "clone-run.h"
#include "sandbox-init.h"

/* ---------------------------------------------------------------------------
 * Child side: serving execs as PID 1.
 */

#define INIT_CHUNK (64 * 1024)
#define PUNCH_STEP (64 * 1024) /* punch holes in steps of at least this */

/* One output stream of an exec: the pipe the init reads and the memfd it fills. */
typedef struct InitStream {
	int pipe;	   /* read end, non-blocking; -1 at EOF */
	int mem;	   /* the memfd (stream offset = file offset) */
	uint64_t size;	   /* bytes appended so far */
	uint64_t consumed; /* what the shim read (all of it while orphaned) */
	uint64_t punched;  /* holes punched below this */
	bool notified;	   /* a DATA is out and no CONSUMED came back yet */
} InitStream;

typedef struct InitExec {
	uint64_t id;
	pid_t pid;
	bool exited;
	int status;
	InitStream s[3]; /* [1] stdout, [2] stderr */
} InitExec;

typedef struct InitState {
	int sock;   /* the control connection, -1 while orphaned */
	int listen; /* INIT_LISTEN_FD or -1 */
	uint64_t window;
	int64_t orphan_ms;
	struct timespec orphan_since;
	InitExec *execs;
	size_t n_execs;
} InitState;

typedef struct ExecStatus {
	int err;
	int stage; /* 0 chdir, 1 exec, 2 other, 3 seccomp, 4 Landlock */
} ExecStatus;

/* The ruleset of every exec's own Landlock domain, -1 while none (no
 * Landlock). Each landlock_restrict_self() with it makes a new domain nested
 * in the sandbox's: Landlock lets a process pass ptrace_may_access() only on
 * processes of its own domain or of domains nested in it, so no exec can open
 * /proc/PID/{environ,mem,fd,maps,root,…} of another exec's processes (their
 * environment carries the harness's secrets), while each exec keeps full
 * access to its own descendants. The ruleset allows everything it handles
 * beneath / — MAKE_BLOCK, and REFER from ABI 2 on (a layer that does not
 * handle REFER forbids every rename across directories) — so it restricts
 * nothing: the sandbox's layer still decides every access, with the same
 * errnos. No scopes: signals between execs stay as the sandbox allows. */
static int exec_ll_fd = -1;

static int
exec_ll_prepare(void)
{
	struct {
		uint64_t fs;
	} attr = {.fs = LANDLOCK_ACCESS_FS_MAKE_BLOCK};
	struct landlock_path_beneath_attr rule;
	int fd, r;

	if (exec_ll_fd >= 0)
		return 0;
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi <= 0)
		return 0; /* no Landlock: docs/SECURITY.md says what that costs */
	if (abi >= 2)
		attr.fs |= LANDLOCK_ACCESS_FS_REFER;
	fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (fd < 0)
		return -errno;
	rule = (struct landlock_path_beneath_attr){.allowed_access = attr.fs};
	rule.parent_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	r = rule.parent_fd < 0 ||
		    syscall(SYS_landlock_add_rule, fd, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0
		? -errno
		: 0;
	safe_close(rule.parent_fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	exec_ll_fd = fd; /* close-on-exec: no exec inherits it */
	return 0;
}

/* The seccomp layer every exec adds (init_settle's copy of the spec's). */
static struct sock_fprog exec_prog;

/* Once the set-up is done: keep what serving needs of the configuration (the
 * exec layer, a few instructions), give the rest back (init_conf_release), and
 * the stack pages the set-up touched below ours (path buffers; dead, zero-filled
 * if ever touched again), so that an idle init keeps only its own few pages. */
static void
init_settle(void)
{
	size_t n = (size_t)init_spec->seccomp_exec->len * sizeof(struct sock_filter);
	struct sock_filter *f = malloc(n);
	char here;
	uintptr_t top = ((uintptr_t)&here & ~(uintptr_t)4095) - 8192;

	if (!f)
		_exit(1);
	memcpy(f, init_spec->seccomp_exec->filter, n);
	exec_prog = (struct sock_fprog){.len = init_spec->seccomp_exec->len, .filter = f};
	init_spec = NULL;
	init_conf_release();
	/* [top - 256 KiB, top): within the stack or its guard gap; unmapped parts
	 * are skipped (ENOMEM, ignored). */
	(void)madvise((void *)(top - 256 * 1024), 256 * 1024, MADV_DONTNEED);
}

static void
st_send(InitState *st, const InitMsg *m)
{
	if (st->sock >= 0)
		init_send(st->sock, m, NULL, 0);
}

/* The forked exec child: never returns. It may share the init's memory
 * (exec_clone): it only makes system calls, writes nothing the init reads
 * after it (environ is put back by the init) and leaves by execve or _exit. */
static _noreturn_ void
exec_child(const int *fds, int status_fd, const char *cwd, char **argv, char **envp,
	   ExecDirect *direct)
{
	ExecStatus es = {.stage = 2};
	sigset_t all;
	int r;

	/* Handlers first, then the mask (the init blocked every signal around
	 * the clone): no handler of the init's ever runs in here. */
	for (int sig = 1; sig < NSIG; sig++)
		(void)signal(sig, SIG_DFL);
	sigemptyset(&all);
	(void)sigprocmask(SIG_SETMASK, &all, NULL);
	if (setsid() < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		goto fail;
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			goto fail;
	/* Everything else (the init socket, the status pipe, …) goes at execve. */
	if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		goto fail;
	umask(022);
	es.stage = 0;
	if (chdir(cwd) < 0)
		goto fail;
	environ = envp; /* execvpe searches PATH from the environment we give the exec */
	/* The exec's own Landlock domain (exec_ll_fd): other execs cannot look
	 * into its processes, nor it into theirs. */
	es.stage = 4;
	if (exec_ll_fd >= 0 && syscall(SYS_landlock_restrict_self, exec_ll_fd, 0) < 0)
		goto fail;
	/* Last step before execve: from here on only allowlisted syscalls work. */
	es.stage = 3;
	if (!exec_prog.filter) {
		errno = EPERM;
		goto fail;
	}
	r = init_filter_load(&exec_prog);
	if (r < 0) {
		errno = -r;
		goto fail;
	}
	es.stage = 1;
	if (direct)
		exec_direct_try(direct); /* returns when bash must run it after all */
	execvpe(argv[0], argv, envp);
fail:
	es.err = errno;
	(void)!write(status_fd, &es, sizeof(es));
	_exit(es.err == ENOENT ? 127 : 126);
}

typedef struct ExecChildArgs {
	int fds[3];
	int status_fd;
	const char *cwd;
	char **argv;
	char **envp;
	ExecDirect *direct; /* the command without its shell, or NULL */
} ExecChildArgs;

static _noreturn_ void
exec_child_run(void *p)
{
	ExecChildArgs *a = p;
	exec_child(a->fds, a->status_fd, a->cwd, a->argv, a->envp, a->direct);
}

#if defined(__x86_64__)
/* The exec child's own stack (exec_clone): the init is single-threaded and
 * waits (CLONE_VFORK) until the child has called execve or exited, so one is
 * enough. Allocated at the first exec, kept, with a PROT_NONE page below it.
 * What runs on it is bounded: exec_child's frames and execvpe's, whose
 * largest arrays are a PATH_MAX + NAME_MAX path and, for a script, argc + 2
 * pointers (argc + envc <= EXEC_ARGV_MAX = 4096: 32 KiB). */
#define EXEC_STACK_SIZE (256 * 1024)
#define EXEC_STACK_GUARD 4096
static void *exec_stack;

#endif

/* Start the exec child, in the cgroup leaf cgroup_fd unless it is -1. On
 * x86_64 it shares the init's memory until its execve (CLONE_VM, CLONE_VFORK:
 * the init waits for that anyway, on the status pipe), so no exec pays for a
 * copy of the init's address space and its teardown at execve (docs:
 * bench/README.md, B6).
 * Returns the pid or -errno. */
static pid_t
exec_clone(ExecChildArgs *a, int cgroup_fd)
{
	struct clone_args ca = {.exit_signal = SIGCHLD};
	pid_t pid;

	if (cgroup_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)cgroup_fd;
	}
#if defined(__x86_64__)
	char **saved_environ = environ;
	sigset_t all, old;
	long k;

	if (!exec_stack) {
		uint8_t *st = mmap(NULL, EXEC_STACK_GUARD + EXEC_STACK_SIZE, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (st == MAP_FAILED)
			return -errno;
		if (mprotect(st, EXEC_STACK_GUARD, PROT_NONE) < 0) {
			int r = -errno;
			(void)munmap(st, EXEC_STACK_GUARD + EXEC_STACK_SIZE);
			return r;
		}
		exec_stack = st + EXEC_STACK_GUARD;
	}
	ca.flags |= CLONE_VM | CLONE_VFORK;
	ca.stack = (uint64_t)(uintptr_t)exec_stack;
	ca.stack_size = EXEC_STACK_SIZE;
	sigfillset(&all);
	(void)sigprocmask(SIG_SETMASK, &all, &old);
	k = clone3_run(&ca, exec_child_run, a);
	environ = saved_environ; /* the child set its own before execve */
	(void)sigprocmask(SIG_SETMASK, &old, NULL);
	if (k < 0)
		return (pid_t)k;
	pid = (pid_t)k;
#else
	pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
	if (pid < 0)
		return -errno;
	if (pid == 0)
		exec_child_run(a);
#endif
	return pid;
}

static void
exec_release(InitExec *x)
{
	for (int i = 1; i <= 2; i++) {
		safe_close(x->s[i].pipe);
		safe_close(x->s[i].mem);
		x->s[i].pipe = x->s[i].mem = -1;
	}
}

/* fds[0] stdin read end, fds[1]/fds[2] the stdout/stderr memfds, fds[3] (when
 * nfds is 4) the exec's cgroup2 leaf directory; the ones kept are set to -1
 * (the caller closes the rest). */
static void
init_start_exec(InitState *st, const InitMsg *m, char *payload, size_t len, int *fds, size_t nfds)
{
	InitMsg r = {.type = INIT_MSG_START_FAILED, .exec_id = m->exec_id};
	char *p = payload, *end = payload + len, *cwd = NULL;
	char **argv = NULL, **envp = NULL;
	ExecDirect direct = {0};
	char msg[512];
	int sp[2] = {-1, -1}, po[2] = {-1, -1}, pe[2] = {-1, -1};
	ExecStatus es;
	ssize_t k;
	pid_t pid;

	if ((nfds != 3 && nfds != 4) || m->argc == 0 || m->argc > len || m->envc > len) {
		r.err = EBADMSG;
		snprintf(msg, sizeof(msg), "malformed exec request");
		goto fail;
	}
	argv = calloc(m->argc + 1, sizeof(char *));
	envp = calloc(m->envc + 1, sizeof(char *));
	if (!argv || !envp) {
		r.err = ENOMEM;
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	/* payload: cwd\0 argv[0]\0 … env[0]\0 …; every string must end inside it. */
	for (uint32_t i = 0; i < 1 + m->argc + m->envc; i++) {
		char *z = memchr(p, '\0', (size_t)(end - p));
		if (p >= end || !z) {
			r.err = EBADMSG;
			snprintf(msg, sizeof(msg), "malformed exec request");
			goto fail;
		}
		if (i == 0)
			cwd = p;
		else if (i <= m->argc)
			argv[i - 1] = p;
		else
			envp[i - 1 - m->argc] = p;
		p = z + 1;
	}
	if (pipe2(sp, O_CLOEXEC) < 0 || pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		r.err = errno;
		snprintf(msg, sizeof(msg), "pipe: %s", strerror(errno));
		goto fail;
	}
	InitExec *ne = realloc(st->execs, (st->n_execs + 1) * sizeof(InitExec));
	if (!ne) {
		r.err = ENOMEM;
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail;
	}
	st->execs = ne;
	k = exec_ll_prepare();
	if (k < 0) {
		r.err = (int)-k;
		snprintf(msg, sizeof(msg), "cannot create the exec's Landlock ruleset: %s",
			 strerror(r.err));
		goto fail;
	}
	/* Born in the exec's own cgroup (fds[3], its leaf): no instant in which
	 * it or a child could escape it. Never a plain fork instead. */
	pid = exec_clone(
	    &(ExecChildArgs){.fds = {fds[0], po[1], pe[1]},
			     .status_fd = sp[1],
			     .cwd = cwd,
			     .argv = argv,
			     .envp = envp,
			     .direct = exec_direct_plan(argv, envp, cwd, &direct) ? &direct : NULL},
	    nfds == 4 ? fds[3] : -1);
	if (pid < 0) {
		r.err = -pid;
		snprintf(msg, sizeof(msg), "%s: %s",
			 nfds == 4 ? "cannot start in the exec's cgroup" : "fork", strerror(-pid));
		goto fail;
	}
	sp[1] = safe_close(sp[1]);
	po[1] = safe_close(po[1]);
	pe[1] = safe_close(pe[1]);
	/* EOF = execve succeeded (the CLOEXEC write end went with it). */
	do
		k = read(sp[0], &es, sizeof(es));
	while (k < 0 && errno == EINTR);
	if (k == (ssize_t)sizeof(es)) {
		r.err = es.err;
		snprintf(msg, sizeof(msg), "%s '%s': %s",
			 es.stage == 0	 ? "cannot change directory to"
			 : es.stage == 1 ? "cannot execute"
			 : es.stage == 3 ? "cannot apply the seccomp filter for"
			 : es.stage == 4 ? "cannot give its own Landlock domain to"
					 : "cannot set up",
			 es.stage == 0 ? cwd : argv[0], strerror(es.err));
		goto fail; /* the child exits; SIGCHLD reaps it */
	}
	(void)fd_nonblock(po[0], 1);
	(void)fd_nonblock(pe[0], 1);
	ne[st->n_execs++] = (InitExec){
	    .id = m->exec_id,
	    .pid = pid,
	    .s = {{.pipe = -1, .mem = -1},
		  {.pipe = TAKE_FD(po[0]), .mem = fds[1]},
		  {.pipe = TAKE_FD(pe[0]), .mem = fds[2]}},
	};
	fds[1] = fds[2] = -1;
	r = (InitMsg){.type = INIT_MSG_STARTED, .exec_id = m->exec_id, .pid = pid};
	st_send(st, &r);
	goto out;
fail:
	if (st->sock >= 0)
		init_send(st->sock, &r, msg, strlen(msg));
out:
	safe_close(sp[0]);
	safe_close(sp[1]);
	safe_close(po[0]);
	safe_close(po[1]);
	safe_close(pe[0]);
	safe_close(pe[1]);
	free(argv);
	free(envp);
	exec_direct_free(&direct);
}

static InitExec *
init_find(InitState *st, uint64_t id)
{
	for (size_t i = 0; i < st->n_execs; i++)
		if (st->execs[i].id == id)
			return &st->execs[i];
	return NULL;
}

/* Punch away what may go: below size - window, and (with a shim) below what it read. */
static void
stream_punch(InitState *st, InitStream *s)
{
	uint64_t lim;

	if (s->mem < 0 || s->size <= st->window)
		return;
	lim = s->size - st->window;
	if (st->sock >= 0)
		lim = MIN(lim, s->consumed);
	if (lim < s->punched + PUNCH_STEP)
		return;
	if (fallocate(s->mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)s->punched,
		      (off_t)(lim - s->punched)) == 0)
		s->punched = lim;
}

static void
stream_notify(InitState *st, InitExec *x, int i)
{
	InitStream *s = &x->s[i];
	InitMsg m = {
	    .type = INIT_MSG_DATA, .exec_id = x->id, .stream = (uint32_t)i, .off = s->size};

	if (st->sock < 0 || s->notified || s->size <= s->consumed)
		return;
	s->notified = true;
	init_send(st->sock, &m, NULL, 0);
}

/* Whether the init reads the pipe now: always while orphaned (the oldest bytes
 * are punched), else while the shim is less than a window behind. */
static bool
stream_wants_input(InitState *st, InitStream *s)
{
	return s->pipe >= 0 && (st->sock < 0 || s->size - s->consumed < st->window);
}

static void
stream_read(InitState *st, InitExec *x, int i)
{
	static char buf[INIT_CHUNK];
	InitStream *s = &x->s[i];
	ssize_t n;

	for (int guard = 0; guard < 16 && stream_wants_input(st, s); guard++) {
		size_t want = sizeof(buf);
		if (st->sock >= 0)
			want = (size_t)MIN((uint64_t)want, st->window - (s->size - s->consumed));
		n = read(s->pipe, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			InitMsg m = {.type = INIT_MSG_EOF,
				     .exec_id = x->id,
				     .stream = (uint32_t)i,
				     .off = s->size};
			s->pipe = safe_close(s->pipe);
			st_send(st, &m);
			break;
		}
		/* The memfd cannot fail short of memory: then the bytes are counted as
		 * written (offsets stay exact) and read back as zeros. */
		(void)pwrite(s->mem, buf, (size_t)n, (off_t)s->size);
		s->size += (uint64_t)n;
		if (st->sock < 0)
			s->consumed = s->size;
		stream_punch(st, s);
	}
	stream_notify(st, x, i);
}

static void
init_reap(InitState *st)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		for (size_t i = 0; i < st->n_execs; i++) {
			InitExec *x = &st->execs[i];
			if (x->pid != pid || x->exited)
				continue;
			InitMsg m = {.type = INIT_MSG_EXITED,
				     .exec_id = x->id,
				     .pid = pid,
				     .status = status};
			x->exited = true;
			x->status = status;
			st_send(st, &m);
			break;
		}
}

/* A new shim connected: tell it everything it needs to take the execs over. */
static void
init_adopted(InitState *st, int sock)
{
	InitMsg m = {.type = INIT_MSG_HELLO,
		     .pid = getpid(),
		     .status = (int32_t)INIT_PROTO_VERSION,
		     .off = st->window};

	if (st->sock >= 0)
		safe_close(st->sock);
	st->sock = sock;
	init_send(sock, &m, NULL, 0);
	for (size_t i = 0; i < st->n_execs; i++) {
		InitExec *x = &st->execs[i];
		int fds[2] = {x->s[1].mem, x->s[2].mem};
		m = (InitMsg){.type = INIT_MSG_ADOPT,
			      .exec_id = x->id,
			      .pid = x->pid,
			      .status = x->status,
			      .off = x->s[1].size,
			      .off2 = x->s[2].size};
		if (x->exited)
			m.flags |= INIT_ADOPT_EXITED;
		if (x->s[1].pipe < 0)
			m.flags |= INIT_ADOPT_EOF1;
		if (x->s[2].pipe < 0)
			m.flags |= INIT_ADOPT_EOF2;
		for (int k = 1; k <= 2; k++) {
			x->s[k].consumed = x->s[k].size; /* where the new shim starts reading */
			x->s[k].notified = false;
		}
		(void)fd_send(sock, &m, sizeof(m), fds, 2);
	}
	m = (InitMsg){.type = INIT_MSG_ADOPT_END};
	init_send(sock, &m, NULL, 0);
}

static int64_t
ms_since(const struct timespec *t)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

static void
init_on_msg(InitState *st, const InitMsg *m, char *payload, size_t len, int *fds, size_t nfds)
{
	InitExec *x;

	switch (m->type) {
	case INIT_MSG_CLAIMED:
		/* the first exec's own work, done while the shim's client learns of
		 * the claim (issue 16, E2E) */
		if (landlock_pending) {
			landlock_pending = false;
			(void)init_landlock(); /* _exit()s on failure: fail closed */
		}
		(void)exec_ll_prepare(); /* else at the exec, which reports a failure */
		break;
	case INIT_MSG_EXEC:
		if (landlock_pending) {
			landlock_pending = false;
			(void)init_landlock(); /* _exit()s on failure: fail closed */
		}
		init_start_exec(st, m, payload, len, fds, nfds);
		break;
	case INIT_MSG_KILL:
		x = init_find(st, m->exec_id);
		if (x && !x->exited)
			(void)kill(-x->pid, m->status);
		break;
	case INIT_MSG_CONSUMED:
		x = init_find(st, m->exec_id);
		if (!x || (m->stream != 1 && m->stream != 2))
			break;
		x->s[m->stream].consumed =
		    MIN(MAX(m->off, x->s[m->stream].consumed), x->s[m->stream].size);
		x->s[m->stream].notified = false;
		stream_punch(st, &x->s[m->stream]);
		stream_notify(st, x, (int)m->stream);
		break;
	case INIT_MSG_FORGET:
		x = init_find(st, m->exec_id);
		if (!x)
			break;
		exec_release(x);
		*x = st->execs[--st->n_execs];
		break;
	default: break;
	}
}

_noreturn_ void
init_serve(int sock, int listen_fd)
{
	InitState st = {.sock = sock,
			.listen = listen_fd,
			.window = init_spec->output_window ? init_spec->output_window : 1 << 20,
			.orphan_ms = init_spec->orphan_ms};
	char *buf = malloc(sizeof(InitMsg) + INIT_PAYLOAD_MAX);
	struct pollfd *pfd = NULL;
	sigset_t mask;
	int sfd;

	init_settle();

	/* PID 1 of the namespace: SIGCHLD through a signalfd, nothing else handled
	 * (signals without a handler are not delivered to a namespace init from inside). */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	if (!buf || sigprocmask(SIG_BLOCK, &mask, NULL) < 0 ||
	    (sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		_exit(1);
	/* We listen (the shim only bound it): a new shim's SO_PEERCRED names us. */
	if (st.listen >= 0 && listen(st.listen, 4) < 0)
		st.listen = safe_close(st.listen);

	for (;;) {
		size_t np = 3, n_alloc = 3 + 2 * st.n_execs;
		int timeout = -1, fds[4];
		size_t nfds = 0;
		ssize_t n;

		if (st.sock < 0) {
			/* Orphaned: a shim has orphan_ms to come back, then we go, and the
			 * kernel kills every process of the namespace with us. */
			int64_t left = st.orphan_ms - ms_since(&st.orphan_since);
			if (left <= 0)
				_exit(0);
			timeout = (int)MIN(left, (int64_t)INT32_MAX);
		}
		struct pollfd *np_ = realloc(pfd, n_alloc * sizeof(*pfd));
		if (!np_)
			_exit(1);
		pfd = np_;
		pfd[0] = (struct pollfd){.fd = st.sock, .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = st.sock < 0 ? st.listen : -1, .events = POLLIN};
		pfd[2] = (struct pollfd){.fd = sfd, .events = POLLIN};
		for (size_t i = 0; i < st.n_execs; i++)
			for (int k = 1; k <= 2; k++)
				pfd[np++] =
				    (struct pollfd){.fd = stream_wants_input(&st, &st.execs[i].s[k])
							      ? st.execs[i].s[k].pipe
							      : -1,
						    .events = POLLIN};
		if (poll(pfd, np, timeout) < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (pfd[2].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) > 0)
				;
			init_reap(&st);
		}
		/* Output before messages: the execs table may change below. */
		for (size_t i = 0, q = 3; i < st.n_execs && q < np; i++)
			for (int k = 1; k <= 2; k++, q++)
				if (pfd[q].revents && pfd[q].fd >= 0)
					stream_read(&st, &st.execs[i], k);
		if (pfd[1].revents) {
			int c = accept4(st.listen, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0) {
				init_adopted(&st, c);
				for (size_t i = 0; i < st.n_execs; i++)
					for (int k = 1; k <= 2; k++)
						stream_notify(&st, &st.execs[i], k);
			}
			continue;
		}
		if (!pfd[0].revents || st.sock < 0)
			continue;
		n = fd_recv(st.sock, buf, sizeof(InitMsg) + INIT_PAYLOAD_MAX, fds, 4, &nfds);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0) {
			/* The shim is gone: wait for the next one (orphan_ms). */
			st.sock = safe_close(st.sock);
			clock_gettime(CLOCK_MONOTONIC, &st.orphan_since);
			if (st.listen < 0 || st.orphan_ms <= 0)
				_exit(0);
			for (size_t i = 0; i < st.n_execs; i++)
				for (int k = 1; k <= 2; k++)
					st.execs[i].s[k].consumed = st.execs[i].s[k].size;
			continue;
		}
		if ((size_t)n >= sizeof(InitMsg)) {
			InitMsg m;
			memcpy(&m, buf, sizeof(m));
			init_on_msg(&st, &m, buf + sizeof(m), (size_t)n - sizeof(m), fds, nfds);
		}
		for (size_t i = 0; i < nfds; i++)
			safe_close(fds[i]);
	}
}
