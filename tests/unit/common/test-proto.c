/* SPDX-License-Identifier: MIT */
/*
 * test-proto.c — common/proto/proto.c and messages.def, and reasons.def,
 * against docs/PROTOCOL.md.
 *
 * The test expands messages.def itself, so a row added there is checked
 * without touching this file: it must have a name, be valid, keep its
 * direction, and be documented as a "### NAME" heading in docs/PROTOCOL.md.
 * The document is found through $RW_PROTOCOL_MD, else TOP_SRCDIR (set by
 * tests/unit/unit.am).
 *
 * reasons.def the same way: every row is a valid wire name with an HTTP
 * status and code, and stands in one of PROTOCOL.md's reason tables (those
 * whose header begins "| reason | errno | HTTP |") with that status and
 * code; every reason those tables name is a row. And run-errors.def: every
 * code is valid and in PROTOCOL.md's "| run error | when |" table, every code
 * there is a row.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "macro.h"
#include "proto.h"
#include "reasons.h"
#include "run-errors.h"

#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif

typedef struct Row {
	const char *name;
	int id;
	MsgDir dir;
	const char *fields;
} Row;

static const Row rows[] = {
#define F MSG_FIELD_SCHEMA
#define MSG(n, i, d, f) {#n, i, MSGDIR_##d, "" f},
#include "messages.def"
#undef MSG
#undef F
};

/* A row's schema as msg_type_fields() gives it: less the leading ", ". */
static const char *
row_fields(const Row *r)
{
	return r->fields[0] ? r->fields + 2 : r->fields;
}

static char *
read_protocol_md(void)
{
	const char *env = getenv("RW_PROTOCOL_MD");
	char path[PATH_MAX];
	if (env && *env)
		snprintf(path, sizeof(path), "%s", env);
	else
		snprintf(path, sizeof(path), "%s/docs/PROTOCOL.md", TOP_SRCDIR);

	FILE *f = fopen(path, "re");
	if (!f)
		fail_msg("cannot open %s: %s", path, strerror(errno));
	char *buf = NULL;
	size_t len = 0, cap = 0;
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		memcpy(buf + len, chunk, n);
		len += n;
	}
	fclose(f);
	if (!buf)
		buf = strdup("");
	else
		buf[len] = '\0';
	return buf;
}

/* true when doc has a line "### name" (optionally followed by spaces or a
 * non-identifier character, e.g. "### RUN_START (10)"). */
static bool
has_heading(const char *doc, const char *name)
{
	size_t nl = strlen(name);
	for (const char *line = doc; line && *line;) {
		if (strncmp(line, "### ", 4) == 0 && strncmp(line + 4, name, nl) == 0) {
			char c = line[4 + nl];
			if (c == '\0' || c == '\n' || c == '\r' || c == ' ' || c == '\t' ||
			    c == '(' || c == '-' || c == ':')
				return true;
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return false;
}

static void
test_proto_every_type_valid_and_named(void **state)
{
	assert_true(ELEMENTSOF(rows) > 0);
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		const Row *r = &rows[i];
		if (!msg_type_valid(r->id))
			fail_msg("%s (%d) is not msg_type_valid", r->name, r->id);
		assert_non_null(msg_type_name(r->id));
		assert_string_equal(msg_type_name(r->id), r->name);
		assert_non_null(msg_type_fields(r->id));
		assert_string_equal(msg_type_fields(r->id), row_fields(r));
		assert_int_equal(msg_type_dir(r->id), r->dir);
		assert_true(r->id < _MSG_TYPE_MAX);
		/* names and ids are unique */
		for (size_t j = 0; j < i; j++) {
			assert_int_not_equal(rows[j].id, r->id);
			assert_string_not_equal(rows[j].name, r->name);
		}
	}
	/* every valid id is a row: no phantom entries */
	size_t valid = 0;
	for (int t = -5; t < _MSG_TYPE_MAX + 5; t++)
		if (msg_type_valid(t))
			valid++;
	assert_int_equal(valid, ELEMENTSOF(rows));
}

static void
test_proto_invalid_types(void **state)
{
	static const int bad[] = {0, -1, -22, 4, 9, 16, 19, 21, 29, 34, 39, 42, INT_MAX, INT_MIN};
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		int t = bad[i];
		bool is_row = false;
		for (size_t j = 0; j < ELEMENTSOF(rows); j++)
			is_row = is_row || rows[j].id == t;
		if (is_row)
			continue; /* the table grew into this id; fine */
		if (msg_type_valid(t))
			fail_msg("type %d should be invalid", t);
		assert_null(msg_type_name(t));
		assert_null(msg_type_fields(t));
		assert_int_equal(msg_type_dir(t), MSGDIR_ANY);
		assert_false(msg_allowed(t, ROLE_CLIENT, ROLE_COORD));
		assert_false(msg_allowed(t, ROLE_ROUTER, ROLE_COORD));
	}
	assert_false(msg_type_valid(_MSG_TYPE_MAX));
	assert_false(msg_type_valid(_MSG_TYPE_INVALID));
}

static void
test_proto_documented_in_protocol_md(void **state)
{
	char *doc = read_protocol_md();
	int missing = 0;
	for (size_t i = 0; i < ELEMENTSOF(rows); i++)
		if (!has_heading(doc, rows[i].name)) {
			print_error("docs/PROTOCOL.md: no \"### %s\" heading\n", rows[i].name);
			missing++;
		}
	/* and the other way: a "### NAME" that looks like a message type must be one */
	for (const char *line = doc; line && *line;) {
		if (strncmp(line, "### ", 4) == 0) {
			const char *p = line + 4;
			size_t n = 0;
			while (isupper((unsigned char)p[n]) || p[n] == '_' ||
			       isdigit((unsigned char)p[n]))
				n++;
			bool whole = n > 0 && (p[n] == '\0' || p[n] == '\n' || p[n] == '\r' ||
					       p[n] == ' ' || p[n] == '(');
			if (whole && strchr(p, '_') && (size_t)(strchr(p, '_') - p) < n) {
				bool known = false;
				for (size_t i = 0; i < ELEMENTSOF(rows); i++)
					known = known || (strlen(rows[i].name) == n &&
							  strncmp(rows[i].name, p, n) == 0);
				if (!known) {
					print_error(
					    "docs/PROTOCOL.md documents \"%.*s\", which is not "
					    "in messages.def\n",
					    (int)n, p);
					missing++;
				}
			}
		}
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	free(doc);
	assert_int_equal(missing, 0);
}

static void
test_proto_heading_matcher(void **state)
{
	/* the helper itself: whole names only, at the start of a line */
	const char *doc = "# t\n### RUN_GETX\ntext ### RUN_GET\n#### RUN_GET\n### RUN_READ (12)\n";
	assert_false(has_heading(doc, "RUN_GET"));
	assert_true(has_heading(doc, "RUN_READ"));
	assert_true(has_heading(doc, "RUN_GETX"));
	assert_false(has_heading(doc, "RUN"));
}

static void
test_proto_msg_allowed_directions(void **state)
{
	/* router → coord requests */
	assert_true(msg_allowed(MSG_RUN_START, ROLE_ROUTER, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_START, ROLE_COORD, ROLE_ROUTER));
	assert_false(msg_allowed(MSG_RUN_START, ROLE_SHIM, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_START, ROLE_ROUTER, ROLE_SHIM));
	assert_true(msg_allowed(MSG_RUN_READ, ROLE_ROUTER, ROLE_COORD));
	assert_true(msg_allowed(MSG_STATUS_GET, ROLE_ROUTER, ROLE_COORD));
	/* coord → router push */
	assert_true(msg_allowed(MSG_RUN_EVENTS, ROLE_COORD, ROLE_ROUTER));
	assert_false(msg_allowed(MSG_RUN_EVENTS, ROLE_ROUTER, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_EVENTS, ROLE_COORD, ROLE_SHIM));
	/* coord → shim */
	assert_true(msg_allowed(MSG_SANDBOX_ENSURE, ROLE_COORD, ROLE_SHIM));
	assert_true(msg_allowed(MSG_EXEC_START, ROLE_COORD, ROLE_SHIM));
	assert_false(msg_allowed(MSG_EXEC_START, ROLE_SHIM, ROLE_COORD));
	assert_false(msg_allowed(MSG_EXEC_KILL, ROLE_ROUTER, ROLE_SHIM));
	assert_false(msg_allowed(MSG_SANDBOX_DESTROY, ROLE_ROUTER, ROLE_COORD));
	/* shim → coord */
	assert_true(msg_allowed(MSG_EXEC_OUTPUT, ROLE_SHIM, ROLE_COORD));
	assert_true(msg_allowed(MSG_EXEC_EXIT, ROLE_SHIM, ROLE_COORD));
	assert_false(msg_allowed(MSG_EXEC_OUTPUT, ROLE_COORD, ROLE_SHIM));
	assert_false(msg_allowed(MSG_EXEC_EXIT, ROLE_ROUTER, ROLE_COORD));
	/* any direction */
	for (PeerRole a = 0; a < ROLE_CLIENT; a++)
		for (PeerRole b = 0; b < ROLE_CLIENT; b++) {
			assert_true(msg_allowed(MSG_HELLO, a, b));
			assert_true(msg_allowed(MSG_REPLY, a, b));
			assert_true(msg_allowed(MSG_ERROR, a, b));
		}
	/* a client: coordinatord's requests as routerd sends them, the shim's
	 * as coordinatord sends them, and their pushes back (the ALLOW rows) */
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		switch (rows[i].dir) {
		case MSGDIR_ROUTER_TO_COORD:
			assert_true(msg_allowed(rows[i].id, ROLE_CLIENT, ROLE_COORD));
			break;
		case MSGDIR_COORD_TO_SHIM:
			assert_true(msg_allowed(rows[i].id, ROLE_CLIENT, ROLE_SHIM));
			break;
		case MSGDIR_COORD_TO_ROUTER:
			assert_true(msg_allowed(rows[i].id, ROLE_COORD, ROLE_CLIENT));
			break;
		case MSGDIR_SHIM_TO_COORD:
			assert_true(msg_allowed(rows[i].id, ROLE_SHIM, ROLE_CLIENT));
			break;
		default: break;
		}
	}
	/* the direct run-log API: only from a client, only to coordinatord */
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		if (rows[i].dir != MSGDIR_CLIENT_TO_COORD)
			continue;
		assert_true(msg_allowed(rows[i].id, ROLE_CLIENT, ROLE_COORD));
		assert_false(msg_allowed(rows[i].id, ROLE_COORD, ROLE_CLIENT));
		for (PeerRole a = 0; a < ROLE_CLIENT; a++)
			for (PeerRole b = 0; b < _ROLE_MAX; b++)
				assert_false(msg_allowed(rows[i].id, a, b));
	}
	/* rows ascend, so _MSG_TYPE_MAX (last + 1) bounds every id */
	for (size_t i = 1; i < ELEMENTSOF(rows); i++)
		assert_true(rows[i - 1].id < rows[i].id);
	assert_int_equal(_MSG_TYPE_MAX, rows[ELEMENTSOF(rows) - 1].id + 1);
	/* every directed row is allowed for exactly one (from, to) among daemons */
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		if (rows[i].dir == MSGDIR_ANY || rows[i].dir == MSGDIR_CLIENT_TO_COORD)
			continue;
		int n = 0;
		for (PeerRole a = 0; a < ROLE_CLIENT; a++)
			for (PeerRole b = 0; b < ROLE_CLIENT; b++)
				n += msg_allowed(rows[i].id, a, b);
		if (n != 1)
			fail_msg("%s allowed for %d role pairs", rows[i].name, n);
	}
}

/* No "any direction" for a client: what is not declared for a role is
 * refused, whatever the daemon on the other side handles. */
static void
test_proto_undeclared_is_refused(void **state)
{
	/* pushes a daemon receives from another daemon */
	assert_false(msg_allowed(MSG_EXEC_OUTPUT, ROLE_CLIENT, ROLE_COORD));
	assert_false(msg_allowed(MSG_EXEC_EXIT, ROLE_CLIENT, ROLE_COORD));
	assert_false(msg_allowed(MSG_SANDBOX_QUEUED, ROLE_CLIENT, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_EVENTS, ROLE_CLIENT, ROLE_ROUTER));
	assert_false(msg_allowed(MSG_RUN_EVENTS, ROLE_CLIENT, ROLE_COORD));
	/* another daemon's requests, sent to the wrong one */
	assert_false(msg_allowed(MSG_SANDBOX_ENSURE, ROLE_CLIENT, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_START, ROLE_CLIENT, ROLE_SHIM));
	assert_false(msg_allowed(MSG_RUN_OPEN, ROLE_CLIENT, ROLE_SHIM));
	/* nothing a client sends reaches routerd, nor does a client ask a client */
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		if (rows[i].dir == MSGDIR_ANY)
			continue;
		assert_false(msg_allowed(rows[i].id, ROLE_CLIENT, ROLE_ROUTER));
		assert_false(msg_allowed(rows[i].id, ROLE_CLIENT, ROLE_CLIENT));
		assert_false(msg_allowed(rows[i].id, ROLE_ROUTER, ROLE_CLIENT));
	}
	/* out-of-range roles */
	assert_false(msg_allowed(MSG_RUN_GET, _ROLE_MAX, ROLE_COORD));
	assert_false(msg_allowed(MSG_RUN_GET, ROLE_CLIENT, (PeerRole)-1));
	/* a client's permissions are exactly the ALLOW rows plus CLIENT_TO_COORD:
	 * count them, so a row added to the table without its declaration (or a
	 * rule that allows more) shows here */
	int n = 0;
	for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
		if (rows[i].dir == MSGDIR_ANY)
			continue;
		for (PeerRole o = 0; o < _ROLE_MAX; o++)
			n += msg_allowed(rows[i].id, ROLE_CLIENT, o) +
			     msg_allowed(rows[i].id, o, ROLE_CLIENT);
	}
	int want = 0;
#define F(type, name, req)
#define MSG(n, i, d, f) want += MSGDIR_##d == MSGDIR_CLIENT_TO_COORD;
#define ALLOW(n, from, to) want++;
#include "messages.def"
#undef ALLOW
#undef MSG
#undef F
	assert_int_equal(n, want);
	assert_int_equal(want, 54); /* 3 CLIENT_TO_COORD + 51 ALLOW rows */
}

static void
test_proto_roles(void **state)
{
	for (PeerRole r = 0; r < _ROLE_MAX; r++) {
		const char *n = peer_role_name(r);
		assert_non_null(n);
		assert_int_equal(peer_role_from_name(n), r);
	}
	assert_string_equal(peer_role_name(ROLE_ROUTER), "routerd");
	assert_string_equal(peer_role_name(ROLE_SHIM), "containerd-shim");
	assert_string_equal(peer_role_name(_ROLE_MAX), "unknown");
	assert_string_equal(peer_role_name((PeerRole)-1), "unknown");
	assert_int_equal(peer_role_from_name("nobody"), -EINVAL);
	assert_int_equal(peer_role_from_name(""), -EINVAL);
}

static bool
reason_name_valid(const char *n)
{
	size_t len = strlen(n);
	if (len == 0 || len >= 32)
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(islower((unsigned char)n[i]) || isdigit((unsigned char)n[i]) || n[i] == '_'))
			return false;
	return true;
}

static void
test_reasons_rows_valid(void **state)
{
	for (size_t i = 0; i < _PEER_REASON_MAX; i++) {
		const PeerReasonInfo *r = &peer_reasons[i];
		assert_non_null(r->name);
		if (!reason_name_valid(r->name))
			fail_msg("reasons.def: '%s' is not a wire name ([a-z0-9_], < 32)", r->name);
		assert_ptr_equal(peer_reason_lookup(r->name), r); /* unique */
		assert_true(r->status >= 400 && r->status <= 599);
		assert_true(reason_name_valid(r->code));
		assert_true(r->help && r->help[0]);
		assert_true(r->errnos[0] > 0);
	}
	assert_null(peer_reason_lookup("no_such_reason"));
	assert_null(peer_reason_lookup(NULL));
	assert_string_equal(REASON_THREAD_BUSY, "thread_busy");
	assert_int_equal(peer_reason_lookup(REASON_UNAVAILABLE)->status, 503);
}

static void
test_reasons_of_errno(void **state)
{
	static const PeerReasonId ids[] = {PEER_REASON_INVALID_PATH, PEER_REASON_NOT_FOUND,
					   PEER_REASON_BUSY, PEER_REASON_OVERLOADED};
	assert_string_equal(peer_reason_of_errno(-EINVAL, ids, ELEMENTSOF(ids), "x"),
			    "invalid_path");
	assert_string_equal(peer_reason_of_errno(-ENOTDIR, ids, ELEMENTSOF(ids), "x"), "not_found");
	/* the first row that lists it wins: busy before overloaded */
	assert_string_equal(peer_reason_of_errno(-EBUSY, ids, ELEMENTSOF(ids), "x"), "busy");
	assert_string_equal(peer_reason_of_errno(EBUSY, ids, ELEMENTSOF(ids), "x"), "busy");
	assert_string_equal(peer_reason_of_errno(-EIO, ids, ELEMENTSOF(ids), "internal"),
			    "internal");
}

/* Check one reason table row of PROTOCOL.md ("| `a`, `b` | errno | 503 `code` |
 * …"); marks the rows it names in seen[]. The number of problems. */
static int
check_reason_line(const char *line, size_t len, bool seen[])
{
	char buf[2048];
	int bad = 0;

	snprintf(buf, sizeof(buf), "%.*s", (int)MIN(len, sizeof(buf) - 1), line);
	char *c1 = buf + 1, *c2 = strchr(c1, '|'), *c3 = c2 ? strchr(c2 + 1, '|') : NULL;
	char *c4 = c3 ? strchr(c3 + 1, '|') : NULL;
	if (!c4) {
		print_error("docs/PROTOCOL.md: a reason table row without 3 cells: %s\n", buf);
		return 1;
	}
	*c2 = *c4 = '\0';
	int status = (int)strtol(c3 + 1, NULL, 10);
	char code[64] = "";
	const char *q = strchr(c3 + 1, '`');
	if (q)
		snprintf(code, sizeof(code), "%.*s", (int)strcspn(q + 1, "`"), q + 1);
	int names = 0;
	for (char *p = strchr(c1, '`'); p; p = strchr(p, '`')) {
		char name[64];
		size_t n = strcspn(p + 1, "`");
		snprintf(name, sizeof(name), "%.*s", (int)n, p + 1);
		p += n + 2;
		names++;
		const PeerReasonInfo *r = peer_reason_lookup(name);
		if (!r) {
			print_error("docs/PROTOCOL.md documents reason '%s', not in reasons.def\n",
				    name);
			bad++;
			continue;
		}
		seen[r - peer_reasons] = true;
		if (r->status != status || !streq(r->code, code)) {
			print_error(
			    "docs/PROTOCOL.md: reason '%s' is HTTP %d '%s' there, %d '%s' in "
			    "reasons.def\n",
			    name, status, code, r->status, r->code);
			bad++;
		}
	}
	if (names == 0) {
		print_error("docs/PROTOCOL.md: a reason table row names no reason: %s\n", buf);
		bad++;
	}
	return bad;
}

static void
test_reasons_documented_in_protocol_md(void **state)
{
	char *doc = read_protocol_md();
	bool seen[_PEER_REASON_MAX] = {false};
	int bad = 0, tables = 0;

	for (const char *line = strstr(doc, "\n| reason | errno | HTTP |"); line;
	     line = strstr(line, "\n| reason | errno | HTTP |")) {
		tables++;
		line = strchr(line + 1, '\n');		     /* the header */
		line = line ? strchr(line + 1, '\n') : NULL; /* the |---| line */
		while (line && line[1] == '|') {
			const char *end = strchr(line + 1, '\n');
			size_t len = end ? (size_t)(end - line - 1) : strlen(line + 1);
			bad += check_reason_line(line + 1, len, seen);
			line = end;
		}
	}
	assert_true(tables >= 1);
	for (size_t i = 0; i < _PEER_REASON_MAX; i++)
		if (!seen[i]) {
			print_error("docs/PROTOCOL.md: reason '%s' (reasons.def) is in no reason "
				    "table\n",
				    peer_reasons[i].name);
			bad++;
		}
	free(doc);
	assert_int_equal(bad, 0);
}

/* run-errors.def: every code a valid name, once. */
static void
test_run_errors_rows_valid(void **state)
{
	assert_true(run_errors_n > 0);
	for (size_t i = 0; i < run_errors_n; i++) {
		if (!reason_name_valid(run_errors[i].code))
			fail_msg("run-errors.def: '%s' is not a code ([a-z0-9_], < 32)",
				 run_errors[i].code);
		assert_ptr_equal(run_error_lookup(run_errors[i].code), &run_errors[i]);
		assert_true(run_errors[i].help && run_errors[i].help[0]);
	}
	assert_string_equal(RUN_ERR_STORAGE_FULL, "storage_full");
	assert_null(run_error_lookup("no_such_code"));
	assert_null(run_error_lookup(NULL));
}

/* PROTOCOL.md's "Run errors" table against run-errors.def, both ways. */
static void
test_run_errors_documented_in_protocol_md(void **state)
{
	char *doc = read_protocol_md();
	bool seen[64] = {false};
	int bad = 0;
	const char *line = strstr(doc, "\n| run error | when |");

	assert_true(run_errors_n <= ELEMENTSOF(seen));
	assert_non_null(line);
	line = strchr(line + 1, '\n');		     /* the header */
	line = line ? strchr(line + 1, '\n') : NULL; /* the |---| line */
	while (line && line[1] == '|') {
		const char *end = strchr(line + 1, '\n');
		size_t len = end ? (size_t)(end - line - 1) : strlen(line + 1);
		const char *cell_end = memchr(line + 2, '|', len - 1);
		int names = 0;
		/* the codes are the first cell's `quoted` words */
		for (const char *p = memchr(line + 1, '`', len); p && cell_end && p < cell_end;
		     p = memchr(p, '`', (size_t)(cell_end - p))) {
			size_t n = strcspn(p + 1, "`");
			char code[64];
			snprintf(code, sizeof(code), "%.*s", (int)n, p + 1);
			p += n + 2;
			names++;
			const RunErrorInfo *r = run_error_lookup(code);
			if (!r) {
				print_error("docs/PROTOCOL.md documents run error '%s', not in "
					    "run-errors.def\n",
					    code);
				bad++;
			} else
				seen[r - run_errors] = true;
		}
		if (names == 0) {
			print_error("docs/PROTOCOL.md: a run error row names no code: %.*s\n",
				    (int)len, line + 1);
			bad++;
		}
		line = end;
	}
	for (size_t i = 0; i < run_errors_n; i++)
		if (!seen[i]) {
			print_error("docs/PROTOCOL.md: run error '%s' (run-errors.def) is not in "
				    "the \"Run errors\" table\n",
				    run_errors[i].code);
			bad++;
		}
	free(doc);
	assert_int_equal(bad, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_proto_every_type_valid_and_named),
	    cmocka_unit_test(test_proto_invalid_types),
	    cmocka_unit_test(test_proto_heading_matcher),
	    cmocka_unit_test(test_proto_documented_in_protocol_md),
	    cmocka_unit_test(test_reasons_rows_valid),
	    cmocka_unit_test(test_reasons_of_errno),
	    cmocka_unit_test(test_reasons_documented_in_protocol_md),
	    cmocka_unit_test(test_run_errors_rows_valid),
	    cmocka_unit_test(test_run_errors_documented_in_protocol_md),
	    cmocka_unit_test(test_proto_msg_allowed_directions),
	    cmocka_unit_test(test_proto_undeclared_is_refused),
	    cmocka_unit_test(test_proto_roles),
	};
	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
