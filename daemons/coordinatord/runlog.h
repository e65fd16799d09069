/* SPDX-License-Identifier: MIT */
/*
 * runlog.h — the durable run log: run records and their events in LMDB.
 *
 * Layout (one LMDB environment, named databases):
 *   runs         runId (36-byte uuid text)          → record JSON text (as served)
 *   events       runId ‖ seq (u64 big-endian)       → chunk JSON text
 *   thread_runs  threadId ‖ 0x00 ‖ startedAt (u64 BE) ‖ runId → ""
 *   idempotency  threadId ‖ 0x00 ‖ key               → runId
 *                0x00 ‖ clientRunId                  → runId (a /chat alias: the
 *                                                      empty thread, global)
 *   inputs       runId                              → JSON text: the run's new
 *                                                      user messages (/chat hydrate)
 *   owners       threadId                           → the tenant that first created
 *                                                      work or data in the thread
 *   meta         "schema"                           → "1"
 *
 * Contract (tanstack-protocol.md §2.3):
 *  - seqs of a run start at 0 and grow by one with no gap: an append takes
 *    seq = record.lastSeq + 1 and writes the event and the bumped record in
 *    ONE transaction, so nobody can see a lastSeq pointing at a missing event;
 *  - runlog_create is idempotent (an existing record is returned unchanged);
 *  - appends to an unknown run give -ENOENT, to a terminal run -ESTALE;
 *  - the first terminal status wins: finishing a terminal run changes nothing
 *    and returns 0 (a no-op), and runlog_append_finish on a terminal run
 *    returns -ESTALE without writing;
 *  - a transaction is committed with the environment's durability (fsync on
 *    commit by default) before any function returns success, and a failed
 *    commit is reported as the error it was (-EIO, -ENOSPC, -ENOMEM for
 *    MDB_MAP_FULL), never as success.
 *
 * Ownership: records are returned as new json_t references (caller decrefs);
 * event texts from runlog_read are malloc'd (RunLogEvents, freed with
 * runlog_events_done).
 *
 * Not thread-safe: one RunLog per process, used from the event loop thread.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "id-util.h"
#include "tenant.h"

typedef struct RunLog RunLog;

#define RUN_ID_LEN UUID_STRING_LEN /* a v4 uuid; THREAD_ID_MAX: id-util.h */

typedef struct RunLogOptions {
	size_t map_size;  /* bytes; the file grows sparsely up to this */
	bool sync;	  /* fsync on every commit (durable); false = MDB_NOSYNC */
	bool preallocate; /* reserve map_size of disk blocks for the data file at open */
} RunLogOptions;

/* With opts->preallocate, the data file's blocks up to map_size are allocated
 * at open (fallocate, FALLOC_FL_KEEP_SIZE: LMDB sees the same file size), so
 * that a disk filled by something else (workspaces, backups) never makes a
 * commit fail ENOSPC: -ENOSPC when the disk cannot hold map_size now; a
 * filesystem without fallocate is not an error (*ret's runlog_preallocated()
 * says false). */
int runlog_open(const char *dir, const RunLogOptions *opts, RunLog **ret);
bool runlog_preallocated(const RunLog *l);
/* After a failed commit: 0 when the environment is sound (the transaction
 * left nothing behind), 1 when it was in doubt (MDB_PANIC after a failed
 * meta-page write) and has been reopened from what is on disk, or a negative
 * errno when it cannot be reopened. A failed commit is never retried. */
int runlog_recover(RunLog *l);
RunLog *runlog_free(RunLog *l);

/* Create the record {runId, threadId, status:"running", lastSeq:-1, startedAt,
 * updatedAt, harness, tenant} unless it exists (tenant, harness: NULL = no
 * such field; the _keyed, _aliased and batch variants take a tenant). *ret_created tells which (may
 * be NULL). */
int runlog_create(RunLog *l, const char *run_id, const char *thread_id, const char *harness,
		  int64_t now_ms, bool *ret_created);

/* The record, or -ENOENT. */
int runlog_get(RunLog *l, const char *run_id, json_t **ret_record);

/* The record as stored (compact JSON, NUL-terminated) when it belongs to
 * thread_id (NULL: to any thread): *ret_text stays valid until the next call
 * into l. -ENOENT for no such run and for another thread's run (not
 * revealed), -EUCLEAN for a record that is no JSON object. A record read
 * again while no write transaction committed in between (LMDB's transaction
 * id unchanged) comes from memory, unparsed: GET /runs/{id} polling (B7). */
int runlog_get_text(RunLog *l, const char *run_id, const char *thread_id, const char **ret_text);

/* Append one chunk (JSON text of an object). On success *ret_seq is its seq and
 * *ret_record (optional) the record after the commit. */
int runlog_append(RunLog *l, const char *run_id, const char *chunk, size_t len, int64_t now_ms,
		  int64_t *ret_seq, json_t **ret_record);

/* Append a final chunk and make the run terminal in one transaction.
 * status: "completed" | "failed" | "aborted". fields (may be NULL) is merged into
 * the record (error, exitCode, …). -ESTALE if already terminal. */
int runlog_append_finish(RunLog *l, const char *run_id, const char *chunk, size_t len,
			 const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq,
			 json_t **ret_record);

/* Merge fields into a non-terminal record (e.g. sandboxId) and bump updatedAt.
 * A terminal record is left as it is (returns 0). */
int runlog_update(RunLog *l, const char *run_id, const json_t *fields, int64_t now_ms,
		  json_t **ret_record);

typedef struct RunLogEvents {
	int64_t first_seq; /* seq of texts[0] */
	size_t n;
	char **texts;
	size_t *lens;
} RunLogEvents;

/* Up to max events with seq > from_seq (exclusive cursor, -1 = from the start),
 * plus the record as of the same read snapshot. */
int runlog_read(RunLog *l, const char *run_id, int64_t from_seq, size_t max,
		RunLogEvents *ret_events, json_t **ret_record);
/* The same, stopping before the event that would take the texts past
 * max_bytes — but always returning at least one event when there is one. */
int runlog_read_bytes(RunLog *l, const char *run_id, int64_t from_seq, size_t max, size_t max_bytes,
		      RunLogEvents *ret_events, json_t **ret_record);
void runlog_events_done(RunLogEvents *e);

/* runlog_create with an idempotency key, in one transaction: when the key
 * (per thread) is already stored, run_id is overwritten with its run and
 * *ret_created is false; otherwise the record, its thread index entry and the
 * key are committed together (a crash can never leave a run without its key,
 * which would let a retry start a second one). idem may be NULL. */
int runlog_create_keyed(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id,
			const char *harness, const char *tenant, int64_t now_ms, const char *idem,
			bool *ret_created);

/* POST /chat: runlog_create_keyed with the client's run id as an alias of
 * the run in its thread (issue 30 item 8: the key is (threadId, alias), so
 * another thread's use of the same id is neither a conflict nor seen) and
 * input (a JSON text, may be NULL) stored beside the record, all in one
 * transaction. The alias already known in thread_id overwrites run_id with
 * its run (*ret_created false). */
int runlog_create_aliased(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id,
			  const char *harness, const char *tenant, int64_t now_ms,
			  const char *alias, const char *input, bool *ret_created);
/* The run alias names in thread_id, or -ENOENT. */
int runlog_alias_get(RunLog *l, const char *alias, const char *thread_id, char ret[RUN_ID_LEN + 1]);
/* A join by client run id alone: the newest run (startedAt) alias names in a
 * thread scope allows (runlog_scope_allows; NULL: any thread), or -ENOENT. */
int runlog_alias_find(RunLog *l, const char *alias, char *const *scope, char ret[RUN_ID_LEN + 1]);
/* The input stored with the run (malloc'd JSON text), or -ENOENT. */
int runlog_input_get(RunLog *l, const char *run_id, char **ret);

/* Idempotency keys: look up (→ run id copy in ret, or -ENOENT) and store. */
int runlog_idem_get(RunLog *l, const char *thread_id, const char *key, char ret[RUN_ID_LEN + 1]);
int runlog_idem_put(RunLog *l, const char *thread_id, const char *key, const char *run_id);

/* Call fn for every run whose status is "running" (a read snapshot). */
int runlog_foreach_running(RunLog *l, void (*fn)(const char *run_id, json_t *record, void *ud),
			   void *ud);

/* ---------- group commit ----------
 * A batch is one write transaction holding any number of appends across
 * runs. Each append is checked against the batch's own view of its record
 * (so two appends to one run in a batch get consecutive seqs); a logic
 * refusal (-ENOENT unknown run, -ESTALE terminal, -EINVAL) concerns that op
 * only, while a storage error (-EIO, -ENOSPC for MDB_MAP_FULL, …) poisons the
 * batch: every later op and the commit return it. Nothing is durable, and
 * nothing may be published or acknowledged, before runlog_batch_commit()
 * returned 0. runlog_batch_free() releases the batch (aborting if needed). */
typedef struct RunLogBatch RunLogBatch;

int runlog_batch_begin(RunLog *l, RunLogBatch **ret);
int runlog_batch_append(RunLogBatch *b, const char *run_id, const char *chunk, size_t len,
			const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq);
/* Append an event of a running run (no status) in a nested transaction: when
 * the map has no room for it (MDB_MAP_FULL) -ENOSPC concerns this op only and
 * the batch goes on; other errors poison the batch as above. The nested
 * transaction is skipped while the map's end certainly has room for
 * everything the batch put (then MDB_MAP_FULL cannot happen). */
int runlog_batch_append_soft(RunLogBatch *b, const char *run_id, const char *chunk, size_t len,
			     const json_t *fields, int64_t now_ms, int64_t *ret_seq);
/* Make a run terminal without an event (a completed run's last event is
 * whatever its harness emitted last). -ESTALE when it is terminal already. */
/* Create a run in the batch (running, lastSeq -1; its thread index entry), as
 * runlog_create does in a transaction of its own; later ops of the batch see
 * it. -EEXIST (this op only) when run_id is taken. */
int runlog_batch_create(RunLogBatch *b, const char *run_id, const char *thread_id,
			const char *harness, const char *tenant, int64_t now_ms);
int runlog_batch_finish(RunLogBatch *b, const char *run_id, const char *status,
			const json_t *fields, int64_t now_ms);
/* Replace (or, with state NULL, delete) the run's driver state in the batch. */
int runlog_batch_drive_put(RunLogBatch *b, const char *run_id, const json_t *state);
/* The record as the batch leaves it (new reference), NULL if the batch never touched it. */
json_t *runlog_batch_get_record(RunLogBatch *b, const char *run_id);
/* Write what the batch's ops left of each run's record into its transaction:
 * after it, committing is all that is left (the batch takes no more ops).
 * runlog_batch_commit() seals first; sealing before lets a caller act between
 * the last write and the flush (cluster mode's early publish). */
int runlog_batch_seal(RunLogBatch *b);
int runlog_batch_commit(RunLogBatch *b);
void runlog_batch_free(RunLogBatch *b);

/* The stall watchdog's transaction: if the run is non-terminal and its
 * updatedAt < cutoff_ms, append chunk and finish it "failed" (merging fields),
 * atomically. Returns 0 when it did, 1 when the run was fresh or terminal
 * (an append that committed first wins), or a negative errno. */
int runlog_finish_if_stale(RunLog *l, const char *run_id, int64_t cutoff_ms, const char *chunk,
			   size_t len, const json_t *fields, int64_t now_ms, json_t **ret_record,
			   int64_t *ret_seq);
/* The same with chunks[0..n-1] appended in order, the last one terminal
 * (the guard's closing chunks before the RUN_ERROR); *ret_first_seq is the
 * seq of chunks[0]. */
int runlog_finish_if_stale_n(RunLog *l, const char *run_id, int64_t cutoff_ms,
			     const char *const *chunks, const size_t *lens, size_t n,
			     const json_t *fields, int64_t now_ms, json_t **ret_record,
			     int64_t *ret_first_seq);
/* Bump updatedAt of a non-terminal run (activity without an event). */
int runlog_touch(RunLog *l, const char *run_id, int64_t now_ms);
/* The driver state stored beside the record (exec id, consumed output
 * offsets, …), or -ENOENT. New reference. */
int runlog_drive_get(RunLog *l, const char *run_id, json_t **ret);

/* The thread's records, newest first; with status, only those in it. */
int runlog_thread_runs(RunLog *l, const char *thread_id, const char *status, json_t **ret);
/* Its newest max records, newest first: the index walked from its end, no
 * record read past them (the /chat hydrate's). */
int runlog_thread_runs_newest(RunLog *l, const char *thread_id, size_t max, json_t **ret);

/* The host's threads, newest activity first (activity = the startedAt of a
 * thread's newest run; ties by threadId): items {threadId, lastRunAt,
 * latestRun (the record)}. prefix keeps the thread ids starting with it,
 * scope (NULL-terminated ID / PREFIX* patterns, NULL = all) those a token may
 * see, status those whose newest run is in it; the page starts after the item
 * (after_ms, after_thread) when after_thread is set. *ret_more tells whether
 * another matching item follows the limit. One read transaction; the walk
 * costs two index lookups per thread (no per-event bookkeeping). */
typedef struct RunLogThreadQuery {
	const char *prefix;
	char *const *scope;
	const char *status;
	int64_t after_ms;
	const char *after_thread;
	size_t limit;
} RunLogThreadQuery;
int runlog_threads(RunLog *l, const RunLogThreadQuery *q, json_t **ret, bool *ret_more);
/* Does scope (NULL: every thread; "x*" a prefix) allow thread_id? */
bool runlog_scope_allows(char *const *scope, const char *thread_id);
/* qsort's order of THREAD_LIST items (json_t *): the newest lastRunAt first,
 * then by threadId — the order runlog_threads lists them in, for lists
 * merged from elsewhere (other nodes, threads taken over). */
int runlog_thread_item_cmp(const void *a, const void *b);

/* Each run a pruning pass deleted, with its record as it was (borrowed),
 * after the transaction committed (for the cluster's copy of the run). */
typedef void (*RunLogPrunedFn)(const char *run_id, const json_t *record, void *ud);

/* Retention: scan up to max_scanned runs from *cursor (exclusive; "" = the
 * start; left "" after a full pass) and delete, in one transaction, up to
 * max_pruned terminal runs finished before cutoff_ms with their events, index
 * entries, idempotency key and driver state. pruned (may be NULL) is called
 * with each deleted run's id once the transaction committed. */
int runlog_prune(RunLog *l, int64_t cutoff_ms, size_t max_pruned, size_t max_scanned,
		 char cursor[RUN_ID_LEN + 1], size_t *ret_pruned, RunLogPrunedFn pruned, void *ud);

/* Size retention: delete, in one transaction, the (up to 16) max_pruned
 * terminal runs that finished first, with everything runlog_prune deletes
 * (pruned as there). */
int runlog_prune_oldest(RunLog *l, size_t max_pruned, size_t *ret_pruned, RunLogPrunedFn pruned,
			void *ud);

/* Bytes of live data in the map (every database's pages; free pages, which
 * LMDB reuses, not counted), and the map size. The batch variant sees the
 * batch's own uncommitted writes. */
int runlog_usage(RunLog *l, uint64_t *ret_used, uint64_t *ret_map);
int runlog_batch_usage(RunLogBatch *b, uint64_t *ret_used);
/* An upper bound of runlog_batch_usage, without its look-ups: the last exact
 * figure plus the most the batch's puts since can have added (exact the
 * first time). Where the bound is over a mark, ask the exact figure. */
int runlog_batch_usage_bound(RunLogBatch *b, uint64_t *ret_used);

/* ---------- tenants (docs/SECURITY.md "Tenants") ---------- */
/* The tenant owning thread_id into ret, or -ENOENT. */
int runlog_thread_owner(RunLog *l, const char *thread_id, char ret[TENANT_NAME_MAX + 1]);
/* Record tenant as thread_id's owner unless it has one: 0 when it is tenant's
 * now (*ret_new: it was not before), -EPERM when another tenant owns it (its
 * name in other, may be NULL). One transaction. */
int runlog_thread_claim(RunLog *l, const char *thread_id, const char *tenant, bool *ret_new,
			char other[TENANT_NAME_MAX + 1]);
/* Call fn for every thread with an owner (a read snapshot). */
int runlog_foreach_owner(RunLog *l, void (*fn)(const char *thread_id, const char *tenant, void *ud),
			 void *ud);

/* What each tenant holds in the log: bytes (its records and events, keys
 * and values, without LMDB's page overhead) and how many of its runs are
 * terminal (prunable). A record without "tenant" is TENANT_DEFAULT's. */
typedef struct RunLogTenantUsage {
	char tenant[TENANT_NAME_MAX + 1];
	uint64_t bytes;
	uint64_t runs;
	uint64_t prunable;
} RunLogTenantUsage;
/* One read transaction; *ret malloc'd (n entries), largest bytes first. */
int runlog_tenant_usage(RunLog *l, RunLogTenantUsage **ret, size_t *ret_n);
/* runlog_prune_oldest among tenant's runs only (NULL: any tenant's), and
 * only as many as free want_bytes of events (the last one may free more;
 * UINT64_MAX: up to max_pruned). */
int runlog_prune_oldest_of(RunLog *l, const char *tenant, size_t max_pruned, uint64_t want_bytes,
			   size_t *ret_pruned, RunLogPrunedFn pruned, void *ud);

/* true for completed, failed, aborted */
bool run_status_terminal(const char *status);
