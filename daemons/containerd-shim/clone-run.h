/* SPDX-License-Identifier: MIT */
/*
 * clone-run.h — clone3 with CLONE_VM on a stack of the caller's (x86_64): the
 * shim's exec of the sandbox-init helper (sandbox-linux.c) and the init's
 * exec children (sandbox-serve.c) share their parent's memory until execve.
 */
#pragma once

#include <linux/sched.h>
#include <sys/syscall.h>

#if defined(__x86_64__)
#define HAVE_CLONE3_RUN 1
/* clone3 that runs fn(arg) in the child on the given stack and never returns
 * there (fn does not return); returns the pid or -errno in the parent. Raw,
 * like posix_spawn's: with CLONE_VM the child must not return through the
 * parent's frames. */
static inline long
clone3_run(struct clone_args *ca, void (*fn)(void *), void *arg)
{
	register void (*f)(void *) asm("r12") = fn;
	register void *x asm("r13") = arg;
	long ret;

	asm volatile("syscall\n\t"
		     "test %%rax, %%rax\n\t"
		     "jnz 1f\n\t"
		     "xor %%ebp, %%ebp\n\t"
		     "mov %%r13, %%rdi\n\t"
		     "call *%%r12\n\t"
		     "mov $127, %%edi\n\t"
		     "mov %[nr_exit], %%eax\n\t"
		     "syscall\n\t"
		     "hlt\n"
		     "1:"
		     : "=a"(ret)
		     : "0"((long)SYS_clone3), "D"(ca), "S"(sizeof(*ca)), "r"(f),
		       "r"(x), [nr_exit] "i"(SYS_exit)
		     : "rcx", "r11", "memory");
	return ret;
}
#endif
