/* SPDX-License-Identifier: MIT */
/*
 * conf-parser.h — table-driven parser for runwarden.conf (INI, via inih).
 *
 * Each daemon describes the keys it reads as a ConfItem table: section, key,
 * type, offset of the field in its config struct, default (as text, parsed by
 * the same code as the file), range and one line of help. One file holds the
 * sections of all three daemons plus [runwarden] for shared keys; a daemon
 * checks its own sections strictly and skips the sections of the others.
 *
 * Errors are reported as "FILE:LINE: KEY: reason" in the caller's buffer:
 * unknown section, unknown key, bad value, out of range, duplicate key, a line
 * longer than CONF_LINE_MAX bytes.
 *
 * Layering: conf_apply_defaults() then conf_load_file() once per file; a later
 * file overrides an earlier one key by key (./dev up layers --config over the
 * development defaults this way).
 *
 * String fields are `char *` owned by the struct; conf_free_strings() frees them.
 *
 * Sections with a variable name ([harness.NAME], [tool.NAME]) have tables of
 * their own, scanned with conf_scan_items_file(): one struct per NAME, its
 * keys typed like the others, plus argv, word-list, environment and JSON
 * values, each with its validator and, where a daemon's message must stay as
 * it was, its own "expected ..." text.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "reason.h"

/* The longest line read (its text, without the newline): a harness command
 * with its arguments fits; a longer line is an error naming its line and key. */
#define CONF_LINE_MAX 65536

typedef enum ConfType {
	CONF_STR,    /* char *; "" allowed */
	CONF_BOOL,   /* bool; yes/no/true/false/on/off/1/0 */
	CONF_INT,    /* int64_t; decimal; min..max */
	CONF_SIZE,   /* int64_t bytes; suffix K, M, G (1024-based); min..max */
	CONF_LEVEL,  /* int log level; debug|info|notice|warning|error */
	CONF_CHOICE, /* int: the index of the value in choices */
	CONF_ARGV,   /* char **: a JSON array of non-empty strings, e.g. ["claude", "-p"] */
	CONF_WORDS,  /* char **: words separated by spaces, tabs or commas, each passing valid */
	CONF_ENV,  /* char **: a JSON object of strings, as "NAME=value"; each NAME passing valid */
	CONF_JSON, /* json_t *: a JSON object */
} ConfType;

typedef struct ConfItem {
	const char *section; /* "NAME" of [NAME], or "PREFIX.NAME" for templated sections */
	const char *key;
	ConfType type;
	size_t offset;
	const char *def;  /* default, as it would be written in the file; NULL = none */
	int64_t min, max; /* CONF_INT / CONF_SIZE range, inclusive */
	const char *help;
	/* CONF_STR: the values allowed (NULL-terminated), or NULL; CONF_CHOICE: the
	 * values, the field is the index of the one given */
	const char *const *choices;
	/* CONF_WORDS: each word; CONF_ENV: each name; CONF_STR: the value, unless empty */
	bool (*valid)(const char *s);
	/* When set, any bad value is reported as "'VALUE': " and this text (the
	 * range too), instead of the type's own reason. */
	const char *expected;
} ConfItem;

/* Sections any daemon accepts without complaint (they belong to another daemon). */
extern const char *const conf_known_sections[];

/* Parse one value for item into target (the config struct). 0 or -EINVAL/-ERANGE,
 * with a reason in why[] (about the whole value, which the caller quotes), or
 * -EDOM with why[] naming the one element of a CONF_ARGV or CONF_ENV value
 * that is refused. Exposed for tests. */
int conf_parse_value(const ConfItem *item, const char *value, void *target, const char **why);

/* Apply every item's default (items without one are left alone). 0 or a
 * negative errno (a bad default is a bug). */
int conf_apply_defaults(const ConfItem *items, size_t n, void *target);

/* Parse path over target. Returns 0, -ENOENT (file missing), or -EINVAL with
 * "path:line: key: reason" in err.
 *
 * err/errlen here and below is not a Reason (common/reason.h) on purpose: it
 * is the whole message for the operator, naming the place in a file and
 * quoting the value, which runs past a Reason's 320 bytes (callers give 1024),
 * and its errno is nearly always -EINVAL. The per-key callbacks' reasons
 * (ConfScanFn, ConfSectionFn) are Reasons. */
int conf_load_file(const ConfItem *items, size_t n, void *target, const char *path, char *err,
		   size_t errlen);

/* Same, from a string (tests); name is used in messages. */
int conf_load_string(const ConfItem *items, size_t n, void *target, const char *name,
		     const char *text, char *err, size_t errlen);

/* Sections with a variable name ([harness.NAME], [tool.NAME]): call fn for
 * every key of every section whose name starts with prefix, with the rest of
 * the section name. fn returns 0, or a negative errno with a reason in
 * *why (a Reason); the scan then stops with "path:line: key: why" in err. */
typedef int (*ConfScanFn)(const char *name, const char *key, const char *value, Reason *why,
			  void *ud);
int conf_scan_file(const char *path, const char *prefix, ConfScanFn fn, void *ud, char *err,
		   size_t errlen);
int conf_scan_string(const char *name, const char *text, const char *prefix, ConfScanFn fn,
		     void *ud, char *err, size_t errlen);

/* Sections with a variable name from a table: items[] all have the section
 * "PREFIX.NAME" (e.g. "harness.NAME"); for each key of each [PREFIX.x]
 * section of the file, get(x) returns the struct that section fills (made,
 * with its defaults, the first time), and the key's item parses the value
 * into it. A key set again, in the same file or a later one, overrides.
 * Errors stop the scan with "path:line: key: reason" in err: the reason get()
 * gives (a bad section name), "unknown key in [PREFIX.x]", or the value's. */
typedef int (*ConfSectionFn)(const char *name, void **ret, Reason *why, void *ud);
int conf_scan_items_file(const char *path, const ConfItem *items, size_t n, ConfSectionFn get,
			 void *ud, char *err, size_t errlen);
int conf_scan_items_string(const char *name, const char *text, const ConfItem *items, size_t n,
			   ConfSectionFn get, void *ud, char *err, size_t errlen);

/* Free every CONF_STR field. */
void conf_free_strings(const ConfItem *items, size_t n, void *target);

/* Print the table as runwarden.conf text: a [section] line whenever the
 * section changes (commented out, "#[harness.NAME]", for a templated one),
 * then for each key its help as a comment, its range, and "#key = default"
 * ("#key = " without one). conf/runwarden.conf is made of these (a test
 * checks it). */
void conf_dump(FILE *f, const ConfItem *items, size_t n);

/* Parse "1K", "16M", "3G", "100" into bytes. 0 or -EINVAL/-ERANGE. */
int conf_parse_size(const char *s, int64_t *ret);
