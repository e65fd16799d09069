/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "coordinatord.h"

#include <stddef.h>

#include "macro.h"

const ConfItem coord_conf_items[] = {
    CONF_SHARED_ITEMS(CoordConf, shared),
    {"coordinatord", "map_size", CONF_SIZE, offsetof(CoordConf, map_size), "1G", 1 << 20, 1LL << 40,
     "largest size of the run log (LMDB map); the file grows sparsely"},
    {"coordinatord", "sync", CONF_BOOL, offsetof(CoordConf, sync), "yes", 0, 0,
     "fsync every commit (durable); 'no' trades the last commits for speed"},
    {"coordinatord", "shell", CONF_STR, offsetof(CoordConf, shell), "/bin/sh", 0, 0,
     "interpreter of the shell harness, a path inside the sandbox"},
    {"coordinatord", "read_max", CONF_INT, offsetof(CoordConf, read_max), "256", 1, 65536,
     "most events returned by one RUN_READ"},
    {"coordinatord", "sandbox_wait_ms", CONF_INT, offsetof(CoordConf, sandbox_wait_ms), "30000",
     100, 3600000, "how long a run waits for containerd-shim before it fails"},
    {"coordinatord", "output_chunk_max", CONF_SIZE, offsetof(CoordConf, output_chunk_max), "64K",
     256, 16 << 20, "largest text of one process.stdout/stderr chunk"},
    {"coordinatord", "stall_timeout_ms", CONF_INT, offsetof(CoordConf, stall_timeout_ms), "300000",
     0, 86400000LL * 7,
     "stall watchdog: a run with no progress for this long fails; 0 turns it off"},
    {"coordinatord", "max_run_ms", CONF_INT, offsetof(CoordConf, max_run_ms), "7200000", 0,
     86400000LL * 30,
     "longest a run may take, from its start (waiting for a sandbox included): then its "
     "exec cgroup is killed and it fails with code run_timeout; 0 = no limit"},
    {"coordinatord", "stall_action", CONF_STR, offsetof(CoordConf, stall_action), "fail", 0, 0,
     "what the watchdog does to a stale run: 'fail' it, or 'kill' (also kill its exec and all "
     "it started)"},
    {"coordinatord", "reuse", CONF_STR, offsetof(CoordConf, reuse), "thread", 0, 0,
     "'thread': a thread's runs share a sandbox and /workspace; 'none': each run gets a "
     "fresh one, removed with its files when the run ends"},
    {"coordinatord", "retention_days", CONF_INT, offsetof(CoordConf, retention_days), "30", 0,
     36500, "terminal runs older than this are deleted with their events; 0 keeps them forever"},
    {"coordinatord", "retention_interval_ms", CONF_INT, offsetof(CoordConf, retention_interval_ms),
     "60000", 100, 86400000, "how often retention looks for runs to prune (in small batches)"},
    {"coordinatord", "default_harness", CONF_STR, offsetof(CoordConf, default_harness), "shell", 0,
     0, "harness of a run whose metadata names none: 'shell' (built in) or a [harness.NAME]"},
    {"coordinatord", "max_tool_calls_per_run", CONF_INT,
     offsetof(CoordConf, max_tool_calls_per_run), "4", 1, 4096,
     "host tool calls one run may have running at once; a further call gets 429 "
     "too_many_tool_calls"},
    {"coordinatord", "max_tool_calls", CONF_INT, offsetof(CoordConf, max_tool_calls), "32", 1,
     65536, "host tool calls running at once on this host, all runs together (then 429)"},
};
const size_t coord_conf_n_items = ELEMENTSOF(coord_conf_items);
