/* SPDX-License-Identifier: MIT */
/*
 * cli.h — what the runwarden CLI's files share: the global options, the
 * error and usage printers, the request helper and the output helpers
 * (cli-util.c), the run tail (cli-tail.c), and one cmd_NAME() per command,
 * each in cli/cmd-NAME.c (the table in runwarden.c dispatches on the name).
 *
 * Exit status: `run` and `tail` exit with the run's own status (its exitCode;
 * 1 when it failed or was aborted without one); every command exits EXIT_CLI
 * when the CLI itself fails (server down, HTTP error, bad reply) and
 * EXIT_USAGE on a usage error.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "client.h"
#include "macro.h"

#define EXIT_CLI 125 /* the CLI failed, not the run */
#define EXIT_USAGE 2
#define DEFAULT_URL "http://127.0.0.1:8787"
#define DEFAULT_THREAD "cli"

/* The global options, set by main() before a command runs (a command's own
 * --thread and --json override them). */
typedef struct CliOptions {
	bool json;
	bool color;	/* on stdout */
	bool color_err; /* on stderr */
	const char *thread;
	const char *token; /* --token-file, $RUNWARDEN_TOKEN_FILE or $RUNWARDEN_TOKEN */
	Client client;
} CliOptions;

extern CliOptions cli;

static inline const char *
col(bool on, const char *code)
{
	return on ? code : "";
}
#define RED(e) col(e, "\033[31m")
#define GREEN(e) col(e, "\033[32m")
#define YELLOW(e) col(e, "\033[33m")
#define BOLD(e) col(e, "\033[1m")
#define DIM(e) col(e, "\033[2m")
#define RESET(e) col(e, "\033[0m")

/* "runwarden: MESSAGE" on stderr; returns EXIT_CLI. */
_printf_(1, 2) int error(const char *fmt, ...);
/* The same and a pointer to --help; returns EXIT_USAGE. */
_printf_(1, 2) int usage_error(const char *fmt, ...);

/* Percent-encode a path segment or query value (aborts on ENOMEM). */
char *urlenc(const char *s);
/* Report an HTTP error reply: '<message> (<status> <code>)'; EXIT_CLI. */
int http_error(const Response *r, const char *what);
/* Send a request; on success *ret holds the parsed JSON body of a 2xx reply
 * and *raw (if given) the reply itself. 0 or the exit code. */
int call(const char *method, const char *path, json_t *body, const char *what, json_t **ret,
	 Response *raw);
void print_json(json_t *j);
const char *status_color(const char *s);
void fmt_time(json_t *v, char *buf, size_t n);

/* Parse [--thread T] [--json] and exactly n positional arguments: the index
 * of the first, or -1 (usage printed). */
int simple_args(int argc, char **argv, int n, const char *what);
/* `show` and `cancel`: one request on a run, the record it answers printed. */
int record_command(int argc, char **argv, const char *method, const char *suffix, const char *name,
		   const char *usage);
/* A command on one thread (snapshot, restore). */
typedef struct ThreadCmd {
	int min, max;	    /* arguments from THREAD on */
	const char *usage;  /* printed when there are fewer or more */
	const char *suffix; /* the POST goes to /threads/THREAD/suffix */
	const char *what;   /* call()'s name for the request */
	/* the request's body from args[0] (THREAD) .. args[n - 1]; released after the call */
	json_t *(*make_body)(char **args, int n);
} ThreadCmd;
/* --json, then THREAD and the rest (cmd->min..max arguments, else usage), then
 * the POST of cmd->make_body's body, answered as call() answers (ret, raw).
 * optind is left at THREAD. 0, or the exit code. */
int thread_cmd_post(int argc, char **argv, const ThreadCmd *cmd, json_t **ret, Response *raw);
/* The token of a token file (its first word; never printed). 0 or -1. */
int read_token_file(const char *path, const char **ret);

/* Tail run_id after seq from to its end, report how it ended; the run's exit
 * status as ours (or the tail's error). cli-tail.c. */
int tail_to_end(const char *run_id, long long from);

/* The commands: argv[0] is the command's name. */
int cmd_run(int argc, char **argv);
int cmd_tail(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_restore(int argc, char **argv);
int cmd_files(int argc, char **argv);
int cmd_up(int argc, char **argv);
int cmd_image(int argc, char **argv);
/* `cluster status`: 0; 1 without [cluster] nats; 2 on a usage error; 125
 * when the configuration or the cluster cannot be read (cmd-cluster.c). */
int cmd_cluster(int argc, char **argv);
