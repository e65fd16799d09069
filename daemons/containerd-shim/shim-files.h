/* SPDX-License-Identifier: MIT */
/*
 * shim-files.h — SANDBOX_FILE: the workspace file API (wsfs.h) over the
 * control socket, for the harness and tools (routerd's /threads/{id}/files).
 *
 *   SANDBOX_FILE {key, op, path, to?, data?, mode?, parents?, recursive?,
 *                 force?, overwrite?}
 *     op get     → {type:"file", data} or {type:"directory", entries}
 *     op read    → {data}
 *     op list    → {entries: [{name, type, mode, size, mtime_ns}]}
 *     op lstat   → {type, mode, size, mtime_ns}
 *     op write   → {created}        (data required; mode default: the old
 *                                    file's, else 0644; parents: missing
 *                                    parent directories made, 0755)
 *     op mkdir   → {} (mode default 0755); with parents: mkdir -p, {created}
 *                                   (false: it was a directory already)
 *     op remove  → {}               (recursive: a whole tree, at most
 *                                    SHIM_FILES_REMOVE_MAX entries; force:
 *                                    a missing path is success)
 *     op rename  → {}               (to required; never replaces, unless
 *                                    overwrite: atomically over the target)
 *     op create  → {created}        (path ""; makes the workspace)
 *
 * It works on <sandbox_dir>/<id>/workspace whether or not the sandbox is live,
 * once <sandbox_dir>/<id>/key named this very key (sandbox-key.h; another key
 * of the same id is "internal: sandbox id collision…", never its files);
 * a key that never had one reads as empty (the root lists no entries, any other
 * path is not found) and a write or mkdir creates it like sandbox creation does.
 * Every operation runs with fsuid/fsgid = host_uid and no umask. Errors are
 * ERROR frames whose message starts with a code, "CODE: text": invalid_path,
 * escape, not_found, is_directory, not_a_regular_file, too_large, exists,
 * not_empty, permission_denied, no_space, busy, overloaded, bad_request,
 * internal.
 *
 * The request is checked on the loop (fields, path syntax, size cap, the
 * snapshot/restore busy check), then the I/O — opening the workspace, every
 * openat2 beneath it, read, write + fsync + rename, list, stat, mkdir, remove —
 * runs on one of SHIM_FILES_THREADS worker threads (workq.h) with a workspace
 * fd of its own, and the reply goes out from the loop: a slow disk never
 * delays an exec. At most SHIM_FILES_MAX_JOBS operations are in flight; beyond,
 * "overloaded" (routerd: 503). While a change (write, mkdir, remove, rename)
 * of a key is in flight, a snapshot or restore of it is refused (busy), as a
 * change is while one runs.
 */
#pragma once

#include "msg.h"
#include "peer.h"
#include "reason.h"
#include "shim-conf.h"
#include "shim.h"

/* shim.c's workspace preparation (mkdir + chown to host_uid), for writes; why
 * (may be NULL) gets the reason of a failure. */
typedef int (*ShimPrepareWorkspace)(Shim *s, const char *id, char **ret_path, Reason *why);

/* Most entries one list returns (beyond: too_large). */
#define SHIM_FILES_LIST_MAX 10000
/* Most entries one recursive remove looks at (beyond: too_large, with what
 * was removed so far gone; the client repeats). */
#define SHIM_FILES_REMOVE_MAX 100000

/* shim.c's "a snapshot or restore job runs on this sandbox id": changes are
 * refused then (busy), reads go on. */
typedef bool (*ShimWorkspaceBusy)(Shim *s, const char *id);

#define SHIM_FILES_THREADS 3
/* Queued or running; an 8 MiB write holds its data meanwhile. */
#define SHIM_FILES_MAX_JOBS 64

typedef struct ShimFiles ShimFiles;
struct event_base;

int shim_files_new(struct event_base *base, ShimFiles **ret);
/* Waits for the running operations and answers every job still held (each
 * holds a PeerDeferred: nothing goes to a connection already gone). NULL-safe. */
ShimFiles *shim_files_free(ShimFiles *fs);

/* The handler of the decoded request m; answers itself, now or when the worker
 * is done (0), or returns a negative errno. A job whose connection closes
 * finishes without a reply. */
int shim_files_handle(ShimFiles *fs, Shim *s, const ShimConf *conf, ShimPrepareWorkspace prepare,
		      ShimWorkspaceBusy busy, Peer *p, const Frame *f, const Msg_SANDBOX_FILE *m);
/* The largest file read or written: file_api_max_bytes, bounded by the frame. */
size_t shim_files_cap(const ShimConf *conf);
/* A change (write, mkdir, remove, rename) of sandbox id is in flight. */
bool shim_files_changing(ShimFiles *fs, const char *id);
