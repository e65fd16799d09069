/* SPDX-License-Identifier: MIT */
/*
 * cluster-status.h — `runwarden cluster status` (cluster-status.c).
 */
#pragma once

#include <stdbool.h>

/* argv[0] is "cluster". Exit status: 0; 1 without [cluster] nats; 2 on a
 * usage error; 125 when the configuration or the cluster cannot be read. */
int cmd_cluster(int argc, char **argv, bool json_out);
