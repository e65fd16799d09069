/* SPDX-License-Identifier: MIT */
/*
 * test-snaprec.c — daemons/containerd-shim/snaprec.c: the records stored
 * beside real archives (snapshot_create), listed newest first, loaded and
 * deleted by short id; a record whose archive went is neither; names that
 * are no uuid are refused; pruning takes the record with the archive.
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
#include <jansson.h>

#include "snaprec.h"
#include "snapshot.h"

#define KEY "0123456789abcdef"

static char top[64];

static char *
make(const char *label)
{
	char *rec = NULL;
	Reason err = {""};

	assert_int_equal(snapshot_create(top, KEY, -1, label, &rec, &err), 0);
	assert_int_equal(snaprec_store(top, KEY, rec), 0);
	return rec;
}

static char *
uuid_of(const char *rec)
{
	static char u[64];
	json_t *j = json_loads(rec, 0, NULL);
	snprintf(u, sizeof(u), "%s", json_string_value(json_object_get(j, "id")));
	json_decref(j);
	return u;
}

static bool
exists(const char *uuid, const char *suffix)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s/%s%s", top, KEY, uuid, suffix);
	return access(p, F_OK) == 0;
}

static void
test_store_list_load_delete(void **state)
{
	char **v = NULL, *got = NULL, *r1, *r2, *r3, u1[64], u2[64], u3[64];
	size_t n = 0;

	(void)state;
	snprintf(top, sizeof(top), "/tmp/test-snaprec-XXXXXX");
	assert_non_null(mkdtemp(top));
	/* no directory yet: an empty list */
	assert_int_equal(snaprec_list(top, KEY, 100, &v, &n), 0);
	assert_int_equal(n, 0);
	snaprec_list_free(v, n);
	r1 = make("one");
	usleep(2000); /* createdAt is in ms */
	r2 = make(NULL);
	usleep(2000);
	r3 = make("three");
	snprintf(u1, sizeof(u1), "%s", uuid_of(r1));
	snprintf(u2, sizeof(u2), "%s", uuid_of(r2));
	snprintf(u3, sizeof(u3), "%s", uuid_of(r3));
	assert_true(exists(u1, ".json") && exists(u1, ".tar.zst"));

	assert_int_equal(snaprec_list(top, KEY, 100, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(v[0], r3); /* newest first */
	assert_string_equal(v[1], r2);
	assert_string_equal(v[2], r1);
	snaprec_list_free(v, n);
	assert_int_equal(snaprec_list(top, KEY, 2, &v, &n), 0);
	assert_int_equal(n, 2);
	snaprec_list_free(v, n);

	assert_int_equal(snaprec_load(top, KEY, u2, &got), 0);
	assert_string_equal(got, r2);
	free(got);
	assert_int_equal(snaprec_load(top, KEY, "../../../etc/passwd", &got), -EINVAL);
	assert_int_equal(snaprec_load(top, KEY, "0f8fad5b-d9cb-469f-a165-70867728950e", &got),
			 -ENOENT);
	assert_int_equal(snaprec_load(top, "fedcba9876543210", u2, &got), -ENOENT);

	/* delete: tombstone, archive and record; the others stay */
	assert_int_equal(snaprec_delete(top, KEY, u2), 0);
	assert_true(exists(u2, ".pruned"));
	assert_false(exists(u2, ".tar.zst") || exists(u2, ".json"));
	assert_int_equal(snaprec_delete(top, KEY, u2), -ENOENT);
	assert_int_equal(snaprec_load(top, KEY, u2, &got), -ENOENT);
	assert_int_equal(snaprec_delete(top, KEY, "not-a-uuid"), -EINVAL);
	/* a record whose archive went (by hand) is neither listed nor loaded */
	char p[256];
	snprintf(p, sizeof(p), "%s/%s/%s.tar.zst", top, KEY, u3);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(snaprec_load(top, KEY, u3, &got), -ENOENT);
	assert_int_equal(snaprec_list(top, KEY, 100, &v, &n), 0);
	assert_int_equal(n, 1);
	assert_string_equal(v[0], r1);
	snaprec_list_free(v, n);
	/* pruning takes the record along with its archive */
	free(make("four"));
	assert_int_equal(snapshot_prune(top, KEY, 1, NULL, NULL), 0);
	assert_false(exists(u1, ".tar.zst") || exists(u1, ".json"));
	assert_true(exists(u1, ".pruned"));
	/* a record that is not one of snapshot_create's is refused */
	assert_int_equal(snaprec_store(top, KEY, "{\"id\":\"../x\"}"), -EINVAL);
	assert_int_equal(snaprec_store(top, KEY, "nonsense"), -EINVAL);
	free(r1);
	free(r2);
	free(r3);
	snprintf(p, sizeof(p), "rm -rf '%s'", top);
	assert_int_equal(system(p), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_store_list_load_delete),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
