/* SPDX-License-Identifier: MIT */
/*
 * test-peer-server.c — common/proto/peer-server.c on a real socket in a
 * temporary directory: the socket's mode, a connection from our own uid
 * accepted and served as a Peer, the check on SO_PEERCRED, and the socket
 * file removed (or kept for a successor) at the end.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "peer-server.h"
#include "sock-fixture.h"
#include "unix-socket.h"

typedef struct Owner {
	int accepted, events, closed;
	bool ready; /* a client: the server's HELLO came */
	Peer *conns[4];
} Owner;

static struct event_base *base;
static char dir[64], path[96];

static void
on_ready(Peer *p, void *ud)
{
}

static void
on_close(Peer *p, int err, void *ud)
{
	Owner *o = ud;
	o->closed++;
	peer_free(p);
}

static const PeerHandler no_handlers[_MSG_TYPE_MAX] = {0};
static const PeerOps server_ops = {ROLE_COORD, no_handlers, on_ready, on_close};

static void
client_ready(Peer *p, void *ud)
{
	((Owner *)ud)->ready = true;
}

static const PeerOps client_ops = {ROLE_ROUTER, no_handlers, client_ready, NULL};

static void *
accepted(Peer *p, void *ud)
{
	Owner *o = ud;
	o->conns[o->accepted++ % 4] = p;
	return o; /* the owner's object for the connection */
}

static void
event(PeerServerEvent what, int err, uid_t uid, void *ud)
{
	((Owner *)ud)->events++;
}

static void
spin(void)
{
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	usleep(500);
}

static int
setup(void **state)
{
	return sock_fixture_setup("test-peer-server", dir, path, &base);
}

static int
teardown(void **state)
{
	return sock_fixture_teardown(dir, path, base);
}

static void
test_peer_server_accepts_our_uid(void **state)
{
	Owner o = {0}, client = {0};
	PeerServer *srv = NULL;
	struct stat st;
	Peer *cp = NULL;

	/* a stale file where the socket goes is replaced */
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(peer_server_new(base,
					 &(PeerServerConf){.path = path,
							   .mode = 0600,
							   .gid = -1,
							   .ops = &server_ops,
							   .max_frame = 1 << 20,
							   .accepted = accepted,
							   .event = event,
							   .userdata = &o},
					 &srv),
			 0);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);

	int fd = unix_connect(path);
	assert_true(fd >= 0);
	assert_int_equal(peer_new(base, fd, &client_ops, &client, 1 << 20, &cp), 0);
	for (int i = 0; i < 2000 && (o.accepted < 1 || !client.ready); i++)
		spin();
	assert_int_equal(o.accepted, 1);
	assert_int_equal(o.events, 0);
	assert_true(client.ready); /* the server's Peer said HELLO */
	assert_ptr_equal(peer_get_userdata(o.conns[0]), &o);

	/* the owner's connection outlives the listener; a successor may bind */
	srv = peer_server_free(srv, false);
	assert_int_equal(stat(path, &st), 0);
	peer_free(cp);
	for (int i = 0; i < 2000 && o.closed < 1; i++)
		spin();
	assert_int_equal(o.closed, 1);
}

static void
test_peer_server_mode_group_and_unlink(void **state)
{
	Owner o = {0};
	PeerServer *srv = NULL;
	struct stat st;

	/* our own group: what socket_group gives (0660, that group) */
	assert_int_equal(peer_server_new(base,
					 &(PeerServerConf){.path = path,
							   .mode = 0660,
							   .gid = (int64_t)getegid(),
							   .ops = &server_ops,
							   .max_frame = 1 << 20,
							   .accepted = accepted,
							   .userdata = &o},
					 &srv),
			 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(st.st_gid, getegid());
	srv = peer_server_free(srv, true);
	assert_int_equal(stat(path, &st), -1);
	assert_int_equal(errno, ENOENT);
	/* too long a path */
	char longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(peer_server_new(base,
					 &(PeerServerConf){.path = longp,
							   .mode = 0600,
							   .gid = -1,
							   .ops = &server_ops,
							   .accepted = accepted,
							   .userdata = &o},
					 &srv),
			 -ENAMETOOLONG);
}

static void
test_peer_server_allowed_on_peercred(void **state)
{
	int sv[2];
	uid_t uid = (uid_t)-1;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	/* our own uid is always allowed, group or not */
	assert_int_equal(peer_server_allowed(sv[0], -1, &uid), 1);
	assert_int_equal(uid, geteuid());
	assert_int_equal(peer_server_allowed(sv[0], 12345, &uid), 1);
	close(sv[0]);
	close(sv[1]);
	/* not a socket: the errno */
	assert_int_equal(pipe(sv), 0);
	assert_int_equal(peer_server_allowed(sv[0], -1, &uid), -ENOTSOCK);
	close(sv[0]);
	close(sv[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_peer_server_accepts_our_uid, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_peer_server_mode_group_and_unlink, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_server_allowed_on_peercred, setup, teardown),
	};
	return cmocka_run_group_tests_name("peer-server", tests, NULL, NULL);
}
