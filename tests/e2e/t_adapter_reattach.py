# SPDX-License-Identifier: MIT
"""Issue 12 item 9: a coordinatord crash in the middle of a harness's stream
changes nothing in the run's events. The stand-ins (tests/fixtures/bin/replay,
runner, a shell loop) stop after k lines on a gate file in the workspace; the
test waits for the events of those lines to be committed, kills coordinatord
with SIGKILL, restarts it, opens the gate, and compares the whole stream from
seq 0 with the uninterrupted one (tests/fixtures/<cli>/<name>.expected.json,
or a reference run): no START lost, no chunk twice, the same generated ids.

./dev test runs every line boundary of one transcript per adapter;
tests/reliability/adapter-reattach (RW_REATTACH_ALL=1) every boundary of
every transcript."""
import json
import os
import shutil
import time

from t_coord_crash import restart_coordinator, wait_router_linked
from t_harness import FIX, STANDIN_HARNESSES, prepare, strip, workspace

ALL = os.environ.get("RW_REATTACH_ALL") == "1"

SUITE_CONF = STANDIN_HARNESSES

EXPECTED_ERRORS = [r"coordinat", r"Lost", r"lost", r"unavailable"]


def gate_dir(s, thread):
    return os.path.join(workspace(s, thread), ".gate")


def reset_gate(s, thread):
    g = gate_dir(s, thread)
    shutil.rmtree(g, ignore_errors=True)
    os.makedirs(g)
    os.chmod(g, 0o777)
    return g


def start(s, thread, harness, prompt):
    body = {"threadId": thread, "messages": [{"role": "user", "content": prompt}]}
    if harness != "shell":
        body["metadata"] = {"harness": harness}
    st, js = s.http("POST", "/runs", body)
    assert st == 202, (st, js)
    return js["runId"]


def settle(s, run, thread):
    """Wait until the events of the lines before the gate are committed (the
    last seq stops moving). Not an assertion: a kill before the commit must
    give the same stream too, it only tests less."""
    last, same, deadline = None, 0, time.time() + 5
    while same < 3 and time.time() < deadline:
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}")
        seq = rec.get("lastSeq") if st == 200 else None
        same = same + 1 if seq == last else 0
        last = seq
        time.sleep(0.05)


def finish(s, run, thread):
    events, status, code, _ = s.tail(run, thread=thread, timeout=60)
    assert code == 1000
    assert [e["seq"] for e in events] == list(range(len(events))), [e["seq"] for e in events]
    return [e["chunk"] for e in events], status


def crash_at(s, thread, harness, prompt, k):
    """The run of `prompt` with coordinatord killed while the process waits
    before its line k."""
    g = reset_gate(s, thread)
    run = start(s, thread, harness, prompt.replace("GATE", str(k)))
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(g, f"{k}.ready")):
        assert time.time() < deadline, f"the stand-in never reached its gate {k}"
        time.sleep(0.01)
    settle(s, run, thread)
    restart_coordinator(s, wait_router=True)
    open(os.path.join(g, f"{k}.go"), "w").close()
    return run, *finish(s, run, thread)


def uninterrupted(s, thread, harness, prompt):
    g = reset_gate(s, thread)
    open(os.path.join(g, "-1.go"), "w").close()
    run = start(s, thread, harness, prompt.replace("GATE", "-1"))
    return run, *finish(s, run, thread)


def lines_of(cli, name):
    with open(os.path.join(FIX, cli, f"{name}.jsonl")) as f:
        return sum(1 for _ in f)


def check_transcript(s, thread, cli, name):
    want = json.load(open(os.path.join(FIX, cli, f"{name}.expected.json")))
    for k in range(lines_of(cli, name)):
        run, chunks, status = crash_at(s, thread, cli, f"fixture:{name}:gate=GATE", k)
        got = strip(chunks, run)
        assert got == want, f"{cli}/{name}, killed before line {k}:\n" + json.dumps(got, indent=1)


def test_claude_code_stream_survives_a_kill9_at_every_line(s):
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-claude")
    for name in ["basic"] + (["error", "truncated"] if ALL else []):
        check_transcript(s, "t-claude", "claude", name)


def test_codex_stream_survives_a_kill9_at_every_line(s):
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-codex")
    for name in ["basic"] + (["failed"] if ALL else []):
        check_transcript(s, "t-codex", "codex", name)


def test_claude_code_truncated_keeps_its_stderr_across_a_kill9(s):
    """The stderr kept for the error message is in the driver state."""
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-claude")
    want = json.load(open(os.path.join(FIX, "claude", "truncated.expected.json")))
    run, chunks, status = crash_at(s, "t-claude", "claude", "fixture:truncated:gate=GATE", 2)
    assert strip(chunks, run) == want, json.dumps(strip(chunks, run), indent=1)
    assert "warning: stream unstable" in status["error"]["message"], status


def test_ndjson_stream_survives_a_kill9_at_every_line(s):
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-ra-runner")
    ref, chunks, status = uninterrupted(s, "t-ra-runner", "runner", "ok:gate=GATE")
    want = strip(chunks, ref)
    assert status["status"] == "completed" and len(want) == 6, want
    for k in range(6):  # the runner writes 6 lines, one of them blank
        run, chunks, status = crash_at(s, "t-ra-runner", "runner", "ok:gate=GATE", k)
        assert strip(chunks, run) == want, (k, strip(chunks, run))


SHELL = ("for i in 1 2 3 4 5; do echo line$i; echo err$i >&2; "
         "if [ $i = GATE ]; then touch /workspace/.gate/GATE.ready; "
         "while [ ! -e /workspace/.gate/GATE.go ]; do sleep 0.01; done; fi; done")


def shell_view(chunks, run):
    """The stream with consecutive output chunks of a stream joined: how output
    is cut into chunks depends on the loop turns, not on a crash."""
    out = []
    for c in strip(chunks, run):
        if c.get("type") == "TOOL_CALL_ARGS":  # the command names its gate
            c = dict(c, delta="COMMAND")
        if c.get("type") == "CUSTOM" and out and out[-1].get("name") == c.get("name"):
            out[-1] = dict(out[-1], value={"text": out[-1]["value"]["text"] + c["value"]["text"]})
        else:
            out.append(c)
    return out


def test_shell_stream_survives_a_kill9_at_every_line(s):
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-ra-shell")
    ref, chunks, status = uninterrupted(s, "t-ra-shell", "shell", SHELL)
    assert status["status"] == "completed", status
    for k in range(1, 5):
        run, got, status = crash_at(s, "t-ra-shell", "shell", SHELL, k)
        assert status["status"] == "completed", status
        a, b = shell_view(got, run), shell_view(chunks, ref)
        # stdout and stderr interleave by timing: compare each stream whole
        for name in ("process.stdout", "process.stderr"):
            assert ("".join(c["value"]["text"] for c in a if c.get("name") == name) ==
                    "".join(c["value"]["text"] for c in b if c.get("name") == name)), (k, a)
        assert ([c for c in a if c.get("type") != "CUSTOM"] ==
                [c for c in b if c.get("type") != "CUSTOM"]), (k, a, b)


def test_state_of_another_adapter_fails_the_run(s):
    """[harness.claude] switched to the codex adapter across the restart: the
    saved claude-code state is not fed to codex, the run fails harness_error."""
    wait_router_linked(s)
    s.expected_errors += EXPECTED_ERRORS
    prepare(s, "t-claude")
    g = reset_gate(s, "t-claude")
    run = start(s, "t-claude", "claude", "fixture:basic:gate=6")
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(g, "6.ready")):
        assert time.time() < deadline, "the stand-in never reached its gate"
        time.sleep(0.01)
    settle(s, run, "t-claude")
    conf = open(s.conf_path).read()
    try:
        with open(s.conf_path, "w") as f:
            f.write(conf.replace("adapter = claude-code", "adapter = codex"))
        restart_coordinator(s, wait_router=True)
    finally:
        with open(s.conf_path, "w") as f:
            f.write(conf)
    open(os.path.join(g, "6.go"), "w").close()
    chunks, status = finish(s, run, "t-claude")
    assert status["status"] == "failed", status
    assert status["error"]["code"] == "harness_error", status
    assert "changed its adapter" in status["error"]["message"], status
    # the claude-code chunks before the crash are there, nothing after them
    assert [c["type"] for c in chunks][-1] == "RUN_ERROR"
    assert "TEXT_MESSAGE_START" in [c["type"] for c in chunks], chunks
    restart_coordinator(s, wait_router=True)  # back to the suite's configuration
