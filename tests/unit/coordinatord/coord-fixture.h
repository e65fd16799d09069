/* SPDX-License-Identifier: MIT */
/*
 * coord-fixture.h — the set-up coordinatord's unit tests that drive a real
 * Coordinator share (test-driver, test-commit): a private directory, the
 * real configuration path (defaults, derived values, the built-in shell
 * harness), a real LMDB run log in it, an event base with the daemon's three
 * priorities; and turning the loop until something holds.
 *
 * Header only (static inline functions); cmocka's setup/teardown call them.
 * The caller sets up the commit (commit_setup) and what else it drives.
 */
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "coordinatord.h"
#include "harness-conf.h"
#include "runlog.h"

/* Turn f->c's loop until cond holds (at most ~5 s). */
#define PUMP_UNTIL(f, cond)                                                                        \
	do {                                                                                       \
		for (int i_ = 0; i_ < 5000 && !(cond); i_++) {                                     \
			event_base_loop((f)->c.base, EVLOOP_NONBLOCK);                             \
			if (!(cond))                                                               \
				usleep(1000);                                                      \
		}                                                                                  \
		assert_true(cond);                                                                 \
	} while (0)

/* run_id's stored events (at most 1,000), each decoded and written by
 * show(m, event, i) into one string (malloc'd). */
static inline char *
coord_fixture_events(RunLog *l, const char *run_id,
		     void (*show)(FILE *m, const json_t *event, size_t i))
{
	RunLogEvents ev = {0};
	char *out = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&out, &len);

	assert_non_null(m);
	assert_int_equal(runlog_read(l, run_id, -1, 1000, &ev, NULL), 0);
	for (size_t i = 0; i < ev.n; i++) {
		json_t *j = json_loadb(ev.texts[i], ev.lens[i], 0, NULL);
		show(m, j, i);
		json_decref(j);
	}
	fclose(m);
	runlog_events_done(&ev);
	return out;
}

static inline int
coord_fixture_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* dir = a new /tmp/NAME-XXXXXX holding runwarden.conf (sync and
 * preallocation off, a 32M map, then the lines of extra in [coordinatord])
 * loaded into c->conf and h, and the run log; c->base with 3 priorities.
 * 0, or -1 for cmocka's setup. */
static inline int
coord_fixture_setup(char dir[static 64], Coordinator *c, HarnessSet *h, const char *name,
		    const char *extra)
{
	char conf[128], path[256];
	FILE *cf;

	log_open(name);
	snprintf(dir, 64, "/tmp/%s-XXXXXX", name);
	if (!mkdtemp(dir))
		return -1;
	snprintf(conf, sizeof(conf), "%s/runwarden.conf", dir);
	cf = fopen(conf, "w");
	if (!cf)
		return -1;
	fprintf(cf,
		"[runwarden]\nruntime_dir = %s\nstate_dir = %s\n"
		"[coordinatord]\nsync = no\npreallocate = no\nmap_size = 32M\n%s",
		dir, dir, extra ? extra : "");
	fclose(cf);
	DaemonArgs a = {.configs = {conf}, .n_configs = 1};
	if (coord_conf_load(&a, &c->conf, h) < 0)
		return -1;
	log_set_max_level(LOG_CRIT);
	c->harnesses = h;

	snprintf(path, sizeof(path), "%s/runlog", dir);
	RunLogOptions o = {.map_size = (size_t)c->conf.map_size, .sync = false};
	if (runlog_open(path, &o, &c->runlog) < 0)
		return -1;
	c->log_map = (uint64_t)c->conf.map_size;
	c->base = event_base_new();
	if (!c->base || event_base_priority_init(c->base, 3) < 0)
		return -1;
	return 0;
}

/* Free what coord_fixture_setup made and remove dir (after the caller's
 * commit_teardown and its own). */
static inline void
coord_fixture_teardown(const char *dir, Coordinator *c, HarnessSet *h)
{
	event_base_free(c->base);
	runlog_free(c->runlog);
	harness_set_done(h);
	coord_conf_done(&c->conf);
	nftw(dir, coord_fixture_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}
