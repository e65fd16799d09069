/* SPDX-License-Identifier: MIT */
/*
 * fsync-probe — the disk's sync floor (BENCH-RELIABILITY B3): 4 KiB pwrite +
 * fdatasync, N times, in DIR. Prints one JSON line with p50/p99 (seconds).
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-util.h"

int
main(int argc, char **argv)
{
	char path[4096], buf[4096];

	if (argc != 3) {
		fprintf(stderr, "usage: fsync-probe DIR N\n");
		return 2;
	}
	long n = atol(argv[2]);
	snprintf(path, sizeof(path), "%s/fsync-probe.dat", argv[1]);
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || n <= 0)
		return 1;
	memset(buf, 'x', sizeof(buf));
	double *lat = calloc((size_t)n, sizeof(double));
	for (long i = 0; i < n; i++) {
		double s = bench_now();
		if (pwrite(fd, buf, sizeof(buf), (off_t)(i % 4096) * 4096) !=
			(ssize_t)sizeof(buf) ||
		    fdatasync(fd) < 0)
			return 1;
		lat[i] = bench_now() - s;
	}
	printf("{\"n\":%ld,\"p50\":%.6f,\"p99\":%.6f}\n", n, bench_percentile(lat, (size_t)n, 50),
	       bench_percentile(lat, (size_t)n, 99));
	close(fd);
	unlink(path);
	free(lat);
	return 0;
}
