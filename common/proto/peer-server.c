/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "peer-server.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fd-util.h"
#include "macro.h"

struct PeerServer {
	struct event_base *base;
	PeerServerConf conf;
	int fd;
	struct event *ev;
};

/* The mode and the group are given at creation (fsgid and umask): the
 * runtime directory may belong to another user (the shared /run/runwarden),
 * so nothing follows the path after bind(). */
int
peer_server_listen(const char *path, unsigned mode, int64_t gid)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	gid_t old_fsgid = 0;
	mode_t old_umask;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	if (gid >= 0) {
		old_fsgid = (gid_t)setfsgid((gid_t)gid);
		if ((gid_t)setfsgid((gid_t)gid) != (gid_t)gid) {
			(void)setfsgid(old_fsgid);
			return -EPERM;
		}
	}
	old_umask = umask(0777 & ~mode);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old_umask);
	if (gid >= 0)
		(void)setfsgid(old_fsgid);
	if (r < 0)
		return r;
	if (listen(fd, SOMAXCONN) < 0)
		return -errno;
	return TAKE_FD(fd);
}

int
peer_server_allowed(int fd, int64_t gid, uid_t *ret_uid)
{
	struct ucred uc;
	socklen_t l = sizeof(uc);
	gid_t small[64];
	_cleanup_free_ gid_t *big = NULL;
	gid_t *groups = small;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &l) < 0)
		return -errno;
	*ret_uid = uc.uid;
	if (uc.uid == 0 || uc.uid == geteuid())
		return 1;
	if (gid < 0)
		return 0;
	if (uc.gid == (gid_t)gid)
		return 1;
	l = sizeof(small);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, small, &l) < 0) {
		if (errno != ERANGE || l == 0 || l > 65536 * sizeof(gid_t))
			return -errno;
		big = malloc(l);
		if (!big)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, big, &l) < 0)
			return -errno;
		groups = big;
	}
	for (size_t i = 0; i < l / sizeof(gid_t); i++)
		if (groups[i] == (gid_t)gid)
			return 1;
	return 0;
}

static void
server_event(PeerServer *srv, PeerServerEvent what, int err, uid_t uid)
{
	if (srv->conf.event)
		srv->conf.event(what, err, uid, srv->conf.userdata);
}

static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	PeerServer *srv = arg;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		uid_t uid = (uid_t)-1;
		Peer *p;
		void *obj;
		int r;

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				server_event(srv, PEER_SERVER_ACCEPT_FAILED, -errno, uid);
			return;
		}
		r = peer_server_allowed(fd, srv->conf.gid, &uid);
		if (r <= 0) {
			server_event(srv, PEER_SERVER_REFUSED, r, uid);
			close(fd);
			continue;
		}
		r = peer_new(srv->base, fd, srv->conf.ops, NULL, srv->conf.max_frame, &p);
		if (r < 0) {
			server_event(srv, PEER_SERVER_SETUP_FAILED, r, uid);
			continue;
		}
		obj = srv->conf.accepted(p, srv->conf.userdata);
		if (!obj) {
			peer_free(p);
			continue;
		}
		peer_set_userdata(p, obj);
	}
}

int
peer_server_new(struct event_base *base, const PeerServerConf *conf, PeerServer **ret)
{
	PeerServer *srv = calloc(1, sizeof(*srv));

	if (!srv)
		return -ENOMEM;
	srv->base = base;
	srv->conf = *conf;
	srv->fd = peer_server_listen(conf->path, conf->mode, conf->gid);
	if (srv->fd < 0) {
		int r = srv->fd;
		free(srv);
		return r;
	}
	srv->ev = event_new(base, srv->fd, EV_READ | EV_PERSIST, accept_cb, srv);
	if (!srv->ev || event_add(srv->ev, NULL) < 0) {
		peer_server_free(srv, true);
		return -ENOMEM;
	}
	*ret = srv;
	return 0;
}

PeerServer *
peer_server_free(PeerServer *srv, bool unlink_path)
{
	if (!srv)
		return NULL;
	if (srv->ev)
		event_free(srv->ev);
	safe_close(srv->fd);
	if (unlink_path)
		(void)unlink(srv->conf.path);
	free(srv);
	return NULL;
}
