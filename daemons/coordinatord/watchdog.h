/* SPDX-License-Identifier: MIT */
/*
 * watchdog.h — the watchdog layer (watchdog.c): stalled runs, retention,
 * the log's usage. Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "cluster-mode.h"

/* watchdog.c */
/* After a commit: warn on crossing map_warn_percent, start size retention past its mark. */
void watchdog_log_usage(Coordinator *c, uint64_t used);
/* Count the run log by tenant into c->tenant_usage (size retention, /metrics). */
int watchdog_tenant_usage(Coordinator *c);
void watchdog_setup(Coordinator *c);
void watchdog_teardown(Coordinator *c);
