/* SPDX-License-Identifier: MIT */
/*
 * files.c — THREAD_FILE: routerd's /threads/{id}/files requests, passed to the
 * shim as SANDBOX_FILE keyed by the thread id (the key of SANDBOX_ENSURE), and
 * the shim's reply passed back as it is.
 *
 * A thread needs no run for this: a harness may seed files before the first
 * run, and a thread that never had one reads as an empty workspace (the shim
 * decides). Nothing here touches the run log but the thread's owner
 * (tenant.c).
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "mp-cursor.h"

/* The shim serves a file synchronously; a cap-sized file takes well under this. */
#define FILE_CALL_TIMEOUT (60 * USEC_PER_SEC)

/* The shim's reply is the answer, passed on as it is. */
static const PeerRelayOps file_relay = {
    .fallback = "file operation failed",
    SHIM_RELAY_UNAVAILABLE,
};

static int dispatch_again(Peer *p, const Frame *f, void *userdata);

static bool
file_op_reads(const char *op)
{
	return streq(op, "get") || streq(op, "read") || streq(op, "list") || streq(op, "lstat");
}

int
handle_thread_file(Peer *p, const Frame *f, const Msg_THREAD_FILE *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *tenant = m->tenant;
	MpWriter w;
	int ret = 0;

	if (!request_thread_id_ok(p, f, m->thread_id, REASON_BAD_REQUEST))
		goto out;
	/* cluster mode: the thread's workspace is on its owner (a claim, as a
	 * first run makes) */
	if (placement_run_start(c, p, f, m->thread_id, dispatch_again, ud))
		goto out;
	/* a write or mkdir makes the thread's workspace: the thread becomes the
	 * tenant's (tenant.c), and only its owner changes it; reads are the
	 * token's scope's to allow (an operator reads every thread) */
	if (!tenant_request_ok(p, f, &tenant))
		goto out;
	if (!file_op_reads(m->op) && !tenant_admit(c, p, f, m->thread_id, tenant, false, &ret))
		goto out;
	if (!request_reuse_ok(p, f, c,
			      "with reuse = none each run has its own workspace and a "
			      "thread has none"))
		goto out;
	Msg_SANDBOX_FILE sf = {
	    .key = m->thread_id,
	    .op = m->op,
	    .path = m->path,
	    .path_len = m->path_len,
	    .to = m->to,
	    .to_len = m->to_len,
	    .has_to = m->has_to,
	    .data = m->data,
	    .data_len = m->data_len,
	    .has_data = m->has_data,
	    .mode = m->mode,
	    .has_mode = m->has_mode && m->mode >= 0,
	    .parents = m->parents,
	    .has_parents = m->has_parents && m->parents,
	    .recursive = m->recursive,
	    .has_recursive = m->has_recursive && m->recursive,
	    .force = m->force,
	    .has_force = m->has_force && m->force,
	    .overwrite = m->overwrite,
	    .has_overwrite = m->has_overwrite && m->overwrite,
	};
	mp_writer_init(&w);
	msg_encode_SANDBOX_FILE(&w, &sf);
	ret = request_shim_relay(p, f, c, REASON_SHIM_UNAVAILABLE, MSG_SANDBOX_FILE, &w,
				 FILE_CALL_TIMEOUT, &file_relay, NULL);
	mp_writer_done(&w);
out:
	return ret;
}

MSG_HANDLER(dispatch_again, THREAD_FILE, handle_thread_file)
