/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "mp-cursor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "strv.h"

void
mp_reader_init(MpReader *r, const msgpack_object *map)
{
	*r = (MpReader){.map = map};
	if (!map || map->type != MSGPACK_OBJECT_MAP) {
		r->err = -EBADMSG;
		r->field = "(body)";
	}
}

void
mp_reader_done(MpReader *r)
{
	strv_free_n(r->strs, r->n_strs);
	r->strs = NULL;
	r->n_strs = 0;
}

const msgpack_object *
mp_map_get(const msgpack_object *obj, const char *key)
{
	size_t klen = strlen(key);

	if (!obj || obj->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < obj->via.map.size; i++) {
		const msgpack_object *k = &obj->via.map.ptr[i].key;
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
		    memcmp(k->via.str.ptr, key, klen) == 0)
			return &obj->via.map.ptr[i].val;
	}
	return NULL;
}

static void
fail(MpReader *r, const char *key)
{
	if (r->err == 0) {
		r->err = -EBADMSG;
		r->field = key;
	}
}

char *
mp_obj_strdup(const msgpack_object *o)
{
	const char *p;
	size_t n;

	if (o->type == MSGPACK_OBJECT_STR) {
		p = o->via.str.ptr;
		n = o->via.str.size;
	} else if (o->type == MSGPACK_OBJECT_BIN) {
		p = o->via.bin.ptr;
		n = o->via.bin.size;
	} else
		return NULL;
	if (memchr(p, '\0', n))
		return NULL;
	char *s = malloc(n + 1);
	if (!s)
		return NULL;
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static const char *
keep(MpReader *r, char *s)
{
	char **n = realloc(r->strs, (r->n_strs + 1) * sizeof(char *));
	if (!n) {
		free(s);
		return NULL;
	}
	r->strs = n;
	r->strs[r->n_strs++] = s;
	return s;
}

int
mp_reader_keep(MpReader *r, void *p)
{
	return keep(r, p) ? 0 : -ENOMEM;
}

/* The value of key for a read, or NULL when there is nothing to read: the
 * reader failed already, or key is absent or nil. Absent or nil fails a
 * required read; an optional one gets *ret_absent (its default goes in). */
static const msgpack_object *
field(MpReader *r, const char *key, bool required, bool *ret_absent)
{
	*ret_absent = false;
	if (r->err < 0)
		return NULL;
	const msgpack_object *o = mp_map_get(r->map, key);
	if (o && o->type != MSGPACK_OBJECT_NIL)
		return o;
	if (required)
		fail(r, key);
	else
		*ret_absent = true;
	return NULL;
}

void
mp_read_str_opt(MpReader *r, const char *key, const char **ret, const char *def)
{
	bool absent;
	const msgpack_object *o = field(r, key, false, &absent);

	if (absent)
		*ret = def;
	if (!o)
		return;
	char *s = mp_obj_strdup(o);
	const char *k = s ? keep(r, s) : NULL;
	if (!k) {
		fail(r, key);
		return;
	}
	*ret = k;
}

void
mp_read_str(MpReader *r, const char *key, const char **ret)
{
	const char *v = NULL;
	mp_read_str_opt(r, key, &v, NULL);
	if (r->err == 0 && !v)
		fail(r, key);
	else if (r->err == 0)
		*ret = v;
}

static bool
obj_to_i64(const msgpack_object *o, int64_t *ret)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		if (o->via.u64 > INT64_MAX)
			return false;
		*ret = (int64_t)o->via.u64;
		return true;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*ret = o->via.i64;
		return true;
	}
	return false;
}

void
mp_read_int_opt(MpReader *r, const char *key, int64_t *ret, int64_t def)
{
	bool absent;
	const msgpack_object *o = field(r, key, false, &absent);

	if (absent)
		*ret = def;
	if (!o)
		return;
	if (!obj_to_i64(o, ret))
		fail(r, key);
}

void
mp_read_int(MpReader *r, const char *key, int64_t *ret)
{
	bool absent;

	/* nil counts as missing, as for mp_read_str (the _opt readers map it to the default) */
	if (field(r, key, true, &absent))
		mp_read_int_opt(r, key, ret, 0);
}

void
mp_read_uint(MpReader *r, const char *key, uint64_t *ret)
{
	bool absent;
	const msgpack_object *o = field(r, key, true, &absent);

	if (o && o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		fail(r, key);
	else if (o)
		*ret = o->via.u64;
}

void
mp_read_bool_opt(MpReader *r, const char *key, bool *ret, bool def)
{
	bool absent;
	const msgpack_object *o = field(r, key, false, &absent);

	if (absent)
		*ret = def;
	if (o && o->type != MSGPACK_OBJECT_BOOLEAN)
		fail(r, key);
	else if (o)
		*ret = o->via.boolean;
}

void
mp_read_bin_opt(MpReader *r, const char *key, const void **ret, size_t *ret_len)
{
	bool absent;
	const msgpack_object *o = field(r, key, false, &absent);

	if (absent) {
		*ret = NULL;
		*ret_len = 0;
	}
	if (!o)
		return;
	if (o->type == MSGPACK_OBJECT_BIN) {
		*ret = o->via.bin.ptr;
		*ret_len = o->via.bin.size;
	} else if (o->type == MSGPACK_OBJECT_STR) {
		*ret = o->via.str.ptr;
		*ret_len = o->via.str.size;
	} else
		fail(r, key);
}

void
mp_read_bin(MpReader *r, const char *key, const void **ret, size_t *ret_len)
{
	bool absent;

	if (field(r, key, true, &absent))
		mp_read_bin_opt(r, key, ret, ret_len);
}

void
mp_read_array(MpReader *r, const char *key, const msgpack_object_array **ret)
{
	bool absent;
	const msgpack_object *o = field(r, key, true, &absent);

	if (o && o->type != MSGPACK_OBJECT_ARRAY)
		fail(r, key);
	else if (o)
		*ret = &o->via.array;
}

void
mp_strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static void
read_strv(MpReader *r, const char *key, char ***ret, bool required)
{
	bool absent;
	const msgpack_object *o = field(r, key, required, &absent);

	if (absent)
		*ret = NULL;
	if (!o)
		return;
	if (o->type != MSGPACK_OBJECT_ARRAY) {
		fail(r, key);
		return;
	}
	char **v = calloc(o->via.array.size + 1, sizeof(char *));
	if (!v) {
		fail(r, key);
		return;
	}
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		v[i] = mp_obj_strdup(&o->via.array.ptr[i]);
		if (!v[i]) {
			mp_strv_free(v);
			fail(r, key);
			return;
		}
	}
	*ret = v;
}

void
mp_read_strv(MpReader *r, const char *key, char ***ret)
{
	read_strv(r, key, ret, true);
}

void
mp_read_strv_opt(MpReader *r, const char *key, char ***ret)
{
	read_strv(r, key, ret, false);
}

void
mp_writer_init(MpWriter *w)
{
	msgpack_sbuffer_init(&w->sbuf);
	msgpack_packer_init(&w->pk, &w->sbuf, msgpack_sbuffer_write);
}

void
mp_writer_done(MpWriter *w)
{
	msgpack_sbuffer_destroy(&w->sbuf);
}

void
mp_w_map(MpWriter *w, uint32_t n)
{
	msgpack_pack_map(&w->pk, n);
}

void
mp_w_strn(MpWriter *w, const char *s, size_t len)
{
	msgpack_pack_str(&w->pk, len);
	msgpack_pack_str_body(&w->pk, s, len);
}

void
mp_w_strv(MpWriter *w, const char *s)
{
	mp_w_strn(w, s, strlen(s));
}

void
mp_w_key(MpWriter *w, const char *key)
{
	mp_w_strv(w, key);
}

void
mp_w_str(MpWriter *w, const char *key, const char *val)
{
	mp_w_key(w, key);
	if (val)
		mp_w_strv(w, val);
	else
		msgpack_pack_nil(&w->pk);
}

void
mp_w_int(MpWriter *w, const char *key, int64_t v)
{
	mp_w_key(w, key);
	msgpack_pack_int64(&w->pk, v);
}

void
mp_w_uint(MpWriter *w, const char *key, uint64_t v)
{
	mp_w_key(w, key);
	msgpack_pack_uint64(&w->pk, v);
}

void
mp_w_bool(MpWriter *w, const char *key, bool v)
{
	mp_w_key(w, key);
	if (v)
		msgpack_pack_true(&w->pk);
	else
		msgpack_pack_false(&w->pk);
}

void
mp_w_bin(MpWriter *w, const char *key, const void *p, size_t len)
{
	mp_w_key(w, key);
	msgpack_pack_bin(&w->pk, len);
	msgpack_pack_bin_body(&w->pk, p, len);
}

void
mp_w_str_array(MpWriter *w, const char *key, char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	mp_w_key(w, key);
	msgpack_pack_array(&w->pk, n);
	for (size_t i = 0; i < n; i++)
		mp_w_strv(w, v[i]);
}
