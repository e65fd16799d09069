/* SPDX-License-Identifier: MIT */
/*
 * snapshots.c — SNAPSHOT_CREATE and SNAPSHOT_RESTORE: routerd's
 * /threads/{id}/snapshots requests, relayed to the shim as SANDBOX_SNAPSHOT
 * and SANDBOX_RESTORE keyed by the thread id (the key of SANDBOX_ENSURE); in
 * cluster mode claimed for (or forwarded to) the thread's owner first, as
 * files.c's THREAD_FILE. Nothing here touches the run log but the check that
 * no run of the thread is active before a restore and the thread's owner
 * (tenant.c: a restore from another thread also needs that thread to be the
 * tenant's).
 *
 * SNAPSHOT_RESTORE with from_thread restores a snapshot of that thread into
 * this one (the sandbox API's restore into a new id, with fresh: refused when
 * it has a workspace). SNAPSHOT_LIST lists or deletes a thread's snapshots
 * (SANDBOX_SNAPSHOTS).
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "mp-cursor.h"

static int dispatch_create_again(Peer *p, const Frame *f, void *userdata);
static int dispatch_restore_again(Peer *p, const Frame *f, void *userdata);

/* SNAPSHOT_CREATE and SNAPSHOT_RESTORE: passed to the shim (SANDBOX_SNAPSHOT,
 * SANDBOX_RESTORE, keyed by the thread id like SANDBOX_ENSURE); a restore is
 * refused (-EBUSY) while a run of the thread is active. The shim holds the
 * ENSUREs of a key while its restore runs, so a RUN_START that comes in
 * meanwhile has its ENSURE served after the restore, on the restored workspace. */
/* The shim's SANDBOX_SNAPSHOT reply {record} is the client's {snapshot_id}. */
static void
snapshot_reply(PeerDeferred *d, const msgpack_object *body)
{
	Reply_SANDBOX_SNAPSHOT rep;

	if (reply_decode_SANDBOX_SNAPSHOT(body, &rep) < 0)
		peer_deferred_error(d, -EIO, NULL, "bad reply from containerd-shim");
	else
		(void)reply_deferred_SNAPSHOT_CREATE(
		    d, &(Reply_SNAPSHOT_CREATE){.snapshot_id = rep.record});
	reply_done_SANDBOX_SNAPSHOT(&rep);
}

/* A restore answers an empty map, whatever the shim said. */
static void
restore_reply(PeerDeferred *d, const msgpack_object *body)
{
	MpWriter w;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	peer_deferred_reply(d, &w);
	mp_writer_done(&w);
}

static const PeerRelayOps snapshot_relay = {
    .reply = snapshot_reply,
    .fallback = "snapshot failed",
    SHIM_RELAY_UNAVAILABLE,
};

static const PeerRelayOps restore_relay = {
    .reply = restore_reply,
    .fallback = "restore failed",
    SHIM_RELAY_UNAVAILABLE,
};

/* Is a run of the thread active (running in the log, or driven here)? */
static int
thread_busy(Coordinator *c, const char *thread_id)
{
	json_t *list = NULL;
	int r;

	for (Run *run = c->runs; run; run = run->next)
		if (run->state != RUN_DONE && streq(run->thread_id, thread_id))
			return 1;
	r = runlog_thread_runs(c->runlog, thread_id, "running", &list);
	if (r < 0)
		return r;
	r = json_array_size(list) > 0;
	json_decref(list);
	return r;
}

/* SNAPSHOT_CREATE (label) and SNAPSHOT_RESTORE (sid): the common part. */
static int
handle_snapshot(Peer *p, const Frame *f, void *ud, const char *thread_id, const char *label,
		const char *tenant, const Msg_SNAPSHOT_RESTORE *rm)
{
	const char *sid = rm ? rm->snapshot_id : NULL;
	Client *cl = ud;
	Coordinator *c = cl->c;
	bool restore = f->type == MSG_SNAPSHOT_RESTORE;
	MpWriter w;
	int ret = 0, r;

	if (!request_thread_id_ok(p, f, thread_id, NULL) ||
	    (rm && rm->from_thread && !request_thread_id_ok(p, f, rm->from_thread, NULL)))
		goto out;
	/* cluster mode: the thread's workspace is on its owner (a claim, as a
	 * first run makes) */
	if (placement_run_start(c, p, f, thread_id,
				restore ? dispatch_restore_again : dispatch_create_again, ud))
		goto out;
	/* a restore from another thread reads that thread's snapshot: it must
	 * not be another tenant's (checked before the new thread is claimed) */
	if (!tenant_request_ok(p, f, &tenant) ||
	    (rm && rm->from_thread && !streq(rm->from_thread, thread_id) &&
	     !tenant_check(c, p, f, rm->from_thread, tenant, &ret)) ||
	    !tenant_admit(c, p, f, thread_id, tenant, false, &ret))
		goto out;
	if (c->conf.reuse == REUSE_NONE) {
		peer_reply_error(p, f->req_id, -EBUSY,
				 "reuse = none: each run has its own workspace, a thread has none "
				 "to snapshot or restore");
		goto out;
	}
	if (restore) {
		ret = thread_busy(c, thread_id);
		if (ret < 0)
			goto out;
		if (ret > 0) {
			peer_reply_error_reason(p, f->req_id, -EBUSY, REASON_THREAD_BUSY,
						"a run is active on this thread");
			ret = 0;
			goto out;
		}
	}
	mp_writer_init(&w);
	if (restore)
		msg_encode_SANDBOX_RESTORE(
		    &w, &(Msg_SANDBOX_RESTORE){.key = thread_id,
					       .record = sid,
					       .from_key = rm->from_thread,
					       .fresh = rm->has_fresh && rm->fresh,
					       .has_fresh = rm->has_fresh && rm->fresh});
	else
		msg_encode_SANDBOX_SNAPSHOT(
		    &w,
		    &(Msg_SANDBOX_SNAPSHOT){.key = thread_id, .label = label, .tenant = tenant});
	/* f is answered either way: on a send failure, with that errno */
	ret =
	    request_shim_relay(p, f, c, NULL, restore ? MSG_SANDBOX_RESTORE : MSG_SANDBOX_SNAPSHOT,
			       &w, (usec_t)c->conf.snapshot_wait_ms * USEC_PER_MSEC,
			       restore ? &restore_relay : &snapshot_relay, &r);
	if (r >= 0) {
		LogCtx lc = {.thread_id = thread_id};
		log_ctx(LOG_INFO, &lc, "%s requested", restore ? "Restore" : "Snapshot");
	}
	mp_writer_done(&w);
out:
	return ret;
}

int
handle_snapshot_create(Peer *p, const Frame *f, const Msg_SNAPSHOT_CREATE *m, void *ud)
{
	return handle_snapshot(p, f, ud, m->thread_id, m->label, m->tenant, NULL);
}

int
handle_snapshot_restore(Peer *p, const Frame *f, const Msg_SNAPSHOT_RESTORE *m, void *ud)
{
	return handle_snapshot(p, f, ud, m->thread_id, NULL, m->tenant, m);
}

static const PeerRelayOps list_relay = {
    .fallback = "snapshot list failed",
    SHIM_RELAY_UNAVAILABLE,
};

static int dispatch_list_again(Peer *p, const Frame *f, void *userdata);

/* SNAPSHOT_LIST: the shim's SANDBOX_SNAPSHOTS ({records}), as it is. */
int
handle_snapshot_list(Peer *p, const Frame *f, const Msg_SNAPSHOT_LIST *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	MpWriter w;
	int r;

	if (!request_thread_id_ok(p, f, m->thread_id, REASON_BAD_REQUEST))
		return 0;
	if (placement_run_start(c, p, f, m->thread_id, dispatch_list_again, ud))
		return 0;
	mp_writer_init(&w);
	msg_encode_SANDBOX_SNAPSHOTS(
	    &w, &(Msg_SANDBOX_SNAPSHOTS){.key = m->thread_id, .delete = m->delete});
	r = request_shim_relay(p, f, c, REASON_SHIM_UNAVAILABLE, MSG_SANDBOX_SNAPSHOTS, &w,
			       30 * USEC_PER_SEC, &list_relay, NULL);
	mp_writer_done(&w);
	return r;
}

MSG_HANDLER(dispatch_list_again, SNAPSHOT_LIST, handle_snapshot_list)

/* handled again once this node owns the thread (placement_run_start) */
MSG_HANDLER(dispatch_create_again, SNAPSHOT_CREATE, handle_snapshot_create)
MSG_HANDLER(dispatch_restore_again, SNAPSHOT_RESTORE, handle_snapshot_restore)
