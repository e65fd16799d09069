/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "shim-conf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macro.h"

#define S "containerd-shim"

const ConfItem shim_conf_items[] = {
    CONF_SHARED_ITEMS(ShimConf, shared),
    {S, "sandbox_dir", CONF_STR, offsetof(ShimConf, sandbox_dir), "", 0, 0,
     "per-sandbox state (workspaces); empty means <state_dir>/sandboxes"},
    {S, "ro_binds", CONF_STR, offsetof(ShimConf, ro_binds), "/usr /bin /sbin /lib /lib64 /etc", 0,
     0, "host paths bound read-only into each sandbox root (symlinks are recreated)"},
    {S, "tmp_size", CONF_SIZE, offsetof(ShimConf, tmp_size), "64M", 1024 * 1024,
     64LL * 1024 * 1024 * 1024, "size cap of the sandbox /tmp and /dev/shm tmpfs"},
    {S, "sandbox_uid", CONF_INT, offsetof(ShimConf, sandbox_uid), "1000", 1, 65534,
     "uid and gid the sandboxed processes run as, inside the sandbox"},
    {S, "host_uid", CONF_INT, offsetof(ShimConf, host_uid), "100000", 1, 4294967294LL,
     "unprivileged host uid and gid that sandbox_uid is mapped to (never 0)"},
    {S, "exec_drain_timeout_ms", CONF_INT, offsetof(ShimConf, drain_timeout), "1000", 0,
     3600 * 1000,
     "after an exec exits, how long to wait for EOF on its output pipes "
     "(background children may hold them)"},
    {S, "max_pending_output", CONF_SIZE, offsetof(ShimConf, max_pending), "8M", 64 * 1024,
     1024LL * 1024 * 1024, "exec output queued to a peer beyond which reading pauses"},
};
const size_t shim_conf_n_items = ELEMENTSOF(shim_conf_items);

int
shim_conf_finish(ShimConf *c)
{
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
	return 0;
}

void
shim_conf_done(ShimConf *c)
{
	conf_free_strings(shim_conf_items, shim_conf_n_items, c);
}
