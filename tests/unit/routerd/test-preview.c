/* SPDX-License-Identifier: MIT */
/*
 * test-preview.c — routerd's live previews (preview.c) in-process: a real
 * Router with preview_listen on a free loopback port, a client over TCP and
 * a stand-in for the shim's preview socket (a Unix listener of the test at
 * $runtime_dir/preview.sock). Checks the tokens (same URL for a live pair,
 * another for another port), what reaches the "shim" (the hello line; the
 * head without Authorization; the body), what comes back, and routerd's own
 * answers: 404 unknown, 421 not a preview host, 502 port_not_listening from
 * the shim's ERR line, 503 without a shim.
 */
#include "config.h"

#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "log.h"
#include "preview.h"
#include "router-fixture.h"
#include "router.h"
#include "unix-socket.h"

static struct {
	struct event_base *base;
	RouterConf conf;
	Router *r;
	char dir[64];
	int pport; /* the preview listener's */
	char shim_path[128];
	int shim_lfd; /* the stand-in shim's listener, or -1 */
} T;

static int
setup(void **state)
{
	log_open("test-preview");
	log_set_max_level(getenv("TEST_DEBUG") ? LOG_DEBUG : LOG_CRIT);
	(void)fixture_conf(&T.conf, "test-preview", T.dir);
	T.pport = fixture_free_port();
	free(T.conf.preview_listen);
	assert_true(asprintf(&T.conf.preview_listen, "127.0.0.1:%d", T.pport) > 0);
	T.base = event_base_new();
	assert_non_null(T.base);
	assert_int_equal(router_new(T.base, &T.conf, &T.r), 0);
	assert_non_null(T.r->preview);
	snprintf(T.shim_path, sizeof(T.shim_path), "%s/preview.sock", T.dir);
	T.shim_lfd = -1;
	*state = &T;
	return 0;
}

static int
teardown(void **state)
{
	if (T.shim_lfd >= 0)
		close(T.shim_lfd);
	router_free(T.r);
	event_base_free(T.base);
	fixture_conf_done(&T.conf, T.dir, "preview.sock");
	return 0;
}

/* A preview of t1's port: its URL's host ("<token>.preview.localhost:<p>"). */
static void
mint(uint16_t port, char host[static 128])
{
	char *url = NULL;
	int64_t exp = 0;

	assert_int_equal(preview_mint(T.r->preview, "t1", port, &url, &exp), 0);
	assert_true(exp > 0);
	assert_int_equal(strncmp(url, "http://", 7), 0);
	size_t n = strcspn(url + 7, "/");
	assert_true(n < 128);
	memcpy(host, url + 7, n);
	host[n] = '\0';
	free(url);
}

/* Read what fd has, turning the loop, until want is in buf (or it closed);
 * returns the length. */
static size_t
pump_until(int fd, char *buf, size_t cap, const char *want)
{
	size_t got = 0;

	buf[0] = '\0';
	for (int i = 0; i < 4000; i++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		ssize_t n = read(fd, buf + got, cap - 1 - got);
		if (n == 0)
			break;
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
			if (want && strstr(buf, want))
				break;
		}
		usleep(250);
	}
	return got;
}

/* The stand-in shim's next connection. */
static int
shim_accept(void)
{
	for (int i = 0; i < 4000; i++) {
		event_base_loop(T.base, EVLOOP_NONBLOCK);
		int fd = accept4(T.shim_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return fd;
		assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
		usleep(250);
	}
	fail_msg("routerd did not connect to the preview socket");
	return -1;
}

static void
send_all(int fd, const char *s)
{
	size_t len = strlen(s), off = 0;

	for (int i = 0; off < len && i < 4000; i++) {
		ssize_t n = write(fd, s + off, len - off);
		if (n > 0)
			off += (size_t)n;
		event_base_loop(T.base, EVLOOP_NONBLOCK);
	}
	assert_int_equal(off, len);
}

static void
test_preview_tokens(void **state)
{
	char a[128], b[128], c[128];
	char want[64];

	mint(8000, a);
	mint(8000, b);
	mint(8001, c);
	assert_string_equal(a, b); /* a live pair keeps its URL */
	assert_string_not_equal(a, c);
	snprintf(want, sizeof(want), ".preview.localhost:%d", T.pport);
	assert_int_equal(strlen(a), 48 + strlen(want));
	assert_string_equal(a + 48, want);
	for (int i = 0; i < 48; i++)
		assert_non_null(strchr("0123456789abcdef", a[i]));
}

static void
test_preview_carries_and_filters(void **state)
{
	char host[128], buf[8192], req[1024];

	T.shim_lfd = unix_listen(T.shim_path, 0600);
	assert_true(T.shim_lfd >= 0);
	mint(8000, host);
	int cli = fixture_connect(T.pport, 0);
	snprintf(req, sizeof(req),
		 "POST /x?y=1 HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer s3cret\r\n"
		 "X-A: 1\r\nproxy-authorization: Basic eDp5\r\nContent-Length: 3\r\n\r\nabc",
		 host);
	send_all(cli, req);
	int shim = shim_accept();
	/* the hello line, then the request (queued before the shim's OK) */
	pump_until(shim, buf, sizeof(buf), "abc");
	assert_int_equal(strncmp(buf, "RUNWARDEN-PREVIEW t1 8000\r\nPOST /x?y=1 HTTP/1.1\r\n", 49),
			 0);
	send_all(shim, "OK\r\n");
	assert_null(strstr(buf, "s3cret"));
	assert_null(strcasestr(buf, "authorization"));
	assert_non_null(strstr(buf, "X-A: 1\r\n"));
	snprintf(req, sizeof(req), "Host: %s\r\n", host);
	assert_non_null(strstr(buf, req));
	assert_non_null(strstr(buf, "\r\n\r\nabc"));
	send_all(shim, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
	pump_until(cli, buf, sizeof(buf), "\r\n\r\nhi");
	assert_string_equal(buf, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi");
	/* the shim's end closes the client's connection */
	close(shim);
	assert_int_equal(pump_until(cli, buf, sizeof(buf), NULL), 0);
	close(cli);
	close(T.shim_lfd);
	T.shim_lfd = -1;
	(void)unlink(T.shim_path);
}

/* One request, routerd's own answer. */
static void
answer(const char *host, const char *shim_line, const char *want_status, const char *want_code)
{
	char buf[4096], req[512];
	int cli = fixture_connect(T.pport, 0);

	snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host);
	send_all(cli, req);
	if (shim_line) {
		int shim = shim_accept();
		pump_until(shim, buf, sizeof(buf), "\r\n");
		send_all(shim, shim_line);
		close(shim);
	}
	pump_until(cli, buf, sizeof(buf), "}");
	if (strncmp(buf, want_status, strlen(want_status)) != 0 || !strstr(buf, want_code))
		fail_msg("expected %s %s, got: %.400s", want_status, want_code, buf);
	assert_null(strcasestr(buf, "Access-Control-"));
	close(cli);
}

static void
test_preview_refusals(void **state)
{
	char host[128], other[128];

	mint(9000, host);
	/* no preview socket: the shim is not there */
	answer(host, NULL, "HTTP/1.1 503 ", "\"unavailable\"");
	snprintf(other, sizeof(other), "%.48s.preview.localhost",
		 "ffffffffffffffffffffffffffffffffffffffffffffffff");
	answer(other, NULL, "HTTP/1.1 404 ", "\"preview_not_found\"");
	answer("127.0.0.1", NULL, "HTTP/1.1 421 ", "\"misdirected_request\"");
	answer("preview.localhost", NULL, "HTTP/1.1 421 ", "\"misdirected_request\"");
	T.shim_lfd = unix_listen(T.shim_path, 0600);
	assert_true(T.shim_lfd >= 0);
	answer(host, "ERR port_not_listening\r\n", "HTTP/1.1 502 ", "\"port_not_listening\"");
	answer(host, "ERR sandbox_not_running\r\n", "HTTP/1.1 503 ", "\"sandbox_not_running\"");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_preview_tokens),
	    cmocka_unit_test(test_preview_carries_and_filters),
	    cmocka_unit_test(test_preview_refusals),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
