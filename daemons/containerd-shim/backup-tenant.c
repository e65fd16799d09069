/* SPDX-License-Identifier: MIT */
/*
 * backup-tenant.c — whose backups, and how many bytes a tenant's hold
 * (backup-tenant.h). Only directories named like sandbox ids (16 lowercase
 * hex digits) are read; nothing is followed (O_NOFOLLOW, fstatat
 * AT_SYMLINK_NOFOLLOW).
 */
#include "config.h"

#include "backup-tenant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"
#include "tenant.h"

#define TENANTS_DIR ".tenants" /* <bdir>/.tenants/<id>: the tenant of <bdir>/<id> */

static bool
id_name(const char *s)
{
	return strlen(s) == 16 && strspn(s, "0123456789abcdef") == 16;
}

int
backup_tenant_mark(const char *bdir, const char *id, const char *tenant)
{
	char path[4096], tmp[4096];
	size_t n = strlen(tenant);

	if (!id_name(id) || !tenant_name_valid(tenant))
		return -EINVAL;
	if (mkdir(bdir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(path, sizeof(path), "%s/%s", bdir, TENANTS_DIR);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(tmp, sizeof(tmp), "%s/%s/%s.tmp", bdir, TENANTS_DIR, id);
	snprintf(path, sizeof(path), "%s/%s/%s", bdir, TENANTS_DIR, id);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ssize_t w = write(fd, tenant, n);
	int r = w == (ssize_t)n ? 0 : w < 0 ? -errno : -EIO;
	safe_close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

/* Is id (a name in <tfd>, the markers' directory) tenant's? */
static bool
marked(int tfd, const char *id, const char *tenant)
{
	char buf[TENANT_NAME_MAX + 2];
	int fd = tfd < 0 ? -1 : openat(tfd, id, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	safe_close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return streq(buf, tenant);
}

int
backup_tenant_bytes(const char *bdir, const char *tenant, uint64_t *ret)
{
	uint64_t total = 0;
	struct dirent *de;
	DIR *d = opendir(bdir);

	*ret = 0;
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	int tfd = openat(dirfd(d), TENANTS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	while ((de = readdir(d))) {
		if (!id_name(de->d_name) || !marked(tfd, de->d_name, tenant))
			continue;
		int dfd =
		    openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0)
			continue;
		DIR *sub = fdopendir(dfd);
		if (!sub) {
			safe_close(dfd);
			continue;
		}
		struct dirent *fe;
		while ((fe = readdir(sub))) {
			struct stat st;
			if (fstatat(dirfd(sub), fe->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode))
				total += (uint64_t)st.st_size;
		}
		closedir(sub);
	}
	closedir(d);
	safe_close(tfd);
	*ret = total;
	return 0;
}
