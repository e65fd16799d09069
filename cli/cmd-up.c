/* SPDX-License-Identifier: MIT */
/*
 * cmd-up.c — `runwarden up`: the development mode that runs the three daemons
 * in the foreground (a private state directory, development defaults written
 * there, the user's --config layered on them), waits for /readyz and stops
 * them all when one exits or on SIGINT/SIGTERM.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t up_stop;

static void
up_signal(int sig)
{
	up_stop = sig;
}

static const char *const up_daemons[] = {"containerd-shim", "coordinatord", "routerd"};

/* What `up` runs: the binaries' directory, the development defaults it wrote
 * and the user's --config layered on them (empty when none). */
typedef struct Up {
	const char *dir;
	char dev_conf[4200];
	char conf_abs[4096];
	pid_t pids[3];
} Up;

/* The development defaults: runtime and state beneath the state directory,
 * the listen address. */
static int
up_write_dev_conf(Up *u, const char *state_abs, const char *listen)
{
	char runtime[4200];

	snprintf(runtime, sizeof(runtime), "%s/runtime", state_abs);
	if (strlen(runtime) > 80) /* Unix socket paths are limited to 107 bytes */
		snprintf(runtime, sizeof(runtime), "%s/runwarden-up-%ld",
			 getenv("XDG_RUNTIME_DIR") ?: "/tmp", (long)getpid());
	snprintf(u->dev_conf, sizeof(u->dev_conf), "%s/dev.conf", state_abs);
	FILE *f = fopen(u->dev_conf, "we");
	if (!f)
		return error("up: cannot write '%s': %m", u->dev_conf);
	fprintf(f,
		"# Written by runwarden up: the development defaults. --config FILE is layered on "
		"top.\n"
		"[runwarden]\nruntime_dir = %s\nstate_dir = %s/state\n\n[routerd]\nlisten = %s\n",
		runtime, state_abs, listen);
	/* ./dev up: the web UI straight from the source tree */
	if (getenv("RUNWARDEN_UI_DIR"))
		fprintf(f, "ui_dir = %s\n", getenv("RUNWARDEN_UI_DIR"));
	fclose(f);
	return 0;
}

/* Every daemon checks the layered configuration before any starts. */
static int
up_check_configs(const Up *u)
{
	for (size_t i = 0; i < 3; i++) {
		char bin[4400];
		snprintf(bin, sizeof(bin), "%s/%s", u->dir, up_daemons[i]);
		char *av[] = {bin,
			      "--config",
			      (char *)u->dev_conf,
			      u->conf_abs[0] ? "--config" : NULL,
			      (char *)u->conf_abs,
			      "--check-config",
			      NULL};
		if (!u->conf_abs[0])
			av[3] = "--check-config", av[4] = NULL;
		pid_t p = fork();
		if (p == 0) {
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, STDOUT_FILENO);
			execv(bin, av);
			fprintf(stderr, "runwarden: up: cannot run '%s': %m\n", bin);
			_exit(127);
		}
		int st;
		waitpid(p, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return error("up: %s rejects the configuration", up_daemons[i]);
	}
	return 0;
}

static void
up_spawn(Up *u)
{
	struct sigaction sa = {.sa_handler = up_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < 3; i++) {
		char bin[4400];
		snprintf(bin, sizeof(bin), "%s/%s", u->dir, up_daemons[i]);
		char *av[] = {bin,	   "--config",
			      u->dev_conf, u->conf_abs[0] ? "--config" : NULL,
			      u->conf_abs, NULL};
		u->pids[i] = fork();
		if (u->pids[i] == 0) {
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGPIPE, SIG_DFL);
			execv(bin, av);
			fprintf(stderr, "runwarden: up: cannot run '%s': %m\n", bin);
			_exit(127);
		}
	}
}

static int
up_tokens_file_key(void *ud, const char *section, const char *key, const char *value)
{
	char *path = ud;
	if (strcmp(section, "routerd") == 0 && strcmp(key, "tokens_file") == 0)
		snprintf(path, PATH_MAX, "%s", value); /* a later line overrides */
	return 1;
}

/* The probe's token when none was given: routerd, configured with --config's
 * [routerd] tokens_file, answers /readyz only with a token, so take that
 * file's first token as `runwarden --token-file` would. 0 when there is none
 * to take, -1 when the file named cannot be read. */
static int
up_probe_token(const Up *u)
{
	char path[PATH_MAX] = "";

	if (cli.token || !u->conf_abs[0])
		return 0;
	if (ini_parse(u->conf_abs, up_tokens_file_key, path) < 0 || !path[0])
		return 0; /* an unreadable or bad file: --check-config said why */
	return read_token_file(path, &cli.token);
}

static int
up_cluster_key(void *ud, const char *section, const char *key, const char *value)
{
	bool *cluster = ud;
	if (strcmp(section, "cluster") == 0 && strcmp(key, "nats") == 0)
		*cluster = value[0] != '\0'; /* a later line overrides */
	return 1;
}

/* How long `up` waits for /readyz: 10 s; in cluster mode ([cluster] nats)
 * UP_CLUSTER_READY_S, since the first node ensures the stream and buckets
 * (R3 creates while the servers elect leaders) and a node waits for NATS
 * (issue 35 H: 4 of 16 node starts gave up at 10 s). */
#define UP_READY_S 10
#define UP_CLUSTER_READY_S 120
static int
up_ready_s(const Up *u)
{
	bool cluster = false;
	if (u->conf_abs[0])
		(void)ini_parse(u->conf_abs, up_cluster_key, &cluster);
	return cluster ? UP_CLUSTER_READY_S : UP_READY_S;
}

/* Poll /readyz until it answers 200 (true), a daemon dies or up_ready_s()
 * pass. */
static bool
up_wait_ready(Up *u, const char *url)
{
	Client probe;
	int secs = up_ready_s(u);
	if (client_init(&probe, url, cli.token) < 0) {
		error("up: %s", probe.err);
		return false;
	}
	for (int k = 0; k < secs * 20 && !up_stop; k++) {
		Response r;
		if (client_request(&probe, "GET", "/readyz", NULL, &r) == 0) {
			bool ready = r.status == 200;
			response_free(&r);
			if (ready)
				return true;
		}
		for (size_t i = 0; i < 3; i++)
			if (waitpid(u->pids[i], NULL, WNOHANG) == u->pids[i]) {
				u->pids[i] = 0;
				error("up: %s failed to start", up_daemons[i]);
				return false;
			}
		usleep(50 * 1000);
	}
	if (!up_stop)
		error("up: not ready after %d s", secs);
	return false;
}

/* Until Ctrl-C or a daemon's exit: 0, or 1 when a daemon exited. */
static int
up_supervise(Up *u)
{
	for (;;) {
		int st, rc = 0;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR) {
			if (up_stop)
				return 0;
			continue;
		}
		for (size_t i = 0; i < 3; i++)
			if (p == u->pids[i]) {
				u->pids[i] = 0;
				error("up: %s exited; stopping", up_daemons[i]);
				rc = 1;
			}
		if (rc || p < 0)
			return rc;
	}
}

static void
up_stop_all(Up *u)
{
	for (int i = 2; i >= 0; i--)
		if (u->pids[i] > 0)
			kill(u->pids[i], SIGTERM);
	for (size_t i = 0; i < 3; i++)
		if (u->pids[i] > 0)
			waitpid(u->pids[i], NULL, 0);
}

int
cmd_up(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"config", required_argument, NULL, 'c'},
	    {"build-dir", required_argument, NULL, 'b'},
	    {},
	};
	const char *listen = "127.0.0.1:8787", *state = ".run", *user_conf = NULL;
	char state_abs[4096], url[300];
	Up u = {.dir = getenv("RUNWARDEN_LIBEXECDIR") ?: PKGLIBEXECDIR};
	int c, rc = EXIT_CLI;

	optind = 0;
	while ((c = getopt_long(argc, argv, "l:s:c:b:", opts, NULL)) >= 0) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 's': state = optarg; break;
		case 'c': user_conf = optarg; break;
		case 'b': u.dir = optarg; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc)
		return usage_error("up: unexpected argument '%s'", argv[optind]);
	if (mkdir(state, 0755) < 0 && errno != EEXIST)
		return error("up: cannot create '%s': %m", state);
	if (!realpath(state, state_abs))
		return error("up: '%s': %m", state);
	if (user_conf && !realpath(user_conf, u.conf_abs))
		return error("up: cannot read '%s': %m", user_conf);
	if (up_write_dev_conf(&u, state_abs, listen) != 0)
		return EXIT_CLI;
	if (geteuid() != 0)
		return error("up: containerd-shim needs root for its sandboxes (run with sudo)");
	if (up_check_configs(&u) != 0 || up_probe_token(&u) < 0)
		return EXIT_CLI;
	up_spawn(&u);
	/* a wildcard address is reached (and named in Host, which routerd
	 * checks) as loopback */
	if (strncmp(listen, "0.0.0.0:", 8) == 0)
		snprintf(url, sizeof(url), "http://127.0.0.1:%s", listen + 8);
	else if (strncmp(listen, "[::]:", 5) == 0)
		snprintf(url, sizeof(url), "http://[::1]:%s", listen + 5);
	else
		snprintf(url, sizeof(url), "http://%s", listen);
	if (up_wait_ready(&u, url)) {
		fprintf(stderr, "%s==> runwarden ready on %s (state in %s; Ctrl-C stops)%s\n",
			BOLD(cli.color_err), url, state_abs, RESET(cli.color_err));
		printf("ready: %s\n", url);
		fflush(stdout);
		rc = up_supervise(&u);
	}
	up_stop_all(&u);
	return up_stop && rc == 0 ? 0 : rc;
}
