# SPDX-License-Identifier: MIT
"""Issue 12 item 1: no run can fill the shared run log. A run over its output
budget gets a dropped-bytes marker and ends output_limit; events of running
runs stop at a high-water mark so run starts and ends still commit; size
retention deletes the oldest terminal runs; the journal warns once.

The map is small (64 MiB) so that a flood bigger than the map is quick."""
import json
import os
import re
import subprocess
import time

from ipc import Ipc, IpcError, status_metrics
from rwtest import assert_gapfree, poll, stdout_text

SUITE_CONF = """[coordinatord]
map_size = 64M
max_run_output_bytes = 16M
"""

MARK = "rw-flood-7f3a"
FLOOD = f"yes | head -c 200M; : {MARK}"


def ipc(s):
    return Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))


def metrics(s):
    c = ipc(s)
    out = status_metrics(c)
    c.close()
    return out


def read_all(c, run):
    events, seq = [], -1
    while True:
        body = c.call("RUN_READ", {"run_id": run, "from_seq": seq, "max": 256})
        assert body["first_seq"] == seq + 1, (body["first_seq"], seq)
        if not body["events"]:
            return events, json.loads(body["record"])
        events += [json.loads(e) for e in body["events"]]
        seq += len(body["events"])


def host_procs(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def journal(s):
    with open(s.log_path("coordinatord")) as f:
        return f.read()


def test_flood_ends_output_limit_and_another_thread_still_runs(s):
    run = s.start_run(FLOOD, thread="t-flood")
    rec = s.wait_terminal(run, thread="t-flood", timeout=180)
    assert rec["status"] == "failed" and rec["error"]["code"] == "output_limit", rec
    c = ipc(s)
    events, rec2 = read_all(c, run)
    c.close()
    assert rec2["lastSeq"] == len(events) - 1
    marks = [e for e in events if e.get("type") == "CUSTOM" and
             e.get("name") == "runwarden.output_dropped"]
    assert len(marks) == 1 and marks[0]["value"]["droppedBytes"] > 0, marks
    assert re.search(r"dropped \d+ bytes", marks[0]["value"]["text"]), marks
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "output_limit", events[-1]
    assert events.index(marks[0]) < len(events) - 1  # the marker comes before the end
    text = stdout_text([{"chunk": e} for e in events])
    assert len(text) == 16 << 20 and set(text) == {"y", "\n"}, len(text)

    # the host is fine: another thread's run starts and completes
    t0 = time.time()
    other = s.start_run("echo hi", thread="t-other")
    evs, status, code, _ = s.tail(other, thread="t-other", timeout=60)
    took = time.time() - t0
    assert status["status"] == "completed" and stdout_text(evs) == "hi\n", status
    assert code == 1000
    assert_gapfree(evs)
    st, _ = s.http("GET", "/readyz")
    assert st == 200
    m = metrics(s)
    assert m["runwarden_runs_output_limited_total"] == 1
    assert m["runwarden_output_dropped_bytes_total"] > 0
    assert m["runwarden_runlog_used_bytes"] < m["runwarden_runlog_map_bytes"] * 0.8, m
    print(f"  [measure] echo hi after the flood: {took:.2f}s; run log "
          f"{m['runwarden_runlog_used_bytes'] / 2**20:.1f} MiB of "
          f"{m['runwarden_runlog_map_bytes'] / 2**20:.0f} MiB; flood stored "
          f"{len(text) >> 20} MiB of stdout, marker says {marks[0]['value']['droppedBytes']} "
          f"bytes dropped, {m['runwarden_output_dropped_bytes_total']:.0f} dropped in all")
    # the flood's exec was killed, not left writing into nothing
    assert poll(lambda: not host_procs(MARK), timeout=15), host_procs(MARK)


def test_high_water_refuses_events_but_starts_and_ends_commit(s):
    s.expected_errors += []  # nothing here may log at error level
    c = ipc(s)
    fill = c.call("RUN_OPEN", {"thread_id": "t-fill"})["run_id"]
    blob = json.dumps({"type": "CUSTOM", "name": "blob", "value": "x" * (1 << 20)})
    acked, refused = 0, None
    for _ in range(80):  # 80 MiB into a 64 MiB map
        try:
            c.call("RUN_APPEND", {"run_id": fill, "chunk": blob})
            acked += 1
        except IpcError as e:
            refused = e
            break
    assert refused is not None and refused.code == -28, refused  # ENOSPC, not MDB_MAP_FULL
    assert 40 <= acked < 64, acked
    m = metrics(s)
    assert m["runwarden_events_refused_full_total"] >= 1
    assert m["runwarden_runlog_over_warn"] == 1
    assert m["runwarden_commit_failures_total"] == 0, m  # refused before LMDB ran out
    # one warning on crossing, not one per event
    assert len(re.findall(r"Run log at \d+% of its map", journal(s))) == 1

    # starts and terminal records still commit above the mark
    other = c.call("RUN_OPEN", {"thread_id": "t-fill2"})["run_id"]
    rec = json.loads(c.call("RUN_FINISH", {"run_id": other, "status": "completed"})["record"])
    assert rec["status"] == "completed"
    rec = json.loads(c.call("RUN_FINISH", {"run_id": fill, "status": "completed"})["record"])
    # its RUN_FINISHED event too: a terminal event commits above the mark
    assert rec["status"] == "completed" and rec["lastSeq"] == acked, (rec, acked)

    # size retention: the oldest terminal runs go until the log is below its mark
    def pruned():
        m = metrics(s)
        return m["runwarden_runs_pruned_size_total"] >= 1 and \
            m["runwarden_runlog_used_bytes"] < m["runwarden_runlog_map_bytes"] * 0.75 and m
    m = poll(pruned, timeout=30)
    assert m, metrics(s)
    for rid, th in ((fill, "t-fill"), ):
        st, _ = s.http("GET", f"/runs/{rid}?threadId={th}")
        assert st == 404, (rid, st)
    # and a driven run works again
    run = s.start_run("echo again", thread="t-after")
    evs, status, _, _ = s.tail(run, thread="t-after", timeout=60)
    assert status["status"] == "completed" and stdout_text(evs) == "again\n"
    c.close()


def test_driven_runs_past_high_water_fail_storage_full_and_the_log_stays_usable(s):
    # four runs at once, each under its budget (15 of 16 MiB), together
    # 60 MiB of output (≈ 90 MiB of JSON) into a 64 MiB map
    runs = [(s.start_run("yes | head -c 15M; sleep 60", thread=f"t-hw{i}"), f"t-hw{i}")
            for i in range(4)]

    def full_failures():
        return len(re.findall(r"Run failed: run log is full \(storage_full\)", journal(s)))
    assert poll(full_failures, timeout=240), "no run was stopped at the high-water mark"
    m = metrics(s)
    assert m["runwarden_events_refused_full_total"] > 0
    assert m["runwarden_commit_failures_total"] == 0, m  # never MDB_MAP_FULL
    # the others are cancelled (they would sleep on); every run ends
    for rid, th in runs:
        st, rec = s.http("GET", f"/runs/{rid}?threadId={th}")
        if st == 200 and rec["status"] == "running":
            st, body = s.http("POST", f"/runs/{rid}/cancel?threadId={th}")
            assert st in (200, 202, 404, 409), (st, body)
    # a run still starts and completes
    run = s.start_run("echo ok", thread="t-hw-after")
    evs, status, _, _ = s.tail(run, thread="t-hw-after", timeout=60)
    assert status["status"] == "completed" and stdout_text(evs) == "ok\n", status
    st, _ = s.http("GET", "/readyz")
    assert st == 200
    assert metrics(s)["runwarden_commit_failures_total"] == 0
