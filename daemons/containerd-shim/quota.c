/* SPDX-License-Identifier: MIT */
/*
 * quota.c — workspace project quotas (see quota.h).
 *
 * quotactl_fd(2) (Linux 5.14) names the filesystem by any open fd, so the
 * shim needs no block device path; glibc 2.36 has no wrapper (raw syscall).
 * On older kernels the device comes from /proc/self/mountinfo and plain
 * quotactl(2) is used. Q_XGETQSTATV reports whether project quota limits are
 * enforced on both ext4 (generic dquot_get_state) and XFS, where the kernel
 * answers it (else Q_GETINFO: on or off); Q_GETQUOTA and Q_SETQUOTA (struct
 * if_dqblk, 1 KiB blocks) work on both.
 */
#include "config.h"

#include "quota.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "reason.h"

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443
#endif
#ifndef XFS_SUPER_MAGIC
#define XFS_SUPER_MAGIC 0x58465342
#endif

/* Deepest directory nesting the relabelling walk descends into. */
#define LABEL_MAX_DEPTH 512

static void
closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

/* The block device of the filesystem that fd is on, from mountinfo. */
static int
blockdev_of(int fd, char *buf, size_t size)
{
	_cleanup_free_ char *line = NULL;
	size_t n = 0;
	struct stat st;
	FILE *f;
	int r = -ENODEV;

	if (fstat(fd, &st) < 0)
		return -errno;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &n, f) > 0) {
		unsigned maj, min;
		char *sep, src[256];
		/* "36 35 98:0 /root /mnt opts [optional…] - fstype source superopts" */
		if (sscanf(line, "%*u %*u %u:%u", &maj, &min) != 2 ||
		    makedev(maj, min) != st.st_dev)
			continue;
		sep = strstr(line, " - ");
		if (sep && sscanf(sep, " - %*s %255s", src) == 1 && src[0] == '/') {
			snprintf(buf, size, "%s", src);
			r = 0;
			break;
		}
	}
	fclose(f);
	return r;
}

/* quotactl on the filesystem of fd. -errno on failure. */
static int
qctl(int fd, int cmd, uint32_t id, void *addr)
{
	static int have_fd_call = -1;
	char dev[256];
	int r;

	if (have_fd_call < 0) /* EBADF: the call exists */
		have_fd_call = syscall(SYS_quotactl_fd, -1, 0, 0, NULL) < 0 && errno != ENOSYS;
	if (have_fd_call)
		return syscall(SYS_quotactl_fd, fd, cmd, id, addr) < 0 ? -errno : 0;
	r = blockdev_of(fd, dev, sizeof(dev));
	if (r < 0)
		return r;
	return quotactl(cmd, dev, (int)id, addr) < 0 ? -errno : 0;
}

static const char *
fs_name(long type)
{
	switch (type) {
	case EXT4_SUPER_MAGIC: return "ext4";
	case XFS_SUPER_MAGIC: return "xfs";
	case BTRFS_SUPER_MAGIC: return "btrfs";
	case TMPFS_MAGIC: return "tmpfs";
	case OVERLAYFS_SUPER_MAGIC: return "overlayfs";
	default: return NULL;
	}
}

/* Open dir, or its nearest existing ancestor (the sandbox_dir may not exist
 * before the shim's first start). */
static int
open_existing(const char *dir)
{
	char p[PATH_MAX];
	int fd;

	if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (;;) {
		fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT)
			return fd >= 0 ? fd : -errno;
		char *slash = strrchr(p, '/');
		if (!slash || slash == p)
			return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		*slash = '\0';
	}
}

static int
probe_fd(int fd, const char *dir, char *fstype, size_t fstype_size, Reason *msg)
{
	struct fs_quota_statv sv = {.qs_version = FS_QSTATV_VERSION1};
	struct statfs sfs;
	const char *name;
	bool ext4;
	int r;

	if (fstatfs(fd, &sfs) < 0) {
		r = -errno;
		snprintf(fstype, fstype_size, "?");
		reason_set(msg, "cannot statfs %s: %s", dir, strerror(-r));
		return r;
	}
	name = fs_name((long)sfs.f_type);
	if (name)
		snprintf(fstype, fstype_size, "%s", name);
	else
		snprintf(fstype, fstype_size, "fs type 0x%lx", (unsigned long)sfs.f_type);
	ext4 = sfs.f_type == EXT4_SUPER_MAGIC;
	if (!ext4 && sfs.f_type != XFS_SUPER_MAGIC) {
		reason_set(
		    msg,
		    "%s is on %s, which has no project quotas the shim can use; put it on ext4 "
		    "mounted with -o prjquota or XFS mounted with -o pquota",
		    dir, fstype);
		return -EOPNOTSUPP;
	}
	r = qctl(fd, QCMD(Q_XGETQSTATV, PRJQUOTA), 0, &sv);
	if (r == -ENOSYS) {
		/* Some kernels answer only the VFS quota calls on ext4: a project
		 * quota that is on (Q_GETINFO works; ESRCH: off) was turned on by
		 * -o prjquota, which enables accounting and limits together. */
		struct dqinfo info;
		r = qctl(fd, QCMD(Q_GETINFO, PRJQUOTA), 0, &info);
		if (r >= 0)
			sv.qs_flags = FS_QUOTA_PDQ_ACCT | FS_QUOTA_PDQ_ENFD;
		else if (r == -ESRCH)
			r = 0;
	}
	if (r == -ENOSYS || r == -EOPNOTSUPP || r == -EINVAL) {
		reason_set(msg,
			   "%s is on %s, and this kernel has no quota support for it (%s: "
			   "CONFIG_QUOTA and CONFIG_QFMT_V2, or CONFIG_XFS_QUOTA)",
			   dir, fstype, strerror(-r));
		return -EOPNOTSUPP;
	}
	if (r < 0) {
		reason_set(msg, "cannot query the quota state of %s (%s): %s", dir, fstype,
			   strerror(-r));
		return r;
	}
	if (!(sv.qs_flags & FS_QUOTA_PDQ_ENFD)) {
		reason_set(msg,
			   ext4 ? "%s is on ext4 without project quotas; mount it with -o prjquota "
				  "(the filesystem needs the quota and project features: "
				  "tune2fs -O quota,project)"
				: "%s is on xfs without project quotas; mount it with -o pquota",
			   dir);
		return -EOPNOTSUPP;
	}
	reason_set(msg, "%s is on %s with project quotas enforced", dir, fstype);
	return 0;
}

int
quota_probe(const char *dir, char *fstype, size_t fstype_size, Reason *msg)
{
	_cleanup_close_ int fd = open_existing(dir);

	if (fd < 0) {
		snprintf(fstype, fstype_size, "?");
		reason_set(msg, "cannot open %s: %s", dir, strerror(-fd));
		return fd;
	}
	return probe_fd(fd, dir, fstype, fstype_size, msg);
}

static bool
projid_ours(const ShimConf *c, uint32_t p)
{
	return p >= (uint64_t)c->workspace_projid_base &&
	       p - (uint64_t)c->workspace_projid_base < (uint64_t)c->workspace_projid_count;
}

/* Is any inode or byte charged to project p? (XFS: -ENOENT = no dquot yet.) */
static int
projid_in_use(int fd, uint32_t p, bool *ret)
{
	struct dqblk dq = {0};
	int r = qctl(fd, QCMD(Q_GETQUOTA, PRJQUOTA), p, &dq);

	if (r == -ENOENT || r == -ESRCH) {
		*ret = false;
		return 0;
	}
	if (r < 0)
		return r;
	*ret = dq.dqb_curinodes > 0 || dq.dqb_curspace > 0;
	return 0;
}

static uint32_t
hash_id(const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *id; id++)
		h = (h ^ (uint8_t)*id) * 16777619u;
	return h;
}

static int
projid_allocate(const ShimConf *c, int fd, const char *id, uint32_t *ret)
{
	uint64_t count = (uint64_t)c->workspace_projid_count;
	uint64_t start = hash_id(id) % count;
	uint64_t tries = MIN(count, (uint64_t)65536);

	for (uint64_t i = 0; i < tries; i++) {
		uint32_t p = (uint32_t)((uint64_t)c->workspace_projid_base + (start + i) % count);
		bool used;
		int r = projid_in_use(fd, p, &used);
		if (r < 0)
			return r;
		if (!used) {
			*ret = p;
			return 0;
		}
	}
	return -ENOSPC;
}

static int
set_projid(int fd, uint32_t p, bool dir)
{
	struct fsxattr fa;

	if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
		return -errno;
	if (fa.fsx_projid == p && (!dir || (fa.fsx_xflags & FS_XFLAG_PROJINHERIT)))
		return 0;
	fa.fsx_projid = p;
	if (dir)
		fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
	return ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0 ? -errno : 0;
}

/* Label what dfd holds with project p: directories and regular files owned by
 * uid on device dev (never a file of someone else's, never across a mount). */
static int
label_tree(int dfd, uint32_t p, uid_t uid, dev_t dev, unsigned depth, size_t *n_skipped)
{
	_cleanup_(closedirp) DIR *d = NULL;
	struct dirent *de;
	int dup_fd, r;

	if (depth > LABEL_MAX_DEPTH)
		return -ELOOP;
	dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return -errno;
	d = fdopendir(dup_fd);
	if (!d) {
		r = -errno;
		close(dup_fd);
		return r;
	}
	while ((errno = 0, de = readdir(d))) {
		_cleanup_close_ int fd = -1;
		struct stat st;
		bool is_dir;

		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		is_dir = S_ISDIR(st.st_mode);
		if ((!is_dir && !S_ISREG(st.st_mode)) || st.st_uid != uid || st.st_dev != dev) {
			(*n_skipped)++;
			continue;
		}
		fd = openat(dfd, de->d_name,
			    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
				(is_dir ? O_DIRECTORY : 0));
		if (fd < 0) {
			if (errno == ENOENT)
				continue;
			return -errno;
		}
		r = set_projid(fd, p, is_dir);
		if (r < 0)
			return r;
		if (is_dir) {
			r = label_tree(fd, p, uid, dev, depth + 1, n_skipped);
			if (r < 0)
				return r;
		}
	}
	return errno ? -errno : 0;
}

static int
set_limits(int fd, uint32_t p, int64_t bytes, int64_t inodes)
{
	struct dqblk dq = {
	    .dqb_bhardlimit = ((uint64_t)bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE,
	    .dqb_ihardlimit = (uint64_t)inodes,
	    .dqb_valid = QIF_LIMITS,
	};
	return qctl(fd, QCMD(Q_SETQUOTA, PRJQUOTA), p, &dq);
}

int
quota_workspace_apply(const ShimConf *c, const char *id, int ws_fd, const char *ws,
		      uint32_t *ret_projid, Reason *why)
{
	char fstype[32];
	Reason probe = {""};
	struct fsxattr fa;
	struct stat st;
	uint32_t p;
	size_t skipped = 0;
	Reason local;
	int r;

	if (!why)
		why = &local;
	*ret_projid = 0;
	if (c->workspace_quota == 0 && c->workspace_inodes == 0) {
		/* Off. A project of ours from an earlier configuration: drop its limits. */
		if (ioctl(ws_fd, FS_IOC_FSGETXATTR, &fa) == 0 && projid_ours(c, fa.fsx_projid) &&
		    (r = set_limits(ws_fd, fa.fsx_projid, 0, 0)) < 0)
			log_warning_errno(r, "Cannot clear the quota of project %u (%s): %m",
					  (unsigned)fa.fsx_projid, ws);
		return 0;
	}

	r = probe_fd(ws_fd, c->sandbox_dir, fstype, sizeof(fstype), &probe);
	if (r < 0 && !c->workspace_quota_required) {
		/* Warned at start-up (quota_log_support); the workspace has no quota. */
		log_debug("No quota on %s: %s", ws, probe.msg);
		return 0;
	}
	if (r < 0) {
		reason_set(why,
			   "workspace_quota: %s, or set workspace_quota_required=no (no quota "
			   "there) or workspace_quota=0 and workspace_inodes=0",
			   probe.msg);
		return log_error_errno(r, "%s", why->msg);
	}
	if (fstat(ws_fd, &st) < 0 || ioctl(ws_fd, FS_IOC_FSGETXATTR, &fa) < 0) {
		r = -errno;
		reason_set(why, "workspace_quota: cannot read the attributes of %s: %s", ws,
			   strerror(-r));
		return log_error_errno(r, "%s", why->msg);
	}
	if (projid_ours(c, fa.fsx_projid))
		p = fa.fsx_projid; /* recorded on the directory at an earlier creation */
	else {
		r = projid_allocate(c, ws_fd, id, &p);
		if (r < 0) {
			if (r == -ENOSPC)
				reason_set(why, "workspace_quota: no free project id in "
						"workspace_projid_base..+workspace_projid_count");
			else
				reason_set(why, "workspace_quota: cannot allocate a project id: %s",
					   strerror(-r));
			return log_error_errno(r, "%s", why->msg);
		}
	}
	/* Limits before the label: the usage moves into a project already capped. */
	r = set_limits(ws_fd, p, c->workspace_quota, c->workspace_inodes);
	if (r < 0) {
		reason_set(why, "workspace_quota: cannot set the limits of project %u on %s: %s",
			   (unsigned)p, fstype, strerror(-r));
		return log_error_errno(r, "%s", why->msg);
	}
	if (fa.fsx_projid != p || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT)) {
		r = set_projid(ws_fd, p, true);
		if (r >= 0)
			r = label_tree(ws_fd, p, st.st_uid, st.st_dev, 0, &skipped);
		if (r < 0) {
			reason_set(why, "workspace_quota: cannot set project id %u on %s: %s",
				   (unsigned)p, ws, strerror(-r));
			return log_error_errno(r, "%s", why->msg);
		}
		log_info("Workspace %s: project id %u (was %u)%s", ws, (unsigned)p,
			 (unsigned)fa.fsx_projid,
			 skipped ? ", some symlinks or special files stay uncharged" : "");
	}
	*ret_projid = p;
	return 0;
}

int
quota_log_support(const ShimConf *c)
{
	char fstype[32];
	Reason probe = {""};
	int r;

	if (c->workspace_quota == 0 && c->workspace_inodes == 0) {
		log_notice("Workspace quotas are off (workspace_quota=0, workspace_inodes=0): "
			   "one sandbox can fill the filesystem of %s",
			   c->sandbox_dir);
		return 0;
	}
	r = quota_probe(c->sandbox_dir, fstype, sizeof(fstype), &probe);
	if (r >= 0) {
		log_info("Workspace quotas enforced: %s (workspace_quota=%lld bytes, "
			 "workspace_inodes=%lld)",
			 probe.msg, (long long)c->workspace_quota, (long long)c->workspace_inodes);
		return 0;
	}
	if (c->workspace_quota_required)
		log_error(
		    "WORKSPACE QUOTAS CANNOT BE ENFORCED: %s. workspace_quota_required=yes, so "
		    "every sandbox creation will fail until this is fixed",
		    probe.msg);
	else
		log_warning(
		    "WORKSPACE QUOTAS ARE NOT ENFORCED: %s. Sandboxes get no quota: one "
		    "tenant can fill this filesystem for every other (and for the run log "
		    "if it shares it). Set workspace_quota_required=yes to refuse sandboxes "
		    "instead",
		    probe.msg);
	return r;
}
