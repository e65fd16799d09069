/* SPDX-License-Identifier: MIT */
/*
 * image-cmd.c — `containerd-shim [--config FILE]... image COMMAND …`, what
 * `runwarden image` runs (as root, on the host of the shim): import, ls,
 * inspect, rm, gc over the image store (image-store.h). A process of its own:
 * an import never stalls the shim's loop, and needs no shim running.
 */
#include "config.h"

#include "image-cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "image-store.h"
#include "macro.h"
#include "strv.h"

void
image_store_from_conf(const ShimConf *c, ImageStore *st)
{
	*st = (ImageStore){.max_bytes = (uint64_t)c->image_max_bytes,
			   .max_entries = (uint64_t)c->image_max_entries};
	snprintf(st->dir, sizeof(st->dir), "%s/images", c->shared.state_dir);
}

static int
fail(const char *cmd, const Reason *why, int r)
{
	fprintf(stderr, "runwarden image %s: %s\n", cmd, reason_text(why, r));
	return r == -EBUSY ? 3 : r == -ENOENT ? 4 : 1;
}

static void
inspect_print(const ImageInfo *i)
{
	json_t *j = json_object(), *env = json_array();

	for (char **e = i->env; e && *e; e++)
		json_array_append_new(env, json_string(*e));
	json_object_set_new(j, "name", json_string(i->name));
	json_object_set_new(j, "digest", json_string(i->digest));
	json_object_set_new(j, "source", json_string(i->source));
	json_object_set_new(j, "bytes", json_integer((json_int_t)i->bytes));
	json_object_set_new(j, "diskBytes", json_integer((json_int_t)i->disk_bytes));
	json_object_set_new(j, "entries", json_integer((json_int_t)i->entries));
	json_object_set_new(j, "suidDropped", json_integer((json_int_t)i->suid_dropped));
	json_object_set_new(j, "created", json_integer(i->created_ms));
	json_object_set_new(j, "env", env);
	json_object_set_new(j, "rootfs", json_string(i->rootfs));
	json_object_set_new(j, "inUse", json_integer(i->mounts));
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
	putchar('\n');
	json_decref(j);
}

static int
cmd_import(const ImageStore *st, char **argv)
{
	ImageInfo info;
	Reason why = {""};
	int r;

	umask(022);
	r = image_import(st, argv[1], argv[2], &info, &why);
	if (r < 0)
		return fail("import", &why, r);
	printf("%s %s %s %" PRIu64 " bytes %" PRIu64 " entries%s\n", info.name, info.digest,
	       info.source, info.bytes, info.entries,
	       info.suid_dropped ? " (setuid/setgid bits dropped)" : "");
	image_info_done(&info);
	return 0;
}

static int
cmd_ls(const ImageStore *st, char **argv)
{
	ImageInfo *v;
	size_t n;
	Reason why = {""};
	int r;

	(void)argv;
	r = image_list(st, true, &v, &n, &why);
	if (r < 0)
		return fail("ls", &why, r);
	printf("%-24s %-19s %-14s %12s %12s %6s\n", "NAME", "DIGEST", "SOURCE", "BYTES", "DISK",
	       "IN USE");
	for (size_t i = 0; i < n; i++)
		printf("%-24s %-19.19s %-14s %12" PRIu64 " %12" PRIu64 " %6u\n", v[i].name,
		       v[i].digest[0] ? v[i].digest : "(broken)", v[i].source, v[i].bytes,
		       v[i].disk_bytes, v[i].mounts);
	image_infos_free(v, n);
	return 0;
}

static int
cmd_inspect(const ImageStore *st, char **argv)
{
	ImageInfo info;
	Reason why = {""};
	int r;

	r = image_lookup(st, argv[1], &info, &why);
	if (r < 0)
		return fail("inspect", &why, r);
	info.mounts = image_mounts(info.digest + 7);
	inspect_print(&info);
	image_info_done(&info);
	return 0;
}

static int
cmd_rm(const ImageStore *st, char **argv)
{
	Reason why = {""};
	int r;

	r = image_remove(st, argv[1], &why);
	if (r < 0)
		return fail("rm", &why, r);
	(void)image_gc(st, NULL);
	return 0;
}

static int
cmd_gc(const ImageStore *st, char **argv)
{
	Reason why = {""};
	int r;

	(void)argv;
	r = image_gc(st, &why);
	if (r < 0)
		return fail("gc", &why, r);
	printf("%d unpacked image%s removed\n", r, r == 1 ? "" : "s");
	return 0;
}

int
image_cmd(const ShimConf *c, int argc, char **argv)
{
	/* argc: the words a command takes, its name included (-1: any); usage:
	 * what is said when it is given another number. */
	static const struct {
		const char *name;
		int argc;
		const char *usage;
		int (*fn)(const ImageStore *, char **);
	} cmds[] = {{"import", 3, "import NAME SOURCE", cmd_import},
		    {"ls", 1, "ls", cmd_ls},
		    {"list", 1, "ls", cmd_ls},
		    {"inspect", 2, "inspect NAME", cmd_inspect},
		    {"rm", 2, "rm NAME", cmd_rm},
		    {"gc", -1, "gc", cmd_gc}};
	ImageStore st;

	image_store_from_conf(c, &st);
	for (size_t i = 0; argc > 0 && i < ELEMENTSOF(cmds); i++) {
		if (!streq(argv[0], cmds[i].name))
			continue;
		if (cmds[i].argc >= 0 && argc != cmds[i].argc)
			return fprintf(stderr, "usage: runwarden image %s\n", cmds[i].usage), 2;
		return cmds[i].fn(&st, argv);
	}
	fprintf(stderr, "usage: runwarden image import NAME SOURCE | ls | inspect NAME | rm NAME | "
			"gc\n");
	return 2;
}
