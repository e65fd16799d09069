/* SPDX-License-Identifier: MIT */
/*
 * netfwd.h — loopback listeners inside a sandbox's network namespace
 * (SANDBOX_FORWARD, SANDBOX_PROXY, SANDBOX_UNLISTEN).
 *
 * A sandbox's netns holds nothing but `lo`. For a run that needs the host
 * (routerd's /_bridge, or an egress allowlist) the shim opens a TCP listener on
 * 127.0.0.1:<kernel-chosen port> *inside* that netns and serves it from its own
 * event loop in the host netns:
 *   - the socket is created by a short-lived helper thread that setns()es into
 *     the netns of the sandbox's init (its pidfd) and does socket, bind and
 *     listen there; the fd then belongs to the shim, the thread ends. Sockets
 *     keep the netns they were created in, so accept() yields connections from
 *     the sandbox while every connect() the shim makes is in the host netns.
 *     (A thread rather than setns() on the loop thread: the shim itself never
 *     leaves the host netns, even for a moment.)
 *   - forward: each accepted connection is joined to a fixed numeric
 *     host:port on the host.
 *   - proxy: each accepted connection must send one `CONNECT host:port` head
 *     (connect-parse.h); an allowlisted name is resolved on the host with
 *     evdns (non-blocking), its addresses checked (net-addr.h: no loopback,
 *     private, link-local, … unless in allow_private), the ones that pass
 *     tried in turn (exactly the sockaddrs checked: no second resolution),
 *     answered `200 Connection Established` and spliced. Anything else is
 *     answered 403/405/400/431/502 and closed, the reason logged with the
 *     run's RUN_ID/THREAD_ID/SANDBOX_ID, rate-limited per sandbox and kind
 *     of refusal and in total (refuse-log.h: the first few, then a count).
 * Splicing uses bufferevents with a bounded queue per direction: when the
 * receiving side holds NETFWD_HIGH_WATER bytes unsent, reading from the
 * sending side stops until it drained to half of it (backpressure, memory
 * bounded per connection). At most NETFWD_MAX_CONNS connections per run.
 *
 * Listeners and connections belong to a (sandbox, run) pair; their bytes are
 * counted per pair (proxy only). netfwd_unlisten closes them and reports the
 * counters; netfwd_sandbox_gone closes every listener of a sandbox (its
 * counters stay until the run's UNLISTEN).
 *
 * Single-threaded like the rest of the shim (the helper thread touches only
 * its own socket). Functions log nothing except where stated.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "reason.h"

struct event_base;
typedef struct NetFwd NetFwd;

#define NETFWD_HIGH_WATER (256 * 1024)
#define NETFWD_MAX_CONNS 256
#define NETFWD_MAX_LISTENERS 16 /* per run */

int netfwd_new(struct event_base *base, NetFwd **ret);
/* Close everything. NULL-safe; returns NULL. */
NetFwd *netfwd_free(NetFwd *n);

/* Open a listening socket on 127.0.0.1:*ret_port (0: the kernel chooses) in
 * the network namespace of the process behind pidfd; *ret_port is set to the
 * port bound. A port in use is -EADDRINUSE, never another port. *ret_fd is
 * CLOEXEC and non-blocking. */
int netfwd_listen_in_netns(int pidfd, int *ret_fd, uint16_t *ret_port);

/* A TCP socket (AF_INET, CLOEXEC, non-blocking, not connected) made in the
 * network namespace of the process behind pidfd: whatever it connects to is
 * inside the sandbox (the preview server's way in, netpreview.h). */
int netfwd_socket_in_netns(int pidfd, int *ret_fd);

/* ctx: run_id (required), thread_id and sandbox_id (required); copied.
 * *ret_port: in, the port to bind (0: any; see netfwd_listen_in_netns); out,
 * the port bound.
 * target: "host:port", numeric (the bytes are spliced as they are), or the
 * absolute path of a Unix socket (routerd's bridge socket: each connection
 * first sends "RUNWARDEN-BRIDGE <run_id>\r\n", then the sandbox's bytes; the
 * run_id must then be [A-Za-z0-9_-]{1,128}). Returns 0 and the port, -EINVAL
 * for a bad target (why says why), or another negative errno. */
int netfwd_forward(NetFwd *n, int pidfd, const LogCtx *ctx, const char *target, uint16_t *ret_port,
		   Reason *why);
/* allow: n_allow entries "host[:port]" (port 443 by default); -EINVAL with why
 * for a bad entry or an IP literal. allow_private: n_allow_private networks
 * ("10.0.0.0/8", "127.0.0.1", "fd00::/8"; net-addr.h) whose addresses the
 * proxy may connect to although they are not public unicast; -EINVAL with why
 * for a bad one. */
int netfwd_proxy(NetFwd *n, int pidfd, const LogCtx *ctx, char *const *allow, size_t n_allow,
		 char *const *allow_private, size_t n_allow_private, uint16_t *ret_port,
		 Reason *why);
/* Close the run's listeners and connections; the proxy's byte counters
 * (sandbox → host, host → sandbox). 0 (zeros when the run had none). */
int netfwd_unlisten(NetFwd *n, const char *sandbox_id, const char *run_id, uint64_t *ret_out,
		    uint64_t *ret_in);
/* The sandbox is gone: close its listeners and connections (counters kept). */
void netfwd_sandbox_gone(NetFwd *n, const char *sandbox_id);
