# SPDX-License-Identifier: MIT
"""Issue 11, token scoping (docs/SECURITY.md): a tokens_file line may name the
threads a token may touch (`threads=ID,PREFIX*`) and the harnesses its runs
may use (`harnesses=NAME`). One runwarden serves several tenants: a tenant's
token gets 403 thread_forbidden on every route naming another tenant's thread
and 403 harness_forbidden for a harness it was not given; nothing happens."""
import asyncio
import os
import subprocess
import tempfile

import websockets

from rwtest import BUILD, check_tokens_config, poll, wait_done_as, ws_count
from t_router_lib import connect, parse_responses

ADMIN, TA, TB, TH = "admin-token-0001", "tenant-a.token", "tenant-b.token", "harness-only.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-scoped-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"""# one unrestricted operator token, then one line per tenant
{ADMIN}
{TA}  threads=a-*,shared   harnesses=shell
{TB}\tthreads=b-*
{TH} harnesses=shell2
""")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}

[harness.shell2]
adapter = shell
"""


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def run_body(thread, harness=None):
    b = {"threadId": thread, "messages": [{"role": "user", "content": "echo hi > hi.txt"}]}
    if harness:
        b["metadata"] = {"harness": harness}
    return b


def start(s, tok, thread, harness=None):
    st, js = s.http("POST", "/runs", run_body(thread, harness), headers=auth(tok))
    assert st == 202, (tok, thread, st, js)
    return js["runId"]


def wait_done(s, run, thread):
    return wait_done_as(s, ADMIN, run, thread)


def runs_of(s, thread):
    st, runs = s.http("GET", f"/threads/{thread}/runs", headers=auth(ADMIN))
    assert st == 200, (st, runs)
    return [r["runId"] for r in runs]


def test_a_tenant_token_cannot_touch_another_tenants_thread(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15)
    run = start(s, TA, "a-1")
    wait_done(s, run, "a-1")
    st, snap = s.http("POST", "/threads/a-1/snapshots", {}, headers=auth(TA))
    assert st == 201, (st, snap)
    forbidden = [
        ("POST", "/runs", run_body("a-2")),
        ("GET", f"/runs/{run}?threadId=a-1", None),
        ("POST", f"/runs/{run}/cancel?threadId=a-1", None),
        ("GET", "/threads/a-1/runs", None),
        ("GET", "/threads/a-1/runs?status=running", None),
        ("POST", "/threads/a-1/snapshots", {}),
        ("POST", "/threads/a-1/restore", {"snapshotId": snap["snapshotId"]}),
        ("GET", "/threads/a-1/files/hi.txt", None),
        ("GET", "/threads/a-1/files/", None),
        ("PUT", "/threads/a-1/files/evil.txt", None),
        ("DELETE", "/threads/a-1/files/hi.txt", None),
        ("POST", "/threads/a-1/files/evil-dir?op=mkdir", None),
        ("POST", "/threads/a-1/files/hi.txt?op=rename&to=moved.txt", None),
    ]
    for method, path, body in forbidden:
        raw = b"pwned" if method == "PUT" else None
        st, js = s.http(method, path, body, headers=auth(TB), raw_body=raw)
        assert st == 403 and js["code"] == "thread_forbidden", (method, path, st, js)
    # a percent-encoded or look-alike thread id is the same check
    for path in ("/threads/a%2D1/runs", "/threads/b-1%00/runs"):
        st, js = s.http("GET", path, headers=auth(TB))
        assert st in (400, 403), (path, st, js)

    async def tail(uri):
        async with websockets.connect(uri) as ws:
            await ws.recv()
    uri = f"ws://127.0.0.1:{s.port}/runs/{run}/stream?threadId=a-1"
    for extra in (f"&access_token={TB}",):
        try:
            asyncio.run(tail(uri + extra))
            raise AssertionError("tenant b tailed tenant a's run")
        except websockets.InvalidStatusCode as e:
            assert e.status_code == 403
    c = connect(s.port)
    c.sendall(f"GET /runs/{run}/stream?threadId=a-1 HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
              f"Accept: text/event-stream\r\nAuthorization: Bearer {TB}\r\n\r\n".encode())
    buf = b""
    while not parse_responses(buf)[0]:
        d = c.recv(65536)
        assert d
        buf += d
    c.close()
    assert parse_responses(buf)[0][0].status == 403

    # nothing happened: one run, the file where it was, nothing written
    assert runs_of(s, "a-1") == [run]
    assert runs_of(s, "a-2") == []
    st, _ = s.http("GET", "/threads/a-1/files/hi.txt", headers=auth(TA))
    assert st == 200
    for p in ("evil.txt", "evil-dir", "moved.txt"):
        st, _ = s.http("GET", f"/threads/a-1/files/{p}?stat=1", headers=auth(ADMIN))
        assert st == 404, p
    # the owner tenant and the operator keep their access; b its own threads
    for tok in (TA, ADMIN):
        st, rec = s.http("GET", f"/runs/{run}?threadId=a-1", headers=auth(tok))
        assert st == 200 and rec["status"] == "completed", (tok, st, rec)
    n, _ = asyncio.run(ws_count(uri + f"&access_token={TA}"))
    assert n > 1
    wait_done(s, start(s, TB, "b-7"), "b-7")




def test_thread_patterns_are_exact_ids_or_prefixes(s):
    wait_done(s, start(s, TA, "shared"), "shared")
    for thread in ("shared2", "sharedX", "b-1", "xa-1", "A-1"):
        st, js = s.http("POST", "/runs", run_body(thread), headers=auth(TA))
        assert st == 403 and js["code"] == "thread_forbidden", (thread, st, js)
        assert runs_of(s, thread) == []
    wait_done(s, start(s, TA, "a-"), "a-")  # the bare prefix is in a-*


def test_a_token_can_be_limited_to_harnesses(s):
    # TA: shell only; TH: shell2 only (the default harness is shell)
    wait_done(s, start(s, TA, "a-h"), "a-h")
    wait_done(s, start(s, TA, "a-h", "shell"), "a-h")
    wait_done(s, start(s, TH, "h-1", "shell2"), "h-1")
    for tok, thread, harness in ((TA, "a-h2", "shell2"), (TH, "h-2", None), (TH, "h-2", "shell")):
        st, js = s.http("POST", "/runs", run_body(thread, harness), headers=auth(tok))
        assert st == 403 and js["code"] == "harness_forbidden", (tok, harness, st, js)
        assert runs_of(s, thread) == []
    # the operator's token is not limited
    wait_done(s, start(s, ADMIN, "x-1", "shell2"), "x-1")


def check_config(text):
    return check_tokens_config(text, prefix="rw-scope-")


def test_bad_scope_lines_are_refused_with_file_and_line(s):
    for line, what in (("secret-x threads=", "threads="), ("secret-x threads=a*b", "'*'"),
                       ("secret-x threads=a,,b", "empty"), ("secret-x harnesses=sh ell", "only"),
                       ("secret-x harnesses=a/b", "harness name"),
                       ("secret-x colour=red", "only threads=LIST"),
                       ("secret-x threads=a threads=b", "each once")):
        rc, out, path = check_config(f"# c\n{line}\n")
        assert rc != 0 and f"{path}:2:" in out and what in out, (line, out)
        assert "secret-x" not in out, out
    rc, out, _ = check_config("ok-token threads=a-*,b harnesses=shell,x.y-z_1\nplain-token\n")
    assert rc == 0, out


def test_cli_reads_its_token_from_a_file_and_keeps_to_its_threads(s):
    cli = os.path.join(BUILD, "runwarden")
    d = tempfile.mkdtemp(prefix="rw-cli-tok-")
    tok = os.path.join(d, "token")
    with open(tok, "w") as f:  # a tokens_file line works as it is
        f.write(f"# tenant a\n\n{TA} threads=a-*\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNWARDEN_")}
    env["RUNWARDEN_URL"] = f"http://127.0.0.1:{s.port}"

    def run(*args, **extra):
        return subprocess.run([cli, *args], capture_output=True, text=True, timeout=60,
                              env={**env, **extra})
    p = run("--token-file", tok, "run", "--thread", "a-cli", "echo from-cli")
    assert p.returncode == 0 and p.stdout == "from-cli\n", (p.returncode, p.stdout, p.stderr)
    p = run("run", "--thread", "a-cli", "echo via-env", RUNWARDEN_TOKEN_FILE=tok)
    assert p.returncode == 0 and p.stdout == "via-env\n", (p.returncode, p.stdout, p.stderr)
    p = run("--token-file", tok, "run", "--thread", "b-cli", "echo no")
    assert p.returncode == 125 and "thread_forbidden" in p.stderr, (p.returncode, p.stderr)
    assert runs_of(s, "b-cli") == []
    p = run("run", "--thread", "a-cli", "echo no")  # no token at all
    assert p.returncode == 125 and "unauthorized" in p.stderr, p.stderr
    p = run("--token-file", os.path.join(d, "missing"), "ls")
    assert p.returncode == 125 and "cannot read the token file" in p.stderr, p.stderr
    assert TA not in p.stderr + p.stdout
