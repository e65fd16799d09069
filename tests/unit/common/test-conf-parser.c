/* SPDX-License-Identifier: MIT */
/*
 * test-conf-parser.c — common/conf-parser.c: the table-driven config parser.
 *
 * A local config struct and ConfItem table stand in for a daemon's. Every
 * error is checked for its whole text, "NAME:LINE: KEY: reason", because the
 * line number is what an operator needs and is easy to get off by one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "conf-parser.h"
#include "macro.h"
#include "strv.h"

typedef struct TConf {
	char *name;
	char *state_dir;
	bool flag;
	int64_t port;
	int64_t limit;
	int level;
} TConf;

static const ConfItem items[] = {
    {"runwarden", "state_dir", CONF_STR, offsetof(TConf, state_dir), "/var/lib/rw", 0, 0, "state"},
    {"coordinatord", "name", CONF_STR, offsetof(TConf, name), "", 0, 0, "a name"},
    {"coordinatord", "flag", CONF_BOOL, offsetof(TConf, flag), "yes", 0, 0, "a flag"},
    {"coordinatord", "port", CONF_INT, offsetof(TConf, port), "8080", 1, 65535, "a port"},
    {"coordinatord", "limit", CONF_SIZE, offsetof(TConf, limit), "16M", 1024, 1024LL * 1024 * 1024,
     "a size"},
    {"coordinatord", "level", CONF_LEVEL, offsetof(TConf, level), "info", 0, 0, "a level"},
};
#define N_ITEMS ELEMENTSOF(items)

static int
setup(void **state)
{
	TConf *c = calloc(1, sizeof(*c));
	if (!c)
		return -1;
	if (conf_apply_defaults(items, N_ITEMS, c) < 0)
		return -1;
	*state = c;
	return 0;
}

static int
teardown(void **state)
{
	TConf *c = *state;
	conf_free_strings(items, N_ITEMS, c);
	free(c);
	return 0;
}

static void
test_conf_parser_defaults(void **state)
{
	TConf *c = *state;

	assert_non_null(c->name);
	assert_string_equal(c->name, "");
	assert_string_equal(c->state_dir, "/var/lib/rw");
	assert_true(c->flag);
	assert_int_equal(c->port, 8080);
	assert_int_equal(c->limit, 16 * 1024 * 1024);
	assert_int_equal(c->level, LOG_INFO);
}

static void
test_conf_parser_load_string_overrides(void **state)
{
	TConf *c = *state;
	char err[256] = "";

	int r = conf_load_string(items, N_ITEMS, c, "t.conf",
				 "# comment\n"
				 "; another comment\n"
				 "\n"
				 "[runwarden]\n"
				 "state_dir = /srv/rw\n"
				 "[coordinatord]\n"
				 "name = hello world\n"
				 "flag = off\n"
				 "port=9\n"
				 "limit = 512M\n"
				 "level = debug\n",
				 err, sizeof(err));
	assert_int_equal(r, 0);
	assert_string_equal(err, "");
	assert_string_equal(c->state_dir, "/srv/rw");
	assert_string_equal(c->name, "hello world");
	assert_false(c->flag);
	assert_int_equal(c->port, 9);
	assert_int_equal(c->limit, 512 * 1024 * 1024);
	assert_int_equal(c->level, LOG_DEBUG);
}

/* Accepted spellings of each type, applied one file after another. */
static void
test_conf_parser_values(void **state)
{
	TConf *c = *state;
	char err[256] = "";

	static const struct {
		const char *text;
		bool flag;
		int64_t limit;
		int level;
	} cases[] = {
	    {"flag = TRUE\nlimit = 1K\nlevel = warning\n", true, 1024, LOG_WARNING},
	    {"flag = 0\nlimit = 1G\nlevel = error\n", false, 1024LL * 1024 * 1024, LOG_ERR},
	    {"flag = On\nlimit = 4096\nlevel = notice\n", true, 4096, LOG_NOTICE},
	    {"flag = no\nlimit = 2k\nlevel = info\n", false, 2048, LOG_INFO},
	};
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		char text[256];
		snprintf(text, sizeof(text), "[coordinatord]\n%s", cases[i].text);
		int r = conf_load_string(items, N_ITEMS, c, "v.conf", text, err, sizeof(err));
		if (r != 0)
			fail_msg("case %zu: %d %s", i, r, err);
		assert_int_equal(c->flag, cases[i].flag);
		assert_int_equal(c->limit, cases[i].limit);
		assert_int_equal(c->level, cases[i].level);
	}
}

static void
test_conf_parser_layering(void **state)
{
	TConf *c = *state;
	char err[256] = "";

	assert_int_equal(conf_load_string(items, N_ITEMS, c, "a.conf",
					  "[coordinatord]\nname = first\nport = 1000\nflag = no\n",
					  err, sizeof(err)),
			 0);
	assert_int_equal(conf_load_string(items, N_ITEMS, c, "b.conf",
					  "[coordinatord]\nport = 2000\nlevel = debug\n", err,
					  sizeof(err)),
			 0);
	/* b.conf won where it spoke; a.conf's other keys and the defaults stay */
	assert_string_equal(c->name, "first");
	assert_int_equal(c->port, 2000);
	assert_false(c->flag);
	assert_int_equal(c->level, LOG_DEBUG);
	assert_int_equal(c->limit, 16 * 1024 * 1024);
	assert_string_equal(c->state_dir, "/var/lib/rw");

	/* setting a key again in a later file is not a duplicate */
	assert_int_equal(conf_load_string(items, N_ITEMS, c, "c.conf",
					  "[coordinatord]\nname = third\n", err, sizeof(err)),
			 0);
	assert_string_equal(c->name, "third");
}

/* Load text; expect -EINVAL and exactly want in err. */
static void
expect_error(TConf *c, const char *text, const char *want)
{
	char err[256] = "";
	int r = conf_load_string(items, N_ITEMS, c, "t.conf", text, err, sizeof(err));
	if (r != -EINVAL)
		fail_msg("expected -EINVAL for:\n%s\ngot %d (%s)", text, r, err);
	assert_string_equal(err, want);
}

static void
test_conf_parser_errors(void **state)
{
	TConf *c = *state;

	expect_error(c, "[coordinatord]\nport = 1\n\n[bogus]\nx = 1\n",
		     "t.conf:5: [bogus]: unknown section");
	expect_error(c, "# c\n[coordinatord]\nport = 1\nnope = 2\n",
		     "t.conf:4: nope: unknown key in [coordinatord]");
	expect_error(c, "[runwarden]\nstate_dir = /x\nnot_shared = 1\n",
		     "t.conf:3: not_shared: unknown key in [runwarden]");
	expect_error(
	    c, "[coordinatord]\n\n\nflag = maybe\n",
	    "t.conf:4: flag: 'maybe': expected a boolean (yes/no, true/false, on/off, 1/0)");
	expect_error(c, "[coordinatord]\nport = 12x\n",
		     "t.conf:2: port: '12x': expected an integer");
	expect_error(c, "[coordinatord]\nport = abc\n",
		     "t.conf:2: port: 'abc': expected an integer");
	expect_error(c, "[coordinatord]\nport =\n", "t.conf:2: port: '': expected an integer");
	expect_error(c, "[coordinatord]\nport = 99999999999999999999999\n",
		     "t.conf:2: port: '99999999999999999999999': expected an integer");
	expect_error(c, "[coordinatord]\nport = 65536\n",
		     "t.conf:2: port: '65536' out of range (1..65535)");
	expect_error(c, "[coordinatord]\nport = 0\n",
		     "t.conf:2: port: '0' out of range (1..65535)");
	expect_error(c, "[coordinatord]\nport = -5\n",
		     "t.conf:2: port: '-5' out of range (1..65535)");
	expect_error(c, "[coordinatord]\nlimit = 12Q\n",
		     "t.conf:2: limit: '12Q': expected a size (a number with an optional K, M or G "
		     "suffix)");
	expect_error(c, "[coordinatord]\nlimit = 2G\n",
		     "t.conf:2: limit: '2G' out of range (1024..1073741824)");
	expect_error(c, "[coordinatord]\nlimit = 1023\n",
		     "t.conf:2: limit: '1023' out of range (1024..1073741824)");
	expect_error(
	    c, "[coordinatord]\nlevel = loud\n",
	    "t.conf:2: level: 'loud': expected one of debug, info, notice, warning, error");
	expect_error(c, "[coordinatord]\nport = 1\nname = x\nport = 2\n",
		     "t.conf:4: port: set twice in [coordinatord]");
	/* the same section opened twice is still one file */
	expect_error(c, "[coordinatord]\nport = 1\n[routerd]\nx = 1\n[coordinatord]\nport = 2\n",
		     "t.conf:6: port: set twice in [coordinatord]");
	expect_error(c, "[coordinatord]\nport = 1\nthis line is not ini\nname = x\n",
		     "t.conf:3: syntax error (expected 'key = value' or '[section]')");
	expect_error(c, "[coordinatord\nport = 1\n",
		     "t.conf:1: syntax error (expected 'key = value' or '[section]')");
	/* inih carries on after a syntax error; a later bad key must not mask it */
	expect_error(c, "[coordinatord]\nbroken\nnope = 1\n",
		     "t.conf:2: syntax error (expected 'key = value' or '[section]')");
	/* a key before any section belongs to the unnamed section */
	expect_error(c, "port = 1\n", "t.conf:1: []: unknown section");
	/* the first error is the one reported */
	expect_error(c, "[coordinatord]\nport = 0\nflag = maybe\n",
		     "t.conf:2: port: '0' out of range (1..65535)");
	expect_error(
	    c, "[coordinatord]\nflag = maybe\nbroken\n",
	    "t.conf:2: flag: 'maybe': expected a boolean (yes/no, true/false, on/off, 1/0)");
}

/* Line numbers stay right across CRLF endings, comments and a missing final newline. */
static void
test_conf_parser_line_numbers(void **state)
{
	TConf *c = *state;

	expect_error(c, "[coordinatord]\r\n; c\r\n# c\r\nport = 1\r\nnope = 1",
		     "t.conf:5: nope: unknown key in [coordinatord]");
	expect_error(c, "\n\n\n\n\n\n\n\n\n\n[coordinatord]\nport = 70000",
		     "t.conf:12: port: '70000' out of range (1..65535)");
}

/* A line of `len` bytes of text: "name = xxx…" (then a newline). */
static char *
long_line(const char *key, size_t len)
{
	char *l = malloc(len + 1);
	assert_non_null(l);
	int k = snprintf(l, len + 1, "%s = ", key);
	memset(l + k, 'x', len - (size_t)k);
	l[len] = '\0';
	return l;
}

/* Lines longer than inih's default 200 bytes are read whole, up to
 * CONF_LINE_MAX; a longer one is an error naming its own line and key (not the
 * next line, as a cut line would), from a string and from a file. */
static void
test_conf_parser_long_lines(void **state)
{
	TConf *c = *state;
	char err[256] = "", path[] = "/tmp/test-conf-parser-XXXXXX";
	static const size_t ok_lens[] = {199, 200, 201, 1000, 4096, CONF_LINE_MAX};

	for (size_t i = 0; i < ELEMENTSOF(ok_lens); i++) {
		char *l = long_line("name", ok_lens[i]), *text = NULL;
		assert_true(asprintf(&text, "[coordinatord]\n%s\nport = 9\n", l) > 0);
		int r = conf_load_string(items, N_ITEMS, c, "t.conf", text, err, sizeof(err));
		if (r < 0)
			fail_msg("a line of %zu bytes: %s", ok_lens[i], err);
		assert_int_equal(strlen(c->name), ok_lens[i] - strlen("name = "));
		assert_int_equal(c->port, 9);
		c->port = 1;
		free(text);
		free(l);
	}

	char *l = long_line("name", CONF_LINE_MAX + 1), *text = NULL, want[256];
	snprintf(want, sizeof(want), "t.conf:3: name: the line is longer than %d bytes",
		 CONF_LINE_MAX);
	assert_true(asprintf(&text, "[coordinatord]\n\n%s\nport = 9\n", l) > 0);
	expect_error(c, text, want);
	/* and without a newline at its end, from a file */
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	free(text);
	assert_true(asprintf(&text, "[coordinatord]\nport = 9\n\n%s", l) > 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(conf_load_file(items, N_ITEMS, c, path, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:4: name: the line is longer than %d bytes", path,
		 CONF_LINE_MAX);
	assert_string_equal(err, want);
	/* a long line in a file is read whole */
	free(l);
	l = long_line("name", 5000);
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	assert_true(fd >= 0);
	free(text);
	assert_true(asprintf(&text, "[coordinatord]\n%s\nport = 77\n", l) > 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	assert_int_equal(conf_load_file(items, N_ITEMS, c, path, err, sizeof(err)), 0);
	assert_int_equal(strlen(c->name), 5000 - strlen("name = "));
	assert_int_equal(c->port, 77);
	unlink(path);
	free(text);
	free(l);
}

static void
test_conf_parser_ignores_other_daemons(void **state)
{
	TConf *c = *state;
	char err[256] = "";

	int r = conf_load_string(items, N_ITEMS, c, "t.conf",
				 "[routerd]\n"
				 "listen = 0.0.0.0:80\n"
				 "whatever = 1\n"
				 "[containerd-shim]\n"
				 "runtime = runc\n"
				 "[harness.x]\n"
				 "command = foo\n"
				 "[tool.grep]\n"
				 "path = /bin/grep\n"
				 "[coordinatord]\n"
				 "port = 4242\n",
				 err, sizeof(err));
	if (r != 0)
		fail_msg("%d: %s", r, err);
	assert_int_equal(c->port, 4242);
	/* [runwarden] is shared: its keys are checked even by a table without rows
	 * for it (every daemon must carry all of them) */
	static const ConfItem only_coord[] = {
	    {"coordinatord", "port", CONF_INT, offsetof(TConf, port), "1", 1, 65535, ""},
	};
	r = conf_load_string(only_coord, 1, c, "s.conf", "[runwarden]\nstray = 1\n", err,
			     sizeof(err));
	assert_int_equal(r, -EINVAL);
	assert_string_equal(err, "s.conf:2: stray: unknown key in [runwarden]");
	/* not "harness" without a dot, though */
	expect_error(c, "[harnessx]\na = 1\n", "t.conf:2: [harnessx]: unknown section");
}

static void
test_conf_parser_parse_size(void **state)
{
	int64_t v = -1;

	assert_int_equal(conf_parse_size("1K", &v), 0);
	assert_int_equal(v, 1024);
	assert_int_equal(conf_parse_size("16M", &v), 0);
	assert_int_equal(v, 16 * 1024 * 1024);
	assert_int_equal(conf_parse_size("3G", &v), 0);
	assert_int_equal(v, 3LL * 1024 * 1024 * 1024);
	assert_int_equal(conf_parse_size("100", &v), 0);
	assert_int_equal(v, 100);
	assert_int_equal(conf_parse_size("0", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(conf_parse_size("1m", &v), 0);
	assert_int_equal(v, 1024 * 1024);
	assert_int_equal(conf_parse_size("2KiB", &v), 0);
	assert_int_equal(v, 2048);
	assert_int_equal(conf_parse_size("2MB", &v), 0);
	assert_int_equal(v, 2 * 1024 * 1024);
	assert_int_equal(conf_parse_size("2Ki", &v), 0);
	assert_int_equal(v, 2048);

	v = 77;
	assert_int_equal(conf_parse_size("", &v), -EINVAL);
	assert_int_equal(conf_parse_size("12Q", &v), -EINVAL);
	assert_int_equal(conf_parse_size("K", &v), -EINVAL);
	assert_int_equal(conf_parse_size("-1", &v), -EINVAL);
	assert_int_equal(conf_parse_size(" 1", &v), -EINVAL);
	assert_int_equal(conf_parse_size("1 K", &v), -EINVAL);
	assert_int_equal(conf_parse_size("1KX", &v), -EINVAL);
	assert_int_equal(conf_parse_size("1KBB", &v), -EINVAL);
	assert_int_equal(conf_parse_size("1KiBB", &v), -EINVAL);
	assert_int_equal(conf_parse_size("1KB ", &v), -EINVAL);
	assert_int_equal(conf_parse_size("99999999999999999999", &v), -ERANGE);
	assert_int_equal(conf_parse_size("9223372036854775808", &v), -ERANGE); /* INT64_MAX+1 */
	assert_int_equal(conf_parse_size("8589934592G", &v), -ERANGE);	       /* 2^33 G = 2^63 */
	assert_int_equal(conf_parse_size("9007199254740992K", &v), -ERANGE);   /* 2^53 K = 2^63 */
	assert_int_equal(v, 77); /* untouched on every error */

	assert_int_equal(conf_parse_size("9223372036854775807", &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(conf_parse_size("8589934591G", &v), 0);
	assert_true(v == 8589934591LL * 1024 * 1024 * 1024);
}

static void
test_conf_parser_load_file(void **state)
{
	TConf *c = *state;
	char err[256] = "";
	char path[] = "/tmp/test-conf-parser-XXXXXX";

	assert_int_equal(
	    conf_load_file(items, N_ITEMS, c, "/nonexistent/dir/runwarden.conf", err, sizeof(err)),
	    -ENOENT);
	assert_string_equal(err, "/nonexistent/dir/runwarden.conf: No such file or directory");
	assert_int_equal(c->port, 8080); /* untouched */

	int fd = mkstemp(path);
	assert_true(fd >= 0);
	static const char text[] = "[coordinatord]\nport = 7\nlimit = 2M\n\nflag = nope\n";
	assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
	close(fd);

	assert_int_equal(conf_load_file(items, N_ITEMS, c, path, err, sizeof(err)), -EINVAL);
	char want[256];
	snprintf(want, sizeof(want),
		 "%s:5: flag: 'nope': expected a boolean (yes/no, true/false, on/off, 1/0)", path);
	assert_string_equal(err, want);
	/* keys before the error were applied */
	assert_int_equal(c->port, 7);
	assert_int_equal(c->limit, 2 * 1024 * 1024);
	unlink(path);
}

static void
test_conf_parser_free_strings(void **state)
{
	TConf *c = *state;

	assert_non_null(c->name);
	assert_non_null(c->state_dir);
	conf_free_strings(items, N_ITEMS, c);
	assert_null(c->name);
	assert_null(c->state_dir);
	/* non-string fields are left alone */
	assert_int_equal(c->port, 8080);
	/* and a second call (teardown) is harmless */
	conf_free_strings(items, N_ITEMS, c);
	assert_null(c->name);
}

static void
test_conf_parser_parse_value(void **state)
{
	TConf *c = *state;
	const char *why = NULL;

	assert_int_equal(conf_parse_value(&items[3], "65535", c, &why), 0);
	assert_int_equal(c->port, 65535);
	assert_int_equal(conf_parse_value(&items[3], "65536", c, &why), -ERANGE);
	assert_string_equal(why, "out of range");
	assert_int_equal(c->port, 65535);
	why = NULL;
	assert_int_equal(conf_parse_value(&items[2], "perhaps", c, &why), -EINVAL);
	assert_non_null(why);
	/* level aliases */
	assert_int_equal(conf_parse_value(&items[5], "warn", c, &why), 0);
	assert_int_equal(c->level, LOG_WARNING);
	assert_int_equal(conf_parse_value(&items[5], "err", c, &why), 0);
	assert_int_equal(c->level, LOG_ERR);
}

/* A bad default is reported (it is a programming error in a table). */
static void
test_conf_parser_bad_default(void **state)
{
	static const ConfItem bad[] = {
	    {"coordinatord", "port", CONF_INT, offsetof(TConf, port), "0", 1, 10, ""},
	};
	TConf c = {0};
	assert_int_equal(conf_apply_defaults(bad, 1, &c), -ERANGE);
}

/* A CONF_STR with choices takes one of them, and refuses anything else with
 * the file, the line, the key and every value allowed. */
static void
test_conf_parser_choices(void **state)
{
	static const char *const two[] = {"fail", "kill", NULL};
	static const char *const three[] = {"required", "auto", "off", NULL};
	static const ConfItem ch[] = {
	    {"coordinatord", "name", CONF_STR, offsetof(TConf, name), "fail", 0, 0, "", two},
	    {"coordinatord", "state_dir", CONF_STR, offsetof(TConf, state_dir), "auto", 0, 0, "",
	     three},
	};
	TConf c = {0};
	char err[256] = "";

	assert_int_equal(conf_apply_defaults(ch, 2, &c), 0);
	assert_int_equal(conf_load_string(ch, 2, &c, "t.conf",
					  "[coordinatord]\nname = kill\nstate_dir = off\n", err,
					  sizeof(err)),
			 0);
	assert_string_equal(c.name, "kill");
	assert_string_equal(c.state_dir, "off");
	assert_int_equal(conf_load_string(ch, 2, &c, "t.conf", "[coordinatord]\n\nname = Kill\n",
					  err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "t.conf:3: name: 'Kill': expected 'fail' or 'kill'");
	assert_int_equal(conf_load_string(ch, 2, &c, "t.conf", "[coordinatord]\nstate_dir = \n",
					  err, sizeof(err)),
			 -EINVAL);
	assert_string_equal(err, "t.conf:2: state_dir: '': expected 'required', 'auto' or 'off'");
	assert_string_equal(c.name, "kill"); /* a refused value changes nothing */
	conf_free_strings(ch, 2, &c);
}

typedef struct TItem {
	char *name;
	int kind;
	char **argv, **words, **env;
	void *json; /* json_t * */
	int64_t n;
} TItem;

static bool
upper_word(const char *s)
{
	return *s >= 'A' && *s <= 'Z';
}

/* ConfSectionFn: one TItem, any name but "bad" */
static int
titem_section(const char *name, void **ret, Reason *why, void *ud)
{
	TItem *t = ud;
	if (streq(name, "bad")) {
		reason_set(why, "section name '%s' refused", name);
		return -EINVAL;
	}
	if (!t->name)
		t->name = strdup(name);
	*ret = t;
	return 0;
}

static void
test_conf_parser_templated(void **state)
{
	static const char *const kinds[] = {"a", "b", NULL};
	static const ConfItem it[] = {
	    {.section = "x.NAME",
	     .key = "kind",
	     .type = CONF_CHOICE,
	     .offset = offsetof(TItem, kind),
	     .def = "b",
	     .choices = kinds},
	    {.section = "x.NAME",
	     .key = "argv",
	     .type = CONF_ARGV,
	     .offset = offsetof(TItem, argv)},
	    {.section = "x.NAME",
	     .key = "words",
	     .type = CONF_WORDS,
	     .offset = offsetof(TItem, words),
	     .valid = upper_word,
	     .expected = "expected capitalized words"},
	    {.section = "x.NAME",
	     .key = "env",
	     .type = CONF_ENV,
	     .offset = offsetof(TItem, env),
	     .valid = upper_word},
	    {.section = "x.NAME",
	     .key = "json",
	     .type = CONF_JSON,
	     .offset = offsetof(TItem, json)},
	    {.section = "x.NAME",
	     .key = "n",
	     .type = CONF_INT,
	     .offset = offsetof(TItem, n),
	     .def = "7",
	     .min = 1,
	     .max = 9},
	};
	const size_t n = ELEMENTSOF(it);
	TItem t = {0};
	char err[256] = "";
	(void)state;

	assert_int_equal(conf_apply_defaults(it, n, &t), 0);
	assert_int_equal(t.kind, 1);
	assert_int_equal(t.n, 7);
	assert_null(t.argv);
	assert_int_equal(conf_scan_items_string("t.conf",
						"[other]\nkind = z\n[x.one]\nkind = a\n"
						"argv = [\"/bin/x\", \"-y\"]\nwords = A, B\tC\n"
						"env = {\"K\": \"v w\"}\njson = {\"k\": 1}\nn = 9\n"
						"n = 8\n",
						it, n, titem_section, &t, err, sizeof(err)),
			 0);
	assert_string_equal(t.name, "one");
	assert_int_equal(t.kind, 0);
	assert_string_equal(t.argv[1], "-y");
	assert_null(t.argv[2]);
	assert_string_equal(t.words[2], "C");
	assert_null(t.words[3]);
	assert_string_equal(t.env[0], "K=v w");
	assert_non_null(t.json);
	assert_int_equal(t.n, 8); /* set again: the later line wins */

#define SCAN_ERR(text, want)                                                                       \
	do {                                                                                       \
		assert_int_equal(conf_scan_items_string("t.conf", text, it, n, titem_section, &t,  \
							err, sizeof(err)),                         \
				 -EINVAL);                                                         \
		assert_string_equal(err, want);                                                    \
	} while (0)
	SCAN_ERR("[x.bad]\nn = 1\n", "t.conf:2: n: section name 'bad' refused");
	SCAN_ERR("[x.a]\nnope = 1\n", "t.conf:2: nope: unknown key in [x.a]");
	SCAN_ERR("[x.a]\nkind = c\n", "t.conf:2: kind: 'c': expected 'a' or 'b'");
	SCAN_ERR("[x.a]\nargv = x\n",
		 "t.conf:2: argv: 'x': expected a JSON array of strings, e.g. [\"claude\"]");
	SCAN_ERR("[x.a]\nargv = [\"x\", 2]\n",
		 "t.conf:2: argv: argument 1 is not a non-empty string");
	SCAN_ERR("[x.a]\nwords = A b\n", "t.conf:2: words: 'A b': expected capitalized words");
	SCAN_ERR("[x.a]\nenv = {\"k\": \"v\"}\n", "t.conf:2: env: 'k' is not NAME: \"string\"");
	SCAN_ERR("[x.a]\nenv = 1\n", "t.conf:2: env: '1': expected a JSON object of strings");
	SCAN_ERR("[x.a]\njson = [1]\n", "t.conf:2: json: '[1]': expected a JSON object");
	SCAN_ERR("[x.a]\nn = 10\n", "t.conf:2: n: '10' out of range (1..9)");
#undef SCAN_ERR
	/* a refused value changes nothing */
	assert_string_equal(t.argv[0], "/bin/x");
	assert_int_equal(t.n, 8);

	free(t.name);
	strv_free(t.argv);
	strv_free(t.words);
	strv_free(t.env);
	json_decref(t.json);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_conf_parser_defaults, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_load_string_overrides, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_values, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_layering, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_line_numbers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_long_lines, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_ignores_other_daemons, setup,
					    teardown),
	    cmocka_unit_test(test_conf_parser_parse_size),
	    cmocka_unit_test_setup_teardown(test_conf_parser_load_file, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_free_strings, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_conf_parser_parse_value, setup, teardown),
	    cmocka_unit_test(test_conf_parser_bad_default),
	    cmocka_unit_test(test_conf_parser_choices),
	    cmocka_unit_test(test_conf_parser_templated),
	};
	return cmocka_run_group_tests_name("conf-parser", tests, NULL, NULL);
}
