/* SPDX-License-Identifier: MIT */
/*
 * image-layer.h — applying the layers of a sandbox image (a plain root
 * filesystem tarball, or an OCI image's layers in order) to a root directory,
 * refusing what is hostile or broken (docs/IMAGES.md "What is refused").
 *
 * A layer is a tar (uncompressed, gzip, zstd, xz or bzip2: libarchive tells) read from
 * an fd. Each entry's name is cleaned first (image_path_clean: "./" prefixes
 * and "." components dropped; absolute names and ".." components refused).
 * Every parent is opened from the root with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): an entry
 * whose path goes through a symlink (one the image made, absolute or not) is
 * refused, so nothing is ever written outside the root. Then:
 *   - whiteouts (".wh.NAME" removes NAME of the layers below, ".wh..wh..opq"
 *     empties its directory), the name checked to be one component;
 *   - directories, regular files, symlinks and hardlinks only: a character or
 *     block device, a FIFO or a socket is refused;
 *   - a symlink whose relative target climbs above the root ("../../etc"
 *     from two levels down) is refused; an absolute target is kept (it
 *     resolves inside the sandbox's own root there, and nothing on the host
 *     side follows it);
 *   - a hardlink's target must be a clean path (not absolute, no "..") to a
 *     regular file already in the root;
 *   - setuid and setgid bits are dropped (the image is mounted nosuid
 *     anyway); owners and extended attributes (file capabilities included)
 *     are not restored: everything belongs to the importing user (root);
 *   - more than max_entries entries or max_bytes bytes of file content over
 *     all layers is refused; a truncated or corrupt tar is refused;
 *   - with a digest ("sha256:<hex>"), the SHA-256 of the bytes read from fd
 *     (the whole file, compressed) must match.
 * Failures return a negative errno (-EINVAL for a refusal) with why set to
 * "<entry>: <reason>". The caller unpacks into a staging directory and
 * removes it on failure. Nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reason.h"

typedef struct ImageUnpack {
	int root_fd;	      /* the root directory being built (O_DIRECTORY) */
	uint64_t max_bytes;   /* file content over all layers */
	uint64_t max_entries; /* entries over all layers */
	uint64_t bytes, entries;
	uint64_t suid_dropped; /* entries whose setuid/setgid bits were dropped */
	char sha256[65];       /* the hex SHA-256 of the last layer read */
} ImageUnpack;

/* Apply the tar read from fd to u->root_fd. digest: "sha256:<64 hex>" to
 * check, or NULL (the SHA-256 is still left in u->sha256). */
int image_layer_apply(ImageUnpack *u, int fd, const char *digest, Reason *why);

/* Clean an entry name into out (size bytes): "" for the root itself. -EINVAL
 * for an absolute name or a ".." component, -ENAMETOOLONG. */
int image_path_clean(const char *in, char *out, size_t size);

/* Whether a symlink at the clean path `path` with target `target` climbs
 * above the root (relative targets only; an absolute one never does here). */
bool image_symlink_escapes(const char *path, const char *target);

/* Whether the clean path's last component is a whiteout: 1 with *ret_opaque
 * (".wh..wh..opq") or the whited-out name in name (one component), 0 when it
 * is no whiteout, -EINVAL when it is a whiteout of no valid name. */
int image_whiteout(const char *path, bool *ret_opaque, char *name, size_t size);
