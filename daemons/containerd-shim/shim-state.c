/* SPDX-License-Identifier: MIT */
/*
 * shim-state.c — SANDBOX_STATE and SHIM_LIMITS: the sandbox API's lifecycle
 * by key (docs/SANDBOX-API.md "Lifecycle", docs/PROTOCOL.md), above
 * shim-sandbox.c and shim-snap.c.
 *
 *   get     {exists: true, running, processes} or -ENOENT sandbox_not_found
 *           when the key has no workspace directory;
 *   stop    kills the live sandbox (as SANDBOX_DESTROY without purge) and
 *           answers once its init is reaped; the workspace stays;
 *   delete  the same, and its directory (workspace, key) removed once it is
 *           dead (purge), its backups at once; keep_workspace keeps both. A
 *           sandbox that is not live has its workspace renamed aside and
 *           removed by a cleanup child (the key stays claimed).
 * A key whose directory belongs to another key (an id collision) is refused
 * as the file API refuses it. A snapshot or restore job of the id running is
 * busy for stop and delete.
 *
 * SANDBOX_SNAPSHOTS lists a key's snapshots (their records, newest first) or
 * deletes one (snaprec.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "id-util.h"
#include "sandbox-key.h"
#include "shim-files.h"
#include "shim-int.h"
#include "snaprec.h"
#include "snapshot.h"

/* The id's directory is this key's (or there is none). False after answering. */
static bool
key_ok(Shim *s, Peer *p, const Frame *f, const char *key, const char *id)
{
	_cleanup_close_ int dfd = open(s->conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int k =
	    dfd < 0 ? -errno : sandbox_key_claim(dfd, id, key, strlen(key), SANDBOX_KEY_MAX, false);

	if (k == -ENOENT && dfd < 0)
		return true; /* no sandbox_dir yet: no sandbox either */
	if (k == 0)
		return true;
	log_warning_errno(k, "Sandbox %s: cannot check its key: %m", id);
	(void)peer_reply_error_reason(p, f->req_id, -EIO, REASON_INTERNAL,
				      k == -EEXIST ? "sandbox id collision: the workspace belongs "
						     "to another key"
						   : "cannot check the workspace's key");
	return false;
}

static int
state_get(Shim *s, Peer *p, const Frame *f, const char *id)
{
	_cleanup_free_ char *ws = NULL;
	Reply_SANDBOX_STATE rep = {.exists = true, .has_exists = true};
	Sandbox *sb = sandbox_find(s, id);

	if (asprintf(&ws, "%s/%s/workspace", s->conf->sandbox_dir, id) < 0)
		return -ENOMEM;
	if (faccessat(AT_FDCWD, ws, F_OK, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			return -errno;
		(void)peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_SANDBOX_NOT_FOUND,
					      "no such sandbox (it has no workspace)");
		return 0;
	}
	rep.running = sb && sb->state != SANDBOX_DYING;
	rep.has_running = true;
	if (rep.running)
		rep.processes = sb->live_execs;
	rep.has_processes = true;
	(void)reply_send_SANDBOX_STATE(p, f->req_id, &rep);
	return 0;
}

/* <state_dir>/backups/<id>: the key's snapshots */
static int
backups_remove(Shim *s, const char *id)
{
	_cleanup_free_ char *dir = NULL;
	_cleanup_close_ int dfd = -1;
	int r;

	if (asprintf(&dir, "%s/backups", s->conf->shared.state_dir) < 0)
		return -ENOMEM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	r = snapshot_rm_rf(dfd, id);
	return r == -ENOENT ? 0 : r;
}

/* The workspace of a sandbox that is not live, gone at once (renamed aside:
 * GET says 404 now) and removed by a cleanup child, so that a large tree
 * never holds the loop; its key stays claimed. */
static int
workspace_remove(Shim *s, const char *id)
{
	_cleanup_free_ char *dir = NULL;
	_cleanup_close_ int dfd = -1;
	unsigned char b[4];
	char rnd[2 * sizeof(b) + 1], aside[32];

	if (asprintf(&dir, "%s/%s", s->conf->sandbox_dir, id) < 0)
		return -ENOMEM;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		return -EIO;
	hex_encode(b, sizeof(b), rnd);
	/* the name of a restore's staging tree: a restart finishes it */
	snprintf(aside, sizeof(aside), ".restore-%s", rnd);
	if (renameat2(dfd, "workspace", dfd, aside, RENAME_NOREPLACE) < 0)
		return errno == ENOENT ? 0 : -errno;
	snap_remove_tree(s, dfd, aside);
	return 0;
}

int
handle_sandbox_state(Peer *p, const Frame *f, const Msg_SANDBOX_STATE *m, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const char *a = m->action;
	bool del = streq(a, "delete"), keep = m->has_keep_workspace && m->keep_workspace;
	char id[17];
	Sandbox *sb;
	int k;

	if (shim_sandbox_id(m->key, strlen(m->key), id) < 0 ||
	    !(streq(a, "get") || streq(a, "stop") || del) || (keep && !del)) {
		(void)peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					      "key must be 1..256 bytes, action get, stop or "
					      "delete, keep_workspace for delete only");
		return 0;
	}
	if (!key_ok(s, p, f, m->key, id))
		return 0;
	if (streq(a, "get"))
		return state_get(s, p, f, id);
	if (snapjob_find(s->jobs, id)) {
		(void)peer_reply_error_reason(p, f->req_id, -EBUSY, REASON_BUSY,
					      "a snapshot or restore of this sandbox is running");
		return 0;
	}
	LogCtx ctx = {.thread_id = m->key, .sandbox_id = id};
	if (del && !keep)
		shim_watches_drop(s->watches, id); /* the tree goes */
	if (del && !keep) {
		k = backups_remove(s, id);
		if (k < 0)
			log_ctx_errno(LOG_WARNING, k, &ctx,
				      "Sandbox %s: cannot remove its backups: %m", id);
	}
	sb = sandbox_find(s, id);
	if (!sb) {
		if (del && !keep) {
			k = workspace_remove(s, id);
			if (k < 0)
				return k;
		}
		log_ctx(LOG_INFO, &ctx, "Sandbox %s: %s (not running)", id, a);
		reply_empty(c, f->req_id);
		return 0;
	}
	k = sandbox_destroy_wait(sb, p, f, del && !keep);
	if (k < 0)
		return k;
	log_ctx(LOG_INFO, &ctx, "Sandbox %s: %s", id, a);
	sandbox_kill(sb);
	return 0;
}

int
handle_shim_limits(Peer *p, const Frame *f, const Msg_SHIM_LIMITS *m, void *userdata)
{
	Conn *c = userdata;

	(void)m;
	(void)reply_send_SHIM_LIMITS(
	    p, f->req_id,
	    &(Reply_SHIM_LIMITS){.file_api_max_bytes = shim_files_cap(c->shim->conf)});
	return 0;
}

/* Most records one list returns (backups_keep bounds them anyway). */
#define SNAPSHOTS_LIST_MAX 1000

int
handle_sandbox_snapshots(Peer *p, const Frame *f, const Msg_SANDBOX_SNAPSHOTS *m, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	_cleanup_free_ char *bdir = NULL;
	char **v = NULL, id[17];
	size_t n = 0;
	int k;

	if (shim_sandbox_id(m->key, strlen(m->key), id) < 0 ||
	    (m->delete &&!snapshot_uuid_ok(m->delete))) {
		(void)peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					      "key must be 1..256 bytes, delete a snapshot id");
		return 0;
	}
	if (!key_ok(s, p, f, m->key, id))
		return 0;
	if (asprintf(&bdir, "%s/backups", s->conf->shared.state_dir) < 0)
		return -ENOMEM;
	if (m->delete) {
		/* a restore job reading it has its archive open: it goes on */
		k = snaprec_delete(bdir, id, m->delete);
		if (k == -ENOENT) {
			(void)peer_reply_error_reason(
			    p, f->req_id, -ENOENT, REASON_SNAPSHOT_NOT_FOUND, "no such snapshot");
			return 0;
		}
		if (k < 0)
			return k;
		LogCtx ctx = {.thread_id = m->key, .sandbox_id = id};
		log_ctx(LOG_INFO, &ctx, "Snapshot %s of sandbox %s deleted", m->delete, id);
	} else {
		k = snaprec_list(bdir, id, SNAPSHOTS_LIST_MAX, &v, &n);
		if (k < 0)
			return k;
	}
	char *none[1] = {NULL};
	char **out = v ? v : none;
	if (v) {
		char **nv = realloc(v, (n + 1) * sizeof(*v)); /* NULL-terminated */
		if (!nv) {
			snaprec_list_free(v, n);
			return -ENOMEM;
		}
		out = v = nv;
		v[n] = NULL;
	}
	(void)reply_send_SANDBOX_SNAPSHOTS(p, f->req_id,
					   &(Reply_SANDBOX_SNAPSHOTS){.records = out});
	snaprec_list_free(v, n);
	return 0;
}
