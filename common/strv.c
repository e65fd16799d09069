/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "strv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
strv_push(char ***v, const char *s)
{
	size_t n = 0;
	while (*v && (*v)[n])
		n++;
	char **nv = realloc(*v, (n + 2) * sizeof(char *));
	if (!nv)
		return -ENOMEM;
	nv[n] = strdup(s);
	nv[n + 1] = NULL;
	*v = nv;
	return nv[n] ? 0 : -ENOMEM;
}

int
strv_pushf(char ***v, const char *fmt, ...)
{
	char *s;
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0)
		return -ENOMEM;
	r = strv_push(v, s);
	free(s);
	return r;
}

void
strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

void
strv_free_n(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}
