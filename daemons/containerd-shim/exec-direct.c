/* SPDX-License-Identifier: MIT */
/*
 * exec-direct.c — run a plain bash command without bash (exec-direct.h).
 *
 * Why: bash's own start (its libraries, the C.UTF-8 locale's files, its
 * variables) is 0.6–0.8 ms of an exec's round trip, more than the three
 * daemons, the exec cgroup, seccomp and Landlock together; for `ls -la`,
 * `git status` or `true` bash does nothing but split the words and exec the
 * first one along PATH (bash -c execs a lone simple command in place).
 * GNU make skips the shell the same way (job.c,
 * construct_command_argv_internal: no metacharacter, no builtin).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec-direct.h"

#define DIRECT_MAX_COMMAND 4096
#define DIRECT_MAX_WORDS 256

/* Reserved words and builtins of bash 5.2 (`compgen -k`, `enable -a`): the
 * first word may be none of them (but see direct_builtin_ok). */
static const char *const shell_words[] = {
    "!",	 "[[",	     "]]",	 "{",	    "}",	"case",	   "coproc",   "do",
    "done",	 "elif",     "else",	 "esac",    "fi",	"for",	   "function", "if",
    "in",	 "select",   "then",	 "time",    "until",	"while",   ".",	       ":",
    "[",	 "alias",    "bg",	 "bind",    "break",	"builtin", "caller",   "cd",
    "command",	 "compgen",  "complete", "compopt", "continue", "declare", "dirs",     "disown",
    "echo",	 "enable",   "eval",	 "exec",    "exit",	"export",  "false",    "fc",
    "fg",	 "getopts",  "hash",	 "help",    "history",	"jobs",	   "kill",     "let",
    "local",	 "logout",   "mapfile",	 "popd",    "printf",	"pushd",   "pwd",      "read",
    "readarray", "readonly", "return",	 "set",	    "shift",	"shopt",   "source",   "suspend",
    "test",	 "times",    "trap",	 "true",    "type",	"typeset", "ulimit",   "umask",
    "unalias",	 "unset",    "wait",
};

static bool
plain_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("_./,:@%+=-", c) != NULL;
}

/* A builtin whose program does exactly what the builtin would with these
 * words: `true`/`false` alone (coreutils' read --help), `echo` without an
 * option-like word (the charset already leaves out backslashes). */
static bool
direct_builtin_ok(char *const *w, size_t n)
{
	if (!strcmp(w[0], "true") || !strcmp(w[0], "false"))
		return n == 1;
	if (!strcmp(w[0], "echo")) {
		for (size_t i = 1; i < n; i++)
			if (w[i][0] == '-')
				return false;
		return true;
	}
	return false;
}

static bool
shell_word(const char *w)
{
	for (size_t i = 0; i < sizeof(shell_words) / sizeof(shell_words[0]); i++)
		if (!strcmp(w, shell_words[i]))
			return true;
	return false;
}

static bool
has_prefix(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

/* SHLVL as bash keeps it: 0–998 without a leading zero. */
static bool
shlvl_plain(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > 3 || (n > 1 && v[0] == '0'))
		return false;
	for (size_t i = 0; i < n; i++)
		if (v[i] < '0' || v[i] > '9')
			return false;
	return atoi(v) <= 998;
}

/* Split command into words (copied into buf, pointers in words); the
 * number of words, 0 when a character is not plain or there are too many. */
static size_t
split_words(const char *command, char *buf, char **words)
{
	size_t n = 0;
	char *o = buf;

	for (const char *p = command; *p;) {
		if (*p == ' ' || *p == '\t') {
			p++;
			continue;
		}
		if (n == DIRECT_MAX_WORDS)
			return 0;
		words[n++] = o;
		while (*p && *p != ' ' && *p != '\t') {
			if (!plain_char((unsigned char)*p))
				return 0;
			*o++ = *p++;
		}
		*o++ = '\0';
	}
	words[n] = NULL;
	return n;
}

/* The environment checks: false when it could make bash do more than exec
 * the command. Counts the entries, says whether PWD (naming cwd) and SHLVL are
 * there, and finds PATH (which must be). */
static bool
env_plain(char *const *envp, const char *cwd, size_t *n_env, bool *has_pwd, bool *has_shlvl,
	  const char **path)
{
	size_t n = 0;

	*has_pwd = *has_shlvl = false;
	*path = NULL;
	for (; envp[n]; n++) {
		const char *e = envp[n];
		if (has_prefix(e, "BASH_ENV=") || has_prefix(e, "BASH_FUNC_") ||
		    has_prefix(e, "SHELLOPTS=") || has_prefix(e, "BASHOPTS=") ||
		    has_prefix(e, "POSIXLY_CORRECT=") || has_prefix(e, "OLDPWD=") ||
		    !strchr(e, '='))
			return false;
		if (has_prefix(e, "PWD=")) {
			if (strcmp(e + 4, cwd) != 0)
				return false;
			*has_pwd = true;
		} else if (has_prefix(e, "SHLVL=")) {
			if (!shlvl_plain(e + 6))
				return false;
			*has_shlvl = true;
		} else if (has_prefix(e, "PATH=")) {
			*path = e + 5;
		}
	}
	*n_env = n;
	return *path != NULL;
}

void
exec_direct_free(ExecDirect *d)
{
	free(d->mem);
	*d = (ExecDirect){0};
}

bool
exec_direct_plan(char *const *argv, char *const *envp, const char *cwd, ExecDirect *d)
{
	const char *shell, *command, *slash, *path;
	size_t clen, n_env, n_words, k = 0, words_at, env_at, str_at, size;
	bool has_pwd, has_shlvl;
	char *mem;

	*d = (ExecDirect){0};
	if (!argv[0] || !argv[1] || !argv[2] || argv[3] || strcmp(argv[1], "-c") != 0)
		return false;
	shell = argv[0];
	slash = strrchr(shell, '/');
	if (strcmp(slash ? slash + 1 : shell, "bash") != 0)
		return false;
	command = argv[2];
	clen = strlen(command);
	if (clen == 0 || clen > DIRECT_MAX_COMMAND || !cwd || cwd[0] != '/')
		return false;
	if (!env_plain(envp, cwd, &n_env, &has_pwd, &has_shlvl, &path))
		return false;
	/* One block: the word pointers, the env pointers (+ PWD, SHLVL, _ and
	 * NULL), the words, "PWD=" + PATH_MAX, "_=" + PATH_MAX, "SHLVL=0". */
	words_at = 0;
	env_at = words_at + (DIRECT_MAX_WORDS + 1) * sizeof(char *);
	str_at = env_at + (n_env + 4) * sizeof(char *);
	size = str_at + (clen + 1) * 2 + (4 + PATH_MAX) + (2 + PATH_MAX) + sizeof("SHLVL=0");
	mem = calloc(1, size);
	if (!mem)
		return false;
	d->mem = mem;
	d->argv = (char **)(void *)(mem + words_at);
	d->envp = (char **)(void *)(mem + env_at);
	n_words = split_words(command, mem + str_at, d->argv);
	if (n_words == 0 || strchr(d->argv[0], '=') ||
	    (shell_word(d->argv[0]) && !direct_builtin_ok(d->argv, n_words))) {
		exec_direct_free(d);
		return false;
	}
	d->path = path;
	d->pwd = mem + str_at + (clen + 1) * 2;
	d->pwd_cap = PATH_MAX;
	memcpy(d->pwd, "PWD=", 4);
	d->under = d->pwd + 4 + PATH_MAX;
	d->under_cap = PATH_MAX;
	memcpy(d->under, "_=", 2);
	/* bash's order does not matter; its set does: PWD, SHLVL, _ replaced. */
	if (!has_pwd)
		d->envp[k++] = d->pwd;
	else
		d->pwd = NULL; /* kept as given: it names cwd */
	for (size_t i = 0; i < n_env; i++)
		if (!has_prefix(envp[i], "_="))
			d->envp[k++] = envp[i];
	if (!has_shlvl) {
		char *s = d->under + 2 + PATH_MAX;
		memcpy(s, "SHLVL=0", sizeof("SHLVL=0"));
		d->envp[k++] = s;
	}
	d->envp[k++] = d->under;
	d->envp[k] = NULL;
	return true;
}

/* execve one candidate; true to go on along PATH. */
static bool
direct_execve(ExecDirect *d)
{
	(void)execve(d->under + 2, d->argv, d->envp);
	return errno == ENOENT || errno == ENOTDIR || errno == EACCES;
}

void
exec_direct_try(ExecDirect *d)
{
	const char *w = d->argv[0], *p = d->path;
	size_t wl = strlen(w);

	if (d->pwd && !getcwd(d->pwd + 4, d->pwd_cap))
		return;
	if (strchr(w, '/')) {
		if (wl >= d->under_cap)
			return;
		memcpy(d->under + 2, w, wl + 1);
		(void)direct_execve(d);
		return;
	}
	for (;;) {
		const char *e = strchrnul(p, ':');
		size_t dl = (size_t)(e - p);
		char *o = d->under + 2;

		if (dl + 1 + wl < d->under_cap) {
			if (dl == 0)
				*o++ = '.';
			memcpy(o, p, dl);
			o += dl;
			*o++ = '/';
			memcpy(o, w, wl + 1);
			if (!direct_execve(d))
				return;
		}
		if (!*e)
			return;
		p = e + 1;
	}
}
