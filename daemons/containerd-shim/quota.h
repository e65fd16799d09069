/* SPDX-License-Identifier: MIT */
/*
 * quota.h — per-sandbox workspace quotas with filesystem project quotas
 * (docs/DESIGN.md "Workspace quotas").
 *
 * Each workspace directory gets a project id of its own (fsx_projid, with
 * FS_XFLAG_PROJINHERIT so that everything created beneath it inherits it) and
 * that project gets hard limits: workspace_quota bytes and workspace_inodes
 * inodes (quotactl Q_SETQUOTA on PRJQUOTA; ext4 mounted with prjquota, XFS with
 * pquota). A write past the limit fails in the sandbox with EDQUOT on ext4,
 * ENOSPC on XFS (which reports project quotas as a full filesystem).
 *
 * Project ids: the first free id from workspace_projid_base + (hash of the
 * sandbox id mod workspace_projid_count), probing linearly; "free" means no
 * inode on the filesystem is charged to it. The id is recorded on the workspace
 * directory itself (its fsx_projid) and kept across re-creations. A workspace
 * that does not carry its id yet (created before the quota was configured, or
 * swapped in by a snapshot restore) is labelled recursively: directories and
 * regular files owned by host_uid on the same filesystem; symlinks and special
 * files cannot be opened for the ioctl and stay uncharged.
 *
 * The limits are on by default (10G, 1M inodes). On a filesystem that cannot
 * enforce project quotas the workspaces get none, and the start-up log and
 * --doctor say so loudly; with workspace_quota_required=yes (fail closed)
 * quota_workspace_apply() fails instead, with a message that names the key,
 * the directory, the filesystem and the fix.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reason.h"
#include "shim-conf.h"

/* Does the filesystem of dir (or of its nearest existing ancestor) enforce
 * project quotas? 0 = yes; else a negative errno (-EOPNOTSUPP: it cannot) and
 * msg says why and what to do. fstype gets a short name ("ext4", "xfs", …).
 * Does not log. */
int quota_probe(const char *dir, char *fstype, size_t fstype_size, Reason *msg);

/* Log, once at start-up, whether the workspaces get their quotas: info when
 * enforced, a loud warning when the filesystem cannot (an error when
 * workspace_quota_required makes that fatal for every sandbox), a notice when
 * the quotas are off. Returns quota_probe()'s result (0 when off). */
int quota_log_support(const ShimConf *c);

/* Apply the configured limits to the workspace directory ws_fd (path ws, for
 * messages) of sandbox id. Both limits 0: nothing is set up, and limits that an
 * earlier configuration left on this workspace's project are cleared. Returns
 * 0, or a negative errno with why (may be NULL) set to a one-line reason starting with
 * "workspace_quota: " (logged). *ret_projid: the project id (0 = none). */
int quota_workspace_apply(const ShimConf *c, const char *id, int ws_fd, const char *ws,
			  uint32_t *ret_projid, Reason *why);
