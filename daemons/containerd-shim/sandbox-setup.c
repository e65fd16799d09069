/* SPDX-License-Identifier: MIT */
/*
 * sandbox-setup.c — the spawner and the init's set-up, in the sandbox-init
 * helper (sandbox-init-main.c), never in the shim: clone3 into fresh
 * namespaces, build the sandbox root, drop privileges, then serve as the
 * sandbox's PID 1. See sandbox.h. The serving part (init_serve: execs,
 * output, orphan mode) is sandbox-serve.c; what the two share is
 * sandbox-init.h; the shim's side (the exec of the helper) is sandbox-linux.c.
 *
 * It _exit()s on any failure after telling the shim why (fail closed), and it
 * never logs (the helper has no log backend).
 *
 * Why the sequence looks the way it does: the user namespace must be owned
 * by host_uid, not root (the kernel charges per-user counts up the chain of
 * owners: docs/SECURITY.md), so it is created by a *spawner* — a child of the
 * shim that has dropped to host_uid — and the init is the spawner's
 * CLONE_PARENT child. The init, host_uid with the namespace's capabilities,
 * cannot resolve host paths that only root may traverse, so the spawner
 * captures every host source first, still root: the ro_binds, the workspace,
 * the carried /etc entries and the /dev nodes become detached mount trees
 * (open_tree(OPEN_TREE_CLONE)) made read-only / nosuid / nodev and private (or
 * a slave) with mount_setattr() while detached, and it chdir()s into the
 * root's mount point. The init mounts its root tmpfs there (fsmount + an
 * empty-path move_mount: no lookup), then, as sandbox_uid (a mapped fsuid is
 * needed to create files in a tmpfs of the new namespace, else EOVERFLOW),
 * creates the mount points inside the new root and attaches the trees with
 * move_mount().
 */
#include "config.h"

#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

#include "fd-util.h"
#include "macro.h"
#include "sandbox-init.h"

#define MAX_BINDS 32
#define MAX_ETC 64
#define MAX_PROCS_FDS 8
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom"};
/* /proc entries made read-only (bind onto themselves), files masked with an
 * unreadable empty file, and directories masked with an empty read-only tmpfs
 * (what runc and bubblewrap mask, plus /proc/cmdline: the host's boot line). */
static const char *const proc_ro[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus",
				      "proc/fs"};
static const char *const proc_masked[] = {
    "proc/kcore",	"proc/keys",	     "proc/key-users",	   "proc/timer_list",
    "proc/sched_debug", "proc/cmdline",	     "proc/latency_stats", "proc/timer_stats",
    "proc/bootconfig",	"proc/config.gz",    "proc/kallsyms",	   "proc/modules",
    "proc/vmallocinfo", "proc/pagetypeinfo", "proc/slabinfo"};
static const char *const proc_masked_dirs[] = {"proc/acpi", "proc/scsi", "proc/asound",
					       "proc/driver", "proc/tty/driver"};
/* Per-user-namespace limits the init sets in its own user namespace
 * (/proc/sys/user/…): each namespace count to the spec's budget (seccomp
 * denies creating namespaces to the execs; the init's own may need some),
 * fanotify to 0 (fanotify_init is denied); the inotify ones from the spec. */
static const char *const userns_ns_counts[] = {
    "max_user_namespaces", "max_mnt_namespaces", "max_pid_namespaces",	  "max_net_namespaces",
    "max_ipc_namespaces",  "max_uts_namespaces", "max_cgroup_namespaces", "max_time_namespaces"};
static const char *const userns_zero[] = {"max_fanotify_groups", "max_fanotify_marks"};

extern char **environ;

/* Where sandboxed processes may write (SANDBOX.md §6.E item 21). */
static const char *const ll_write_dirs[] = {"/workspace", "/tmp", "/dev/shm"};
static const char *const ll_write_files[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
					     "/dev/urandom"};

/* The child's copy of the spec (set once in init_main; the init never returns). */
const SandboxSpec *init_spec;

/* ---------------------------------------------------------------------------
 * Child side: messages to the shim.
 */

void
init_send(int sock, const InitMsg *m, const char *payload, size_t len)
{
	char buf[sizeof(InitMsg) + 1024];

	len = MIN(len, sizeof(buf) - sizeof(InitMsg));
	memcpy(buf, m, sizeof(*m));
	if (len > 0)
		memcpy(buf + sizeof(*m), payload, len);
	/* Blocking send: the shim reads promptly; if it is gone, EPIPE (MSG_NOSIGNAL). */
	(void)fd_send(sock, buf, sizeof(*m) + len, NULL, 0);
}

/* While the spawner captures the host sources (spawner_main), a failure is
 * kept here and reported by the init once it is released (GO), so that it
 * reaches the shim the way every other setup failure does. */
static bool capturing;
static sigjmp_buf capture_jmp;
static int capture_err;
static char capture_msg[512];

/* Report a setup failure as "what: strerror(err)" and exit: fail closed. */
_noreturn_ _printf_(2, 3) void init_fail(int err, const char *fmt, ...)
{
	char msg[512];
	InitMsg m = {.type = INIT_MSG_SETUP_FAILED, .err = err};
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	snprintf(msg + MIN((size_t)n, sizeof(msg) - 1),
		 sizeof(msg) - MIN((size_t)n, sizeof(msg) - 1), ": %s", strerror(err));
	if (capturing) {
		capturing = false;
		capture_err = err ? err : EIO;
		memcpy(capture_msg, msg, sizeof(capture_msg));
		siglongjmp(capture_jmp, 1);
	}
	init_send(INIT_SOCK_FD, &m, msg, strlen(msg));
	_exit(1);
}

/* setresgid/setresuid for the spawner and the init, which are raw clone3
 * children of the shim: glibc's wrappers apply a credential change to every
 * thread of the process (__nptl_setxid), and the child inherits the list of
 * the shim's threads (the file API's workers) without the threads. When a
 * worker was being created or was exiting at the clone, the wrapper waits for
 * it forever (the spawner hangs in setxid_mark_thread, and the shim with it,
 * blocked on the spawner's reply). The children have one thread: the raw
 * system call is the whole job. */
static int
raw_setresgid(gid_t g)
{
	return (int)syscall(SYS_setresgid, g, g, g);
}

static int
raw_setresuid(uid_t u)
{
	return (int)syscall(SYS_setresuid, u, u, u);
}

#define CHECK(expr, ...)                                                                           \
	do {                                                                                       \
		if ((expr) < 0)                                                                    \
			init_fail(errno, __VA_ARGS__);                                             \
	} while (0)

/* ---------------------------------------------------------------------------
 * Child side: building the root.
 */

typedef struct Bind {
	char path[PATH_MAX]; /* absolute path inside the sandbox (= host path) */
	char link[PATH_MAX]; /* symlink target when is_link */
	bool is_link;
	bool is_dir;
	int tree_fd; /* detached mount tree, or -1 */
} Bind;

/* A detached (recursive) clone of a host path with the given attributes set.
 * It is cloned in the shim's mount namespace (by the spawner), so it is made
 * private (or a slave: the pool's workspace) before it goes anywhere: no mount
 * event may propagate between it and the host. */
static int
tree_clone(const char *path, uint64_t attrs, bool recursive, uint64_t propagation)
{
	struct mount_attr a = {.attr_set = attrs, .propagation = propagation};
	int fd = open_tree(AT_FDCWD, path,
			   OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (recursive ? AT_RECURSIVE : 0));
	if (fd < 0)
		init_fail(errno, "open_tree %s", path);
	if (mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &a, sizeof(a)) <
	    0)
		init_fail(errno, "mount_setattr %s", path);
	return fd;
}

static void
tree_attach(int fd, const char *rel)
{
	if (move_mount(fd, "", AT_FDCWD, rel, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		init_fail(errno, "move_mount /%s", rel);
	safe_close(fd);
}

/* mkdir -p of a path relative to the cwd (the new root). */
static void
mkdir_rel(const char *rel, mode_t mode)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", rel);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			init_fail(errno, "mkdir /%s", buf);
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		init_fail(errno, "mkdir /%s", buf);
}

static void
touch_rel(const char *rel)
{
	int fd = open(rel, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		init_fail(errno, "create /%s", rel);
	close(fd);
}

/* Capture one host path into *b: a symlink is remembered (recreated as a
 * symlink inside), anything else is cloned read-only. Returns false when the
 * path does not exist. */
static bool
bind_capture(const char *path, Bind *b)
{
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return false;
		init_fail(errno, "stat %s", path);
	}
	/* Not memset: a Bind is two PATH_MAX buffers, and zeroing ~25 of them
	 * touched ~50 pages of the spawner (a fork of the shim) per sandbox. */
	b->link[0] = '\0';
	b->is_link = b->is_dir = false;
	b->tree_fd = -1;
	snprintf(b->path, sizeof(b->path), "%s", path);
	if (S_ISLNK(st.st_mode)) {
		ssize_t l = readlink(path, b->link, sizeof(b->link) - 1);
		if (l < 0)
			init_fail(errno, "readlink %s", path);
		b->link[l] = '\0';
		b->is_link = true;
		return true;
	}
	b->is_dir = S_ISDIR(st.st_mode);
	b->tree_fd = tree_clone(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
				true, MS_PRIVATE);
	return true;
}

/* An ro_binds entry: absolute, not "/", no "." or ".." components. Checked by
 * the shim at start-up too, but this is the boundary, so check again. */
static bool
bind_path_ok(const char *tok)
{
	return tok[0] == '/' && tok[1] != '\0' && !strstr(tok, "/.") && strlen(tok) < PATH_MAX;
}

/* Parse the list of config key key (words split by blanks; each must pass
 * ok(), at most max of them) and capture each host prefix<word> that exists
 * into binds, while we are still host uid 0. Returns how many were captured. */
static size_t
list_capture(const char *key, const char *list, bool (*ok)(const char *tok), const char *prefix,
	     size_t max, Bind *binds)
{
	char buf[4096];
	size_t n = 0;
	char *save = NULL;

	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		init_fail(ENAMETOOLONG, "%s", key);
	for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		char path[PATH_MAX];

		if (!ok(tok))
			init_fail(EINVAL, "%s entry '%s'", key, tok);
		if (n >= max)
			init_fail(E2BIG, "%s", key);
		snprintf(path, sizeof(path), "%s%s", prefix, tok);
		if (bind_capture(path, &binds[n])) /* missing: e.g. no /lib64 here */
			n++;
	}
	return n;
}

/* Bind a path of the new /proc onto itself read-only. Missing entries are fine. */
static void
proc_bind_ro(const char *rel)
{
	if (access(rel, F_OK) < 0)
		return;
	CHECK(mount(rel, rel, NULL, MS_BIND | MS_REC, NULL), "bind /%s", rel);
	CHECK(mount(NULL, rel, NULL,
		    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
	      "remount /%s read-only", rel);
}

/* Mask a /proc file with mask (an empty file of mode 0 that the sandbox user
 * cannot read: reading fails with EACCES), bound read-only. Missing entries
 * are fine. */
static void
proc_mask(const char *mask, const char *rel)
{
	struct stat st;

	if (lstat(rel, &st) < 0 || !S_ISREG(st.st_mode))
		return;
	CHECK(mount(mask, rel, NULL, MS_BIND, NULL), "mask /%s", rel);
	CHECK(mount(NULL, rel, NULL,
		    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
	      "remount the mask of /%s read-only", rel);
}

/* Mask a /proc directory with an empty read-only tmpfs (as runc does). */
static void
proc_mask_dir(const char *rel)
{
	struct stat st;

	if (lstat(rel, &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	CHECK(mount("tmpfs", rel, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		    "mode=0555,size=4k,nr_inodes=1"),
	      "mask /%s", rel);
}

/* Set one limit of the sandbox's own user namespace (/proc/sys/user). The
 * kernel checks a count against these limits in this namespace and in every
 * one above it, up to the host's limit for the namespace's owner (host_uid). */
static void
userns_limit(const char *name, int64_t value)
{
	char path[128], text[32];
	int fd;

	snprintf(path, sizeof(path), "proc/sys/user/%s", name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return; /* a kernel without this count */
		init_fail(errno, "open /%s", path);
	}
	snprintf(text, sizeof(text), "%lld\n", (long long)value);
	int r = loop_write(fd, text, strlen(text));
	if (r < 0)
		init_fail(-r, "write /%s", path);
	close(fd);
}

/* Write a small file of the new root (before it turns read-only). */
static void
write_rel(const char *rel, const char *text)
{
	int fd = open(rel, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);

	if (fd < 0)
		init_fail(errno, "create /%s", rel);
	int r = loop_write(fd, text, strlen(text));
	if (r < 0)
		init_fail(-r, "write /%s", rel);
	close(fd);
}

/* Attach the captured binds below the new root (cwd). */
static void
binds_attach(Bind *binds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *rel = binds[i].path + 1;
		if (binds[i].is_link) {
			CHECK(symlink(binds[i].link, rel), "symlink /%s", rel);
			continue;
		}
		if (binds[i].is_dir)
			mkdir_rel(rel, 0755);
		else {
			char dir[PATH_MAX], *slash;
			snprintf(dir, sizeof(dir), "%s", rel);
			slash = strrchr(dir, '/');
			if (slash) {
				*slash = '\0';
				mkdir_rel(dir, 0755);
			}
			touch_rel(rel);
		}
		tree_attach(binds[i].tree_fd, rel);
		binds[i].tree_fd = -1;
	}
}

/* The curated /etc: stubs naming the sandbox user, then the carried-over entries. */
static void
etc_build(const SandboxSpec *spec, Bind *etc, size_t n)
{
	char text[512];
	uid_t u = spec->sandbox_uid;
	const char *name = spec->sandbox_user ? spec->sandbox_user : "sandbox";

	mkdir_rel("etc", 0755);
	snprintf(text, sizeof(text),
		 "root:x:0:0:root:/root:/usr/sbin/nologin\n"
		 "%s:x:%u:%u:%s:/workspace:/bin/sh\n"
		 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		 name, u, u, name);
	write_rel("etc/passwd", text);
	snprintf(text, sizeof(text), "root:x:0:\n%s:x:%u:\nnogroup:x:65534:\n", name, u);
	write_rel("etc/group", text);
	write_rel("etc/hosts", "127.0.0.1\tlocalhost sandbox\n"
			       "::1\tlocalhost ip6-localhost ip6-loopback\n");
	write_rel("etc/hostname", "sandbox\n");
	binds_attach(etc, n);
}

/* Raise the effective set to the permitted one (setresuid may have cleared it). */
static void
caps_raise_effective(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];

	CHECK(syscall(SYS_capget, &h, d), "capget");
	for (int i = 0; i < 2; i++)
		d[i].effective = d[i].permitted;
	CHECK(syscall(SYS_capset, &h, d), "capset");
}

/* Drop everything: securebits locked, bounding and ambient sets emptied, then
 * permitted/effective/inheritable cleared. Order matters: PR_CAPBSET_DROP and
 * PR_SET_SECUREBITS need CAP_SETPCAP, which the final capset removes. */
static void
caps_drop_all(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {{0}};

	CHECK(prctl(PR_SET_SECUREBITS,
		    SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
			SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
		    0, 0, 0),
	      "set securebits");
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			init_fail(errno, "drop capability %d from the bounding set", cap);
	CHECK(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps");
	CHECK(syscall(SYS_capset, &h, d), "capset (drop all)");
	/* Verify rather than trust. */
	CHECK(syscall(SYS_capget, &h, d), "capget");
	if (d[0].effective | d[1].effective | d[0].permitted | d[1].permitted | d[0].inheritable |
	    d[1].inheritable)
		init_fail(EPERM, "capabilities still present after dropping");
}

static void
loopback_up(void)
{
	struct ifreq ifr = {0};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		init_fail(errno, "socket for lo");
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	CHECK(ioctl(fd, SIOCGIFFLAGS, &ifr), "get lo flags");
	ifr.ifr_flags |= IFF_UP;
	CHECK(ioctl(fd, SIOCSIFFLAGS, &ifr), "bring lo up");
	close(fd);
}

static void
set_rlimit(int resource, const char *name, int64_t value)
{
	struct rlimit rl = {.rlim_cur = (rlim_t)value, .rlim_max = (rlim_t)value};

	/* Only ever lowered: a limit above the current hard one is capped to it. */
	struct rlimit cur;
	CHECK(getrlimit(resource, &cur), "getrlimit %s", name);
	if (cur.rlim_max != RLIM_INFINITY && rl.rlim_max > cur.rlim_max)
		rl.rlim_cur = rl.rlim_max = cur.rlim_max;
	CHECK(setrlimit(resource, &rl), "setrlimit %s", name);
}

static void
init_rlimits(const SandboxSpec *spec)
{
	set_rlimit(RLIMIT_CORE, "CORE", 0);
	set_rlimit(RLIMIT_RTPRIO, "RTPRIO", 0);
	set_rlimit(RLIMIT_NOFILE, "NOFILE", spec->rlimit_nofile);
	set_rlimit(RLIMIT_FSIZE, "FSIZE", spec->rlimit_fsize);
	set_rlimit(RLIMIT_MEMLOCK, "MEMLOCK", spec->rlimit_memlock);
}

int
init_filter_load(const struct sock_fprog *prog)
{
	/* seccomp_policy_load's call, without libseccomp in the helper. */
	return RET_NERRNO(
	    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog));
}

/* Last step of the setup: the init and everything it will start run under the
 * policy from here on (sandbox.h). */
static void
init_seccomp(void)
{
	int r;

	if (!init_spec->seccomp || !init_spec->seccomp_exec)
		init_fail(EPERM, "no seccomp filter");
	r = init_filter_load(init_spec->seccomp);
	if (r < 0)
		init_fail(-r, "load the seccomp filter");
}
bool landlock_pending; /* pooled: restrict at the first exec */

/* What the spawner captured as host root for the init (inherited memory and
 * fds). ~800 KiB of which a few pages are touched: mapped by the spawner,
 * unmapped by the init once it attached the trees, so that none of it stays
 * resident in an idle sandbox. */
typedef struct Captured {
	Bind binds[MAX_BINDS];
	size_t n_binds;
	Bind etc[MAX_ETC];
	size_t n_etc;
	int ws_fd;
	int dev_fds[ELEMENTSOF(dev_nodes)];
	int image_fd, image_lock; /* an image's root and the store's lock (sandbox-image.c) */
} Captured;
static Captured *cap;

/* The spawner's phase, as host uid 0 in the shim's namespaces: capture every
 * host source as a detached mount tree (the workspace, ro_binds, the carried
 * /etc entries, the /dev nodes) and enter the root's mount point, so that the
 * init, which runs as host_uid, needs no access to host paths only root may
 * traverse. */
static void
capture_sources(const SandboxSpec *spec)
{
	void *m = mmap(NULL, sizeof(Captured), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (m == MAP_FAILED)
		init_fail(errno, "map the captured sources");
	cap = m;
	cap->ws_fd = cap->image_fd = cap->image_lock = -1;
	for (size_t i = 0; i < ELEMENTSOF(cap->dev_fds); i++)
		cap->dev_fds[i] = -1;
	/* A pooled sandbox's workspace stays a slave of the shim's (shared) pool
	 * mount point, so that the shim can bind the thread's workspace there when
	 * the sandbox is claimed (sandbox.h). Everything else is private. */
	cap->ws_fd = tree_clone(spec->workspace, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false,
				spec->workspace_slave ? MS_SLAVE : MS_PRIVATE);
	if (spec->image_root) /* the image instead of the host's binds and /etc entries */
		sandbox_image_capture(spec, &cap->image_fd, &cap->image_lock);
	else {
		cap->n_binds = list_capture("ro_binds", spec->ro_binds, bind_path_ok, "", MAX_BINDS,
					    cap->binds);
		/* etc_entries: names directly under /etc */
		cap->n_etc = list_capture("etc_entries", spec->etc_entries ? spec->etc_entries : "",
					  sandbox_etc_name_ok, "/etc/", MAX_ETC, cap->etc);
	}
	for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
		char p[64];
		snprintf(p, sizeof(p), "/dev/%s", dev_nodes[i]);
		cap->dev_fds[i] =
		    tree_clone(p, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, MS_PRIVATE);
	}
	CHECK(chdir(spec->root_mnt), "chdir %s", spec->root_mnt);
}

/* Mount the root tmpfs on the cwd (root_mnt, entered by the spawner: the path
 * to it is root's only) and enter it. The empty-path target needs no lookup
 * permission on the way there. */
static void
root_mount(uid_t uid)
{
	char num[16];
	int fs, mnt;

	fs = fsopen("tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		init_fail(errno, "fsopen tmpfs");
	snprintf(num, sizeof(num), "%u", uid);
	CHECK(fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0755", 0), "root tmpfs mode");
	CHECK(fsconfig(fs, FSCONFIG_SET_STRING, "size", "1m", 0), "root tmpfs size");
	CHECK(fsconfig(fs, FSCONFIG_SET_STRING, "nr_inodes", "4096", 0), "root tmpfs nr_inodes");
	CHECK(fsconfig(fs, FSCONFIG_SET_STRING, "uid", num, 0), "root tmpfs uid");
	CHECK(fsconfig(fs, FSCONFIG_SET_STRING, "gid", num, 0), "root tmpfs gid");
	CHECK(fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0), "create the root tmpfs");
	mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (mnt < 0)
		init_fail(errno, "fsmount the root tmpfs");
	CHECK(move_mount(mnt, "", AT_FDCWD, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
	      "mount the root tmpfs");
	CHECK(fchdir(mnt), "enter the new root");
	close(mnt);
	close(fs);
}

/* Returns the Landlock ABI applied (0 = none). */
static int
init_setup(const SandboxSpec *spec)
{
	char opts[128];
	gid_t groups[1];
	uid_t uid = spec->sandbox_uid;
	int abi_applied;

	/* Phase 1: full caps in the new user ns (owned by host_uid), the host
	 * sources already captured (cap). */
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
	root_mount(uid);

	/* Phase 2: become the sandbox user (mapped), keeping the namespace caps. */
	CHECK(prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps");
	CHECK(raw_setresgid(uid), "setresgid %u", uid);
	CHECK(raw_setresuid(uid), "setresuid %u", uid);
	caps_raise_effective();
	/* setgroups is denied in the namespace; the shim cleared its own groups so
	 * that no host group (root!) rides along. Check instead of trusting it. */
	if (getgroups(1, groups) != 0)
		init_fail(EPERM, "supplementary groups present");

	if (spec->image_root) {
		etc_build(spec, NULL, 0); /* the generated files, bound over the image's */
		sandbox_image_enter(cap->image_fd, cap->image_lock);
		cap->image_fd = cap->image_lock = -1;
	} else {
		binds_attach(cap->binds, cap->n_binds);
		etc_build(spec, cap->etc, cap->n_etc);
	}

	mkdir_rel("workspace", 0755);
	tree_attach(cap->ws_fd, "workspace");
	cap->ws_fd = -1;

	mkdir_rel("tmp", 01777);
	snprintf(opts, sizeof(opts), "mode=1777,size=%lld,nr_inodes=%lld",
		 (long long)spec->tmp_size, (long long)spec->tmp_inodes);
	CHECK(mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts), "mount /tmp");

	mkdir_rel("dev", 0755);
	CHECK(mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC,
		    "mode=0755,size=64k,nr_inodes=64"),
	      "mount /dev");
	for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
		char p[64];
		snprintf(p, sizeof(p), "dev/%s", dev_nodes[i]);
		touch_rel(p);
		tree_attach(cap->dev_fds[i], p);
		cap->dev_fds[i] = -1;
	}
	(void)munmap(cap, sizeof(Captured)); /* every tree is attached */
	cap = NULL;
	CHECK(symlink("/proc/self/fd", "dev/fd"), "symlink /dev/fd");
	CHECK(symlink("/proc/self/fd/0", "dev/stdin"), "symlink /dev/stdin");
	CHECK(symlink("/proc/self/fd/1", "dev/stdout"), "symlink /dev/stdout");
	CHECK(symlink("/proc/self/fd/2", "dev/stderr"), "symlink /dev/stderr");
	mkdir_rel("dev/shm", 01777);
	snprintf(opts, sizeof(opts), "mode=1777,size=%lld,nr_inodes=%lld",
		 (long long)spec->tmp_size, (long long)spec->tmp_inodes);
	CHECK(mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts),
	      "mount /dev/shm");
	CHECK(mount(NULL, "dev", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
		    NULL),
	      "remount /dev read-only");

	/* A fresh /proc for our pid namespace. The kernel only allows it while a fully
	 * visible proc is in this mount namespace, i.e. before the old root goes. */
	mkdir_rel("proc", 0555);
	CHECK(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
	/* The user namespace's own limits, while /proc/sys is writable and we
	 * still hold CAP_SYS_RESOURCE in it (docs/SECURITY.md). */
	for (size_t i = 0; i < ELEMENTSOF(userns_ns_counts); i++)
		userns_limit(userns_ns_counts[i], spec->userns_namespaces);
	for (size_t i = 0; i < ELEMENTSOF(userns_zero); i++)
		userns_limit(userns_zero[i], 0);
	userns_limit("max_inotify_instances", spec->userns_inotify_instances);
	userns_limit("max_inotify_watches", spec->userns_inotify_watches);
	for (size_t i = 0; i < ELEMENTSOF(proc_ro); i++)
		proc_bind_ro(proc_ro[i]);
	/* The file mask: created here, bound over each entry, then unlinked (the
	 * binds keep it); mode 0 and read-only, so reading a masked file fails. */
	{
		/* An image's root is read-only: the mask is made in /tmp there. */
		const char *mask = spec->image_root ? "tmp/.mask" : ".mask";
		int fd = open(mask, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != 0 ||
		    fchmod(fd, 0) < 0)
			init_fail(errno ? errno : EIO, "create the /proc mask");
		close(fd);
		for (size_t i = 0; i < ELEMENTSOF(proc_masked); i++)
			proc_mask(mask, proc_masked[i]);
		CHECK(unlink(mask), "remove the /proc mask's name");
	}
	for (size_t i = 0; i < ELEMENTSOF(proc_masked_dirs); i++)
		proc_mask_dir(proc_masked_dirs[i]);

	/* pivot_root(".", ".") stacks the old root on top of the new one; detaching
	 * the top of "." then leaves only the new root. No oldroot directory needed. */
	CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
	CHECK(umount2(".", MNT_DETACH), "detach the old root");
	CHECK(chdir("/"), "chdir /");
	if (!spec->image_root) /* an image's root was cloned read-only, nosuid, nodev */
		CHECK(mount(NULL, "/", NULL,
			    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL),
		      "remount / read-only");

	CHECK(sethostname("sandbox", STRLEN("sandbox")), "sethostname");
	CHECK(setdomainname("sandbox", STRLEN("sandbox")), "setdomainname");
	loopback_up();

	/* Our stdio was the shim's: replace it so nothing of the host is reachable. */
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0)
		init_fail(errno, "open /dev/null");
	for (int fd = 0; fd < 3; fd++)
		CHECK(dup2(null_fd, fd), "dup2 /dev/null");
	if (null_fd > 2)
		close(null_fd);

	init_rlimits(spec);
	caps_drop_all();
	CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs");
	CHECK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "set non-dumpable");
	/* A pooled sandbox restricts itself when it is claimed (the first exec):
	 * Landlock's rule for /workspace must name the workspace mounted there then,
	 * and a rule on a mount point hidden under another mount is not seen. */
	if (spec->workspace_slave) {
		long abi =
		    syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
		landlock_pending = abi > 0;
		init_seccomp();
		return abi > 0 ? (int)abi : 0;
	}
	abi_applied = init_landlock();
	init_seccomp();
	return abi_applied;
}

/* Landlock, when the kernel has it (defence in depth under the read-only
 * mounts): every write-type access is handled and allowed only beneath
 * ll_write_dirs and on ll_write_files; from ABI 6 on, abstract unix sockets and
 * signals are scoped to the sandbox. The init restricts itself, so every exec
 * is under this domain (an exec may still signal what an earlier one started);
 * each exec then adds a layer of its own (exec_ll_fd) that restricts no
 * access but keeps execs out of each other's /proc/PID entries.
 * Returns the ABI applied, 0 when Landlock is unavailable. */
int
init_landlock(void)
{
	struct {
		uint64_t fs, net, scoped; /* struct landlock_ruleset_attr, ABI 6 layout */
	} attr = {0};
	uint64_t write = LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
			 LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR |
			 LANDLOCK_ACCESS_FS_MAKE_DIR | LANDLOCK_ACCESS_FS_MAKE_REG |
			 LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
			 LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
	uint64_t file_rights = LANDLOCK_ACCESS_FS_WRITE_FILE;
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	int rs;

	if (abi <= 0)
		return 0; /* ENOSYS / EOPNOTSUPP: not built or disabled */
	if (abi >= 2)
		write |= LANDLOCK_ACCESS_FS_REFER; /* else renames across directories fail */
	if (abi >= 3) {
		write |= LANDLOCK_ACCESS_FS_TRUNCATE;
		file_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
	}
	if (abi >= 5) {
		write |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
		file_rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	}
	attr.fs = write;
	if (abi >= 6)
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
	rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (rs < 0)
		init_fail(errno, "landlock_create_ruleset (ABI %ld)", abi);
	for (size_t i = 0; i < ELEMENTSOF(ll_write_dirs) + ELEMENTSOF(ll_write_files); i++) {
		bool dir = i < ELEMENTSOF(ll_write_dirs);
		const char *path =
		    dir ? ll_write_dirs[i] : ll_write_files[i - ELEMENTSOF(ll_write_dirs)];
		struct landlock_path_beneath_attr rule = {.allowed_access =
							      dir ? write : file_rights};
		rule.parent_fd = open(path, O_PATH | O_CLOEXEC);
		if (rule.parent_fd < 0)
			init_fail(errno, "open %s for Landlock", path);
		if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &rule, 0) < 0)
			init_fail(errno, "landlock_add_rule %s", path);
		close(rule.parent_fd);
	}
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		init_fail(errno, "landlock_restrict_self");
	close(rs);
	return (int)abi;
}

/* The v1 cgroup.procs files the init writes itself into (fds 5…, laid out by
 * the shim). */
static int child_procs_fds[MAX_PROCS_FDS];

/* The sandbox's PID 1: a child of the shim (CLONE_PARENT), cloned by the
 * spawner as host_uid into fresh namespaces. */
static _noreturn_ void
init_main(const SandboxSpec *spec)
{
	InitMsg m;
	ssize_t n;
	int cg_err = 0;

	/* v1 hierarchies: join the sandbox's cgroups ourselves ("0" = the writer),
	 * first thing and before anything of the sandbox runs. The write waits for
	 * cgroup_threadgroup_rwsem (an RCU grace period, milliseconds): done here it
	 * blocks only this child, not the shim's event loop. The open files carry
	 * the shim's credentials, which is what the kernel checks. */
	for (size_t i = 0; i < spec->n_procs_fds; i++) {
		if (!cg_err && write(child_procs_fds[i], "0\n", 2) != 2)
			cg_err = errno ? errno : EIO;
		close(child_procs_fds[i]);
	}
	/* No PDEATHSIG: the init outlives a crashed shim (orphan_ms, sandbox.h). The
	 * shim's end of the socketpair closing (read → 0) ends it before GO. */
	(void)prctl(PR_SET_NAME, "sandbox-init", 0, 0, 0); /* not "containerd-shim" in ps */

	do
		n = recv(INIT_SOCK_FD, &m, sizeof(m), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(m) || m.type != INIT_MSG_GO)
		_exit(1);
	if (cg_err)
		init_fail(cg_err, "join the sandbox's v1 cgroups"); /* fail closed */
	if (capture_err) {
		/* Reported now, with the message the spawner kept. */
		InitMsg f = {.type = INIT_MSG_SETUP_FAILED, .err = capture_err};
		init_send(INIT_SOCK_FD, &f, capture_msg, strlen(capture_msg));
		_exit(1);
	}
	/* A cgroup namespace rooted where we are now, in every hierarchy: the one
	 * clone3 made is rooted at the cgroup2 leaf but at the shim's v1 cgroups
	 * (the v1 joins came after it), and /proc/self/cgroup must name no host
	 * cgroup. */
	CHECK(unshare(CLONE_NEWCGROUP), "unshare the cgroup namespace");

	m = (InitMsg){.type = INIT_MSG_READY};
	m.status = init_setup(spec); /* the Landlock ABI applied */
	init_send(INIT_SOCK_FD, &m, NULL, 0);
	init_serve(INIT_SOCK_FD, spec->listen_fd >= 0 ? INIT_LISTEN_FD : -1);
}

/* The spawner: the exec'd helper (sandbox-init-main.c), a child of the shim
 * born in the sandbox's cgroup2 directory, still host root, with the socket
 * (fd 3), the init's listener (fd 4) and the v1 cgroup.procs files (5…) laid
 * out by the shim (sandbox_spawn_begin). It captures the host sources
 * (capture_sources), drops to host_uid and clones the init with CLONE_NEWUSER
 * and the other namespaces — so the user namespace is owned by host_uid, and
 * the kernel's per-user counts of everything inside are charged to host_uid,
 * never to root (docs/SECURITY.md) — as a child of the shim (CLONE_PARENT).
 * It sends the shim INIT_MSG_SPAWNED with the init's pid and pidfd and exits;
 * a failure before the clone is INIT_MSG_SETUP_FAILED instead. */
_noreturn_ void
spawner_main(const SandboxSpec *spec)
{
	int pidfd = -1;
	struct clone_args args = {
	    .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD | CLONE_PARENT,
	    .pidfd = (uint64_t)(uintptr_t)&pidfd,
	    .exit_signal = 0, /* CLONE_PARENT: the shim gets our exit signal, SIGCHLD */
	};
	InitMsg m;
	pid_t pid;

	init_spec = spec;
	if (spec->n_procs_fds > MAX_PROCS_FDS)
		_exit(1);
	for (size_t i = 0; i < spec->n_procs_fds; i++)
		child_procs_fds[i] = INIT_LISTEN_FD + 1 + (int)i;
	if (sigsetjmp(capture_jmp, 0) == 0) {
		capturing = true;
		capture_sources(spec);
	}
	capturing = false;
	CHECK(raw_setresgid(spec->host_uid), "setresgid %u", spec->host_uid);
	CHECK(raw_setresuid(spec->host_uid), "setresuid %u", spec->host_uid);
	pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0)
		init_fail(errno, "clone3 (user namespace as uid %u)", spec->host_uid);
	if (pid == 0)
		init_main(spec);
	m = (InitMsg){.type = INIT_MSG_SPAWNED, .pid = pid};
	if (fd_send(INIT_SOCK_FD, &m, sizeof(m), &pidfd, 1) < 0) {
		(void)sandbox_pidfd_kill(pidfd, SIGKILL);
		_exit(1);
	}
	_exit(0);
}
