/* SPDX-License-Identifier: MIT */
/*
 * adopt.h — what lets a restarted containerd-shim take over the sandboxes of a
 * killed predecessor (docs/DESIGN.md, "Re-adopting sandboxes").
 *
 * Layout, under <runtime_dir>/sandboxes (0700 root, tmpfs in production):
 *   <id>/init.sock     the listening SOCK_SEQPACKET socket the init keeps
 *                      (sandbox.h); bound by the shim before the clone
 *   <id>/sandbox       key \0 run_id \0 thread_id \0 cgroup id \0 (the cgroup
 *                      is sb-<cgroup id>: the id, or a pooled sandbox's own;
 *                      the key is empty while a pooled sandbox is unclaimed)
 *   <id>/exec-<N>      run_id \0 thread_id \0 deadline (epoch ms, 0 = none) \0
 *                      kill_leftovers ("1" or "0"; absent = "0") \0
 *                      from EXEC_START until the exec is released (its
 *                      EXEC_EXIT delivered, or held too long)
 *   <id>/.exec-free    a released exec record (or an empty file), renamed to
 *                      the next exec-<N> once its content is written: no
 *                      inode made per exec; never read
 * and <sandbox_dir>/.exec-id: the last exec id handed out, so that ids never
 * repeat across restarts (coordinatord re-attaches by exec id).
 *
 * Nothing here runs inside a sandbox. Functions return 0 or a negative errno
 * and do not log, except adopt_scan (one line per sandbox it gives up on).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox.h"

typedef struct AdoptedExec {
	uint64_t id;
	pid_t pid; /* in the sandbox's pid namespace */
	bool exited;
	int status;	  /* wait status when exited */
	int mem[3];	  /* [1] stdout, [2] stderr memfds (O_RDWR, CLOEXEC) */
	uint64_t size[3]; /* their sizes = where reading goes on */
	bool eof[3];
	char *run_id, *thread_id; /* from exec-<N>; may be NULL */
	int64_t deadline_ms;	  /* CLOCK_REALTIME ms, 0 = none */
	bool kill_leftovers;	  /* EXEC_START kill_leftovers */
} AdoptedExec;

typedef struct Adopted {
	char id[17];
	char *key, *run_id, *thread_id;
	char cg_id[17]; /* its cgroup is sb-<cg_id> */
	int sock;	/* connected to the init, non-blocking */
	pid_t pid;	/* host pid of the init (SO_PEERCRED) */
	int pidfd;
	uint64_t window;  /* the init's output_window */
	uint32_t version; /* the init's wire version (sandbox.h INIT_PROTO_VERSION) */
	AdoptedExec *execs;
	size_t n_execs;
} Adopted;

/* Create (0700) and open <runtime_dir>/sandboxes. */
int adopt_dir_open(const char *runtime_dir, int *ret_dfd);

/* Create <id>/ and bind <id>/init.sock (the init calls listen(), so that
 * SO_PEERCRED of a connection names the init); *ret_fd is CLOEXEC. */
int adopt_listen(int dfd, const char *id, int *ret_fd);
int adopt_save_sandbox(int dfd, const char *id, const char *key, const char *run_id,
		       const char *thread_id, const char *cg_id);
/* The same over the existing record, in place (no new inode; not atomic: for
 * a sandbox with no exec record yet, which is never re-adopted). */
int adopt_update_sandbox(int dfd, const char *id, const char *key, const char *run_id,
			 const char *thread_id, const char *cg_id);
/* Make <id>/.exec-free, an empty file the next exec record takes over (and a
 * released one becomes again): no exec creates an inode. Ignored at start. */
int adopt_spare_exec(int dfd, const char *id);
/* A pooled sandbox claimed: <from>/ becomes <to>/ (the init's socket moves
 * with its directory). -EEXIST when <to>/ exists. */
int adopt_rename_sandbox(int dfd, const char *from, const char *to);
int adopt_save_exec(int dfd, const char *id, uint64_t exec_id, const char *run_id,
		    const char *thread_id, int64_t deadline_ms, bool kill_leftovers);
void adopt_forget_exec(int dfd, const char *id, uint64_t exec_id);
/* Remove <id>/ and everything in it. */
void adopt_forget_sandbox(int dfd, const char *id);

/* The persistent exec id counter: load at start, store each new id. */
int adopt_counter_open(const char *sandbox_dir, int *ret_fd, uint64_t *ret_last);
void adopt_counter_store(int fd, uint64_t id);

/* Every <id>/ left by a predecessor: connect to its init and collect what it
 * holds. cb decides: it returns 1 when it took the sandbox over (it owns sock,
 * pidfd and the memfds then: set them to -1), 0 to have it reaped (the init is
 * SIGKILLed; its cgroup is left for cgroup_host_reap_stale). A directory whose
 * init does not answer is removed. Returns the number adopted. */
/* The init's HELLO: -EPROTO if it is not one, -EPROTONOSUPPORT for a wire
 * version this shim does not speak (newer than INIT_PROTO_VERSION; 0, from an
 * init older than the version field, is version 1's wire). *ret_version is
 * the init's version either way. */
int adopt_hello_check(const InitMsg *m, uint32_t *ret_version);
int adopt_scan(int dfd, int (*cb)(Adopted *a, void *ud), void *ud);
