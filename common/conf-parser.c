/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "conf-parser.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "macro.h"
#include "strv.h"

const char *const conf_known_sections[] = {
    "runwarden", "cluster", "routerd", "coordinatord", "containerd-shim", NULL,
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

/* "expected 'a', 'b' or 'c'" (a static buffer) */
static const char *
choices_expected(const char *const *choices)
{
	static char expected[256];
	size_t len = (size_t)snprintf(expected, sizeof(expected), "expected");

	for (size_t i = 0; choices[i] && len < sizeof(expected); i++)
		len += (size_t)snprintf(expected + len, sizeof(expected) - len, "%s '%s'",
					i == 0		 ? ""
					: choices[i + 1] ? ","
							 : " or",
					choices[i]);
	return expected;
}

static int
choice_index(const char *const *choices, const char *value)
{
	for (int i = 0; choices[i]; i++)
		if (streq(choices[i], value))
			return i;
	return -1;
}

/* CONF_ARGV, CONF_WORDS, CONF_ENV: the vector, or NULL with -EINVAL/-EDOM
 * and why (or -ENOMEM). */
static int
parse_vector(const ConfItem *item, const char *value, char ***ret, const char **why)
{
	static char part[320];
	char **v = NULL;

	if (item->type == CONF_WORDS) {
		_cleanup_free_ char *copy = strdup(value);
		char *save = NULL;
		if (!copy)
			return -ENOMEM;
		for (char *w = strtok_r(copy, " \t,", &save); w;
		     w = strtok_r(NULL, " \t,", &save)) {
			if (item->valid && !item->valid(w)) {
				strv_free(v);
				*why = "expected a list of words";
				return -EINVAL;
			}
			if (strv_push(&v, w) < 0) {
				strv_free(v);
				return -ENOMEM;
			}
		}
		*ret = v;
		return 0;
	}

	json_t *j = json_loads(value, 0, NULL);
	if (item->type == CONF_ARGV) {
		size_t i;
		json_t *a;
		if (!json_is_array(j) || json_array_size(j) == 0) {
			json_decref(j);
			*why = "expected a JSON array of strings, e.g. [\"claude\"]";
			return -EINVAL;
		}
		json_array_foreach(j, i, a)
		{
			if (!json_is_string(a) || !*json_string_value(a) ||
			    strv_push(&v, json_string_value(a)) < 0) {
				strv_free(v);
				json_decref(j);
				snprintf(part, sizeof(part),
					 "argument %zu is not a non-empty string", i);
				*why = part;
				return -EDOM;
			}
		}
	} else {
		const char *k;
		json_t *a;
		if (!json_is_object(j)) {
			json_decref(j);
			*why = "expected a JSON object of strings";
			return -EINVAL;
		}
		json_object_foreach(j, k, a)
		{
			if ((item->valid && !item->valid(k)) || !json_is_string(a) ||
			    strv_pushf(&v, "%s=%s", k, json_string_value(a)) < 0) {
				strv_free(v);
				snprintf(part, sizeof(part), "'%s' is not NAME: \"string\"", k);
				json_decref(j);
				*why = part;
				return -EDOM;
			}
		}
	}
	json_decref(j);
	*ret = v;
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
		if (item->choices && choice_index(item->choices, value) < 0) {
			*why = choices_expected(item->choices);
			return -EINVAL;
		}
		if (item->valid && *value && !item->valid(value)) {
			*why = "invalid value";
			return -EINVAL;
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
	case CONF_CHOICE:
		r = choice_index(item->choices, value);
		if (r < 0) {
			*why = choices_expected(item->choices);
			return -EINVAL;
		}
		*(int *)field = r;
		return 0;
	case CONF_ARGV:
	case CONF_WORDS:
	case CONF_ENV: {
		char **vec = NULL;
		r = parse_vector(item, value, &vec, why);
		if (r == -ENOMEM)
			*why = "out of memory";
		if (r < 0)
			return r;
		strv_free(*(char ***)field);
		*(char ***)field = vec;
		return 0;
	}
	case CONF_JSON: {
		json_t *j = json_loads(value, 0, NULL);
		if (!json_is_object(j)) {
			json_decref(j);
			*why = "expected a JSON object";
			return -EINVAL;
		}
		json_decref(*(json_t **)field);
		*(json_t **)field = j;
		return 0;
	}
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
		if (!items[i].def)
			continue;
		int r = conf_parse_value(&items[i], items[i].def, target, &why);
		if (r < 0)
			return r;
	}
	return 0;
}

/* What follows "FILE:LINE: KEY: " when conf_parse_value() refused value with
 * r and why. */
static void
reason(const ConfItem *it, const char *value, int r, const char *why, char *buf, size_t len)
{
	if (r == -EDOM)
		snprintf(buf, len, "%s", why);
	else if (it->expected)
		snprintf(buf, len, "'%s': %s", value, it->expected);
	else if (r == -ERANGE && (it->type == CONF_INT || it->type == CONF_SIZE))
		snprintf(buf, len, "'%s' out of range (%" PRId64 "..%" PRId64 ")", value, it->min,
			 it->max);
	else
		snprintf(buf, len, "'%s': %s", value, why);
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
	bool mid_line;	   /* the last chunk read did not end its line */
	size_t line_len;   /* bytes of the current line read so far */
	char line_key[64]; /* its start up to '=' (for a too-long line's error) */
	/* scan mode (conf_scan_file) */
	const char *prefix;
	ConfScanFn scan;
	void *scan_ud;
} LoadState;

/* Stop the load at the current line with r and "name:line: " + fmt in err;
 * returns 0 (inih's "stop"). */
static _printf_(3, 4) int line_error(LoadState *st, int r, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(st->err, st->errlen, "%s:%d: ", st->name, st->line);

	if (k >= 0 && (size_t)k < st->errlen) {
		va_start(ap, fmt);
		vsnprintf(st->err + k, st->errlen - (size_t)k, fmt, ap);
		va_end(ap);
	}
	st->r = r;
	st->err_line = st->line;
	return 0;
}

static int
scan_handler(LoadState *st, const char *section, const char *key, const char *value)
{
	size_t pl = strlen(st->prefix);
	if (!key || strncmp(section, st->prefix, pl) != 0)
		return 1;
	Reason why = {""};
	int r = st->scan(section + pl, key, value, &why, st->scan_ud);
	if (r < 0)
		return line_error(st, r, "%s: %s", key, why.msg[0] ? why.msg : "invalid value");
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
	if (!section_known(section))
		return line_error(st, -EINVAL, "[%s]: unknown section", section);
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
		if (st->seen[i])
			return line_error(st, -EINVAL, "%s: set twice in [%s]", key, section);
		const char *why = NULL;
		int r = conf_parse_value(it, value, st->target, &why);
		if (r < 0) {
			char text[1024];
			reason(it, value, r, why, text, sizeof(text));
			return line_error(st, -EINVAL, "%s: %s", key, text);
		}
		st->seen[i] = true;
		return 1;
	}
	/* A section this daemon reads: the key must be one of ours. A section of
	 * another daemon is that daemon's business. [runwarden] is shared, so
	 * every daemon's table carries all of its keys. */
	if (section_has_items || streq(section, "runwarden"))
		return line_error(st, -EINVAL, "%s: unknown key in [%s]", key, section);
	return 1;
}

/* One chunk of the text source, as fgets() would read it: up to num - 1
 * bytes, ending at the first '\n' it takes. */
static char *
text_gets(char *str, int num, const char **text)
{
	if (!**text || num < 2)
		return NULL;
	size_t len = strcspn(*text, "\n");
	len = MIN(len + ((*text)[len] == '\n'), (size_t)num - 1);
	memcpy(str, *text, len);
	str[len] = '\0';
	*text += len;
	return str;
}

/* The key a line starts with (its text up to '=' or ':', trimmed). */
static void
line_key(const char *line, char *buf, size_t size)
{
	line += strspn(line, " \t");
	size_t n = strcspn(line, "=:\n");
	while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
		n--;
	snprintf(buf, size, "%.*s", (int)n, line);
}

/* inih hands us lines through this reader, which lets us count them: the
 * handler for a key always runs right after the reader returned its line.
 * inih reads a line longer than its buffer in chunks (ini_allow_realloc,
 * conf_load's settings): only the chunk that starts a line counts. A line
 * over CONF_LINE_MAX bytes is an error of its own line, and the end of the
 * input for inih (a cut line must not be parsed as the next one). */
static char *
reader(char *str, int num, void *stream)
{
	LoadState *st = stream;
	char *r = st->f ? fgets(str, num, st->f) : text_gets(str, num, &st->text);

	if (!r || st->r < 0)
		return NULL;
	if (!st->mid_line) {
		st->line++;
		st->line_len = 0;
		line_key(r, st->line_key, sizeof(st->line_key));
	}
	size_t len = strlen(r);
	st->line_len += len;
	st->mid_line = len == 0 || r[len - 1] != '\n';
	if (st->line_len - !st->mid_line > CONF_LINE_MAX) { /* its text, less the newline */
		line_error(st, -EINVAL, "%s: the line is longer than %d bytes",
			   st->line_key[0] ? st->line_key : "(no key)", CONF_LINE_MAX);
		return NULL;
	}
	return r;
}

static int
load(LoadState *st)
{
	_cleanup_free_ bool *seen = calloc(st->n ? st->n : 1, sizeof(bool));
	if (!seen)
		return -ENOMEM;
	st->seen = seen;
	/* Debian's inih reads its settings at run time: a line may be as long
	 * as CONF_LINE_MAX (a harness command with its arguments), not 200. */
	ini_use_stack = false;
	ini_allow_realloc = true;
	ini_max_line = CONF_LINE_MAX + 3; /* '\r', '\n' and '\0' */
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

/* load() over the file st->name. */
static int
load_file(LoadState *st)
{
	int r;

	st->f = fopen(st->name, "re");
	if (!st->f) {
		r = -errno;
		snprintf(st->err, st->errlen, "%s: %s", st->name, strerror(-r));
		return r;
	}
	r = load(st);
	fclose(st->f);
	return r;
}

int
conf_load_file(const ConfItem *items, size_t n, void *target, const char *path, char *err,
	       size_t errlen)
{
	LoadState st = {
	    .items = items, .n = n, .target = target, .name = path, .err = err, .errlen = errlen};
	return load_file(&st);
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
	return load_file(&st);
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

typedef struct ItemScan {
	const ConfItem *items;
	size_t n;
	const char *prefix; /* "harness." of "harness.NAME" */
	ConfSectionFn get;
	void *ud;
} ItemScan;

static int
item_scan(const char *name, const char *key, const char *value, Reason *why, void *ud)
{
	ItemScan *is = ud;
	void *target = NULL;
	int r = is->get(name, &target, why, is->ud);

	if (r < 0)
		return r;
	for (size_t i = 0; i < is->n; i++) {
		const ConfItem *it = &is->items[i];
		const char *w = NULL;
		if (!streq(it->key, key))
			continue;
		r = conf_parse_value(it, value, target, &w);
		if (r == -ENOMEM)
			return r;
		if (r < 0) {
			reason(it, value, r, w, why->msg, sizeof(why->msg));
			return -EINVAL;
		}
		return 0;
	}
	reason_set(why, "unknown key in [%s%s]", is->prefix, name);
	return -EINVAL;
}

/* The scan of items over path (or text when path is NULL). */
static int
scan_items(const char *path, const char *name, const char *text, const ConfItem *items, size_t n,
	   ConfSectionFn get, void *ud, char *err, size_t errlen)
{
	char prefix[64];
	const char *dot = n ? strchr(items[0].section, '.') : NULL;
	ItemScan is = {.items = items, .n = n, .prefix = prefix, .get = get, .ud = ud};

	if (!dot || (size_t)(dot - items[0].section) + 2 > sizeof(prefix)) {
		snprintf(err, errlen, "internal: not a templated table");
		return -EINVAL;
	}
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(dot - items[0].section + 1),
		 items[0].section);
	if (path)
		return conf_scan_file(path, prefix, item_scan, &is, err, errlen);
	return conf_scan_string(name, text, prefix, item_scan, &is, err, errlen);
}

int
conf_scan_items_file(const char *path, const ConfItem *items, size_t n, ConfSectionFn get, void *ud,
		     char *err, size_t errlen)
{
	return scan_items(path, NULL, NULL, items, n, get, ud, err, errlen);
}

int
conf_scan_items_string(const char *name, const char *text, const ConfItem *items, size_t n,
		       ConfSectionFn get, void *ud, char *err, size_t errlen)
{
	return scan_items(NULL, name, text, items, n, get, ud, err, errlen);
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
			/* a templated section ([harness.NAME]) is commented out: it
			 * documents keys, it is not one to uncomment as it is */
			fprintf(f, "%s%s[%s]\n", section ? "\n" : "",
				strchr(it->section, '.') ? "#" : "", it->section);
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
		/* Word-wrapped at 80 columns, to be read. */
		for (p = strtok_r(text, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
			size_t l = strlen(p);
			if (col > 0 && col + 1 + l > 78) {
				fputc('\n', f);
				col = 0;
			}
			col += (size_t)fprintf(f, "%s%s", col == 0 ? "# " : " ", p);
		}
		fprintf(f, "\n#%s = %s\n", it->key, it->def ? it->def : "");
	}
}
