/* SPDX-License-Identifier: MIT */
/*
 * test-sandbox-key.c — daemons/containerd-shim/sandbox-key.c: a sandbox
 * directory belongs to one key. Two keys are forced onto one sandbox id (the
 * id of the first, as a 64-bit hash collision would give the second): the
 * second is refused, whether the directory was claimed at creation or is an
 * old one without a key file that the first key reached first; prefixes,
 * planted symlinks and oversized files do not pass either.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "sandbox-key.h"
#include "shim.h"

static char top[64];
static int dfd = -1;

static int
setup(void **state)
{
	snprintf(top, sizeof(top), "/tmp/rw-sbkey-XXXXXX");
	assert_non_null(mkdtemp(top));
	dfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];
	close(dfd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static int
claim(const char *id, const char *key, bool create)
{
	return sandbox_key_claim(dfd, id, key, strlen(key), SANDBOX_KEY_MAX, create);
}

static char *
slurp(const char *rel)
{
	static char buf[512];
	char p[256];
	ssize_t n;
	int fd;

	snprintf(p, sizeof(p), "%s/%s", top, rel);
	fd = open(p, O_RDONLY | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static void
test_sandbox_key_collision_is_refused(void **state)
{
	char id[17];
	struct stat st;
	char p[256];

	/* thread A's sandbox is made: its directory records A */
	assert_int_equal(shim_sandbox_id("thread-A", 8, id), 0);
	assert_int_equal(claim(id, "thread-A", true), 0);
	assert_null(slurp("key")); /* nothing at the top */
	snprintf(p, sizeof(p), "%s/key", id);
	assert_string_equal(slurp(p), "thread-A");
	snprintf(p, sizeof(p), "%s/%s/key", top, id);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	/* thread B hashes to the same id (forced): refused, for reads and writes */
	assert_int_equal(claim(id, "thread-B", false), -EEXIST);
	assert_int_equal(claim(id, "thread-B", true), -EEXIST);
	/* neither a prefix nor an extension of the key is the key */
	assert_int_equal(claim(id, "thread-", false), -EEXIST);
	assert_int_equal(claim(id, "thread-AB", false), -EEXIST);
	assert_int_equal(claim(id, "Thread-A", false), -EEXIST);
	/* A still gets in, and B's attempts changed nothing */
	assert_int_equal(claim(id, "thread-A", false), 0);
	assert_int_equal(claim(id, "thread-A", true), 0);
	snprintf(p, sizeof(p), "%s/key", id);
	assert_string_equal(slurp(p), "thread-A");
}

static void
test_sandbox_key_absent_directory(void **state)
{
	struct stat st;
	char p[256];

	/* a read of a key that never had a workspace makes nothing */
	assert_int_equal(claim("00000000000000aa", "k1", false), 0);
	snprintf(p, sizeof(p), "%s/00000000000000aa", top);
	assert_int_equal(stat(p, &st), -1);
	assert_int_equal(errno, ENOENT);
	/* a write makes the directory (0700) and claims it */
	assert_int_equal(claim("00000000000000aa", "k1", true), 0);
	assert_int_equal(stat(p, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_string_equal(slurp("00000000000000aa/key"), "k1");
	assert_int_equal(claim("00000000000000aa", "k2", true), -EEXIST);
}

static void
test_sandbox_key_old_directory_is_claimed_once(void **state)
{
	char p[256];

	/* made before the key file existed: a workspace and nothing else */
	snprintf(p, sizeof(p), "%s/00000000000000bb", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/00000000000000bb/workspace", top);
	assert_int_equal(mkdir(p, 0700), 0);
	/* the first key to reach it (even by a read) claims it; the next is refused */
	assert_int_equal(claim("00000000000000bb", "old-thread", false), 0);
	assert_string_equal(slurp("00000000000000bb/key"), "old-thread");
	assert_null(slurp("00000000000000bb/key.tmp"));
	assert_int_equal(claim("00000000000000bb", "other-thread", true), -EEXIST);
	assert_int_equal(claim("00000000000000bb", "old-thread", true), 0);
	/* a stale temporary file from a crash does not get in the way */
	snprintf(p, sizeof(p), "%s/00000000000000cc", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/00000000000000cc/key.tmp", top);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs("half", f);
	fclose(f);
	assert_int_equal(claim("00000000000000cc", "k3", false), 0);
	assert_string_equal(slurp("00000000000000cc/key"), "k3");
	/* an empty key file (a claim a power loss dropped: it is not fsynced) is
	 * no claim: the first key claims it, the next is refused */
	snprintf(p, sizeof(p), "%s/00000000000000c0", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/00000000000000c0/key", top);
	f = fopen(p, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(claim("00000000000000c0", "k6", true), 0);
	assert_string_equal(slurp("00000000000000c0/key"), "k6");
	assert_null(slurp("00000000000000c0/key.tmp"));
	assert_int_equal(claim("00000000000000c0", "k7", true), -EEXIST);
	assert_int_equal(claim("00000000000000c0", "k6", false), 0);
}

static void
test_sandbox_key_planted_files(void **state)
{
	char p[256], big[SANDBOX_KEY_MAX + 2];

	/* a symlink as the key file (pointing at a file that holds the key) */
	snprintf(p, sizeof(p), "%s/00000000000000dd", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/elsewhere", top);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs("k4", f);
	fclose(f);
	snprintf(p, sizeof(p), "%s/00000000000000dd/key", top);
	assert_int_equal(symlink("../elsewhere", p), 0);
	assert_int_equal(claim("00000000000000dd", "k4", false), -EEXIST);
	/* a directory as the key file */
	snprintf(p, sizeof(p), "%s/00000000000000ee", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/00000000000000ee/key", top);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(claim("00000000000000ee", "k5", false), -EEXIST);
	/* a file longer than any key, starting with the key */
	snprintf(p, sizeof(p), "%s/00000000000000ff", top);
	assert_int_equal(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/00000000000000ff/key", top);
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	f = fopen(p, "w");
	assert_non_null(f);
	fputs(big, f);
	fclose(f);
	big[SANDBOX_KEY_MAX] = '\0';
	assert_int_equal(claim("00000000000000ff", big, false), -EEXIST);
	/* the directory itself a symlink: not followed */
	snprintf(p, sizeof(p), "%s/0000000000000011", top);
	assert_int_equal(symlink("00000000000000aa", p), 0);
	assert_int_equal(claim("0000000000000011", "k1", false), -ENOTDIR);
	/* bad keys */
	assert_int_equal(sandbox_key_claim(dfd, "0000000000000022", "", 0, SANDBOX_KEY_MAX, true),
			 -EINVAL);
	assert_int_equal(
	    sandbox_key_claim(dfd, "0000000000000022", "a\0b", 3, SANDBOX_KEY_MAX, true), -EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sandbox_key_collision_is_refused),
	    cmocka_unit_test(test_sandbox_key_absent_directory),
	    cmocka_unit_test(test_sandbox_key_old_directory_is_claimed_once),
	    cmocka_unit_test(test_sandbox_key_planted_files),
	};
	return cmocka_run_group_tests_name("sandbox-key", tests, setup, teardown);
}
