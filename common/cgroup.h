/* SPDX-License-Identifier: MIT */
/*
 * cgroup.h — cgroups of what a daemon starts, on cgroup v2 or on the v1
 * controllers of a hybrid host: the shim's sandboxes (one group per sandbox,
 * a leaf per exec, and the snapshot jobs' group) and coordinatord's host tool
 * calls (one group with the tools' aggregate limits, a leaf per call). The
 * daemon describes itself in a CgroupConf; nothing here reads a config file.
 *
 * Modes (detected once by cgroup_host_new, logged at start):
 *   v2      /sys/fs/cgroup is cgroup2. Controllers memory, pids, cpu must be
 *           available in the parent (delegated); limits: memory.max,
 *           memory.swap.max, memory.oom.group=1, pids.max, cpu.max; kill with
 *           cgroup.kill (or cgroup.freeze + SIGKILL of every member).
 *   v1      hybrid: the memory, pids, cpu, cpuacct and freezer hierarchies under
 *           /sys/fs/cgroup/<controller>; limits: memory.limit_in_bytes (+
 *           memory.memsw.limit_in_bytes when swap accounting exists), pids.max,
 *           cpu.cfs_quota_us/cfs_period_us. When a cgroup2 hierarchy is mounted
 *           at /sys/fs/cgroup/unified the sandbox gets a cgroup there too: the
 *           init is cloned into it (CLONE_INTO_CGROUP) and it provides
 *           cgroup.kill and cgroup.events; else kill is freezer + SIGKILL.
 *
 * Naming scheme (used to find leftovers after a crash):
 *   <hierarchy>/<parent>/<base_name>.<instance>/<group_prefix><id>
 * e.g. .../runwarden.<instance>/sb-<sandbox id> (the shim) and
 * .../runwarden-tools.<instance>/tools (coordinatord), where <parent> is the
 * configured cgroup parent or the daemon's own cgroup in that hierarchy, and
 * <instance> is 12 hex digits of SHA-256(state_dir), so two instances with
 * different state never touch each other's groups. On v2 with a non-root own
 * cgroup the daemon first moves itself into <own>/supervisor (the "no internal
 * processes" rule).
 *
 * Exec leaves (cgroup2 only: v2, or the unified hierarchy of a hybrid host):
 *   <cgroup2 dir of the sandbox>/e<exec id>
 * one per exec, created before the exec starts; the init clones the exec child
 * into it (CLONE_INTO_CGROUP with the directory fd). No controller is enabled
 * for them: the limits stay on the sandbox cgroup and count the leaves. Killing
 * a leaf (cgroup.kill) kills everything that exec started and nothing else.
 * Counting, killing and removing the sandbox cgroup include its leaves.
 *
 * Nothing here runs inside a sandbox. Functions return 0 or a negative errno
 * and log nothing except where stated; error texts for the caller go into a
 * Reason (reason.h) so that the typed error names the failing step.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reason.h"

typedef struct CgroupConf {
	const char *who;	  /* "the shim": names the daemon in error texts */
	const char *parent;	  /* "" = our own cgroup; else an absolute cgroup path */
	const char *state_dir;	  /* hashed into <instance> */
	const char *base_name;	  /* "runwarden": <parent>/<base_name>.<instance> */
	const char *group_prefix; /* "sb-": what cgroup_create names and reap_stale reaps */
	/* Limits of every group cgroup_create makes. cpu_quota_us < 0 = no quota. */
	int64_t memory_max, memory_swap_max, pids_max, cpu_quota_us, cpu_period_us;
	/* cgroup_jobs_create's group (the shim's snapshot jobs). */
	int64_t job_cpu_quota_us, job_cpu_period_us, job_io_weight;
	/* Owner given the leaves' cgroup.procs (CLONE_INTO_CGROUP by an
	 * unprivileged process); < 0: leave them as they are created. */
	int64_t leaf_uid;
	/* Hybrid host only: use the controller-less unified cgroup2 hierarchy
	 * alone (cgroup.kill, leaves; no limits). For an unprivileged daemon, to
	 * which systemd cannot delegate v1 controllers. Needs cgroup.kill. */
	bool unified_only;
} CgroupConf;

typedef struct CgroupHost CgroupHost;
typedef struct Cgroup Cgroup;

typedef enum CgroupMode {
	CGROUP_MODE_V2,
	CGROUP_MODE_V1,
} CgroupMode;

/* Detect the mode, create the instance directory in every hierarchy, enable the
 * controllers (v2). On failure *err says why. probe (for --doctor): never move
 * the calling process; on v2 below a non-root own cgroup only check what is
 * delegated there, and create nothing. */
int cgroup_host_new(const CgroupConf *conf, CgroupHost **ret, Reason *err, bool probe);
/* Remove the (empty) instance directories. NULL-safe; returns NULL. */
CgroupHost *cgroup_host_free(CgroupHost *h);
CgroupMode cgroup_host_mode(const CgroupHost *h);
/* Human description: "v2 (/sys/fs/cgroup/…)" or "v1 memory,pids,cpu,cpuacct,freezer + unified". */
const char *cgroup_host_describe(const CgroupHost *h);
/* True when the io controller is enabled for the instance (cgroup v2): the
 * jobs' cgroup then gets io.weight. */
bool cgroup_host_has_io(const CgroupHost *h);
/* The cgroup of snapshot/restore jobs, <instance>/jobs (v2: the cgroup2
 * directory, with cpu.max and io.weight when has_io; v1: the cpu hierarchy,
 * cpu.cfs_*), created or reused with conf's job_cpu_* and snapshot_io_weight.
 * A job joins it by writing "0" to each fd of cgroup_spawn_fds()'s
 * procs list (v2: its cgroup.procs too). cgroup_remove() it when done. */
int cgroup_jobs_create(CgroupHost *h, Cgroup **ret, Reason *err);
/* True when a cgroup2 directory with cgroup.kill exists for sandboxes. */
bool cgroup_host_has_kill(const CgroupHost *h);

/* Startup recovery: kill every process of every <group_prefix>* cgroup left
 * under the instance directories, wait until they are empty and remove them,
 * except those keep() says are re-adopted ("sb-<id>"; keep may be NULL).
 * Returns the number of groups reaped, or a negative errno. Logs each one. */
int cgroup_host_reap_stale(CgroupHost *h, bool (*keep)(const char *name, void *ud), void *ud);
/* The existing cgroup of a sandbox left by a previous instance (re-adopted):
 * -ENOENT when it has none. No cgroup_spawn_fds() for it. */
int cgroup_open(CgroupHost *h, const char *id, Cgroup **ret);

/* Create the cgroup <group_prefix><id> (a sandbox's, or the tools'; an empty
 * one left behind is reused) and apply the limits of conf. */
int cgroup_create(CgroupHost *h, const char *id, Cgroup **ret, Reason *err);
/* What sandbox_spawn needs: a cgroup2 directory fd for CLONE_INTO_CGROUP (or
 * -1) and the open cgroup.procs files of the v1 hierarchies. Borrowed. */
void cgroup_spawn_fds(const Cgroup *cg, int *ret_cgroup_fd, const int **ret_procs_fds,
		      size_t *ret_n);

/* Monotonic event counters: OOM kills (memory.events oom_kill / memory.oom_control
 * oom_kill) and fork failures at pids.max (pids.events max). -EOPNOTSUPP
 * without the controllers (unified_only). */
int cgroup_counters(Cgroup *cg, uint64_t *ret_oom_kills, uint64_t *ret_pids_max);
/* CPU time used so far (µs) and processes alive. */
int cgroup_stats(const Cgroup *cg, uint64_t *ret_cpu_usec, uint64_t *ret_procs);
/* Memory charged to the cgroup (and its exec leaves), bytes: memory.current
 * (v2) or memory.usage_in_bytes (v1). -EOPNOTSUPP without the memory
 * controller (unified_only). */
int cgroup_memory(const Cgroup *cg, uint64_t *ret_bytes);
/* Number of processes in the cgroup and its exec leaves (0 = empty). */
int cgroup_count_procs(const Cgroup *cg, uint64_t *ret);

/* SIGKILL every process: cgroup.kill, else freeze, SIGKILL each member, thaw.
 * Works on forking, setsid'd and signal-ignoring processes. */
int cgroup_kill(Cgroup *cg);
/* Freeze (true) or thaw (false) every process: cgroup.freeze in the cgroup2
 * directory (v2, or unified on a hybrid host), else the v1 freezer. Freezing
 * waits (bounded, 2 s) until the kernel reports the cgroup frozen: -ETIMEDOUT
 * when it did not (the caller thaws). -EOPNOTSUPP without any freezer. */
int cgroup_freeze(Cgroup *cg, bool freeze);
/* rmdir in every hierarchy. -EBUSY while processes remain (retry later). */
int cgroup_remove(Cgroup *cg);
/* Close the fds. Does not remove anything. NULL-safe; returns NULL. */
Cgroup *cgroup_free(Cgroup *cg);
const char *cgroup_name(const Cgroup *cg); /* "<group_prefix><id>" */

/* True when the sandbox has a cgroup2 directory, i.e. its execs get leaves. */
bool cgroup_has_leaves(const Cgroup *cg);
/* Create e<exec_id> under the sandbox's cgroup2 directory, delegate what
 * CLONE_INTO_CGROUP needs to leaf_uid (cgroup.procs of the leaf and of the
 * sandbox cgroup) and open it: *ret_fd is an O_DIRECTORY fd (CLOEXEC). */
int cgroup_leaf_create(Cgroup *cg, uint64_t exec_id, int *ret_fd, Reason *err);
/* SIGKILL every process of the leaf (cgroup.kill, else freeze + kill + thaw).
 * 0 when the leaf is gone. */
int cgroup_leaf_kill(Cgroup *cg, uint64_t exec_id);
/* CPU time (µs) used so far by the leaf's processes (cgroup2 cpu.stat, which
 * every cgroup2 directory has, controllers or not). -ENOENT when it is gone. */
int cgroup_leaf_cpu(const Cgroup *cg, uint64_t exec_id, uint64_t *ret_usec);
/* rmdir the leaf: -EBUSY while processes remain; 0 when gone. */
int cgroup_leaf_remove(Cgroup *cg, uint64_t exec_id);
bool cgroup_leaf_exists(const Cgroup *cg, uint64_t exec_id);
/* True when the host has a cgroup2 hierarchy for sandboxes (then every exec
 * must get a leaf: there is no fallback to the process group). */
bool cgroup_host_has_leaves(const CgroupHost *h);
/* rmdir every leaf whose exec busy() does not claim (NULL: all). Returns how
 * many could not be removed yet (members still exiting), or a negative errno. */
int cgroup_prune_leaves(Cgroup *cg, bool (*busy)(uint64_t exec_id, void *ud), void *ud);

/* Parse a cpu.max value ("max" or "QUOTA_US [PERIOD_US]") given for the
 * config key key into quota (-1 = max) and period. 0 or -EINVAL (logged). */
int cgroup_parse_cpu_max(const char *key, const char *s, int64_t *ret_quota, int64_t *ret_period);
/* A configured cgroup parent: empty, or an absolute path of at most 512
 * characters with no component starting with a dot. */
bool cgroup_parent_valid(const char *parent);
