/* SPDX-License-Identifier: MIT */
/*
 * fuzz-files.c — libFuzzer target: the files API path, from the URL routerd
 * gets to the file the shim touches, against a real directory tree.
 *
 * Input: byte 0 picks the operation (get, read, list, lstat, write, mkdir,
 * remove, rename); the rest is "PATH\nTO\nDATA": PATH as it follows
 * /threads/{id}/files/ in the URL (routes-files.c: one leading '/' dropped,
 * percent-decoded), TO as the ?to= query value (percent-decoded, '+' a
 * space), DATA the body of a write. The decoded paths go through the shim's
 * checks (shim-files.c take_path → wsfs_check_path) and the wsfs.c operation,
 * exactly as shim_files_handle() calls them, on a workspace rebuilt for each
 * input inside a parent directory that also holds a canary file and an
 * "outside" directory. The workspace holds files, a directory, a FIFO and
 * symlinks that lead out (relative, absolute, through a directory) and one
 * that stays in.
 *
 * Checks, besides crashes: an accepted path has no empty, "." or ".."
 * component, no NUL, is relative; nothing in the parent but the workspace
 * changes (entries, the canary's content, the outside directory's entries and
 * its file's content); nothing read, listed or stat'ed is outside (by inode).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "routerd.h"
#include "wsfs.h"

#define SECRET "TOP-SECRET-OUTSIDE-CONTENT"

static char top[64];
static int top_fd = -1;
static ino_t outside_inos[4];

static void
fail(const char *what, const char *path)
{
	fprintf(stderr, "fuzz-files: %s: '%s'\n", what, path ? path : "");
	abort();
}

static void
rm_rf_at(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		DIR *d = fdopendir(fd);
		struct dirent *de;
		if (!d)
			abort();
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				rm_rf_at(fd, de->d_name);
		closedir(d);
		if (unlinkat(dfd, name, AT_REMOVEDIR) < 0)
			abort();
	} else if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		abort();
}

static void
put(int dfd, const char *name, const char *text)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		abort();
	close(fd);
}

static void
cleanup(void)
{
	if (top_fd >= 0) {
		close(top_fd);
		rm_rf_at(AT_FDCWD, top);
	}
}

static void
setup(void)
{
	struct stat st;
	char abs[128];

	snprintf(top, sizeof(top), "/dev/shm/rw-fuzz-files-%d", (int)getpid());
	rm_rf_at(AT_FDCWD, top);
	if (mkdir(top, 0755) < 0 || (top_fd = open(top, O_RDONLY | O_DIRECTORY)) < 0)
		abort();
	put(top_fd, "canary", SECRET);
	if (mkdirat(top_fd, "outside", 0755) < 0)
		abort();
	int ofd = openat(top_fd, "outside", O_RDONLY | O_DIRECTORY);
	put(ofd, "outside-only-name", SECRET);
	close(ofd);
	fstat(top_fd, &st);
	outside_inos[0] = st.st_ino;
	fstatat(top_fd, "canary", &st, 0);
	outside_inos[1] = st.st_ino;
	fstatat(top_fd, "outside", &st, 0);
	outside_inos[2] = st.st_ino;
	fstatat(top_fd, "outside/outside-only-name", &st, 0);
	outside_inos[3] = st.st_ino;
	snprintf(abs, sizeof(abs), "%s/outside", top);
	if (symlinkat(abs, top_fd, "abs-link-template") < 0)
		abort();
	atexit(cleanup);
}

static int
workspace(void)
{
	char abs[128];
	int ws;

	rm_rf_at(top_fd, "ws");
	if (mkdirat(top_fd, "ws", 0755) < 0 ||
	    (ws = openat(top_fd, "ws", O_RDONLY | O_DIRECTORY)) < 0)
		abort();
	put(ws, "a.txt", "hello");
	mkdirat(ws, "dir", 0755);
	mkdirat(ws, "dir/sub", 0755);
	put(ws, "dir/b.txt", "inside");
	mkfifoat(ws, "fifo", 0644);
	symlinkat("dir", ws, "link-in");
	symlinkat("../outside", ws, "link-out");
	symlinkat("../../outside/outside-only-name", ws, "dir/link-file-out");
	symlinkat("dir/../../outside", ws, "link-via-dir");
	symlinkat("/proc/self/root/dev/shm", ws, "link-magic");
	snprintf(abs, sizeof(abs), "%s/outside", top);
	symlinkat(abs, ws, "link-abs");
	return ws;
}

static bool
is_outside(const struct stat *st)
{
	for (size_t i = 0; i < 4; i++)
		if (st->st_ino == outside_inos[i])
			return true;
	return false;
}

/* The parent holds canary, outside, ws, abs-link-template and nothing else;
 * outside holds its one file; both files keep their content. */
static void
check_parent(const char *path)
{
	const char *want[] = {"abs-link-template", "canary", "outside", "ws"};
	int fd = dup(top_fd);
	DIR *d = fdopendir(fd);
	struct dirent *de;
	char buf[64];
	size_t n = 0;

	rewinddir(d);
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		bool ok = false;
		for (size_t i = 0; i < 4; i++)
			ok |= !strcmp(de->d_name, want[i]);
		if (!ok)
			fail("a new entry beside the workspace", path);
		n++;
	}
	closedir(d);
	if (n != 4)
		fail("an entry beside the workspace went away", path);
	int ofd = openat(top_fd, "outside", O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
	if (ofd < 0)
		fail("the outside directory went away", path);
	d = fdopendir(ofd);
	n = 0;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			if (strcmp(de->d_name, "outside-only-name") || ++n > 1)
				fail("the outside directory changed", path);
	closedir(d);
	if (n != 1)
		fail("the outside file went away", path);
	for (int i = 0; i < 2; i++) {
		int f = openat(top_fd, i ? "outside/outside-only-name" : "canary",
			       O_RDONLY | O_NOFOLLOW);
		ssize_t k = f >= 0 ? read(f, buf, sizeof(buf)) : -1;
		if (f >= 0)
			close(f);
		if (k != (ssize_t)strlen(SECRET) || memcmp(buf, SECRET, (size_t)k) != 0)
			fail("a file outside the workspace changed", path);
	}
}

/* Independent of wsfs: relative, no NUL, no empty, "." or ".." component. */
static void
check_accepted(const char *p)
{
	if (p[0] == '/')
		fail("an absolute path accepted", p);
	for (const char *c = p;;) {
		const char *s = strchr(c, '/');
		size_t n = s ? (size_t)(s - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			fail("a path with an empty, . or .. component accepted", p);
		if (!s)
			break;
		c = s + 1;
	}
}

enum { OP_GET, OP_READ, OP_LIST, OP_LSTAT, OP_WRITE, OP_MKDIR, OP_REMOVE, OP_RENAME, _OP_MAX };

/* shim-files.c's take_path */
static int
take_path(const char *v, size_t len, bool root_ok)
{
	int r = len == 0 && root_ok ? 0 : wsfs_check_path(v, len);
	if (r == 0 && len)
		check_accepted(v);
	return r;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *path = NULL, *to = NULL;
	int op;

	if (size < 1 || size > 16384)
		return 0;
	if (top_fd < 0)
		setup();
	op = data[0] % _OP_MAX;
	const char *raw = (const char *)data + 1, *end = (const char *)data + size;
	const char *nl = memchr(raw, '\n', (size_t)(end - raw));
	size_t rawlen = nl ? (size_t)(nl - raw) : (size_t)(end - raw);
	const char *traw = nl ? nl + 1 : end;
	const char *nl2 = memchr(traw, '\n', (size_t)(end - traw));
	size_t tlen = nl2 ? (size_t)(nl2 - traw) : (size_t)(end - traw);
	const char *body = nl2 ? nl2 + 1 : end;
	size_t blen = (size_t)(end - body);

	/* routerd: the URL path is a C string (http-parser stops at no NUL, but
	 * the request line has none); one leading '/' goes */
	if (memchr(raw, '\0', rawlen) || memchr(traw, '\0', tlen))
		return 0;
	char *r0 = strndup(raw, rawlen), *t0 = strndup(traw, tlen);
	if (!r0 || !t0)
		abort();
	const char *rp = r0[0] == '/' ? r0 + 1 : r0;
	if (routes_url_decode(rp, strlen(rp), false, &path) < 0 ||
	    (op == OP_RENAME && routes_url_decode(t0, strlen(t0), true, &to) < 0))
		goto done;
	/* the shim: path (and to) checked first */
	if (take_path(path, strlen(path), op <= OP_LSTAT) < 0 ||
	    (op == OP_RENAME && take_path(to, strlen(to), false) < 0))
		goto done;

	int ws = workspace();
	char *buf = NULL;
	size_t len = 0;
	WsfsEntry *v = NULL;
	size_t nv = 0;
	struct stat st;
	int r = 0;
	mode_t mask = umask(0);
	switch (op) {
	case OP_GET:
	case OP_READ:
		if (path[0] == '\0') {
			if (op == OP_GET)
				r = wsfs_list(ws, path, 10000, &v, &nv);
			break;
		}
		r = wsfs_read(ws, path, 1 << 20, &buf, &len);
		if (r == -EISDIR && op == OP_GET)
			r = wsfs_list(ws, path, 10000, &v, &nv);
		break;
	case OP_LIST: r = wsfs_list(ws, path, 10000, &v, &nv); break;
	case OP_LSTAT:
		r = path[0] ? wsfs_stat(ws, path, &st) : fstat(ws, &st);
		if (r == 0 && is_outside(&st))
			fail("lstat of a file outside", path);
		break;
	case OP_WRITE: r = wsfs_write(ws, path, body, blen, 0644); break;
	case OP_MKDIR: r = wsfs_mkdir(ws, path, 0755); break;
	case OP_REMOVE: r = wsfs_remove(ws, path); break;
	case OP_RENAME: r = wsfs_rename(ws, path, to, false); break;
	}
	umask(mask);
	(void)r;
	if (buf && memmem(buf, len, SECRET, strlen(SECRET)))
		fail("read a file outside", path);
	for (size_t i = 0; i < nv; i++)
		if (!strcmp(v[i].name, "outside-only-name"))
			fail("listed the directory outside", path);
	free(buf);
	wsfs_entries_free(v, nv);
	close(ws);
	check_parent(path);
done:
	free(r0);
	free(t0);
	free(path);
	free(to);
	return 0;
}
