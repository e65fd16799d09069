/* SPDX-License-Identifier: MIT */
/*
 * harness-conf.h — the harnesses and host tools of the configuration
 * ([harness.NAME], [tool.NAME]; harness-conf.c): what each harness runs and
 * which adapter reads its output (adapter.h). A bottom layer any file may
 * use (daemons/coordinatord/LAYERS).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon-util.h"

typedef struct Harness Harness;

typedef enum AdapterKind {
	ADAPTER_SHELL,
	ADAPTER_NDJSON,
	ADAPTER_CLAUDE,
	ADAPTER_CODEX,
	_ADAPTER_MAX,
} AdapterKind;

struct Harness {
	char *name;
	AdapterKind adapter;
	char **command; /* the argv; NULL = the adapter's default */
	char **env;	/* extra environment, "K=V" */
	char **secrets; /* names of coordinatord's environment variables handed over */
	char **egress;	/* host[:port] the harness may reach through the proxy */
	/* egress_allow_private: networks the proxy may reach although not public */
	char **egress_allow_private;
	int64_t timeout_ms;
	int64_t max_line;
	bool keep_processes; /* what its process leaves running outlives the run */
	char **tools;	     /* names of [tool.NAME] host tools offered over the MCP bridge */
	char *image;	     /* the sandbox image of its runs (docs/IMAGES.md); NULL/"" = host */
};

/* A host tool ([tool.NAME]): a command run on the host, outside every sandbox,
 * with the call's JSON arguments on stdin; its stdout (JSON, or text) is the
 * result. */
typedef struct Tool {
	char *name;
	char *description;
	json_t *schema; /* JSON Schema of the arguments (an object) */
	char **command; /* the argv */
	int64_t timeout_ms;
} Tool;

typedef struct HarnessSet {
	Harness *v;
	size_t n;
	Tool *tools;
	size_t n_tools;
} HarnessSet;

const Tool *tool_find(const HarnessSet *set, const char *name);

/* Read every [harness.NAME] section of the configuration files (the same
 * files, in the same order, as the daemon's keys); the built-in `shell` is
 * always there. Errors are logged as "file:line: key: reason". */
int harness_load(const DaemonArgs *a, HarnessSet *ret);
int harness_load_string(const char *name, const char *text, HarnessSet *ret, char *err,
			size_t errlen);
/* Print the keys of [harness.NAME] and [tool.NAME], with their help and
 * defaults, as commented-out template sections (--dump-config). */
void harness_conf_dump(FILE *f);
const Harness *harness_find(const HarnessSet *set, const char *name);
void harness_set_done(HarnessSet *set);
const char *adapter_name(AdapterKind k);
