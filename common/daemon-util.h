/* SPDX-License-Identifier: MIT */
/*
 * daemon-util.h — what every daemon does the same way: command line, config
 * layering, sd_notify, signals, the systemd watchdog.
 *
 * Without systemd (no NOTIFY_SOCKET, or built --enable-systemd=no) the notify
 * calls do nothing, so the daemons run the same in a terminal.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf-parser.h"
#include "shared-conf.h"

struct event_base;

typedef struct DaemonArgs {
	const char *configs[16]; /* --config FILE, in order; empty = the default file */
	size_t n_configs;
	bool check_config; /* --check-config: parse, report, exit */
	bool dump_config;  /* --dump-config: print the key table as a commented
			    * runwarden.conf section (implies check_config) */
} DaemonArgs;

/* Parse the common command line. Returns 1 to continue, 0 when --help or
 * --version was handled (exit 0), or -EINVAL after printing the usage error. */
int daemon_parse_args(int argc, char **argv, const char *name, const char *summary,
		      DaemonArgs *ret);

/* Defaults, then each config file in order (the default file when none is
 * given is optional; an explicit one must exist), then the checks of the
 * [cluster] keys every daemon shares (cluster_conf_check() on
 * shared->cluster, the target's SharedConf). Logs "file:line: key: reason"
 * and returns a negative errno on error. With --dump-config it prints the
 * table (conf_dump) on stdout instead of reading any file. */
int daemon_load_config(const DaemonArgs *a, const ConfItem *items, size_t n, void *target,
		       const SharedConf *shared);

/* How long coordinatord and routerd wait for a snapshot or restore reply:
 * [containerd-shim] snapshot_timeout_ms, read from the same files as
 * daemon_load_config() (the last one wins; the shim checks its range;
 * default 240000), plus margin_ms; 0 when it is 0 (no limit: no deadline).
 * -EINVAL (logged) when the value is not a non-negative integer. */
int daemon_snapshot_wait_ms(const DaemonArgs *a, int64_t margin_ms, int64_t *ret);

/* sd_notify wrappers: no-ops without NOTIFY_SOCKET. */
void notify_ready(const char *status);
void notify_status(const char *status);
void notify_stopping(void);

/* Install SIGTERM/SIGINT (→ on_term) and SIGHUP (→ on_hup, may be NULL)
 * as events; SIGPIPE is ignored. Starts the WATCHDOG=1 timer when systemd asks
 * for one (WATCHDOG_USEC). Returns 0 or a negative errno. */
int daemon_setup_signals(struct event_base *base, void (*on_term)(void *), void (*on_hup)(void *),
			 void *userdata);
/* Free what daemon_setup_signals allocated. */
void daemon_teardown_signals(void);
