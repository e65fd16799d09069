# SPDX-License-Identifier: MIT
"""Issue 11, items 4 and 8: secrets do not leak past the redactor nor into a
sibling run, and metadata.sessionId cannot inject an option into an agent CLI.

(a) A run of a harness with a secret waits in the thread's sandbox; a plain
    shell run of the same thread looks for the value in every
    /proc/PID/environ, in /tmp and /dev/shm. What it finds is written to the
    workspace (read here from the host: not through the redactor, which would
    hide a leak) — nothing, while its own environment is readable.
(b) A shell run echoes another harness's secret to stdout and stderr and exits
    1; an NDJSON runner fails with the secret in its stderr tail (which
    becomes the record's error.message): neither the chunks, nor GET
    /runs/{id}, nor any daemon log holds the value.
(c) Bad sessionId values are refused with a 400 and no run is registered."""
import hashlib
import json
import os
import re
import time

from rwtest import poll, stdout_text

SECRET_A = "alpha-Secret-7f3c9e21d4b8"
SECRET_B = "bravo-Secret-0a5d6e7f8c9b"
os.environ["RW_SEC_A"] = SECRET_A
os.environ["RW_SEC_B"] = SECRET_B

SUITE_CONF = """[harness.keeper]
adapter = shell
secrets = RW_SEC_A

[harness.other]
adapter = shell
secrets = RW_SEC_B

[harness.leaky]
adapter = ndjson
command = ["/bin/sh", "-c", "cat >&2; exit 1"]

[harness.longline]
adapter = ndjson
secrets = RW_SEC_B
command = ["/bin/sh", "-c", "printf %s \\"$RW_SEC_B\\" >&2; head -c 2040 /dev/zero | tr '\\\\0' x >&2; exit 1"]

[harness.claude]
adapter = claude-code
command = ["/bin/true"]
"""


def workspace(s, thread):
    sid = hashlib.sha256(thread.encode()).hexdigest()[:16]
    return os.path.join(s.dir, "state", "sandboxes", sid, "workspace")


def start(s, thread, harness, command, metadata=None):
    meta = {"harness": harness}
    meta.update(metadata or {})
    return s.http("POST", "/runs", {"threadId": thread, "metadata": meta,
                                    "messages": [{"role": "user", "content": command}]})


def test_a_sibling_run_cannot_read_a_secret_runs_environment(s):
    thread = "t-sec-env"
    prep = s.start_run("rm -f /workspace/gate /workspace/up && mkfifo /workspace/gate", thread=thread)
    assert s.wait_terminal(prep, thread=thread)["status"] == "completed"
    ws = workspace(s, thread)
    # run A: the secret in its environment; it notes its pid and waits
    st, js = start(s, thread, "keeper",
                   'echo $$ > /workspace/up; read x < /workspace/gate; echo done')
    assert st == 202, (st, js)
    run_a = js["runId"]
    assert poll(lambda: os.path.exists(os.path.join(ws, "up")) and
                open(os.path.join(ws, "up")).read().strip())
    pid_a = open(os.path.join(ws, "up")).read().strip()
    # run B: a plain shell run of the same thread goes looking
    probe = (f"ls /proc > /workspace/ls; "
             f"cat /proc/[0-9]*/environ > /workspace/found 2> /workspace/err; "
             f"cat /proc/{pid_a}/environ /proc/{pid_a}/mem /proc/{pid_a}/task/*/environ "
             f">> /workspace/found 2>> /workspace/err; "
             f"ls -l /proc/{pid_a}/fd/ >> /workspace/found 2>> /workspace/err; "
             f"cat /proc/{pid_a}/root/proc/self/environ >> /workspace/found 2>> /workspace/err; "
             f"grep -rsa {SECRET_A} /proc/[0-9]*/environ /tmp /dev/shm >> /workspace/found; "
             f"cat /proc/self/environ >> /workspace/found; true")
    run_b = s.start_run(probe, thread=thread)
    assert s.wait_terminal(run_b, thread=thread)["status"] == "completed"
    with open(os.path.join(ws, "gate"), "w") as g:
        g.write("go\n")
    assert s.wait_terminal(run_a, thread=thread)["status"] == "completed"

    found = open(os.path.join(ws, "found"), "rb").read()
    err = open(os.path.join(ws, "err")).read()
    listing = open(os.path.join(ws, "ls")).read().split()
    assert pid_a in listing, listing  # A was alive and its pid visible: the attack was real
    assert SECRET_A.encode() not in found and b"RW_SEC_A" not in found, found
    assert f"/proc/{pid_a}/environ: Permission denied" in err, err
    assert b"PATH=" in found  # B's own environment stays readable


def test_secrets_of_other_harnesses_are_redacted_everywhere(s):
    thread = "t-sec-redact"
    # a plain shell run prints keeper's secret (it knows the value) and fails
    st, js = start(s, thread, "shell",
                   f"echo out-{SECRET_A}; echo err-{SECRET_A} >&2; echo {SECRET_B}; exit 1")
    assert st == 202, (st, js)
    run1 = js["runId"]
    events, status, _, _ = s.tail(run1, thread=thread)
    assert status["status"] == "failed", status
    out = stdout_text(events)
    assert out == "out-[REDACTED]\n[REDACTED]\n", out
    assert stdout_text(events, "process.stderr") == "err-[REDACTED]\n"
    # an NDJSON runner whose stderr tail (the whole request: the secret) fails the run
    st, js = start(s, thread, "leaky", f"the key is {SECRET_A} and {SECRET_B}")
    assert st == 202, (st, js)
    events2, status2, _, _ = s.tail(js["runId"], thread=thread)
    assert status2["status"] == "failed", status2
    msg = status2["error"]["message"]
    assert "the key is [REDACTED] and [REDACTED]" in msg, msg  # the tail did get there
    for run, evs in ((run1, events), (js["runId"], events2)):
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}")
        assert st == 200
        for text in (json.dumps(evs), json.dumps(rec)):
            assert SECRET_A not in text and SECRET_B not in text, text
    # the stderr tail keeps the last 2 KiB: one long line cut inside the
    # secret must not leave the secret's end in error.message
    st, js3 = start(s, thread, "longline", "x")
    assert st == 202, (st, js3)
    rec3 = s.wait_terminal(js3["runId"], thread=thread)
    assert rec3["status"] == "failed" and "xxxxxxxx" in rec3["error"]["message"], rec3
    assert SECRET_B[-7:] not in rec3["error"]["message"], rec3["error"]["message"][:80]
    st, page = s.http("GET", f"/runs/{js['runId']}/events?threadId={thread}")
    assert SECRET_A not in json.dumps(page)
    for name in ("containerd-shim", "coordinatord", "routerd"):
        log = s.log(name)
        assert SECRET_A not in log and SECRET_B not in log, (name, log[-2000:])


def metric(s, name):
    st, body = s.http("GET", "/metrics")
    text = body.decode() if isinstance(body, bytes) else str(body)
    m = re.search(rf"^{name} (\d+)$", text, re.M)
    assert st == 200 and m, (st, text[:500])
    return int(m.group(1))


def test_bad_session_ids_are_refused(s):
    before = metric(s, "runwarden_runs_started_total")
    for bad in ("--foo", "-x", "--resume=../../etc", "", "a b", "a;rm -rf /", "x" * 129,
                "sess\n123", 5, ["sess"]):
        st, body = start(s, "t-sec-sess", "claude", "hi", {"sessionId": bad})
        assert st == 400 and "sessionId" in body["error"], (bad, st, body)
        assert body["code"] == "bad_request", body
    assert metric(s, "runwarden_runs_started_total") == before
    # a well-formed id still starts a run
    st, body = start(s, "t-sec-sess", "claude", "hi", {"sessionId": "0f9c2b7e-1a2b:3c.4_d"})
    assert st == 202, (st, body)
    s.wait_terminal(body["runId"], thread="t-sec-sess")
    assert metric(s, "runwarden_runs_started_total") == before + 1
