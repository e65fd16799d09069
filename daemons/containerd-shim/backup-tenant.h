/* SPDX-License-Identifier: MIT */
/*
 * backup-tenant.h — whose backups: the tenant of a sandbox id's backups
 * (<backups>/.tenants/<id>, written with the SANDBOX_SNAPSHOT that names one)
 * and the bytes a tenant's backups hold, for tenant_max_backup_bytes
 * (docs/SECURITY.md "Tenants"). A leaf: paths and names in, errnos out.
 */
#pragma once

#include <stdint.h>

/* Record tenant as the owner of <bdir>/<id>'s backups. */
int backup_tenant_mark(const char *bdir, const char *id, const char *tenant);
/* The bytes of every regular file in the <bdir>/<id> directories marked as
 * tenant's (archives and temporaries). A missing bdir is 0. */
int backup_tenant_bytes(const char *bdir, const char *tenant, uint64_t *ret);
