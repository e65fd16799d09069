# SPDX-License-Identifier: MIT
"""Issue 6: harnesses and adapters end to end. Stand-ins named `claude` and
`codex` (tests/fixtures/bin/replay) replay recorded transcripts inside the
sandbox and check their argv and stdin; a stand-in NDJSON runner exercises
the runner protocol's error rules. Each translated stream is compared with
tests/fixtures/<cli>/<name>.expected.json (chunks without timestamps)."""
import hashlib
import json
import os
import shutil

from rwtest import stdout_text

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIX = os.path.join(TOP, "tests", "fixtures")
os.environ["RW_TEST_SECRET"] = "s3cr3t-value-for-tests"

# The stand-ins of tests/fixtures/bin as harnesses (t_agui, t_adapter_reattach
# take them too); the [harness.runner] section is left open for more keys.
STANDIN_HARNESSES = """[harness.claude]
adapter = claude-code
command = ["/workspace/.bin/claude"]

[harness.codex]
adapter = codex
command = ["/workspace/.bin/codex"]

[harness.runner]
adapter = ndjson
command = ["/usr/bin/python3", "/workspace/.bin/runner"]
"""

SUITE_CONF = STANDIN_HARNESSES + """max_line = 4K

[harness.leaky]
adapter = ndjson
command = ["/usr/bin/python3", "/workspace/.bin/runner"]
secrets = RW_TEST_SECRET

[harness.secretive]
adapter = shell
secrets = RW_TEST_SECRET
"""


def workspace(s, thread):
    sid = hashlib.sha256(thread.encode()).hexdigest()[:16]
    return os.path.join(s.dir, "state", "sandboxes", sid, "workspace")


def prepare(s, thread):
    """Create the thread's sandbox, then put the stand-ins and fixtures in it."""
    run = s.start_run("true", thread=thread)
    assert s.wait_terminal(run, thread=thread)["status"] == "completed"
    ws = workspace(s, thread)
    os.makedirs(os.path.join(ws, ".bin"), exist_ok=True)
    for name, src in (("claude", "replay"), ("codex", "replay"), ("runner", "runner")):
        shutil.copy(os.path.join(FIX, "bin", src), os.path.join(ws, ".bin", name))
        os.chmod(os.path.join(ws, ".bin", name), 0o755)
    for cli in ("claude", "codex"):
        dst = os.path.join(ws, ".fixtures", cli)
        os.makedirs(dst, exist_ok=True)
        for f in os.listdir(os.path.join(FIX, cli)):
            shutil.copy(os.path.join(FIX, cli, f), dst)


def run_harness(s, thread, harness, prompt, metadata=None):
    meta = {"harness": harness}
    meta.update(metadata or {})
    st, js = s.http("POST", "/runs", {"threadId": thread, "metadata": meta,
                                      "messages": [{"role": "user", "content": prompt}]})
    assert st == 202, (st, js)
    events, status, code, _ = s.tail(js["runId"], thread=thread)
    assert code == 1000
    return js["runId"], [e["chunk"] for e in events], status


def strip(chunks, run_id):
    out = []
    for c in chunks:
        c = dict(c)
        c.pop("timestamp", None)
        if c.get("name") == "file.changed":  # its typed payload has a time too
            c["value"] = {k: v for k, v in c["value"].items() if k != "timestamp"}
        text = json.dumps(c).replace(run_id, "RUN_ID").replace(run_id[:8], "RUN8")
        out.append(json.loads(text))
    return out


def expect(s, chunks, run_id, cli, name):
    got = strip(chunks, run_id)
    path = os.path.join(FIX, cli, f"{name}.expected.json")
    if os.environ.get("RW_UPDATE_FIXTURES"):
        json.dump(got, open(path, "w"), indent=1)
    want = json.load(open(path))
    assert got == want, json.dumps(got, indent=1)


def test_claude_code_transcript_translates(s):
    prepare(s, "t-claude")
    run, chunks, status = run_harness(s, "t-claude", "claude", "fixture:basic")
    expect(s, chunks, run, "claude", "basic")
    assert status["status"] == "completed" and status["harness"] == "claude"
    assert status["usage"][0]["inputTokens"] == 120


def test_claude_code_error_result_fails_with_subtype(s):
    run, chunks, status = run_harness(s, "t-claude", "claude", "fixture:error")
    expect(s, chunks, run, "claude", "error")
    assert status["status"] == "failed" and status["error"]["code"] == "error_during_execution"


def test_claude_code_truncated_stream_fails(s):
    run, chunks, status = run_harness(s, "t-claude", "claude", "fixture:truncated")
    expect(s, chunks, run, "claude", "truncated")
    assert status["status"] == "failed" and "fatal: connection reset" in status["error"]["message"]


def test_claude_code_resumes_the_session(s):
    run, chunks, status = run_harness(s, "t-claude", "claude", "fixture:basic:resume",
                                      {"sessionId": "sess-123"})
    assert status["status"] == "completed", (status, chunks[-2:])


def test_claude_code_reports_the_git_diff(s):
    ws = workspace(s, "t-claude")
    run = s.start_run("cd /workspace && git init -q . && git config user.email t@t && "
                      "git config user.name t && echo a > f.txt && git add f.txt && "
                      "git commit -qm one && echo b >> f.txt", thread="t-claude")
    assert s.wait_terminal(run, thread="t-claude")["status"] == "completed"
    run, chunks, status = run_harness(s, "t-claude", "claude", "fixture:basic")
    changed = [c for c in chunks if c.get("name") == "file.changed"]
    assert len(changed) == 1 and "+b" in changed[0]["value"]["diff"], chunks[-3:]
    assert changed[0]["value"]["path"] == "."
    assert chunks[-2] is changed[0] or chunks[-2] == changed[0]
    assert chunks[-1]["type"] == "RUN_FINISHED"
    shutil.rmtree(os.path.join(ws, ".git"), ignore_errors=True)


def test_codex_transcript_translates(s):
    prepare(s, "t-codex")
    run, chunks, status = run_harness(s, "t-codex", "codex", "fixture:basic")
    expect(s, chunks, run, "codex", "basic")
    assert status["status"] == "completed"


def test_codex_failed_turn(s):
    run, chunks, status = run_harness(s, "t-codex", "codex", "fixture:failed")
    expect(s, chunks, run, "codex", "failed")
    assert status["status"] == "failed" and status["error"]["message"] == "stream disconnected"


def test_ndjson_runner_stream_is_stored_as_sent(s):
    prepare(s, "t-nd")
    run, chunks, status = run_harness(s, "t-nd", "runner", "ok")
    chunks = [c for c in chunks if not c.get("name", "").startswith("sandbox.")]
    assert [c["type"] for c in chunks] == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                                          "TEXT_MESSAGE_END", "RUN_FINISHED"], chunks
    assert chunks[2]["delta"] == "run " + run[:8]  # the runner got the run request
    # RUN_STARTED is runwarden's (the runner's own is dropped: a stream starts
    # once, before the sandbox events); the rest is stored exactly as the
    # runner wrote it, but for RUN_FINISHED's ids, made the run's own
    assert chunks[0]["runId"] == run and "timestamp" in chunks[0]
    assert "timestamp" not in chunks[1]
    assert chunks[-1]["runId"] == run and chunks[-1]["threadId"] == "t-nd", chunks[-1]
    assert status["status"] == "completed"


def test_ndjson_error_rules(s):
    cases = {
        "garbage": "runner sent unparseable NDJSON: {not json at all",
        "nochunk": "runner sent a non-chunk line",
        "error": "model refused",
        "longline": "runner sent a line longer than 4096 bytes",
    }
    for mode, message in cases.items():
        run, chunks, status = run_harness(s, "t-nd", "runner", mode)
        assert chunks[-1]["type"] == "RUN_ERROR" and chunks[-1]["message"] == message, (mode, chunks)
        assert status["status"] == "failed", (mode, status)
        # the stream stops after the first RUN_ERROR
        assert not any(c.get("messageId") in ("never", "after-error") for c in chunks), chunks
    run, chunks, status = run_harness(s, "t-nd", "runner", "crash")
    assert status["status"] == "failed" and chunks[-1]["type"] == "RUN_ERROR"
    assert "status 7" in chunks[-1]["message"] and "Traceback: something broke" in chunks[-1]["message"]


def test_secrets_escaped_or_on_stderr_are_redacted(s):
    # Found by tests/fuzz/fuzz-adapter-ndjson: an NDJSON line is stored as the
    # runner wrote it, and "\u0073…" hid the secret from a search of the text;
    # the stderr tail quoted in the record's error message was not redacted.
    prepare(s, "t-leak")
    run, chunks, status = run_harness(s, "t-leak", "leaky", "leak")
    leak = [c for c in chunks if c.get("name") == "leak"]
    assert leak and leak[0]["value"] == "[REDACTED]", chunks
    assert status["status"] == "failed", status
    assert "token [REDACTED]" in status["error"]["message"], status
    assert "s3cr3t" not in json.dumps(chunks) and "s3cr3t" not in json.dumps(status)
    st, rec = s.http("GET", f"/runs/{run}?threadId=t-leak")
    assert "s3cr3t" not in json.dumps(rec), rec


def test_unknown_harness_is_400(s):
    st, body = s.http("POST", "/runs", {"threadId": "t", "metadata": {"harness": "nope"},
                                        "messages": [{"role": "user", "content": "x"}]})
    assert st == 400 and "unknown harness" in body["error"], (st, body)


def test_secrets_reach_the_process_and_never_the_log(s):
    run, chunks, status = run_harness(s, "t-secret", "secretive",
                                      'echo "key=$RW_TEST_SECRET"; echo "$RW_TEST_SECRET" | wc -c')
    out = stdout_text([{"chunk": c} for c in chunks])
    assert out == "key=[REDACTED]\n23\n", repr((out, chunks))
    assert status["status"] == "completed"
    raw = json.dumps(chunks)
    assert "s3cr3t" not in raw
    # a harness without the secret does not get it
    run, chunks, status = run_harness(s, "t-secret", "shell", 'echo "[$RW_TEST_SECRET]"')
    assert stdout_text([{"chunk": c} for c in chunks]) == "[]\n"
