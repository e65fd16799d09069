# SPDX-License-Identifier: MIT
"""rwtest — start the real runwarden daemons on a private directory and drive
them with real HTTP and WebSocket clients (Debian's python3-websockets).

Suite.start() writes a config layered over nothing but the built-in defaults
(runtime and state dirs under a fresh mkdtemp, a free loopback port), starts
containerd-shim, coordinatord and routerd from the build tree, and waits until
routerd answers /healthz. Suite.stop() sends SIGTERM, requires exit status 0,
and checks hygiene: no daemon log line at error level or above that a test did
not declare expected, no sanitizer report, no process left behind.
"""
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import websockets

BUILD = os.environ.get("RW_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
DAEMONS = ["containerd-shim", "coordinatord", "routerd"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Suite:
    def __init__(self, extra_conf="", wrap=None):
        self.dir = tempfile.mkdtemp(prefix="rw-e2e-")
        self.port = free_port()
        self.extra_conf = extra_conf
        self.wrap = wrap or {}  # daemon → argv prefix (e.g. fiu-run for fault injection)
        self.procs = {}
        self.expected_errors = []

    @property
    def conf_path(self):
        return os.path.join(self.dir, "runwarden.conf")

    def log_path(self, name):
        return os.path.join(self.dir, name + ".log")

    def start(self):
        with open(self.conf_path, "w") as f:
            f.write(f"""[runwarden]
runtime_dir = {self.dir}/run
state_dir = {self.dir}/state
log_level = debug

[routerd]
listen = 127.0.0.1:{self.port}

{self.extra_conf.replace("@PORT@", str(self.port))}
""" + ("" if "max_instances" in self.extra_conf else
       # the shim's default before it was sized from the host (issue 32),
       # which the tests written against it still assume
       "\n[containerd-shim]\nmax_instances = 5\n")
  + ("" if "pool_size" in self.extra_conf else
     # likewise the pool's fixed default of before (from the host since)
     "\n[containerd-shim]\npool_size = 2\n"))
        for name in DAEMONS:
            self.start_daemon(name)
        self.wait_ready()
        return self

    def start_daemon(self, name):
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        env.pop("JOURNAL_STREAM", None)
        log = open(self.log_path(name), "a")
        self.procs[name] = subprocess.Popen(
            self.wrap.get(name, []) + [os.path.join(BUILD, name), "--config", self.conf_path],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        log.close()

    def wait_ready(self, timeout=15.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with {p.returncode}:\n" + self.log(name))
            try:
                st, _ = self.http("GET", "/healthz")
                if st == 200 and "ready" in self.log("routerd"):
                    self._settle_readyz(min(5.0, max(0.0, deadline - time.time())))
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("suite not ready:\n" + "\n".join(self.log(n) for n in DAEMONS))

    def _settle_readyz(self, timeout):
        """routerd serves before coordinatord has its shim link: give /readyz
        (all three daemons; with the suite's first token when it has a
        tokens_file) a few seconds to say 200, so a module's first request
        does not meet "containerd-shim unavailable" on a loaded machine.
        A suite that is meant to start unready just goes on after timeout."""
        headers = {}
        m = re.search(r"^tokens_file\s*=\s*(\S+)", self.extra_conf, re.M)
        if m:
            try:
                with open(m.group(1)) as f:
                    tok = next((l.split()[0] for l in f
                                if l.strip() and not l.lstrip().startswith("#")), None)
            except OSError:
                tok = None
            if tok:
                headers["Authorization"] = f"Bearer {tok}"
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.http("GET", "/readyz", headers=headers)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)

    def log(self, name):
        try:
            with open(self.log_path(name), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs[name]
        p.send_signal(sig)
        return p.wait(timeout=10)

    def stop(self):
        """SIGTERM everything (routerd first); return a list of hygiene problems."""
        problems = []
        for name in reversed(DAEMONS):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=10)
                if rc != 0:
                    problems.append(f"{name} exited with status {rc} after SIGTERM")
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                problems.append(f"{name} did not exit within 10 s of SIGTERM")
        for name in DAEMONS:
            for line in self.log(name).splitlines():
                if re.match(r"^<[0-3]>", line) or "Sanitizer" in line or "runtime error:" in line:
                    if not any(re.search(e, line) for e in self.expected_errors):
                        problems.append(f"{name}: unexpected: {line}")
        return problems

    def cgroup_trees(self):
        """This suite's instance cgroup directories (cgroup.h's naming:
        runwarden[-tools].<12 hex of SHA-256(state_dir)>) in every hierarchy."""
        import hashlib
        inst = hashlib.sha256(os.path.join(self.dir, "state").encode()).hexdigest()[:12]
        found = []
        for root, dirs, _ in os.walk("/sys/fs/cgroup"):
            for d in list(dirs):
                if d.startswith(("runwarden.", "runwarden-tools.")):
                    dirs.remove(d)
                    if d.endswith("." + inst):
                        found.append(os.path.join(root, d))
        return found

    def reap_cgroups(self):
        """What daemons killed for good (SIGKILL, no restart) leave: their
        sandboxes' processes and the instance's cgroup directories. Kill
        (cgroup.kill where it exists) and rmdir deepest first."""
        trees = self.cgroup_trees()
        for t in trees:
            for root, _, files in os.walk(t):
                if "cgroup.kill" in files:
                    try:
                        with open(os.path.join(root, "cgroup.kill"), "w") as f:
                            f.write("1")
                    except OSError:
                        pass
        for _ in range(100):
            left = []
            for t in trees:
                for root, _, _ in sorted(os.walk(t, topdown=False), key=lambda w: -len(w[0])):
                    try:
                        os.rmdir(root)
                    except FileNotFoundError:
                        pass
                    except OSError:
                        left.append(root)
            if not left:
                return
            time.sleep(0.02)

    def cleanup(self):
        if all(p.poll() is not None for p in self.procs.values()):
            self.reap_cgroups()
        # what a test mounted beneath the suite's directory (a small tmpfs as
        # state/, say), deepest first: the directory itself is no mount point,
        # so `umount -R` of it unmounts nothing
        with open("/proc/self/mountinfo") as f:
            points = [ln.split()[4] for ln in f]
        for m in sorted((m for m in points if m.startswith(self.dir + "/")), key=len,
                        reverse=True):
            subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- clients ---
    def http(self, method, path, body=None, headers=None, raw_body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = dict(headers or {})
        data = raw_body
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        return json_response(c)

    def metric(self, name, headers=None):
        """The value of the line of GET /metrics that name starts (with its
        labels, if any), or None."""
        st, text = self.http("GET", "/metrics", headers=headers)
        assert st == 200, st
        for line in (text.decode() if isinstance(text, bytes) else str(text)).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def start_run(self, command, thread="t1", **extra):
        body = {"threadId": thread, "messages": [{"role": "user", "content": command}]}
        body.update(extra)
        st, js = self.http("POST", "/runs", body)
        assert st == 202, (st, js)
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                            js["runId"]), js
        return js["runId"]

    def tail(self, run_id, thread="t1", last_seq=None, limit=None, timeout=30):
        """Tail over WebSocket. Returns (events, status_record, close_code, close_reason).
        With limit, stops (closing from the client side) after that many events."""
        q = f"threadId={thread}" + ("" if last_seq is None else f"&lastSeq={last_seq}")
        uri = f"ws://127.0.0.1:{self.port}/runs/{run_id}/stream?{q}"

        async def go():
            events, status = [], None
            async with websockets.connect(uri, max_size=2**24) as ws:
                try:
                    while True:
                        msg = json.loads(await ws.recv())
                        if msg.get("type") == "status":
                            assert status is None, "two status frames"
                            status = msg["record"]
                        else:
                            assert status is None, "event after the status frame"
                            events.append(msg)
                            if limit is not None and len(events) >= limit:
                                break
                except websockets.ConnectionClosed:
                    pass
                if limit is not None and len(events) >= limit and status is None:
                    await ws.close()
                    return events, None, None, None
                return events, status, ws.close_code, ws.close_reason

        return asyncio.run(asyncio.wait_for(go(), timeout))

    def wait_run(self, run_id, thread, until, timeout):
        """Poll the run's record until until(rec) holds or timeout passes (no
        assertion: the caller checks what it got). Returns the last record, or
        None when none was read."""
        deadline, rec = time.time() + timeout, None
        while time.time() < deadline:
            st, r = self.http("GET", f"/runs/{run_id}?threadId={thread}")
            if st == 200:
                rec = r
                if until(r):
                    break
            time.sleep(0.02)
        return rec

    def wait_readyz(self, want=200, timeout=10, interval=0.05):
        """Poll /readyz until it answers want or timeout passes (no assertion).
        Returns the last answer, (status, body)."""
        deadline = time.time() + timeout
        while True:
            st, body = self.http("GET", "/readyz")
            if st == want or time.time() >= deadline:
                return st, body
            time.sleep(interval)

    def wait_terminal(self, run_id, thread="t1", timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st, rec = self.http("GET", f"/runs/{run_id}?threadId={thread}")
            assert st == 200, (st, rec)
            if rec["status"] in ("completed", "failed", "aborted"):
                return rec
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} not terminal after {timeout}s")


async def ws_count(uri, headers=None):
    """Read a WebSocket tail to its end: (messages received, close code)."""
    async with websockets.connect(uri, extra_headers=headers) as ws:
        n = 0
        try:
            while True:
                await ws.recv()
                n += 1
        except websockets.ConnectionClosed:
            return n, ws.close_code


def json_response(c):
    """(status, body) of the response on http.client connection c, which is
    closed: the body as JSON when it parses, else its bytes (None when empty)."""
    r = c.getresponse()
    payload = r.read()
    c.close()
    try:
        return r.status, json.loads(payload) if payload else None
    except ValueError:
        return r.status, payload


class Skip(Exception):
    """Raised by a test that cannot run on this host (run.py counts it apart,
    as "skipped", never as passed)."""


def check_tokens_config(text, prefix="rw-tokens-"):
    """routerd --check-config with a tokens file holding text: (exit code,
    its output, the tokens file's path)."""
    d = tempfile.mkdtemp(prefix=prefix)
    tokens = os.path.join(d, "tokens")
    with open(tokens, "w") as f:
        f.write(text)
    conf = os.path.join(d, "r.conf")
    with open(conf, "w") as f:
        f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\n\n"
                f"[routerd]\nlisten = 127.0.0.1:8799\ntokens_file = {tokens}\n")
    p = subprocess.run([os.path.join(BUILD, "routerd"), "--config", conf, "--check-config"],
                       capture_output=True, text=True, timeout=10)
    return p.returncode, p.stdout + p.stderr, tokens


def auth(tok):
    """The headers that present token tok."""
    return {"Authorization": f"Bearer {tok}"}


def start_as(s, tok, thread, cmd):
    """POST /runs of shell command cmd on thread with token tok: its runId."""
    st, js = s.http("POST", "/runs", {"threadId": thread,
                                      "messages": [{"role": "user", "content": cmd}]},
                    headers=auth(tok))
    assert st == 202, (st, js)
    return js["runId"]


def wait_done_as(s, tok, run, thread, timeout=30):
    """The record of run once it ended (read with token tok)."""
    def done():
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth(tok))
        return st == 200 and rec["status"] in ("completed", "failed", "aborted") and rec
    rec = poll(done, timeout, 0.05)
    assert rec, run
    return rec


def text_handler(body):
    """A quiet http.server handler class that answers every GET 200 with
    body (bytes): a host-side server for the sandbox tests."""
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    return Handler


def poll(cond, timeout=10.0, interval=0.02):
    """cond() until it is truthy or timeout seconds passed; its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    return cond()


def stdout_text(events, name="process.stdout"):
    return "".join(e["chunk"]["value"]["text"] for e in events
                   if e["chunk"].get("type") == "CUSTOM" and e["chunk"].get("name") == name)


def assert_gapfree(events, start=0):
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(start, start + len(seqs))), seqs
