/* SPDX-License-Identifier: MIT */
/*
 * test-adopt.c — the init wire version in HELLO: a shim adopts an init of its
 * version, or one from before the field (0, the same wire), and refuses a
 * newer one (-EPROTONOSUPPORT) or anything that is not a HELLO (-EPROTO).
 * And the records: an exec record takes over <id>/.exec-free and a released
 * one becomes it again (one inode for every exec), the sandbox record is
 * rewritten in place, each holding exactly its fields afterwards.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "adopt.h"

static void
test_hello_versions(void **state)
{
	InitMsg m = {.type = INIT_MSG_HELLO, .status = (int32_t)INIT_PROTO_VERSION};
	uint32_t v = 99;

	(void)state;
	assert_int_equal(adopt_hello_check(&m, &v), 0);
	assert_int_equal(v, INIT_PROTO_VERSION);
	m.status = 0;
	assert_int_equal(adopt_hello_check(&m, &v), 0);
	assert_int_equal(v, 0);
	m.status = (int32_t)(INIT_PROTO_VERSION + 1);
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTONOSUPPORT);
	assert_int_equal(v, INIT_PROTO_VERSION + 1);
	m.status = -1; /* 0xffffffff: not a version we speak either */
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTONOSUPPORT);
	m = (InitMsg){.type = INIT_MSG_ADOPT, .status = (int32_t)INIT_PROTO_VERSION};
	assert_int_equal(adopt_hello_check(&m, &v), -EPROTO);
}

/* The HELLO's type and version stay where every shim looks for them. */
static void
test_hello_layout_frozen(void **state)
{
	(void)state;
	assert_int_equal(offsetof(InitMsg, type), 0);
	assert_int_equal(offsetof(InitMsg, status), 20);
	assert_int_equal(INIT_MSG_HELLO, 13);
}

#define ID "0123456789abcdef"

/* The inode of <dfd>/ID/name, 0 when there is none. */
static ino_t
ino_of(int dfd, const char *name)
{
	char p[64];
	struct stat st;

	snprintf(p, sizeof(p), ID "/%s", name);
	return fstatat(dfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st.st_ino : 0;
}

/* want: a string literal; its terminating NUL is the last field's */
#define assert_content(dfd, name, want) assert_content_len(dfd, name, want, sizeof(want))

static void
assert_content_len(int dfd, const char *name, const char *want, size_t len)
{
	char p[64], buf[256];
	int fd;
	ssize_t n;

	snprintf(p, sizeof(p), ID "/%s", name);
	fd = openat(dfd, p, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	n = read(fd, buf, sizeof(buf));
	close(fd);
	assert_int_equal(n, (ssize_t)len);
	assert_memory_equal(buf, want, len);
}

static void
test_records_reuse_their_inodes(void **state)
{
	char top[] = "/tmp/rw-adopt-XXXXXX", cmd[64];
	int dfd;
	ino_t spare, sandbox;

	(void)state;
	assert_non_null(mkdtemp(top));
	dfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	assert_int_equal(mkdirat(dfd, ID, 0700), 0);

	/* a pooled sandbox: no key yet, and its first exec's record made ahead */
	assert_int_equal(adopt_save_sandbox(dfd, ID, "", NULL, NULL, ID), 0);
	assert_int_equal(adopt_spare_exec(dfd, ID), 0);
	assert_int_equal(adopt_spare_exec(dfd, ID), 0); /* there already: fine */
	spare = ino_of(dfd, ".exec-free");
	sandbox = ino_of(dfd, "sandbox");
	assert_true(spare != 0 && sandbox != 0);

	/* claimed: the same file, the new fields, nothing left of the old ones */
	assert_int_equal(adopt_update_sandbox(dfd, ID, "thread-key", "run-1", "thread-key", ID), 0);
	assert_int_equal(ino_of(dfd, "sandbox"), sandbox);
	assert_content(dfd, "sandbox", "thread-key\0run-1\0thread-key\0" ID);
	assert_int_equal(adopt_update_sandbox(dfd, ID, "k", NULL, NULL, ID), 0);
	assert_content(dfd, "sandbox", "k\0\0\0" ID);

	/* an exec takes the spare over, its release gives it back */
	assert_int_equal(adopt_save_exec(dfd, ID, 7, "run-long-id", "thread", 123, true), 0);
	assert_int_equal(ino_of(dfd, "exec-7"), spare);
	assert_int_equal(ino_of(dfd, ".exec-free"), 0);
	assert_content(dfd, "exec-7",
		       "run-long-id\0thread\0"
		       "123\0"
		       "1");
	adopt_forget_exec(dfd, ID, 7);
	assert_int_equal(ino_of(dfd, "exec-7"), 0);
	assert_int_equal(ino_of(dfd, ".exec-free"), spare);
	/* a shorter record over the longer one's file holds only its own fields */
	assert_int_equal(adopt_save_exec(dfd, ID, 8, "r", "t", 0, false), 0);
	assert_int_equal(ino_of(dfd, "exec-8"), spare);
	assert_content(dfd, "exec-8",
		       "r\0t\0"
		       "0\0"
		       "0");
	/* no spare: a new file; two released: one is kept */
	assert_int_equal(adopt_save_exec(dfd, ID, 9, "r9", NULL, 0, false), 0);
	assert_true(ino_of(dfd, "exec-9") != 0 && ino_of(dfd, "exec-9") != spare);
	adopt_forget_exec(dfd, ID, 8);
	adopt_forget_exec(dfd, ID, 9);
	assert_int_equal(ino_of(dfd, "exec-8"), 0);
	assert_int_equal(ino_of(dfd, "exec-9"), 0);
	assert_int_equal(ino_of(dfd, ".exec-free"), spare);

	adopt_forget_sandbox(dfd, ID);
	assert_int_equal(faccessat(dfd, ID, F_OK, AT_SYMLINK_NOFOLLOW), -1);
	close(dfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	assert_int_equal(system(cmd), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_hello_versions),
	    cmocka_unit_test(test_hello_layout_frozen),
	    cmocka_unit_test(test_records_reuse_their_inodes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
