/* SPDX-License-Identifier: MIT */
/*
 * shim-watch.c — SANDBOX_WATCH: inotify watches of workspace trees, polled
 * (see shim-watch.h).
 */
#include "config.h"

#include "shim-watch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "fd-util.h"
#include "log.h"
#include "macro.h"
#include "sandbox-key.h"
#include "shim.h"
#include "wsfs.h"

#define WATCH_MASK                                                                                 \
	(IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |        \
	 IN_ONLYDIR)
#define SWEEP_USEC (5 * USEC_PER_SEC)

enum { EV_CREATE, EV_MODIFY, EV_DELETE, EV_LOST };
static const char *const ev_names[] = {"create", "modify", "delete"};

typedef struct Watch Watch;

typedef struct WEvent {
	uint8_t type;
	char *path;
} WEvent;

typedef struct WDir {
	int wd;
	char *rel;
} WDir;

typedef struct WPoll {
	struct WPoll *next;
	Watch *w;
	PeerDeferred *d;
	struct event *timer;
	uint64_t cursor;
} WPoll;

struct Watch {
	Watch *next;
	ShimWatches *owner;
	char id[17];
	char *root; /* the watched directory, relative to the workspace ("": it) */
	int ifd, ws_fd;
	struct event *ev;
	WDir *dirs;
	size_t n_dirs;
	bool full_reported; /* WATCH_DIRS_MAX reached: one lost mark */
	WEvent ring[WATCH_RING];
	size_t start, count; /* ring[start] holds seq last - count + 1 */
	uint64_t base;	     /* the cursor before its first event */
	uint64_t last;	     /* the seq of its newest event (base: none) */
	usec_t last_poll;
	WPoll *polls;
};

struct ShimWatches {
	struct event_base *base;
	Watch *list;
	size_t n;
	struct event *sweep;
	uint64_t seq;
	usec_t idle;
};

/* ---- the ring ---- */

static WEvent *
ring_at(Watch *w, uint64_t seq)
{
	return &w->ring[(w->start + (size_t)(seq - (w->last - w->count + 1))) % WATCH_RING];
}

static void
push(Watch *w, uint8_t type, char *path /* taken */)
{
	/* a burst of writes to one file is one modify */
	if (type == EV_MODIFY && w->count > 0) {
		WEvent *prev = ring_at(w, w->last);
		if (prev->type == EV_MODIFY && prev->path && path && streq(prev->path, path)) {
			free(path);
			return;
		}
	}
	if (w->count == WATCH_RING) {
		free(w->ring[w->start].path);
		w->start = (w->start + 1) % WATCH_RING;
		w->count--;
	}
	w->last++; /* a watch's events are numbered without gaps... */
	w->owner->seq = MAX(w->owner->seq, w->last); /* ...below any later watch's */
	w->ring[(w->start + w->count) % WATCH_RING] = (WEvent){.type = type, .path = path};
	w->count++;
}

/* ---- answers ---- */

static void
poll_free(WPoll *q)
{
	if (!q)
		return;
	if (q->timer)
		event_free(q->timer);
	peer_deferred_free(q->d);
	free(q);
}

static void
poll_unlink(WPoll *q)
{
	for (WPoll **pp = &q->w->polls; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			return;
		}
}

/* {events, cursor, dropped}: what follows cursor (at most WATCH_REPLY_MAX). */
static void
answer(Watch *w, PeerDeferred *d, uint64_t cursor)
{
	uint64_t first = w->last - w->count + 1, from = MAX(cursor + 1, first), to = w->last;
	uint64_t dropped = first > cursor + 1 ? first - cursor - 1 : 0;
	uint32_t n = 0;
	MpWriter mw;

	if (to >= from && to - from + 1 > WATCH_REPLY_MAX)
		to = from + WATCH_REPLY_MAX - 1;
	for (uint64_t s = from; s <= to && to >= from; s++)
		if (ring_at(w, s)->type == EV_LOST)
			dropped++;
		else
			n++;
	mp_writer_init(&mw);
	mp_w_map(&mw, 3);
	mp_w_key(&mw, "events");
	msgpack_pack_array(&mw.pk, n);
	for (uint64_t s = from; s <= to && to >= from; s++) {
		WEvent *e = ring_at(w, s);
		if (e->type == EV_LOST)
			continue;
		mp_w_map(&mw, 2);
		mp_w_str(&mw, "type", ev_names[e->type]);
		mp_w_bin(&mw, "path", e->path, strlen(e->path));
	}
	mp_w_uint(&mw, "cursor", to >= from ? to : MAX(cursor, w->last));
	mp_w_uint(&mw, "dropped", dropped);
	(void)peer_deferred_reply(d, &mw);
	mp_writer_done(&mw);
	w->last_poll = now_usec();
}

static void
poll_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	WPoll *q = arg;

	poll_unlink(q);
	answer(q->w, TAKE_PTR(q->d), q->cursor);
	poll_free(q);
}

static void
poll_cancel_cb(PeerDeferred *d, void *userdata)
{
	WPoll *q = userdata;

	q->w->last_poll = now_usec();
	poll_unlink(q);
	poll_free(q);
}

/* Events came: answer the polls waiting for them. */
static void
wake(Watch *w)
{
	while (w->polls) {
		WPoll *q = w->polls;
		w->polls = q->next;
		answer(w, TAKE_PTR(q->d), q->cursor);
		poll_free(q);
	}
}

/* ---- directories ---- */

static WDir *
dir_by_wd(Watch *w, int wd)
{
	for (size_t i = 0; i < w->n_dirs; i++)
		if (w->dirs[i].wd == wd)
			return &w->dirs[i];
	return NULL;
}

static void
dir_remove(Watch *w, size_t i)
{
	free(w->dirs[i].rel);
	w->dirs[i] = w->dirs[--w->n_dirs];
}

static char *
join(const char *dir, const char *name)
{
	char *p = NULL;

	if (!dir[0])
		return strdup(name);
	return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* Follow directory rel (opened beneath the workspace); false when the cap is
 * reached or it cannot be watched. */
static bool
dir_add(Watch *w, const char *rel)
{
	_cleanup_close_ int fd = -1;
	char proc[64];
	WDir *nv;
	int wd;

	if (w->n_dirs >= WATCH_DIRS_MAX) {
		if (!w->full_reported)
			push(w, EV_LOST, NULL);
		w->full_reported = true;
		return false;
	}
	fd = wsfs_open_dir(w->ws_fd, rel);
	if (fd < 0)
		return false;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	wd = inotify_add_watch(w->ifd, proc, WATCH_MASK);
	if (wd < 0) {
		push(w, EV_LOST, NULL); /* the kernel's max_user_watches: events lost */
		return false;
	}
	if (dir_by_wd(w, wd))
		return true; /* the same inode by another name */
	nv = realloc(w->dirs, (w->n_dirs + 1) * sizeof(*nv));
	if (!nv)
		return false;
	w->dirs = nv;
	w->dirs[w->n_dirs].wd = wd;
	w->dirs[w->n_dirs].rel = strdup(rel);
	if (!w->dirs[w->n_dirs].rel) {
		(void)inotify_rm_watch(w->ifd, wd);
		return false;
	}
	w->n_dirs++;
	return true;
}

/* Follow rel and the directories below it (lstat: a symlink is not
 * entered); report: a new directory, whose entries are reported created
 * (they may have come before its watch). */
static void
walk(Watch *w, const char *rel, unsigned depth, bool report)
{
	_cleanup_close_ int pfd = -1;
	char proc[64];
	struct dirent *de;
	DIR *d;
	int fd;

	if (depth > WSFS_COMPONENTS_MAX || !dir_add(w, rel))
		return;
	pfd = wsfs_open_dir(w->ws_fd, rel);
	if (pfd < 0)
		return;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
	fd = open(proc, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		safe_close(fd);
		return;
	}
	while ((de = readdir(d))) {
		struct stat st;
		char *sub;
		if (streq(de->d_name, ".") || streq(de->d_name, "..") ||
		    strncmp(de->d_name, ".wsfs-", 6) == 0)
			continue;
		sub = join(rel, de->d_name);
		if (!sub || strlen(sub) > WSFS_PATH_MAX) {
			free(sub);
			continue;
		}
		if (report)
			push(w, EV_CREATE, strdup(sub));
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISDIR(st.st_mode))
			walk(w, sub, depth + 1, report);
		free(sub);
	}
	closedir(d);
}

/* A directory left (moved away): what was followed below it goes. */
static void
forget_below(Watch *w, const char *rel)
{
	size_t n = strlen(rel);

	for (size_t i = 0; i < w->n_dirs;) {
		const char *r = w->dirs[i].rel;
		if (strncmp(r, rel, n) == 0 && (r[n] == '\0' || r[n] == '/')) {
			(void)inotify_rm_watch(w->ifd, w->dirs[i].wd);
			dir_remove(w, i);
		} else
			i++;
	}
}

static void
handle_event(Watch *w, const struct inotify_event *ev)
{
	WDir *dir;
	char *path;

	if (ev->mask & IN_Q_OVERFLOW) {
		push(w, EV_LOST, NULL);
		return;
	}
	dir = dir_by_wd(w, ev->wd);
	if (!dir)
		return;
	if (ev->mask & IN_IGNORED) {
		dir_remove(w, (size_t)(dir - w->dirs));
		return;
	}
	if (!ev->len || !ev->name[0] || strncmp(ev->name, ".wsfs-", 6) == 0)
		return; /* the directory itself; the file API's temporaries */
	path = join(dir->rel, ev->name);
	if (!path)
		return;
	if (ev->mask & (IN_CREATE | IN_MOVED_TO)) {
		push(w, EV_CREATE, strdup(path));
		if (ev->mask & IN_ISDIR)
			walk(w, path, 1, true);
	} else if (ev->mask & IN_MODIFY)
		push(w, EV_MODIFY, strdup(path));
	else if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
		if (ev->mask & IN_ISDIR)
			forget_below(w, path);
		push(w, EV_DELETE, strdup(path));
	}
	free(path);
}

static void
inotify_cb(evutil_socket_t fd, short what, void *arg)
{
	Watch *w = arg;
	char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
	uint64_t before = w->last;

	for (int round = 0; round < 16; round++) {
		ssize_t n = read(w->ifd, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)p;
			handle_event(w, ev);
			p += sizeof(*ev) + ev->len;
		}
	}
	if (w->last != before)
		wake(w);
}

/* ---- watches ---- */

static void
watch_free(Watch *w)
{
	if (!w)
		return;
	while (w->polls) {
		WPoll *q = w->polls;
		w->polls = q->next;
		(void)peer_deferred_error(TAKE_PTR(q->d), -ENOENT, REASON_WATCH_EXPIRED,
					  "the watch ended (its workspace was replaced, or the "
					  "shim stops)");
		poll_free(q);
	}
	if (w->ev)
		event_free(w->ev);
	safe_close(w->ifd);
	safe_close(w->ws_fd);
	for (size_t i = 0; i < w->n_dirs; i++)
		free(w->dirs[i].rel);
	free(w->dirs);
	for (size_t i = 0; i < w->count; i++)
		free(w->ring[(w->start + i) % WATCH_RING].path);
	free(w->root);
	free(w);
}

static void
watch_unlink(ShimWatches *ws, Watch *w)
{
	for (Watch **pp = &ws->list; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			ws->n--;
			return;
		}
}

static void
sweep(ShimWatches *ws)
{
	usec_t now = now_usec();

	for (Watch *w = ws->list, *next; w; w = next) {
		next = w->next;
		if (!w->polls && now - w->last_poll > ws->idle) {
			log_debug("Watch of %s/%s expired (not polled for watch_idle_ms)", w->id,
				  w->root);
			watch_unlink(ws, w);
			watch_free(w);
		}
	}
}

static void
sweep_cb(evutil_socket_t fd, short what, void *arg)
{
	sweep(arg);
}

static Watch *
watch_find(ShimWatches *ws, const char *id, const char *root)
{
	for (Watch *w = ws->list; w; w = w->next)
		if (streq(w->id, id) && streq(w->root, root))
			return w;
	return NULL;
}

/* A new watch of root in the workspace ws_path; -ENOENT when there is none. */
static int
watch_new(ShimWatches *ws, const char *id, const char *ws_path, const char *root, Watch **ret)
{
	Watch *w = calloc(1, sizeof(*w));
	_cleanup_close_ int rfd = -1;
	int r;

	if (!w)
		return -ENOMEM;
	w->owner = ws;
	w->ifd = w->ws_fd = -1;
	memcpy(w->id, id, sizeof(w->id));
	w->last_poll = now_usec();
	/* above every cursor any watch gave so far (shim-watch.h) */
	w->base = w->last = ++ws->seq;
	if (!(w->root = strdup(root))) {
		r = -ENOMEM;
		goto fail;
	}
	w->ws_fd = open(ws_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (w->ws_fd < 0) {
		r = -errno;
		goto fail;
	}
	rfd = wsfs_open_dir(w->ws_fd, root);
	if (rfd < 0) {
		r = rfd;
		goto fail;
	}
	w->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (w->ifd < 0) {
		r = errno == EMFILE ? -EAGAIN : -errno;
		goto fail;
	}
	w->ev = event_new(ws->base, w->ifd, EV_READ | EV_PERSIST, inotify_cb, w);
	if (!w->ev || event_add(w->ev, NULL) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	walk(w, root, 0, false);
	if (w->n_dirs == 0) {
		r = -ENOENT;
		goto fail;
	}
	*ret = w;
	return 0;
fail:
	watch_free(w);
	return r;
}

int
shim_watches_new(struct event_base *base, usec_t idle_usec, ShimWatches **ret)
{
	ShimWatches *ws = calloc(1, sizeof(*ws));
	struct timespec ts;
	/* swept every quarter of the idle time, at most every 5 s */
	usec_t every = MIN(SWEEP_USEC, MAX(idle_usec / 4, 100 * USEC_PER_MSEC));
	struct timeval tv = {.tv_sec = (time_t)(every / USEC_PER_SEC),
			     .tv_usec = (suseconds_t)(every % USEC_PER_SEC)};

	if (!ws)
		return -ENOMEM;
	ws->base = base;
	ws->idle = idle_usec;
	/* cursors of an earlier shim are below any of ours */
	clock_gettime(CLOCK_REALTIME, &ts);
	ws->seq = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
	ws->sweep = event_new(base, -1, EV_PERSIST, sweep_cb, ws);
	if (!ws->sweep || event_add(ws->sweep, &tv) < 0) {
		if (ws->sweep)
			event_free(ws->sweep);
		free(ws);
		return -ENOMEM;
	}
	*ret = ws;
	return 0;
}

ShimWatches *
shim_watches_free(ShimWatches *ws)
{
	if (!ws)
		return NULL;
	while (ws->list) {
		Watch *w = ws->list;
		ws->list = w->next;
		watch_free(w);
	}
	event_free(ws->sweep);
	free(ws);
	return NULL;
}

void
shim_watches_drop(ShimWatches *ws, const char *id)
{
	for (Watch *w = ws ? ws->list : NULL, *next; w; w = next) {
		next = w->next;
		if (streq(w->id, id)) {
			watch_unlink(ws, w);
			watch_free(w);
		}
	}
}

static void
reply_err(Peer *p, const Frame *f, int err, const char *reason, const char *text)
{
	(void)peer_reply_error_reason(p, f->req_id, err, reason, text);
}

static size_t
count_of(ShimWatches *ws, const char *id)
{
	size_t n = 0;
	for (Watch *w = ws->list; w; w = w->next)
		n += streq(w->id, id);
	return n;
}

/* The first poll: the watch made or joined, answered with its cursor. */
static int
watch_start(ShimWatches *ws, const ShimConf *conf, Peer *p, const Frame *f, const char *id,
	    const char *root)
{
	_cleanup_free_ char *wsp = NULL;
	Watch *w = watch_find(ws, id, root);
	PeerDeferred *d;
	int r;

	if (!w) {
		sweep(ws);
		if (ws->n >= WATCH_MAX || count_of(ws, id) >= WATCH_PER_KEY) {
			reply_err(p, f, -EAGAIN, REASON_TOO_MANY_WATCHES,
				  "too many watches (at most 4 a sandbox, 32 in all); poll or "
				  "let one expire");
			return 0;
		}
		if (asprintf(&wsp, "%s/%s/workspace", conf->sandbox_dir, id) < 0)
			return -ENOMEM;
		r = watch_new(ws, id, wsp, root, &w);
		if (r == -ENOENT || r == -ENOTDIR) {
			reply_err(p, f, -ENOENT, REASON_NOT_FOUND,
				  "no such directory in the workspace");
			return 0;
		}
		if (r == -EXDEV || r == -ELOOP) {
			reply_err(p, f, r, REASON_ESCAPE,
				  "the path leaves the workspace (symlink, magic link or mount)");
			return 0;
		}
		if (r == -EAGAIN) {
			reply_err(p, f, r, REASON_TOO_MANY_WATCHES, "no inotify instance is free");
			return 0;
		}
		if (r < 0)
			return r;
		w->next = ws->list;
		ws->list = w;
		ws->n++;
	}
	d = peer_defer(p, f);
	if (!d)
		return -ENOMEM;
	answer(w, d, w->last);
	return 0;
}

int
shim_watch_handle(ShimWatches *ws, const ShimConf *conf, Peer *p, const Frame *f,
		  const Msg_SANDBOX_WATCH *m)
{
	_cleanup_free_ char *root = NULL;
	_cleanup_close_ int dfd = -1;
	char id[17];
	Watch *w;
	WPoll *q;
	int k;

	if (shim_sandbox_id(m->key, strlen(m->key), id) < 0 || m->wait_ms > WATCH_WAIT_MAX_MS) {
		reply_err(p, f, -EINVAL, REASON_BAD_REQUEST,
			  "key must be 1..256 bytes, wait_ms at most 60000");
		return 0;
	}
	if (m->has_path && m->path_len > 0) {
		k = wsfs_check_path(m->path, m->path_len);
		if (k < 0) {
			reply_err(p, f, k, REASON_INVALID_PATH,
				  "the path must be relative, without '.', '..', empty components "
				  "or a trailing slash, valid UTF-8");
			return 0;
		}
	}
	root = m->has_path ? strndup(m->path, m->path_len) : strdup("");
	if (!root)
		return -ENOMEM;
	/* the id's directory must be this key's (sandbox-key.h) */
	dfd = open(conf->sandbox_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	k = dfd < 0 ? -errno
		    : sandbox_key_claim(dfd, id, m->key, strlen(m->key), SANDBOX_KEY_MAX, false);
	if (k < 0 && !(k == -ENOENT && dfd < 0)) {
		reply_err(p, f, -EIO, REASON_INTERNAL,
			  k == -EEXIST
			      ? "sandbox id collision: the workspace belongs to another key"
			      : "cannot check the workspace's key");
		return 0;
	}
	if (!m->has_cursor)
		return watch_start(ws, conf, p, f, id, root);
	w = watch_find(ws, id, root);
	if (!w || m->cursor < w->base || m->cursor > w->last) {
		reply_err(p, f, -ENOENT, REASON_WATCH_EXPIRED,
			  "no such watch: it expired (not polled for 60 s) or its workspace "
			  "was replaced; start it again (no cursor)");
		return 0;
	}
	w->last_poll = now_usec();
	q = calloc(1, sizeof(*q));
	if (!q || !(q->d = peer_defer(p, f))) {
		free(q);
		return -ENOMEM;
	}
	q->w = w;
	q->cursor = m->cursor;
	if (m->cursor < w->last || m->wait_ms == 0) {
		answer(w, TAKE_PTR(q->d), m->cursor);
		poll_free(q);
		return 0;
	}
	struct timeval tv = {.tv_sec = (time_t)(m->wait_ms / 1000),
			     .tv_usec = (suseconds_t)(m->wait_ms % 1000) * 1000};
	q->timer = evtimer_new(ws->base, poll_timeout_cb, q);
	if (!q->timer || evtimer_add(q->timer, &tv) < 0) {
		poll_free(q);
		return -ENOMEM;
	}
	peer_deferred_on_cancel(q->d, poll_cancel_cb, q);
	q->next = w->polls;
	w->polls = q;
	return 0;
}
