/* SPDX-License-Identifier: MIT */
/*
 * wsfs.h — file operations on a sandbox workspace from the host side, for the
 * harness and tools (SANDBOX.md §6.H items 32-35), safe against a hostile
 * sandbox that races symlinks, hardlinks, FIFOs and renames under us.
 *
 * Every operation starts from an open directory fd of the workspace and a path
 * relative to it. Rules:
 *   - the path is checked first: not empty, no NUL, relative, at most
 *     WSFS_PATH_MAX bytes and WSFS_COMPONENTS_MAX components, no "." or ".."
 *     component, no trailing or doubled slash → -EINVAL;
 *   - every lookup is openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
 *     RESOLVE_NO_XDEV): a symlink inside the workspace is followed, one that
 *     leaves it, a /proc magic link or a mount crossing fails (-EXDEV / -ELOOP),
 *     and the kernel checks this during the walk, so flipping a directory into a
 *     symlink between our check and our use cannot redirect us;
 *   - the final component of a write, mkdir, remove or rename is never followed
 *     (the *at() call works on the parent fd and the name);
 *   - opens use O_NONBLOCK (a FIFO never hangs us) and fstat() afterwards:
 *     reads need a regular file (-EISDIR for a directory, -ENOTSUP for a FIFO,
 *     socket or device) no larger than the cap (-EFBIG), lists a directory;
 *   - writes go to a temporary file (.wsfs-<random>, O_EXCL|O_NOFOLLOW) in the
 *     same directory, made visible with one rename, so a reader never
 *     sees half a file, a hardlink to the old file keeps the old content and a
 *     symlink or FIFO at the name is replaced, never written through.
 * The caller decides the identity: the shim switches fsuid/fsgid to the
 * sandbox's host uid around each call (wsfs_as_user), so that files belong to
 * the sandbox user and permissions are those of the sandbox.
 *
 * Returns 0 or a negative errno; nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define WSFS_PATH_MAX 4096
#define WSFS_COMPONENTS_MAX 256

typedef struct WsfsEntry {
	char *name;
	mode_t mode; /* type and permission bits (lstat: a symlink is a symlink) */
	uint64_t size;
	int64_t mtime_ns;
} WsfsEntry;

/* Validate a relative workspace path of len bytes (see the rules above). */
int wsfs_check_path(const char *path, size_t len);

/* Whole regular file, at most max bytes (-EFBIG beyond). *ret is malloc'd. */
int wsfs_read(int ws_fd, const char *path, size_t max, char **ret, size_t *ret_len);
/* Create or atomically replace a regular file with data; mode & 0777 only. */
int wsfs_write(int ws_fd, const char *path, const void *data, size_t len, mode_t mode);
/* lstat of the path (the final component is not followed). */
int wsfs_stat(int ws_fd, const char *path, struct stat *ret);
/* Entries of a directory ("" or a path), sorted by name, at most max entries
 * (-E2BIG beyond). Free with wsfs_entries_free. */
int wsfs_list(int ws_fd, const char *path, size_t max, WsfsEntry **ret, size_t *ret_n);
void wsfs_entries_free(WsfsEntry *e, size_t n);
int wsfs_mkdir(int ws_fd, const char *path, mode_t mode);
/* A file, a symlink (not its target) or an empty directory. */
int wsfs_remove(int ws_fd, const char *path);
/* mkdir -p: every missing directory of path made (mode & 0777), each
 * component resolved beneath the workspace as every lookup is; a path that
 * exists as a directory is success (*ret_created false, may be NULL), as
 * anything else -EEXIST. */
int wsfs_mkdir_parents(int ws_fd, const char *path, mode_t mode, bool *ret_created);
/* rm -r: a file or symlink is unlinked (a symlink is never followed); a
 * directory is emptied depth first and removed. Nothing is followed: entries
 * are lstat'ed, directories opened O_NOFOLLOW, a mount point inside is
 * refused (-EXDEV). At most max_entries entries are looked at (-E2BIG beyond,
 * with what was removed so far gone), at most WSFS_COMPONENTS_MAX levels deep. */
int wsfs_remove_tree(int ws_fd, const char *path, size_t max_entries);
/* Without overwrite never replaces an existing target (RENAME_NOREPLACE:
 * -EEXIST); with it, atomically replaces it (a directory only by an empty
 * one, as rename(2)). */
int wsfs_rename(int ws_fd, const char *from, const char *to, bool overwrite);

/* An O_PATH fd of the directory path ("" the workspace itself), resolved as
 * every lookup (a symlink inside is followed, one out refused). */
int wsfs_open_dir(int ws_fd, const char *path);

/* Switch fsuid/fsgid to uid (and back to 0 with uid 0). Returns the previous
 * fsuid. The calling thread only: fsuid is per thread (the shim's file API
 * calls it on its worker threads). */
uid_t wsfs_as_user(uid_t uid);
