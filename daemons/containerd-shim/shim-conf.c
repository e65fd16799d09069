/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "shim-conf.h"

#include <errno.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macro.h"
#include "sandbox.h"

#define S "containerd-shim"

const ConfItem shim_conf_items[] = {
    CONF_SHARED_ITEMS(ShimConf, shared),
    {S, "sandbox_dir", CONF_STR, offsetof(ShimConf, sandbox_dir), "", 0, 0,
     "per-sandbox state (workspaces); empty means <state_dir>/sandboxes"},
    {S, "ro_binds", CONF_STR, offsetof(ShimConf, ro_binds), "/usr /bin /sbin /lib /lib64", 0, 0,
     "host paths bound read-only into each sandbox root (symlinks are recreated); not /etc "
     "or below it: see etc_entries"},
    {S, "etc_entries", CONF_STR, offsetof(ShimConf, etc_entries),
     "ssl ca-certificates ca-certificates.conf ld.so.conf ld.so.conf.d ld.so.cache "
     "nsswitch.conf alternatives localtime timezone mime.types protocols services "
     "gai.conf host.conf os-release",
     0, 0,
     "names under the host's /etc carried read-only into each sandbox's /etc (missing ones "
     "are skipped); passwd, group, hosts and hostname are generated, nothing else of the "
     "host's /etc is there"},
    {S, "sandbox_user", CONF_STR, offsetof(ShimConf, sandbox_user), "sandbox", 0, 0,
     "name of sandbox_uid (user and group) in the sandbox's /etc/passwd and /etc/group"},
    {S, "userns_max_inotify_instances", CONF_INT, offsetof(ShimConf, userns_max_inotify_instances),
     "16", 0, 1 << 20,
     "inotify instances all processes of one sandbox may hold (its user namespace's "
     "max_inotify_instances); sandboxes together also count against the host's "
     "fs.inotify.max_user_instances of host_uid"},
    {S, "userns_max_inotify_watches", CONF_INT, offsetof(ShimConf, userns_max_inotify_watches),
     "8192", 0, 1 << 24,
     "inotify watches all processes of one sandbox may hold (max_inotify_watches of its "
     "user namespace); sandboxes together also count against fs.inotify.max_user_watches"},
    {S, "userns_max_namespaces", CONF_INT, offsetof(ShimConf, userns_max_namespaces), "32", 0,
     65536,
     "namespaces of each kind (user, mount, pid, net, …) one sandbox may hold, its own "
     "included (max_*_namespaces of its user namespace); the execs cannot create any "
     "(seccomp), this bounds the rest"},
    {S, "tmp_size", CONF_SIZE, offsetof(ShimConf, tmp_size), "64M", 1024 * 1024,
     64LL * 1024 * 1024 * 1024, "size cap of the sandbox /tmp and /dev/shm tmpfs"},
    {S, "tmp_inodes", CONF_INT, offsetof(ShimConf, tmp_inodes), "65536", 64, 1 << 24,
     "inode cap of the sandbox /tmp and of its /dev/shm (each); more files fail with ENOSPC"},
    {S, "workspace_quota", CONF_SIZE, offsetof(ShimConf, workspace_quota), "10G", 0, INT64_MAX / 2,
     "bytes each workspace may hold (project quota; 0 = none; past it writes fail with "
     "EDQUOT on ext4, ENOSPC on XFS); enforced where sandbox_dir is on ext4 -o prjquota or "
     "XFS -o pquota (see workspace_quota_required for other filesystems)"},
    {S, "workspace_inodes", CONF_INT, offsetof(ShimConf, workspace_inodes), "1000000", 0,
     4294967295LL,
     "project quota of each workspace, inodes (the workspace itself included; "
     "0 = none); needs project quotas like workspace_quota"},
    {S, "workspace_quota_required", CONF_BOOL, offsetof(ShimConf, workspace_quota_required), "no",
     0, 0,
     "yes: a sandbox_dir whose filesystem cannot enforce workspace_quota/workspace_inodes "
     "makes every sandbox creation fail (fail closed); no: sandboxes are created there "
     "without a quota, and the shim warns at start-up and in --doctor"},
    {S, "workspace_projid_base", CONF_INT, offsetof(ShimConf, workspace_projid_base), "1000000", 1,
     4000000000LL, "first filesystem project id given to workspaces"},
    {S, "workspace_projid_count", CONF_INT, offsetof(ShimConf, workspace_projid_count), "1000000",
     1, 100000000, "how many project ids from workspace_projid_base workspaces may use"},
    {S, "sandbox_uid", CONF_INT, offsetof(ShimConf, sandbox_uid), "1000", 1, 65534,
     "uid and gid the sandboxed processes run as, inside the sandbox"},
    {S, "host_uid", CONF_INT, offsetof(ShimConf, host_uid), "100000", 1, 4294967294LL,
     "unprivileged host uid and gid that sandbox_uid is mapped to (never 0)"},
    {S, "exec_drain_timeout_ms", CONF_INT, offsetof(ShimConf, exec_drain_timeout_ms), "1000", 0,
     3600 * 1000,
     "after an exec exits, how long to wait for EOF on its output pipes "
     "(background children may hold them)"},
    {S, "max_pending_output", CONF_SIZE, offsetof(ShimConf, max_pending_output), "8M", 64 * 1024,
     1024LL * 1024 * 1024, "exec output queued to a peer beyond which reading pauses"},
    {S, "exec_output_buffer", CONF_SIZE, offsetof(ShimConf, exec_output_buffer), "1M", 4096,
     256LL * 1024 * 1024,
     "last bytes of each exec stream kept for a re-attach (EXEC_ATTACH) after the "
     "coordinator's connection dropped; older output is dropped and counted"},
    {S, "rlimit_nofile", CONF_INT, offsetof(ShimConf, rlimit_nofile), "4096", 64, 1048576,
     "RLIMIT_NOFILE (open files) of every sandboxed process"},
    {S, "rlimit_fsize", CONF_SIZE, offsetof(ShimConf, rlimit_fsize), "16G", 1024 * 1024,
     INT64_MAX / 2, "RLIMIT_FSIZE: largest file a sandboxed process may write"},
    {S, "rlimit_memlock", CONF_SIZE, offsetof(ShimConf, rlimit_memlock), "64K", 0,
     1024LL * 1024 * 1024, "RLIMIT_MEMLOCK of every sandboxed process (CORE and RTPRIO are 0)"},
    {S, "exec_timeout_ms", CONF_INT, offsetof(ShimConf, exec_timeout_ms), "0", 0,
     7LL * 24 * 3600 * 1000,
     "wall-clock timeout of an exec when EXEC_START gives none (0 = none); "
     "the exec's process group is killed and it ends with reason 'timeout'"},
    {S, "memory_max", CONF_SIZE, offsetof(ShimConf, memory_max), "2G", 16 * 1024 * 1024, 1LL << 50,
     "memory limit of each sandbox (cgroup memory.max / memory.limit_in_bytes)"},
    {S, "memory_swap_max", CONF_SIZE, offsetof(ShimConf, memory_swap_max), "0", 0, 1LL << 50,
     "swap a sandbox may use on top of memory_max"},
    {S, "pids_max", CONF_INT, offsetof(ShimConf, pids_max), "512", 8, 1 << 22,
     "most processes and threads alive in one sandbox (cgroup pids.max)"},
    {S, "cpu_max", CONF_STR, offsetof(ShimConf, cpu_max), "100000 100000", 0, 0,
     "CPU bandwidth of each sandbox, cgroup v2 cpu.max syntax: 'max' (unlimited) or "
     "'QUOTA_US [PERIOD_US]', e.g. '200000 100000' for 2 CPUs; the default is one CPU "
     "(on cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us)"},
    {S, "pool_size", CONF_INT, offsetof(ShimConf, pool_size), "-1", -1, 64,
     "sandboxes started ahead for no thread yet: a new sandbox is one of these with its "
     "workspace bound in; not counted in max_instances; 0 = none; -1 = from the host, "
     "logged at start: one per CPU of the shim's affinity mask, at least 2 and at most 16"},
    {S, "max_instances", CONF_INT, offsetof(ShimConf, max_instances), "0", 0, 4096,
     "most sandboxes alive at once; further requests wait (SANDBOX_QUEUED), served "
     "round-robin over threads, and an idle sandbox (no exec running, whatever processes "
     "linger) is stopped to make room; 0 = from the host, logged at start with its "
     "arithmetic: the least of half of MemTotal / 4 MiB (an idle sandbox measured at "
     "about 1 MiB of PSS, memory cgroup, slab and page tables, times 4), 512 per CPU, "
     "what host_uid's fs.inotify.max_user_instances and max_user_watches allow at the "
     "userns_max_inotify_* keys (minus pool_size), and 4096; at least 1"},
    {S, "tenant_max_instances", CONF_INT, offsetof(ShimConf, tenant_max_instances), "0", 0, 4096,
     "one tenant's share of max_instances, once the shim has served two tenants: a request "
     "of a tenant holding that many sandboxes waits in the queue (never fails for it) while "
     "other tenants are served; the queue is served round-robin over tenants, then over "
     "threads; 0 = max(1, max_instances / 2)"},
    {S, "queue_timeout_ms", CONF_INT, offsetof(ShimConf, queue_timeout_ms), "600000", 0,
     7LL * 24 * 3600 * 1000,
     "how long a request waits for a sandbox slot before it fails (run error "
     "queue_timeout); 0 = no limit"},
    {S, "sleep_after_ms", CONF_INT, offsetof(ShimConf, sleep_after_ms), "900000", 0,
     30LL * 24 * 3600 * 1000,
     "stop a sandbox's processes after it was idle this long (no exec running; processes "
     "an ended exec left behind do not count); the workspace is kept; 0 = never"},
    {S, "restore_max_bytes", CONF_SIZE, offsetof(ShimConf, restore_max_bytes), "4G", 0,
     INT64_MAX / 2,
     "most bytes of file content (apparent sizes: a sparse file counts whole) a snapshot "
     "restore may unpack; a workspace holding more is refused at snapshot time (422 "
     "not_restorable), a larger archive at restore (422 restore_rejected, the workspace "
     "left as it was)"},
    {S, "restore_max_entries", CONF_INT, offsetof(ShimConf, restore_max_entries), "1000000", 1,
     100000000,
     "most archive entries (files, directories, symlinks, hardlinks) a snapshot restore "
     "may unpack; a workspace with more is refused at snapshot time (422 not_restorable)"},
    {S, "image_max_bytes", CONF_SIZE, offsetof(ShimConf, image_max_bytes), "16G", 1, INT64_MAX / 2,
     "most bytes of file content an image import unpacks over all its layers "
     "(runwarden image import; docs/IMAGES.md); a larger image is refused"},
    {S, "image_max_entries", CONF_INT, offsetof(ShimConf, image_max_entries), "2000000", 1,
     100000000,
     "most entries (files, directories, links, whiteouts) an image import reads over "
     "all its layers; more is refused"},
    {S, "file_api_max_bytes", CONF_SIZE, offsetof(ShimConf, file_api_max_bytes), "8M", 1,
     1024LL * 1024 * 1024,
     "largest file the file API (/threads/{id}/files) reads or writes; larger ones are "
     "refused (413 too_large); also bounded by max_frame less 64 KiB"},
    {S, "watch_idle_ms", CONF_INT, offsetof(ShimConf, watch_idle_ms), "60000", 1000, 3600000,
     "a file watch (GET /sandboxes/{id}/watch) nobody polled for this long is dropped; its "
     "next poll is 410 watch_expired"},
    {S, "snapshot_timeout_ms", CONF_INT, offsetof(ShimConf, snapshot_timeout_ms), "240000", 0,
     7LL * 24 * 3600 * 1000,
     "how long a snapshot or restore job (a child process) may run before it is killed "
     "(504 job_timeout); 0 = none. coordinatord and routerd read this key too (from the "
     "same files) and wait that long plus a margin for a snapshot or restore reply"},
    {S, "snapshot_max_jobs", CONF_INT, offsetof(ShimConf, snapshot_max_jobs), "2", 1, 64,
     "most snapshot and restore jobs running at once (all threads); one more is refused "
     "at once with 429 too_many_jobs (retry later), never queued"},
    {S, "snapshot_cpu_max", CONF_STR, offsetof(ShimConf, snapshot_cpu_max), "100000 100000", 0, 0,
     "CPU bandwidth of all snapshot/restore jobs together (their cgroup 'jobs' under the "
     "shim's instance cgroup), cpu.max syntax like cpu_max; default one CPU"},
    {S, "snapshot_io_weight", CONF_INT, offsetof(ShimConf, snapshot_io_weight), "50", 1, 10000,
     "io.weight of the jobs' cgroup (cgroup v2 with the io controller delegated; 100 is "
     "the kernel's default share); without it jobs run unweighted (--doctor says so)"},
    {S, "backups_keep", CONF_INT, offsetof(ShimConf, backups_keep), "10", 0, 1000000,
     "newest snapshots kept per thread; older ones are deleted after a snapshot "
     "(restore: 404 backup_not_found); 0 = keep all"},
    {S, "tenant_max_backup_bytes", CONF_SIZE, offsetof(ShimConf, tenant_max_backup_bytes), "20G", 0,
     INT64_MAX / 2,
     "bytes of backups one tenant may hold (all its threads' snapshots, on disk); a snapshot "
     "asked once its tenant holds that much is refused 429 tenant_backup_quota (the last one "
     "allowed may pass it by its own size); 0 = no cap"},
    {S, "sandbox_orphan_ms", CONF_INT, offsetof(ShimConf, sandbox_orphan_ms), "60000", 100,
     7LL * 24 * 3600 * 1000,
     "after containerd-shim died (kill -9, crash), how long each sandbox waits for a new "
     "instance to re-adopt it before it kills all of its processes and exits"},
    {S, "cgroup_parent", CONF_STR, offsetof(ShimConf, cgroup_parent), "", 0, 0,
     "cgroup under which sandboxes are created (in each hierarchy); empty means the "
     "shim's own cgroup"},
    {S, "socket_group", CONF_STR, offsetof(ShimConf, socket_group), "", 0, 0,
     "control socket group: set, the socket is root:GROUP 0660 and peers in GROUP are "
     "accepted too; empty, it is 0600 for root and the shim's uid only"},
};
const size_t shim_conf_n_items = ELEMENTSOF(shim_conf_items);

int
shim_conf_load(const DaemonArgs *a, ShimConf *c)
{
	int r;

	r = daemon_load_config(a, shim_conf_items, shim_conf_n_items, c, &c->shared);
	if (r < 0)
		return r;
	if (c->shared.state_dir[0] != '/' || c->shared.runtime_dir[0] != '/')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "state_dir and runtime_dir must be absolute paths");
	if (c->sandbox_dir[0] == '\0') {
		char *p;
		if (asprintf(&p, "%s/sandboxes", c->shared.state_dir) < 0)
			return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
		free(c->sandbox_dir);
		c->sandbox_dir = p;
	}
	if (c->sandbox_dir[0] != '/')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL), "sandbox_dir must be absolute");
	if (!cgroup_parent_valid(c->cgroup_parent))
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "cgroup_parent must be empty or an absolute cgroup path");
	if (c->sandbox_user[0] == '\0' || strlen(c->sandbox_user) > 32 ||
	    strspn(c->sandbox_user, "abcdefghijklmnopqrstuvwxyz0123456789_-") !=
		strlen(c->sandbox_user) ||
	    c->sandbox_user[0] == '-')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "sandbox_user: '%s' is not a user name ([a-z0-9_-], at most "
				       "32, not starting with '-')",
				       c->sandbox_user);
	{
		_cleanup_free_ char *buf = strdup(c->etc_entries);
		char *save = NULL;
		if (!buf)
			return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
		for (char *t = strtok_r(buf, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
			if (!sandbox_etc_name_ok(t))
				return log_error_errno(
				    SYNTHETIC_ERRNO(EINVAL),
				    "etc_entries: '%s' is not a name directly under /etc, or is "
				    "one of the generated passwd, group, hosts, hostname",
				    t);
	}
	if (c->workspace_projid_base + c->workspace_projid_count > 4294967295LL)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "workspace_projid_base + workspace_projid_count must not "
				       "exceed 4294967295 (project ids are 32 bits)");
	if (cgroup_parse_cpu_max("cpu_max", c->cpu_max, &c->cpu_quota_us, &c->cpu_period_us) < 0 ||
	    cgroup_parse_cpu_max("snapshot_cpu_max", c->snapshot_cpu_max, &c->job_cpu_quota_us,
				 &c->job_cpu_period_us) < 0)
		return -EINVAL;
	shim_conf_size_from_host(c);
	return 0;
}

void
shim_conf_cgroup(const ShimConf *c, CgroupConf *ret)
{
	*ret = (CgroupConf){
	    .who = "the shim",
	    .parent = c->cgroup_parent,
	    .state_dir = c->shared.state_dir,
	    .base_name = "runwarden",
	    .group_prefix = "sb-",
	    .memory_max = c->memory_max,
	    .memory_swap_max = c->memory_swap_max,
	    .pids_max = c->pids_max,
	    .cpu_quota_us = c->cpu_quota_us,
	    .cpu_period_us = c->cpu_period_us,
	    .job_cpu_quota_us = c->job_cpu_quota_us,
	    .job_cpu_period_us = c->job_cpu_period_us,
	    .job_io_weight = c->snapshot_io_weight,
	    .leaf_uid = c->host_uid,
	};
}

void
shim_conf_done(ShimConf *c)
{
	conf_free_strings(shim_conf_items, shim_conf_n_items, c);
}

/* The host's per-user limit a sysctl names (-1 when unreadable). */
static long
host_limit(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

int64_t
shim_conf_auto_instances(const ShimConf *c, const HostSize *h, char *msg, size_t len)
{
	int64_t by_mem = (int64_t)(h->mem_total / 2 / SHIM_AUTO_BYTES_PER_SANDBOX);
	int64_t by_cpu = (int64_t)MAX(h->cpus, 1) * SHIM_AUTO_PER_CPU;
	int64_t by_ino = INT64_MAX, by_watch = INT64_MAX, n;

	if (h->inotify_instances >= 0 && c->userns_max_inotify_instances > 0)
		by_ino = h->inotify_instances / c->userns_max_inotify_instances - c->pool_size;
	if (h->inotify_watches >= 0 && c->userns_max_inotify_watches > 0)
		by_watch = h->inotify_watches / c->userns_max_inotify_watches - c->pool_size;
	n = MIN(MIN(by_mem, by_cpu), MIN(MIN(by_ino, by_watch), (int64_t)SHIM_AUTO_CAP));
	n = MAX(n, 1);
	if (len)
		snprintf(
		    msg, len,
		    "max_instances = %lld from the host: least of memory %llu MiB / 2 / %d MiB "
		    "= %lld, %ld CPUs x %d = %lld, inotify instances %ld / %lld - pool %lld "
		    "= %lld, inotify watches %ld / %lld - pool %lld = %lld, cap %d; at least 1",
		    (long long)n, (unsigned long long)(h->mem_total >> 20),
		    SHIM_AUTO_BYTES_PER_SANDBOX >> 20, (long long)by_mem, h->cpus,
		    SHIM_AUTO_PER_CPU, (long long)by_cpu, h->inotify_instances,
		    (long long)c->userns_max_inotify_instances, (long long)c->pool_size,
		    (long long)(by_ino == INT64_MAX ? -1 : by_ino), h->inotify_watches,
		    (long long)c->userns_max_inotify_watches, (long long)c->pool_size,
		    (long long)(by_watch == INT64_MAX ? -1 : by_watch), SHIM_AUTO_CAP);
	return n;
}

int64_t
shim_conf_auto_pool(const HostSize *h, char *msg, size_t len)
{
	int64_t n = MIN(MAX((int64_t)h->cpus, SHIM_AUTO_POOL_MIN), SHIM_AUTO_POOL_MAX);

	if (len)
		snprintf(msg, len,
			 "pool_size = %lld from the host: %ld CPUs, at least %d, at most %d",
			 (long long)n, h->cpus, SHIM_AUTO_POOL_MIN, SHIM_AUTO_POOL_MAX);
	return n;
}

void
shim_conf_size_from_host(ShimConf *c)
{
	HostSize h = {.cpus = 1, .inotify_instances = -1, .inotify_watches = -1};
	struct sysinfo si;
	cpu_set_t set;

	if (sysinfo(&si) == 0)
		h.mem_total = (uint64_t)si.totalram * si.mem_unit;
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		h.cpus = CPU_COUNT(&set);
	else if (sysconf(_SC_NPROCESSORS_ONLN) > 0)
		h.cpus = sysconf(_SC_NPROCESSORS_ONLN);
	h.inotify_instances = host_limit("/proc/sys/fs/inotify/max_user_instances");
	h.inotify_watches = host_limit("/proc/sys/fs/inotify/max_user_watches");
	/* The pool first: the inotify bound of max_instances leaves room for it. */
	if (c->pool_size < 0)
		c->pool_size =
		    shim_conf_auto_pool(&h, c->pool_size_rule, sizeof(c->pool_size_rule));
	else
		snprintf(c->pool_size_rule, sizeof(c->pool_size_rule),
			 "pool_size = %lld (configured)", (long long)c->pool_size);
	if (c->max_instances == 0)
		c->max_instances = shim_conf_auto_instances(c, &h, c->max_instances_rule,
							    sizeof(c->max_instances_rule));
	else
		snprintf(c->max_instances_rule, sizeof(c->max_instances_rule),
			 "max_instances = %lld (configured)", (long long)c->max_instances);
}

bool
shim_conf_userns_budget(const ShimConf *c, char *msg, size_t len)
{
	static const struct {
		const char *sysctl, *key;
		size_t off;
	} lim[] = {
	    {"/proc/sys/fs/inotify/max_user_instances", "userns_max_inotify_instances",
	     offsetof(ShimConf, userns_max_inotify_instances)},
	    {"/proc/sys/fs/inotify/max_user_watches", "userns_max_inotify_watches",
	     offsetof(ShimConf, userns_max_inotify_watches)},
	};
	int64_t n = c->max_instances + c->pool_size;
	bool ok = true;
	size_t used = 0;

	if (len)
		msg[0] = '\0';
	for (size_t i = 0; i < ELEMENTSOF(lim); i++) {
		int64_t each = *(const int64_t *)(const void *)((const char *)c + lim[i].off);
		long host = host_limit(lim[i].sysctl);
		int k;

		if (host < 0)
			continue;
		k = snprintf(msg + used, used < len ? len - used : 0,
			     "%s%s: %lld sandboxes x %lld %s %ld (%s of host_uid)",
			     used ? "; " : "", lim[i].key, (long long)n, (long long)each,
			     n * each <= host ? "<=" : ">", host, lim[i].sysctl + 10);
		if (k > 0)
			used = MIN(used + (size_t)k, len);
		if (n * each > host)
			ok = false;
	}
	return ok;
}
