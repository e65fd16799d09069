/* SPDX-License-Identifier: MIT */
/*
 * image-store.h — the sandbox images of a host (docs/IMAGES.md).
 *
 * An image is imported once (image_import: `runwarden image import`, which
 * runs `containerd-shim image import`), unpacked once and shared read-only by
 * every sandbox on it. The store is <state_dir>/images (root's, 0700):
 *   names/<NAME>            "sha256:<hex>\n": the image a name stands for
 *   unpacked/<hex>/rootfs/  the root filesystem (mount points made: workspace,
 *                           tmp, dev, proc, etc/{passwd,group,hosts,hostname})
 *   unpacked/<hex>/image.json  {"digest","source","bytes","diskBytes","entries",
 *                           "env","suidDropped","created"}
 *   staging/<pid>-<n>/      an import under way (removed when it fails)
 *   trash/                  what rm and gc are deleting
 *   lock                    flock: exclusive while a name or an unpacked
 *                           image changes; shared by a sandbox's spawner from
 *                           before it captures an image's root until its init
 *                           attached it (so rm sees every mount of it)
 * <hex> is the digest of the image's manifest (OCI layout, oci-archive and
 * docker-archive, converted to an OCI layout by skopeo) or of the tarball (a
 * plain root filesystem). An image is in use while a mount of its rootfs
 * exists in any mount namespace of the host (/proc/PID/mountinfo), which
 * holds across shim restarts: rm refuses then (-EBUSY), and gc removes only
 * unpacked images no name points to and nothing mounts.
 *
 * Functions return 0 or a negative errno with why set; nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reason.h"

#define IMAGE_NAME_MAX 64
#define IMAGE_DIGEST_MAX 71 /* "sha256:" + 64 hex */

typedef struct ImageStore {
	char dir[4096];	      /* <state_dir>/images */
	uint64_t max_bytes;   /* image_max_bytes */
	uint64_t max_entries; /* image_max_entries */
} ImageStore;

typedef struct ImageInfo {
	char name[IMAGE_NAME_MAX + 1];
	char digest[IMAGE_DIGEST_MAX + 1];
	char source[16];     /* rootfs, oci, oci-archive, docker-archive */
	uint64_t bytes;	     /* file content */
	uint64_t disk_bytes; /* disk use of the unpacked root (blocks; hard links once) */
	uint64_t entries, suid_dropped;
	int64_t created_ms;
	char **env; /* the image config's Env ("K=V"), NULL-terminated; may be NULL */
	char rootfs[4200];
	unsigned mounts; /* mount namespaces with its rootfs mounted (image_list, inspect) */
} ImageInfo;

/* A name: 1..64 of [a-z0-9._-], starting with a letter or digit. */
bool image_name_ok(const char *name);

/* Import source (a path: an OCI layout directory, an oci-archive, a
 * docker-archive or a root filesystem tarball, told apart by their content;
 * or "oci:DIR", "oci-archive:FILE", "docker-archive:FILE", "rootfs:FILE") as
 * name, replacing what the name stood for. */
int image_import(const ImageStore *st, const char *name, const char *source, ImageInfo *ret,
		 Reason *why);

/* What name stands for: digest, rootfs path, env. -ENOENT: no such image. */
int image_lookup(const ImageStore *st, const char *name, ImageInfo *ret, Reason *why);

/* Every name, sorted; with mounts, each with its mounts counted (a walk of
 * /proc: for the command line, not for a daemon's loop). */
int image_list(const ImageStore *st, bool mounts, ImageInfo **ret, size_t *ret_n, Reason *why);

/* Remove name: -ENOENT, -EBUSY while its image is mounted. The unpacked image
 * goes when no other name points to it. */
int image_remove(const ImageStore *st, const char *name, Reason *why);

/* Remove unpacked images no name points to and nothing mounts, staging
 * directories of imports that died, the trash. Returns how many images went. */
int image_gc(const ImageStore *st, Reason *why);

/* How many mount namespaces mount the unpacked image <hex> (64 hex digits). */
unsigned image_mounts(const char *hex);

void image_info_done(ImageInfo *info);
void image_infos_free(ImageInfo *infos, size_t n);

/* -- image-oci.c: the OCI side of image_import (internal to the store) -- */
typedef struct ImageUnpack ImageUnpack;
typedef struct ImageConfig {
	char **env;
	char source[16];
	char digest[IMAGE_DIGEST_MAX + 1]; /* the manifest's */
} ImageConfig;
/* Read the manifest digest of the OCI layout at layout_fd (index.json). */
int image_oci_manifest(int layout_fd, char digest[IMAGE_DIGEST_MAX + 1], Reason *why);
/* Apply the layers of that manifest to u->root_fd and read its config (Env;
 * WorkingDir and User checked). */
int image_oci_unpack(int layout_fd, const char *digest, ImageUnpack *u, ImageConfig *cfg,
		     Reason *why);
/* skopeo copy <transport>:<the file at src_fd> oci:<dir>:image */
int image_skopeo_to_oci(const char *transport, int src_fd, const char *dir, Reason *why);
/* What kind of archive fd holds: "oci-archive", "docker-archive" or "rootfs". */
int image_archive_kind(int fd, const char **ret, Reason *why);
