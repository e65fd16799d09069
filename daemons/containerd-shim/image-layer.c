/* SPDX-License-Identifier: MIT */
/*
 * image-layer.c — one layer of a sandbox image applied to a root directory,
 * with the checks of image-layer.h.
 */
#include "config.h"

#include "image-layer.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd-util.h"
#include "id-util.h"
#include "macro.h"
#include "snapshot.h"
#include "tar-read.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"
#define READ_BLOCK (128 * 1024)

int
image_path_clean(const char *in, char *out, size_t size)
{
	size_t o = 0;

	if (!in || in[0] == '/')
		return -EINVAL;
	for (const char *p = in; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EINVAL;
		if (n > NAME_MAX)
			return -ENAMETOOLONG;
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (o + n + 2 > size)
				return -ENAMETOOLONG;
			if (o > 0)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	if (size == 0)
		return -ENAMETOOLONG;
	out[o] = '\0';
	return 0;
}

bool
image_symlink_escapes(const char *path, const char *target)
{
	long depth = 0;

	if (target[0] == '/')
		return false; /* resolves in the sandbox's root; never followed here */
	for (const char *p = path; *p; p++) /* the link's directory: its components */
		if (*p == '/')
			depth++;
	for (const char *p = target; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			if (--depth < 0)
				return true;
		} else if (n > 0 && !(n == 1 && p[0] == '.'))
			depth++;
		p += n;
		while (*p == '/')
			p++;
	}
	return false;
}

int
image_whiteout(const char *path, bool *ret_opaque, char *name, size_t size)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	*ret_opaque = false;
	if (strncmp(base, WH_PREFIX, STRLEN(WH_PREFIX)) != 0)
		return 0;
	if (streq(base, WH_OPAQUE)) {
		*ret_opaque = true;
		return 1;
	}
	base += STRLEN(WH_PREFIX);
	if (!base[0] || streq(base, ".") || streq(base, "..") || strlen(base) >= size ||
	    strncmp(base, WH_PREFIX, STRLEN(WH_PREFIX)) == 0)
		return -EINVAL;
	snprintf(name, size, "%s", base);
	return 1;
}

/* ---------------------------------------------------------------------------
 * Reading: the fd through a SHA-256.
 */

typedef struct Src {
	int fd;
	EVP_MD_CTX *md;
	char buf[READ_BLOCK];
} Src;

static la_ssize_t
src_read(struct archive *a, void *ud, const void **ret)
{
	Src *s = ud;
	ssize_t n;

	do
		n = read(s->fd, s->buf, sizeof(s->buf));
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		archive_set_error(a, errno, "read: %s", strerror(errno));
		return -1;
	}
	if (n > 0 && EVP_DigestUpdate(s->md, s->buf, (size_t)n) != 1) {
		archive_set_error(a, EIO, "sha256");
		return -1;
	}
	*ret = s->buf;
	return n;
}

static int
src_open(struct archive *a, void *s)
{
	return archive_read_open(a, s, NULL, src_read, NULL);
}

/* What follows the end-of-archive blocks counts for the digest too. */
static int
src_drain(Src *s)
{
	for (;;) {
		ssize_t n = read(s->fd, s->buf, sizeof(s->buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		if (EVP_DigestUpdate(s->md, s->buf, (size_t)n) != 1)
			return -EIO;
	}
}

/* ---------------------------------------------------------------------------
 * Writing.
 */

typedef struct Layer {
	Reason *why;
	ImageUnpack *u;
	struct archive *a;
} Layer;

static int
refuse(Layer *l, const char *path, const char *what)
{
	return tar_refuse(l->why, "", 160, path, what);
}

static int
open_dir_beneath(int dfd, const char *name)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					  RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	int fd = (int)syscall(SYS_openat2, dfd, name, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* Open the directory holding the clean path (missing parents made 0755),
 * never through a symlink or a non-directory. *ret_name points into path. */
static int
open_parent(Layer *l, char *path, bool create, int *ret_fd, const char **ret_name)
{
	int fd = fcntl(l->u->root_fd, F_DUPFD_CLOEXEC, 3);
	char *p = path, *s;

	if (fd < 0)
		return -errno;
	while ((s = strchr(p, '/'))) {
		int nfd;
		*s = '\0';
		nfd = open_dir_beneath(fd, p);
		if (nfd == -ENOENT && create) {
			if (mkdirat(fd, p, 0755) < 0 && errno != EEXIST) {
				nfd = -errno;
			} else
				nfd = open_dir_beneath(fd, p);
		}
		*s = '/';
		close(fd);
		if (nfd == -ELOOP || nfd == -ENOTDIR || nfd == -EXDEV)
			return refuse(l, path,
				      "its path goes through a symlink or a non-directory");
		if (nfd == -ENOENT)
			return refuse(l, path, "no such directory");
		if (nfd < 0)
			return nfd;
		fd = nfd;
		p = s + 1;
	}
	*ret_fd = fd;
	*ret_name = p;
	return 0;
}

/* Remove every entry of the directory dfd (an opaque whiteout). */
static int
empty_dir(int dfd)
{
	DIR *d;
	struct dirent *de;
	int r = fd_opendir(openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), &d);

	if (r < 0)
		return r;
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, "..")) {
			int k = snapshot_rm_rf(dfd, de->d_name);
			if (k < 0 && r >= 0)
				r = k;
		}
	closedir(d);
	return r;
}

static int
apply_whiteout(Layer *l, char *path)
{
	_cleanup_close_ int pfd = -1;
	const char *name;
	char target[NAME_MAX + 1];
	bool opaque;
	int r = image_whiteout(path, &opaque, target, sizeof(target));

	if (r < 0)
		return refuse(l, path, "a whiteout of no valid name");
	r = open_parent(l, path, true, &pfd, &name);
	if (r < 0)
		return r;
	if (opaque)
		return empty_dir(pfd);
	return snapshot_rm_rf(pfd, target);
}

/* Make room for a new entry at name: an existing directory stays when the new
 * entry is one too (*ret_keep), anything else is removed. */
static int
make_room(int pfd, const char *name, bool dir, bool *ret_keep)
{
	struct stat st;

	*ret_keep = false;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (dir && S_ISDIR(st.st_mode)) {
		*ret_keep = true;
		return 0;
	}
	return snapshot_rm_rf(pfd, name);
}

static mode_t
perm_of(Layer *l, struct archive_entry *e)
{
	mode_t m = archive_entry_perm(e) & 07777;

	if (m & (S_ISUID | S_ISGID)) {
		l->u->suid_dropped++;
		m &= ~(mode_t)(S_ISUID | S_ISGID);
	}
	return m;
}

static int
write_file(Layer *l, int pfd, const char *name, const char *path, struct archive_entry *e)
{
	_cleanup_close_ int fd = -1;
	int64_t size = archive_entry_size(e);
	const char *what = NULL;
	int r;

	if (size < 0 || (uint64_t)size > l->u->max_bytes - l->u->bytes)
		return refuse(l, path, "the image is over image_max_bytes");
	l->u->bytes += (uint64_t)size;
	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = tar_read_data(l->a, fd, size, &what);
	if (r == -EINVAL)
		return refuse(l, path, what);
	if (r < 0)
		return r;
	if (ftruncate(fd, (off_t)size) < 0 || fchmod(fd, perm_of(l, e)) < 0)
		return -errno;
	return 0;
}

static int
write_hardlink(Layer *l, struct archive_entry *e, char *path)
{
	char target[PATH_MAX];
	_cleanup_close_ int tpfd = -1, pfd = -1;
	const char *tname, *name;
	struct stat st;
	bool keep;
	int r;

	if (image_path_clean(archive_entry_hardlink(e), target, sizeof(target)) < 0 || !target[0])
		return refuse(l, path, "a hardlink whose target is absolute or has '..'");
	r = open_parent(l, target, false, &tpfd, &tname);
	if (r < 0)
		return r;
	if (fstatat(tpfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? refuse(l, path, "a hardlink to a file not in the image")
				       : -errno;
	if (!S_ISREG(st.st_mode))
		return refuse(l, path, "a hardlink to something not a regular file");
	r = open_parent(l, path, true, &pfd, &name);
	if (r < 0)
		return r;
	if (streq(target, path))
		return 0;
	r = make_room(pfd, name, false, &keep);
	if (r < 0)
		return r;
	return linkat(tpfd, tname, pfd, name, 0) < 0 ? -errno : 0;
}

static int
apply_entry(Layer *l, struct archive_entry *e)
{
	const char *raw = archive_entry_pathname(e), *name;
	char path[PATH_MAX];
	_cleanup_close_ int pfd = -1;
	mode_t type = archive_entry_filetype(e);
	bool opaque, keep;
	char wh[NAME_MAX + 1];
	int r;

	if (++l->u->entries > l->u->max_entries)
		return refuse(l, raw, "the image is over image_max_entries");
	if (!raw)
		return refuse(l, raw, "no name");
	r = image_path_clean(raw, path, sizeof(path));
	if (r == -ENAMETOOLONG)
		return refuse(l, raw, "name too long");
	if (r < 0)
		return refuse(l, raw, "an absolute name or a '..' component");
	if (!path[0]) /* the root itself: keep ours (0755, root's) */
		return 0;
	if (image_whiteout(path, &opaque, wh, sizeof(wh)) != 0)
		return apply_whiteout(l, path);
	if (archive_entry_hardlink(e))
		return write_hardlink(l, e, path);
	if (type == AE_IFCHR || type == AE_IFBLK)
		return refuse(l, raw, "a device node");
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return refuse(l, raw, "not a file, a directory or a symlink (a FIFO or socket)");
	r = open_parent(l, path, true, &pfd, &name);
	if (r >= 0)
		r = make_room(pfd, name, type == AE_IFDIR, &keep);
	if (r < 0)
		return r;
	switch (type) {
	case AE_IFDIR: {
		_cleanup_close_ int dfd = -1;
		if (!keep && mkdirat(pfd, name, 0700) < 0)
			return -errno;
		dfd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			return -errno;
		return fchmod(dfd, perm_of(l, e)) < 0 ? -errno : 0;
	}
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(e);
		if (!t || !t[0] || strlen(t) >= PATH_MAX)
			return refuse(l, raw, "an empty or overlong symlink target");
		if (image_symlink_escapes(path, t))
			return refuse(l, raw,
				      "a symlink whose '..' climbs out of the image's root");
		return symlinkat(t, pfd, name) < 0 ? -errno : 0;
	}
	default: return write_file(l, pfd, name, raw, e);
	}
}

/* apply_entry() for tar_read_entries(): an error other than a refusal gets
 * the entry's name. */
static int
apply_entry_cb(struct archive_entry *e, void *userdata)
{
	Layer *l = userdata;
	int r = apply_entry(l, e);

	if (r < 0 && r != -EINVAL)
		reason_set(l->why, "'%.160s': %s", archive_entry_pathname(e) ?: "?", strerror(-r));
	return r;
}

static int
digest_check(Layer *l, Src *s, const char *digest)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	int r = src_drain(s);

	if (r < 0)
		return r;
	if (EVP_DigestFinal_ex(s->md, md, &n) != 1 || n != 32)
		return -EIO;
	hex_encode(md, 32, l->u->sha256);
	if (digest && (strncmp(digest, "sha256:", 7) != 0 || !streq(digest + 7, l->u->sha256))) {
		reason_set(l->why, "layer %.80s: digest mismatch (its content is sha256:%s)",
			   digest, l->u->sha256);
		return -EINVAL;
	}
	return 0;
}

int
image_layer_apply(ImageUnpack *u, int fd, const char *digest, Reason *why)
{
	Layer l = {.u = u, .why = why};
	_cleanup_free_ Src *s = calloc(1, sizeof(*s));
	int r = 0;

	if (!s)
		return -ENOMEM;
	s->fd = fd;
	s->md = EVP_MD_CTX_new();
	if (!s->md || EVP_DigestInit_ex(s->md, EVP_sha256(), NULL) != 1) {
		r = -ENOMEM;
		goto out;
	}
	r = tar_read_open(true, src_open, s, "not a tar archive", why, &l.a);
	if (r < 0)
		goto out;
	r = tar_read_entries(l.a, apply_entry_cb, &l, "a broken or truncated tar", why);
	if (r >= 0)
		r = digest_check(&l, s, digest);
out:
	if (l.a)
		archive_read_free(l.a);
	EVP_MD_CTX_free(s->md);
	return r;
}
