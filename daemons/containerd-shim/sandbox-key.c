/* SPDX-License-Identifier: MIT */
/*
 * sandbox-key.c — <sandbox_dir>/<id>/key (see sandbox-key.h), and the id of a
 * key (shim_sandbox_id, shim.h).
 */
#include "config.h"

#include "sandbox-key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fd-util.h"
#include "id-util.h"
#include "macro.h"
#include "shim.h"

#define KEY_TMP SANDBOX_KEY_FILE ".tmp"

/* shim.h; here, with no dependency but libcrypto, so that a client of the
 * shim (tools/shimctl) can name sandboxes without linking the shim's layers. */
int
shim_sandbox_id(const char *key, size_t len, char ret_id[static 17])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (len == 0 || len > SANDBOX_KEY_MAX || memchr(key, '\0', len))
		return -EINVAL;
	if (!EVP_Digest(key, len, md, &mdlen, EVP_sha256(), NULL) || mdlen < 8)
		return -EIO;
	hex_encode(md, 8, ret_id);
	return 0;
}

/* 0 when the file holds exactly key, -EEXIST when not, -errno on I/O error,
 * -ENOENT when there is no file, -ENODATA when it is empty (written by a
 * claim whose data a power loss dropped: no claim). */
static int
compare(int dir, const char *key, size_t len, size_t max_len)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	struct stat st;
	size_t got = 0;

	fd = openat(dir, SANDBOX_KEY_FILE, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ELOOP ? -EEXIST : -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (size_t)st.st_size > max_len)
		return -EEXIST;
	if (st.st_size == 0)
		return -ENODATA;
	buf = malloc(max_len + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t n = read(fd, buf + got, max_len + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
		if (got > max_len)
			return -EEXIST;
	}
	return got == len && memcmp(buf, key, len) == 0 ? 0 : -EEXIST;
}

static int
write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int
sandbox_key_claim(int dfd, const char *id, const char *key, size_t len, size_t max_len, bool create)
{
	return sandbox_key_claim_full(dfd, id, key, len, max_len, create, NULL);
}

int
sandbox_key_claim_full(int dfd, const char *id, const char *key, size_t len, size_t max_len,
		       bool create, bool *ret_absent)
{
	_cleanup_close_ int dir = -1, fd = -1;
	bool empty;
	int r;

	if (ret_absent)
		*ret_absent = false;
	if (len == 0 || len > max_len || memchr(key, '\0', len))
		return -EINVAL;
	dir = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0 && errno == ENOENT) {
		if (!create) {
			if (ret_absent)
				*ret_absent = true;
			return 0;
		}
		if (mkdirat(dfd, id, 0700) < 0 && errno != EEXIST)
			return -errno;
		dir = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (dir < 0)
		return -errno;
	r = compare(dir, key, len, max_len);
	if (r != -ENOENT && r != -ENODATA)
		return r;
	empty = r == -ENODATA;
	/* No claim yet (a new directory, one made before the key file, or an
	 * empty file a power loss left). Not fsynced: the claim guards against
	 * two keys with one 64-bit id, and a crash that drops it leaves no file
	 * or an empty one, which the first key to come claims again, as it did
	 * the first time (two fsyncs were ~2 ms of every sandbox creation on
	 * the shim's loop). */
	(void)unlinkat(dir, KEY_TMP, 0);
	fd = openat(dir, KEY_TMP, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, key, len);
	/* An empty file is replaced, anything else never is. */
	if (r == 0 &&
	    renameat2(dir, KEY_TMP, dir, SANDBOX_KEY_FILE, empty ? 0 : RENAME_NOREPLACE) < 0)
		r = -errno;
	if (r < 0) {
		(void)unlinkat(dir, KEY_TMP, 0);
		/* claimed meanwhile (a forked job of ours): compare with that */
		return r == -EEXIST ? compare(dir, key, len, max_len) : r;
	}
	return 0;
}
