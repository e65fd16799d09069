/* SPDX-License-Identifier: MIT */
/*
 * test-seccomp-policy.c — daemons/containerd-shim/seccomp-policy.c: the table
 * against the compiled filter.
 *
 * The BPF program the shim loads (seccomp_policy_compile) is run here by a small
 * classic-BPF interpreter on struct seccomp_data inputs, so what is checked is
 * the real program, not libseccomp's intent:
 *   - every row resolves on x86_64 and its verdict is the row's action;
 *   - every syscall number 0..1023 that no row names gets ENOSYS;
 *   - the argument rows (clone, socket, ioctl, personality) on the values that
 *     matter, including the 64-bit ioctl command with high bits set;
 *   - i386 and x32 calls, and any foreign architecture, kill the process;
 *   - the two layers an exec really runs under (the init's variant and the
 *     per-exec layer, stacked as the kernel stacks them) equal that program.
 * A row changed without the compiler following (or the other way round) fails.
 */
#include "config.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <termios.h>

#include <cmocka.h>
#include <seccomp.h>

#include "macro.h"
#include "seccomp-policy.h"

#define X32_SYSCALL_BIT 0x40000000U
#define RET_ERRNO(e) (SECCOMP_RET_ERRNO | ((uint32_t)(e)&SECCOMP_RET_DATA))

static struct sock_fprog prog;

/* Classic BPF as the kernel's seccomp runs it. Fails the test on any opcode
 * the interpreter does not know or on a jump out of the program. */
static uint32_t
run_prog(const struct sock_fprog *p, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, mem[BPF_MEMWORDS] = {0};
	const unsigned char *data = (const unsigned char *)d;

	for (unsigned pc = 0; pc < p->len; pc++) {
		const struct sock_filter *f = &p->filter[pc];
		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			assert_true(f->k + 4 <= sizeof(*d));
			memcpy(&A, data + f->k, 4);
			break;
		case BPF_LD | BPF_IMM: A = f->k; break;
		case BPF_LDX | BPF_IMM: X = f->k; break;
		case BPF_LD | BPF_MEM: A = mem[f->k]; break;
		case BPF_LDX | BPF_MEM: X = mem[f->k]; break;
		case BPF_ST: mem[f->k] = A; break;
		case BPF_STX: mem[f->k] = X; break;
		case BPF_ALU | BPF_AND | BPF_K: A &= f->k; break;
		case BPF_ALU | BPF_OR | BPF_K: A |= f->k; break;
		case BPF_ALU | BPF_AND | BPF_X: A &= X; break;
		case BPF_MISC | BPF_TAX: X = A; break;
		case BPF_MISC | BPF_TXA: A = X; break;
		case BPF_JMP | BPF_JA: pc += f->k; break;
		case BPF_JMP | BPF_JEQ | BPF_K: pc += A == f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGT | BPF_K: pc += A > f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JGE | BPF_K: pc += A >= f->k ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JSET | BPF_K: pc += (A & f->k) ? f->jt : f->jf; break;
		case BPF_JMP | BPF_JEQ | BPF_X: pc += A == X ? f->jt : f->jf; break;
		case BPF_RET | BPF_K: return f->k;
		case BPF_RET | BPF_A: return A;
		default: fail_msg("unknown BPF opcode 0x%x at %u", f->code, pc);
		}
	}
	fail_msg("fell off the end of the program");
	return 0;
}

static uint32_t
run_bpf(const struct seccomp_data *d)
{
	return run_prog(&prog, d);
}

static uint32_t
eval(int nr, uint64_t a0, uint64_t a1, uint64_t a2)
{
	struct seccomp_data d = {.nr = nr, .arch = AUDIT_ARCH_X86_64};

	d.args[0] = a0;
	d.args[1] = a1;
	d.args[2] = a2;
	return run_bpf(&d);
}

static int
nr_of(const char *name)
{
	int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);
	if (nr < 0)
		fail_msg("syscall '%s' does not resolve on x86_64", name);
	return nr;
}

static int
setup(void **state)
{
	(void)state;
	return seccomp_policy_compile(&prog) < 0 ? -1 : 0;
}

static int
teardown(void **state)
{
	(void)state;
	free(prog.filter);
	return 0;
}

static void
test_every_row_has_its_verdict(void **state)
{
	(void)state;
	for (size_t i = 0; i < seccomp_policy_n_groups; i++) {
		const SeccompPolicyGroup *row = &seccomp_policy_groups[i];
		uint32_t want;

		assert_non_null(row->help);
		assert_true(strlen(row->help) > 0);
		assert_non_null(row->syscalls[0]);
		switch (row->action) {
		case POLICY_ALLOW: want = SECCOMP_RET_ALLOW; break;
		case POLICY_EPERM: want = RET_ERRNO(EPERM); break;
		case POLICY_ENOSYS: want = RET_ERRNO(ENOSYS); break;
		case POLICY_KILL: want = SECCOMP_RET_KILL_PROCESS; break;
		case POLICY_ARGS: continue; /* tested below */
		default: fail_msg("row '%s': bad action", row->help); return;
		}
		for (const char *const *n = row->syscalls; *n; n++) {
			uint32_t got;
			if (seccomp_policy_find(*n) != row)
				fail_msg("syscall '%s' listed twice", *n);
			for (const char *const *m = row->syscalls; m < n; m++)
				if (streq(*m, *n))
					fail_msg("syscall '%s' listed twice", *n);
			got = eval(nr_of(*n), 0, 0, 0);
			if (got != want)
				fail_msg("'%s' (%s): filter says 0x%x, table says 0x%x", *n,
					 seccomp_policy_action_name(row->action), got, want);
		}
	}
}

static void
test_unlisted_syscalls_get_enosys(void **state)
{
	unsigned checked = 0;

	(void)state;
	for (int nr = 0; nr < 1024; nr++) {
		char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
		bool listed = name && seccomp_policy_find(name);
		if (!listed) {
			uint32_t got = eval(nr, 0, 0, 0);
			if (got != RET_ERRNO(ENOSYS))
				fail_msg("unlisted syscall %d (%s): 0x%x", nr, name ? name : "?",
					 got);
			checked++;
		}
		free(name);
	}
	assert_true(checked > 500);
	/* a few by name: obsolete or dangerous and deliberately absent */
	assert_int_equal(eval(nr_of("uselib"), 0, 0, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(nr_of("modify_ldt"), 0, 0, 0), RET_ERRNO(ENOSYS));
}

static void
test_foreign_abis_are_killed(void **state)
{
	struct seccomp_data d = {.nr = 20 /* i386 getpid */, .arch = AUDIT_ARCH_I386};

	(void)state;
	assert_int_equal(run_bpf(&d), SECCOMP_RET_KILL_PROCESS);
	d.arch = AUDIT_ARCH_AARCH64;
	d.nr = 172;
	assert_int_equal(run_bpf(&d), SECCOMP_RET_KILL_PROCESS);
	/* x32: native arch token, syscall number with __X32_SYSCALL_BIT */
	assert_int_equal(eval((int)(X32_SYSCALL_BIT | (uint32_t)nr_of("getpid")), 0, 0, 0),
			 SECCOMP_RET_KILL_PROCESS);
	assert_int_equal(eval((int)(X32_SYSCALL_BIT | 512U), 0, 0, 0), SECCOMP_RET_KILL_PROCESS);
	assert_int_equal(eval(nr_of("getpid"), 0, 0, 0), SECCOMP_RET_ALLOW);
}

static void
test_clone_namespace_flags(void **state)
{
	static const uint64_t ns[] = {CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
				      CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET};
	const uint64_t thread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
				CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
				CLONE_CHILD_CLEARTID;
	int nr = nr_of("clone");

	(void)state;
	assert_int_equal(eval(nr, thread, 0, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nr, SIGCHLD | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID, 0, 0),
			 SECCOMP_RET_ALLOW);
	for (size_t i = 0; i < ELEMENTSOF(ns); i++) {
		assert_int_equal(eval(nr, ns[i] | SIGCHLD, 0, 0), RET_ERRNO(EPERM));
		assert_int_equal(eval(nr, ns[i] | thread, 0, 0), RET_ERRNO(EPERM));
	}
	assert_int_equal(eval(nr, CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS, 0, 0),
			 RET_ERRNO(EPERM));
	assert_int_equal(eval(nr_of("clone3"), 0, 0, 0), RET_ERRNO(ENOSYS));
	assert_int_equal(eval(nr_of("unshare"), CLONE_NEWUSER, 0, 0), RET_ERRNO(EPERM));
}

static void
test_socket_families_and_types(void **state)
{
	int nr = nr_of("socket");

	(void)state;
	assert_int_equal(eval(nr, AF_UNIX, SOCK_STREAM, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nr, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nr, AF_UNIX, SOCK_DGRAM, 0), SECCOMP_RET_ALLOW);
	for (int fam = AF_INET; fam <= AF_INET6; fam += AF_INET6 - AF_INET) {
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_STREAM, 0), SECCOMP_RET_ALLOW);
		assert_int_equal(
		    eval(nr, (uint64_t)fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0),
		    SECCOMP_RET_ALLOW);
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_DGRAM, 17), SECCOMP_RET_ALLOW);
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_RAW, 1), RET_ERRNO(EPERM));
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_RAW | SOCK_CLOEXEC, 255),
				 RET_ERRNO(EPERM));
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_PACKET, 0), RET_ERRNO(EPERM));
		assert_int_equal(eval(nr, (uint64_t)fam, SOCK_SEQPACKET, 0), RET_ERRNO(EPERM));
	}
	for (int fam = 0; fam < 64; fam++) {
		if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6)
			continue;
		uint32_t got = eval(nr, (uint64_t)fam, SOCK_DGRAM, 0);
		if (got != RET_ERRNO(EAFNOSUPPORT))
			fail_msg("family %d: 0x%x", fam, got);
	}
	assert_int_equal(eval(nr, 0xffffffffULL, SOCK_STREAM, 0), RET_ERRNO(EAFNOSUPPORT));
	/* high garbage in the family: never allowed */
	assert_int_not_equal(eval(nr, (1ULL << 32) | AF_INET, SOCK_STREAM, 0), SECCOMP_RET_ALLOW);
	assert_int_not_equal(eval(nr, (1ULL << 32) | AF_NETLINK, SOCK_RAW, 0), SECCOMP_RET_ALLOW);
}

static void
test_ioctl_tiocsti_tioclinux(void **state)
{
	static const uint64_t ok[] = {TCGETS, TCSETS, TIOCGWINSZ, FIONREAD, FIONBIO,	0,
				      0x5410, 0x5414, 0x541a,	  0x541e,   0xffffffff, 0xc0185879};
	int nr = nr_of("ioctl");

	(void)state;
	assert_int_equal(eval(nr, 0, TIOCSTI, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 0, TIOCLINUX, 0), RET_ERRNO(EPERM));
	/* CVE-2019-10063: the kernel uses the low 32 bits only */
	assert_int_equal(eval(nr, 0, (1ULL << 32) | TIOCSTI, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 0, 0xffffffff00000000ULL | TIOCSTI, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 0, (7ULL << 40) | TIOCLINUX, 0), RET_ERRNO(EPERM));
	for (size_t i = 0; i < ELEMENTSOF(ok); i++)
		if (eval(nr, 1, ok[i], 0) != SECCOMP_RET_ALLOW)
			fail_msg("ioctl 0x%llx not allowed", (unsigned long long)ok[i]);
	/* every command near the denied ones, exhaustively */
	for (uint64_t cmd = 0x5400; cmd < 0x5500; cmd++) {
		uint32_t want =
		    cmd == TIOCSTI || cmd == TIOCLINUX ? RET_ERRNO(EPERM) : SECCOMP_RET_ALLOW;
		if (eval(nr, 0, cmd, 0) != want)
			fail_msg("ioctl 0x%llx: wrong verdict", (unsigned long long)cmd);
	}
}

static void
test_personality(void **state)
{
	int nr = nr_of("personality");

	(void)state;
	assert_int_equal(eval(nr, 0, 0, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nr, 0xffffffffULL, 0, 0), SECCOMP_RET_ALLOW);
	assert_int_equal(eval(nr, READ_IMPLIES_EXEC, 0, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, ADDR_NO_RANDOMIZE, 0, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, PER_LINUX32, 0, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 1, 0, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 0xfffffffeULL, 0, 0), RET_ERRNO(EPERM));
	assert_int_equal(eval(nr, 0x7fffffffULL, 0, 0), RET_ERRNO(EPERM));
}

static void
test_explicit_deny_set(void **state)
{
	static const char *const eperm[] = {"ptrace",
					    "process_vm_readv",
					    "process_vm_writev",
					    "mount",
					    "umount2",
					    "pivot_root",
					    "chroot",
					    "fsopen",
					    "fsconfig",
					    "fsmount",
					    "fspick",
					    "move_mount",
					    "open_tree",
					    "mount_setattr",
					    "unshare",
					    "setns",
					    "bpf",
					    "perf_event_open",
					    "userfaultfd",
					    "keyctl",
					    "add_key",
					    "request_key",
					    "io_uring_setup",
					    "io_uring_enter",
					    "io_uring_register",
					    "open_by_handle_at",
					    "name_to_handle_at",
					    "swapon",
					    "swapoff",
					    "syslog",
					    "acct",
					    "quotactl",
					    "lookup_dcookie",
					    "iopl",
					    "ioperm",
					    "settimeofday",
					    "clock_settime",
					    "clock_adjtime",
					    "adjtimex",
					    "vhangup",
					    "fanotify_init"};
	static const char *const kill[] = {"init_module", "finit_module", "delete_module",
					   "reboot",	  "kexec_load",	  "kexec_file_load"};

	(void)state;
	for (size_t i = 0; i < ELEMENTSOF(eperm); i++)
		if (eval(nr_of(eperm[i]), 0, 0, 0) != RET_ERRNO(EPERM))
			fail_msg("%s is not EPERM", eperm[i]);
	for (size_t i = 0; i < ELEMENTSOF(kill); i++)
		if (eval(nr_of(kill[i]), 0, 0, 0) != SECCOMP_RET_KILL_PROCESS)
			fail_msg("%s does not kill", kill[i]);
}

/* The kernel runs every stacked filter and keeps the action of highest
 * precedence (the lowest as a signed action; a tie keeps the newest). */
static uint32_t
stacked(uint32_t older, uint32_t newer)
{
	return (int32_t)(newer & SECCOMP_RET_ACTION_FULL) <=
		       (int32_t)(older & SECCOMP_RET_ACTION_FULL)
		   ? newer
		   : older;
}

/* What an exec runs under — the init's variant (clone3 allowed) with the exec
 * layer on top — is exactly the table's filter, syscall by syscall. */
static void
test_init_plus_exec_layer_is_the_policy(void **state)
{
	struct sock_fprog init = {0}, layer = {0};
	const uint64_t args[][3] = {{0, 0, 0},
				    {CLONE_NEWUSER, 0, 0},
				    {AF_INET, SOCK_RAW, 0},
				    {AF_NETLINK, SOCK_DGRAM, 0},
				    {0, TIOCSTI, 0},
				    {0, 0xffffffff00000000ULL | TIOCSTI, 0},
				    {READ_IMPLIES_EXEC, 0, 0}};
	const uint32_t arches[] = {AUDIT_ARCH_X86_64, AUDIT_ARCH_I386};

	(void)state;
	assert_int_equal(seccomp_policy_compile_variant(SECCOMP_POLICY_INIT, &init), 0);
	assert_int_equal(seccomp_policy_compile_variant(SECCOMP_POLICY_EXEC_LAYER, &layer), 0);
	assert_true(layer.len < 16); /* cheap to load in every exec */
	for (size_t a = 0; a < ELEMENTSOF(arches); a++)
		for (int nr = 0; nr < 1024; nr++)
			for (size_t k = 0; k < ELEMENTSOF(args); k++) {
				struct seccomp_data d = {.nr = nr, .arch = arches[a]};
				memcpy(d.args, args[k], sizeof(args[k]));
				uint32_t want = run_prog(&prog, &d);
				uint32_t got = stacked(run_prog(&init, &d), run_prog(&layer, &d));
				if (got != want)
					fail_msg(
					    "syscall %d (arch 0x%x, args #%zu): init+layer 0x%x, "
					    "policy 0x%x",
					    nr, arches[a], k, got, want);
			}
	/* and the init alone may clone3 (it creates the execs) */
	{
		struct seccomp_data d = {.nr = nr_of("clone3"), .arch = AUDIT_ARCH_X86_64};
		assert_int_equal(run_prog(&init, &d), SECCOMP_RET_ALLOW);
	}
	free(init.filter);
	free(layer.filter);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_row_has_its_verdict),
	    cmocka_unit_test(test_unlisted_syscalls_get_enosys),
	    cmocka_unit_test(test_foreign_abis_are_killed),
	    cmocka_unit_test(test_clone_namespace_flags),
	    cmocka_unit_test(test_socket_families_and_types),
	    cmocka_unit_test(test_ioctl_tiocsti_tioclinux),
	    cmocka_unit_test(test_personality),
	    cmocka_unit_test(test_explicit_deny_set),
	    cmocka_unit_test(test_init_plus_exec_layer_is_the_policy),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
