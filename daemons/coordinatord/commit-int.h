/* SPDX-License-Identifier: MIT */
/*
 * commit-int.h — what the commit core (commit.c) shares with its two
 * deliveries: publish.c (single host: publish, acknowledge, settle at once)
 * and replicate-commit.c (cluster mode: JetStream first). Nothing else
 * includes it.
 *
 * The core keeps the queue, writes every queued op in one transaction and
 * flushes it; what a commit makes visible, and when, is the delivery's
 * (CommitDelivery). The core knows nothing of the cluster.
 */
#pragma once

#include "commit.h"

struct Op {
	Op *next;
	char run_id[RUN_ID_LEN + 1];
	char *text; /* chunk JSON; NULL for a drive-only op */
	size_t len;
	char status[16]; /* terminal status, or "" */
	json_t *fields;
	json_t *drive;	     /* driver state to store with the event; json_null() deletes */
	PeerDeferred *ack;   /* the client's request to acknowledge, or NULL */
	char *create_thread; /* RUN_START's run to create first (its thread), or NULL */
	char *create_harness;
	char *create_tenant;
	bool is_run;	   /* queued by a Run driver */
	bool refused_full; /* refused past chunk_high_water */
	size_t run_ix;	   /* its run's index among the commit's runs (CommitRuns) */
	/* results */
	int err;
	int64_t seq;
};

/* One commit's ops: they live until every delivery of the commit ended. */
typedef struct CommitGroup {
	Op *ops;
	size_t refs;  /* deliveries not ended, + 1 while commit_ops runs */
	bool writing; /* written, not flushed yet: nothing of it may become visible */
} CommitGroup;

/* The runs of one commit, in the order of their first ops (for the call of
 * commit_ops only). k 0 and degraded when out of memory: then a delivery
 * reads each run's record from the batch (runlog_batch_get_record). */
typedef struct CommitRuns {
	size_t k;
	const char **ids; /* borrowed from each run's first op */
	json_t **recs;	  /* its record as written (owned; a delivery that keeps one sets NULL) */
	bool *plain;	  /* only a client's events: no driver op, no status, no creation */
	void **state;	  /* the delivery's, per run (NULL at first) */
	bool degraded;
} CommitRuns;

/* How a commit's ops become visible. commit.c calls, in order: hold (the
 * queue's ops), before_flush (written, not flushed), then failed (the
 * flush failed) or committed (it succeeded). linger is asked before a commit
 * starts, late and ended_local for events committed outside the queue. */
typedef struct CommitDelivery {
	/* Take out of ops those that must wait (they go back to the queue's
	 * head, in order); returns the others. NULL member: none waits. */
	Op *(*hold)(Coordinator *c, Op *ops);
	/* The transaction b is written, not flushed: may hand runs' events out
	 * before the flush (nothing becomes visible before committed). NULL
	 * member: nothing happens before the flush. */
	void (*before_flush)(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b);
	/* The flush failed (r): true when the delivery dealt with it (nothing
	 * more may be written); false: the core fails the commit's runs in the
	 * local log (storage_error, storage_full). NULL member: false. */
	bool (*failed)(Coordinator *c, CommitGroup *g, CommitRuns *runs, int r);
	/* The flush succeeded: publish, acknowledge and settle each run's ops
	 * (commit_visible), now or later (holding a reference on g). */
	void (*committed)(Coordinator *c, CommitGroup *g, CommitRuns *runs, RunLogBatch *b);
	/* How long a commit may wait for more ops (0: go now). NULL member: 0. */
	usec_t (*linger)(Coordinator *c);
	/* Events committed in a transaction of their own (the watchdog's end of
	 * a stalled run, a run failed after a failed commit): made visible as a
	 * commit's are. Texts and rec are borrowed for the call. */
	void (*late)(Coordinator *c, const char *run_id, int64_t first_seq,
		     const char *const *texts, const size_t *lens, size_t n, const json_t *rec);
	/* A run ended in the local log alone because its events could not be
	 * delivered (COMMIT_FENCED): its end at seq with record rec. */
	void (*ended_local)(Coordinator *c, const char *run_id, int64_t seq, const char *text,
			    size_t len, const json_t *rec);
} CommitDelivery;

/* publish.c: single host. */
extern const CommitDelivery commit_delivery_local;
/* replicate-commit.c: cluster mode (the replicate step before visibility). */
extern const CommitDelivery commit_delivery_replicated;

/* commit.c */
void commit_group_ref(CommitGroup *g);
void commit_group_unref(CommitGroup *g);
/* Is op the first of ops for its run? */
bool commit_first_of_run(Op *ops, Op *op);
/* End run_id in the local log alone, failed with code and message (after a
 * failed commit: COMMIT_STORAGE_FAILED, made visible with late; when its
 * events could not be delivered: COMMIT_FENCED, with ended_local), then tell
 * the driver (what). */
void commit_fail_local(Coordinator *c, const char *run_id, bool is_run, const char *code,
		       const char *message, CommitOutcome what);

/* publish.c */
/* RUN_EVENTS of run_id's committed ops among ops (err 0), in seq order,
 * sliced at read_max_bytes. rec: the run's record after the commit. */
void publish_run(Coordinator *c, const json_t *rec, Op *ops, const char *run_id);
/* Answer the client that queued op (when it is still there), then settle
 * what op's outcome means for its run (CommitHooks.committed). */
void commit_answer(Coordinator *c, const json_t *rec, Op *op);
/* Make run_id's committed ops of ops visible: publish them, then answer and
 * settle each. */
void commit_visible(Coordinator *c, const json_t *rec, Op *ops, const char *run_id);
