/* SPDX-License-Identifier: MIT */
/*
 * cli-util.c — the CLI's shared helpers: the global options, errors, the
 * request helper, output and argument helpers (cli.h).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

CliOptions cli;

_printf_(1, 2) int error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%srunwarden:%s ", RED(cli.color_err), RESET(cli.color_err));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_CLI;
}

_printf_(1, 2) int usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "runwarden: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'runwarden --help'.\n");
	return EXIT_USAGE;
}

/* Percent-encode a path segment or query value. */
char *
urlenc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		abort();
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~')
			*o++ = (char)ch;
		else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}

/* Report an HTTP error reply: '<message> (<status> <code>)'. */
int
http_error(const Response *r, const char *what)
{
	json_t *j = json_loadb(r->body ? r->body : "", r->len, 0, NULL);
	const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
	const char *code = j ? json_string_value(json_object_get(j, "code")) : NULL;
	if (r->status == 501 && !msg)
		msg = "not implemented by this server";
	if (msg)
		error("%s: %s (HTTP %d%s%s)", what, msg, r->status, code ? " " : "",
		      code ? code : "");
	else
		error("%s: HTTP %d from %s", what, r->status, cli.client.url);
	/* A run is found only through its own thread (the owner check). */
	if (r->status == 404 &&
	    (streq(what, "show") || streq(what, "cancel") || streq(what, "tail")))
		fprintf(stderr,
			"runwarden: no such run in thread '%s'; a run is looked up in the thread "
			"that started it: pass --thread THREAD (or set RUNWARDEN_THREAD)\n",
			cli.thread);
	else if (code && streq(code, "thread_forbidden"))
		fprintf(stderr, "runwarden: the token may not use thread '%s'\n", cli.thread);
	json_decref(j);
	return EXIT_CLI;
}

/* Send a request; on success *ret holds the parsed JSON body of a 2xx reply. */
int
call(const char *method, const char *path, json_t *body, const char *what, json_t **ret,
     Response *raw)
{
	Response r;
	char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
	int rc = client_request(&cli.client, method, path, b, &r);
	free(b);
	if (rc < 0)
		return error("%s", cli.client.err);
	if (r.status < 200 || r.status > 299) {
		rc = http_error(&r, what);
		response_free(&r);
		return rc;
	}
	if (ret) {
		json_error_t je;
		*ret = json_loadb(r.body, r.len, 0, &je);
		if (!*ret) {
			rc = error("%s: bad JSON from %s: %s", what, cli.client.url, je.text);
			response_free(&r);
			return rc;
		}
	}
	if (raw)
		*raw = r;
	else
		response_free(&r);
	return 0;
}

void
print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

const char *
status_color(const char *s)
{
	if (!s)
		return "";
	if (strcmp(s, "completed") == 0)
		return GREEN(cli.color);
	if (strcmp(s, "running") == 0)
		return YELLOW(cli.color);
	return RED(cli.color);
}

void
fmt_time(json_t *v, char *buf, size_t n)
{
	if (!json_is_integer(v)) {
		snprintf(buf, n, "-");
		return;
	}
	time_t t = (time_t)(json_integer_value(v) / 1000);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

static void
print_record(json_t *r)
{
	static const char *keys[] = {"runId",	  "threadId",  "status",    "lastSeq",
				     "exitCode",  "harness",   "sandboxId", "startedAt",
				     "updatedAt", "finishedAt"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(r, keys[i]);
		if (!v)
			continue;
		printf("%s%-11s%s ", BOLD(cli.color), keys[i], RESET(cli.color));
		if (strstr(keys[i], "At")) {
			char buf[64];
			fmt_time(v, buf, sizeof(buf));
			printf("%s\n", buf);
		} else if (strcmp(keys[i], "status") == 0)
			printf("%s%s%s\n", status_color(json_string_value(v)), json_string_value(v),
			       RESET(cli.color));
		else if (json_is_string(v))
			printf("%s\n", json_string_value(v));
		else {
			json_dumpf(v, stdout, JSON_ENCODE_ANY | JSON_COMPACT);
			putchar('\n');
		}
	}
	json_t *e = json_object_get(r, "error");
	if (e) {
		const char *m = json_string_value(json_object_get(e, "message"));
		const char *code = json_string_value(json_object_get(e, "code"));
		printf("%s%-11s%s %s%s%s%s\n", BOLD(cli.color), "error", RESET(cli.color),
		       m ? m : "", code ? " (" : "", code ? code : "", code ? ")" : "");
	}
}

/* Parse [--thread T] [--json] and exactly n positional arguments. */
int
simple_args(int argc, char **argv, int n, const char *what)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:j", opts, NULL)) >= 0) {
		switch (c) {
		case 't': cli.thread = optarg; break;
		case 'j': cli.json = true; break;
		default: return -1;
		}
	}
	if (argc - optind != n) {
		usage_error("%s", what);
		return -1;
	}
	return optind;
}

/* `show` and `cancel`: one request on a run, the record it answers printed. */
int
record_command(int argc, char **argv, const char *method, const char *suffix, const char *name,
	       const char *usage)
{
	int i = simple_args(argc, argv, 1, usage);
	if (i < 0)
		return EXIT_USAGE;
	char *rid = urlenc(argv[i]), *tid = urlenc(cli.thread), path[1024];
	snprintf(path, sizeof(path), "/runs/%s%s?threadId=%s", rid, suffix, tid);
	free(rid);
	free(tid);
	json_t *rec;
	int rc = call(method, path, NULL, name, &rec, NULL);
	if (rc)
		return rc;
	if (cli.json)
		print_json(rec);
	else
		print_record(rec);
	json_decref(rec);
	return 0;
}

/* A command on one thread (snapshot, restore): --json, then THREAD and the
 * rest (min..max arguments in all, else usage), then a POST of make_body's
 * body (from THREAD's arguments, argc - optind of them) to
 * /threads/THREAD/suffix, answered as call() answers. 0, or the exit code. */
int
thread_cmd_post(int argc, char **argv, const ThreadCmd *cmd, json_t **ret, Response *raw)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {}};
	char path[1024];
	int c, rc;
	optind = 0;
	while ((c = getopt_long(argc, argv, "j", opts, NULL)) >= 0)
		if (c == 'j')
			cli.json = true;
		else
			return EXIT_USAGE;
	if (argc - optind < cmd->min || argc - optind > cmd->max)
		return usage_error("%s", cmd->usage);
	char *tid = urlenc(argv[optind]);
	snprintf(path, sizeof(path), "/threads/%s/%s", tid, cmd->suffix);
	free(tid);
	json_t *body = cmd->make_body(argv + optind, argc - optind);
	rc = call("POST", path, body, cmd->what, ret, raw);
	json_decref(body);
	return rc;
}

/* The token of a token file: the first word of its first line that is not
 * blank or a '#' comment, so routerd's tokens_file works as it is (its first
 * line's token, the scope words after it ignored). Never printed. */
int
read_token_file(const char *path, const char **ret)
{
	static char tok[1024];
	char line[1024];
	FILE *f = fopen(path, "re");

	if (!f)
		return error("cannot read the token file '%s': %m", path), -1;
	while (fgets(line, sizeof(line), f)) {
		char *t = line + strspn(line, " \t\r\n");
		size_t n = strcspn(t, " \t\r\n");
		if (n == 0 || *t == '#')
			continue;
		memcpy(tok, t, n);
		tok[n] = '\0';
		explicit_bzero(line, sizeof(line));
		fclose(f);
		*ret = tok;
		return 0;
	}
	fclose(f);
	return error("the token file '%s' holds no token", path), -1;
}
