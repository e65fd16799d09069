/* SPDX-License-Identifier: MIT */
/*
 * loop-lag.h — how late a daemon's event loop runs a timer: a timer every
 * LOOP_LAG_INTERVAL_MS measures how far past its due time it fired (what a
 * request arriving then waited for the loop) into a Prometheus histogram,
 * runwarden_loop_lag_seconds{daemon=…}, and its largest value,
 * runwarden_loop_lag_max_seconds{daemon=…}. routerd and coordinatord keep
 * one each; both go out in the one GET /metrics (routerd's samples beside
 * coordinatord's, each family one group).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct event_base;

#define LOOP_LAG_INTERVAL_MS 100

typedef enum LoopLagFamily {
	LOOP_LAG_HISTOGRAM, /* runwarden_loop_lag_seconds */
	LOOP_LAG_MAX,	    /* runwarden_loop_lag_max_seconds */
	_LOOP_LAG_FAMILY_MAX,
} LoopLagFamily;

typedef struct LoopLag LoopLag;

/* Start measuring base's loop (a timer at its default priority). NULL when
 * out of memory. */
LoopLag *loop_lag_new(struct event_base *base);
void loop_lag_free(LoopLag *l);

/* Record one lag (seconds); the timer calls it, tests may. */
void loop_lag_record(LoopLag *l, double lag);

/* Family f's # HELP and # TYPE lines. */
void loop_lag_header(LoopLagFamily f, FILE *out);
/* Family f's samples of l, labelled daemon="<daemon>". */
/* l may be NULL (a loop no timer measures, as the fuzz targets' daemons): zeros. */
void loop_lag_samples(const LoopLag *l, LoopLagFamily f, const char *daemon, FILE *out);
/* Both families whole: header and samples. */
void loop_lag_format(const LoopLag *l, const char *daemon, FILE *out);
/* Whether line (up to its newline) is a sample of family f. */
bool loop_lag_is_sample(const char *line, size_t len, LoopLagFamily f);
