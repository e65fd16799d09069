# SPDX-License-Identifier: MIT
"""A short libFuzzer pass over every parser an agent or a client can feed
(tests/fuzz/README.md): routerd's request parsing and WebSocket frames, the
ndjson / Claude Code / Codex adapters, the egress proxy's CONNECT head, the
files API path, the snapshot archive reader and coordinatord's frames. Build
with clang (ASan + UBSan), replay every seed (the regression inputs), then
fuzz each target for RW_FUZZ_SECONDS (default 10) on a scratch copy of the
corpus. Skips, with the reason, only when clang's libFuzzer is missing.
tests/fuzz/campaign runs the same targets for longer and writes the figures."""
import os
import shutil
import subprocess
import tempfile

from rwtest import BUILD

NO_SUITE = True
TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
FUZZ = os.path.join(TOP, "tests", "fuzz")
OUT = os.path.join(os.path.abspath(BUILD), "tests", "fuzz-out")
SECONDS = int(os.environ.get("RW_FUZZ_SECONDS", "10"))
_built = {}


def libfuzzer_missing():
    cc = shutil.which("clang")
    if not cc:
        return "clang is not installed (Debian package clang)"
    d = tempfile.mkdtemp(prefix="rw-lf-")
    src = os.path.join(d, "t.c")
    with open(src, "w") as f:
        f.write("#include <stdint.h>\n#include <stddef.h>\n"
                "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n){return 0;}\n")
    p = subprocess.run([cc, "-fsanitize=fuzzer,address", src, "-o", os.path.join(d, "t")],
                       capture_output=True, text=True)
    shutil.rmtree(d, ignore_errors=True)
    return None if p.returncode == 0 else f"clang cannot link libFuzzer: {p.stderr[-300:]}"


def build():
    if "why" not in _built:
        why = libfuzzer_missing()
        if not why:
            p = subprocess.run([os.path.join(FUZZ, "build.sh"), BUILD, OUT], capture_output=True,
                               text=True, timeout=900)
            assert p.returncode == 0, f"fuzz build failed:\n{p.stdout}\n{p.stderr}"
        _built["why"] = why
    return _built["why"]


def target_options(name):
    """-max_len and the dictionary of a target (tests/fuzz/options)."""
    opts = ["-max_len=8192"]
    with open(os.path.join(FUZZ, "options")) as f:
        for line in f:
            w = line.split()
            if w and w[0] == name:
                opts = [o.replace("@DIR@", FUZZ) for o in w[1:]]
    return opts


def run_target(name):
    why = build()
    if why:
        print(f"SKIP fuzz-{name}: {why}")
        return
    exe = os.path.join(OUT, f"fuzz-{name}")
    seeds = os.path.join(FUZZ, "corpus", name)
    opts = target_options(name)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    # every seed once (regressions), then a timed run from a scratch corpus
    files = sorted(os.path.join(seeds, f) for f in os.listdir(seeds))
    p = subprocess.run([exe, *files], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, f"seed replay failed:\n{p.stderr[-3000:]}"
    work = tempfile.mkdtemp(prefix=f"rw-fuzz-{name}-")
    art = tempfile.mkdtemp(prefix=f"rw-fuzz-art-{name}-")
    try:
        p = subprocess.run([exe, f"-max_total_time={SECONDS}", *opts, "-timeout=10",
                            f"-artifact_prefix={art}/", "-print_final_stats=1", work, seeds],
                           capture_output=True, text=True, env=env, timeout=SECONDS + 300)
        stats = [l for l in p.stderr.splitlines() if l.startswith("stat::number_of_executed_units")]
        assert p.returncode == 0, f"fuzz-{name} found a problem (inputs in {art}):\n" \
                                  f"{p.stderr[-4000:]}"
        assert "Sanitizer" not in p.stderr and "runtime error" not in p.stderr, p.stderr[-4000:]
        print(f"    fuzz-{name}: {stats[0].split()[-1] if stats else '?'} inputs in {SECONDS}s")
        shutil.rmtree(art, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_fuzz_http_request_parsing():
    run_target("http")


def test_fuzz_websocket_frames():
    run_target("ws")


def test_fuzz_ndjson_adapter():
    run_target("adapter-ndjson")


def test_fuzz_claude_adapter():
    run_target("adapter-claude")


def test_fuzz_codex_adapter():
    run_target("adapter-codex")


def test_fuzz_proxy_connect_head():
    run_target("connect")


def test_fuzz_files_api_paths():
    run_target("files")


def test_fuzz_snapshot_archive_restore():
    run_target("snapshot")


def test_fuzz_coordinatord_frames():
    run_target("coord-frames")
