/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "loop-lag.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "macro.h"

/* the upper bounds of the buckets, seconds (+Inf after them) */
static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
				0.25,  0.5,    1,     2.5,  5,	   10};

struct LoopLag {
	struct event *timer;
	struct timespec due;
	uint64_t buckets[ELEMENTSOF(bounds) + 1]; /* not cumulative; the last +Inf */
	uint64_t count;
	double sum, max;
};

static const struct {
	const char *name, *type, *help;
} families[_LOOP_LAG_FAMILY_MAX] = {
    [LOOP_LAG_HISTOGRAM] = {"runwarden_loop_lag_seconds", "histogram",
			    "How late the daemon's event loop ran a timer due every 100 ms: "
			    "what a request arriving then waited for the loop."},
    [LOOP_LAG_MAX] = {"runwarden_loop_lag_max_seconds", "gauge",
		      "The largest runwarden_loop_lag_seconds since the daemon started."},
};

static double
since(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void
arm(LoopLag *l)
{
	static const struct timeval iv = {0, LOOP_LAG_INTERVAL_MS * 1000};

	clock_gettime(CLOCK_MONOTONIC, &l->due);
	l->due.tv_nsec += LOOP_LAG_INTERVAL_MS * 1000000L;
	if (l->due.tv_nsec >= 1000000000L) {
		l->due.tv_sec++;
		l->due.tv_nsec -= 1000000000L;
	}
	(void)evtimer_add(l->timer, &iv);
}

static void
on_tick(evutil_socket_t fd, short what, void *userdata)
{
	LoopLag *l = userdata;
	struct timespec now;
	(void)fd;
	(void)what;

	clock_gettime(CLOCK_MONOTONIC, &now);
	double lag = since(&l->due, &now);
	loop_lag_record(l, lag > 0 ? lag : 0);
	arm(l);
}

LoopLag *
loop_lag_new(struct event_base *base)
{
	LoopLag *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->timer = evtimer_new(base, on_tick, l);
	if (!l->timer) {
		free(l);
		return NULL;
	}
	arm(l);
	return l;
}

void
loop_lag_free(LoopLag *l)
{
	if (!l)
		return;
	event_free(l->timer);
	free(l);
}

void
loop_lag_record(LoopLag *l, double lag)
{
	size_t i = 0;

	while (i < ELEMENTSOF(bounds) && lag > bounds[i])
		i++;
	l->buckets[i]++;
	l->count++;
	l->sum += lag;
	if (lag > l->max)
		l->max = lag;
}

void
loop_lag_header(LoopLagFamily f, FILE *out)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", families[f].name, families[f].help,
		families[f].name, families[f].type);
}

void
loop_lag_samples(const LoopLag *l, LoopLagFamily f, const char *daemon, FILE *out)
{
	static const LoopLag none; /* a loop measured by no timer: all zero */
	const char *name = families[f].name;
	uint64_t cum = 0;

	if (!l)
		l = &none;

	if (f == LOOP_LAG_MAX) {
		fprintf(out, "%s{daemon=\"%s\"} %.6f\n", name, daemon, l->max);
		return;
	}
	for (size_t i = 0; i < ELEMENTSOF(bounds); i++) {
		cum += l->buckets[i];
		fprintf(out, "%s_bucket{daemon=\"%s\",le=\"%g\"} %" PRIu64 "\n", name, daemon,
			bounds[i], cum);
	}
	fprintf(out,
		"%s_bucket{daemon=\"%s\",le=\"+Inf\"} %" PRIu64 "\n"
		"%s_sum{daemon=\"%s\"} %.6f\n"
		"%s_count{daemon=\"%s\"} %" PRIu64 "\n",
		name, daemon, l->count, name, daemon, l->sum, name, daemon, l->count);
}

void
loop_lag_format(const LoopLag *l, const char *daemon, FILE *out)
{
	for (LoopLagFamily f = 0; f < _LOOP_LAG_FAMILY_MAX; f++) {
		loop_lag_header(f, out);
		loop_lag_samples(l, f, daemon, out);
	}
}

static bool
has_prefix(const char *s, size_t len, const char *prefix)
{
	size_t n = strlen(prefix);
	return len >= n && memcmp(s, prefix, n) == 0;
}

bool
loop_lag_is_sample(const char *line, size_t len, LoopLagFamily f)
{
	const char *name = families[f].name;
	size_t n = strlen(name);

	if (len <= n || memcmp(line, name, n) != 0)
		return false;
	/* the name itself, or a histogram's _bucket/_sum/_count */
	if (line[n] == '{' || line[n] == ' ')
		return true;
	if (f != LOOP_LAG_HISTOGRAM)
		return false;
	line += n;
	len -= n;
	return has_prefix(line, len, "_bucket{") || has_prefix(line, len, "_sum{") ||
	       has_prefix(line, len, "_count{");
}
