/* SPDX-License-Identifier: MIT */
/*
 * preview.h — live previews (docs/SANDBOX-API.md "Ports"): the host names
 * POST /sandboxes/{id}/ports/{port} mints, and the listener of their own
 * ([routerd] preview_listen) through which a browser reaches an HTTP server
 * listening on 127.0.0.1:<port> inside a sandbox, WebSocket upgrades
 * included.
 *
 * A preview is a capability: a random token of PREVIEW_TOKEN_BYTES (hex, one
 * DNS label), kept in routerd's memory with the thread and the port and an
 * expiry (preview_ttl_ms), and named by the host name
 * <token>.<preview_domain>. The preview listener serves nothing else: no API
 * route, no /ui/, no CORS. Per connection it reads the first request head,
 * maps its Host to a preview (unknown 404 preview_not_found, expired 410
 * preview_expired, another name 421 misdirected_request), connects to the
 * shim's preview socket ($runtime_dir/preview.sock, RUNWARDEN-PREVIEW line,
 * containerd-shim/netpreview.h) and carries the bytes: every request head
 * toward the sandbox is rebuilt without Authorization and
 * Proxy-Authorization (bodies as they come, chunked ones re-chunked), and a
 * later request on the connection must name the same preview, still valid,
 * or the connection is closed. After an upgrade (101, WebSocket) the bytes
 * pass as they are, both ways. The sandbox's answers pass as they are.
 * "ERR sandbox_not_running" from the shim is 503 sandbox_not_running,
 * "ERR port_not_listening" 502 port_not_listening, no shim 503 unavailable.
 *
 * routerd restarts forget every preview (the URLs then answer 404).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct Router Router;
typedef struct Preview Preview;

#define PREVIEW_TOKEN_BYTES 24 /* 48 hex digits */
#define PREVIEW_MAX_TOKENS 10000
#define PREVIEW_MAX_CONNS 1024

/* Bind preview_listen (r->conf). A negative errno (logged). */
int preview_new(Router *r, Preview **ret);
/* Close the listener and every preview connection. NULL-safe; returns NULL. */
Preview *preview_free(Preview *pv);
/* Stop accepting (SIGTERM); the connections stay until preview_free(). */
void preview_stop(Preview *pv);

/* A preview of thread_id's port: the live one of that pair (its expiry
 * renewed), else a new one. *ret_url: "http://<token>.<domain>:<port>/"
 * (malloc'd), *ret_expires_ms: epoch ms. -ENOSPC when PREVIEW_MAX_TOKENS
 * live previews exist, -ENOMEM, -EIO (no random bytes). */
int preview_mint(Preview *pv, const char *thread_id, uint16_t port, char **ret_url,
		 int64_t *ret_expires_ms);
