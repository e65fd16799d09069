/* SPDX-License-Identifier: MIT */
/*
 * test-peer-link.c — common/proto/peer-link.c against a real socket: a
 * daemon not there yet (connect fails, retried with the backoff), then there
 * (HELLO, ready); a link lost and made again; a socket that accepts but never
 * says HELLO (dropped at the deadline, retried).
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
#include <unistd.h>

#include <cmocka.h>

#include "peer-link.h"
#include "peer-server.h"
#include "sock-fixture.h"
#include "unix-socket.h"

typedef struct Client {
	PeerLink *link;
	int ready, closed;
	int events[3];
} Client;

typedef struct Server {
	int accepted, closed;
	Peer *last;
} Server;

static struct event_base *base;
static char dir[64], path[96];

static const PeerHandler no_handlers[_MSG_TYPE_MAX] = {0};

static void
client_on_ready(Peer *p, void *ud)
{
	Client *c = ud;
	c->ready++;
	peer_link_ready(c->link);
}

static void
client_on_close(Peer *p, int err, void *ud)
{
	Client *c = ud;
	c->closed++;
	peer_link_lost(c->link, true);
}

static const PeerOps client_ops = {ROLE_ROUTER, no_handlers, client_on_ready, client_on_close};

static void
client_event(PeerLinkEvent what, int err, void *ud)
{
	((Client *)ud)->events[what]++;
}

static void
server_on_close(Peer *p, int err, void *ud)
{
	((Server *)ud)->closed++;
	peer_free(p);
}

static const PeerOps server_ops = {ROLE_COORD, no_handlers, NULL, server_on_close};

static void *
server_accepted(Peer *p, void *ud)
{
	Server *s = ud;
	s->accepted++;
	s->last = p;
	return s;
}

static void
spin_until(int *v, int want)
{
	for (int i = 0; i < 4000 && *v < want; i++)
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK), usleep(500);
}

static int
setup(void **state)
{
	return sock_fixture_setup("test-peer-link", dir, path, &base);
}

static int
teardown(void **state)
{
	return sock_fixture_teardown(dir, path, base);
}

static PeerLinkConf
conf_for(Client *c)
{
	return (PeerLinkConf){.path = path,
			      .ops = &client_ops,
			      .max_frame = 1 << 20,
			      .hello_timeout = 50 * USEC_PER_MSEC,
			      .backoff_min = 5 * USEC_PER_MSEC,
			      .backoff_max = 20 * USEC_PER_MSEC,
			      .event = client_event,
			      .userdata = c};
}

static void
test_peer_link_retries_until_the_daemon_is_there(void **state)
{
	Client c = {0};
	Server s = {0};
	PeerServer *srv = NULL;
	PeerLinkConf conf = conf_for(&c);

	assert_int_equal(peer_link_new(base, &conf, &c.link), 0);
	/* nobody listens yet: connect fails, and is retried */
	assert_int_equal(c.events[PEER_LINK_CONNECT_FAILED], 1);
	assert_null(peer_link_peer(c.link));
	spin_until(&c.events[PEER_LINK_CONNECT_FAILED], 3);
	assert_true(c.events[PEER_LINK_CONNECT_FAILED] >= 3);

	assert_int_equal(peer_server_new(base,
					 &(PeerServerConf){.path = path,
							   .mode = 0600,
							   .gid = -1,
							   .ops = &server_ops,
							   .max_frame = 1 << 20,
							   .accepted = server_accepted,
							   .userdata = &s},
					 &srv),
			 0);
	spin_until(&c.ready, 1);
	assert_int_equal(c.ready, 1);
	assert_int_equal(s.accepted, 1);
	assert_true(peer_is_ready(peer_link_peer(c.link)));

	/* the daemon drops the link: lost, then made again */
	peer_free(s.last);
	spin_until(&c.ready, 2);
	assert_int_equal(c.closed, 1);
	assert_int_equal(c.ready, 2);
	assert_int_equal(s.accepted, 2);
	assert_int_equal(c.events[PEER_LINK_NO_HELLO], 0);

	c.link = peer_link_free(c.link); /* no on_close, no retry */
	assert_int_equal(c.closed, 1);
	spin_until(&s.closed, 1); /* the server saw it go */
	assert_int_equal(s.closed, 1);
	assert_int_equal(s.accepted, 2);
	peer_server_free(srv, true);
}

static void
test_peer_link_drops_a_socket_that_says_no_hello(void **state)
{
	Client c = {0};
	PeerLinkConf conf = conf_for(&c);
	int lfd = unix_listen(path, 0600); /* accepts (backlog) but never speaks */

	assert_true(lfd >= 0);
	assert_int_equal(peer_link_new(base, &conf, &c.link), 0);
	assert_non_null(peer_link_peer(c.link));
	spin_until(&c.events[PEER_LINK_NO_HELLO], 2);
	assert_true(c.events[PEER_LINK_NO_HELLO] >= 2); /* dropped, retried, dropped */
	assert_int_equal(c.ready, 0);
	assert_int_equal(c.closed, 0); /* dropped by the link: no on_close */
	c.link = peer_link_free(c.link);
	close(lfd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_peer_link_retries_until_the_daemon_is_there, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_peer_link_drops_a_socket_that_says_no_hello, setup,
					    teardown),
	};
	return cmocka_run_group_tests_name("peer-link", tests, NULL, NULL);
}
