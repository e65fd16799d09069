# SPDX-License-Identifier: MIT
"""A sandbox cannot exhaust a per-user kernel quota of a host user
(docs/SECURITY.md, "Sandbox user namespace and kernel quotas"): its user
namespace is owned by host_uid, not root, and has its own small limits. A
sandbox that opens inotify instances until EMFILE stops at
userns_max_inotify_instances; root on the host and a second sandbox each still
get one."""
import ctypes
import fcntl
import os
import struct

from rwtest import poll
from t_sandbox import HOST_UID, run_ok, workspace

LIMIT = 12
SUITE_CONF = f"""[containerd-shim]
userns_max_inotify_instances = {LIMIT}
userns_max_namespaces = 5
"""
NS_GET_OWNER_UID = 0xB704  # _IO(0xb7, 0x4)

HOG = ("import ctypes, os, time\n"
       "libc = ctypes.CDLL(None, use_errno=True)\n"
       "fds = []\n"
       "while len(fds) < 10000:\n"
       "    fd = libc.inotify_init()\n"
       "    if fd < 0:\n"
       "        err = ctypes.get_errno(); break\n"
       "    fds.append(fd)\n"
       "open('/workspace/count.tmp', 'w').write(f'{len(fds)} {err}')\n"
       "os.rename('/workspace/count.tmp', '/workspace/count')\n"
       "t = time.time()\n"
       "while not os.path.exists('/workspace/release') and time.time() - t < 120:\n"
       "    time.sleep(0.05)\n")


def _sandbox_inits(s):
    """Host pids of the sandbox inits of our shim (its children named sandbox-init)."""
    pid = s.procs["containerd-shim"].pid
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/children") as f:
            for c in f.read().split():
                try:
                    with open(f"/proc/{c}/comm") as g:
                        if g.read().strip() == "sandbox-init":
                            out.append(int(c))
                except OSError:
                    pass
    return out


def test_user_namespace_owned_by_host_uid(s):
    run_ok(s, "true", thread="t-uc-owner")
    inits = _sandbox_inits(s)
    assert inits
    for pid in inits:
        fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        try:
            buf = fcntl.ioctl(fd, NS_GET_OWNER_UID, b"\0" * 4)
        finally:
            os.close(fd)
        assert struct.unpack("I", buf)[0] == HOST_UID, pid


def test_limits_set_in_the_sandbox_namespace(s):
    out = run_ok(s, "cd /proc/sys/user; for f in max_inotify_instances max_inotify_watches"
                 " max_user_namespaces max_net_namespaces; do echo $f=$(cat $f); done;"
                 " echo 99 > max_inotify_instances 2>/dev/null || echo ro", thread="t-uc-owner")
    assert out == (f"max_inotify_instances={LIMIT}\nmax_inotify_watches=8192\n"
                   "max_user_namespaces=5\nmax_net_namespaces=5\nro\n"), out


def test_inotify_exhaustion_stays_in_the_sandbox(s):
    ws = workspace(s, "t-uc-hog")
    run_ok(s, "true", thread="t-uc-hog")  # creates the workspace
    for f in ("count", "release"):
        if os.path.exists(os.path.join(ws, f)):
            os.unlink(os.path.join(ws, f))
    hog = s.start_run(f"python3 -c \"$(printf '%s' '{HOG.encode().hex()}' | "
                      "python3 -c 'import sys; sys.stdout.write(bytes.fromhex(sys.stdin.read()).decode())')\"",
                      thread="t-uc-hog")
    try:
        assert poll(lambda: os.path.exists(os.path.join(ws, "count")), 60)
        with open(os.path.join(ws, "count")) as f:
            n, err = map(int, f.read().split())
        assert n == LIMIT and err == 24, (n, err)  # EMFILE at the sandbox's own limit
        # Root on the host still gets one (it was root who was charged before).
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init()
        assert fd >= 0, os.strerror(ctypes.get_errno())
        os.close(fd)
        # So does another sandbox.
        out = run_ok(s, "python3 -c 'import ctypes; l = ctypes.CDLL(None); "
                     "print(l.inotify_init() >= 0)'", thread="t-uc-other")
        assert out == "True\n", out
    finally:
        open(os.path.join(ws, "release"), "w").close()
    rec = s.wait_terminal(hog, thread="t-uc-hog", timeout=60)
    assert rec["status"] == "completed", rec
