# SPDX-License-Identifier: MIT
"""Issue 36, runwarden as a TanStack sandbox provider: tests/js/provider.mjs
drives the package @runwarden/ai-sandbox (clients/ai-sandbox) with the real
@tanstack/ai-sandbox 0.2.4, @tanstack/ai 0.58.0, @tanstack/ai-claude-code and
@tanstack/ai-codex 0.2.3 (pinned in tests/js/package-lock.json) against the
real daemons: every fs, process, env, snapshot, fork and destroy call;
defineSandbox().ensure() with a setup that exports and cds, its after-setup
snapshot and the resume; withSandbox + chat() with claudeCodeText and
codexText running the stand-in CLI (tests/fixtures/bin/replay) in the
sandbox; watchWorkspace through fs.watch; createExecBackedGit; spawnNdjson;
an AbortSignal and kill() that end a command and its children; ports.connect
giving a preview of python3 -m http.server that another tenant's token
cannot reach; egress names outside the operator's list refused at create; a
scoped token's ids mapped into its scope. A secret given with env.set or
createSecrets appears in no daemon log, no state file (run log, LMDB,
workspace: the search finds a control value there), no hydrate; and the
sandbox API starts no run."""
import json
import os
import secrets
import shutil
import subprocess
import tempfile

from rwtest import Skip, free_port

HERE = os.path.dirname(os.path.abspath(__file__))
JS = os.path.join(HERE, "..", "js")
FIXTURES = os.path.abspath(os.path.join(HERE, "..", "fixtures"))
ADMIN, TA, TB = "provider-admin-token", "provider-tenant-a.token", "provider-tenant-b.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-provider-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{TA} threads=a-*\n{TB} threads=b-*\n")
SECRET = "sekrit-" + secrets.token_hex(12)

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
preview_listen = 127.0.0.1:{free_port()}
"""

RESULTS = {}


def checks(s, *names, token=ADMIN, tag="p"):
    """Run provider.mjs CHECK...; assert each passed; their infos by name."""
    if not shutil.which("node") or not os.path.isdir(
            os.path.join(JS, "node_modules", "@tanstack", "ai-sandbox")):
        raise Skip("node or tests/js/node_modules missing (./dev test installs them)")
    p = subprocess.run(["node", "--preserve-symlinks", os.path.join(JS, "provider.mjs"),
                        f"http://127.0.0.1:{s.port}", *names],
                       capture_output=True, text=True, timeout=240, cwd=JS,
                       env=dict(os.environ, RW_TOKEN=token, RW_TOKEN_B=TB, RW_TAG=tag, RW_SECRET=SECRET,
                                RW_FIXTURES=FIXTURES))
    assert p.returncode == 0, f"provider.mjs failed:\n{p.stderr}\n{p.stdout}"
    got = {}
    for line in p.stdout.splitlines():
        if line.startswith("{\"check\""):
            r = json.loads(line)
            got[r["check"]] = r
    assert set(got) == set(names), (names, p.stdout, p.stderr)
    bad = [f"{n}: {r['error']}" for n, r in got.items() if not r["ok"]]
    assert not bad, "\n".join(bad) + "\n" + p.stderr
    for n, r in got.items():
        RESULTS[n] = r.get("info")
    return {n: r.get("info") for n, r in got.items()}


def test_capabilities(s):
    info = checks(s, "capabilities")["capabilities"]
    assert info["prefix"] == "", info


def test_helpers(s):
    checks(s, "helpers")


def test_lifecycle(s):
    checks(s, "lifecycle")


def test_fs(s):
    checks(s, "fs")


def test_process(s):
    checks(s, "process")


def test_abort_and_kill_end_the_command_and_its_children(s):
    checks(s, "abort_kill")


def test_env(s):
    checks(s, "env_secret")


def test_snapshot_restore_fork(s):
    checks(s, "snapshot_fork")


def test_ports(s):
    # a preview of python3 -m http.server in the sandbox, fetched; as tenant a,
    # so tenant b's token is refused
    info = checks(s, "ports", token=TA, tag="ports")["ports"]
    assert info["ports"] is True, info


def test_exec_backed_git(s):
    checks(s, "git")


def test_spawn_ndjson(s):
    checks(s, "spawn_ndjson")


def test_watch_workspace_through_fs_watch(s):
    checks(s, "watch")


def test_define_sandbox_ensure(s):
    checks(s, "ensure")


def test_chat_with_claude_code(s):
    checks(s, "chat_claude")


def test_chat_with_codex(s):
    checks(s, "chat_codex")


def test_a_scoped_token_maps_ids_into_its_scope(s):
    checks(s, "scope", token=TA)


def test_the_secret_is_nowhere_and_no_run_was_started(s):
    # after the checks above gave SECRET through env.set and createSecrets
    if "env_secret" not in RESULTS or "ensure" not in RESULTS:
        checks(s, "env_secret", "ensure", tag="p2")
    h = {"Authorization": f"Bearer {ADMIN}"}
    # the search must be able to find: a control value written to a workspace
    control = "control-" + secrets.token_hex(8)
    st, _ = s.http("PUT", "/sandboxes/ctl-secret/files/c.txt", raw_body=control.encode(), headers=h)
    assert st == 201, st

    def files_with(needle):
        hits = []
        for root, _dirs, files in os.walk(s.dir):
            for fn in files:
                path = os.path.join(root, fn)
                try:
                    with open(path, "rb") as f:
                        if needle in f.read():
                            hits.append(path)
                except OSError:
                    pass
        return hits
    assert files_with(control.encode()), "the search does not reach the workspaces"
    hits = files_with(SECRET.encode())
    assert not hits, f"the secret is in {hits}"
    needle = SECRET.encode()
    for sandbox in (RESULTS["env_secret"]["sandbox"], RESULTS["ensure"]["sandbox"]):
        for path in (f"/chat?threadId={sandbox}", f"/threads/{sandbox}/runs"):
            st, body = s.http("GET", path, headers=h)
            assert needle not in json.dumps(body).encode(), (path, body)
    st, text = s.http("GET", "/metrics", headers=h)
    assert st == 200, st
    lines = [ln for ln in text.decode().splitlines() if ln.startswith("runwarden_runs_started_total")]
    assert lines and all(float(ln.split()[-1]) == 0 for ln in lines), lines
