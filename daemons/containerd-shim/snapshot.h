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
 * directory fd is read.
 *
 * Restore accepts only one of our records (snapshot_verify: strict JSON, v 1,
 * a uuid, the sandbox id of this key, the archive present with the record's
 * size and SHA-256; a record whose archive was pruned by snapshot_prune() is
 * -ENOENT "backup_not_found: …") and unpacks into an empty staging directory, rejecting:
 * absolute paths, "." and ".." components, entries whose parent is a symlink
 * or a file (every parent component is opened with O_NOFOLLOW), symlinks whose
 * target is absolute or climbs out of the tree ('..' only as leading
 * components, no more of them than the link's depth: that holds even when
 * links are followed through other links), hardlinks, anything but regular
 * files, directories and symlinks, setuid/setgid/sticky bits, xattrs,
 * duplicate names (other than a directory named twice), more than max_entries
 * entries or max_bytes bytes of file content. Everything is chowned to
 * uid:gid. The caller swaps the staging directory in with RENAME_EXCHANGE.
 *
 * Functions return 0 or a negative errno; err (when given) gets a short text
 * saying why. Nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SNAPSHOT_LABEL_MAX 256
#define SNAPSHOT_RECORD_MAX 2048
#define SNAPSHOT_TOMBSTONES_MAX 1024

typedef struct SnapshotErr {
	char msg[256];
} SnapshotErr;

/* Archive the directory ws_fd (-1: none, an empty archive) into
 * <backups_dir>/<key_id>/ (created 0700) and return the record (malloc'd JSON
 * text). label may be NULL. */
int snapshot_create(const char *backups_dir, const char *key_id, int ws_fd, const char *label,
		    char **ret_record, SnapshotErr *err);

/* Check that record is one of ours for key_id; returns an open fd of the
 * archive (positioned at 0) whose size and SHA-256 matched. A record of ours
 * whose archive was pruned is -ENOENT; any other failure is -EINVAL with err
 * set. */
int snapshot_verify(const char *backups_dir, const char *key_id, const char *record, size_t len,
		    int *ret_fd, SnapshotErr *err);

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
		    uint64_t max_bytes, uint64_t max_entries, SnapshotErr *err);

/* Remove name (a file, a symlink or a whole tree) below dir_fd, never
 * following a symlink. ENOENT is success. */
int snapshot_rm_rf(int dir_fd, const char *name);

/* The pure checks, exported for the unit tests. */
/* A symlink target allowed at an entry of `depth` parent directories. */
bool snapshot_link_target_ok(const char *target, unsigned depth);
/* A lowercase 8-4-4-4-12 hex uuid. */
bool snapshot_uuid_ok(const char *s);
