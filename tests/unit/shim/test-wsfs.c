/* SPDX-License-Identifier: MIT */
/*
 * test-wsfs.c — daemons/containerd-shim/wsfs.c: the workspace file API against
 * the escapes of SANDBOX.md §7 "Filesystem and file API".
 *
 * A temporary tree holds ws/ (the workspace) and outside/ (what must never be
 * read or written through ws). ws/ is seeded with what a hostile sandbox would
 * plant: a relative symlink out, an absolute one to /etc, a /proc magic link, a
 * FIFO, a hardlink to an outside file, a device node (as root). The race test
 * flips ws/d between a directory and a symlink to outside/ while writing d/f.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "wsfs.h"

static char top[64];
static int ws = -1;

static void
path_at(char *buf, size_t n, const char *rel)
{
	snprintf(buf, n, "%s/%s", top, rel);
}

static void
put(const char *rel, const char *text)
{
	char p[256];
	FILE *f;

	path_at(p, sizeof(p), rel);
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *
get(const char *rel)
{
	static char buf[256];
	char p[256];
	FILE *f;
	size_t n;

	path_at(p, sizeof(p), rel);
	f = fopen(p, "r");
	if (!f)
		return NULL;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int
setup(void **state)
{
	char p[256], q[256];

	(void)state;
	snprintf(top, sizeof(top), "/tmp/test-wsfs-XXXXXX");
	if (!mkdtemp(top))
		return -1;
	path_at(p, sizeof(p), "ws");
	mkdir(p, 0755);
	path_at(p, sizeof(p), "outside");
	mkdir(p, 0755);
	path_at(p, sizeof(p), "ws/sub");
	mkdir(p, 0755);
	put("outside/secret", "secret");
	put("ws/sub/f", "hello");
	path_at(p, sizeof(p), "ws/link_out");
	if (symlink("../outside", p) < 0)
		return -1;
	path_at(p, sizeof(p), "ws/abs_link");
	if (symlink("/etc", p) < 0)
		return -1;
	path_at(p, sizeof(p), "ws/magic");
	if (symlink("/proc/self/root", p) < 0)
		return -1;
	path_at(p, sizeof(p), "ws/in_link");
	if (symlink("sub", p) < 0)
		return -1;
	path_at(p, sizeof(p), "ws/fifo");
	if (mkfifo(p, 0644) < 0)
		return -1;
	path_at(p, sizeof(p), "outside/secret");
	path_at(q, sizeof(q), "ws/hard");
	if (link(p, q) < 0)
		return -1;
	if (geteuid() == 0) {
		path_at(p, sizeof(p), "ws/null");
		(void)mknod(p, S_IFCHR | 0666, makedev(1, 3));
	}
	path_at(p, sizeof(p), "ws");
	ws = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return ws < 0 ? -1 : 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	close(ws);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	return system(cmd) == 0 ? 0 : -1;
}

static void
test_path_rules(void **state)
{
	static const struct {
		const char *p;
		int want;
	} cases[] = {
	    {"dir/file.txt", 0},
	    {"ü/ok", 0},
	    {"", -EINVAL},
	    {"/abs", -EINVAL},
	    {"a/../b", -EINVAL},
	    {"..", -EINVAL},
	    {".", -EINVAL},
	    {"./x", -EINVAL},
	    {"a//b", -EINVAL},
	    {"a/", -EINVAL},
	    {"\xff\xfe", -EILSEQ},
	    {"\xc0\xaf", -EILSEQ},
	    {"\xed\xa0\x80", -EILSEQ},
	};
	char big[WSFS_PATH_MAX + 2], many[2 * (WSFS_COMPONENTS_MAX + 1) + 1];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (wsfs_check_path(cases[i].p, strlen(cases[i].p)) != cases[i].want)
			fail_msg("'%s': %d", cases[i].p,
				 wsfs_check_path(cases[i].p, strlen(cases[i].p)));
	assert_int_equal(wsfs_check_path("a\0b", 3), -EINVAL);
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(wsfs_check_path(big, strlen(big)), -ENAMETOOLONG);
	for (size_t i = 0; i < WSFS_COMPONENTS_MAX + 1; i++)
		memcpy(many + 2 * i, "a/", 2);
	many[2 * (WSFS_COMPONENTS_MAX + 1) - 1] = '\0';
	assert_int_equal(wsfs_check_path(many, strlen(many)), -ENAMETOOLONG);
}

static void
test_read_rejects_escapes_and_special_files(void **state)
{
	char *data = NULL;
	size_t len = 0;
	time_t t0 = time(NULL);

	(void)state;
	assert_int_equal(wsfs_read(ws, "sub/f", 100, &data, &len), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "hello", 5);
	free(data);
	assert_int_equal(wsfs_read(ws, "in_link/f", 100, &data, &len), 0); /* stays inside */
	free(data);
	assert_int_equal(wsfs_read(ws, "link_out/secret", 100, &data, &len), -EXDEV);
	assert_int_equal(wsfs_read(ws, "abs_link/passwd", 100, &data, &len), -EXDEV);
	/* absolute, so RESOLVE_BENEATH stops it before the magic link matters */
	assert_int_equal(wsfs_read(ws, "magic/etc/passwd", 100, &data, &len), -EXDEV);
	assert_int_equal(wsfs_read(ws, "../outside/secret", 100, &data, &len), -EINVAL);
	assert_int_equal(wsfs_read(ws, "sub", 100, &data, &len), -EISDIR);
	assert_int_equal(wsfs_read(ws, "fifo", 100, &data, &len), -ENOTSUP); /* and no hang */
	assert_true(time(NULL) - t0 < 2);
	assert_int_equal(wsfs_read(ws, "sub/f", 4, &data, &len), -EFBIG);
	assert_int_equal(wsfs_read(ws, "nope", 100, &data, &len), -ENOENT);
	if (geteuid() == 0)
		assert_int_equal(wsfs_read(ws, "null", 100, &data, &len), -ENOTSUP);
}

static void
test_write_is_atomic_and_never_follows(void **state)
{
	struct stat st;
	char p[256];

	(void)state;
	assert_int_equal(wsfs_write(ws, "sub/new", "abc", 3, 0640), 0);
	assert_string_equal(get("ws/sub/new"), "abc");
	path_at(p, sizeof(p), "ws/sub/new");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
	assert_int_equal(wsfs_write(ws, "sub/new", "xy", 2, 0600), 0); /* replace */
	assert_string_equal(get("ws/sub/new"), "xy");
	/* through a symlink out: refused, nothing appears outside */
	assert_int_equal(wsfs_write(ws, "link_out/planted", "x", 1, 0644), -EXDEV);
	assert_null(get("outside/planted"));
	/* the name itself a symlink to /etc: the link is replaced, /etc untouched */
	assert_int_equal(wsfs_write(ws, "abs_link", "file", 4, 0644), 0);
	path_at(p, sizeof(p), "ws/abs_link");
	assert_int_equal(lstat(p, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	/* a FIFO: replaced, no hang */
	assert_int_equal(wsfs_write(ws, "fifo", "f", 1, 0644), 0);
	assert_string_equal(get("ws/fifo"), "f");
	/* a hardlink to an outside file: replaced atomically, the original untouched */
	assert_int_equal(wsfs_write(ws, "hard", "overwritten", 11, 0644), 0);
	assert_string_equal(get("outside/secret"), "secret");
	assert_string_equal(get("ws/hard"), "overwritten");
	assert_int_equal(wsfs_write(ws, "sub", "x", 1, 0644), -EISDIR);
	assert_int_equal(wsfs_write(ws, "magic/tmp/x", "x", 1, 0644), -EXDEV);
	/* no temporary file left behind */
	WsfsEntry *e = NULL;
	size_t n = 0;
	assert_int_equal(wsfs_list(ws, "sub", 100, &e, &n), 0);
	for (size_t i = 0; i < n; i++)
		assert_true(strncmp(e[i].name, ".wsfs-", 6) != 0);
	wsfs_entries_free(e, n);
}

static void
test_stat_list_mkdir_remove_rename(void **state)
{
	struct stat st;
	WsfsEntry *e = NULL;
	size_t n = 0;

	(void)state;
	assert_int_equal(wsfs_stat(ws, "link_out", &st), 0);
	assert_true(S_ISLNK(st.st_mode)); /* lstat: the link, not outside/ */
	assert_int_equal(wsfs_list(ws, "", 100, &e, &n), 0);
	assert_true(n >= 6);
	for (size_t i = 1; i < n; i++)
		assert_true(strcmp(e[i - 1].name, e[i].name) < 0);
	wsfs_entries_free(e, n);
	assert_int_equal(wsfs_list(ws, "", 2, &e, &n), -E2BIG);
	assert_int_equal(wsfs_list(ws, "link_out", 100, &e, &n), -EXDEV);
	assert_int_equal(wsfs_mkdir(ws, "sub/d2", 0755), 0);
	assert_int_equal(wsfs_mkdir(ws, "link_out/d", 0755), -EXDEV);
	assert_int_equal(wsfs_rename(ws, "sub/f", "sub/d2/g", false), 0);
	assert_string_equal(get("ws/sub/d2/g"), "hello");
	put("ws/sub/other", "o");
	assert_int_equal(wsfs_rename(ws, "sub/other", "sub/d2/g", false), -EEXIST);
	assert_int_equal(wsfs_rename(ws, "sub/other", "link_out/x", false), -EXDEV);
	assert_int_equal(wsfs_remove(ws, "sub/d2"), -ENOTEMPTY);
	assert_int_equal(wsfs_remove(ws, "sub/d2/g"), 0);
	assert_int_equal(wsfs_remove(ws, "sub/d2"), 0);
	assert_int_equal(wsfs_remove(ws, "link_out"), 0); /* the link, not its target */
	assert_string_equal(get("outside/secret"), "secret");
}

/* ws/d flips between a directory and a symlink to outside/ (RENAME_EXCHANGE with
 * a twin) while d/f is written over and over: nothing may land outside. */
static void
test_symlink_flip_race(void **state)
{
	char a[256], b[256], o[256];
	pid_t pid;
	int ok = 0, escaped = 0;

	(void)state;
	path_at(a, sizeof(a), "ws/d");
	path_at(b, sizeof(b), "ws/d.twin");
	mkdir(a, 0755);
	assert_int_equal(symlink("../outside", b), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		for (;;)
			(void)renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
	for (int i = 0; i < 5000; i++) {
		int r = wsfs_write(ws, "d/f", "x", 1, 0644);
		ok += r == 0;
		escaped += r == 0 && get("outside/f") != NULL;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	path_at(o, sizeof(o), "outside/f");
	assert_int_equal(access(o, F_OK), -1);
	assert_int_equal(escaped, 0);
	assert_true(ok > 0); /* the test raced for real: some writes went through */
}

/* mkdir -p, rm -r and rename over: the new operations, under the same rules */
static void
test_parents_tree_overwrite(void **state)
{
	char p[256], q[256];
	struct stat st;
	bool created = false;

	(void)state;
	path_at(p, sizeof(p), "ws/lo2");
	assert_int_equal(symlink("../outside", p), 0);
	assert_int_equal(wsfs_mkdir_parents(ws, "t/a/b/c", 0755, &created), 0);
	assert_true(created);
	path_at(p, sizeof(p), "ws/t/a/b/c");
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(wsfs_mkdir_parents(ws, "t/a/b/c", 0755, &created), 0);
	assert_false(created); /* exists: success, not made */
	assert_int_equal(wsfs_mkdir_parents(ws, "t/a", 0755, &created), 0);
	assert_false(created);
	put("ws/t/file", "f");
	assert_int_equal(wsfs_mkdir_parents(ws, "t/file", 0755, &created), -EEXIST);
	assert_int_equal(wsfs_mkdir_parents(ws, "t/file/x", 0755, &created), -ENOTDIR);
	/* never through a symlink out, at any level */
	assert_int_equal(wsfs_mkdir_parents(ws, "lo2/made/deeper", 0755, &created), -EXDEV);
	path_at(p, sizeof(p), "outside/made");
	assert_int_equal(access(p, F_OK), -1);
	assert_int_equal(wsfs_mkdir_parents(ws, "../x", 0755, &created), -EINVAL);

	/* rm -r: a tree with a symlink to outside/ inside it; the link goes, the
	 * outside stays */
	put("ws/t/a/b/c/deep", "d");
	put("ws/t/a/x", "x");
	path_at(p, sizeof(p), "ws/t/a/b/out");
	assert_int_equal(symlink("../../../../outside", p), 0);
	path_at(p, sizeof(p), "ws/t/a/b/abs");
	assert_int_equal(symlink("/etc", p), 0);
	assert_int_equal(wsfs_remove_tree(ws, "t/a", 2), -E2BIG); /* the cap */
	assert_int_equal(wsfs_remove_tree(ws, "t/a", 1000), 0);
	path_at(p, sizeof(p), "ws/t/a");
	assert_int_equal(access(p, F_OK), -1);
	assert_string_equal(get("outside/secret"), "secret");
	assert_int_equal(access("/etc/passwd", F_OK), 0);
	assert_int_equal(wsfs_remove_tree(ws, "t/a", 1000), -ENOENT);
	assert_int_equal(wsfs_remove_tree(ws, "t/file", 1000), 0); /* a file */
	/* the path itself a symlink to a directory out: the link alone goes */
	path_at(p, sizeof(p), "ws/t/lnk");
	assert_int_equal(symlink("../../outside", p), 0);
	assert_int_equal(wsfs_remove_tree(ws, "t/lnk", 1000), 0);
	assert_string_equal(get("outside/secret"), "secret");
	assert_int_equal(wsfs_remove_tree(ws, "lo2/secret", 1000), -EXDEV);
	assert_string_equal(get("outside/secret"), "secret");

	/* rename over an existing name, atomically; without overwrite, -EEXIST */
	put("ws/t/r1", "one");
	put("ws/t/r2", "two");
	assert_int_equal(wsfs_rename(ws, "t/r1", "t/r2", false), -EEXIST);
	assert_int_equal(wsfs_rename(ws, "t/r1", "t/r2", true), 0);
	assert_string_equal(get("ws/t/r2"), "one");
	path_at(p, sizeof(p), "ws/t/r1");
	assert_int_equal(access(p, F_OK), -1);
	/* over a symlink to outside: the link is replaced, not written through */
	path_at(q, sizeof(q), "ws/t/l2");
	assert_int_equal(symlink("../../outside/secret", q), 0);
	assert_int_equal(wsfs_rename(ws, "t/r2", "t/l2", true), 0);
	assert_string_equal(get("outside/secret"), "secret");
	assert_string_equal(get("ws/t/l2"), "one");
	/* the watch's directory opener: beneath the workspace, directories only */
	int dfd = wsfs_open_dir(ws, "");
	assert_true(dfd >= 0);
	close(dfd);
	assert_int_equal(wsfs_mkdir_parents(ws, "t/w", 0755, NULL), 0);
	dfd = wsfs_open_dir(ws, "t/w");
	assert_true(dfd >= 0);
	close(dfd);
	assert_int_equal(wsfs_open_dir(ws, "lo2"), -EXDEV);
	assert_int_equal(wsfs_open_dir(ws, "t/l2"), -ENOTDIR);
	assert_int_equal(wsfs_open_dir(ws, "../x"), -EINVAL);
	assert_int_equal(wsfs_remove_tree(ws, "t", 1000), 0);
	assert_int_equal(wsfs_remove_tree(ws, "lo2", 1000), 0);
	assert_string_equal(get("outside/secret"), "secret");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_path_rules),
	    cmocka_unit_test(test_read_rejects_escapes_and_special_files),
	    cmocka_unit_test(test_write_is_atomic_and_never_follows),
	    cmocka_unit_test(test_stat_list_mkdir_remove_rename),
	    cmocka_unit_test(test_parents_tree_overwrite),
	    cmocka_unit_test(test_symlink_flip_race),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
