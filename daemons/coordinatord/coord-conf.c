/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "coord-conf.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>

#include "harness-conf.h"
#include "cgroup.h"
#include "log.h"
#include "macro.h"
#include "strv.h"

/* in the order of their enums (coord-conf.h), which CONF_CHOICE stores as int */
_Static_assert(sizeof(StallAction) == sizeof(int) && sizeof(Reuse) == sizeof(int) &&
		   sizeof(OutputLimitAction) == sizeof(int) && sizeof(ToolCgroup) == sizeof(int),
	       "CONF_CHOICE fields are int-sized");
static const char *const fail_drop[] = {"fail", "drop", NULL};
const char *const coord_conf_choices_stall_action[] = {"fail", "kill", NULL};
static const char *const thread_none[] = {"thread", "none", NULL};
static const char *const required_auto_off[] = {"required", "auto", "off", NULL};

const ConfItem coord_conf_items[] = {
    CONF_SHARED_ITEMS(CoordConf, shared),
    {"coordinatord", "map_size", CONF_SIZE, offsetof(CoordConf, map_size), "1G", 1 << 20, 1LL << 40,
     "largest size of the run log (LMDB map); the file grows sparsely"},
    {"coordinatord", "preallocate", CONF_BOOL, offsetof(CoordConf, preallocate), "yes", 0, 0,
     "reserve map_size of disk blocks for the run log at start, so that workspaces or "
     "backups filling the disk never make a commit fail (start fails if the disk cannot "
     "hold it)"},
    {"coordinatord", "sync", CONF_BOOL, offsetof(CoordConf, sync), "yes", 0, 0,
     "fsync every commit (durable); 'no' trades the last commits for speed"},
    {"coordinatord", "shell", CONF_STR, offsetof(CoordConf, shell), "/bin/sh", 0, 0,
     "interpreter of the shell harness, a path inside the sandbox"},
    {"coordinatord", "sandbox_shell", CONF_STR, offsetof(CoordConf, sandbox_shell), "/bin/bash", 0,
     0,
     "the sandbox API: the shell an exec's `command` runs in ([sandbox_shell, \"-c\", command]), "
     "a path inside the sandbox (bash: TanStack's bootstrap reads `export -p` in its quoting)"},
    {"coordinatord", "read_max", CONF_INT, offsetof(CoordConf, read_max), "256", 1, 65536,
     "most events returned by one RUN_READ"},
    {"coordinatord", "read_max_bytes", CONF_SIZE, offsetof(CoordConf, read_max_bytes), "4M", 4096,
     1LL << 30,
     "most bytes of event text returned by one RUN_READ (always at least one event); at most "
     "half of max_frame"},
    {"coordinatord", "hydrate_read_max_bytes", CONF_SIZE,
     offsetof(CoordConf, hydrate_read_max_bytes), "256M", 4096, 1LL << 40,
     "most bytes of stored messages and events one GET /chat?threadId= hydrate reads (chunks "
     "it passes over included); past it the hydrate answers 413 too_large. The rebuild "
     "yields to the event loop every 256 KiB read"},
    {"coordinatord", "chat_input_max_bytes", CONF_SIZE, offsetof(CoordConf, chat_input_max_bytes),
     "1M", 1024, 1LL << 30,
     "most bytes of the user messages a POST /chat stores with its run (what the turn adds, "
     "for the hydrate); past it the POST answers 413 too_large"},
    {"coordinatord", "chat_input_max_messages", CONF_INT,
     offsetof(CoordConf, chat_input_max_messages), "256", 1, 1000000,
     "most user messages a POST /chat stores with its run; past it the POST answers 413 "
     "too_large"},
    {"coordinatord", "sandbox_wait_ms", CONF_INT, offsetof(CoordConf, sandbox_wait_ms), "30000",
     100, 3600000, "how long a run waits for containerd-shim before it fails"},
    {"coordinatord", "output_chunk_max", CONF_SIZE, offsetof(CoordConf, output_chunk_max), "64K",
     256, 16 << 20, "largest text of one process.stdout/stderr chunk"},
    {"coordinatord", "max_run_output_bytes", CONF_SIZE, offsetof(CoordConf, max_run_output_bytes),
     "64M", 0, 1LL << 40,
     "output budget of one run (stdout + stderr bytes); past it the run gets a 'dropped N "
     "bytes' marker and output_limit_action applies; 0 = no budget"},
    {"coordinatord", "output_limit_action", CONF_CHOICE, offsetof(CoordConf, output_limit_action),
     "fail", 0, 0,
     "a run over its output budget: 'fail' kills its exec and ends it with code output_limit; "
     "'drop' keeps it running and drops the rest of its output",
     fail_drop},
    {"coordinatord", "max_thread_output_bytes", CONF_SIZE,
     offsetof(CoordConf, max_thread_output_bytes), "256M", 0, 1LL << 40,
     "output budget of all runs of one thread within thread_output_window_ms; past it "
     "output_limit_action applies to the run that crossed it; 0 = no budget"},
    {"coordinatord", "thread_output_window_ms", CONF_INT,
     offsetof(CoordConf, thread_output_window_ms), "3600000", 1000, 86400000LL * 7,
     "the window of max_thread_output_bytes (a fixed window starting at a thread's first "
     "output)"},
    {"coordinatord", "chunk_high_water", CONF_INT, offsetof(CoordConf, chunk_high_water), "90", 10,
     99,
     "percent of map_size past which events of running runs are refused (the run fails "
     "storage_full); the rest is reserved so run starts and ends always commit"},
    {"coordinatord", "size_retention_high_water", CONF_INT,
     offsetof(CoordConf, size_retention_high_water), "75", 0, 99,
     "percent of map_size past which retention deletes the oldest terminal runs, whatever "
     "their age, until the log is below it; 0 turns size retention off"},
    {"coordinatord", "tenant_log_share", CONF_INT, offsetof(CoordConf, tenant_log_share), "50", 1,
     100,
     "a tenant's share of the run log, in percent of the size retention mark: past the mark, "
     "retention deletes the oldest terminal runs of the tenants over their share first, the "
     "largest first, and another tenant's only when none of those has one left "
     "(docs/SECURITY.md \"Tenants\"); 100 = one host-wide oldest-first order"},
    {"coordinatord", "tenant_max_threads", CONF_INT, offsetof(CoordConf, tenant_max_threads),
     "10000", 0, 1LL << 40,
     "threads (and so workspaces) one tenant may own; a request creating one more is refused "
     "429 tenant_threads_quota; 0 = no cap"},
    {"coordinatord", "tenant_max_running", CONF_INT, offsetof(CoordConf, tenant_max_running), "64",
     0, 1 << 20,
     "runs of one tenant driven at once (queued for a sandbox slot included); one more is "
     "refused 429 tenant_runs_quota; 0 = no cap"},
    {"coordinatord", "tenant_max_execs", CONF_INT, offsetof(CoordConf, tenant_max_execs), "64", 0,
     1 << 20,
     "the sandbox API: execs of one tenant running at once in all its sandboxes (background "
     "ones included); one more is refused 429 tenant_execs_quota; 0 = no cap"},
    {"coordinatord", "map_warn_percent", CONF_INT, offsetof(CoordConf, map_warn_percent), "80", 1,
     99,
     "percent of map_size at which the journal warns (once per crossing) and /metrics "
     "reports runwarden_runlog_over_warn 1"},
    {"coordinatord", "stall_timeout_ms", CONF_INT, offsetof(CoordConf, stall_timeout_ms), "300000",
     0, 86400000LL * 7,
     "stall watchdog: a run with no progress for this long fails; 0 turns it off"},
    {"coordinatord", "max_run_ms", CONF_INT, offsetof(CoordConf, max_run_ms), "7200000", 0,
     86400000LL * 30,
     "longest a run may take, from its start (waiting for a sandbox included): then its "
     "exec cgroup is killed and it fails with code run_timeout; 0 = no limit"},
    {"coordinatord", "stall_action", CONF_CHOICE, offsetof(CoordConf, stall_action), "fail", 0, 0,
     "what the watchdog does to a stale run: 'fail' it, or 'kill' (also kill its exec and all "
     "it started)",
     coord_conf_choices_stall_action},
    {"coordinatord", "reuse", CONF_CHOICE, offsetof(CoordConf, reuse), "thread", 0, 0,
     "'thread': a thread's runs share a sandbox and /workspace; 'none': each run gets a "
     "fresh one, removed with its files when the run ends",
     thread_none},
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
    {"coordinatord", "tool_cgroup", CONF_CHOICE, offsetof(CoordConf, tool_cgroup), "auto", 0, 0,
     "host tool calls run in a cgroup of their own (one leaf per call, killed with all the "
     "call started when it ends): 'required' (coordinatord does not start without it), "
     "'auto' (used when the cgroups can be created, else a warning), 'off'",
     required_auto_off},
    {"coordinatord", "tool_cgroup_parent", CONF_STR, offsetof(CoordConf, tool_cgroup_parent), "", 0,
     0, "cgroup under which the tools' cgroup is made; empty = coordinatord's own"},
    {"coordinatord", "tool_memory_max", CONF_SIZE, offsetof(CoordConf, tool_memory_max), "1G",
     16 << 20, 1LL << 50,
     "memory of all host tool processes together (memory.max; no swap); past it the kernel's "
     "OOM killer ends tool calls"},
    {"coordinatord", "tool_pids_max", CONF_INT, offsetof(CoordConf, tool_pids_max), "512", 8,
     4194304, "processes and threads of all host tool calls together (pids.max)"},
    {"coordinatord", "tool_cpu_max", CONF_STR, offsetof(CoordConf, tool_cpu_max), "100000 100000",
     0, 0,
     "CPU of all host tool calls together, as cpu.max: 'QUOTA_US PERIOD_US' (the default is "
     "one CPU) or 'max'"},
    {"coordinatord", "max_execs_per_sandbox", CONF_INT, offsetof(CoordConf, max_execs_per_sandbox),
     "16", 1, 4096,
     "the sandbox API (POST /sandboxes/{id}/exec): execs one sandbox may have running at once, "
     "background ones included; a further one gets 429 too_many_execs"},
    {"coordinatord", "exec_stdin_max", CONF_SIZE, offsetof(CoordConf, exec_stdin_max), "1M", 0,
     4 << 20,
     "the sandbox API: most stdin bytes of one exec (the request's stdin, or what a WebSocket "
     "sends); past it 413 stdin_too_large; at most half of runwarden.max_frame"},
    {"coordinatord", "exec_timeout_max_ms", CONF_INT, offsetof(CoordConf, exec_timeout_max_ms),
     "7200000", 1000, 86400000LL * 7,
     "the sandbox API: longest timeoutMs of an exec, and the timeout of one that gives none "
     "(then its exec cgroup is killed, reason timeout)"},
    {"coordinatord", "sandbox_egress_allow", CONF_WORDS, offsetof(CoordConf, sandbox_egress_allow),
     "", 0, 0,
     "host[:port] names (port 443 when none; no IP literals) that PUT "
     "/sandboxes/{id}/egress may allow a sandbox to reach through its egress proxy; a name "
     "outside this list is refused 403 egress_forbidden; empty = none (the networkPolicy "
     "capability is false)",
     .valid = conf_valid_egress_host,
     .expected = "expected host names (host or host:port, no IP literals)"},
    {"coordinatord", "sandbox_egress_allow_private", CONF_WORDS,
     offsetof(CoordConf, sandbox_egress_allow_private), "", 0, 0,
     "networks (CIDR) a sandbox's egress proxy may connect to although they are not public "
     "(as a harness's egress_allow_private); empty = public addresses only",
     .valid = conf_valid_cidr,
     .expected = "expected IPv4/IPv6 networks (address/prefix with the host bits zero, e.g. "
		 "10.0.0.0/8 127.0.0.1/32 fd00::/8)"},
};
const size_t coord_conf_n_items = ELEMENTSOF(coord_conf_items);

int
coord_conf_load(const DaemonArgs *a, CoordConf *c, HarnessSet *harnesses)
{
	int r;

	/* stall_action, reuse, output_limit_action, tool_cgroup: checked by the
	 * parser against their choices, with file:line */
	r = daemon_load_config(a, coord_conf_items, coord_conf_n_items, c, &c->shared);
	if (r < 0)
		return r;
	if (a->dump_config)
		harness_conf_dump(stdout);
	if (cgroup_parse_cpu_max("coordinatord.tool_cpu_max", c->tool_cpu_max,
				 &c->tool_cpu_quota_us, &c->tool_cpu_period_us) < 0)
		return -EINVAL;
	if (!cgroup_parent_valid(c->tool_cgroup_parent))
		return log_error_errno(
		    SYNTHETIC_ERRNO(EINVAL),
		    "coordinatord.tool_cgroup_parent must be empty or an absolute "
		    "cgroup path");
	/* a RUN_READ reply is at most max(read_max_bytes, one event) of texts, and
	 * an event at most a quarter of max_frame: a reply always fits a frame */
	c->event_max = (size_t)c->shared.max_frame / 4;
	if (c->read_max_bytes > c->shared.max_frame / 2)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "coordinatord.read_max_bytes: %" PRId64
				       " is over half of runwarden.max_frame (%" PRId64 ")",
				       c->read_max_bytes, c->shared.max_frame);
	/* an output chunk JSON-escapes to at most 6 bytes per byte (\u00XX) */
	if ((uint64_t)c->output_chunk_max * 6 + 1024 > c->event_max)
		return log_error_errno(
		    SYNTHETIC_ERRNO(EINVAL),
		    "coordinatord.output_chunk_max: %" PRId64
		    " escapes to more than a quarter of runwarden.max_frame (%" PRId64
		    "); at most %zu",
		    c->output_chunk_max, c->shared.max_frame, (c->event_max - 1024) / 6);
	/* an exec's stdin travels whole in one SBX_EXEC and one EXEC_START */
	if (c->exec_stdin_max > c->shared.max_frame / 2)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "coordinatord.exec_stdin_max: %" PRId64
				       " is over half of runwarden.max_frame (%" PRId64 ")",
				       c->exec_stdin_max, c->shared.max_frame);
	if (c->size_retention_high_water >= c->chunk_high_water)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "coordinatord.size_retention_high_water: %" PRId64
				       " must be below chunk_high_water (%" PRId64 ")",
				       c->size_retention_high_water, c->chunk_high_water);
	r = daemon_snapshot_wait_ms(a, COORD_SNAPSHOT_MARGIN_MS, &c->snapshot_wait_ms);
	if (r < 0)
		return r;
	r = harness_load(a, harnesses);
	if (r < 0)
		return r;
	if (!harness_find(harnesses, c->default_harness))
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "coordinatord.default_harness: '%s': no such harness",
				       c->default_harness);
	return 0;
}

void
coord_conf_done(CoordConf *c)
{
	conf_free_strings(coord_conf_items, coord_conf_n_items, c);
	strv_free(c->sandbox_egress_allow);
	strv_free(c->sandbox_egress_allow_private);
	c->sandbox_egress_allow = c->sandbox_egress_allow_private = NULL;
}
