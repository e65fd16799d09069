/* SPDX-License-Identifier: MIT */
/*
 * snaprec.h — the stored records of a key's snapshots, for listing, deleting
 * and restoring by id (docs/SANDBOX-API.md "Snapshots").
 *
 * Beside each archive <state_dir>/backups/<sandbox id>/<uuid>.tar.zst
 * (snapshot.h) its record is kept as <uuid>.json (0600, written to a
 * temporary and renamed). The uuid is the snapshot's short id: a client may
 * name a snapshot by it instead of the whole record. A record whose archive
 * is gone (pruned, deleted) is not listed and not loaded. Nothing is
 * followed (O_NOFOLLOW); nothing logs; 0 or a negative errno.
 */
#pragma once

#include <stddef.h>

/* Store record (one of snapshot_create's) beside its archive. */
int snaprec_store(const char *backups_dir, const char *key_id, const char *record);
/* The record of snapshot uuid: -ENOENT when there is none, or no archive. */
int snaprec_load(const char *backups_dir, const char *key_id, const char *uuid, char **ret);
/* The records of the key's archives, newest first (createdAt, then uuid);
 * at most max. Free with snaprec_list_free. */
int snaprec_list(const char *backups_dir, const char *key_id, size_t max, char ***ret,
		 size_t *ret_n);
void snaprec_list_free(char **v, size_t n);
/* Delete snapshot uuid: a tombstone (<uuid>.pruned: a restore of its record
 * then says backup_not_found), the archive and the record. -ENOENT when it
 * has no archive. */
int snaprec_delete(const char *backups_dir, const char *key_id, const char *uuid);
