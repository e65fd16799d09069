/* SPDX-License-Identifier: MIT */
/*
 * mp-cursor.h — typed access to a msgpack map body with a sticky error, and
 * small packing helpers.
 *
 * Reading:
 *     MpReader r;
 *     mp_reader_init(&r, body);            // body: the frame's map object
 *     mp_read_str(&r, "run_id", &s);        // required field
 *     mp_read_int_opt(&r, "from_seq", &seq, -1);
 *     if (r.err < 0) return r.err;          // -EBADMSG, and r.field says which
 *
 * The first failure (missing field, wrong type, embedded NUL in a string) is
 * kept in r.err and later reads do nothing. Strings are copied out NUL-
 * terminated into a small arena owned by the reader (mp_reader_done frees it);
 * binaries borrow from the frame and stay valid until the handler returns.
 *
 * Writing: an MpWriter is a msgpack_sbuffer + packer; mp_w_map(w, n) opens a
 * map of n pairs, then mp_w_str(w, key, val), mp_w_int(w, key, v), ….
 */
#pragma once

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct MpReader {
	const msgpack_object *map;
	int err;	   /* 0 or the first negative errno */
	const char *field; /* the field the first error was about */
	char **strs;	   /* arena of copied strings */
	size_t n_strs;
} MpReader;

void mp_reader_init(MpReader *r, const msgpack_object *map);
void mp_reader_done(MpReader *r);
/* Hand a malloc'd block to the reader's arena (freed by mp_reader_done); on
 * -ENOMEM it is freed at once. */
int mp_reader_keep(MpReader *r, void *p);

/* Look up key in a map object; NULL when absent or obj is not a map. */
const msgpack_object *mp_map_get(const msgpack_object *obj, const char *key);

void mp_read_str(MpReader *r, const char *key, const char **ret);
void mp_read_str_opt(MpReader *r, const char *key, const char **ret, const char *def);
void mp_read_int(MpReader *r, const char *key, int64_t *ret);
void mp_read_int_opt(MpReader *r, const char *key, int64_t *ret, int64_t def);
void mp_read_uint(MpReader *r, const char *key, uint64_t *ret);
void mp_read_bool_opt(MpReader *r, const char *key, bool *ret, bool def);
/* bin or str accepted; borrows. */
void mp_read_bin(MpReader *r, const char *key, const void **ret, size_t *ret_len);
void mp_read_bin_opt(MpReader *r, const char *key, const void **ret, size_t *ret_len);
/* An array of strings, NULL-terminated, copied into a fresh vector the caller
 * frees with mp_strv_free(). Embedded NULs are rejected. */
void mp_read_strv(MpReader *r, const char *key, char ***ret);
void mp_read_strv_opt(MpReader *r, const char *key, char ***ret);
void mp_strv_free(char **v);
/* Raw access to an array field (borrowed). */
void mp_read_array(MpReader *r, const char *key, const msgpack_object_array **ret);

/* Copy a msgpack str/bin object into a NUL-terminated malloc'd string; NULL on
 * wrong type, embedded NUL or allocation failure. */
char *mp_obj_strdup(const msgpack_object *o);

typedef struct MpWriter {
	msgpack_sbuffer sbuf;
	msgpack_packer pk;
} MpWriter;

void mp_writer_init(MpWriter *w);
void mp_writer_done(MpWriter *w);
void mp_w_map(MpWriter *w, uint32_t n);
void mp_w_key(MpWriter *w, const char *key);
void mp_w_strv(MpWriter *w, const char *s); /* a bare string value */
void mp_w_strn(MpWriter *w, const char *s, size_t len);
void mp_w_str(MpWriter *w, const char *key, const char *val);
void mp_w_int(MpWriter *w, const char *key, int64_t v);
void mp_w_uint(MpWriter *w, const char *key, uint64_t v);
void mp_w_bool(MpWriter *w, const char *key, bool v);
void mp_w_bin(MpWriter *w, const char *key, const void *p, size_t len);
/* key: [str, …] from a NULL-terminated vector. */
void mp_w_str_array(MpWriter *w, const char *key, char *const *v);
