/* SPDX-License-Identifier: MIT */
/*
 * image-store.c — the image store of image-store.h: import into a staging
 * directory, rename into place; names; lookup; in use (mountinfo); rm; gc.
 */
#include "config.h"

#include "image-store.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fd-util.h"
#include "id-util.h"
#include "image-layer.h"
#include "macro.h"
#include "snapshot.h"
#include "strv.h"

static const char *const mount_dirs[] = {"workspace", "tmp", "dev", "proc", "etc"};
static const char *const etc_files[] = {"etc/passwd", "etc/group", "etc/hosts", "etc/hostname"};

bool
image_name_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > IMAGE_NAME_MAX ||
	    !(islower((unsigned char)name[0]) || isdigit((unsigned char)name[0])))
		return false;
	for (const char *p = name; *p; p++)
		if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '.' &&
		    *p != '_' && *p != '-')
			return false;
	return true;
}

void
image_info_done(ImageInfo *info)
{
	strv_free(info->env);
	info->env = NULL;
}

void
image_infos_free(ImageInfo *infos, size_t n)
{
	for (size_t i = 0; i < n; i++)
		image_info_done(&infos[i]);
	free(infos);
}

/* The store's directories (0700, root's) and its lock, taken (LOCK_EX or
 * LOCK_SH). Returns the store's dir fd; *ret_lock the lock's. */
static int
store_open(const ImageStore *st, int lock, int *ret_lock, Reason *why)
{
	static const char *const sub[] = {"names", "unpacked", "staging", "trash"};
	_cleanup_close_ int dfd = -1, lfd = -1;

	char parent[sizeof(st->dir)], *slash;

	snprintf(parent, sizeof(parent), "%s", st->dir); /* the state directory */
	slash = strrchr(parent, '/');
	if (slash && slash != parent) {
		*slash = '\0';
		if (mkdir(parent, 0755) < 0 && errno != EEXIST)
			return reason_set(why, "mkdir %s: %s", parent, strerror(errno)), -errno;
	}
	if (mkdir(st->dir, 0700) < 0 && errno != EEXIST)
		return reason_set(why, "mkdir %s: %s", st->dir, strerror(errno)), -errno;
	dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return reason_set(why, "open %s: %s", st->dir, strerror(errno)), -errno;
	for (size_t i = 0; i < ELEMENTSOF(sub); i++)
		if (mkdirat(dfd, sub[i], 0700) < 0 && errno != EEXIST)
			return reason_set(why, "mkdir %s/%s: %s", st->dir, sub[i], strerror(errno)),
			       -errno;
	lfd = openat(dfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0)
		return reason_set(why, "open %s/lock: %s", st->dir, strerror(errno)), -errno;
	if (lock) {
		while (flock(lfd, lock) < 0)
			if (errno != EINTR)
				return reason_set(why, "lock %s: %s", st->dir, strerror(errno)),
				       -errno;
	}
	*ret_lock = TAKE_FD(lfd);
	return TAKE_FD(dfd);
}

/* Read a small file at dfd/path into buf (NUL-terminated, trailing newline cut). */
static int
read_small(int dfd, const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return (int)n;
}

/* Write path under dfd atomically (temporary name, fsync, rename). */
static int
write_atomic(int dfd, const char *path, const char *text)
{
	char tmp[512];
	_cleanup_close_ int fd = -1;
	int r;

	snprintf(tmp, sizeof(tmp), "%s.tmp-%d", path, (int)getpid());
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = loop_write(fd, text, strlen(text));
	if (r >= 0 && fsync(fd) < 0)
		r = -errno;
	if (r >= 0 && renameat(dfd, tmp, dfd, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlinkat(dfd, tmp, 0);
	return r;
}

/* ---------------------------------------------------------------------------
 * In use: a mount of unpacked/<hex>/rootfs in any mount namespace.
 */

unsigned
image_mounts(const char *hex)
{
	_cleanup_free_ ino_t *seen = NULL;
	size_t n_seen = 0, cap = 0;
	char needle[128];
	unsigned count = 0;
	DIR *proc = opendir("/proc");
	struct dirent *de;

	snprintf(needle, sizeof(needle), "/unpacked/%s/rootfs", hex);
	if (!proc)
		return 0;
	while ((de = readdir(proc))) {
		char path[320], line[8192];
		struct stat ns;
		bool dup = false, found = false;
		FILE *f;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/ns/mnt", de->d_name);
		if (stat(path, &ns) < 0)
			continue;
		for (size_t i = 0; i < n_seen && !dup; i++)
			dup = seen[i] == ns.st_ino;
		if (dup)
			continue;
		if (n_seen == cap) {
			ino_t *g = realloc(seen, (cap = cap ? cap * 2 : 64) * sizeof(*seen));
			if (!g)
				break;
			seen = g;
		}
		seen[n_seen++] = ns.st_ino;
		snprintf(path, sizeof(path), "/proc/%s/mountinfo", de->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		while (!found && fgets(line, sizeof(line), f))
			found = strstr(line, needle) != NULL;
		fclose(f);
		count += found;
	}
	closedir(proc);
	return count;
}

/* ---------------------------------------------------------------------------
 * The image record (unpacked/<hex>/image.json).
 */

static int
info_load(int dfd, const char *hex, ImageInfo *info, Reason *why)
{
	char path[128];
	_cleanup_close_ int fd = -1;
	json_t *j, *env, *v;
	json_error_t err;
	size_t i;

	snprintf(path, sizeof(path), "unpacked/%s/image.json", hex);
	fd = openat(dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return reason_set(why, "image sha256:%s is not unpacked (%s)", hex,
				  strerror(errno)),
		       -ENOENT;
	j = json_loadfd(fd, 0, &err);
	if (!json_is_object(j)) {
		json_decref(j);
		return reason_set(why, "%s: %s", path, err.text), -EINVAL;
	}
	snprintf(info->digest, sizeof(info->digest), "sha256:%s", hex);
	snprintf(info->source, sizeof(info->source), "%s",
		 json_string_value(json_object_get(j, "source")) ?: "?");
	info->bytes = (uint64_t)json_integer_value(json_object_get(j, "bytes"));
	info->disk_bytes = (uint64_t)json_integer_value(json_object_get(j, "diskBytes"));
	info->entries = (uint64_t)json_integer_value(json_object_get(j, "entries"));
	info->suid_dropped = (uint64_t)json_integer_value(json_object_get(j, "suidDropped"));
	info->created_ms = json_integer_value(json_object_get(j, "created"));
	env = json_object_get(j, "env");
	json_array_foreach(env, i, v)
	{
		if (json_is_string(v) && strv_push(&info->env, json_string_value(v)) < 0) {
			json_decref(j);
			return -ENOMEM;
		}
	}
	json_decref(j);
	return 0;
}

/* Disk use of a tree: blocks of everything in it, a file with several names
 * once. */
typedef struct Linked {
	ino_t ino;
	uint64_t bytes;
} Linked;

typedef struct Du {
	uint64_t bytes;
	Linked *links;
	size_t n, cap;
} Du;

static int
du_walk(int dir_fd, Du *du, unsigned depth)
{
	int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return -errno;
	if (depth > 1024 || !(d = fdopendir(fd))) {
		close(fd);
		return depth > 1024 ? -ELOOP : -errno;
	}
	while (r >= 0 && (de = readdir(d))) {
		struct stat st;
		if (streq(de->d_name, ".") || streq(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
			if (du->n == du->cap) {
				Linked *g = realloc(
				    du->links, (du->cap = du->cap ? du->cap * 2 : 64) * sizeof(*g));
				if (!g) {
					r = -ENOMEM;
					break;
				}
				du->links = g;
			}
			du->links[du->n++] = (Linked){st.st_ino, (uint64_t)st.st_blocks * 512};
			continue;
		}
		du->bytes += (uint64_t)st.st_blocks * 512;
		if (S_ISDIR(st.st_mode)) {
			int c = openat(dirfd(d), de->d_name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (c >= 0) {
				r = du_walk(c, du, depth + 1);
				close(c);
			}
		}
	}
	closedir(d);
	return r;
}

static int
linked_cmp(const void *a, const void *b)
{
	const Linked *x = a, *y = b;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static uint64_t
disk_usage(int root_fd)
{
	Du du = {0};
	struct stat st;

	if (fstat(root_fd, &st) == 0)
		du.bytes = (uint64_t)st.st_blocks * 512;
	(void)du_walk(root_fd, &du, 0);
	if (du.n)
		qsort(du.links, du.n, sizeof(*du.links), linked_cmp);
	for (size_t i = 0; i < du.n; i++)
		if (i == 0 || du.links[i].ino != du.links[i - 1].ino)
			du.bytes += du.links[i].bytes;
	free(du.links);
	return du.bytes;
}

static int
info_save(int dfd, const char *dir, const ImageConfig *cfg, const ImageUnpack *u,
	  uint64_t disk_bytes)
{
	json_t *j = json_object(), *env = json_array();
	char *text = NULL, path[300];
	struct timespec now;
	int r = -ENOMEM;

	clock_gettime(CLOCK_REALTIME, &now);
	for (char **e = cfg->env; env && e && *e; e++)
		json_array_append_new(env, json_string(*e));
	if (j && env && json_object_set_new(j, "digest", json_string(cfg->digest)) == 0 &&
	    json_object_set_new(j, "source", json_string(cfg->source)) == 0 &&
	    json_object_set_new(j, "bytes", json_integer((json_int_t)u->bytes)) == 0 &&
	    json_object_set_new(j, "diskBytes", json_integer((json_int_t)disk_bytes)) == 0 &&
	    json_object_set_new(j, "entries", json_integer((json_int_t)u->entries)) == 0 &&
	    json_object_set_new(j, "suidDropped", json_integer((json_int_t)u->suid_dropped)) == 0 &&
	    json_object_set_new(
		j, "created",
		json_integer((json_int_t)now.tv_sec * 1000 + now.tv_nsec / 1000000)) == 0 &&
	    json_object_set(j, "env", env) == 0)
		text = json_dumps(j, JSON_SORT_KEYS);
	if (text) {
		snprintf(path, sizeof(path), "%s/image.json", dir);
		r = write_atomic(dfd, path, text);
	}
	free(text);
	json_decref(env);
	json_decref(j);
	return r;
}

/* The mount points a sandbox needs in the image's root: directories
 * workspace, tmp, dev, proc, etc, and regular files for the generated /etc
 * entries (whatever the image had there is replaced: it is generated). */
static int
rootfs_prepare(int root_fd)
{
	for (size_t i = 0; i < ELEMENTSOF(mount_dirs); i++) {
		struct stat sb;
		if (fstatat(root_fd, mount_dirs[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    !S_ISDIR(sb.st_mode) && snapshot_rm_rf(root_fd, mount_dirs[i]) < 0)
			return -errno;
		if (mkdirat(root_fd, mount_dirs[i], 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	if (fchmodat(root_fd, "tmp", 01777, 0) < 0)
		return -errno;
	for (size_t i = 0; i < ELEMENTSOF(etc_files); i++) {
		int fd, r = snapshot_rm_rf(root_fd, etc_files[i]);
		if (r < 0)
			return r;
		fd = openat(root_fd, etc_files[i],
			    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0)
			return -errno;
		close(fd);
	}
	return fchmod(root_fd, 0755) < 0 ? -errno : 0;
}

/* ---------------------------------------------------------------------------
 * Import.
 */

typedef struct Import {
	const ImageStore *st;
	int dfd;	  /* the store */
	char staging[64]; /* staging/<pid>-<n>, relative to the store */
	int staging_fd;
	int cwd_fd; /* the caller's cwd: a relative source is relative to it */
	ImageUnpack u;
	ImageConfig cfg;
	Reason *why;
} Import;

static int
import_root(Import *im)
{
	if (mkdirat(im->staging_fd, "rootfs", 0755) < 0)
		return -errno;
	im->u.root_fd =
	    openat(im->staging_fd, "rootfs", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return im->u.root_fd < 0 ? -errno : 0;
}

static bool
unpacked_exists(int dfd, const char *digest)
{
	char path[128];
	struct stat sb;

	snprintf(path, sizeof(path), "unpacked/%s/image.json", digest + 7);
	return fstatat(dfd, path, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

/* An OCI layout at layout_fd: its manifest's image unpacked, unless it is
 * already (imported once). */
static int
import_layout(Import *im, int layout_fd)
{
	int r = image_oci_manifest(layout_fd, im->cfg.digest, im->why);

	if (r < 0 || unpacked_exists(im->dfd, im->cfg.digest))
		return r;
	r = import_root(im);
	if (r >= 0)
		r = image_oci_unpack(layout_fd, im->cfg.digest, &im->u, &im->cfg, im->why);
	return r;
}

static int
import_rootfs(Import *im, int fd)
{
	int r = import_root(im);

	if (r >= 0)
		r = image_layer_apply(&im->u, fd, NULL, im->why);
	if (r >= 0)
		snprintf(im->cfg.digest, sizeof(im->cfg.digest), "sha256:%s", im->u.sha256);
	return r;
}

/* Split "transport:path" (a known transport) or take the path alone. */
static const char *
source_split(const char *source, const char **ret_kind)
{
	static const char *const kinds[] = {"oci", "oci-archive", "docker-archive", "rootfs"};

	*ret_kind = NULL;
	for (size_t i = 0; i < ELEMENTSOF(kinds); i++) {
		size_t n = strlen(kinds[i]);
		if (strncmp(source, kinds[i], n) == 0 && source[n] == ':') {
			*ret_kind = kinds[i];
			return source + n + 1;
		}
	}
	return source;
}

static int
import_source(Import *im, const char *source)
{
	const char *kind, *path = source_split(source, &kind);
	_cleanup_close_ int fd = openat(im->cwd_fd, path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	int r;

	if (fd < 0)
		return reason_set(im->why, "%s: %s", path, strerror(errno)), -errno;
	if (fstat(fd, &sb) < 0)
		return -errno;
	if (S_ISDIR(sb.st_mode)) {
		if (kind && !streq(kind, "oci"))
			return reason_set(im->why, "%s is a directory, not a %s", path, kind),
			       -EINVAL;
		if (faccessat(fd, "oci-layout", F_OK, AT_SYMLINK_NOFOLLOW) < 0)
			return reason_set(im->why,
					  "%s: a directory without oci-layout is no OCI "
					  "image layout",
					  path),
			       -EINVAL;
		snprintf(im->cfg.source, sizeof(im->cfg.source), "oci");
		return import_layout(im, fd);
	}
	if (!S_ISREG(sb.st_mode))
		return reason_set(im->why, "%s: neither a directory nor a file", path), -EINVAL;
	if (!kind || streq(kind, "oci")) {
		if (kind)
			return reason_set(im->why, "%s is a file, not an OCI layout directory",
					  path),
			       -EINVAL;
		r = image_archive_kind(fd, &kind, im->why);
		if (r < 0)
			return r;
	}
	snprintf(im->cfg.source, sizeof(im->cfg.source), "%s", kind);
	if (streq(kind, "rootfs"))
		return import_rootfs(im, fd);
	r = image_skopeo_to_oci(kind, fd, "layout", im->why);
	if (r >= 0) { /* skopeo ran in the staging directory (its cwd: see image_import) */
		_cleanup_close_ int lfd = openat(im->staging_fd, "layout",
						 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		r = lfd < 0 ? -errno : import_layout(im, lfd);
	}
	return r;
}

/* Move the staging directory's image into unpacked/<hex> (unless there) and
 * point name at it. Under the exclusive lock. */
static int
import_commit(Import *im, const char *name)
{
	const char *hex = im->cfg.digest + 7;
	char path[256], text[IMAGE_DIGEST_MAX + 2];
	int r = 0;

	if (!unpacked_exists(im->dfd, im->cfg.digest)) {
		r = rootfs_prepare(im->u.root_fd);
		if (r >= 0)
			r = info_save(im->dfd, im->staging, &im->cfg, &im->u,
				      disk_usage(im->u.root_fd));
		if (r >= 0 && syncfs(im->dfd) < 0)
			r = -errno;
		snprintf(path, sizeof(path), "unpacked/%s", hex);
		if (r >= 0 && renameat(im->dfd, im->staging, im->dfd, path) < 0)
			r = (errno == ENOTEMPTY || errno == EEXIST) &&
				    unpacked_exists(im->dfd, im->cfg.digest)
				? 0 /* a concurrent import of the same image was first */
				: -errno;
		if (r < 0)
			return reason_set(im->why, "store the image: %s", strerror(-r)), r;
	}
	snprintf(path, sizeof(path), "names/%s", name);
	snprintf(text, sizeof(text), "%s\n", im->cfg.digest);
	r = write_atomic(im->dfd, path, text);
	if (r < 0)
		reason_set(im->why, "write %s: %s", path, strerror(-r));
	return r;
}

int
image_import(const ImageStore *st, const char *name, const char *source, ImageInfo *ret,
	     Reason *why)
{
	static unsigned seq;
	Import im = {.st = st, .staging_fd = -1, .why = why};
	_cleanup_close_ int lfd = -1, cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r;

	im.cwd_fd = cwd >= 0 ? cwd : AT_FDCWD;
	im.u = (ImageUnpack){
	    .root_fd = -1, .max_bytes = st->max_bytes, .max_entries = st->max_entries};
	if (!image_name_ok(name))
		return reason_set(why, "'%.80s' is no image name (1..64 of a-z 0-9 . _ -)", name),
		       -EINVAL;
	im.dfd = store_open(st, 0, &lfd, why);
	if (im.dfd < 0)
		return im.dfd;
	snprintf(im.staging, sizeof(im.staging), "staging/%d-%u", (int)getpid(), seq++);
	if (mkdirat(im.dfd, im.staging, 0700) < 0 ||
	    (im.staging_fd =
		 openat(im.dfd, im.staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		r = -errno;
		reason_set(why, "staging directory: %s", strerror(-r));
		goto out;
	}
	/* skopeo writes "layout" relative to the staging directory: no path of ours
	 * is parsed by it. */
	if (fchdir(im.staging_fd) < 0) {
		r = -errno;
		goto out;
	}
	r = import_source(&im, source);
	if (cwd >= 0)
		(void)fchdir(cwd);
	if (r >= 0) {
		while (flock(lfd, LOCK_EX) < 0 && errno == EINTR)
			;
		r = import_commit(&im, name);
		(void)flock(lfd, LOCK_UN);
	}
	if (r >= 0 && ret) {
		r = image_lookup(st, name, ret, why);
	}
out:
	safe_close(im.u.root_fd);
	safe_close(im.staging_fd);
	(void)snapshot_rm_rf(im.dfd, im.staging); /* gone already when committed */
	strv_free(im.cfg.env);
	if (r >= 0)
		(void)image_gc(st, NULL);
	safe_close(im.dfd);
	return r;
}

/* ---------------------------------------------------------------------------
 * Lookup, list, remove, gc.
 */

static int
name_digest(int dfd, const char *name, char *digest, Reason *why)
{
	char path[128];
	int r;

	if (!image_name_ok(name))
		return reason_set(why, "'%.80s' is no image name", name), -EINVAL;
	snprintf(path, sizeof(path), "names/%s", name);
	r = read_small(dfd, path, digest, IMAGE_DIGEST_MAX + 1);
	if (r == -ENOENT)
		return reason_set(why, "no image '%s' (runwarden image import)", name), -ENOENT;
	if (r < 0)
		return reason_set(why, "%s: %s", path, strerror(-r)), r;
	if (strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 71)
		return reason_set(why, "%s: not a digest", path), -EINVAL;
	return 0;
}

int
image_lookup(const ImageStore *st, const char *name, ImageInfo *ret, Reason *why)
{
	_cleanup_close_ int dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char digest[IMAGE_DIGEST_MAX + 1];
	int r;

	*ret = (ImageInfo){0};
	if (dfd < 0)
		return errno == ENOENT
			   ? (reason_set(why, "no image '%s' (runwarden image import)", name),
			      -ENOENT)
			   : -errno;
	r = name_digest(dfd, name, digest, why);
	if (r < 0)
		return r;
	r = info_load(dfd, digest + 7, ret, why);
	if (r < 0)
		return r;
	snprintf(ret->name, sizeof(ret->name), "%s", name);
	snprintf(ret->rootfs, sizeof(ret->rootfs), "%s/unpacked/%s/rootfs", st->dir, digest + 7);
	return 0;
}

static int
names_list(int dfd, char ***ret)
{
	_cleanup_close_ int fd = openat(dfd, "names", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *de;
	char **v = NULL;

	if (fd < 0)
		return errno == ENOENT ? (*ret = NULL, 0) : -errno;
	d = fdopendir(TAKE_FD(fd));
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (image_name_ok(de->d_name) && strv_push(&v, de->d_name) < 0) {
			closedir(d);
			strv_free(v);
			return -ENOMEM;
		}
	closedir(d);
	*ret = v;
	return 0;
}

static int
str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int
image_list(const ImageStore *st, bool mounts, ImageInfo **ret, size_t *ret_n, Reason *why)
{
	_cleanup_close_ int dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	char **names = NULL;
	ImageInfo *v = NULL;
	size_t n = 0;
	int r;

	*ret = NULL;
	*ret_n = 0;
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = names_list(dfd, &names);
	if (r < 0)
		return reason_set(why, "list names: %s", strerror(-r)), r;
	for (char **p = names; p && *p; p++)
		n++;
	if (n)
		qsort(names, n, sizeof(*names), str_cmp);
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		strv_free(names);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		Reason ignored;
		if (image_lookup(st, names[i], &v[i], &ignored) < 0)
			snprintf(v[i].name, sizeof(v[i].name), "%s", names[i]); /* broken: listed */
		else if (mounts)
			v[i].mounts = image_mounts(v[i].digest + 7);
	}
	strv_free(names);
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Whether any name but `except` points to digest. */
static bool
digest_named(int dfd, const char *digest, const char *except)
{
	char **names = NULL;
	bool found = false;

	if (names_list(dfd, &names) < 0)
		return true; /* cannot tell: keep it */
	for (char **p = names; p && *p && !found; p++) {
		char d[IMAGE_DIGEST_MAX + 1];
		if ((!except || !streq(*p, except)) && name_digest(dfd, *p, d, NULL) >= 0)
			found = streq(d, digest);
	}
	strv_free(names);
	return found;
}

/* Move unpacked/<hex> to the trash (under the exclusive lock). */
static int
unpacked_trash(int dfd, const char *hex)
{
	char from[128], to[160];

	snprintf(from, sizeof(from), "unpacked/%s", hex);
	snprintf(to, sizeof(to), "trash/%s.%d", hex, (int)getpid());
	(void)snapshot_rm_rf(dfd, to);
	return renameat(dfd, from, dfd, to) < 0 ? -errno : 0;
}

/* Remove each entry of dfd's directory sub that pick() chooses (names first,
 * then the trees: removing while reading could skip entries). */
static void
subdir_prune(int dfd, const char *sub, bool (*pick)(const char *name))
{
	_cleanup_close_ int fd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char **names = NULL;
	DIR *d;
	struct dirent *de;

	if (fd < 0 || !(d = fdopendir(fd)))
		return;
	fd = -1;
	while ((de = readdir(d)))
		if (pick(de->d_name))
			(void)strv_push(&names, de->d_name);
	closedir(d);
	for (char **p = names; p && *p; p++) {
		char path[400];
		snprintf(path, sizeof(path), "%s/%s", sub, *p);
		(void)snapshot_rm_rf(dfd, path);
	}
	strv_free(names);
}

static bool
trash_pick(const char *name)
{
	return name[0] != '.';
}

static void
trash_empty(int dfd)
{
	subdir_prune(dfd, "trash", trash_pick);
}

int
image_remove(const ImageStore *st, const char *name, Reason *why)
{
	_cleanup_close_ int lfd = -1, dfd = -1;
	char digest[IMAGE_DIGEST_MAX + 1], path[128];
	unsigned mounts;
	int r;

	dfd = store_open(st, LOCK_EX, &lfd, why);
	if (dfd < 0)
		return dfd;
	r = name_digest(dfd, name, digest, why);
	if (r < 0)
		return r;
	mounts = image_mounts(digest + 7);
	if (mounts > 0)
		return reason_set(why,
				  "image '%s' is in use (mounted by %u sandbox%s): stop or delete "
				  "them first",
				  name, mounts, mounts == 1 ? "" : "es"),
		       -EBUSY;
	snprintf(path, sizeof(path), "names/%s", name);
	if (unlinkat(dfd, path, 0) < 0)
		return reason_set(why, "unlink %s: %s", path, strerror(errno)), -errno;
	if (!digest_named(dfd, digest, NULL))
		(void)unpacked_trash(dfd, digest + 7);
	(void)flock(lfd, LOCK_UN);
	trash_empty(dfd);
	return 0;
}

/* Staging directories of imports whose process is gone. */
static bool
staging_pick(const char *name)
{
	int pid = atoi(name);
	return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

static void
staging_prune(int dfd)
{
	subdir_prune(dfd, "staging", staging_pick);
}

int
image_gc(const ImageStore *st, Reason *why)
{
	_cleanup_close_ int lfd = -1, dfd = -1, ufd = -1;
	char **hexes = NULL;
	DIR *d;
	struct dirent *de;
	int removed = 0;

	dfd = store_open(st, LOCK_EX, &lfd, why);
	if (dfd < 0)
		return dfd;
	ufd = openat(dfd, "unpacked", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ufd >= 0 && (d = fdopendir(ufd))) {
		ufd = -1;
		while ((de = readdir(d)))
			if (strlen(de->d_name) == 64)
				(void)strv_push(&hexes, de->d_name);
		closedir(d);
	}
	for (char **h = hexes; h && *h; h++) {
		char digest[IMAGE_DIGEST_MAX + 1];
		snprintf(digest, sizeof(digest), "sha256:%s", *h);
		if (!digest_named(dfd, digest, NULL) && image_mounts(*h) == 0 &&
		    unpacked_trash(dfd, *h) >= 0)
			removed++;
	}
	strv_free(hexes);
	staging_prune(dfd);
	(void)flock(lfd, LOCK_UN);
	trash_empty(dfd);
	return removed;
}
