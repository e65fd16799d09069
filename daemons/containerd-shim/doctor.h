/* SPDX-License-Identifier: MIT */
/*
 * doctor.h — `containerd-shim --doctor`: check that this host can give every
 * sandbox the default profile (SANDBOX.md §6 item 40), in the spirit of
 * `systemd-analyze security`.
 *
 * One line per check on stdout, "ok  ", "FAIL" or "info" then the check and
 * what was found:
 *   user namespaces   a real probe: a child unshares user, mount, pid, net,
 *                     ipc, uts and cgroup namespaces; also reports
 *                     max_user_namespaces and Ubuntu's AppArmor restriction
 *   cgroup            v2 or hybrid v1, delegation (the controllers memory, pids,
 *                     cpu available where sandboxes go), cgroup.kill or freezer
 *   seccomp           the filter compiles and, loaded in a child, denies a
 *                     denied syscall (EPERM) and allows an allowed one
 *   mount API, clone3, pidfd, openat2   the kernel interfaces the sandbox uses
 *   Landlock          the ABI version (information: not applied yet)
 *   project quotas    whether the filesystem of sandbox_dir enforces project
 *                     quotas (quota.h); FAIL only when workspace_quota or
 *                     workspace_inodes is set, else information
 * then "default profile: OK" or "default profile: CANNOT be met (N failures)".
 * Changes nothing on the host except creating and removing the shim's cgroup
 * instance directory (and never moves the calling process).
 */
#pragma once

#include "shim-conf.h"

/* Run every check. Returns 0 when the default profile can be met, else 1. */
int shim_doctor(const ShimConf *conf);
