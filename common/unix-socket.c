/* SPDX-License-Identifier: MIT */
/*
 * unix-socket.c — Unix stream socket helpers (unix-socket.h): no event loop
 * and no log, so that a blocking client (tools/shimctl) links them alone.
 */
#include "config.h"

#include "unix-socket.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"

static int
sockaddr_un_set(struct sockaddr_un *sa, const char *path)
{
	size_t len = strlen(path);
	if (len == 0 || len >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, len);
	return 0;
}

int
unix_listen(const char *path, unsigned mode)
{
	struct sockaddr_un sa;
	int r = sockaddr_un_set(&sa, path);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	(void)unlink(path);
	/* bind under a tight umask so the socket never exists with looser bits */
	mode_t old = umask(0777 & ~mode);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0)
		return -errno;
	/* the mode came from the umask at bind(): no chmod(path) afterwards,
	 * which would follow a symlink someone swapped in meanwhile */
	if (listen(fd, SOMAXCONN) < 0)
		return -errno;
	return TAKE_FD(fd);
}

int
unix_connect(const char *path)
{
	struct sockaddr_un sa;
	int r = sockaddr_un_set(&sa, path);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return TAKE_FD(fd);
}
