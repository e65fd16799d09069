/* SPDX-License-Identifier: MIT */
/*
 * bench-util.h — small shared helpers of the benchmark programs: a blocking
 * IPC client of coordinatord (the direct run-log API) and percentiles.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

typedef struct BenchConn {
	int fd;
	char *buf;
	size_t len, cap;
	uint64_t next_id;
} BenchConn;

/* Connect and exchange HELLO as role "client". 0 or a negative errno. */
int bench_connect(BenchConn *c, const char *path);
void bench_close(BenchConn *c);
/* Send a request with a packed msgpack map body; returns its req_id (> 0) or < 0. */
int64_t bench_send(BenchConn *c, int type, const void *body, size_t len);
/* Blocking read of one frame (caller frame_done). 0 or a negative errno. */
int bench_recv(BenchConn *c, Frame *ret);
/* 1 when bytes are buffered already (a frame may be decodable without a read). */
int bench_buffered(BenchConn *c);
/* Try to decode a frame from what is buffered: 1 got one, 0 need more. */
int bench_try_frame(BenchConn *c, Frame *ret);
/* read() once into the buffer (after poll said readable). */
int bench_fill(BenchConn *c);

/* RUN_OPEN → run id (37 bytes with NUL). */
int bench_run_open(BenchConn *c, const char *thread, char run_id[37]);

double bench_now(void);
/* Sort in place and return the p-th percentile (0..100). */
double bench_percentile(double *v, size_t n, double p);
