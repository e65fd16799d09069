/* SPDX-License-Identifier: MIT */
/*
 * tenant.h — the name of a tenant, which routerd gives every request that
 * creates work or data (RUN_START, THREAD_FILE, SNAPSHOT_CREATE/RESTORE) and
 * coordinatord gives SANDBOX_ENSURE (docs/SECURITY.md "Tenants").
 *
 * A name is 1..TENANT_NAME_MAX bytes of [A-Za-z0-9_.-]: a tokens_file line's
 * `tenant=NAME`, else "t-" and the first 12 hex digits of the SHA-256 of its
 * token, or TENANT_DEFAULT without a tokens_file.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define TENANT_NAME_MAX 63
#define TENANT_DEFAULT "default"

static inline bool
tenant_name_valid(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > TENANT_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return false;
	}
	return true;
}
