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


def test_dev_up_serves_and_stops():
    port = free_port()
    state = tempfile.mkdtemp(prefix="rw-devup-")
    conf = os.path.join(state, "extra.conf")
    with open(conf, "w") as f:  # layered over the defaults: a key of each kind
        f.write("[coordinatord]\nstall_timeout_ms = 600000\n[routerd]\nmax_body = 2M\n")
    env = dict(os.environ)
    env.pop("NOTIFY_SOCKET", None)
    p = subprocess.Popen([os.path.join(TOP, "dev"), "up", "--listen", f"127.0.0.1:{port}",
                          "--state-dir", state, "--config", conf],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.time() + 120
        line = ""
        while time.time() < deadline:
            line = p.stdout.readline()
            if "ready" in line or not line:
                break
        assert "ready" in line and f"127.0.0.1:{port}" in line, line
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
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=20)
        subprocess.run(["umount", "-R", "-l", state], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", state])
    assert rc == 0, rc


def test_dev_up_with_a_tokens_file_in_config_gets_ready():
    """`./dev up --config` whose [routerd] tokens_file turns tokens on: the
    readiness probe takes that file's first token (no RUNWARDEN_TOKEN_FILE
    needed), and the API then wants one."""
    port = free_port()
    state = tempfile.mkdtemp(prefix="rw-devup-")
    tokens = os.path.join(state, "tokens")
    with open(tokens, "w") as f:
        f.write("# operator first, then a scoped tenant\nop-token-123\nten-token-456 threads=a-*\n")
    os.chmod(tokens, 0o600)
    conf = os.path.join(state, "extra.conf")
    with open(conf, "w") as f:
        f.write(f"[routerd]\ntokens_file = {tokens}\n")
    env = dict(os.environ)
    for k in ("NOTIFY_SOCKET", "RUNWARDEN_TOKEN_FILE", "RUNWARDEN_TOKEN"):
        env.pop(k, None)
    p = subprocess.Popen([os.path.join(TOP, "dev"), "up", "--listen", f"127.0.0.1:{port}",
                          "--state-dir", state, "--config", conf],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 120
        line = ""
        while time.time() < deadline:
            line = p.stdout.readline()
            if "ready" in line or not line:
                break
        assert "ready" in line and f"127.0.0.1:{port}" in line, (line, p.poll())
        base = f"http://127.0.0.1:{port}"
        try:
            urllib.request.urlopen(base + "/readyz", timeout=10)
            assert False, "/readyz answered without a token"
        except urllib.error.HTTPError as e:
            assert e.code == 401, e.code
        req = urllib.request.Request(base + "/readyz", headers={"Authorization": "Bearer op-token-123"})
        assert urllib.request.urlopen(req, timeout=10).status == 200
    finally:
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=20)
        err = p.stderr.read()
        subprocess.run(["umount", "-R", "-l", state], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", state])
    assert rc == 0, rc
    assert "op-token-123" not in err and "ten-token-456" not in err, "a token was printed"
