/* SPDX-License-Identifier: MIT */
/*
 * seccomp-policy.h — the sandbox's seccomp filter: a default-deny allowlist
 * generated from ONE table (seccomp-policy.c), compiled with libseccomp.
 *
 * Semantics of the compiled filter (native x86_64 only):
 *   - foreign architecture (i386 `int 0x80`, anything but AUDIT_ARCH_X86_64) and
 *     x32 syscall numbers (__X32_SYSCALL_BIT) → kill the process;
 *   - a syscall not in the table (or unknown to libseccomp) → ENOSYS, so that
 *     programs fall back the way they do on an older kernel;
 *   - each syscall of a table row: allow, EPERM, ENOSYS (clone3: glibc then uses clone) or
 *     kill the process (module loading, reboot, kexec);
 *   - POLICY_ARGS rows are decided by their arguments:
 *       clone       EPERM when any namespace flag is set, else allowed;
 *       socket      AF_UNIX (any type); AF_INET/AF_INET6 with SOCK_STREAM or
 *                   SOCK_DGRAM; other types of those families (SOCK_RAW…) EPERM;
 *                   every other family EAFNOSUPPORT;
 *       ioctl       TIOCSTI and TIOCLINUX EPERM, compared on the low 32 bits of
 *                   the command (the kernel truncates it: CVE-2019-10063); all
 *                   other commands allowed;
 *       personality 0 (PER_LINUX) and 0xffffffff (query) allowed, anything else
 *                   EPERM.
 * libseccomp cannot express "arg != X" on a masked value nor two comparisons of
 * one argument in a rule, and an argument-less rule overrides argument rules of
 * the same syscall, so the builder spells every ARGS row as a set of disjoint
 * masked-equality rules that together cover every value (see the .c file).
 *
 * The shim compiles the filter once at start-up. The policy reaches every exec
 * in two layers, because loading a program of ~770 instructions costs ~0.9 ms
 * (the kernel checks and JIT-compiles it) and an exec should not pay that:
 *   - the sandbox init loads SECCOMP_POLICY_INIT on itself at the end of its
 *     setup (after no_new_privs and the capability drop): the policy above,
 *     except that clone3 is allowed — the init needs it to create execs;
 *   - each exec child adds SECCOMP_POLICY_EXEC_LAYER right before execve: a
 *     few instructions, clone3 → ENOSYS, everything else allowed.
 * Filters stack and the most restrictive action wins, so what an exec sees is
 * exactly SECCOMP_POLICY_AGENT (the table; tests check that one), and the init
 * itself runs under the policy too.
 */
#pragma once

#include <stddef.h>

struct sock_fprog;

typedef enum SeccompPolicyAction {
	POLICY_ALLOW,
	POLICY_EPERM,
	POLICY_ENOSYS,
	POLICY_KILL, /* SCMP_ACT_KILL_PROCESS */
	POLICY_ARGS, /* decided by the arguments, see above */
	_POLICY_ACTION_MAX,
} SeccompPolicyAction;

/* One row of the table: syscalls that share an action and a reason (as
 * systemd's syscall_filter_sets group theirs). */
typedef struct SeccompPolicyGroup {
	const char *group; /* what it is for: "io", "fs", "process", … (documentation) */
	SeccompPolicyAction action;
	const char *help;	     /* one line: why they are allowed or denied */
	const char *const *syscalls; /* names as libseccomp resolves them; NULL-terminated */
} SeccompPolicyGroup;

extern const SeccompPolicyGroup seccomp_policy_groups[];
extern const size_t seccomp_policy_n_groups;

/* The group that lists the syscall name, or NULL (it then gets ENOSYS). */
const SeccompPolicyGroup *seccomp_policy_find(const char *name);
/* How many syscalls the table names. */
size_t seccomp_policy_n_syscalls(void);

/* "allow", "EPERM", "ENOSYS", "kill", "args". */
const char *seccomp_policy_action_name(SeccompPolicyAction a);

typedef enum SeccompPolicyVariant {
	SECCOMP_POLICY_AGENT,	   /* the table, as an exec sees it */
	SECCOMP_POLICY_INIT,	   /* the table with clone3 allowed (the init's) */
	SECCOMP_POLICY_EXEC_LAYER, /* clone3 → ENOSYS, else allow (added per exec) */
} SeccompPolicyVariant;

/* Build the filter into a libseccomp context (*ret is a scmp_filter_ctx, release
 * it with seccomp_release). Fails with -ENOENT if a row names a syscall that the
 * native architecture does not know, -EOPNOTSUPP on a non-x86_64 build. */
int seccomp_policy_build_variant(SeccompPolicyVariant v, void **ret_ctx);

/* Build and export the BPF program: ret->filter is malloc'd (free it), ret->len
 * its instruction count. 0 or a negative errno. */
int seccomp_policy_compile(struct sock_fprog *ret);
int seccomp_policy_compile_variant(SeccompPolicyVariant v, struct sock_fprog *ret);

/* In a single-threaded child: seccomp(SECCOMP_SET_MODE_FILTER, TSYNC, prog).
 * Requires no_new_privs (or CAP_SYS_ADMIN). Async-signal-safe, no allocation.
 * 0 or a negative errno. */
int seccomp_policy_load(const struct sock_fprog *prog);
