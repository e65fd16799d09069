/* SPDX-License-Identifier: MIT */
/*
 * main.c — containerd-shim: command line, configuration, event loop.
 * `--doctor` (with the usual --config options) checks the host instead of
 * serving: see doctor.h.
 * Everything else lives in libshim.a (shim.c, sandbox-linux.c, shim-conf.c).
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <event2/event.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "daemon-util.h"
#include "doctor.h"
#include "image-cmd.h"
#include "quota.h"
#include "log.h"
#include "shim-conf.h"
#include "shim.h"

typedef struct Ctx {
	struct event_base *base;
	Shim *shim;
} Ctx;

static void
on_term(void *userdata)
{
	Ctx *ctx = userdata;

	notify_stopping();
	shim_stop(ctx->shim); /* stop accepting, destroy every sandbox */
	event_base_loopbreak(ctx->base);
}

/* SIGUSR2: exit leaving the sandboxes to the next shim (a package upgrade:
 * docs/SYSTEMD.md). Nothing is torn down after shim_handover(): the state is
 * the one a crash leaves, which the next shim re-adopts. */
static void
on_handover(evutil_socket_t fd, short what, void *userdata)
{
	Ctx *ctx = userdata;

	(void)fd;
	(void)what;
	notify_stopping();
	shim_handover(ctx->shim);
	fflush(NULL);
	_exit(0);
}

static int
run(int argc, char **argv)
{
	ShimConf conf = {0};
	DaemonArgs args;
	Ctx ctx = {0};
	struct event *handover_ev = NULL;
	bool doctor = false;
	char **image_argv = NULL;
	int image_argc = 0, r;

	log_open("containerd-shim");
	/* --doctor is ours alone: take it out before the common parser sees it. */
	for (int i = 1; i < argc; i++)
		if (streq(argv[i], "--doctor")) {
			doctor = true;
			memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof(char *));
			argc--;
			i--;
		}
	/* `image COMMAND ARGS…` (image-cmd.h): everything from "image" on is the
	 * command's, what comes before it the usual options. */
	for (int i = 1; i < argc; i++)
		if (streq(argv[i], "image")) {
			image_argv = argv + i + 1;
			image_argc = argc - i - 1;
			argc = i;
			break;
		}
	r = daemon_parse_args(argc, argv, "containerd-shim",
			      "runs sandboxed processes for runwarden (--doctor: check the host)",
			      &args);
	if (r <= 0)
		return r < 0 ? 1 : 0;
	r = shim_conf_load(&args, &conf);
	if (r < 0 || args.check_config) {
		shim_conf_done(&conf);
		return r < 0 ? 1 : 0;
	}
	if (image_argv) {
		r = image_cmd(&conf, image_argc, image_argv);
		shim_conf_done(&conf);
		return r;
	}
	if (doctor) {
		r = shim_doctor(&conf);
		shim_conf_done(&conf);
		return r;
	}
	log_set_max_level(conf.shared.log_level);

	ctx.base = event_base_new();
	/* Three priorities: 1 is the default; 2 is background work (the pool refill)
	 * that runs only when nothing else is ready. */
	if (ctx.base && event_base_priority_init(ctx.base, 3) < 0)
		ctx.base = (event_base_free(ctx.base), NULL);
	if (!ctx.base) {
		log_error("Failed to create the event loop");
		shim_conf_done(&conf);
		return 1;
	}
	/* Start-up re-adopts or reaps what a killed predecessor left (adopt.h): a
	 * SIGTERM meanwhile waits for the loop instead of cutting that short. */
	sigset_t term, old_mask;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGINT);
	(void)sigprocmask(SIG_BLOCK, &term, &old_mask);
	r = shim_new(ctx.base, &conf, &ctx.shim);
	if (r >= 0)
		r = daemon_setup_signals(ctx.base, on_term, NULL, &ctx);
	if (r >= 0) {
		handover_ev = evsignal_new(ctx.base, SIGUSR2, on_handover, &ctx);
		if (!handover_ev || evsignal_add(handover_ev, NULL) < 0)
			r = -ENOMEM;
	}
	(void)sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (r >= 0) {
		(void)quota_log_support(&conf);
		notify_ready("serving");
		log_info("containerd-shim ready, listening in '%s'", conf.shared.runtime_dir);
		r = event_base_dispatch(ctx.base) < 0 ? -EIO : 0;
	}
	if (handover_ev)
		event_free(handover_ev);
	shim_free(ctx.shim);
	daemon_teardown_signals();
	event_base_free(ctx.base);
	shim_conf_done(&conf);
	return r < 0 ? 1 : 0;
}

int
main(int argc, char **argv)
{
	return run(argc, argv);
}
