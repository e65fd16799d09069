/* SPDX-License-Identifier: MIT */
/*
 * driver-int.h — what the driver's three files share, and nobody else.
 *
 *   driver.c         a run's start (sandbox, forward, proxy, the harness's
 *                    exec), max_run_ms, cancels, commit.c's hooks
 *   driver-output.c  EXEC_OUTPUT/EXEC_EXIT and SANDBOX_QUEUED pushes, output
 *                    budgets, draining into chunks with the driver state, the
 *                    adapters' post step
 *   driver-link.c    the shim connection, re-attach after a restart or a lost
 *                    shim, driver_setup()
 */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "coordinatord.h"

#define SHIM_CALL_TIMEOUT (60 * USEC_PER_SEC)
/* How long a started exec's id may wait for the run's next commit (drive_save_soon). */
#define DRIVE_SAVE_DELAY_MS 20

/* driver.c */
/* End a cancelled (or timed-out) run: aborted, or failed run_timeout. */
void cancel_finish(Run *run);
/* A cancel came while an EXEC_START was in flight: kill what it started. */
void cancel_on_start(Run *run, int err, uint64_t exec_id);
bool run_kills_leftovers(const Run *run);
/* SANDBOX_FORWARD (proxy false) or SANDBOX_PROXY for the run; port 0 for a new one. */
int listen_call(Run *run, bool proxy, uint64_t port, PeerReplyFn cb);
/* SANDBOX_ENSURE, or RUN_WAIT_SHIM while the shim is away. */
void run_drive(Run *run);
/* sandbox_wait_ms passed in RUN_WAIT_SHIM or while re-attaching. */
void run_wait_timeout(evutil_socket_t fd, short what, void *arg);
/* Arm max_run_ms for a run started at started_ms (epoch ms). */
void run_max_arm(Run *run, int64_t started_ms);
/* run->secret_values: every configured secret (secrets_collect). */
void collect_secrets(Run *run);

/* driver-output.c */
/* The driver state stored with the chunks; NULL when out of memory. */
json_t *drive_state(Run *run);
/* Drain buffered output into chunks (final: the exec ended) and queue the state. */
void run_flush_output(Run *run, bool final);
/* flush_ev's callback: driver_flush_all(). */
void driver_flush_cb(evutil_socket_t fd, short what, void *arg);

/* driver-link.c */
