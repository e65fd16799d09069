/* SPDX-License-Identifier: MIT */
/*
 * shim.c — the containerd-shim's top layer (shim-int.h): the control socket,
 * the request handler table, connections and the lifecycle (shim.h).
 *
 * Each request handler decodes its frame and calls down into the layers; the
 * wire is in shim.h and docs/PROTOCOL.md. The handlers of a layer's own
 * requests live in that layer (EXEC_*: shim-exec.c, SANDBOX_SNAPSHOT/RESTORE:
 * shim-snap.c); the table below names them all. Connections: a PeerServer
 * (peer-server.h: SO_PEERCRED, socket_group; shim.h); on close the peer drops
 * every answer still owed on the connection (PeerDeferred). Lifecycle: shim_new sets the process up
 * (groups, mount namespace, seccomp programs, cgroups), adopts what a predecessor left and starts
 * listening; shim_stop and shim_handover end it.
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
#include <openssl/evp.h>

#include "image-cmd.h"
#include "shim-int.h"
#include "strv.h"

Shim *shim_free(Shim *s);

/* ---------------------------------------------------------------------------
 * Request handlers. Each returns < 0 for "answer ERROR with this errno".
 */

static int
handle_sandbox_ensure(Peer *p, const Frame *f, const Msg_SANDBOX_ENSURE *m, void *userdata)
{
	Conn *c = userdata;
	PeerDeferred *d = peer_defer(p, f);
	int k;

	if (!d)
		return -ENOMEM;
	k = ensure_key(c->shim, &d, m->key, m->run_id, m->thread_id, m->tenant, m->image, true);
	peer_deferred_free(d); /* not taken: answered ERROR k */
	return k;
}

static int
handle_sandbox_destroy(Peer *p, const Frame *f, const Msg_SANDBOX_DESTROY *m, void *userdata)
{
	Conn *c = userdata;
	const char *id = m->sandbox_id;
	Sandbox *sb;
	int k;

	if (strlen(id) != 16 || strspn(id, "0123456789abcdef") != 16)
		return m->purge ? -EINVAL : -ENOENT; /* no sandbox has such an id */
	sb = sandbox_find(c->shim, id);
	if (!sb && m->purge) {
		k = sandbox_purge(c->shim, id);
		if (k < 0)
			return k;
		reply_empty(c, f->req_id);
		return 0;
	}
	if (!sb) {
		/* Gone already (stopped when idle, or its init died): what was asked
		 * holds. Only an id no sandbox can have is an error (above). */
		reply_empty(c, f->req_id);
		return 0;
	}
	k = sandbox_destroy_wait(sb, p, f, m->purge);
	if (k < 0)
		return k;
	sandbox_kill(sb);
	return 0;
}

static int
handle_sandbox_stats(Peer *p, const Frame *f, const Msg_SANDBOX_STATS *m, void *userdata)
{
	Conn *c = userdata;
	Reply_SANDBOX_STATS rep = {};
	Sandbox *sb;
	int k;

	sb = sandbox_find(c->shim, m->sandbox_id);
	if (!sb || !sb->cg)
		return -ENOENT;
	k = cgroup_stats(sb->cg, &rep.cpu_usec, &rep.procs);
	if (k < 0)
		return k;
	/* the exec's own CPU (its leaf): what other execs, or processes an ended
	 * one left behind, use is no progress of this one */
	if (m->exec_id) {
		Exec *e = exec_find(c->shim, m->exec_id);
		rep.has_exec_cpu_usec =
		    e && e->sandbox == sb && e->leaf &&
		    cgroup_leaf_cpu(sb->cg, m->exec_id, &rep.exec_cpu_usec) >= 0;
	}
	(void)reply_send_SANDBOX_STATS(p, f->req_id, &rep);
	return 0;
}

/* SANDBOX_FORWARD (target) and SANDBOX_PROXY (allow, allow_private): the
 * common part. want: the port to re-listen on exactly, 0 for any. */
static int
handle_listen(Peer *p, const Frame *f, Conn *c, const char *id, const char *run_id,
	      const char *target, char *const *allow, char *const *allow_private, int64_t want)
{
	bool proxy = !target;
	Reason why = {""};
	uint16_t port = 0;
	size_t n_allow = 0;
	Sandbox *sb;
	int k;

	if (want < 0 || want > UINT16_MAX) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "port out of range");
		return 0;
	}
	port = (uint16_t)want;
	if (run_id[0] == '\0' || strlen(run_id) > 128) {
		(void)peer_reply_error(p, f->req_id, -EINVAL, "run_id must be 1..128 bytes");
		return 0;
	}
	sb = sandbox_find(c->shim, id);
	if (!sb || sb->state != SANDBOX_READY)
		return -ENOENT;
	LogCtx ctx = {.run_id = run_id, .thread_id = sb->thread_id, .sandbox_id = sb->id};
	if (proxy) {
		size_t n_private = 0;
		while (allow[n_allow])
			n_allow++;
		while (allow_private && allow_private[n_private])
			n_private++;
		k = netfwd_proxy(c->shim->net, sb->pidfd, &ctx, allow, n_allow, allow_private,
				 n_private, &port, &why);
	} else
		k = netfwd_forward(c->shim->net, sb->pidfd, &ctx, target, &port, &why);
	if (k < 0) {
		if (k != -EINVAL)
			log_ctx_errno(LOG_WARNING, k, &ctx, "Cannot open a %s listener: %s",
				      proxy ? "proxy" : "forward", why.msg);
		(void)peer_reply_error(p, f->req_id, k, reason_text(&why, k));
		return 0;
	}
	if (proxy)
		(void)reply_send_SANDBOX_PROXY(p, f->req_id, &(Reply_SANDBOX_PROXY){.port = port});
	else
		(void)reply_send_SANDBOX_FORWARD(p, f->req_id,
						 &(Reply_SANDBOX_FORWARD){.port = port});
	return 0;
}

static int
handle_sandbox_forward(Peer *p, const Frame *f, const Msg_SANDBOX_FORWARD *m, void *userdata)
{
	return handle_listen(p, f, userdata, m->sandbox_id, m->run_id, m->target, NULL, NULL,
			     m->port);
}

static int
handle_sandbox_proxy(Peer *p, const Frame *f, const Msg_SANDBOX_PROXY *m, void *userdata)
{
	return handle_listen(p, f, userdata, m->sandbox_id, m->run_id, NULL, m->allow,
			     m->allow_private, m->port);
}

static int
handle_sandbox_unlisten(Peer *p, const Frame *f, const Msg_SANDBOX_UNLISTEN *m, void *userdata)
{
	Conn *c = userdata;
	Reply_SANDBOX_UNLISTEN rep = {};

	/* No sandbox check: it may be gone already; its counters are still here. */
	(void)netfwd_unlisten(c->shim->net, m->sandbox_id, m->run_id, &rep.bytes_out,
			      &rep.bytes_in);
	(void)reply_send_SANDBOX_UNLISTEN(p, f->req_id, &rep);
	return 0;
}

/* SANDBOX_FILE: the workspace file API (shim-files.c). */
static bool
workspace_busy(Shim *s, const char *id)
{
	return snapjob_find(s->jobs, id) != NULL;
}

static int
handle_sandbox_file(Peer *p, const Frame *f, const Msg_SANDBOX_FILE *m, void *userdata)
{
	Conn *c = userdata;
	return shim_files_handle(c->shim->files, c->shim, c->shim->conf, sandbox_prepare_workspace,
				 workspace_busy, p, f, m);
}

/* SANDBOX_WATCH: file events of a workspace tree (shim-watch.c). */
static int
handle_sandbox_watch(Peer *p, const Frame *f, const Msg_SANDBOX_WATCH *m, void *userdata)
{
	Conn *c = userdata;
	return shim_watch_handle(c->shim->watches, c->shim->conf, p, f, m);
}

/* The sandbox layer's way up (shim-int.h). */
static const SandboxHooks shim_hooks = {
    .exec_msg = exec_on_init_msg,
    .execs_lost = exec_sandbox_lost,
    .pooled_dead = pool_dead,
    .reensure = capacity_reensure,
    .slot_freed = queue_kick,
};

/* The memory of every sandbox's cgroup, summed by state: busy (an exec runs,
 * or one is about to: capacity's sandbox_idle) and idle (the rest, pooled
 * ones included). One read per sandbox: a scrape's cost, on no hot path. */
static int
handle_shim_memory(Peer *p, const Frame *f, const Msg_SHIM_MEMORY *m, void *userdata)
{
	Conn *c = userdata;
	Reply_SHIM_MEMORY rep = {};
	Sandbox *lists[2] = {c->shim->sandboxes, c->shim->pool};

	for (size_t i = 0; i < ELEMENTSOF(lists); i++)
		for (Sandbox *sb = lists[i]; sb; sb = sb->next) {
			uint64_t bytes = 0;
			if (!sb->cg || cgroup_memory(sb->cg, &bytes) < 0)
				continue;
			if (!sb->pooled && !capacity_sandbox_idle(sb)) {
				rep.busy_bytes += bytes;
				rep.busy++;
			} else {
				rep.idle_bytes += bytes;
				rep.idle++;
			}
		}
	(void)reply_send_SHIM_MEMORY(p, f->req_id, &rep);
	return 0;
}

/* The images of this host (image-store.h), "NAME DISK_BYTES" each, for /metrics:
 * the names and their records read, a few small files each. */
static int
handle_shim_images(Peer *p, const Frame *f, const Msg_SHIM_IMAGES *m, void *userdata)
{
	Conn *c = userdata;
	Reply_SHIM_IMAGES rep = {};
	ImageInfo *v = NULL;
	size_t n = 0;
	char **lines = NULL;
	int r;

	(void)m;
	r = image_list(&c->shim->images, false, &v, &n, NULL);
	for (size_t i = 0; r >= 0 && i < n; i++)
		if (v[i].digest[0])
			r = strv_pushf(&lines, "%s %" PRIu64, v[i].name, v[i].disk_bytes);
	image_infos_free(v, n);
	if (r < 0) {
		strv_free(lines);
		return r;
	}
	rep.images = lines ? lines : (char *[]){NULL};
	(void)reply_send_SHIM_IMAGES(p, f->req_id, &rep);
	strv_free(lines);
	return 0;
}

/* The handlers see the decoded request (msg.h); a body that does not decode
 * is answered -EBADMSG before them. */
MSG_HANDLER(dispatch_sandbox_ensure, SANDBOX_ENSURE, handle_sandbox_ensure)
MSG_HANDLER(dispatch_sandbox_destroy, SANDBOX_DESTROY, handle_sandbox_destroy)
MSG_HANDLER(dispatch_exec_start, EXEC_START, handle_exec_start)
MSG_HANDLER(dispatch_exec_kill, EXEC_KILL, handle_exec_kill)
MSG_HANDLER(dispatch_sandbox_stats, SANDBOX_STATS, handle_sandbox_stats)
MSG_HANDLER(dispatch_exec_attach, EXEC_ATTACH, handle_exec_attach)
MSG_HANDLER(dispatch_exec_list, EXEC_LIST, handle_exec_list)
MSG_HANDLER(dispatch_exec_stdin, EXEC_STDIN, handle_exec_stdin)
MSG_HANDLER(dispatch_sandbox_forward, SANDBOX_FORWARD, handle_sandbox_forward)
MSG_HANDLER(dispatch_sandbox_proxy, SANDBOX_PROXY, handle_sandbox_proxy)
MSG_HANDLER(dispatch_sandbox_unlisten, SANDBOX_UNLISTEN, handle_sandbox_unlisten)
MSG_HANDLER(dispatch_sandbox_snapshot, SANDBOX_SNAPSHOT, handle_sandbox_snapshot)
MSG_HANDLER(dispatch_sandbox_restore, SANDBOX_RESTORE, handle_sandbox_restore)
MSG_HANDLER(dispatch_sandbox_file, SANDBOX_FILE, handle_sandbox_file)
MSG_HANDLER(dispatch_sandbox_state, SANDBOX_STATE, handle_sandbox_state)
MSG_HANDLER(dispatch_shim_limits, SHIM_LIMITS, handle_shim_limits)
MSG_HANDLER(dispatch_sandbox_snapshots, SANDBOX_SNAPSHOTS, handle_sandbox_snapshots)
MSG_HANDLER(dispatch_sandbox_watch, SANDBOX_WATCH, handle_sandbox_watch)
MSG_HANDLER(dispatch_shim_memory, SHIM_MEMORY, handle_shim_memory)
MSG_HANDLER(dispatch_shim_images, SHIM_IMAGES, handle_shim_images)

static const PeerHandler shim_handlers[_MSG_TYPE_MAX] = {
    [MSG_SANDBOX_ENSURE] = dispatch_sandbox_ensure,
    [MSG_SANDBOX_DESTROY] = dispatch_sandbox_destroy,
    [MSG_EXEC_START] = dispatch_exec_start,
    [MSG_EXEC_KILL] = dispatch_exec_kill,
    [MSG_SANDBOX_STATS] = dispatch_sandbox_stats,
    [MSG_EXEC_ATTACH] = dispatch_exec_attach,
    [MSG_EXEC_LIST] = dispatch_exec_list,
    [MSG_EXEC_STDIN] = dispatch_exec_stdin,
    [MSG_SANDBOX_FORWARD] = dispatch_sandbox_forward,
    [MSG_SANDBOX_PROXY] = dispatch_sandbox_proxy,
    [MSG_SANDBOX_UNLISTEN] = dispatch_sandbox_unlisten,
    [MSG_SANDBOX_SNAPSHOT] = dispatch_sandbox_snapshot,
    [MSG_SANDBOX_RESTORE] = dispatch_sandbox_restore,
    [MSG_SANDBOX_FILE] = dispatch_sandbox_file,
    [MSG_SANDBOX_STATE] = dispatch_sandbox_state,
    [MSG_SHIM_LIMITS] = dispatch_shim_limits,
    [MSG_SANDBOX_SNAPSHOTS] = dispatch_sandbox_snapshots,
    [MSG_SANDBOX_WATCH] = dispatch_sandbox_watch,
    [MSG_SHIM_MEMORY] = dispatch_shim_memory,
    [MSG_SHIM_IMAGES] = dispatch_shim_images,
};

/* ---------------------------------------------------------------------------
 * Connections.
 */

static void
conn_on_close(Peer *p, int err, void *userdata)
{
	Conn *c = userdata;
	Shim *s = c->shim;

	log_debug_errno(err, "Connection from %s closed: %m", peer_role_name(peer_remote_role(p)));
	/* What waited for an answer on this connection (PeerDeferred) was
	 * detached by the peer; its queued ENSUREs left the queue. */
	queue_push_positions(s);
	/* Execs keep running; their output is buffered (bounded) for EXEC_ATTACH. */
	for (Exec *e = s->execs; e; e = e->next)
		if (e->conn == c) {
			e->conn = NULL;
			if (e->paused)
				exec_bp_cb(-1, 0, e);
		}
	for (Conn **pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	peer_free(p); /* deferred by the peer until its dispatch unwinds */
	free(c);
}

static const PeerOps shim_peer_ops = {
    .local_role = ROLE_SHIM,
    .handlers = shim_handlers,
    .on_close = conn_on_close,
};

/* PeerServerConf.accepted: a connection from an allowed peer. */
static void *
conn_accepted(Peer *p, void *userdata)
{
	Shim *s = userdata;
	Conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->shim = s;
	c->peer = p;
	c->next = s->conns;
	s->conns = c;
	return c;
}

static void
conn_refused(PeerServerEvent what, int err, uid_t uid, void *userdata)
{
	switch (what) {
	case PEER_SERVER_REFUSED:
		log_warning("Refusing a connection from uid %d", err < 0 ? -1 : (int)uid);
		break;
	case PEER_SERVER_ACCEPT_FAILED:
		log_warning_errno(err, "accept() failed, ignoring: %m");
		break;
	case PEER_SERVER_SETUP_FAILED:
		log_warning_errno(err, "Failed to set up a connection, ignoring: %m");
		break;
	}
}

/* ---------------------------------------------------------------------------
 * Lifecycle.
 */

static int
check_ro_binds(const char *list)
{
	_cleanup_free_ char *buf = strdup(list);
	char *save = NULL;

	if (!buf)
		return -ENOMEM;
	for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (t[0] != '/' || t[1] == '\0' || strstr(t, "/.") || streq(t, "/proc") ||
		    streq(t, "/dev") || streq(t, "/tmp") || streq(t, "/workspace"))
			return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
					       "ro_binds: '%s' is not an allowed path", t);
		else if (streq(t, "/etc") || strncmp(t, "/etc/", 5) == 0)
			return log_error_errno(
			    SYNTHETIC_ERRNO(EINVAL),
			    "ro_binds: '%s': the sandbox's /etc is generated; name "
			    "what to carry over from the host's in etc_entries",
			    t);
	return 0;
}

/* Process-wide set-up, before the Shim exists: checks of the config, no
 * supplementary groups, and a mount namespace of our own. */
static int
shim_setup_process(const ShimConf *conf)
{
	int r;

	r = check_ro_binds(conf->ro_binds);
	if (r < 0)
		return r;
	log_info("Sandboxes: %s; %s", conf->max_instances_rule, conf->pool_size_rule);
	{
		char msg[512];
		if (!shim_conf_userns_budget(conf, msg, sizeof(msg)))
			log_warning("Sandboxes at their own limits could exhaust host_uid's: %s; "
				    "one sandbox could then starve the others (lower the "
				    "userns_max_* keys or raise the host's)",
				    msg);
	}
	/* The inits inherit our credentials: no host group (root!) may ride along into
	 * a sandbox, and setgroups() is denied in there. */
	if (setgroups(0, NULL) < 0 && getgroups(0, NULL) > 0)
		return log_error_errno(errno, "Failed to drop supplementary groups: %m");

	/* A mount namespace of our own, a slave of the host's: the pool's mount
	 * points (and anything else we mount) never show on the host, and they go
	 * away with us however we end. */
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return log_error_errno(errno, "Failed to enter a mount namespace of our own: %m");
	return 0;
}

/* The preview socket's way to a sandbox (netpreview.h): the running
 * sandbox whose key is key, compared in full (the id is a hash of it). */
static int
preview_resolve(const char *key, int *ret_pidfd, char ret_id[static 17], void *userdata)
{
	Shim *s = userdata;
	char id[17];
	Sandbox *sb;

	if (shim_sandbox_id(key, strlen(key), id) < 0)
		return -ENOENT;
	sb = sandbox_find(s, id);
	if (!sb || sb->state != SANDBOX_READY || !sb->key || !streq(sb->key, key))
		return -ENOENT;
	*ret_pidfd = sb->pidfd;
	memcpy(ret_id, sb->id, 17);
	return 0;
}

/* The paths, the directories, the socket group and the listening socket. */
static int
shim_listen(Shim *s)
{
	const ShimConf *conf = s->conf;
	int r;

	if (asprintf(&s->sock_path, "%s/%s", conf->shared.runtime_dir, RW_SOCK_SHIM) < 0 ||
	    /* The mount point of each sandbox's root tmpfs, in the shim's own 0700
	     * sandbox_dir: runtime_dir may be shared with (and owned by) the
	     * unprivileged daemons' user. */
	    asprintf(&s->root_mnt, "%s/.sandbox-root", conf->sandbox_dir) < 0 ||
	    asprintf(&s->pool_root, "%s/.pool", conf->sandbox_dir) < 0) {
		s->sock_path = s->root_mnt = s->pool_root = NULL;
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	r = mkdir_p(conf->shared.runtime_dir, 0755);
	if (r < 0)
		return log_error_errno(r, "Failed to create '%s': %m", conf->shared.runtime_dir);
	r = mkdir_p(conf->sandbox_dir, 0700);
	if (r >= 0)
		r = mkdir_p(s->root_mnt, 0700);
	if (r >= 0) /* what a predecessor left there is cleaned after re-adoption */
		r = mkdir_p(s->pool_root, 0700);
	if (r < 0)
		return log_error_errno(r, "Failed to create '%s': %m", s->root_mnt);
	s->sandbox_dfd = open(conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->sandbox_dfd < 0)
		return log_error_errno(errno, "Failed to open '%s': %m", conf->sandbox_dir);
	/* spare directories of new keys (shim-sandbox.c); without it, none */
	if (mkdirat(s->sandbox_dfd, ".spare", 0700) < 0 && errno != EEXIST)
		log_warning_errno(errno, "Failed to create '%s/.spare', no spares: %m",
				  conf->sandbox_dir);
	else
		s->spare_dfd = openat(s->sandbox_dfd, ".spare",
				      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	s->spares_off = s->spare_dfd < 0;
	s->socket_gid = -1;
	if (conf->socket_group[0] != '\0') {
		struct group gr, *res = NULL;
		char buf[4096];
		r = getgrnam_r(conf->socket_group, &gr, buf, sizeof(buf), &res);
		if (r != 0 || !res || gr.gr_gid == 0)
			return log_error_errno(r ? r : SYNTHETIC_ERRNO(ENOENT),
					       "socket_group: no group '%s' (or it is gid 0)",
					       conf->socket_group);
		s->socket_gid = (int64_t)gr.gr_gid;
	}
	/* 0600 root:root, or 0660 root:<socket_group> whose members may connect */
	r = peer_server_new(s->base,
			    &(PeerServerConf){.path = s->sock_path,
					      .mode = s->socket_gid >= 0 ? 0660 : 0600,
					      .gid = s->socket_gid,
					      .ops = &shim_peer_ops,
					      .max_frame = (size_t)s->conf->shared.max_frame,
					      .accepted = conn_accepted,
					      .event = conn_refused,
					      .userdata = s},
			    &s->server);
	if (r < 0)
		return log_error_errno(r, "Failed to listen on '%s': %m", s->sock_path);
	{
		_cleanup_free_ char *path = NULL;
		if (asprintf(&path, "%s/%s", conf->shared.runtime_dir, RW_SOCK_PREVIEW) < 0)
			return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
		r = netpreview_new(s->base, path, s->socket_gid >= 0 ? 0660 : 0600, s->socket_gid,
				   preview_resolve, s, &s->preview);
		if (r < 0)
			return log_error_errno(r, "Failed to listen on '%s': %m", path);
	}
	return 0;
}

/* Fail closed: without the seccomp programs and the cgroups no sandbox may
 * exist (after listen(): clients may connect already, they are served once we
 * run). Then adopt what a predecessor left, reap the rest and clean what its
 * snapshot jobs left half done. */
static int
shim_setup_sandboxing(Shim *s)
{
	Reason cerr = {""};
	CgroupConf cc;
	int r;

	r = seccomp_policy_compile_variant(SECCOMP_POLICY_INIT, &s->seccomp);
	if (r >= 0)
		r = seccomp_policy_compile_variant(SECCOMP_POLICY_EXEC_LAYER, &s->seccomp_exec);
	if (r < 0)
		return log_error_errno(r, "Failed to compile the seccomp filter: %m");
	r = sandbox_init_open(NULL, &s->init_exe_fd);
	if (r < 0)
		return log_error_errno(
		    r, "Failed to open the sandbox-init helper next to the shim "
		       "(it must be an executable owned by root or by the shim's owner, "
		       "that no one else may write): %m");
	shim_conf_cgroup(s->conf, &cc);
	r = cgroup_host_new(&cc, &s->cgroups, &cerr, false);
	if (r < 0)
		return log_error_errno(r, "Failed to set up cgroups: %s", reason_text(&cerr, r));
	log_info("Using cgroup %s; seccomp filter of %u instructions",
		 cgroup_host_describe(s->cgroups), (unsigned)s->seccomp.len);
	if (!cgroup_host_has_leaves(s->cgroups))
		log_warning("No cgroup2 hierarchy: execs get no cgroup of their own, "
			    "EXEC_KILL and exec timeouts kill the process group only "
			    "(a setsid'd descendant survives them)");
	r = shim_adopt(s);
	if (r < 0)
		return r;
	r = cgroup_host_reap_stale(s->cgroups, adopt_keep_cgroup, s);
	if (r > 0)
		log_notice("Reaped %d sandbox(es) left by a previous instance", r);
	pool_dirs_clean(s);
	spares_clean(s);
	/* Snapshot/restore jobs run in a cgroup of their own: fail closed. */
	r = cgroup_jobs_create(s->cgroups, &s->jobs_cg, &cerr);
	if (r < 0)
		return log_error_errno(r, "Failed to set up the snapshot jobs' cgroup: %s",
				       reason_text(&cerr, r));
	{
		int cgfd;
		const int *fds;
		size_t n;
		cgroup_spawn_fds(s->jobs_cg, &cgfd, &fds, &n);
		snapjobs_set_cgroup(s->jobs, fds, n);
	}
	if (cgroup_host_mode(s->cgroups) == CGROUP_MODE_V2 && !cgroup_host_has_io(s->cgroups))
		log_warning("No io controller delegated: snapshot/restore jobs get no "
			    "io.weight (snapshot_io_weight), only nice 10 and cpu.max");
	backups_clean_tmp(s);
	staging_clean(s);
	return 0;
}

int
shim_new(struct event_base *base, const ShimConf *conf, Shim **ret)
{
	Shim *s;
	int r;

	r = shim_setup_process(conf);
	if (r < 0)
		return r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	s->base = base;
	s->hooks = &shim_hooks;
	s->conf = conf;
	s->rt_dfd = s->counter_fd = s->spare_dfd = s->sandbox_dfd = s->init_exe_fd = -1;
	image_store_from_conf(conf, &s->images);
	s->grave_timer = evtimer_new(base, graves_cb, s);
	s->idle_timer = evtimer_new(base, idle_cb, s);
	s->pool_ev = evtimer_new(base, pool_refill_cb, s);
	if (s->pool_ev)
		(void)event_priority_set(s->pool_ev, 2); /* background (main.c) */
	s->jobs = snapjobs_new(base);
	if (!s->grave_timer || !s->idle_timer || !s->pool_ev || !s->jobs ||
	    netfwd_new(base, &s->net) < 0 || shim_files_new(base, &s->files) < 0 ||
	    shim_watches_new(base, (usec_t)conf->watch_idle_ms * USEC_PER_MSEC, &s->watches) < 0) {
		shim_free(s);
		return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
	}
	r = shim_listen(s);
	if (r >= 0)
		r = shim_setup_sandboxing(s);
	if (r < 0) {
		shim_free(s);
		return r;
	}
	pool_kick(s);
	{
		struct timeval tv;
		evtimer_add(s->idle_timer, timeval_from_usec(&tv, IDLE_SCAN_USEC));
	}
	*ret = s;
	return 0;
}

void
shim_stop(Shim *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = true;
	s->server = peer_server_free(s->server, true);
	s->preview = netpreview_free(s->preview, true);
	if (s->idle_timer)
		evtimer_del(s->idle_timer);
	queue_refuse_all(s);
	if (s->pool_ev)
		event_del(s->pool_ev);
	/* Snapshot jobs first: their done() thaws the sandboxes they froze. */
	snapjobs_stop(s->jobs);
	/* File operations: the running ones finish, the queued ones are refused. */
	s->files = shim_files_free(s->files);
	s->watches = shim_watches_free(s->watches);
	/* Kill all first, then wait: the kernel tears the namespaces down in parallel. */
	for (Sandbox *sb = s->sandboxes; sb; sb = sb->next)
		sandbox_kill(sb);
	for (Sandbox *sb = s->pool; sb; sb = sb->next)
		sandbox_kill(sb);
	while (s->sandboxes) {
		sandbox_wait_exit(s->sandboxes);
		sandbox_dead(s->sandboxes);
	}
	while (s->pool) {
		sandbox_wait_exit(s->pool);
		sandbox_dead(s->pool);
	}
	s->net = netfwd_free(s->net); /* after sandbox_dead(), which closes listeners */
	/* Their cgroups empty within milliseconds; wait (bounded) to remove them. */
	for (int i = 0; s->graves && i < GRAVE_MAX_TRIES; i++) {
		struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
		(void)nanosleep(&ts, NULL);
		graves_cb(-1, 0, s);
	}
}

void
shim_handover(Shim *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = true;
	s->server = peer_server_free(s->server, false); /* the next shim binds it anew */
	s->preview = netpreview_free(s->preview, false);
	queue_refuse_all(s);
	snapjobs_stop(s->jobs);
	s->files = shim_files_free(s->files);
	s->watches = shim_watches_free(s->watches);
	log_notice("Exiting for an upgrade: the sandboxes and their execs are left running for "
		   "the next containerd-shim to re-adopt");
}

static void
index_keep(void *p)
{
	(void)p; /* the lists own what the indexes point to */
}

Shim *
shim_free(Shim *s)
{
	if (!s)
		return NULL;
	shim_stop(s);
	tdestroy(s->exec_index, index_keep);
	s->exec_index = NULL;
	while (s->execs) {
		Exec *e = s->execs;
		s->execs = e->next;
		exec_free(e);
	}
	tdestroy(s->sandbox_index, index_keep);
	s->sandbox_index = NULL;
	while (s->conns) {
		Conn *c = s->conns;
		s->conns = c->next;
		peer_free(c->peer);
		free(c);
	}
	while (s->graves) {
		Grave *g = s->graves;
		s->graves = g->next;
		cgroup_free(g->cg);
		free(g);
	}
	if (s->grave_timer)
		event_free(s->grave_timer);
	if (s->idle_timer)
		event_free(s->idle_timer);
	if (s->pool_ev)
		event_free(s->pool_ev);
	free(s->pool_root);
	s->jobs = snapjobs_free(s->jobs);
	if (s->jobs_cg) {
		(void)cgroup_remove(s->jobs_cg); /* empty: every job was reaped */
		s->jobs_cg = cgroup_free(s->jobs_cg);
	}
	s->cgroups = cgroup_host_free(s->cgroups);
	safe_close(s->rt_dfd);
	safe_close(s->init_exe_fd);
	safe_close(s->counter_fd);
	spares_free(s);
	safe_close(s->spare_dfd);
	safe_close(s->sandbox_dfd);
	free(s->seccomp.filter);
	free(s->seccomp_exec.filter);
	free(s->sock_path);
	free(s->first_tenant);
	free(s->root_mnt);
	shim_image_picks_free(s);
	free(s);
	return NULL;
}
