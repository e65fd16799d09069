/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "daemon-util.h"

#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "log.h"
#include "macro.h"
#include "shared-conf.h"
#include "time-util.h"

int
daemon_parse_args(int argc, char **argv, const char *name, const char *summary, DaemonArgs *ret)
{
	static const struct option opts[] = {
	    {"config", required_argument, NULL, 'c'}, {"check-config", no_argument, NULL, 'C'},
	    {"dump-config", no_argument, NULL, 'D'},  {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},      {},
	};
	DaemonArgs a = {0};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:hV", opts, NULL)) >= 0) {
		switch (c) {
		case 'c':
			if (a.n_configs >= ELEMENTSOF(a.configs)) {
				fprintf(stderr, "%s: too many --config options\n", name);
				return -EINVAL;
			}
			a.configs[a.n_configs++] = optarg;
			break;
		case 'C': a.check_config = true; break;
		case 'D': a.dump_config = a.check_config = true; break;
		case 'h':
			printf("%s — %s\n\n"
			       "Usage: %s [--config FILE]... [--check-config]\n\n"
			       "  -c, --config FILE   read FILE (repeatable; later files override\n"
			       "                      earlier ones key by key; default %s)\n"
			       "      --check-config  check the configuration and exit\n"
			       "      --dump-config   print every key with its default and help\n"
			       "  -h, --help          show this help\n"
			       "  -V, --version       show the version\n",
			       name, summary, name, RW_DEFAULT_CONF);
			return 0;
		case 'V': printf("%s (runwarden) %s\n", name, PACKAGE_VERSION); return 0;
		default: return -EINVAL;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", name, argv[optind]);
		return -EINVAL;
	}
	*ret = a;
	return 1;
}

static int
load_files(const DaemonArgs *a, const ConfItem *items, size_t n, void *target)
{
	char err[1024];
	int r = conf_apply_defaults(items, n, target);
	if (r < 0)
		return log_error_errno(r, "Built-in configuration defaults are invalid: %m");
	if (a->dump_config) {
		conf_dump(stdout, items, n);
		return 0;
	}
	if (a->n_configs == 0) {
		r = conf_load_file(items, n, target, RW_DEFAULT_CONF, err, sizeof(err));
		if (r == -ENOENT)
			return 0; /* the defaults are a complete configuration */
		if (r < 0) {
			log_error("%s", err);
			return r;
		}
		return 0;
	}
	for (size_t i = 0; i < a->n_configs; i++) {
		r = conf_load_file(items, n, target, a->configs[i], err, sizeof(err));
		if (r < 0) {
			log_error("%s", err);
			return r;
		}
	}
	return 0;
}

int
daemon_load_config(const DaemonArgs *a, const ConfItem *items, size_t n, void *target,
		   const SharedConf *shared)
{
	int r = load_files(a, items, n, target);
	if (r < 0)
		return r;
	return cluster_conf_check(&shared->cluster);
}

#define SHIM_SNAPSHOT_TIMEOUT_DEFAULT 240000 /* containerd-shim's default */

static int
peek_snapshot_timeout(const char *name, const char *key, const char *value, Reason *why, void *ud)
{
	int64_t *ret = ud;
	char *end;
	long long v;

	if (name[0] != '\0' || !streq(key, "snapshot_timeout_ms"))
		return 0; /* [containerd-shim…] of another name, or another key */
	errno = 0;
	v = strtoll(value, &end, 10);
	if (errno || end == value || *end || v < 0) {
		reason_set(why, "not a non-negative integer");
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

int
daemon_snapshot_wait_ms(const DaemonArgs *a, int64_t margin_ms, int64_t *ret)
{
	int64_t v = SHIM_SNAPSHOT_TIMEOUT_DEFAULT;
	char err[1024];
	int r = 0;

	if (a->n_configs == 0) {
		if (access(RW_DEFAULT_CONF, F_OK) == 0)
			r = conf_scan_file(RW_DEFAULT_CONF, "containerd-shim",
					   peek_snapshot_timeout, &v, err, sizeof(err));
	} else
		for (size_t i = 0; r == 0 && i < a->n_configs; i++)
			r = conf_scan_file(a->configs[i], "containerd-shim", peek_snapshot_timeout,
					   &v, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err);
		return r;
	}
	*ret = v == 0 ? 0 : v + margin_ms;
	return 0;
}

#ifdef HAVE_SYSTEMD
#define NOTIFY(...) (void)sd_notifyf(0, __VA_ARGS__)
#else
#define NOTIFY(...) ((void)0)
#endif

void
notify_ready(const char *status)
{
	NOTIFY("READY=1\nSTATUS=%s", status ? status : "ready");
}

void
notify_status(const char *status)
{
	NOTIFY("STATUS=%s", status);
}

void
notify_stopping(void)
{
	NOTIFY("STOPPING=1\nSTATUS=%s", "stopping");
}

typedef struct SigCtx {
	void (*on_term)(void *);
	void (*on_hup)(void *);
	void *userdata;
} SigCtx;

static SigCtx sig_ctx;
static struct event *sig_events[4];
static struct event *watchdog_ev;

static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
	if (sig == SIGHUP) {
		if (sig_ctx.on_hup)
			sig_ctx.on_hup(sig_ctx.userdata);
		return;
	}
	log_info("Received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	if (sig_ctx.on_term)
		sig_ctx.on_term(sig_ctx.userdata);
}

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	NOTIFY("WATCHDOG=1");
}

int
daemon_setup_signals(struct event_base *base, void (*on_term)(void *), void (*on_hup)(void *),
		     void *userdata)
{
	static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};

	signal(SIGPIPE, SIG_IGN);
	sig_ctx = (SigCtx){on_term, on_hup, userdata};
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
		sig_events[i] = evsignal_new(base, sigs[i], signal_cb, NULL);
		if (!sig_events[i] || evsignal_add(sig_events[i], NULL) < 0)
			return -ENOMEM;
	}
#ifdef HAVE_SYSTEMD
	uint64_t wd = 0;
	if (sd_watchdog_enabled(0, &wd) > 0 && wd > 0) {
		struct timeval tv;
		watchdog_ev = event_new(base, -1, EV_PERSIST, watchdog_cb, NULL);
		if (!watchdog_ev)
			return -ENOMEM;
		event_add(watchdog_ev, timeval_from_usec(&tv, wd / 2));
	}
#else
	(void)watchdog_cb;
#endif
	return 0;
}

void
daemon_teardown_signals(void)
{
	for (size_t i = 0; i < ELEMENTSOF(sig_events); i++)
		if (sig_events[i]) {
			event_free(sig_events[i]);
			sig_events[i] = NULL;
		}
	if (watchdog_ev) {
		event_free(watchdog_ev);
		watchdog_ev = NULL;
	}
}
