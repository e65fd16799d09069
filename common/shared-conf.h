/* SPDX-License-Identifier: MIT */
/*
 * shared-conf.h — the [runwarden] section, read by every daemon.
 * Each daemon embeds a SharedConf in its config struct and lists
 * CONF_SHARED_ITEMS(ItsType, member) in its ConfItem table.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "conf-parser.h"

typedef struct SharedConf {
	char *runtime_dir; /* Unix sockets live here */
	char *state_dir;   /* LMDB, sandboxes */
	int log_level;
	int64_t max_frame; /* largest IPC frame accepted, bytes */
} SharedConf;

#define RW_DEFAULT_CONF SYSCONFDIR "/runwarden/runwarden.conf"

#define CONF_SHARED_ITEMS(T, m)                                                                    \
	{"runwarden",                                                                              \
	 "runtime_dir",                                                                            \
	 CONF_STR,                                                                                 \
	 offsetof(T, m.runtime_dir),                                                               \
	 "/run/runwarden",                                                                         \
	 0,                                                                                        \
	 0,                                                                                        \
	 "directory of the daemons' Unix sockets"},                                                \
	    {"runwarden",                                                                          \
	     "state_dir",                                                                          \
	     CONF_STR,                                                                             \
	     offsetof(T, m.state_dir),                                                             \
	     "/var/lib/runwarden",                                                                 \
	     0,                                                                                    \
	     0,                                                                                    \
	     "durable state: run log (LMDB) and sandbox workspaces"},                              \
	    {"runwarden", "log_level", CONF_LEVEL, offsetof(T, m.log_level),                       \
	     "info",	  0,	       0,	   "debug, info, notice, warning or error"},       \
	{                                                                                          \
		"runwarden", "max_frame", CONF_SIZE, offsetof(T, m.max_frame), "16M", 4096,        \
		    1024LL * 1024 * 1024, "largest frame accepted between daemons"                 \
	}

/* Socket paths inside runtime_dir. */
#define RW_SOCK_COORD "coordinatord.sock"
#define RW_SOCK_SHIM "containerd-shim.sock"
/* routerd's bridge-only socket: where the shim's bridge forwards lead */
#define RW_SOCK_BRIDGE "bridge.sock"
