# SPDX-License-Identifier: MIT
"""Issue 30 item 9: thread ids are valid UTF-8 without control (C0, DEL, C1)
or bidirectional control characters, and not '.' or '..'; every route that
takes one answers 400 invalid_thread_id otherwise, in the path (percent-
decoded: %FF), the query and the body, before anything is stored. The
prefix semantics of a token's threads= scope: 'a-*' covers 'a-1' and not
'ab'; 'a*' is a raw byte prefix ('ab', 'aé'). Ids with '/', '?', '#', '%' and
spaces are fine and reachable through every route (percent-encoded)."""
import os
import tempfile
import time
import urllib.parse

ADMIN, TA, TX = "tid-admin-token-1", "tid-tenant-a.token", "tid-tenant-x.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-tid-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{TA} threads=a-*\n{TX} threads=x*\n")

SUITE_CONF = f"""[routerd]
server_names = x
tokens_file = {TOKENS_FILE}
# two tokens are two tenants: not routerd's rate per tenant (t_tenant_rate) here
tenant_rate_per_second = 0
"""


def auth(tok=ADMIN):
    return {"Authorization": f"Bearer {tok}"}


def q(tid):
    return urllib.parse.quote(tid.encode("utf-8", "surrogateescape") if isinstance(tid, str)
                              else tid, safe="")


# (percent-encoded form, what is wrong with it)
BAD_PATH = [
    ("a-%FF", "valid UTF-8"),
    ("a-%C0%AF", "valid UTF-8"),            # an overlong '/'
    ("a-%ED%A0%80", "valid UTF-8"),         # a surrogate
    ("a-%E2%80%AEevil", "bidirectional"),   # U+202E
    ("a-%E2%81%A6x", "bidirectional"),      # U+2066
    ("a-%E2%80%8F", "bidirectional"),       # U+200F
    ("a-%D8%9C", "bidirectional"),          # U+061C
    ("a-%C2%85", "control"),                # C1 NEL
    ("a-%01", "control"),
    ("a-%7F", "control"),
    ("%2E%2E", "'.' or '..'"),
]
BAD_JSON = ["a-\u202eevil", "a-\u2067", "a-\u200e", "a-\x85", "a-\x9b", "a-\x01", "a-\x7f", "..",
            "."]


def test_invalid_thread_ids_are_400_on_every_route(s):
    for enc, what in BAD_PATH:
        for method, path in (("GET", f"/threads/{enc}/runs"),
                             ("GET", f"/threads/{enc}/files/x"),
                             ("PUT", f"/threads/{enc}/files/x"),
                             ("POST", f"/threads/{enc}/snapshots"),
                             ("GET", f"/runs/00000000-0000-4000-8000-000000000000?threadId={enc}"),
                             ("POST", f"/runs/00000000-0000-4000-8000-000000000000/cancel?threadId={enc}"),
                             ("GET", f"/chat?threadId={enc}"),
                             ("GET", f"/chat?runId=r&offset=-1&threadId={enc}"),
                             ("GET", f"/ds/v1/threads/{enc}/runs/00000000-0000-4000-8000-000000000000")):
            hdr = dict(auth(), **({"Content-Type": "application/json"} if method == "POST"
                                   else {}))
            st, js = s.http(method, path, raw_body=b"x" if method == "PUT" else
                            (b"{}" if method == "POST" else None), headers=hdr)
            assert st == 400 and js["code"] == "invalid_thread_id", (method, path, st, js)
            assert what in js["error"], (path, js)
    for tid in BAD_JSON:
        st, js = s.http("POST", "/runs", {"threadId": tid, "messages": [
            {"role": "user", "content": "echo no"}]}, headers=auth())
        assert st == 400 and js["code"] == "invalid_thread_id", (tid, st, js)
        st, js = s.http("POST", "/chat", {"threadId": tid, "runId": "r", "messages": [
            {"id": "u", "role": "user", "content": "x"}]}, headers=auth())
        assert st == 400 and js["code"] == "invalid_thread_id", (tid, st, js)
    # nothing of it was stored
    st, js = s.http("GET", "/threads?limit=200", headers=auth())
    assert st == 200 and js["threads"] == [], js


def test_odd_but_valid_ids_work_through_every_route(s):
    for tid in ("a-/../b x?y#z%2F%", "a-é ü", "a-\u200d", "..."):
        tok = TA if tid.startswith("a-") else ADMIN
        st, js = s.http("POST", "/runs", {"threadId": tid, "messages": [
            {"role": "user", "content": "echo hi > f.txt; echo out"}]}, headers=auth(tok))
        assert st == 202, (tid, st, js)
        run = js["runId"]
        deadline = time.time() + 60
        while True:
            st, rec = s.http("GET", f"/runs/{run}?threadId={q(tid)}", headers=auth(tok))
            assert st == 200 and rec["threadId"] == tid, (tid, st, rec)
            if rec["status"] != "running" and rec["status"] != "queued":
                break
            assert time.time() < deadline, rec
            time.sleep(0.05)
        assert rec["status"] == "completed", rec
        st, raw = s.http("GET", f"/chat?runId={run}&offset=-1&format=ndjson&threadId={q(tid)}",
                         headers=auth(tok))
        assert st == 200 and b"out" in raw, (tid, st, raw)
        st, runs = s.http("GET", f"/threads/{q(tid)}/runs", headers=auth(tok))
        assert st == 200 and [r["runId"] for r in runs] == [run], (tid, st, runs)
        st, body = s.http("GET", f"/threads/{q(tid)}/files/f.txt", headers=auth(tok))
        assert st == 200 and body == b"hi\n", (tid, st, body)
        st, rec = s.http("GET", f"/runs/{run}?threadId={q(tid)}", headers=auth(tok))
        assert st == 200 and rec["threadId"] == tid, (st, rec)
    st, js = s.http("GET", "/threads?limit=200", headers=auth(TA))
    assert sorted(t["threadId"] for t in js["threads"]) == sorted(
        ["a-/../b x?y#z%2F%", "a-é ü", "a-\u200d"]), js


def test_scope_prefixes(s):
    for tid in ("a-1", "ab", "aé", "a", "x", "xy", "xé", "x-1", "b-1"):
        st, js = s.http("PUT", f"/threads/{q(tid)}/files/x", raw_body=b"1", headers=auth())
        assert st in (200, 201), (tid, st, js)
    want = {TA: {"a-1"}, TX: {"x", "xy", "xé", "x-1"}}
    for tok, mine in want.items():
        for tid in ("a-1", "ab", "aé", "a", "x", "xy", "xé", "x-1", "b-1"):
            st, js = s.http("GET", f"/threads/{q(tid)}/files/x", headers=auth(tok))
            if tid in mine:
                assert st == 200, (tok, tid, st, js)
            else:
                assert st == 403 and js["code"] == "thread_forbidden", (tok, tid, st, js)
