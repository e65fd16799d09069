# SPDX-License-Identifier: MIT
"""Issue 30 item 3 (redteam-3 X3): size retention by tenant. Tenant alpha's
output, in its own threads and within every per-run and per-thread budget,
pushes a small run log past size_retention_high_water; retention deletes
alpha's oldest terminal runs, and bravo's runs, records, events and /chat
hydrate, older than all of them, survive (docs/SECURITY.md "Tenants").
Before tenants, retention deleted the oldest terminal runs of the log
whoever owned them: bravo's first."""
import asyncio
import os
import tempfile

from rwtest import auth, poll, start_as, ws_count

TA, TB, OP = "alpha.token", "bravo.token", "operator.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-retain-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{OP}\n{TA} threads=a-* tenant=alpha\n{TB} threads=b-* tenant=bravo\n")

# a 64 MiB log: the mark at 50 % is 32 MiB, a tenant's share half of it
SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}

[coordinatord]
map_size = 64M
preallocate = no
size_retention_high_water = 50
chunk_high_water = 95
map_warn_percent = 95
"""

FILL = "head -c 5000000 /dev/zero | tr '\\0' a"  # 5 MB of stdout


def wait_done(s, tok, run, thread):
    def done():
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth(tok))
        return st == 200 and rec["status"] in ("completed", "failed", "aborted") and rec
    rec = poll(done, 60, 0.05)
    assert rec and rec["status"] == "completed", (run, rec)
    return rec


def exists(s, tok, run, thread):
    st, _ = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth(tok))
    assert st in (200, 404), st
    return st == 200


def events(s, run, thread):
    n, _ = asyncio.run(ws_count(f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId={thread}"
                                f"&access_token={TB}"))
    return n


def metric(s, prefix):
    return s.metric(prefix, headers=auth(OP))


def test_one_tenants_output_never_prunes_another_tenants_history(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(OP))[0] == 200, 15)
    # bravo's history first: the oldest runs of the log
    b_runs = [start_as(s, TB, "b-history", f"echo B-IMPORTANT-RESULT-{i}") for i in range(3)]
    for r in b_runs:
        wait_done(s, TB, r, "b-history")
    st, body = s.http("POST", "/chat", {"threadId": "b-chat", "runId": "b-chat-1",
                                        "messages": [{"id": "m1", "role": "user",
                                                      "content": "echo bravo-chat"}]},
                      headers={**auth(TB), "Accept": "text/event-stream"})
    assert st == 200, st
    st, hyd = s.http("GET", "/chat?threadId=b-chat", headers=auth(TB))
    assert st == 200 and len(hyd["messages"]) >= 2, hyd
    b_events = events(s, b_runs[0], "b-history")
    assert b_events >= 3, b_events

    # alpha fills the log, one thread a run, each far within its budgets
    a_runs = []
    for i in range(12):
        thread = f"a-fill{i}"
        a_runs.append((start_as(s, TA, thread, FILL), thread))
        wait_done(s, TA, *a_runs[-1])
        if metric(s, "runwarden_runs_pruned_size_total") >= 2:
            break
    assert poll(lambda: metric(s, "runwarden_runs_pruned_size_total") >= 2, 10), \
        "size retention never ran"
    pruned = [not exists(s, TA, r, t) for r, t in a_runs]
    assert any(pruned), pruned
    # alpha's oldest went first: what is gone is a prefix of its runs
    assert pruned == sorted(pruned, reverse=True), pruned
    assert not pruned[-1], pruned

    # bravo lost nothing: runs, records, events, hydrate
    st, runs = s.http("GET", "/threads/b-history/runs", headers=auth(TB))
    assert st == 200 and sorted(r["runId"] for r in runs) == sorted(b_runs), runs
    for r in b_runs:
        assert exists(s, TB, r, "b-history"), r
    assert events(s, b_runs[0], "b-history") == b_events
    st, hyd2 = s.http("GET", "/chat?threadId=b-chat", headers=auth(TB))
    assert st == 200 and hyd2["messages"] == hyd["messages"], hyd2
    a_bytes = metric(s, 'runwarden_tenant_log_bytes{tenant="alpha"}')
    b_bytes = metric(s, 'runwarden_tenant_log_bytes{tenant="bravo"}')
    assert a_bytes and b_bytes and a_bytes > 10 * b_bytes, (a_bytes, b_bytes)
