/* SPDX-License-Identifier: MIT */
/*
 * snaprec.c — the stored records of a key's snapshots (see snaprec.h).
 */
#include "config.h"

#include "snaprec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"
#include "snapshot.h"

static int
open_key_dir(const char *backups_dir, const char *key_id)
{
	_cleanup_free_ char *dir = NULL;
	int fd;

	if (asprintf(&dir, "%s/%s", backups_dir, key_id) < 0)
		return -ENOMEM;
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static bool
archive_exists(int dfd, const char *uuid)
{
	char name[64];
	struct stat st;

	snprintf(name, sizeof(name), "%s.tar.zst", uuid);
	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

int
snaprec_store(const char *backups_dir, const char *key_id, const char *record)
{
	_cleanup_close_ int dfd = -1, fd = -1;
	json_t *j = json_loads(record, 0, NULL);
	const char *uuid = json_string_value(json_object_get(j, "id"));
	char tmp[64], name[64];
	uint32_t rnd = 0;
	size_t len = strlen(record);
	int r = 0;

	if (!uuid || !snapshot_uuid_ok(uuid)) {
		json_decref(j);
		return -EINVAL;
	}
	snprintf(name, sizeof(name), "%s.json", uuid);
	json_decref(j);
	dfd = open_key_dir(backups_dir, key_id);
	if (dfd < 0)
		return dfd;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	snprintf(tmp, sizeof(tmp), ".rec-%08x.tmp", rnd);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, record, len) != (ssize_t)len || fsync(fd) < 0 ||
	    renameat(dfd, tmp, dfd, name) < 0) {
		r = errno ? -errno : -EIO;
		(void)unlinkat(dfd, tmp, 0);
	}
	return r;
}

/* Read dfd's <uuid>.json (a record is small: at most SNAPSHOT_RECORD_MAX). */
static int
read_record(int dfd, const char *uuid, char **ret)
{
	_cleanup_close_ int fd = -1;
	char name[64], *buf;
	ssize_t n;

	snprintf(name, sizeof(name), "%s.json", uuid);
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(SNAPSHOT_RECORD_MAX + 1);
	if (!buf)
		return -ENOMEM;
	n = read(fd, buf, SNAPSHOT_RECORD_MAX + 1);
	if (n <= 0 || n > SNAPSHOT_RECORD_MAX) {
		free(buf);
		return n < 0 ? -errno : -EINVAL;
	}
	buf[n] = '\0';
	*ret = buf;
	return 0;
}

/* The key's directory, when uuid names an archive in it: a fd, -EINVAL (not
 * a snapshot id), -ENOENT, or open_key_dir's error. */
static int
open_archive_dir(const char *backups_dir, const char *key_id, const char *uuid)
{
	int dfd;

	if (!snapshot_uuid_ok(uuid))
		return -EINVAL;
	dfd = open_key_dir(backups_dir, key_id);
	if (dfd < 0)
		return dfd;
	if (!archive_exists(dfd, uuid)) {
		close(dfd);
		return -ENOENT;
	}
	return dfd;
}

int
snaprec_load(const char *backups_dir, const char *key_id, const char *uuid, char **ret)
{
	_cleanup_close_ int dfd = -1;

	dfd = open_archive_dir(backups_dir, key_id, uuid);
	if (dfd < 0)
		return dfd;
	return read_record(dfd, uuid, ret);
}

typedef struct Rec {
	char *text;
	int64_t created;
	char uuid[37];
} Rec;

/* Newest first; ties by uuid. */
static int
rec_cmp(const void *a, const void *b)
{
	const Rec *x = a, *y = b;

	if (x->created != y->created)
		return x->created > y->created ? -1 : 1;
	return strcmp(x->uuid, y->uuid);
}

void
snaprec_list_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

int
snaprec_list(const char *backups_dir, const char *key_id, size_t max, char ***ret, size_t *ret_n)
{
	_cleanup_close_ int dfd = -1;
	Rec *v = NULL;
	size_t n = 0;
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	*ret = NULL;
	*ret_n = 0;
	dfd = open_key_dir(backups_dir, key_id);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return dfd;
	fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		r = -errno;
		safe_close(fd);
		return r;
	}
	while (r == 0 && (de = readdir(d))) {
		size_t l = strlen(de->d_name);
		char uuid[37], *text = NULL;
		json_t *j;
		if (l != 41 || !streq(de->d_name + 36, ".json"))
			continue;
		memcpy(uuid, de->d_name, 36);
		uuid[36] = '\0';
		if (!snapshot_uuid_ok(uuid) || !archive_exists(dfd, uuid) ||
		    read_record(dfd, uuid, &text) < 0)
			continue;
		j = json_loads(text, 0, NULL);
		if (!json_is_object(j) || n >= max) {
			json_decref(j);
			free(text);
			continue;
		}
		Rec *nv = realloc(v, (n + 1) * sizeof(*v));
		if (!nv) {
			json_decref(j);
			free(text);
			r = -ENOMEM;
			break;
		}
		v = nv;
		v[n] = (Rec){.text = text,
			     .created = json_integer_value(json_object_get(j, "createdAt"))};
		memcpy(v[n].uuid, uuid, sizeof(uuid));
		n++;
		json_decref(j);
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), rec_cmp);
	char **out = r == 0 ? calloc(n ? n : 1, sizeof(*out)) : NULL;
	for (size_t i = 0; i < n; i++) {
		if (out)
			out[i] = v[i].text;
		else
			free(v[i].text);
	}
	free(v);
	if (!out)
		return r < 0 ? r : -ENOMEM;
	*ret = out;
	*ret_n = n;
	return 0;
}

int
snaprec_delete(const char *backups_dir, const char *key_id, const char *uuid)
{
	_cleanup_close_ int dfd = -1;
	char name[64];
	int fd;

	dfd = open_archive_dir(backups_dir, key_id, uuid);
	if (dfd < 0)
		return dfd;
	/* the tombstone first, as snapshot_prune() does */
	snprintf(name, sizeof(name), "%s.pruned", uuid);
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);
	snprintf(name, sizeof(name), "%s.tar.zst", uuid);
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	snprintf(name, sizeof(name), "%s.json", uuid);
	(void)unlinkat(dfd, name, 0);
	(void)fsync(dfd);
	return 0;
}
