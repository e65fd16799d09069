/* SPDX-License-Identifier: MIT */
/*
 * sandbox-conf.c — the sandbox-init helper's configuration on the wire
 * (sandbox-init.h, InitConf): encoded by the shim (sandbox-linux.c), decoded
 * by the helper (sandbox-init-main.c). Linked into both.
 */
#include "config.h"

#include <errno.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "sandbox-init.h"

#define ALIGN8(x) (((x) + 7) & ~(size_t)7)

static const char *
conf_str(const SandboxSpec *spec, int i)
{
	const char *s = NULL;

	switch (i) {
	case INIT_CONF_ROOT_MNT: s = spec->root_mnt; break;
	case INIT_CONF_WORKSPACE: s = spec->workspace; break;
	case INIT_CONF_RO_BINDS: s = spec->ro_binds; break;
	case INIT_CONF_ETC_ENTRIES: s = spec->etc_entries; break;
	case INIT_CONF_SANDBOX_USER: s = spec->sandbox_user; break;
	case INIT_CONF_IMAGE_ROOT: s = spec->image_root; break;
	case INIT_CONF_IMAGE_LOCK: s = spec->image_lock; break;
	default: break;
	}
	return s ? s : "";
}

ssize_t
init_conf_encode(const SandboxSpec *spec, void **ret)
{
	InitConf c = {
	    .magic = INIT_CONF_MAGIC,
	    .userns_inotify_instances = spec->userns_inotify_instances,
	    .userns_inotify_watches = spec->userns_inotify_watches,
	    .userns_namespaces = spec->userns_namespaces,
	    .tmp_size = spec->tmp_size,
	    .tmp_inodes = spec->tmp_inodes,
	    .rlimit_nofile = spec->rlimit_nofile,
	    .rlimit_fsize = spec->rlimit_fsize,
	    .rlimit_memlock = spec->rlimit_memlock,
	    .orphan_ms = spec->orphan_ms,
	    .output_window = spec->output_window,
	    .sandbox_uid = (uint32_t)spec->sandbox_uid,
	    .host_uid = (uint32_t)spec->host_uid,
	    .workspace_slave = spec->workspace_slave,
	    .has_listen = spec->listen_fd >= 0,
	    .n_procs_fds = (uint32_t)spec->n_procs_fds,
	};
	size_t off = sizeof(c), p0, p1;
	char *buf;

	if (!spec->seccomp || !spec->seccomp_exec || !spec->seccomp->len ||
	    !spec->seccomp_exec->len)
		return -EINVAL;
	for (int i = 0; i < _INIT_CONF_STR_MAX; i++) {
		size_t l = strlen(conf_str(spec, i)) + 1;
		if (l > INIT_CONF_MAX)
			return -E2BIG;
		c.str_len[i] = (uint32_t)l;
		off += l;
	}
	c.seccomp_len = spec->seccomp->len;
	c.seccomp_exec_len = spec->seccomp_exec->len;
	p0 = ALIGN8(off);
	p1 = ALIGN8(p0 + (size_t)c.seccomp_len * sizeof(struct sock_filter));
	off = p1 + (size_t)c.seccomp_exec_len * sizeof(struct sock_filter);
	if (off > INIT_CONF_MAX)
		return -E2BIG;
	c.size = (uint32_t)off;
	buf = calloc(1, off);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, &c, sizeof(c));
	off = sizeof(c);
	for (int i = 0; i < _INIT_CONF_STR_MAX; i++) {
		memcpy(buf + off, conf_str(spec, i), c.str_len[i]);
		off += c.str_len[i];
	}
	memcpy(buf + p0, spec->seccomp->filter, (size_t)c.seccomp_len * sizeof(struct sock_filter));
	memcpy(buf + p1, spec->seccomp_exec->filter,
	       (size_t)c.seccomp_exec_len * sizeof(struct sock_filter));
	*ret = buf;
	return (ssize_t)c.size;
}

int
init_conf_decode(void *buf, size_t len, SandboxSpec *spec, struct sock_fprog *progs)
{
	const char *strs[_INIT_CONF_STR_MAX];
	char *b = buf;
	InitConf c;
	size_t off = sizeof(c), p0, p1;

	if (len < sizeof(c))
		return -EBADMSG;
	memcpy(&c, b, sizeof(c));
	if (c.magic != INIT_CONF_MAGIC || c.size != len || len > INIT_CONF_MAX ||
	    c.seccomp_len == 0 || c.seccomp_exec_len == 0 || c.seccomp_len > BPF_MAXINSNS ||
	    c.seccomp_exec_len > BPF_MAXINSNS || c.n_procs_fds > 64 || c.host_uid == 0)
		return -EBADMSG;
	for (int i = 0; i < _INIT_CONF_STR_MAX; i++) {
		if (c.str_len[i] == 0 || c.str_len[i] > len - off || b[off + c.str_len[i] - 1] ||
		    memchr(b + off, '\0', c.str_len[i]) != b + off + c.str_len[i] - 1)
			return -EBADMSG;
		strs[i] = b + off;
		off += c.str_len[i];
	}
	p0 = ALIGN8(off);
	p1 = ALIGN8(p0 + (size_t)c.seccomp_len * sizeof(struct sock_filter));
	if (p1 + (size_t)c.seccomp_exec_len * sizeof(struct sock_filter) != len)
		return -EBADMSG;
	progs[0] = (struct sock_fprog){.len = (unsigned short)c.seccomp_len,
				       .filter = (struct sock_filter *)(void *)(b + p0)};
	progs[1] = (struct sock_fprog){.len = (unsigned short)c.seccomp_exec_len,
				       .filter = (struct sock_filter *)(void *)(b + p1)};
	*spec = (SandboxSpec){
	    .root_mnt = strs[INIT_CONF_ROOT_MNT],
	    .workspace = strs[INIT_CONF_WORKSPACE],
	    .workspace_slave = c.workspace_slave != 0,
	    .ro_binds = strs[INIT_CONF_RO_BINDS],
	    .etc_entries = strs[INIT_CONF_ETC_ENTRIES],
	    .sandbox_user = strs[INIT_CONF_SANDBOX_USER][0] ? strs[INIT_CONF_SANDBOX_USER] : NULL,
	    .image_root = strs[INIT_CONF_IMAGE_ROOT][0] ? strs[INIT_CONF_IMAGE_ROOT] : NULL,
	    .image_lock = strs[INIT_CONF_IMAGE_LOCK][0] ? strs[INIT_CONF_IMAGE_LOCK] : NULL,
	    .userns_inotify_instances = c.userns_inotify_instances,
	    .userns_inotify_watches = c.userns_inotify_watches,
	    .userns_namespaces = c.userns_namespaces,
	    .tmp_size = c.tmp_size,
	    .tmp_inodes = c.tmp_inodes,
	    .sandbox_uid = (uid_t)c.sandbox_uid,
	    .host_uid = (uid_t)c.host_uid,
	    .seccomp = &progs[0],
	    .seccomp_exec = &progs[1],
	    .rlimit_nofile = c.rlimit_nofile,
	    .rlimit_fsize = c.rlimit_fsize,
	    .rlimit_memlock = c.rlimit_memlock,
	    .cgroup_fd = -1,
	    .n_procs_fds = c.n_procs_fds,
	    .listen_fd = c.has_listen ? INIT_LISTEN_FD : -1,
	    .orphan_ms = c.orphan_ms,
	    .output_window = c.output_window,
	};
	return 0;
}
