/* SPDX-License-Identifier: MIT */
/*
 * shim-snap.c — SANDBOX_SNAPSHOT and SANDBOX_RESTORE (shim-int.h, above
 * shim-capacity.c).
 *
 * The archive and the unpack run in forked jobs (snapjob.h) over snapshot.h;
 * this file checks a request, starts its job, and on the job's end swaps the
 * restored workspace in, prunes (backups_keep) and answers. The wire and its
 * error reasons are in shim.h; the rules while a job runs are below.
 *
 * Calls down into shim-capacity.c (held ENSUREs are served when the job ends)
 * and the layers below it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/filter.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>
#include <openssl/evp.h>

#include "backup-tenant.h"
#include "id-util.h"
#include "shim-int.h"
#include "snaprec.h"
#include "tenant.h"

/* ---------------------------------------------------------------------------
 * Snapshots (snapshot.h), run as jobs (snapjob.h): the archive and the unpack
 * (with the record's check) happen in a child process and the loop keeps
 * serving. While a job of a key runs, another SNAPSHOT/RESTORE of it is
 * -EBUSY; its ENSUREs are held (ensure_key) until the job ended — for a
 * snapshot only when the sandbox is not serving, for a restore always, so that
 * a run started meanwhile gets the restored workspace — and an EXEC_START into
 * a sandbox being restored is -EBUSY. A live sandbox stays frozen for the
 * whole archive and is thawed when the job ends, however it ends. The swap
 * (RENAME_EXCHANGE), the pruning (backups_keep) and the replies happen here.
 */

typedef struct SnapOp {
	Shim *s;
	char id[17];
	char src_id[17]; /* restore: the sandbox whose backup it is (id, or from_key's) */
	char *key, *label, *bdir, *record;
	int ws_fd;   /* snapshot: the workspace (-1: none); closed once the child has it */
	bool frozen; /* snapshot: the live sandbox was frozen for it */
	int dfd;     /* restore: <sandbox_dir>/<id>; the staging directory is made in it */
	char staging[48];
	uid_t uid;
	uint64_t max_bytes, max_entries;
} SnapOp;

static SnapOp *
snapop_free(SnapOp *o)
{
	if (!o)
		return NULL;
	safe_close(o->ws_fd);
	safe_close(o->dfd);
	free(o->key);
	free(o->label);
	free(o->bdir);
	free(o->record);
	free(o);
	return NULL;
}

static char *
backups_dir(Shim *s)
{
	char *p = NULL;
	return asprintf(&p, "%s/backups", s->conf->shared.state_dir) < 0 ? NULL : p;
}

/* The tenant's backups (backup-tenant.h) under tenant_max_backup_bytes, and
 * these marked as its: else answered (429 tenant_backup_quota, or the
 * error) and false. No tenant: no cap. */
static bool
backup_quota_ok(Shim *s, Peer *p, const Frame *f, const LogCtx *ctx, const char *bdir,
		const char *id, const char *tenant)
{
	uint64_t used = 0;
	char msg[160];
	int k;

	if (!tenant)
		return true;
	if (!tenant_name_valid(tenant)) {
		(void)peer_reply_error(p, f->req_id, -EINVAL,
				       "tenant must be 1..63 of [A-Za-z0-9_.-]");
		return false;
	}
	if (s->conf->tenant_max_backup_bytes > 0) {
		k = backup_tenant_bytes(bdir, tenant, &used);
		if (k < 0) {
			log_ctx_errno(LOG_WARNING, k, ctx,
				      "Cannot count the backups of tenant %s: %m", tenant);
			(void)peer_reply_error(p, f->req_id, k,
					       "cannot count the tenant's backups");
			return false;
		}
		if (used >= (uint64_t)s->conf->tenant_max_backup_bytes) {
			snprintf(msg, sizeof(msg),
				 "this tenant's backups hold %" PRIu64
				 " bytes (tenant_max_backup_bytes %" PRId64 ")",
				 used, s->conf->tenant_max_backup_bytes);
			log_ctx(LOG_INFO, ctx, "Snapshot refused: %s", msg);
			(void)peer_reply_error_reason(p, f->req_id, -EDQUOT,
						      REASON_TENANT_BACKUP_QUOTA, msg);
			return false;
		}
	}
	k = backup_tenant_mark(bdir, id, tenant);
	if (k < 0) {
		log_ctx_errno(LOG_WARNING, k, ctx, "Cannot mark the backups of %s: %m", id);
		(void)peer_reply_error(p, f->req_id, k, "cannot mark the backups' tenant");
		return false;
	}
	return true;
}

static bool
label_ok(const char *l)
{
	if (strlen(l) > SNAPSHOT_LABEL_MAX)
		return false;
	for (const unsigned char *p = (const unsigned char *)l; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* A SnapOp for the sandbox id of key: its copy of the key, the backups
 * directory and the restore caps. NULL when out of memory. */
static SnapOp *
snapop_new(Shim *s, const char id[static 17], const char *key)
{
	SnapOp *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	*o = (SnapOp){.s = s,
		      .ws_fd = -1,
		      .dfd = -1,
		      .max_bytes = (uint64_t)s->conf->restore_max_bytes,
		      .max_entries = (uint64_t)s->conf->restore_max_entries};
	memcpy(o->id, id, sizeof(o->id));
	memcpy(o->src_id, id, sizeof(o->src_id));
	if (!(o->key = strdup(key)) || !(o->bdir = backups_dir(s)))
		return snapop_free(o);
	return o;
}

/* Start-up: the temporaries (.<uuid>.tar.zst.tmp) of snapshot jobs killed with
 * a previous instance (kill -9, crash, power loss) are removed; the jobs of a
 * key are serialised and none runs yet. */
void
backups_clean_tmp(Shim *s)
{
	_cleanup_free_ char *bdir = backups_dir(s);
	DIR *d = bdir ? opendir(bdir) : NULL;
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		/* sandbox ids: 16 lowercase hex digits */
		if (strlen(de->d_name) != 16 || strspn(de->d_name, "0123456789abcdef") != 16)
			continue;
		int k = snapshot_prune(bdir, de->d_name, 0, NULL, NULL);
		if (k < 0)
			log_warning_errno(k, "Cannot clean the backups of %s: %m", de->d_name);
	}
	closedir(d);
}

/* ENSUREs held during a job: served now (or refused when stopping). */
static void
snap_release_held(Shim *s, SnapJob *j)
{
	SnapHeld *held = snapjob_take_held(j);

	for (SnapHeld *h = held; h; h = h->next) {
		if (!peer_deferred_peer(h->reply))
			continue; /* its connection closed meanwhile */
		int k = s->stopped ? -ESHUTDOWN
				   : ensure_key(s, &h->reply, h->key, h->run_id, h->thread_id, NULL,
						NULL, true);
		if (k < 0)
			(void)peer_deferred_error(TAKE_PTR(h->reply), k, NULL,
						  k == -ESHUTDOWN ? "containerd-shim is stopping"
								  : "sandbox creation failed");
	}
	snapheld_free_all(held);
}

static void
snap_reply_error(SnapJob *j, int err, const char *reason, const char *text)
{
	(void)peer_deferred_error(snapjob_take_reply(j), err, reason, text);
}

/* Child: archive the workspace. */
static int
snapshot_child(void *arg, char **ret_text, const char **ret_reason)
{
	SnapOp *o = arg;
	Reason err = {""};
	int k;

	k = snapshot_create_limited(o->bdir, o->id, o->ws_fd, o->label, o->max_bytes,
				    o->max_entries, ret_text, &err);
	if (k == 0) {
		/* kept beside the archive: listed, deleted, restored by its id */
		k = snaprec_store(o->bdir, o->id, *ret_text);
		if (k < 0) {
			free(*ret_text);
			if (asprintf(ret_text, "snapshot failed: cannot store its record: %s",
				     strerror(-k)) < 0)
				*ret_text = NULL;
			return -EIO;
		}
	}
	if (k == -SNAPSHOT_NOT_RESTORABLE) {
		/* What the restore would refuse is refused now, not at restore time. */
		if (asprintf(ret_text, "not_restorable: %s", err.msg) < 0)
			*ret_text = NULL;
		*ret_reason = REASON_NOT_RESTORABLE;
		return -EINVAL;
	}
	if (k < 0) {
		if (asprintf(ret_text, "snapshot failed: %s", reason_text(&err, k)) < 0)
			*ret_text = NULL;
		return k == -ENOMEM ? k : -EIO;
	}
	return 0;
}

/* The uuid in a record we made ("id":"…"), for snapshot_prune's spare. */
static void
record_uuid(const char *rec, char out[static 37])
{
	const char *p = strstr(rec, "\"id\":\"");

	out[0] = '\0';
	if (p && strlen(p + 6) > 36) {
		memcpy(out, p + 6, 36);
		out[36] = '\0';
		if (!snapshot_uuid_ok(out))
			out[0] = '\0';
	}
}

static void
snapshot_done(SnapJob *j, int err, const char *reason, const char *text, void *userdata)
{
	SnapOp *o = userdata;
	Shim *s = o->s;
	LogCtx ctx = {.thread_id = o->key, .sandbox_id = o->id};
	Sandbox *sb = o->frozen ? sandbox_find(s, o->id) : NULL;
	unsigned pruned = 0;
	char spare[37] = "";
	int k;

	if (sb && sb->cg) {
		k = cgroup_freeze(sb->cg, false);
		if (k < 0)
			log_ctx_errno(LOG_ERR, k, &ctx, "Cannot thaw sandbox %s: %m", o->id);
	}
	if (err >= 0)
		record_uuid(text, spare);
	/* Always: the temporary of a killed job; after a success: backups_keep. */
	k = snapshot_prune(o->bdir, o->id, err < 0 ? 0 : (unsigned)s->conf->backups_keep,
			   spare[0] ? spare : NULL, &pruned);
	if (k < 0)
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot prune the backups of %s: %m", o->id);
	else if (pruned)
		log_ctx(LOG_INFO, &ctx, "Pruned %u old backup(s) of %s (backups_keep=%" PRId64 ")",
			pruned, o->id, s->conf->backups_keep);
	if (err < 0) {
		log_ctx_errno(LOG_WARNING, err, &ctx, "Snapshot of %s failed: %s: %m", o->id, text);
		snap_reply_error(j, err, reason, text[0] ? text : "snapshot failed");
	} else {
		PeerDeferred *d = snapjob_take_reply(j);
		log_ctx(LOG_INFO, &ctx, "Snapshot of sandbox %s: %s", o->id, text);
		if (d)
			(void)reply_deferred_SANDBOX_SNAPSHOT(
			    d, &(Reply_SANDBOX_SNAPSHOT){.record = text});
	}
	snap_release_held(s, j);
	snapop_free(o);
}

/* What a snapshot or restore of key must pass before its job starts: none of
 * the key's running, its directory is the key's own (sandbox-key.h),
 * snapshot_max_jobs not reached, no file API change of the key in flight.
 * false after replying the error. */
static bool
job_may_start(Shim *s, Peer *p, const Frame *f, LogCtx *ctx, const char *id, const char *key,
	      bool restore)
{
	int k;

	if (snapjob_find(s->jobs, id)) {
		(void)peer_reply_error_reason(
		    p, f->req_id, -EBUSY, REASON_THREAD_BUSY,
		    "busy: a snapshot or restore of this thread is in progress");
		return false;
	}
	k = sandbox_key_check(s, ctx, id, key, restore, NULL);
	if (k < 0) {
		(void)peer_reply_error(p, f->req_id, k,
				       k == -EEXIST ? "sandbox id collision: the workspace belongs "
						      "to another key"
						    : "cannot check the sandbox's key");
		return false;
	}
	if (snapjobs_count(s->jobs) >= (size_t)s->conf->snapshot_max_jobs) {
		(void)peer_reply_error_reason(p, f->req_id, -EAGAIN, REASON_TOO_MANY_JOBS,
					      "too_many_jobs: snapshot_max_jobs snapshot/restore "
					      "jobs are running; retry later");
		return false;
	}
	if (shim_files_changing(s->files, id)) {
		(void)peer_reply_error_reason(
		    p, f->req_id, -EBUSY, REASON_THREAD_BUSY,
		    "busy: a file API change of this thread is in progress");
		return false;
	}
	return true;
}

int
handle_sandbox_snapshot(Peer *p, const Frame *f, const Msg_SANDBOX_SNAPSHOT *m, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const char *key = m->key, *label = m->label;
	_cleanup_free_ char *ws = NULL;
	SnapOp *o = NULL;
	SnapJob *j = NULL;
	PeerDeferred *d = NULL;
	Sandbox *sb;
	char id[17];
	int k;

	if (shim_sandbox_id(key, strlen(key), id) < 0 || (label && !label_ok(label))) {
		(void)peer_reply_error(
		    p, f->req_id, -EINVAL,
		    "key must be 1..256 bytes, label printable and at most 256 bytes");
		k = 0;
		goto out;
	}
	LogCtx ctx = {.thread_id = key, .sandbox_id = id};
	if (!job_may_start(s, p, f, &ctx, id, key, false)) {
		k = 0;
		goto out;
	}
	o = snapop_new(s, id, key);
	if (!o || (label && !(o->label = strdup(label)))) {
		k = -ENOMEM;
		goto out;
	}
	if (!backup_quota_ok(s, p, f, &ctx, o->bdir, id, m->tenant)) {
		k = 0;
		goto out;
	}
	if (asprintf(&ws, "%s/%s/workspace", s->conf->sandbox_dir, id) < 0) {
		ws = NULL;
		k = -ENOMEM;
		goto out;
	}
	/* A key that never had a sandbox has an empty workspace: an empty archive. */
	o->ws_fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (o->ws_fd < 0 && errno != ENOENT) {
		k = -errno;
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot open the workspace of %s: %m", id);
		(void)peer_reply_error(p, f->req_id, k, "cannot open the workspace");
		k = 0;
		goto out;
	}
	sb = sandbox_find(s, id);
	if (sb && sb->cg && sb->state != SANDBOX_DYING) {
		k = cgroup_freeze(sb->cg, true);
		o->frozen = true; /* thaw even after a partial freeze */
		if (k < 0) {
			log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot freeze sandbox %s: %m", id);
			(void)cgroup_freeze(sb->cg, false);
			(void)peer_reply_error(
			    p, f->req_id, -EIO,
			    "cannot freeze the sandbox for a consistent snapshot");
			k = 0;
			goto out;
		}
	}
	d = peer_defer(p, f);
	k = !d ? -ENOMEM
	       : snapjob_start(s->jobs,
			       &(SnapJobSpec){.kind = SNAPJOB_SNAPSHOT,
					      .id = id,
					      .timeout_ms = s->conf->snapshot_timeout_ms,
					      .keep_fds = &o->ws_fd,
					      .n_keep_fds = o->ws_fd >= 0 ? 1 : 0,
					      .fn = snapshot_child,
					      .arg = o,
					      .done = snapshot_done,
					      .userdata = o,
					      .reply = d},
			       &j);
	if (k < 0) {
		peer_deferred_free(d);
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot start the snapshot job of %s: %m", id);
		if (o->frozen && sb->cg)
			(void)cgroup_freeze(sb->cg, false);
		(void)peer_reply_error(p, f->req_id, k, "snapshot failed: cannot start the job");
		k = 0;
		goto out;
	}
	o->ws_fd = safe_close(o->ws_fd); /* the child has it */
	log_ctx(LOG_DEBUG, &ctx, "Snapshot of %s running as pid %d", id, snapjob_pid(j));
	o = NULL; /* snapshot_done() frees it */
	k = 0;
out:
	snapop_free(o);
	return k;
}

/* Kill the sandbox's processes and wait for them, now (the pid namespace is
 * gone once its init can be reaped). The caller then calls sandbox_dead(). */
static void
sandbox_kill_wait(Sandbox *sb)
{
	sandbox_kill(sb);
	sandbox_wait_exit(sb);
}

/* Child: check the record, unpack the archive into the staging directory. */
static int
restore_child(void *arg, char **ret_text, const char **ret_reason)
{
	SnapOp *o = arg;
	Reason err = {""};
	_cleanup_close_ int afd = -1;
	int k;

	const char *code;

	/* not_a_backup_record: the id is not one of ours for this thread;
	 * restore_rejected: it is, but its archive is damaged or holds what the
	 * restorer refuses; backup_not_found: it was pruned (its message says so
	 * itself). The message begins with the reason, as clients read it. */
	k = snapshot_verify(o->bdir, o->src_id, o->record, strlen(o->record), &afd, &err);
	*ret_reason = k == -EINVAL    ? REASON_NOT_A_BACKUP_RECORD
		      : k == -EBADMSG ? REASON_RESTORE_REJECTED
		      : k == -ENOENT  ? REASON_BACKUP_NOT_FOUND
				      : NULL;
	code = k == -EINVAL    ? "not_a_backup_record: "
	       : k == -EBADMSG ? "restore_rejected: "
	       : k == -ENOENT  ? ""
			       : "restore failed: ";
	if (k >= 0) {
		k = snapshot_unpack(afd, o->dfd, o->staging, o->uid, o->uid, o->max_bytes,
				    o->max_entries, &err);
		*ret_reason = k == -EINVAL ? REASON_RESTORE_REJECTED : NULL;
		code = k == -EINVAL ? "restore_rejected: " : "restore failed: ";
	}
	if (k == -EBADMSG)
		k = -EINVAL;
	if (k < 0 && asprintf(ret_text, "%s%s", code, reason_text(&err, k)) < 0)
		*ret_text = NULL;
	return k;
}

typedef struct Cleanup {
	int dfd;
	char name[48];
} Cleanup;

static int
cleanup_child(void *arg, char **ret_text, const char **ret_reason)
{
	Cleanup *cl = arg;
	return snapshot_rm_rf(cl->dfd, cl->name);
}

static void
cleanup_done(SnapJob *j, int err, const char *reason, const char *text, void *userdata)
{
	Cleanup *cl = userdata;

	if (err == -ESHUTDOWN) /* killed by shim_stop(): finish here, not leave half a tree */
		err = snapshot_rm_rf(cl->dfd, cl->name);
	if (err < 0)
		log_warning_errno(err, "Cannot remove %s: %s: %m", cl->name, text);
	safe_close(cl->dfd);
	free(cl);
}

/* Remove name (a staging or old workspace tree) below dfd in a child: a large
 * tree takes a while. Synchronously when no job can start (stopping). */
void
snap_remove_tree(Shim *s, int dfd, const char *name)
{
	Cleanup *cl = calloc(1, sizeof(*cl));
	int k = -ENOMEM;

	if (cl && (cl->dfd = fcntl(dfd, F_DUPFD_CLOEXEC, 3)) >= 0) {
		snprintf(cl->name, sizeof(cl->name), "%s", name);
		k = snapjob_start(s->jobs,
				  &(SnapJobSpec){.kind = SNAPJOB_CLEANUP,
						 .keep_fds = &cl->dfd,
						 .n_keep_fds = 1,
						 .fn = cleanup_child,
						 .arg = cl,
						 .done = cleanup_done,
						 .userdata = cl},
				  NULL);
	}
	if (k >= 0)
		return;
	if (cl)
		safe_close(cl->dfd);
	free(cl);
	k = snapshot_rm_rf(dfd, name);
	if (k < 0)
		log_warning_errno(k, "Cannot remove %s: %m", name);
}

/* Start-up: the staging trees (.restore-*) of restores killed with a previous
 * instance, partial or holding the swapped-out workspace, are removed (by
 * cleanup children: a tree may be large). */
void
staging_clean(Shim *s)
{
	DIR *d = opendir(s->conf->sandbox_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		_cleanup_close_ int dfd = -1;
		struct dirent *e;
		DIR *sd;
		int fd;
		if (strlen(de->d_name) != 16 || strspn(de->d_name, "0123456789abcdef") != 16)
			continue;
		dfd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		fd = dfd >= 0 ? fcntl(dfd, F_DUPFD_CLOEXEC, 3) : -1;
		sd = fd >= 0 ? fdopendir(fd) : NULL;
		if (!sd) {
			safe_close(fd);
			continue;
		}
		while ((e = readdir(sd)))
			if (strncmp(e->d_name, ".restore-", 9) == 0 && strlen(e->d_name) == 17) {
				log_notice("Removing %s/%s, left by a restore that was killed",
					   de->d_name, e->d_name);
				snap_remove_tree(s, dfd, e->d_name);
			}
		closedir(sd);
	}
	closedir(d);
}

static void
restore_done(SnapJob *j, int err, const char *reason, const char *text, void *userdata)
{
	SnapOp *o = userdata;
	Shim *s = o->s;
	LogCtx ctx = {.thread_id = o->key, .sandbox_id = o->id};
	Sandbox *sb;
	int k;

	if (err < 0) {
		if (err == -EINVAL)
			log_ctx(LOG_WARNING, &ctx, "Restore of %s refused: %s", o->id, text);
		else if (err == -ENOENT)
			log_ctx(LOG_INFO, &ctx, "Restore of %s refused: %s", o->id, text);
		else
			log_ctx_errno(err == -ETIME || err == -ECANCELED || err == -ESHUTDOWN
					  ? LOG_WARNING
					  : LOG_ERR,
				      err, &ctx, "Restore of %s failed: %s", o->id, text);
		snap_reply_error(j, err, reason, text[0] ? text : "restore failed");
		/* A killed job leaves its partial staging directory. */
		if (err != -EINVAL && err != -ENOENT)
			snap_remove_tree(s, o->dfd, o->staging);
		goto out;
	}
	/* The live sandbox binds the old directory: its processes go first. */
	sb = sandbox_find(s, o->id);
	if (sb) {
		log_ctx(LOG_INFO, &ctx, "Destroying sandbox %s for a restore", o->id);
		sandbox_kill_wait(sb);
	}
	k = 0;
	if (renameat2(o->dfd, o->staging, o->dfd, "workspace", RENAME_EXCHANGE) < 0 &&
	    (errno != ENOENT ||
	     renameat2(o->dfd, o->staging, o->dfd, "workspace", RENAME_NOREPLACE) < 0))
		k = -errno;
	/* After the swap: an ENSURE that waited for the dying sandbox gets its
	 * successor on the restored workspace. */
	if (sb)
		sandbox_dead(sb);
	if (k < 0) {
		log_ctx_errno(LOG_ERR, k, &ctx, "Cannot swap in the restored workspace: %m");
		snap_reply_error(j, k, NULL,
				 "restore failed: cannot swap in the restored workspace");
		snap_remove_tree(s, o->dfd, o->staging);
		goto out;
	}
	(void)fsync(o->dfd);
	/* watches follow the old tree: their next poll is watch_expired */
	shim_watches_drop(s->watches, o->id);
	log_ctx(LOG_INFO, &ctx, "Workspace of sandbox %s restored", o->id);
	answer_empty(snapjob_take_reply(j));	 /* sends nothing once its connection closed */
	snap_remove_tree(s, o->dfd, o->staging); /* the old workspace now */
out:
	snap_release_held(s, j);
	snapop_free(o);
}

/* fresh: a restore into a new sandbox refuses one that has a workspace
 * (exists). True after answering. */
static bool
restore_target_exists(Shim *s, Peer *p, const Frame *f, const char *id)
{
	_cleanup_free_ char *ws = NULL;

	if (asprintf(&ws, "%s/%s/workspace", s->conf->sandbox_dir, id) < 0)
		ws = NULL;
	if (ws && faccessat(AT_FDCWD, ws, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
		return false;
	(void)peer_reply_error_reason(p, f->req_id, ws ? -EEXIST : -ENOMEM, REASON_EXISTS,
				      "the sandbox exists (it has a workspace)");
	return true;
}

/* The record to restore: the one given, or the stored one of a short id (a
 * snapshot's uuid; snaprec.h). 1: o->record set; 0 answered; <0 an errno. */
static int
restore_record(SnapOp *o, Peer *p, const Frame *f, const char *record)
{
	int k;

	if (!snapshot_uuid_ok(record)) {
		o->record = strdup(record);
		return o->record ? 1 : -ENOMEM;
	}
	k = snaprec_load(o->bdir, o->src_id, record, &o->record);
	if (k == -ENOMEM)
		return k;
	if (k < 0) {
		(void)peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_SNAPSHOT_NOT_FOUND,
					      "no such snapshot");
		return 0;
	}
	return 1;
}

int
handle_sandbox_restore(Peer *p, const Frame *f, const Msg_SANDBOX_RESTORE *m, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;
	const ShimConf *conf = s->conf;
	const char *key = m->key, *record = m->record;
	_cleanup_free_ char *dir = NULL;
	SnapOp *o = NULL;
	SnapJob *j = NULL;
	PeerDeferred *d = NULL;
	char id[17], src[17];
	unsigned char b[4];
	char rnd[2 * sizeof(b) + 1];
	int k;

	if (shim_sandbox_id(key, strlen(key), id) < 0 ||
	    shim_sandbox_id(m->from_key ? m->from_key : key,
			    strlen(m->from_key ? m->from_key : key), src) < 0) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "key must be 1..256 bytes");
		k = 0;
		goto out;
	}
	LogCtx ctx = {.thread_id = key, .sandbox_id = id};
	if (m->has_fresh && m->fresh && restore_target_exists(s, p, f, id)) {
		k = 0;
		goto out;
	}
	if (!job_may_start(s, p, f, &ctx, id, key, true)) {
		k = 0;
		goto out;
	}
	o = snapop_new(s, id, key);
	if (!o) {
		k = -ENOMEM;
		goto out;
	}
	memcpy(o->src_id, src, sizeof(src));
	k = restore_record(o, p, f, record);
	if (k <= 0)
		goto out; /* answered, or out of memory */
	o->uid = (uid_t)conf->host_uid;
	if (asprintf(&dir, "%s/%s", conf->sandbox_dir, id) < 0) {
		dir = NULL;
		k = -ENOMEM;
		goto out;
	}
	k = mkdir_p(dir, 0700);
	if (k < 0)
		goto out;
	o->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (o->dfd < 0) {
		k = -errno;
		goto out;
	}
	if (getrandom(b, sizeof(b), 0) != sizeof(b)) {
		k = -EIO;
		goto out;
	}
	hex_encode(b, sizeof(b), rnd);
	snprintf(o->staging, sizeof(o->staging), ".restore-%s", rnd);
	/* Unpack first: a refused archive leaves the sandbox and its workspace alone. */
	d = peer_defer(p, f);
	k = !d ? -ENOMEM
	       : snapjob_start(s->jobs,
			       &(SnapJobSpec){.kind = SNAPJOB_RESTORE,
					      .id = id,
					      .timeout_ms = conf->snapshot_timeout_ms,
					      .keep_fds = &o->dfd,
					      .n_keep_fds = 1,
					      .fn = restore_child,
					      .arg = o,
					      .done = restore_done,
					      .userdata = o,
					      .reply = d},
			       &j);
	if (k < 0) {
		peer_deferred_free(d);
		log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot start the restore job of %s: %m", id);
		(void)peer_reply_error(p, f->req_id, k, "restore failed: cannot start the job");
		k = 0;
		goto out;
	}
	log_ctx(LOG_DEBUG, &ctx, "Restore of %s running as pid %d", id, snapjob_pid(j));
	o = NULL; /* restore_done() frees it */
	k = 0;
out:
	snapop_free(o);
	return k;
}
