/* SPDX-License-Identifier: MIT */
/*
 * harness-conf.c — the [harness.NAME] and [tool.NAME] sections.
 *
 *   [harness.claude]
 *   adapter = claude-code                 # shell | ndjson | claude-code | codex
 *   command = ["claude"]                  # an argv as a JSON array, never a shell string
 *   env = {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8000"}
 *   secrets = ANTHROPIC_API_KEY           # names in coordinatord's environment
 *   egress = api.anthropic.com            # host[:port] reachable through the proxy
 *   egress_allow_private = 10.1.2.0/24    # networks (CIDR) the proxy may reach although
 *                                         # not public (loopback, private, link-local…)
 *   timeout_ms = 3600000                  # 0 = none
 *   max_line = 1M                         # longest stdout line (ndjson, claude, codex)
 *   keep_processes = false                # true: what the run leaves running outlives it
 *   tools = search deploy                 # [tool.NAME] host tools over the MCP bridge
 *
 *   [tool.search]
 *   command = ["/usr/local/bin/search-tool"]   # runs on the host, JSON args on stdin
 *   description = Search the project's issue tracker
 *   schema = {"type":"object","properties":{"q":{"type":"string"}}}
 *   timeout_ms = 60000
 *
 * Each section kind is a ConfItem table (harness_conf_items, tool_conf_items)
 * scanned by conf_scan_items_file(): one Harness or Tool per NAME, made with
 * the table's defaults the first time its section is seen, every key checked
 * by its row (type, range, validator) with "file:line: key: reason". What
 * involves several sections (a tool's command, the tools a harness names, an
 * adapter for each harness) is checked by finish() once every file is read.
 */
#include "config.h"

#include "harness-conf.h"

#include "coord-conf.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "net-addr.h"
#include "shared-conf.h"
#include "strv.h"

/* NULL-terminated: the choices of the adapter key too (CONF_CHOICE, an int) */
_Static_assert(sizeof(AdapterKind) == sizeof(int), "CONF_CHOICE fields are int-sized");
static const char *const adapter_names[_ADAPTER_MAX + 1] = {
    [ADAPTER_SHELL] = "shell",
    [ADAPTER_NDJSON] = "ndjson",
    [ADAPTER_CLAUDE] = "claude-code",
    [ADAPTER_CODEX] = "codex",
};

const char *
adapter_name(AdapterKind k)
{
	return (unsigned)k < _ADAPTER_MAX ? adapter_names[k] : "?";
}

static void
tool_done(Tool *t)
{
	free(t->name);
	free(t->description);
	json_decref(t->schema);
	mp_strv_free(t->command);
	*t = (Tool){0};
}

static void
harness_done(Harness *h)
{
	free(h->name);
	mp_strv_free(h->command);
	mp_strv_free(h->env);
	mp_strv_free(h->secrets);
	mp_strv_free(h->egress);
	mp_strv_free(h->egress_allow_private);
	mp_strv_free(h->tools);
	free(h->image);
	*h = (Harness){0};
}

void
harness_set_done(HarnessSet *set)
{
	for (size_t i = 0; i < set->n; i++)
		harness_done(&set->v[i]);
	free(set->v);
	for (size_t i = 0; i < set->n_tools; i++)
		tool_done(&set->tools[i]);
	free(set->tools);
	*set = (HarnessSet){0};
}

const Harness *
harness_find(const HarnessSet *set, const char *name)
{
	for (size_t i = 0; i < set->n; i++)
		if (streq(set->v[i].name, name))
			return &set->v[i];
	return NULL;
}

const Tool *
tool_find(const HarnessSet *set, const char *name)
{
	for (size_t i = 0; i < set->n_tools; i++)
		if (streq(set->tools[i].name, name))
			return &set->tools[i];
	return NULL;
}

static bool
valid_name(const char *s, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max)
		return false;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_' && *p != '.')
			return false;
	return true;
}

static bool
valid_env_name(const char *s)
{
	if (!*s || isdigit((unsigned char)*s))
		return false;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_')
			return false;
	return true;
}

bool
conf_valid_cidr(const char *s)
{
	NetCidr c;
	return net_cidr_parse(s, &c) == 0;
}

bool
conf_valid_egress_host(const char *s)
{
	/* host[:port]: a DNS name, never an IP literal (the proxy refuses those) */
	size_t n = strcspn(s, ":");
	if (n == 0 || n > 253)
		return false;
	bool alpha = false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!isalnum((unsigned char)c) && c != '-' && c != '.')
			return false;
		if (isalpha((unsigned char)c))
			alpha = true;
	}
	if (!alpha)
		return false;
	if (s[n] == ':') {
		char *end;
		long port = strtol(s + n + 1, &end, 10);
		if (*end || port < 1 || port > 65535)
			return false;
	}
	return true;
}

static bool
valid_tool_name(const char *s)
{
	return valid_name(s, 64);
}

/* An image name (the shim's image_name_ok): 1..64 of a-z 0-9 . _ -, starting
 * with a letter or digit. */
static bool
valid_image_name(const char *s)
{
	if (!islower((unsigned char)s[0]) && !isdigit((unsigned char)s[0]))
		return false;
	for (const char *p = s; *p; p++)
		if (isupper((unsigned char)*p))
			return false;
	return valid_name(s, 64);
}

#define H "harness.NAME"
#define T "tool.NAME"

/* The keys of [harness.NAME]; a missing key keeps its default (none: the
 * harness's own, e.g. the adapter's command). */
static const ConfItem harness_conf_items[] = {
    {.section = H,
     .key = "adapter",
     .type = CONF_CHOICE,
     .offset = offsetof(Harness, adapter),
     .help = "how the process is driven and its output read: shell, ndjson, claude-code or "
	     "codex (required, but for the built-in [harness.shell])",
     .choices = adapter_names,
     .expected = "expected shell, ndjson, claude-code or codex"},
    {.section = H,
     .key = "command",
     .type = CONF_ARGV,
     .offset = offsetof(Harness, command),
     .help = "the argv as a JSON array (never a shell string), e.g. [\"claude\"]; empty = the "
	     "adapter's own (an ndjson harness needs one)"},
    {.section = H,
     .key = "env",
     .type = CONF_ENV,
     .offset = offsetof(Harness, env),
     .help = "extra environment, a JSON object of strings, e.g. {\"NAME\": \"value\"}",
     .valid = valid_env_name},
    {.section = H,
     .key = "secrets",
     .type = CONF_WORDS,
     .offset = offsetof(Harness, secrets),
     .help = "names of coordinatord's environment variables handed to the process (the values of "
	     "every harness's secrets are redacted from every chunk and record of every run: "
	     "docs/SECURITY.md)",
     .valid = valid_env_name,
     .expected = "expected environment variable names"},
    {.section = H,
     .key = "egress",
     .type = CONF_WORDS,
     .offset = offsetof(Harness, egress),
     .help = "host[:port] names the harness may reach through the proxy (no IP literals)",
     .valid = conf_valid_egress_host,
     .expected = "expected host names (host or host:port, no IP literals)"},
    {.section = H,
     .key = "egress_allow_private",
     .type = CONF_WORDS,
     .offset = offsetof(Harness, egress_allow_private),
     .help = "networks (CIDR, e.g. 10.1.2.0/24 127.0.0.1/32 fd00::/8) the proxy may connect to "
	     "although they are not public: by default a name that resolves to loopback, private "
	     "(10/8, 172.16/12, 192.168/16), CGNAT (100.64/10), link-local (169.254/16, the cloud "
	     "metadata service; fe80::/10), unique-local (fc00::/7), multicast, 0.0.0.0/8, :: or a "
	     "reserved address is refused with 403",
     .valid = conf_valid_cidr,
     .expected = "expected IPv4/IPv6 networks (address/prefix with the host bits zero, e.g. "
		 "10.0.0.0/8 127.0.0.1/32 fd00::/8)"},
    {.section = H,
     .key = "image",
     .type = CONF_STR,
     .offset = offsetof(Harness, image),
     .help = "the sandbox image its runs use (runwarden image import; docs/IMAGES.md); empty = "
	     "the host's ro_binds. A thread's sandbox has one image: a run of another image gets "
	     "a new sandbox on it, with the same /workspace",
     .valid = valid_image_name,
     .expected = "expected an image name (1..64 of a-z 0-9 . _ -)"},
    {.section = H,
     .key = "timeout_ms",
     .type = CONF_INT,
     .offset = offsetof(Harness, timeout_ms),
     .def = "0",
     .min = 0,
     .max = 86400000LL * 7,
     .help = "wall-clock limit of the process (0 = none)",
     .expected = "expected milliseconds (0 = none)"},
    {.section = H,
     .key = "max_line",
     .type = CONF_SIZE,
     .offset = offsetof(Harness, max_line),
     .def = "1M",
     .min = 256,
     .max = 64 << 20,
     .help = "longest stdout line of a line-based adapter (ndjson, claude-code, codex)",
     .expected = "expected a size from 256 to 64M"},
    {.section = H,
     .key = "keep_processes",
     .type = CONF_BOOL,
     .offset = offsetof(Harness, keep_processes),
     .def = "no",
     .help = "yes: what the run leaves running (`cmd &`, nohup, setsid) outlives it, until its "
	     "sandbox sleeps or is stopped for a queued request; no: killed at the run's end",
     .expected = "expected true or false"},
    {.section = H,
     .key = "tools",
     .type = CONF_WORDS,
     .offset = offsetof(Harness, tools),
     .help = "names of [tool.NAME] host tools offered over the MCP bridge (reached from the "
	     "sandbox through a loopback port that the shim joins to routerd's bridge-only socket, "
	     "$runtime_dir/bridge.sock: that run's tools, nothing else)",
     .valid = valid_tool_name,
     .expected = "expected tool names"},
};

/* The keys of [tool.NAME]. */
static const ConfItem tool_conf_items[] = {
    {.section = T,
     .key = "command",
     .type = CONF_ARGV,
     .offset = offsetof(Tool, command),
     .help = "the argv as a JSON array (required): run on the host, never in a sandbox, with the "
	     "call's JSON arguments on stdin; its stdout is the result"},
    {.section = T,
     .key = "description",
     .type = CONF_STR,
     .offset = offsetof(Tool, description),
     .help = "shown to the agent in tools/list"},
    {.section = T,
     .key = "schema",
     .type = CONF_JSON,
     .offset = offsetof(Tool, schema),
     .help = "JSON Schema of the arguments (a JSON object)",
     .expected = "expected a JSON Schema object"},
    {.section = T,
     .key = "timeout_ms",
     .type = CONF_INT,
     .offset = offsetof(Tool, timeout_ms),
     .def = "60000",
     .min = 1,
     .max = 86400000LL,
     .help = "how long a call may run",
     .expected = "expected milliseconds (1..86400000)"},
};

static Tool *
tool_get(HarnessSet *set, const char *name)
{
	for (size_t i = 0; i < set->n_tools; i++)
		if (streq(set->tools[i].name, name))
			return &set->tools[i];
	Tool *v = realloc(set->tools, (set->n_tools + 1) * sizeof(Tool));
	if (!v)
		return NULL;
	set->tools = v;
	Tool *t = &v[set->n_tools];
	*t = (Tool){.name = strdup(name)};
	if (!t->name || conf_apply_defaults(tool_conf_items, ELEMENTSOF(tool_conf_items), t) < 0) {
		free(t->name);
		return NULL;
	}
	set->n_tools++;
	return t;
}

static Harness *
harness_get(HarnessSet *set, const char *name)
{
	for (size_t i = 0; i < set->n; i++)
		if (streq(set->v[i].name, name))
			return &set->v[i];
	Harness *v = realloc(set->v, (set->n + 1) * sizeof(Harness));
	if (!v)
		return NULL;
	set->v = v;
	Harness *h = &v[set->n];
	*h = (Harness){.name = strdup(name), .adapter = _ADAPTER_MAX};
	if (!h->name ||
	    conf_apply_defaults(harness_conf_items, ELEMENTSOF(harness_conf_items), h) < 0) {
		free(h->name);
		return NULL;
	}
	set->n++;
	return h;
}

/* ConfSectionFn of [tool.NAME]: its Tool, made on first sight. */
static int
tool_section(const char *name, void **ret, Reason *why, void *ud)
{
	if (!valid_name(name, 64)) {
		reason_set(why, "tool name '%s': use 1..64 of [A-Za-z0-9._-]", name);
		return -EINVAL;
	}
	*ret = tool_get(ud, name);
	return *ret ? 0 : -ENOMEM;
}

/* ConfSectionFn of [harness.NAME]: its Harness, made on first sight. */
static int
harness_section(const char *name, void **ret, Reason *why, void *ud)
{
	if (!valid_name(name, 64)) {
		reason_set(why, "harness name '%s': use 1..64 of [A-Za-z0-9._-]", name);
		return -EINVAL;
	}
	*ret = harness_get(ud, name);
	return *ret ? 0 : -ENOMEM;
}

static int
finish(HarnessSet *set, char *err, size_t errlen)
{
	for (size_t i = 0; i < set->n_tools; i++)
		if (!set->tools[i].command) {
			snprintf(err, errlen, "[tool.%s]: command: missing", set->tools[i].name);
			return -EINVAL;
		}
	for (size_t i = 0; i < set->n; i++)
		for (size_t k = 0; set->v[i].tools && set->v[i].tools[k]; k++)
			if (!tool_find(set, set->v[i].tools[k])) {
				snprintf(err, errlen, "[harness.%s]: tools: no [tool.%s] section",
					 set->v[i].name, set->v[i].tools[k]);
				return -EINVAL;
			}
	Harness *sh = harness_get(set, "shell");
	if (!sh)
		return -ENOMEM;
	if (sh->adapter == _ADAPTER_MAX)
		sh->adapter = ADAPTER_SHELL;
	for (size_t i = 0; i < set->n; i++)
		if (set->v[i].adapter == _ADAPTER_MAX) {
			snprintf(
			    err, errlen,
			    "[harness.%s]: adapter: missing (shell, ndjson, claude-code or codex)",
			    set->v[i].name);
			return -EINVAL;
		} else if (set->v[i].adapter == ADAPTER_NDJSON && !set->v[i].command) {
			snprintf(err, errlen,
				 "[harness.%s]: command: an ndjson harness needs its command",
				 set->v[i].name);
			return -EINVAL;
		}
	return 0;
}

int
harness_load_string(const char *name, const char *text, HarnessSet *ret, char *err, size_t errlen)
{
	HarnessSet set = {0};
	int r =
	    conf_scan_items_string(name, text, harness_conf_items, ELEMENTSOF(harness_conf_items),
				   harness_section, &set, err, errlen);
	if (r == 0)
		r = conf_scan_items_string(name, text, tool_conf_items, ELEMENTSOF(tool_conf_items),
					   tool_section, &set, err, errlen);
	if (r == 0)
		r = finish(&set, err, errlen);
	if (r < 0) {
		harness_set_done(&set);
		return r;
	}
	*ret = set;
	return 0;
}

void
harness_conf_dump(FILE *f)
{
	fputc('\n', f);
	conf_dump(f, harness_conf_items, ELEMENTSOF(harness_conf_items));
	fputc('\n', f);
	conf_dump(f, tool_conf_items, ELEMENTSOF(tool_conf_items));
}

/* The [harness.NAME] sections of path, then its [tool.NAME] sections. */
static int
scan_file(const char *path, HarnessSet *set, char *err, size_t errlen)
{
	int r = conf_scan_items_file(path, harness_conf_items, ELEMENTSOF(harness_conf_items),
				     harness_section, set, err, errlen);
	if (r == 0)
		r = conf_scan_items_file(path, tool_conf_items, ELEMENTSOF(tool_conf_items),
					 tool_section, set, err, errlen);
	return r;
}

int
harness_load(const DaemonArgs *a, HarnessSet *ret)
{
	HarnessSet set = {0};
	char err[1024];
	int r = 0;

	if (a->n_configs == 0) {
		if (access(RW_DEFAULT_CONF, F_OK) == 0)
			r = scan_file(RW_DEFAULT_CONF, &set, err, sizeof(err));
	} else
		for (size_t i = 0; r == 0 && i < a->n_configs; i++)
			r = scan_file(a->configs[i], &set, err, sizeof(err));
	if (r == 0)
		r = finish(&set, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err);
		harness_set_done(&set);
		return r;
	}
	*ret = set;
	return 0;
}
