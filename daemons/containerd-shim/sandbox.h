/* SPDX-License-Identifier: MIT */
/*
 * sandbox.h — the Linux sandbox backend: spawning one sandbox init, and the
 * wire between the shim and that init.
 *
 * A sandbox is one process tree rooted at our own init (PID 1 of a fresh pid
 * namespace), created by sandbox_spawn_begin/finish() through a spawner: a child of the
 * shim (cloned into the sandbox's cgroup2 directory) that execs the small
 * sandbox-init helper (installed next to the shim; sandbox-init.h: its fds and
 * its configuration, the first packet on its socket), which captures the host
 * sources as root, drops to host_uid and makes a single clone3() that asks
 * for user, mount, pid, net, ipc, uts and cgroup namespaces, a pidfd and
 * CLONE_PARENT — so the user namespace is owned by host_uid, never root, and
 * the init is the shim's child. The spawner sends INIT_MSG_SPAWNED (pid,
 * pidfd) and exits. The init:
 *   1. waits for INIT_MSG_GO (the shim writes setgroups=deny, uid_map and
 *      gid_map first: inside sandbox_uid ↔ host host_uid, one id, nothing else);
 *   2. unshares a cgroup namespace rooted at its cgroups (after the v1 joins);
 *      builds a fresh root: tmpfs + pivot_root, read-only binds of ro_binds
 *      (symlinks recreated as symlinks), a generated /etc (passwd, group,
 *      hosts, hostname) with the etc_entries bound read-only, /workspace
 *      (nosuid,nodev), a size-capped /tmp, a minimal /dev, a fresh /proc with
 *      /proc/sys & co read-only and /proc/cmdline & co masked, the user
 *      namespace's limits set (/proc/sys/user); the old root is detached;
 *      hostname "sandbox"; lo up;
 *   3. drops every capability (bounding, ambient, permitted, effective,
 *      inheritable), locks securebits, sets no_new_privs and non-dumpable,
 *      and when the kernel has Landlock restricts writes to /workspace, /tmp,
 *      /dev/shm and the /dev nodes (ABI >= 6: abstract sockets and signals
 *      scoped to the sandbox);
 *      sets the resource limits (CORE 0, NOFILE, FSIZE, MEMLOCK, RTPRIO 0);
 *      and, last, loads the seccomp policy on itself (seccomp-policy.h, the
 *      INIT variant: every exec inherits it);
 *   4. answers INIT_MSG_READY, or INIT_MSG_SETUP_FAILED with "step: strerror"
 *      and _exit()s — fail closed: a sandbox that could not be fully set up
 *      never runs anything;
 *   5. serves INIT_MSG_EXEC / INIT_MSG_KILL, reaps every zombie and reports the
 *      exits of the execs it started. An exec child is born in the exec's own
 *      cgroup2 leaf when the shim sends one (clone3 CLONE_INTO_CGROUP; the
 *      shim delegated the leaf's and the sandbox cgroup's cgroup.procs to
 *      host_uid for that), so that the shim can kill all it started. Each
 *      exec child gets its own session, only fds 0-2, and adds the seccomp
 *      EXEC_LAYER as its last step before execve.
 * The init is in the sandbox's cgroups before it runs anything: cloned into
 * the cgroup2 directory (CLONE_INTO_CGROUP), and for v1 hierarchies it writes
 * itself into their cgroup.procs (files the shim opened) as its very first step;
 * a failure there is a setup failure.
 * The init outlives a crash of the shim (no PDEATHSIG; see docs/DESIGN.md,
 * "Re-adopting sandboxes"): it also holds a listening SOCK_SEQPACKET socket the
 * shim bound on the host side (<runtime_dir>/sandboxes/<id>/init.sock, adopt.h).
 * When its control connection reaches EOF it is orphaned: it keeps the execs
 * running and their output flowing into the memfds (the oldest bytes beyond
 * output_window punched away), keeps the exit statuses, and accepts the next
 * shim on that socket (HELLO, one ADOPT per exec with its memfds, ADOPT_END).
 * When no shim connects within orphan_ms it exits, and with it (PID 1 of the
 * namespace) every process of the sandbox.
 *
 * Output: the init creates each exec's stdout/stderr pipes and is their only
 * reader; it appends what it reads to the exec's two memfds (created by the
 * shim, F_SEAL_SHRINK) so that a stream's byte offset is the memfd's file
 * offset. It tells the shim with INIT_MSG_DATA (once per INIT_MSG_CONSUMED),
 * keeps at most output_window bytes the shim has not consumed (it stops
 * reading the pipe: the writer blocks, as with a plain pipe), punches holes
 * below min(size - output_window, consumed), and sends INIT_MSG_EOF with the
 * final size when every writer closed the pipe. Whatever happens, the bytes
 * [size - output_window, size) of a memfd are intact.
 *
 * Wire: a SOCK_SEQPACKET socket, one message per packet: an InitMsg header,
 * then a payload (at most INIT_PAYLOAD_MAX bytes). INIT_MSG_EXEC carries the
 * exec's stdin read end and the stdout/stderr memfds by SCM_RIGHTS (fd_send).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum InitMsgType {
	INIT_MSG_GO = 1,       /* shim → init: id maps written, go on */
	INIT_MSG_READY,	       /* init → shim: sandbox set up, serving; status = Landlock ABI */
	INIT_MSG_SETUP_FAILED, /* init → shim: err, payload = message; the init exits */
	INIT_MSG_EXEC,	  /* shim → init: exec_id, argc, envc; payload = cwd\0 argv…\0 env…\0;
			   * fds: stdin (read end), stdout, stderr (write ends), and
			   * the exec's cgroup2 leaf directory when it has one: the
			   * child is cloned into it (CLONE_INTO_CGROUP), else it fails */
	INIT_MSG_KILL,	  /* shim → init: exec_id, status = signal; kills the process group */
	INIT_MSG_STARTED, /* init → shim: exec_id, pid (in the sandbox pid namespace) */
	INIT_MSG_START_FAILED, /* init → shim: exec_id, err, payload = message (never exec'd) */
	INIT_MSG_EXITED,       /* init → shim: exec_id, status = wait status of the leader */
	INIT_MSG_DATA,	       /* init → shim: exec_id, stream, off = memfd size now */
	INIT_MSG_EOF,	       /* init → shim: exec_id, stream, off = final size */
	INIT_MSG_CONSUMED,     /* shim → init: exec_id, stream, off = read up to here */
	INIT_MSG_FORGET,       /* shim → init: exec_id released: close its pipes and memfds */
	INIT_MSG_HELLO,	       /* init → a new shim: off = output_window, pid = its pid (1),
				* status = INIT_PROTO_VERSION (0 before it was sent) */
	INIT_MSG_ADOPT,	       /* init → a new shim: exec_id, pid, flags, status, off/off2 =
				* stdout/stderr sizes (= consumed from now on); fds: the memfds */
	INIT_MSG_ADOPT_END,    /* init → a new shim: the list is complete */
	INIT_MSG_SPAWNED,      /* spawner → shim: pid of the init; fd: its pidfd */
	INIT_MSG_CLAIMED,      /* shim → a pooled init: the workspace is bound in (and
				* checked): restrict yourself now rather than at the first
				* exec. Sent only to an init this shim spawned (a pooled
				* one, never adopted); an init that does not know it
				* ignores it and restricts itself at its first exec, so
				* the wire version stays */
} InitMsgType;

/* The version of this wire, in the HELLO an init sends a new shim (its status
 * field): a shim adopts only inits whose version it speaks (adopt_hello_check;
 * docs/DESIGN.md, "The init wire version"). Bump it with any change to InitMsg
 * or to the meaning of a message. Whatever a version changes, the HELLO keeps
 * type at offset 0 and the version in status, at their offsets of today, so
 * that every shim can read the version of every init. 0: an init older than
 * the version field, whose wire is version 1's. */
#define INIT_PROTO_VERSION 1u

/* INIT_MSG_ADOPT flags */
#define INIT_ADOPT_EXITED (1u << 0) /* status is the leader's wait status */
#define INIT_ADOPT_EOF1 (1u << 1)   /* stdout reached EOF at off */
#define INIT_ADOPT_EOF2 (1u << 2)   /* stderr reached EOF at off2 */

typedef struct InitMsg {
	uint32_t type;
	int32_t err; /* positive errno, for the *_FAILED messages */
	uint64_t exec_id;
	int32_t pid;
	int32_t status;
	uint32_t argc;
	uint32_t envc;
	uint64_t off, off2; /* stream offsets (DATA, EOF, CONSUMED, HELLO, ADOPT) */
	uint32_t stream;    /* 1 stdout, 2 stderr */
	uint32_t flags;	    /* INIT_ADOPT_* */
} InitMsg;

/* Largest payload of one message (argv + env + cwd of an exec). */
#define INIT_PAYLOAD_MAX (256 * 1024)

struct sock_fprog;

typedef struct SandboxSpec {
	const char *root_mnt;  /* an existing empty host directory, the tmpfs root's mount point */
	const char *workspace; /* host path of the workspace directory (owned by host_uid) */
	/* A pooled sandbox: workspace is the shim's (shared) pool mount point and
	 * /workspace stays its slave, so that a bind the shim places on it later
	 * appears inside; every other mount of the sandbox is private. */
	bool workspace_slave;
	const char *ro_binds; /* space-separated absolute host paths */
	/* A sandbox on an image (docs/IMAGES.md, sandbox-image.c): the image's
	 * unpacked root (a host directory) is the sandbox's root, read-only,
	 * nosuid, nodev, instead of ro_binds and etc_entries; image_lock is the
	 * image store's lock file. NULL: the host binds. */
	const char *image_root;
	const char *image_lock;
	/* Space-separated names under the host's /etc carried into the sandbox's
	 * /etc (read-only binds, symlinks recreated); passwd, group, hosts and
	 * hostname are always generated (sandbox_user, "sandbox"). */
	const char *etc_entries;
	const char *sandbox_user; /* the name of sandbox_uid in /etc/passwd and /etc/group */
	/* Limits set in the sandbox's own user namespace (/proc/sys/user). */
	int64_t userns_inotify_instances, userns_inotify_watches;
	int64_t userns_namespaces; /* each max_*_namespaces (its own included) */
	int64_t tmp_size;	   /* bytes, for /tmp and /dev/shm */
	int64_t tmp_inodes;	   /* nr_inodes of /tmp and of /dev/shm */
	uid_t sandbox_uid;	   /* uid = gid inside */
	uid_t host_uid;		   /* uid = gid outside; never 0 */
	/* seccomp (seccomp-policy.h): the INIT variant the init loads on itself at
	 * the end of its setup, and the EXEC_LAYER every exec child adds right
	 * before execve. Both required: without them nothing starts (fail closed). */
	const struct sock_fprog *seccomp;
	const struct sock_fprog *seccomp_exec;
	/* Resource limits of the init, inherited by every exec (soft = hard).
	 * RLIMIT_CORE and RLIMIT_RTPRIO are always 0. */
	int64_t rlimit_nofile, rlimit_fsize, rlimit_memlock;
	/* cgroups. cgroup_fd: a cgroup2 directory the init is cloned into
	 * (CLONE_INTO_CGROUP), or -1. procs_fds: cgroup.procs files (v1
	 * hierarchies) the init's pid is written to before it is released. */
	int cgroup_fd;
	const int *procs_fds;
	size_t n_procs_fds;
	/* Re-adoption (adopt.h): the listening socket the init keeps (or -1), how
	 * long it waits for a shim after losing its own (ms), and the bytes of each
	 * stream it keeps for a re-attach (exec_output_buffer). */
	int listen_fd;
	int64_t orphan_ms;
	uint64_t output_window;
	/* The sandbox-init helper (sandbox_init_open), executed by the spawner. */
	int init_exe_fd;
} SandboxSpec;

/* Open the sandbox-init helper (O_PATH, CLOEXEC) at path, or when path is NULL
 * next to the running executable (/proc/self/exe's directory: the shim's
 * pkglibexecdir, or the build directory). It must be a regular executable
 * file owned by root (or by the owner of the shim's executable) and writable
 * by nobody else (it runs as root): -EPERM otherwise, -ENOENT when missing. */
int sandbox_init_open(const char *path, int *ret_fd);

/* Spawning a sandbox init takes two steps, so that the shim's loop never
 * waits for the spawner (it captures the host sources and makes the clone
 * with every namespace: milliseconds).
 *
 * sandbox_spawn_begin() starts the spawner (a child of the caller, in the
 * sandbox's cgroup) and returns at once: *ret_spawner, *ret_spawner_pidfd
 * (CLOEXEC; polls readable once the spawner exited) and *ret_sock (the shim's
 * end of the init's socket, CLOEXEC, non-blocking). The caller owns the three;
 * spec is copied into the child and may go. To abandon a spawn, do not kill
 * the spawner: let it finish and kill the init sandbox_spawn_finish() gives
 * (a spawner killed after its clone leaves an init nobody knows the pid of).
 *
 * sandbox_spawn_finish(), once the spawner's pidfd polled readable (else it
 * waits for that), reaps the spawner, takes the init's pid and pidfd from the
 * socket, writes its maps (inside sandbox_uid ↔ host_uid) and releases it
 * (GO): *ret_pid, *ret_pidfd (CLOEXEC) are the init's; the outcome of its
 * setup (READY or SETUP_FAILED, then EOF) arrives later on the socket. A
 * negative errno when there is no init (the spawner's own error, or -EIO);
 * a half-created init is killed and reaped. Neither logs. */
int sandbox_spawn_begin(const SandboxSpec *spec, pid_t *ret_spawner, int *ret_spawner_pidfd,
			int *ret_sock);
int sandbox_spawn_finish(int spawner_pidfd, int sock, uid_t sandbox_uid, uid_t host_uid,
			 pid_t *ret_pid, int *ret_pidfd);

/* Whether name may be an etc_entries entry: one component, not one of the
 * generated files. */
bool sandbox_etc_name_ok(const char *name);

/* pidfd helpers (raw syscalls: glibc 2.36 has no wrappers for all of them). */
int sandbox_pidfd_kill(int pidfd, int sig);
