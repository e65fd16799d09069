/* SPDX-License-Identifier: MIT */
/*
 * netpreview.h — the preview socket: a way *into* a sandbox's loopback ports
 * (ingress only), for routerd's live previews (docs/SANDBOX-API.md "Ports").
 *
 * The shim listens on the Unix socket $runtime_dir/preview.sock (mode and
 * group as its control socket; SO_PEERCRED: root, our uid or the group's
 * members). A client (routerd) opens one connection per HTTP connection of a
 * browser and sends one line first:
 *
 *     RUNWARDEN-PREVIEW <key> <port>\r\n
 *
 * key: the sandbox's key (the thread id), port: 1..65535. The shim finds the
 * running sandbox of that key (the owner's resolve callback: the key is
 * compared in full), makes a TCP socket inside its network namespace
 * (netfwd_socket_in_netns: a helper thread setns()es, the loop thread never
 * does), connects it to 127.0.0.1:<port> there and answers one line:
 *
 *     OK\r\n                           then the bytes, both ways, as they are
 *     ERR <code>\r\n                   then close; code: bad_request,
 *                                      sandbox_not_running, port_not_listening
 *
 * Nothing leaves the sandbox this way: the sandbox's processes never see the
 * socket, and the shim only ever connects to a port inside the sandbox.
 * Splicing has the same bounded queues and backpressure as netfwd.c. At most
 * NETPREVIEW_MAX_CONNS connections at once (more are closed at accept).
 *
 * Single-threaded like the rest of the shim. Logs refusals at notice level
 * with the sandbox's id.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct event_base;
typedef struct NetPreview NetPreview;

#define NETPREVIEW_HELLO "RUNWARDEN-PREVIEW "
#define NETPREVIEW_MAX_CONNS 1024
#define NETPREVIEW_HIGH_WATER (256 * 1024)

/* The running sandbox of key: its init's pidfd (borrowed: used at once) and
 * its id (for logs); -ENOENT when no sandbox of that key is running. */
typedef int (*NetPreviewResolve)(const char *key, int *ret_pidfd, char ret_id[static 17],
				 void *userdata);

/* Listen on path (mode, and gid >= 0: the group whose members may connect).
 * A negative errno when the socket cannot be made. */
int netpreview_new(struct event_base *base, const char *path, unsigned mode, int64_t gid,
		   NetPreviewResolve resolve, void *userdata, NetPreview **ret);
/* Stop listening and close every connection; unlink_path: remove the socket
 * file too (not when a successor binds it anew). NULL-safe; returns NULL. */
NetPreview *netpreview_free(NetPreview *np, bool unlink_path);
/* Stop accepting (a successor binds the path); the connections made stay. */
void netpreview_stop_listening(NetPreview *np, bool unlink_path);
