/* SPDX-License-Identifier: MIT */
/*
 * fake-coord.c — a stand-in coordinatord for developing and testing routerd
 * alone. Not installed; not the real thing (no LMDB, no sandboxes).
 *
 *   fake-coord RUNTIME_DIR [EVENTS [INTERVAL_MS]]
 *
 * Listens on RUNTIME_DIR/coordinatord.sock and speaks the router side of the
 * protocol: RUN_START mints a uuid and keeps the run in memory; a timer then
 * appends EVENTS chunks (default 5), every INTERVAL_MS (default 200), some
 * commits carrying two events, the last commit ending the run "completed".
 * Every commit is pushed as RUN_EVENTS to the connections watching the run.
 *
 * Test hooks, chosen by the POST body:
 *   metadata.events / metadata.interval_ms   override EVENTS / INTERVAL_MS
 *   metadata.fail_read: true                 RUN_READ of the run answers -EIO
 *   threadId "einval"                        RUN_START answers -EINVAL
 *   threadId "eio"                           RUN_START answers -EIO
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "peer.h"
#include "shared-conf.h"

typedef struct FakeRun FakeRun;
struct FakeRun {
	FakeRun *next;
	char id[40];
	char *thread_id;
	char *idem;
	char **events;
	int64_t n_events;
	int64_t target;
	bool terminal;
	bool fail_read;
	int64_t started, updated;
	struct event *timer;
	int interval_ms;
};

typedef struct Watcher Watcher;
struct Watcher {
	Watcher *next;
	Peer *peer;
	char *run_id;
};

static struct event_base *base;
static FakeRun *runs;
static Watcher *watchers;
static int64_t def_events = 5;
static int def_interval = 200;

static FakeRun *
run_find(const char *id)
{
	for (FakeRun *r = runs; r; r = r->next)
		if (streq(r->id, id))
			return r;
	return NULL;
}

static char *
run_record(const FakeRun *r)
{
	json_auto_t *j = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "runId", r->id, "threadId",
				   r->thread_id, "status", r->terminal ? "completed" : "running",
				   "lastSeq", (json_int_t)(r->n_events - 1), "startedAt",
				   (json_int_t)r->started, "updatedAt", (json_int_t)r->updated);
	if (r->terminal)
		json_object_set_new(j, "finishedAt", json_integer(r->updated));
	return json_dump_compact(j);
}

static void
append_event(FakeRun *r)
{
	json_auto_t *c;
	int64_t seq = r->n_events;

	if (seq == 0)
		c = json_pack("{s:s, s:s, s:s, s:I}", "type", "RUN_STARTED", "threadId",
			      r->thread_id, "runId", r->id, "timestamp",
			      (json_int_t)now_epoch_ms());
	else if (seq == r->target - 1)
		c = json_pack("{s:s, s:s, s:I}", "type", "RUN_FINISHED", "runId", r->id,
			      "timestamp", (json_int_t)now_epoch_ms());
	else
		c = json_pack("{s:s, s:s, s:{s:I, s:s}, s:I}", "type", "CUSTOM", "name",
			      "fake.tick", "value", "i", (json_int_t)seq, "text", "héllo \"w\"",
			      "timestamp", (json_int_t)now_epoch_ms());
	r->events = realloc(r->events, sizeof(char *) * (size_t)(seq + 1));
	r->events[seq] = json_dump_compact(c);
	r->n_events++;
	r->updated = now_epoch_ms();
}

static void
push_events(FakeRun *r, int64_t first)
{
	_cleanup_free_ char *rec = run_record(r);

	for (Watcher *w = watchers; w; w = w->next) {
		if (!streq(w->run_id, r->id))
			continue;
		MpWriter mw;
		mp_writer_init(&mw);
		mp_w_map(&mw, 4);
		mp_w_str(&mw, "run_id", r->id);
		mp_w_int(&mw, "first_seq", first);
		mp_w_key(&mw, "events");
		msgpack_pack_array(&mw.pk, (size_t)(r->n_events - first));
		for (int64_t s = first; s < r->n_events; s++)
			mp_w_strv(&mw, r->events[s]);
		mp_w_str(&mw, "record", rec);
		peer_push(w->peer, MSG_RUN_EVENTS, &mw);
		mp_writer_done(&mw);
	}
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	FakeRun *r = arg;
	int64_t first = r->n_events;
	struct timeval tv;

	append_event(r);
	/* every third commit carries two events (group commit) */
	if (r->n_events % 3 == 0 && r->n_events < r->target)
		append_event(r);
	if (r->n_events >= r->target)
		r->terminal = true;
	push_events(r, first);
	if (!r->terminal)
		evtimer_add(r->timer, timeval_from_usec(&tv, (usec_t)r->interval_ms * 1000));
}

static int
reply_error(Peer *p, const Frame *f, int err, const char *msg)
{
	peer_reply_error(p, f->req_id, err, msg);
	return 0;
}

static int
h_run_start(Peer *p, const Frame *f, void *ud)
{
	const char *tid = NULL, *msgs = NULL, *meta = NULL, *idem = NULL;
	MpReader mr;
	struct timeval tv;
	MpWriter w;

	mp_reader_init(&mr, f->body);
	mp_read_str(&mr, "thread_id", &tid);
	mp_read_str(&mr, "messages", &msgs);
	mp_read_str_opt(&mr, "metadata", &meta, NULL);
	mp_read_str_opt(&mr, "idempotency_key", &idem, NULL);
	if (mr.err < 0) {
		mp_reader_done(&mr);
		return -EBADMSG;
	}
	if (streq(tid, "einval") || streq(tid, "eio")) {
		int e = streq(tid, "einval") ? -EINVAL : -EIO;
		mp_reader_done(&mr);
		return reply_error(p, f, e,
				   e == -EINVAL ? "fake: thread refused" : "fake: disk on fire");
	}
	json_auto_t *mj = json_loads(msgs, 0, NULL);
	if (!json_is_array(mj)) {
		mp_reader_done(&mr);
		return reply_error(p, f, -EINVAL, "messages is not a JSON array");
	}
	FakeRun *r = NULL;
	if (idem)
		for (r = runs; r; r = r->next)
			if (r->idem && streq(r->idem, idem) && streq(r->thread_id, tid))
				break;
	if (!r) {
		json_auto_t *md = meta ? json_loads(meta, 0, NULL) : NULL;
		FILE *u = fopen("/proc/sys/kernel/random/uuid", "re");
		r = calloc(1, sizeof(*r));
		if (!u || !fgets(r->id, sizeof(r->id), u))
			snprintf(r->id, sizeof(r->id), "run-%d", rand());
		if (u)
			fclose(u);
		r->id[strcspn(r->id, "\n")] = '\0';
		r->thread_id = strdup(tid);
		r->idem = idem ? strdup(idem) : NULL;
		r->target = def_events;
		r->interval_ms = def_interval;
		if (json_is_integer(json_object_get(md, "events")))
			r->target = json_integer_value(json_object_get(md, "events"));
		if (json_is_integer(json_object_get(md, "interval_ms")))
			r->interval_ms =
			    (int)json_integer_value(json_object_get(md, "interval_ms"));
		r->fail_read = json_is_true(json_object_get(md, "fail_read"));
		r->started = r->updated = now_epoch_ms();
		r->timer = evtimer_new(base, tick_cb, r);
		r->next = runs;
		runs = r;
		if (r->target > 0)
			evtimer_add(r->timer,
				    timeval_from_usec(&tv, (usec_t)r->interval_ms * 1000));
		else
			r->terminal = true;
		log_info("run %s started on thread '%s' (%" PRId64 " events)", r->id, tid,
			 r->target);
	}
	mp_reader_done(&mr);
	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "run_id", r->id);
	peer_reply(p, f->req_id, &w);
	mp_writer_done(&w);
	return 0;
}

/* Look up run_id (+ optional thread_id) of a request; NULL after answering -ENOENT. */
static FakeRun *
lookup(Peer *p, const Frame *f, MpReader *mr, const char **ret_run)
{
	const char *id = NULL, *tid = NULL;
	mp_read_str(mr, "run_id", &id);
	mp_read_str_opt(mr, "thread_id", &tid, NULL);
	if (mr->err < 0) {
		reply_error(p, f, -EBADMSG, "bad request");
		return NULL;
	}
	FakeRun *r = run_find(id);
	if (!r || (tid && !streq(tid, r->thread_id))) {
		reply_error(p, f, -ENOENT, "unknown run");
		return NULL;
	}
	if (ret_run)
		*ret_run = id;
	return r;
}

static int
h_run_get(Peer *p, const Frame *f, void *ud)
{
	MpReader mr;
	mp_reader_init(&mr, f->body);
	FakeRun *r = lookup(p, f, &mr, NULL);
	if (r) {
		_cleanup_free_ char *rec = run_record(r);
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "record", rec);
		peer_reply(p, f->req_id, &w);
		mp_writer_done(&w);
	}
	mp_reader_done(&mr);
	return 0;
}

static int
h_run_read(Peer *p, const Frame *f, void *ud)
{
	int64_t from = -1;
	uint64_t max = 0;
	MpReader mr;
	mp_reader_init(&mr, f->body);
	mp_read_int(&mr, "from_seq", &from);
	mp_read_uint(&mr, "max", &max);
	FakeRun *r = lookup(p, f, &mr, NULL);
	if (r && r->fail_read)
		reply_error(p, f, -EIO, "fake: read failed");
	else if (r) {
		_cleanup_free_ char *rec = run_record(r);
		int64_t first = MAX(from + 1, 0);
		int64_t end = MIN(r->n_events, first + (int64_t)max);
		MpWriter w;
		mp_writer_init(&w);
		mp_w_map(&w, 3);
		mp_w_int(&w, "first_seq", from + 1);
		mp_w_key(&w, "events");
		msgpack_pack_array(&w.pk, end > first ? (size_t)(end - first) : 0);
		for (int64_t s = first; s < end; s++)
			mp_w_strv(&w, r->events[s]);
		mp_w_str(&w, "record", rec);
		peer_reply(p, f->req_id, &w);
		mp_writer_done(&w);
	}
	mp_reader_done(&mr);
	return 0;
}

static int
h_run_watch(Peer *p, const Frame *f, void *ud)
{
	const char *id = NULL;
	MpReader mr;
	mp_reader_init(&mr, f->body);
	mp_read_str(&mr, "run_id", &id);
	if (mr.err < 0) {
		mp_reader_done(&mr);
		return -EBADMSG;
	}
	if (f->type == MSG_RUN_WATCH) {
		Watcher *w = calloc(1, sizeof(*w));
		w->peer = p;
		w->run_id = strdup(id);
		w->next = watchers;
		watchers = w;
	} else {
		for (Watcher **pp = &watchers; *pp; pp = &(*pp)->next)
			if ((*pp)->peer == p && streq((*pp)->run_id, id)) {
				Watcher *w = *pp;
				*pp = w->next;
				free(w->run_id);
				free(w);
				break;
			}
	}
	size_t n = 0;
	for (Watcher *w = watchers; w; w = w->next)
		n++;
	log_info("%s %s (%zu watches)", msg_type_name(f->type), id, n);
	mp_reader_done(&mr);
	peer_reply(p, f->req_id, NULL);
	return 0;
}

static const PeerHandler handlers[_MSG_TYPE_MAX] = {
    [MSG_RUN_START] = h_run_start, [MSG_RUN_GET] = h_run_get,	    [MSG_RUN_READ] = h_run_read,
    [MSG_RUN_WATCH] = h_run_watch, [MSG_RUN_UNWATCH] = h_run_watch,
};

static void
on_close(Peer *p, int err, void *ud)
{
	for (Watcher **pp = &watchers; *pp;) {
		if ((*pp)->peer == p) {
			Watcher *w = *pp;
			*pp = w->next;
			free(w->run_id);
			free(w);
		} else
			pp = &(*pp)->next;
	}
	log_info("peer gone");
	peer_free(p);
}

static const PeerOps ops = {
    .local_role = ROLE_COORD,
    .handlers = handlers,
    .on_close = on_close,
};

static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	Peer *p;
	if (fd < 0)
		return;
	if (peer_new(base, fd, &ops, NULL, 16 << 20, &p) < 0)
		return;
	log_info("peer connected");
}

int
main(int argc, char **argv)
{
	char path[4096];

	log_open("fake-coord");
	if (argc < 2) {
		fprintf(stderr, "usage: %s RUNTIME_DIR [EVENTS [INTERVAL_MS]]\n", argv[0]);
		return EXIT_FAILURE;
	}
	if (argc > 2)
		def_events = atoll(argv[2]);
	if (argc > 3)
		def_interval = atoi(argv[3]);
	snprintf(path, sizeof(path), "%s/%s", argv[1], RW_SOCK_COORD);
	base = event_base_new();
	int fd = unix_listen(path, 0660);
	if (fd < 0)
		return log_error_errno(fd, "listen %s: %m", path), EXIT_FAILURE;
	struct event *ev = event_new(base, fd, EV_READ | EV_PERSIST, accept_cb, NULL);
	event_add(ev, NULL);
	log_info("fake coordinatord listening on %s", path);
	event_base_dispatch(base);
	return 0;
}
