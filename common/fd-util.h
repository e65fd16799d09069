/* SPDX-License-Identifier: MIT */
/*
 * fd-util.h — file descriptor helpers. -1 means "no fd".
 */
#pragma once

#include <dirent.h>
#include <stdio.h>

#include <stddef.h>
#include "macro.h"

/* Close fd if >= 0, preserving errno. Always returns -1, so `fd = safe_close(fd);`. */
int safe_close(int fd);

static inline void
closep(int *fd)
{
	safe_close(*fd);
}
#define _cleanup_close_ _cleanup_(closep)

static inline void
fclosep(FILE **f)
{
	if (*f)
		(void)fclose(*f);
}
#define _cleanup_fclose_ _cleanup_(fclosep)

/* fdopendir(fd) into *ret; fd belongs to the DIR then (closedir() closes it),
 * and is closed when that fails. A negative fd is the failure of the call that
 * gave it: its errno is returned. Returns 0 or a negative errno. */
int fd_opendir(int fd, DIR **ret);

/* Set or clear O_NONBLOCK. Returns 0 or a negative errno. */
int fd_nonblock(int fd, int nonblock);

/* Send/receive up to `n` fds plus `len` bytes over a Unix socket (SCM_RIGHTS).
 * fd_recv stores received fds (CLOEXEC) in fds[], count in *ret_nfds.
 * Both return the byte count or a negative errno. The only place fds are passed. */
ssize_t fd_send(int sock, const void *buf, size_t len, const int *fds, size_t nfds);
ssize_t fd_recv(int sock, void *buf, size_t len, int *fds, size_t max_fds, size_t *ret_nfds);

/* Write all of buf, retrying on EINTR/short writes (blocking fds only). */
int loop_write(int fd, const void *buf, size_t len);

/* mkdir -p with mode; 0 or negative errno. */
int mkdir_p(const char *path, unsigned mode);
