/* SPDX-License-Identifier: MIT */
/*
 * snapshot.h — workspace snapshots and restore (SANDBOX.md §6.H items 36-37).
 *
 * A snapshot is a pax tar archive (zstd, or gzip when libarchive has no zstd
 * writer) of a sandbox's workspace directory, stored as
 *   <state_dir>/backups/<sandbox id>/<uuid>.tar.zst
 * (written to a temporary file, fsync'd, renamed, directory fsync'd), and
 * described by a record, the JSON text the client gets as its snapshot id:
 *   {"v":1,"id":"<uuid>","key":"<sandbox id>","label":"…"|null,
 *    "createdAt":<ms>,"bytes":<archive size>,"sha256":"<hex>","files":<n>}
 *
 * Archiving walks the tree with *at() calls and AT_SYMLINK_NOFOLLOW/O_NOFOLLOW:
 * symlinks are stored as symlinks and never followed, only regular files,
 * directories and symlinks are stored (sockets, FIFOs and devices are skipped),
 * permission bits only (no setuid/setgid/sticky, no owner, no xattrs), and a
 * file that changes type under us is skipped. Nothing outside the workspace
 * directory fd is read. A file with several names in the tree is stored once,
 * its other names as hardlink entries to the first; a file with holes
 * (SEEK_DATA/SEEK_HOLE) is stored sparse (pax GNU.sparse 1.0 map, only its
 * data regions). snapshot_create_limited() counts what the restore will
 * count and refuses the snapshot (not_restorable) when the restore would.
 *
 * Restore accepts only one of our records (snapshot_verify: strict JSON, v 1,
 * a uuid, the sandbox id of this key, the archive present with the record's
 * size and SHA-256; a record whose archive was pruned by snapshot_prune() is
 * -ENOENT "backup_not_found: …") and unpacks into an empty staging directory, rejecting:
 * absolute paths, "." and ".." components, entries whose parent is a symlink
 * or a file (every parent component is opened with O_NOFOLLOW), hardlinks
 * whose target is not a regular file unpacked before them inside the tree
 * (resolved from the staging root with O_NOFOLLOW, linked without
 * AT_SYMLINK_FOLLOW), anything but regular files, directories, symlinks and
 * such hardlinks, setuid/setgid/sticky bits, xattrs, duplicate names (other
 * than a directory named twice), more than max_entries entries or max_bytes
 * bytes of file content (the apparent size: a sparse file counts whole).
 * Symlinks are restored with any target, absolute ones too (a Python venv's
 * bin/python): nothing here or in any other host-side reader of a workspace
 * resolves through a link, and inside the sandbox a link resolves in the
 * sandbox's own root, as any link the sandbox makes itself. Holes are left
 * as holes. Everything is chowned to uid:gid. The caller swaps the staging
 * directory in with RENAME_EXCHANGE.
 *
 * Functions return 0 or a negative errno; err (when given) gets a short text
 * saying why. Nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "reason.h"

#define SNAPSHOT_LABEL_MAX 256
#define SNAPSHOT_RECORD_MAX 2048
#define SNAPSHOT_TOMBSTONES_MAX 1024

/* Archive the directory ws_fd (-1: none, an empty archive) into
 * <backups_dir>/<key_id>/ (created 0700) and return the record (malloc'd JSON
 * text). label may be NULL. */
int snapshot_create(const char *backups_dir, const char *key_id, int ws_fd, const char *label,
		    char **ret_record, Reason *err);

/* The same, refusing what snapshot_unpack() with these limits would refuse:
 * -SNAPSHOT_NOT_RESTORABLE with err naming the path (more than max_entries
 * entries, more than max_bytes of file content, a name the restorer
 * refuses, a tree too deep). Nothing is stored then. */
#define SNAPSHOT_NOT_RESTORABLE EDOM
int snapshot_create_limited(const char *backups_dir, const char *key_id, int ws_fd,
			    const char *label, uint64_t max_bytes, uint64_t max_entries,
			    char **ret_record, Reason *err);

/* Check that record is one of ours for key_id; returns an open fd of the
 * archive (positioned at 0) whose size and SHA-256 matched. A record of ours
 * whose archive was pruned is -ENOENT; an archive whose SHA-256 differs from
 * the record's (changed or damaged on disk) is -EBADMSG; any other failure
 * is -EINVAL with err set. */
int snapshot_verify(const char *backups_dir, const char *key_id, const char *record, size_t len,
		    int *ret_fd, Reason *err);

/* Remove the temporaries a killed snapshot left in <backups_dir>/<key_id>/,
 * and with keep > 0 the oldest archives (by mtime, then name) beyond keep,
 * never the one named by the uuid spare (may be NULL). Each pruned archive
 * leaves a tombstone <uuid>.pruned (empty; the newest SNAPSHOT_TOMBSTONES_MAX
 * are kept) so that snapshot_verify() can tell a pruned record (-ENOENT,
 * "backup_not_found: …") from one that never was ours (-EINVAL). *ret_pruned
 * (may be NULL) gets the number removed. */
int snapshot_prune(const char *backups_dir, const char *key_id, unsigned keep, const char *spare,
		   unsigned *ret_pruned);

/* Unpack the archive fd into a new, empty directory `name` created in
 * parent_fd (mode 0700, owned by uid:gid). On failure the staging directory
 * is removed again and -EINVAL (a rejected entry or archive) or another errno
 * is returned. */
int snapshot_unpack(int archive_fd, int parent_fd, const char *name, uid_t uid, gid_t gid,
		    uint64_t max_bytes, uint64_t max_entries, Reason *err);

/* Remove name (a file, a symlink or a whole tree) below dir_fd, never
 * following a symlink. ENOENT is success. */
int snapshot_rm_rf(int dir_fd, const char *name);

/* The pure checks, exported for the unit tests. */
/* A symlink target the restorer accepts (any non-empty one up to PATH_MAX;
 * depth is unused since absolute targets became allowed). */
bool snapshot_link_target_ok(const char *target, unsigned depth);
/* A lowercase 8-4-4-4-12 hex uuid. */
bool snapshot_uuid_ok(const char *s);
