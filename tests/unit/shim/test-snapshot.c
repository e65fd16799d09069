/* SPDX-License-Identifier: MIT */
/*
 * test-snapshot.c — daemons/containerd-shim/snapshot.c: the pure checks
 * (symlink targets, uuids) and a create → verify → unpack round trip in a
 * temporary directory, with the records snapshot_verify must refuse.
 */
#include "config.h"

#include <dirent.h>
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "snapshot.h"

static void
test_link_targets(void **state)
{
	(void)state;
	/* every target is inert: nothing resolves through a restored link */
	assert_true(snapshot_link_target_ok("a", 0));
	assert_true(snapshot_link_target_ok("../../x", 1));
	assert_true(snapshot_link_target_ok("/usr/bin/python3", 3));
	assert_false(snapshot_link_target_ok("", 3));
}

static void
test_uuids(void **state)
{
	(void)state;
	assert_true(snapshot_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950e"));
	assert_false(snapshot_uuid_ok("0F8FAD5B-D9CB-469F-A165-70867728950E"));
	assert_false(snapshot_uuid_ok("../../../../../../etc/passwd-0000000"));
	assert_false(snapshot_uuid_ok("0f8fad5b-d9cb-469f-a165-70867728950"));
	assert_false(snapshot_uuid_ok(NULL));
}

static void
put(const char *dir, const char *name, const char *data)
{
	char p[512];
	FILE *f;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "we");
	assert_non_null(f);
	fputs(data, f);
	fclose(f);
}

static void
test_round_trip_and_refusals(void **state)
{
	char top[] = "/tmp/test-snapshot-XXXXXX", ws[128], bk[128], p[256], buf[64];
	char *rec = NULL, *bad = NULL;
	Reason err = {""};
	int wfd, afd = -1, pfd, r;
	json_t *j;
	ssize_t n;

	(void)state;
	assert_non_null(mkdtemp(top));
	snprintf(ws, sizeof(ws), "%s/ws", top);
	snprintf(bk, sizeof(bk), "%s/backups", top);
	assert_int_equal(mkdir(ws, 0700), 0);
	snprintf(p, sizeof(p), "%s/sub", ws);
	assert_int_equal(mkdir(p, 0755), 0);
	put(ws, "a", "alpha");
	put(ws, "sub/b", "beta");
	snprintf(p, sizeof(p), "%s/l", ws);
	assert_int_equal(symlink("sub/b", p), 0);
	snprintf(p, sizeof(p), "%s/fifo", ws);
	assert_int_equal(mkfifo(p, 0600), 0);
	snprintf(p, sizeof(p), "%s/a", ws);
	assert_int_equal(chmod(p, 04755), 0); /* stored without the setuid bit */

	wfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(wfd >= 0);
	r = snapshot_create(bk, "0123456789abcdef", wfd, "lbl", &rec, &err);
	assert_int_equal(r, 0);
	j = json_loads(rec, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "files")), 2);
	assert_string_equal(json_string_value(json_object_get(j, "label")), "lbl");

	/* ours, for this key only */
	r = snapshot_verify(bk, "0123456789abcdef", rec, strlen(rec), &afd, &err);
	assert_int_equal(r, 0);
	assert_int_equal(
	    snapshot_verify(bk, "fedcba9876543210", rec, strlen(rec), &(int){-1}, &err), -EINVAL);
	json_object_set_new(j, "sha256",
			    json_string("0000000000000000000000000000000000000000000000"
					"000000000000000000"));
	bad = json_dumps(j, JSON_COMPACT);
	assert_int_equal(
	    snapshot_verify(bk, "0123456789abcdef", bad, strlen(bad), &(int){-1}, &err), -EBADMSG);
	assert_int_equal(snapshot_verify(bk, "0123456789abcdef", "nope", 4, &(int){-1}, &err),
			 -EINVAL);

	/* unpack next to the workspace, into an empty staging directory */
	pfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = snapshot_unpack(afd, pfd, "staging", getuid(), getgid(), 1 << 20, 100, &err);
	assert_int_equal(r, 0);
	snprintf(p, sizeof(p), "%s/staging/l", top);
	n = readlink(p, buf, sizeof(buf) - 1);
	assert_int_equal(n, 5);
	buf[n] = '\0';
	assert_string_equal(buf, "sub/b");
	snprintf(p, sizeof(p), "%s/staging/a", top);
	{
		struct stat st;
		assert_int_equal(stat(p, &st), 0);
		assert_int_equal(st.st_mode & 07777, 0755);
	}
	snprintf(p, sizeof(p), "%s/staging/fifo", top);
	assert_int_equal(access(p, F_OK), -1);

	/* caps: the staging directory goes away again */
	assert_int_equal(
	    snapshot_unpack(afd, pfd, "staging2", getuid(), getgid(), 1 << 20, 2, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "restore_max_entries"));
	assert_int_equal(snapshot_unpack(afd, pfd, "staging2", getuid(), getgid(), 4, 100, &err),
			 -EINVAL);
	snprintf(p, sizeof(p), "%s/staging2", top);
	assert_int_equal(access(p, F_OK), -1);

	assert_int_equal(snapshot_rm_rf(pfd, "staging"), 0);
	assert_int_equal(snapshot_rm_rf(pfd, "ws"), 0);
	assert_int_equal(snapshot_rm_rf(pfd, "backups"), 0);
	assert_int_equal(rmdir(top), 0);
	close(pfd);
	close(afd);
	close(wfd);
	json_decref(j);
	free(bad);
	free(rec);
}

/* backups_keep: the oldest go (tombstone left), the newest and the spare stay,
 * temporaries of a killed job go; a pruned record is -ENOENT, not -EINVAL. */
static void
test_prune(void **state)
{
	char top[] = "/tmp/test-snapshot-XXXXXX", bk[128], dir[160], p[256];
	char *rec[5] = {NULL};
	Reason err = {""};
	unsigned pruned = 99;
	int fd = -1, n = 0;
	DIR *d;
	struct dirent *de;

	(void)state;
	assert_non_null(mkdtemp(top));
	snprintf(bk, sizeof(bk), "%s/backups", top);
	snprintf(dir, sizeof(dir), "%s/0123456789abcdef", bk);
	/* nothing there yet: nothing to do */
	assert_int_equal(snapshot_prune(bk, "0123456789abcdef", 2, NULL, &pruned), 0);
	assert_int_equal(pruned, 0);
	for (int i = 0; i < 5; i++) {
		struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
		assert_int_equal(snapshot_create(bk, "0123456789abcdef", -1, NULL, &rec[i], &err),
				 0);
		nanosleep(&ts, NULL); /* distinct mtimes */
	}
	put(dir, ".00000000-0000-4000-8000-000000000000.tar.zst.tmp", "partial");
	put(dir, "not-a-uuid.tar.zst", "kept: not ours by name");

	/* keep 0: only the temporary goes */
	assert_int_equal(snapshot_prune(bk, "0123456789abcdef", 0, NULL, &pruned), 0);
	assert_int_equal(pruned, 0);
	snprintf(p, sizeof(p), "%s/.00000000-0000-4000-8000-000000000000.tar.zst.tmp", dir);
	assert_int_equal(access(p, F_OK), -1);

	/* keep 2, sparing the oldest by uuid: 1, 2 go; 0, 3, 4 stay */
	{
		json_t *j0 = json_loads(rec[0], 0, NULL);
		assert_int_equal(snapshot_prune(bk, "0123456789abcdef", 2,
						json_string_value(json_object_get(j0, "id")),
						&pruned),
				 0);
		json_decref(j0);
	}
	assert_int_equal(pruned, 2);
	for (int i = 0; i < 5; i++) {
		int r = snapshot_verify(bk, "0123456789abcdef", rec[i], strlen(rec[i]), &fd, &err);
		if (i == 1 || i == 2) {
			assert_int_equal(r, -ENOENT);
			assert_non_null(strstr(err.msg, "backup_not_found"));
		} else {
			assert_int_equal(r, 0);
			close(fd);
		}
	}
	d = opendir(dir);
	assert_non_null(d);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	assert_int_equal(n, 3 + 2 + 1); /* archives, tombstones, the odd name */

	fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(snapshot_rm_rf(fd, "backups"), 0);
	close(fd);
	assert_int_equal(rmdir(top), 0);
	for (int i = 0; i < 5; i++)
		free(rec[i]);
}

/* Hardlinks stay links (stored once), holes stay holes, absolute symlinks are
 * restored as they are; what the restore would refuse is refused at snapshot
 * time (not_restorable) and nothing is stored. */
static void
test_links_sparse_limits(void **state)
{
	char top[] = "/tmp/test-snapshot-XXXXXX", ws[128], bk[128], p[256], q[256], buf[64];
	char *rec = NULL;
	Reason err = {""};
	struct stat a, b;
	json_t *j;
	int wfd, pfd, afd = -1, fd;
	ssize_t n;

	(void)state;
	assert_non_null(mkdtemp(top));
	snprintf(ws, sizeof(ws), "%s/ws", top);
	snprintf(bk, sizeof(bk), "%s/backups", top);
	assert_int_equal(mkdir(ws, 0700), 0);
	put(ws, "big", "0123456789");
	for (int i = 0; i < 5; i++) {
		snprintf(p, sizeof(p), "%s/big", ws);
		snprintf(q, sizeof(q), "%s/link%d", ws, i);
		assert_int_equal(link(p, q), 0);
	}
	snprintf(p, sizeof(p), "%s/sparse", ws);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, "end", 3, 64 << 20), 3);
	close(fd);
	snprintf(p, sizeof(p), "%s/python", ws);
	assert_int_equal(symlink("/usr/bin/python3", p), 0);

	wfd = open(ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(wfd >= 0);
	/* 6 names of 10 bytes stored once, 64 MiB of hole: all far under 1 MiB */
	assert_int_equal(
	    snapshot_create_limited(bk, "0123456789abcdef", wfd, NULL, 65 << 20, 100, &rec, &err),
	    0);
	j = json_loads(rec, 0, NULL);
	assert_true(json_integer_value(json_object_get(j, "bytes")) < (1 << 20));
	json_decref(j);
	assert_int_equal(snapshot_verify(bk, "0123456789abcdef", rec, strlen(rec), &afd, &err), 0);
	pfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_int_equal(
	    snapshot_unpack(afd, pfd, "staging", getuid(), getgid(), 65 << 20, 100, &err), 0);
	snprintf(p, sizeof(p), "%s/staging/big", top);
	snprintf(q, sizeof(q), "%s/staging/link4", top);
	assert_int_equal(stat(p, &a), 0);
	assert_int_equal(stat(q, &b), 0);
	assert_int_equal(a.st_ino, b.st_ino);
	assert_int_equal(a.st_nlink, 6);
	snprintf(p, sizeof(p), "%s/staging/sparse", top);
	assert_int_equal(stat(p, &a), 0);
	assert_int_equal(a.st_size, (64 << 20) + 3);
	assert_true(a.st_blocks < 1024); /* 512-byte blocks: under 512 KiB on disk */
	fd = open(p, O_RDONLY);
	assert_int_equal(pread(fd, buf, 3, 64 << 20), 3);
	assert_memory_equal(buf, "end", 3);
	close(fd);
	snprintf(p, sizeof(p), "%s/staging/python", top);
	n = readlink(p, buf, sizeof(buf) - 1);
	assert_int_equal(n, 16);
	buf[n] = '\0';
	assert_string_equal(buf, "/usr/bin/python3");
	free(rec);
	rec = NULL;

	/* over the limits: refused at snapshot time, the path named, nothing left */
	assert_int_equal(
	    snapshot_create_limited(bk, "0123456789abcdef", wfd, NULL, 1 << 20, 100, &rec, &err),
	    -SNAPSHOT_NOT_RESTORABLE);
	assert_non_null(strstr(err.msg, "'sparse'"));
	assert_non_null(strstr(err.msg, "restore_max_bytes"));
	assert_int_equal(
	    snapshot_create_limited(bk, "0123456789abcdef", wfd, NULL, 65 << 20, 3, &rec, &err),
	    -SNAPSHOT_NOT_RESTORABLE);
	assert_non_null(strstr(err.msg, "restore_max_entries"));
	assert_null(rec);

	close(afd);
	close(wfd);
	assert_int_equal(snapshot_rm_rf(pfd, "staging"), 0);
	assert_int_equal(snapshot_rm_rf(pfd, "ws"), 0);
	assert_int_equal(snapshot_rm_rf(pfd, "backups"), 0);
	close(pfd);
	assert_int_equal(rmdir(top), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_link_targets),
	    cmocka_unit_test(test_uuids),
	    cmocka_unit_test(test_round_trip_and_refusals),
	    cmocka_unit_test(test_prune),
	    cmocka_unit_test(test_links_sparse_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
