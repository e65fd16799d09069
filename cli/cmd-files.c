/* SPDX-License-Identifier: MIT */
/*
 * cmd-files.c — `runwarden files get|ls|put|rm|mkdir THREAD PATH`: the
 * workspace file API (docs/API.md "Files").
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cli.h"

static int
read_all(int fd, char **ret, size_t *ret_len)
{
	Buf b = {0};

	for (;;) {
		int r = buf_reserve(&b, 65536);
		if (r < 0) {
			buf_done(&b);
			return r;
		}
		ssize_t n = read(fd, b.data + b.len, b.cap - b.len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			buf_done(&b);
			return r;
		}
		if (n == 0)
			break;
		b.len += (size_t)n;
	}
	*ret = b.data;
	*ret_len = b.len;
	return 0;
}

/* The listing of a directory reply: TYPE MODE SIZE NAME per entry. */
static int
print_listing(const Response *r)
{
	json_t *j = json_loadb(r->body, r->len, 0, NULL), *e;
	size_t i;

	if (!json_is_array(json_object_get(j, "entries"))) {
		json_decref(j);
		return error("files: bad JSON from %s", cli.client.url);
	}
	if (cli.json)
		print_json(j);
	else
		json_array_foreach(json_object_get(j, "entries"), i, e)
		{
			const char *type = json_string_value(json_object_get(e, "type")) ?: "?";
			printf("%-9s %s %12lld  %s%s\n", type,
			       json_string_value(json_object_get(e, "mode")) ?: "?",
			       (long long)json_integer_value(json_object_get(e, "size")),
			       json_string_value(json_object_get(e, "name")) ?: "?",
			       streq(type, "directory") ? "/" : "");
		}
	json_decref(j);
	return 0;
}

int
cmd_files(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'}, {"mode", required_argument, NULL, 'm'}, {}};
	const char *mode = NULL, *sub, *method = "GET", *ctype = NULL;
	_cleanup_free_ char *data = NULL, *tid = NULL, *rel = NULL, *q = NULL;
	size_t dlen = 0;
	Response r;
	char path[12288];
	int c, rc;

	optind = 0;
	while ((c = getopt_long(argc, argv, "jm:", opts, NULL)) >= 0)
		switch (c) {
		case 'j': cli.json = true; break;
		case 'm': mode = optarg; break;
		default: return EXIT_USAGE;
		}
	int n = argc - optind;
	sub = n >= 1 ? argv[optind] : "";
	bool ls = streq(sub, "ls");
	if (!(streq(sub, "get") || streq(sub, "put") || streq(sub, "rm") || streq(sub, "mkdir") ||
	      ls) ||
	    n < (ls ? 2 : 3) || n > (streq(sub, "put") ? 4 : 3))
		return usage_error("%s", "files: get|ls|rm|mkdir THREAD PATH, or put THREAD PATH "
					 "[FILE] (stdin when no FILE), ls THREAD [PATH]");
	tid = urlenc(argv[optind + 1]);
	rel = urlenc(n >= 3 ? argv[optind + 2] : "");
	if (mode)
		q = urlenc(mode);
	if (streq(sub, "put")) {
		int fd = n == 4 && !streq(argv[optind + 3], "-")
			     ? open(argv[optind + 3], O_RDONLY | O_CLOEXEC)
			     : STDIN_FILENO;
		if (fd < 0)
			return error("files put: cannot open '%s': %m", argv[optind + 3]);
		rc = read_all(fd, &data, &dlen);
		if (fd != STDIN_FILENO)
			close(fd);
		if (rc < 0)
			return error("files put: cannot read the content: %s", strerror(-rc));
		method = "PUT";
		ctype = "application/octet-stream";
	} else if (streq(sub, "rm"))
		method = "DELETE";
	else if (streq(sub, "mkdir"))
		method = "POST";
	snprintf(path, sizeof(path), "/threads/%s/files/%s%s%s%s", tid, rel,
		 streq(sub, "mkdir") ? "?op=mkdir" : "",
		 q ? (streq(sub, "mkdir") ? "&mode=" : "?mode=") : "", q ? q : "");
	rc = client_request_raw(&cli.client, method, path, ctype, data, dlen, &r);
	if (rc < 0)
		return error("%s", cli.client.err);
	if (r.status < 200 || r.status > 299) {
		rc = http_error(&r, "files");
		response_free(&r);
		return rc;
	}
	rc = 0;
	if (streq(sub, "get") || ls) {
		json_t *j = NULL;
		/* a directory answers JSON, a file its bytes (octet-stream) */
		bool dir = r.len > 0 && r.body[0] == '{' &&
			   (j = json_loadb(r.body, r.len, 0, NULL)) &&
			   json_is_array(json_object_get(j, "entries"));
		json_decref(j);
		if (ls && !dir)
			rc = error("files ls: '%s' is not a directory",
				   n >= 3 ? argv[optind + 2] : "");
		else if (dir && (ls || isatty(STDOUT_FILENO) || cli.json))
			rc = print_listing(&r);
		else if (fwrite(r.body, 1, r.len, stdout) != r.len || fflush(stdout) != 0)
			rc = error("files get: cannot write the output: %m");
	} else if (cli.json && r.len)
		printf("%.*s\n", (int)r.len, r.body);
	response_free(&r);
	return rc;
}
