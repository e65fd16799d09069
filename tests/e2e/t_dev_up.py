# SPDX-License-Identifier: MIT
"""The quick start: `./dev up` (through `runwarden up`) serves on the address
given, keeps its state in --state-dir, layers --config over the development
defaults, prints a line with "ready", runs a run, and stops cleanly on SIGINT."""
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from rwtest import free_port

NO_SUITE = True
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def dev_up(conf_text, drop_env=()):
    """`./dev up` on a free port with a state dir and --config holding
    conf_text (formatted with {state}); returns (process, port, state) once
    it printed its "ready" line."""
    port = free_port()
    state = tempfile.mkdtemp(prefix="rw-devup-")
    conf = os.path.join(state, "extra.conf")
    with open(conf, "w") as f:
        f.write(conf_text.format(state=state))
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET",) + tuple(drop_env):
        env.pop(k, None)
    # the daemons log to stderr: a file, never a pipe nobody drains
    p = subprocess.Popen([os.path.join(TOP, "dev"), "up", "--listen", f"127.0.0.1:{port}",
                          "--state-dir", state, "--config", conf],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(state, "stderr"), "w+"),
                         text=True, env=env)
    deadline = time.time() + 120
    line = ""
    while time.time() < deadline:
        line = p.stdout.readline()
        if "ready" in line or not line:
            break
    if not ("ready" in line and f"127.0.0.1:{port}" in line):
        dev_down(p, state)
        raise AssertionError(("not ready", line, p.poll()))
    return p, port, state


def dev_down(p, state):
    """SIGINT, as Ctrl-C; returns (exit status, stderr)."""
    p.send_signal(signal.SIGINT)
    try:
        rc = p.wait(timeout=20)
        with open(os.path.join(state, "stderr")) as f:
            err = f.read()
    finally:
        subprocess.run(["umount", "-R", "-l", state], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", state])
    return rc, err


def test_dev_up_serves_and_stops():
    # layered over the defaults: a key of each kind
    p, port, state = dev_up("[coordinatord]\nstall_timeout_ms = 600000\n[routerd]\nmax_body = 2M\n")
    try:
        base = f"http://127.0.0.1:{port}"
        req = urllib.request.Request(base + "/runs", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"threadId": "devup", "messages": [
                                         {"role": "user", "content": "echo up"}]}).encode())
        run = json.load(urllib.request.urlopen(req, timeout=10))["runId"]
        for _ in range(200):
            rec = json.load(urllib.request.urlopen(f"{base}/runs/{run}?threadId=devup", timeout=10))
            if rec["status"] != "running":
                break
            time.sleep(0.05)
        assert rec["status"] == "completed", rec
        # --config was layered over the defaults: a 1.5 MiB body passes max_body = 2M
        big = json.dumps({"threadId": "devup", "messages": [
            {"role": "user", "content": "true #" + "x" * (1536 * 1024)}]}).encode()
        req = urllib.request.Request(base + "/runs", method="POST", data=big,
                                     headers={"Content-Type": "application/json"})
        assert urllib.request.urlopen(req, timeout=10).status == 202
        # the state is where it was asked to be
        assert os.path.isdir(os.path.join(state, "state", "runlog"))
        dev_conf = open(os.path.join(state, "dev.conf")).read()
        assert f"listen = 127.0.0.1:{port}" in dev_conf
        # the web UI comes straight from the source tree
        assert f"ui_dir = {os.path.realpath(os.path.join(TOP, 'ui'))}" in dev_conf, dev_conf
        with urllib.request.urlopen(base + "/ui/", timeout=10) as r:
            assert r.status == 200 and b"/ui/app.js" in r.read()
    finally:
        rc, _ = dev_down(p, state)
    assert rc == 0, rc


def test_dev_up_with_a_tokens_file_in_config_gets_ready():
    """`./dev up --config` whose [routerd] tokens_file turns tokens on: the
    readiness probe takes that file's first token (no RUNWARDEN_TOKEN_FILE
    needed), and the API then wants one."""
    tokens_dir = tempfile.mkdtemp(prefix="rw-devup-tokens-")
    tokens = os.path.join(tokens_dir, "tokens")
    with open(tokens, "w") as f:
        f.write("# operator first, then a scoped tenant\nop-token-123\nten-token-456 threads=a-*\n")
    os.chmod(tokens, 0o600)
    p, port, state = dev_up(f"[routerd]\ntokens_file = {tokens}\n",
                            drop_env=("RUNWARDEN_TOKEN_FILE", "RUNWARDEN_TOKEN"))
    try:
        base = f"http://127.0.0.1:{port}"
        try:
            urllib.request.urlopen(base + "/readyz", timeout=10)
            assert False, "/readyz answered without a token"
        except urllib.error.HTTPError as e:
            assert e.code == 401, e.code
        req = urllib.request.Request(base + "/readyz", headers={"Authorization": "Bearer op-token-123"})
        assert urllib.request.urlopen(req, timeout=10).status == 200
    finally:
        rc, err = dev_down(p, state)
        subprocess.run(["rm", "-rf", tokens_dir])
    assert rc == 0, rc
    assert "op-token-123" not in err and "ten-token-456" not in err, "a token was printed"
