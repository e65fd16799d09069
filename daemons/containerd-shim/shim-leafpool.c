/* SPDX-License-Identifier: MIT */
/*
 * shim-leafpool.c — exec cgroup leaves made ahead (shim-int.h "leafpool_*").
 *
 * Every exec runs in its own cgroup2 leaf <sandbox cgroup>/e<exec id>
 * (shim-exec.c). Making one (mkdir in the cgroupfs, open, delegating its
 * cgroup.procs) was a third of the shim's work for an exec of `true`. A
 * sandbox that ran an exec keeps LEAF_POOL of them ready: each with its exec
 * id already allocated and counted (adopt_counter_store), so the leaf is
 * named as it would have been, and everything that finds a leaf by its exec
 * id (kill, removal, adoption) is unchanged. The refill runs from the event
 * loop after the EXEC_START that took one, while the exec runs.
 *
 * Nothing is given up: the leaf is the same delegated, empty leaf, the exec
 * is still born in it (CLONE_INTO_CGROUP). A pooled leaf that no exec took is
 * empty; it goes with the sandbox cgroup (cgroup_remove removes leaves first)
 * or, after a restart of the shim, with the adopted sandbox's prune.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <event2/event.h>

#include "shim-int.h"

static void
leafpool_fill_cb(evutil_socket_t fd, short what, void *arg)
{
	Sandbox *sb = arg;
	Shim *s = sb->shim;

	while (sb->n_leaves < LEAF_POOL && sb->state == SANDBOX_READY && sb->cg &&
	       cgroup_has_leaves(sb->cg)) {
		Reason why = {""};
		uint64_t id = ++s->next_exec_id;
		int lfd = -1;
		int r;

		adopt_counter_store(s->counter_fd, id);
		r = cgroup_leaf_create(sb->cg, id, &lfd, &why);
		if (r < 0) {
			/* EXEC_START makes its own and reports why it cannot */
			log_debug("Cannot make an exec cgroup ahead for sandbox %s: %s", sb->id,
				  reason_text(&why, r));
			return;
		}
		sb->leaf_ids[sb->n_leaves] = id;
		sb->leaf_fds[sb->n_leaves++] = lfd;
	}
}

static void
leafpool_schedule(Sandbox *sb)
{
	if (!sb->leaf_ev)
		sb->leaf_ev = event_new(sb->shim->base, -1, 0, leafpool_fill_cb, sb);
	if (sb->leaf_ev)
		event_active(sb->leaf_ev, 0, 0);
}

int
leafpool_take(Sandbox *sb, uint64_t *ret_id, int *ret_fd)
{
	int r = 0;

	if (sb->n_leaves > 0) {
		/* the oldest first: ids stay in the order they were counted */
		*ret_id = sb->leaf_ids[0];
		*ret_fd = sb->leaf_fds[0];
		sb->n_leaves--;
		for (unsigned i = 0; i < sb->n_leaves; i++) {
			sb->leaf_ids[i] = sb->leaf_ids[i + 1];
			sb->leaf_fds[i] = sb->leaf_fds[i + 1];
		}
		r = 1;
	}
	if (sb->cg && cgroup_has_leaves(sb->cg))
		leafpool_schedule(sb);
	return r;
}

bool
leafpool_has(const Sandbox *sb, uint64_t id)
{
	for (unsigned i = 0; i < sb->n_leaves; i++)
		if (sb->leaf_ids[i] == id)
			return true;
	return false;
}

void
leafpool_drop(Sandbox *sb)
{
	for (unsigned i = 0; i < sb->n_leaves; i++)
		safe_close(sb->leaf_fds[i]);
	sb->n_leaves = 0;
	if (sb->leaf_ev) {
		event_free(sb->leaf_ev);
		sb->leaf_ev = NULL;
	}
}
