# SPDX-License-Identifier: MIT
"""SANDBOX.md §7 against the real daemons: identity and privileges, the seccomp
matrix (tests/e2e/helpers/try-syscall, copied into a sandbox's workspace),
egress, resources (pids.max, OOM, timeout, rlimits), kill and lifecycle
(destroy of a SIGTERM-ignoring double-forked daemon, orphans, kill -9 of the
shim and the restart's reaping; re-adoption is t_sandbox_readopt.py), SANDBOX_STATS.

Runs go through routerd/coordinatord (`/bin/sh -c COMMAND`); what coordinatord
does not expose (destroy, stats, exec timeout) is driven with shimctl on the
shim's socket. Limits of this suite are below (SUITE_CONF) so that a balloon
and a fork bomb hit them quickly."""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time

from helpers.mpack import ERROR, REPLY, Client, pack
from rwtest import BUILD, stdout_text, poll

# What a run leaves running is killed at its end (t_sandbox_slots.py); the
# tests of what a sandbox does to such processes (destroy, kill -9 of the shim,
# isolation from another sandbox) run them with this harness, which keeps them.
KEEP_HARNESS = """[harness.keep]
adapter = shell
keep_processes = true
"""

SUITE_CONF = """[containerd-shim]
exec_output_buffer = 64K
memory_max = 256M
pids_max = 256
cpu_max = 50000 100000
""" + KEEP_HARNESS

SHIMCTL = os.path.join(BUILD, "tools", "shimctl")
TRY_SYSCALL = os.path.join(BUILD, "tests", "e2e", "helpers", "try-syscall")
HOST_UID = 100000  # [containerd-shim] host_uid default


def sandbox_id(key):
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def workspace(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread), "workspace")


def run(s, command, thread, timeout=30, harness=None):
    """Run COMMAND through POST /runs; (events, final record)."""
    extra = {"metadata": {"harness": harness}} if harness else {}
    run_id = s.start_run(command, thread=thread, **extra)
    events, status, _, _ = s.tail(run_id, thread=thread, timeout=timeout)
    assert status is not None, events
    return events, status


def run_ok(s, command, thread, timeout=30, harness=None):
    events, status = run(s, command, thread, timeout, harness)
    assert status["status"] == "completed", (status, stdout_text(events),
                                             stdout_text(events, "process.stderr"))
    return stdout_text(events)


def tool_result(events):
    res = [e["chunk"] for e in events if e["chunk"]["type"] == "TOOL_CALL_RESULT"]
    assert len(res) == 1, events
    return json.loads(res[0]["content"])


def shimctl(s, key, *args, timeout=30):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    return subprocess.run([SHIMCTL, sock, key, *args], capture_output=True, text=True,
                          timeout=timeout)


def host_pids(marker):
    """Host pids of live (non-zombie) processes whose command line contains marker."""
    out = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/cmdline", "rb") as f:
                cmd = f.read()
            with open(d + "/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z":
            out.append(int(d[6:]))
    return out



def cgroup_id(s, key):
    """The cgroup of the sandbox of key is sb-<id>, or, taken from the pool
    (pool_size), sb-<its own id>, which the "created" line names."""
    sid = sandbox_id(key)
    found = re.findall(r"Sandbox " + sid + r" created \([^)]*cgroup sb-([0-9a-f]{16})\)",
                       s.log("containerd-shim"))
    return found[-1] if found else sid


def sandbox_cgroups(s, key):
    """Existing cgroup directories of the sandbox of key, in every hierarchy.
    Naming scheme (cgroup.h): <mount>/<parent>/runwarden.<sha256(state_dir)[:12]>/sb-<id>."""
    inst = "runwarden." + hashlib.sha256(os.path.join(s.dir, "state").encode()).hexdigest()[:12]
    name = "sb-" + cgroup_id(s, key)
    found = set()
    for mount in glob.glob("/sys/fs/cgroup/*/") + ["/sys/fs/cgroup/"]:
        for base in glob.glob(mount + "**/" + inst, recursive=False) + \
                glob.glob(mount + inst) + _own_bases(s, mount, inst):
            if os.path.isdir(os.path.join(base, name)):
                found.add(os.path.join(base, name))
    return sorted(found)


def _own_bases(s, mount, inst):
    pid = s.procs["containerd-shim"].pid
    out = []
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                path = line.rstrip("\n").split(":", 2)[2]
                for p in (path, os.path.dirname(path)):
                    out.append(os.path.normpath(mount + "/" + p + "/" + inst))
    except OSError:
        pass
    return out


# --- identity, privileges, namespaces -------------------------------------------------

def test_identity_no_privileges(s):
    out = run_ok(s, "grep -E '^(NoNewPrivs|Seccomp|Cap(Inh|Prm|Eff|Bnd|Amb)):' /proc/self/status;"
                 " echo uid_map; cat /proc/self/uid_map; id -u; id -g", thread="t-id")
    fields = dict(re.findall(r"^(\w+):\s+(\S+)$", out, re.M))
    assert fields["NoNewPrivs"] == "1", out
    assert fields["Seccomp"] == "2", out
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert fields[cap] == "0000000000000000", (cap, out)
    maps = out.split("uid_map\n", 1)[1].splitlines()
    assert len(maps) == 3, out  # one uid_map line, then id -u, id -g
    assert maps[0].split() == ["1000", str(HOST_UID), "1"], maps
    assert maps[1:] == ["1000", "1000"], maps


def test_id_maps_and_setgroups_not_writable(s):
    out = run_ok(s, "for f in uid_map gid_map setgroups; do"
                 " (echo '0 0 1' > /proc/self/$f) 2>/dev/null && echo $f=written || echo $f=denied;"
                 " done; cat /proc/self/setgroups", thread="t-id")
    assert out == "uid_map=denied\ngid_map=denied\nsetgroups=denied\ndeny\n", out


def test_unshare_fails(s):
    out = run_ok(s, "for f in -U -n -m -p -i -u; do unshare $f true 2>/dev/null; echo \"$f=$?\";"
                 " done; unshare -U true 2>&1 | tail -n1", thread="t-id")
    lines = out.splitlines()
    assert lines[:6] == ["-U=1", "-n=1", "-m=1", "-p=1", "-i=1", "-u=1"], out
    assert "Operation not permitted" in lines[6], out


# --- seccomp matrix --------------------------------------------------------------------

MATRIX = {
    # §6.D item 19, one by one: EPERM
    **{n: "EPERM" for n in (
        "ptrace process_vm_readv process_vm_writev bpf perf_event_open userfaultfd keyctl "
        "add_key request_key io_uring_setup io_uring_enter io_uring_register open_by_handle_at "
        "name_to_handle_at swapon swapoff syslog acct iopl ioperm quotactl fanotify_init vhangup "
        "settimeofday clock_settime adjtimex mount umount2 pivot_root chroot fsopen fsconfig "
        "fsmount fspick open_tree move_mount mount_setattr unshare_user unshare_net "
        "unshare_files setns clone_newuser clone_newns").split()},
    # kill for module loading, reboot, kexec, and foreign ABIs
    **{n: "SIGSYS" for n in (
        "reboot kexec_load kexec_file_load init_module finit_module delete_module "
        "int80 x32").split()},
    # clone3 → ENOSYS, yet fork and threads work through glibc's fallback
    "clone3": "ENOSYS", "fork": "OK", "pthread_create": "OK",
    # socket families and types
    "socket_unix": "OK", "socket_inet": "OK", "socket_inet6_dgram": "OK",
    "socket_netlink": "EAFNOSUPPORT", "socket_packet": "EAFNOSUPPORT",
    "socket_vsock": "EAFNOSUPPORT", "socket_alg": "EAFNOSUPPORT",
    "socket_raw": "EPERM", "socket_raw6": "EPERM",
    # ioctl: TIOCSTI (also with the high 32 bits set), TIOCLINUX; others pass
    "ioctl_tiocsti": "EPERM", "ioctl_tiocsti_high": "EPERM", "ioctl_tioclinux": "EPERM",
    "ioctl_fionread": "OK",
    # personality: only the default and the query
    "personality_query": "OK", "personality_linux": "OK",
    "personality_read_implies_exec": "EPERM", "personality_addr_no_randomize": "EPERM",
    # not in the allowlist → ENOSYS
    "modify_ldt": "ENOSYS", "uselib": "ENOSYS",
    # device nodes need CAP_MKNOD (the kernel says no), FIFOs are fine
    "mknod_char": "EPERM", "mknod_char_workspace": "EPERM", "mkfifo": "OK",
    "getpid": "OK",
}


def install_try_syscall(s, thread):
    run_ok(s, "true", thread=thread)  # creates the sandbox and its workspace
    dst = os.path.join(workspace(s, thread), "try-syscall")
    shutil.copyfile(TRY_SYSCALL, dst)
    os.chown(dst, HOST_UID, HOST_UID)
    os.chmod(dst, 0o755)


def host_refuses_int80():
    """Some hypervisors (PVM guests) cannot run a 32-bit int 0x80 from a 64-bit
    process at all: the unconfined host gets SIGSEGV, so the sandbox can only
    get that too (the filter's SIGSYS never gets a chance)."""
    out = subprocess.run([TRY_SYSCALL, "int80"], capture_output=True, text=True).stdout
    return out.strip() == "int80=SIGSEGV"


def test_seccomp_matrix_exact_errnos(s):
    install_try_syscall(s, "t-sec")
    out = run_ok(s, "/workspace/try-syscall " + " ".join(MATRIX), thread="t-sec")
    got = dict(line.split("=", 1) for line in out.splitlines())
    want = dict(MATRIX)
    if host_refuses_int80():
        want["int80"] = "SIGSEGV"
    wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
    assert not wrong, wrong
    # the sandbox is still healthy after the kills
    assert run_ok(s, "echo alive", thread="t-sec") == "alive\n"


def test_build_tools_work_under_the_filter(s):
    script = r"""set -e
cd /workspace && rm -rf proj && mkdir proj && cd proj
printf '#include <stdio.h>\n#include <pthread.h>\nstatic void *f(void *a){return a;}\nint main(void){pthread_t t;pthread_create(&t,0,f,0);pthread_join(t,0);puts("c ok");return 0;}\n' > m.c
printf 'all: m\nm: m.c\n\tgcc -O2 -pthread -o m m.c\n' > Makefile
make -s && ./m
git init -q . && git add . && git -c user.email=a@b -c user.name=n commit -qm init && git log --format=%s
python3 -c 'import subprocess, threading, multiprocessing as mp; print(subprocess.run(["echo", "py ok"], capture_output=True, text=True).stdout.strip()); p = mp.Pool(2); print(sum(p.map(abs, [-1, -2]))); p.close()'
bash -c 'echo bash $((6*7))' | sort | tr a-z A-Z
"""
    want = "c ok\ninit\npy ok\n3\nBASH 42\n"
    if os.path.exists("/usr/bin/node"):
        script += "node -e 'require(\"child_process\").execFileSync(\"true\"); console.log(\"node ok\")'\n"
        want += "node ok\n"
    assert run_ok(s, script, thread="t-tools", timeout=60) == want


def test_setuid_binary_gains_nothing(s):
    run_ok(s, "true", thread="t-suid")
    dst = os.path.join(workspace(s, "t-suid"), "suid-id")
    shutil.copyfile("/usr/bin/id", dst)
    os.chown(dst, 0, 0)
    os.chmod(dst, 0o4755)
    out = run_ok(s, "ls -ln /workspace/suid-id | cut -c1-10; /workspace/suid-id -u", thread="t-suid")
    assert out == "-rwsr-xr-x\n1000\n", out  # the bit is there, nosuid + no_new_privs ignore it


def test_host_processes_invisible_and_init_not_dumpable(s):
    host_pid = s.procs["containerd-shim"].pid
    out = run_ok(s, f"kill -0 {host_pid} 2>&1; echo kill=$?; "
                 "ls /proc | grep -c '^[0-9]'; "
                 "cat /proc/1/environ >/dev/null 2>&1; echo environ=$?; "
                 "ls /proc/1/fd >/dev/null 2>&1; echo fd=$?; "
                 "(echo x >> /proc/1/exe) 2>/dev/null; echo exe=$?; "
                 "hostname; hostname evil 2>/dev/null; echo sethostname=$?", thread="t-proc")
    lines = [line for line in out.splitlines() if line]
    assert "No such process" in lines[0] and lines[1] == "kill=1", out
    # init, sh, ls, grep at most: nothing of the host
    assert 2 <= int(lines[2]) <= 5, out
    # cat: 1 (EACCES); ls and the shell's redirection: 2 (cannot open)
    assert lines[3:] == ["environ=1", "fd=2", "exe=2", "sandbox", "sethostname=1"], out


def test_exit_codes_signals_and_binary_output_exact(s):
    for code in (0, 1, 255):
        r = shimctl(s, "t-codes", "--", "sh", "-c", f"exit {code}")
        assert r.returncode == code and f"exit (exit_code {code}, signal 0)" in r.stderr, r.stderr
    r = shimctl(s, "t-codes", "--", "sh", "-c", "kill -SEGV $$")
    assert "signal (exit_code 139, signal 11)" in r.stderr, r.stderr
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    data = bytes(range(256)) * 64 + b"no newline"
    r = subprocess.run([SHIMCTL, sock, "t-codes", "--stdin", "--", "sh", "-c",
                        "cat; printf 'e\\001rr' >&2"], input=data, capture_output=True,
                       timeout=30)
    assert r.returncode == 0 and r.stdout == data, (r.returncode, len(r.stdout))
    assert r.stderr.startswith(b"e\x01rr"), r.stderr


def test_tmp_is_size_capped(s):
    out = run_ok(s, "dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1 | grep -o 'No space left on device' "
                 "| head -1; du -m /tmp/fill | cut -f1; rm /tmp/fill", thread="t-tmp")
    lines = out.splitlines()
    assert lines[0] == "No space left on device", out
    assert 60 <= int(lines[1]) <= 64, out  # tmp_size default 64M


# --- filesystem and fds ------------------------------------------------------------------

def test_only_fds_0_1_2(s):
    assert run_ok(s, "ls /proc/$$/fd", thread="t-fs") == "0\n1\n2\n"


def test_system_dirs_read_only(s):
    py = ("import errno, os\n"
          "for p in ('/usr/rw-probe', '/etc/rw-probe', '/bin/rw-probe', '/proc/sysrq-trigger',"
          " '/proc/sys/kernel/core_pattern'):\n"
          "    try:\n"
          "        fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o600); os.close(fd); print(p, 'OK')\n"
          "    except OSError as e:\n"
          "        print(p, errno.errorcode[e.errno])\n")
    out = run_ok(s, f"python3 -c \"{py}\"", thread="t-fs")
    # /proc/sys is bound read-only, but the permission check (files of the unmapped
    # host root) fails first; /proc/sysrq-trigger exists only if the kernel has it
    sysrq = "EACCES" if os.path.exists("/proc/sysrq-trigger") else "ENOENT"
    assert out == ("/usr/rw-probe EROFS\n/etc/rw-probe EROFS\n/bin/rw-probe EROFS\n"
                   f"/proc/sysrq-trigger {sysrq}\n/proc/sys/kernel/core_pattern EACCES\n"), out


def test_landlock_limits_writes(s):
    out = run_ok(s, "true", thread="t-ll")
    m = re.search(r"Sandbox " + sandbox_id("t-ll") + r" created \((Landlock ABI (\d+)|no Landlock)[;)]",
                  s.log("containerd-shim"))
    assert m, s.log("containerd-shim")[-2000:]
    if not m.group(2):
        return  # kernel without Landlock: nothing more to check
    py = ("import errno, os\n"
          "def w(p):\n"
          "    try:\n"
          "        with open(p, 'w') as f: f.write('x')\n"
          "        return 'OK'\n"
          "    except OSError as e: return errno.errorcode[e.errno]\n"
          "os.makedirs('/workspace/a/b', exist_ok=True); os.makedirs('/workspace/c', exist_ok=True)\n"
          "print(w('/workspace/a/b/f'), w('/tmp/f'), w('/dev/shm/f'), w('/dev/null'))\n"
          "os.rename('/workspace/a/b/f', '/workspace/c/f')\n"  # REFER across directories
          "os.truncate('/workspace/c/f', 0)\n"
          "print(w('/proc/self/comm'), w('/proc/self/attr/current'))\n")
    out = run_ok(s, f"python3 -c \"{py}\"", thread="t-ll")
    # /proc/self/comm is writable by its owner without Landlock
    assert out == "OK OK OK OK\nEACCES EACCES\n", out


# --- network -----------------------------------------------------------------------------

def test_only_lo_and_egress_fails_fast(s):
    py = ("import socket, time, errno\n"
          "t = time.monotonic()\n"
          "s = socket.socket(); s.settimeout(10)\n"
          "try:\n"
          "    s.connect(('1.1.1.1', 80)); print('connected')\n"
          "except OSError as e:\n"
          "    print(errno.errorcode.get(e.errno, e))\n"
          "print('fast' if time.monotonic() - t < 2 else 'slow')\n")
    out = run_ok(s, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
                 f"python3 -c \"{py}\"", thread="t-net")
    assert out == "lo\nENETUNREACH\nfast\n", out


def test_two_sandboxes_cannot_reach_each_other(s):
    server = ("import socket, time; s = socket.socket(); "
              "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
              "s.bind(('127.0.0.1', 8080)); s.listen(); time.sleep(60)")
    probe = ("import socket, errno\n"
             "try:\n"
             "    socket.create_connection(('127.0.0.1', 8080), 2).close(); print('reached')\n"
             "except OSError as e:\n"
             "    print(errno.errorcode.get(e.errno, e))\n")
    # A's server lives on after the run (setsid, no pipes held, a keep_processes
    # harness); the run returns once it listens
    out = run_ok(s, f"setsid python3 -c \"{server}\" </dev/null >/dev/null 2>&1 &\n"
                 f"for i in $(seq 100); do python3 -c \"{probe}\" | grep -q reached && break;"
                 " sleep 0.05; done; python3 -c \"" + probe + "\"", thread="t-net-a",
                 harness="keep")
    assert out == "reached\n", out
    assert run_ok(s, f"python3 -c \"{probe}\"", thread="t-net-b") == "ECONNREFUSED\n"
    assert run_ok(s, f"python3 -c \"{probe}\"", thread="t-net-a") == "reached\n"
    r = shimctl(s, "t-net-a", "--destroy")
    assert r.returncode == 0, r.stderr


# --- resources and time ------------------------------------------------------------------

def test_rlimits(s):
    out = run_ok(s, "ulimit -c; ulimit -n; ulimit -l; ulimit -r; ulimit -f", thread="t-res")
    # CORE 0, NOFILE 4096, MEMLOCK 64 KiB, RTPRIO 0, FSIZE 16G in 512-byte blocks
    assert out == "0\n4096\n64\n0\n33554432\n", out


def test_memory_balloon_is_reported_as_oom(s):
    events, status = run(s, "python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'",
                         thread="t-oom")
    res = tool_result(events)
    assert res["reason"] == "oom", res
    assert res["exitCode"] == 137, res
    assert status["status"] == "failed", status
    assert events[-1]["chunk"]["type"] == "RUN_ERROR", events[-1]
    assert events[-1]["chunk"]["code"] == "oom" and "out of memory" in events[-1]["chunk"]["message"]
    assert stdout_text(events) == ""
    # the sandbox and its neighbours carry on
    assert run_ok(s, "echo next", thread="t-oom") == "next\n"
    assert run_ok(s, "echo neighbour", thread="t-res") == "neighbour\n"


def test_fork_bomb_contained_shim_responsive(s):
    bomb = "bash -c 'bomb() { bomb | bomb & }; bomb' 2>/dev/null; sleep 3; echo leader-done"
    # kept past the run's end (keep_processes), to show destroy ends it
    run_id = s.start_run(bomb, thread="t-bomb", metadata={"harness": "keep"})
    # meanwhile another sandbox works, promptly
    t0 = time.time()
    assert run_ok(s, "echo responsive", thread="t-res") == "responsive\n"
    assert time.time() - t0 < 3, time.time() - t0
    events, status, _, _ = s.tail(run_id, thread="t-bomb", timeout=30)
    res = tool_result(events)
    assert res["reason"] == "pids_limit", res
    assert status["status"] == "failed", status
    assert events[-1]["chunk"]["code"] == "pids_limit", events[-1]
    # the bomb is still raging in its sandbox; stats see it, destroy ends it
    st = shimctl(s, "t-bomb", "--stats")
    assert st.returncode == 0, st.stderr
    procs = int(re.search(r"procs=(\d+)", st.stdout).group(1))
    assert procs > 50, st.stdout
    t0 = time.time()
    r = shimctl(s, "t-bomb", "--destroy")
    assert r.returncode == 0, r.stderr
    assert time.time() - t0 < 5, time.time() - t0
    assert poll(lambda: not sandbox_cgroups(s, "t-bomb"), 5), sandbox_cgroups(s, "t-bomb")


def test_cpu_max_throttles(s):
    # cpu_max = 50000 100000 in this suite: half a CPU for a busy loop of 4 threads
    run_ok(s, "true", thread="t-cpu")
    st0 = shimctl(s, "t-cpu", "--stats").stdout
    t0 = time.monotonic()
    run_ok(s, "python3 -c 'import multiprocessing as mp, time\n"
              "def spin(_):\n"
              "    t = time.monotonic()\n"
              "    while time.monotonic() - t < 1.0: pass\n"
              "mp.Pool(4).map(spin, range(4))'", thread="t-cpu")
    wall = time.monotonic() - t0
    used = (int(re.search(r"cpu_usec=(\d+)", shimctl(s, "t-cpu", "--stats").stdout).group(1))
            - int(re.search(r"cpu_usec=(\d+)", st0).group(1))) / 1e6
    assert 0.25 < used / wall < 0.7, (used, wall)


def test_exec_timeout(s):
    t0 = time.time()
    r = shimctl(s, "t-timeout", "--timeout", "1000", "--", "sleep", "10000")
    took = time.time() - t0
    assert "timeout (exit_code 137, signal 9)" in r.stderr, r.stderr
    assert r.returncode == 137, r.returncode
    assert 0.9 < took < 4, took


def test_sandbox_stats(s):
    run_ok(s, "true", thread="t-stats")
    st = shimctl(s, "t-stats", "--stats")
    assert st.returncode == 0, st.stderr
    m = re.fullmatch(r"cpu_usec=(\d+) procs=(\d+)\n", st.stdout)
    assert m and m.group(2) == "1", st.stdout  # only the init is alive
    before = int(m.group(1))
    run_ok(s, "python3 -c 'import time; t = time.process_time()\n"
              "while time.process_time() - t < 0.2: pass'", thread="t-stats")
    after = int(re.search(r"cpu_usec=(\d+)", shimctl(s, "t-stats", "--stats").stdout).group(1))
    assert after - before >= 150000, (before, after)
    r = shimctl(s, "t-no-such-sandbox", "--stats")
    assert r.returncode == 2 and "SANDBOX_STATS failed" in r.stderr, r.stderr


# --- exec output buffer and re-attach ------------------------------------------------

def exec_list(s):
    r = shimctl(s, "-", "--list")
    assert r.returncode == 0, r.stderr
    return {int(line.split()[0]): line.split()[2] for line in r.stdout.splitlines()}


def detach_exec(s, key, *argv):
    r = shimctl(s, key, "--detach", "--", *argv)
    assert r.returncode == 0, r.stderr
    return int(re.fullmatch(r"exec_id=(\d+)\n", r.stdout).group(1))


def detach_gated(s, key, script):
    """Start sh -c SCRIPT detached, but let it run only once shimctl is gone: an
    exec that ends while its starter is still connected is delivered there."""
    gate = f"gate-{time.monotonic_ns()}"
    eid = detach_exec(s, key, "sh", "-c",
                      f"while [ ! -e /workspace/{gate} ]; do sleep 0.01; done; {script}")
    with open(os.path.join(workspace(s, key), gate), "w"):
        pass
    return eid


def shim_rss_kib(s):
    with open(f"/proc/{s.procs['containerd-shim'].pid}/status") as f:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", f.read(), re.M).group(1))


def test_flood_of_output_keeps_shim_memory_bounded(s):
    # attached: backpressure (max_pending_output) bounds what is queued to the peer
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    with subprocess.Popen([SHIMCTL, sock, "t-flood", "--", "head", "-c", "300M", "/dev/zero"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
        total, peak = 0, 0
        while True:
            chunk = p.stdout.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            peak = max(peak, shim_rss_kib(s))
        p.wait(timeout=30)
    assert total == 300 << 20, total
    # detached: nobody reads, the exec runs on, the ring keeps 64 KiB per stream
    eid = detach_exec(s, "t-flood", "head", "-c", "300M", "/dev/zero")
    assert poll(lambda: exec_list(s).get(eid) == "ended", 30), exec_list(s)
    peak = max(peak, shim_rss_kib(s))
    r = shimctl(s, "-", "--attach", str(eid))
    assert r.returncode == 0 and len(r.stdout) == 65536, (r.returncode, len(r.stdout))
    assert f"dropped {(300 << 20) - 65536} bytes of stream 1" in r.stderr, r.stderr
    print(f"  shim RSS peak while streaming 2 x 300 MiB: {peak // 1024} MiB")
    assert peak < 64 * 1024, peak


def test_exec_reattach_replays_then_streams_live(s):
    eid = detach_exec(s, "t-attach", "sh", "-c",
                      "for i in 1 2 3 4 5 6 7 8; do echo out$i; echo err$i >&2; sleep 0.1; done;"
                      " exit 3")
    assert exec_list(s).get(eid) == "running"  # nobody attached, still running
    time.sleep(0.25)  # let part of the output happen while detached
    r = shimctl(s, "-", "--attach", str(eid))
    # shimctl checks every offset is contiguous from 0 (no gap between replay and live)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "".join(f"out{i}\n" for i in range(1, 9)), r.stdout
    assert r.stderr.startswith("".join(f"err{i}\n" for i in range(1, 9))), r.stderr
    assert f"exec {eid}: exit (exit_code 3, signal 0)" in r.stderr, r.stderr
    assert eid not in exec_list(s)  # released once its EXEC_EXIT went out


def test_exec_buffer_bounded_with_dropped_marker(s):
    eid = detach_gated(s, "t-attach", "head -c 200000 /dev/zero | tr '\\0' a; printf END")
    assert poll(lambda: exec_list(s).get(eid) == "ended", 10), exec_list(s)
    r = shimctl(s, "-", "--from", "5", "0", "--attach", str(eid))
    assert r.returncode == 0, r.stderr
    # 200003 bytes written, 64 KiB kept: the first chunk says what was lost after offset 5
    assert f"dropped {200003 - 65536 - 5} bytes of stream 1" in r.stderr, r.stderr
    assert len(r.stdout) == 65536 and r.stdout.endswith("aaaEND"), len(r.stdout)
    r = shimctl(s, "-", "--attach", str(eid))
    assert r.returncode == 2 and "No such file" in r.stderr, r.stderr  # released


def test_exec_reattach_from_an_offset(s):
    eid = detach_gated(s, "t-attach", "printf abcdef; printf XYZ >&2")
    assert poll(lambda: exec_list(s).get(eid) == "ended", 10), exec_list(s)
    r = shimctl(s, "-", "--from", "9", "0", "--attach", str(eid))
    assert r.returncode == 2 and "offset beyond the end" in r.stderr, r.stderr
    r = shimctl(s, "-", "--from", "3", "1", "--attach", str(eid))
    assert r.returncode == 0, r.stderr
    assert r.stdout == "def", r.stdout
    assert r.stderr.startswith("YZ"), r.stderr


# --- protocol robustness ---------------------------------------------------------------

EINVAL, EBADMSG, ENOENT, ENOMSG = 22, 74, 2, 42


def client(s):
    return Client(os.path.join(s.dir, "run", "containerd-shim.sock"))


def test_malformed_requests_are_rejected_cleanly(s):
    c = client(s)
    t, b = c.call("SANDBOX_ENSURE", {"key": "t-mal", "unknown_field": [1, {"x": None}]})
    assert t == REPLY and b["sandbox_id"] == sandbox_id("t-mal"), b
    good = {"sandbox_id": b["sandbox_id"], "argv": ["true"], "env": ["PATH=/usr/bin:/bin"],
            "cwd": "/workspace"}
    cases = [
        ("SANDBOX_ENSURE", {"key": ""}, -EINVAL),
        ("SANDBOX_ENSURE", {"key": "k" * 300}, -EINVAL),
        ("SANDBOX_ENSURE", {"key": "a\0b"}, -EBADMSG),
        ("SANDBOX_ENSURE", {"key": 5}, -EBADMSG),
        ("SANDBOX_ENSURE", {}, -EBADMSG),
        ("EXEC_START", {**good, "env": ["=x"]}, -EINVAL),
        ("EXEC_START", {**good, "env": ["NOEQUALS"]}, -EINVAL),
        ("EXEC_START", {**good, "argv": ["a\0b"]}, -EBADMSG),
        ("EXEC_START", {**good, "argv": []}, -EINVAL),
        ("EXEC_START", {**good, "argv": [""]}, -EINVAL),
        ("EXEC_START", {**good, "argv": ["x"] * 100000}, -EINVAL),
        ("EXEC_START", {**good, "argv": ["x" * 300000]}, -7),  # E2BIG
        ("EXEC_START", {**good, "cwd": "relative"}, -EINVAL),
        ("EXEC_START", {**good, "timeout_ms": -5}, -EINVAL),
        ("EXEC_START", {**good, "argv": "true"}, -EBADMSG),
        ("EXEC_START", {**good, "sandbox_id": "0000000000000000"}, -ENOENT),
        ("EXEC_KILL", {"exec_id": 1, "signal": 0}, -EINVAL),
        ("EXEC_KILL", {"exec_id": 1, "signal": 999}, -EINVAL),
        ("EXEC_KILL", {"exec_id": 10**12, "signal": 9}, -ENOENT),
        ("EXEC_ATTACH", {"exec_id": 10**12, "stdout_offset": 0, "stderr_offset": 0}, -ENOENT),
        ("EXEC_ATTACH", {"exec_id": -1, "stdout_offset": 0, "stderr_offset": 0}, -EBADMSG),
        ("SANDBOX_STATS", {"sandbox_id": "nope"}, -ENOENT),
        ("SANDBOX_DESTROY", {"sandbox_id": "nope"}, -ENOENT),
    ]
    wrong = []
    for name, body, code in cases:
        t, b = c.call(name, body)
        if t != ERROR or b.get("code") != code or not b.get("message"):
            wrong.append((name, {k: (v if len(repr(v)) < 40 else "…") for k, v in body.items()},
                          t, b))
    assert not wrong, wrong
    # the same connection still works, unknown fields are ignored
    t, b = c.call("EXEC_START", {**good, "argv": ["sh", "-c", "echo ok"], "extra": {"a": [1]}})
    assert t == REPLY, b
    out = b""
    while True:
        f = c.pushes.pop(0) if c.pushes else c.read()
        if f[0] == 40 and f[2]["exec_id"] == b["exec_id"]:
            out += f[2]["data"]
        if f[0] == 41 and f[2]["exec_id"] == b["exec_id"]:
            assert (f[2]["reason"], f[2]["exit_code"]) == ("exit", 0), f
            break
    assert out == b"ok\n"
    c.close()


def test_framing_errors_drop_only_that_connection(s):
    for data in (struct.pack(">I", 0x7fffffff),             # over max_frame
                 struct.pack(">I", 3) + b"\xc1\xc1\xc1",  # not msgpack
                 struct.pack(">I", 1) + b"\x90",            # too short
                 (lambda p: struct.pack(">I", len(p)) + p)(pack([32, 1]))):  # not [t, id, body]
        c = client(s)
        c.raw(data)
        assert c.closed(), data
    c = client(s)
    c.send(99, 7, {})  # unknown message type: an ERROR, the connection stays
    t, rid, b = c.read()
    assert (t, rid, b["code"]) == (ERROR, 7, -ENOMSG), (t, rid, b)
    t, b = c.call("EXEC_LIST", {})
    assert t == REPLY and isinstance(b["execs"], list), b
    c.close()
    assert run_ok(s, "echo alive", thread="t-mal") == "alive\n"


# --- kill and lifecycle ------------------------------------------------------------------

def start_daemon_in(s, thread, marker):
    """A double-forked, setsid'd, SIGTERM/SIGHUP-ignoring daemon, named marker
    (left running by a run of the keep_processes harness: KEEP_HARNESS)."""
    run_ok(s, "setsid bash -c 'trap \"\" TERM HUP; (trap \"\" TERM HUP; "
              f"exec -a {marker} sleep 9999) &' </dev/null >/dev/null 2>&1; echo started",
           thread=thread, harness="keep")
    pids = poll(lambda: host_pids(marker), 5)
    assert len(pids) == 1, pids
    return pids[0]


def test_daemon_gone_after_destroy(s):
    marker = f"rwmarker-destroy-{os.getpid()}"
    pid = start_daemon_in(s, "t-daemon", marker)
    os.kill(pid, signal.SIGTERM)  # ignored
    assert host_pids(marker) == [pid]
    assert sandbox_cgroups(s, "t-daemon"), "no cgroup for the sandbox"
    r = shimctl(s, "t-daemon", "--destroy")
    assert r.returncode == 0, r.stderr
    assert host_pids(marker) == []  # SANDBOX_DESTROY answers once every process is dead
    assert poll(lambda: not sandbox_cgroups(s, "t-daemon"), 5), sandbox_cgroups(s, "t-daemon")
    # a later run gets a fresh sandbox, same workspace
    assert run_ok(s, "echo again > /workspace/f; cat /workspace/f", thread="t-daemon") == "again\n"


def test_no_zombies_after_1000_orphans(s):
    py = ("import os, time\n"
          "def zombies():\n"
          "    n = 0\n"
          "    for p in os.listdir('/proc'):\n"
          "        if p.isdigit():\n"
          "            try:\n"
          "                n += open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] == 'Z'\n"
          "            except OSError: pass\n"
          "    return n\n"
          "for i in range(1000):\n"
          "    if os.fork() == 0:\n"
          "        if os.fork() == 0: os._exit(0)\n"  # the orphan: its parent is gone
          "        os._exit(0)\n"
          "    os.waitpid(-1, 0)\n"
          "deadline = time.monotonic() + 1\n"
          "while zombies() and time.monotonic() < deadline: time.sleep(0.01)\n"
          "print('zombies', zombies())\n")
    # 2000 forks: a correctness test, given time on a loaded host
    assert run_ok(s, f"python3 -c \"{py}\"", thread="t-orphans", timeout=180) == "zombies 0\n"


def shim_children(s):
    """(pid, netns) of the shim's children: the sandbox inits. A netns lives as long
    as a process in it (the shim pins none), so none left = no stray netns."""
    shim = s.procs["containerd-shim"].pid
    out = set()
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == shim:
                    out.add((int(d[6:]), os.readlink(d + "/ns/net")))
        except (OSError, ValueError):
            pass
    return out


def our_mounts(s):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if s.dir in line]


def test_100_create_destroy_cycles_leak_nothing(s):
    mounts = our_mounts(s)
    inits = shim_children(s)
    lat = []
    for i in range(100):
        t0 = time.monotonic()
        r = shimctl(s, f"t-cycle-{i % 4}", "--destroy-after", "--", "true")
        lat.append(time.monotonic() - t0)
        assert r.returncode == 0, r.stderr
        assert poll(lambda: not sandbox_cgroups(s, f"t-cycle-{i % 4}"), 5)
    assert our_mounts(s) == mounts
    # no init of a cycle is left (idle sandboxes of earlier tests may have been
    # stopped to make room: max_instances); the pool's inits are new ones, as
    # many as before once it is refilled
    assert poll(lambda: len(shim_children(s)) <= len(inits), 5), (shim_children(s), inits)
    lat.sort()
    print(f"  create+exec+destroy via shimctl: p50 {lat[50] * 1000:.1f} ms, "
          f"p99 {lat[98] * 1000:.1f} ms")


def test_destroy_while_spawning_leaves_nothing(s):
    """A SANDBOX_DESTROY right behind its SANDBOX_ENSURE reaches the sandbox while
    its spawner still runs (the shim's loop does not wait for it): the spawn
    completes, the init is killed, both are answered, and no init, zombie,
    cgroup or mount is left."""
    from ipc import Ipc, IpcError
    mounts = our_mounts(s)
    inits = shim_children(s)
    c = Ipc(os.path.join(s.dir, "run", "containerd-shim.sock"), timeout=30)
    try:
        outcomes = {"created": 0, "refused": 0}
        for i in range(30):
            key = f"t-spawnkill-{i}"
            ens = c.call_async("SANDBOX_ENSURE", {"key": key})
            des = c.call_async("SANDBOX_DESTROY", {"sandbox_id": sandbox_id(key), "purge": True})
            try:
                c.wait(ens)
                outcomes["created"] += 1
            except IpcError as e:
                assert "destroyed during setup" in e.message, e.message
                outcomes["refused"] += 1
            c.wait(des)
            assert poll(lambda: not sandbox_cgroups(s, key), 5), key
    finally:
        c.close()
    print(f"  ensure+destroy back to back: {outcomes}")
    # no zombie among the shim's children, and no more of them than before but
    # the pool's refill (the ENSUREs took its sandboxes; pool_size = 2)
    def zombies():
        shim, out = s.procs["containerd-shim"].pid, []
        for d in glob.glob("/proc/[0-9]*"):
            try:
                with open(d + "/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if st[0] == "Z" and int(st[1]) == shim:
                out.append(int(d[6:]))
        return out
    assert poll(lambda: not zombies(), 5), zombies()
    assert poll(lambda: len(shim_children(s)) <= len(inits) + 2, 5), (shim_children(s), inits)
    assert our_mounts(s) == mounts
    # the shim still creates sandboxes
    assert run_ok(s, "echo alive", thread="t-spawnkill-after") == "alive\n"


def test_exec_into_a_live_sandbox_is_fast(s):
    r = shimctl(s, "t-latency", "--repeat", "200", "--", "true")
    assert r.returncode == 0, r.stderr
    m = re.search(r"200 execs: p50 ([\d.]+) ms, p99 ([\d.]+) ms", r.stderr)
    assert m, r.stderr
    print(f"  exec into a live sandbox (EXEC_START → EXEC_EXIT of true): p50 {m.group(1)} ms, "
          f"p99 {m.group(2)} ms")
    assert float(m.group(1)) < 50, r.stderr  # target 3 ms; generous here: shared CI hosts


def test_control_socket_refuses_other_users(s):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    assert os.stat(sock).st_mode & 0o777 == 0o600
    r = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                        SHIMCTL, sock, "t-x", "--", "true"], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 2 and "Permission denied" in r.stderr, r.stderr


def test_kill_9_of_the_shim_leaves_nothing(s):
    """Last test of the module: it kills and restarts the shim."""
    marker = f"rwmarker-k9-{os.getpid()}"
    run_ok(s, "echo kept > /workspace/kept", thread="t-k9")
    start_daemon_in(s, "t-k9", marker)
    assert sandbox_cgroups(s, "t-k9")
    pids = host_pids(marker)
    s.kill("containerd-shim")
    # the init outlives the shim (it waits sandbox_orphan_ms for a new one):
    # nothing runs in the sandbox but the daemon, so the restart reaps it
    assert host_pids(marker) == pids
    assert sandbox_cgroups(s, "t-k9"), "cgroup gone before the restart?"
    s.start_daemon("containerd-shim")
    assert poll(lambda: "Reaped sb-" + cgroup_id(s, "t-k9") in s.log("containerd-shim"), 10), \
        s.log("containerd-shim")[-2000:]
    assert poll(lambda: not host_pids(marker), 5), host_pids(marker)
    assert not sandbox_cgroups(s, "t-k9")
    s.wait_ready()

    def runs_again():
        events, status = run(s, "cat /workspace/kept", thread="t-k9")
        return status["status"] == "completed" and stdout_text(events) == "kept\n"
    assert poll(runs_again, 15, 0.2)
