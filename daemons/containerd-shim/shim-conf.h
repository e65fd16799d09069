/* SPDX-License-Identifier: MIT */
/*
 * shim-conf.h — configuration of containerd-shim: the shared [runwarden]
 * section plus [containerd-shim].
 *
 * shim_conf_items[] is the one table of keys (section, key, type, offset,
 * default, range, help); conf/runwarden.conf documents the same rows.
 * shim_conf_load() applies the defaults, layers the files named on the
 * command line and checks what the table cannot express. Strings are owned by
 * the struct: shim_conf_done() frees them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cgroup.h"
#include "daemon-util.h"
#include "shared-conf.h"

typedef struct ShimConf {
	SharedConf shared;
	char *sandbox_dir;  /* per-sandbox state; "" = <state_dir>/sandboxes */
	char *ro_binds;	    /* space-separated host paths bound read-only into the root */
	char *etc_entries;  /* names under /etc carried into the sandbox /etc */
	char *sandbox_user; /* name of sandbox_uid inside */
	int64_t userns_max_inotify_instances; /* per-sandbox user namespace limits */
	int64_t userns_max_inotify_watches;
	int64_t userns_max_namespaces;
	int64_t tmp_size;	       /* size= of the sandbox /tmp (and /dev/shm) tmpfs, bytes */
	int64_t tmp_inodes;	       /* nr_inodes= of the sandbox /tmp and /dev/shm tmpfs, each */
	int64_t workspace_quota;       /* project quota on each workspace, bytes; 0 = none */
	int64_t workspace_inodes;      /* project quota on each workspace, inodes; 0 = none */
	bool workspace_quota_required; /* no project quotas on sandbox_dir: fail, not warn */
	int64_t workspace_projid_base; /* project ids the workspaces get: base.. */
	int64_t workspace_projid_count; /* ..base + count - 1 */
	int64_t sandbox_uid;		/* uid and gid of the sandbox user, inside */
	int64_t host_uid;		/* host uid and gid that sandbox_uid maps to; never 0 */
	int64_t exec_drain_timeout_ms;	/* wait for pipe EOF after an exec's leader exited */
	int64_t max_pending_output; /* bytes queued to a peer before exec output reading pauses */
	int64_t exec_output_buffer; /* bytes of each exec stream kept for EXEC_ATTACH */
	int64_t rlimit_nofile;	    /* RLIMIT_NOFILE of every sandbox process */
	int64_t rlimit_fsize;	    /* RLIMIT_FSIZE, bytes */
	int64_t rlimit_memlock;	    /* RLIMIT_MEMLOCK, bytes */
	int64_t exec_timeout_ms;    /* default wall timeout of an exec, 0 = none */
	int64_t memory_max;	    /* bytes; memory.max / memory.limit_in_bytes per sandbox */
	int64_t memory_swap_max;    /* bytes of swap on top of memory_max */
	int64_t pids_max;	    /* pids.max per sandbox */
	char *cpu_max;	       /* "max" or "QUOTA [PERIOD]" in µs (cgroup v2 cpu.max syntax) */
	char *cgroup_parent;   /* "" = the shim's own cgroup; else an absolute cgroup path */
	char *socket_group;    /* "" = socket 0600, root/our uid only; else its group (0660) */
	int64_t pool_size;     /* pre-started sandboxes waiting to be claimed; 0 = none;
				* configured -1: shim_conf_size_from_host() sets it */
	int64_t max_instances; /* most live sandboxes; further ENSUREs wait in FIFO order;
				* configured 0: shim_conf_size_from_host() sets it */
	char max_instances_rule[400]; /* how max_instances was found (logged, --doctor) */
	char pool_size_rule[120];     /* how pool_size was found (logged, --doctor) */
	int64_t tenant_max_instances; /* one tenant's share of them; 0 = max(1, max_instances/2) */
	int64_t queue_timeout_ms;     /* a queued ENSURE then fails -ETIMEDOUT; 0 = forever */
	int64_t sleep_after_ms; /* idle this long, a sandbox's processes are stopped; 0 = never */
	int64_t restore_max_bytes;   /* file content bytes one restore may unpack */
	int64_t restore_max_entries; /* archive entries one restore may unpack */
	int64_t image_max_bytes;     /* file content bytes one image import may unpack */
	int64_t image_max_entries;   /* entries one image import may read */
	int64_t file_api_max_bytes;  /* largest file read or written by SANDBOX_FILE */
	int64_t watch_idle_ms;	     /* SANDBOX_WATCH: an unpolled watch is dropped after this */
	int64_t snapshot_timeout_ms; /* a snapshot/restore job may run this long; 0 = no limit */
	int64_t backups_keep;	     /* newest backups kept per key; 0 = all */
	int64_t tenant_max_backup_bytes; /* a tenant's backups past this: no snapshot; 0 = no cap */
	int64_t snapshot_max_jobs;	 /* snapshot/restore jobs at once; more: -EAGAIN */
	char *snapshot_cpu_max;		 /* cpu.max of the job cgroup */
	int64_t snapshot_io_weight;	 /* io.weight of the job cgroup (when io is there) */
	int64_t sandbox_orphan_ms;	 /* how long an init waits for a shim that died (adopt.h) */
	/* derived by shim_conf_load() from cpu_max: quota -1 = unlimited */
	int64_t cpu_quota_us, cpu_period_us;
	/* the same from snapshot_cpu_max */
	int64_t job_cpu_quota_us, job_cpu_period_us;
} ShimConf;

extern const ConfItem shim_conf_items[];
extern const size_t shim_conf_n_items;

/* Defaults, then the files of a (daemon_load_config), then the checks the
 * table cannot express and the derived values (sandbox_dir default, cpu_max
 * parsed). 0 or a negative errno (logged); on failure the strings already
 * parsed stay in *c: call shim_conf_done() either way. socket_group is looked
 * up by shim_new(), at start: --check-config runs before systemd-sysusers may
 * have created the group. */
int shim_conf_load(const DaemonArgs *a, ShimConf *c);
/* The cgroup description of the shim's sandboxes and jobs (strings borrowed). */
void shim_conf_cgroup(const ShimConf *c, CgroupConf *ret);
/* Free the strings. */
void shim_conf_done(ShimConf *c);

/* max_instances = 0 ("from the host"): the least of
 *   MemTotal / 2 / SHIM_AUTO_BYTES_PER_SANDBOX (an idle sandbox measured at
 *     ~1 MiB: PSS ~0.35 + memory cgroup ~0.2 + slab ~0.26 + page tables ~0.1,
 *     bench/README.md; x4 margin for what its processes touch; half of the
 *     host's memory for idle sandboxes),
 *   SHIM_AUTO_PER_CPU x CPUs (the affinity mask),
 *   what host_uid's per-user inotify limits allow at the userns_max_inotify_*
 *     keys, minus pool_size (so the sum never exceeds them, see
 *     shim_conf_userns_budget),
 *   SHIM_AUTO_CAP; at least 1. */
#define SHIM_AUTO_BYTES_PER_SANDBOX (4 << 20)
#define SHIM_AUTO_PER_CPU 512
#define SHIM_AUTO_CAP 4096
typedef struct HostSize {
	uint64_t mem_total; /* bytes */
	long cpus;
	long inotify_instances, inotify_watches; /* host's per-user limits; -1 unknown */
} HostSize;
/* The rule above on h; msg gets the arithmetic. */
int64_t shim_conf_auto_instances(const ShimConf *c, const HostSize *h, char *msg, size_t len);
/* pool_size = -1 ("from the host"): one per CPU (the affinity mask), at least
 * SHIM_AUTO_POOL_MIN, at most SHIM_AUTO_POOL_MAX: a pooled sandbox is a
 * creation done ahead, and a burst of new threads is served from the pool
 * while each CPU refills it (bench/README.md: ~10 ms of CPU per sandbox); an
 * idle pooled sandbox costs ~0.1 MiB. msg gets the arithmetic. */
#define SHIM_AUTO_POOL_MIN 2
#define SHIM_AUTO_POOL_MAX 16
int64_t shim_conf_auto_pool(const HostSize *h, char *msg, size_t len);
/* Read the host; set pool_size (when -1) and max_instances (when 0) from it,
 * and both rules. */
void shim_conf_size_from_host(ShimConf *c);

/* Whether (max_instances + pool_size) sandboxes, each at its own
 * userns_max_inotify_* limit, stay within the host's per-user limits of
 * host_uid, which they share (docs/SECURITY.md); msg says the sums. */
bool shim_conf_userns_budget(const ShimConf *c, char *msg, size_t len);
