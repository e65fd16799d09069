/* SPDX-License-Identifier: MIT */
/*
 * router-conf.h — routerd's configuration: the [runwarden] shared keys plus
 * the [routerd] section.
 *
 * router_conf_items[] is the one table of keys (section, key, type, offset,
 * default, range, help); router_conf_load() applies the defaults, layers the
 * files named on the command line and checks what the table cannot express
 * (the listen address syntax). Sizes and durations are int64_t because the
 * conf parser stores CONF_INT and CONF_SIZE that way; the *_ms keys are
 * milliseconds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf-parser.h"
#include "daemon-util.h"
#include "shared-conf.h"
#include "tenant.h"

/* One tokens_file line: `TOKEN [threads=P,P…] [harnesses=H,H…]
 * [tenant=NAME]`. Only the SHA-256 of the token is kept. threads: exact
 * thread ids, or prefixes when a pattern ends in '*'; NULL = any thread.
 * harnesses: the harness names the token's runs may use (NULL-terminated,
 * sent as RUN_START's harnesses); NULL = any. tenant: the line's tenant=, else "t-" and the first
 * 12 hex digits of the token's SHA-256 (common/tenant.h). */
typedef struct RouterToken {
	uint8_t digest[32];
	char **threads;	  /* NULL-terminated */
	char **harnesses; /* NULL-terminated */
	char tenant[TENANT_NAME_MAX + 1];
} RouterToken;

/* routerd waits this much longer for a snapshot/restore reply than the shim's
 * job may run; coordinatord waits COORD_SNAPSHOT_MARGIN_MS (30 s) longer, so
 * its answer (the job's result or its own timeout) always arrives first. */
#define ROUTER_SNAPSHOT_MARGIN_MS 60000

typedef struct RouterConf {
	SharedConf shared;
	char *listen;			  /* "host:port" or "[v6]:port"; numeric host */
	int64_t max_body;		  /* request body limit → 413 */
	int64_t max_file_body;		  /* the same for PUT /threads/{id}/files/… */
	int64_t max_header_bytes;	  /* request line + headers limit → 431 */
	int64_t max_connections;	  /* accepting pauses at this many client sockets */
	int64_t max_unserved_per_address; /* connections without a request head, per address */
	int64_t
	    first_request_timeout_ms;	/* a new connection's first head must be complete by then */
	int64_t idle_timeout_ms;	/* keep-alive idle / stalled read / stalled write */
	int64_t coord_timeout_ms;	/* deadline of each request to coordinatord */
	int64_t ws_max_queue;		/* per-tail unsent output: pause at 1/2, resume at 1/4 */
	int64_t ws_stall_timeout_ms;	/* paused this long → close 1008 */
	int64_t tails_max_queued_bytes; /* unsent output of all tails together */
	int64_t ws_ping_interval_ms;	/* server pings on WebSockets; 0 = off */
	int64_t tail_read_batch;	/* max events per RUN_READ */
	int64_t header_timeout_ms;	/* whole request head must arrive within → 408 */
	char *tokens_file;		/* bearer tokens, one a line; "" = no auth */
	char *cors_origins;		/* origins allowed cross-origin ("*" = any); "" = none */
	char *server_names;		/* extra Host names accepted (besides the listen address) */
	char *preview_listen;		/* live previews' own listener; "" = none (preview.h) */
	char *preview_domain;		/* previews are <token>.<preview_domain> */
	int64_t preview_ttl_ms;		/* a preview's lifetime after its POST */
	int64_t tenant_rate_per_second; /* a tenant's expensive requests per second; 0 = no limit */
	int64_t tenant_rate_burst;	/* ... of which this many at once */

	/* derived by router_conf_load(), not keys: the deadline of a
	 * snapshot/restore request, the shim's snapshot_timeout_ms +
	 * ROUTER_SNAPSHOT_MARGIN_MS; 0 = none */
	int64_t snapshot_wait_ms;

	/* derived by router_conf_load() */
	char *ui_dir;	     /* the web UI's files; "" = UIDIR */
	RouterToken *tokens; /* one per tokens_file line */
	size_t n_tokens;
	size_t n_tenants; /* distinct tenants of the tokens */
} RouterConf;

extern const ConfItem router_conf_items[];
extern const size_t router_conf_n_items;

/* Defaults, then the files of a (daemon_load_config), then semantic checks.
 * Logs what is wrong; returns 0 or a negative errno. On failure the strings
 * already parsed stay in *c: call router_conf_done() either way. */
int router_conf_load(const DaemonArgs *a, RouterConf *c);

/* Whether the listen address is a loopback one (127.0.0.0/8, ::1). */
bool router_conf_listen_is_loopback(const RouterConf *c);

/* Whether the token's thread scope admits thread_id (NULL token: any). */
bool router_token_allows_thread(const RouterToken *t, const char *thread_id);
/* The tenant of a request made with t (NULL: no tokens_file): its name. */
const char *router_token_tenant(const RouterToken *t);

/* Free the strings of c (NULL-safe fields). */
void router_conf_done(RouterConf *c);
