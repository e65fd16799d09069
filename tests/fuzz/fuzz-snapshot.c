/* SPDX-License-Identifier: MIT */
/*
 * fuzz-snapshot.c — libFuzzer target: arbitrary bytes as a snapshot archive
 * handed to restore (snapshot.c snapshot_unpack(), what SANDBOX_RESTORE runs
 * once the record verified: tar, raw or gzip/zstd-compressed).
 *
 * Each input is unpacked into a new staging directory "stage" of a parent
 * directory that also holds a canary file, an "outside" directory, and a
 * symlink to it. Checks, besides crashes:
 *   - the parent holds nothing new, the canary and the outside directory are
 *     untouched (entries and content);
 *   - a failed unpack leaves no staging directory;
 *   - a restored tree holds only regular files (hardlinked only among
 *     themselves: the canary keeps one link), directories and symlinks (any
 *     target: restored inert, never followed), no setuid/setgid/sticky bit,
 *     at most the entry and byte limits given.
 * The staging directory is removed after each input.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "snapshot.h"

#define CANARY "CANARY-CONTENT-UNTOUCHED"
#define MAX_ENTRIES 64
#define MAX_BYTES (64 * 1024)

static char top[64];
static int top_fd = -1;

static void
fail(const char *what, const char *path)
{
	fprintf(stderr, "fuzz-snapshot: %s: '%s'\n", what, path ? path : "");
	abort();
}

static void
cleanup(void)
{
	if (top_fd >= 0) {
		snapshot_rm_rf(AT_FDCWD, top);
		close(top_fd);
	}
}

static void
setup(void)
{
	snprintf(top, sizeof(top), "/dev/shm/rw-fuzz-snapshot-%d", (int)getpid());
	snapshot_rm_rf(AT_FDCWD, top);
	if (mkdir(top, 0755) < 0 || (top_fd = open(top, O_RDONLY | O_DIRECTORY)) < 0)
		abort();
	int fd = openat(top_fd, "canary", O_WRONLY | O_CREAT | O_EXCL, 0644);
	if (fd < 0 || write(fd, CANARY, strlen(CANARY)) != (ssize_t)strlen(CANARY))
		abort();
	close(fd);
	if (mkdirat(top_fd, "outside", 0755) < 0 || symlinkat("outside", top_fd, "link") < 0)
		abort();
	atexit(cleanup);
}

static void
check_parent(void)
{
	DIR *d = fdopendir(dup(top_fd));
	struct dirent *de;
	char buf[64];
	size_t n = 0;

	if (!d)
		abort();
	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (strcmp(de->d_name, "canary") && strcmp(de->d_name, "outside") &&
		    strcmp(de->d_name, "link") && strcmp(de->d_name, "stage"))
			fail("a new entry beside the staging directory", de->d_name);
		n++;
	}
	closedir(d);
	int fd = openat(top_fd, "canary", O_RDONLY | O_NOFOLLOW);
	ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf)) : -1;
	struct stat cst;
	if (fd >= 0 && fstat(fd, &cst) == 0 && cst.st_nlink != 1)
		fail("the canary was hardlinked", "canary");
	if (fd >= 0)
		close(fd);
	if (k != (ssize_t)strlen(CANARY) || memcmp(buf, CANARY, (size_t)k) != 0)
		fail("the canary changed", "canary");
	d = fdopendir(openat(top_fd, "outside", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
	if (!d)
		fail("the outside directory went away", "outside");
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			fail("something was written in the outside directory", de->d_name);
	closedir(d);
	struct stat st;
	if (fstatat(top_fd, "link", &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISLNK(st.st_mode))
		fail("the link beside the staging directory changed", "link");
}

typedef struct Walk {
	int stage_fd;
	size_t entries;
	uint64_t bytes;
} Walk;

static void
walk(Walk *w, int dfd, const char *rel)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d)
		abort();
	while ((de = readdir(d))) {
		char path[8192];
		struct stat st;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			fail("cannot stat a restored entry", path);
		w->entries++;
		if (st.st_mode & (S_ISUID | S_ISGID | S_ISVTX))
			fail("a setuid, setgid or sticky bit restored", path);
		if (S_ISREG(st.st_mode)) {
			/* hardlinks are restored, within the tree only: the canary's
			 * link count (checked after each input) shows one to outside */
			w->bytes += (uint64_t)st.st_size;
		} else if (S_ISLNK(st.st_mode)) {
			/* symlinks are restored as they were, any target (inert: the
			 * restorer never follows one; the canary and the outside
			 * directory staying untouched is what shows it) */
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub < 0)
				fail("cannot open a restored directory", path);
			walk(w, sub, path);
		} else
			fail("a FIFO, socket or device restored", path);
	}
	closedir(d);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Reason err = {{0}};

	if (size > 1 << 20)
		return 0;
	if (top_fd < 0)
		setup();
	int afd = memfd_create("archive", MFD_CLOEXEC);
	if (afd < 0 || (size && write(afd, data, size) != (ssize_t)size) ||
	    lseek(afd, 0, SEEK_SET) != 0)
		abort();
	int r =
	    snapshot_unpack(afd, top_fd, "stage", getuid(), getgid(), MAX_BYTES, MAX_ENTRIES, &err);
	close(afd);
	check_parent();
	struct stat st;
	bool staged = fstatat(top_fd, "stage", &st, AT_SYMLINK_NOFOLLOW) == 0;
	if (r < 0 && staged)
		fail("a failed restore left its staging directory", err.msg);
	if (r == 0) {
		if (!staged || !S_ISDIR(st.st_mode))
			fail("a restore without its staging directory", "stage");
		Walk w = {.stage_fd = openat(top_fd, "stage", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)};
		if (w.stage_fd < 0)
			abort();
		walk(&w, dup(w.stage_fd), "");
		close(w.stage_fd);
		if (w.entries > MAX_ENTRIES || w.bytes > MAX_BYTES)
			fail("a restore beyond its limits", "stage");
	}
	if (snapshot_rm_rf(top_fd, "stage") < 0)
		abort();
	return 0;
}
