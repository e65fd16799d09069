/* SPDX-License-Identifier: MIT */
/*
 * seccomp-policy.c — THE seccomp table of the sandbox and its compiler. See
 * seccomp-policy.h for the semantics; the table below is the whole allowlist.
 * tests/unit/shim/test-seccomp-policy.c runs the compiled BPF for every row and
 * every syscall number and compares the verdicts with this table.
 */
#include "config.h"

#include "seccomp-policy.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <seccomp.h>

#include "fd-util.h"
#include "macro.h"

/* clang-format off */
#define G(grp, act, hlp, ...) \
	{grp, POLICY_##act, hlp, (const char *const[]){__VA_ARGS__, NULL}}
/* clang-format on */

/* One row per group of syscalls with one action and one reason. Anything not
 * listed gets ENOSYS. */
const SeccompPolicyGroup seccomp_policy_groups[] = {
    G("io", ALLOW, "read and write open descriptors", "read", "write", "readv", "writev", "pread64",
      "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "lseek"),
    G("io", ALLOW, "zero-copy transfers between descriptors", "sendfile", "splice", "tee",
      "vmsplice", "copy_file_range"),
    G("io", ALLOW, "flush data to storage", "fsync", "fdatasync", "sync", "syncfs",
      "sync_file_range"),
    G("io", ALLOW, "preallocation and read-ahead hints", "fallocate", "readahead", "fadvise64"),
    G("io", ALLOW, "descriptor table management", "close", "close_range", "dup", "dup2", "dup3",
      "fcntl", "flock"),
    G("io", ALLOW, "pipes", "pipe", "pipe2"),
    G("io", ARGS, "device control; TIOCSTI/TIOCLINUX (low 32 bits) EPERM", "ioctl"),
    G("io", ALLOW, "legacy POSIX AIO (databases, test suites)", "io_setup", "io_destroy",
      "io_getevents", "io_submit", "io_cancel", "io_pgetevents"),
    G("fs", ALLOW, "open files (paths resolve in the sandbox's own root)", "open", "openat",
      "openat2", "creat"),
    G("fs", ALLOW, "file status", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
      "fstatfs", "access", "faccessat", "faccessat2"),
    G("fs", ALLOW, "directories", "getdents", "getdents64", "getcwd", "chdir", "fchdir", "mkdir",
      "mkdirat", "rmdir"),
    G("fs", ALLOW, "names and links", "rename", "renameat", "renameat2", "link", "linkat", "unlink",
      "unlinkat", "symlink", "symlinkat", "readlink", "readlinkat"),
    G("fs", ALLOW, "ownership, modes and times (within the sandbox's uid)", "chmod", "fchmod",
      "fchmodat", "chown", "fchown", "lchown", "fchownat", "umask", "truncate", "ftruncate",
      "utime", "utimes", "utimensat", "futimesat"),
    G("fs", ALLOW, "FIFOs and sockets (device nodes need CAP_MKNOD: EPERM by the kernel)", "mknod",
      "mknodat"),
    G("fs", ALLOW, "extended attributes", "setxattr", "lsetxattr", "fsetxattr", "getxattr",
      "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr", "removexattr",
      "lremovexattr", "fremovexattr"),
    G("fs", ALLOW, "file change notification (build watchers)", "inotify_init", "inotify_init1",
      "inotify_add_watch", "inotify_rm_watch"),
    G("fs", ALLOW, "anonymous memory files (JITs, shared memory)", "memfd_create"),
    G("mm", ALLOW, "memory mappings", "mmap", "munmap", "mprotect", "mremap", "msync", "mincore",
      "madvise", "brk", "remap_file_pages"),
    G("mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)", "mlock", "mlock2", "munlock",
      "mlockall", "munlockall"),
    G("mm", ALLOW, "memory protection keys", "pkey_mprotect", "pkey_alloc", "pkey_free"),
    G("mm", ALLOW, "NUMA policy of the caller's own memory", "mbind", "set_mempolicy",
      "get_mempolicy"),
    G("mm", ALLOW, "memory barriers across the caller's threads", "membarrier"),
    G("process", ALLOW, "create processes (fork, vfork)", "fork", "vfork"),
    G("process", ARGS, "threads and processes; namespace flags EPERM", "clone"),
    G("process", ENOSYS, "flags live in memory the filter cannot read: glibc falls back to clone",
      "clone3"),
    G("process", ALLOW, "run programs", "execve", "execveat"),
    G("process", ALLOW, "end and wait for processes", "exit", "exit_group", "wait4", "waitid"),
    G("process", ALLOW, "signal processes of the sandbox (its own pid namespace)", "kill", "tkill",
      "tgkill", "pidfd_open", "pidfd_send_signal"),
    G("process", ALLOW, "process ids, groups and sessions", "getpid", "getppid", "gettid",
      "getpgid", "getpgrp", "setpgid", "getsid", "setsid"),
    G("process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)", "getuid",
      "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid", "setgid",
      "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups"),
    G("process", ALLOW, "capabilities (all sets are empty; capset can only drop)", "capget",
      "capset"),
    G("process", ALLOW, "process attributes (no_new_privs is set, capabilities are gone)", "prctl",
      "arch_prctl", "set_tid_address", "set_robust_list", "get_robust_list", "rseq",
      "set_thread_area", "get_thread_area"),
    G("process", ALLOW, "resource limits and usage (raising hard limits needs a capability)",
      "getrlimit", "setrlimit", "prlimit64", "getrusage", "times"),
    G("process", ALLOW, "scheduling of the sandbox's own processes", "getpriority", "setpriority",
      "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
      "sched_getscheduler", "sched_setscheduler", "sched_get_priority_max",
      "sched_get_priority_min", "sched_rr_get_interval", "sched_getattr", "sched_setattr",
      "ioprio_get", "ioprio_set", "getcpu"),
    G("process", ALLOW, "nested filters can only restrict further", "seccomp"),
    G("process", ALLOW, "unprivileged Landlock self-restriction", "landlock_create_ruleset",
      "landlock_add_rule", "landlock_restrict_self"),
    G("process", ARGS, "execution domain: only the default (0) and the query (0xffffffff)",
      "personality"),
    G("process", ALLOW, "system identity (uts namespace; sethostname needs a capability)", "uname",
      "sethostname", "setdomainname", "sysinfo"),
    G("process", ALLOW, "randomness", "getrandom"),
    G("sync", ALLOW, "futexes", "futex", "futex_waitv"),
    G("signal", ALLOW, "signal handling", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn",
      "rt_sigpending", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend",
      "sigaltstack", "pause", "restart_syscall", "signalfd", "signalfd4"),
    G("time", ALLOW, "clocks and sleeping", "nanosleep", "clock_nanosleep", "clock_gettime",
      "clock_getres", "gettimeofday", "time"),
    G("time", ALLOW, "timers", "alarm", "getitimer", "setitimer", "timer_create", "timer_settime",
      "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create", "timerfd_settime",
      "timerfd_gettime"),
    G("event", ALLOW, "waiting for descriptors", "poll", "ppoll", "select", "pselect6",
      "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
      "eventfd", "eventfd2"),
    G("net", ARGS, "AF_UNIX, AF_INET, AF_INET6 only; SOCK_RAW EPERM", "socket"),
    G("net", ALLOW, "socket operations (the netns has only lo)", "socketpair", "connect", "accept",
      "accept4", "bind", "listen", "getsockname", "getpeername", "sendto", "recvfrom", "sendmsg",
      "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "setsockopt", "getsockopt"),
    G("ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)", "shmget", "shmat",
      "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl", "msgget", "msgsnd", "msgrcv",
      "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify",
      "mq_getsetattr"),
    G("deny", EPERM, "tracing and reading other processes' memory", "ptrace", "process_vm_readv",
      "process_vm_writev"),
    G("deny", EPERM, "mounting (also the new mount API)", "mount", "umount2", "pivot_root",
      "chroot", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
      "mount_setattr"),
    G("deny", EPERM, "namespaces", "unshare", "setns"),
    G("deny", EPERM, "kernel attack surface: eBPF, perf, userfaultfd", "bpf", "perf_event_open",
      "userfaultfd"),
    G("deny", EPERM, "kernel keyrings", "keyctl", "add_key", "request_key"),
    G("deny", EPERM, "io_uring (bypasses this filter)", "io_uring_setup", "io_uring_enter",
      "io_uring_register"),
    G("deny", EPERM, "file handles (escape the mount namespace)", "open_by_handle_at",
      "name_to_handle_at"),
    G("deny", EPERM, "host administration", "swapon", "swapoff", "syslog", "acct", "quotactl",
      "quotactl_fd", "lookup_dcookie", "vhangup", "fanotify_init"),
    G("deny", EPERM, "raw I/O ports", "iopl", "ioperm"),
    G("deny", EPERM, "setting the host clock", "settimeofday", "clock_settime", "clock_adjtime",
      "adjtimex"),
    G("deny", KILL, "kernel modules", "init_module", "finit_module", "delete_module"),
    G("deny", KILL, "reboot and kexec", "reboot", "kexec_load", "kexec_file_load"),
};
const size_t seccomp_policy_n_groups = ELEMENTSOF(seccomp_policy_groups);

#undef G

/* clone(2) flags that create namespaces (CLONE_NEWTIME is only valid for
 * unshare/clone3; in clone's flags that bit is part of the exit signal). */
#define CLONE_NS_FLAGS                                                                             \
	(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |             \
	 CLONE_NEWPID | CLONE_NEWNET)

const char *
seccomp_policy_action_name(SeccompPolicyAction a)
{
	static const char *const names[_POLICY_ACTION_MAX] = {
	    [POLICY_ALLOW] = "allow", [POLICY_EPERM] = "EPERM", [POLICY_ENOSYS] = "ENOSYS",
	    [POLICY_KILL] = "kill",   [POLICY_ARGS] = "args",
	};
	return a < _POLICY_ACTION_MAX ? names[a] : "?";
}

static int
add(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned n, const struct scmp_arg_cmp *cmp)
{
	return seccomp_rule_add_array(ctx, action, nr, n, cmp);
}

/* clone: allowed when no namespace flag is set; one EPERM rule per flag. The
 * rules are disjoint from the allow rule and together cover every value. */
static int
build_clone(scmp_filter_ctx ctx, int nr)
{
	struct scmp_arg_cmp ok = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NS_FLAGS, 0);
	int r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &ok);

	for (unsigned bit = 0; r >= 0 && bit < 32; bit++) {
		uint64_t f = 1ULL << bit;
		if (!(CLONE_NS_FLAGS & f))
			continue;
		struct scmp_arg_cmp deny = SCMP_A0(SCMP_CMP_MASKED_EQ, f, f);
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &deny);
	}
	return r;
}

/* socket(family, type, protocol). Allowed: AF_UNIX with any type, AF_INET and
 * AF_INET6 with SOCK_STREAM or SOCK_DGRAM (type & 0xf; the high bits are
 * SOCK_NONBLOCK/SOCK_CLOEXEC). Other types of the IP families: EPERM. Every
 * other family: EAFNOSUPPORT (exact values below AF_MAX compared on 32 bits,
 * everything from AF_MAX up as one range). A family with garbage in the high
 * 32 bits matches nothing and gets the default ENOSYS. */
static int
build_socket(scmp_filter_ctx ctx, int nr)
{
	static const int ip[] = {AF_INET, AF_INET6};
	struct scmp_arg_cmp c[2];
	int r;

	c[0] = SCMP_A0(SCMP_CMP_EQ, AF_UNIX);
	r = add(ctx, SCMP_ACT_ALLOW, nr, 1, c);
	for (size_t i = 0; r >= 0 && i < ELEMENTSOF(ip); i++)
		for (unsigned t = 0; r >= 0 && t < 16; t++) {
			c[0] = SCMP_A0(SCMP_CMP_EQ, (uint64_t)ip[i]);
			c[1] = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, t);
			r = add(ctx,
				t == SOCK_STREAM || t == SOCK_DGRAM ? SCMP_ACT_ALLOW
								    : SCMP_ACT_ERRNO(EPERM),
				nr, 2, c);
		}
	for (int fam = 0; r >= 0 && fam < AF_MAX; fam++) {
		if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6)
			continue;
		c[0] = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint64_t)fam);
		r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1, c);
	}
	if (r >= 0) {
		c[0] = SCMP_A0(SCMP_CMP_GE, AF_MAX);
		r = add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 1, c);
	}
	return r;
}

/* ioctl(fd, cmd, …): deny cmd ∈ {TIOCSTI, TIOCLINUX} on its low 32 bits, allow
 * the rest. "Not one of these" is built as disjoint masked equalities: for each
 * bit where both denied values agree, "this bit differs" allows (one rule per
 * bit); where all those bits match, the remaining bits (where the two values
 * differ) are enumerated exactly, each combination allowed unless denied. */
static int
build_ioctl(scmp_filter_ctx ctx, int nr)
{
	static const uint32_t denied[] = {TIOCSTI, TIOCLINUX};
	uint32_t agree = 0xffffffffU, free_bits, common;
	struct scmp_arg_cmp c;
	int r = 0;

	for (size_t i = 1; i < ELEMENTSOF(denied); i++)
		agree &= ~(denied[0] ^ denied[i]);
	free_bits = ~agree;
	common = denied[0] & agree;
	for (unsigned bit = 0; r >= 0 && bit < 32; bit++) {
		uint32_t b = 1U << bit;
		if (!(agree & b))
			continue;
		c = SCMP_A1(SCMP_CMP_MASKED_EQ, b, (~common) & b);
		r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
	}
	/* Enumerate the subsets of free_bits (a handful of bits). */
	for (uint32_t sub = free_bits;; sub = (sub - 1) & free_bits) {
		uint32_t v = common | sub;
		bool deny = false;
		for (size_t i = 0; i < ELEMENTSOF(denied); i++)
			deny = deny || v == denied[i];
		if (r >= 0) {
			c = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, v);
			r = add(ctx, deny ? SCMP_ACT_ERRNO(EPERM) : SCMP_ACT_ALLOW, nr, 1, &c);
		}
		if (sub == 0)
			break;
	}
	return r;
}

/* personality(persona): 0 and 0xffffffff (low 32 bits, the kernel's unsigned
 * int) allowed; anything else EPERM, as disjoint two-bit rules: bit 0 clear and
 * some bit b set, or bit 0 set and some bit b clear (overlaps among EPERM rules
 * are harmless). */
static int
build_personality(scmp_filter_ctx ctx, int nr)
{
	struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, 0);
	int r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);

	if (r >= 0) {
		c = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, 0xffffffffULL);
		r = add(ctx, SCMP_ACT_ALLOW, nr, 1, &c);
	}
	for (unsigned bit = 1; r >= 0 && bit < 32; bit++) {
		uint64_t m = 1ULL | 1ULL << bit;
		c = SCMP_A0(SCMP_CMP_MASKED_EQ, m, 1ULL << bit);
		r = add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &c);
		if (r >= 0) {
			c = SCMP_A0(SCMP_CMP_MASKED_EQ, m, 1ULL);
			r = add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, &c);
		}
	}
	return r;
}

static int
build_args(scmp_filter_ctx ctx, const char *name, int nr)
{
	if (streq(name, "clone"))
		return build_clone(ctx, nr);
	if (streq(name, "socket"))
		return build_socket(ctx, nr);
	if (streq(name, "ioctl"))
		return build_ioctl(ctx, nr);
	if (streq(name, "personality"))
		return build_personality(ctx, nr);
	return -EINVAL; /* an ARGS row without a builder is a bug in the table */
}

/* One syscall of a group: its action as a rule of ctx. */
static int
add_row(scmp_filter_ctx ctx, SeccompPolicyVariant v, SeccompPolicyAction action, const char *name)
{
	int nr = seccomp_syscall_resolve_name(name);

	if (nr == __NR_SCMP_ERROR || nr < 0)
		return -ENOENT;
	switch (action) {
	case POLICY_ALLOW: return add(ctx, SCMP_ACT_ALLOW, nr, 0, NULL);
	case POLICY_EPERM: return add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0, NULL);
	case POLICY_ENOSYS:
		/* The default action already; libseccomp refuses a rule equal to
		 * it (-EACCES). The row documents the choice, the test checks it.
		 * The init's own variant allows clone3 (it creates the execs);
		 * each exec adds the EXEC_LAYER, which gives the row back. */
		if (v == SECCOMP_POLICY_INIT && nr == __NR_clone3)
			return add(ctx, SCMP_ACT_ALLOW, nr, 0, NULL);
		return 0;
	case POLICY_KILL: return add(ctx, SCMP_ACT_KILL_PROCESS, nr, 0, NULL);
	case POLICY_ARGS: return build_args(ctx, name, nr);
	default: return -EINVAL;
	}
}

int
seccomp_policy_build_variant(SeccompPolicyVariant v, void **ret_ctx)
{
#if !defined(__x86_64__)
	return -EOPNOTSUPP; /* the arch handling below is written for x86_64 only */
#else
	scmp_filter_ctx ctx;
	int r;

	if (v == SECCOMP_POLICY_EXEC_LAYER) {
		/* The layer each exec adds on top of the init's: clone3 → ENOSYS. */
		ctx = seccomp_init(SCMP_ACT_ALLOW);
		if (!ctx)
			return -ENOMEM;
		r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
		if (r >= 0)
			r = add(ctx, SCMP_ACT_ERRNO(ENOSYS), __NR_clone3, 0, NULL);
		if (r < 0) {
			seccomp_release(ctx);
			return r;
		}
		*ret_ctx = ctx;
		return 0;
	}
	ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
	if (!ctx)
		return -ENOMEM;
	/* Only the native ABI: libseccomp then sends every other AUDIT_ARCH (i386
	 * int 0x80) and x32 numbers (__X32_SYSCALL_BIT) to the bad-arch action. */
	r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r >= 0 && seccomp_arch_exist(ctx, SCMP_ARCH_X86) == 0)
		r = seccomp_arch_remove(ctx, SCMP_ARCH_X86);
	if (r >= 0 && seccomp_arch_exist(ctx, SCMP_ARCH_X32) == 0)
		r = seccomp_arch_remove(ctx, SCMP_ARCH_X32);
	for (size_t i = 0; r >= 0 && i < seccomp_policy_n_groups; i++)
		for (const char *const *n = seccomp_policy_groups[i].syscalls; r >= 0 && *n; n++)
			r = add_row(ctx, v, seccomp_policy_groups[i].action, *n);
	if (r < 0) {
		seccomp_release(ctx);
		return r;
	}
	*ret_ctx = ctx;
	return 0;
#endif
}

int
seccomp_policy_compile(struct sock_fprog *ret)
{
	return seccomp_policy_compile_variant(SECCOMP_POLICY_AGENT, ret);
}

int
seccomp_policy_compile_variant(SeccompPolicyVariant v, struct sock_fprog *ret)
{
	_cleanup_close_ int fd = -1;
	struct sock_filter *insns = NULL;
	scmp_filter_ctx ctx = NULL;
	struct stat st;
	ssize_t n;
	int r;

	r = seccomp_policy_build_variant(v, &ctx);
	if (r < 0)
		return r;
	/* libseccomp 2.5 exports BPF only to a file descriptor. */
	fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
	if (fd < 0)
		r = -errno;
	if (r >= 0)
		r = seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	if (r < 0)
		return r;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return -E2BIG;
	insns = malloc((size_t)st.st_size);
	if (!insns)
		return -ENOMEM;
	n = pread(fd, insns, (size_t)st.st_size, 0);
	if (n != st.st_size) {
		free(insns);
		return n < 0 ? -errno : -EIO;
	}
	ret->filter = insns;
	ret->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
	return 0;
}

int
seccomp_policy_load(const struct sock_fprog *prog)
{
	return RET_NERRNO(
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog));
}

const SeccompPolicyGroup *
seccomp_policy_find(const char *name)
{
	for (size_t i = 0; i < seccomp_policy_n_groups; i++)
		for (const char *const *n = seccomp_policy_groups[i].syscalls; *n; n++)
			if (streq(*n, name))
				return &seccomp_policy_groups[i];
	return NULL;
}

size_t
seccomp_policy_n_syscalls(void)
{
	size_t k = 0;
	for (size_t i = 0; i < seccomp_policy_n_groups; i++)
		for (const char *const *n = seccomp_policy_groups[i].syscalls; *n; n++)
			k++;
	return k;
}
