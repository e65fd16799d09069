/* SPDX-License-Identifier: MIT */
/*
 * test-exec-direct.c — daemons/containerd-shim/exec-direct.c: which bash
 * commands run without bash, the environment they get (compared with what
 * bash itself gives: `env` run both ways), and the fall-back to the shell
 * when the word cannot be executed.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "exec-direct.h"

static char *env_base[] = {"HOME=/root", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", NULL};

static bool
plan(const char *command, char **envp)
{
	char *argv[] = {"/bin/bash", "-c", (char *)command, NULL};
	ExecDirect d;
	bool ok = exec_direct_plan(argv, envp ? envp : env_base, "/tmp", &d);

	exec_direct_free(&d);
	return ok;
}

static void
test_which(void **state)
{
	(void)state;
	assert_true(plan("true", NULL));
	assert_true(plan("ls -la /tmp", NULL));
	assert_true(plan("  git\tstatus --porcelain=v1  ", NULL));
	assert_true(plan("echo a=b c,d", NULL));
	assert_true(plan("./run.sh x", NULL));
	/* metacharacters, expansions, quoting, redirections, lists */
	const char *shell[] = {"true; true", "echo $HOME",  "ls *",   "echo 'a'",    "echo \"a\"",
			       "a > b",	     "a | b",	    "a && b", "echo ~",	     "echo {a,b}",
			       "x=1 y",	     "echo a\\ b",  "(true)", "echo `id`",   "true # c",
			       "echo é",     "true\nfalse", "",	      "   ",	     "!",
			       "cd /tmp",    "export A=1",  "exit 3", "true --help", "false x",
			       "echo -n x",  "printf x",    "pwd",    "kill 1",	     "test -e x",
			       "[ -e x ]",   "source x",    ". x",    "time ls",     "if"};
	for (size_t i = 0; i < sizeof(shell) / sizeof(shell[0]); i++)
		if (plan(shell[i], NULL))
			fail_msg("'%s' planned without the shell", shell[i]);
	/* another shell, another form */
	{
		char *a1[] = {"/bin/sh", "-c", "true", NULL};
		char *a2[] = {"/bin/bash", "-lc", "true", NULL};
		char *a3[] = {"/bin/bash", "-c", "true", "x", NULL};
		char *a4[] = {"true", NULL};
		ExecDirect d;
		assert_false(exec_direct_plan(a1, env_base, "/tmp", &d));
		assert_false(exec_direct_plan(a2, env_base, "/tmp", &d));
		assert_false(exec_direct_plan(a3, env_base, "/tmp", &d));
		assert_false(exec_direct_plan(a4, env_base, "/tmp", &d));
		assert_false(exec_direct_plan((char *[]){"/bin/bash", "-c", "true", NULL}, env_base,
					      "rel", &d));
	}
	/* environments bash would act on */
	const char *envs[] = {"BASH_ENV=/x",	   "BASH_FUNC_ls%%=() { :; }",
			      "SHELLOPTS=xtrace",  "BASHOPTS=xpg_echo",
			      "POSIXLY_CORRECT=1", "OLDPWD=/",
			      "PWD=/elsewhere",	   "SHLVL=abc",
			      "SHLVL=007",	   "SHLVL=999",
			      "noequals"};
	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		char *e[] = {"PATH=/usr/bin:/bin", (char *)envs[i], NULL};
		if (plan("true", e))
			fail_msg("planned with %s", envs[i]);
	}
	assert_false(plan("true", (char *[]){"HOME=/", NULL})); /* no PATH */
	assert_true(plan("true", (char *[]){"PATH=/bin", "PWD=/tmp", "SHLVL=4", "_=x", NULL}));
}

/* Run command (in /tmp) through exec_direct_try in a child, falling back to
 * bash as the exec child does; its stdout into out. Returns the exit status. */
static int
run(const char *command, char **envp, bool direct, char *out, size_t cap)
{
	char *argv[] = {"/bin/bash", "-c", (char *)command, NULL};
	ExecDirect d = {0};
	int p[2], status;
	ssize_t k;
	size_t n = 0;
	pid_t pid;

	if (direct)
		assert_true(exec_direct_plan(argv, envp, "/tmp", &d));
	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		if (chdir("/tmp") < 0)
			_exit(99);
		if (direct)
			exec_direct_try(&d);
		execve(argv[0], argv, envp);
		_exit(98);
	}
	close(p[1]);
	while (n + 1 < cap && (k = read(p[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(p[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	exec_direct_free(&d);
	return status;
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The lines of s sorted (env's order is not part of the contract). */
static void
sort_lines(char *s)
{
	char *lines[64], buf[4096];
	size_t n = 0, o = 0;

	for (char *t = strtok(s, "\n"); t && n < 64; t = strtok(NULL, "\n"))
		lines[n++] = t;
	qsort(lines, n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s\n", lines[i]);
	memcpy(s, buf, o + 1);
}

static void
test_same_as_bash(void **state)
{
	char a[4096], b[4096];
	char *envs[][5] = {
	    {"PATH=/usr/bin:/bin", "LANG=C.UTF-8", NULL},
	    {"PATH=/usr/bin:/bin", "SHLVL=3", "PWD=/tmp", "_=/old", NULL},
	    {"PATH=:/nonexistent:/usr/bin", "HOME=/", NULL},
	};
	(void)state;
	if (access("/bin/bash", X_OK) < 0 || access("/usr/bin/env", X_OK) < 0)
		skip();
	for (size_t i = 0; i < sizeof(envs) / sizeof(envs[0]); i++) {
		assert_int_equal(run("env", envs[i], true, a, sizeof(a)), 0);
		assert_int_equal(run("env", envs[i], false, b, sizeof(b)), 0);
		sort_lines(a);
		sort_lines(b);
		assert_string_equal(a, b);
	}
	assert_int_equal(run("echo a b=c", envs[0], true, a, sizeof(a)), 0);
	assert_string_equal(a, "a b=c\n");
	assert_int_equal(run("false", envs[0], true, a, sizeof(a)), 1 << 8);
}

static void
test_fallback(void **state)
{
	char a[4096];
	char *env[] = {"PATH=/nonexistent:/usr/bin:/bin", NULL};
	(void)state;
	if (access("/bin/bash", X_OK) < 0)
		skip();
	/* not found: bash's own message and 127 (the fallback ran bash) */
	assert_int_equal(run("no-such-command-rw", env, true, a, sizeof(a)), 127 << 8);
	/* a directory on PATH named like the command is skipped, as bash does */
	assert_int_equal(run("/tmp", env, true, a, sizeof(a)), 126 << 8);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_which),
	    cmocka_unit_test(test_same_as_bash),
	    cmocka_unit_test(test_fallback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
