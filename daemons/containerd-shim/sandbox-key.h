/* SPDX-License-Identifier: MIT */
/*
 * sandbox-key.h — which key a sandbox directory belongs to.
 *
 * A sandbox's id is the first 64 bits of SHA-256(key) in hex (shim.h), and
 * everything on disk is named by the id: <sandbox_dir>/<id>/workspace, its
 * cgroup, <state_dir>/backups/<id>/. Two keys (thread ids, "run:<runId>")
 * with the same id would share one workspace. So the directory records its
 * key, in full, in <sandbox_dir>/<id>/key (root-owned 0600, beside the
 * workspace: the sandbox sees only workspace/), and every way to a workspace
 * by key (SANDBOX_ENSURE, SANDBOX_FILE, SANDBOX_SNAPSHOT, SANDBOX_RESTORE)
 * compares it byte for byte first: another key is -EEXIST, never the other
 * key's files.
 *
 * Migration: a directory made before the key file existed records no key;
 * the first key that reaches it claims it (writes the file). That is what
 * the id alone granted before, once; from then on the key is compared.
 * SANDBOX_DESTROY with purge removes the directory and with it the claim.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The file in <sandbox_dir>/<id>/ that holds the key. */
#define SANDBOX_KEY_FILE "key"

/* Check (and claim) <dfd>/<id>/key for key[0..len) (1..max_len bytes, no
 * NUL; the caller checked):
 *   - the file holds exactly this key: 0;
 *   - it holds another key (or is no regular file, or too long): -EEXIST;
 *   - the directory exists without the file, or with an empty one (what a
 *     power loss may leave of a claim: not fsynced, see sandbox-key.c): the
 *     file is written (0600, temporary name, renamed without replacing
 *     anything but an empty file), 0;
 *   - no directory: with create, it is made (0700) and claimed; without, 0
 *     and nothing is made (a key with no workspace reads as empty).
 * Other negative errnos for I/O failures. Nothing is followed (O_NOFOLLOW). */
int sandbox_key_claim(int dfd, const char *id, const char *key, size_t len, size_t max_len,
		      bool create);
/* The same; *ret_absent (may be NULL): there was no directory and, create
 * being false, none was made. */
int sandbox_key_claim_full(int dfd, const char *id, const char *key, size_t len, size_t max_len,
			   bool create, bool *ret_absent);
