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

#define R(n, g, a, h)                                                                              \
	{                                                                                          \
		n, g, POLICY_##a, h                                                                \
	}

/* One row per syscall. Anything not listed gets ENOSYS. */
const SeccompPolicyRow seccomp_policy_table[] = {
    /* io: read and write open descriptors */
    R("read", "io", ALLOW, "read and write open descriptors"),
    R("write", "io", ALLOW, "read and write open descriptors"),
    R("readv", "io", ALLOW, "read and write open descriptors"),
    R("writev", "io", ALLOW, "read and write open descriptors"),
    R("pread64", "io", ALLOW, "read and write open descriptors"),
    R("pwrite64", "io", ALLOW, "read and write open descriptors"),
    R("preadv", "io", ALLOW, "read and write open descriptors"),
    R("pwritev", "io", ALLOW, "read and write open descriptors"),
    R("preadv2", "io", ALLOW, "read and write open descriptors"),
    R("pwritev2", "io", ALLOW, "read and write open descriptors"),
    R("lseek", "io", ALLOW, "read and write open descriptors"),
    /* io: zero-copy transfers between descriptors */
    R("sendfile", "io", ALLOW, "zero-copy transfers between descriptors"),
    R("splice", "io", ALLOW, "zero-copy transfers between descriptors"),
    R("tee", "io", ALLOW, "zero-copy transfers between descriptors"),
    R("vmsplice", "io", ALLOW, "zero-copy transfers between descriptors"),
    R("copy_file_range", "io", ALLOW, "zero-copy transfers between descriptors"),
    /* io: flush data to storage */
    R("fsync", "io", ALLOW, "flush data to storage"),
    R("fdatasync", "io", ALLOW, "flush data to storage"),
    R("sync", "io", ALLOW, "flush data to storage"),
    R("syncfs", "io", ALLOW, "flush data to storage"),
    R("sync_file_range", "io", ALLOW, "flush data to storage"),
    /* io: preallocation and read-ahead hints */
    R("fallocate", "io", ALLOW, "preallocation and read-ahead hints"),
    R("readahead", "io", ALLOW, "preallocation and read-ahead hints"),
    R("fadvise64", "io", ALLOW, "preallocation and read-ahead hints"),
    /* io: descriptor table management */
    R("close", "io", ALLOW, "descriptor table management"),
    R("close_range", "io", ALLOW, "descriptor table management"),
    R("dup", "io", ALLOW, "descriptor table management"),
    R("dup2", "io", ALLOW, "descriptor table management"),
    R("dup3", "io", ALLOW, "descriptor table management"),
    R("fcntl", "io", ALLOW, "descriptor table management"),
    R("flock", "io", ALLOW, "descriptor table management"),
    /* io: pipes */
    R("pipe", "io", ALLOW, "pipes"),
    R("pipe2", "io", ALLOW, "pipes"),
    /* io: device control; TIOCSTI/TIOCLINUX (low 32 bits) EPERM */
    R("ioctl", "io", ARGS, "device control; TIOCSTI/TIOCLINUX (low 32 bits) EPERM"),
    /* io: legacy POSIX AIO (databases, test suites) */
    R("io_setup", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    R("io_destroy", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    R("io_getevents", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    R("io_submit", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    R("io_cancel", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    R("io_pgetevents", "io", ALLOW, "legacy POSIX AIO (databases, test suites)"),
    /* fs: open files (paths resolve in the sandbox's own root) */
    R("open", "fs", ALLOW, "open files (paths resolve in the sandbox's own root)"),
    R("openat", "fs", ALLOW, "open files (paths resolve in the sandbox's own root)"),
    R("openat2", "fs", ALLOW, "open files (paths resolve in the sandbox's own root)"),
    R("creat", "fs", ALLOW, "open files (paths resolve in the sandbox's own root)"),
    /* fs: file status */
    R("stat", "fs", ALLOW, "file status"),
    R("fstat", "fs", ALLOW, "file status"),
    R("lstat", "fs", ALLOW, "file status"),
    R("newfstatat", "fs", ALLOW, "file status"),
    R("statx", "fs", ALLOW, "file status"),
    R("statfs", "fs", ALLOW, "file status"),
    R("fstatfs", "fs", ALLOW, "file status"),
    R("access", "fs", ALLOW, "file status"),
    R("faccessat", "fs", ALLOW, "file status"),
    R("faccessat2", "fs", ALLOW, "file status"),
    /* fs: directories */
    R("getdents", "fs", ALLOW, "directories"),
    R("getdents64", "fs", ALLOW, "directories"),
    R("getcwd", "fs", ALLOW, "directories"),
    R("chdir", "fs", ALLOW, "directories"),
    R("fchdir", "fs", ALLOW, "directories"),
    R("mkdir", "fs", ALLOW, "directories"),
    R("mkdirat", "fs", ALLOW, "directories"),
    R("rmdir", "fs", ALLOW, "directories"),
    /* fs: names and links */
    R("rename", "fs", ALLOW, "names and links"),
    R("renameat", "fs", ALLOW, "names and links"),
    R("renameat2", "fs", ALLOW, "names and links"),
    R("link", "fs", ALLOW, "names and links"),
    R("linkat", "fs", ALLOW, "names and links"),
    R("unlink", "fs", ALLOW, "names and links"),
    R("unlinkat", "fs", ALLOW, "names and links"),
    R("symlink", "fs", ALLOW, "names and links"),
    R("symlinkat", "fs", ALLOW, "names and links"),
    R("readlink", "fs", ALLOW, "names and links"),
    R("readlinkat", "fs", ALLOW, "names and links"),
    /* fs: ownership, modes and times (within the sandbox's uid) */
    R("chmod", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("fchmod", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("fchmodat", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("chown", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("fchown", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("lchown", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("fchownat", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("umask", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("truncate", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("ftruncate", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("utime", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("utimes", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("utimensat", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    R("futimesat", "fs", ALLOW, "ownership, modes and times (within the sandbox's uid)"),
    /* fs: FIFOs and sockets (device nodes need CAP_MKNOD: EPERM by the kernel) */
    R("mknod", "fs", ALLOW, "FIFOs and sockets (device nodes need CAP_MKNOD: EPERM by the kernel)"),
    R("mknodat", "fs", ALLOW,
      "FIFOs and sockets (device nodes need CAP_MKNOD: EPERM by the kernel)"),
    /* fs: extended attributes */
    R("setxattr", "fs", ALLOW, "extended attributes"),
    R("lsetxattr", "fs", ALLOW, "extended attributes"),
    R("fsetxattr", "fs", ALLOW, "extended attributes"),
    R("getxattr", "fs", ALLOW, "extended attributes"),
    R("lgetxattr", "fs", ALLOW, "extended attributes"),
    R("fgetxattr", "fs", ALLOW, "extended attributes"),
    R("listxattr", "fs", ALLOW, "extended attributes"),
    R("llistxattr", "fs", ALLOW, "extended attributes"),
    R("flistxattr", "fs", ALLOW, "extended attributes"),
    R("removexattr", "fs", ALLOW, "extended attributes"),
    R("lremovexattr", "fs", ALLOW, "extended attributes"),
    R("fremovexattr", "fs", ALLOW, "extended attributes"),
    /* fs: file change notification (build watchers) */
    R("inotify_init", "fs", ALLOW, "file change notification (build watchers)"),
    R("inotify_init1", "fs", ALLOW, "file change notification (build watchers)"),
    R("inotify_add_watch", "fs", ALLOW, "file change notification (build watchers)"),
    R("inotify_rm_watch", "fs", ALLOW, "file change notification (build watchers)"),
    /* fs: anonymous memory files (JITs, shared memory) */
    R("memfd_create", "fs", ALLOW, "anonymous memory files (JITs, shared memory)"),
    /* mm: memory mappings */
    R("mmap", "mm", ALLOW, "memory mappings"),
    R("munmap", "mm", ALLOW, "memory mappings"),
    R("mprotect", "mm", ALLOW, "memory mappings"),
    R("mremap", "mm", ALLOW, "memory mappings"),
    R("msync", "mm", ALLOW, "memory mappings"),
    R("mincore", "mm", ALLOW, "memory mappings"),
    R("madvise", "mm", ALLOW, "memory mappings"),
    R("brk", "mm", ALLOW, "memory mappings"),
    R("remap_file_pages", "mm", ALLOW, "memory mappings"),
    /* mm: page locking (bounded by RLIMIT_MEMLOCK) */
    R("mlock", "mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)"),
    R("mlock2", "mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)"),
    R("munlock", "mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)"),
    R("mlockall", "mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)"),
    R("munlockall", "mm", ALLOW, "page locking (bounded by RLIMIT_MEMLOCK)"),
    /* mm: memory protection keys */
    R("pkey_mprotect", "mm", ALLOW, "memory protection keys"),
    R("pkey_alloc", "mm", ALLOW, "memory protection keys"),
    R("pkey_free", "mm", ALLOW, "memory protection keys"),
    /* mm: NUMA policy of the caller's own memory */
    R("mbind", "mm", ALLOW, "NUMA policy of the caller's own memory"),
    R("set_mempolicy", "mm", ALLOW, "NUMA policy of the caller's own memory"),
    R("get_mempolicy", "mm", ALLOW, "NUMA policy of the caller's own memory"),
    /* mm: memory barriers across the caller's threads */
    R("membarrier", "mm", ALLOW, "memory barriers across the caller's threads"),
    /* process: create processes (fork, vfork) */
    R("fork", "process", ALLOW, "create processes (fork, vfork)"),
    R("vfork", "process", ALLOW, "create processes (fork, vfork)"),
    /* process: threads and processes; namespace flags EPERM */
    R("clone", "process", ARGS, "threads and processes; namespace flags EPERM"),
    /* process: flags live in memory the filter cannot read: glibc falls back to clone */
    R("clone3", "process", ENOSYS,
      "flags live in memory the filter cannot read: glibc falls back to clone"),
    /* process: run programs */
    R("execve", "process", ALLOW, "run programs"),
    R("execveat", "process", ALLOW, "run programs"),
    /* process: end and wait for processes */
    R("exit", "process", ALLOW, "end and wait for processes"),
    R("exit_group", "process", ALLOW, "end and wait for processes"),
    R("wait4", "process", ALLOW, "end and wait for processes"),
    R("waitid", "process", ALLOW, "end and wait for processes"),
    /* process: signal processes of the sandbox (its own pid namespace) */
    R("kill", "process", ALLOW, "signal processes of the sandbox (its own pid namespace)"),
    R("tkill", "process", ALLOW, "signal processes of the sandbox (its own pid namespace)"),
    R("tgkill", "process", ALLOW, "signal processes of the sandbox (its own pid namespace)"),
    R("pidfd_open", "process", ALLOW, "signal processes of the sandbox (its own pid namespace)"),
    R("pidfd_send_signal", "process", ALLOW,
      "signal processes of the sandbox (its own pid namespace)"),
    /* process: process ids, groups and sessions */
    R("getpid", "process", ALLOW, "process ids, groups and sessions"),
    R("getppid", "process", ALLOW, "process ids, groups and sessions"),
    R("gettid", "process", ALLOW, "process ids, groups and sessions"),
    R("getpgid", "process", ALLOW, "process ids, groups and sessions"),
    R("getpgrp", "process", ALLOW, "process ids, groups and sessions"),
    R("setpgid", "process", ALLOW, "process ids, groups and sessions"),
    R("getsid", "process", ALLOW, "process ids, groups and sessions"),
    R("setsid", "process", ALLOW, "process ids, groups and sessions"),
    /* process: credentials (only the one mapped id exists; setgroups is denied by the kernel) */
    R("getuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("geteuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("getgid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("getegid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("getresuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("getresgid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("getgroups", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setgid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setreuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setregid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setresuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setresgid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setfsuid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setfsgid", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    R("setgroups", "process", ALLOW,
      "credentials (only the one mapped id exists; setgroups is denied by the kernel)"),
    /* process: capabilities (all sets are empty; capset can only drop) */
    R("capget", "process", ALLOW, "capabilities (all sets are empty; capset can only drop)"),
    R("capset", "process", ALLOW, "capabilities (all sets are empty; capset can only drop)"),
    /* process: process attributes (no_new_privs is set, capabilities are gone) */
    R("prctl", "process", ALLOW, "process attributes (no_new_privs is set, capabilities are gone)"),
    R("arch_prctl", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    R("set_tid_address", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    R("set_robust_list", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    R("get_robust_list", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    R("rseq", "process", ALLOW, "process attributes (no_new_privs is set, capabilities are gone)"),
    R("set_thread_area", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    R("get_thread_area", "process", ALLOW,
      "process attributes (no_new_privs is set, capabilities are gone)"),
    /* process: resource limits and usage (raising hard limits needs a capability) */
    R("getrlimit", "process", ALLOW,
      "resource limits and usage (raising hard limits needs a capability)"),
    R("setrlimit", "process", ALLOW,
      "resource limits and usage (raising hard limits needs a capability)"),
    R("prlimit64", "process", ALLOW,
      "resource limits and usage (raising hard limits needs a capability)"),
    R("getrusage", "process", ALLOW,
      "resource limits and usage (raising hard limits needs a capability)"),
    R("times", "process", ALLOW,
      "resource limits and usage (raising hard limits needs a capability)"),
    /* process: scheduling of the sandbox's own processes */
    R("getpriority", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("setpriority", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_yield", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_getaffinity", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_setaffinity", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_getparam", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_setparam", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_getscheduler", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_setscheduler", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_get_priority_max", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_get_priority_min", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_rr_get_interval", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_getattr", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("sched_setattr", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("ioprio_get", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("ioprio_set", "process", ALLOW, "scheduling of the sandbox's own processes"),
    R("getcpu", "process", ALLOW, "scheduling of the sandbox's own processes"),
    /* process: nested filters can only restrict further */
    R("seccomp", "process", ALLOW, "nested filters can only restrict further"),
    /* process: unprivileged Landlock self-restriction */
    R("landlock_create_ruleset", "process", ALLOW, "unprivileged Landlock self-restriction"),
    R("landlock_add_rule", "process", ALLOW, "unprivileged Landlock self-restriction"),
    R("landlock_restrict_self", "process", ALLOW, "unprivileged Landlock self-restriction"),
    /* process: execution domain: only the default (0) and the query (0xffffffff) */
    R("personality", "process", ARGS,
      "execution domain: only the default (0) and the query (0xffffffff)"),
    /* process: system identity (uts namespace; sethostname needs a capability) */
    R("uname", "process", ALLOW, "system identity (uts namespace; sethostname needs a capability)"),
    R("sethostname", "process", ALLOW,
      "system identity (uts namespace; sethostname needs a capability)"),
    R("setdomainname", "process", ALLOW,
      "system identity (uts namespace; sethostname needs a capability)"),
    R("sysinfo", "process", ALLOW,
      "system identity (uts namespace; sethostname needs a capability)"),
    /* process: randomness */
    R("getrandom", "process", ALLOW, "randomness"),
    /* sync: futexes */
    R("futex", "sync", ALLOW, "futexes"),
    R("futex_waitv", "sync", ALLOW, "futexes"),
    /* signal: signal handling */
    R("rt_sigaction", "signal", ALLOW, "signal handling"),
    R("rt_sigprocmask", "signal", ALLOW, "signal handling"),
    R("rt_sigreturn", "signal", ALLOW, "signal handling"),
    R("rt_sigpending", "signal", ALLOW, "signal handling"),
    R("rt_sigtimedwait", "signal", ALLOW, "signal handling"),
    R("rt_sigqueueinfo", "signal", ALLOW, "signal handling"),
    R("rt_tgsigqueueinfo", "signal", ALLOW, "signal handling"),
    R("rt_sigsuspend", "signal", ALLOW, "signal handling"),
    R("sigaltstack", "signal", ALLOW, "signal handling"),
    R("pause", "signal", ALLOW, "signal handling"),
    R("restart_syscall", "signal", ALLOW, "signal handling"),
    R("signalfd", "signal", ALLOW, "signal handling"),
    R("signalfd4", "signal", ALLOW, "signal handling"),
    /* time: clocks and sleeping */
    R("nanosleep", "time", ALLOW, "clocks and sleeping"),
    R("clock_nanosleep", "time", ALLOW, "clocks and sleeping"),
    R("clock_gettime", "time", ALLOW, "clocks and sleeping"),
    R("clock_getres", "time", ALLOW, "clocks and sleeping"),
    R("gettimeofday", "time", ALLOW, "clocks and sleeping"),
    R("time", "time", ALLOW, "clocks and sleeping"),
    /* time: timers */
    R("alarm", "time", ALLOW, "timers"),
    R("getitimer", "time", ALLOW, "timers"),
    R("setitimer", "time", ALLOW, "timers"),
    R("timer_create", "time", ALLOW, "timers"),
    R("timer_settime", "time", ALLOW, "timers"),
    R("timer_gettime", "time", ALLOW, "timers"),
    R("timer_getoverrun", "time", ALLOW, "timers"),
    R("timer_delete", "time", ALLOW, "timers"),
    R("timerfd_create", "time", ALLOW, "timers"),
    R("timerfd_settime", "time", ALLOW, "timers"),
    R("timerfd_gettime", "time", ALLOW, "timers"),
    /* event: waiting for descriptors */
    R("poll", "event", ALLOW, "waiting for descriptors"),
    R("ppoll", "event", ALLOW, "waiting for descriptors"),
    R("select", "event", ALLOW, "waiting for descriptors"),
    R("pselect6", "event", ALLOW, "waiting for descriptors"),
    R("epoll_create", "event", ALLOW, "waiting for descriptors"),
    R("epoll_create1", "event", ALLOW, "waiting for descriptors"),
    R("epoll_ctl", "event", ALLOW, "waiting for descriptors"),
    R("epoll_wait", "event", ALLOW, "waiting for descriptors"),
    R("epoll_pwait", "event", ALLOW, "waiting for descriptors"),
    R("epoll_pwait2", "event", ALLOW, "waiting for descriptors"),
    R("eventfd", "event", ALLOW, "waiting for descriptors"),
    R("eventfd2", "event", ALLOW, "waiting for descriptors"),
    /* net: AF_UNIX, AF_INET, AF_INET6 only; SOCK_RAW EPERM */
    R("socket", "net", ARGS, "AF_UNIX, AF_INET, AF_INET6 only; SOCK_RAW EPERM"),
    /* net: socket operations (the netns has only lo) */
    R("socketpair", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("connect", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("accept", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("accept4", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("bind", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("listen", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("getsockname", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("getpeername", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("sendto", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("recvfrom", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("sendmsg", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("recvmsg", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("sendmmsg", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("recvmmsg", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("shutdown", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("setsockopt", "net", ALLOW, "socket operations (the netns has only lo)"),
    R("getsockopt", "net", ALLOW, "socket operations (the netns has only lo)"),
    /* ipc: System V and POSIX IPC (the sandbox's own ipc namespace) */
    R("shmget", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("shmat", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("shmdt", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("shmctl", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("semget", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("semop", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("semtimedop", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("semctl", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("msgget", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("msgsnd", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("msgrcv", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("msgctl", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_open", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_unlink", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_timedsend", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_timedreceive", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_notify", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    R("mq_getsetattr", "ipc", ALLOW, "System V and POSIX IPC (the sandbox's own ipc namespace)"),
    /* deny: tracing and reading other processes' memory */
    R("ptrace", "deny", EPERM, "tracing and reading other processes' memory"),
    R("process_vm_readv", "deny", EPERM, "tracing and reading other processes' memory"),
    R("process_vm_writev", "deny", EPERM, "tracing and reading other processes' memory"),
    /* deny: mounting (also the new mount API) */
    R("mount", "deny", EPERM, "mounting (also the new mount API)"),
    R("umount2", "deny", EPERM, "mounting (also the new mount API)"),
    R("pivot_root", "deny", EPERM, "mounting (also the new mount API)"),
    R("chroot", "deny", EPERM, "mounting (also the new mount API)"),
    R("fsopen", "deny", EPERM, "mounting (also the new mount API)"),
    R("fsconfig", "deny", EPERM, "mounting (also the new mount API)"),
    R("fsmount", "deny", EPERM, "mounting (also the new mount API)"),
    R("fspick", "deny", EPERM, "mounting (also the new mount API)"),
    R("move_mount", "deny", EPERM, "mounting (also the new mount API)"),
    R("open_tree", "deny", EPERM, "mounting (also the new mount API)"),
    R("mount_setattr", "deny", EPERM, "mounting (also the new mount API)"),
    /* deny: namespaces */
    R("unshare", "deny", EPERM, "namespaces"),
    R("setns", "deny", EPERM, "namespaces"),
    /* deny: kernel attack surface: eBPF, perf, userfaultfd */
    R("bpf", "deny", EPERM, "kernel attack surface: eBPF, perf, userfaultfd"),
    R("perf_event_open", "deny", EPERM, "kernel attack surface: eBPF, perf, userfaultfd"),
    R("userfaultfd", "deny", EPERM, "kernel attack surface: eBPF, perf, userfaultfd"),
    /* deny: kernel keyrings */
    R("keyctl", "deny", EPERM, "kernel keyrings"),
    R("add_key", "deny", EPERM, "kernel keyrings"),
    R("request_key", "deny", EPERM, "kernel keyrings"),
    /* deny: io_uring (bypasses this filter) */
    R("io_uring_setup", "deny", EPERM, "io_uring (bypasses this filter)"),
    R("io_uring_enter", "deny", EPERM, "io_uring (bypasses this filter)"),
    R("io_uring_register", "deny", EPERM, "io_uring (bypasses this filter)"),
    /* deny: file handles (escape the mount namespace) */
    R("open_by_handle_at", "deny", EPERM, "file handles (escape the mount namespace)"),
    R("name_to_handle_at", "deny", EPERM, "file handles (escape the mount namespace)"),
    /* deny: host administration */
    R("swapon", "deny", EPERM, "host administration"),
    R("swapoff", "deny", EPERM, "host administration"),
    R("syslog", "deny", EPERM, "host administration"),
    R("acct", "deny", EPERM, "host administration"),
    R("quotactl", "deny", EPERM, "host administration"),
    R("quotactl_fd", "deny", EPERM, "host administration"),
    R("lookup_dcookie", "deny", EPERM, "host administration"),
    R("vhangup", "deny", EPERM, "host administration"),
    R("fanotify_init", "deny", EPERM, "host administration"),
    /* deny: raw I/O ports */
    R("iopl", "deny", EPERM, "raw I/O ports"),
    R("ioperm", "deny", EPERM, "raw I/O ports"),
    /* deny: setting the host clock */
    R("settimeofday", "deny", EPERM, "setting the host clock"),
    R("clock_settime", "deny", EPERM, "setting the host clock"),
    R("clock_adjtime", "deny", EPERM, "setting the host clock"),
    R("adjtimex", "deny", EPERM, "setting the host clock"),
    /* deny: kernel modules */
    R("init_module", "deny", KILL, "kernel modules"),
    R("finit_module", "deny", KILL, "kernel modules"),
    R("delete_module", "deny", KILL, "kernel modules"),
    /* deny: reboot and kexec */
    R("reboot", "deny", KILL, "reboot and kexec"),
    R("kexec_load", "deny", KILL, "reboot and kexec"),
    R("kexec_file_load", "deny", KILL, "reboot and kexec"),
};
const size_t seccomp_policy_n_rows = ELEMENTSOF(seccomp_policy_table);

#undef R

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
	for (size_t i = 0; r >= 0 && i < seccomp_policy_n_rows; i++) {
		const SeccompPolicyRow *row = &seccomp_policy_table[i];
		int nr = seccomp_syscall_resolve_name(row->name);

		if (nr == __NR_SCMP_ERROR || nr < 0) {
			r = -ENOENT;
			break;
		}
		switch (row->action) {
		case POLICY_ALLOW: r = add(ctx, SCMP_ACT_ALLOW, nr, 0, NULL); break;
		case POLICY_EPERM: r = add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0, NULL); break;
		case POLICY_ENOSYS:
			/* The default action already; libseccomp refuses a rule equal to
			 * it (-EACCES). The row documents the choice, the test checks it.
			 * The init's own variant allows clone3 (it creates the execs);
			 * each exec adds the EXEC_LAYER, which gives the row back. */
			if (v == SECCOMP_POLICY_INIT && nr == __NR_clone3)
				r = add(ctx, SCMP_ACT_ALLOW, nr, 0, NULL);
			break;
		case POLICY_KILL: r = add(ctx, SCMP_ACT_KILL_PROCESS, nr, 0, NULL); break;
		case POLICY_ARGS: r = build_args(ctx, row->name, nr); break;
		default: r = -EINVAL;
		}
	}
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
