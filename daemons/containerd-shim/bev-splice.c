/* SPDX-License-Identifier: MIT */
/*
 * bev-splice.c — two bufferevents spliced both ways (bev-splice.h).
 */
#include "config.h"

#include "bev-splice.h"

#include <stdlib.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

static void
close_when_flushed_cb(struct bufferevent *bev, void *arg)
{
	BevSplice *s = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		s->close(s);
}

static void
close_event_cb(struct bufferevent *bev, short what, void *arg)
{
	BevSplice *s = arg;

	s->close(s);
}

void
bev_splice_finish(BevSplice *s, struct bufferevent *other)
{
	s->open = false;
	if (!other || evbuffer_get_length(bufferevent_get_output(other)) == 0) {
		s->close(s);
		return;
	}
	if (other == s->down && s->up) {
		bufferevent_free(s->up);
		s->up = NULL;
	} else if (other == s->up && s->down) {
		bufferevent_free(s->down);
		s->down = NULL;
	}
	bufferevent_disable(other, EV_READ);
	bufferevent_setwatermark(other, EV_WRITE, 0, 0);
	bufferevent_setcb(other, NULL, close_when_flushed_cb, close_event_cb, s);
	bufferevent_enable(other, EV_WRITE);
}

static void
splice_read_cb(struct bufferevent *bev, void *arg)
{
	BevSplice *s = arg;
	struct bufferevent *other = bev == s->down ? s->up : s->down;
	struct evbuffer *in = bufferevent_get_input(bev), *out;
	size_t len = evbuffer_get_length(in);

	if (!other || !s->open) {
		evbuffer_drain(in, len);
		return;
	}
	if (s->count)
		s->count(s, bev, len);
	out = bufferevent_get_output(other);
	evbuffer_add_buffer(out, in);
	if (evbuffer_get_length(out) >= s->high_water) {
		/* Backpressure: stop reading here until the other side drained. */
		bufferevent_disable(bev, EV_READ);
		bufferevent_setwatermark(other, EV_WRITE, s->high_water / 2, 0);
	}
}

static void
splice_write_cb(struct bufferevent *bev, void *arg)
{
	BevSplice *s = arg;
	struct bufferevent *other = bev == s->down ? s->up : s->down;

	/* Below the low watermark again: resume the side that feeds us. */
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	if (other)
		bufferevent_enable(other, EV_READ);
}

static void
splice_event_cb(struct bufferevent *bev, short what, void *arg)
{
	BevSplice *s = arg;
	struct bufferevent *other = bev == s->down ? s->up : s->down;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
		/* Pass on what was read before the end, then flush and close. */
		if (other && evbuffer_get_length(bufferevent_get_input(bev)) > 0)
			splice_read_cb(bev, s);
		bev_splice_finish(s, other);
	}
}

void
bev_splice_open(BevSplice *s)
{
	s->open = true;
	bufferevent_set_timeouts(s->down, NULL, NULL);
	bufferevent_set_timeouts(s->up, NULL, NULL);
	bufferevent_setcb(s->down, splice_read_cb, splice_write_cb, splice_event_cb, s);
	bufferevent_setcb(s->up, splice_read_cb, splice_write_cb, splice_event_cb, s);
	bufferevent_enable(s->down, EV_READ | EV_WRITE);
	bufferevent_enable(s->up, EV_READ | EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_input(s->down)) > 0)
		splice_read_cb(s->down, s);
}

void *
bev_splice_accept(struct event_base *base, int fd, size_t size, size_t offset)
{
	char *owner = calloc(1, size);
	BevSplice *s;

	if (!owner) {
		close(fd);
		return NULL;
	}
	s = (BevSplice *)(owner + offset);
	s->down = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!s->down) {
		close(fd);
		free(owner);
		return NULL;
	}
	return owner;
}
