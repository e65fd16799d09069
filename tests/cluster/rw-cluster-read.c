/* SPDX-License-Identifier: MIT */
/*
 * rw-cluster-read — print a run's events as JetStream holds them (the e2e
 * tests' reader of RW_RUNS, tests/e2e/t_cluster.py).
 *
 *     rw-cluster-read URL[,URL...] RUN_ID
 *
 * One line per event, in seq order: "<seq> <stream_seq> <hex of the bytes>".
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
		putchar('\n');
	}
	r->got = n;
	r->next_seq = next_stream_seq;
	r->done = true;
}

int
main(int argc, char **argv)
{
	struct event_base *base;
	char *urls[17] = {0};
	size_t nu = 0;
	Cluster *c = NULL;

	if (argc != 3) {
		fprintf(stderr, "usage: rw-cluster-read URL[,URL...] RUN_ID\n");
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
			    .connect_wait_ms = 5000};
	if (cluster_new(base, &o, &(ClusterCallbacks){0}, NULL, &c) < 0)
		return 1;
	while (cluster_state(c) == CLUSTER_CONNECTING)
		event_base_loop(base, EVLOOP_ONCE);
	int r = 0;
	uint64_t from_seq = 0, start = 0;
	for (;;) {
		Reader rd = {.run = argv[2]};
		r = cluster_read_events(c, argv[2], from_seq, start, 256, read_cb, &rd);
		while (r == 0 && !rd.done)
			event_base_loop(base, EVLOOP_ONCE);
		if (r == 0)
			r = rd.err;
		if (r < 0 || rd.got < 256)
			break;
		from_seq += rd.got;
		start = rd.next_seq;
	}
	if (r < 0)
		fprintf(stderr, "rw-cluster-read: %s\n", strerror(-r));
	fflush(stdout);
	cluster_free(c);
	event_base_free(base);
	return r < 0 ? 1 : 0;
}
