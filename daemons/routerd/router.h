/* SPDX-License-Identifier: MIT */
/*
 * router.h — the lifecycle layer (router.c, main.c): listeners, start and
 * stop.
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "routes.h"

/* router.c */

/* The daemon: load the configuration (--check-config stops there), set up
 * the loop, serve until SIGTERM/SIGINT. 0 on a clean stop, negative errno
 * (logged) on a startup failure. */
int router_run(const DaemonArgs *args);

/* Build a router on base for conf (borrowed; must outlive it). Binds the
 * listener (fails hard: returns the negative errno after logging). */
int router_new(struct event_base *base, RouterConf *conf, Router **ret);
/* Start the coordinator link; then the loop does the rest. */
int router_start(Router *r);
/* NULL-safe; closes every connection at once; returns NULL. */
Router *router_free(Router *r);
/* SIGTERM: stop accepting, close WebSockets with 1001, leave the loop once
 * they are gone (bounded by a short deadline). */
void router_stop(Router *r);
