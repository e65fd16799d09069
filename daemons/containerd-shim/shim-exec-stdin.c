/* SPDX-License-Identifier: MIT */
/*
 * shim-exec-stdin.c — an exec's stdin (the execs' layer, with shim-exec.c):
 * the EXEC_START's bytes, and with stdin_open more from EXEC_STDIN until its
 * eof, written to the pipe as it takes them (never blocking the loop).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "shim-int.h"

static void
exec_stdin_cb(evutil_socket_t fd, short what, void *arg)
{
	Exec *e = arg;
	bool broken = false;

	while (e->stdin_off < e->stdin_len) {
		ssize_t n = write(e->fds[STREAM_STDIN], e->stdin_data + e->stdin_off,
				  e->stdin_len - e->stdin_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return; /* wait for room */
		if (n < 0) {
			broken = true; /* EPIPE: the process closed stdin, fine */
			break;
		}
		e->stdin_off += (size_t)n;
	}
	free(e->stdin_data);
	e->stdin_data = NULL;
	e->stdin_len = e->stdin_off = 0;
	if (e->stdin_open && !broken) {
		event_del(e->ev[STREAM_STDIN]); /* all written: wait for EXEC_STDIN */
		return;
	}
	e->stdin_open = false;
	exec_close_stream(e, STREAM_STDIN);
}

/* Feed the EXEC_START's stdin bytes to the exec (exec_stdin_cb), or close
 * its stdin right away when there are none. */
int
exec_stdin_start(Exec *e, const void *in, size_t in_len, bool stdin_open)
{
	e->stdin_open = stdin_open;
	if (in_len == 0 && !stdin_open) {
		exec_close_stream(e, STREAM_STDIN); /* EOF right away */
		return 0;
	}
	e->ev[STREAM_STDIN] =
	    event_new(e->shim->base, e->fds[STREAM_STDIN], EV_WRITE | EV_PERSIST, exec_stdin_cb, e);
	if (!e->ev[STREAM_STDIN])
		return -ENOMEM;
	if (in_len == 0)
		return 0; /* open: EXEC_STDIN brings it */
	e->stdin_data = malloc(in_len);
	if (!e->stdin_data)
		return -ENOMEM;
	memcpy(e->stdin_data, in, in_len);
	e->stdin_len = in_len;
	event_add(e->ev[STREAM_STDIN], NULL);
	return 0;
}

/* More stdin for an exec started with stdin_open: queued and written as the
 * pipe takes it; eof closes the pipe once the queue is written. At most
 * EXEC_STDIN_QUEUE_MAX bytes wait: more is refused -ENOBUFS (the sender
 * retries after a while, or gives up). */
#define EXEC_STDIN_QUEUE_MAX (4u << 20)
int
handle_exec_stdin(Peer *p, const Frame *f, const Msg_EXEC_STDIN *m, void *userdata)
{
	Conn *c = userdata;
	Exec *e = exec_find(c->shim, m->exec_id);
	size_t n = m->has_data ? m->data_len : 0;

	if (!e)
		return -ENOENT;
	if (!e->stdin_open || e->fds[STREAM_STDIN] < 0 || !e->ev[STREAM_STDIN]) {
		(void)peer_reply_error(p, f->req_id, -EPIPE, "the exec's stdin is closed");
		return 0;
	}
	if (n > 0) {
		size_t left = e->stdin_len - e->stdin_off;
		if (left + n > EXEC_STDIN_QUEUE_MAX) {
			(void)peer_reply_error(p, f->req_id, -ENOBUFS, "stdin queue full");
			return 0;
		}
		char *buf = malloc(left + n);
		if (!buf)
			return -ENOMEM;
		if (left)
			memcpy(buf, e->stdin_data + e->stdin_off, left);
		memcpy(buf + left, m->data, n);
		free(e->stdin_data);
		e->stdin_data = buf;
		e->stdin_len = left + n;
		e->stdin_off = 0;
	}
	if (m->has_eof && m->eof)
		e->stdin_open = false;
	if (e->stdin_off < e->stdin_len || !e->stdin_open)
		event_add(e->ev[STREAM_STDIN], NULL); /* writes, or closes at eof */
	reply_empty(c, f->req_id);
	return 0;
}
