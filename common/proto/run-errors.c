/* SPDX-License-Identifier: MIT */
/*
 * run-errors.c — the constants and table run-errors.h declares, expanded
 * from run-errors.def.
 */
#include "config.h"

#include "run-errors.h"

#include <string.h>

#include "macro.h"

#define RUN_ERR(id, code, help) const char RUN_ERR_##id[] = code;
#include "run-errors.def"
#undef RUN_ERR

const RunErrorInfo run_errors[] = {
#define RUN_ERR(id, code, help) {RUN_ERR_##id, help},
#include "run-errors.def"
#undef RUN_ERR
};

const size_t run_errors_n = ELEMENTSOF(run_errors);

const RunErrorInfo *
run_error_lookup(const char *code)
{
	if (!code)
		return NULL;
	for (size_t i = 0; i < run_errors_n; i++)
		if (streq(run_errors[i].code, code))
			return &run_errors[i];
	return NULL;
}
