/* SPDX-License-Identifier: MIT */
/*
 * shim.h — the containerd-shim daemon object.
 *
 * A Shim owns the control socket (<runtime_dir>/containerd-shim.sock, 0600,
 * SO_PEERCRED: uid 0 or our own euid only; with socket_group root:GROUP 0660
 * and peers in GROUP, primary or supplementary, accepted too), one Peer per accepted connection,
 * the table of live sandboxes (one per key; id = first 16 hex digits of
 * SHA-256(key), the full key compared wherever a key reaches a sandbox or its
 * directory: sandbox-key.h) and the table of execs (shim-global increasing ids).
 *
 * Requests (handler table indexed by MsgType; see common/proto/messages.def):
 *   SANDBOX_ENSURE  {key, run_id?, thread_id?} → {sandbox_id, created}
 *   SANDBOX_DESTROY {sandbox_id}               → {} once every process is dead
 *   EXEC_START      {sandbox_id, argv, env, cwd, stdin?, run_id?, timeout_ms?}
 *                   → {exec_id}, then pushes EXEC_OUTPUT… and exactly one
 *                   EXEC_EXIT (reason exit, signal, killed, timeout, oom,
 *                   pids_limit, lost or failed)
 *   EXEC_KILL       {exec_id, signal}          → {}: SIGKILL kills the exec's cgroup
 *                   leaf (everything it started), other signals its process group
 *   SANDBOX_STATS   {sandbox_id}               → {cpu_usec, procs}
 *   EXEC_ATTACH     {exec_id, stdout_offset, stderr_offset} → {}, then replays
 *                   the buffered output from those offsets (`dropped` when some
 *                   is gone), streams live and ends with the EXEC_EXIT
 *   EXEC_LIST       {}                          → {execs: [{exec_id, sandbox_id,
 *                   run_id, running}]}: every exec still held
 *   SANDBOX_FORWARD {sandbox_id, run_id, target, port?} → {port}: 127.0.0.1:port
 *                   inside the sandbox joined to the numeric host:port target
 *                   (netfwd.h); with port exactly that one (else EADDRINUSE)
 *   SANDBOX_PROXY   {sandbox_id, run_id, allow, port?} → {port}: the CONNECT egress proxy
 *   SANDBOX_UNLISTEN {sandbox_id, run_id}       → {bytes_out, bytes_in}: closes the
 *                   run's listeners; the proxy's byte counts (zeros when none)
 *   SANDBOX_SNAPSHOT {key, label?}             → {record}: the workspace archived
 *                   (sandbox frozen while live) under <state_dir>/backups (snapshot.h)
 *                   by a child process (snapjob.h); then backups_keep prunes;
 *                   what restore would refuse: -EINVAL "not_restorable: …"
 *   SANDBOX_RESTORE  {key, record}             → {}: a record of ours only (else
 *                   -EINVAL "not_a_backup_record: …"; pruned: -ENOENT
 *                   "backup_not_found: …"; damaged or refused archive: -EINVAL
 *                   "restore_rejected: …"), unpacked into staging by a child,
 *                   the sandbox destroyed, then swapped in with RENAME_EXCHANGE
 *                   (one job per key: -EBUSY "busy: …"; -ETIME at
 *                   snapshot_timeout_ms; -ECANCELED when the child was killed;
 *                   -EAGAIN "too_many_jobs: …" beyond snapshot_max_jobs)
 *   SANDBOX_FILE     {key, op, path, to?, data?, mode?} → per op: the workspace
 *                   file API, live sandbox or not (shim-files.h)
 *
 * Logging: every line about a sandbox or an exec carries SANDBOX_ID= and the
 * RUN_ID=/THREAD_ID= of the run it serves (the last SANDBOX_ENSURE's run_id and
 * thread_id; an exec's own run_id when EXEC_START gives one).
 *
 * Every sandbox gets its own cgroup (cgroup.h) with the memory, pids and cpu
 * limits of the config, every exec a leaf of it (cgroup2: it is cloned into
 * <sandbox cgroup>/e<exec id>; fail closed, docs/DESIGN.md "Cancel kills the
 * run's exec cgroup"), and every exec the seccomp filter (seccomp-policy.h),
 * compiled once here at start-up: if either cannot be set up, shim_new fails
 * (fail closed). On start, the sandboxes a killed predecessor with the same
 * runtime_dir left behind are re-adopted when they have an exec not yet
 * released (adopt.h: EXEC_LIST, EXEC_ATTACH, SANDBOX_STATS and destroy work on
 * them again); the others, and sandbox cgroups without a live init, are reaped.
 * A malformed request is answered with an ERROR frame and never takes the
 * daemon down; a framing error drops only that connection.
 *
 * Single-threaded: everything runs from the event_base given to shim_new()
 * (snapshot and restore jobs are forked children, see snapjob.h), except the
 * file API's I/O, which runs on worker threads (shim-files.h, workq.h).
 */
#pragma once

#include "shim-conf.h"

struct event_base;
typedef struct Shim Shim;

/* Create the directories and the listening socket. *ret is the new Shim; it
 * borrows conf and base, which must outlive it. Returns 0 or a negative errno
 * (logged). */
int shim_new(struct event_base *base, const ShimConf *conf, Shim **ret);

/* Stop accepting, SIGKILL every sandbox and wait for them, remove the socket.
 * Idempotent. Does not break the event loop. */
void shim_stop(Shim *s);

/* SIGUSR2 (a package upgrade, docs/SYSTEMD.md): stop accepting, finish the
 * file operations in flight, stop the snapshot jobs (thawing what they froze),
 * and leave every sandbox running for the next shim to re-adopt, as after a
 * crash: the caller then exits without shim_free(). */
void shim_handover(Shim *s);

/* shim_stop(), then release everything. NULL-safe; returns NULL. */
Shim *shim_free(Shim *s);

/* Longest sandbox key (a thread id, "run:<runId>"), bytes. */
#define SANDBOX_KEY_MAX 256

/* Compute the sandbox id of a key into ret_id (17 bytes: 16 hex + NUL).
 * Returns 0, or -EINVAL for an empty key, one over 256 bytes or with a NUL.
 * 64 bits of SHA-256: two keys may share an id, so whatever is reached by
 * key also compares the key itself (Sandbox.key for a live sandbox,
 * <sandbox_dir>/<id>/key on disk: sandbox-key.h). */
int shim_sandbox_id(const char *key, size_t len, char ret_id[static 17]);
