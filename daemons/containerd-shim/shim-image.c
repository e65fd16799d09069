/* SPDX-License-Identifier: MIT */
/*
 * shim-image.c — which image a sandbox is on (docs/IMAGES.md), for the
 * sandbox layer: a key's image is what its last SANDBOX_ENSURE with an image
 * field asked for ("" = the host's binds), kept in memory until the sandbox
 * starts, then recorded beside the workspace (<sandbox_dir>/<id>/image, root's
 * 0600), so that an ENSURE without the field (an exec, the files API, a
 * restart) gets the same image back. A sandbox on an image gets the image's
 * Env under each exec's own.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fd-util.h"
#include "image-store.h"
#include "shim-int.h"
#include "strv.h"

#define IMAGE_RECORD "image"
#define PICKS_MAX 4096

struct ImagePick {
	char id[17];
	char *image; /* "" = the host's binds */
	ImagePick *next;
};

static void
pick_drop(ImagePick **pp)
{
	ImagePick *p = *pp;

	if (!p)
		return;
	*pp = p->next;
	free(p->image);
	free(p);
}

void
shim_image_picks_free(Shim *s)
{
	while (s->image_picks)
		pick_drop(&s->image_picks);
}

static ImagePick **
pick_find(Shim *s, const char *id)
{
	ImagePick **pp = &s->image_picks;

	for (; *pp; pp = &(*pp)->next)
		if (streq((*pp)->id, id))
			return pp;
	return pp;
}

/* The image recorded for id ("" when none), into buf. */
static void
record_read(Shim *s, const char *id, char *buf, size_t size)
{
	char path[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "%s/" IMAGE_RECORD, id);
	fd = openat(s->sandbox_dfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
	if (!image_name_ok(buf))
		buf[0] = '\0';
}

static int
record_write(Shim *s, const char *id, const char *image)
{
	char path[64], tmp[64];
	_cleanup_close_ int fd = -1;
	int r;

	snprintf(path, sizeof(path), "%s/" IMAGE_RECORD, id);
	if (!image[0])
		return unlinkat(s->sandbox_dfd, path, 0) < 0 && errno != ENOENT ? -errno : 0;
	snprintf(tmp, sizeof(tmp), "%s/." IMAGE_RECORD ".tmp", id);
	fd = openat(s->sandbox_dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		return -errno;
	r = loop_write(fd, image, strlen(image));
	if (r >= 0 && renameat(s->sandbox_dfd, tmp, s->sandbox_dfd, path) < 0)
		r = -errno;
	return r;
}

/* What id's next sandbox is on: the pending pick, else the record. */
static void
wanted(Shim *s, const char *id, char *buf, size_t size)
{
	ImagePick *p = *pick_find(s, id);

	if (p)
		snprintf(buf, size, "%s", p->image);
	else
		record_read(s, id, buf, size);
}

bool
shim_image_on_host(Shim *s, const char *id)
{
	char name[IMAGE_NAME_MAX + 1];

	wanted(s, id, name, sizeof(name));
	return name[0] == '\0';
}

int
shim_image_pick(Shim *s, const char *id, const char *image, Sandbox *live, Reason *why)
{
	ImagePick **pp = pick_find(s, id), *p = *pp;
	char rec[IMAGE_NAME_MAX + 1];
	size_t n = 0;

	if (image[0]) {
		ImageInfo info;
		int r = image_lookup(&s->images, image, &info, why);
		if (r < 0)
			return r;
		image_info_done(&info);
	}
	/* Kept only while it changes something: a live sandbox on that image, or
	 * none and a record that names it, needs no pick (so picks are bounded by
	 * the sandboxes about to start, not by the threads ever seen). */
	if (live && streq(live->image ? live->image : "", image)) {
		pick_drop(pp);
		return 0;
	}
	if (!live) {
		record_read(s, id, rec, sizeof(rec));
		if (streq(rec, image)) {
			pick_drop(pp);
			return 0;
		}
	}
	if (p) {
		char *v = strdup(image);
		if (!v)
			return -ENOMEM;
		free(p->image);
		p->image = v;
	} else {
		for (ImagePick *q = s->image_picks; q; q = q->next)
			n++;
		if (n >= PICKS_MAX)
			return reason_set(why, "too many sandboxes waiting for their image"),
			       -EAGAIN;
		p = calloc(1, sizeof(*p));
		if (!p || !(p->image = strdup(image))) {
			free(p);
			return -ENOMEM;
		}
		snprintf(p->id, sizeof(p->id), "%s", id);
		*pp = p;
	}
	return live ? 1 : 0;
}

int
shim_image_resolve(Shim *s, Sandbox *sb, ImageInfo *info, Reason *why)
{
	char name[IMAGE_NAME_MAX + 1];
	ImagePick **pp = pick_find(s, sb->id);
	int r;

	*info = (ImageInfo){0};
	wanted(s, sb->id, name, sizeof(name));
	if (name[0]) {
		Reason iwhy = {""};
		r = image_lookup(&s->images, name, info, &iwhy);
		if (r < 0)
			return reason_set(why, "image: %s", reason_text(&iwhy, r)), r;
	}
	set_str(&sb->image, name[0] ? name : NULL);
	strv_free(sb->image_env);
	sb->image_env = TAKE_PTR(info->env);
	if (*pp && record_write(s, sb->id, name) >= 0) /* recorded now; else kept in memory */
		pick_drop(pp);
	return 0;
}

void
shim_image_claimed(Shim *s, const char *id)
{
	ImagePick **pp = pick_find(s, id);

	if (record_write(s, id, "") >= 0)
		pick_drop(pp);
}

void
shim_image_adopted(Shim *s, Sandbox *sb)
{
	char name[IMAGE_NAME_MAX + 1];
	ImageInfo info;

	record_read(s, sb->id, name, sizeof(name));
	if (!name[0])
		return;
	set_str(&sb->image, name);
	if (image_lookup(&s->images, name, &info, NULL) >= 0) /* gone: no Env, still on it */
		sb->image_env = TAKE_PTR(info.env);
	image_info_done(&info);
}

/* "K=V" → the length of K. */
static size_t
key_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq ? (size_t)(eq - kv) : strlen(kv);
}

static bool
has_key(char *const *v, const char *kv)
{
	size_t n = key_len(kv);

	for (; v && *v; v++)
		if (key_len(*v) == n && strncmp(*v, kv, n) == 0)
			return true;
	return false;
}

int
shim_image_env(const Sandbox *sb, char *const *env, char ***ret)
{
	char **v = NULL;

	*ret = NULL;
	if (!sb->image_env)
		return 0;
	/* The image's Env first, unless the exec sets the same variable; PATH is
	 * the image's when it has one (its tools are where it says). */
	for (char **e = sb->image_env; *e; e++)
		if ((strncmp(*e, "PATH=", 5) == 0 || !has_key(env, *e)) && strv_push(&v, *e) < 0)
			goto fail;
	for (char *const *e = env; e && *e; e++)
		if (!(strncmp(*e, "PATH=", 5) == 0 && has_key(sb->image_env, *e)) &&
		    strv_push(&v, *e) < 0)
			goto fail;
	*ret = v;
	return 0;
fail:
	strv_free(v);
	return -ENOMEM;
}
