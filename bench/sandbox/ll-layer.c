/* SPDX-License-Identifier: MIT */
/* B6 addendum: what the per-exec Landlock layer (sandbox-linux.c exec_ll_fd)
 * adds to an exec: landlock_restrict_self() timed inside forked children,
 * against an empty measurement (the clock floor), alternating, 2000 each.
 * Build and run: cc -O2 -o /tmp/ll-layer bench/sandbox/ll-layer.c &&
 * taskset -c 1 /tmp/ll-layer */
#define _GNU_SOURCE
#include <linux/landlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
static double
now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int
cmp(const void *a, const void *b)
{
	double x = *(double *)a, y = *(double *)b;
	return x < y ? -1 : x > y;
}
int
main(int argc, char **argv)
{
	int n = 2000;
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	struct landlock_ruleset_attr a = {.handled_access_fs = LANDLOCK_ACCESS_FS_MAKE_BLOCK |
							       LANDLOCK_ACCESS_FS_REFER};
	int rs = syscall(SYS_landlock_create_ruleset, &a, sizeof(a), 0);
	struct landlock_path_beneath_attr r = {.allowed_access = a.handled_access_fs,
					       .parent_fd = open("/", O_PATH)};
	syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &r, 0);
	static double t[2][4000];
	int pp[2];
	pipe(pp);
	for (int i = 0; i < 2 * n; i++) {
		int with = i & 1;
		double t0 = now();
		pid_t p = fork();
		if (!p) {
			double a0 = now();
			if (with && syscall(SYS_landlock_restrict_self, rs, 0) < 0)
				_exit(1);
			double d = now() - a0;
			write(pp[1], &d, sizeof d);
			_exit(0);
		}
		int st;
		waitpid(p, &st, 0);
		if (st)
			return 1;
		double d;
		read(pp[0], &d, sizeof d);
		t[with][i / 2] = d;
		(void)t0;
	}
	for (int w = 0; w < 2; w++) {
		qsort(t[w], n, sizeof(double), cmp);
		printf("%s: p50 %.1f us p99 %.1f us\n",
		       w ? "landlock_restrict_self" : "nothing (clock floor)", t[w][n / 2],
		       t[w][n * 99 / 100]);
	}
}
