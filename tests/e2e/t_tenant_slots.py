# SPDX-License-Identifier: MIT
"""Issue 30 item 4 (redteam-3 X4): a tenant's share of the sandbox slots.
Tenant alpha starts `sleep` runs in more threads than its share of
max_instances (tenant_max_instances, by default half): it holds its share,
its other runs wait in the queue (queued, not failed). Tenant bravo's new
thread gets a slot at once, in about the time of a baseline run measured
before alpha came (docs/SECURITY.md "Tenants"). Before tenants, alpha took
every slot and bravo's run waited for queue_timeout."""
import os
import tempfile
import time

from rwtest import auth, poll, start_as

TA, TB, OP = "alpha.token", "bravo.token", "operator.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-slots-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{OP}\n{TA} threads=a-* tenant=alpha\n{TB} threads=b-* tenant=bravo\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}

[containerd-shim]
max_instances = 4
queue_timeout_ms = 30000
"""


def record(s, run, thread):
    st, rec = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth(OP))
    assert st == 200, (st, rec)
    return rec


def wait_done(s, run, thread, timeout=60):
    def done():
        rec = record(s, run, thread)
        return rec["status"] in ("completed", "failed", "aborted") and rec
    rec = poll(done, timeout, 0.02)
    assert rec, (run, record(s, run, thread))
    return rec


def timed_run(s, tok, thread):
    t0 = time.monotonic()
    rec = wait_done(s, start_as(s, tok, thread, "echo served"), thread)
    return time.monotonic() - t0, rec


def metric(s, prefix):
    return s.metric(prefix, headers=auth(OP))


def test_a_tenant_holds_its_share_and_another_tenant_is_served_at_once(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(OP))[0] == 200, 15)
    # the baseline: bravo's new thread on an idle host
    base, rec = timed_run(s, TB, "b-base")
    assert rec["status"] == "completed", rec
    # alpha asks for every slot
    held = [(start_as(s, TA, f"a-{i}", "sleep 60"), f"a-{i}") for i in range(4)]
    assert poll(lambda: sum("sandboxId" in record(s, r, t) for r, t in held) == 2, 20)
    assert poll(lambda: metric(s, 'runwarden_tenant_sandboxes_queued{tenant="alpha"}') == 2, 10)
    time.sleep(0.3)
    assert sum("sandboxId" in record(s, r, t) for r, t in held) == 2  # its share, no more
    assert metric(s, 'runwarden_tenant_sandboxes{tenant="alpha"}') == 2
    # bravo's new thread: a slot at once
    took, rec = timed_run(s, TB, "b-new")
    assert rec["status"] == "completed", rec
    assert took < 3 * base + 1.0, (took, base)
    # alpha's runs beyond its share wait (queued, not failed) ...
    waiting = [(r, t) for r, t in held if "sandboxId" not in record(s, r, t)]
    assert len(waiting) == 2
    for r, t in waiting:
        assert record(s, r, t)["status"] == "running"
    # ... and get a slot when one of its own frees
    first = next((r, t) for r, t in held if (r, t) not in waiting)
    st, _ = s.http("POST", f"/runs/{first[0]}/cancel?threadId={first[1]}", headers=auth(TA))
    assert st in (200, 202), st
    assert poll(lambda: any("sandboxId" in record(s, r, t) for r, t in waiting), 20)
    for r, t in held:
        s.http("POST", f"/runs/{r}/cancel?threadId={t}", headers=auth(TA))
    for r, t in held:
        assert wait_done(s, r, t)["status"] in ("aborted", "failed"), (r, t)
