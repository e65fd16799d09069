/* SPDX-License-Identifier: MIT */
/*
 * harness-conf.c — the [harness.NAME] sections.
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
 */
#include "config.h"

#include "adapter.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "net-addr.h"
#include "shared-conf.h"
#include "strv.h"

static const char *const adapter_names[_ADAPTER_MAX] = {
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
	mp_strv_free(t->argv);
	*t = (Tool){0};
}

static void
harness_done(Harness *h)
{
	free(h->name);
	mp_strv_free(h->argv);
	mp_strv_free(h->env);
	mp_strv_free(h->secrets);
	mp_strv_free(h->egress);
	mp_strv_free(h->egress_allow_private);
	mp_strv_free(h->tools);
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
	*t = (Tool){.name = strdup(name), .timeout_ms = 60000};
	if (!t->name)
		return NULL;
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
	*h = (Harness){.name = strdup(name), .adapter = _ADAPTER_MAX, .max_line = 1 << 20};
	if (!h->name)
		return NULL;
	set->n++;
	return h;
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

/* Space-separated words into a vector, each checked. */
static int
words(const char *value, bool (*ok)(const char *), char ***ret, const char **bad)
{
	char **v = NULL;
	_cleanup_free_ char *copy = strdup(value);
	char *save = NULL;
	if (!copy)
		return -ENOMEM;
	for (char *w = strtok_r(copy, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save)) {
		if (!ok(w)) {
			*bad = value;
			mp_strv_free(v);
			return -EINVAL;
		}
		if (strv_push(&v, w) < 0) {
			mp_strv_free(v);
			return -ENOMEM;
		}
	}
	mp_strv_free(*ret);
	*ret = v;
	return 0;
}

static bool
valid_cidr(const char *s)
{
	NetCidr c;
	return net_cidr_parse(s, &c) == 0;
}

static bool
valid_host(const char *s)
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

static int
parse_argv(const char *value, char ***ret, char *why, size_t whylen)
{
	json_auto_t *j = json_loads(value, 0, NULL);
	size_t i;
	json_t *a;
	char **v = NULL;
	if (!json_is_array(j) || json_array_size(j) == 0) {
		snprintf(why, whylen, "'%s': expected a JSON array of strings, e.g. [\"claude\"]",
			 value);
		return -EINVAL;
	}
	json_array_foreach(j, i, a)
	{
		if (!json_is_string(a) || !*json_string_value(a) ||
		    strv_push(&v, json_string_value(a)) < 0) {
			mp_strv_free(v);
			snprintf(why, whylen, "argument %zu is not a non-empty string", i);
			return -EINVAL;
		}
	}
	mp_strv_free(*ret);
	*ret = v;
	return 0;
}

static int
scan_tool(const char *name, const char *key, const char *value, char *why, size_t whylen, void *ud)
{
	HarnessSet *set = ud;
	Tool *t;

	if (!valid_name(name, 64)) {
		snprintf(why, whylen, "tool name '%s': use 1..64 of [A-Za-z0-9._-]", name);
		return -EINVAL;
	}
	t = tool_get(set, name);
	if (!t)
		return -ENOMEM;
	if (streq(key, "command"))
		return parse_argv(value, &t->argv, why, whylen);
	if (streq(key, "description")) {
		char *d = strdup(value);
		if (!d)
			return -ENOMEM;
		free(t->description);
		t->description = d;
		return 0;
	}
	if (streq(key, "schema")) {
		json_t *j = json_loads(value, 0, NULL);
		if (!json_is_object(j)) {
			json_decref(j);
			snprintf(why, whylen, "'%s': expected a JSON Schema object", value);
			return -EINVAL;
		}
		json_decref(t->schema);
		t->schema = j;
		return 0;
	}
	if (streq(key, "timeout_ms")) {
		char *end;
		long long v = strtoll(value, &end, 10);
		if (!*value || *end || v < 1 || v > 86400000LL) {
			snprintf(why, whylen, "'%s': expected milliseconds (1..86400000)", value);
			return -EINVAL;
		}
		t->timeout_ms = v;
		return 0;
	}
	snprintf(why, whylen, "unknown key in [tool.%s]", name);
	return -EINVAL;
}

static int
scan(const char *name, const char *key, const char *value, char *why, size_t whylen, void *ud)
{
	HarnessSet *set = ud;
	Harness *h;
	const char *bad = NULL;
	int r;

	if (!valid_name(name, 64)) {
		snprintf(why, whylen, "harness name '%s': use 1..64 of [A-Za-z0-9._-]", name);
		return -EINVAL;
	}
	h = harness_get(set, name);
	if (!h)
		return -ENOMEM;
	if (streq(key, "adapter")) {
		for (int k = 0; k < _ADAPTER_MAX; k++)
			if (streq(value, adapter_names[k])) {
				h->adapter = (AdapterKind)k;
				return 0;
			}
		snprintf(why, whylen, "'%s': expected shell, ndjson, claude-code or codex", value);
		return -EINVAL;
	}
	if (streq(key, "command"))
		return parse_argv(value, &h->argv, why, whylen);
	if (streq(key, "env")) {
		json_auto_t *j = json_loads(value, 0, NULL);
		const char *k;
		json_t *v;
		char **env = NULL;
		if (!json_is_object(j)) {
			snprintf(why, whylen, "'%s': expected a JSON object of strings", value);
			return -EINVAL;
		}
		json_object_foreach(j, k, v)
		{
			if (!valid_env_name(k) || !json_is_string(v) ||
			    strv_pushf(&env, "%s=%s", k, json_string_value(v)) < 0) {
				mp_strv_free(env);
				snprintf(why, whylen, "'%s' is not NAME: \"string\"", k);
				return -EINVAL;
			}
		}
		mp_strv_free(h->env);
		h->env = env;
		return 0;
	}
	if (streq(key, "secrets")) {
		r = words(value, valid_env_name, &h->secrets, &bad);
		if (r == -EINVAL)
			snprintf(why, whylen, "'%s': expected environment variable names", value);
		return r;
	}
	if (streq(key, "tools")) {
		r = words(value, valid_tool_name, &h->tools, &bad);
		if (r == -EINVAL)
			snprintf(why, whylen, "'%s': expected tool names", value);
		return r;
	}
	if (streq(key, "egress")) {
		r = words(value, valid_host, &h->egress, &bad);
		if (r == -EINVAL)
			snprintf(why, whylen,
				 "'%s': expected host names (host or host:port, no IP literals)",
				 value);
		return r;
	}
	if (streq(key, "egress_allow_private")) {
		r = words(value, valid_cidr, &h->egress_allow_private, &bad);
		if (r == -EINVAL)
			snprintf(why, whylen,
				 "'%s': expected IPv4/IPv6 networks (address/prefix with the host "
				 "bits zero, e.g. 10.0.0.0/8 127.0.0.1/32 fd00::/8)",
				 value);
		return r;
	}
	if (streq(key, "timeout_ms") || streq(key, "max_line")) {
		int64_t v;
		char *end;
		if (streq(key, "max_line")) {
			r = conf_parse_size(value, &v);
			if (r < 0 || v < 256 || v > (64 << 20)) {
				snprintf(why, whylen, "'%s': expected a size from 256 to 64M",
					 value);
				return -EINVAL;
			}
			h->max_line = v;
		} else {
			v = strtoll(value, &end, 10);
			if (!*value || *end || v < 0 || v > 86400000LL * 7) {
				snprintf(why, whylen, "'%s': expected milliseconds (0 = none)",
					 value);
				return -EINVAL;
			}
			h->timeout_ms = v;
		}
		return 0;
	}
	if (streq(key, "keep_processes")) {
		static const char *const yes[] = {"1", "yes", "true", "on"};
		static const char *const no[] = {"0", "no", "false", "off"};
		for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
			if (strcasecmp(value, yes[i]) == 0 || strcasecmp(value, no[i]) == 0) {
				h->keep_processes = strcasecmp(value, yes[i]) == 0;
				return 0;
			}
		}
		snprintf(why, whylen, "'%s': expected true or false", value);
		return -EINVAL;
	}
	snprintf(why, whylen, "unknown key in [harness.%s]", name);
	return -EINVAL;
}

static int
finish(HarnessSet *set, char *err, size_t errlen)
{
	for (size_t i = 0; i < set->n_tools; i++)
		if (!set->tools[i].argv) {
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
		} else if (set->v[i].adapter == ADAPTER_NDJSON && !set->v[i].argv) {
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
	int r = conf_scan_string(name, text, "harness.", scan, &set, err, errlen);
	if (r == 0)
		r = conf_scan_string(name, text, "tool.", scan_tool, &set, err, errlen);
	if (r == 0)
		r = finish(&set, err, errlen);
	if (r < 0) {
		harness_set_done(&set);
		return r;
	}
	*ret = set;
	return 0;
}

int
harness_load(const DaemonArgs *a, HarnessSet *ret)
{
	HarnessSet set = {0};
	char err[1024];
	int r = 0;

	if (a->n_configs == 0) {
		if (access(RW_DEFAULT_CONF, F_OK) == 0) {
			r = conf_scan_file(RW_DEFAULT_CONF, "harness.", scan, &set, err,
					   sizeof(err));
			if (r == 0)
				r = conf_scan_file(RW_DEFAULT_CONF, "tool.", scan_tool, &set, err,
						   sizeof(err));
		}
	} else
		for (size_t i = 0; r == 0 && i < a->n_configs; i++) {
			r = conf_scan_file(a->configs[i], "harness.", scan, &set, err, sizeof(err));
			if (r == 0)
				r = conf_scan_file(a->configs[i], "tool.", scan_tool, &set, err,
						   sizeof(err));
		}
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
