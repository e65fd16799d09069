/* SPDX-License-Identifier: MIT */
/*
 * shim-files.h — SANDBOX_FILE: the workspace file API (wsfs.h) over the
 * control socket, for the harness and tools (routerd's /threads/{id}/files).
 *
 *   SANDBOX_FILE {key, op, path, to?, data?, mode?}
 *     op get     → {type:"file", data} or {type:"directory", entries}
 *     op read    → {data}
 *     op list    → {entries: [{name, type, mode, size, mtime_ns}]}
 *     op lstat   → {type, mode, size, mtime_ns}
 *     op write   → {created}        (data required; mode default: the old
 *                                    file's, else 0644)
 *     op mkdir   → {}               (mode default 0755)
 *     op remove  → {}
 *     op rename  → {}               (to required; never replaces)
 *
 * It works on <sandbox_dir>/<id>/workspace whether or not the sandbox is live,
 * once <sandbox_dir>/<id>/key named this very key (sandbox-key.h; another key
 * of the same id is "internal: sandbox id collision…", never its files);
 * a key that never had one reads as empty (the root lists no entries, any other
 * path is not found) and a write or mkdir creates it like sandbox creation does.
 * Every operation runs with fsuid/fsgid = host_uid and no umask. Errors are
 * ERROR frames whose message starts with a code, "CODE: text": invalid_path,
 * escape, not_found, is_directory, not_a_regular_file, too_large, exists,
 * not_empty, permission_denied, no_space, busy, bad_request, internal.
 * Synchronous on the loop, like SANDBOX_SNAPSHOT and SANDBOX_RESTORE: no
 * snapshot or restore of the key can be in progress meanwhile.
 */
#pragma once

#include "peer.h"
#include "shim-conf.h"
#include "shim.h"

/* shim.c's workspace preparation (mkdir + chown to host_uid), for writes. */
typedef int (*ShimPrepareWorkspace)(Shim *s, const char *id, char **ret_path);

/* Most entries one list returns (beyond: too_large). */
#define SHIM_FILES_LIST_MAX 10000

/* shim.c's "a snapshot or restore job runs on this sandbox id": changes are
 * refused then (busy), reads go on. */
typedef bool (*ShimWorkspaceBusy)(Shim *s, const char *id);

/* The handler; answers itself (0) or returns a negative errno (-EBADMSG). */
int shim_files_handle(Shim *s, const ShimConf *conf, ShimPrepareWorkspace prepare,
		      ShimWorkspaceBusy busy, Peer *p, const Frame *f);
