/* SPDX-License-Identifier: MIT */
/*
 * files.c — THREAD_FILE: routerd's /threads/{id}/files requests, passed to the
 * shim as SANDBOX_FILE keyed by the thread id (the key of SANDBOX_ENSURE), and
 * the shim's reply passed back as it is.
 *
 * A thread needs no run for this: a harness may seed files before the first
 * run, and a thread that never had one reads as an empty workspace (the shim
 * decides). Nothing here touches the run log.
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "id-util.h"
#include "macro.h"
#include "mp-cursor.h"

/* The shim serves a file synchronously; a cap-sized file takes well under this. */
#define FILE_CALL_TIMEOUT (60 * USEC_PER_SEC)

/* The shim's reply is the answer, passed on as it is. */
static const PeerRelayOps file_relay = {
    .fallback = "file operation failed",
    .unavailable_reason = "shim_unavailable",
    .unavailable = "containerd-shim unavailable",
};

int
handle_thread_file(Peer *p, const Frame *f, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *thread_id = NULL, *op = NULL;
	const void *path = NULL, *to = NULL, *data = NULL;
	size_t plen = 0, tlen = 0, dlen = 0;
	int64_t mode = -1;
	PeerDeferred *d;
	MpReader r;
	MpWriter w;
	int ret;

	mp_reader_init(&r, f->body);
	mp_read_str(&r, "thread_id", &thread_id);
	mp_read_str(&r, "op", &op);
	mp_read_bin(&r, "path", &path, &plen);
	mp_read_bin_opt(&r, "to", &to, &tlen);
	mp_read_bin_opt(&r, "data", &data, &dlen);
	mp_read_int_opt(&r, "mode", &mode, -1);
	ret = r.err;
	if (ret < 0)
		goto out;
	if (!thread_id_valid(thread_id)) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, "bad_request",
					"threadId must be a non-empty printable string of at most "
					"256 bytes");
		goto out;
	}
	if (c->conf.reuse == REUSE_NONE) {
		peer_reply_error_reason(p, f->req_id, -EBUSY, "reuse_none",
					"with reuse = none each run has its own workspace and a "
					"thread has none");
		goto out;
	}
	if (!peer_is_ready(c->shim)) {
		peer_reply_error_reason(p, f->req_id, -ECONNRESET, "shim_unavailable",
					"containerd-shim unavailable");
		goto out;
	}
	d = peer_defer(p, f);
	if (!d) {
		ret = -ENOMEM;
		goto out;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 3 + (to ? 1 : 0) + (data ? 1 : 0) + (mode >= 0 ? 1 : 0));
	mp_w_str(&w, "key", thread_id);
	mp_w_str(&w, "op", op);
	mp_w_bin(&w, "path", path, plen);
	if (to)
		mp_w_bin(&w, "to", to, tlen);
	if (data)
		mp_w_bin(&w, "data", data, dlen);
	if (mode >= 0)
		mp_w_uint(&w, "mode", (uint64_t)mode);
	(void)peer_relay(c->shim, MSG_SANDBOX_FILE, &w, d, FILE_CALL_TIMEOUT, &file_relay);
	mp_writer_done(&w);
out:
	mp_reader_done(&r);
	return ret;
}
