/* SPDX-License-Identifier: MIT */
/*
 * shim-int.h — the containerd-shim's private types, and the rule of its layers.
 *
 * Only the shim's own files include this (shim.h is the public face). The
 * daemon is cut in layers, one file each, and calls go down only:
 *
 *   shim.c           requests (the frame handler table; ensure, destroy, stats,
 *                    forward/proxy/unlisten, file), connections, lifecycle
 *   shim-adopt.c     re-adoption of what a killed predecessor left (start-up,
 *                    called by shim_new only)
 *   shim-snap.c      SANDBOX_SNAPSHOT/RESTORE, run as jobs (snapjob.h)
 *   shim-capacity.c  which sandbox serves an ENSURE: the pool, the FIFO queue
 *                    (max_instances), idle stops and evictions, ensure_key
 *   shim-exec.c      the exec table: output pump, backpressure, exit, hold,
 *                    per-exec cgroup leaves; EXEC_START/KILL/ATTACH/LIST
 *   shim-exec-stdin.c  an exec's stdin: the start's bytes, EXEC_STDIN
 *   shim-sandbox.c   the sandbox table: create, start, kill, stop, the init
 *                    wire, death, cgroup graves; the small helpers below
 *
 * A file calls functions of the layers below it by name, never one above it
 * (shim-adopt.c sits between shim-snap.c and shim.c: only shim_new calls it).
 * The one way up is SandboxHooks (below): the sandbox layer reports an init
 * message for an exec, a sandbox's death and a freed slot through Shim.hooks,
 * which shim.c fills in with the handlers of shim-exec.c and shim-capacity.c.
 * The leaf modules (sandbox.h, cgroup.h, snapjob.h, netfwd.h, netpreview.h, adopt.h,
 * shim-files.h …) know nothing of these types.
 *
 * Lifetimes. A Sandbox lives from SANDBOX_ENSURE (or a pool refill) until its
 * init has been reaped (pidfd readable ⇒ the whole pid namespace is gone, the
 * kernel zaps it before the init becomes a zombie). An Exec lives from
 * EXEC_START until its EXEC_EXIT was pushed (shim-exec.c); it outlives the
 * Conn that started it and may outlive its Sandbox briefly while draining
 * (Exec.sandbox is then NULL). A Conn lives as long as its Peer. A request
 * answered later (Waiter, Queued, Exec.start, snapshot jobs and what they
 * hold) is a PeerDeferred (peer.h): when its connection closes the peer
 * detaches it, so answering it sends nothing; only a queued ENSURE leaves the
 * queue at once (its cancel callback). What conn_on_close (shim.c) still
 * does: detach the execs' output from the connection.
 *
 * Re-adoption (adopt.h): the inits survive a crash of the shim; on start the
 * sandboxes left behind with execs not yet released are taken over (the
 * Sandbox is READY again, the Execs come back with their ids and offsets),
 * the others are reaped (shim-adopt.c).
 *
 * Tables are plain linked lists: a host runs a handful of sandboxes.
 * Single-threaded: everything runs on Shim.base (shim.h).
 */
#pragma once

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

#include "shim.h"
#include "adopt.h"
#include "cgroup.h"
#include "fd-util.h"
#include "image-store.h"
#include "log.h"
#include "macro.h"
#include "msg.h"
#include "netfwd.h"
#include "netpreview.h"
#include "peer.h"
#include "peer-server.h"
#include "quota.h"
#include "sandbox-key.h"
#include "sandbox.h"
#include "seccomp-policy.h"
#include "shim-files.h"
#include "shim-watch.h"
#include "snapjob.h"
#include "snapshot.h"

#define EXEC_ARGV_MAX 4096 /* argv + env entries */
#define OUTPUT_CHUNK (64 * 1024)
#define BACKPRESSURE_RECHECK_USEC (20 * USEC_PER_MSEC)
#define GRAVE_RETRY_USEC (10 * USEC_PER_MSEC)
#define EXEC_HOLD_USEC (600 * USEC_PER_SEC) /* an ended exec nobody re-attached to */
#define IDLE_SCAN_USEC (200 * USEC_PER_MSEC)
#define ENSURE_RESERVE_USEC (10 * USEC_PER_SEC)	    /* an ENSURE'd sandbox awaits its exec */
#define POOL_REFILL_DELAY_USEC (20 * USEC_PER_MSEC) /* after a claim */
#define GRAVE_MAX_TRIES 500 /* 5 s until a cgroup that does not empty is given up */

typedef struct Conn Conn;
typedef struct Sandbox Sandbox;
typedef struct ImagePick ImagePick;
typedef struct Exec Exec;
typedef struct SandboxHooks SandboxHooks;
typedef struct Spare Spare;

/* A spare sandbox directory <sandbox_dir>/.spare/<name>: an empty `key` file
 * and a `workspace` owned by host_uid with its quota applied. */
struct Spare {
	Spare *next;
	char name[17];
};

/* What the caller of sandbox_obtain knows of <sandbox_dir>/<id>. */
typedef enum SandboxDir {
	SANDBOX_DIR_UNKNOWN, /* check (and claim, making it if absent) */
	SANDBOX_DIR_ABSENT,  /* checked: none (a spare may be renamed into place) */
	SANDBOX_DIR_CLAIMED, /* checked: it exists and belongs to the key */
} SandboxDir;

/* A request waiting for a sandbox state change. */
typedef struct Waiter {
	struct Waiter *next;
	PeerDeferred *reply;
} Waiter;

struct Conn {
	Conn *next;
	Shim *shim;
	Peer *peer;
};

typedef enum SandboxState {
	SANDBOX_STARTING, /* spawning (Sandbox.spawning), or init spawned, setup running */
	SANDBOX_READY,	  /* serving execs */
	SANDBOX_DYING,	  /* init exiting or killed; waiting for the pidfd */
} SandboxState;

/* A sandbox that ran an exec keeps this many exec cgroup leaves made ahead. */
#define LEAF_POOL 2

struct Sandbox {
	Sandbox *next;
	Shim *shim;
	char id[17];
	char *key;
	SandboxState state;
	unsigned live_execs; /* execs of this sandbox not ended (exec_bind_sandbox) */
	bool destroy_requested;
	/* While spawning (sandbox.h: the spawner clones the init), pid and pidfd
	 * are the spawner's and the socket is not watched yet; the spawner's exit
	 * (pidfd_ev) hands them over to the init's (sandbox_pidfd_cb). A kill then
	 * only marks the sandbox DYING: the init is killed once it exists. */
	bool spawning;
	pid_t pid;
	int pidfd;
	int sock;
	struct event *sock_ev, *pidfd_ev;
	Waiter *ensure_waiters;	  /* replied on READY or on death */
	Waiter *destroy_waiters;  /* replied on death */
	Waiter *reensure_waiters; /* ENSUREs that arrived while dying: a new sandbox after */
	int fail_err;		  /* setup failure, for the ensure waiters */
	char *fail_msg;
	Cgroup *cg;	   /* the sandbox's cgroup; removed after the init was reaped */
	usec_t idle_since; /* when it was first seen idle (no exec, only the init); 0 = busy */
	usec_t last_used;  /* its last exec ended or started, or an ENSURE named it */
	bool stopping;	   /* stopped by the shim (idle, or for a queued request) */
	bool adopted;	   /* taken over from a previous instance: not our child */
	/* The run it serves now (the last SANDBOX_ENSURE's run_id/thread_id), for
	 * the journald fields of every log line about it; may be NULL. next_*: the
	 * run of ENSUREs that wait for a dying one, for its successor. */
	char *run_id, *thread_id;
	char *next_run_id, *next_thread_id;
	char *tenant; /* whose (the last SANDBOX_ENSURE's tenant), NULL: unknown */
	/* The image it runs on (shim-image.c; NULL: the host's binds), and that
	 * image's Env ("K=V", NULL-terminated or NULL), put under each exec's. */
	char *image;
	char **image_env;
	/* Pool (see "The pool" below): pooled = started ahead, bound to no key yet;
	 * pool_dir = its workspace mount point, kept (and released on free) after
	 * it was claimed. */
	bool pooled;
	char *pool_dir;
	bool claimed_unsent; /* claimed from the pool; INIT_MSG_CLAIMED not sent yet */
	char cg_id[17];	     /* its cgroup is sb-<cg_id>: the id, or the pooled one's own */
	/* An ENSURE was answered (or is pending) and no EXEC_START came yet: the
	 * sandbox is about to be used, never "idle" (evicted for the queue). */
	usec_t reserved_until;
	bool purge;	     /* SANDBOX_DESTROY purge: remove its directory once dead */
	int landlock_abi;    /* from READY */
	bool leaves_pending; /* exec cgroup leaves left to remove (idle_cb prunes) */
	/* Exec leaves made ahead (shim-leafpool.c): leaf_ids[i] is an exec id
	 * already counted, leaf_fds[i] its open e<id> directory, delegated. */
	uint64_t leaf_ids[LEAF_POOL];
	int leaf_fds[LEAF_POOL];
	unsigned n_leaves;
	struct event *leaf_ev; /* refills the pool after the exec that took one */
};

/* An ENSURE waiting for a free slot (max_instances), in FIFO order. */
typedef struct Queued {
	struct Queued *next;
	Shim *shim;
	PeerDeferred *reply; /* leaves the queue when its connection closes */
	char *key, *run_id, *thread_id, *tenant;
	struct event *timer; /* queue_timeout_ms */
	uint64_t position;   /* last one pushed in SANDBOX_QUEUED */
} Queued;

/* A dead sandbox's cgroup waiting to become removable (members still exiting). */
typedef struct Grave {
	struct Grave *next;
	Cgroup *cg;
	unsigned tries;
} Grave;

enum { STREAM_STDIN = 0, STREAM_STDOUT = 1, STREAM_STDERR = 2 };

struct Exec {
	Exec *next;
	Shim *shim;
	uint64_t id;
	Sandbox *sandbox;    /* NULL once the sandbox is gone */
	Conn *conn;	     /* its output goes there; NULL once that connection closed */
	PeerDeferred *start; /* pending EXEC_START reply; NULL once answered */
	pid_t pid;
	bool ended;		/* exit status known, or lost with its sandbox */
	bool kill_requested;	/* EXEC_KILL or SANDBOX_DESTROY */
	bool paused;		/* output reading paused for backpressure */
	int status;		/* wait status when ended normally */
	const char *end_reason; /* overrides "exit"/"signal": "killed", "lost", "failed" */
	int fds[3];		/* stdin write end, stdout/stderr memfds; -1 when closed */
	struct event *ev[3];	/* [0] only: stdin */
	uint64_t offset[3];	/* stdout/stderr: read up to here (= memfd offset) */
	uint64_t told[3];	/* the offset the init was last told (INIT_MSG_CONSUMED) */
	bool started;		/* STARTED seen (or adopted): output may be pushed */
	bool done[3];		/* stdout/stderr: read to the end (the memfd stays) */
	bool eof[3];		/* the init saw EOF on the pipe at eof_at */
	uint64_t eof_at[3];
	uint64_t window; /* the memfd's intact tail (the init's output_window) */
	char *stdin_data;
	size_t stdin_len, stdin_off;
	bool stdin_open; /* EXEC_START stdin_open: more comes by EXEC_STDIN until eof */
	struct event *drain_timer, *bp_timer;
	struct event *timeout_timer; /* wall timeout (timeout_ms), or NULL */
	bool timed_out;
	bool have_base;		      /* oom_base/pids_base were read at start */
	uint64_t oom_base, pids_base; /* cgroup event counters at start */
	char sandbox_id[17];
	char *run_id;		  /* for EXEC_LIST and the logs; may be NULL */
	char *thread_id;	  /* the sandbox's thread, for the logs; may be NULL */
	struct event *hold_timer; /* ended while detached: release after EXEC_HOLD_USEC */
	/* Its cgroup2 leaf <sandbox cgroup>/e<id> (execcg.c): every process it
	 * started; SIGKILL and the wall timeout kill the leaf. kill_pending: a kill
	 * came before STARTED (the child may not be in the leaf yet). */
	bool leaf;
	bool leaf_kill_pending;
	/* Killed: EXEC_EXIT waits (bounded) until the leaf is empty and removed,
	 * so that whoever killed it sees all of its processes gone. */
	bool leaf_gone;
	unsigned leaf_tries;
	struct event *leaf_timer;
	/* EXEC_START kill_leftovers: when the leader exits, what it left running
	 * in its leaf (`cmd &`, nohup, setsid) is killed, and EXEC_EXIT (with the
	 * leader's status) waits until the leaf is empty. leftovers_killed: done. */
	bool kill_leftovers;
	bool leftovers_killed;
};

/* The events of the sandbox layer that the layers above it handle: the only
 * way shim-sandbox.c reaches them (shim.c fills it in, shim_hooks). Each hook
 * is called from the event loop, never re-entered for one sandbox, and may
 * free execs (never sb itself). */
struct SandboxHooks {
	/* An init message about one of sb's execs (STARTED, DATA, EOF,
	 * START_FAILED, EXITED; sandbox.h): shim-exec.c. */
	void (*exec_msg)(Sandbox *sb, const InitMsg *m, const char *payload, size_t len);
	/* sb's init died and every process with it: end each of its execs with
	 * what their memfds hold (shim-exec.c). */
	void (*execs_lost)(Sandbox *sb);
	/* A pooled sandbox (bound to no key yet) died: the pool forgets it and
	 * frees it (shim-capacity.c). */
	void (*pooled_dead)(Sandbox *sb);
	/* sb is dead; *waiters are the ENSUREs that came in while it was dying:
	 * serve them with a new sandbox for sb->key. What is left in *waiters
	 * afterwards the caller frees (shim-capacity.c). */
	void (*reensure)(Sandbox *sb, Waiter **waiters);
	/* A sandbox was freed: its slot may serve the queue (shim-capacity.c). */
	void (*slot_freed)(Shim *s);
};

struct Shim {
	struct event_base *base;
	const ShimConf *conf;
	char *sock_path;
	char *root_mnt;
	PeerServer *server; /* the control socket; NULL once stopped */
	int64_t socket_gid; /* socket_group's gid, or -1 */
	Conn *conns;
	Sandbox *sandboxes;
	Exec *execs;
	/* tsearch(3) trees over sandboxes (by id: the newest linked of an id,
	 * as the list's first) and execs (by id), and the length of sandboxes:
	 * no request walks the lists (issue 32: a thousand sandboxes). */
	void *sandbox_index, *exec_index;
	size_t n_sandboxes;
	uint64_t next_exec_id;
	bool stopped;
	struct sock_fprog seccomp;	/* the init's variant (seccomp-policy.h) */
	struct sock_fprog seccomp_exec; /* the layer each exec adds */
	int init_exe_fd;		/* the sandbox-init helper (sandbox_init_open), or -1 */
	CgroupHost *cgroups;
	Grave *graves;
	struct event *grave_timer;
	Queued *queue;
	/* the first tenant an ENSURE named, and whether another one came since
	 * (then tenant_max_instances applies: shim-capacity.c) */
	char *first_tenant;
	bool multi_tenant;
	struct event *idle_timer; /* periodic: sleep_after_ms and evictions for the queue */
	NetFwd *net;		  /* SANDBOX_FORWARD/PROXY listeners */
	NetPreview *preview;	  /* $runtime_dir/preview.sock (netpreview.h) */
	Sandbox *pool;		  /* started ahead, not yet claimed */
	struct event *pool_ev;	  /* refill, at background priority */
	unsigned pool_failures;	  /* consecutive pool sandboxes that failed */
	usec_t pool_retry_at;	  /* no refill before (backoff after failures) */
	char *pool_root;	  /* <sandbox_dir>/.pool */
	/* Spare sandbox directories (see "Spares" in shim-sandbox.c): made by the
	 * pool's refill, renamed into place by a claim. */
	Spare *spares;
	int spare_dfd;		   /* <sandbox_dir>/.spare, or -1 (no spares) */
	int sandbox_dfd;	   /* <sandbox_dir> */
	bool spares_off;	   /* making one failed: none until a restart */
	SnapJobs *jobs;		   /* snapshot/restore children (snapjob.h) */
	Cgroup *jobs_cg;	   /* their cgroup (cpu.max, io.weight) */
	ShimFiles *files;	   /* the file API's worker threads (shim-files.h) */
	ShimWatches *watches;	   /* SANDBOX_WATCH's inotify watches (shim-watch.h) */
	int rt_dfd;		   /* <runtime_dir>/sandboxes (adopt.h) */
	int counter_fd;		   /* <sandbox_dir>/.exec-id */
	const SandboxHooks *hooks; /* set by shim_new (shim.c) before anything runs */
	ImageStore images;	   /* <state_dir>/images (image-store.h) */
	ImagePick *image_picks;	   /* images asked for, not recorded yet (shim-image.c) */
};

/* shim-sandbox.c */
void set_str(char **p, const char *v);
int64_t realtime_ms(void);
LogCtx sandbox_ctx(const Sandbox *sb);
LogCtx exec_ctx(const Exec *e);
/* Appends a waiter holding *d; takes *d (NULL) on success. */
int waiter_add(Waiter **l, PeerDeferred **d);
/* Request f is answered once sb is destroyed (a waiter on its
 * destroy_waiters); purge: its workspace goes then too. 0, or -ENOMEM with
 * nothing answered. */
int sandbox_destroy_wait(Sandbox *sb, Peer *p, const Frame *f, bool purge);
/* These answer d (later) and release it. */
void answer_ensure(PeerDeferred *d, const char *id, bool created);
void answer_empty(PeerDeferred *d);
/* An empty map, now. */
void reply_empty(Conn *c, uint64_t req_id);
Sandbox *sandbox_find(Shim *s, const char *id);
Sandbox *sandbox_free(Sandbox *sb);
int sandbox_prepare_workspace(Shim *s, const char *id, char **ret_path, Reason *why);
int sandbox_key_check(Shim *s, const LogCtx *ctx, const char *id, const char *key, bool create,
		      bool *ret_absent);
int sandbox_workspace(Shim *s, const LogCtx *ctx, const char *key, const char *id, SandboxDir dir,
		      char **ret_ws, Reason *why);
size_t spares_count(const Shim *s);
int spare_make(Shim *s);
void spares_clean(Shim *s);
void spares_free(Shim *s);
int sandbox_purge(Shim *s, const char *id);
void graves_cb(evutil_socket_t fd, short what, void *arg);
void graves_add(Shim *s, Cgroup *cg);
int sandbox_start(Shim *s, Sandbox *sb, const char *ws, bool slave, const char *cg_id,
		  const LogCtx *ctx, Reason *why);
Sandbox *sandbox_alloc(Shim *s);
int sandbox_create(Shim *s, const char *key, const char *id, const char *run_id,
		   const char *thread_id, const char *ws, Sandbox **ret, Reason *why);
void pool_dir_release(const char *dir);
size_t list_count(const Sandbox *head);
void list_unlink(Sandbox **head, Sandbox *sb);
/* Link sb first in s->sandboxes (and its index, its count) / unlink it. */
void sandbox_link(Shim *s, Sandbox *sb);
void sandbox_unlink(Shim *s, Sandbox *sb);
/* e->sandbox = sb, keeping both sandboxes' live_execs right. */
void exec_bind_sandbox(Exec *e, Sandbox *sb);
/* Link e first in s->execs and its index (exec_find). */
void exec_link(Shim *s, Exec *e);
bool sandbox_alive(Sandbox *sb);
void sandbox_wait_exit(Sandbox *sb);
void sandbox_kill(Sandbox *sb);
void sandbox_stop(Sandbox *sb, const char *why);
void sandbox_log_created(Sandbox *sb);
void sandbox_sock_cb(evutil_socket_t fd, short what, void *arg);
void sandbox_dead(Sandbox *sb);
void sandbox_pidfd_cb(evutil_socket_t fd, short what, void *arg);
DEFINE_TRIVIAL_CLEANUP_FUNC(Sandbox *, sandbox_free);

/* shim-exec.c */
Exec *exec_find(Shim *s, uint64_t id);
Exec *exec_free(Exec *e);
DEFINE_TRIVIAL_CLEANUP_FUNC(Exec *, exec_free);
void exec_read_streams(Exec *e);
void exec_bp_cb(evutil_socket_t fd, short what, void *arg);
void exec_drain_cb(evutil_socket_t fd, short what, void *arg);
void exec_hold_cb(evutil_socket_t fd, short what, void *arg);
void exec_end(Exec *e, int status, const char *reason);
void exec_timeout_cb(evutil_socket_t fd, short what, void *arg);
int handle_exec_start(Peer *p, const Frame *f, const Msg_EXEC_START *m, void *userdata);
int handle_exec_kill(Peer *p, const Frame *f, const Msg_EXEC_KILL *m, void *userdata);
int handle_exec_attach(Peer *p, const Frame *f, const Msg_EXEC_ATTACH *m, void *userdata);
int handle_exec_list(Peer *p, const Frame *f, const Msg_EXEC_LIST *m, void *userdata);
int handle_exec_stdin(Peer *p, const Frame *f, const Msg_EXEC_STDIN *m, void *userdata);
/* shim-exec.c: close stream i of e (stdin: the pipe; stdout/stderr: done). */
void exec_close_stream(Exec *e, int i);
/* shim-exec-stdin.c: feed the EXEC_START's stdin to e, or close it at once
 * when there is none and it is not kept open (stdin_open). 0 or -ENOMEM. */
int exec_stdin_start(Exec *e, const void *in, size_t in_len, bool stdin_open);
void exec_leaves_prune(Sandbox *sb);

/* shim-leafpool.c: exec cgroup leaves made ahead, so that an EXEC_START does
 * not wait for a mkdir in the cgroupfs. leafpool_take: 1 and a leaf (its exec
 * id and directory fd, the caller's now), or 0 when none is ready (the caller
 * makes one); schedules a refill either way. leafpool_has: id is a pooled
 * leaf's (not to be pruned). leafpool_drop: close the fds (the leaves go with
 * the sandbox cgroup, or with the next prune). */
int leafpool_take(Sandbox *sb, uint64_t *ret_id, int *ret_fd);
bool leafpool_has(const Sandbox *sb, uint64_t id);
void leafpool_drop(Sandbox *sb);
void exec_on_init_msg(Sandbox *sb, const InitMsg *m, const char *payload, size_t len);
void exec_sandbox_lost(Sandbox *sb);

/* shim-capacity.c */
void pool_refill_cb(evutil_socket_t fd, short what, void *arg);
void pool_kick(Shim *s);
void pool_dead(Sandbox *sb);
Queued *queued_free(Queued *q);
void queue_unlink(Shim *s, Queued *q);
void queue_push_positions(Shim *s);
void queue_kick(Shim *s);
/* No exec running or about to come (what idle stops and /metrics count). */
bool capacity_sandbox_idle(Sandbox *sb);
void idle_cb(evutil_socket_t fd, short what, void *arg);
/* image: what SANDBOX_ENSURE asked for (shim-image.c), NULL: the key's own. */
int ensure_key(Shim *s, PeerDeferred **d, const char *key, const char *run_id,
	       const char *thread_id, const char *tenant, const char *image, bool may_queue);
void queue_refuse_all(Shim *s);
void capacity_reensure(Sandbox *sb, Waiter **ret_re);

/* shim-snap.c */
void backups_clean_tmp(Shim *s);
int handle_sandbox_snapshot(Peer *p, const Frame *f, const Msg_SANDBOX_SNAPSHOT *m, void *userdata);
void staging_clean(Shim *s);
/* Remove name (a tree) below dfd in a cleanup child (synchronously when none
 * can start); a .restore-XXXXXXXX name is finished by staging_clean() after
 * a restart. */
void snap_remove_tree(Shim *s, int dfd, const char *name);
int handle_sandbox_restore(Peer *p, const Frame *f, const Msg_SANDBOX_RESTORE *m, void *userdata);
/* shim-state.c: the sandbox API's lifecycle by key, and the limits */
int handle_sandbox_state(Peer *p, const Frame *f, const Msg_SANDBOX_STATE *m, void *userdata);
int handle_shim_limits(Peer *p, const Frame *f, const Msg_SHIM_LIMITS *m, void *userdata);
int handle_sandbox_snapshots(Peer *p, const Frame *f, const Msg_SANDBOX_SNAPSHOTS *m,
			     void *userdata);

/* shim-adopt.c */
bool adopt_keep_cgroup(const char *name, void *ud);
void pool_dirs_clean(Shim *s);
int shim_adopt(Shim *s);

/* shim-image.c: which image a sandbox is on (docs/IMAGES.md) */
/* An ENSURE of id asked for image ("" = the host's binds): kept for id's next
 * start. -ENOENT (why set) when there is no such image; 1 when live (id's
 * sandbox, or NULL) is on another image, else 0. */
int shim_image_pick(Shim *s, const char *id, const char *image, Sandbox *live, Reason *why);
/* Whether id's next sandbox is on the host's binds (the pool serves only those). */
bool shim_image_on_host(Shim *s, const char *id);
/* At sb's start: its image (sb->image, sb->image_env; info->rootfs "" for
 * the host's binds), the pick recorded beside the workspace. */
int shim_image_resolve(Shim *s, Sandbox *sb, ImageInfo *info, Reason *why);
/* env with sb's image Env under it (*ret NULL: env as it is). */
int shim_image_env(const Sandbox *sb, char *const *env, char ***ret);
void shim_image_picks_free(Shim *s);
/* A pooled sandbox became id's (host binds): the pick and record say so. */
void shim_image_claimed(Shim *s, const char *id);
/* A sandbox re-adopted after a restart: its image and Env from its record. */
void shim_image_adopted(Shim *s, Sandbox *sb);
