/* SPDX-License-Identifier: MIT */
/*
 * test-sandbox-conf.c — daemons/containerd-shim/sandbox-conf.c: the
 * sandbox-init helper's configuration survives the wire whole (strings, limits,
 * both seccomp programs, the fds as the helper sees them), and a packet that
 * is cut, padded, unterminated or names host uid 0 is refused as a whole.
 */
#include "config.h"

#include <errno.h>
#include <linux/filter.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sandbox-init.h"

static struct sock_filter f0[] = {BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4),
				  BPF_STMT(BPF_RET | BPF_K, 0x7fff0000u),
				  BPF_STMT(BPF_RET | BPF_K, 0)};
static struct sock_filter f1[] = {BPF_STMT(BPF_RET | BPF_K, 0x7fff0000u)};
static struct sock_fprog p0 = {.len = 3, .filter = f0}, p1 = {.len = 1, .filter = f1};

static SandboxSpec
spec_example(void)
{
	static const int procs[2] = {40, 41};
	return (SandboxSpec){.root_mnt = "/run/rw/root",
			     .workspace = "/var/lib/rw/ws/ab",
			     .workspace_slave = true,
			     .ro_binds = "/usr /bin /lib",
			     .etc_entries = "ssl hosts.allow",
			     .sandbox_user = "agent",
			     .userns_inotify_instances = 16,
			     .userns_inotify_watches = 8192,
			     .userns_namespaces = 32,
			     .tmp_size = 64 << 20,
			     .tmp_inodes = 65536,
			     .sandbox_uid = 1000,
			     .host_uid = 100000,
			     .seccomp = &p0,
			     .seccomp_exec = &p1,
			     .rlimit_nofile = 4096,
			     .rlimit_fsize = 1LL << 34,
			     .rlimit_memlock = 65536,
			     .cgroup_fd = 17,
			     .procs_fds = procs,
			     .n_procs_fds = 2,
			     .listen_fd = 23,
			     .orphan_ms = 30000,
			     .output_window = 1 << 20,
			     .init_exe_fd = 9};
}

static void
test_round_trip(void **state)
{
	SandboxSpec in = spec_example(), out;
	struct sock_fprog progs[2];
	void *buf = NULL;
	ssize_t n = init_conf_encode(&in, &buf);

	assert_true(n > (ssize_t)sizeof(InitConf));
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), 0);
	assert_string_equal(out.root_mnt, in.root_mnt);
	assert_string_equal(out.workspace, in.workspace);
	assert_string_equal(out.ro_binds, in.ro_binds);
	assert_string_equal(out.etc_entries, in.etc_entries);
	assert_string_equal(out.sandbox_user, in.sandbox_user);
	assert_true(out.workspace_slave);
	assert_int_equal(out.userns_inotify_instances, 16);
	assert_int_equal(out.userns_inotify_watches, 8192);
	assert_int_equal(out.userns_namespaces, 32);
	assert_int_equal(out.tmp_size, 64 << 20);
	assert_int_equal(out.tmp_inodes, 65536);
	assert_int_equal(out.sandbox_uid, 1000);
	assert_int_equal(out.host_uid, 100000);
	assert_int_equal(out.rlimit_nofile, 4096);
	assert_int_equal(out.rlimit_fsize, 1LL << 34);
	assert_int_equal(out.rlimit_memlock, 65536);
	assert_int_equal(out.orphan_ms, 30000);
	assert_int_equal(out.output_window, 1 << 20);
	/* the fds are the helper's: its listener at INIT_LISTEN_FD, no cgroup fd */
	assert_int_equal(out.listen_fd, INIT_LISTEN_FD);
	assert_int_equal(out.cgroup_fd, -1);
	assert_int_equal(out.n_procs_fds, 2);
	assert_ptr_equal(out.seccomp, &progs[0]);
	assert_ptr_equal(out.seccomp_exec, &progs[1]);
	assert_int_equal(progs[0].len, 3);
	assert_int_equal(progs[1].len, 1);
	assert_memory_equal(progs[0].filter, f0, sizeof(f0));
	assert_memory_equal(progs[1].filter, f1, sizeof(f1));
	assert_int_equal((uintptr_t)progs[0].filter % 8, (uintptr_t)buf % 8);
	free(buf);

	/* no listener, no user name */
	in.listen_fd = -1;
	in.sandbox_user = NULL;
	n = init_conf_encode(&in, &buf);
	assert_true(n > 0);
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), 0);
	assert_int_equal(out.listen_fd, -1);
	assert_null(out.sandbox_user);
	free(buf);
}

static void
test_encode_refuses(void **state)
{
	SandboxSpec in = spec_example();
	void *buf = NULL;
	char *big = malloc(INIT_CONF_MAX + 1);

	in.seccomp_exec = NULL;
	assert_int_equal(init_conf_encode(&in, &buf), -EINVAL);
	in = spec_example();
	memset(big, 'a', INIT_CONF_MAX);
	big[INIT_CONF_MAX] = '\0';
	in.ro_binds = big;
	assert_int_equal(init_conf_encode(&in, &buf), -E2BIG);
	assert_null(buf);
	free(big);
}

static void
test_decode_refuses(void **state)
{
	SandboxSpec in = spec_example(), out;
	struct sock_fprog progs[2];
	InitConf c;
	char *buf = NULL, *bigger;
	ssize_t n = init_conf_encode(&in, (void **)&buf);

	assert_true(n > 0);
	/* cut short anywhere: refused */
	for (ssize_t k = 0; k < n; k += 7)
		assert_int_equal(init_conf_decode(buf, (size_t)k, &out, progs), -EBADMSG);
	/* one byte more than it says: refused */
	bigger = calloc(1, (size_t)n + 1);
	memcpy(bigger, buf, (size_t)n);
	assert_int_equal(init_conf_decode(bigger, (size_t)n + 1, &out, progs), -EBADMSG);
	free(bigger);
	/* a string without its NUL, or a NUL inside */
	buf[sizeof(InitConf) + strlen(in.root_mnt)] = 'x';
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), -EBADMSG);
	buf[sizeof(InitConf) + strlen(in.root_mnt)] = '\0';
	buf[sizeof(InitConf) + 2] = '\0';
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), -EBADMSG);
	buf[sizeof(InitConf) + 2] = 'r';
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), 0);
	/* host uid 0, a wrong magic, an empty program */
	memcpy(&c, buf, sizeof(c));
	c.host_uid = 0;
	memcpy(buf, &c, sizeof(c));
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), -EBADMSG);
	c.host_uid = 100000;
	c.magic ^= 1;
	memcpy(buf, &c, sizeof(c));
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), -EBADMSG);
	c.magic ^= 1;
	c.seccomp_exec_len = 0;
	memcpy(buf, &c, sizeof(c));
	assert_int_equal(init_conf_decode(buf, (size_t)n, &out, progs), -EBADMSG);
	free(buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_encode_refuses),
	    cmocka_unit_test(test_decode_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
