/* SPDX-License-Identifier: MIT */
/*
 * sock-fixture.h — the set-up the Unix-socket tests of common/proto share
 * (test-peer-link, test-peer-server): a private directory with the socket's
 * path in it, and an event loop, made before each test and removed after.
 *
 * Header only (static inline functions); cmocka's setup/teardown call them.
 */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>

/* dir = a new /tmp/rw-NAME-XXXXXX, path = dir/s.sock (not created), *base = a
 * new event base. 0, or -1 for cmocka's setup. */
static inline int
sock_fixture_setup(const char *name, char dir[static 64], char path[static 96],
		   struct event_base **base)
{
	snprintf(dir, 64, "/tmp/rw-%s-XXXXXX", name);
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, 96, "%s/s.sock", dir);
	*base = event_base_new();
	return *base ? 0 : -1;
}

/* Remove what the test left at path, dir, and free base. */
static inline int
sock_fixture_teardown(const char *dir, const char *path, struct event_base *base)
{
	(void)unlink(path);
	(void)rmdir(dir);
	event_base_free(base);
	return 0;
}
