/* SPDX-License-Identifier: MIT */
/*
 * coordinatord.h — private types of coordinatord, shared by its files.
 *
 * coordinatord owns the LMDB run log and drives runs: it accepts routerd
 * connections (RUN_* requests, RUN_EVENTS pushes), keeps one connection to the
 * shim (SANDBOX_*, EXEC_*), and turns harness output into AG-UI chunks. Every
 * chunk is committed to the log before it is published to any watcher.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conf-parser.h"
#include "daemon-util.h"
#include "shared-conf.h"

typedef struct CoordConf {
	SharedConf shared;
	int64_t map_size;        /* LMDB map size, bytes */
	bool sync;               /* fsync on commit */
	char *shell;             /* the shell harness interpreter inside the sandbox */
	int64_t read_max;        /* largest RUN_READ batch */
	int64_t sandbox_wait_ms; /* how long a run waits for the shim before failing */
	int64_t output_chunk_max; /* largest process.stdout/stderr text per chunk, bytes */
} CoordConf;

extern const ConfItem coord_conf_items[];
extern const size_t coord_conf_n_items;

/* Run the daemon until SIGTERM. Returns 0 or a negative errno (already logged). */
int coordinator_run(const DaemonArgs *args);
