/* SPDX-License-Identifier: MIT */
/*
 * test-image-store.c — daemons/containerd-shim/image-store.c: names; a root
 * filesystem tarball imported into a temporary store (mount points made,
 * imported once under two names), looked up, listed, removed name by name
 * (the unpacked copy goes with the last); a refused import leaves nothing;
 * gc removes an unpacked image no name points to.
 */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
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
#include <unistd.h>

#include <cmocka.h>

#include "image-store.h"
#include "snapshot.h"

static char top[64];
static ImageStore st;

static int
setup(void **state)
{
	(void)state;
	snprintf(top, sizeof(top), "/tmp/rw-imgstore-XXXXXX");
	assert_non_null(mkdtemp(top));
	st = (ImageStore){.max_bytes = 1 << 20, .max_entries = 100};
	snprintf(st.dir, sizeof(st.dir), "%s/state/images", top);
	return 0;
}

static int
teardown(void **state)
{
	int fd = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	(void)state;
	(void)snapshot_rm_rf(fd, top + 5);
	close(fd);
	return 0;
}

/* A tarball at top/name: "d NAME", "f NAME TEXT", "c NAME" (a device). */
static const char *
tarball(const char *name, const char *const *spec)
{
	static char path[128];
	struct archive *a = archive_write_new();

	snprintf(path, sizeof(path), "%s/%s", top, name);
	archive_write_set_format_pax_restricted(a);
	assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
	for (; *spec; spec++) {
		char kind = (*spec)[0], n[64] = "", arg[64] = "";
		struct archive_entry *e = archive_entry_new();
		sscanf(*spec + 2, "%63s %63s", n, arg);
		archive_entry_set_pathname(e, n);
		archive_entry_set_perm(e, 0755);
		archive_entry_set_filetype(e, kind == 'd'   ? AE_IFDIR
					      : kind == 'c' ? AE_IFCHR
							    : AE_IFREG);
		if (kind == 'f')
			archive_entry_set_size(e, (la_int64_t)strlen(arg));
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (kind == 'f')
			assert_int_equal(archive_write_data(a, arg, strlen(arg)),
					 (ssize_t)strlen(arg));
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	return path;
}

static size_t
count(const char *sub)
{
	char p[4200];
	struct stat sb;
	size_t n = 0;

	snprintf(p, sizeof(p), "%s/%s", st.dir, sub);
	if (stat(p, &sb) < 0)
		return 0;
	int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	while (d && (de = readdir(d)))
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void
test_names(void **state)
{
	(void)state;
	assert_true(image_name_ok("busybox"));
	assert_true(image_name_ok("claude-code_2.1"));
	assert_false(image_name_ok(""));
	assert_false(image_name_ok("-x"));
	assert_false(image_name_ok(".x"));
	assert_false(image_name_ok("Busybox"));
	assert_false(image_name_ok("a/b"));
	assert_false(image_name_ok(".."));
	assert_false(
	    image_name_ok("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

static void
test_import_lookup_list_remove(void **state)
{
	const char *spec[] = {"d ./bin", "f ./bin/tool echo", "d ./etc", "f ./etc/os-release ID=t",
			      NULL};
	const char *tar;
	ImageInfo info, *v;
	Reason why = {""};
	char p[4300];
	struct stat sb;
	size_t n;

	(void)state;
	tar = tarball("root.tar", spec);
	assert_int_equal(image_import(&st, "one", tar, &info, &why), 0);
	assert_string_equal(info.source, "rootfs");
	assert_int_equal(info.entries, 4);
	assert_true(info.disk_bytes > 0);
	/* the mount points a sandbox needs */
	for (const char *m = "workspace\0tmp\0dev\0proc\0etc/passwd\0etc/hostname\0"; *m;
	     m += strlen(m) + 1) {
		snprintf(p, sizeof(p), "%s/%s", info.rootfs, m);
		assert_int_equal(stat(p, &sb), 0);
	}
	image_info_done(&info);
	/* imported once */
	assert_int_equal(image_import(&st, "two", tar, NULL, &why), 0);
	assert_int_equal(count("unpacked"), 1);
	assert_int_equal(image_list(&st, true, &v, &n, &why), 0);
	assert_int_equal(n, 2);
	assert_string_equal(v[0].name, "one");
	assert_string_equal(v[1].name, "two");
	assert_string_equal(v[0].digest, v[1].digest);
	assert_int_equal(v[0].mounts, 0);
	image_infos_free(v, n);
	/* removed name by name; the copy goes with the last */
	assert_int_equal(image_remove(&st, "one", &why), 0);
	assert_int_equal(count("unpacked"), 1);
	assert_int_equal(image_lookup(&st, "one", &info, &why), -ENOENT);
	assert_int_equal(image_remove(&st, "two", &why), 0);
	assert_int_equal(count("unpacked"), 0);
	assert_int_equal(image_remove(&st, "two", &why), -ENOENT);
	assert_int_equal(image_import(&st, "../x", tar, NULL, &why), -EINVAL);
}

static void
test_refused_import_leaves_nothing(void **state)
{
	const char *spec[] = {"d ./etc", "c ./etc/mem", NULL};
	Reason why = {""};

	(void)state;
	assert_int_equal(image_import(&st, "bad", tarball("bad.tar", spec), NULL, &why), -EINVAL);
	assert_non_null(strstr(why.msg, "device"));
	assert_int_equal(count("unpacked"), 0);
	assert_int_equal(count("staging"), 0);
	assert_int_equal(count("names"), 0);
	assert_int_equal(image_import(&st, "bad", "/nonexistent/x.tar", NULL, &why), -ENOENT);
}

static void
test_gc(void **state)
{
	char p[4200];

	(void)state;
	/* an unpacked image no name points to (a name file removed by hand) */
	const char *spec[] = {"d ./bin", NULL};
	assert_int_equal(image_import(&st, "g", tarball("g.tar", spec), NULL, NULL), 0);
	snprintf(p, sizeof(p), "%s/names/g", st.dir);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(count("unpacked"), 1);
	assert_int_equal(image_gc(&st, NULL), 1);
	assert_int_equal(count("unpacked"), 0);
	assert_int_equal(count("trash"), 0);
	assert_int_equal(
	    image_mounts("0000000000000000000000000000000000000000000000000000000000000000"), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_names),
	    cmocka_unit_test(test_import_lookup_list_remove),
	    cmocka_unit_test(test_refused_import_leaves_nothing),
	    cmocka_unit_test(test_gc),
	};
	return cmocka_run_group_tests_name("image-store", tests, setup, teardown);
}
