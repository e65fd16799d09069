# SPDX-License-Identifier: MIT
"""The runwarden CLI against the real daemons: run streams output and exits
with the run's status, tail --from resumes after a seq (and across a routerd
restart), show --json is the record, errors are clear."""
import json
import os
import signal
import subprocess
import threading
import time

from rwtest import BUILD, free_port

CLI = os.path.join(BUILD, "runwarden")


def cli(s, *args, timeout=60, url=None, env_extra=None):
    env = dict(os.environ)
    env.pop("RUNWARDEN_TOKEN", None)
    env.pop("RUNWARDEN_THREAD", None)
    env["RUNWARDEN_URL"] = url or f"http://127.0.0.1:{s.port}"
    env.update(env_extra or {})
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_run_echo_prints_output_and_exits_0(s):
    p = cli(s, "run", "--thread", "cli-echo", "echo", "hello")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "hello\n", p.stdout
    assert "\033[" not in p.stdout + p.stderr, "colour without a TTY"


def test_run_exit_status_is_the_runs(s):
    p = cli(s, "run", "--thread", "cli-exit", "echo out; echo err >&2; exit 3")
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "out\n"
    assert "err\n" in p.stderr and "failed" in p.stderr, p.stderr


def test_run_json_prints_run_id_then_raw_frames(s):
    p = cli(s, "--json", "run", "--thread", "cli-json", "echo hi")
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert lines[0]["threadId"] == "cli-json" and lines[0]["runId"]
    seqs = [x["seq"] for x in lines[1:-1]]
    assert seqs == list(range(len(seqs))), seqs
    assert lines[-1]["type"] == "status" and lines[-1]["record"]["status"] == "completed"


def test_tail_from_gives_exactly_the_events_after(s):
    run = s.start_run("for i in 1 2 3; do echo l$i; done", thread="cli-tail")
    rec = s.wait_terminal(run, thread="cli-tail")
    full = cli(s, "tail", run, "--thread", "cli-tail", "--json")
    assert full.returncode == 0, full.stderr
    events = [json.loads(x) for x in full.stdout.splitlines()][:-1]
    assert [e["seq"] for e in events] == list(range(rec["lastSeq"] + 1))
    k = 2
    p = cli(s, "tail", run, "--thread", "cli-tail", "--from", str(k), "--json")
    rest = [json.loads(x) for x in p.stdout.splitlines()]
    assert rest[:-1] == events[k + 1:], rest
    assert rest[-1]["type"] == "status"
    text = cli(s, "tail", run, "--thread", "cli-tail")
    assert text.returncode == 0 and text.stdout == "l1\nl2\nl3\n", text


def test_tail_resumes_across_a_routerd_restart(s):
    run = s.start_run("for i in 1 2 3 4 5 6 7 8; do echo tick$i; sleep 0.25; done",
                      thread="cli-drop")
    out = {}

    def follow():
        out["p"] = cli(s, "tail", run, "--thread", "cli-drop", "--json")

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.8)
    s.kill("routerd", signal.SIGTERM)
    time.sleep(0.3)
    s.start_daemon("routerd")
    s.wait_ready()
    t.join(60)
    p = out["p"]
    assert p.returncode == 0, (p.returncode, p.stderr)
    frames = [json.loads(x) for x in p.stdout.splitlines()]
    events = [f for f in frames if "seq" in f]
    assert [e["seq"] for e in events] == list(range(len(events))), "gap or duplicate"
    text = "".join(e["chunk"]["value"]["text"] for e in events
                   if e["chunk"].get("name") == "process.stdout")
    assert text == "".join(f"tick{i}\n" for i in range(1, 9)), text
    assert frames[-1]["type"] == "status"


def test_show_json_is_the_record(s):
    run = s.start_run("true", thread="cli-show")
    rec = s.wait_terminal(run, thread="cli-show")
    p = cli(s, "show", run, "--thread", "cli-show", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == rec
    p = cli(s, "show", run, "--thread", "cli-show")
    assert "completed" in p.stdout and run in p.stdout


def test_http_error_prints_the_json_error(s):
    p = cli(s, "show", "no-such-run", "--thread", "cli-show")
    assert p.returncode == 125, p
    assert "unknown run" in p.stderr and "404" in p.stderr, p.stderr


def test_a_run_of_another_thread_says_which_thread_to_pass(s):
    run = s.start_run("true", thread="cli-owner")
    s.wait_terminal(run, thread="cli-owner")
    for cmd in ("show", "cancel", "tail"):
        p = cli(s, cmd, run, "--thread", "cli-someone-else")
        assert p.returncode == 125, (cmd, p.returncode, p.stderr)
        assert "not_found" in p.stderr and "--thread" in p.stderr, (cmd, p.stderr)
        assert "cli-someone-else" in p.stderr, p.stderr
    p = cli(s, "show", run, "--thread", "cli-owner")
    assert p.returncode == 0, p.stderr


def test_server_down_is_a_clear_error(s):
    url = f"http://127.0.0.1:{free_port()}"
    p = cli(s, "run", "echo", "x", url=url)
    assert p.returncode == 125, p
    assert p.stderr.strip() == f"runwarden: cannot connect to {url}: Connection refused", p.stderr


def test_ls_reports_a_missing_route_clearly(s):
    p = cli(s, "ls", "--thread", "cli-echo", "--json")
    if p.returncode == 0:  # the server lists runs
        assert isinstance(json.loads(p.stdout), list)
    else:
        assert p.returncode == 125 and "cannot list runs" in p.stderr, p.stderr


def test_usage_errors_exit_2(s):
    assert cli(s, "frobnicate").returncode == 2
    assert cli(s, "run").returncode == 2
    assert cli(s, "tail", "x", "--from", "-5").returncode == 2


def test_tail_gives_up_after_identical_failures(s):
    """A stand-in server that closes every tail 1011 at the same seq, for good
    (what issue 12's too-big RUN_READ did): the CLI stops retrying and says
    why, instead of looping forever."""
    import base64
    import hashlib
    import socket
    import struct
    reason = b"storage read failed: Message too long"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except socket.timeout:
                continue
            accepted.append(1)
            c.settimeout(5)
            buf = b""
            while b"\r\n\r\n" not in buf:
                b = c.recv(4096)
                if not b:
                    break
                buf += b
            key = [ln.split(b":", 1)[1].strip() for ln in buf.split(b"\r\n")
                   if ln.lower().startswith(b"sec-websocket-key:")]
            acc = base64.b64encode(hashlib.sha1(
                key[0] + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()) if key else b""
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
            payload = struct.pack("!H", 1011) + reason
            c.sendall(bytes([0x88, len(payload)]) + payload)
            try:
                c.recv(4096)  # the client's close
            except OSError:
                pass
            c.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        url = f"http://127.0.0.1:{srv.getsockname()[1]}"
        p = cli(s, "tail", "--thread", "t-gone", "0d6f3c3e-9a43-4c55-9d0e-4b7f2f0c1f53",
                url=url, timeout=60)
    finally:
        stop.set()
        th.join()
        srv.close()
    assert p.returncode == 125, (p.returncode, p.stderr)
    assert "giving up" in p.stderr and "Message too long" in p.stderr, p.stderr
    assert len(accepted) == 6, len(accepted)  # the first close and 5 identical ones
