/* SPDX-License-Identifier: MIT */
/*
 * shim-capacity.c — which sandbox serves an ENSURE, and how many run
 * (shim-int.h, above shim-exec.c).
 *
 * ensure_key serves one SANDBOX_ENSURE: reuse the key's sandbox, wait for a
 * starting one, claim one from the pool, create one — or, beyond
 * max_instances, queue the request. The pool keeps pool_size sandboxes started
 * ahead and bound to no key (see "The pool" below). Once two tenants were
 * served, a tenant holding its share (tenant_max_instances) waits in the queue
 * too, while the others are served (docs/SECURITY.md "Tenants"). The queue is
 * FIFO per thread, served round robin over tenants then threads, pushes
 * SANDBOX_QUEUED with each place that changed and gives up at
 * queue_timeout_ms. The idle scan (every
 * IDLE_SCAN_USEC) stops sandboxes idle for sleep_after_ms and, when the queue
 * waits for a slot, the idle sandbox used longest ago (never one with a live
 * exec).
 *
 * Calls down into shim-exec.c and shim-sandbox.c; the sandbox layer reaches
 * this file through SandboxHooks.pooled_dead (pool_dead), .reensure
 * (capacity_reensure) and .slot_freed (queue_kick).
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

#include "id-util.h"
#include "shim-int.h"

/* ---------------------------------------------------------------------------
 * The pool: pool_size sandboxes started ahead and bound to no key, so that a
 * thread's sandbox is ready in the time it takes to bind its workspace (the
 * namespaces, mounts, cgroups and init cost tens of milliseconds; see
 * docs/DESIGN.md "The sandbox pool"). Never shared: a pooled sandbox has run
 * nothing, and once claimed it is an ordinary sandbox of one key.
 *
 * The shim runs in a mount namespace of its own (shim_new), a slave of the
 * host's. There each pooled sandbox has a mount point <sandbox_dir>/.pool/<n>,
 * a bind of the directory onto itself made private and then shared (its own
 * peer group), and the sandbox's /workspace is a slave clone of it
 * (SandboxSpec.workspace_slave). Claiming binds the thread's workspace onto
 * the mount point (nosuid, nodev): the mount propagates into that sandbox only
 * — to the host nothing propagates at all. Its cgroup keeps the random name it
 * was created with (cgroup2 has no rename); the reaper knows every sb-* name.
 */

/* <sandbox_dir>/.pool/<cg_id>: named by the sandbox's own random id, never
 * reused. It must outlive us while its sandbox lives: removing a directory
 * detaches every mount on it in every namespace (vfs_rmdir), and the bind of the
 * workspace in the sandbox sits on this directory. */
static int
pool_dir_make(Shim *s, const char *cg_id, char **ret)
{
	_cleanup_free_ char *dir = NULL;

	if (asprintf(&dir, "%s/%s", s->pool_root, cg_id) < 0)
		return -ENOMEM;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return log_error_errno(errno, "Failed to create '%s': %m", dir);
	if (mount(dir, dir, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, dir, NULL, MS_PRIVATE, NULL) < 0 ||
	    mount(NULL, dir, NULL, MS_SHARED, NULL) < 0) {
		int r = -errno;
		pool_dir_release(dir);
		return log_error_errno(r, "Failed to make '%s' a shared mount point: %m", dir);
	}
	*ret = TAKE_PTR(dir);
	return 0;
}

static int
pool_spawn(Shim *s)
{
	_cleanup_(sandbox_freep) Sandbox *sb = NULL;
	uint8_t rnd[8];
	LogCtx ctx = {0};
	int r;

	sb = sandbox_alloc(s);
	if (!sb)
		return -ENOMEM;
	sb->pooled = true;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -errno;
	hex_encode(rnd, sizeof(rnd), sb->id);
	ctx.sandbox_id = sb->id;
	memcpy(sb->cg_id, sb->id, sizeof(sb->cg_id));
	r = pool_dir_make(s, sb->cg_id, &sb->pool_dir);
	if (r < 0)
		return r;
	r = sandbox_start(s, sb, sb->pool_dir, true, sb->id, &ctx, NULL);
	if (r < 0)
		return r;
	sb->next = s->pool;
	s->pool = TAKE_PTR(sb);
	return 0;
}

/* The pool holds pool_size sandboxes and as many spare directories
 * (shim-sandbox.c "Spares": a claim of a new key then creates no inode). */
static bool
pool_full(Shim *s)
{
	return list_count(s->pool) >= (size_t)s->conf->pool_size &&
	       (s->spares_off || spares_count(s) >= (size_t)s->conf->pool_size);
}

void
pool_refill_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	usec_t now = now_usec();

	if (s->stopped || pool_full(s))
		return;
	if (now < s->pool_retry_at) {
		struct timeval tv;
		event_add(s->pool_ev, timeval_from_usec(&tv, s->pool_retry_at - now));
		return;
	}
	if (list_count(s->pool) < (size_t)s->conf->pool_size) {
		if (pool_spawn(s) < 0) {
			s->pool_failures++;
			s->pool_retry_at =
			    now + MIN((usec_t)1 << MIN(s->pool_failures, 6U), 60U) * USEC_PER_SEC;
		}
	} else if (spare_make(s) < 0) {
		log_warning("No spare sandbox directories until the next start (a claim makes "
			    "the directory of its key itself)");
		s->spares_off = true;
	}
	pool_kick(s); /* one per loop turn: the loop stays responsive */
}

void
pool_kick(Shim *s)
{
	usec_t now = now_usec();
	struct timeval tv;

	if (s->stopped || !s->pool_ev || pool_full(s))
		return;
	if (now < s->pool_retry_at)
		event_add(s->pool_ev, timeval_from_usec(&tv, s->pool_retry_at - now));
	else if (!event_pending(s->pool_ev, EV_TIMEOUT, NULL))
		event_active(s->pool_ev, EV_TIMEOUT, 0);
}

/* Bind the workspace ws onto the pool mount point dir (nosuid, nodev). */
static int
pool_bind_workspace(const char *dir, const char *ws)
{
	struct mount_attr a = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV};
	_cleanup_close_ int fd =
	    open_tree(AT_FDCWD, ws, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);

	if (fd < 0)
		return -errno;
	if (mount_setattr(fd, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0 ||
	    move_mount(fd, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return -errno;
	return 0;
}

/* Whether what the init pid sees at /workspace (in its own root and mount
 * namespace: the top of the stack of mounts there) is the directory ws (the
 * same inode of the same filesystem; before the bind it is the pool's mount
 * point). 0, or -ENOENT when it is not (the bind did not propagate). */
static int
pool_check_workspace(pid_t pid, const char *ws)
{
	struct stat want, got;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/root/workspace", (int)pid);
	if (fstatat(AT_FDCWD, ws, &want, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fstatat(AT_FDCWD, path, &got, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return S_ISDIR(got.st_mode) && got.st_dev == want.st_dev && got.st_ino == want.st_ino
		   ? 0
		   : -ENOENT;
}

/* Take a pooled sandbox for key (a ready one): bind the key's workspace ws
 * in and move it to the sandbox table. Returns 1 and *ret, 0 when the pool has
 * none (or binding failed: the caller creates one). */
static int
pool_claim(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	   const char *ws, Sandbox **ret)
{
	Sandbox *sb = NULL;
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	int r;

	/* Only a ready one: while its init still builds its root, the clone of the
	 * mount point may be detached, and a bind does not propagate into it. */
	for (Sandbox *p = s->pool; p && !sb; p = p->next)
		if (p->state == SANDBOX_READY)
			sb = p;
	if (!sb)
		return 0;
	sb->key = strdup(key);
	if (!sb->key)
		return -ENOMEM;
	r = pool_bind_workspace(sb->pool_dir, ws);
	if (r >= 0) /* fail closed: the sandbox must see it, not the empty mount point */
		r = pool_check_workspace(sb->pid, ws);
	if (r >= 0) /* its re-adoption state follows it to its new id */
		r = adopt_rename_sandbox(s->rt_dfd, sb->id, id);
	if (r >= 0) {
		/* rewritten in place (no new inode): an init with no exec record
		 * is never re-adopted, so a torn record is never read (adopt.h) */
		r = adopt_update_sandbox(s->rt_dfd, id, key, run_id, thread_id, sb->cg_id);
		if (r < 0)
			(void)adopt_rename_sandbox(s->rt_dfd, id, sb->id);
	}
	if (r < 0) {
		log_ctx_errno(LOG_WARNING, r, &ctx,
			      "Failed to hand pooled sandbox %s over (workspace bind, runtime "
			      "state), creating one instead: %m",
			      sb->id);
		free(sb->key);
		sb->key = NULL;
		sandbox_kill(sb);
		return 0;
	}
	sb->claimed_unsent = true; /* claim_notify(), once the ENSURE is answered */
	list_unlink(&s->pool, sb);
	sb->pooled = false;
	memcpy(sb->id, id, sizeof(sb->id));
	set_str(&sb->run_id, run_id);
	set_str(&sb->thread_id, thread_id);
	sandbox_link(s, sb);
	log_ctx(LOG_DEBUG, &ctx, "Sandbox %s taken from the pool (init pid %d)", id, (int)sb->pid);
	/* Refill a little later: building a sandbox keeps this loop busy for a few
	 * milliseconds, and the exec that follows a claim should not wait for it. */
	s->pool_retry_at = MAX(s->pool_retry_at, now_usec() + POOL_REFILL_DELAY_USEC);
	pool_kick(s);
	*ret = sb;
	return 1;
}

/* Tell a just-claimed init so (INIT_MSG_CLAIMED): it takes its Landlock
 * domain — which names the workspace bound there — now, while our client
 * learns of the claim, instead of on its first exec's path. After the reply:
 * on a host where the init shares a CPU with us, it would run first. */
static void
claim_notify(Sandbox *sb)
{
	InitMsg m = {.type = INIT_MSG_CLAIMED};

	if (!sb->claimed_unsent)
		return;
	sb->claimed_unsent = false;
	(void)fd_send(sb->sock, &m, sizeof(m), NULL, 0); /* else at the first exec */
}

/* A pooled sandbox died (setup failed, killed, or the shim stops). */
void
pool_dead(Sandbox *sb)
{
	Shim *s = sb->shim;

	sandbox_sock_cb(sb->sock, EV_READ, sb);
	(void)waitpid(sb->pid, NULL, WNOHANG);
	list_unlink(&s->pool, sb);
	adopt_forget_sandbox(s->rt_dfd, sb->id);
	if (!s->stopped && !sb->destroy_requested) {
		if (!sb->fail_msg)
			log_warning("Pooled sandbox %s died unexpectedly", sb->id);
		s->pool_failures++;
		s->pool_retry_at =
		    now_usec() + MIN((usec_t)1 << MIN(s->pool_failures, 6U), 60U) * USEC_PER_SEC;
	}
	leafpool_drop(sb);
	graves_add(s, TAKE_PTR(sb->cg));
	sandbox_free(sb);
	pool_kick(s);
}

/* Obtain a sandbox for key: from the pool, else a new one. dir: what the
 * caller knows of the key's directory (SandboxDir). *ret_ready: it is
 * serving already (the caller replies now rather than waiting for READY). */
static int
sandbox_obtain(Shim *s, const char *key, const char *id, const char *run_id, const char *thread_id,
	       SandboxDir dir, Sandbox **ret, bool *ret_ready, Reason *why)
{
	_cleanup_free_ char *ws = NULL;
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	int r = sandbox_workspace(s, &ctx, key, id, dir, &ws, why);

	if (r >= 0 && shim_image_on_host(s, id)) /* the pool is on the host's binds */
		r = pool_claim(s, key, id, run_id, thread_id, ws, ret);
	if (r < 0)
		return r;
	if (r > 0) {
		shim_image_claimed(s, id); /* the key is on the host's binds now */
		*ret_ready = (*ret)->state == SANDBOX_READY;
		if (*ret_ready)
			sandbox_log_created(*ret);
		return 0;
	}
	*ret_ready = false;
	return sandbox_create(s, key, id, run_id, thread_id, ws, ret, why);
}

/* Idle: serving, no exec running and none about to come (an ENSURE waiting or
 * answered without its EXEC_START yet). Only live execs are activity: what an
 * ended exec left running (a harness with keep_processes, or a client that
 * did not ask for kill_leftovers) never keeps a sandbox, or its slot, busy —
 * it is stopped with the sandbox (sleep_after_ms, or for a queued request). */
static bool
sandbox_idle(Sandbox *sb)
{
	if (sb->state != SANDBOX_READY || sb->ensure_waiters || now_usec() < sb->reserved_until ||
	    snapjob_find(sb->shim->jobs, sb->id))
		return false;
	return sb->live_execs == 0;
}

bool
capacity_sandbox_idle(Sandbox *sb)
{
	return sandbox_idle(sb);
}

Queued *
queued_free(Queued *q)
{
	if (!q)
		return NULL;
	if (q->timer)
		event_free(q->timer);
	peer_deferred_free(q->reply);
	free(q->key);
	free(q->run_id);
	free(q->thread_id);
	free(q->tenant);
	free(q);
	return NULL;
}

void
queue_unlink(Shim *s, Queued *q)
{
	for (Queued **pp = &s->queue; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			return;
		}
}

/* Tell each waiting requester its place when it changed (1 = next). */
void
queue_push_positions(Shim *s)
{
	uint64_t pos = 0;

	for (Queued *q = s->queue; q; q = q->next) {
		if (++pos == q->position)
			continue;
		q->position = pos;
		if (peer_deferred_peer(q->reply))
			(void)msg_push_SANDBOX_QUEUED(peer_deferred_peer(q->reply),
						      &(Msg_SANDBOX_QUEUED){.key = q->key,
									    .run_id = q->run_id,
									    .position = pos});
	}
}

static void
queue_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	Queued *q = arg;
	Shim *s = q->shim;
	char msg[160];

	snprintf(msg, sizeof(msg),
		 "no sandbox slot within queue_timeout_ms=%" PRId64 " (max_instances=%" PRId64 ")",
		 s->conf->queue_timeout_ms, s->conf->max_instances);
	{
		LogCtx ctx = {.run_id = q->run_id, .thread_id = q->thread_id};
		log_ctx(LOG_INFO, &ctx, "Queued request for '%s' timed out", q->key);
	}
	(void)peer_deferred_error(TAKE_PTR(q->reply), -ETIMEDOUT, NULL, msg);
	queue_unlink(s, q);
	queued_free(q);
	queue_push_positions(s);
}

/* The requester's connection closed: the request leaves the queue (conn_on_close
 * then tells the others their new places). */
static void
queued_cancelled(PeerDeferred *d, void *userdata)
{
	Queued *q = userdata;

	queue_unlink(q->shim, q);
	queued_free(q);
}

/* Takes *d (NULL) on success. */
static int
queue_add(Shim *s, PeerDeferred **d, const char *key, const char *run_id, const char *thread_id,
	  const char *tenant)
{
	Queued *q = calloc(1, sizeof(*q)), **pp;
	struct timeval tv;

	if (!q)
		return -ENOMEM;
	q->shim = s;
	q->key = strdup(key);
	q->run_id = run_id ? strdup(run_id) : NULL;
	q->thread_id = thread_id ? strdup(thread_id) : NULL;
	q->tenant = tenant ? strdup(tenant) : NULL;
	q->timer = evtimer_new(s->base, queue_timeout_cb, q);
	if (!q->key || (run_id && !q->run_id) || (thread_id && !q->thread_id) ||
	    (tenant && !q->tenant) || !q->timer) {
		queued_free(q);
		return -ENOMEM;
	}
	q->reply = TAKE_PTR(*d);
	peer_deferred_on_cancel(q->reply, queued_cancelled, q);
	if (s->conf->queue_timeout_ms > 0)
		evtimer_add(q->timer, timeval_from_usec(&tv, (usec_t)s->conf->queue_timeout_ms *
								 USEC_PER_MSEC));
	for (pp = &s->queue; *pp; pp = &(*pp)->next)
		;
	*pp = q;
	{
		LogCtx ctx = {.run_id = run_id, .thread_id = thread_id};
		log_ctx(LOG_INFO, &ctx,
			"Request for '%s' queued: %zu sandboxes live, max_instances %" PRId64, key,
			s->n_sandboxes, s->conf->max_instances);
	}
	queue_push_positions(s);
	queue_kick(s);
	return 0;
}

/* How many sandboxes (live or being created) serve thread_id. */
static size_t
thread_sandboxes(Shim *s, const char *thread_id)
{
	size_t n = 0;

	if (!thread_id)
		return 0;
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		if (sb->state != SANDBOX_DYING && sb->thread_id && streq(sb->thread_id, thread_id))
			n++;
	return n;
}

/* How many sandboxes (live or being created) tenant holds. */
static size_t
tenant_sandboxes(Shim *s, const char *tenant)
{
	size_t n = 0;

	if (!tenant)
		return 0;
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		if (sb->state != SANDBOX_DYING && sb->tenant && streq(sb->tenant, tenant))
			n++;
	return n;
}

/* Does tenant hold its share of the slots (tenant_max_instances, once two
 * tenants were served)? Its requests for a new sandbox wait then. */
static bool
tenant_at_share(Shim *s, const char *tenant)
{
	int64_t share = s->conf->tenant_max_instances;

	if (!s->multi_tenant || !tenant)
		return false;
	if (share <= 0)
		share = MAX(1, s->conf->max_instances / 2);
	return tenant_sandboxes(s, tenant) >= (size_t)share;
}

/* A queued request that a free slot would serve (its tenant under its share). */
static bool
queue_has_eligible(Shim *s)
{
	for (Queued *q = s->queue; q; q = q->next)
		if (!tenant_at_share(s, q->tenant))
			return true;
	return false;
}

/* The queued request to serve next. One whose key has a serving sandbox by now
 * needs no slot (the first of a thread's queued runs created it): it goes
 * first, whatever its place. Otherwise, when a slot is free, round-robin over
 * tenants, then threads: among the requests of tenants under their share, the
 * oldest of the tenant holding the fewest sandboxes, then of the thread
 * holding the fewest, so that one tenant's (or thread's) many runs never hold
 * back another's. */
static Queued *
queue_next(Shim *s, bool slot_free)
{
	Queued *best = NULL;
	size_t best_t = SIZE_MAX, best_n = SIZE_MAX;

	for (Queued *q = s->queue; q; q = q->next) {
		char id[17];
		Sandbox *sb;
		if (shim_sandbox_id(q->key, strlen(q->key), id) >= 0 &&
		    (sb = sandbox_find(s, id)) && sb->state != SANDBOX_DYING)
			return q;
	}
	if (!slot_free)
		return NULL;
	for (Queued *q = s->queue; q; q = q->next) {
		if (tenant_at_share(s, q->tenant))
			continue;
		size_t t = tenant_sandboxes(s, q->tenant), n = thread_sandboxes(s, q->thread_id);
		if (t < best_t || (t == best_t && n < best_n)) {
			best = q;
			best_t = t;
			best_n = n;
		}
	}
	return best;
}

/* The idle sandbox to stop for the queue: the one used longest ago (last_used,
 * stamped when its exec ends: the periodic scan's idle_since has a 200 ms
 * grain, and a tie went to whichever came first in the list) — anyone's when a
 * request under its tenant's share waits, else only one of a tenant at its
 * share that has a request waiting (its own sandbox makes room for it). NULL:
 * none, or a slot is being freed already (*ret_dying). */
static Sandbox *
queue_victim(Shim *s, bool *ret_dying)
{
	bool anyone = queue_has_eligible(s);
	Sandbox *victim = NULL;
	usec_t best = 0;

	*ret_dying = false;
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next) {
		if (sb->state == SANDBOX_DYING) {
			*ret_dying = true;
			return NULL;
		}
		if (!sandbox_idle(sb))
			continue;
		if (!anyone) {
			bool waits = false;
			for (Queued *q = s->queue; q && !waits; q = q->next)
				waits = q->tenant && sb->tenant && streq(q->tenant, sb->tenant);
			if (!waits)
				continue;
		}
		usec_t since = sb->last_used;
		if (!victim || since < best) {
			victim = sb;
			best = since;
		}
	}
	return victim;
}

/* Serve queued requests while they can be; if there is no slot, stop the
 * least recently used idle sandbox to make one (never one with a live exec;
 * processes an ended exec left behind do not count, see sandbox_idle). */
void
queue_kick(Shim *s)
{
	while (s->queue && !s->stopped) {
		Queued *q = queue_next(s, s->n_sandboxes < (size_t)s->conf->max_instances);
		if (q) {
			int k;
			queue_unlink(s, q);
			peer_deferred_on_cancel(q->reply, NULL, NULL); /* out of the queue */
			k = ensure_key(s, &q->reply, q->key, q->run_id, q->thread_id, q->tenant,
				       NULL, false);
			if (k < 0)
				(void)peer_deferred_error(TAKE_PTR(q->reply), k, NULL,
							  "sandbox creation failed");
			queued_free(q);
			continue;
		}
		bool dying;
		Sandbox *victim = queue_victim(s, &dying);
		if (dying)
			return; /* a slot is being freed already */
		if (victim)
			sandbox_stop(victim, "idle, its slot is needed by a queued request");
		break;
	}
	queue_push_positions(s);
}

/* SandboxHooks.reensure: the ENSUREs that came in while sb was dying (*re) get
 * a fresh sandbox now; those answered or handed to it leave *re. */
void
capacity_reensure(Sandbox *sb, Waiter **ret_re)
{
	Shim *s = sb->shim;
	Waiter *re = *ret_re;
	Sandbox *nsb = NULL;
	bool ready = false;
	int r = sandbox_obtain(s, sb->key, sb->id, sb->next_run_id, sb->next_thread_id,
			       SANDBOX_DIR_UNKNOWN, &nsb, &ready, NULL);
	if (r >= 0) {
		nsb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
		set_str(&nsb->tenant, sb->tenant);
	}
	if (r >= 0 && ready) {
		for (Waiter *w = re; w; w = w->next)
			answer_ensure(TAKE_PTR(w->reply), nsb->id, true);
		claim_notify(nsb);
	} else if (r >= 0) {
		nsb->ensure_waiters = re;
		re = NULL;
	} else
		for (Waiter *w = re; w; w = w->next)
			(void)peer_deferred_error(TAKE_PTR(w->reply), r, NULL,
						  "sandbox creation failed");
	*ret_re = re;
}

/* Periodic: stop sandboxes idle for sleep_after_ms; make room for the queue. */
void
idle_cb(evutil_socket_t fd, short what, void *arg)
{
	Shim *s = arg;
	usec_t now = now_usec();
	struct timeval tv;

	for (Sandbox *sb = s->sandboxes, *next; sb; sb = next) {
		next = sb->next;
		if (sb->leaves_pending)
			exec_leaves_prune(sb);
		if (!sandbox_idle(sb)) {
			sb->idle_since = 0;
			continue;
		}
		if (!sb->idle_since)
			sb->idle_since = now;
		else if (s->conf->sleep_after_ms > 0 &&
			 now - sb->idle_since >= (usec_t)s->conf->sleep_after_ms * USEC_PER_MSEC)
			sandbox_stop(sb, "idle for sleep_after_ms");
	}
	queue_kick(s);
	evtimer_add(s->idle_timer, timeval_from_usec(&tv, IDLE_SCAN_USEC));
}

/* Serve an ENSURE for key now: reuse, wait for a starting one, or create. With
 * may_queue, a new sandbox beyond max_instances waits in the FIFO queue
 * instead. Answers *d (or hands it to a waiter list, the queue or a snapshot
 * job) and takes it; < 0 = not taken, the caller answers ERROR. */
int
ensure_key(Shim *s, PeerDeferred **d, const char *key, const char *run_id, const char *thread_id,
	   const char *tenant, const char *image, bool may_queue)
{
	char id[17];
	Sandbox *sb;
	SandboxDir dir = SANDBOX_DIR_CLAIMED;
	usec_t t0 = now_usec();
	int k;

	k = shim_sandbox_id(key, strlen(key), id);
	if (k < 0) {
		(void)peer_deferred_error(TAKE_PTR(*d), k, NULL,
					  "key must be 1..256 bytes without NUL");
		return 0;
	}
	LogCtx ctx = {.run_id = run_id, .thread_id = thread_id, .sandbox_id = id};
	if (tenant && !s->multi_tenant) {
		if (!s->first_tenant)
			s->first_tenant = strdup(tenant);
		else if (!streq(s->first_tenant, tenant)) {
			s->multi_tenant = true;
			log_info("A second tenant: each holds at most its share of max_instances "
				 "now (tenant_max_instances)");
		}
	}
	sb = sandbox_find(s, id);
	if (sb && !streq(sb->key, key))
		return log_ctx_errno(LOG_ERR, -EEXIST, &ctx, "Sandbox id collision for '%s'", key);
	if (!sb) {
		/* No live one: the directory on disk must be this key's too. None
		 * yet: a spare becomes it (sandbox_workspace), or it is made then. */
		bool absent = false;
		k = sandbox_key_check(s, &ctx, id, key, false, &absent);
		if (absent)
			dir = SANDBOX_DIR_ABSENT;
		if (k < 0) {
			(void)peer_deferred_error(TAKE_PTR(*d), k, NULL,
						  k == -EEXIST
						      ? "sandbox id collision: the workspace "
							"belongs to another key"
						      : "cannot check the sandbox's key");
			return 0;
		}
	}
	if (sb && sb->state == SANDBOX_READY && !sandbox_alive(sb))
		sb->state = SANDBOX_DYING;
	if (image) { /* a thread's sandbox has one image: another one is a new sandbox */
		Reason iwhy = {""};
		k = shim_image_pick(s, id, image, sb && sb->state != SANDBOX_DYING ? sb : NULL,
				    &iwhy);
		if (k < 0) {
			(void)peer_deferred_error(TAKE_PTR(*d), k,
						  k == -ENOENT ? REASON_IMAGE_NOT_FOUND : NULL,
						  reason_text(&iwhy, k));
			return 0;
		}
		if (k > 0)
			sandbox_stop(sb, "a request asks for another image");
	}
	{
		/* A restore of the key, or a snapshot of it with no serving sandbox:
		 * wait for its end (snapshot section). */
		SnapJob *j = snapjob_find(s->jobs, id);
		if (j &&
		    (snapjob_kind(j) == SNAPJOB_RESTORE || !sb || sb->state != SANDBOX_READY)) {
			log_ctx(LOG_INFO, &ctx, "Request for '%s' waits for its snapshot/restore",
				key);
			return snapjob_hold(j, d, key, run_id, thread_id);
		}
	}
	if (sb) {
		sb->idle_since = 0; /* in use */
		sb->last_used = now_usec();
		sb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
		switch (sb->state) {
		case SANDBOX_READY:
			if (run_id && (!sb->run_id || !streq(run_id, sb->run_id)))
				log_ctx(LOG_INFO, &ctx, "Sandbox %s resumed", id);
			set_str(&sb->run_id, run_id);
			set_str(&sb->thread_id, thread_id);
			if (tenant)
				set_str(&sb->tenant, tenant);
			answer_ensure(TAKE_PTR(*d), id, false);
			return 0;
		case SANDBOX_STARTING:
			set_str(&sb->run_id, run_id);
			set_str(&sb->thread_id, thread_id);
			if (tenant)
				set_str(&sb->tenant, tenant);
			return waiter_add(&sb->ensure_waiters, d);
		case SANDBOX_DYING:
			set_str(&sb->next_run_id, run_id);
			set_str(&sb->next_thread_id, thread_id);
			return waiter_add(&sb->reensure_waiters, d);
		}
	}
	if (may_queue && (queue_has_eligible(s) || tenant_at_share(s, tenant) ||
			  s->n_sandboxes >= (size_t)s->conf->max_instances))
		return queue_add(s, d, key, run_id, thread_id, tenant);
	bool ready = false;
	Reason why = {""};
	k = sandbox_obtain(s, key, id, run_id, thread_id, dir, &sb, &ready, &why);
	if (k >= 0) {
		sb->reserved_until = now_usec() + ENSURE_RESERVE_USEC;
		if (tenant)
			set_str(&sb->tenant, tenant);
	}
	if (k >= 0 && ready) {
		answer_ensure(TAKE_PTR(*d), id, true);
		log_ctx(LOG_DEBUG, &ctx, "Sandbox %s served from the pool in %" PRIu64 " us", id,
			(uint64_t)(now_usec() - t0));
		claim_notify(sb);
		return 0;
	}
	if (k < 0) {
		char msg[400];
		snprintf(msg, sizeof(msg), "sandbox creation failed: %s", reason_text(&why, k));
		(void)peer_deferred_error(TAKE_PTR(*d), k, NULL, msg);
		return 0;
	}
	k = waiter_add(&sb->ensure_waiters, d);
	if (k >= 0)
		log_ctx(LOG_DEBUG, &ctx, "Creating sandbox %s", id);
	return k;
}

/* Stopping or handing over: every queued SANDBOX_ENSURE gets -ESHUTDOWN. */
void
queue_refuse_all(Shim *s)
{
	while (s->queue) {
		Queued *q = s->queue;
		s->queue = q->next;
		(void)peer_deferred_error(TAKE_PTR(q->reply), -ESHUTDOWN, NULL,
					  "containerd-shim is stopping");
		queued_free(q);
	}
}
