# SPDX-License-Identifier: MIT
"""Configuration: conf/runwarden.conf documents every key of every daemon with
its default; each daemon accepts it; errors are "FILE:LINE: KEY: reason"."""
import os
import subprocess
import tempfile

from rwtest import BUILD, DAEMONS

NO_SUITE = True
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CONF = os.path.join(TOP, "conf", "runwarden.conf")


def sections(text):
    """{section: {key: default}} from '#key = value' lines; a commented-out
    section line ('#[harness.NAME]', a template) starts a section too."""
    out, sec = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#["):
            line = line[1:]
        if line.startswith("[") and line.endswith("]"):
            sec = line[1:-1]
            out.setdefault(sec, {})
        elif sec and line.startswith("#") and " = " in line and not line.startswith("# "):
            k, v = line[1:].split(" = ", 1)
            out[sec][k.strip()] = v.strip()
    return out


def run(daemon, *args):
    return subprocess.run([os.path.join(BUILD, daemon), *args], capture_output=True, text=True,
                          timeout=10)


def test_every_key_is_documented_with_its_default():
    documented = sections(open(CONF).read())
    for d in DAEMONS:
        p = run(d, "--dump-config")
        assert p.returncode == 0, p.stderr
        for sec, keys in sections(p.stdout).items():
            assert sec in documented, f"[{sec}] of {d} missing from conf/runwarden.conf"
            for k, v in keys.items():
                assert documented[sec].get(k) == v, f"{d}: [{sec}] {k} = {v} not documented as such"


def test_shipped_file_is_accepted_by_every_daemon():
    for d in DAEMONS:
        p = run(d, "--check-config", "--config", CONF)
        assert p.returncode == 0, (d, p.stderr)


def check_error(text, expect):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(text)
    try:
        for d in DAEMONS:
            p = run(d, "--check-config", "--config", f.name)
            assert p.returncode != 0, (d, text)
            assert f"{f.name}:{expect}" in p.stderr, (d, p.stderr, expect)
    finally:
        os.unlink(f.name)


def test_errors_name_file_line_and_key():
    check_error("[runwarden]\nlog_level = info\nmax_frame = 12Q\n", "3: max_frame: '12Q'")
    check_error("# comment\n[runwarden]\nnope = 1\n", "3: nope: unknown key in [runwarden]")
    check_error("[runwarden]\nmax_frame = 1\n", "2: max_frame: '1' out of range")
    check_error("[bogus]\nx = 1\n", "2: [bogus]: unknown section")
    check_error("[runwarden]\nlog_level = info\nlog_level = debug\n", "3: log_level: set twice")


def test_daemon_specific_errors():
    for d, sec, key in (("routerd", "routerd", "max_body"), ("coordinatord", "coordinatord", "map_size"),
                        ("containerd-shim", "containerd-shim", "tmp_size")):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(f"[{sec}]\n{key} = lots\n")
        p = run(d, "--check-config", "--config", f.name)
        os.unlink(f.name)
        assert p.returncode != 0 and f"{f.name}:2: {key}: 'lots'" in p.stderr, (d, p.stderr)


def test_harness_egress_allow_private():
    """[harness.X] egress_allow_private: networks only (host bits zero, no
    inet_aton forms, no mapped IPv6); an error names file:line and the key."""
    def check(value):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(f"[harness.h]\nadapter = shell\negress = api.example.com\n"
                    f"egress_allow_private = {value}\n")
        p = run("coordinatord", "--check-config", "--config", f.name)
        os.unlink(f.name)
        return p, f.name
    for good in ("10.0.0.0/8", "10.0.0.0/8, 127.0.0.1 fd00::/8", "::1", "169.254.169.254/32", ""):
        p, _ = check(good)
        assert p.returncode == 0, (good, p.stderr)
    for bad in ("10.0.0.1/8", "127.1", "localhost", "::ffff:127.0.0.1", "10.0.0.0/33",
                "10.0.0.0/8 nope"):
        p, name = check(bad)
        assert p.returncode != 0 and f"{name}:4: egress_allow_private: '{bad}'" in p.stderr, \
            (bad, p.stderr)


def test_long_lines_are_read_whole_and_a_too_long_one_names_its_line():
    """A harness command with a few arguments passes inih's default 200 bytes:
    the line is read whole (a cut one is a JSON array without its end, and
    its rest a syntax error on the next line); a line over the parser's
    64 KiB is an error naming its own line and key, not the next."""
    args = ", ".join(f'"--argument-number-{i}=some-value"' for i in range(12))
    line = f'command = ["/usr/bin/python3", {args}]'
    assert len(line) > 400
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(f"[harness.long]\nadapter = shell\n{line}\ntimeout_ms = 1000\n")
    try:
        p = run("coordinatord", "--check-config", "--config", f.name)
        assert p.returncode == 0, p.stderr
    finally:
        os.unlink(f.name)
    check_error("[runwarden]\nlog_level = info\n\nmax_frame = " + "1" * 70000 + "\nnope = 1\n",
                "4: max_frame: the line is longer than 65536 bytes")


def test_missing_explicit_config_is_an_error():
    for d in DAEMONS:
        p = run(d, "--check-config", "--config", "/nonexistent/runwarden.conf")
        assert p.returncode != 0 and "/nonexistent/runwarden.conf" in p.stderr, (d, p.stderr)


def test_choice_keys_name_file_line_and_the_choices():
    """Keys with a fixed set of values (stall_action, reuse, output_limit_action,
    tool_cgroup) are refused by the parser, with file:line, the key and the
    values allowed; a bad cpu.max or cgroup path is refused at start."""
    for key, bad, expect in (("tool_cgroup", "maybe", "expected 'required', 'auto' or 'off'"),
                             ("stall_action", "explode", "expected 'fail' or 'kill'"),
                             ("reuse", "never", "expected 'thread' or 'none'"),
                             ("output_limit_action", "ignore", "expected 'fail' or 'drop'")):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(f"# x\n[coordinatord]\n{key} = {bad}\n")
        p = run("coordinatord", "--check-config", "--config", f.name)
        os.unlink(f.name)
        assert p.returncode != 0 and f"{f.name}:3: {key}: '{bad}': {expect}" in p.stderr, \
            (key, p.stderr)
    for key, bad, expect in (("tool_cpu_max", "lots", "tool_cpu_max: 'lots' is not 'max'"),
                             ("tool_cgroup_parent", "/a/../b", "tool_cgroup_parent must be")):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(f"[coordinatord]\n{key} = {bad}\n")
        p = run("coordinatord", "--check-config", "--config", f.name)
        os.unlink(f.name)
        assert p.returncode != 0 and expect in p.stderr, (key, p.stderr)


def test_cluster_section():
    """[cluster] (docs/CLUSTER.md), read by every daemon: each value checked
    with file:line and the key; the keys that bound each other checked after
    loading; a valid section accepted (nothing connects at --check-config)."""
    check_error("[cluster]\n\nnats = http://10.0.0.1:4222\n", "3: nats: 'http://10.0.0.1:4222'")
    check_error("[cluster]\nnats = nats://u:secret@h1:4222\n", "2: nats: 'nats://u:secret@h1:4222'")
    check_error("[cluster]\nnats = nats://h1:4222,nats://h2\n", "2: nats: ")
    check_error("[cluster]\nnode = h1.example.com\n", "2: node: 'h1.example.com'")
    check_error("[cluster]\nreplicas = 7\n", "2: replicas: '7' out of range")
    check_error("[cluster]\nheartbeat_ms = 10\n", "2: heartbeat_ms: '10' out of range")
    check_error("[cluster]\nmax_runs = -1\n", "2: max_runs: '-1' out of range")
    check_error("[cluster]\n\nmax_runs = lots\n", "3: max_runs: 'lots'")
    for text, why in (("[cluster]\nnats = nats://127.0.0.1:4222\ntls_cert = /c.pem\n", "tls_key"),
                      ("[cluster]\nheartbeat_ms = 5000\nnode_ttl_ms = 6000\n", "node_ttl_ms")):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write(text)
        for d in DAEMONS:
            p = run(d, "--check-config", "--config", f.name)
            assert p.returncode != 0 and f"cluster.{why}" in p.stderr, (d, p.stderr)
        os.unlink(f.name)
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("[cluster]\nnats = nats://10.0.0.1:4222, tls://h2.example:4222,"
                "nats://[fd00::3]:4222\nnode = h1\nreplicas = 3\nmax_runs = 8\n")
    for d in DAEMONS:
        p = run(d, "--check-config", "--config", f.name)
        assert p.returncode == 0, (d, p.stderr)
    os.unlink(f.name)
