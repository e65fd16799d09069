/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "conf-parser.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macro.h"

const char *const conf_known_sections[] = {
    "runwarden", "routerd", "coordinatord", "containerd-shim", NULL,
};

/* Sections named "harness.NAME" and "tool.NAME" are opened by later features;
 * a daemon that has no table rows for them must still accept them. */
static bool
section_known(const char *s)
{
	for (size_t i = 0; conf_known_sections[i]; i++)
		if (streq(conf_known_sections[i], s))
			return true;
	return strncmp(s, "harness.", 8) == 0 || strncmp(s, "tool.", 5) == 0;
}

int
conf_parse_size(const char *s, int64_t *ret)
{
	char *end;
	int64_t mult = 1;

	if (!*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	if (*end) {
		switch (toupper((unsigned char)*end)) {
		case 'K': mult = 1024; break;
		case 'M': mult = 1024 * 1024; break;
		case 'G': mult = 1024LL * 1024 * 1024; break;
		default: return -EINVAL;
		}
		end++;
		/* optional "i" then optional "B": K, Ki, KB, KiB (not "KBB") */
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
		if (*end)
			return -EINVAL;
	}
	if (v > (unsigned long long)(INT64_MAX / mult))
		return -ERANGE;
	*ret = (int64_t)v * mult;
	return 0;
}

static int
parse_bool(const char *s)
{
	static const char *const yes[] = {"1", "yes", "true", "on"};
	static const char *const no[] = {"0", "no", "false", "off"};
	for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return 1;
		if (strcasecmp(s, no[i]) == 0)
			return 0;
	}
	return -EINVAL;
}

int
conf_parse_value(const ConfItem *item, const char *value, void *target, const char **why)
{
	char *field = (char *)target + item->offset;
	int64_t v;
	int r;

	switch (item->type) {
	case CONF_STR: {
		if (item->choices) {
			static char expected[256];
			size_t i, len = 0;
			for (i = 0; item->choices[i] && !streq(item->choices[i], value); i++)
				;
			if (!item->choices[i]) {
				len = (size_t)snprintf(expected, sizeof(expected), "expected");
				for (i = 0; item->choices[i] && len < sizeof(expected); i++)
					len += (size_t)snprintf(expected + len,
								sizeof(expected) - len, "%s '%s'",
								i == 0		       ? ""
								: item->choices[i + 1] ? ","
										       : " or",
								item->choices[i]);
				*why = expected;
				return -EINVAL;
			}
		}
		char *copy = strdup(value);
		if (!copy) {
			*why = "out of memory";
			return -ENOMEM;
		}
		free(*(char **)field);
		*(char **)field = copy;
		return 0;
	}
	case CONF_BOOL:
		r = parse_bool(value);
		if (r < 0) {
			*why = "expected a boolean (yes/no, true/false, on/off, 1/0)";
			return -EINVAL;
		}
		*(bool *)field = r;
		return 0;
	case CONF_LEVEL:
		r = log_level_from_string(value);
		if (r < 0) {
			*why = "expected one of debug, info, notice, warning, error";
			return -EINVAL;
		}
		*(int *)field = r;
		return 0;
	case CONF_INT: {
		char *end;
		errno = 0;
		long long ll = strtoll(value, &end, 10);
		if (!*value || *end || errno) {
			*why = "expected an integer";
			return -EINVAL;
		}
		v = ll;
		break;
	}
	case CONF_SIZE:
		r = conf_parse_size(value, &v);
		if (r < 0) {
			*why = "expected a size (a number with an optional K, M or G suffix)";
			return -EINVAL;
		}
		break;
	default: *why = "internal: unknown type"; return -EINVAL;
	}
	if (v < item->min || v > item->max) {
		*why = "out of range";
		return -ERANGE;
	}
	*(int64_t *)field = v;
	return 0;
}

int
conf_apply_defaults(const ConfItem *items, size_t n, void *target)
{
	for (size_t i = 0; i < n; i++) {
		const char *why;
		int r = conf_parse_value(&items[i], items[i].def, target, &why);
		if (r < 0)
			return r;
	}
	return 0;
}

typedef struct LoadState {
	const ConfItem *items;
	size_t n;
	void *target;
	const char *name;
	int line;
	char *err;
	size_t errlen;
	int r;
	int err_line; /* line of the error in r */
	bool *seen;   /* per item: set once in this file (duplicates are errors) */
	/* line source */
	FILE *f;
	const char *text;
	/* scan mode (conf_scan_file) */
	const char *prefix;
	ConfScanFn scan;
	void *scan_ud;
} LoadState;

static int
scan_handler(LoadState *st, const char *section, const char *key, const char *value)
{
	size_t pl = strlen(st->prefix);
	if (!key || strncmp(section, st->prefix, pl) != 0)
		return 1;
	char why[256] = "";
	int r = st->scan(section + pl, key, value, why, sizeof(why), st->scan_ud);
	if (r < 0) {
		snprintf(st->err, st->errlen, "%s:%d: %s: %s", st->name, st->line, key,
			 why[0] ? why : "invalid value");
		st->r = r;
		st->err_line = st->line;
		return 0;
	}
	return 1;
}

static int
handler(void *user, const char *section, const char *key, const char *value)
{
	LoadState *st = user;

	if (st->r < 0)
		return 0;
	if (st->scan)
		return scan_handler(st, section, key, value);
	if (!section_known(section)) {
		snprintf(st->err, st->errlen, "%s:%d: [%s]: unknown section", st->name, st->line,
			 section);
		st->r = -EINVAL;
		st->err_line = st->line;
		return 0;
	}
	if (!key) /* inih calls with key == NULL for a section header when configured; ignore */
		return 1;

	bool section_has_items = false;
	for (size_t i = 0; i < st->n; i++) {
		const ConfItem *it = &st->items[i];
		if (!streq(it->section, section))
			continue;
		section_has_items = true;
		if (!streq(it->key, key))
			continue;
		if (st->seen[i]) {
			snprintf(st->err, st->errlen, "%s:%d: %s: set twice in [%s]", st->name,
				 st->line, key, section);
			st->r = -EINVAL;
			st->err_line = st->line;
			return 0;
		}
		const char *why = NULL;
		int r = conf_parse_value(it, value, st->target, &why);
		if (r < 0) {
			if (r == -ERANGE && (it->type == CONF_INT || it->type == CONF_SIZE))
				snprintf(st->err, st->errlen,
					 "%s:%d: %s: '%s' out of range (%" PRId64 "..%" PRId64 ")",
					 st->name, st->line, key, value, it->min, it->max);
			else
				snprintf(st->err, st->errlen, "%s:%d: %s: '%s': %s", st->name,
					 st->line, key, value, why);
			st->r = -EINVAL;
			st->err_line = st->line;
			return 0;
		}
		st->seen[i] = true;
		return 1;
	}
	/* A section this daemon reads: the key must be one of ours. A section of
	 * another daemon is that daemon's business. [runwarden] is shared, so
	 * every daemon's table carries all of its keys. */
	if (section_has_items || streq(section, "runwarden")) {
		snprintf(st->err, st->errlen, "%s:%d: %s: unknown key in [%s]", st->name, st->line,
			 key, section);
		st->r = -EINVAL;
		st->err_line = st->line;
		return 0;
	}
	return 1;
}

/* inih hands us lines through this reader, which lets us count them: the
 * handler for a key always runs right after the reader returned its line. */
static char *
reader(char *str, int num, void *stream)
{
	LoadState *st = stream;
	char *r = NULL;

	if (st->f) {
		r = fgets(str, num, st->f);
	} else if (*st->text) {
		size_t len = strcspn(st->text, "\n");
		size_t take = MIN(len, (size_t)num - 2);
		memcpy(str, st->text, take);
		str[take] = '\n';
		str[take + 1] = '\0';
		st->text += len + (st->text[len] == '\n');
		r = str;
	}
	if (r)
		st->line++;
	return r;
}

static int
load(LoadState *st)
{
	_cleanup_free_ bool *seen = calloc(st->n ? st->n : 1, sizeof(bool));
	if (!seen)
		return -ENOMEM;
	st->seen = seen;
	int r = ini_parse_stream(reader, st, handler, st);
	/* inih goes on after a syntax error, so the handler may fail on a later
	 * line: report whichever came first. */
	if (st->r < 0 && !(r > 0 && r < st->err_line))
		return st->r;
	if (r > 0) {
		snprintf(st->err, st->errlen,
			 "%s:%d: syntax error (expected 'key = value' or '[section]')", st->name,
			 r);
		return -EINVAL;
	}
	if (r < 0) {
		snprintf(st->err, st->errlen, "%s: cannot read", st->name);
		return -EIO;
	}
	return 0;
}

int
conf_load_file(const ConfItem *items, size_t n, void *target, const char *path, char *err,
	       size_t errlen)
{
	LoadState st = {
	    .items = items, .n = n, .target = target, .name = path, .err = err, .errlen = errlen};
	int r;

	st.f = fopen(path, "re");
	if (!st.f) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = load(&st);
	fclose(st.f);
	return r;
}

int
conf_scan_file(const char *path, const char *prefix, ConfScanFn fn, void *ud, char *err,
	       size_t errlen)
{
	LoadState st = {.name = path,
			.err = err,
			.errlen = errlen,
			.prefix = prefix,
			.scan = fn,
			.scan_ud = ud};
	int r;

	st.f = fopen(path, "re");
	if (!st.f) {
		r = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = load(&st);
	fclose(st.f);
	return r;
}

int
conf_scan_string(const char *name, const char *text, const char *prefix, ConfScanFn fn, void *ud,
		 char *err, size_t errlen)
{
	LoadState st = {.name = name,
			.text = text,
			.err = err,
			.errlen = errlen,
			.prefix = prefix,
			.scan = fn,
			.scan_ud = ud};
	return load(&st);
}

int
conf_load_string(const ConfItem *items, size_t n, void *target, const char *name, const char *text,
		 char *err, size_t errlen)
{
	LoadState st = {.items = items,
			.n = n,
			.target = target,
			.name = name,
			.err = err,
			.errlen = errlen,
			.text = text};
	return load(&st);
}

void
conf_free_strings(const ConfItem *items, size_t n, void *target)
{
	for (size_t i = 0; i < n; i++)
		if (items[i].type == CONF_STR) {
			char **f = (char **)((char *)target + items[i].offset);
			free(*f);
			*f = NULL;
		}
}

void
conf_dump(FILE *f, const ConfItem *items, size_t n)
{
	const char *section = NULL;

	for (size_t i = 0; i < n; i++) {
		const ConfItem *it = &items[i];
		if (!section || !streq(section, it->section)) {
			fprintf(f, "%s[%s]\n", section ? "\n" : "", it->section);
			section = it->section;
		}
		char text[1024], *p, *save = NULL;
		size_t col = 0;
		if (it->type == CONF_INT || it->type == CONF_SIZE)
			snprintf(text, sizeof(text), "%s (%" PRId64 "..%" PRId64 "%s)", it->help,
				 it->min, it->max,
				 it->type == CONF_SIZE ? " bytes; K, M, G suffixes" : "");
		else
			snprintf(text, sizeof(text), "%s", it->help);
		/* Word-wrapped at 80 columns: parsers have line limits (inih: 200). */
		for (p = strtok_r(text, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
			size_t l = strlen(p);
			if (col > 0 && col + 1 + l > 78) {
				fputc('\n', f);
				col = 0;
			}
			col += (size_t)fprintf(f, "%s%s", col == 0 ? "# " : " ", p);
		}
		fprintf(f, "\n#%s = %s\n", it->key, it->def);
	}
}
