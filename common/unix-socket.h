/* SPDX-License-Identifier: MIT */
/*
 * unix-socket.h — Unix stream socket helpers. Each returns a CLOEXEC fd or a
 * negative errno.
 */
#pragma once

#include <sys/types.h>

/* Remove a stale socket file at path, bind under the given mode (set by the
 * umask at bind(): no chmod afterwards), listen; the fd is non-blocking. */
int unix_listen(const char *path, unsigned mode);
/* A blocking connection to path. */
int unix_connect(const char *path);
