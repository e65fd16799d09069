/* SPDX-License-Identifier: MIT */
/*
 * run-errors.h — the RUN_ERROR codes of run-errors.def: one constant per row,
 * RUN_ERR_ID, the code a failed run's RUN_ERROR and record carry
 * ("sandbox_lost"), so that a run cannot end with a code the table lacks (a
 * misspelt one does not compile):
 *
 *     run_fail(run, "sandbox: containerd-shim connection lost", RUN_ERR_SANDBOX_LOST);
 *
 * Strings, because a code may also come from the wire (EXEC_EXIT's reason
 * passed on) and is kept as a `const char *`.
 */
#pragma once

#include <stddef.h>

#define RUN_ERR(id, code, help) extern const char RUN_ERR_##id[];
#include "run-errors.def"
#undef RUN_ERR

typedef struct RunErrorInfo {
	const char *code;
	const char *help;
} RunErrorInfo;

extern const RunErrorInfo run_errors[];
extern const size_t run_errors_n;

/* The row of a code, or NULL. */
const RunErrorInfo *run_error_lookup(const char *code);
