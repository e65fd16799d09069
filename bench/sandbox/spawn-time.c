/* SPDX-License-Identifier: MIT */
/*
 * spawn-time — the one harness B6 times every contender with: fork + execvp +
 * waitpid of a command, N times, from P worker processes at once.
 *
 *   spawn-time N P TAG -- CMD... [--then CMD2...]
 *
 * "%K" in an argument is replaced by a key unique to the iteration
 * (TAG-WORKER-I), so every shim iteration gets a fresh sandbox. With --then,
 * CMD2 (e.g. "shimctl SOCK %K --destroy") runs right after CMD, timed
 * separately. Prints one JSON object: wall time, per-iteration latencies in
 * microseconds of CMD ("a") and CMD2 ("b"), and the count of non-zero exits.
 * stdout/stderr of the commands go to /dev/null.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double
now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static char **
subst(char **argv, int n, const char *key)
{
	char **out = calloc((size_t)n + 1, sizeof(char *));
	for (int i = 0; i < n; i++) {
		char *p = strstr(argv[i], "%K");
		if (!p) {
			out[i] = argv[i];
			continue;
		}
		size_t len = strlen(argv[i]) + strlen(key);
		out[i] = malloc(len + 1);
		snprintf(out[i], len + 1, "%.*s%s%s", (int)(p - argv[i]), argv[i], key, p + 2);
	}
	return out;
}

/* Returns the latency in µs; *bad set when the exit status is not 0. */
static double
run(char **argv, int *bad)
{
	double t0 = now_us();
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(1);
	}
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);
		dup2(fd, 1);
		dup2(fd, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		;
	double dt = now_us() - t0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		(*bad)++;
	return dt;
}

int
main(int argc, char **argv)
{
	if (argc < 5 || strcmp(argv[4], "--")) {
		fprintf(stderr, "usage: spawn-time N P TAG -- CMD... [--then CMD2...]\n");
		return 2;
	}
	int n = atoi(argv[1]), par = atoi(argv[2]);
	const char *tag = argv[3];
	char **a = argv + 5, **b = NULL;
	int na = 0, nb = 0;
	for (int i = 5; i < argc; i++)
		if (!strcmp(argv[i], "--then")) {
			argv[i] = NULL;
			b = argv + i + 1;
			nb = argc - i - 1;
			break;
		}
	while (a[na])
		na++;
	/* shared results: lat_a[n], lat_b[n], bad[par] */
	size_t sz = sizeof(double) * 2 * (size_t)n + sizeof(int) * (size_t)par;
	double *lat = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int *bad = (int *)(lat + 2 * n);
	double t0 = now_us();
	for (int w = 0; w < par; w++) {
		pid_t pid = fork();
		if (pid == 0) {
			for (int i = w; i < n; i += par) {
				char key[128];
				snprintf(key, sizeof key, "%s-%d-%d", tag, w, i);
				char **aa = subst(a, na, key);
				lat[i] = run(aa, &bad[w]);
				if (b) {
					char **bb = subst(b, nb, key);
					lat[n + i] = run(bb, &bad[w]);
				}
			}
			_exit(0);
		}
	}
	while (wait(NULL) > 0)
		;
	double wall = now_us() - t0;
	int nbad = 0;
	for (int w = 0; w < par; w++)
		nbad += bad[w];
	printf("{\"n\":%d,\"par\":%d,\"wall_us\":%.1f,\"bad\":%d,\"a\":[", n, par, wall, nbad);
	for (int i = 0; i < n; i++)
		printf("%s%.1f", i ? "," : "", lat[i]);
	printf("],\"b\":[");
	for (int i = 0; b && i < n; i++)
		printf("%s%.1f", i ? "," : "", lat[n + i]);
	printf("]}\n");
	return 0;
}
