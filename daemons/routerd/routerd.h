/* SPDX-License-Identifier: MIT */
/*
 * routerd.h — routerd's private types and cross-file API.
 *
 * routerd is the stateless public front: HTTP/1.1 with keep-alive and
 * pipelining, plus WebSocket tails of run logs. It owns no durable state;
 * every answer comes from coordinatord over one IPC link (a common/proto Peer).
 * One thread, one event_base.
 *
 * Modules (each prefixed by its name):
 *   router.c      Router: config, TCP listener, the bridge-only Unix socket,
 *                 signals, lifecycle, ready
 *   coord-link.c  coord_*: the link to coordinatord (connect, backoff, calls)
 *                 and watch_*: one RUN_WATCH per run, shared by its tails
 *   http.c        http_*: HttpConn, request parsing (http-parser), responses
 *   routes.c      routes_*: the route table and the request handlers
 *   routes-files.c route_files: /threads/{id}/files, the workspace file API
 *   routes-ui.c   route_ui, route_threads: the web UI's files, GET /threads
 *   routes-chat.c route_chat: /chat, the AG-UI endpoint of TanStack AI's
 *                 stock connection adapters (SSE, NDJSON, WebSocket, hydrate)
 *   ws.c          ws_*: RFC 6455 handshake and the wslay session on an HttpConn
 *   tail.c        tail_*: the run-log tail protocol over a WebSocket
 *   routes-net.c  route_sandbox_port, route_sandbox_egress: a sandbox's
 *                 previews and egress list
 *   preview.c     preview_*: live previews' tokens and their own listener
 *
 * Lifetime rules, because callbacks cross modules:
 *   - An HttpConn is only released from the top of a libevent callback.
 *     Code deep in a call chain calls http_conn_abort(), which disables I/O
 *     at once and frees on a zero-delay timer. So lists (watch → tails) can
 *     be walked while tails fail.
 *   - Every peer_call() is made with the object that must outlive the reply
 *     as userdata (HttpConn, Tail or Watch); freeing that object cancels its
 *     calls with peer_cancel_calls(), so reply callbacks never see freed
 *     memory. When the link drops, pending calls fail with -ECONNRESET first,
 *     then coord_on_close() detaches every watch.
 */
#pragma once

#include <http_parser.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conn-limit.h"
#include "loop-lag.h"
#include "msg.h"
#include "peer-link.h"
#include "peer.h"
#include "router-conf.h"
#include "time-util.h"

struct bufferevent;
struct event;
struct event_base;
struct evconnlistener;
struct wslay_event_context;

typedef struct Router Router;
typedef struct HttpConn HttpConn;
typedef struct Tail Tail;
typedef struct Watch Watch;

#define ROUTER_WATCH_BUCKETS 1024
#define ROUTER_MAX_HEADERS 100
/* The line the shim sends first on each connection of a bridge forward, then
 * the sandbox's bytes: "RUNWARDEN-BRIDGE <runId>\r\n" (docs/PROTOCOL.md). */
#define BRIDGE_HELLO "RUNWARDEN-BRIDGE "
#define BRIDGE_RUN_MAX 128
#define ROUTER_MAX_ID 128 /* longest runId accepted in a path */

/* Why routerd ended a WebSocket (the ws_drops_total metric). */
typedef enum WsDrop {
	WS_DROP_NONE,	  /* normal close: run complete, client's close */
	WS_DROP_SLOW,	  /* output queue over ws_max_queue: 1008 */
	WS_DROP_PROTOCOL, /* the client broke RFC 6455: 1002/1007/1009 */
	WS_DROP_PING,	  /* no pong within a ping interval */
	WS_DROP_SHUTDOWN, /* SIGTERM: 1001 */
	WS_DROP_ERROR,	  /* coordinator or internal failure: 1011 */
	WS_DROP_LOST,	  /* TCP ended without a close handshake */
	_WS_DROP_MAX,
} WsDrop;

struct Router {
	RouterConf *conf;
	/* The layer above http.c (routes.c, routes_attach): answer a complete
	 * request; release what it keeps on a connection that is freed. */
	void (*on_request)(HttpConn *c);
	void (*on_conn_free)(HttpConn *c);
	/* ... and whether a request of method on url may carry max_file_body
	 * bytes (a file PUT), from the route table; NULL: none may */
	bool (*big_body)(const char *url, size_t len, int method);
	/* The lifecycle (router.c, router_new): connection accounting, told by
	 * http.c; the coordinatord link became ready (announce readiness once),
	 * told by coord-link.c (http.c keeps conns and n_conns itself). NULL (the
	 * fuzz targets, unit fixtures): not told. */
	void (*on_conn_added)(Router *r, HttpConn *c);
	void (*on_conn_removed)(Router *r, HttpConn *c);
	void (*on_conn_refused)(Router *r, const char *addr);
	void (*on_coord_ready)(Router *r);
	struct event_base *base;
	struct evconnlistener *listener;
	/* $runtime_dir/bridge.sock: the sandboxes' bridge forwards, host tools only */
	struct evconnlistener *bridge_listener;
	char *bridge_path;
	/* live previews (preview.h): preview_listen's listener and the tokens;
	 * NULL when preview_listen is empty */
	struct Preview *preview;
	struct event *accept_retry; /* re-enable accepting after EMFILE & co */
	LoopLag *loop_lag;	    /* how late the loop runs a timer (/metrics) */
	bool accept_paused;	    /* max_connections reached */
	char listen_desc[80];	    /* the address served, for logs */
	HttpConn *conns;	    /* all client connections */
	size_t n_conns;
	AddrTable *unserved;	   /* per address: connections without a request head yet */
	uint64_t conns_refused;	   /* closed at accept: max_unserved_per_address */
	uint64_t refused_unlogged; /* ... since the last (rate-limited) warning */
	usec_t refused_logged_at;
	struct TenantRate *rates; /* tenant-rate.c: one bucket per tenant seen */
	size_t n_rates;
	bool stopping;
	bool ready_sent;
	int exit_code;
	/* http_conn_cork(): the connection whose writes are gathered, and where */
	HttpConn *corked;
	struct evbuffer *cork_buf;
	/* IPC frames sent while the loop reads client requests leave together
	 * once this loop pass's other callbacks ran (http.c, pass_cork) */
	struct event *pass_uncork;
	bool pass_corked;

	/* coordinatord link (coord-link.c) */
	char *coord_path;
	PeerLink *coord_link; /* connect, backoff, HELLO deadline (peer-link.h) */
	bool coord_down_logged;
	Watch *watches[ROUTER_WATCH_BUCKETS];
	/* the sandbox API's exec streams (routes-exec.c), told through these
	 * pointers (set by routes_attach): a push of SBX_EXEC_OUTPUT/EXIT, and
	 * the link's loss */
	struct SbxStream *sbx_streams;
	uint64_t sbx_next_stream;
	void (*sbx_push)(Router *r, int type, const Frame *f);
	void (*sbx_lost)(Router *r);

	/* metrics (metrics.c formats them) */
	uint64_t http_responses[6]; /* by status class: [2] = 2xx … */
	uint64_t ws_drops[_WS_DROP_MAX];
	size_t n_tails;

	/* every connection serving a tail or a Durable Streams SSE read, oldest
	 * first, and their unsent output as last seen (tail-budget.c:
	 * tails_max_queued_bytes) */
	HttpConn *budget_first, *budget_last;
	size_t tails_queued;
	uint64_t tails_budget_closed;
};

/* A host tool may run this long before routerd gives up on the answer. */
#define BRIDGE_TIMEOUT_USEC (15 * 60 * USEC_PER_SEC)

/* A run record's JSON text with its lastSeq and status. */
typedef struct RunRecord {
	const char *text; /* JSON text, NUL-terminated */
	size_t len;
	int64_t last_seq;
	bool terminal;
} RunRecord;

/* One upstream subscription per run, shared by its subscribers (tails). */
struct Watch {
	Router *router;
	Watch *next; /* hash chain in router->watches */
	char *run_id;
	bool active;	       /* RUN_WATCH answered */
	struct WatchSub *subs; /* linked through WatchSub.prev/next */
};

/* A subscriber of a run's watch, embedded in what subscribes (a Tail): the
 * watch tells it through ops, never by name. */
typedef struct WatchSub WatchSub;

typedef struct WatchSubOps {
	/* RUN_WATCH was answered (or already was): pushes follow. */
	void (*active)(WatchSub *s);
	/* A RUN_EVENTS push; events: msgpack strings from first_seq; rec: the
	 * record it carried, parsed once for every subscriber (or NULL). */
	void (*events)(WatchSub *s, int64_t first_seq, const msgpack_object_array *events,
		       const RunRecord *rec);
	/* The watch failed (RUN_WATCH refused, the link lost): s is detached. */
	void (*lost)(WatchSub *s, const char *reason);
} WatchSubOps;

struct WatchSub {
	const WatchSubOps *ops;
	Watch *watch; /* NULL when detached */
	WatchSub *prev, *next;
};

typedef struct HttpHeader {
	char *name;
	char *value;
} HttpHeader;

typedef struct HttpRequest {
	enum http_method method;
	unsigned short http_major, http_minor;
	char *url;
	size_t url_len;
	HttpHeader *headers; /* n_headers of headers_cap (heap, with the request:
			      * a connection between requests, or a tail, holds none) */
	size_t n_headers, headers_cap;
	size_t n_name, n_value; /* lengths of the header being parsed */
	bool in_value;		/* the last header callback was a value */
	size_t header_bytes;	/* request line + headers, against max_header_bytes */
	char *body;
	size_t body_len, body_cap;
	uint64_t body_max; /* max_body, or max_file_body for a file PUT */
	bool keep_alive;
	bool upgrade;  /* http-parser saw Upgrade + Connection: upgrade */
	bool complete; /* on_message_complete ran */
	usec_t started;
	/* filled by routes.c */
	char *path;		  /* the URL path, not decoded, for logs */
	char *cors;		  /* Access-Control-* header lines for an allowed Origin, or NULL */
	const RouterToken *token; /* the bearer token that matched (conf-owned), or NULL */
} HttpRequest;

typedef enum HttpConnState {
	CONN_HTTP,    /* parsing and answering requests */
	CONN_WS,      /* upgraded: a WebSocket tail */
	CONN_SSE,     /* a Server-Sent Events tail: output only */
	CONN_CLOSING, /* flushing output, then lingering close */
	CONN_DEAD,    /* I/O disabled, freed on the next loop turn */
} HttpConnState;

/* What http.c does with the events of an upgraded connection (CONN_WS,
 * CONN_SSE): set by the transport when it takes the connection over. */
/* What the route that upgraded a WebSocket does with its client's messages
 * (routes-chat.c's conversation socket, routes-exec.c's exec socket), set
 * before ws_accept(); NULL (a tail's socket): they are ignored, nudges only. */
typedef struct WsAppOps {
	/* A complete text (binary false) or binary message. */
	void (*on_message)(HttpConn *c, bool binary, const uint8_t *data, size_t len);
	bool body_sized;	    /* a message may be as large as a POST body (max_body) */
	const char *keepalive_text; /* a text frame sent after each ping, or NULL */
} WsAppOps;

typedef struct ConnOps {
	void (*on_read)(HttpConn *c); /* input arrived */
	void (*on_free)(HttpConn *c); /* the connection is freed */
} ConnOps;

struct HttpConn {
	Router *router;
	HttpConn *prev, *next;
	struct bufferevent *bev;
	HttpConnState state;
	char addr[64];	/* client address for logs */
	char local[64]; /* the address the client connected to, "ip:port" / "[v6]:port" */
	bool local_loopback;
	http_parser parser;
	HttpRequest req;
	bool busy;		  /* a request is being answered; parsing paused */
	bool in_process;	  /* guard against re-entering the parse loop */
	int fail_status;	  /* 400/413/431/505 decided inside a parser callback */
	const char *fail_msg;	  /* static message for fail_status 400/505 */
	bool in_body;		  /* the head of the current request is parsed */
	bool prev_cr;		  /* the last head byte fed to the parser was CR */
	bool line_start;	  /* ... was LF: the next byte starts a head line */
	bool half_closed;	  /* CONN_CLOSING: FIN sent, waiting for the client's */
	struct event *timer;	  /* linger / deferred free / ws close deadline */
	struct event *head_timer; /* header_timeout_ms of the request being read */
	AddrSlot *unserved;	  /* counted until its first request head is complete */
	usec_t accepted_at;	  /* for first_request_timeout_ms */
	/* An upgraded connection: its transport's handlers (ws.c, sse.c), and
	 * what wants to hear that its output drained (tail.c) */
	const ConnOps *ops;
	const WsAppOps *ws_app; /* the route's use of a WebSocket's messages, or NULL */
	void (*on_drained)(HttpConn *c);
	/* WebSocket (ws.c, tail.c) */
	struct wslay_event_context *ws;
	struct event *ping_timer;
	bool ws_close_queued;
	bool ws_io_failed; /* the send callback failed (not a protocol error) */
	WsDrop ws_drop;	   /* set when routerd decides to end the session */
	Tail *tail;
	bool ws_ping_outstanding; /* a server ping is unanswered */
	/* ws.c: the client's frames as far as they were handed to wslay */
	uint8_t ws_in_hdr[14]; /* the frame header being read */
	uint8_t ws_in_hdr_len;
	bool ws_in_frag;		  /* a fragmented data message is open */
	uint64_t ws_in_left;		  /* payload bytes of the current frame to come */
	struct StreamStart *stream_start; /* routes.c: a tail waiting for RUN_GET */
	struct ChatStart *chat_start;	  /* routes-chat.c: a /chat run or join on its way */
	bool ndjson;			  /* CONN_SSE carries NDJSON lines (/chat?format=ndjson) */
	bool chunked;	/* ... in chunked framing (a sandbox exec's): its end is the
			 * last chunk, and the connection serves requests again */
	bool chunk_end; /* the last chunk was written (sse_end_line) */
	bool chat_ws;	/* a /chat conversation WebSocket (RunAgentInput frames in) */
	const RouterToken *chat_token; /* ... and the token it was opened with (conf-owned) */
	struct DsRead *ds;	       /* routes-ds.c: a Durable Streams read */
	struct SbxStream *sbx;	       /* routes-exec.c: an exec's stream (NDJSON or WS) */
	/* tail-budget.c: a streaming connection in Router.budget_first… */
	HttpConn *budget_prev, *budget_next;
	size_t budget_queued;	  /* unsent output as last seen, in tails_queued */
	usec_t budget_stalled_at; /* since when its output is backed up; 0: it is not */
	bool budget_linked;
	bool budget_stream; /* counted as a stream of its own (a sandbox exec's): live
			     * while CONN_SSE or CONN_WS; closed by dropping it */
	/* accepted on the bridge socket: serves only the host tools of bridge_run,
	 * the run named by the shim's first line (empty until it arrived) */
	bool bridge;
	char bridge_run[BRIDGE_RUN_MAX + 1];
	/* routes-sandboxes.c: the sandbox id and action of a SANDBOX_CTL on its
	 * way (the answer names the id); heap, freed with the connection */
	char *sandbox_id;
	char sandbox_action[8];
	/* routes.c: the threadId of a POST /runs on its way (for the log line
	 * of its answer); heap, freed with the connection */
	char *run_thread_id;
};

/* Write to the client. Straight to the socket while nothing written earlier
 * waits and the socket takes it; what it does not take (EAGAIN, a partial
 * write) goes, in order, to the bufferevent's output, which libevent flushes
 * and whose draining calls on_drained. Every write to a connection goes
 * through these. 0, or negative errno when the connection is gone (a write
 * error such as EPIPE/ECONNRESET aborts it). The buffer variant empties buf. */
struct iovec;

struct evbuffer;

typedef struct DsRead DsRead;

/* How a tail writes to its client: the transport (ws.c, sse.c). The tail
 * frames each event (TailEnvelope); the sink frames it for the wire. */
typedef struct TailSink {
	/* One message; seq < 0: the status at the end. WebSocket: a text
	 * frame; SSE: `id:` (seq ≥ 0) or `event: status`, then `data:`; NDJSON:
	 * a line. */
	int (*send)(HttpConn *c, int64_t seq, const char *msg, size_t len);
	/* End the stream: a close frame, an SSE error event, or the close. */
	void (*close)(HttpConn *c, uint16_t code, const char *reason);
	/* Bytes queued and not yet written to the socket (flow control). */
	size_t (*pending)(const HttpConn *c);
	/* The transport can still carry events: false once it closed, failed or
	 * queued its end, whoever decided it (the client, an error, the tail). */
	bool (*open)(const HttpConn *c);
} TailSink;

/* What one event looks like on a tail. */
typedef enum TailEnvelope {
	TAIL_SEQ,  /* {"seq":N,"chunk":…}, then a status message (API.md) */
	TAIL_ID,   /* {"id":"N","chunk":…}: TanStack's durable envelope (/chat NDJSON, WS) */
	TAIL_BARE, /* the chunk alone, N as the SSE id (/chat SSE) */
} TailEnvelope;

struct Tail {
	Router *router;
	HttpConn *conn;
	const TailSink *sink;
	TailEnvelope envelope;
	WatchSub sub; /* on the run's watch (coord-link.c) */
	char *run_id;
	char *thread_id;	   /* NULL when the request had none */
	int64_t cursor;		   /* seq of the last event delivered (exclusive cursor) */
	int64_t head;		   /* highest lastSeq known from any record */
	bool terminal;		   /* the best record known is terminal */
	char *record;		   /* that record's JSON text */
	bool need_read;		   /* a RUN_READ is due (start, gap, output drained) */
	bool reading;		   /* a RUN_READ is in flight */
	bool finished;		   /* the tail ended itself; nothing more is sent */
	bool counted;		   /* included in router->n_tails */
	bool paused;		   /* the last delivery stopped at the high mark */
	bool chat;		   /* /chat (envelope ≠ TAIL_SEQ): no status message */
	bool keep_open;		   /* /chat conversation WebSocket: stays open after the run */
	struct event *stall_timer; /* armed while output stays backed up */
};
