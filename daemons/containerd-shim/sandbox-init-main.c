/* SPDX-License-Identifier: MIT */
/*
 * sandbox-init-main.c — the sandbox-init helper's main (the `runc init` way):
 * a small program, linked against libc only (statically where the toolchain
 * can), that the shim execs as root in the sandbox's cgroup for every sandbox
 * (sandbox_spawn_begin, sandbox-linux.c). It reads its configuration (the
 * first packet on INIT_SOCK_FD, sandbox-init.h) and becomes the spawner
 * (sandbox-setup.c), whose clone is the sandbox's init: what stays resident in
 * every idle sandbox is this program's few pages, not a copy of the shim.
 * It is not meant to be run by hand: without the shim's socket it says so
 * and exits 2.
 */
#include "config.h"

#include <errno.h>
#include <linux/filter.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "macro.h"
#include "sandbox-init.h"

static SandboxSpec spec;
static struct sock_fprog progs[2];
static void *conf;
static size_t conf_len;

void
init_conf_release(void)
{
	if (conf)
		(void)munmap(conf, conf_len);
	conf = NULL;
}

int
main(int argc, char **argv)
{
	InitMsg m = {.type = INIT_MSG_SETUP_FAILED, .err = EBADMSG};
	const char *why = "configuration: malformed";
	sigset_t none;
	ssize_t n, k;
	void *buf;
	int type;
	socklen_t tl = sizeof(type);

	(void)argc;
	(void)argv;
	/* The shim blocked every signal around our clone: start clean. */
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (getsockopt(INIT_SOCK_FD, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    type != SOCK_SEQPACKET) {
		fprintf(stderr, "sandbox-init: started by containerd-shim only\n");
		return 2;
	}
	do
		n = recv(INIT_SOCK_FD, NULL, 0, MSG_PEEK | MSG_TRUNC);
	while (n < 0 && errno == EINTR);
	if (n <= 0 || n > INIT_CONF_MAX)
		goto fail;
	/* Mapped, not malloc'd: init_conf_release() gives it back whole. */
	buf = mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED) {
		m.err = ENOMEM;
		why = "configuration: out of memory";
		goto fail;
	}
	do
		k = recv(INIT_SOCK_FD, buf, (size_t)n, 0);
	while (k < 0 && errno == EINTR);
	conf = buf;
	conf_len = (size_t)n;
	if (k != n || init_conf_decode(buf, (size_t)n, &spec, progs) < 0)
		goto fail;
	spawner_main(&spec);
fail:
	init_send(INIT_SOCK_FD, &m, why, strlen(why));
	return 1;
}
