/* SPDX-License-Identifier: MIT */
/*
 * doctor.c — host checks for the default sandbox profile (see doctor.h).
 */
#include "config.h"

#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "fd-util.h"
#include "macro.h"
#include "quota.h"
#include "sandbox.h"
#include "seccomp-policy.h"

typedef struct Doctor {
	unsigned failures, warnings;
} Doctor;

#define WARN (-2)

static _printf_(4, 5) void report(Doctor *d, int status, const char *what, const char *fmt, ...)
{
	/* status: 1 ok, 0 FAIL, -1 info, WARN (works, but not as it should) */
	va_list ap;

	printf("%-4s %-16s ",
	       status > 0	? "ok"
	       : status == 0	? "FAIL"
	       : status == WARN ? "WARN"
				: "info",
	       what);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	if (status == 0)
		d->failures++;
	if (status == WARN)
		d->warnings++;
}

static int
read_int_file(const char *path, long *ret)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return -errno;
	ok = fscanf(f, "%ld", ret) == 1;
	fclose(f);
	return ok ? 0 : -EINVAL;
}

/* Run fn in a forked child; returns its exit status, or -errno/-EIO (signal). */
static int
in_child(int (*fn)(void))
{
	int st;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0)
		_exit(fn());
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -EIO;
}

static uid_t probe_uid;

/* As the sandbox user namespaces are created: by host_uid, not root. */
static int
probe_userns(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(probe_uid, probe_uid, probe_uid) < 0 ||
	    setresuid(probe_uid, probe_uid, probe_uid) < 0)
		return errno & 0xff;
	if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		    CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		return errno & 0xff;
	return 0;
}

static void
check_userns(Doctor *d, const ShimConf *conf)
{
	long max = -1, restrict_ = -1, clone_ = -1;
	char msg[512];
	int r;

	probe_uid = (uid_t)conf->host_uid;

	(void)read_int_file("/proc/sys/user/max_user_namespaces", &max);
	if (read_int_file("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", &restrict_) >=
	    0)
		report(d, -1, "AppArmor", "apparmor_restrict_unprivileged_userns=%ld%s", restrict_,
		       restrict_ ? " (unprivileged user namespaces restricted; the shim runs as "
				   "root and is not affected unless its profile denies userns)"
				 : "");
	if (read_int_file("/proc/sys/kernel/unprivileged_userns_clone", &clone_) >= 0)
		report(d, -1, "userns sysctl", "kernel.unprivileged_userns_clone=%ld", clone_);
	r = in_child(probe_userns);
	if (r == 0 && max != 0)
		report(d, 1, "user namespaces",
		       "user, mount, pid, net, ipc, uts and cgroup namespaces can be created "
		       "by host_uid %lld, which owns them (max_user_namespaces=%ld)",
		       (long long)conf->host_uid, max);
	else
		report(d, 0, "user namespaces",
		       "host_uid %lld cannot create the sandbox namespaces: %s "
		       "(max_user_namespaces=%ld; unprivileged user namespaces disabled "
		       "(kernel.unprivileged_userns_clone, AppArmor)? inside a container?)",
		       (long long)conf->host_uid, r > 0 ? strerror(r) : "the probe died", max);
	report(d, -1, "max_instances", "%s", conf->max_instances_rule);
	report(d, -1, "pool_size", "%s", conf->pool_size_rule);
	{
		int fd = -1, k = sandbox_init_open(NULL, &fd);
		if (k >= 0)
			report(d, 1, "sandbox-init",
			       "the sandbox's init helper is next to the shim");
		else
			report(d, 0, "sandbox-init",
			       "the sandbox's init helper next to the shim: %s (it must be a "
			       "executable owned by root or by the shim's owner, that no one "
			       "else may write)",
			       strerror(-k));
		safe_close(fd);
	}
	report(d, shim_conf_userns_budget(conf, msg, sizeof(msg)) ? 1 : 0, "kernel quotas", "%s",
	       msg);
}

static void
check_cgroup(Doctor *d, const ShimConf *conf)
{
	CgroupHost *h = NULL;
	Reason err = {""};
	CgroupConf cc;
	int r;

	shim_conf_cgroup(conf, &cc);
	r = cgroup_host_new(&cc, &h, &err, true);
	if (r < 0) {
		report(d, 0, "cgroup", "%s", reason_text(&err, r));
		return;
	}
	report(d, 1, "cgroup", "%s", cgroup_host_describe(h));
	if (cgroup_host_has_kill(h))
		report(d, 1, "cgroup.kill", "available: destroy kills every member atomically");
	else
		report(d, 1, "cgroup.kill",
		       "missing (kernel < 5.14?): destroy falls back to freeze + SIGKILL");
	if (cgroup_host_mode(h) == CGROUP_MODE_V2 || cgroup_host_has_leaves(h))
		report(d, 1, "exec cgroups",
		       "each exec is cloned into its own cgroup2 leaf: EXEC_KILL, timeouts "
		       "and cancel kill all it started");
	else
		report(d, 1, "exec cgroups",
		       "no cgroup2 hierarchy: EXEC_KILL, timeouts and cancel kill the exec's "
		       "process group only (a setsid'd descendant survives)");
	if (cgroup_host_mode(h) != CGROUP_MODE_V2)
		report(d, 1, "snapshot jobs",
		       "cgroup 'jobs' in the cpu hierarchy (snapshot_cpu_max as cpu.cfs_quota_us); "
		       "no io weight on cgroup v1 (nice 10 only)");
	else if (cgroup_host_has_io(h))
		report(d, 1, "snapshot jobs",
		       "cgroup 'jobs' with cpu.max (snapshot_cpu_max) and io.weight "
		       "(snapshot_io_weight)");
	else
		report(d, -1, "snapshot jobs",
		       "io controller not delegated: snapshot/restore jobs get cpu.max "
		       "(snapshot_cpu_max) and nice 10 but no io.weight");
	cgroup_host_free(h);
}

static int
probe_seccomp(void)
{
	struct sock_fprog prog;

	if (seccomp_policy_compile(&prog) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    seccomp_policy_load(&prog) < 0)
		return 10;
	if (syscall(SYS_acct, NULL) != -1 || errno != EPERM)
		return 11;
	if (syscall(SYS_getpid) <= 0)
		return 12;
	return 0;
}

static void
check_seccomp(Doctor *d)
{
	struct sock_fprog prog = {0};
	int r = seccomp_policy_compile(&prog);

	if (r < 0) {
		report(d, 0, "seccomp", "the filter does not compile: %s", strerror(-r));
		return;
	}
	free(prog.filter);
	r = in_child(probe_seccomp);
	if (r == 0)
		report(d, 1, "seccomp",
		       "allowlist of %zu rows, %u BPF instructions, loads and enforces (TSYNC)",
		       seccomp_policy_n_syscalls(), (unsigned)prog.len);
	else
		report(d, 0, "seccomp", "the filter %s",
		       r == 10 ? "cannot be loaded (kernel without seccomp filters?)"
			       : "does not behave as the table says");
}

static void
check_kernel_apis(Doctor *d)
{
	struct open_how how = {.flags = O_PATH | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
	long abi;
	int fd;

	fd = (int)syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
	if (fd >= 0) {
		close(fd);
		report(d, 1, "openat2", "RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS work");
	} else
		report(d, 0, "openat2", "%s (kernel < 5.6?)", strerror(errno));

	if (syscall(SYS_mount_setattr, -1, "", 0, NULL, 0) < 0 && errno == ENOSYS)
		report(d, 0, "mount API", "mount_setattr missing (kernel < 5.12)");
	else
		report(d, 1, "mount API", "open_tree, move_mount, mount_setattr");

	if (syscall(SYS_clone3, NULL, 0) < 0 && errno == ENOSYS)
		report(d, 0, "clone3", "missing (kernel < 5.3): no pidfd, no CLONE_INTO_CGROUP");
	else
		report(d, 1, "clone3", "CLONE_PIDFD, CLONE_INTO_CGROUP");

	fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (fd >= 0) {
		close(fd);
		report(d, 1, "pidfd", "pidfd_open, pidfd_send_signal");
	} else
		report(d, 0, "pidfd", "%s (kernel < 5.3?)", strerror(errno));

	abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (abi > 0)
		report(d, -1, "Landlock",
		       "ABI %ld: applied (writes only to /workspace, /tmp, /dev/shm and the /dev "
		       "nodes%s)",
		       abi, abi >= 6 ? "; abstract sockets and signals scoped" : "");
	else
		report(d, -1, "Landlock", "unavailable: %s", strerror(errno));
}

static void
check_quota(Doctor *d, const ShimConf *conf)
{
	bool wanted = conf->workspace_quota > 0 || conf->workspace_inodes > 0;
	char fstype[32];
	Reason probe = {""};
	int r = quota_probe(conf->sandbox_dir, fstype, sizeof(fstype), &probe);
	const char *msg = probe.msg;

	if (r >= 0)
		report(d, 1, "project quotas", "%s (workspace_quota=%lld, workspace_inodes=%lld)",
		       msg, (long long)conf->workspace_quota, (long long)conf->workspace_inodes);
	else if (wanted && conf->workspace_quota_required)
		report(d, 0, "project quotas",
		       "%s; workspace_quota_required=yes, so every sandbox creation fails", msg);
	else if (wanted)
		report(d, WARN, "project quotas",
		       "%s; workspaces get NO quota (workspace_quota=%lld, workspace_inodes=%lld "
		       "cannot be enforced): one sandbox can fill this filesystem",
		       msg, (long long)conf->workspace_quota, (long long)conf->workspace_inodes);
	else
		report(d, -1, "project quotas", "%s (workspace_quota is off)", msg);
}

int
shim_doctor(const ShimConf *conf)
{
	Doctor d = {0};

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (geteuid() != 0)
		report(&d, 0, "privileges",
		       "not root: the shim needs root for namespaces, id maps "
		       "and cgroups");
	check_userns(&d, conf);
	check_cgroup(&d, conf);
	check_seccomp(&d);
	check_kernel_apis(&d);
	check_quota(&d, conf);
	if (d.failures == 0 && d.warnings > 0)
		printf("default profile: OK, with %u warning%s (WARN above)\n", d.warnings,
		       d.warnings == 1 ? "" : "s");
	else if (d.failures == 0)
		printf("default profile: OK\n");
	else
		printf("default profile: CANNOT be met (%u failure%s)\n", d.failures,
		       d.failures == 1 ? "" : "s");
	return d.failures == 0 ? 0 : 1;
}
