/* SPDX-License-Identifier: MIT */
/*
 * exec-direct.h — a shell command that bash would only split into words and
 * look up along PATH runs without starting bash (what GNU make does for a
 * recipe line without shell metacharacters).
 *
 * An exec's `command` reaches the sandbox init as [sandbox_shell, "-c",
 * command]. When the shell is bash and the command is one simple command of
 * plain words (letters, digits and `_./,:@%+=-`, the first word not an
 * assignment, a reserved word nor a builtin — `true`/`false` alone and `echo`
 * without options excepted, whose programs do the same), the exec child tries
 * the words directly along PATH, with the environment bash would give them
 * (PWD, SHLVL, `_`). Any failure to execute (not found, not executable, a
 * script without `#!`, …) falls back to the shell itself, which then does and
 * reports exactly what it always did. An environment that could change what
 * bash does before the command (BASH_ENV, exported functions, SHELLOPTS,
 * BASHOPTS, POSIXLY_CORRECT, an odd SHLVL, PWD or OLDPWD) keeps the shell.
 * Confinement is the same either way: the attempt runs after the exec's
 * Landlock domain and seccomp filter are in place.
 */
#ifndef RW_EXEC_DIRECT_H
#define RW_EXEC_DIRECT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ExecDirect {
	char **argv;	/* the words */
	char **envp;	/* the environment for them */
	char *pwd;	/* "PWD=" and room for getcwd(), when to fill in the child; or NULL */
	size_t pwd_cap; /* bytes after "PWD=" */
	char *under;	/* "_=" and room for the path executed */
	size_t under_cap;
	const char *path; /* PATH's value (in the caller's envp) */
	void *mem;	  /* everything above but path, one allocation */
} ExecDirect;

/* Plan argv = [bash, "-c", command] with envp and the exec's cwd. Returns
 * true and fills *d (free with exec_direct_free) when the command may run
 * directly; false (d zeroed) when it needs the shell or memory ran out. */
bool exec_direct_plan(char *const *argv, char *const *envp, const char *cwd, ExecDirect *d);
void exec_direct_free(ExecDirect *d);

/* In the exec child, after chdir: try the words along PATH. Returns only when
 * none could be executed (errno set); the caller then runs the shell. Makes
 * system calls only, writes only into d's buffers. */
void exec_direct_try(ExecDirect *d);

#endif
