/* SPDX-License-Identifier: MIT */
/*
 * commit.h — the commit layer (commit.c, publish.c, redact.c, watch.c,
 * run-error.c): the op queue and group commit, what the layers above hear
 * through (CommitHooks), the watch list and RUN_EVENTS, a run's RUN_ERROR.
 * Layers: daemons/coordinatord/LAYERS.
 */
#pragma once

#include "coordinatord.h"
#include "run-errors.h"

/* What a commit meant for the run an op belongs to (CommitHooks.committed). */
typedef enum CommitOutcome {
	COMMIT_ENDED,	       /* the op that made the run terminal is on disk */
	COMMIT_REFUSED_FULL,   /* an event refused past chunk_high_water */
	COMMIT_REFUSED,	       /* refused: the run is terminal already, gone, or the op invalid */
	COMMIT_STORAGE_FAILED, /* the commit failed; the run was marked failed where it could be */
	COMMIT_FENCED,	       /* cluster mode: its events were not replicated (another node
				* owns it, or no acknowledgement): stop its processes, end it */
} CommitOutcome;

/* The only way commit.c reaches the layers above it (it knows runs by id
 * alone). coordinator.c fills one in (coordinator_commit_hooks: the driver's
 * functions, the watchdog's and the delivery's choice) and hands it to
 * commit_setup(). Every member is called from within
 * a commit or a queuing call, never re-entering the queue it is called from. */
struct CommitHooks {
	/* Queue the buffered output of every driven run (commit_now, before it writes). */
	void (*flush)(Coordinator *c);
	/* Is run_id driven here? Then *ret is its log context (borrowed). */
	bool (*run_log)(Coordinator *c, const char *run_id, LogCtx *ret);
	/* The values to redact from a client's event on run_id: the driven run's own
	 * (borrowed: *ret_owned false) or every configured secret (a new vector:
	 * *ret_owned true). May return NULL. */
	char **(*secrets)(Coordinator *c, const char *run_id, bool *ret_owned);
	/* What the commit of an op meant for run_id's driven Run, which exists:
	 * driven is true when the driver queued the op. The Run may be freed. */
	void (*committed)(Coordinator *c, const char *run_id, bool driven, CommitOutcome what);
	/* After a commit that succeeded: the bytes of live data in the run log
	 * (the watchdog warns and starts size retention). */
	void (*log_usage)(Coordinator *c, uint64_t used);
	/* How this commit's ops become visible (commit-int.h): single-host
	 * publishing (commit_delivery_local) or, in cluster mode, replication
	 * first (commit_delivery_replicated). Asked once per commit. */
	const struct CommitDelivery *(*delivery)(Coordinator *c);
};

/* redact.c (values: a NULL-terminated vector of secret values). Does
 * s[0..len) hold any of them? */
bool redact_holds(char *const *values, const char *s, size_t len);
/* s[0..len) with every value replaced by [REDACTED] (malloc'd; its length in
 * *ret_len when not NULL), NULL when out of memory. */
char *redact_string(char *const *values, const char *s, size_t len, size_t *ret_len);
/* Redact every decoded string, key and number of j in place: true when
 * something changed. */
bool redact_tree(char *const *values, json_t *j);
/* Replace every occurrence of each value in *text (length *len,
 * NUL-terminated, malloc'd) with [REDACTED]; -ENOMEM leaves it as it was. */
int redact_text(char *const *values, char **text, size_t *len);
/* ... in every string (keys too) of a JSON value, in place. */
int redact_json(char *const *values, json_t *j);

/* commit.c — the op queue. All take ownership of chunk/fields/drive. */
/* Queue an op of run_id's driver: chunk (stamped with the time), or else a
 * copy of text[0..len) stored as it is, or neither (a driver-state update or a
 * status alone); status "" or NULL unless terminal; drive json_null() deletes
 * the driver state. Redacted with secrets (NULL-terminated, may be NULL).
 * -ENOMEM, with everything released, when it could not be queued. */
int commit_queue_run(Coordinator *c, const char *run_id, json_t *chunk, const char *text,
		     size_t len, const char *status, json_t *fields, json_t *drive,
		     char *const *secrets);

/* watch.c — the watch list (RUN_WATCH): a leaf. */
/* The watch of run_id by cl (any client's when cl is NULL), or NULL. */
Watch *watch_find(Coordinator *c, const Client *cl, const char *run_id);
/* cl watches run_id (once): 0 and the watch in *ret (may be NULL), or -ENOMEM. */
int watch_add(Coordinator *c, Client *cl, const char *run_id, Watch **ret);
/* Drop cl's watches of run_id (NULL: all of cl's), drop(c, w) on each first. */
void watch_remove(Coordinator *c, const Client *cl, const char *run_id,
		  void (*drop)(Coordinator *c, Watch *w));
/* RUN_EVENTS to the watchers of run_id. */
void publish(Coordinator *c, const char *run_id, int64_t first_seq, const char *const *texts,
	     const size_t *lens, size_t n, const json_t *record);

/* run-error.c — a run's terminal RUN_ERROR, built in one place (a leaf). */
/* threadId/runId onto a RUN_ERROR (runId, metadata.tanstack.{threadId,runId}). */
void agui_error_ids(json_t *chunk, const char *thread_id, const char *run_id);
/* {type RUN_ERROR, message, code[, timestamp]} naming run_id (and its thread)
 * as agui_error_ids does; run_id NULL: not named (the AG-UI guard does it);
 * timestamp 0: none (the commit stamps it). NULL when out of memory. */
json_t *run_error_chunk(const char *message, const char *code, const char *thread_id,
			const char *run_id, int64_t timestamp);
/* The record fields of that end: {"error": {message, code}}. */
json_t *run_error_fields(const char *message, const char *code);

/* RUN_START's run, created in the next group commit (before the ops queued
 * after this for it: RUN_STARTED, the driver state); RUN_START's reply goes
 * with that commit's acknowledgements, an error if the creation failed (then
 * the run's other ops of the commit fail -ENOENT). 0 or -ENOMEM. */
int commit_queue_create(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
			const char *thread_id, const char *harness, const char *tenant);
/* A client's RUN_APPEND / RUN_FINISH: acknowledged after the commit. */
void op_queue_client(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id, json_t *chunk,
		     const char *status, json_t *fields);
/* A client's RUN_APPEND: the chunk text is stored exactly as the client sent it. */
void op_queue_client_text(Coordinator *c, Client *cl, uint64_t req_id, const char *run_id,
			  const char *text);
/* Write everything queued now (before a watchdog decision, at shutdown). */
void commit_now(Coordinator *c);
void commit_setup(Coordinator *c, const CommitHooks *hooks);
void commit_teardown(Coordinator *c);
/* Events committed in a transaction of their own, outside the op queue (the
 * watchdog's end of a stalled run): made visible as a commit's are, by the
 * delivery (CommitDelivery.late: in cluster mode replicated first, in order
 * with the run's other batches, the terminal record mirrored), then
 * RUN_EVENTS to the watchers. Texts and rec are copied. */
void commit_publish_committed(Coordinator *c, const char *run_id, int64_t first_seq,
			      const char *const *texts, const size_t *lens, size_t n,
			      const json_t *rec);
/* publish.c: single-host delivery of commits (commit-int.h; CommitHooks.delivery). */
extern const struct CommitDelivery commit_delivery_local;

/* publish.c: count a run reaching a terminal status (/metrics). */
void metrics_count_finish(Coordinator *c, const char *status);
