/* SPDX-License-Identifier: MIT */
/*
 * sandbox-exec-int.h — the sandbox API's execs inside coordinatord:
 * sandbox-exec.c (the execs, their start, end and relays to routerd) and
 * sandbox-exec-keep.c (what is kept of their output for a later ask).
 */
#pragma once

#include "coordinatord.h"

/* The run_id of these execs in the shim ("sbx:<thread id>"): no run has it
 * (run ids are uuids), and a coordinatord that does not know such an exec
 * kills it (sbx_exec_shim_ready). */
#define SBX_RUN_PREFIX "sbx:"

/* Ended background execs kept per thread for SBX_EXEC_LIST, and in all
 * (many threads may not make the list grow without bound). */
#define SBX_EXEC_MAX_ENDED 16
#define SBX_EXEC_MAX_ENDED_ALL 1024

typedef enum SbxState {
	SBX_ENSURING, /* SANDBOX_ENSURE in flight */
	SBX_STARTING, /* EXEC_START in flight */
	SBX_RUNNING,
	SBX_ENDED, /* a background exec's end, kept for the list */
} SbxState;

struct SbxExec {
	SbxExec *next;
	Coordinator *c;
	SbxState state;
	char thread_id[THREAD_ID_MAX + 1];
	char tenant[TENANT_NAME_MAX + 1]; /* whose exec (tenant_max_execs) */
	Client *client; /* the routerd connection that started it; NULL once gone */
	uint64_t stream_id;
	uint64_t exec_id; /* the shim's, also the "pid" the API shows; 0 before */
	PeerDeferred *start;
	char *sandbox_id;
	char **argv, **env; /* env is dropped once EXEC_START went out */
	char *cwd;
	void *stdin_data;
	size_t stdin_len;
	uint64_t stdin_sent; /* streamed stdin bytes so far (SBX_EXEC_INPUT) */
	bool stdin_open;
	bool background;
	int kill_signal; /* a kill asked before the exec started, else 0 */
	int64_t timeout_ms;
	int64_t exit_code, signal;
	char reason[16];
	/* Cluster mode, on the thread's owner: started by another node's client
	 * (its client is the forwarding loopback). Its output and end wait here
	 * for that node's SBX_RELAY_POLL instead of being pushed (sbx-relay.c). */
	int egress_step; /* sandbox_egress_reopen's, before EXEC_START */
	/* EXEC_START sent right behind the SANDBOX_ENSURE, on the sandbox id the
	 * thread's last ENSURE gave (sbx_early): early. ensure_pending: the
	 * ENSURE not answered yet. early_refused: the shim refused that
	 * EXEC_START (the sandbox not ready, gone) before the ENSURE's answer;
	 * early_stale: the ENSURE answered another (or a new) sandbox, next_id
	 * (NULL: it failed, ensure_err) while the EXEC_START was out. */
	bool early, ensure_pending, early_refused, early_stale, next_created;
	char *next_id;
	int ensure_err;
	/* A background exec: the last BG_KEEP bytes of stdout and stderr, for
	 * SBX_EXEC_READ (GET …/processes/{pid}/output); bg_end: bytes so far. */
	char *bg[2];
	size_t bg_len[2];
	uint64_t bg_end[2];
	bool relayed;
	bool relay_ended; /* ended, the end not handed over yet */
	char *buf[2];	  /* stdout, stderr not yet acknowledged, from base[i] */
	size_t len[2];
	uint64_t base[2];
	PeerDeferred *poll; /* a poll held until there is something (or POLL_HOLD) */
	struct event *poll_timer, *lease_timer;
};

/* sandbox-exec.c */
/* Unlink and free x (cancelling an ENSURE still out for it). */
void sbx_drop(SbxExec *x);
/* Drop the oldest ended execs of thread_id (all threads: NULL) past max. */
void sbx_trim(Coordinator *c, const char *thread_id, size_t max);
/* EXEC_KILL of exec_id (answered to nobody); -ECONNRESET without the shim. */
int sbx_kill_exec(Coordinator *c, uint64_t exec_id, int sig);
/* The exec of thread_id named by pid, or by the stream of client cl. */
SbxExec *sbx_lookup(Coordinator *c, Client *cl, const char *thread_id, uint64_t pid, bool has_pid,
		    uint64_t stream_id, bool has_stream);

/* sandbox-exec-keep.c */
/* A relayed exec (x->relayed): its buffers, held poll and timers freed. */
void sbx_relay_release(SbxExec *x);
/* Answer x's held poll with what there is (may drop x once its end went). */
void sbx_relay_answer(SbxExec *x);
/* Output of a relayed exec, kept for the asking node (may drop x). */
void sbx_relay_buffer(SbxExec *x, int stream, const void *data, size_t len);
/* Output of a background exec: its last BG_KEEP bytes a stream kept. */
void sbx_bg_keep(SbxExec *x, int stream, const char *data, size_t len);
