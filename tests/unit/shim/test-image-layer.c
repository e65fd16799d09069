/* SPDX-License-Identifier: MIT */
/*
 * test-image-layer.c — daemons/containerd-shim/image-layer.c: the name,
 * symlink and whiteout checks of an image layer, then layers written here
 * with libarchive and applied to a temporary root: whiteouts (plain and
 * opaque) remove what the layers below made; a write through a symlink, a
 * '..' link, a device node, an escaping whiteout, a hardlink out of the root,
 * a digest that does not match and the caps are refused, and nothing is
 * created outside the root.
 */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
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

#include "image-layer.h"
#include "snapshot.h"

static char top[64];
static int root_fd = -1;

static int
setup(void **state)
{
	(void)state;
	snprintf(top, sizeof(top), "/tmp/rw-imglayer-XXXXXX");
	assert_non_null(mkdtemp(top));
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

static void
test_path_clean(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(image_path_clean("./usr//bin/./x", out, sizeof(out)), 0);
	assert_string_equal(out, "usr/bin/x");
	assert_int_equal(image_path_clean("etc/", out, sizeof(out)), 0);
	assert_string_equal(out, "etc");
	assert_int_equal(image_path_clean("./", out, sizeof(out)), 0);
	assert_string_equal(out, "");
	assert_int_equal(image_path_clean("/etc/passwd", out, sizeof(out)), -EINVAL);
	assert_int_equal(image_path_clean("a/../../etc", out, sizeof(out)), -EINVAL);
	assert_int_equal(image_path_clean("..", out, sizeof(out)), -EINVAL);
	assert_int_equal(image_path_clean("a/..b/c", out, sizeof(out)), 0); /* a name, not .. */
	assert_int_equal(
	    image_path_clean("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			     out, sizeof(out)),
	    -ENAMETOOLONG);
}

static void
test_symlink_escapes(void **state)
{
	(void)state;
	assert_false(image_symlink_escapes("bin", "usr/bin"));
	assert_false(image_symlink_escapes("usr/bin/awk", "/etc/alternatives/awk")); /* in-root */
	assert_false(image_symlink_escapes("etc/os-release", "../usr/lib/os-release"));
	assert_true(image_symlink_escapes("etc/os-release", "../../etc/shadow"));
	assert_true(image_symlink_escapes("a", ".."));
	assert_false(image_symlink_escapes("a/b/c", "../../x"));
	assert_true(image_symlink_escapes("a/b/c", "../../../x"));
	assert_true(image_symlink_escapes("a/b", "x/../../../y"));
}

static void
test_whiteout_names(void **state)
{
	char name[256];
	bool opaque;

	(void)state;
	assert_int_equal(image_whiteout("opt/file", &opaque, name, sizeof(name)), 0);
	assert_int_equal(image_whiteout("opt/.wh.gone", &opaque, name, sizeof(name)), 1);
	assert_false(opaque);
	assert_string_equal(name, "gone");
	assert_int_equal(image_whiteout("opt/.wh..wh..opq", &opaque, name, sizeof(name)), 1);
	assert_true(opaque);
	assert_int_equal(image_whiteout(".wh..", &opaque, name, sizeof(name)), -EINVAL);
	assert_int_equal(image_whiteout("x/.wh.", &opaque, name, sizeof(name)), -EINVAL);
	assert_int_equal(image_whiteout("x/.wh..wh.y", &opaque, name, sizeof(name)), -EINVAL);
}

/* A tar of the given entries in a temporary file: "d NAME", "f NAME TEXT",
 * "l NAME TARGET", "h NAME TARGET", "c NAME" (a device). Returns its fd. */
static int
tar_of(const char *const *spec)
{
	char path[96];
	struct archive *a = archive_write_new();
	int fd;

	snprintf(path, sizeof(path), "%s/layer-XXXXXX", top);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	archive_write_set_format_pax_restricted(a);
	assert_int_equal(archive_write_open_fd(a, fd), ARCHIVE_OK);
	for (; *spec; spec++) {
		char kind = (*spec)[0], name[64] = "", arg[64] = "";
		struct archive_entry *e = archive_entry_new();
		sscanf(*spec + 2, "%63s %63s", name, arg);
		archive_entry_set_pathname(e, name);
		archive_entry_set_perm(e, 0644);
		switch (kind) {
		case 'd': archive_entry_set_filetype(e, AE_IFDIR); break;
		case 'f':
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_size(e, (la_int64_t)strlen(arg));
			break;
		case 'l':
			archive_entry_set_filetype(e, AE_IFLNK);
			archive_entry_set_symlink(e, arg);
			break;
		case 'h':
			archive_entry_set_filetype(e, AE_IFREG);
			archive_entry_set_hardlink(e, arg);
			break;
		case 'c':
			archive_entry_set_filetype(e, AE_IFCHR);
			archive_entry_set_rdev(e, 0x0101);
			break;
		}
		assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
		if (kind == 'f')
			assert_int_equal(archive_write_data(a, arg, strlen(arg)),
					 (ssize_t)strlen(arg));
		archive_entry_free(e);
	}
	assert_int_equal(archive_write_close(a), ARCHIVE_OK);
	archive_write_free(a);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* A fresh root named name under top. */
static ImageUnpack
fresh_root(const char *name)
{
	char p[128];

	snprintf(p, sizeof(p), "%s/%s", top, name);
	assert_int_equal(mkdir(p, 0755), 0);
	root_fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(root_fd >= 0);
	return (ImageUnpack){.root_fd = root_fd, .max_bytes = 1 << 20, .max_entries = 100};
}

static int
apply(ImageUnpack *u, const char *const *spec, Reason *why)
{
	int fd = tar_of(spec), r = image_layer_apply(u, fd, NULL, why);
	close(fd);
	return r;
}

static bool
exists(const char *rel)
{
	struct stat st;
	return fstatat(root_fd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void
test_layers_and_whiteouts(void **state)
{
	ImageUnpack u = fresh_root("wh");
	Reason why = {""};
	const char *l1[] = {"d opt",	    "f opt/gone x",  "d opt/old",	    "f opt/old/a x",
			    "f opt/keep x", "l bin usr/bin", "h opt/hard opt/keep", NULL};
	const char *l2[] = {"f opt/.wh.gone", "d opt/old",	"f opt/old/.wh..wh..opq",
			    "f opt/old/b y",  "f opt/keep new", NULL};

	(void)state;
	assert_int_equal(apply(&u, l1, &why), 0);
	assert_true(exists("opt/gone") && exists("opt/old/a") && exists("opt/hard"));
	assert_int_equal(apply(&u, l2, &why), 0);
	assert_false(exists("opt/gone"));
	assert_false(exists("opt/old/a"));
	assert_true(exists("opt/old/b") && exists("opt/keep") && exists("bin"));
	assert_false(exists("opt/.wh.gone"));
	close(root_fd);
}

static void
test_hostile_entries(void **state)
{
	static const char *const cases[][4] = {
	    {"l esc /tmp", "f esc/rw-image-escape x", NULL},
	    {"d a", "l a/up ../..", NULL},
	    {"f ../rw-image-escape x", NULL},
	    {"f /tmp/rw-image-escape x", NULL},
	    {"h x /etc/shadow", NULL},
	    {"h x ../../etc/shadow", NULL},
	    {"d a", "f a/.wh.. x", NULL},
	    {"c mem", NULL},
	    {"h x missing", NULL},
	};
	struct stat st;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[16];
		Reason why = {""};
		snprintf(name, sizeof(name), "bad%zu", i);
		ImageUnpack u = fresh_root(name);
		assert_int_equal(apply(&u, cases[i], &why), -EINVAL);
		assert_true(why.msg[0] != '\0');
		close(root_fd);
	}
	assert_int_equal(stat("/tmp/rw-image-escape", &st), -1);
}

static void
test_caps_and_digest(void **state)
{
	ImageUnpack u = fresh_root("caps");
	Reason why = {""};
	const char *files[] = {"f a 0123456789", "f b 0123456789", NULL};
	int fd;

	(void)state;
	u.max_entries = 1;
	assert_int_equal(apply(&u, files, &why), -EINVAL);
	assert_non_null(strstr(why.msg, "image_max_entries"));
	u.entries = 0;
	u.max_entries = 100;
	u.max_bytes = 15;
	assert_int_equal(apply(&u, files, &why), -EINVAL);
	assert_non_null(strstr(why.msg, "image_max_bytes"));
	u.bytes = u.entries = 0;
	u.max_bytes = 1000;
	fd = tar_of(files);
	assert_int_equal(image_layer_apply(&u, fd,
					   "sha256:00000000000000000000000000000000000000"
					   "00000000000000000000000000",
					   &why),
			 -EINVAL);
	assert_non_null(strstr(why.msg, "digest mismatch"));
	close(fd);
	close(root_fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_path_clean),	    cmocka_unit_test(test_symlink_escapes),
	    cmocka_unit_test(test_whiteout_names),  cmocka_unit_test(test_layers_and_whiteouts),
	    cmocka_unit_test(test_hostile_entries), cmocka_unit_test(test_caps_and_digest),
	};
	return cmocka_run_group_tests_name("image-layer", tests, setup, teardown);
}
