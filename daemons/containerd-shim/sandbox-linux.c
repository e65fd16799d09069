/* SPDX-License-Identifier: MIT */
/*
 * sandbox-linux.c — the shim's side of spawning a sandbox (sandbox.h): it
 * execs the sandbox-init helper (sandbox-init-main.c, the `runc init` way)
 * with its configuration as the first packet on the init's socket, then
 * writes the init's id maps and releases it. Everything the spawner and the
 * init do is the helper's (sandbox-setup.c, sandbox-serve.c): the shim's
 * address space is never copied into a sandbox.
 */
#include "config.h"

#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clone-run.h"
#include "fd-util.h"
#include "macro.h"
#include "sandbox-init.h"

#define MAX_PROCS_FDS 8

/* /etc files the init writes for each sandbox (never carried over from the host). */
static const char *const etc_generated[] = {"passwd", "group", "hosts", "hostname"};

bool
sandbox_etc_name_ok(const char *name)
{
	if (!name[0] || strchr(name, '/') || streq(name, ".") || streq(name, "..") ||
	    strlen(name) > NAME_MAX)
		return false;
	for (size_t i = 0; i < ELEMENTSOF(etc_generated); i++)
		if (streq(name, etc_generated[i]))
			return false;
	return true;
}

int
sandbox_pidfd_kill(int pidfd, int sig)
{
	return RET_NERRNO(syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0));
}

int
sandbox_init_open(const char *path, int *ret_fd)
{
	char self[PATH_MAX], buf[PATH_MAX];
	struct stat st;
	int fd;

	if (!path) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		char *slash;
		if (n < 0)
			return -errno;
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (!slash)
			return -ENOENT;
		*slash = '\0';
		if (snprintf(buf, sizeof(buf), "%s/sandbox-init", self) >= (int)sizeof(buf))
			return -ENAMETOOLONG;
		path = buf;
	}
	fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Executed as root before it drops anything: no one may be able to
	 * change it who could not change the shim itself (owned by root or by
	 * the owner of the shim's executable, a developer's build directory;
	 * no write for group or others). */
	struct stat self_st;
	if (stat("/proc/self/exe", &self_st) < 0)
		self_st.st_uid = 0;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || !(st.st_mode & S_IXOTH) ||
	    (st.st_uid != 0 && st.st_uid != self_st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		int r = S_ISREG(st.st_mode) ? -EPERM : -EINVAL;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

/* ---------------------------------------------------------------------------
 * The exec of the helper.
 */

static int
write_file(pid_t pid, const char *name, const char *text)
{
	char path[64];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return loop_write(fd, text, strlen(text));
}

typedef struct SpawnArgs {
	int sock, listen_fd, exe_fd;
	const int *procs_fds;
	size_t n_procs_fds;
	int err; /* written by the child when it cannot exec (it shares our memory) */
} SpawnArgs;

/* The child between clone3 and the helper's execve: with CLONE_VM it runs on
 * spawn_stack in the shim's memory (the shim waits, CLONE_VFORK), so it makes
 * system calls only. It lays out the helper's fds (sandbox-init.h): the
 * socket as INIT_SOCK_FD, the listener as INIT_LISTEN_FD, the v1
 * cgroup.procs files after it, nothing else of the shim's. */
static _noreturn_ void
spawn_child(void *p)
{
	static char *const argv[] = {(char *)"sandbox-init", NULL};
	static char *const envp[] = {NULL};
	SpawnArgs *a = p;
	int hi[3 + MAX_PROCS_FDS], n = 0, next;

	hi[n++] = (int)syscall(SYS_fcntl, a->sock, F_DUPFD_CLOEXEC, 32);
	hi[n++] =
	    a->listen_fd >= 0 ? (int)syscall(SYS_fcntl, a->listen_fd, F_DUPFD_CLOEXEC, 32) : -1;
	hi[n++] = (int)syscall(SYS_fcntl, a->exe_fd, F_DUPFD_CLOEXEC, 32);
	for (size_t i = 0; i < a->n_procs_fds; i++)
		hi[n++] = (int)syscall(SYS_fcntl, a->procs_fds[i], F_DUPFD_CLOEXEC, 32);
	for (int i = 0; i < n; i++)
		if (hi[i] < 0 && (i != 1 || a->listen_fd >= 0))
			goto fail;
	if (syscall(SYS_dup3, hi[0], INIT_SOCK_FD, 0) < 0 ||
	    (hi[1] >= 0 && syscall(SYS_dup3, hi[1], INIT_LISTEN_FD, 0) < 0))
		goto fail;
	next = INIT_LISTEN_FD + 1;
	for (size_t i = 0; i < a->n_procs_fds; i++, next++)
		if (syscall(SYS_dup3, hi[3 + i], next, 0) < 0)
			goto fail;
	if (syscall(SYS_dup3, hi[2], next, O_CLOEXEC) < 0 ||
	    syscall(SYS_close_range, (unsigned)next + 1, ~0U, 0) < 0)
		goto fail;
	if (hi[1] < 0)
		(void)syscall(SYS_close, INIT_LISTEN_FD);
	syscall(SYS_execveat, next, "", argv, envp, AT_EMPTY_PATH);
fail:
	a->err = errno ? errno : EIO;
	syscall(SYS_exit, 127);
	__builtin_unreachable();
}

#if HAVE_CLONE3_RUN
/* The child's stack until its execve: spawns happen on the shim's loop, one at
 * a time (the loop waits for the execve), so one is enough. */
static char spawn_stack[64 * 1024] __attribute__((aligned(16)));
#endif

int
sandbox_spawn_begin(const SandboxSpec *spec, pid_t *ret_spawner, int *ret_spawner_pidfd,
		    int *ret_sock)
{
	_cleanup_close_ int s0 = -1, s1 = -1;
	_cleanup_free_ void *conf = NULL;
	int sp[2], sndbuf = 2 * INIT_PAYLOAD_MAX, pidfd = -1;
	struct clone_args args = {
	    .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD};
	SpawnArgs a = {.listen_fd = spec->listen_fd,
		       .exe_fd = spec->init_exe_fd,
		       .procs_fds = spec->procs_fds,
		       .n_procs_fds = spec->n_procs_fds};
	ssize_t len;
	long spawner;

	if (spec->host_uid == 0)
		return -EPERM; /* never map host root, never own a namespace as root */
	if (spec->init_exe_fd < 0)
		return -ENOEXEC;
	if (spec->n_procs_fds > MAX_PROCS_FDS)
		return -E2BIG;
	len = init_conf_encode(spec, &conf);
	if (len < 0)
		return (int)len;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	s0 = sp[0];
	s1 = sp[1];
	/* A SEQPACKET message must fit the sender's buffer in one piece. */
	if (setsockopt(s0, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0 &&
	    setsockopt(s0, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
		return -errno;
	if (fd_nonblock(s0, 1) < 0)
		return -errno;
	/* The configuration waits in the helper's socket: its first packet. */
	if (send(s0, conf, (size_t)len, MSG_NOSIGNAL) != len)
		return errno ? -errno : -EIO;
	a.sock = s1;

	/* The spawner is born in the sandbox's cgroup2 directory, so the init it
	 * clones is never outside it (and its cgroup namespace is rooted there). */
	if (spec->cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)spec->cgroup_fd;
	}
#if HAVE_CLONE3_RUN
	{
		sigset_t all, old;
		args.flags |= CLONE_VM | CLONE_VFORK;
		args.stack = (uint64_t)(uintptr_t)spawn_stack;
		args.stack_size = sizeof(spawn_stack);
		sigfillset(&all);
		(void)sigprocmask(SIG_SETMASK, &all, &old);
		spawner = clone3_run(&args, spawn_child, &a);
		(void)sigprocmask(SIG_SETMASK, &old, NULL);
	}
	if (spawner < 0)
		return (int)spawner;
#else
	spawner = syscall(SYS_clone3, &args, sizeof(args));
	if (spawner < 0)
		return -errno;
	if (spawner == 0)
		spawn_child(&a);
#endif
	if (a.err) {
		/* It could not exec the helper: reap it, say why. */
		siginfo_t si;
		while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		safe_close(pidfd);
		return -a.err;
	}
	*ret_spawner = (pid_t)spawner;
	*ret_spawner_pidfd = pidfd;
	*ret_sock = TAKE_FD(s0);
	return 0;
}

int
sandbox_spawn_finish(int spawner_pidfd, int sock, uid_t sandbox_uid, uid_t host_uid, pid_t *ret_pid,
		     int *ret_pidfd)
{
	_cleanup_close_ int pidfd = -1;
	InitMsg go = {.type = INIT_MSG_GO}, m = {0};
	siginfo_t si;
	char map[64];
	size_t nfds = 0;
	ssize_t n;
	int r, fds[1];
	pid_t pid;

	/* Reap the spawner (it sent INIT_MSG_SPAWNED, or failed, before exiting). */
	while (waitid((idtype_t)P_PIDFD, (id_t)spawner_pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	n = fd_recv(sock, &m, sizeof(m), fds, 1, &nfds);
	if (n >= (ssize_t)sizeof(m) && m.type == INIT_MSG_SPAWNED && nfds == 1 && m.pid > 0) {
		pidfd = fds[0];
		pid = m.pid;
	} else {
		for (size_t i = 0; i < nfds; i++)
			safe_close(fds[i]);
		if (n == -EAGAIN || n == 0)
			return -EIO; /* it died without a word */
		if (n < 0)
			return (int)n;
		return m.type == INIT_MSG_SETUP_FAILED && m.err > 0 ? -m.err : -EIO;
	}

	/* (The v1 cgroups: the child joins them itself, see init_main.) setgroups
	 * must be denied before an unprivileged gid_map may be written. We are
	 * root in the parent namespace: the namespace's owner (host_uid) could not
	 * map anything but itself, but needs to map nothing else either. */
	r = write_file(pid, "setgroups", "deny");
	if (r >= 0) {
		snprintf(map, sizeof(map), "%u %u 1\n", sandbox_uid, host_uid);
		r = write_file(pid, "uid_map", map);
	}
	if (r >= 0)
		r = write_file(pid, "gid_map", map);
	if (r >= 0)
		r = (int)fd_send(sock, &go, sizeof(go), NULL, 0);
	if (r < 0) {
		(void)sandbox_pidfd_kill(pidfd, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return r;
	}
	*ret_pid = pid;
	*ret_pidfd = TAKE_FD(pidfd);
	return 0;
}
