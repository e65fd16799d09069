# SPDX-License-Identifier: MIT
"""The sandbox's init is the exec'd sandbox-init helper (issue 32, DESIGN.md
"The init is an exec'd helper"): every sandbox's PID 1 is that program, maps
no shared library and nothing of the shim's, and has written fewer pages
(Anonymous) than a host `sleep` measured in the same test (the fork of the
shim it replaces had 1.8 MiB, most shared copy-on-write with the shim); the shim refuses to start without its helper or
with one someone else may write; run by hand the helper says it is not for
that."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from rwtest import BUILD, Skip, poll

SUITE_CONF = """[containerd-shim]
pool_size = 2
max_instances = 8
"""

SHIMCTL = os.path.join(BUILD, "tools", "shimctl")
HELPER = os.path.realpath(os.path.join(BUILD, "sandbox-init"))


def shimctl(s, key, *args):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    return subprocess.run([SHIMCTL, sock, key, *args], capture_output=True, text=True,
                          timeout=60)


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def rollup(pid):
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for ln in f:
            p = ln.split()
            if len(p) >= 2 and p[0].endswith(":") and p[1].isdigit():
                out[p[0][:-1]] = int(p[1])
    return out


def inits(s):
    return [c for c in children(s.procs["containerd-shim"].pid) if comm(c) == "sandbox-init"]


def test_every_init_is_the_helper_and_nothing_of_the_shim(s):
    for i in range(3):
        r = shimctl(s, f"init-{i}", "--", "/bin/true")
        assert r.returncode == 0, r.stderr
    pids = poll(lambda: (lambda p: p if len(p) >= 5 else None)(inits(s)), 15)
    assert pids, inits(s)  # three sandboxes and the pool's two
    shim_exe = os.path.realpath(os.path.join(BUILD, "containerd-shim"))
    checked = 0
    for pid in pids:
        try:  # a pool's init may be stopped and replaced meanwhile
            exe = os.path.realpath(f"/proc/{pid}/exe", strict=True)
            with open(f"/proc/{pid}/maps") as f:
                lines = f.read().splitlines()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        checked += 1
        assert exe == HELPER, pid
        files = {ln.split(None, 5)[5].strip() for ln in lines if len(ln.split(None, 5)) == 6}
        files = {p for p in files if p.startswith("/")}
        if any("libasan" in p for p in files):
            raise Skip("an --enable-asan build: the helper is not static there")
        # its own file, nothing else: no libc.so, no libevent, not the shim
        assert files == {HELPER}, (pid, files)
        assert shim_exe not in files
        assert cmdline == b"sandbox-init\0", pid
        assert environ == b"", pid  # an empty environment
    assert checked >= 3, (checked, pids)


def test_an_idle_init_has_fewer_pages_of_its_own_than_a_host_sleep(s):
    r = shimctl(s, "init-mem", "--", "/bin/true")
    assert r.returncode == 0, r.stderr
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.5)
        # Anonymous: the pages a process wrote itself (not the page cache of
        # its program, which is dirty for a while after a build and then
        # counts as private when one process maps it)
        base = rollup(sleeper.pid)
        pids = inits(s)
        assert pids
        for pid in pids:
            m = rollup(pid)
            assert m["Anonymous"] <= base["Anonymous"], (pid, m, base)
    finally:
        sleeper.kill()
        sleeper.wait()


def run_shim_from(d, s):
    """containerd-shim copied into d, on a configuration of its own; its
    exit status and output (it must exit on its own within 20 s)."""
    conf = os.path.join(d, "c.conf")
    with open(conf, "w") as f:
        f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\n"
                "[containerd-shim]\nmax_instances = 2\npool_size = 0\n")
    p = subprocess.run([os.path.join(d, "containerd-shim"), "--config", conf],
                       capture_output=True, text=True, timeout=20)
    return p.returncode, p.stdout + p.stderr


def test_the_shim_refuses_to_start_without_its_helper(s):
    d = tempfile.mkdtemp(prefix="rw-init-")
    try:
        os.chmod(d, 0o755)
        shutil.copy2(os.path.join(BUILD, "containerd-shim"), d)
        rc, out = run_shim_from(d, s)
        assert rc != 0, out
        assert "Failed to open the sandbox-init helper next to the shim" in out, out
        assert "No such file or directory" in out, out
        # one that others may write: refused, it would run as root
        shutil.copy2(HELPER, os.path.join(d, "sandbox-init"))
        os.chmod(os.path.join(d, "sandbox-init"), 0o775)
        rc, out = run_shim_from(d, s)
        assert rc != 0, out
        assert "Operation not permitted" in out, out
    finally:
        subprocess.run(["umount", "-R", "-l", d], stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


def test_run_by_hand_it_says_it_is_not_for_that(s):
    p = subprocess.run([HELPER], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2, p
    assert "started by containerd-shim only" in p.stderr, p.stderr
    # a socket that is not the shim's, and a packet that is no configuration:
    # SETUP_FAILED on the socket, exit 1, nothing started
    import socket
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.send(b"not a configuration")
    fd = b.fileno()
    p = subprocess.Popen(["sh", "-c", f'exec "$0" 3<&{fd} {fd}<&-', HELPER], pass_fds=(fd,))
    b.close()
    assert p.wait(timeout=10) == 1
    a.settimeout(5)
    msg = a.recv(4096)
    a.close()
    assert b"configuration: malformed" in msg, msg
