# SPDX-License-Identifier: MIT
"""The workspace file API (SANDBOX.md §6.H 32-35, §7 "Filesystem and file API"):
/threads/{id}/files/{path} through routerd, coordinatord (THREAD_FILE) and the
shim (SANDBOX_FILE). A round trip of every operation; files shared with the
runs of the thread (owned by the sandbox uid both ways); every §7 path that a
URL can carry refused with a typed 400; symlink and /proc magic-link escapes
planted by a run; FIFOs and devices; a hardlink to a file outside; the size
cap; and a run flipping ws/d between a directory and a symlink to / while the
API writes d/f over and over."""
import hashlib
import http.client
import json
import os
import subprocess
import time
import urllib.parse

from rwtest import BUILD, stdout_text

# 1 MiB cap for the API; routerd takes file bodies beyond it (max_file_body,
# while max_body stays 1M for the other routes), so the shim's cap is what a
# too large PUT meets.
SUITE_CONF = """[routerd]
max_file_body = 4M

[containerd-shim]
file_api_max_bytes = 1M
# the watch tests see a watch expire in seconds, not a minute
watch_idle_ms = 1500
"""

CAP = 1024 * 1024
HOST_UID = 100000  # [containerd-shim] host_uid default
SANDBOX_UID = 1000  # sandbox_uid default


def sandbox_id(thread):
    return hashlib.sha256(thread.encode()).hexdigest()[:16]


def workspace(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread), "workspace")


def req(s, method, path, body=None, timeout=10, conn=None, headers=None):
    """(status, headers, raw body) of one request; conn: a kept-alive connection."""
    c = conn or http.client.HTTPConnection("127.0.0.1", s.port, timeout=timeout)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    if conn is None:
        c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, data


def jreq(s, method, path, body=None, **kw):
    st, h, data = req(s, method, path, body, **kw)
    if data:
        assert h["content-type"].startswith("application/json"), (st, h, data)
        return st, json.loads(data)
    return st, None


def files(thread, rel=""):
    return f"/threads/{thread}/files/{rel}"


def run_ok(s, thread, cmd):
    run = s.start_run(cmd, thread=thread)
    events, status, _, _ = s.tail(run, thread=thread)
    assert status["status"] == "completed", (status, stdout_text(events, "process.stderr"))
    return stdout_text(events)


def ready(s):
    """The shim link is up (the suite starts when routerd is; coordinatord
    may still be connecting to the shim)."""
    deadline = time.time() + 15
    while time.time() < deadline:
        if s.http("GET", "/readyz")[0] == 200:
            return
        time.sleep(0.05)
    raise AssertionError("not ready: " + repr(s.http("GET", "/readyz")))


def test_round_trip(s):
    ready(s)
    t = "t-files"
    st, js = jreq(s, "PUT", files(t, "a.txt"), b"hello\n")
    assert (st, js) == (201, {"created": True}), (st, js)
    st, h, data = req(s, "GET", files(t, "a.txt"))
    assert (st, data) == (200, b"hello\n")
    assert h["content-type"] == "application/octet-stream" and h["content-length"] == "6", h
    st, js = jreq(s, "PUT", files(t, "a.txt"), b"bye\n")
    assert (st, js) == (200, {"created": False}), (st, js)
    assert req(s, "GET", files(t, "a.txt"))[2] == b"bye\n"

    assert jreq(s, "POST", files(t, "d") + "?op=mkdir") == (201, {"created": True})
    st, js = jreq(s, "POST", files(t, "d") + "?op=mkdir")
    assert st == 409 and js["code"] == "exists", (st, js)
    blob = bytes(range(256)) * 3
    assert jreq(s, "PUT", files(t, "d/b.bin") + "?mode=0600", blob)[0] == 201
    assert req(s, "GET", files(t, "d/b.bin"))[2] == blob
    assert jreq(s, "PUT", files(t, "empty"), b"")[0] == 201
    st, h, data = req(s, "GET", files(t, "empty"))
    assert (st, data, h["content-length"]) == (200, b"", "0")

    # listings (root with and without the slash) and lstat
    for root in (f"/threads/{t}/files", f"/threads/{t}/files/"):
        st, js = jreq(s, "GET", root)
        assert st == 200 and js["type"] == "directory", (st, js)
        assert [(e["name"], e["type"], e["mode"]) for e in js["entries"]] == [
            ("a.txt", "file", "0644"), ("d", "directory", "0755"), ("empty", "file", "0644")], js
        assert js["entries"][0]["size"] == 4 and js["entries"][0]["mtimeNs"] > 1e18
    st, js = jreq(s, "GET", files(t, "d"))
    assert st == 200 and [(e["name"], e["size"], e["mode"]) for e in js["entries"]] == [
        ("b.bin", 768, "0600")], js
    st, js = jreq(s, "GET", files(t, "d/b.bin") + "?stat=1")
    assert st == 200 and js["type"] == "file" and js["mode"] == "0600" and js["size"] == 768, js
    assert set(js) == {"type", "mode", "size", "mtimeNs"}, js
    st, js = jreq(s, "GET", files(t, "d") + "?stat=1")
    assert st == 200 and js["type"] == "directory", js

    # on the host: the sandbox user's, the modes exactly as asked (no umask)
    ws = workspace(s, t)
    for rel, mode in (("a.txt", 0o644), ("d", 0o755), ("d/b.bin", 0o600), ("empty", 0o644)):
        st_ = os.lstat(os.path.join(ws, rel))
        assert (st_.st_uid, st_.st_gid, st_.st_mode & 0o7777) == (HOST_UID, HOST_UID, mode), rel
    # a replace keeps the mode when none is given, takes the one given
    assert jreq(s, "PUT", files(t, "d/b.bin"), b"x")[0] == 200
    assert os.lstat(os.path.join(ws, "d/b.bin")).st_mode & 0o777 == 0o600
    assert jreq(s, "PUT", files(t, "d/b.bin") + "?mode=755", b"y")[0] == 200
    assert os.lstat(os.path.join(ws, "d/b.bin")).st_mode & 0o777 == 0o755
    assert not [n for n in os.listdir(ws) + os.listdir(ws + "/d") if n.startswith(".wsfs")]

    # rename: never over an existing name
    assert jreq(s, "POST", files(t, "a.txt") + "?op=rename&to=d/c.txt") == (200, {"renamed": True})
    st, js = jreq(s, "GET", files(t, "a.txt"))
    assert st == 404 and js["code"] == "not_found", (st, js)
    assert req(s, "GET", files(t, "d/c.txt"))[2] == b"bye\n"
    st, js = jreq(s, "POST", files(t, "empty") + "?op=rename&to=d/c.txt")
    assert st == 409 and js["code"] == "exists", (st, js)
    assert req(s, "GET", files(t, "d/c.txt"))[2] == b"bye\n"

    # writes onto a directory, reads of a missing one, removes
    st, js = jreq(s, "PUT", files(t, "d"), b"x")
    assert st == 409 and js["code"] == "is_directory", (st, js)
    st, js = jreq(s, "DELETE", files(t, "d"))
    assert st == 409 and js["code"] == "not_empty", (st, js)
    for rel in ("d/c.txt", "d/b.bin", "d", "empty"):
        st, h, data = req(s, "DELETE", files(t, rel))
        assert (st, data) == (204, b""), (rel, st, data)
    st, js = jreq(s, "DELETE", files(t, "d"))
    assert st == 404 and js["code"] == "not_found", (st, js)
    st, js = jreq(s, "PUT", files(t, "nodir/f"), b"x")
    assert st == 404 and js["code"] == "not_found", (st, js)
    assert jreq(s, "GET", files(t)) == (200, {"type": "directory", "entries": []})
    assert os.listdir(ws) == []


def test_bad_requests(s):
    ready(s)
    t = "t-files-bad"
    for method, path, code in (
            ("POST", files(t, "x"), "bad_request"),                    # no op
            ("POST", files(t, "x") + "?op=chmod", "bad_request"),
            ("POST", files(t, "x") + "?op=rename", "bad_request"),     # no to
            ("PUT", files(t, "x") + "?mode=0999", "bad_request"),
            ("PUT", files(t, "x") + "?mode=01777", "bad_request"),
            ("PUT", files(t, "x") + "?mode=rw", "bad_request"),
            ("POST", files(t, "x") + "?op=rename&to=../y", "invalid_path"),
            ("POST", files(t, "x") + "?op=rename&to=/y", "invalid_path")):
        st, js = jreq(s, method, path, b"")
        assert st == 400 and js["code"] == code, (method, path, st, js)
    st, js = jreq(s, "PATCH", files(t, "x"), b"")
    assert st == 405 and js["code"] == "method_not_allowed", (st, js)
    st, js = jreq(s, "GET", "/threads/%01/files/x")
    assert st == 400 and js["code"] == "invalid_thread_id", (st, js)


def test_api_and_runs_share_files(s):
    ready(s)
    t = "t-files-share"
    # a thread that never ran reads as an empty workspace
    assert jreq(s, "GET", files(t)) == (200, {"type": "directory", "entries": []})
    assert jreq(s, "GET", files(t) + "?stat=1")[1]["type"] == "directory"
    st, js = jreq(s, "GET", files(t, "x"))
    assert st == 404 and js["code"] == "not_found", (st, js)
    assert not os.path.exists(workspace(s, t))
    # seeded before the first run: the run sees it as its own user's file
    assert jreq(s, "PUT", files(t, "in/api.txt"), b"x")[0] == 404  # no parent
    assert jreq(s, "POST", files(t, "in") + "?op=mkdir&mode=0750")[0] == 201
    assert jreq(s, "PUT", files(t, "in/api.txt") + "?mode=0640", b"from the API\n")[0] == 201
    out = run_ok(s, t, "cd /workspace && cat in/api.txt && stat -c '%u %g %a' in in/api.txt && "
                       "echo appended >> in/api.txt && printf 'from a run' > run.txt && "
                       "mkdir -p made/deep && echo deep > made/deep/f")
    assert out == f"from the API\n{SANDBOX_UID} {SANDBOX_UID} 750\n{SANDBOX_UID} {SANDBOX_UID} 640\n", out
    assert req(s, "GET", files(t, "in/api.txt"))[2] == b"from the API\nappended\n"
    assert req(s, "GET", files(t, "run.txt"))[2] == b"from a run"
    assert req(s, "GET", files(t, "made/deep/f"))[2] == b"deep\n"
    # a name that is not UTF-8 (made by a run) is listed with U+FFFD
    run_ok(s, t, "touch \"/workspace/bad$(printf '\\377')name\"")
    names = [e["name"] for e in jreq(s, "GET", files(t))[1]["entries"]]
    assert names == ["bad\ufffdname", "in", "made", "run.txt"], names
    # written by the API while the sandbox is live, seen by the next exec
    assert jreq(s, "PUT", files(t, "run.txt"), b"replaced")[0] == 200
    assert run_ok(s, t, "cat /workspace/run.txt; stat -c %u /workspace/run.txt") == \
        f"replaced{SANDBOX_UID}\n"


# The §7 paths a URL can carry, as the raw text after /files/, each with the
# code of the 400. Also refused: %2F-encoded absolute paths.
BAD_PATHS = [
    ("../../etc/passwd", "invalid_path"),
    ("/etc/shadow", "invalid_path"),            # /files//etc/shadow
    ("%2Fetc%2Fshadow", "invalid_path"),
    ("a/../../x", "invalid_path"),
    ("./../x", "invalid_path"),
    ("/etc", "invalid_path"),                   # //etc
    ("..", "invalid_path"),
    (".", "invalid_path"),
    ("a/./b", "invalid_path"),
    ("a//b", "invalid_path"),
    ("a/", "invalid_path"),                     # trailing slash
    ("a%00b", "invalid_path"),                  # embedded NUL
    ("%00", "invalid_path"),
    ("a%2", "invalid_path"),                    # malformed escape
    ("%FF%FEx", "invalid_path"),                # invalid UTF-8
    ("%C0%AF", "invalid_path"),                 # overlong '/'
    ("%ED%A0%80", "invalid_path"),              # a surrogate
    ("/".join(["p" * 200] * 21), "invalid_path"),  # 4220 bytes
    ("a" * 4097, "invalid_path"),
    ("n" * 256, "invalid_path"),                # one name over 255 bytes
    ("a/" * 1000 + "a", "invalid_path"),        # 1001 components
]


def test_bad_paths_are_typed_400s(s):
    ready(s)
    t = "t-files-paths"
    assert jreq(s, "PUT", files(t, "a"), b"inside")[0] == 201
    for raw, code in BAD_PATHS:
        for method, q, body in (("GET", "", None), ("GET", "?stat=1", None), ("PUT", "", b"evil"),
                                ("DELETE", "", None), ("POST", "?op=mkdir", None),
                                ("POST", "?op=rename&to=b", None)):
            st, js = jreq(s, method, files(t, raw) + q, body)
            assert st == 400 and js["code"] == code and js["error"], (raw[:40], method, q, st, js)
    # empty: nothing to write, remove, make or rename
    for method, q, body in (("PUT", "", b"evil"), ("DELETE", "", None), ("POST", "?op=mkdir", None),
                            ("POST", "?op=rename&to=b", None)):
        st, js = jreq(s, method, files(t) + q, body)
        assert st == 400 and js["code"] == "invalid_path", (method, q, st, js)
    # nothing landed anywhere
    assert os.listdir(workspace(s, t)) == ["a"]
    assert req(s, "GET", files(t, "a"))[2] == b"inside"
    with open("/etc/passwd", "rb") as f:
        assert b"evil" not in f.read()
    # what is fine: UTF-8 names, %2F as a slash, 255-byte names, 256 components
    assert jreq(s, "PUT", files(t, "%C3%A9t%C3%A9.txt"), b"\xc3\xa9")[0] == 201
    assert "été.txt" in os.listdir(workspace(s, t))
    assert jreq(s, "POST", files(t, "sub") + "?op=mkdir")[0] == 201
    assert jreq(s, "PUT", files(t, "sub%2Fx"), b"slash")[0] == 201
    assert req(s, "GET", files(t, "sub/x"))[2] == b"slash"
    assert jreq(s, "PUT", files(t, "n" * 255), b"long")[0] == 201
    deep = "/".join(["q"] * 255)
    assert run_ok(s, t, f"mkdir -p /workspace/{deep} && echo ok") == "ok\n"
    assert jreq(s, "PUT", files(t, deep + "/f"), b"deep")[0] == 201
    st, js = jreq(s, "PUT", files(t, deep + "/q/f"), b"deep")
    assert st == 400 and js["code"] == "invalid_path", (st, js)


def test_symlink_and_magic_link_escapes(s):
    ready(s)
    t = "t-files-links"
    run_ok(s, t, "cd /workspace && ln -s /etc link && ln -s /proc/self/root/etc m && "
                 "ln -s ../.. up && ln -s /proc/self/root proot && mkdir in && "
                 "echo inner > in/f && ln -s in/f rel && ln -s in dirl && ln -s loop loop")
    for rel in ("link/passwd", "link", "m/passwd", "m", "up/x", "proot/etc/passwd", "loop"):
        st, js = jreq(s, "GET", files(t, rel))
        assert st == 400 and js["code"] == "escape", (rel, st, js)
    for rel in ("link/pwned", "m/pwned", "up/pwned", "proot/tmp/pwned", "link/sub/pwned"):
        st, js = jreq(s, "PUT", files(t, rel), b"pwned")
        assert st in (400, 404) and js["code"] in ("escape", "not_found"), (rel, st, js)
        st, js = jreq(s, "POST", files(t, rel) + "?op=mkdir")
        assert st == 400 and js["code"] == "escape", (rel, st, js)
    for rel in ("link/passwd", "m/hostname"):
        st, js = jreq(s, "DELETE", files(t, rel))
        assert st == 400 and js["code"] == "escape", (rel, st, js)
        st, js = jreq(s, "POST", files(t, "in/f") + "?op=rename&to=" + rel)
        assert st == 400 and js["code"] == "escape", (rel, st, js)
    for p in ("/etc/pwned", "/tmp/pwned", "/pwned"):
        assert not os.path.exists(p), p
    assert os.path.exists("/etc/passwd")
    # links that stay inside are followed; lstat shows the link itself
    assert req(s, "GET", files(t, "rel"))[2] == b"inner\n"
    assert req(s, "GET", files(t, "dirl/f"))[2] == b"inner\n"
    st, js = jreq(s, "GET", files(t, "dirl"))
    assert st == 200 and [e["name"] for e in js["entries"]] == ["f"], js
    assert jreq(s, "GET", files(t, "link") + "?stat=1")[1]["type"] == "symlink"
    # a write at a symlink's name replaces the link, never writes through it
    assert jreq(s, "PUT", files(t, "rel"), b"new")[0] == 200
    assert os.path.isfile(os.path.join(workspace(s, t), "rel"))
    assert req(s, "GET", files(t, "in/f"))[2] == b"inner\n"
    assert jreq(s, "PUT", files(t, "link"), b"not /etc")[0] == 200
    assert os.path.isdir("/etc") and not os.path.islink(os.path.join(workspace(s, t), "link"))
    # removing a link removes the link
    assert req(s, "DELETE", files(t, "m"))[0] == 204
    assert os.path.isdir("/etc")


def test_fifo_and_devices(s):
    ready(s)
    t = "t-files-fifo"
    run_ok(s, t, "mkfifo /workspace/fifo && echo ok")
    ws = workspace(s, t)
    os.mknod(os.path.join(ws, "null"), 0o666 | 0o020000, os.makedev(1, 3))  # a char device
    for rel, typ in (("fifo", "fifo"), ("null", "char_device")):
        # a client timeout: a hang fails the test instead of blocking it
        st, js = jreq(s, "GET", files(t, rel), timeout=5)
        assert st == 415 and js["code"] == "not_a_regular_file", (rel, st, js)
        st, js = jreq(s, "PUT", files(t, rel), b"data", timeout=5)
        assert st == 415 and js["code"] == "not_a_regular_file", (rel, st, js)
        assert jreq(s, "GET", files(t, rel) + "?stat=1", timeout=5)[1]["type"] == typ
    assert os.path.exists(os.path.join(ws, "fifo")) and not os.path.isfile(os.path.join(ws, "fifo"))
    assert req(s, "DELETE", files(t, "fifo"), timeout=5)[0] == 204


def test_hardlink_to_outside_is_replaced_not_written(s):
    ready(s)
    t = "t-files-hardlink"
    assert jreq(s, "PUT", files(t, "seed"), b"x")[0] == 201
    ws = workspace(s, t)
    outside = os.path.join(s.dir, "outside-secret")
    with open(outside, "wb") as f:
        f.write(b"secret\n")
    os.chmod(outside, 0o644)
    os.link(outside, os.path.join(ws, "hl"))
    assert os.stat(outside).st_nlink == 2
    assert req(s, "GET", files(t, "hl"))[2] == b"secret\n"  # a read is only a read
    assert jreq(s, "PUT", files(t, "hl"), b"overwritten\n") == (200, {"created": False})
    with open(outside, "rb") as f:
        assert f.read() == b"secret\n"
    assert os.stat(outside).st_nlink == 1
    assert os.stat(os.path.join(ws, "hl")).st_ino != os.stat(outside).st_ino
    assert req(s, "GET", files(t, "hl"))[2] == b"overwritten\n"
    # the API has the sandbox user's rights, not root's
    secret = os.path.join(ws, "root-only")
    with open(secret, "wb") as f:
        f.write(b"root\n")
    os.chmod(secret, 0o600)
    st, js = jreq(s, "GET", files(t, "root-only"))
    assert st == 403 and js["code"] == "permission_denied", (st, js)
    os.mkdir(os.path.join(ws, "root-dir"), 0o755)
    st, js = jreq(s, "PUT", files(t, "root-dir/f"), b"x")
    assert st == 403 and js["code"] == "permission_denied", (st, js)
    # a remove unlinks the name only
    os.link(outside, os.path.join(ws, "hl2"))
    assert req(s, "DELETE", files(t, "hl2"))[0] == 204
    with open(outside, "rb") as f:
        assert f.read() == b"secret\n"


def test_size_cap(s):
    ready(s)
    t = "t-files-cap"
    data = os.urandom(CAP)
    assert jreq(s, "PUT", files(t, "cap"), data)[0] == 201
    assert req(s, "GET", files(t, "cap"))[2] == data
    st, js = jreq(s, "PUT", files(t, "over"), data + b"x")
    assert st == 413 and js["code"] == "too_large", (st, js)
    assert not os.path.exists(os.path.join(workspace(s, t), "over"))
    # a file the sandbox made over the cap, and a huge sparse one, are refused
    # from their size, unread
    run_ok(s, t, f"head -c {CAP + 1} /dev/zero > /workspace/over && echo ok")
    with open(os.path.join(workspace(s, t), "sparse"), "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, no block of it allocated
    for rel in ("over", "sparse"):
        st, js = jreq(s, "GET", files(t, rel))
        assert st == 413 and js["code"] == "too_large", (rel, st, js)
        assert jreq(s, "GET", files(t, rel) + "?stat=1")[1]["size"] in (CAP + 1, 1 << 40)
    # routerd's own limit (max_file_body 4M) answers first for bigger bodies,
    # and max_body (1M) still holds everywhere else
    st, js = jreq(s, "PUT", files(t, "huge"), b"x" * (4 * CAP + 1))
    assert st == 413 and js["code"] == "payload_too_large", (st, js)
    st, js = jreq(s, "POST", files(t, "x") + "?op=mkdir", b"x" * (CAP + 1))
    assert st == 413 and js["code"] == "payload_too_large", (st, js)
    st, js = jreq(s, "POST", "/runs", b"x" * (CAP + 1))
    assert st == 413 and js["code"] == "payload_too_large", (st, js)


FLIPPER = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir("/workspace")
os.mkdir("d")
os.symlink("/", "d.twin")
open("flipping", "w").close()
end = time.time() + 60
n = 0
while time.time() < end and os.path.exists("flipping"):
    for _ in range(1000):
        libc.renameat2(-100, b"d", -100, b"d.twin", 2)  # RENAME_EXCHANGE
    n += 1000
print(n)
"""


def test_symlink_flip_race(s):
    """A run flips ws/d between a directory and a symlink to / (RENAME_EXCHANGE
    with a twin) while the API writes d/f and makes d/sub: nothing may land
    outside the workspace. Spec scale: 10k API calls; the flipper typically
    makes about a million flips meanwhile (only >= 1000 is asserted: no timed
    assertions)."""
    ready(s)
    t = "t-files-race"
    assert jreq(s, "PUT", files(t, "seed"), b"x")[0] == 201
    ws = workspace(s, t)
    for p in ("/f", "/sub", "/tmp/f"):
        assert not os.path.exists(p), p
    run = s.start_run(f"python3 -c '{FLIPPER}'", thread=t)
    deadline = time.time() + 20
    while not os.path.exists(os.path.join(ws, "flipping")):
        assert time.time() < deadline, "flipper did not start"
        time.sleep(0.05)
    outcomes = {}
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    try:
        for i in range(10000):
            if i % 10 == 9:
                st, _, data = req(s, "POST", files(t, "d/sub") + "?op=mkdir", conn=conn)
            else:
                st, _, data = req(s, "PUT", files(t, "d/f"), b"%d" % i, conn=conn)
            code = json.loads(data)["code"] if st >= 400 else "ok"
            outcomes[code] = outcomes.get(code, 0) + 1
    finally:
        conn.close()
        os.unlink(os.path.join(ws, "flipping"))
    events, status, _, _ = s.tail(run, thread=t)
    assert status["status"] == "completed", status
    flips = int(stdout_text(events))
    # only clean outcomes: written inside, refused as an escape, or "exists"
    # (mkdir of d/sub when it is there)
    assert set(outcomes) <= {"ok", "escape", "exists"}, outcomes
    assert outcomes.get("ok", 0) > 0 and outcomes.get("escape", 0) > 0, outcomes  # it raced
    assert flips >= 1000, flips
    for p in ("/f", "/sub", "/tmp/f"):
        assert not os.path.exists(p), p
    # every file there is, is in the real directory d (whichever name it has now)
    found = set()
    for root, dirs, names in os.walk(ws):
        for n in dirs + names:
            found.add(os.path.relpath(os.path.join(root, n), ws))
    real = "d" if os.path.isdir(os.path.join(ws, "d")) and not os.path.islink(os.path.join(ws, "d")) \
        else "d.twin"
    assert found - {"seed", "d", "d.twin"} <= {f"{real}/f", f"{real}/sub"}, found
    assert f"{real}/f" in found, found


def cli(s, *args, stdin=None):
    env = dict(os.environ)
    env.pop("RUNWARDEN_TOKEN", None)
    env["RUNWARDEN_URL"] = f"http://127.0.0.1:{s.port}"
    return subprocess.run([os.path.join(BUILD, "runwarden"), *args], input=stdin,
                          capture_output=True, timeout=30, env=env)


def test_cli_files(s):
    ready(s)
    t = "t-files-cli"
    blob = bytes(range(256)) * 4
    p = cli(s, "files", "mkdir", t, "dir x")
    assert p.returncode == 0, p.stderr
    p = cli(s, "files", "put", t, "dir x/b.bin", "--mode", "0600", stdin=blob)
    assert p.returncode == 0 and p.stdout == b"", p
    src = os.path.join(s.dir, "cli-src.txt")
    with open(src, "wb") as f:
        f.write(b"from a file\n")
    assert cli(s, "files", "put", t, "a.txt", src).returncode == 0
    p = cli(s, "files", "get", t, "dir x/b.bin")
    assert (p.returncode, p.stdout) == (0, blob), p.stderr
    assert cli(s, "files", "get", t, "a.txt").stdout == b"from a file\n"
    p = cli(s, "files", "ls", t)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert [l.split()[:3] + [l.split("  ")[-1]] for l in lines] == [
        ["file", "0644", "12", "a.txt"], ["directory", "0755", lines[1].split()[2], "dir x/"]], lines
    p = cli(s, "--json", "files", "ls", t, "dir x")
    js = json.loads(p.stdout)
    assert [(e["name"], e["mode"], e["size"]) for e in js["entries"]] == [("b.bin", "0600", 1024)], js
    assert os.lstat(os.path.join(workspace(s, t), "dir x", "b.bin")).st_uid == HOST_UID
    p = cli(s, "files", "get", t, "../etc/passwd")
    assert p.returncode == 125 and b"(HTTP 400 invalid_path)" in p.stderr, p.stderr
    p = cli(s, "files", "ls", t, "a.txt")
    assert p.returncode == 125 and b"not a directory" in p.stderr, p.stderr
    assert cli(s, "files", "rm", t, "dir x/b.bin").returncode == 0
    assert cli(s, "files", "rm", t, "dir x").returncode == 0
    p = cli(s, "files", "get", t, "dir x")
    assert p.returncode == 125 and b"(HTTP 404 not_found)" in p.stderr, p.stderr
    assert cli(s, "files", "frob", t, "x").returncode == 2
    assert cli(s, "files", "get", t).returncode == 2


def _plant(s, thread, owner_key, content):
    """A sandbox directory for thread's id as an earlier shim left it: a
    workspace with one file, and (owner_key not None) the key it belongs to."""
    d = os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread))
    ws = os.path.join(d, "workspace")
    os.makedirs(ws, mode=0o700)
    os.chmod(d, 0o700)
    with open(os.path.join(ws, "secret.txt"), "wb") as f:
        f.write(content)
    for p in (ws, os.path.join(ws, "secret.txt")):
        os.chown(p, HOST_UID, HOST_UID)
    if owner_key is not None:
        with open(os.path.join(d, "key"), "w") as f:
            f.write(owner_key)
        os.chmod(os.path.join(d, "key"), 0o600)
    return d


def test_sandbox_id_collision_is_refused(s):
    """Issue 11 item 8: the sandbox id is 64 bits of a hash; a directory that
    records another key (what a collision looks like to the second key) is
    refused to the file API and to a run, not handed over."""
    ready(s)
    t = "t-collide"
    s.expected_errors += [r"Sandbox id collision", r"sandbox id collision"]
    d = _plant(s, t, "another-thread-with-the-same-id", b"not yours\n")
    st, js = jreq(s, "GET", files(t, "secret.txt"))
    assert st == 500 and js["code"] == "internal", (st, js)
    assert "not yours" not in json.dumps(js)
    st, js = jreq(s, "GET", files(t))
    assert st == 500, (st, js)
    st, js = jreq(s, "PUT", files(t, "planted"), b"x")
    assert st == 500, (st, js)
    run = s.start_run("cat /workspace/secret.txt", thread=t)
    events, status, _, _ = s.tail(run, thread=t)
    assert status["status"] == "failed", status
    assert "not yours" not in stdout_text(events)
    assert sorted(os.listdir(d)) == ["key", "workspace"]
    assert os.listdir(os.path.join(d, "workspace")) == ["secret.txt"]
    with open(os.path.join(d, "key")) as f:
        assert f.read() == "another-thread-with-the-same-id"
    assert "Sandbox id collision" in s.log("containerd-shim")


def test_old_sandbox_directory_is_claimed_by_its_key(s):
    """A directory from before the key file: the first key that reaches it
    (its own, as the id alone decided before) claims it, and keeps it."""
    ready(s)
    t = "t-old-dir"
    d = _plant(s, t, None, b"mine\n")
    st, h, data = req(s, "GET", files(t, "secret.txt"))
    assert (st, data) == (200, b"mine\n"), (st, data)
    with open(os.path.join(d, "key")) as f:
        assert f.read() == t
    assert oct(os.stat(os.path.join(d, "key")).st_mode & 0o777) == "0o600"
    assert run_ok(s, t, "cat /workspace/secret.txt") == "mine\n"


def test_shim_down_is_503_then_recovers(s):
    ready(s)
    t = "t-files-down"
    assert jreq(s, "PUT", files(t, "kept"), b"kept")[0] == 201
    s.expected_errors += [r"containerd-shim", r"shim"]
    s.kill("containerd-shim")
    deadline = time.time() + 10
    while time.time() < deadline:
        st, js = jreq(s, "GET", files(t, "kept"))
        if st == 503:
            break
        time.sleep(0.05)
    assert (st, js) == (503, {"error": "containerd-shim unavailable", "code": "unavailable"}), (st, js)
    st, js = jreq(s, "PUT", files(t, "new"), b"x")
    assert st == 503 and js["code"] == "unavailable", (st, js)
    s.start_daemon("containerd-shim")
    deadline = time.time() + 15
    while time.time() < deadline:
        st, h, data = req(s, "GET", files(t, "kept"))
        if st == 200:
            break
        time.sleep(0.1)
    assert (st, data) == (200, b"kept"), (st, data)
    assert not os.path.exists(os.path.join(workspace(s, t), "new"))


def test_parents_recursive_overwrite(s):
    """What SandboxFs needs (SANDBOX-API.md "Files"): write with parents,
    mkdir -p, rm -r (-f), rename over a name; also as /sandboxes/{id}/files."""
    ready(s)
    t = "t-files-sbx"
    ws = workspace(s, t)
    for base in (f"/threads/{t}/files/", f"/sandboxes/{t}/files/"):
        # PUT ?parents=1 makes the missing directories (0755, the sandbox's)
        st, js = jreq(s, "PUT", base + "p/q/r/f.txt", b"deep")
        assert st == 404 and js["code"] == "not_found", (st, js)
        assert jreq(s, "PUT", base + "p/q/r/f.txt?parents=1", b"deep") == (201, {"created": True})
        assert req(s, "GET", base + "p/q/r/f.txt")[2] == b"deep"
        st_ = os.lstat(os.path.join(ws, "p/q"))
        assert (st_.st_uid, st_.st_mode & 0o7777) == (HOST_UID, 0o755), st_
        assert jreq(s, "PUT", base + "p/q/r/f.txt?parents=1", b"again") == (200, {"created": False})
        st, js = jreq(s, "PUT", base + "p/q/r/f.txt/x?parents=1", b"x")
        assert st == 404 and js["code"] == "not_found", (st, js)  # a parent is a file
        # mkdir -p: 201 made, 200 there already, 409 a file in the way
        assert jreq(s, "POST", base + "m/n/o?op=mkdir&parents=1") == (201, {"created": True})
        assert jreq(s, "POST", base + "m/n/o?op=mkdir&parents=1") == (200, {"created": False})
        assert jreq(s, "POST", base + "m?op=mkdir&parents=1") == (200, {"created": False})
        st, js = jreq(s, "POST", base + "m/n/o?op=mkdir")  # without parents: as before
        assert st == 409 and js["code"] == "exists", (st, js)
        st, js = jreq(s, "POST", base + "p/q/r/f.txt?op=mkdir&parents=1")
        assert st == 409 and js["code"] == "exists", (st, js)
        # rename over an existing name, atomically; without overwrite 409 as before
        assert jreq(s, "PUT", base + "m/a", b"A")[0] == 201
        assert jreq(s, "PUT", base + "m/b", b"B")[0] == 201
        st, js = jreq(s, "POST", base + "m/a?op=rename&to=m/b")
        assert st == 409 and js["code"] == "exists", (st, js)
        assert jreq(s, "POST", base + "m/a?op=rename&to=m/b&overwrite=1") == (200, {"renamed": True})
        assert req(s, "GET", base + "m/b")[2] == b"A"
        assert req(s, "GET", base + "m/a")[0] == 404
        # rm -r; -f for a missing path
        st, js = jreq(s, "DELETE", base + "p")
        assert st == 409 and js["code"] == "not_empty", (st, js)
        assert req(s, "DELETE", base + "p?recursive=1")[0] == 204
        assert not os.path.exists(os.path.join(ws, "p"))
        st, js = jreq(s, "DELETE", base + "p?recursive=1")
        assert st == 404 and js["code"] == "not_found", (st, js)
        assert req(s, "DELETE", base + "p?recursive=1&force=1")[0] == 204
        assert req(s, "DELETE", base + "nothing/deeper?force=1")[0] == 204
        assert req(s, "DELETE", base + "m?recursive=1")[0] == 204
        assert os.listdir(ws) == [], os.listdir(ws)
    # rm -rf in a workspace never made
    assert req(s, "DELETE", "/sandboxes/t-files-never/files/x?recursive=1&force=1")[0] == 204


def test_recursive_remove_never_follows_links_out(s):
    ready(s)
    t = "t-files-rmrf"
    outside = os.path.join(s.dir, "outside-rmrf")
    os.makedirs(os.path.join(outside, "keep"), exist_ok=True)
    with open(os.path.join(outside, "keep", "precious"), "w") as f:
        f.write("precious")
    # a tree planted by a run: links out (relative, absolute, to the host's
    # directory through /proc), a link to a directory inside
    run_ok(s, t, "cd /workspace && mkdir -p tree/a/b && echo x > tree/a/b/f && "
                 "ln -s /etc tree/etc && ln -s ../../.. tree/a/up && "
                 "ln -s /proc/self/root tree/a/proot && ln -s a tree/inlink")
    ws = workspace(s, t)
    # and from the host: an absolute link to a directory outside the workspace
    os.symlink(outside, os.path.join(ws, "tree", "a", "b", "host"))
    os.symlink(outside, os.path.join(ws, "outlink"))
    assert req(s, "DELETE", files(t, "tree") + "?recursive=1")[0] == 204
    assert not os.path.lexists(os.path.join(ws, "tree"))
    assert open(os.path.join(outside, "keep", "precious")).read() == "precious"
    assert os.path.exists("/etc/passwd")
    # the path itself a link to a directory outside: the link goes, not the tree
    assert req(s, "DELETE", files(t, "outlink") + "?recursive=1")[0] == 204
    assert not os.path.lexists(os.path.join(ws, "outlink"))
    assert open(os.path.join(outside, "keep", "precious")).read() == "precious"
    # through a link out: refused
    run_ok(s, t, "cd /workspace && ln -s /etc e")
    st, js = jreq(s, "DELETE", files(t, "e/ssl") + "?recursive=1&force=1")
    assert st == 400 and js["code"] == "escape", (st, js)
    assert os.path.isdir("/etc/ssl")


def watch(s, thread, cursor=None, path=None, wait_ms=None):
    q = []
    if path is not None:
        q.append("path=" + urllib.parse.quote(path, safe=""))
    if cursor is not None:
        q.append(f"cursor={cursor}")
    if wait_ms is not None:
        q.append(f"waitMs={wait_ms}")
    return jreq(s, "GET", f"/sandboxes/{thread}/watch" + ("?" + "&".join(q) if q else ""),
                timeout=70)


def collect(s, thread, cursor, want, path=None, rounds=40):
    """Poll until every (type, path) of want was seen; (events, cursor)."""
    seen = []
    for _ in range(rounds):
        st, js = watch(s, thread, cursor, path=path, wait_ms=500)
        assert st == 200, (st, js)
        assert js["cursor"] >= cursor and js["dropped"] == 0, js
        cursor = js["cursor"]
        seen += [(e["type"], e["path"]) for e in js["events"]]
        if all(w in seen for w in want):
            break
    assert all(w in seen for w in want), (want, seen)
    return seen, cursor


def test_watch_create_modify_delete_and_new_subdirs(s):
    ready(s)
    t = "t-watch"
    assert jreq(s, "PUT", files(t, "pre/existing"), b"x" if False else b"")[0] == 404
    assert jreq(s, "PUT", files(t, "pre/existing") + "?parents=1", b"")[0] == 201
    st, js = watch(s, t)
    assert st == 200 and js["events"] == [] and js["dropped"] == 0, (st, js)
    c0 = js["cursor"]
    # nothing yet: the long poll ends at waitMs with no events, same cursor
    st, js = watch(s, t, c0, wait_ms=200)
    assert (st, js["events"], js["cursor"]) == (200, [], c0), (st, js)
    # file API writes (the temporaries are not reported), a run's changes
    assert jreq(s, "PUT", files(t, "a.txt"), b"1")[0] == 201
    seen, c1 = collect(s, t, c0, [("create", "a.txt")])
    assert not [p for _, p in seen if ".wsfs-" in p], seen
    run_ok(s, t, "cd /workspace && echo more >> a.txt && mkdir -p new/deeper && "
                 "echo y > new/deeper/f && echo z > pre/g && rm a.txt")
    seen, c2 = collect(s, t, c1, [("modify", "a.txt"), ("create", "new"),
                                  ("create", "new/deeper/f"), ("create", "pre/g"),
                                  ("delete", "a.txt")])
    assert seen.index(("modify", "a.txt")) < seen.index(("delete", "a.txt")), seen
    # the new directory is followed: a later change deep in it is seen
    assert jreq(s, "PUT", files(t, "new/deeper/later"), b"l")[0] == 201
    seen, c3 = collect(s, t, c2, [("create", "new/deeper/later")])
    # a poll waiting when the change comes answers with it
    import threading
    got = {}
    th = threading.Thread(target=lambda: got.update(r=watch(s, t, c3, wait_ms=30000)))
    th.start()
    time.sleep(0.3)
    assert jreq(s, "PUT", files(t, "woke"), b"w")[0] == 201
    th.join(35)
    st, js = got["r"]
    assert st == 200 and ("create", "woke") in [(e["type"], e["path"]) for e in js["events"]], js
    # a watch of a subdirectory: only what is below it, paths still relative
    # to the workspace
    st, js = watch(s, t, path="new")
    assert st == 200, (st, js)
    cs = js["cursor"]
    assert jreq(s, "PUT", files(t, "outside-of-new"), b"o")[0] == 201
    assert jreq(s, "PUT", files(t, "new/inside"), b"i")[0] == 201
    seen, _ = collect(s, t, cs, [("create", "new/inside")], path="new")
    assert ("create", "outside-of-new") not in seen, seen


def test_watch_expires_and_refuses_escapes(s):
    ready(s)
    t = "t-watch-exp"
    assert jreq(s, "PUT", files(t, "d/f") + "?parents=1", b"")[0] == 201
    st, js = watch(s, t)
    assert st == 200, (st, js)
    c = js["cursor"]
    st, js = watch(s, t, c, wait_ms=0)
    assert (st, js["events"]) == (200, []), (st, js)
    # not polled for watch_idle_ms (1.5 s here): dropped, its cursor 410
    deadline = time.time() + 15
    while time.time() < deadline:
        time.sleep(0.5)
        st, js = watch(s, t, c, wait_ms=0)
        if st != 200:
            break
        time.sleep(2.5)  # no poll for longer than watch_idle_ms
    assert st == 410 and js["code"] == "watch_expired", (st, js)
    # started again: a new cursor, and the old one is no cursor of it
    st, js = watch(s, t)
    assert st == 200 and js["cursor"] > c, (st, js)
    st, js = watch(s, t, c, wait_ms=0)
    assert st == 410 and js["code"] == "watch_expired", (st, js)
    # a cursor of a watch never started
    st, js = watch(s, t, 5, path="d", wait_ms=0)
    assert st == 410 and js["code"] == "watch_expired", (st, js)
    # paths: escapes and bad paths refused, a missing directory 404
    run_ok(s, t, "cd /workspace && ln -s /etc etc && ln -s .. up && "
                 "ln -s /proc/self/root proot")
    for p in ("etc", "up", "proot", "proot/etc", "up/x"):
        st, js = watch(s, t, path=p)
        assert st == 400 and js["code"] == "escape", (p, st, js)
    for p in ("../x", "a//b", "d/", "./d"):
        st, js = watch(s, t, path=p)
        assert st == 400 and js["code"] == "invalid_path", (p, st, js)
    st, js = watch(s, t, path="nope")
    assert st == 404 and js["code"] == "not_found", (st, js)
    st, js = watch(s, t, path="d/f")  # a file
    assert st == 404 and js["code"] == "not_found", (st, js)
    for q in ("waitMs=60001", "waitMs=-1", "cursor=x", "waitMs="):
        st, js = jreq(s, "GET", f"/sandboxes/{t}/watch?{q}")
        assert st == 400 and js["code"] == "bad_request", (q, st, js)
    # a link out inside a watched tree is not followed: changes there unseen
    outside = os.path.join(s.dir, "outside-watch")
    os.makedirs(outside, exist_ok=True)
    os.symlink(outside, os.path.join(workspace(s, t), "d", "out"))
    st, js = watch(s, t, path="d")
    assert st == 200, (st, js)
    cd = js["cursor"]
    with open(os.path.join(outside, "planted"), "w") as f:
        f.write("x")
    assert jreq(s, "PUT", files(t, "d/marker"), b"m")[0] == 201
    seen, _ = collect(s, t, cd, [("create", "d/marker")], path="d")
    assert not [p for _, p in seen if "planted" in p], seen
    # a sandbox without a workspace has nothing to watch
    st, js = watch(s, "t-watch-none")
    assert st == 404 and js["code"] == "not_found", (st, js)
