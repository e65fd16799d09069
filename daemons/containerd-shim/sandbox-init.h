/* SPDX-License-Identifier: MIT */
/*
 * sandbox-init.h — what the two halves of the sandbox init share; private to
 * sandbox-linux.c (clone, build the root, drop privileges: the set-up) and
 * sandbox-serve.c (the init's loop as PID 1: execs, their output, the shim's
 * messages, orphan mode). Both run only in the forked child, never in the
 * shim; the public contract is sandbox.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

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
