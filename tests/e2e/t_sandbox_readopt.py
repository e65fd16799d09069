# SPDX-License-Identifier: MIT
"""Re-adoption after kill -9 of containerd-shim (docs/DESIGN.md, "Re-adopting
sandboxes"): the sandbox inits outlive the shim; a restarted shim takes over
those with execs not yet released and coordinatord re-attaches by offsets (no
output lost, none repeated, exit statuses that came while it was away
delivered); sandboxes without one are reaped (cgroup, mounts, processes); a
shim that never comes back leaves nothing running after sandbox_orphan_ms;
output beyond the buffer written while the shim is away is reported dropped
with exact byte counts."""
import json
import os
import re
import signal
import time

from rwtest import stdout_text
from t_sandbox import (KEEP_HARNESS, cgroup_id, host_pids, poll, run_ok, sandbox_cgroups,
                       sandbox_id, shimctl, start_daemon_in, workspace)

SUITE_CONF = """[containerd-shim]
exec_output_buffer = 64K

[coordinatord]
sandbox_wait_ms = 30000
""" + KEEP_HARNESS  # start_daemon_in


def kill9_shim(s):
    s.kill("containerd-shim", signal.SIGKILL)


def shim_log_since(s, mark):
    return s.log("containerd-shim")[mark:]


def ws_file(s, thread, name):
    return os.path.join(workspace(s, thread), name)


def rt_dir(s, thread):
    return os.path.join(s.dir, "run", "sandboxes", sandbox_id(thread))


def cgroup_procs(path):
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            return f.read().split()
    except OSError:
        return []


def mounts_of(s, thread):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if sandbox_id(thread) in line]


def wait_stdout(s, run_id, thread, text, timeout=30):
    """Until coordinatord committed text on the run's stdout (it is executing)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, rec = s.http("GET", f"/runs/{run_id}?threadId={thread}")
        assert st == 200, rec
        ev = s.tail(run_id, thread=thread, last_seq=-1, limit=rec["lastSeq"] + 1, timeout=15)[0]
        if text in stdout_text(ev):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {text!r} on the stdout of {run_id}")


def test_run_survives_kill9_of_the_shim_exactly_once(s):
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-lines"
    cmd = ("for i in $(seq 1 40); do echo line$i; "
           "[ $i = 8 ] && touch /workspace/mark8; sleep 0.05; done; echo end")
    run_ok(s, "rm -f /workspace/mark8", thread=thread)
    run_id = s.start_run(cmd, thread=thread)
    assert poll(lambda: os.path.exists(ws_file(s, thread, "mark8")), 15)
    wait_stdout(s, run_id, thread, "line1\n")
    mark = len(s.log("containerd-shim"))
    kill9_shim(s)
    # the sandbox outlived the shim: its lines go on into the memfd meanwhile
    time.sleep(0.5)
    s.start_daemon("containerd-shim")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    assert status is not None and status["status"] == "completed", (status, events[-3:])
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # no gap in the log
    out = stdout_text(events)
    assert out == "".join(f"line{i}\n" for i in range(1, 41)) + "end\n", out
    assert "lost" not in out
    assert any(e["chunk"].get("type") == "RUN_FINISHED" for e in events), events[-3:]
    log = shim_log_since(s, mark)
    assert "Re-adopted sandbox " + sandbox_id(thread) in log, log[-2000:]
    assert "Re-adopted exec" in log and "(running)" in log, log[-2000:]


def test_sigusr2_hands_the_sandboxes_over(s):
    """SIGUSR2 (the package upgrade's restart, docs/SYSTEMD.md): the shim exits
    0 leaving its sandboxes running; the next one re-adopts them and the run
    completes with all its lines, gap-free. A SIGTERM would have killed it."""
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-usr2"
    cmd = "for i in $(seq 1 30); do echo n$i; sleep 0.05; done"
    run_id = s.start_run(cmd, thread=thread)
    wait_stdout(s, run_id, thread, "n2\n")
    mark = len(s.log("containerd-shim"))
    assert s.kill("containerd-shim", signal.SIGUSR2) == 0
    assert "Exiting for an upgrade" in shim_log_since(s, mark)
    time.sleep(0.3)
    s.start_daemon("containerd-shim")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    assert status is not None and status["status"] == "completed", (status, events[-3:])
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    assert stdout_text(events) == "".join(f"n{i}\n" for i in range(1, 31)), stdout_text(events)
    assert "Re-adopted sandbox " + sandbox_id(thread) in shim_log_since(s, mark)


def test_repeated_kill9_during_one_run_keeps_both_streams_exact(s):
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-repeat"
    cmd = ("for i in $(seq 1 200); do echo out$i; echo err$i >&2; sleep 0.01; done; exit 3")
    run_id = s.start_run(cmd, thread=thread)
    mark = len(s.log("containerd-shim"))
    for k in (20, 70, 120):
        wait_stdout(s, run_id, thread, f"out{k}\n")
        kill9_shim(s)
        s.start_daemon("containerd-shim")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=-1, timeout=60)
    assert status is not None and status["status"] == "failed", status
    assert status["error"]["code"] == "exit_status", status
    assert stdout_text(events) == "".join(f"out{i}\n" for i in range(1, 201))
    assert stdout_text(events, "process.stderr") == "".join(f"err{i}\n" for i in range(1, 201))
    res = [e["chunk"] for e in events if e["chunk"]["type"] == "TOOL_CALL_RESULT"]
    assert len(res) == 1 and json.loads(res[0]["content"])["exitCode"] == 3, res
    assert shim_log_since(s, mark).count("Re-adopted sandbox " + sandbox_id(thread)) == 3


def test_exit_while_the_shim_is_away_is_delivered(s):
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-exit"
    marker = f"rwmarker-ro-exit-{os.getpid()}"
    run_ok(s, "rm -f /workspace/gate /workspace/started", thread=thread)
    script = ("echo first; touch /workspace/started; "
              "while [ ! -e /workspace/gate ]; do sleep 0.02; done; echo second; exit 7")
    run_id = s.start_run(f"sh -c '{script}' {marker}", thread=thread)
    wait_stdout(s, run_id, thread, "first\n")
    assert poll(lambda: os.path.exists(ws_file(s, thread, "started")), 15)
    assert host_pids(marker)
    mark = len(s.log("containerd-shim"))
    kill9_shim(s)
    with open(ws_file(s, thread, "gate"), "w"):
        pass
    # the exec ends (exit 7) while no shim runs
    assert poll(lambda: not host_pids(marker), 10), host_pids(marker)
    st, rec = s.http("GET", f"/runs/{run_id}?threadId={thread}")
    assert st == 200 and rec["status"] == "running", rec
    s.start_daemon("containerd-shim")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    assert status is not None and status["status"] == "failed", status
    assert status["error"]["code"] == "exit_status", status
    res = [e["chunk"] for e in events if e["chunk"]["type"] == "TOOL_CALL_RESULT"]
    assert len(res) == 1 and json.loads(res[0]["content"])["exitCode"] == 7, res
    assert stdout_text(events) == "first\nsecond\n", stdout_text(events)
    log = shim_log_since(s, mark)
    assert "ended while the shim was away" in log, log[-2000:]



def test_sandbox_without_live_exec_is_reaped_on_restart(s):
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-idle"
    marker = f"rwmarker-ro-idle-{os.getpid()}"
    pid = start_daemon_in(s, thread, marker)
    cgs = sandbox_cgroups(s, thread)
    assert cgs and os.path.isdir(rt_dir(s, thread))
    kill9_shim(s)
    # no PDEATHSIG any more: the sandbox waits (sandbox_orphan_ms) for a new shim
    assert host_pids(marker) == [pid]
    s.start_daemon("containerd-shim")
    assert poll(lambda: "Reaped sb-" + cgroup_id(s, thread) in s.log("containerd-shim"), 15), \
        s.log("containerd-shim")[-2000:]
    assert poll(lambda: not host_pids(marker), 5), host_pids(marker)
    assert not sandbox_cgroups(s, thread), sandbox_cgroups(s, thread)
    assert not any(os.path.exists(c) for c in cgs), cgs
    assert not mounts_of(s, thread)
    assert not os.path.exists(rt_dir(s, thread))
    s.wait_ready()
    # the key gets a fresh sandbox on the same workspace
    assert run_ok(s, "echo again", thread=thread) == "again\n"


def detach_exec(s, key, *argv):
    r = shimctl(s, key, "--detach", "--", *argv)
    assert r.returncode == 0, r.stderr
    return int(re.fullmatch(r"exec_id=(\d+)\n", r.stdout).group(1))


def exec_list(s):
    r = shimctl(s, "-", "--list")
    assert r.returncode == 0, r.stderr
    return {int(line.split()[0]): line.split()[2] for line in r.stdout.splitlines()}


def test_output_beyond_the_buffer_while_away_is_counted_dropped(s):
    s.expected_errors += [r"containerd-shim"]
    key = "t-ro-drop"
    marker = f"rwmarker-ro-drop-{os.getpid()}"
    script = ("while [ ! -e /workspace/gate ]; do sleep 0.01; done; "
              "head -c 200000 /dev/zero | tr '\\0' a; printf END; printf err >&2")
    eid = detach_exec(s, key, "sh", "-c", script, marker)
    assert exec_list(s).get(eid) == "running"
    kill9_shim(s)
    with open(ws_file(s, key, "gate"), "w"):
        pass
    assert poll(lambda: not host_pids(marker), 10), host_pids(marker)
    s.start_daemon("containerd-shim")
    assert poll(lambda: shimctl(s, "-", "--list").returncode == 0, 10)
    assert exec_list(s).get(eid) == "ended", exec_list(s)
    # new exec ids never collide with the adopted one
    eid2 = detach_exec(s, key, "true")
    assert eid2 > eid, (eid, eid2)
    r = shimctl(s, "-", "--from", "5", "0", "--attach", str(eid))
    assert r.returncode == 0, r.stderr
    # 200003 bytes written while no shim ran, 64 KiB kept: exact accounting
    assert r.stderr == (f"shimctl: dropped {200003 - 65536 - 5} bytes of stream 1\n"
                        f"errshimctl: exec {eid}: exit (exit_code 0, signal 0)\n"), r.stderr
    assert len(r.stdout) == 65536 and r.stdout.endswith("aaaEND"), len(r.stdout)
    assert set(r.stdout[:-3]) == {"a"}
    assert eid not in exec_list(s)  # released once its EXEC_EXIT went out


def test_run_output_lost_while_away_is_noted_with_the_exact_count(s):
    """The same through coordinatord: the record says how many bytes are gone."""
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-drop-run"
    run_ok(s, "rm -f /workspace/gate", thread=thread)
    script = ("rm -f /workspace/done; echo start; "
              "while [ ! -e /workspace/gate ]; do sleep 0.01; done; "
              "head -c 200000 /dev/zero | tr '\\0' a; echo END; : > /workspace/done; sleep 0.5")
    run_id = s.start_run(script, thread=thread)
    # coordinatord committed "start\n" (its consumed offset is 6) before the crash
    wait_stdout(s, run_id, thread, "start\n")
    kill9_shim(s)
    with open(ws_file(s, thread, "gate"), "w"):
        pass
    # all the output is written while no shim reads it (a shim back earlier
    # would read some of it, and fewer bytes would be lost)
    assert poll(lambda: os.path.exists(ws_file(s, thread, "done")), 30)
    s.start_daemon("containerd-shim")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    assert status is not None and status["status"] == "completed", status
    # 6 bytes consumed before the crash, 200004 written after; 64 KiB kept
    lost = (6 + 200004 - 65536) - 6
    assert stdout_text(events) == ("start\n" f"\n[runwarden: {lost} bytes of output were lost]\n"
                                   + "a" * (65536 - 4) + "END\n"), stdout_text(events)[:200]


def test_shim_that_never_returns_leaves_nothing_after_orphan_ms(s):
    """Last test of the module: restarts the shim with sandbox_orphan_ms = 1000."""
    s.expected_errors += [r"containerd-shim", r"sandbox_lost", r"lost"]
    with open(s.conf_path) as f:
        orig = f.read()
    with open(s.conf_path, "a") as f:
        f.write("\n[containerd-shim]\nsandbox_orphan_ms = 1000\n")
    s.kill("containerd-shim", signal.SIGTERM)
    s.start_daemon("containerd-shim")
    thread = "t-ro-orphan"
    marker = f"rwmarker-ro-orphan-{os.getpid()}"
    start_daemon_in(s, thread, marker)
    run_id = s.start_run(f"sh -c 'sleep 30' {marker}-exec", thread=thread)
    assert poll(lambda: host_pids(marker + "-exec"), 15)
    cgs = sandbox_cgroups(s, thread)
    assert cgs
    kill9_shim(s)
    # nobody comes back: after orphan_ms the init kills its namespace and exits
    assert poll(lambda: not host_pids(marker) and not host_pids(marker + "-exec"), 15), \
        (host_pids(marker), host_pids(marker + "-exec"))
    assert poll(lambda: not any(cgroup_procs(c) for c in cgs), 5), [cgroup_procs(c) for c in cgs]
    assert not mounts_of(s, thread)
    with open(s.conf_path, "w") as f:
        f.write(orig)
    s.start_daemon("containerd-shim")
    # the next start removes the empty cgroup and the state; the run is lost
    assert poll(lambda: not sandbox_cgroups(s, thread), 15), sandbox_cgroups(s, thread)
    assert not os.path.exists(rt_dir(s, thread))
    rec = s.wait_terminal(run_id, thread=thread, timeout=30)
    assert rec["status"] == "failed" and rec["error"]["code"] == "sandbox_lost", rec


def test_workspace_is_intact_inside_after_the_restart(s):
    """A sandbox taken from the pool has its workspace bound onto a mount point
    of the shim's; the restarted shim must not take that away from it (a
    removed directory loses the mounts on it in every namespace)."""
    s.expected_errors += [r"containerd-shim"]
    thread = "t-ro-ws"
    pat = r"Sandbox " + sandbox_id(thread) + r" created \([^)]*from the pool"
    for _ in range(10):  # the pool may be refilling after an earlier test's restart
        run_ok(s, "echo before > /workspace/kept", thread=thread)
        if re.search(pat, s.log("containerd-shim")):
            break
        assert shimctl(s, thread, "--destroy").returncode == 0
        time.sleep(0.5)
    assert re.search(pat, s.log("containerd-shim")), "the sandbox did not come from the pool"
    cmd = ("echo started; while [ ! -e /workspace/go ]; do sleep 0.05; done; "
           "ls /workspace | tr '\\n' ' '; echo; cat /workspace/kept; echo inside > /workspace/new")
    run_id = s.start_run(cmd, thread=thread)
    wait_stdout(s, run_id, thread, "started\n")
    kill9_shim(s)
    time.sleep(0.3)
    s.start_daemon("containerd-shim")
    assert poll(lambda: "Re-adopted sandbox " + sandbox_id(thread) in s.log("containerd-shim"), 15)
    with open(ws_file(s, thread, "go"), "w") as f:  # the host writes, the sandbox sees it
        f.write("1")
    events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    assert status is not None and status["status"] == "completed", (status, events[-3:])
    assert stdout_text(events) == "started\ngo kept \nbefore\n", stdout_text(events)
    with open(ws_file(s, thread, "new")) as f:
        assert f.read() == "inside\n"
