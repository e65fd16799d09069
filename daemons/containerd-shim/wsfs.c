/* SPDX-License-Identifier: MIT */
/*
 * wsfs.c — workspace file operations that cannot be tricked into leaving the
 * workspace (see wsfs.h).
 */
#include "config.h"

#include "wsfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"

#define RESOLVE_FLAGS (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

static bool
utf8_valid(const unsigned char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char c = s[i];
		size_t n = c < 0x80	    ? 1
			   : (c >> 5) == 6  ? 2
			   : (c >> 4) == 14 ? 3
			   : (c >> 3) == 30 ? 4
					    : 0;
		if (n == 0 || i + n > len || (n == 2 && c < 0xc2) || (n == 4 && c > 0xf4))
			return false;
		for (size_t k = 1; k < n; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
		if ((n == 3 && c == 0xe0 && s[i + 1] < 0xa0) ||
		    (n == 3 && c == 0xed && s[i + 1] > 0x9f) ||
		    (n == 4 && c == 0xf0 && s[i + 1] < 0x90) ||
		    (n == 4 && c == 0xf4 && s[i + 1] > 0x8f))
			return false; /* overlong, surrogate, beyond U+10FFFF */
		i += n;
	}
	return true;
}

int
wsfs_check_path(const char *path, size_t len)
{
	size_t comps = 0;

	if (len == 0 || memchr(path, '\0', len) || path[0] == '/')
		return -EINVAL;
	if (len > WSFS_PATH_MAX)
		return -ENAMETOOLONG;
	if (!utf8_valid((const unsigned char *)path, len))
		return -EILSEQ;
	for (size_t i = 0; i <= len;) {
		const char *c = path + i, *slash = memchr(c, '/', len - i);
		size_t n = slash ? (size_t)(slash - c) : len - i;
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return -EINVAL; /* empty (//, trailing /), ".", ".." */
		if (n > 255)
			return -ENAMETOOLONG;
		if (++comps > WSFS_COMPONENTS_MAX)
			return -ENAMETOOLONG;
		i += n + 1;
	}
	return 0;
}

static int
open_beneath(int dfd, const char *path, uint64_t flags)
{
	struct open_how how = {.flags = flags | O_CLOEXEC, .resolve = RESOLVE_FLAGS};
	int fd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* Open the parent directory of path (O_PATH) beneath ws_fd; *ret_name points
 * into *ret_copy (free it). */
static int
open_parent(int ws_fd, const char *path, char **ret_copy, const char **ret_name)
{
	char *copy, *slash;
	int r = wsfs_check_path(path, strlen(path)), fd;

	if (r < 0)
		return r;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	slash = strrchr(copy, '/');
	if (slash)
		*slash = '\0';
	fd = open_beneath(ws_fd, slash ? copy : ".", O_PATH | O_DIRECTORY);
	if (fd < 0) {
		free(copy);
		return fd;
	}
	*ret_copy = copy;
	*ret_name = slash ? slash + 1 : copy;
	return fd;
}

int
wsfs_read(int ws_fd, const char *path, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int pfd = -1, fd = -1;
	struct stat st, st2;
	char proc[64], *buf;
	size_t len = 0;
	int r = wsfs_check_path(path, strlen(path));

	if (r < 0)
		return r;
	/* O_PATH first: opening a FIFO or a device has effects; look before we touch. */
	pfd = open_beneath(ws_fd, path, O_PATH);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, &st) < 0)
		return -errno;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -ENOTSUP;
	if ((uint64_t)st.st_size > max)
		return -EFBIG;
	/* Re-open that very inode for reading (our own /proc, not the sandbox's). */
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st2) < 0)
		return -errno;
	if (st2.st_dev != st.st_dev || st2.st_ino != st.st_ino)
		return -ESTALE;
	buf = malloc(max + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf + len, max + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			free(buf);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) { /* grew since fstat */
			free(buf);
			return -EFBIG;
		}
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

int
wsfs_write(int ws_fd, const char *path, const void *data, size_t len, mode_t mode)
{
	_cleanup_free_ char *copy = NULL;
	_cleanup_close_ int pfd = -1, fd = -1;
	const char *name = NULL;
	char tmp[32];
	uint64_t rnd = 0;
	struct stat st;
	const char *p = data;
	int r;

	pfd = open_parent(ws_fd, path, &copy, &name);
	if (pfd < 0)
		return pfd;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
		return -EISDIR;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	snprintf(tmp, sizeof(tmp), ".wsfs-%016llx", (unsigned long long)rnd);
	fd = openat(pfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	for (size_t off = 0; off < len;) {
		ssize_t n = write(fd, p + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto fail;
		}
		off += (size_t)n;
	}
	if (fchmod(fd, mode & 0777) < 0 || fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	/* One rename: readers see the old or the new file, and whatever was at the
	 * name (a symlink, a FIFO, a hardlink to elsewhere) is replaced, not followed. */
	if (renameat(pfd, tmp, pfd, name) < 0) {
		r = -errno;
		goto fail;
	}
	return 0;
fail:
	(void)unlinkat(pfd, tmp, 0);
	return r;
}

/* op(parent fd, last name, arg) on path's parent beneath ws_fd: its result. */
static int
at_parent(int ws_fd, const char *path, int (*op)(int pfd, const char *name, void *arg), void *arg)
{
	_cleanup_free_ char *copy = NULL;
	_cleanup_close_ int pfd = -1;
	const char *name = NULL;

	pfd = open_parent(ws_fd, path, &copy, &name);
	if (pfd < 0)
		return pfd;
	return op(pfd, name, arg);
}

static int
stat_at(int pfd, const char *name, void *ret)
{
	return RET_NERRNO(fstatat(pfd, name, ret, AT_SYMLINK_NOFOLLOW));
}

int
wsfs_stat(int ws_fd, const char *path, struct stat *ret)
{
	return at_parent(ws_fd, path, stat_at, ret);
}

void
wsfs_entries_free(WsfsEntry *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(e[i].name);
	free(e);
}

static int
entry_cmp(const void *a, const void *b)
{
	return strcmp(((const WsfsEntry *)a)->name, ((const WsfsEntry *)b)->name);
}

int
wsfs_list(int ws_fd, const char *path, size_t max, WsfsEntry **ret, size_t *ret_n)
{
	WsfsEntry *v = NULL;
	size_t n = 0;
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	if (path[0] != '\0' && (r = wsfs_check_path(path, strlen(path))) < 0)
		return r;
	fd = open_beneath(ws_fd, path[0] ? path : ".", O_RDONLY | O_DIRECTORY | O_NONBLOCK);
	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (n >= max) {
			r = -E2BIG;
			break;
		}
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone meanwhile */
		WsfsEntry *nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv) {
			r = -ENOMEM;
			break;
		}
		v = nv;
		v[n] = (WsfsEntry){.name = strdup(de->d_name),
				   .mode = st.st_mode,
				   .size = (uint64_t)st.st_size,
				   .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
					       st.st_mtim.tv_nsec};
		if (!v[n].name) {
			r = -ENOMEM;
			break;
		}
		n++;
	}
	if (r == 0 && errno != 0)
		r = -errno;
	closedir(d);
	if (r < 0) {
		wsfs_entries_free(v, n);
		return r;
	}
	if (n > 1) /* qsort(NULL, 0, …) is undefined: an empty directory has no v */
		qsort(v, n, sizeof(*v), entry_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
}

static int
mkdir_at(int pfd, const char *name, void *mode)
{
	return RET_NERRNO(mkdirat(pfd, name, *(mode_t *)mode & 0777));
}

int
wsfs_mkdir(int ws_fd, const char *path, mode_t mode)
{
	return at_parent(ws_fd, path, mkdir_at, &mode);
}

static int
remove_at(int pfd, const char *name, void *arg)
{
	if (unlinkat(pfd, name, 0) == 0)
		return 0;
	if (errno != EISDIR)
		return -errno;
	return RET_NERRNO(unlinkat(pfd, name, AT_REMOVEDIR));
}

int
wsfs_remove(int ws_fd, const char *path)
{
	return at_parent(ws_fd, path, remove_at, NULL);
}

int
wsfs_rename(int ws_fd, const char *from, const char *to, bool overwrite)
{
	_cleanup_free_ char *c1 = NULL, *c2 = NULL;
	_cleanup_close_ int p1 = -1, p2 = -1;
	const char *n1 = NULL, *n2 = NULL;

	p1 = open_parent(ws_fd, from, &c1, &n1);
	if (p1 < 0)
		return p1;
	p2 = open_parent(ws_fd, to, &c2, &n2);
	if (p2 < 0)
		return p2;
	/* renameat2 never follows the final components: over a symlink, the
	 * link is replaced */
	return RET_NERRNO(renameat2(p1, n1, p2, n2, overwrite ? 0 : RENAME_NOREPLACE));
}

int
wsfs_mkdir_parents(int ws_fd, const char *path, mode_t mode, bool *ret_created)
{
	_cleanup_free_ char *copy = NULL;
	bool created = false;
	size_t len = strlen(path);
	int r = wsfs_check_path(path, len);

	if (r < 0)
		return r;
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	/* One component at a time, each parent opened beneath the workspace
	 * again: a component swapped for a symlink meanwhile is resolved by the
	 * same rules as every lookup, never followed out. */
	for (size_t i = 0; i <= len; i++) {
		if (copy[i] != '/' && copy[i] != '\0')
			continue;
		char *slash = memrchr(copy, '/', i);
		char saved = copy[i];
		_cleanup_close_ int pfd = -1;
		struct stat st;

		copy[i] = '\0';
		if (slash)
			*slash = '\0';
		pfd = open_beneath(ws_fd, slash ? copy : ".", O_PATH | O_DIRECTORY);
		if (slash)
			*slash = '/';
		if (pfd < 0)
			return pfd;
		const char *name = slash ? slash + 1 : copy;
		if (mkdirat(pfd, name, mode & 0777) == 0)
			created = true;
		else if (errno != EEXIST)
			return -errno;
		else if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		else if (saved == '\0' && !S_ISDIR(st.st_mode))
			return -EEXIST; /* the last one exists and is not a directory */
		copy[i] = saved;
	}
	if (ret_created)
		*ret_created = created;
	return 0;
}

static int remove_children(int dfd, dev_t dev, unsigned depth, size_t *budget);

/* Empty directory fd (name in pfd) and remove it; a second pass when entries
 * came back meanwhile (a sandbox writing, or a readdir that skipped one). */
static int
rmdir_tree(int pfd, const char *name, int fd, dev_t dev, unsigned depth, size_t *budget)
{
	int r = 0;

	for (int pass = 0; pass < 2; pass++) {
		r = remove_children(fd, dev, depth, budget);
		if (r < 0)
			return r;
		if (unlinkat(pfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		r = -errno;
		if (r != -ENOTEMPTY)
			return r;
	}
	return r;
}

/* Remove what directory dfd holds (st_dev dev), depth first. The entries are
 * looked at without following anything: a symlink is unlinked, a directory
 * opened with O_NOFOLLOW (one swapped for a symlink meanwhile fails, it is
 * not entered), a mount point (another st_dev) refused. */
static int
remove_children(int dfd, dev_t dev, unsigned depth, size_t *budget)
{
	struct dirent *de = NULL;
	DIR *d;
	int fd, r = 0;

	if (depth > WSFS_COMPONENTS_MAX)
		return -ENAMETOOLONG;
	fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	while (r == 0 && (errno = 0, de = readdir(d))) {
		struct stat st;
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (*budget == 0) {
			r = -E2BIG;
			break;
		}
		(*budget)--;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				r = -errno;
			continue;
		}
		if (S_ISDIR(st.st_mode)) {
			_cleanup_close_ int sub = -1;
			if (st.st_dev != dev) {
				r = -EXDEV;
				break;
			}
			sub = openat(dfd, de->d_name,
				     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
			if (sub < 0) {
				r = -errno;
				break;
			}
			r = rmdir_tree(dfd, de->d_name, sub, dev, depth + 1, budget);
		} else if (unlinkat(dfd, de->d_name, 0) < 0 && errno != ENOENT)
			r = -errno;
	}
	if (r == 0 && errno != 0 && !de)
		r = -errno;
	closedir(d);
	return r;
}

int
wsfs_remove_tree(int ws_fd, const char *path, size_t max_entries)
{
	_cleanup_free_ char *copy = NULL;
	_cleanup_close_ int pfd = -1, dfd = -1;
	const char *name = NULL;
	size_t budget = max_entries;
	struct stat st;
	int r;

	pfd = open_parent(ws_fd, path, &copy, &name);
	if (pfd < 0)
		return pfd;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return RET_NERRNO(unlinkat(pfd, name, 0));
	dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstat(dfd, &st) < 0)
		return -errno;
	r = rmdir_tree(pfd, name, dfd, st.st_dev, 1, &budget);
	return r;
}

int
wsfs_open_dir(int ws_fd, const char *path)
{
	int r;

	if (path[0] == '\0')
		return open_beneath(ws_fd, ".", O_PATH | O_DIRECTORY);
	r = wsfs_check_path(path, strlen(path));
	return r < 0 ? r : open_beneath(ws_fd, path, O_PATH | O_DIRECTORY);
}

uid_t
wsfs_as_user(uid_t uid)
{
	uid_t prev = (uid_t)setfsuid((uid_t)-1);

	if (uid != 0) {
		(void)setfsgid(uid);
		(void)setfsuid(uid);
	} else {
		(void)setfsuid(0);
		(void)setfsgid(0);
	}
	return prev;
}
