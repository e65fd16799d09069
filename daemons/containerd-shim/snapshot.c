/* SPDX-License-Identifier: MIT */
/*
 * snapshot.c — archive a workspace, verify a record, unpack into staging.
 * See snapshot.h for the rules.
 */
#include "config.h"

#include "snapshot.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <search.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fd-util.h"
#include "id-util.h"
#include "json-util.h"
#include "macro.h"
#include "tar-read.h"
#include "time-util.h"
#include "wsfs.h"

#define IO_CHUNK (128 * 1024)
/* the block libarchive reads the archive in; tests/fuzz/build.sh makes it
 * 64 KiB, which still reads any input of the target (-max_len=65536) in one
 * block, and which ASan's allocator serves from its size classes instead of
 * an mmap and a munmap per input */
#ifndef UNPACK_BLOCK
#define UNPACK_BLOCK IO_CHUNK
#endif
#define DEPTH_MAX WSFS_COMPONENTS_MAX

bool
snapshot_uuid_ok(const char *s)
{
	if (!s || strlen(s) != 36)
		return false;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	return true;
}

/* ---------------------------------------------------------------------------
 * Create.
 */

/* A regular file with more than one link, by the path it was archived at
 * first: its other names become hardlink entries to that path. */
typedef struct Linked {
	dev_t dev;
	ino_t ino;
	char path[];
} Linked;

typedef struct Writer {
	int fd;
	EVP_MD_CTX *md;
	uint64_t bytes;
	int err;
	struct archive *a;
	uint64_t files;
	/* what restore would count: entries and bytes of file content */
	uint64_t entries, content, max_entries, max_content;
	void *linked; /* tsearch tree of Linked */
	char path[WSFS_PATH_MAX + 1];
	Reason *e;
} Writer;

static int
linked_cmp(const void *a, const void *b)
{
	const Linked *x = a, *y = b;

	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* What the restorer would refuse, refused now (not_restorable, path named). */
static int
not_restorable(Writer *w, const char *fmt, ...)
{
	char why[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	reason_set(w->e, "'%.200s': %s", w->path, why);
	return -SNAPSHOT_NOT_RESTORABLE;
}

/* One more entry at w->path, with size bytes of file content. */
static int
count_entry(Writer *w, uint64_t size)
{
	int k = wsfs_check_path(w->path, strlen(w->path));

	if (k < 0)
		return not_restorable(w,
				      "a name restore refuses (invalid UTF-8, a component over "
				      "255 bytes or more than %d components)",
				      WSFS_COMPONENTS_MAX);
	if (++w->entries > w->max_entries)
		return not_restorable(w, "more than restore_max_entries=%" PRIu64 " entries",
				      w->max_entries);
	if (size > w->max_content - w->content)
		return not_restorable(w,
				      "more than restore_max_bytes=%" PRIu64
				      " bytes of file content (this file: %" PRIu64 ")",
				      w->max_content, size);
	w->content += size;
	return 0;
}

static la_ssize_t
writer_cb(struct archive *a, void *ud, const void *buf, size_t len)
{
	Writer *w = ud;
	int r = loop_write(w->fd, buf, len);

	if (r < 0) {
		w->err = r;
		archive_set_error(a, -r, "write failed");
		return -1;
	}
	if (!EVP_DigestUpdate(w->md, buf, len)) {
		w->err = -EIO;
		return -1;
	}
	w->bytes += len;
	return (la_ssize_t)len;
}

static int
ar_fail(Writer *w, const char *what)
{
	reason_set(w->e, "%s: %s", what, archive_error_string(w->a) ?: "archive error");
	return w->err < 0 ? w->err : -EIO;
}

static struct archive_entry *
new_entry(const char *path, mode_t type, mode_t perm, int64_t size, const struct timespec *mtime)
{
	struct archive_entry *e = archive_entry_new();

	if (!e)
		return NULL;
	archive_entry_set_pathname(e, path);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm & 0777);
	archive_entry_set_size(e, type == AE_IFREG ? size : 0);
	archive_entry_set_mtime(e, mtime->tv_sec, mtime->tv_nsec);
	archive_entry_set_uid(e, 0);
	archive_entry_set_gid(e, 0);
	return e;
}

static int
write_header(Writer *w, const char *path, mode_t type, mode_t perm, int64_t size,
	     const struct timespec *mtime, const char *link)
{
	struct archive_entry *e = new_entry(path, type, perm, size, mtime);
	int r;

	if (!e)
		return -ENOMEM;
	if (link)
		archive_entry_set_symlink(e, link);
	r = archive_write_header(w->a, e);
	archive_entry_free(e);
	if (r < ARCHIVE_WARN)
		return ar_fail(w, "archive header");
	return 0;
}

static int
name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of a directory (without . and ..), sorted. */
static int
list_dir(int dfd, char ***ret, size_t *ret_n)
{
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r = fd_opendir(dup(dfd), &d);

	if (r < 0)
		return r;
	rewinddir(d);
	while ((errno = 0, de = readdir(d))) {
		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		if (n == cap) {
			char **nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));
			if (!nv)
				goto oom;
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name)))
			goto oom;
		n++;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), name_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	closedir(d);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return -ENOMEM;
}

/* Write len bytes of fd from off as entry data; a file that shrank under us
 * is padded with zeros, and fd -1 is all zeros (a hole: libarchive's sparse
 * writer takes the whole file and drops the holes of the entry's map). */
static int
copy_region(Writer *w, int fd, int64_t off, int64_t len)
{
	static const char zeros[IO_CHUNK];
	char buf[IO_CHUNK];
	bool eof = fd < 0;

	while (len > 0) {
		size_t want = (size_t)MIN((int64_t)sizeof(buf), len);
		ssize_t n = 0;
		if (!eof) {
			n = pread(fd, buf, want, off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			eof = n == 0;
		}
		if (eof)
			n = (ssize_t)want;
		if (archive_write_data(w->a, eof ? zeros : buf, (size_t)n) < 0)
			return ar_fail(w, "archive data");
		off += n;
		len -= n;
	}
	return 0;
}

/* The data regions of fd (SEEK_DATA/SEEK_HOLE), added to e as its sparse map
 * when the file has a hole; *ret_sparse says so. A filesystem without
 * SEEK_DATA reads as one region. */
static int
map_sparse(int fd, int64_t size, struct archive_entry *e, bool *ret_sparse)
{
	int64_t off = 0, data = 0;

	*ret_sparse = false;
	/* Pass 1: any hole at all? */
	while (off < size) {
		off_t d = lseek(fd, off, SEEK_DATA), h;
		if (d < 0) {
			if (errno == ENXIO) /* no data from off to the end */
				break;
			return errno == EINVAL || errno == EOPNOTSUPP ? 0 : -errno;
		}
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return errno == EINVAL || errno == EOPNOTSUPP ? 0 : -errno;
		if (h > size)
			h = size;
		if (d >= size)
			break;
		data += h - d;
		off = h;
	}
	if (data >= size)
		return 0;
	/* Pass 2: the map (a file with no data at all gets one empty region at
	 * its end, so that it still reads as sparse). */
	for (off = 0; off < size;) {
		off_t d = lseek(fd, off, SEEK_DATA), h;
		if (d < 0 || d >= size)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			return -errno;
		if (h > size)
			h = size;
		archive_entry_sparse_add_entry(e, d, h - d);
		off = h;
	}
	if (archive_entry_sparse_count(e) == 0)
		archive_entry_sparse_add_entry(e, size, 0);
	*ret_sparse = true;
	return 0;
}

static int
archive_file(Writer *w, int dfd, const char *name, const struct stat *lst)
{
	_cleanup_close_ int fd = -1;
	struct archive_entry *e = NULL;
	Linked key = {.dev = lst->st_dev, .ino = lst->st_ino}, **found;
	bool sparse = false;
	struct stat st;
	int r;

	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ELOOP ? 0 : -errno; /* gone or swapped */
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_ino != lst->st_ino || st.st_dev != lst->st_dev)
		return 0; /* changed type under us: skip */
	/* Another name of a file archived already: a hardlink entry to it. */
	if (st.st_nlink > 1 && (found = tfind(&key, &w->linked, linked_cmp))) {
		r = count_entry(w, 0);
		if (r < 0)
			return r;
		e = new_entry(w->path, AE_IFREG, st.st_mode, 0, &st.st_mtim);
		if (!e)
			return -ENOMEM;
		archive_entry_set_hardlink(e, (*found)->path);
		r = archive_write_header(w->a, e);
		archive_entry_free(e);
		if (r < ARCHIVE_WARN)
			return ar_fail(w, "archive header");
		return 0;
	}
	r = count_entry(w, (uint64_t)st.st_size);
	if (r < 0)
		return r;
	e = new_entry(w->path, AE_IFREG, st.st_mode, st.st_size, &st.st_mtim);
	if (!e)
		return -ENOMEM;
	r = map_sparse(fd, st.st_size, e, &sparse);
	if (r >= 0 && archive_write_header(w->a, e) < ARCHIVE_WARN)
		r = ar_fail(w, "archive header");
	/* Exactly st_size bytes (or the sparse map's regions): a file that shrank
	 * is padded with zeros, one that grew is cut. */
	if (r >= 0 && sparse) {
		int64_t off, len, at = 0;
		archive_entry_sparse_reset(e);
		while (r >= 0 && archive_entry_sparse_next(e, &off, &len) == ARCHIVE_OK) {
			r = copy_region(w, -1, at, off - at);
			if (r >= 0)
				r = copy_region(w, fd, off, len);
			at = off + len;
		}
		if (r >= 0 && at < st.st_size)
			r = copy_region(w, -1, at, st.st_size - at);
	} else if (r >= 0)
		r = copy_region(w, fd, 0, st.st_size);
	archive_entry_free(e);
	if (r < 0)
		return r;
	if (archive_write_finish_entry(w->a) < ARCHIVE_WARN)
		return ar_fail(w, "archive entry");
	w->files++;
	if (st.st_nlink > 1) {
		size_t pl = strlen(w->path);
		Linked *l = malloc(sizeof(*l) + pl + 1);
		if (!l)
			return -ENOMEM;
		*l = key;
		memcpy(l->path, w->path, pl + 1);
		if (!tsearch(l, &w->linked, linked_cmp)) {
			free(l);
			return -ENOMEM;
		}
	}
	return 0;
}

static int
archive_dir(Writer *w, int dfd, size_t plen, unsigned depth, dev_t dev)
{
	char **names = NULL;
	size_t n = 0;
	int r;

	if (depth > DEPTH_MAX)
		return not_restorable(w, "a directory tree deeper than %d levels", DEPTH_MAX);
	r = list_dir(dfd, &names, &n);
	if (r < 0) {
		reason_set(w->e, "cannot list '%s': %s", plen ? w->path : ".", strerror(-r));
		return r;
	}
	for (size_t i = 0; i < n && r >= 0; i++) {
		const char *name = names[i];
		size_t nlen = strlen(name);
		struct stat st;

		if (plen + (plen ? 1 : 0) + nlen > WSFS_PATH_MAX) {
			r = not_restorable(w, "a name in it makes a path longer than %d bytes",
					   WSFS_PATH_MAX);
			break;
		}
		if (plen)
			w->path[plen] = '/';
		memcpy(w->path + plen + (plen ? 1 : 0), name, nlen + 1);
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			r = -errno;
			reason_set(w->e, "cannot stat '%s': %s", w->path, strerror(errno));
			break;
		}
		if (S_ISREG(st.st_mode))
			r = archive_file(w, dfd, name, &st);
		else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX + 1];
			ssize_t l = readlinkat(dfd, name, target, PATH_MAX);
			if (l < 0)
				continue; /* swapped under us */
			target[l] = '\0';
			r = count_entry(w, 0);
			if (r >= 0)
				r = write_header(w, w->path, AE_IFLNK, 0777, 0, &st.st_mtim,
						 target);
		} else if (S_ISDIR(st.st_mode) && st.st_dev == dev) {
			_cleanup_close_ int cfd =
			    openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			struct stat cst;
			if (cfd < 0 || fstat(cfd, &cst) < 0 || cst.st_ino != st.st_ino)
				continue; /* swapped under us */
			r = count_entry(w, 0);
			if (r >= 0)
				r = write_header(w, w->path, AE_IFDIR, cst.st_mode, 0, &cst.st_mtim,
						 NULL);
			if (r >= 0)
				r = archive_dir(w, cfd, plen + (plen ? 1 : 0) + nlen, depth + 1,
						dev);
		}
		/* sockets, FIFOs, devices, other mounts: not archived */
		w->path[plen] = '\0';
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

int
snapshot_create(const char *backups_dir, const char *key_id, int ws_fd, const char *label,
		char **ret_record, Reason *err)
{
	return snapshot_create_limited(backups_dir, key_id, ws_fd, label, UINT64_MAX, UINT64_MAX,
				       ret_record, err);
}

int
snapshot_create_limited(const char *backups_dir, const char *key_id, int ws_fd, const char *label,
			uint64_t max_bytes, uint64_t max_entries, char **ret_record, Reason *err)
{
	_cleanup_free_ char *dir = NULL, *tmp = NULL, *final = NULL, *rec = NULL;
	_cleanup_close_ int dfd = -1;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	char id[37], sha[2 * 32 + 1];
	Writer w = {.fd = -1, .e = err, .max_content = max_bytes, .max_entries = max_entries};
	struct stat st;
	json_t *j;
	int r;

	if (ws_fd >= 0 && fstat(ws_fd, &st) < 0)
		return -errno;
	r = uuid_v4(id);
	if (r < 0)
		return r;
	if (asprintf(&dir, "%s/%s", backups_dir, key_id) < 0 ||
	    asprintf(&tmp, ".%s.tar.zst.tmp", id) < 0 || asprintf(&final, "%s.tar.zst", id) < 0)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0) {
		reason_set(err, "cannot create the backup directory: %s", strerror(-r));
		return r;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	w.fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (w.fd < 0) {
		r = -errno;
		reason_set(err, "cannot create the archive: %s", strerror(errno));
		return r;
	}
	w.md = EVP_MD_CTX_new();
	w.a = archive_write_new();
	if (!w.md || !w.a || !EVP_DigestInit_ex(w.md, EVP_sha256(), NULL)) {
		r = -ENOMEM;
		goto fail;
	}
	if (archive_write_set_format_pax_restricted(w.a) != ARCHIVE_OK ||
	    (archive_write_add_filter_zstd(w.a) != ARCHIVE_OK &&
	     archive_write_add_filter_gzip(w.a) != ARCHIVE_OK) ||
	    archive_write_set_bytes_in_last_block(w.a, 1) != ARCHIVE_OK ||
	    archive_write_open(w.a, &w, NULL, writer_cb, NULL) != ARCHIVE_OK) {
		r = ar_fail(&w, "archive setup");
		goto fail;
	}
	r = ws_fd >= 0 ? archive_dir(&w, ws_fd, 0, 0, st.st_dev) : 0;
	if (r < 0)
		goto fail;
	if (archive_write_close(w.a) != ARCHIVE_OK) {
		r = ar_fail(&w, "archive close");
		goto fail;
	}
	if (!EVP_DigestFinal_ex(w.md, md, &mdlen) || mdlen != 32) {
		r = -EIO;
		goto fail;
	}
	hex_encode(md, 32, sha);
	if (fsync(w.fd) < 0 || renameat(dfd, tmp, dfd, final) < 0) {
		r = -errno;
		reason_set(err, "cannot store the archive: %s", strerror(errno));
		goto fail;
	}
	(void)fsync(dfd);
	j = json_pack("{s:i, s:s, s:s, s:s?, s:I, s:I, s:s, s:I}", "v", 1, "id", id, "key", key_id,
		      "label", label, "createdAt", (json_int_t)now_epoch_ms(), "bytes",
		      (json_int_t)w.bytes, "sha256", sha, "files", (json_int_t)w.files);
	if (j && !label)
		json_object_set_new(j, "label", json_null());
	rec = j ? json_dump_compact(j) : NULL;
	json_decref(j);
	if (!rec) {
		(void)unlinkat(dfd, final, 0);
		r = -ENOMEM;
		goto out;
	}
	*ret_record = TAKE_PTR(rec);
	r = 0;
	goto out;
fail:
	(void)unlinkat(dfd, tmp, 0);
out:
	if (w.a)
		archive_write_free(w.a);
	tdestroy(w.linked, free);
	EVP_MD_CTX_free(w.md);
	safe_close(w.fd);
	return r;
}

/* ---------------------------------------------------------------------------
 * Verify.
 */

static bool
is_hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

static bool
nonneg_int(const json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) >= 0;
}

int
snapshot_verify(const char *backups_dir, const char *key_id, const char *record, size_t len,
		int *ret_fd, Reason *err)
{
	static const char *const keys[] = {"v",		"id",	 "key",	   "label",
					   "createdAt", "bytes", "sha256", "files"};
	_cleanup_free_ char *path = NULL;
	_cleanup_close_ int fd = -1;
	unsigned char md[EVP_MAX_MD_SIZE], buf[IO_CHUNK];
	unsigned int mdlen = 0;
	char sha[65];
	EVP_MD_CTX *ctx = NULL;
	const char *k, *id, *key, *want;
	json_t *j, *v, *label;
	struct stat st;
	off_t off = 0;
	int r = -EINVAL;

	if (len == 0 || len > SNAPSHOT_RECORD_MAX || memchr(record, '\0', len)) {
		reason_set(err, "not a record of ours");
		return -EINVAL;
	}
	j = json_loadb(record, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j)) {
		reason_set(err, "not a JSON object");
		goto out;
	}
	json_object_foreach(j, k, v)
	{
		bool known = false;
		for (size_t i = 0; i < ELEMENTSOF(keys); i++)
			known = known || streq(k, keys[i]);
		if (!known) {
			reason_set(err, "unknown field");
			goto out;
		}
	}
	id = json_string_value(json_object_get(j, "id"));
	key = json_string_value(json_object_get(j, "key"));
	want = json_string_value(json_object_get(j, "sha256"));
	label = json_object_get(j, "label");
	v = json_object_get(j, "v");
	if (!json_is_integer(v) || json_integer_value(v) != 1 || !snapshot_uuid_ok(id) || !key ||
	    !is_hex64(want) || !label || (!json_is_null(label) && !json_is_string(label)) ||
	    !nonneg_int(json_object_get(j, "createdAt")) ||
	    !nonneg_int(json_object_get(j, "bytes")) || !nonneg_int(json_object_get(j, "files"))) {
		reason_set(err, "malformed record");
		goto out;
	}
	if (!streq(key, key_id)) {
		reason_set(err, "the record belongs to another thread");
		goto out;
	}
	if (asprintf(&path, "%s/%s/%s.tar.zst", backups_dir, key_id, id) < 0) {
		r = -ENOMEM;
		goto out;
	}
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		/* Pruned (backups_keep)? Its tombstone says it was ours. */
		_cleanup_free_ char *tomb = NULL;
		if (asprintf(&tomb, "%s/%s/%s.pruned", backups_dir, key_id, id) < 0) {
			r = -ENOMEM;
			goto out;
		}
		if (access(tomb, F_OK) == 0) {
			reason_set(err, "backup_not_found: the backup was pruned (backups_keep)");
			r = -ENOENT;
			goto out;
		}
	}
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != (uint64_t)json_integer_value(json_object_get(j, "bytes"))) {
		reason_set(err, "no such backup");
		goto out;
	}
	ctx = EVP_MD_CTX_new();
	if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		off += n;
	}
	if (!EVP_DigestFinal_ex(ctx, md, &mdlen) || mdlen != 32) {
		r = -EIO;
		goto out;
	}
	hex_encode(md, 32, sha);
	if (off != st.st_size || !streq(sha, want)) {
		reason_set(err, "the archive does not match its record (checksum mismatch): it was "
				"changed or damaged");
		r = -EBADMSG;
		goto out;
	}
	*ret_fd = TAKE_FD(fd);
	r = 0;
out:
	EVP_MD_CTX_free(ctx);
	json_decref(j);
	return r;
}

/* ---------------------------------------------------------------------------
 * Unpack.
 */

/* Any target is allowed: a symlink is restored as the entry it is and nothing
 * here (nor any other host-side reader of a workspace) resolves through one:
 * every component is opened O_NOFOLLOW, files are created O_EXCL|O_NOFOLLOW,
 * hardlinks are made without AT_SYMLINK_FOLLOW to a regular file checked
 * with AT_SYMLINK_NOFOLLOW. A link pointing outside the tree (a venv's
 * /usr/bin/python3) is inert on the host and resolves inside the sandbox's
 * own root there, like any link the sandbox could make itself. */
bool
snapshot_link_target_ok(const char *t, unsigned depth)
{
	size_t len = strlen(t);

	(void)depth;
	return len > 0 && len <= PATH_MAX;
}

typedef struct Unpacker {
	struct archive *a;
	int root_fd;
	uid_t uid;
	gid_t gid;
	uint64_t bytes, entries, max_bytes, max_entries;
	Reason *e;
} Unpacker;

static int
reject(Unpacker *u, const char *path, const char *why)
{
	return tar_refuse(u->e, "archive rejected: ", 128, path, why);
}

/* Open the parent directory of path (creating missing components 0700),
 * never through a symlink or a non-directory. *ret_name points into path. */
static int
open_parent(Unpacker *u, char *path, bool create, int *ret_fd, const char **ret_name,
	    unsigned *ret_depth)
{
	int fd = dup(u->root_fd);
	unsigned depth = 0;
	char *p = path, *s;

	if (fd < 0)
		return -errno;
	while ((s = strchr(p, '/'))) {
		int nfd;
		*s = '\0';
		nfd = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, p, 0700) < 0 && errno != EEXIST) {
				int r = -errno;
				*s = '/';
				close(fd);
				return r;
			}
			nfd = openat(fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (nfd >= 0 && fchown(nfd, u->uid, u->gid) < 0) {
				int r = -errno;
				*s = '/';
				close(nfd);
				close(fd);
				return r;
			}
		}
		*s = '/';
		if (nfd < 0) {
			int r = errno;
			close(fd);
			if (r == ELOOP || r == ENOTDIR)
				return reject(u, path, "a parent is a symlink or not a directory");
			if (r == ENOENT && !create)
				return reject(u, path, "no such directory in the archive");
			return -r;
		}
		close(fd);
		fd = nfd;
		p = s + 1;
		depth++;
	}
	*ret_fd = fd;
	*ret_name = p;
	*ret_depth = depth;
	return 0;
}

static int
unpack_file(Unpacker *u, int pfd, const char *name, const char *path, struct archive_entry *e)
{
	_cleanup_close_ int fd = -1;
	int64_t size = archive_entry_size(e);
	struct timespec ts[2];
	const char *what = NULL;
	int r;

	if (size < 0 || (uint64_t)size > u->max_bytes - u->bytes)
		return reject(u, path, "over restore_max_bytes");
	u->bytes += (uint64_t)size;
	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return errno == EEXIST ? reject(u, path, "duplicate entry") : -errno;
	r = tar_read_data(u->a, fd, size, &what);
	if (r == -EINVAL)
		return reject(u, path, what);
	if (r < 0)
		return r;
	if (ftruncate(fd, (off_t)size) < 0 || fchown(fd, u->uid, u->gid) < 0 ||
	    fchmod(fd, archive_entry_perm(e) & 0777) < 0)
		return -errno;
	ts[0].tv_sec = ts[1].tv_sec = archive_entry_mtime(e);
	ts[0].tv_nsec = ts[1].tv_nsec = archive_entry_mtime_nsec(e);
	(void)futimens(fd, ts);
	return 0;
}

/* A hardlink entry: another name of a regular file unpacked before, inside
 * the tree (both paths resolved from the root with O_NOFOLLOW, the target
 * checked to be a regular file, never a symlink or anything outside). */
static int
unpack_hardlink(Unpacker *u, struct archive_entry *e, char *path, const char *raw)
{
	const char *traw = archive_entry_hardlink(e), *tname = NULL, *name = NULL;
	_cleanup_close_ int tpfd = -1, pfd = -1;
	_cleanup_free_ char *target = NULL;
	unsigned depth = 0;
	struct stat st;
	size_t tlen;
	int r;

	if (archive_entry_size_is_set(e) && archive_entry_size(e) > 0)
		return reject(u, raw, "hardlink with data");
	if (!(target = strdup(traw)))
		return -ENOMEM;
	tlen = strlen(target);
	if (target[0] == '/' || wsfs_check_path(target, tlen) < 0)
		return reject(u, raw, "hardlink target absolute, '..', '.' or overlong");
	r = open_parent(u, target, false, &tpfd, &tname, &depth);
	if (r < 0)
		return r;
	if (fstatat(tpfd, tname, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno == ENOENT)
			return reject(u, raw, "hardlink to a file not in the archive before it");
		return -errno;
	}
	if (!S_ISREG(st.st_mode))
		return reject(u, raw, "hardlink to something not a regular file");
	r = open_parent(u, path, true, &pfd, &name, &depth);
	if (r < 0)
		return r;
	if (linkat(tpfd, tname, pfd, name, 0) < 0)
		return errno == EEXIST ? reject(u, raw, "duplicate entry") : -errno;
	return 0;
}

static int
unpack_entry(Unpacker *u, struct archive_entry *e)
{
	const char *raw = archive_entry_pathname(e), *name = NULL;
	_cleanup_free_ char *path = NULL;
	_cleanup_close_ int pfd = -1;
	mode_t type = archive_entry_filetype(e);
	size_t len;
	unsigned depth = 0;
	int r;

	if (++u->entries > u->max_entries)
		return reject(u, raw, "over restore_max_entries");
	if (!raw || !(path = strdup(raw)))
		return raw ? -ENOMEM : reject(u, raw, "no path");
	len = strlen(path);
	if (type == AE_IFDIR && len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
	if (path[0] == '/')
		return reject(u, raw, "absolute path");
	if (wsfs_check_path(path, len) < 0)
		return reject(u, raw, "'..', '.', empty or overlong path");
	if (archive_entry_hardlink(e))
		return unpack_hardlink(u, e, path, raw);
	if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
		return reject(u, raw, "not a file, a directory or a symlink");
	if (archive_entry_mode(e) & (S_ISUID | S_ISGID | S_ISVTX))
		return reject(u, raw, "setuid, setgid or sticky bit");
	if (archive_entry_xattr_count(e) > 0)
		return reject(u, raw, "extended attributes");
	r = open_parent(u, path, true, &pfd, &name, &depth);
	if (r < 0)
		return r;
	switch (type) {
	case AE_IFDIR: {
		_cleanup_close_ int fd = -1;
		struct stat st;
		if (mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
			return -errno;
		fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno == ELOOP || errno == ENOTDIR
				   ? reject(u, raw, "duplicate entry of another type")
				   : -errno;
		if (fstat(fd, &st) < 0 || fchown(fd, u->uid, u->gid) < 0 ||
		    fchmod(fd, (archive_entry_perm(e) & 0777) | 0700) < 0)
			return -errno;
		return 0;
	}
	case AE_IFLNK: {
		const char *t = archive_entry_symlink(e);
		struct timespec ts[2];
		if (!t || !snapshot_link_target_ok(t, depth))
			return reject(u, raw, "empty or overlong symlink target");
		if (symlinkat(t, pfd, name) < 0)
			return errno == EEXIST ? reject(u, raw, "duplicate entry") : -errno;
		if (fchownat(pfd, name, u->uid, u->gid, AT_SYMLINK_NOFOLLOW) < 0)
			return -errno;
		ts[0].tv_sec = ts[1].tv_sec = archive_entry_mtime(e);
		ts[0].tv_nsec = ts[1].tv_nsec = archive_entry_mtime_nsec(e);
		(void)utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW);
		return 0;
	}
	default: return unpack_file(u, pfd, name, raw, e);
	}
}

static int
unpack_open(struct archive *a, void *fd)
{
	return archive_read_open_fd(a, *(int *)fd, UNPACK_BLOCK);
}

static int
unpack_entry_cb(struct archive_entry *e, void *userdata)
{
	return unpack_entry(userdata, e);
}

int
snapshot_unpack(int archive_fd, int parent_fd, const char *name, uid_t uid, gid_t gid,
		uint64_t max_bytes, uint64_t max_entries, Reason *err)
{
	Unpacker u = {.uid = uid,
		      .gid = gid,
		      .max_bytes = max_bytes,
		      .max_entries = max_entries,
		      .root_fd = -1,
		      .e = err};
	int r;

	if (mkdirat(parent_fd, name, 0700) < 0)
		return -errno;
	u.root_fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (u.root_fd < 0) {
		r = -errno;
		goto fail;
	}
	if (lseek(archive_fd, 0, SEEK_SET) < 0) {
		r = -errno;
		goto fail;
	}
	/* Our archives are zstd (or gzip) pax tars; nothing else is read. */
	r = tar_read_open(false, unpack_open, &archive_fd, "archive rejected", err, &u.a);
	if (r < 0)
		goto fail;
	r = tar_read_entries(u.a, unpack_entry_cb, &u, "archive rejected", err);
	if (r < 0) {
		if (r != -EINVAL)
			reason_set(err, "restore failed: %s", strerror(-r));
		goto fail;
	}
	if (fchown(u.root_fd, uid, gid) < 0 || fchmod(u.root_fd, 0700) < 0 ||
	    syncfs(u.root_fd) < 0) {
		r = -errno;
		goto fail;
	}
	archive_read_free(u.a);
	safe_close(u.root_fd);
	return 0;
fail:
	if (u.a)
		archive_read_free(u.a);
	safe_close(u.root_fd);
	(void)snapshot_rm_rf(parent_fd, name);
	return r;
}

/* ---------------------------------------------------------------------------
 * Remove a tree.
 */

static int
rm_children(int dfd, unsigned depth)
{
	char **names = NULL;
	size_t n = 0;
	int r;

	if (depth > 4 * DEPTH_MAX)
		return -ELOOP;
	r = list_dir(dfd, &names, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (unlinkat(dfd, names[i], 0) < 0 && errno == EISDIR) {
			int cfd =
			    openat(dfd, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (cfd >= 0) {
				(void)fchmod(cfd, 0700);
				int k = rm_children(cfd, depth + 1);
				close(cfd);
				if (k < 0 && r >= 0)
					r = k;
			}
			if (unlinkat(dfd, names[i], AT_REMOVEDIR) < 0 && errno != ENOENT && r >= 0)
				r = -errno;
		}
		free(names[i]);
	}
	free(names);
	return r;
}

int
snapshot_rm_rf(int dir_fd, const char *name)
{
	int fd, r;

	if (unlinkat(dir_fd, name, 0) >= 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR)
		return -errno;
	fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = rm_children(fd, 0);
	close(fd);
	if (unlinkat(dir_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return r < 0 ? r : -errno;
	return r;
}

/* ---------------------------------------------------------------------------
 * Prune.
 */

typedef struct Aged {
	char *name;
	struct timespec mtime;
} Aged;

/* Oldest first; ties by name. */
static int
aged_cmp(const void *a, const void *b)
{
	const Aged *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

static bool
has_suffix(const char *s, const char *suffix, size_t *ret_stem)
{
	size_t n = strlen(s), m = strlen(suffix);

	if (n <= m || !streq(s + n - m, suffix))
		return false;
	*ret_stem = n - m;
	return true;
}

/* The regular files of dfd named <uuid><suffix>, oldest first. */
static int
list_aged(int dfd, char **names, size_t n, const char *suffix, Aged **ret, size_t *ret_n)
{
	Aged *v = calloc(n ? n : 1, sizeof(*v));
	size_t k = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char stem[37];
		size_t sl;
		struct stat st;
		if (!has_suffix(names[i], suffix, &sl) || sl != 36)
			continue;
		memcpy(stem, names[i], 36);
		stem[36] = '\0';
		if (!snapshot_uuid_ok(stem) ||
		    fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		v[k].name = names[i];
		v[k].mtime = st.st_mtim;
		k++;
	}
	if (k > 1)
		qsort(v, k, sizeof(*v), aged_cmp);
	*ret = v;
	*ret_n = k;
	return 0;
}

int
snapshot_prune(const char *backups_dir, const char *key_id, unsigned keep, const char *spare,
	       unsigned *ret_pruned)
{
	_cleanup_free_ char *dir = NULL, *arch = NULL, *tombs = NULL;
	_cleanup_close_ int dfd = -1;
	Aged *a = NULL, *t = NULL;
	size_t n = 0, na = 0, nt = 0;
	char **names = NULL;
	unsigned pruned = 0;
	int r;

	if (ret_pruned)
		*ret_pruned = 0;
	if (asprintf(&dir, "%s/%s", backups_dir, key_id) < 0)
		return -ENOMEM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = list_dir(dfd, &names, &n);
	if (r < 0)
		return r;
	/* Temporaries of a job that was killed (the key's jobs are serialised:
	 * none is being written now). */
	for (size_t i = 0; i < n; i++) {
		size_t sl;
		if (names[i][0] == '.' &&
		    (has_suffix(names[i], ".tar.zst.tmp", &sl) ||
		     (strncmp(names[i], ".rec-", 5) == 0 && has_suffix(names[i], ".tmp", &sl))))
			(void)unlinkat(dfd, names[i], 0); /* (.rec-*.tmp: snaprec.c's) */
	}
	r = list_aged(dfd, names, n, ".tar.zst", &a, &na);
	if (r >= 0)
		r = list_aged(dfd, names, n, ".pruned", &t, &nt);
	for (size_t i = 0; r >= 0 && keep > 0 && na > keep && i < na - keep; i++) {
		char tomb[64];
		int fd;
		if (spare && strncmp(a[i].name, spare, 36) == 0)
			continue;
		/* The tombstone first: a restore of the record then says "pruned"
		 * and not "not ours", even if we die in between. */
		snprintf(tomb, sizeof(tomb), "%.36s.pruned", a[i].name);
		fd = openat(dfd, tomb, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			r = -errno;
			break;
		}
		close(fd);
		if (unlinkat(dfd, a[i].name, 0) < 0 && errno != ENOENT) {
			r = -errno;
			break;
		}
		snprintf(tomb, sizeof(tomb), "%.36s.json", a[i].name); /* its record (snaprec.h) */
		(void)unlinkat(dfd, tomb, 0);
		pruned++;
	}
	/* Tombstones are empty files; keep the newest SNAPSHOT_TOMBSTONES_MAX. */
	for (size_t i = 0;
	     r >= 0 && nt > SNAPSHOT_TOMBSTONES_MAX && i < nt - SNAPSHOT_TOMBSTONES_MAX; i++)
		(void)unlinkat(dfd, t[i].name, 0);
	if (pruned)
		(void)fsync(dfd);
	free(a);
	free(t);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	if (ret_pruned)
		*ret_pruned = pruned;
	return r < 0 ? r : 0;
}
