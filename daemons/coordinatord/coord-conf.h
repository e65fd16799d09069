/* SPDX-License-Identifier: MIT */
/*
 * coord-conf.h — coordinatord's configuration: the [runwarden] shared keys
 * plus the [coordinatord] section.
 *
 * coord_conf_items[] is the one table of keys (section, key, type, offset,
 * default, range, help, choices); coord_conf_load() applies the defaults,
 * layers the files named on the command line, checks what the table cannot
 * express (the keys that bound each other, tool_cpu_max, tool_cgroup_parent)
 * and reads the [harness.NAME] and [tool.NAME] sections of the same files.
 * Sizes and durations are int64_t because the conf parser stores CONF_INT and
 * CONF_SIZE that way; the *_ms keys are milliseconds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf-parser.h"
#include "daemon-util.h"
#include "shared-conf.h"

/* coordinatord waits this much longer for a snapshot/restore reply than the
 * shim's job may run (routerd waits ROUTER_SNAPSHOT_MARGIN_MS, longer still). */
#define COORD_SNAPSHOT_MARGIN_MS 30000

typedef struct HarnessSet HarnessSet;

/* The enumerated keys (CONF_CHOICE: the field is the index of the value in
 * its row's choices, coord-conf.c, which list the values in this order).
 * coord_conf_choices_stall_action names a StallAction (log lines). */
typedef enum StallAction { STALL_FAIL, STALL_KILL } StallAction;
typedef enum Reuse { REUSE_THREAD, REUSE_NONE } Reuse;
typedef enum OutputLimitAction { OUTPUT_LIMIT_FAIL, OUTPUT_LIMIT_DROP } OutputLimitAction;
typedef enum ToolCgroup { TOOL_CGROUP_REQUIRED, TOOL_CGROUP_AUTO, TOOL_CGROUP_OFF } ToolCgroup;
extern const char *const coord_conf_choices_stall_action[];

typedef struct CoordConf {
	SharedConf shared;
	int64_t map_size;	  /* LMDB map size, bytes */
	bool sync;		  /* fsync on commit */
	bool preallocate;	  /* reserve map_size on disk at start */
	char *shell;		  /* the shell harness interpreter inside the sandbox */
	char *sandbox_shell;	  /* the sandbox API: the shell of an exec's `command` */
	int64_t read_max;	  /* largest RUN_READ batch */
	int64_t sandbox_wait_ms;  /* how long a run waits for the shim before failing */
	int64_t output_chunk_max; /* largest process.stdout/stderr text per chunk, bytes */
	int64_t stall_timeout_ms; /* watchdog; 0 = off */
	int64_t max_run_ms;	  /* a driven run ends run_timeout after this long; 0 = never */
	StallAction stall_action; /* fail | kill */
	Reuse reuse;		  /* thread | none: a sandbox per thread, or per run */
	int64_t retention_days;	  /* 0 = keep forever */
	int64_t retention_interval_ms;
	char *default_harness;
	int64_t max_tool_calls_per_run;	       /* host tool processes at once, per run */
	int64_t max_tool_calls;		       /* ... and in all */
	int64_t read_max_bytes;		       /* largest RUN_READ batch in bytes (≥ one event) */
	int64_t hydrate_read_max_bytes;	       /* most bytes one /chat hydrate reads */
	int64_t chat_input_max_bytes;	       /* a /chat run's stored input, bytes */
	int64_t chat_input_max_messages;       /* ... and messages */
	int64_t max_run_output_bytes;	       /* per-run output budget; 0 = none */
	OutputLimitAction output_limit_action; /* fail | drop */
	int64_t max_thread_output_bytes;       /* per-thread budget in a window; 0 = none */
	int64_t thread_output_window_ms;
	int64_t chunk_high_water;	   /* % of the map: running runs' events stop here */
	int64_t size_retention_high_water; /* % of the map: prune oldest terminal runs; 0 = off */
	int64_t map_warn_percent;	   /* % of the map: warn once per crossing */
	int64_t tenant_log_share;	   /* % of the size retention mark a tenant may hold */
	int64_t tenant_max_threads;	   /* threads one tenant may own; 0 = no cap */
	int64_t tenant_max_running;	   /* runs of one tenant driven at once; 0 = no cap */
	int64_t tenant_max_execs;	   /* the sandbox API: execs of one tenant at once */
	ToolCgroup tool_cgroup;		   /* required | auto | off */
	char *tool_cgroup_parent;	   /* "" = our own cgroup */
	int64_t tool_memory_max, tool_pids_max;
	char *tool_cpu_max;	       /* cpu.max of the tools' cgroup */
	int64_t max_execs_per_sandbox; /* the sandbox API: execs running at once per sandbox */
	int64_t exec_stdin_max;	       /* ... stdin bytes of one exec */
	int64_t exec_timeout_max_ms;   /* ... longest timeoutMs; also the default */
	char **sandbox_egress_allow;   /* host[:port] a sandbox's egress may name */
	char **sandbox_egress_allow_private; /* networks its proxy may reach anyway */

	/* derived by coord_conf_load(), not keys */
	int64_t tool_cpu_quota_us, tool_cpu_period_us; /* parsed from tool_cpu_max */
	/* deadline of SANDBOX_SNAPSHOT/RESTORE calls: the shim's
	 * snapshot_timeout_ms + COORD_SNAPSHOT_MARGIN_MS (0 = none) */
	int64_t snapshot_wait_ms;
	size_t event_max; /* largest event text: a quarter of max_frame */
} CoordConf;

/* harness-conf.c: an egress name, host[:port] (no IP literal); a network
 * (CIDR, net-addr.h). Also the checks of [coordinatord]'s own lists. */
bool conf_valid_egress_host(const char *s);
bool conf_valid_cidr(const char *s);

extern const ConfItem coord_conf_items[];
extern const size_t coord_conf_n_items;

/* Defaults, then the files of a (daemon_load_config), then the checks the
 * table cannot express, then the [harness.NAME]/[tool.NAME] sections into
 * *harnesses (harness_load) and the default_harness check. Logs what is
 * wrong; returns 0 or a negative errno. On failure what was already parsed
 * stays: call coord_conf_done() and harness_set_done() either way. */
int coord_conf_load(const DaemonArgs *a, CoordConf *c, HarnessSet *harnesses);

/* Free the strings of c. */
void coord_conf_done(CoordConf *c);
