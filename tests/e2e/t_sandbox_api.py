# SPDX-License-Identifier: MIT
"""The sandbox API of the provider model (docs/SANDBOX-API.md): capabilities
(with a scoped token's scope), the lifecycle of a sandbox (PUT, GET, stop,
DELETE with and without keep=workspace, a run in it when it stops), and every
new route refused (403 thread_forbidden) for another tenant's ids. Real
daemons, real HTTP."""
import hashlib
import json
import os
import tempfile
import time

from rwtest import poll

ADMIN, TA, TB = "admin-token-0001", "tenant-a.token", "tenant-b.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-sbx-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"""{ADMIN}
{TA}  threads=a-*,shared
{TB}  threads=b-*
""")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
max_file_body = 4M
# two tokens are two tenants: not routerd's rate per tenant (t_tenant_rate) here
tenant_rate_per_second = 0

[containerd-shim]
file_api_max_bytes = 2M
"""


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def sandbox_dir(s, sid):
    return os.path.join(s.dir, "state", "sandboxes", hashlib.sha256(sid.encode()).hexdigest()[:16])


def backups_dir(s, sid):
    return os.path.join(s.dir, "state", "backups", hashlib.sha256(sid.encode()).hexdigest()[:16])


def ready(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15, 0.05)


def h(s, method, path, body=None, tok=ADMIN, raw=None, headers=None):
    hd = dict(auth(tok))
    hd.update(headers or {})
    return s.http(method, path, body, headers=hd, raw_body=raw)


def test_capabilities_and_scope(s):
    ready(s)
    st, js = h(s, "GET", "/capabilities")
    assert st == 200, (st, js)
    assert js["version"] == 1 and js["shell"] == "/bin/bash", js
    sb = js["sandbox"]
    assert sb["snapshots"] is True and sb["fork"] is True and sb["durableFilesystem"] is True, sb
    # neither preview_listen nor sandbox_egress_allow here (t_sandbox_ports:
    # both configured, both true)
    assert sb["ports"] is False and sb["networkPolicy"] is False, sb
    assert sb["fsWatch"] is True, sb
    lim = js["limits"]
    assert lim["fileApiMaxBytes"] == 2 * 1024 * 1024, lim  # the shim's file_api_max_bytes
    assert lim["execStdinMaxBytes"] == 1024 * 1024 and lim["maxExecsPerSandbox"] == 16, lim
    assert lim["execTimeoutMaxMs"] == 7200000, lim  # max_run_ms
    assert js["scope"] == {"threads": None}, js  # the operator's token: any thread
    st, js = h(s, "GET", "/capabilities", tok=TA)
    assert st == 200 and js["scope"] == {"threads": ["a-*", "shared"]}, (st, js)
    st, js = h(s, "GET", "/capabilities", tok=TB)
    assert st == 200 and js["scope"] == {"threads": ["b-*"]}, (st, js)
    st, js = s.http("GET", "/capabilities")
    assert st == 401, (st, js)
    st, js = h(s, "POST", "/capabilities", {})
    assert st == 405, (st, js)


def test_lifecycle(s):
    ready(s)
    sid = "a-life"
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert st == 404 and js["code"] == "sandbox_not_found", (st, js)
    st, js = h(s, "PUT", f"/sandboxes/{sid}", {}, tok=TA)
    assert (st, js) == (201, {"id": sid, "created": True}), (st, js)
    assert os.path.isdir(os.path.join(sandbox_dir(s, sid), "workspace"))
    st, js = h(s, "PUT", f"/sandboxes/{sid}", {}, tok=TA)
    assert (st, js) == (200, {"id": sid, "created": False}), (st, js)
    st, js = h(s, "PUT", f"/sandboxes/{sid}", tok=TA)  # no body: {} too
    assert (st, js) == (200, {"id": sid, "created": False}), (st, js)
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert (st, js) == (200, {"id": sid, "running": False, "processes": 0}), (st, js)
    # the files API on the sandbox id is the thread's
    st, _ = h(s, "PUT", f"/sandboxes/{sid}/files/keep.txt", raw=b"kept", tok=TA)
    assert st == 201, st
    st, body = h(s, "GET", f"/threads/{sid}/files/keep.txt", tok=TA)
    assert (st, body) == (200, b"kept"), (st, body)

    # a run in it: running, one process; stop kills it, the workspace stays
    st, js = h(s, "POST", "/runs", {"threadId": sid, "messages": [
        {"role": "user", "content": "echo started > started; sleep 60"}]}, tok=TA)
    assert st == 202, (st, js)
    run = js["runId"]
    assert poll(lambda: h(s, "GET", f"/sandboxes/{sid}/files/started", tok=TA)[0] == 200, 30, 0.05)
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert st == 200 and js["running"] is True and js["processes"] >= 1, (st, js)
    t0 = time.time()
    st, js = h(s, "POST", f"/sandboxes/{sid}/stop", tok=TA)
    assert (st, js) == (200, {}), (st, js)
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert (st, js) == (200, {"id": sid, "running": False, "processes": 0}), (st, js)

    # the run loses its sandbox as on any destroy: it ends, not completed
    def ended():
        st, rec = h(s, "GET", f"/runs/{run}?threadId={sid}", tok=TA)
        return st == 200 and rec["status"] != "running" and rec
    rec = poll(ended, 30, 0.05)
    assert rec and rec["status"] == "failed", rec
    assert time.time() - t0 < 30
    st, body = h(s, "GET", f"/sandboxes/{sid}/files/keep.txt", tok=TA)
    assert (st, body) == (200, b"kept"), (st, body)
    # stop again (nothing running): 200
    assert h(s, "POST", f"/sandboxes/{sid}/stop", tok=TA)[0] == 200

    # a snapshot, then DELETE ?keep=workspace keeps workspace and backups
    st, js = h(s, "POST", f"/threads/{sid}/snapshots", {"label": "x"}, tok=TA)
    assert st == 201, (st, js)
    assert os.listdir(backups_dir(s, sid))
    st, js = h(s, "DELETE", f"/sandboxes/{sid}?keep=workspace", tok=TA)
    assert st == 204, (st, js)
    assert h(s, "GET", f"/sandboxes/{sid}", tok=TA)[0] == 200
    assert os.listdir(backups_dir(s, sid))
    st, js = h(s, "DELETE", f"/sandboxes/{sid}?keep=everything", tok=TA)
    assert st == 400 and js["code"] == "bad_request", (st, js)
    # DELETE: workspace and backups gone (the workspace at once, its tree
    # removed by a cleanup child: poll for that); again: 204
    st, js = h(s, "DELETE", f"/sandboxes/{sid}", tok=TA)
    assert st == 204, (st, js)
    assert not os.path.exists(os.path.join(sandbox_dir(s, sid), "workspace"))
    assert not os.path.exists(backups_dir(s, sid))
    assert poll(lambda: not [n for n in os.listdir(sandbox_dir(s, sid))
                             if n.startswith(".restore-")], 15, 0.05)
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert st == 404 and js["code"] == "sandbox_not_found", (st, js)
    st, js = h(s, "GET", f"/sandboxes/{sid}/files/keep.txt", tok=TA)
    assert st == 404, (st, js)
    assert h(s, "DELETE", f"/sandboxes/{sid}", tok=TA)[0] == 204
    assert h(s, "DELETE", "/sandboxes/a-never-made", tok=TA)[0] == 204
    # made again from nothing
    assert h(s, "PUT", f"/sandboxes/{sid}", {}, tok=TA)[0] == 201


def test_delete_kills_a_live_sandbox(s):
    ready(s)
    sid = "a-del-live"
    st, js = h(s, "POST", "/runs", {"threadId": sid, "messages": [
        {"role": "user", "content": "echo x > x; sleep 60"}]}, tok=TA)
    assert st == 202, (st, js)
    assert poll(lambda: h(s, "GET", f"/sandboxes/{sid}/files/x", tok=TA)[0] == 200, 30, 0.05)
    assert h(s, "GET", f"/sandboxes/{sid}", tok=TA)[1]["running"] is True
    st, js = h(s, "DELETE", f"/sandboxes/{sid}", tok=TA)
    assert st == 204, (st, js)
    assert not os.path.exists(sandbox_dir(s, sid))
    st, js = h(s, "GET", f"/sandboxes/{sid}", tok=TA)
    assert st == 404 and js["code"] == "sandbox_not_found", (st, js)


def test_bad_ids_and_methods(s):
    ready(s)
    st, js = h(s, "PUT", "/sandboxes/%01bad", {})
    assert st == 400 and js["code"] == "invalid_thread_id", (st, js)
    st, js = h(s, "PUT", "/sandboxes/" + "x" * 300, {})
    assert st == 400, (st, js)
    st, js = h(s, "POST", "/sandboxes/a-x", {})
    assert st == 405, (st, js)
    st, js = h(s, "GET", "/sandboxes/a-x/stop")
    assert st == 405, (st, js)
    st, js = h(s, "PUT", "/sandboxes/a-x", raw=b"[1]", headers={"Content-Type": "application/json"})
    assert st == 400, (st, js)


def test_other_tenants_ids_are_403_on_every_new_route(s):
    ready(s)
    assert h(s, "PUT", "/sandboxes/b-theirs", {}, tok=TB)[0] == 201
    assert h(s, "PUT", "/sandboxes/b-theirs/files/f", raw=b"theirs", tok=TB)[0] == 201
    routes = [
        ("PUT", "/sandboxes/b-theirs", {}),
        ("GET", "/sandboxes/b-theirs", None),
        ("POST", "/sandboxes/b-theirs/stop", None),
        ("DELETE", "/sandboxes/b-theirs", None),
        ("DELETE", "/sandboxes/b-theirs?keep=workspace", None),
        ("GET", "/sandboxes/b-theirs/files/f", None),
        ("PUT", "/sandboxes/b-theirs/files/g?parents=1", None),
        ("DELETE", "/sandboxes/b-theirs/files/f?recursive=1&force=1", None),
        ("POST", "/sandboxes/b-theirs/files/d?op=mkdir&parents=1", None),
        ("POST", "/sandboxes/b-theirs/files/f?op=rename&to=g&overwrite=1", None),
    ]
    for method, path, body in routes:
        st, js = h(s, method, path, body, tok=TA)
        assert st == 403 and js["code"] == "thread_forbidden", (method, path, st, js)
    # nothing happened
    st, body = h(s, "GET", "/sandboxes/b-theirs/files/f", tok=TB)
    assert (st, body) == (200, b"theirs"), (st, body)
    assert h(s, "GET", "/sandboxes/b-theirs", tok=TB)[0] == 200


def put_file(s, sid, rel, data, tok=ADMIN):
    st, _ = h(s, "PUT", f"/sandboxes/{sid}/files/{rel}?parents=1", raw=data, tok=tok)
    assert st in (200, 201), st


def get_file(s, sid, rel, tok=ADMIN):
    return h(s, "GET", f"/sandboxes/{sid}/files/{rel}", tok=tok)


def test_snapshots_list_delete_restore_by_id(s):
    ready(s)
    sid = "a-snap"
    assert h(s, "GET", f"/threads/{sid}/snapshots", tok=TA) == (200, {"snapshots": []})
    put_file(s, sid, "a.txt", b"one", TA)
    st, js1 = h(s, "POST", f"/threads/{sid}/snapshots", {"label": "first"}, tok=TA)
    assert st == 201 and set(js1) == {"snapshotId", "id"}, (st, js1)
    rec1 = json.loads(js1["snapshotId"])  # the record, as before
    assert rec1["id"] == js1["id"] and rec1["label"] == "first", (rec1, js1)
    put_file(s, sid, "a.txt", b"two", TA)
    st, js2 = h(s, "POST", f"/threads/{sid}/snapshots", {}, tok=TA)
    assert st == 201, (st, js2)
    id1, id2 = js1["id"], js2["id"]

    st, js = h(s, "GET", f"/threads/{sid}/snapshots", tok=TA)
    assert st == 200 and [x["id"] for x in js["snapshots"]] == [id2, id1], js  # newest first
    first = js["snapshots"][1]
    assert set(first) == {"id", "label", "createdAt", "bytes"}, first
    assert first["label"] == "first" and first["bytes"] == rec1["bytes"], first
    assert first["createdAt"] == rec1["createdAt"] and js["snapshots"][0]["label"] is None, js

    # restore by the short id, and by the whole record as before
    st, js = h(s, "POST", f"/threads/{sid}/restore", {"snapshotId": id1}, tok=TA)
    assert (st, js) == (200, {"restored": True}), (st, js)
    assert get_file(s, sid, "a.txt", TA) == (200, b"one")
    st, js = h(s, "POST", f"/threads/{sid}/restore", {"snapshotId": js2["snapshotId"]}, tok=TA)
    assert st == 200, (st, js)
    assert get_file(s, sid, "a.txt", TA) == (200, b"two")

    # delete: gone from the list, its id and its record refused afterwards
    st, js = h(s, "DELETE", f"/threads/{sid}/snapshots/{id1}", tok=TA)
    assert st == 204, (st, js)
    st, js = h(s, "GET", f"/threads/{sid}/snapshots", tok=TA)
    assert [x["id"] for x in js["snapshots"]] == [id2], js
    st, js = h(s, "DELETE", f"/threads/{sid}/snapshots/{id1}", tok=TA)
    assert st == 404 and js["code"] == "snapshot_not_found", (st, js)
    st, js = h(s, "DELETE", f"/threads/{sid}/snapshots/not-a-snapshot", tok=TA)
    assert st == 404 and js["code"] == "snapshot_not_found", (st, js)
    st, js = h(s, "POST", f"/threads/{sid}/restore", {"snapshotId": id1}, tok=TA)
    assert st == 404 and js["code"] == "snapshot_not_found", (st, js)
    st, js = h(s, "POST", f"/threads/{sid}/restore", {"snapshotId": js1["snapshotId"]}, tok=TA)
    assert st == 404 and js["code"] == "backup_not_found", (st, js)
    assert get_file(s, sid, "a.txt", TA) == (200, b"two")
    # another sandbox's id through this one: not found here
    st, js = h(s, "POST", "/threads/a-other/restore", {"snapshotId": id2}, tok=TA)
    assert st == 404 and js["code"] == "snapshot_not_found", (st, js)


def test_restore_into_a_new_sandbox_is_a_fork(s):
    ready(s)
    src = "a-forksrc"
    put_file(s, src, "d/f.txt", b"state", TA)
    st, js = h(s, "POST", f"/threads/{src}/snapshots", {"label": "fork"}, tok=TA)
    assert st == 201, (st, js)
    snap = js["id"]
    put_file(s, src, "d/f.txt", b"later", TA)  # the source goes on
    st, js = h(s, "POST", "/sandboxes/a-fork1/restore", {"from": src, "snapshotId": snap}, tok=TA)
    assert (st, js) == (201, {"id": "a-fork1"}), (st, js)
    assert get_file(s, "a-fork1", "d/f.txt", TA) == (200, b"state")
    assert get_file(s, src, "d/f.txt", TA) == (200, b"later")
    assert h(s, "GET", "/sandboxes/a-fork1", tok=TA)[0] == 200
    # by the whole record too
    st, js = h(s, "POST", f"/threads/{src}/snapshots", {}, tok=TA)
    st, js = h(s, "POST", "/sandboxes/a-fork2/restore",
               {"from": src, "snapshotId": js["snapshotId"]}, tok=TA)
    assert (st, js) == (201, {"id": "a-fork2"}), (st, js)
    assert get_file(s, "a-fork2", "d/f.txt", TA) == (200, b"later")
    # the new id must be new; the fork is a sandbox of its own
    st, js = h(s, "POST", "/sandboxes/a-fork1/restore", {"from": src, "snapshotId": snap}, tok=TA)
    assert st == 409 and js["code"] == "exists", (st, js)
    put_file(s, "a-fork1", "d/f.txt", b"forked", TA)
    assert get_file(s, src, "d/f.txt", TA) == (200, b"later")
    st, js = h(s, "POST", "/sandboxes/a-fork3/restore", {"from": src, "snapshotId": snap[:-1] + "0"
                                                        if snap[-1] != "0" else snap[:-1] + "1"},
               tok=TA)
    assert st == 404 and js["code"] == "snapshot_not_found", (st, js)
    assert h(s, "GET", "/sandboxes/a-fork3", tok=TA)[0] == 404
    st, js = h(s, "POST", "/sandboxes/a-fork3/restore", {"from": src}, tok=TA)
    assert st == 400 and js["code"] == "bad_request", (st, js)


def test_snapshot_routes_refuse_other_tenants_ids(s):
    ready(s)
    put_file(s, "b-snapsrc", "f", b"theirs", TB)
    st, js = h(s, "POST", "/threads/b-snapsrc/snapshots", {}, tok=TB)
    assert st == 201, (st, js)
    theirs = js["id"]
    put_file(s, "a-mine", "f", b"mine", TA)
    st, js = h(s, "POST", "/threads/a-mine/snapshots", {}, tok=TA)
    mine = js["id"]
    for method, path, body in [
        ("GET", "/threads/b-snapsrc/snapshots", None),
        ("DELETE", f"/threads/b-snapsrc/snapshots/{theirs}", None),
        ("POST", "/sandboxes/a-steal/restore", {"from": "b-snapsrc", "snapshotId": theirs}),
        ("POST", "/sandboxes/b-plant/restore", {"from": "a-mine", "snapshotId": mine}),
    ]:
        st, js = h(s, method, path, body, tok=TA)
        assert st == 403 and js["code"] == "thread_forbidden", (method, path, st, js)
    assert h(s, "GET", "/sandboxes/a-steal", tok=TA)[0] == 404
    assert h(s, "GET", "/sandboxes/b-plant", tok=TB)[0] == 404
    st, js = h(s, "GET", "/threads/b-snapsrc/snapshots", tok=TB)
    assert [x["id"] for x in js["snapshots"]] == [theirs], js


def test_watch_scope_and_restore_ends_it(s):
    ready(s)
    assert h(s, "PUT", "/sandboxes/b-watched", {}, tok=TB)[0] == 201
    st, js = h(s, "GET", "/sandboxes/b-watched/watch", tok=TA)
    assert st == 403 and js["code"] == "thread_forbidden", (st, js)
    sid = "a-watch-restore"
    put_file(s, sid, "f", b"1", TA)
    st, js = h(s, "POST", f"/threads/{sid}/snapshots", {}, tok=TA)
    snap = js["id"]
    st, js = h(s, "GET", f"/sandboxes/{sid}/watch", tok=TA)
    assert st == 200, (st, js)
    c = js["cursor"]
    st, js = h(s, "GET", f"/sandboxes/{sid}/watch?cursor={c}&waitMs=0", tok=TA)
    assert st == 200, (st, js)
    # a restore replaces the tree the watch follows: it ends
    assert h(s, "POST", f"/threads/{sid}/restore", {"snapshotId": snap}, tok=TA)[0] == 200
    st, js = h(s, "GET", f"/sandboxes/{sid}/watch?cursor={c}&waitMs=0", tok=TA)
    assert st == 410 and js["code"] == "watch_expired", (st, js)
    # at most 4 watches a sandbox
    for d in ("d1", "d2", "d3", "d4", "d5"):
        put_file(s, sid, f"{d}/x", b"", TA)
    codes = [h(s, "GET", f"/sandboxes/{sid}/watch?path={d}", tok=TA)[0]
             for d in ("d1", "d2", "d3", "d4", "d5")]
    assert codes == [200, 200, 200, 200, 429], codes
    # deleting the sandbox ends them too
    assert h(s, "DELETE", f"/sandboxes/{sid}", tok=TA)[0] == 204
    assert h(s, "PUT", f"/sandboxes/{sid}", {}, tok=TA)[0] == 201
    put_file(s, sid, "d5/x", b"", TA)
    st, js = h(s, "GET", f"/sandboxes/{sid}/watch?path=d5", tok=TA)
    assert st == 200, (st, js)
