# SPDX-License-Identifier: MIT
"""Issue 3: a run that was active when coordinatord died, whose shim never
comes back, fails with sandbox_lost after sandbox_wait_ms instead of waiting
to be re-attached forever (the watchdog spares runs waiting to re-attach).
The same holds when only the shim dies: the run waits sandbox_wait_ms for a
shim to re-attach to (it would re-adopt the sandbox, t_sandbox_readopt.py),
then fails."""
import signal
import time

from rwtest import stdout_text

SUITE_CONF = """[coordinatord]
sandbox_wait_ms = 800
"""


def test_reattach_gives_up_when_the_shim_stays_away(s):
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable", r"shim"]
    run = s.start_run("sleep 30.04", thread="t-away")
    s.wait_run(run, "t-away", lambda r: r["lastSeq"] >= 4, 5)
    time.sleep(0.2)
    s.kill("coordinatord", signal.SIGKILL)
    s.kill("containerd-shim", signal.SIGKILL)
    s.start_daemon("coordinatord")  # and no shim
    t0 = time.time()
    rec = s.wait_run(run, "t-away", lambda r: r["status"] != "running", 10)
    assert rec["status"] == "failed" and rec["error"]["code"] == "sandbox_lost", rec
    assert time.time() - t0 < 5
    s.start_daemon("containerd-shim")  # back for a clean teardown
    s.wait_readyz()
    assert s.http("GET", "/readyz")[0] == 200


def test_shim_alone_dies_run_waits_then_fails(s):
    s.expected_errors += [r"coordinat", r"Lost", r"lost", r"unavailable", r"shim"]
    s.wait_ready()
    run = s.start_run("echo started; sleep 30.05", thread="t-shim-away")
    # executing (its first output is in), not still starting
    last, seen = -1, ""
    while "started\n" not in seen:
        ev = s.tail(run, thread="t-shim-away", last_seq=last, limit=1, timeout=15)[0]
        last, seen = ev[0]["seq"], seen + stdout_text(ev)
    s.kill("containerd-shim", signal.SIGKILL)
    rec = s.wait_run(run, "t-shim-away", lambda r: r["status"] != "running", 10)
    # it waited for a shim to re-attach to (not failed at once), then sandbox_lost
    assert rec["status"] == "failed" and rec["error"]["code"] == "sandbox_lost", rec
    assert "did not come back" in rec["error"]["message"], rec
    assert "Waiting for containerd-shim to re-attach" in s.log("coordinatord")
    s.start_daemon("containerd-shim")  # back for a clean teardown
    s.wait_readyz()
    assert s.http("GET", "/readyz")[0] == 200
