/* SPDX-License-Identifier: MIT */
/*
 * cgroup.c — cgroups for sandboxes (the shim) and host tool calls
 * (coordinatord), v2 or hybrid v1 (see cgroup.h).
 */
#include "config.h"

#include "cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fd-util.h"
#include "id-util.h"
#include "log.h"
#include "macro.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define EXEC_PREFIX "e" /* exec leaves: e<exec id> */

/* Hierarchies. In v2 mode only H_UNIFIED is used (the cgroup2 tree, wherever). */
enum { H_MEMORY, H_PIDS, H_CPU, H_CPUACCT, H_FREEZER, H_UNIFIED, _H_MAX };
static const char *const h_names[_H_MAX] = {"memory",  "pids",	  "cpu",
					    "cpuacct", "freezer", "unified"};

struct CgroupHost {
	CgroupConf conf; /* strings borrowed from the caller */
	CgroupMode mode;
	char *base[_H_MAX]; /* the instance directory per hierarchy, NULL when unused */
	bool has_kill;	    /* cgroup.kill in the cgroup2 hierarchy */
	bool has_io;	    /* the io controller enabled for the instance (v2) */
	char desc[256];
};

struct Cgroup {
	CgroupHost *host;
	char name[32];
	char *dir[_H_MAX];
	int dir2_fd; /* the cgroup2 directory (v2, or unified on hybrid), or -1 */
	int procs_fds[_H_MAX];
	size_t n_procs_fds;
	int counter_fds[2]; /* the oom_kill and pids max files, opened at first use; -1 */
};

static int
write_file(const char *dir, const char *file, const char *val)
{
	_cleanup_free_ char *p = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = strlen(val);
	ssize_t n;

	if (asprintf(&p, "%s/%s", dir, file) < 0)
		return -ENOMEM;
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = write(fd, val, len);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

/* Read a small file into buf (NUL-terminated). */
static int
read_file(const char *dir, const char *file, char *buf, size_t size)
{
	_cleanup_free_ char *p = NULL;
	_cleanup_close_ int fd = -1;
	size_t len = 0;
	ssize_t n;

	if (asprintf(&p, "%s/%s", dir, file) < 0)
		return -ENOMEM;
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (len + 1 < size && (n = read(fd, buf + len, size - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	return 0;
}

/* The value of key in buf's "key value" lines, or -ENOENT. */
static int
parse_key(const char *buf, const char *key, uint64_t *ret)
{
	size_t klen = strlen(key);

	for (const char *line = buf; *line;) {
		const char *nl = strchr(line, '\n');
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			*ret = strtoull(line + klen + 1, NULL, 10);
			return 0;
		}
		if (!nl)
			break;
		line = nl + 1;
	}
	return -ENOENT;
}

/* "key value" lines (memory.events, pids.events, cpu.stat, memory.oom_control). */
static int
read_key(const char *dir, const char *file, const char *key, uint64_t *ret)
{
	char buf[4096];
	int r = read_file(dir, file, buf, sizeof(buf));

	return r < 0 ? r : parse_key(buf, key, ret);
}

static bool
file_exists(const char *dir, const char *file)
{
	_cleanup_free_ char *p = NULL;
	return asprintf(&p, "%s/%s", dir, file) >= 0 && access(p, F_OK) == 0;
}

static bool
is_fs(const char *path, long magic)
{
	struct statfs sf;
	return statfs(path, &sf) == 0 && (long)sf.f_type == magic;
}

/* Our own cgroup in a hierarchy: the path of the /proc/self/cgroup line
 * whose controller list contains ctrl, or the "0::" line for NULL. */
static int
own_cgroup(const char *ctrl, char **ret)
{
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c1 = '\0';
		*c2 = '\0';
		c2[1 + strcspn(c2 + 1, "\n")] = '\0';
		bool match = false;
		if (!ctrl)
			match = streq(line, "0") && c1 + 1 == c2;
		else {
			char *save = NULL;
			for (char *t = strtok_r(c1 + 1, ",", &save); t;
			     t = strtok_r(NULL, ",", &save))
				match = match || streq(t, ctrl);
		}
		if (match) {
			*ret = strdup(c2 + 1);
			r = *ret ? 0 : -ENOMEM;
			break;
		}
	}
	fclose(f);
	return r;
}

/* mount + parent + "/<base_name>.<inst>", with duplicate slashes squeezed. */
static char *
join_base(const CgroupHost *h, const char *mnt, const char *parent, const char *inst)
{
	char *p, *w;

	if (asprintf(&p, "%s/%s/%s.%s", mnt, parent, h->conf.base_name, inst) < 0)
		return NULL;
	w = p;
	for (char *r = p; *r; r++)
		if (!(r[0] == '/' && r[1] == '/'))
			*w++ = *r;
	*w = '\0';
	return p;
}

static int
instance_id(const char *state_dir, char ret[static 13])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(state_dir, strlen(state_dir), md, &mdlen, EVP_sha256(), NULL) || mdlen < 6)
		return -EIO;
	hex_encode(md, 6, ret);
	return 0;
}

/* Is ctrl a word of the space-separated list ctrls? */
static bool
controller_listed(const char *ctrls, const char *ctrl)
{
	size_t n = strlen(ctrl);

	for (const char *p = ctrls; (p = strstr(p, ctrl)); p += n)
		if ((p == ctrls || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

static bool
has_controllers(const char *ctrls, const char **ret_missing)
{
	static const char *const need[] = {"memory", "pids", "cpu"};
	char pad[520];

	snprintf(pad, sizeof(pad), " %s ", ctrls);
	pad[strcspn(pad, "\n")] = ' ';
	for (size_t i = 0; i < ELEMENTSOF(need); i++) {
		char word[16];
		snprintf(word, sizeof(word), " %s ", need[i]);
		if (!strstr(pad, word)) {
			*ret_missing = need[i];
			return false;
		}
	}
	return true;
}

/* --doctor on v2 below a non-root own cgroup: what would be delegated to us. */
static int
probe_v2(CgroupHost *h, const char *own, const char *inst, Reason *err)
{
	_cleanup_free_ char *dir = NULL;
	const char *missing = NULL;
	char ctrls[512];
	int r;

	if (asprintf(&dir, CGROUP_ROOT "%s", own) < 0)
		return -ENOMEM;
	r = read_file(dir, "cgroup.controllers", ctrls, sizeof(ctrls));
	if (r < 0)
		return reason_set(err, "cannot read %s/cgroup.controllers: %s", dir, strerror(-r)),
		       r;
	if (!has_controllers(ctrls, &missing))
		return reason_set(
			   err,
			   "cgroup v2 controller '%s' is not delegated to %s (Delegate=yes, or "
			   "set cgroup_parent)",
			   missing, dir),
		       -EOPNOTSUPP;
	h->has_kill = file_exists(dir, "cgroup.kill");
	h->has_io = controller_listed(ctrls, "io");
	snprintf(h->desc, sizeof(h->desc),
		 "v2, delegated (%s/%s.%s; %s moves itself into %s/supervisor)", dir,
		 h->conf.base_name, inst, h->conf.who, dir);
	return 0;
}

static int
setup_v2(CgroupHost *h, const char *inst, Reason *err, bool probe)
{
	const CgroupConf *c = &h->conf;
	_cleanup_free_ char *own = NULL, *pdir = NULL;
	const char *parent = c->parent, *missing = NULL;
	char ctrls[512];
	int r;

	if (parent[0] == '\0') {
		r = own_cgroup(NULL, &own);
		if (r < 0)
			return reason_set(err, "cannot find our own cgroup v2 path"), r;
		parent = own;
		if (!streq(own, "/") && probe)
			return probe_v2(h, own, inst, err);
		if (!streq(own, "/")) {
			/* "No internal processes": the daemon leaves its own cgroup for a
			 * leaf so that controllers can be enabled for the groups beside it. */
			_cleanup_free_ char *sup = NULL;
			char pid[32];
			if (asprintf(&sup, CGROUP_ROOT "%s/supervisor", own) < 0)
				return -ENOMEM;
			if (mkdir(sup, 0755) < 0 && errno != EEXIST)
				return reason_set(err, "mkdir %s: %s", sup, strerror(errno)),
				       -errno;
			snprintf(pid, sizeof(pid), "%d", (int)getpid());
			r = write_file(sup, "cgroup.procs", pid);
			if (r < 0)
				return reason_set(err, "cannot move %s into %s: %s", c->who, sup,
						  strerror(-r)),
				       r;
		}
	}
	if (asprintf(&pdir, CGROUP_ROOT "%s", parent) < 0)
		return -ENOMEM;
	r = read_file(pdir, "cgroup.controllers", ctrls, sizeof(ctrls));
	if (r < 0)
		return reason_set(err, "cannot read %s/cgroup.controllers: %s", pdir, strerror(-r)),
		       r;
	if (!has_controllers(ctrls, &missing))
		return reason_set(err,
				  "cgroup v2 controller '%s' is not available in %s "
				  "(not delegated: set Delegate=yes or cgroup_parent)",
				  missing, pdir),
		       -EOPNOTSUPP;
	r = write_file(pdir, "cgroup.subtree_control", "+memory +pids +cpu");
	if (r < 0)
		return reason_set(
			   err, "cannot enable memory, pids, cpu in %s/cgroup.subtree_control: %s",
			   pdir, strerror(-r)),
		       r;
	h->base[H_UNIFIED] = join_base(h, CGROUP_ROOT, parent, inst);
	if (!h->base[H_UNIFIED])
		return -ENOMEM;
	if (mkdir(h->base[H_UNIFIED], 0755) < 0 && errno != EEXIST)
		return reason_set(err, "mkdir %s: %s", h->base[H_UNIFIED], strerror(errno)), -errno;
	r = write_file(h->base[H_UNIFIED], "cgroup.subtree_control", "+memory +pids +cpu");
	if (r < 0)
		return reason_set(err, "cannot enable controllers in %s: %s", h->base[H_UNIFIED],
				  strerror(-r)),
		       r;
	h->has_kill = file_exists(h->base[H_UNIFIED], "cgroup.kill");
	/* io (for the jobs' io.weight) is optional: without it jobs run unweighted. */
	h->has_io = controller_listed(ctrls, "io") &&
		    write_file(pdir, "cgroup.subtree_control", "+io") >= 0 &&
		    write_file(h->base[H_UNIFIED], "cgroup.subtree_control", "+io") >= 0;
	snprintf(h->desc, sizeof(h->desc), "v2 (%s, %s)", h->base[H_UNIFIED],
		 h->has_kill ? "cgroup.kill" : "cgroup.freeze + SIGKILL");
	return 0;
}

static int
setup_v1(CgroupHost *h, const char *inst, Reason *err)
{
	const CgroupConf *c = &h->conf;
	int r;

	for (int i = 0; i < _H_MAX; i++) {
		_cleanup_free_ char *mnt = NULL, *own = NULL;
		bool unified = i == H_UNIFIED;

		if (c->unified_only && !unified)
			continue;
		if (asprintf(&mnt, CGROUP_ROOT "/%s", h_names[i]) < 0)
			return -ENOMEM;
		if (!is_fs(mnt, unified ? CGROUP2_SUPER_MAGIC : CGROUP_SUPER_MAGIC)) {
			if (unified || i == H_FREEZER)
				continue; /* optional; checked below */
			return reason_set(err, "cgroup v1 controller '%s' is not mounted at %s",
					  h_names[i], mnt),
			       -EOPNOTSUPP;
		}
		if (c->parent[0] == '\0') {
			r = own_cgroup(unified ? NULL : h_names[i], &own);
			if (r < 0)
				return reason_set(err, "cannot find our own '%s' cgroup",
						  h_names[i]),
				       r;
		}
		h->base[i] = join_base(h, mnt, own ? own : c->parent, inst);
		if (!h->base[i])
			return -ENOMEM;
		r = mkdir_p(h->base[i], 0755);
		if (r < 0)
			return reason_set(err, "mkdir %s: %s", h->base[i], strerror(-r)), r;
	}
	h->has_kill = h->base[H_UNIFIED] && file_exists(h->base[H_UNIFIED], "cgroup.kill");
	if (c->unified_only) {
		if (!h->has_kill)
			return reason_set(err, "no cgroup2 with cgroup.kill at %s/unified",
					  CGROUP_ROOT),
			       -EOPNOTSUPP;
		snprintf(h->desc, sizeof(h->desc), "unified cgroup2 only (%s; no limits)",
			 h->base[H_UNIFIED]);
		return 0;
	}
	if (!h->has_kill && !h->base[H_FREEZER])
		return reason_set(err,
				  "neither cgroup.kill (cgroup2 at %s/unified) nor the v1 "
				  "freezer is available to kill what we start",
				  CGROUP_ROOT),
		       -EOPNOTSUPP;
	snprintf(h->desc, sizeof(h->desc), "v1 (memory, pids, cpu, cpuacct%s under %s)%s",
		 h->base[H_FREEZER] ? ", freezer" : "", h->base[H_MEMORY],
		 h->has_kill	      ? " + unified cgroup2 for cgroup.kill"
		 : h->base[H_UNIFIED] ? " + unified cgroup2"
				      : "");
	return 0;
}

int
cgroup_host_new(const CgroupConf *conf, CgroupHost **ret, Reason *err, bool probe)
{
	CgroupHost *h = calloc(1, sizeof(*h));
	char inst[13];
	int r;

	if (!h)
		return -ENOMEM;
	h->conf = *conf;
	r = instance_id(conf->state_dir, inst);
	if (r >= 0) {
		if (is_fs(CGROUP_ROOT, CGROUP2_SUPER_MAGIC)) {
			h->mode = CGROUP_MODE_V2;
			r = setup_v2(h, inst, err, probe);
		} else if (is_fs(CGROUP_ROOT "/memory", CGROUP_SUPER_MAGIC)) {
			h->mode = CGROUP_MODE_V1;
			r = setup_v1(h, inst, err);
		} else {
			reason_set(err, "no cgroup v2 at %s and no v1 memory controller",
				   CGROUP_ROOT);
			r = -EOPNOTSUPP;
		}
	}
	if (r < 0) {
		cgroup_host_free(h);
		return r;
	}
	*ret = h;
	return 0;
}

CgroupHost *
cgroup_host_free(CgroupHost *h)
{
	if (!h)
		return NULL;
	for (int i = 0; i < _H_MAX; i++) {
		if (h->base[i])
			(void)rmdir(h->base[i]); /* only when empty; EBUSY otherwise */
		free(h->base[i]);
	}
	free(h);
	return NULL;
}

CgroupMode
cgroup_host_mode(const CgroupHost *h)
{
	return h->mode;
}

const char *
cgroup_host_describe(const CgroupHost *h)
{
	return h->desc;
}

bool
cgroup_host_has_kill(const CgroupHost *h)
{
	return h->has_kill;
}

/* A Cgroup object for the name in every hierarchy (no mkdir, no fds). */
static int
cgroup_alloc(CgroupHost *h, const char *name, Cgroup **ret)
{
	Cgroup *cg = calloc(1, sizeof(*cg));

	if (!cg)
		return -ENOMEM;
	cg->host = h;
	cg->dir2_fd = -1;
	cg->counter_fds[0] = cg->counter_fds[1] = -1;
	snprintf(cg->name, sizeof(cg->name), "%s", name);
	for (int i = 0; i < _H_MAX; i++)
		if (h->base[i] && asprintf(&cg->dir[i], "%s/%s", h->base[i], name) < 0) {
			cg->dir[i] = NULL;
			cgroup_free(cg);
			return -ENOMEM;
		}
	*ret = cg;
	return 0;
}

Cgroup *
cgroup_free(Cgroup *cg)
{
	if (!cg)
		return NULL;
	for (int i = 0; i < _H_MAX; i++)
		free(cg->dir[i]);
	for (size_t i = 0; i < cg->n_procs_fds; i++)
		safe_close(cg->procs_fds[i]);
	safe_close(cg->dir2_fd);
	safe_close(cg->counter_fds[0]);
	safe_close(cg->counter_fds[1]);
	free(cg);
	return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Cgroup *, cgroup_free);

const char *
cgroup_name(const Cgroup *cg)
{
	return cg->name;
}

/* The directory holding the memory files, pids files, cpu accounting. */
static const char *
dir_memory(const Cgroup *cg)
{
	return cg->host->mode == CGROUP_MODE_V2 ? cg->dir[H_UNIFIED] : cg->dir[H_MEMORY];
}
static const char *
dir_pids(const Cgroup *cg)
{
	return cg->host->mode == CGROUP_MODE_V2 ? cg->dir[H_UNIFIED] : cg->dir[H_PIDS];
}

static int
apply_limits(Cgroup *cg, Reason *err)
{
	const CgroupConf *c = &cg->host->conf;
	char v[64];
	int r;

#define W(dir, file, ...)                                                                          \
	do {                                                                                       \
		snprintf(v, sizeof(v), __VA_ARGS__);                                               \
		r = write_file((dir), (file), v);                                                  \
		if (r < 0)                                                                         \
			return reason_set(err, "cannot set %s to %s: %s", (file), v,               \
					  strerror(-r)),                                           \
			       r;                                                                  \
	} while (0)

	if (cg->host->mode == CGROUP_MODE_V2) {
		const char *d = cg->dir[H_UNIFIED];
		W(d, "memory.max", "%" PRId64, c->memory_max);
		if (file_exists(d, "memory.swap.max"))
			W(d, "memory.swap.max", "%" PRId64, c->memory_swap_max);
		W(d, "memory.oom.group", "1");
		W(d, "pids.max", "%" PRId64, c->pids_max);
		if (c->cpu_quota_us < 0)
			W(d, "cpu.max", "max %" PRId64, c->cpu_period_us);
		else
			W(d, "cpu.max", "%" PRId64 " %" PRId64, c->cpu_quota_us, c->cpu_period_us);
		return 0;
	}
	if (!cg->dir[H_MEMORY])
		return 0; /* unified_only: no limits */
	W(cg->dir[H_MEMORY], "memory.limit_in_bytes", "%" PRId64, c->memory_max);
	if (file_exists(cg->dir[H_MEMORY], "memory.memsw.limit_in_bytes"))
		W(cg->dir[H_MEMORY], "memory.memsw.limit_in_bytes", "%" PRId64,
		  c->memory_max + c->memory_swap_max);
	else if (c->memory_swap_max == 0)
		W(cg->dir[H_MEMORY], "memory.swappiness", "0");
	W(cg->dir[H_PIDS], "pids.max", "%" PRId64, c->pids_max);
	W(cg->dir[H_CPU], "cpu.cfs_period_us", "%" PRId64, c->cpu_period_us);
	W(cg->dir[H_CPU], "cpu.cfs_quota_us", "%" PRId64, c->cpu_quota_us);
#undef W
	return 0;
}

bool
cgroup_host_has_io(const CgroupHost *h)
{
	return h->has_io;
}

int
cgroup_jobs_create(CgroupHost *h, Cgroup **ret, Reason *err)
{
	_cleanup_(cgroup_freep) Cgroup *cg = NULL;
	const CgroupConf *c = &h->conf;
	bool v2 = h->mode == CGROUP_MODE_V2;
	int use = v2 ? H_UNIFIED : H_CPU, r;
	_cleanup_free_ char *procs = NULL;
	char v[64];

	r = cgroup_alloc(h, "jobs", &cg);
	if (r < 0)
		return r;
	/* Only the hierarchy that limits: the others' dirs are not made. */
	for (int i = 0; i < _H_MAX; i++)
		if (i != use) {
			free(cg->dir[i]);
			cg->dir[i] = NULL;
		}
	if (!cg->dir[use])
		return reason_set(err, "no %s hierarchy for the jobs' cgroup", h_names[use]),
		       -ENOENT;
	if (mkdir(cg->dir[use], 0755) < 0 && errno != EEXIST)
		return reason_set(err, "mkdir %s: %s", cg->dir[use], strerror(errno)), -errno;
	if (v2) {
		if (c->job_cpu_quota_us < 0)
			snprintf(v, sizeof(v), "max %" PRId64, c->job_cpu_period_us);
		else
			snprintf(v, sizeof(v), "%" PRId64 " %" PRId64, c->job_cpu_quota_us,
				 c->job_cpu_period_us);
		r = write_file(cg->dir[use], "cpu.max", v);
		if (r < 0)
			return reason_set(err, "cannot set cpu.max to %s: %s", v, strerror(-r)), r;
		if (h->has_io) {
			snprintf(v, sizeof(v), "default %" PRId64, c->job_io_weight);
			r = write_file(cg->dir[use], "io.weight", v);
			if (r < 0)
				return reason_set(err, "cannot set io.weight to %s: %s", v,
						  strerror(-r)),
				       r;
		}
	} else {
		snprintf(v, sizeof(v), "%" PRId64, c->job_cpu_period_us);
		r = write_file(cg->dir[use], "cpu.cfs_period_us", v);
		if (r >= 0) {
			snprintf(v, sizeof(v), "%" PRId64, c->job_cpu_quota_us);
			r = write_file(cg->dir[use], "cpu.cfs_quota_us", v);
		}
		if (r < 0)
			return reason_set(err, "cannot set the cpu limit of %s: %s", cg->dir[use],
					  strerror(-r)),
			       r;
	}
	if (asprintf(&procs, "%s/cgroup.procs", cg->dir[use]) < 0)
		return -ENOMEM;
	cg->procs_fds[0] = open(procs, O_WRONLY | O_CLOEXEC);
	if (cg->procs_fds[0] < 0)
		return reason_set(err, "open %s: %s", procs, strerror(errno)), -errno;
	cg->n_procs_fds = 1;
	*ret = TAKE_PTR(cg);
	return 0;
}

int
cgroup_create(CgroupHost *h, const char *id, Cgroup **ret, Reason *err)
{
	_cleanup_(cgroup_freep) Cgroup *cg = NULL;
	char name[32];
	int r;

	snprintf(name, sizeof(name), "%s%s", h->conf.group_prefix, id);
	r = cgroup_alloc(h, name, &cg);
	if (r < 0)
		return r;
	for (int i = 0; i < _H_MAX; i++) {
		if (!cg->dir[i])
			continue;
		/* EEXIST: left by the previous sandbox of this id, already empty
		 * (its pid namespace is gone); reuse it. */
		if (mkdir(cg->dir[i], 0755) < 0 && errno != EEXIST) {
			r = -errno;
			reason_set(err, "mkdir %s: %s", cg->dir[i], strerror(errno));
			goto fail;
		}
	}
	r = apply_limits(cg, err);
	if (r < 0)
		goto fail;
	if (cg->dir[H_UNIFIED]) {
		cg->dir2_fd = open(cg->dir[H_UNIFIED], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (cg->dir2_fd < 0) {
			r = -errno;
			reason_set(err, "open %s: %s", cg->dir[H_UNIFIED], strerror(errno));
			goto fail;
		}
	}
	for (int i = 0; i < _H_MAX; i++) {
		_cleanup_free_ char *p = NULL;
		if (i == H_UNIFIED || !cg->dir[i])
			continue;
		if (asprintf(&p, "%s/cgroup.procs", cg->dir[i]) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		int fd = open(p, O_WRONLY | O_CLOEXEC);
		if (fd < 0) {
			r = -errno;
			reason_set(err, "open %s: %s", p, strerror(errno));
			goto fail;
		}
		cg->procs_fds[cg->n_procs_fds++] = fd;
	}
	*ret = TAKE_PTR(cg);
	return 0;
fail:
	(void)cgroup_remove(cg);
	return r;
}

void
cgroup_spawn_fds(const Cgroup *cg, int *ret_cgroup_fd, const int **ret_procs_fds, size_t *ret_n)
{
	*ret_cgroup_fd = cg->dir2_fd;
	*ret_procs_fds = cg->procs_fds;
	*ret_n = cg->n_procs_fds;
}

/* read_key through *fdp, kept open: the counters are read twice per exec (a
 * cgroup file reads afresh from offset 0). Opened again once if the file went
 * (the cgroup was removed and made again). */
static int
read_key_kept(int *fdp, const char *dir, const char *file, const char *key, uint64_t *ret)
{
	char buf[4096];
	ssize_t n = -1;

	for (int attempt = 0; attempt < 2 && n < 0; attempt++) {
		if (*fdp < 0) {
			_cleanup_free_ char *p = NULL;
			if (asprintf(&p, "%s/%s", dir, file) < 0)
				return -ENOMEM;
			*fdp = open(p, O_RDONLY | O_CLOEXEC);
			if (*fdp < 0)
				return -errno;
		}
		n = pread(*fdp, buf, sizeof(buf) - 1, 0);
		if (n < 0)
			*fdp = safe_close(*fdp);
	}
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return parse_key(buf, key, ret);
}

int
cgroup_counters(Cgroup *cg, uint64_t *ret_oom_kills, uint64_t *ret_pids_max)
{
	uint64_t oom = 0, pids = 0;
	int r;

	if (!dir_memory(cg) || !dir_pids(cg))
		return -EOPNOTSUPP; /* unified_only: no controllers */
	if (cg->host->mode == CGROUP_MODE_V2)
		r = read_key_kept(&cg->counter_fds[0], dir_memory(cg), "memory.events", "oom_kill",
				  &oom);
	else
		r = read_key_kept(&cg->counter_fds[0], dir_memory(cg), "memory.oom_control",
				  "oom_kill", &oom);
	if (r >= 0)
		r = read_key_kept(&cg->counter_fds[1], dir_pids(cg), "pids.events", "max", &pids);
	if (r < 0)
		return r;
	*ret_oom_kills = oom;
	*ret_pids_max = pids;
	return 0;
}

static int
count_lines(const char *dir, const char *file, uint64_t *ret)
{
	_cleanup_free_ char *p = NULL;
	char buf[4096];
	uint64_t n = 0;
	ssize_t k;
	_cleanup_close_ int fd = -1;

	if (asprintf(&p, "%s/%s", dir, file) < 0)
		return -ENOMEM;
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((k = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < k; i++)
			n += buf[i] == '\n';
	if (k < 0)
		return -errno;
	*ret = n;
	return 0;
}

/* Call fn(dir, leaf name, ud) for every exec leaf (EXEC_PREFIX<digits>) below
 * the cgroup2 directory dir. Returns the first negative return of fn, or 0. */
static int
foreach_leaf(const char *dir, int (*fn)(const char *dir, const char *leaf, void *ud), void *ud)
{
	DIR *d = dir ? opendir(dir) : NULL;
	struct dirent *de;
	int ret = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] != EXEC_PREFIX[0] || !de->d_name[1] ||
		    strspn(de->d_name + 1, "0123456789") != strlen(de->d_name + 1))
			continue;
		int r = fn(dir, de->d_name, ud);
		if (r < 0 && ret == 0)
			ret = r;
	}
	closedir(d);
	return ret;
}

static int
leaf_count(const char *dir, const char *leaf, void *ud)
{
	_cleanup_free_ char *p = NULL;
	uint64_t n = 0;
	int r;

	if (asprintf(&p, "%s/%s", dir, leaf) < 0)
		return -ENOMEM;
	r = count_lines(p, "cgroup.procs", &n);
	if (r == -ENOENT)
		return 0; /* removed meanwhile */
	if (r < 0)
		return r;
	*(uint64_t *)ud += n;
	return 0;
}

int
cgroup_count_procs(const Cgroup *cg, uint64_t *ret)
{
	uint64_t most = 0;

	for (int i = 0; i < _H_MAX; i++) {
		uint64_t n = 0;
		if (!cg->dir[i])
			continue;
		int r = count_lines(cg->dir[i], "cgroup.procs", &n);
		if (r == -ENOENT)
			continue;
		/* cgroup2 lists only direct members: add the exec leaves. */
		if (r >= 0 && i == H_UNIFIED)
			r = foreach_leaf(cg->dir[i], leaf_count, &n);
		if (r < 0)
			return r;
		most = MAX(most, n);
	}
	*ret = most;
	return 0;
}

int
cgroup_stats(const Cgroup *cg, uint64_t *ret_cpu_usec, uint64_t *ret_procs)
{
	uint64_t cpu = 0;
	char buf[64];
	int r;

	if (cg->host->mode == CGROUP_MODE_V2)
		r = read_key(cg->dir[H_UNIFIED], "cpu.stat", "usage_usec", &cpu);
	else {
		r = read_file(cg->dir[H_CPUACCT], "cpuacct.usage", buf, sizeof(buf));
		if (r >= 0)
			cpu = strtoull(buf, NULL, 10) / 1000; /* ns */
	}
	if (r >= 0)
		r = cgroup_count_procs(cg, ret_procs);
	if (r < 0)
		return r;
	*ret_cpu_usec = cpu;
	return 0;
}

int
cgroup_memory(const Cgroup *cg, uint64_t *ret_bytes)
{
	char buf[64];
	int r;

	if (!dir_memory(cg))
		return -EOPNOTSUPP; /* unified_only: no controllers */
	r = read_file(dir_memory(cg),
		      cg->host->mode == CGROUP_MODE_V2 ? "memory.current" : "memory.usage_in_bytes",
		      buf, sizeof(buf));
	if (r < 0)
		return r;
	*ret_bytes = strtoull(buf, NULL, 10);
	return 0;
}

static void
sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	(void)nanosleep(&ts, NULL);
}

/* SIGKILL every member of a frozen cgroup: frozen tasks cannot exit, so their
 * pids cannot be recycled while we signal them. */
static void
kill_members(const char *dir)
{
	_cleanup_free_ char *p = NULL;
	char *line = NULL;
	size_t cap = 0;
	FILE *f;

	if (asprintf(&p, "%s/cgroup.procs", dir) < 0)
		return;
	f = fopen(p, "re");
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		long pid = strtol(line, NULL, 10);
		if (pid > 0)
			(void)kill((pid_t)pid, SIGKILL);
	}
	free(line);
	fclose(f);
}

static int
leaf_kill_members(const char *dir, const char *leaf, void *ud)
{
	_cleanup_free_ char *p = NULL;

	if (asprintf(&p, "%s/%s", dir, leaf) < 0)
		return -ENOMEM;
	kill_members(p);
	return 0;
}

int
cgroup_kill(Cgroup *cg)
{
	char state[64];

	if (cg->host->has_kill && cg->dir[H_UNIFIED]) {
		int r = write_file(cg->dir[H_UNIFIED], "cgroup.kill", "1");
		return r == -ENOENT ? 0 : r;
	}
	if (cg->host->mode == CGROUP_MODE_V2) {
		const char *d = cg->dir[H_UNIFIED];
		int r = write_file(d, "cgroup.freeze", "1");
		if (r < 0)
			return r == -ENOENT ? 0 : r;
		for (int i = 0; i < 1000; i++) {
			uint64_t frozen = 0;
			if (read_key(d, "cgroup.events", "frozen", &frozen) >= 0 && frozen)
				break;
			sleep_ms(1);
		}
		kill_members(d);
		(void)foreach_leaf(d, leaf_kill_members, NULL);
		return write_file(d, "cgroup.freeze", "0");
	}
	/* v1 freezer: FREEZING until every task is frozen, then FROZEN. */
	const char *d = cg->dir[H_FREEZER];
	int r = write_file(d, "freezer.state", "FROZEN");
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	for (int i = 0; i < 1000; i++) {
		if (read_file(d, "freezer.state", state, sizeof(state)) >= 0 &&
		    strncmp(state, "FROZEN", 6) == 0)
			break;
		sleep_ms(1);
	}
	kill_members(d);
	return write_file(d, "freezer.state", "THAWED");
}

int
cgroup_freeze(Cgroup *cg, bool freeze)
{
	char state[64];
	const char *d;
	int r;

	if (cg->dir[H_UNIFIED]) {
		d = cg->dir[H_UNIFIED];
		r = write_file(d, "cgroup.freeze", freeze ? "1" : "0");
		if (r < 0 || !freeze)
			return r;
		for (int i = 0; i < 2000; i++) {
			uint64_t frozen = 0;
			if (read_key(d, "cgroup.events", "frozen", &frozen) >= 0 && frozen)
				return 0;
			sleep_ms(1);
		}
		return -ETIMEDOUT;
	}
	d = cg->dir[H_FREEZER];
	if (!d)
		return -EOPNOTSUPP;
	r = write_file(d, "freezer.state", freeze ? "FROZEN" : "THAWED");
	if (r < 0 || !freeze)
		return r;
	for (int i = 0; i < 2000; i++) {
		if (read_file(d, "freezer.state", state, sizeof(state)) >= 0 &&
		    strncmp(state, "FROZEN", 6) == 0)
			return 0;
		sleep_ms(1);
	}
	return -ETIMEDOUT;
}

static int
leaf_rmdir(const char *dir, const char *leaf, void *ud)
{
	_cleanup_free_ char *p = NULL;

	if (asprintf(&p, "%s/%s", dir, leaf) < 0)
		return -ENOMEM;
	if (rmdir(p) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int
cgroup_remove(Cgroup *cg)
{
	int ret = 0;

	for (int i = 0; i < _H_MAX; i++) {
		if (!cg->dir[i])
			continue;
		/* The exec leaves first: a cgroup with children cannot go. */
		if (i == H_UNIFIED) {
			int r = foreach_leaf(cg->dir[i], leaf_rmdir, NULL);
			if (r < 0 && ret == 0)
				ret = r;
		}
		if (rmdir(cg->dir[i]) < 0 && errno != ENOENT && ret == 0)
			ret = -errno;
	}
	return ret;
}

int
cgroup_open(CgroupHost *h, const char *id, Cgroup **ret)
{
	_cleanup_(cgroup_freep) Cgroup *cg = NULL;
	char name[32];
	bool any = false;
	int r;

	snprintf(name, sizeof(name), "%s%s", h->conf.group_prefix, id);
	r = cgroup_alloc(h, name, &cg);
	if (r < 0)
		return r;
	for (int i = 0; i < _H_MAX; i++)
		if (cg->dir[i] && access(cg->dir[i], F_OK) == 0)
			any = true;
	if (!any)
		return -ENOENT;
	*ret = TAKE_PTR(cg);
	return 0;
}

int
cgroup_host_reap_stale(CgroupHost *h, bool (*keep)(const char *name, void *ud), void *ud)
{
	char names[256][32];
	size_t n = 0;
	int reaped = 0;

	/* Union of the <group_prefix>* names over the hierarchies. */
	for (int i = 0; i < _H_MAX; i++) {
		DIR *d;
		struct dirent *de;
		if (!h->base[i] || !(d = opendir(h->base[i])))
			continue;
		while ((de = readdir(d)) && n < ELEMENTSOF(names)) {
			bool seen = false;
			if (strncmp(de->d_name, h->conf.group_prefix,
				    strlen(h->conf.group_prefix)) != 0 ||
			    strlen(de->d_name) >= sizeof(names[0]) ||
			    (keep && keep(de->d_name, ud)))
				continue;
			for (size_t k = 0; k < n; k++)
				seen = seen || streq(names[k], de->d_name);
			if (!seen)
				snprintf(names[n++], sizeof(names[0]), "%s", de->d_name);
		}
		closedir(d);
	}
	for (size_t k = 0; k < n; k++) {
		_cleanup_(cgroup_freep) Cgroup *cg = NULL;
		uint64_t procs = 0;
		int r = cgroup_alloc(h, names[k], &cg);
		if (r < 0)
			return r;
		(void)cgroup_count_procs(cg, &procs);
		if (procs > 0)
			(void)cgroup_kill(cg);
		/* Wait (bounded) until the kernel released every member. */
		for (int i = 0; i < 2000; i++) {
			r = cgroup_remove(cg);
			if (r != -EBUSY)
				break;
			if (i % 100 == 99)
				(void)cgroup_kill(cg);
			sleep_ms(1);
		}
		if (r < 0)
			log_warning_errno(r, "Failed to remove the stale cgroup %s: %m", names[k]);
		else {
			log_notice("Reaped %s left by a previous instance (%" PRIu64
				   " processes killed)",
				   names[k], procs);
			reaped++;
		}
	}
	return reaped;
}

/* ---------------------------------------------------------------------------
 * Exec leaves.
 */

bool
cgroup_has_leaves(const Cgroup *cg)
{
	return cg->dir[H_UNIFIED] != NULL;
}

static int
leaf_path(const Cgroup *cg, uint64_t exec_id, char **ret)
{
	if (!cg->dir[H_UNIFIED])
		return -EOPNOTSUPP;
	if (asprintf(ret, "%s/" EXEC_PREFIX "%" PRIu64, cg->dir[H_UNIFIED], exec_id) < 0)
		return -ENOMEM;
	return 0;
}

int
cgroup_leaf_create(Cgroup *cg, uint64_t exec_id, int *ret_fd, Reason *err)
{
	const CgroupConf *c = &cg->host->conf;
	_cleanup_free_ char *p = NULL, *parent_procs = NULL;
	_cleanup_close_ int fd = -1;
	uid_t uid = (uid_t)c->leaf_uid;
	int r = leaf_path(cg, exec_id, &p);

	if (r < 0)
		return reason_set(err, "no cgroup2 directory for exec cgroups"), r;
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return reason_set(err, "mkdir %s: %s", p, strerror(errno)), -errno;
	fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		reason_set(err, "open %s: %s", p, strerror(errno));
		goto fail;
	}
	/* Delegation for CLONE_INTO_CGROUP by the init (whose credentials are
	 * host_uid's, without capabilities): the kernel wants write access to
	 * cgroup.procs of the destination and of the common ancestor of source and
	 * destination, i.e. the sandbox cgroup. Only those two files; nothing in
	 * the sandbox can reach the cgroupfs (it is not mounted there). */
	if (asprintf(&parent_procs, "%s/cgroup.procs", cg->dir[H_UNIFIED]) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	if (c->leaf_uid >= 0 &&
	    (fchownat(fd, "cgroup.procs", uid, uid, 0) < 0 ||
	     fchownat(AT_FDCWD, parent_procs, uid, uid, AT_SYMLINK_NOFOLLOW) < 0)) {
		r = -errno;
		reason_set(err, "cannot delegate cgroup.procs of %s to uid %u: %s", p,
			   (unsigned)uid, strerror(errno));
		goto fail;
	}
	*ret_fd = TAKE_FD(fd);
	return 0;
fail:
	(void)rmdir(p);
	return r;
}

int
cgroup_leaf_cpu(const Cgroup *cg, uint64_t exec_id, uint64_t *ret_usec)
{
	_cleanup_free_ char *p = NULL;
	int r = leaf_path(cg, exec_id, &p);

	if (r < 0)
		return r;
	return read_key(p, "cpu.stat", "usage_usec", ret_usec);
}

int
cgroup_leaf_kill(Cgroup *cg, uint64_t exec_id)
{
	_cleanup_free_ char *p = NULL;
	int r = leaf_path(cg, exec_id, &p);

	if (r < 0)
		return r;
	if (cg->host->has_kill) {
		r = write_file(p, "cgroup.kill", "1");
		return r == -ENOENT ? 0 : r;
	}
	/* cgroup2 without cgroup.kill (< 5.14): freeze, SIGKILL each member, thaw. */
	r = write_file(p, "cgroup.freeze", "1");
	if (r < 0)
		return r == -ENOENT ? 0 : r;
	for (int i = 0; i < 1000; i++) {
		uint64_t frozen = 0;
		if (read_key(p, "cgroup.events", "frozen", &frozen) >= 0 && frozen)
			break;
		sleep_ms(1);
	}
	kill_members(p);
	return write_file(p, "cgroup.freeze", "0");
}

int
cgroup_leaf_remove(Cgroup *cg, uint64_t exec_id)
{
	_cleanup_free_ char *p = NULL;
	int r = leaf_path(cg, exec_id, &p);

	if (r < 0)
		return r;
	if (rmdir(p) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

bool
cgroup_leaf_exists(const Cgroup *cg, uint64_t exec_id)
{
	_cleanup_free_ char *p = NULL;

	return leaf_path(cg, exec_id, &p) >= 0 && access(p, F_OK) == 0;
}

bool
cgroup_host_has_leaves(const CgroupHost *h)
{
	return h->base[H_UNIFIED] != NULL;
}

typedef struct PruneCtx {
	bool (*busy)(uint64_t exec_id, void *ud);
	void *ud;
	int left;
} PruneCtx;

static int
leaf_prune(const char *dir, const char *leaf, void *ud)
{
	PruneCtx *pc = ud;
	_cleanup_free_ char *p = NULL;
	uint64_t id = strtoull(leaf + 1, NULL, 10);

	if (pc->busy && pc->busy(id, pc->ud))
		return 0;
	if (asprintf(&p, "%s/%s", dir, leaf) < 0)
		return -ENOMEM;
	if (rmdir(p) < 0 && errno != ENOENT)
		pc->left++;
	return 0;
}

int
cgroup_prune_leaves(Cgroup *cg, bool (*busy)(uint64_t exec_id, void *ud), void *ud)
{
	PruneCtx pc = {.busy = busy, .ud = ud};
	int r = foreach_leaf(cg->dir[H_UNIFIED], leaf_prune, &pc);

	return r < 0 ? r : pc.left;
}

int
cgroup_parse_cpu_max(const char *key, const char *s, int64_t *ret_quota, int64_t *ret_period)
{
	long long quota = -1, period = 100000;
	char q[32] = "", extra[2];
	int n = sscanf(s, "%31s %lld %1s", q, &period, extra);

	if (n < 1 || n > 2 || period < 1000 || period > 1000000)
		goto bad;
	if (!streq(q, "max")) {
		char *end;
		errno = 0;
		quota = strtoll(q, &end, 10);
		if (errno || *end || quota < 1000 || quota > 1000LL * 1000 * 1000 * 1000)
			goto bad;
	}
	*ret_quota = quota;
	*ret_period = period;
	return 0;
bad:
	return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
			       "%s: '%s' is not 'max' or 'QUOTA_US [PERIOD_US]' "
			       "(quota >= 1000, period 1000..1000000)",
			       key, s);
}

bool
cgroup_parent_valid(const char *parent)
{
	return parent[0] == '\0' ||
	       (parent[0] == '/' && !strstr(parent, "/.") && strlen(parent) <= 512);
}
