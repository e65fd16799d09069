/* SPDX-License-Identifier: MIT */
/*
 * sandbox-init.h — what the parts of the sandbox-init helper share:
 * sandbox-init-main.c (its main: the configuration), sandbox-setup.c (clone,
 * build the root, drop privileges: the set-up), sandbox-serve.c (the init's
 * loop as PID 1: execs, their output, the shim's messages, orphan mode); and
 * the configuration's wire (sandbox-conf.c), which the shim writes
 * (sandbox-linux.c). The public contract is sandbox.h.
 *
 * The helper is exec'd by the shim (sandbox_spawn_begin) as root, in the
 * sandbox's cgroup2 directory, with argv {"sandbox-init"}, an empty
 * environment and these fds: 0-2 the shim's stdio, INIT_SOCK_FD the
 * socket to the shim, INIT_LISTEN_FD the re-adoption socket (when the spec
 * has one), INIT_LISTEN_FD + 1 … the v1 cgroup.procs files; nothing else.
 * The first packet on the socket is its configuration (InitConf).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "macro.h"
#include "sandbox.h"

#define INIT_SOCK_FD 3	 /* the control connection to the shim */
#define INIT_LISTEN_FD 4 /* the re-adoption socket (adopt.h), when the spec has one */

/* Landlock constants newer than Debian 12's kernel headers (6.1). */
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif
#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)

/* The helper's configuration: the first packet on INIT_SOCK_FD, sent by the
 * shim before the helper runs. An InitConf, then the strings (each
 * NUL-terminated, str_len[i] bytes with the NUL), then the two seccomp
 * programs (struct sock_filter arrays of seccomp_len and seccomp_exec_len
 * instructions, each at an 8-byte aligned offset). */
#define INIT_CONF_MAGIC 0x31435752u /* "RWC1" */
#define INIT_CONF_MAX (256 * 1024)  /* largest configuration packet */
enum {
	INIT_CONF_ROOT_MNT,
	INIT_CONF_WORKSPACE,
	INIT_CONF_RO_BINDS,
	INIT_CONF_ETC_ENTRIES,
	INIT_CONF_SANDBOX_USER,
	INIT_CONF_IMAGE_ROOT, /* "" without an image */
	INIT_CONF_IMAGE_LOCK,
	_INIT_CONF_STR_MAX,
};

typedef struct InitConf {
	uint32_t magic;
	uint32_t size; /* of the whole packet */
	int64_t userns_inotify_instances, userns_inotify_watches, userns_namespaces;
	int64_t tmp_size, tmp_inodes;
	int64_t rlimit_nofile, rlimit_fsize, rlimit_memlock;
	int64_t orphan_ms;
	uint64_t output_window;
	uint32_t sandbox_uid, host_uid;
	uint32_t workspace_slave;
	uint32_t has_listen; /* INIT_LISTEN_FD is the re-adoption socket */
	uint32_t n_procs_fds;
	uint32_t seccomp_len, seccomp_exec_len; /* instructions */
	uint32_t str_len[_INIT_CONF_STR_MAX];
} InitConf;

struct sock_fprog;

/* Encode spec (the fds as the helper sees them: INIT_LISTEN_FD, …) into a
 * new buffer; returns its length or a negative errno (-E2BIG beyond
 * INIT_CONF_MAX, -EINVAL without both seccomp programs). */
ssize_t init_conf_encode(const SandboxSpec *spec, void **ret);
/* Decode buf (len bytes, kept: the spec's strings and programs point into
 * it): spec->seccomp and seccomp_exec point to progs[0] and progs[1] (two
 * entries), the fds
 * are the helper's (listen_fd INIT_LISTEN_FD or -1, cgroup_fd -1: the helper
 * was born in it). -EBADMSG when it is not a whole, well-formed
 * configuration. */
int init_conf_decode(void *buf, size_t len, SandboxSpec *spec, struct sock_fprog *progs);

/* Give back the configuration's memory (sandbox-init-main.c): the spec's
 * strings and programs are gone after it. */
void init_conf_release(void);

/* seccomp(SECCOMP_SET_MODE_FILTER) of prog on the caller (and its threads). */
int init_filter_load(const struct sock_fprog *prog);

/* The spawner's part of the helper (sandbox-setup.c): never returns. */
_noreturn_ void spawner_main(const SandboxSpec *spec);

/* The child's copy of the spec (set once in init_main; the init never returns). */
extern const SandboxSpec *init_spec;
/* A pooled sandbox: Landlock is applied at the first exec (init_on_msg). */
extern bool landlock_pending;

/* Send m (+ payload, truncated to what fits) to the shim on sock; blocking,
 * errors ignored (a gone shim is orphan mode's business). */
void init_send(int sock, const InitMsg *m, const char *payload, size_t len);

/* Restrict the init (and so every exec) with the sandbox's Landlock layer;
 * _exit()s on failure (fail closed). Returns the ABI applied, 0 without
 * Landlock. */
int init_landlock(void);

/* Report a setup failure as "what: strerror(err)" to the shim and exit
 * (sandbox-linux.c; in the spawner, kept for the init to report). */
_noreturn_ _printf_(2, 3) void init_fail(int err, const char *fmt, ...);

/* A sandbox on an image (sandbox-image.c): the spawner's capture of the
 * image's root (and the store's lock, shared), then the init's attach of it
 * with the generated /etc files, entering it (cwd: the root tmpfs). */
void sandbox_image_capture(const SandboxSpec *spec, int *ret_tree, int *ret_lock);
void sandbox_image_enter(int tree, int lock);

/* The init's loop as PID 1 (sandbox-serve.c): never returns. */
_noreturn_ void init_serve(int sock, int listen_fd);
