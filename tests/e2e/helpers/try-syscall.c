/* SPDX-License-Identifier: MIT */
/*
 * try-syscall — the e2e seccomp matrix helper, in the style of bubblewrap's
 * tests/try-syscall.c. Runs inside a sandbox:
 *
 *   try-syscall NAME...
 *
 * For each NAME it forks, makes that one call with harmless arguments in the
 * child and prints one line "NAME=RESULT" where RESULT is "OK" (the call
 * returned >= 0), the errno's symbolic name ("EPERM", "ENOSYS", …), or
 * "SIG<name>" when the child was killed (SIGSYS for a seccomp kill). Forking per
 * call keeps a kill from ending the matrix. Unknown NAME: "NAME=UNKNOWN".
 * Exit status 0 unless the helper itself failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef AF_ALG
#define AF_ALG 38
#endif

static void *
thread_fn(void *arg)
{
	return arg;
}

/* A child of clone/clone3 that got through must not run the rest of main. */
static long
child_guard(long r)
{
	if (r == 0)
		_exit(0);
	if (r > 0)
		(void)waitpid((pid_t)r, NULL, 0);
	return r;
}

#if defined(__x86_64__)
/* i386 getpid through int 0x80: foreign arch to the filter. */
static long
int80_getpid(void)
{
	long ret;
	__asm__ volatile("int $0x80" : "=a"(ret) : "0"(20L) : "memory");
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}
#endif

/* Returns the raw result (>= 0 success, -1 with errno), or -2 for an unknown name. */
static long
try_one(const char *n)
{
	char buf[64];
	char c = 'x';

#define IS(s) (strcmp(n, (s)) == 0)
	if (IS("ptrace"))
		return syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, getppid(), 0, 0);
	if (IS("process_vm_readv"))
		return syscall(SYS_process_vm_readv, getppid(), NULL, 0, NULL, 0, 0);
	if (IS("process_vm_writev"))
		return syscall(SYS_process_vm_writev, getppid(), NULL, 0, NULL, 0, 0);
	if (IS("bpf"))
		return syscall(SYS_bpf, 0, NULL, 0);
	if (IS("perf_event_open"))
		return syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0);
	if (IS("userfaultfd"))
		return syscall(SYS_userfaultfd, 0);
	if (IS("keyctl"))
		return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3, 0, 0, 0);
	if (IS("add_key"))
		return syscall(SYS_add_key, "user", "k", "v", 1, -3);
	if (IS("request_key"))
		return syscall(SYS_request_key, "user", "k", NULL, 0);
	if (IS("io_uring_setup"))
		return syscall(SYS_io_uring_setup, 1, NULL);
	if (IS("io_uring_enter"))
		return syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0);
	if (IS("io_uring_register"))
		return syscall(SYS_io_uring_register, -1, 0, NULL, 0);
	if (IS("open_by_handle_at"))
		return syscall(SYS_open_by_handle_at, -1, NULL, 0);
	if (IS("name_to_handle_at"))
		return syscall(SYS_name_to_handle_at, AT_FDCWD, "/", NULL, NULL, 0);
	if (IS("swapon"))
		return syscall(SYS_swapon, "/nonexistent", 0);
	if (IS("swapoff"))
		return syscall(SYS_swapoff, "/nonexistent");
	if (IS("reboot"))
		return syscall(SYS_reboot, 0, 0, 0, NULL); /* bad magic: EINVAL if allowed */
	if (IS("syslog"))
		return syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0);
	if (IS("acct"))
		return syscall(SYS_acct, NULL);
	if (IS("kexec_load"))
		return syscall(SYS_kexec_load, 0, 0, NULL, 0);
	if (IS("kexec_file_load"))
		return syscall(SYS_kexec_file_load, -1, -1, 0, "", 0);
	if (IS("init_module"))
		return syscall(SYS_init_module, NULL, 0, "");
	if (IS("finit_module"))
		return syscall(SYS_finit_module, -1, "", 0);
	if (IS("delete_module"))
		return syscall(SYS_delete_module, "nonexistent", 0);
	if (IS("iopl"))
		return syscall(SYS_iopl, 0);
	if (IS("ioperm"))
		return syscall(SYS_ioperm, 0, 0, 0);
	if (IS("quotactl"))
		return syscall(SYS_quotactl, 0, NULL, 0, NULL);
	if (IS("fanotify_init"))
		return syscall(SYS_fanotify_init, 0, 0);
	if (IS("vhangup"))
		return syscall(SYS_vhangup);
	if (IS("settimeofday"))
		return syscall(SYS_settimeofday, NULL, NULL);
	if (IS("clock_settime"))
		return syscall(SYS_clock_settime, 0, NULL);
	if (IS("adjtimex"))
		return syscall(SYS_adjtimex, NULL);
	if (IS("mount"))
		return syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, NULL);
	if (IS("umount2"))
		return syscall(SYS_umount2, "/tmp", 0);
	if (IS("pivot_root"))
		return syscall(SYS_pivot_root, ".", ".");
	if (IS("chroot"))
		return syscall(SYS_chroot, "/");
	if (IS("fsopen"))
		return syscall(SYS_fsopen, "tmpfs", 0);
	if (IS("fsconfig"))
		return syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0);
	if (IS("fsmount"))
		return syscall(SYS_fsmount, -1, 0, 0);
	if (IS("fspick"))
		return syscall(SYS_fspick, AT_FDCWD, "/", 0);
	if (IS("open_tree"))
		return syscall(SYS_open_tree, AT_FDCWD, "/", 0);
	if (IS("move_mount"))
		return syscall(SYS_move_mount, -1, "", -1, "", 0);
	if (IS("mount_setattr"))
		return syscall(SYS_mount_setattr, -1, "", 0, NULL, 0);
	if (IS("unshare_user"))
		return syscall(SYS_unshare, CLONE_NEWUSER);
	if (IS("unshare_net"))
		return syscall(SYS_unshare, CLONE_NEWNET);
	if (IS("unshare_files"))
		return syscall(SYS_unshare, CLONE_FILES);
	if (IS("setns"))
		return syscall(SYS_setns, open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), 0);
	if (IS("clone_newuser"))
		return child_guard(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, NULL, NULL, 0));
	if (IS("clone_newns"))
		return child_guard(syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, NULL, NULL, 0));
	if (IS("clone3")) {
		struct clone_args a = {.exit_signal = SIGCHLD};
		return child_guard(syscall(SYS_clone3, &a, sizeof(a)));
	}
	if (IS("fork"))
		return child_guard(fork());
	if (IS("pthread_create")) {
		pthread_t t;
		int r = pthread_create(&t, NULL, thread_fn, NULL);
		if (r != 0) {
			errno = r;
			return -1;
		}
		return pthread_join(t, NULL) == 0 ? 0 : -1;
	}
	if (IS("socket_unix"))
		return socket(AF_UNIX, SOCK_STREAM, 0);
	if (IS("socket_inet"))
		return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (IS("socket_inet6_dgram"))
		return socket(AF_INET6, SOCK_DGRAM, 0);
	if (IS("socket_netlink"))
		return socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */);
	if (IS("socket_packet"))
		return socket(AF_PACKET, SOCK_RAW, 0);
	if (IS("socket_raw"))
		return socket(AF_INET, SOCK_RAW, 1 /* IPPROTO_ICMP */);
	if (IS("socket_raw6"))
		return socket(AF_INET6, SOCK_RAW, 58 /* IPPROTO_ICMPV6 */);
	if (IS("socket_vsock"))
		return socket(AF_VSOCK, SOCK_STREAM, 0);
	if (IS("socket_alg"))
		return socket(AF_ALG, SOCK_SEQPACKET, 0);
	if (IS("ioctl_tiocsti"))
		return ioctl(0, TIOCSTI, &c);
	if (IS("ioctl_tiocsti_high"))
		return syscall(SYS_ioctl, 0, (1UL << 32) | TIOCSTI, &c);
	if (IS("ioctl_tioclinux"))
		return ioctl(0, TIOCLINUX, &c);
	if (IS("ioctl_fionread")) {
		int avail = 0;
		return ioctl(0, FIONREAD, &avail);
	}
	if (IS("personality_query"))
		return syscall(SYS_personality, 0xffffffffUL);
	if (IS("personality_linux"))
		return syscall(SYS_personality, PER_LINUX);
	if (IS("personality_read_implies_exec"))
		return syscall(SYS_personality, READ_IMPLIES_EXEC);
	if (IS("personality_addr_no_randomize"))
		return syscall(SYS_personality, ADDR_NO_RANDOMIZE);
	if (IS("modify_ldt"))
		return syscall(SYS_modify_ldt, 0, buf, sizeof(buf));
	if (IS("uselib"))
		return syscall(SYS_uselib, NULL);
	if (IS("mknod_char"))
		return mknod("/tmp/try-null", S_IFCHR | 0666, makedev(1, 3));
	if (IS("mknod_char_workspace"))
		return mknod("/workspace/try-null", S_IFCHR | 0666, makedev(1, 3));
	if (IS("mkfifo"))
		return mknod("/tmp/try-fifo", S_IFIFO | 0600, 0);
	if (IS("getpid"))
		return syscall(SYS_getpid);
#if defined(__x86_64__)
	if (IS("int80"))
		return int80_getpid();
	if (IS("x32"))
		return syscall(__X32_SYSCALL_BIT | SYS_getpid);
#endif
#undef IS
	return -2;
}

int
main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		int pfd[2], st = 0;
		long res = 0;
		int err = 0;
		pid_t pid;

		if (pipe(pfd) < 0)
			return 2;
		fflush(stdout);
		pid = fork();
		if (pid < 0)
			return 2;
		if (pid == 0) {
			long out[2];
			close(pfd[0]);
			errno = 0;
			out[0] = try_one(argv[i]);
			out[1] = errno;
			(void)!write(pfd[1], out, sizeof(out));
			_exit(0);
		}
		close(pfd[1]);
		long out[2];
		ssize_t n = read(pfd[0], out, sizeof(out));
		close(pfd[0]);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (n == (ssize_t)sizeof(out)) {
			res = out[0];
			err = (int)out[1];
		}
		if (n != (ssize_t)sizeof(out) && WIFSIGNALED(st))
			printf("%s=SIG%s\n", argv[i], sigabbrev_np(WTERMSIG(st)));
		else if (n != (ssize_t)sizeof(out))
			printf("%s=NORESULT\n", argv[i]);
		else if (res == -2)
			printf("%s=UNKNOWN\n", argv[i]);
		else if (res >= 0)
			printf("%s=OK\n", argv[i]);
		else
			printf("%s=%s\n", argv[i],
			       strerrorname_np(err) ? strerrorname_np(err) : "E?");
	}
	return 0;
}
