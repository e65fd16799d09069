/* SPDX-License-Identifier: MIT */
/*
 * watch.c — the watch list: which client watches which run (RUN_WATCH), and
 * RUN_EVENTS to them.
 *
 * A leaf: it knows clients and runs by id, nothing of the commit, the driver
 * or the cluster. commit.c's deliveries (publish.c, replicate-commit.c)
 * publish committed events here; coordinator.c adds and drops watches;
 * remote.c adds the watches of runs another node owns (Watch.remote, which
 * remote_watch_drop ends: the caller's to call before watch_remove frees).
 */
#include "config.h"

#include "commit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

Watch *
watch_find(Coordinator *c, const Client *cl, const char *run_id)
{
	for (Watch *w = c->watches; w; w = w->next)
		if ((!cl || w->client == cl) && streq(w->run_id, run_id))
			return w;
	return NULL;
}

int
watch_add(Coordinator *c, Client *cl, const char *run_id, Watch **ret)
{
	Watch *w = watch_find(c, cl, run_id);
	if (!w) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		snprintf(w->run_id, sizeof(w->run_id), "%s", run_id);
		w->client = cl;
		w->next = c->watches;
		c->watches = w;
	}
	if (ret)
		*ret = w;
	return 0;
}

void
watch_remove(Coordinator *c, const Client *cl, const char *run_id,
	     void (*drop)(Coordinator *c, Watch *w))
{
	for (Watch **pp = &c->watches; *pp;) {
		if ((*pp)->client == cl && (!run_id || streq((*pp)->run_id, run_id))) {
			Watch *w = *pp;
			*pp = w->next;
			if (drop)
				drop(c, w);
			free(w);
		} else
			pp = &(*pp)->next;
	}
}

void
publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	const size_t *lens, size_t n, const json_t *record)
{
	_cleanup_free_ char *rec = NULL;
	MpWriter w;

	if (!watch_find(c, NULL, run_id))
		return;
	rec = json_dump_compact(record);
	if (!rec)
		return;
	mp_writer_init(&w);
	mp_w_map(&w, 4);
	mp_w_str(&w, "run_id", run_id);
	mp_w_int(&w, "first_seq", first_seq);
	mp_w_key(&w, "events");
	msgpack_pack_array(&w.pk, n);
	for (size_t i = 0; i < n; i++)
		mp_w_strn(&w, texts[i], lens[i]);
	mp_w_str(&w, "record", rec);
	for (Watch *wt = c->watches; wt; wt = wt->next)
		if (streq(wt->run_id, run_id))
			(void)peer_push(wt->client->peer, MSG_RUN_EVENTS, &w);
	mp_writer_done(&w);
}
