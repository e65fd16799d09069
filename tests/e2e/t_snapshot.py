# SPDX-License-Identifier: MIT
"""Snapshots and restore of a thread's workspace (issue 5, SANDBOX.md §6.H
36-37): POST /threads/{id}/snapshots and /restore through routerd,
coordinatord and the shim; a round trip, 409 while a run is active, ids that
are not ours, the hostile-archive list (each refused, the workspace left as it
was) and a consistent snapshot of a workspace that is being written."""
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import time
import uuid

from rwtest import stdout_text

SUITE_CONF = """[containerd-shim]
restore_max_entries = 64
restore_max_bytes = 8M
"""

MANIFEST = ("cd /workspace && find . -mindepth 1 | LC_ALL=C sort | while read -r p; do "
            "if [ -L \"$p\" ]; then echo \"L $p -> $(readlink \"$p\")\"; "
            "elif [ -d \"$p\" ]; then echo \"D $p\"; elif [ -p \"$p\" ]; then echo \"P $p\"; "
            "else echo \"F $p $(sha256sum < \"$p\" | cut -c1-64)\"; fi; done")


def sandbox_id(thread):
    return hashlib.sha256(thread.encode()).hexdigest()[:16]


def workspace(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread), "workspace")


def backups(s, thread):
    return os.path.join(s.dir, "state", "backups", sandbox_id(thread))


def run_ok(s, thread, cmd):
    run = s.start_run(cmd, thread=thread)
    events, status, _, _ = s.tail(run, thread=thread)
    assert status["status"] == "completed", (status, stdout_text(events, "process.stderr"))
    return stdout_text(events)


def snapshot(s, thread, label=None):
    st, js = s.http("POST", f"/threads/{thread}/snapshots", {} if label is None else {"label": label})
    assert st == 201, (st, js)
    rec = json.loads(js["snapshotId"])
    return js["snapshotId"], rec


def restore(s, thread, sid):
    return s.http("POST", f"/threads/{thread}/restore", {"snapshotId": sid})


def host_tree(path):
    """Exact host view of a tree: type, mode, owner, content hash, link target."""
    out = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, path)
            if os.path.islink(p):
                out[rel] = ("L", os.readlink(p), st.st_uid)
            elif os.path.isdir(p):
                out[rel] = ("D", st.st_mode, st.st_uid)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("F", st.st_mode, st.st_uid, hashlib.sha256(f.read()).hexdigest())
    return out


def test_round_trip(s):
    t = "t-snap"
    run_ok(s, t, "cd /workspace && mkdir -p sub/deep && echo hello > a.txt && "
                 "echo nested > sub/deep/n.txt && ln -s sub/deep/n.txt link && "
                 "ln -s ../a.txt sub/up && head -c 1048576 /dev/urandom > big.bin && "
                 "chmod 640 a.txt && mkfifo fifo && echo ok")
    before = run_ok(s, t, MANIFEST)
    assert "L ./link -> sub/deep/n.txt" in before and "F ./big.bin" in before, before
    sid, rec = snapshot(s, t, label="after-setup")
    assert set(rec) == {"v", "id", "key", "label", "createdAt", "bytes", "sha256", "files"}, rec
    assert rec["v"] == 1 and rec["key"] == sandbox_id(t) and rec["label"] == "after-setup"
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", rec["id"])
    assert rec["files"] == 3, rec  # a.txt, n.txt, big.bin (no FIFO)
    path = os.path.join(backups(s, t), rec["id"] + ".tar.zst")
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) == rec["bytes"] and hashlib.sha256(data).hexdigest() == rec["sha256"]
    assert data[:4] == b"\x28\xb5\x2f\xfd", "zstd magic"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    # the archive holds only the workspace, symlinks as symlinks
    raw = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        names = {m.name: m for m in tf.getmembers()}
    assert set(names) == {"a.txt", "sub", "sub/deep", "sub/deep/n.txt", "link", "sub/up", "big.bin"}, names
    assert names["link"].issym() and names["link"].linkname == "sub/deep/n.txt"
    assert names["a.txt"].mode == 0o640

    run_ok(s, t, "cd /workspace && rm -rf sub big.bin && echo changed > a.txt && echo new > new.txt")
    assert run_ok(s, t, MANIFEST) != before
    st, js = restore(s, t, sid)
    assert st == 200, (st, js)
    after = run_ok(s, t, MANIFEST)
    # exact: every file's sha256, the links, the dirs; the FIFO was not kept
    bl = [l for l in before.splitlines() if "./fifo" not in l]
    assert after.splitlines() == bl, (bl, after)
    tree = host_tree(workspace(s, t))
    assert all(v[2] == 100000 for v in tree.values()), tree  # host_uid
    assert tree["a.txt"][1] & 0o7777 == 0o640
    # the restored workspace is writable by the sandbox user, the snapshot reusable
    run_ok(s, t, "echo again > /workspace/a.txt")
    assert restore(s, t, sid)[0] == 200
    assert run_ok(s, t, "cat /workspace/a.txt") == "hello\n"
    assert not [n for n in os.listdir(os.path.dirname(workspace(s, t))) if n.startswith(".restore")]


def test_restore_while_a_run_is_active_is_409(s):
    t = "t-snap-busy"
    run_ok(s, t, "echo 1 > /workspace/f")
    sid, _ = snapshot(s, t)
    run = s.start_run("sleep 30", thread=t)
    st, js = restore(s, t, sid)
    assert st == 409, (st, js)
    assert js["code"] == "conflict", js
    st, _ = s.http("POST", f"/runs/{run}/cancel?threadId={t}")
    assert st == 202
    s.wait_terminal(run, thread=t)
    assert restore(s, t, sid)[0] == 200


def test_ids_that_are_not_ours_are_400(s):
    t, other = "t-snap-ours", "t-snap-other"
    run_ok(s, t, "echo mine > /workspace/m")
    run_ok(s, other, "echo theirs > /workspace/o")
    sid, rec = snapshot(s, t)
    osid, orec = snapshot(s, other)
    bad = dict(rec, sha256=("0" if rec["sha256"][0] != "0" else "1") + rec["sha256"][1:])
    # ours, but the archive differs from the record: the restorer refuses it
    st, js = restore(s, t, json.dumps(bad))
    assert st == 422 and js["code"] == "restore_rejected", (st, js)
    assert "checksum" in js["error"], js
    size = dict(rec, bytes=rec["bytes"] + 1)
    stolen = dict(orec, key=sandbox_id(t))  # another thread's archive, key rewritten
    extra = dict(rec, evil=1)
    for garbage in ["garbage", "{}", "[1]", json.dumps(size), json.dumps(stolen),
                    json.dumps(dict(rec, v=2)), json.dumps(dict(rec, id="../../etc/passwd")),
                    json.dumps(extra), osid, sid + " "]:
        if garbage == sid + " ":
            continue  # trailing space is still the same JSON object: ours
        st, js = restore(s, t, garbage)
        assert st == 400 and js["code"] == "not_a_backup_record", (garbage, st, js)
    assert run_ok(s, t, "cat /workspace/m") == "mine\n"
    assert restore(s, other, osid)[0] == 200


def hostile(name, build):
    """A gzip'ed tar built by build(tf)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        build(tf)
    return buf.getvalue()


def add_file(tf, name, data=b"x", mode=0o644, **kw):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), mode
    for k, v in kw.items():
        setattr(ti, k, v)
    tf.addfile(ti, io.BytesIO(data))


def add_special(tf, name, type_, **kw):
    ti = tarfile.TarInfo(name)
    ti.type = type_
    for k, v in kw.items():
        setattr(ti, k, v)
    tf.addfile(ti)


def add_dir(tf, name, mode=0o755):
    add_special(tf, name, tarfile.DIRTYPE, mode=mode)


HOSTILE = {
    "absolute": lambda tf: add_file(tf, "/abs-escape"),
    "dotdot": lambda tf: add_file(tf, "../x"),
    "dotdot-inner": lambda tf: (add_dir(tf, "d"), add_file(tf, "d/../../x")),
    "symlink-to-etc-then-through": lambda tf: (
        add_special(tf, "l", tarfile.SYMTYPE, linkname="/etc"), add_file(tf, "l/pwned")),
    "symlink-through-inner": lambda tf: (
        add_dir(tf, "d"), add_special(tf, "l", tarfile.SYMTYPE, linkname="d"), add_file(tf, "l/f")),
    "hardlink-passwd": lambda tf: add_special(tf, "h", tarfile.LNKTYPE, linkname="/etc/passwd"),
    "hardlink-climbs": lambda tf: add_special(tf, "h", tarfile.LNKTYPE, linkname="../x"),
    "hardlink-through-symlink": lambda tf: (
        add_special(tf, "l", tarfile.SYMTYPE, linkname="/etc"),
        add_special(tf, "h", tarfile.LNKTYPE, linkname="l/passwd")),
    "hardlink-to-symlink": lambda tf: (
        add_special(tf, "l", tarfile.SYMTYPE, linkname="/etc/passwd"),
        add_special(tf, "h", tarfile.LNKTYPE, linkname="l")),
    "hardlink-to-dir": lambda tf: (add_dir(tf, "d"), add_special(tf, "h", tarfile.LNKTYPE, linkname="d")),
    "hardlink-before-target": lambda tf: (
        add_special(tf, "h", tarfile.LNKTYPE, linkname="f"), add_file(tf, "f")),
    "char-device": lambda tf: add_special(tf, "null", tarfile.CHRTYPE, devmajor=1, devminor=3),
    "block-device": lambda tf: add_special(tf, "sda", tarfile.BLKTYPE, devmajor=8, devminor=0),
    "fifo": lambda tf: add_special(tf, "p", tarfile.FIFOTYPE),
    "setuid": lambda tf: add_file(tf, "suid", b"#!/bin/sh\n", mode=0o4755),
    "setgid-dir": lambda tf: add_dir(tf, "g", mode=0o2775),
    "xattr-capability": lambda tf: add_file(
        tf, "cap", pax_headers={"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}),
    "too-many-entries": lambda tf: [add_file(tf, f"f{i}") for i in range(70)],
    "too-many-bytes": lambda tf: add_file(tf, "big", b"\0" * (9 << 20)),
    "duplicate": lambda tf: (add_file(tf, "f", b"1"), add_file(tf, "f", b"2")),
}


# Accepted since hardlinks inside the tree and any symlink target are (links
# are restored as entries and never resolved on the host): all in one archive.
INERT = {
    "links": lambda tf: (
        add_dir(tf, "a"), add_special(tf, "a/l", tarfile.SYMTYPE, linkname="../../x"),
        add_special(tf, "s", tarfile.SYMTYPE, linkname="."),
        add_special(tf, "e", tarfile.SYMTYPE, linkname="s/../x"),
        add_special(tf, "py", tarfile.SYMTYPE, linkname="/usr/bin/python3"),
        add_file(tf, "f", b"same"), add_special(tf, "h", tarfile.LNKTYPE, linkname="f")),
}


def plant(s, thread, data):
    """Put an archive under backups/<key>/ with a hand-made record of ours."""
    rid = str(uuid.uuid4())
    d = backups(s, thread)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, rid + ".tar.zst"), "wb") as f:
        f.write(data)
    return json.dumps({"v": 1, "id": rid, "key": sandbox_id(thread), "label": None,
                       "createdAt": int(time.time() * 1000), "bytes": len(data),
                       "sha256": hashlib.sha256(data).hexdigest(), "files": 1})


def test_hostile_archives_are_refused_and_change_nothing(s):
    t = "t-snap-hostile"
    run_ok(s, t, "mkdir -p /workspace/keep && echo precious > /workspace/keep/p && "
                 "ln -s keep/p /workspace/lnk")
    ws = workspace(s, t)
    before = host_tree(ws)
    etc = os.listdir("/etc")
    # a benign hand-made archive is accepted: the harness is right
    ok = plant(s, t, hostile("ok", lambda tf: (add_dir(tf, "d"), add_file(tf, "d/f", b"fine"),
                                               add_special(tf, "d/l", tarfile.SYMTYPE, linkname="../d/f"))))
    assert restore(s, t, ok)[0] == 200
    assert run_ok(s, t, "cat /workspace/d/l") == "fine"
    good, _ = snapshot(s, t)
    run_ok(s, t, "rm -rf /workspace/* && mkdir -p /workspace/keep && echo precious > /workspace/keep/p "
                 "&& ln -s keep/p /workspace/lnk")
    before = host_tree(ws)
    for name, build in HOSTILE.items():
        rec = plant(s, t, hostile(name, build))
        st, js = restore(s, t, rec)
        assert st == 422 and js["code"] == "restore_rejected", (name, st, js)
        assert host_tree(ws) == before, name
        assert not [n for n in os.listdir(os.path.dirname(ws)) if n.startswith(".restore")], name
    assert not os.path.exists("/abs-escape") and not os.path.exists("/etc/pwned")
    assert os.listdir("/etc") == etc
    assert not os.path.exists(os.path.join(os.path.dirname(ws), "x"))
    # the sandbox still works, and a good snapshot still restores
    assert run_ok(s, t, "cat /workspace/keep/p") == "precious\n"
    assert restore(s, t, good)[0] == 200
    assert run_ok(s, t, "cat /workspace/d/f") == "fine"
    # links pointing anywhere are inert entries: restored as links, nothing
    # followed, nothing made outside; hardlinks inside the tree are links
    for name, build in INERT.items():
        rec = plant(s, t, hostile(name, build))
        st, js = restore(s, t, rec)
        assert st == 200, (name, st, js)
        assert not os.path.exists(os.path.join(os.path.dirname(ws), "x")), name
    assert run_ok(s, t, "stat -c '%h %i' /workspace/f /workspace/h | uniq -c | wc -l") == "1\n"
    assert run_ok(s, t, "readlink /workspace/a/l /workspace/e /workspace/py") == \
        "../../x\ns/../x\n/usr/bin/python3\n"


def test_consistent_snapshot_while_a_run_writes(s):
    t = "t-snap-live"
    run_ok(s, t, "mkdir -p /workspace/w")
    run = s.start_run("i=0; while :; do i=$((i+1)); echo $i > /workspace/w/n.tmp && "
                      "mv /workspace/w/n.tmp /workspace/w/n; "
                      "head -c 65536 /dev/zero > /workspace/w/f$((i % 20)); done", thread=t)
    time.sleep(0.5)
    seen = []
    for _ in range(5):
        _, rec = snapshot(s, t)
        path = os.path.join(backups(s, t), rec["id"] + ".tar.zst")
        raw = subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
            members = tf.getmembers()
            for m in members:
                if m.isfile():
                    assert len(tf.extractfile(m).read()) == m.size
            n = [m for m in members if m.name == "w/n"]
            assert n, [m.name for m in members]
            seen.append(int(tf.extractfile(n[0]).read()))
        time.sleep(0.1)
    # the writer kept going between snapshots: every freeze was thawed
    assert seen == sorted(seen) and seen[-1] > seen[0], seen
    st, rec = s.http("GET", f"/runs/{run}?threadId={t}")
    assert rec["status"] == "running", rec
    assert s.http("POST", f"/runs/{run}/cancel?threadId={t}")[0] == 202
    s.wait_terminal(run, thread=t)


def test_snapshot_of_a_thread_that_never_ran_is_empty(s):
    t = "t-snap-never"
    sid, rec = snapshot(s, t)
    assert rec["files"] == 0 and rec["label"] is None, rec
    assert restore(s, t, sid)[0] == 200
    assert run_ok(s, t, "ls -A /workspace") == ""
