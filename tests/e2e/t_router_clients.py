# SPDX-License-Identifier: MIT
"""Real clients against routerd: Debian's python3-websockets, the Node `ws`
library, and headless Chromium (Debian's chromium driven by playwright-core)
running a page from another origin that starts a run with fetch(), tails it
with the browser's WebSocket, drops it mid-run and resumes with the last seq,
then reads the log again with EventSource.

npm packages come from tests/e2e/js/package-lock.json (`npm ci` into
tests/e2e/js/node_modules when missing). A test prints a SKIP line with the
reason and returns only when a tool is truly unavailable."""
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse

from rwtest import assert_gapfree, free_port, stdout_text

JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js")
PAGE_PORT = free_port()
PAGE_ORIGIN = f"http://127.0.0.1:{PAGE_PORT}"
SUITE_CONF = f"""[routerd]
cors_origins = {PAGE_ORIGIN}
"""
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
TICKS = "".join(f"tick{i}\n" for i in range(1, 9))


def node_ready():
    """None when node and the npm packages are there, else the reason."""
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(JS, "node_modules", "ws")) or \
            not os.path.isdir(os.path.join(JS, "node_modules", "playwright-core")):
        if not shutil.which("npm"):
            return "npm is not installed and tests/e2e/js/node_modules is missing"
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=JS,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            return f"npm ci failed: {p.stderr.strip()[-500:]}"
    return None


def node(*args, timeout=120):
    p = subprocess.run(["node", *args], cwd=JS, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"node {args[0]} failed:\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_python_websockets_drop_and_resume(s):
    run = s.start_run("for i in 1 2 3 4 5 6 7 8; do echo tick$i; sleep 0.1; done", thread="t-py")
    first, st, _, _ = s.tail(run, thread="t-py", limit=4)
    assert st is None and len(first) == 4
    rest, status, code, reason = s.tail(run, thread="t-py", last_seq=first[-1]["seq"])
    allev = first + rest
    assert_gapfree(allev)
    assert stdout_text(allev) == TICKS
    assert status["status"] == "completed" and code == 1000 and reason == "run complete"


def test_node_ws_drop_and_resume(s):
    why = node_ready()
    if why:
        print(f"SKIP node ws client: {why}")
        return
    run = s.start_run("for i in 1 2 3 4 5 6 7 8; do echo tick$i; sleep 0.1; done", thread="t-node")
    res = node("ws-tail.js", f"ws://127.0.0.1:{s.port}", run, "t-node", "4")
    assert res["seqs"] == list(range(len(res["seqs"]))), res["seqs"]
    assert res["stdout"] == TICKS, res
    assert res["status"]["status"] == "completed"
    assert res["status"]["lastSeq"] == res["seqs"][-1]
    assert res["closes"][-1] == [1000, "run complete"], res["closes"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def chromium_missing():
    """Why the headless-chromium tests cannot run here (printed as a SKIP), or None."""
    why = node_ready()
    if why:
        return why
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is not installed (Debian package chromium)"
    return None


def serve_pages(port):
    """tests/e2e/js on 127.0.0.1:port for the browser, quietly, in a thread; stop
    it with shutdown() and server_close()."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port),
                                          functools.partial(_Quiet, directory=JS))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_chromium_fetch_websocket_drop_resume_and_eventsource(s):
    why = chromium_missing()
    if why:
        print(f"SKIP chromium: {why}")
        return
    srv = serve_pages(PAGE_PORT)
    try:
        q = urllib.parse.urlencode({"api": f"http://127.0.0.1:{s.port}", "thread": "t-browser",
                                    "drop": "3"})
        res = node("browser.js", f"{PAGE_ORIGIN}/page.html?{q}", "60000", timeout=180)
    finally:
        srv.shutdown()
        srv.server_close()
    assert "error" not in res, res
    seqs = res["seqs"]
    assert seqs == list(range(len(seqs))), seqs          # no gap, no duplicate across the drop
    assert res["dropAt"] == 2 and res["firstStatus"] is None, res
    assert res["firstClose"] == 4000, res                # the page's own close
    assert res["stdout"] == TICKS, res
    assert res["status"]["status"] == "completed" and res["status"]["lastSeq"] == seqs[-1]
    assert res["secondClose"] == 1000 and res["secondReason"] == "run complete", res
    assert res["sse"]["seqs"] == seqs and res["sse"]["status"] == res["status"], res["sse"]
    st, rec = s.http("GET", f"/runs/{res['runId']}?threadId=t-browser")
    assert st == 200 and rec["status"] == "completed"
