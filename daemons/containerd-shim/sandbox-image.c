/* SPDX-License-Identifier: MIT */
/*
 * sandbox-image.c — the root of a sandbox on an image (SandboxSpec.image_root,
 * docs/IMAGES.md): the image's unpacked root filesystem instead of the host's
 * ro_binds and etc_entries. Part of the init's mount set-up (sandbox-linux.c
 * calls these two steps); runs only in the spawner and the init.
 *
 * The spawner (host root) takes the image store's lock shared, so that `image
 * rm` cannot remove the image between the capture and the attach, and clones
 * the image's rootfs as a detached, non-recursive mount made read-only,
 * nosuid, nodev and private before it goes anywhere. One unpacked copy is
 * shared by every sandbox on the image: nothing is copied per sandbox.
 *
 * The init (in its mount namespace, cwd the root tmpfs holding the generated
 * etc/passwd, group, hosts and hostname) makes that tmpfs read-only, attaches
 * the image at "image", binds the four generated files over the image's own
 * (the store made them regular files: image-store.c rootfs_prepare), drops the
 * lock (the mount is in its mountinfo now, where `image rm` looks) and enters
 * the image: the rest of the set-up (workspace, tmp, dev, proc, pivot_root)
 * goes on there, on mount points the store made.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-util.h"
#include "sandbox-init.h"

static const char *const etc_generated[] = {"passwd", "group", "hosts", "hostname"};

void
sandbox_image_capture(const SandboxSpec *spec, int *ret_tree, int *ret_lock)
{
	struct mount_attr a = {.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
			       .propagation = MS_PRIVATE};
	int lock = open(spec->image_lock, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), tree;

	if (lock < 0)
		init_fail(errno, "open the image store's lock %s", spec->image_lock);
	while (flock(lock, LOCK_SH) < 0)
		if (errno != EINTR)
			init_fail(errno, "lock the image store");
	*ret_lock = lock;
	tree = open_tree(AT_FDCWD, spec->image_root, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (tree < 0)
		init_fail(errno, "image root %s (removed?)", spec->image_root);
	if (mount_setattr(tree, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0)
		init_fail(errno, "mount_setattr the image root");
	*ret_tree = tree;
}

void
sandbox_image_enter(int tree, int lock)
{
	char src[64], dst[64];

	if (mkdir("image", 0755) < 0)
		init_fail(errno, "mkdir the image's mount point");
	/* The generated files are bound from here: read-only before they are. */
	if (mount(NULL, ".", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
	    0)
		init_fail(errno, "remount the root tmpfs read-only");
	if (move_mount(tree, "", AT_FDCWD, "image", MOVE_MOUNT_F_EMPTY_PATH) < 0)
		init_fail(errno, "attach the image");
	close(tree);
	for (size_t i = 0; i < ELEMENTSOF(etc_generated); i++) {
		snprintf(src, sizeof(src), "etc/%s", etc_generated[i]);
		snprintf(dst, sizeof(dst), "image/etc/%s", etc_generated[i]);
		if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
			init_fail(errno, "bind /etc/%s over the image's", etc_generated[i]);
	}
	close(lock); /* the image is in our mountinfo: `image rm` sees it */
	if (chdir("image") < 0)
		init_fail(errno, "enter the image");
}
