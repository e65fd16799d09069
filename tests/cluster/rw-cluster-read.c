/* SPDX-License-Identifier: MIT */
/*
 * rw-cluster-read — print a run's events as JetStream holds them (the e2e
 * tests' reader of RW_RUNS, tests/e2e/t_cluster.py).
 *
 *     rw-cluster-read URL[,URL...] RUN_ID
 *     rw-cluster-read URL[,URL...] RUN_ID steal
 *
 * One line per event, in seq order: "<seq> <stream_seq> <hex of the bytes>
 * <writer>" (its Rw-Writer, the process that published it).
 *     rw-cluster-read URL[,URL...] RUN_ID record
 *
 * With record: print the run's record in rw_runs (exit 1 when it has none).
 *     rw-cluster-read URL[,URL...] RUN_ID purge
 *
 * With purge: remove the run from the cluster (its events and record), as
 * retention does: a test's way to make the cluster lack what a node holds.
 * With steal: append one event to the run as another writer would (a new
 * owner: the run's last event read at the leader, the next seq, fenced on
 * it), so that the run's writer is fenced from then on; prints its seq.
 *     rw-cluster-read URL[,URL...] KEY idem RUN_ID
 *
 * With idem: create the rw_idem entry KEY (sha256 hex of the thread id, a
 * NUL and the Idempotency-Key) naming RUN_ID, and start no run — as a
 * create whose answer was lost leaves it (issue 35: a key's run that never
 * started).
 * Exit status 0, or 1 with the error on stderr.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "macro.h"

typedef struct Reader {
	bool done;
	int err;
	const char *run;
	uint64_t next_seq;
	size_t got;
} Reader;

static void
read_cb(Cluster *c, int err, const ClusterReadEvent *ev, size_t n, uint64_t next_stream_seq,
	void *ud)
{
	Reader *r = ud;
	r->err = err;
	for (size_t i = 0; err == 0 && i < n; i++) {
		printf("%" PRIu64 " %" PRIu64 " ", ev[i].seq, ev[i].stream_seq);
		for (size_t k = 0; k < ev[i].len; k++)
			printf("%02x", ((const unsigned char *)ev[i].data)[k]);
		printf(" %s\n", ev[i].writer);
	}
	r->got = n;
	r->next_seq = next_stream_seq;
	r->done = true;
}

typedef struct Steal {
	bool done;
	int err;
	ClusterRunLast last;
} Steal;

static void
last_cb(Cluster *c, int err, const ClusterRunLast *last, void *ud)
{
	Steal *s = ud;
	s->err = err;
	if (err == 0)
		s->last = *last;
	s->done = true;
}

static void
pub_cb(Cluster *c, const ClusterPublishResult *r, void *ud)
{
	Steal *s = ud;
	s->err = r->err;
	s->done = true;
}

static int
steal(struct event_base *base, Cluster *c, const char *run)
{
	static const char ev[] = "{\"type\":\"CUSTOM\",\"name\":\"rw.test.steal\"}";
	Steal s = {0};
	int r = cluster_run_last(c, run, last_cb, &s);
	while (r == 0 && !s.done)
		event_base_loop(base, EVLOOP_ONCE);
	if (r == 0)
		r = s.err;
	if (r < 0)
		return r;
	ClusterEvent e = {ev, strlen(ev)};
	uint64_t seq = s.last.seq + 1;
	s.done = false;
	r = cluster_publish_events(c, run, seq, &e, 1, s.last.stream_seq, pub_cb, &s);
	while (r == 0 && !s.done)
		event_base_loop(base, EVLOOP_ONCE);
	if (r == 0)
		r = s.err;
	if (r == 0)
		printf("%" PRIu64 "\n", seq);
	return r;
}

static int
read_all(struct event_base *base, Cluster *c, const char *run)
{
	uint64_t from_seq = 0, start = 0;
	int r;
	for (;;) {
		Reader rd = {.run = run};
		r = cluster_read_events(c, run, from_seq, start, 256, read_cb, &rd);
		while (r == 0 && !rd.done)
			event_base_loop(base, EVLOOP_ONCE);
		if (r == 0)
			r = rd.err;
		if (r < 0 || rd.got < 256)
			return r;
		from_seq += rd.got;
		start = rd.next_seq;
	}
}

typedef struct Rec {
	bool done, found;
	int err;
	const char *run;
} Rec;

static void
list_cb(Cluster *c, int err, const ClusterKv *kv, size_t n, void *ud)
{
	Rec *r = ud;
	r->err = err;
	for (size_t i = 0; i < n; i++)
		if (streq(kv[i].key, r->run)) {
			printf("%.*s\n", (int)kv[i].len, (const char *)kv[i].value);
			r->found = true;
		}
	r->done = true;
}

static int
record(struct event_base *base, Cluster *c, const char *run)
{
	Rec rec = {.run = run};
	int r = cluster_list(c, CLUSTER_RUNS, list_cb, &rec);
	while (r == 0 && !rec.done)
		event_base_loop(base, EVLOOP_ONCE);
	return r < 0 ? r : rec.err < 0 ? rec.err : rec.found ? 0 : -ENOENT;
}

static void
purge_cb(Cluster *c, int err, void *ud)
{
	Rec *r = ud;
	r->err = err;
	r->done = true;
}

static int
purge(struct event_base *base, Cluster *c, const char *run)
{
	Rec rec = {.run = run};
	int r = cluster_purge_run(c, run, purge_cb, &rec);
	while (r == 0 && !rec.done)
		event_base_loop(base, EVLOOP_ONCE);
	return r < 0 ? r : rec.err;
}

static void
idem_cb(Cluster *c, int err, const void *data, size_t len, void *ud)
{
	purge_cb(c, err, ud);
}

static int
idem(struct event_base *base, Cluster *c, const char *key, const char *run)
{
	Rec rec = {.run = run};
	int r = cluster_idem_claim(c, key, run, idem_cb, &rec);
	while (r == 0 && !rec.done)
		event_base_loop(base, EVLOOP_ONCE);
	return r < 0 ? r : rec.err;
}

int
main(int argc, char **argv)
{
	struct event_base *base;
	char *urls[17] = {0};
	size_t nu = 0;
	Cluster *c = NULL;

	if (argc != 3 &&
	    !(argc == 4 &&
	      (streq(argv[3], "steal") || streq(argv[3], "record") || streq(argv[3], "purge"))) &&
	    !(argc == 5 && streq(argv[3], "idem"))) {
		fprintf(stderr, "usage: rw-cluster-read URL[,URL...] RUN_ID [steal|record|purge]\n"
				"       rw-cluster-read URL[,URL...] KEY idem RUN_ID\n");
		return 1;
	}
	for (char *s = strtok(argv[1], ","); s && nu < 16; s = strtok(NULL, ","))
		urls[nu++] = s;
	if (cluster_global_init() < 0 || !(base = event_base_new()))
		return 1;
	ClusterOptions o = {.servers = (const char *const *)urls,
			    .node = "reader",
			    .replicas = 3,
			    .node_ttl_ms = 10000,
			    .connect_wait_ms = 20000};
	if (cluster_new(base, &o, &(ClusterCallbacks){0}, NULL, &c) < 0)
		return 1;
	while (cluster_state(c) == CLUSTER_CONNECTING)
		event_base_loop(base, EVLOOP_ONCE);
	int r = argc == 3		  ? read_all(base, c, argv[2])
		: streq(argv[3], "steal") ? steal(base, c, argv[2])
		: streq(argv[3], "purge") ? purge(base, c, argv[2])
		: streq(argv[3], "idem")  ? idem(base, c, argv[2], argv[4])
					  : record(base, c, argv[2]);
	if (r < 0)
		fprintf(stderr, "rw-cluster-read: %s\n", strerror(-r));
	fflush(stdout);
	cluster_free(c);
	event_base_free(base);
	return r < 0 ? 1 : 0;
}
