/* SPDX-License-Identifier: MIT */
/*
 * append-bench — drives coordinatord's direct run-log API (RUN_APPEND, each
 * acknowledged only after its commit) the way BENCH-RELIABILITY B1/B2 ask:
 *
 *   append-bench SOCK serial EVENTS
 *       one client, one event per request, the next sent after the ack
 *   append-bench SOCK concurrent EVENTS CONNS RUNS
 *       CONNS connections, each with one append in flight, over RUNS runs
 *
 * Prints one JSON line: events/s, p50/p99 ack latency (seconds).
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-util.h"
#include "mp-cursor.h"
#include "proto.h"

static char chunk[256];

static int64_t
send_append(BenchConn *c, const char *run_id)
{
	MpWriter w;
	mp_writer_init(&w);
	mp_w_map(&w, 2);
	mp_w_str(&w, "run_id", run_id);
	mp_w_str(&w, "chunk", chunk);
	int64_t r = bench_send(c, MSG_RUN_APPEND, w.sbuf.data, w.sbuf.size);
	mp_writer_done(&w);
	return r;
}

static int
check_reply(Frame *f)
{
	int ok = f->type == MSG_REPLY;
	if (!ok)
		fprintf(stderr, "append-bench: append refused (type %d)\n", f->type);
	frame_done(f);
	return ok ? 0 : -EIO;
}

int
main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: append-bench SOCK serial|concurrent EVENTS [CONNS RUNS]\n");
		return 2;
	}
	const char *sock = argv[1];
	long n = atol(argv[3]);
	int conns = argc > 4 ? atoi(argv[4]) : 1, nruns = argc > 5 ? atoi(argv[5]) : 1;
	if (strcmp(argv[2], "serial") == 0)
		conns = nruns = 1;
	if (n <= 0 || conns <= 0 || nruns <= 0 || conns > 1024)
		return 2;
	/* a 256-byte chunk, like the reference's values */
	memset(chunk, 'x', sizeof(chunk) - 1);
	memcpy(chunk, "{\"type\":\"CUSTOM\",\"name\":\"b\",\"value\":\"", 37);
	memcpy(chunk + sizeof(chunk) - 3, "\"}", 3);

	BenchConn *c = calloc((size_t)conns, sizeof(*c));
	char(*runs)[37] = calloc((size_t)nruns, 37);
	struct pollfd *pfd = calloc((size_t)conns, sizeof(*pfd));
	double *sent_at = calloc((size_t)conns, sizeof(double));
	double *lat = calloc((size_t)n, sizeof(double));
	for (int i = 0; i < conns; i++)
		if (bench_connect(&c[i], sock) < 0) {
			fprintf(stderr, "append-bench: cannot connect to %s\n", sock);
			return 1;
		}
	for (int i = 0; i < nruns; i++) {
		char thread[32];
		snprintf(thread, sizeof(thread), "bench-%d", i);
		if (bench_run_open(&c[0], thread, runs[i]) < 0)
			return 1;
	}
	long started = 0, done = 0;
	double t0 = bench_now();
	for (int i = 0; i < conns && started < n; i++, started++) {
		sent_at[i] = bench_now();
		if (send_append(&c[i], runs[i % nruns]) < 0)
			return 1;
	}
	while (done < n) {
		for (int i = 0; i < conns; i++)
			pfd[i] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
		if (poll(pfd, (nfds_t)conns, 10000) <= 0)
			return 1;
		for (int i = 0; i < conns; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			if (bench_fill(&c[i]) < 0)
				return 1;
			Frame f;
			int r;
			while ((r = bench_try_frame(&c[i], &f)) == 1) {
				if (check_reply(&f) < 0)
					return 1;
				lat[done++] = bench_now() - sent_at[i];
				if (started < n) {
					sent_at[i] = bench_now();
					if (send_append(&c[i], runs[(started) % nruns]) < 0)
						return 1;
					started++;
				}
			}
			if (r < 0)
				return 1;
		}
	}
	double el = bench_now() - t0;
	printf("{\"events\":%ld,\"conns\":%d,\"runs\":%d,\"seconds\":%.6f,\"events_per_s\":%.1f,"
	       "\"p50\":%.6f,\"p99\":%.6f}\n",
	       n, conns, nruns, el, (double)n / el, bench_percentile(lat, (size_t)n, 50),
	       bench_percentile(lat, (size_t)n, 99));
	for (int i = 0; i < conns; i++)
		bench_close(&c[i]);
	free(c);
	free(runs);
	free(pfd);
	free(sent_at);
	free(lat);
	return 0;
}
