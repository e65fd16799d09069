/* SPDX-License-Identifier: MIT */
/*
 * fuzz-coord-frames.c — libFuzzer target: every message a peer may send to
 * coordinatord, through the real frame layer (frame.c, peer.c: framing,
 * HELLO, role checks, dispatch) into the real handlers (coordinator.c's
 * table for routerd and clients, driver-output.c's driver_shim_pushes), with a real LMDB
 * run log in a scratch directory and no shim connected.
 *
 * Input: byte 0 picks the peer's role (routerd, a client, the shim) and
 * whether the rest is a raw byte stream (bit 2) or a list of frames, each
 * [type:u8][len:u16 BE][len bytes of msgpack body], that the harness wraps in
 * the length prefix and [type, req_id, body] head (so that mutations reach
 * the bodies instead of dying in the framing). The harness's own HELLO comes
 * first. A connection per input; the run log starts afresh every 2000
 * inputs. Runs a RUN_START created are freed after each input.
 *
 * coordinator.c is included here (not linked) for its static handler table
 * and connection callbacks.
 */
#include "coordinator.c"

#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>

#include "frame.h"

static Coordinator coord;
static HarnessSet harnesses;
static char dir[64];
static unsigned inputs;

static void
on_shim_close(Peer *p, int err, void *ud)
{
}

static const PeerOps shim_side_ops = {
    .local_role = ROLE_COORD,
    .handlers = driver_shim_pushes,
    .on_close = on_shim_close,
};

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void
rm_rf(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
		abort();
}

static void
open_runlog(void)
{
	char path[128];
	RunLogOptions o = {.map_size = 256 << 20, .sync = false};

	if (coord.runlog) {
		commit_now(&coord);
		coord.runlog = runlog_free(coord.runlog);
	}
	rm_rf(dir);
	if (mkdir(dir, 0700) < 0)
		abort();
	snprintf(path, sizeof(path), "%s/runlog", dir);
	if (runlog_open(path, &o, &coord.runlog) < 0)
		abort();
}

static void
cleanup(void)
{
	if (coord.runlog)
		runlog_free(coord.runlog);
	rm_rf(dir);
}

static void
setup(void)
{
	char err[256];

	log_open("fuzz");
	log_set_max_level(LOG_CRIT);
	/* as coordinatord (daemon_setup_signals): a reply written to a peer that
	 * already closed is EPIPE, not a signal. Without this the 2026-12-02
	 * campaign's process died of SIGPIPE after 1.6 M inputs (no crash). */
	signal(SIGPIPE, SIG_IGN);
	if (conf_apply_defaults(coord_conf_items, coord_conf_n_items, &coord.conf) < 0)
		abort();
	coord.conf.sync = false;
	coord.run_teardown = driver_run_teardown;
	if (harness_load_string("fuzz", "", &harnesses, err, sizeof(err)) < 0)
		abort();
	coord.harnesses = &harnesses;
	coord.storage_ok = true;
	coord.base = event_base_new();
	if (!coord.base || event_base_priority_init(coord.base, 3) < 0)
		abort();
	snprintf(dir, sizeof(dir), "/dev/shm/rw-fuzz-coord-%d", (int)getpid());
	open_runlog();
	commit_setup(&coord, &coordinator_commit_hooks);
	driver_setup(&coord);
	atexit(cleanup);
}

static void
pump(int fd)
{
	char buf[65536];

	for (int i = 0; i < 8; i++) {
		event_base_loop(coord.base, EVLOOP_NONBLOCK);
		while (read(fd, buf, sizeof(buf)) > 0)
			;
	}
}

static void
send_frame(int fd, int type, uint64_t req_id, const void *body, size_t len)
{
	char *b;
	size_t n;

	if (frame_encode(type, req_id, body, len, (size_t)coord.conf.shared.max_frame, &b, &n) < 0)
		return;
	for (size_t off = 0; off < n;) {
		ssize_t k = write(fd, b + off, n - off);
		if (k <= 0) {
			pump(fd);
			if (k < 0 && errno != EAGAIN)
				break;
			continue;
		}
		off += (size_t)k;
	}
	free(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const PeerRole roles[3] = {ROLE_ROUTER, ROLE_CLIENT, ROLE_SHIM};
	int sv[2];
	MpWriter w;

	if (size < 1 || size > 64 * 1024)
		return 0;
	if (!coord.base)
		setup();
	if (++inputs % 2000 == 0)
		open_runlog();
	PeerRole role = roles[(data[0] & 3) % 3];
	bool raw = data[0] & 4;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	int sz = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	Client *cl = NULL;
	if (role == ROLE_SHIM) {
		if (peer_new(coord.base, sv[0], &shim_side_ops, &coord,
			     (size_t)coord.conf.shared.max_frame, &coord.shim) < 0)
			abort();
	} else {
		/* as accept_cb() does */
		cl = calloc(1, sizeof(*cl));
		if (!cl)
			abort();
		cl->c = &coord;
		if (peer_new(coord.base, sv[0], &client_ops, cl,
			     (size_t)coord.conf.shared.max_frame, &cl->peer) < 0)
			abort();
		cl->next = coord.clients;
		coord.clients = cl;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_uint(&w, "version", RW_PROTO_VERSION);
	mp_w_str(&w, "role", peer_role_name(role));
	mp_w_uint(&w, "pid", 1);
	send_frame(sv[1], MSG_HELLO, 0, w.sbuf.data, w.sbuf.size);
	mp_writer_done(&w);
	pump(sv[1]);

	const uint8_t *p = data + 1, *end = data + size;
	if (raw) {
		if (write(sv[1], p, (size_t)(end - p)) < 0)
			abort();
	} else {
		uint64_t req_id = 1;
		while (end - p >= 3) {
			size_t len = ((size_t)p[1] << 8) | p[2];
			int type = p[0];
			p += 3;
			if (len > (size_t)(end - p))
				len = (size_t)(end - p);
			send_frame(sv[1], type, req_id++, p, len);
			p += len;
		}
	}
	pump(sv[1]);
	close(sv[1]);
	pump(-1);
	/* a client's connection is freed by client_closed(); the shim's, here */
	if (role == ROLE_SHIM)
		coord.shim = peer_free(coord.shim);
	commit_now(&coord);
	while (coord.runs)
		run_free(coord.runs);
	commit_now(&coord);
	event_base_loop(coord.base, EVLOOP_NONBLOCK);
	return 0;
}
