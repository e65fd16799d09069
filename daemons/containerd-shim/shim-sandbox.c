/* SPDX-License-Identifier: MIT */
/*
 * shim-sandbox.c — the sandbox table: the lowest layer of the shim (shim-int.h).
 *
 * Owns Shim.sandboxes and Shim.graves. sandbox_create makes a sandbox for a
 * key: its workspace <sandbox_dir>/<id>/workspace (owned by host_uid, quota:
 * quota.h), its cgroup sb-<cg_id> and its init (sandbox_spawn_begin, sandbox.h:
 * the spawner's exit, an event of the loop, hands over to the init), linked
 * as STARTING; sandbox_start is the cgroup + init part alone (the pool
 * uses it for sandboxes of no key yet). sandbox_kill (destroy) and
 * sandbox_stop (idle or evicted: the workspace stays) SIGKILL the init and the
 * cgroup; the pidfd then reports the death and sandbox_dead answers whoever
 * waits (ensure, destroy) and frees the Sandbox. A dead sandbox's cgroup goes
 * into a grave, retried until it is empty.
 *
 * The init wire (InitMsg, sandbox.h): READY and SETUP_FAILED are the
 * sandbox's own and answer its ensure waiters; the messages about execs, and
 * the consequences of a death for execs, the pool and the queue, go up
 * through Shim.hooks (SandboxHooks, shim-int.h): this file names no function
 * of another layer.
 *
 * Also the small helpers every layer uses: set_str, realtime_ms, the LogCtx
 * builders, waiter lists (a request answered later), reply_ensure/reply_empty,
 * list_count/list_unlink.
 *
 * Errors: negative errno, logged where they happen; why a creation failed
 * goes in the caller's Reason (common/reason.h) for the ENSURE's ERROR reply.
 */
#include "config.h"

#include <errno.h>
#include <search.h>
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

#include "id-util.h"
#include "shim-int.h"
#include "strv.h"

/* ---------------------------------------------------------------------------
 * Small helpers.
 */

/* Replace *p with a copy of v (NULL clears). On ENOMEM the old value stays: a
 * log line with a stale run id beats none. */
void
set_str(char **p, const char *v)
{
	char *n = NULL;

	if (v == *p || (v && *p && streq(v, *p)))
		return;
	if (v && !(n = strdup(v)))
		return;
	free(*p);
	*p = n;
}

int64_t
realtime_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

LogCtx
sandbox_ctx(const Sandbox *sb)
{
	return (LogCtx){.run_id = sb->run_id, .thread_id = sb->thread_id, .sandbox_id = sb->id};
}

LogCtx
exec_ctx(const Exec *e)
{
	return (LogCtx){
	    .run_id = e->run_id, .thread_id = e->thread_id, .sandbox_id = e->sandbox_id};
}

static void
waiters_free(Waiter **l)
{
	while (*l) {
		Waiter *w = *l;
		*l = w->next;
		peer_deferred_free(w->reply);
		free(w);
	}
}

/* Drop the waiters whose connection closed. */
static void
waiters_prune(Waiter **l)
{
	while (*l) {
		if (!peer_deferred_peer((*l)->reply)) {
			Waiter *w = *l;
			*l = w->next;
			peer_deferred_free(w->reply);
			free(w);
		} else
			l = &(*l)->next;
	}
}

int
waiter_add(Waiter **l, PeerDeferred **d)
{
	Waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->reply = TAKE_PTR(*d);
	/* append: replies go out in request order */
	while (*l)
		l = &(*l)->next;
	*l = w;
	return 0;
}

int
sandbox_destroy_wait(Sandbox *sb, Peer *p, const Frame *f, bool purge)
{
	PeerDeferred *d = peer_defer(p, f);
	int k = d ? waiter_add(&sb->destroy_waiters, &d) : -ENOMEM;

	if (k < 0) {
		peer_deferred_free(d);
		return k;
	}
	sb->purge = sb->purge || purge;
	return 0;
}

void
answer_ensure(PeerDeferred *d, const char *id, bool created)
{
	Reply_SANDBOX_ENSURE rep = {.sandbox_id = id, .created = created, .has_created = true};

	(void)reply_deferred_SANDBOX_ENSURE(d, &rep);
}

void
answer_empty(PeerDeferred *d)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	(void)peer_deferred_reply(d, &w);
	mp_writer_done(&w);
}

void
reply_empty(Conn *c, uint64_t req_id)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	(void)peer_reply(c->peer, req_id, &w);
	mp_writer_done(&w);
}

/* ---------------------------------------------------------------------------
 * Sandboxes.
 */

static int
sandbox_cmp(const void *a, const void *b)
{
	return strcmp(((const Sandbox *)a)->id, ((const Sandbox *)b)->id);
}

Sandbox *
sandbox_find(Shim *s, const char *id)
{
	Sandbox key;
	void **n;

	if (strlen(id) >= sizeof(key.id))
		return NULL;
	memcpy(key.id, id, strlen(id) + 1);
	n = tfind(&key, &s->sandbox_index, sandbox_cmp);
	return n ? *n : NULL;
}

void
sandbox_link(Shim *s, Sandbox *sb)
{
	void **n;

	sb->next = s->sandboxes;
	s->sandboxes = sb;
	s->n_sandboxes++;
	n = tsearch(sb, &s->sandbox_index, sandbox_cmp);
	if (n)
		*n = sb; /* the newest of an id, as the list's order has it */
	else
		log_warning("Out of memory indexing sandbox %s", sb->id);
}

void
sandbox_unlink(Shim *s, Sandbox *sb)
{
	void **n = tfind(sb, &s->sandbox_index, sandbox_cmp);
	bool linked = false;

	for (Sandbox **pp = &s->sandboxes; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			linked = true;
			break;
		}
	if (linked)
		s->n_sandboxes--;
	if (!n || *n != sb)
		return;
	/* Another sandbox of this id (rare: one dying) takes its place. */
	for (Sandbox *o = s->sandboxes; o; o = o->next)
		if (streq(o->id, sb->id)) {
			*n = o;
			return;
		}
	(void)tdelete(sb, &s->sandbox_index, sandbox_cmp);
}

Sandbox *
sandbox_free(Sandbox *sb)
{
	if (!sb)
		return NULL;
	if (sb->sock_ev)
		event_free(sb->sock_ev);
	if (sb->pidfd_ev)
		event_free(sb->pidfd_ev);
	safe_close(sb->sock);
	safe_close(sb->pidfd);
	waiters_free(&sb->ensure_waiters);
	waiters_free(&sb->destroy_waiters);
	waiters_free(&sb->reensure_waiters);
	leafpool_drop(sb);
	cgroup_free(sb->cg);
	free(sb->fail_msg);
	free(sb->key);
	free(sb->run_id);
	free(sb->thread_id);
	free(sb->tenant);
	free(sb->next_run_id);
	free(sb->next_thread_id);
	free(sb->image);
	strv_free(sb->image_env);
	if (sb->pool_dir) {
		pool_dir_release(sb->pool_dir);
		free(sb->pool_dir);
	}
	free(sb);
	return NULL;
}

/* Prepare <sandbox_dir>/<id>/workspace, owned by host_uid: it persists across
 * re-creations of the sandbox for the same key. */
int
sandbox_prepare_workspace(Shim *s, const char *id, char **ret_path, Reason *why)
{
	const ShimConf *c = s->conf;
	_cleanup_free_ char *dir = NULL, *ws = NULL;
	_cleanup_close_ int fd = -1;
	uint32_t projid;
	int r;

	if (asprintf(&dir, "%s/%s", c->sandbox_dir, id) < 0 ||
	    asprintf(&ws, "%s/workspace", dir) < 0)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		return log_error_errno(r, "Failed to create '%s': %m", dir);
	if (mkdir(ws, 0700) < 0 && errno != EEXIST)
		return log_error_errno(errno, "Failed to create '%s': %m", ws);
	/* O_NOFOLLOW + fchown: never chown through a planted symlink. */
	fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return log_error_errno(errno, "Failed to open '%s': %m", ws);
	if (fchown(fd, (uid_t)c->host_uid, (gid_t)c->host_uid) < 0)
		return log_error_errno(errno, "Failed to chown '%s': %m", ws);
	r = quota_workspace_apply(c, id, fd, ws, &projid, why);
	if (r < 0)
		return r;
	*ret_path = TAKE_PTR(ws);
	return 0;
}

/* <sandbox_dir>/<id> belongs to key (sandbox-key.h), else -EEXIST (logged:
 * two keys with one id). create: make and claim the directory when absent.
 * *ret_absent (may be NULL): there is none (and create was false). */
int
sandbox_key_check(Shim *s, const LogCtx *ctx, const char *id, const char *key, bool create,
		  bool *ret_absent)
{
	int r;

	if (s->sandbox_dfd < 0)
		return log_ctx_errno(LOG_ERR, SYNTHETIC_ERRNO(EBADF), ctx, "No '%s' open",
				     s->conf->sandbox_dir);
	r = sandbox_key_claim_full(s->sandbox_dfd, id, key, strlen(key), SANDBOX_KEY_MAX, create,
				   ret_absent);
	if (r == -EEXIST)
		return log_ctx_errno(LOG_ERR, r, ctx,
				     "Sandbox id collision: the directory of %s belongs to another "
				     "key than '%s'",
				     id, key);
	if (r < 0)
		return log_ctx_errno(LOG_ERR, r, ctx, "Cannot check the key of sandbox %s: %m", id);
	return 0;
}

/* ---------------------------------------------------------------------------
 * Spares: a new key's directory <sandbox_dir>/<id> — an empty `key` file and
 * its `workspace` (owned by host_uid, quota applied) — made ahead of time
 * under <sandbox_dir>/.spare/<random> by the pool's refill (shim-capacity.c:
 * as many as pool_size), so that an ENSURE of a key with no directory creates
 * no inode: it writes the key into the spare's `key` and renames the spare
 * into place without replacing anything (RENAME_NOREPLACE: a directory that
 * appeared meanwhile is never replaced, the spare waits for the next key). On
 * a filesystem without a journal each new inode costs a scan of the inodes
 * freed recently (ext4's recently_deleted), ~1 ms each here.
 *
 * The key is in the file before the directory has its name: whoever finds
 * <id> finds it claimed (sandbox-key.h; not fsynced, as there: a crash may
 * leave an empty file, which the first key to come claims again). The
 * workspace's project id was allocated from the spare's name and stays with
 * the directory (quota.h: recorded on it). A spare never held anything of a
 * sandbox: those left by a predecessor are removed at start (spares_clean).
 */

size_t
spares_count(const Shim *s)
{
	size_t n = 0;
	for (const Spare *p = s->spares; p; p = p->next)
		n++;
	return n;
}

/* Make one spare (on the loop, off any request's path). */
int
spare_make(Shim *s)
{
	const ShimConf *c = s->conf;
	_cleanup_free_ Spare *sp = calloc(1, sizeof(*sp));
	_cleanup_close_ int dir = -1, fd = -1;
	_cleanup_free_ char *ws = NULL;
	uint8_t rnd[8];
	uint32_t projid;
	int r;

	if (!sp)
		return -ENOMEM;
	if (s->spare_dfd < 0)
		return -EBADF;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -errno;
	hex_encode(rnd, sizeof(rnd), sp->name);
	if (asprintf(&ws, "%s/.spare/%s/workspace", c->sandbox_dir, sp->name) < 0)
		return -ENOMEM;
	if (mkdirat(s->spare_dfd, sp->name, 0700) < 0)
		return log_warning_errno(errno, "Failed to create a spare sandbox directory: %m");
	dir = openat(s->spare_dfd, sp->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0) {
		r = -errno;
		goto fail;
	}
	fd = openat(dir, SANDBOX_KEY_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0 || mkdirat(dir, "workspace", 0700) < 0) {
		r = -errno;
		goto fail;
	}
	fd = safe_close(fd);
	fd = openat(dir, "workspace", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fchown(fd, (uid_t)c->host_uid, (gid_t)c->host_uid) < 0) {
		r = -errno;
		goto fail;
	}
	r = quota_workspace_apply(c, sp->name, fd, ws, &projid, NULL);
	if (r < 0)
		goto fail;
	sp->next = s->spares;
	s->spares = TAKE_PTR(sp);
	return 0;
fail:
	log_warning_errno(r, "Failed to prepare spare sandbox directory %s: %m", sp->name);
	(void)snapshot_rm_rf(s->spare_dfd, sp->name);
	return r;
}

/* Rename a spare into place as <sandbox_dir>/<id>, claimed for key. 1 and
 * *ret_ws; 0 when there is no spare or <id> exists by now (the spare stays). */
static int
spare_place(Shim *s, const char *id, const char *key, char **ret_ws)
{
	Spare *sp = s->spares;
	_cleanup_free_ char *ws = NULL;
	_cleanup_close_ int fd = -1;
	char path[64];
	int r;

	if (!sp)
		return 0;
	if (asprintf(&ws, "%s/%s/workspace", s->conf->sandbox_dir, id) < 0)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/" SANDBOX_KEY_FILE, sp->name);
	fd = openat(s->spare_dfd, path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		r = -errno;
	else
		r = loop_write(fd, key, strlen(key));
	if (r >= 0 && renameat2(s->spare_dfd, sp->name, s->sandbox_dfd, id, RENAME_NOREPLACE) < 0)
		r = -errno;
	if (r == -EEXIST && ftruncate(fd, 0) == 0)
		return 0; /* the key's directory appeared: it serves, the spare waits */
	s->spares = sp->next;
	if (r < 0) { /* a spare we cannot vouch for any more: away with it */
		log_warning_errno(r, "Failed to use spare sandbox directory %s: %m", sp->name);
		(void)snapshot_rm_rf(s->spare_dfd, sp->name);
		free(sp);
		return 0;
	}
	free(sp);
	*ret_ws = TAKE_PTR(ws);
	return 1;
}

/* What a predecessor left under .spare (nothing of a sandbox's). */
void
spares_clean(Shim *s)
{
	DIR *d;
	int dup_fd;

	if (s->spare_dfd < 0 || (dup_fd = fcntl(s->spare_dfd, F_DUPFD_CLOEXEC, 3)) < 0)
		return;
	d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return;
	}
	for (struct dirent *de; (de = readdir(d));)
		if (de->d_name[0] != '.') {
			int r = snapshot_rm_rf(s->spare_dfd, de->d_name);
			if (r < 0)
				log_warning_errno(r, "Failed to remove spare '%s': %m", de->d_name);
		}
	closedir(d);
}

/* Forget the spares (at exit: the next start removes them). */
void
spares_free(Shim *s)
{
	while (s->spares) {
		Spare *sp = s->spares;
		s->spares = sp->next;
		free(sp);
	}
}

/* The workspace of a sandbox for key: a spare renamed into place when the
 * directory is known to be absent, else the directory checked (and claimed,
 * made when absent) and its workspace prepared. */
int
sandbox_workspace(Shim *s, const LogCtx *ctx, const char *key, const char *id, SandboxDir dir,
		  char **ret_ws, Reason *why)
{
	int r;

	if (dir == SANDBOX_DIR_ABSENT && !s->spares_off) {
		r = spare_place(s, id, key, ret_ws);
		if (r > 0)
			return 0;
		if (r < 0)
			return r;
	}
	if (dir != SANDBOX_DIR_CLAIMED) {
		r = sandbox_key_check(s, ctx, id, key, true, NULL);
		if (r < 0) {
			reason_set(why, "%s",
				   r == -EEXIST ? "sandbox id collision: the workspace belongs to "
						  "another key"
						: "cannot check the sandbox's key");
			return r;
		}
	}
	r = sandbox_prepare_workspace(s, id, ret_ws, why);
	if (r < 0 && why && !why->msg[0])
		reason_set(why, "workspace: %s", strerror(-r));
	return r;
}

/* Remove <sandbox_dir>/<id> (the workspace of a key whose sandbox is gone)
 * without following anything the sandbox may have planted. */
int
sandbox_purge(Shim *s, const char *id)
{
	_cleanup_close_ int dfd = open(s->conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r;

	if (dfd < 0)
		return log_error_errno(errno, "Failed to open '%s': %m", s->conf->sandbox_dir);
	r = snapshot_rm_rf(dfd, id);
	if (r < 0 && r != -ENOENT)
		return log_error_errno(r, "Failed to remove the directory of sandbox %s: %m", id);
	log_debug("Sandbox %s: directory removed", id);
	return 0;
}

/* Forget graves of this name: the cgroup directory is about to be reused. */
static void
graves_forget(Shim *s, const char *name)
{
	for (Grave **pp = &s->graves; *pp;) {
		Grave *g = *pp;
		if (streq(cgroup_name(g->cg), name)) {
			*pp = g->next;
			cgroup_free(g->cg);
			free(g);
		} else
			pp = &g->next;
	}
}

/* Retry removing the cgroups of dead sandboxes until they are empty. */
void
graves_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	struct timeval tv;

	for (Grave **pp = &s->graves; *pp;) {
		Grave *g = *pp;
		int r = cgroup_remove(g->cg);
		if (r == -EBUSY && ++g->tries < GRAVE_MAX_TRIES) {
			if (g->tries % 50 == 0)
				(void)cgroup_kill(g->cg);
			pp = &g->next;
			continue;
		}
		if (r < 0)
			log_warning_errno(r, "Failed to remove cgroup %s, leaving it: %m",
					  cgroup_name(g->cg));
		*pp = g->next;
		cgroup_free(g->cg);
		free(g);
	}
	if (s->graves && !evtimer_pending(s->grave_timer, NULL))
		evtimer_add(s->grave_timer, timeval_from_usec(&tv, GRAVE_RETRY_USEC));
}

/* Take ownership of cg: remove it now or keep retrying. */
void
graves_add(Shim *s, Cgroup *cg)
{
	Grave *g;
	int r;

	if (!cg)
		return;
	r = cgroup_remove(cg);
	if (r != -EBUSY) {
		if (r < 0)
			log_warning_errno(r, "Failed to remove cgroup %s: %m", cgroup_name(cg));
		cgroup_free(cg);
		return;
	}
	g = calloc(1, sizeof(*g));
	if (!g) {
		cgroup_free(cg);
		return;
	}
	g->cg = cg;
	g->next = s->graves;
	s->graves = g;
	graves_cb(-1, 0, s);
}

/* Re-adoption (adopt.h): the init's listening socket and the sandbox's record. */
static int
adopt_prepare_spec(Shim *s, Sandbox *sb, SandboxSpec *spec, Reason *why)
{
	LogCtx ctx = sandbox_ctx(sb);
	int r;

	spec->orphan_ms = s->conf->sandbox_orphan_ms;
	spec->output_window = (uint64_t)s->conf->exec_output_buffer;
	r = adopt_listen(s->rt_dfd, sb->id, &spec->listen_fd);
	if (r >= 0)
		r = adopt_save_sandbox(s->rt_dfd, sb->id, sb->key, sb->run_id, sb->thread_id,
				       sb->cg_id);
	if (r >= 0 && sb->pooled) /* its first exec's record: made now, not at its start */
		r = adopt_spare_exec(s->rt_dfd, sb->id);
	if (r < 0) {
		reason_set(why, "runtime state: %s", strerror(-r));
		log_ctx_errno(LOG_ERR, r, &ctx, "Failed to prepare the re-adoption state: %m");
	}
	return r;
}

/* Create the cgroup (named sb-<cg_id>) and spawn the init of sb with the
 * workspace ws (slave: a pool mount point, see below). Does not link sb. */
int
sandbox_start(Shim *s, Sandbox *sb, const char *ws, bool slave, const char *cg_id,
	      const LogCtx *ctx, Reason *why)
{
	const ShimConf *c = s->conf;
	SandboxSpec spec;
	ImageInfo image;
	char image_lock[sizeof(s->images.dir) + 8];
	int r;

	if (!slave) { /* a pooled sandbox is on the host's binds */
		Reason iwhy = {""};
		r = shim_image_resolve(s, sb, &image, &iwhy);
		if (r < 0) {
			reason_set(why, "%s", iwhy.msg);
			return log_ctx_errno(LOG_ERR, r, ctx,
					     "Failed to find the sandbox's image: %s",
					     reason_text(&iwhy, r));
		}
	} else
		image = (ImageInfo){0};
	snprintf(image_lock, sizeof(image_lock), "%s/lock", s->images.dir);
	{
		Reason cerr = {""};
		char name[32];
		snprintf(name, sizeof(name), "sb-%s", cg_id);
		graves_forget(s, name);
		r = cgroup_create(s->cgroups, cg_id, &sb->cg, &cerr);
		if (r < 0) {
			reason_set(why, "cgroup: %s", reason_text(&cerr, r));
			return log_ctx_errno(LOG_ERR, r, ctx, "Failed to set up the cgroup: %s",
					     reason_text(&cerr, r));
		}
	}
	spec = (SandboxSpec){
	    .root_mnt = s->root_mnt,
	    .workspace = ws,
	    .workspace_slave = slave,
	    .ro_binds = c->ro_binds,
	    .image_root = image.rootfs[0] ? image.rootfs : NULL,
	    .image_lock = image_lock,
	    .etc_entries = c->etc_entries,
	    .sandbox_user = c->sandbox_user,
	    .userns_inotify_instances = c->userns_max_inotify_instances,
	    .userns_inotify_watches = c->userns_max_inotify_watches,
	    .userns_namespaces = c->userns_max_namespaces,
	    .tmp_size = c->tmp_size,
	    .tmp_inodes = c->tmp_inodes,
	    .sandbox_uid = (uid_t)c->sandbox_uid,
	    .host_uid = (uid_t)c->host_uid,
	    .seccomp = &s->seccomp,
	    .seccomp_exec = &s->seccomp_exec,
	    .rlimit_nofile = c->rlimit_nofile,
	    .rlimit_fsize = c->rlimit_fsize,
	    .rlimit_memlock = c->rlimit_memlock,
	    .listen_fd = -1,
	    .init_exe_fd = s->init_exe_fd,
	};
	cgroup_spawn_fds(sb->cg, &spec.cgroup_fd, &spec.procs_fds, &spec.n_procs_fds);
	r = adopt_prepare_spec(s, sb, &spec, why);
	if (r >= 0)
		r = sandbox_spawn_begin(&spec, &sb->pid, &sb->pidfd, &sb->sock);
	safe_close(spec.listen_fd); /* the init has its copy */
	if (r < 0) {
		adopt_forget_sandbox(s->rt_dfd, sb->id);
		reason_set(why, "spawn: %s", strerror(-r));
		leafpool_drop(sb);
		graves_add(s, TAKE_PTR(sb->cg));
		return log_ctx_errno(LOG_ERR, r, ctx, "Failed to spawn the sandbox init: %m");
	}
	sb->spawning = true;
	sb->sock_ev = event_new(s->base, sb->sock, EV_READ | EV_PERSIST, sandbox_sock_cb, sb);
	sb->pidfd_ev = event_new(s->base, sb->pidfd, EV_READ, sandbox_pidfd_cb, sb);
	if (!sb->sock_ev || !sb->pidfd_ev) {
		pid_t pid;
		int pidfd;
		if (sandbox_spawn_finish(sb->pidfd, sb->sock, (uid_t)c->sandbox_uid,
					 (uid_t)c->host_uid, &pid, &pidfd) >= 0) {
			(void)sandbox_pidfd_kill(pidfd, SIGKILL);
			(void)waitpid(pid, NULL, 0);
			safe_close(pidfd);
		}
		sb->spawning = false;
		leafpool_drop(sb);
		graves_add(s, TAKE_PTR(sb->cg));
		return -ENOMEM;
	}
	event_add(sb->pidfd_ev, NULL); /* the spawner's end: sandbox_spawned */
	sb->state = SANDBOX_STARTING;
	return 0;
}

/* The spawner of sb exited (its pidfd polled readable, or the caller waits
 * for it): the init it cloned takes its place (pid, pidfd, their event) and
 * the socket is watched. 0: the init runs (killed at once if sb was killed
 * meanwhile; its pidfd reports the end); a negative errno: there is no init,
 * sb is DYING with fail_err/fail_msg set, and the caller calls sandbox_dead(). */
static int
sandbox_spawned(Sandbox *sb)
{
	Shim *s = sb->shim;
	LogCtx ctx = sandbox_ctx(sb);
	pid_t pid;
	int pidfd, r;

	sb->spawning = false;
	r = sandbox_spawn_finish(sb->pidfd, sb->sock, (uid_t)s->conf->sandbox_uid,
				 (uid_t)s->conf->host_uid, &pid, &pidfd);
	event_free(sb->pidfd_ev);
	sb->pidfd_ev = NULL;
	sb->pidfd = safe_close(sb->pidfd);
	if (r >= 0) {
		sb->pidfd_ev = event_new(s->base, pidfd, EV_READ, sandbox_pidfd_cb, sb);
		if (!sb->pidfd_ev) {
			(void)sandbox_pidfd_kill(pidfd, SIGKILL);
			(void)waitpid(pid, NULL, 0);
			safe_close(pidfd);
			r = -ENOMEM;
		}
	}
	if (r < 0) { /* sb->pid stays the spawner's, reaped: waitpid() finds no child */
		free(sb->fail_msg);
		if (asprintf(&sb->fail_msg, "spawn: %s", strerror(-r)) < 0)
			sb->fail_msg = NULL;
		sb->fail_err = r;
		sb->state = SANDBOX_DYING;
		return log_ctx_errno(LOG_ERR, r, &ctx, "Failed to spawn the sandbox init: %m");
	}
	sb->pid = pid;
	sb->pidfd = pidfd;
	event_add(sb->pidfd_ev, NULL);
	event_add(sb->sock_ev, NULL);
	if (sb->state == SANDBOX_DYING) /* killed or stopped while spawning */
		(void)sandbox_pidfd_kill(sb->pidfd, SIGKILL);
	log_ctx(LOG_DEBUG, &ctx, "Sandbox init spawned as pid %d", (int)pid);
	return 0;
}

Sandbox *
sandbox_alloc(Shim *s)
{
	Sandbox *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return NULL;
	sb->shim = s;
	sb->pidfd = sb->sock = -1;
	return sb;
}

/* A new sandbox for key, its workspace ws (sandbox_workspace). */
int
sandbox_create(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	       const char *ws, Sandbox **ret, Reason *why)
{
	_cleanup_(sandbox_freep) Sandbox *sb = NULL;
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	int r;

	sb = sandbox_alloc(s);
	if (!sb)
		return -ENOMEM;
	memcpy(sb->id, id, sizeof(sb->id));
	sb->key = strdup(key);
	if (!sb->key)
		return -ENOMEM;
	set_str(&sb->run_id, run_id);
	set_str(&sb->thread_id, thread_id);
	memcpy(sb->cg_id, id, sizeof(sb->cg_id));
	r = sandbox_start(s, sb, ws, false, id, &ctx, why);
	if (r < 0)
		return r;
	sandbox_link(s, sb);
	*ret = TAKE_PTR(sb);
	return 0;
}

/* Unmount whatever is stacked on dir, then remove it. */
void
pool_dir_release(const char *dir)
{
	for (int i = 0; i < 8 && umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) == 0; i++)
		;
	if (rmdir(dir) < 0 && errno != ENOENT)
		log_warning_errno(errno, "Failed to remove pool mount point '%s': %m", dir);
}

size_t
list_count(const Sandbox *head)
{
	size_t n = 0;
	for (; head; head = head->next)
		n++;
	return n;
}

void
list_unlink(Sandbox **head, Sandbox *sb)
{
	for (Sandbox **pp = head; *pp; pp = &(*pp)->next)
		if (*pp == sb) {
			*pp = sb->next;
			return;
		}
}

/* Whether the init still runs (a pidfd polls readable once it exited; that
 * works for an adopted init too, which is not our child). */
bool
sandbox_alive(Sandbox *sb)
{
	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};

	return poll(&p, 1, 0) == 0;
}

/* Wait until the init exited (and reap it when it is our child). */
void
sandbox_wait_exit(Sandbox *sb)
{
	if (sb->spawning && sandbox_spawned(sb) < 0)
		return; /* no init */

	struct pollfd p = {.fd = sb->pidfd, .events = POLLIN};

	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	if (!sb->adopted)
		while (waitpid(sb->pid, NULL, 0) < 0 && errno == EINTR)
			;
}

/* Kill the init and the cgroup; false while spawning (sandbox_spawned() kills
 * the init once it exists). */
static bool
kill_procs(Sandbox *sb)
{
	if (sb->spawning)
		return false;
	/* Every process of the namespace dies with its init. ESRCH: already gone.
	 * cgroup.kill (or freezer + SIGKILL) on top, for anything that escaped the
	 * pid namespace's teardown. */
	(void)sandbox_pidfd_kill(sb->pidfd, SIGKILL);
	if (sb->cg)
		(void)cgroup_kill(sb->cg);
	return true;
}

void
sandbox_kill(Sandbox *sb)
{
	if (sb->state != SANDBOX_DYING || !sb->destroy_requested) {
		sb->destroy_requested = true;
		sb->state = SANDBOX_DYING;
	}
	if (!kill_procs(sb))
		return;
	for (Exec *e = sb->shim->execs; e; e = e->next)
		if (e->sandbox == sb)
			e->kill_requested = true;
}

/* Stop a sandbox's processes (idle, or to make room): the workspace stays. */
void
sandbox_stop(Sandbox *sb, const char *why)
{
	LogCtx ctx = sandbox_ctx(sb);

	log_ctx(LOG_INFO, &ctx, "Stopping sandbox %s (%s)", sb->id, why);
	sb->stopping = true;
	sb->state = SANDBOX_DYING;
	(void)kill_procs(sb);
}

static void
sandbox_fail_ensures(Sandbox *sb)
{
	char msg[600];

	snprintf(msg, sizeof(msg), "sandbox setup failed: %s",
		 sb->fail_msg		 ? sb->fail_msg
		 : sb->destroy_requested ? "destroyed during setup"
					 : "the sandbox init died");
	while (sb->ensure_waiters) {
		Waiter *w = sb->ensure_waiters;
		sb->ensure_waiters = w->next;
		(void)peer_deferred_error(w->reply, sb->fail_err ? sb->fail_err : -EIO, NULL, msg);
		free(w);
	}
}

void
sandbox_log_created(Sandbox *sb)
{
	LogCtx ctx = sandbox_ctx(sb);
	char ll[32] = "no Landlock";

	if (sb->landlock_abi > 0)
		snprintf(ll, sizeof(ll), "Landlock ABI %d", sb->landlock_abi);
	if (sb->pool_dir)
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_CREATED,
			      "Sandbox %s created (%s; from the pool, cgroup sb-%s)", sb->id, ll,
			      sb->cg_id);
	else
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_CREATED, "Sandbox %s created (%s)",
			      sb->id, ll);
}

static void
sandbox_on_msg(Sandbox *sb, const InitMsg *m, const char *payload, size_t len)
{
	LogCtx ctx = sandbox_ctx(sb);

	switch (m->type) {
	case INIT_MSG_READY:
		if (sb->state != SANDBOX_STARTING)
			break;
		sb->state = SANDBOX_READY;
		sb->landlock_abi = MAX(m->status, 0);
		if (sb->pooled) {
			sb->shim->pool_failures = 0;
			log_debug("Pooled sandbox %s ready", sb->id);
			break;
		}
		sandbox_log_created(sb);
		while (sb->ensure_waiters) {
			Waiter *w = sb->ensure_waiters;
			sb->ensure_waiters = w->next;
			answer_ensure(w->reply, sb->id, true);
			free(w);
		}
		break;
	case INIT_MSG_SETUP_FAILED:
		free(sb->fail_msg);
		sb->fail_msg = strndup(payload, len);
		sb->fail_err = -(m->err > 0 ? m->err : EIO);
		log_ctx(LOG_ERR, &ctx, "Sandbox %s setup failed: %s", sb->id,
			sb->fail_msg ? sb->fail_msg : "?");
		sb->state = SANDBOX_DYING;
		sandbox_fail_ensures(sb);
		break;
	default:
		/* STARTED, DATA, EOF, START_FAILED, EXITED: an exec's */
		sb->shim->hooks->exec_msg(sb, m, payload, len);
		break;
	}
}

void
sandbox_sock_cb(evutil_socket_t fd, short what, void *arg)
{
	Sandbox *sb = arg;
	char buf[sizeof(InitMsg) + 1024];

	for (;;) {
		int fds[3];
		size_t nfds = 0;
		InitMsg m;
		ssize_t n = fd_recv(sb->sock, buf, sizeof(buf), fds, ELEMENTSOF(fds), &nfds);

		for (size_t i = 0; i < nfds; i++)
			close(fds[i]); /* the init never sends fds */
		if (n == -EAGAIN || n == -EINTR)
			return;
		if (n <= 0) {
			/* The init is exiting; the pidfd tells when the namespace is gone. */
			event_del(sb->sock_ev);
			if (sb->state != SANDBOX_DYING)
				sb->state = SANDBOX_DYING;
			return;
		}
		if ((size_t)n < sizeof(InitMsg))
			continue;
		memcpy(&m, buf, sizeof(m));
		sandbox_on_msg(sb, &m, buf + sizeof(m), (size_t)n - sizeof(m));
	}
}

/* The init is dead and so is every process of the sandbox. */
void
sandbox_dead(Sandbox *sb)
{
	Shim *s = sb->shim;
	LogCtx ctx = sandbox_ctx(sb);
	Waiter *re;

	if (sb->pooled) {
		s->hooks->pooled_dead(sb);
		return;
	}
	/* Drain the socket: an EXITED may still sit there before the EOF. */
	sandbox_sock_cb(sb->sock, EV_READ, sb);
	if (!sb->adopted) /* else not our child: its parent now reaps it */
		(void)waitpid(sb->pid, NULL, WNOHANG);
	sandbox_unlink(s, sb);
	adopt_forget_sandbox(s->rt_dfd, sb->id);
	if (sb->destroy_requested)
		log_ctx_msgid(LOG_INFO, &ctx, RW_MESSAGE_SANDBOX_DESTROYED, "Sandbox %s destroyed",
			      sb->id);
	else if (sb->stopping)
		log_ctx(LOG_INFO, &ctx, "Sandbox %s stopped", sb->id);
	else if (!sb->fail_msg)
		log_ctx(LOG_WARNING, &ctx, "Sandbox %s init died unexpectedly", sb->id);

	s->hooks->execs_lost(sb);
	leafpool_drop(sb);
	graves_add(s, TAKE_PTR(sb->cg));
	netfwd_sandbox_gone(s->net, sb->id);
	if (sb->purge) {
		if (sb->pool_dir) { /* its workspace is still bound there: let go first */
			pool_dir_release(sb->pool_dir);
			free(sb->pool_dir);
			sb->pool_dir = NULL;
		}
		(void)sandbox_purge(s, sb->id);
	}
	sandbox_fail_ensures(sb);
	while (sb->destroy_waiters) {
		Waiter *w = sb->destroy_waiters;
		sb->destroy_waiters = w->next;
		answer_empty(w->reply);
		free(w);
	}

	/* ENSUREs that came in while it was dying get a fresh sandbox now. */
	re = TAKE_PTR(sb->reensure_waiters);
	waiters_prune(&re); /* none for the connections gone meanwhile */
	if (re && !s->stopped)
		s->hooks->reensure(sb, &re);
	waiters_free(&re);
	sandbox_free(sb);
	s->hooks->slot_freed(s); /* a slot is free */
}

void
sandbox_pidfd_cb(evutil_socket_t fd, short what, void *arg)
{
	Sandbox *sb = arg;

	if (sb->spawning && sandbox_spawned(sb) >= 0)
		return; /* the init runs now; its pidfd reports its end */
	sandbox_dead(sb);
}
