/* SPDX-License-Identifier: MIT */
/*
 * cluster-floor — the least a node does for cluster-bench.sh's two shapes:
 * the JetStream publishes alone (libcluster, R = 3, each fenced on the
 * run's previous message), no LMDB, no coordinatord, no client socket. What
 * cluster mode's append could reach on the same machine and NATS servers.
 *
 *   cluster-floor URL[,URL...] serial EVENTS
 *       one run, one event per publish, the next after its acknowledgement
 *   cluster-floor URL[,URL...] concurrent EVENTS RUNS PER_MSG
 *       RUNS runs at once, each publishing PER_MSG events per message (what
 *       a commit of 64 appenders over 16 runs gives a run: 4), its next
 *       once acknowledged
 *
 * Prints one JSON line as append-bench does: events/s, p50/p99 of a
 * publish's acknowledgement (seconds).
 */
#include "config.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "macro.h"
#include "time-util.h"

#define MAX_RUNS 256

typedef struct Chain {
	char run[64];
	uint64_t next, expected;
	usec_t sent;
	bool busy;
} Chain;

static Cluster *cl;
static Chain chains[MAX_RUNS];
static size_t n_runs, per_msg, total, sent_events, done_events, n_lat;
static uint64_t *lat;
static char chunk[200];
static int failed;

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void send_next(Chain *ch);

static void
on_pub(Cluster *c, const ClusterPublishResult *r, void *ud)
{
	Chain *ch = ud;
	ch->busy = false;
	if (r->err < 0) {
		fprintf(stderr, "cluster-floor: publish: %s\n", strerror(-r->err));
		failed = 1;
		return;
	}
	lat[n_lat++] = now_usec() - ch->sent;
	ch->expected = r->last_stream_seq;
	done_events += r->n_done;
	send_next(ch);
}

static void
send_next(Chain *ch)
{
	ClusterEvent ev[64];
	size_t n = per_msg;
	if (sent_events >= total || failed)
		return;
	for (size_t i = 0; i < n; i++)
		ev[i] = (ClusterEvent){chunk, sizeof(chunk) - 1};
	ch->sent = now_usec();
	ch->busy = true;
	if (cluster_publish_events(cl, ch->run, ch->next, ev, n, ch->expected, on_pub, ch) < 0) {
		failed = 1;
		return;
	}
	ch->next += n;
	sent_events += n;
}

int
main(int argc, char **argv)
{
	char *urls[17] = {0};
	size_t nu = 0;
	bool serial = argc == 4 && streq(argv[2], "serial");

	if (!serial && !(argc == 6 && streq(argv[2], "concurrent"))) {
		fprintf(stderr, "usage: cluster-floor URLS serial EVENTS\n"
				"       cluster-floor URLS concurrent EVENTS RUNS PER_MSG\n");
		return 2;
	}
	total = strtoul(argv[3], NULL, 10);
	n_runs = serial ? 1 : strtoul(argv[4], NULL, 10);
	per_msg = serial ? 1 : strtoul(argv[5], NULL, 10);
	if (total == 0 || n_runs == 0 || n_runs > MAX_RUNS || per_msg == 0 || per_msg > 64)
		return 2;
	memset(chunk, 'x', sizeof(chunk) - 1);
	memcpy(chunk, "{\"type\":\"CUSTOM\",\"value\":\"", 26);
	chunk[sizeof(chunk) - 3] = '"';
	chunk[sizeof(chunk) - 2] = '}';
	for (char *s = strtok(argv[1], ","); s && nu < 16; s = strtok(NULL, ","))
		urls[nu++] = s;
	struct event_base *base;
	if (cluster_global_init() < 0 || !(base = event_base_new()))
		return 1;
	ClusterOptions o = {.servers = (const char *const *)urls,
			    .node = "floor",
			    .replicas = 3,
			    .node_ttl_ms = 10000,
			    .connect_wait_ms = 20000};
	if (cluster_new(base, &o, &(ClusterCallbacks){0}, NULL, &cl) < 0)
		return 1;
	while (cluster_state(cl) == CLUSTER_CONNECTING)
		event_base_loop(base, EVLOOP_ONCE);
	lat = calloc(total / per_msg + n_runs + 1, sizeof(*lat)); /* one per publish */
	if (!lat)
		return 1;
	unsigned tag = (unsigned)time(NULL) ^ (unsigned)getpid();
	for (size_t i = 0; i < n_runs; i++)
		snprintf(chains[i].run, sizeof(chains[i].run), "floor-%x-%zu", tag, i);
	usec_t t0 = now_usec();
	for (size_t i = 0; i < n_runs; i++)
		send_next(&chains[i]);
	for (;;) {
		bool busy = false;
		for (size_t i = 0; i < n_runs; i++)
			busy |= chains[i].busy;
		if (!busy || failed)
			break;
		event_base_loop(base, EVLOOP_ONCE);
	}
	double dt = (double)(now_usec() - t0) / 1e6;
	qsort(lat, n_lat, sizeof(*lat), cmp_u64);
	printf("{\"events\":%zu,\"runs\":%zu,\"per_msg\":%zu,\"seconds\":%.6f,"
	       "\"events_per_s\":%.1f,\"p50\":%.6f,\"p99\":%.6f}\n",
	       done_events, n_runs, per_msg, dt, (double)done_events / dt,
	       n_lat ? (double)lat[n_lat / 2] / 1e6 : 0.0,
	       n_lat ? (double)lat[n_lat * 99 / 100] / 1e6 : 0.0);
	cluster_free(cl);
	event_base_free(base);
	return failed;
}
