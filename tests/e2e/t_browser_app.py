# SPDX-License-Identifier: MIT
"""Issue 31: a TanStack AI web app on runwarden in a real browser. A React app
with stock useChat (@tanstack/ai-react, pinned in tests/js/package-lock.json,
bundled by the test with esbuild) on @runwarden/tanstack-client's adapters
(clients/tanstack-client), in Debian's Chromium with playwright-core
(tests/js/browser-app.mjs): cross-origin (cors_origins), same-origin through a
dev proxy that keeps Origin, and from ui_dir; on SSE, NDJSON and WebSocket:
output in the messages while the command runs, a reload mid-run and a second
tab (each line once, in order), Stop before and after a reload (the run
aborted, its processes gone), two turns hydrated in order, tokens on every
transport and a wrong one shown as a readable error. Screenshots are kept
under the build dir's test-artifacts/t_browser_app."""
import json
import os
import subprocess
import tempfile

from rwtest import BUILD, free_port

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKEN, BAD = "browser-app-token-1", "not-the-token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-browser-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{TOKEN}\n")
ARTIFACTS = os.path.abspath(os.path.join(os.environ.get("RW_ARTIFACT_DIR") or os.path.join(BUILD, "test-artifacts"),
                                         "t_browser_app"))
APP = os.path.join(ARTIFACTS, "app")  # the bundle, also routerd's ui_dir
os.makedirs(APP, exist_ok=True)
STATIC, PROXY = free_port(), free_port()

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
ui_dir = {APP}
cors_origins = http://127.0.0.1:{STATIC} http://127.0.0.1:{PROXY}
"""


def test_browser_app(s):
    js = os.path.join(TOP, "tests", "js")
    for mod in ("playwright-core", "esbuild", "@tanstack/ai-react"):
        if not os.path.isdir(os.path.join(js, "node_modules", mod)):
            raise AssertionError(f"tests/js/node_modules/{mod} missing: ./dev test runs npm ci there")
    env = dict(os.environ, RW_URL=f"http://127.0.0.1:{s.port}", RW_TOKEN=TOKEN, RW_BAD_TOKEN=BAD,
               RW_APP_DIR=APP, RW_STATIC_PORT=str(STATIC), RW_PROXY_PORT=str(PROXY), RW_ARTIFACTS=ARTIFACTS)
    p = subprocess.run(["node", os.path.join(js, "browser-app.mjs")], cwd=js, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-6000:], p.stderr[-4000:])
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["ok"], res
    print(f"{len(res['checks'])} browser checks passed")
    for t in ("sse", "ndjson", "ws"):
        for shot in (f"cross-{t}-live", f"cross-{t}-stopped", f"proxy-{t}-done", f"uidir-{t}-done"):
            assert os.path.getsize(os.path.join(ARTIFACTS, shot + ".png")) > 1000, shot
