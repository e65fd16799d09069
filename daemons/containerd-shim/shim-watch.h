/* SPDX-License-Identifier: MIT */
/*
 * shim-watch.h — SANDBOX_WATCH: file events of a workspace directory tree, as
 * a long poll (docs/SANDBOX-API.md "Files", docs/PROTOCOL.md).
 *
 *   SANDBOX_WATCH {key, path?, cursor?, wait_ms}
 *     → {events: [{type: "create"|"modify"|"delete", path: bin}], cursor, dropped}
 *
 * A watch is one inotify fd for (sandbox id, path), following path's
 * directory and every directory below it (new ones as they appear, their
 * entries reported as created), at most WATCH_DIRS_MAX of them; beyond, or
 * when the kernel's queue overflows, events are lost and counted in
 * `dropped`. Paths are relative to the workspace; nothing is followed below
 * path (directories are entered by lstat, opened beneath the workspace with
 * the file API's rules), and the file API's temporaries are not reported.
 * A watch holds its newest WATCH_RING events, numbered without gaps from a
 * base above every number any watch of this shim gave before (the shim's
 * counter starts at the wall clock in µs), so a cursor of an earlier watch or
 * shim is never one of a later watch's.
 *
 * Without a cursor a poll starts the watch (or joins the one of that id and
 * path) and answers at once with no events and the cursor to poll from. With
 * one, it answers at once when events after it are held, else when one comes
 * or after wait_ms (at most WATCH_WAIT_MAX_MS); a cursor not of this watch
 * (it expired: nobody polled for watch_idle_ms, 60 s by default; or a restore replaced the
 * workspace) is -ENOENT reason watch_expired. At most WATCH_MAX watches in
 * the shim, WATCH_PER_KEY per sandbox: beyond, -EAGAIN too_many_watches.
 */
#pragma once

#include "msg.h"
#include "peer.h"
#include "shim-conf.h"
#include "time-util.h"

#define WATCH_MAX 32
#define WATCH_PER_KEY 4
#define WATCH_DIRS_MAX 1024
#define WATCH_RING 1024
#define WATCH_REPLY_MAX 256 /* events in one answer; the rest in the next */
#define WATCH_WAIT_MAX_MS 60000

typedef struct ShimWatches ShimWatches;
struct event_base;

/* idle_usec: an unpolled watch is dropped after this ([containerd-shim]
 * watch_idle_ms). */
int shim_watches_new(struct event_base *base, usec_t idle_usec, ShimWatches **ret);
/* Ends every watch; waiting polls are answered unavailable. NULL-safe. */
ShimWatches *shim_watches_free(ShimWatches *ws);
int shim_watch_handle(ShimWatches *ws, const ShimConf *conf, Peer *p, const Frame *f,
		      const Msg_SANDBOX_WATCH *m);
/* Drop the watches of sandbox id (its workspace was replaced): their next
 * poll is watch_expired. */
void shim_watches_drop(ShimWatches *ws, const char *id);
