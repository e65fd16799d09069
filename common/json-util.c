/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "json-util.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

char *
json_dump_compact(const json_t *j)
{
	return json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

/* Length of the valid sequence at s (1..4), 0 when invalid, or -n when it is
 * a valid but truncated start needing more bytes. */
static int
seq_len(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	int n;
	uint32_t min, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
		min = 0x80;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		min = 0x800;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		min = 0x10000;
		cp = c & 0x07;
	} else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= avail)
			return -n;
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
		/* reject overlongs and surrogates as early as the second byte allows */
		if (i == 1) {
			if (n == 3 && c == 0xE0 && s[1] < 0xA0)
				return 0;
			if (n == 3 && c == 0xED && s[1] > 0x9F)
				return 0;
			if (n == 4 && c == 0xF0 && s[1] < 0x90)
				return 0;
			if (n == 4 && c == 0xF4 && s[1] > 0x8F)
				return 0;
		}
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

/* Walks buf sequence by sequence and returns where it stopped: at a truncated
 * but so far valid sequence, or (unless skip_invalid, which steps over an invalid
 * byte) at an invalid one; len when it went through. */
static size_t
utf8_scan(const char *buf, size_t len, bool skip_invalid)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0;

	while (i < len) {
		int n = seq_len(s + i, len - i);
		if (n < 0 || (n == 0 && !skip_invalid))
			return i;
		i += n == 0 ? 1 : (size_t)n;
	}
	return len;
}

size_t
utf8_complete_prefix(const char *buf, size_t len)
{
	/* a truncated but so far valid sequence at the end is held back */
	return utf8_scan(buf, len, true);
}

bool
utf8_valid(const char *buf, size_t len)
{
	return utf8_scan(buf, len, false) == len;
}

char *
utf8_sanitize(const char *buf, size_t len, size_t *ret_len)
{
	const unsigned char *s = (const unsigned char *)buf;
	char *out = malloc(len * 3 + 1);
	size_t o = 0, i = 0;

	if (!out)
		return NULL;
	while (i < len) {
		int n = seq_len(s + i, len - i);
		if (n > 0 && !(n == 1 && s[i] == 0)) {
			memcpy(out + o, s + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
		} else {
			/* invalid, truncated at the very end, or NUL (jansson refuses NULs) */
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	if (ret_len)
		*ret_len = o;
	return out;
}

/* ---------- checking a JSON text without building it ---------- */

/* jansson's JSON_PARSER_MAX_DEPTH: a deeper array or object is refused */
#define CHECK_MAX_DEPTH 2048

typedef struct Scan {
	const unsigned char *p, *end;
} Scan;

static void
scan_ws(Scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int
hex4(const unsigned char *p, const unsigned char *end)
{
	int v = 0;
	if (end - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		unsigned char c = p[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* The string at s->p (its opening quote) as jansson lexes it: no control
 * byte, valid UTF-8, known escapes, \u0000 refused, surrogates only in
 * pairs. When want is not NULL, *ret_eq tells whether it decodes to want. */
static bool
scan_string(Scan *s, const char *want, bool *ret_eq)
{
	size_t wl = want ? strlen(want) : 0, at = 0; /* decoded bytes matched so far */
	bool eq = want != NULL;

	s->p++;
	while (s->p < s->end) {
		if (!eq) {
			/* a run of plain ASCII needs neither decoding nor comparing */
			const unsigned char *p = s->p;
			while (p < s->end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\')
				p++;
			s->p = p;
			if (p == s->end)
				break;
		}
		unsigned char c = *s->p;
		unsigned char dec[4];
		size_t dn = 1;
		if (c == '"') {
			s->p++;
			if (ret_eq)
				*ret_eq = eq && at == wl;
			return true;
		}
		if (c < 0x20)
			return false;
		if (c >= 0x80) {
			int n = seq_len(s->p, (size_t)(s->end - s->p));
			if (n <= 0)
				return false;
			memcpy(dec, s->p, (size_t)n);
			dn = (size_t)n;
			s->p += n;
		} else if (c != '\\') {
			dec[0] = c;
			s->p++;
		} else {
			if (s->end - s->p < 2)
				return false;
			c = s->p[1];
			s->p += 2;
			switch (c) {
			case '"':
			case '\\':
			case '/': dec[0] = c; break;
			case 'b': dec[0] = '\b'; break;
			case 'f': dec[0] = '\f'; break;
			case 'n': dec[0] = '\n'; break;
			case 'r': dec[0] = '\r'; break;
			case 't': dec[0] = '\t'; break;
			case 'u': {
				int32_t cp = hex4(s->p, s->end);
				if (cp < 0)
					return false;
				s->p += 4;
				if (cp == 0)
					return false; /* jansson: not without JSON_ALLOW_NUL */
				if (cp >= 0xDC00 && cp <= 0xDFFF)
					return false;
				if (cp >= 0xD800 && cp <= 0xDBFF) {
					int32_t lo =
					    s->end - s->p >= 2 && s->p[0] == '\\' && s->p[1] == 'u'
						? hex4(s->p + 2, s->end)
						: -1;
					if (lo < 0xDC00 || lo > 0xDFFF)
						return false;
					s->p += 6;
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				}
				if (cp < 0x80) {
					dec[0] = (unsigned char)cp;
				} else if (cp < 0x800) {
					dec[0] = (unsigned char)(0xC0 | cp >> 6);
					dec[1] = (unsigned char)(0x80 | (cp & 0x3F));
					dn = 2;
				} else if (cp < 0x10000) {
					dec[0] = (unsigned char)(0xE0 | cp >> 12);
					dec[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
					dec[2] = (unsigned char)(0x80 | (cp & 0x3F));
					dn = 3;
				} else {
					dec[0] = (unsigned char)(0xF0 | cp >> 18);
					dec[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
					dec[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
					dec[3] = (unsigned char)(0x80 | (cp & 0x3F));
					dn = 4;
				}
				break;
			}
			default: return false;
			}
		}
		if (eq) {
			if (at + dn > wl || memcmp(want + at, dec, dn) != 0)
				eq = false;
			else
				at += dn;
		}
	}
	return false;
}

static bool
is_digit(const Scan *s)
{
	return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

/* [0-9]+: false when no digit is there. */
static bool
skip_digits(Scan *s)
{
	if (!is_digit(s))
		return false;
	while (is_digit(s))
		s->p++;
	return true;
}

/* A number as jansson lexes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?;
 * an integer must fit json_int_t and a real must not overflow a double. */
static bool
scan_number(Scan *s)
{
	const unsigned char *start = s->p;
	bool neg = *s->p == '-', real = false;

	if (neg)
		s->p++;
	if (!is_digit(s))
		return false;
	if (*s->p == '0') {
		s->p++;
		if (is_digit(s))
			return false;
	} else
		while (is_digit(s))
			s->p++;
	const unsigned char *int_end = s->p;
	if (s->p < s->end && *s->p == '.') {
		s->p++;
		if (!skip_digits(s))
			return false;
		real = true;
	}
	if (s->p < s->end && (*s->p == 'e' || *s->p == 'E')) {
		s->p++;
		if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
			s->p++;
		if (!skip_digits(s))
			return false;
		real = true;
	}
	if (!real) {
		/* json_int_t is long long: at most 19 digits, and not past its limit */
		const unsigned char *d = start + neg;
		size_t nd = (size_t)(int_end - d);
		const char *lim = neg ? "9223372036854775808" : "9223372036854775807";
		return nd < 19 || (nd == 19 && memcmp(d, lim, 19) <= 0);
	}
	size_t n = (size_t)(s->p - start);
	char stackbuf[64];
	char *t = n < sizeof(stackbuf) ? stackbuf : malloc(n + 1);
	if (!t)
		return false;
	memcpy(t, start, n);
	t[n] = '\0';
	errno = 0;
	double v = strtod(t, NULL);
	bool ok = !(errno == ERANGE && (v == HUGE_VAL || v == -HUGE_VAL));
	if (t != stackbuf)
		free(t);
	return ok;
}

static bool
scan_literal(Scan *s)
{
	static const char *const lits[] = {"true", "false", "null"};
	const unsigned char *w = s->p;

	/* jansson reads a word of letters, then names it */
	while (w < s->end && ((*w >= 'a' && *w <= 'z') || (*w >= 'A' && *w <= 'Z')))
		w++;
	for (size_t i = 0; i < 3; i++)
		if ((size_t)(w - s->p) == strlen(lits[i]) && memcmp(s->p, lits[i], w - s->p) == 0) {
			s->p = w;
			return true;
		}
	return false;
}

bool
json_object_check(const char *buf, size_t len, const char *key, bool *ret_key_string)
{
	Scan s = {(const unsigned char *)buf, (const unsigned char *)buf + len};
	uint8_t objs[CHECK_MAX_DEPTH / 8] = {0}; /* bit set: that level is an object */
	size_t depth = 0;
	bool want_key = false, key_string = false;

	scan_ws(&s);
	if (s.p >= s.end || *s.p != '{')
		return false; /* jansson wants an object or an array; we want an object */
	goto value;
key:
	scan_ws(&s);
	if (s.p >= s.end || *s.p != '"')
		return false;
	{
		bool eq = false;
		if (!scan_string(&s, depth == 1 ? key : NULL, &eq))
			return false;
		want_key = depth == 1 && eq;
	}
	scan_ws(&s);
	if (s.p >= s.end || *s.p != ':')
		return false;
	s.p++;
value:
	scan_ws(&s);
	if (s.p >= s.end)
		return false;
	if (want_key) { /* a repeated member: jansson keeps the last one */
		key_string = *s.p == '"';
		want_key = false;
	}
	switch (*s.p) {
	case '{':
	case '[':
		if (depth >= CHECK_MAX_DEPTH)
			return false;
		if (*s.p == '{')
			objs[depth / 8] |= (uint8_t)(1u << (depth % 8));
		else
			objs[depth / 8] &= (uint8_t) ~(1u << (depth % 8));
		depth++;
		s.p++;
		scan_ws(&s);
		if (s.p < s.end &&
		    *s.p == (objs[(depth - 1) / 8] >> ((depth - 1) % 8) & 1 ? '}' : ']')) {
			s.p++;
			depth--;
			goto after;
		}
		if (objs[(depth - 1) / 8] >> ((depth - 1) % 8) & 1)
			goto key;
		goto value;
	case '"':
		if (depth >= CHECK_MAX_DEPTH || !scan_string(&s, NULL, NULL))
			return false;
		break;
	case '-':
	case '0' ... '9':
		if (depth >= CHECK_MAX_DEPTH || !scan_number(&s))
			return false;
		break;
	default:
		if (depth >= CHECK_MAX_DEPTH || !scan_literal(&s))
			return false;
	}
after:
	scan_ws(&s);
	if (depth == 0) {
		if (s.p != s.end)
			return false;
		if (ret_key_string)
			*ret_key_string = key_string;
		return true;
	}
	if (s.p >= s.end)
		return false;
	bool obj = objs[(depth - 1) / 8] >> ((depth - 1) % 8) & 1;
	if (*s.p == ',') {
		s.p++;
		if (obj)
			goto key;
		goto value;
	}
	if (*s.p == (obj ? '}' : ']')) {
		s.p++;
		depth--;
		goto after;
	}
	return false;
}
