/* SPDX-License-Identifier: MIT */
/*
 * adopt.c — persistence and start-up scan for re-adopting sandboxes (adopt.h).
 */
#include "config.h"

#include "adopt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "sandbox.h"

#define ADOPT_REPLY_TIMEOUT_MS 2000
#define META_MAX 4096
/* A released exec record kept for the next one (no new inode per exec). */
#define EXEC_FREE ".exec-free"

static bool
id_ok(const char *id)
{
	if (strlen(id) != 16)
		return false;
	for (const char *p = id; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int
adopt_dir_open(const char *runtime_dir, int *ret_dfd)
{
	_cleanup_free_ char *p = NULL;
	struct stat st = {0};
	int fd, r;

	if (asprintf(&p, "%s/sandboxes", runtime_dir) < 0)
		return -ENOMEM;
	r = mkdir_p(p, 0700);
	if (r < 0)
		return r;
	fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* Ours only: runtime_dir may belong to the unprivileged daemons' user, who
	 * must not be able to plant a directory here, and whoever may connect to
	 * an init.sock may steer a sandbox. */
	if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || fchmod(fd, 0700) < 0) {
		r = errno && st.st_uid == geteuid() ? -errno : -EPERM;
		close(fd);
		return r;
	}
	*ret_dfd = fd;
	return 0;
}

/* Path of name in the directory fd dirfd, usable by bind/connect whatever the
 * length of the real path. */
static int
sun_at(int dirfd, const char *name, struct sockaddr_un *sa)
{
	*sa = (struct sockaddr_un){.sun_family = AF_UNIX};
	if (snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", dirfd, name) >=
	    (int)sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

int
adopt_listen(int dfd, const char *id, int *ret_fd)
{
	_cleanup_close_ int sub = -1, fd = -1;
	struct sockaddr_un sa;
	mode_t old;
	int r;

	if (!id_ok(id))
		return -EINVAL;
	if (mkdirat(dfd, id, 0700) < 0 && errno != EEXIST)
		return -errno;
	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -errno;
	if (unlinkat(sub, "init.sock", 0) < 0 && errno != ENOENT)
		return -errno;
	r = sun_at(sub, "init.sock", &sa);
	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old);
	if (r < 0)
		return r;
	/* The init calls listen(): SO_PEERCRED then names it, not us. */
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* How meta_write writes <id>/<name>. */
typedef enum MetaMode {
	META_NEW,      /* a temporary file renamed into place */
	META_REUSE,    /* EXEC_FREE (else a new file) renamed into place */
	META_IN_PLACE, /* the existing file overwritten (else META_NEW) */
} MetaMode;

/* Write fields (NUL-terminated each) to <id>/<name>: atomically (the whole
 * content appears at once under name) but for META_IN_PLACE. */
static int
meta_write(int dfd, const char *id, const char *name, const char *const *fields, size_t n,
	   MetaMode mode)
{
	_cleanup_close_ int sub = -1, fd = -1;
	char tmp[64], buf[META_MAX];
	size_t len = 0;
	const char *src = tmp;

	if (!id_ok(id))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		const char *f = fields[i] ? fields[i] : "";
		size_t l = strlen(f) + 1;
		if (len + l > sizeof(buf))
			return -E2BIG;
		memcpy(buf + len, f, l);
		len += l;
	}
	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -errno;
	if (mode != META_NEW) {
		src = mode == META_REUSE ? EXEC_FREE : name;
		fd = openat(sub, src, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0) {
			struct stat st;
			ssize_t k = -1;
			if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
				return -EBADF;
			k = pwrite(fd, buf, len, 0);
			if (k != (ssize_t)len || ftruncate(fd, (off_t)len) < 0)
				return k < 0 || k == (ssize_t)len ? -errno : -EIO;
			if (mode == META_IN_PLACE)
				return 0;
			return RET_NERRNO(renameat(sub, src, sub, name));
		}
		if (errno != ENOENT)
			return -errno;
		src = tmp;
	}
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	fd = openat(sub, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (loop_write(fd, buf, len) < 0 || renameat(sub, tmp, sub, name) < 0) {
		int r = -errno;
		(void)unlinkat(sub, tmp, 0);
		return r ? r : -EIO;
	}
	return 0;
}

/* Read <id>/<name> into n fields (malloc'd; missing ones NULL). */
static int
meta_read(int sub, const char *name, char **fields, size_t n)
{
	_cleanup_close_ int fd = -1;
	char buf[META_MAX + 1];
	ssize_t len;
	size_t off = 0;

	fd = openat(sub, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	len = read(fd, buf, META_MAX);
	if (len < 0)
		return -errno;
	buf[len] = '\0';
	for (size_t i = 0; i < n; i++) {
		fields[i] = NULL;
		if (off >= (size_t)len)
			continue;
		fields[i] = strdup(buf + off);
		if (!fields[i])
			return -ENOMEM;
		off += strlen(buf + off) + 1;
	}
	return 0;
}

int
adopt_save_sandbox(int dfd, const char *id, const char *key, const char *run_id,
		   const char *thread_id, const char *cg_id)
{
	const char *f[] = {key, run_id, thread_id, cg_id};
	return meta_write(dfd, id, "sandbox", f, ELEMENTSOF(f), META_NEW);
}

int
adopt_update_sandbox(int dfd, const char *id, const char *key, const char *run_id,
		     const char *thread_id, const char *cg_id)
{
	const char *f[] = {key, run_id, thread_id, cg_id};
	return meta_write(dfd, id, "sandbox", f, ELEMENTSOF(f), META_IN_PLACE);
}

int
adopt_spare_exec(int dfd, const char *id)
{
	_cleanup_close_ int sub = -1, fd = -1;

	if (!id_ok(id))
		return -EINVAL;
	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -errno;
	fd = openat(sub, EXEC_FREE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return fd < 0 && errno != EEXIST ? -errno : 0;
}

int
adopt_rename_sandbox(int dfd, const char *from, const char *to)
{
	if (!id_ok(from) || !id_ok(to))
		return -EINVAL;
	return RET_NERRNO(renameat2(dfd, from, dfd, to, RENAME_NOREPLACE));
}

int
adopt_save_exec(int dfd, const char *id, uint64_t exec_id, const char *run_id,
		const char *thread_id, int64_t deadline_ms, bool kill_leftovers)
{
	char name[40], dl[24];
	const char *f[] = {run_id, thread_id, dl, kill_leftovers ? "1" : "0"};

	snprintf(name, sizeof(name), "exec-%" PRIu64, exec_id);
	snprintf(dl, sizeof(dl), "%" PRId64, deadline_ms);
	return meta_write(dfd, id, name, f, ELEMENTSOF(f), META_REUSE);
}

void
adopt_forget_exec(int dfd, const char *id, uint64_t exec_id)
{
	_cleanup_close_ int sub = -1;
	char name[40];

	if (dfd < 0 || !id_ok(id))
		return;
	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return;
	snprintf(name, sizeof(name), "exec-%" PRIu64, exec_id);
	/* kept for the next exec's record (one is enough) */
	if (renameat2(sub, name, sub, EXEC_FREE, RENAME_NOREPLACE) < 0)
		(void)unlinkat(sub, name, 0);
}

void
adopt_forget_sandbox(int dfd, const char *id)
{
	int sub;
	DIR *d;
	struct dirent *de;

	if (dfd < 0 || !id_ok(id))
		return;
	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return;
	d = fdopendir(sub);
	if (!d) {
		close(sub);
		return;
	}
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			(void)unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	(void)unlinkat(dfd, id, AT_REMOVEDIR);
}

int
adopt_counter_open(const char *sandbox_dir, int *ret_fd, uint64_t *ret_last)
{
	_cleanup_free_ char *p = NULL;
	char buf[32];
	ssize_t n;
	int fd;

	if (asprintf(&p, "%s/.exec-id", sandbox_dir) < 0)
		return -ENOMEM;
	fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	n = pread(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	*ret_last = strtoull(buf, NULL, 10);
	*ret_fd = fd;
	return 0;
}

void
adopt_counter_store(int fd, uint64_t id)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%020" PRIu64 "\n", id);

	if (fd >= 0)
		(void)!pwrite(fd, buf, (size_t)n, 0);
}

static void
adopted_done(Adopted *a)
{
	for (size_t i = 0; i < a->n_execs; i++) {
		AdoptedExec *x = &a->execs[i];
		for (int k = 1; k <= 2; k++)
			safe_close(x->mem[k]);
		free(x->run_id);
		free(x->thread_id);
	}
	free(a->execs);
	free(a->key);
	free(a->run_id);
	free(a->thread_id);
	safe_close(a->sock);
	safe_close(a->pidfd);
}

/* One blocking (bounded) message from the init. */
static ssize_t
recv_msg(int sock, InitMsg *m, int *fds, size_t *nfds)
{
	struct pollfd p = {.fd = sock, .events = POLLIN};
	char buf[sizeof(InitMsg) + 1024];
	ssize_t n;

	*nfds = 0;
	if (poll(&p, 1, ADOPT_REPLY_TIMEOUT_MS) <= 0)
		return -ETIMEDOUT;
	n = fd_recv(sock, buf, sizeof(buf), fds, 2, nfds);
	if (n < 0)
		return n;
	if ((size_t)n < sizeof(InitMsg)) {
		for (size_t i = 0; i < *nfds; i++)
			close(fds[i]);
		return -EBADMSG;
	}
	memcpy(m, buf, sizeof(*m));
	return n;
}

/* A memfd of ours: a regular shmem file with F_SEAL_SHRINK (the same open file
 * the old shim created, O_RDWR). */
static int
memfd_check(int fd)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EBADF;
	return 0;
}

static int
adopt_one(int dfd, const char *id, Adopted *a)
{
	_cleanup_close_ int sub = -1;
	struct sockaddr_un sa;
	struct ucred uc;
	socklen_t ul = sizeof(uc);
	char *f[4] = {NULL, NULL, NULL, NULL};
	InitMsg m;
	int fds[2], r;
	size_t nfds;

	sub = openat(dfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sub < 0)
		return -errno;
	r = meta_read(sub, "sandbox", f, 4);
	a->key = f[0];
	a->run_id = f[1];
	a->thread_id = f[2];
	memcpy(a->cg_id, f[3] && id_ok(f[3]) ? f[3] : id, sizeof(a->cg_id) - 1);
	a->cg_id[sizeof(a->cg_id) - 1] = '\0';
	free(f[3]);
	if (r < 0)
		return r;
	if (!a->key || !*a->key)
		return -EBADMSG;
	if (a->run_id && !*a->run_id) {
		free(a->run_id);
		a->run_id = NULL;
	}
	if (a->thread_id && !*a->thread_id) {
		free(a->thread_id);
		a->thread_id = NULL;
	}
	r = sun_at(sub, "init.sock", &sa);
	if (r < 0)
		return r;
	a->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (a->sock < 0)
		return -errno;
	if (connect(a->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	if (getsockopt(a->sock, SOL_SOCKET, SO_PEERCRED, &uc, &ul) < 0)
		return -errno;
	a->pid = uc.pid;
	a->pidfd = (int)syscall(SYS_pidfd_open, uc.pid, 0);
	if (a->pidfd < 0)
		return -errno;
	if (recv_msg(a->sock, &m, fds, &nfds) < 0 || nfds != 0)
		return -EPROTO;
	r = adopt_hello_check(&m, &a->version);
	if (r < 0)
		return r;
	a->window = m.off;
	for (;;) {
		AdoptedExec x = {.mem = {-1, -1, -1}};
		char name[40], *ef[4] = {NULL, NULL, NULL, NULL};

		r = (int)recv_msg(a->sock, &m, fds, &nfds);
		if (r < 0)
			return r;
		if (m.type == INIT_MSG_ADOPT_END)
			break;
		if (m.type != INIT_MSG_ADOPT || nfds != 2) {
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
			return -EPROTO;
		}
		x.mem[1] = fds[0];
		x.mem[2] = fds[1];
		x.id = m.exec_id;
		x.pid = m.pid;
		x.exited = m.flags & INIT_ADOPT_EXITED;
		x.status = m.status;
		x.size[1] = m.off;
		x.size[2] = m.off2;
		x.eof[1] = m.flags & INIT_ADOPT_EOF1;
		x.eof[2] = m.flags & INIT_ADOPT_EOF2;
		snprintf(name, sizeof(name), "exec-%" PRIu64, x.id);
		if (memfd_check(x.mem[1]) < 0 || memfd_check(x.mem[2]) < 0 ||
		    meta_read(sub, name, ef, 4) < 0) {
			/* Released by the old shim (or not ours): the init may drop it. */
			InitMsg fm = {.type = INIT_MSG_FORGET, .exec_id = x.id};
			(void)fd_send(a->sock, &fm, sizeof(fm), NULL, 0);
			for (int k = 0; k < 4; k++)
				free(ef[k]);
			safe_close(x.mem[1]);
			safe_close(x.mem[2]);
			continue;
		}
		x.run_id = ef[0] && *ef[0] ? ef[0] : NULL;
		x.thread_id = ef[1] && *ef[1] ? ef[1] : NULL;
		if (!x.run_id)
			free(ef[0]);
		if (!x.thread_id)
			free(ef[1]);
		x.deadline_ms = ef[2] ? strtoll(ef[2], NULL, 10) : 0;
		free(ef[2]);
		x.kill_leftovers = ef[3] && streq(ef[3], "1");
		free(ef[3]);
		AdoptedExec *ne = realloc(a->execs, (a->n_execs + 1) * sizeof(*ne));
		if (!ne) {
			safe_close(x.mem[1]);
			safe_close(x.mem[2]);
			free(x.run_id);
			free(x.thread_id);
			return -ENOMEM;
		}
		a->execs = ne;
		ne[a->n_execs++] = x;
	}
	return fd_nonblock(a->sock, 1);
}

int
adopt_hello_check(const InitMsg *m, uint32_t *ret_version)
{
	uint32_t v = (uint32_t)m->status;

	if (m->type != INIT_MSG_HELLO)
		return -EPROTO;
	*ret_version = v;
	/* 0: an init from before the version field, same wire as version 1. */
	if (v > INIT_PROTO_VERSION)
		return -EPROTONOSUPPORT;
	return 0;
}

int
adopt_scan(int dfd, int (*cb)(Adopted *a, void *ud), void *ud)
{
	int dup_fd, n = 0;
	DIR *d;
	struct dirent *de;
	/* Every sandbox left (no fixed cap: a cap of 256 reaped the rest of a
	 * thousand, issue 32). */
	_cleanup_free_ char(*names)[17] = NULL;
	size_t nn = 0, n_alloc = 0;

	dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return -errno;
	d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return -errno;
	}
	while ((de = readdir(d)))
		if (id_ok(de->d_name)) {
			if (nn == n_alloc) {
				size_t k = n_alloc ? 2 * n_alloc : 256;
				char(*nw)[17] = reallocarray(names, k, sizeof(*names));
				if (!nw) {
					closedir(d);
					return -ENOMEM;
				}
				names = nw;
				n_alloc = k;
			}
			memcpy(names[nn++], de->d_name, sizeof(names[0])); /* 16 + NUL */
		}
	closedir(d);

	for (size_t i = 0; i < nn; i++) {
		Adopted a = {.sock = -1, .pidfd = -1};
		int r;

		memcpy(a.id, names[i], sizeof(a.id));
		r = adopt_one(dfd, names[i], &a);
		if (r == -EPROTONOSUPPORT)
			/* Killed below: no shim of ours will ever speak to it, and
			 * left alone its processes would run unsupervised until its
			 * orphan timeout. Its runs fail as sandbox_lost. */
			log_warning_errno(r,
					  "Sandbox %s: its init speaks wire version %" PRIu32
					  ", this containerd-shim %u; not adopted, killed: %m",
					  names[i], a.version, INIT_PROTO_VERSION);
		else if (r < 0)
			log_debug_errno(
			    r, "Sandbox %s left by a previous instance: no init to adopt: %m",
			    names[i]);
		else if (cb(&a, ud) > 0) {
			n++;
			adopted_done(&a);
			continue;
		}
		if (a.pidfd >= 0)
			(void)syscall(SYS_pidfd_send_signal, a.pidfd, SIGKILL, NULL, 0);
		adopted_done(&a);
		adopt_forget_sandbox(dfd, names[i]);
	}
	return n;
}
