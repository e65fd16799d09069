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

/* ---- router.c ---- */

/* The daemon: load the configuration (--check-config stops there), set up
 * the loop, serve until SIGTERM/SIGINT. 0 on a clean stop, negative errno
 * (logged) on a startup failure. */
int router_run(const DaemonArgs *args);

/* Build a router on base for conf (borrowed; must outlive it). Binds the
 * listener (fails hard: returns the negative errno after logging). */
int router_new(struct event_base *base, RouterConf *conf, Router **ret);
/* Start the coordinator link; then the loop does the rest. */
int router_start(Router *r);
/* NULL-safe; closes every connection at once; returns NULL. */
Router *router_free(Router *r);
/* SIGTERM: stop accepting, close WebSockets with 1001, leave the loop once
 * they are gone (bounded by a short deadline). */
void router_stop(Router *r);
/* The link became ready or the listener came up: announce readiness once. */
void router_check_ready(Router *r);
/* Connection accounting, called by http.c. */
void router_conn_refused(Router *r, const char *addr);
void router_conn_added(Router *r, HttpConn *c);
void router_conn_removed(Router *r, HttpConn *c);

/* ---- metrics.c ---- */

/* routerd's own part of /metrics in the Prometheus text format 0.0.4, into
 * a new string (*ret, length *ret_len). coord_up: whether coordinatord
 * answered STATUS_GET. 0 or -ENOMEM. */
int metrics_format(const Router *r, bool coord_up, char **ret, size_t *ret_len);

/* ---- tenant-rate.c (the buckets; the check is in routes-int.h) ---- */

/* runwarden_router_tenant_rate_limited_total{tenant=} lines. */
void tenant_rate_metrics(const Router *r, FILE *f);
/* Take one request from token's tenant's bucket: 0, or the seconds to wait
 * (refused; a /chat WebSocket's run start, routes-chat.c). */
unsigned tenant_rate_take(Router *r, const RouterToken *token);
void tenant_rate_free(Router *r);

/* ---- coord-link.c ---- */

/* Connect now (or schedule a retry with backoff). 0 or -ENOMEM. */
int coord_start(Router *r);
/* Drop the link and its retry timer; detach every watch. */
void coord_stop(Router *r);
/* true when requests can be sent (HELLO exchanged, not closed). */
bool coord_ready(Router *r);
/* peer_call() on the link with the configured deadline; -ECONNRESET when
 * down. On success cb runs exactly once unless coord_cancel(userdata). */
int coord_call(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata);
/* The same with its own deadline (host tools may run for minutes). */
int coord_call_timeout(Router *r, int type, const MpWriter *body, PeerReplyFn cb, void *userdata,
		       usec_t timeout);
/* coord_call() and coord_call_timeout() of a typed request (msg.h), e.g.
 *     COORD_CALL(r, RUN_GET, &(Msg_RUN_GET){.run_id = id}, cb, userdata)
 * The body is encoded by msg_encode_NAME(): a field renamed in messages.def
 * breaks the build here. */
#define COORD_CALL_TIMEOUT(r, NAME, m, cb, userdata, timeout)                                      \
	({                                                                                         \
		MpWriter _w;                                                                       \
		mp_writer_init(&_w);                                                               \
		msg_encode_##NAME(&_w, (m));                                                       \
		int _k = coord_call_timeout((r), MSG_##NAME, &_w, (cb), (userdata), (timeout));    \
		mp_writer_done(&_w);                                                               \
		_k;                                                                                \
	})
#define COORD_CALL(r, NAME, m, cb, userdata)                                                       \
	({                                                                                         \
		MpWriter _w;                                                                       \
		mp_writer_init(&_w);                                                               \
		msg_encode_##NAME(&_w, (m));                                                       \
		int _k = coord_call((r), MSG_##NAME, &_w, (cb), (userdata));                       \
		mp_writer_done(&_w);                                                               \
		_k;                                                                                \
	})
/* A host tool may run this long before routerd gives up on the answer. */
#define BRIDGE_TIMEOUT_USEC (15 * 60 * USEC_PER_SEC)
void coord_cancel(Router *r, void *userdata);
/* The message of an ERROR reply body, or NULL. Borrowed from the body. */
const char *coord_error_message(const msgpack_object *body, size_t *ret_len);

/* A run record's JSON text with its lastSeq and status. */
typedef struct RunRecord {
	const char *text; /* JSON text, NUL-terminated */
	size_t len;
	int64_t last_seq;
	bool terminal;
} RunRecord;

/* Parse lastSeq and status out of a record JSON text. 0 or -EBADMSG. */
int run_record_parse(const char *text, size_t len, RunRecord *ret);

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

/* Attach s to run_id's shared watch, creating it (RUN_WATCH, owner-checked
 * against thread_id) when it is the first; ops->active once the watch is
 * active. 0 or negative errno. */
int watch_attach(Router *r, WatchSub *s, const char *run_id, const char *thread_id);
/* Detach s; the last one leaving sends RUN_UNWATCH. No-op when detached. */
void watch_detach(WatchSub *s);
/* Whether s is attached to an active watch. */
bool watch_active(const WatchSub *s);

/* ---- http.c ---- */

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

/* Accepted socket → new connection (takes the fd). bridge: accepted on the
 * bridge socket (see HttpConn.bridge). 0 or negative errno. */
int http_conn_new(Router *r, int fd, const struct sockaddr *sa, int salen, bool bridge);
/* Release now: only from the top of a libevent callback or teardown. */
void http_conn_free(HttpConn *c);
/* Drop the connection from anywhere: I/O off now, freed next turn. */
void http_conn_abort(HttpConn *c);

/* Write to the client. Straight to the socket while nothing written earlier
 * waits and the socket takes it; what it does not take (EAGAIN, a partial
 * write) goes, in order, to the bufferevent's output, which libevent flushes
 * and whose draining calls on_drained. Every write to a connection goes
 * through these. 0, or negative errno when the connection is gone (a write
 * error such as EPIPE/ECONNRESET aborts it). The buffer variant empties buf. */
struct iovec;
struct evbuffer;
int http_conn_writev(HttpConn *c, const struct iovec *iov, int n);
int http_conn_write(HttpConn *c, const void *data, size_t len);
int http_conn_write_buffer(HttpConn *c, struct evbuffer *buf);
/* Gather c's writes until http_conn_uncork(c), which writes them at once (a
 * tail delivering several events: one writev for all of them). One
 * connection at a time: corking another uncorks the first; closing or
 * freeing c uncorks it. uncork: 0 or negative errno, as http_conn_write. */
void http_conn_cork(HttpConn *c);
int http_conn_uncork(HttpConn *c);
/* Bytes written to c that the socket has not taken yet. */
size_t http_conn_output_pending(const HttpConn *c);

/* Queue a complete response for the current request. body may be NULL/0.
 * extra_headers: already formatted "Name: value\r\n" lines or NULL. Ends the
 * request (logs it, resumes parsing pipelined input unless close). */
void http_respond(HttpConn *c, int status, const char *content_type, const char *body, size_t len,
		  const char *extra_headers, bool close);
/* {"error": message, "code": code} with application/json. */
void http_respond_error(HttpConn *c, int status, const char *code, const char *message);
void http_respond_error_close(HttpConn *c, int status, const char *code, const char *message);
/* The same with extra headers ("Name: value\r\n" lines: Retry-After). */
void http_respond_error_headers(HttpConn *c, int status, const char *code, const char *message,
				const char *extra_headers);
/* A jansson value as the JSON body (steals nothing; j is borrowed). */
void http_respond_json(HttpConn *c, int status, const json_t *j);
/* 405 with an Allow header listing allow ("GET"). */
void http_respond_405(HttpConn *c, const char *allow);
/* End the connection gracefully: flush output, half-close, discard input for
 * at most 1 s (or until the client closes), then free. */
void http_conn_close(HttpConn *c);
/* Value of a request header (case-insensitive name) or NULL. */
const char *http_header(const HttpConn *c, const char *name);
/* true when the comma-separated header list contains token (case-insensitive). */
bool http_header_has_token(const HttpConn *c, const char *name, const char *token);
/* Switch c to a streaming state (CONN_WS after a 101, CONN_SSE after the
 * 200 head) once its response head was queued: the request is logged with
 * status, parsing stops for good; the transport's ping_timer (if it made one)
 * starts, and the write timeout and the write-drained mark of a tail apply. */
void http_conn_upgraded(HttpConn *c, int status, HttpConnState state);
/* The end of a chunked CONN_SSE body (its last chunk written): c serves
 * requests again, as after any keep-alive answer (closed when routerd is
 * stopping). */
void http_conn_stream_done(HttpConn *c);

/* ---- routes.c ---- */

/* Make r's connections answered by the route table: Router.on_request (answer
 * c->req, complete: eventually http_respond*() or an upgrade) and
 * Router.on_conn_free. */
void routes_attach(Router *r);
/* Whether a request of method on url may carry max_file_body bytes (a file
 * PUT), from the route table. */
bool routes_file_body(const char *url, size_t len, int method);
/* Percent-decode s[0..len) ('+' a space when plus_space); -EINVAL on a bad
 * escape or %00. */
int routes_url_decode(const char *s, size_t len, bool plus_space, char **ret);
/* The decoded value of a query parameter of the raw query (NULL when absent). */
int routes_query(const char *query, const char *name, char **ret);

/* ---- routes-ds.c ---- */
typedef struct DsRead DsRead;
/* GET (head: HEAD) /ds/v1/threads/{thread_id}/runs/{run_id}, the thread
 * already checked against the token. */
void route_ds(HttpConn *c, bool head, const char *thread_id, const char *run_id, const char *query);
void ds_read_free(HttpConn *c);

/* ---- routes-files.c ---- */

/* /threads/{thread_id}/files{raw}: raw is the undecoded rest of the path
 * ("" or starting with '/'), query the raw query or NULL. */
void route_files(HttpConn *c, const char *thread_id, const char *raw, const char *query);

/* ---- routes-ui.c ---- */

/* GET /ui[/…]: seg are the segments after "ui"; trailing_slash: the path
 * ended with '/'. Needs no token. */
void route_ui(HttpConn *c, char *const *seg, size_t n, bool trailing_slash);
/* GET /threads (query: the raw query or NULL). */
void route_threads(HttpConn *c, const char *query);
/* ui_dir, or the installed default when it is empty. */
const char *routes_ui_dir(const Router *r);

/* ---- routes-exec.c ---- */
/* A data message on an exec WebSocket (inside wslay's receive). */
void sbx_ws_message(HttpConn *c, bool binary, const uint8_t *data, size_t len);
void sbx_conn_free(HttpConn *c);

/* ---- routes-chat.c ---- */

/* /chat (the query raw or NULL): POST a run, GET a join or the hydrate, or the
 * WebSocket of the stock webSocket() adapter. Auth and Host/Origin are done. */
void route_chat(HttpConn *c, const char *query);
/* A text message on a /chat conversation WebSocket (inside wslay's receive:
 * it only queues frames and makes coordinator calls). */
void chat_ws_message(HttpConn *c, const char *text, size_t len);
void chat_ws_refuse_unauthorized(HttpConn *c);
void chat_start_free(HttpConn *c);

/* Helpers routes.c shares with the other route files (see their definitions
 * there; routes-int.h has the rest). */
bool routes_json_content_type(HttpConn *c, bool empty_ok);
json_t *routes_body_json(HttpConn *c);
json_t *routes_json_request(HttpConn *c);
bool routes_thread_allowed(HttpConn *c, const char *thread_id);
void routes_coord_error(HttpConn *c, int err, const msgpack_object *body, const char *not_found);
bool routes_coord_reason(HttpConn *c, const msgpack_object *body);
bool routes_parse_last_seq(const char *s, int64_t *ret);
/* The error code of a request body's problem (run_body_problem,
 * chat_body_problem): "invalid_thread_id" for one about its threadId, else
 * "bad_request". */
const char *routes_problem_code(const char *why);

/* ---- ws.c ---- */

/* Validate the handshake headers of c->req. 0, or -EINVAL with a message
 * for the 400 in *ret_msg (static string). */
int ws_check_handshake(const HttpConn *c, const char **ret_msg);
/* Queue the 101 response and set up the wslay session on c. Input already
 * buffered after the request is processed as WebSocket data. 0 or -errno. */
int ws_accept(HttpConn *c);
/* The bearer token a browser sends as the WebSocket subprotocol item
 * "bearer.<base64url of the token>" beside "runwarden" (a page cannot set
 * Authorization on a WebSocket, and a token in the URL would land in logs and
 * history): a new string in *ret, NULL when there is none; -EINVAL when the
 * item is malformed. */
int ws_protocol_token(const HttpConn *c, char **ret);
/* Queue a text message and push it to the socket. 0 or negative errno. */
int ws_send_text(HttpConn *c, const char *text, size_t len);
/* Queue a close frame (once); the TCP connection is closed after the
 * client's answer or after a 1 s deadline, whichever comes first. */
void ws_close(HttpConn *c, uint16_t code, const char *reason);
/* Bytes not yet written to the socket for c. */
size_t ws_output_pending(const HttpConn *c);
/* Frames the client sent right behind its handshake (the route calls it
 * once the tail exists; later input arrives through ConnOps.on_read). */
void ws_on_read(HttpConn *c);

/* ---- sse.c ---- */

/* The request asks for text/event-stream. */
bool sse_wanted(const HttpConn *c);
/* Queue the 200 head of an event stream and switch c to CONN_SSE. */
int sse_accept(HttpConn *c);
/* One event: `id:` when id >= 0, `event:` when event, text as data lines. */
int sse_send(HttpConn *c, int64_t id, const char *event, const char *text, size_t len);
/* One line of a /chat?format=ndjson body: text and "\n". */
int sse_send_line(HttpConn *c, const char *text, size_t len);
/* The last line of an NDJSON body: with chunked framing, sent in one write
 * with the last chunk (a client sees the line and the body's end at once,
 * and keeps the connection). */
int sse_end_line(HttpConn *c, const char *text, size_t len);
/* End the stream: an `event: error` for code != 1000, then close (abort
 * for 1008: the reader is too slow to flush to). */
void sse_close(HttpConn *c, uint16_t code, const char *reason);

/* ---- tail.c ---- */

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

extern const TailSink ws_tail_sink;	/* ws.c */
extern const TailSink sse_tail_sink;	/* sse.c */
extern const TailSink ndjson_tail_sink; /* sse.c: /chat?format=ndjson */

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

/* A tail on c (upgraded already: it writes through sink, each event in
 * envelope) for run_id (copied) from cursor last_seq; record_json is the
 * record RUN_GET returned (may be NULL). Attaches to the watch. */
int tail_new(HttpConn *c, const TailSink *sink, TailEnvelope envelope, const char *run_id,
	     const char *thread_id, int64_t last_seq, const char *record_json, Tail **ret);
Tail *tail_free(Tail *t);
/* Continue: read, deliver, or finish, as the state allows. */
void tail_pump(Tail *t);
/* Close with code/reason and send nothing more. */
void tail_fail(Tail *t, uint16_t code, const char *reason);

/* ---- tail-budget.c ---- */

/* The total unsent output of all tails and Durable Streams SSE reads is
 * bounded by tails_max_queued_bytes (besides each one's ws_max_queue).
 * tail_budget_add/_remove keep the list of such connections (c->tail or
 * c->ds set); tail_budget_note() refreshes c's share after it wrote or its
 * output drained and, when the total is over the budget, closes the one
 * backed up longest (then the biggest) with 1013 and drops its connection at
 * once, until the total fits (c itself may be closed: check before writing
 * more). tail_budget_stalled() says whether c's output is backed up now.
 * tail_budget_release() forgets c's share (it sends nothing more). */
void tail_budget_add(HttpConn *c);
void tail_budget_remove(HttpConn *c);
void tail_budget_note(HttpConn *c);
void tail_budget_stalled(HttpConn *c, bool stalled);
void tail_budget_release(HttpConn *c);
