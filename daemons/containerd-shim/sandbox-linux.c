/* SPDX-License-Identifier: MIT */
/*
 * sandbox-linux.c — clone3 into fresh namespaces, build the sandbox root,
 * drop privileges, then serve as the sandbox's PID 1. See sandbox.h.
 *
 * Everything below init_main() runs in the forked child. It never returns
 * into the shim's code: it _exit()s on any failure after telling the shim
 * why (fail closed), and it never logs (the log backend belongs to the shim).
 *
 * Why the mount sequence looks the way it does: right after clone3 the child
 * is host uid 0, which is *unmapped* in the new user namespace. That identity
 * can still resolve host paths that only root may traverse (it owns them), so
 * all host sources (ro_binds, the workspace, the /dev nodes) are captured
 * first as detached mount trees with open_tree(OPEN_TREE_CLONE) and made
 * read-only / nosuid / nodev with mount_setattr() while detached. Creating
 * files in a tmpfs owned by the new user namespace, however, needs a mapped
 * fsuid (else EOVERFLOW), so the child then switches to sandbox_uid (keeping
 * its namespace capabilities), creates the mount points inside the new root
 * and attaches the trees with move_mount().
 */
#include "config.h"

#include "sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
#include "seccomp-policy.h"

#define INIT_SOCK_FD 3
#define MAX_BINDS 32
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom"};
/* /proc entries made read-only (bind onto themselves) and masked with /dev/null. */
static const char *const proc_ro[] = {"proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus"};
static const char *const proc_masked[] = {"proc/kcore", "proc/keys", "proc/timer_list",
					  "proc/sched_debug"};

extern char **environ;

/* Landlock constants newer than Debian 12's kernel headers (6.1). */
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)
/* Where sandboxed processes may write (SANDBOX.md §6.E item 21). */
static const char *const ll_write_dirs[] = {"/workspace", "/tmp", "/dev/shm"};
static const char *const ll_write_files[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random",
					     "/dev/urandom"};

/* The child's copy of the spec (set once in init_main; the init never returns). */
static const SandboxSpec *init_spec;

int
sandbox_pidfd_kill(int pidfd, int sig)
{
	return RET_NERRNO(syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0));
}

/* ---------------------------------------------------------------------------
 * Child side: messages to the shim.
 */

static void
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

/* Report a setup failure as "what: strerror(err)" and exit: fail closed. */
static _noreturn_ _printf_(2, 3) void init_fail(int err, const char *fmt, ...)
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
	init_send(INIT_SOCK_FD, &m, msg, strlen(msg));
	_exit(1);
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

/* A detached recursive clone of a host path with the given attributes set. */
static int
tree_clone(const char *path, uint64_t attrs, bool recursive)
{
	struct mount_attr a = {.attr_set = attrs};
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

/* Parse ro_binds and capture each source while we are still host uid 0. */
static size_t
binds_capture(const char *list, Bind *binds)
{
	char buf[4096];
	size_t n = 0;
	char *save = NULL;

	if (snprintf(buf, sizeof(buf), "%s", list) >= (int)sizeof(buf))
		init_fail(ENAMETOOLONG, "ro_binds");
	for (char *tok = strtok_r(buf, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		struct stat st;
		Bind *b;

		/* Absolute, not "/", no "." or ".." components: checked by the shim at start-up
		 * too, but this is the boundary, so check again. */
		if (tok[0] != '/' || tok[1] == '\0' || strstr(tok, "/.") || strlen(tok) >= PATH_MAX)
			init_fail(EINVAL, "ro_binds entry '%s'", tok);
		if (n >= MAX_BINDS)
			init_fail(E2BIG, "ro_binds");
		if (lstat(tok, &st) < 0) {
			if (errno == ENOENT)
				continue; /* e.g. no /lib64 on this architecture */
			init_fail(errno, "stat %s", tok);
		}
		b = &binds[n++];
		memset(b, 0, sizeof(*b));
		b->tree_fd = -1;
		snprintf(b->path, sizeof(b->path), "%s", tok);
		if (S_ISLNK(st.st_mode)) {
			ssize_t l = readlink(tok, b->link, sizeof(b->link) - 1);
			if (l < 0)
				init_fail(errno, "readlink %s", tok);
			b->link[l] = '\0';
			b->is_link = true;
			continue;
		}
		b->is_dir = S_ISDIR(st.st_mode);
		b->tree_fd =
		    tree_clone(tok, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, true);
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

static void
proc_mask(const char *rel)
{
	if (access(rel, F_OK) < 0)
		return;
	CHECK(mount("dev/null", rel, NULL, MS_BIND, NULL), "mask /%s", rel);
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

static int init_landlock(void);

/* Last step of the setup: the init and everything it will start run under the
 * policy from here on (sandbox.h). */
static void
init_seccomp(void)
{
	int r;

	if (!init_spec->seccomp || !init_spec->seccomp_exec)
		init_fail(EPERM, "no seccomp filter");
	r = seccomp_policy_load(init_spec->seccomp);
	if (r < 0)
		init_fail(-r, "load the seccomp filter");
}
static bool landlock_pending; /* pooled: restrict at the first exec */

/* Returns the Landlock ABI applied (0 = none). */
static int
init_setup(const SandboxSpec *spec)
{
	Bind binds[MAX_BINDS];
	int ws_fd, dev_fds[ELEMENTSOF(dev_nodes)];
	char opts[128];
	size_t n;
	gid_t groups[1];
	uid_t uid = spec->sandbox_uid;
	int abi_applied;

	/* Phase 1, still host uid 0 (unmapped) with full caps in the new user ns.
	 * A pooled sandbox's workspace is cloned before / turns private: the clone
	 * stays a slave of the shim's shared mount point, so that the shim can bind
	 * the thread's workspace there when the sandbox is claimed (sandbox.h).
	 * Everything else, including any other workspace, is private. */
	ws_fd = spec->workspace_slave
		    ? tree_clone(spec->workspace, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false)
		    : -1;
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
	snprintf(opts, sizeof(opts), "mode=0755,size=1m,nr_inodes=4096,uid=%u,gid=%u", uid, uid);
	CHECK(mount("tmpfs", spec->root_mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts),
	      "mount root tmpfs");
	CHECK(chdir(spec->root_mnt), "chdir new root");

	n = binds_capture(spec->ro_binds, binds);
	if (ws_fd < 0)
		ws_fd = tree_clone(spec->workspace, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false);
	for (size_t i = 0; i < ELEMENTSOF(dev_nodes); i++) {
		char p[64];
		snprintf(p, sizeof(p), "/dev/%s", dev_nodes[i]);
		dev_fds[i] = tree_clone(p, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false);
	}

	/* Phase 2: become the sandbox user (mapped), keeping the namespace caps. */
	CHECK(prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps");
	CHECK(setresgid(uid, uid, uid), "setresgid %u", uid);
	CHECK(setresuid(uid, uid, uid), "setresuid %u", uid);
	caps_raise_effective();
	/* setgroups is denied in the namespace; the shim cleared its own groups so
	 * that no host group (root!) rides along. Check instead of trusting it. */
	if (getgroups(1, groups) != 0)
		init_fail(EPERM, "supplementary groups present");

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
	}

	mkdir_rel("workspace", 0755);
	tree_attach(ws_fd, "workspace");

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
		tree_attach(dev_fds[i], p);
	}
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
	for (size_t i = 0; i < ELEMENTSOF(proc_ro); i++)
		proc_bind_ro(proc_ro[i]);
	for (size_t i = 0; i < ELEMENTSOF(proc_masked); i++)
		proc_mask(proc_masked[i]);

	/* pivot_root(".", ".") stacks the old root on top of the new one; detaching
	 * the top of "." then leaves only the new root. No oldroot directory needed. */
	CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
	CHECK(umount2(".", MNT_DETACH), "detach the old root");
	CHECK(chdir("/"), "chdir /");
	CHECK(mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL),
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
 * shares one domain (an exec may still signal what an earlier one started).
 * Returns the ABI applied, 0 when Landlock is unavailable. */
static int
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

/* ---------------------------------------------------------------------------
 * Child side: serving execs as PID 1.
 */

#define INIT_LISTEN_FD 4
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
	int stage; /* 0 chdir, 1 exec, 2 other, 3 seccomp */
} ExecStatus;

static void
st_send(InitState *st, const InitMsg *m)
{
	if (st->sock >= 0)
		init_send(st->sock, m, NULL, 0);
}

/* The forked exec child: never returns. */
static _noreturn_ void
exec_child(const int *fds, int status_fd, const char *cwd, char **argv, char **envp)
{
	ExecStatus es = {.stage = 2};
	sigset_t all;
	int r;

	sigemptyset(&all);
	(void)sigprocmask(SIG_SETMASK, &all, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		(void)signal(sig, SIG_DFL);
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
	/* Last step before execve: from here on only allowlisted syscalls work. */
	es.stage = 3;
	if (!init_spec->seccomp_exec) {
		errno = EPERM;
		goto fail;
	}
	r = seccomp_policy_load(init_spec->seccomp_exec);
	if (r < 0) {
		errno = -r;
		goto fail;
	}
	es.stage = 1;
	execvpe(argv[0], argv, envp);
fail:
	es.err = errno;
	(void)!write(status_fd, &es, sizeof(es));
	_exit(es.err == ENOENT ? 127 : 126);
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
	if (nfds == 4) {
		/* Born in the exec's own cgroup (fds[3], its leaf): no instant in
		 * which it or a child could escape it. Never a plain fork instead. */
		struct clone_args ca = {
		    .flags = CLONE_INTO_CGROUP,
		    .exit_signal = SIGCHLD,
		    .cgroup = (uint64_t)fds[3],
		};
		pid = (pid_t)syscall(SYS_clone3, &ca, sizeof(ca));
		if (pid < 0) {
			r.err = errno;
			snprintf(msg, sizeof(msg), "cannot start in the exec's cgroup: %s",
				 strerror(errno));
			goto fail;
		}
	} else {
		pid = fork();
		if (pid < 0) {
			r.err = errno;
			snprintf(msg, sizeof(msg), "fork: %s", strerror(errno));
			goto fail;
		}
	}
	if (pid == 0) {
		int child_fds[3] = {fds[0], po[1], pe[1]};
		exec_child(child_fds, sp[1], cwd, argv, envp);
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

static _noreturn_ void
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

/* The init is a fork of the shim, so /proc/1/cmdline inside would show the shim's
 * command line (config paths). Overwrite our copy of the argv area. */
static void
init_scrub_cmdline(void)
{
	char buf[4096];
	size_t total = 0;
	ssize_t n;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += (size_t)n;
	close(fd);
	if (total > STRLEN("sandbox-init")) {
		memset(program_invocation_name, 0, total);
		strcpy(program_invocation_name, "sandbox-init");
	}
}

static _noreturn_ void
init_main(int sock, const SandboxSpec *spec)
{
	InitMsg m;
	ssize_t n;

	int cg_err = 0;

	init_spec = spec;
	/* v1 hierarchies: join the sandbox's cgroups ourselves ("0" = the writer),
	 * first thing and before anything of the sandbox runs. The write waits for
	 * cgroup_threadgroup_rwsem (an RCU grace period, milliseconds): done here it
	 * blocks only this child, not the shim's event loop. The open files carry
	 * the shim's credentials, which is what the kernel checks. */
	for (size_t i = 0; !cg_err && i < spec->n_procs_fds; i++)
		if (write(spec->procs_fds[i], "0\n", 2) != 2)
			cg_err = errno ? errno : EIO;
	/* No PDEATHSIG: the init outlives a crashed shim (orphan_ms, sandbox.h). The
	 * shim's end of the socketpair closing (read → 0) ends it before GO. */
	(void)prctl(PR_SET_NAME, "sandbox-init", 0, 0, 0); /* not "containerd-shim" in ps */
	init_scrub_cmdline();
	/* Keep only the socket (as fd 3), our listener (fd 4) and stdio: the shim's
	 * listener, peers and other sandboxes' sockets must not live on in here. */
	{
		int a = fcntl(sock, F_DUPFD_CLOEXEC, 16);
		int b = spec->listen_fd >= 0 ? fcntl(spec->listen_fd, F_DUPFD_CLOEXEC, 16) : -1;
		if (a < 0 || (spec->listen_fd >= 0 && b < 0) ||
		    dup3(a, INIT_SOCK_FD, O_CLOEXEC) < 0 ||
		    (b >= 0 && dup3(b, INIT_LISTEN_FD, O_CLOEXEC) < 0))
			_exit(1);
		if (close_range(b >= 0 ? INIT_LISTEN_FD + 1 : INIT_SOCK_FD + 1, ~0U, 0) < 0)
			_exit(1);
	}
	sock = INIT_SOCK_FD;

	do
		n = recv(sock, &m, sizeof(m), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(m) || m.type != INIT_MSG_GO)
		_exit(1);
	if (cg_err)
		init_fail(cg_err, "join the sandbox's v1 cgroups"); /* fail closed */

	m = (InitMsg){.type = INIT_MSG_READY};
	m.status = init_setup(spec); /* the Landlock ABI applied */
	init_send(sock, &m, NULL, 0);
	init_serve(sock, spec->listen_fd >= 0 ? INIT_LISTEN_FD : -1);
}

/* ---------------------------------------------------------------------------
 * Shim side.
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

int
sandbox_spawn(const SandboxSpec *spec, pid_t *ret_pid, int *ret_pidfd, int *ret_sock)
{
	_cleanup_close_ int s0 = -1, s1 = -1, pidfd = -1;
	int sp[2], sndbuf = 2 * INIT_PAYLOAD_MAX, r;
	char map[64];
	InitMsg go = {.type = INIT_MSG_GO};
	struct clone_args args = {
	    .flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
		     CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_PIDFD,
	    .exit_signal = SIGCHLD,
	};
	pid_t pid;

	if (spec->host_uid == 0)
		return -EPERM; /* never map host root */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	s0 = sp[0];
	s1 = sp[1];
	/* A SEQPACKET message must fit the sender's buffer in one piece. */
	if (setsockopt(s0, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0 &&
	    setsockopt(s0, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)) < 0)
		return -errno;

	args.pidfd = (uint64_t)(uintptr_t)&pidfd;
	if (spec->cgroup_fd >= 0) {
		args.flags |= CLONE_INTO_CGROUP;
		args.cgroup = (uint64_t)spec->cgroup_fd;
	}
	pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		safe_close(s0);
		init_main(s1, spec);
	}
	s1 = safe_close(s1);

	/* (The v1 cgroups: the child joins them itself, see init_main.) setgroups
	 * must be denied before an unprivileged gid_map may be written. */
	r = write_file(pid, "setgroups", "deny");
	if (r >= 0) {
		snprintf(map, sizeof(map), "%u %u 1\n", spec->sandbox_uid, spec->host_uid);
		r = write_file(pid, "uid_map", map);
	}
	if (r >= 0)
		r = write_file(pid, "gid_map", map);
	if (r >= 0)
		r = (int)fd_send(s0, &go, sizeof(go), NULL, 0);
	if (r >= 0)
		r = fd_nonblock(s0, 1);
	if (r < 0) {
		(void)sandbox_pidfd_kill(pidfd, SIGKILL);
		(void)waitpid(pid, NULL, 0);
		return r;
	}
	*ret_pid = pid;
	*ret_pidfd = TAKE_FD(pidfd);
	*ret_sock = TAKE_FD(s0);
	return 0;
}
