# SPDX-License-Identifier: MIT
"""Issue 30, tenants (docs/SECURITY.md "Tenants"): every tokens_file line
belongs to a tenant (`tenant=NAME`, else one of its own named after the
token's digest); a run's record names its tenant; a thread belongs to the
first tenant that created work or data in it (403 thread_forbidden for any
other, whatever the scope); per-tenant caps on threads (429
tenant_threads_quota), on runs going at once (429 tenant_runs_quota) and on
backup bytes (429 tenant_backup_quota), nothing of another tenant touched;
/metrics by tenant."""
import hashlib
import json
import os
import tempfile

from rwtest import check_tokens_config, poll, wait_done_as

ADMIN, TA1, TA2, TB = "admin-token-0001", "acme-one.token", "acme-two.token", "bravo.token"
TQ, TR, TK = "quota.token", "runner.token", "keeper.token"
TS, TS2 = "sbx-one.token", "sbx-two.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-tenant-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"""{ADMIN}
{TA1}  threads=a-*,shared  tenant=acme
{TA2}  tenant=acme threads=a2-*,shared
{TB}   threads=b-*,shared
{TQ}   threads=q-* tenant=quota
{TR}   threads=r-* tenant=runner
{TK}   threads=k-* tenant=keeper
{TS}   threads=s-* tenant=sbx
{TS2}  threads=s-* tenant=sbx
""")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}

[coordinatord]
tenant_max_threads = 4
tenant_max_running = 2

[containerd-shim]
tenant_max_backup_bytes = 1M
"""


def own_tenant(tok):
    return "t-" + hashlib.sha256(tok.encode()).hexdigest()[:12]


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def run_body(thread, cmd="echo hi"):
    return {"threadId": thread, "messages": [{"role": "user", "content": cmd}]}


def start(s, tok, thread, cmd="echo hi"):
    st, js = s.http("POST", "/runs", run_body(thread, cmd), headers=auth(tok))
    assert st == 202, (tok, thread, st, js)
    return js["runId"]


def wait_done(s, run, thread):
    return wait_done_as(s, ADMIN, run, thread)


def metrics(s):
    st, text = s.http("GET", "/metrics", headers=auth(ADMIN))
    assert st == 200, st
    return text.decode() if isinstance(text, bytes) else str(text)


def metric(s, line_prefix):
    for line in metrics(s).splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.split()[1])
    return None


def test_tenant_names_and_records(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15)
    for tok, thread, tenant in ((TA1, "a-1", "acme"), (TA2, "a2-1", "acme"),
                                (TB, "b-1", own_tenant(TB)), (ADMIN, "adm-1", own_tenant(ADMIN))):
        rec = wait_done(s, start(s, tok, thread), thread)
        assert rec["status"] == "completed" and rec["tenant"] == tenant, (tok, rec)
        assert tok not in str(rec)
    # /chat's runs too
    st, body = s.http("POST", "/chat", {"threadId": "a-chat", "runId": "a-chat-run-1",
                                        "messages": [{"id": "m1", "role": "user",
                                                      "content": "echo chat"}]},
                      headers={**auth(TA1), "Accept": "text/event-stream"})
    assert st == 200, (st, body)
    st, runs = s.http("GET", "/threads/a-chat/runs", headers=auth(TA1))
    assert st == 200 and runs and runs[0]["tenant"] == "acme", (st, runs)
    assert metric(s, 'runwarden_tenant_runs_started_total{tenant="acme"}') >= 3
    assert metric(s, f'runwarden_tenant_runs_started_total{{tenant="{own_tenant(TB)}"}}') == 1
    assert TB not in metrics(s) and TA1 not in metrics(s)


def test_a_thread_belongs_to_its_first_tenant(s):
    st, js = s.http("PUT", "/threads/shared/files/x.txt", headers=auth(TA1), raw_body=b"acme's")
    assert st == 201, (st, js)
    snap = None
    for method, path, body in (("POST", "/runs", run_body("shared")),
                               ("PUT", "/threads/shared/files/x.txt", None),
                               ("PUT", "/threads/shared/files/evil.txt", None),
                               ("DELETE", "/threads/shared/files/x.txt", None),
                               ("POST", "/threads/shared/files/d?op=mkdir", None),
                               ("POST", "/threads/shared/files/x.txt?op=rename&to=y.txt", None),
                               ("POST", "/threads/shared/snapshots", {})):
        raw = b"bravo's" if method == "PUT" else None
        st, js = s.http(method, path, body, headers=auth(TB), raw_body=raw)
        assert st == 403 and js["code"] == "thread_forbidden", (method, path, st, js)
    # the same tenant's other token may work there
    rec = wait_done(s, start(s, TA2, "shared", "cat x.txt"), "shared")
    assert rec["status"] == "completed" and rec["tenant"] == "acme", rec
    st, snap = s.http("POST", "/threads/shared/snapshots", {}, headers=auth(TA2))
    assert st == 201, (st, snap)
    st, js = s.http("POST", "/threads/shared/restore", {"snapshotId": snap["snapshotId"]},
                    headers=auth(TB))
    assert st == 403 and js["code"] == "thread_forbidden", (st, js)
    # nothing of acme's touched; b's scope still lets it read (scopes decide reads)
    st, body = s.http("GET", "/threads/shared/files/x.txt", headers=auth(TA1))
    assert st == 200 and body == b"acme's", (st, body)
    st, js = s.http("GET", "/threads/shared/files/evil.txt?stat=1", headers=auth(TA1))
    assert st == 404, (st, js)
    st, runs = s.http("GET", "/threads/shared/runs", headers=auth(TA1))
    assert st == 200 and len(runs) == 1 and runs[0]["tenant"] == "acme", runs
    assert metric(s, f'runwarden_tenant_refused_total{{tenant="{own_tenant(TB)}",'
                     'code="thread_forbidden"}') >= 8


def test_threads_quota(s):
    for i in range(4):
        st, js = s.http("PUT", f"/threads/q-{i}/files/f", headers=auth(TQ), raw_body=b"x")
        assert st == 201, (i, st, js)
    for method, path, body in (("PUT", "/threads/q-4/files/f", None),
                               ("POST", "/threads/q-5/files/d?op=mkdir", None),
                               ("POST", "/runs", run_body("q-6")),
                               ("POST", "/threads/q-7/snapshots", {})):
        st, js = s.http(method, path, body, headers=auth(TQ),
                        raw_body=b"x" if method == "PUT" else None)
        assert st == 429 and js["code"] == "tenant_threads_quota", (method, path, st, js)
    # its own threads still work; nothing was made for the refused ones
    st, js = s.http("PUT", "/threads/q-0/files/g", headers=auth(TQ), raw_body=b"y")
    assert st == 201, (st, js)
    rec = wait_done(s, start(s, TQ, "q-1", "cat f"), "q-1")
    assert rec["status"] == "completed", rec
    st, js = s.http("GET", "/threads/q-4/files/f?stat=1", headers=auth(TQ))
    assert st == 404, (st, js)
    st, runs = s.http("GET", "/threads/q-6/runs", headers=auth(TQ))
    assert st == 200 and runs == [], runs
    # another tenant is not held by it
    st, js = s.http("PUT", "/threads/b-new/files/f", headers=auth(TB), raw_body=b"b")
    assert st == 201, (st, js)
    assert metric(s, 'runwarden_tenant_threads{tenant="quota"}') == 4
    assert metric(s, 'runwarden_tenant_refused_total{tenant="quota",'
                     'code="tenant_threads_quota"}') == 4


def test_running_runs_quota(s):
    st, js = s.http("POST", "/runs", run_body("r-0", "sleep 60"),
                    headers={**auth(TR), "Idempotency-Key": "k-held"})
    assert st == 202, (st, js)
    held = [js["runId"], start(s, TR, "r-1", "sleep 60")]
    st, js = s.http("POST", "/runs", run_body("r-2"), headers=auth(TR))
    assert st == 429 and js["code"] == "tenant_runs_quota", (st, js)
    # a retry of a run that exists is no new run
    st, js = s.http("POST", "/runs", run_body("r-0", "sleep 60"),
                    headers={**auth(TR), "Idempotency-Key": "k-held"})
    assert st == 202 and js["runId"] == held[0], (st, js)
    assert metric(s, 'runwarden_tenant_runs_running{tenant="runner"}') == 2
    # another tenant runs meanwhile
    rec = wait_done(s, start(s, TB, "b-2"), "b-2")
    assert rec["status"] == "completed", rec
    for i, run in enumerate(held):
        st, _ = s.http("POST", f"/runs/{run}/cancel?threadId=r-{i}", headers=auth(TR))
        assert st in (200, 202), st
        wait_done(s, run, f"r-{i}")
    assert poll(lambda: metric(s, 'runwarden_tenant_runs_running{tenant="runner"}') == 0, 10)
    rec = wait_done(s, start(s, TR, "r-2"), "r-2")
    assert rec["status"] == "completed", rec
    assert metric(s, 'runwarden_tenant_refused_total{tenant="runner",'
                     'code="tenant_runs_quota"}') == 1


def test_backup_bytes_quota(s):
    # 700 kB that do not compress: the first two snapshots fit under 1M, a third does not
    st, js = s.http("PUT", "/threads/k-1/files/blob", headers=auth(TK),
                    raw_body=os.urandom(700000))
    assert st == 201, (st, js)
    snaps = []
    for i in range(2):
        st, js = s.http("POST", "/threads/k-1/snapshots", {"label": f"s{i}"}, headers=auth(TK))
        assert st == 201, (i, st, js)
        snaps.append(js["snapshotId"])
    for thread in ("k-1", "k-2"):
        st, js = s.http("POST", f"/threads/{thread}/snapshots", {}, headers=auth(TK))
        assert st == 429 and js["code"] == "tenant_backup_quota", (thread, st, js)
    # its backups are still there, and another tenant's snapshot is not held by it
    st, js = s.http("POST", "/threads/k-1/restore", {"snapshotId": snaps[0]}, headers=auth(TK))
    assert st == 200, (st, js)
    st, js = s.http("PUT", "/threads/b-bk/files/x", headers=auth(TB), raw_body=b"bravo")
    assert st == 201, (st, js)
    st, js = s.http("POST", "/threads/b-bk/snapshots", {}, headers=auth(TB))
    assert st == 201, (st, js)
    st, js = s.http("POST", "/threads/b-bk/restore", {"snapshotId": js["snapshotId"]},
                    headers=auth(TB))
    assert st == 200, (st, js)


def exec_in(s, tok, thread, command):
    """POST /sandboxes/{thread}/exec: (status, the NDJSON objects or the error body)."""
    st, body = s.http("POST", f"/sandboxes/{thread}/exec", {"command": command},
                      headers=auth(tok))
    if st != 200:
        return st, body
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return st, [json.loads(line) for line in raw.splitlines() if line.strip()]


def test_the_sandbox_api_respects_the_threads_tenant(s):
    # sbx makes a workspace through the sandbox API: the thread is sbx's
    st, js = s.http("PUT", "/sandboxes/s-sbx", {}, headers=auth(TS))
    assert st == 201, (st, js)
    st, objs = exec_in(s, TS, "s-sbx", "echo tenant-s > mine.txt; echo ok")
    assert st == 200 and objs[-1]["type"] == "exit" and objs[-1]["exitCode"] == 0, (st, objs)
    st, snap = s.http("POST", "/threads/s-sbx/snapshots", {}, headers=auth(TS))
    assert st == 201, (st, snap)
    # an unscoped token of another tenant: every change is refused, nothing runs
    st, js = exec_in(s, ADMIN, "s-sbx", "echo admin > evil.txt")
    assert st == 403 and js["code"] == "thread_forbidden", (st, js)
    for method, path, body in (("PUT", "/sandboxes/s-sbx", {}),
                               ("POST", "/sandboxes/s-sbx/stop", None),
                               ("DELETE", "/sandboxes/s-sbx", None),
                               ("POST", "/sandboxes/adm-fork/restore",
                                {"from": "s-sbx", "snapshotId": snap["snapshotId"]})):
        st, js = s.http(method, path, body, headers=auth(ADMIN))
        assert st == 403 and js["code"] == "thread_forbidden", (method, path, st, js)
    # reads are the scope's: the admin still sees the sandbox and sbx's file
    st, js = s.http("GET", "/sandboxes/s-sbx", headers=auth(ADMIN))
    assert st == 200, (st, js)
    st, body = s.http("GET", "/threads/s-sbx/files/mine.txt", headers=auth(ADMIN))
    assert st == 200 and body == b"tenant-s\n", (st, body)
    st, js = s.http("GET", "/threads/s-sbx/files/evil.txt?stat=1", headers=auth(TS))
    assert st == 404, (st, js)
    # the refused restore made no sandbox; sbx's own restore into a new id works
    st, js = s.http("GET", "/sandboxes/adm-fork", headers=auth(ADMIN))
    assert st == 404, (st, js)
    st, js = s.http("POST", "/sandboxes/s-fork/restore",
                    {"from": "s-sbx", "snapshotId": snap["snapshotId"]}, headers=auth(TS))
    assert st in (200, 201), (st, js)
    st, objs = exec_in(s, TS2, "s-fork", "cat mine.txt")
    assert st == 200 and objs[-1]["exitCode"] == 0, (st, objs)
    # the sandbox API's workspaces count in the threads quota (quota holds 4)
    st, js = s.http("PUT", "/sandboxes/q-sbx", {}, headers=auth(TQ))
    assert st == 429 and js["code"] == "tenant_threads_quota", (st, js)
    st, js = exec_in(s, TQ, "q-sbx2", "true")
    assert st == 429 and js["code"] == "tenant_threads_quota", (st, js)


def check_config(text):
    return check_tokens_config(text, prefix="rw-tenant-")


def test_bad_tenant_lines_are_refused_with_file_and_line(s):
    for line, what in (("secret-x tenant=", "tenant="), ("secret-x tenant=a/b", "tenant="),
                       ("secret-x tenant=" + "x" * 64, "tenant="),
                       ("secret-x tenant=a tenant=b", "each once")):
        rc, out, path = check_config(f"# c\n{line}\n")
        assert rc != 0 and f"{path}:2:" in out and what in out, (line, out)
        assert "secret-x" not in out, out
    rc, out, _ = check_config("ok-token tenant=x.y-Z_1 threads=a-*\nplain-token\n")
    assert rc == 0, out
