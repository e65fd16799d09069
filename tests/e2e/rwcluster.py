# SPDX-License-Identifier: MIT
"""rwcluster — a NATS JetStream cluster on loopback (tests/cluster/natscluster.py)
and runwarden nodes pointing at it, for the cluster tests (docs/CLUSTER.md).

    c = Cluster()                 # nothing started yet
    a = c.node("a")               # starts the NATS servers (once), then node a:
                                  # an rwtest.Suite with [cluster] node = a, ready
    c.kill_nats("n2")             # kill -9 of one server
    c.jetstream_events(run)       # [(seq, bytes)] of the run's subject
    c.lmdb_events(a, run)         # the same read from a's coordinatord (RUN_READ;
                                  # a run a's log lacks is read from JetStream)
    c.local_record(a, run)        # the run's record in a's own log, or None
    c.stop_all()                  # every node (hygiene asserted), then the servers

Nodes log errors on purpose when NATS goes away under them; EXPECTED lists them."""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

import rwtest
from ipc import Ipc, IpcError
from rwtest import poll

HERE = os.path.dirname(os.path.abspath(__file__))
NATSCLUSTER = os.path.join(HERE, "..", "cluster", "natscluster.py")
READER = os.path.join(rwtest.BUILD, "tests", "cluster", "rw-cluster-read")

EXPECTED = [r"[Cc]luster", r"NATS", r"nats", r"fenced"]


class Cluster:
    def __init__(self, servers=3, heartbeat_ms=500, node_ttl_ms=5000):
        self.servers = servers
        self.heartbeat_ms = heartbeat_ms
        self.node_ttl_ms = node_ttl_ms
        self.dir = None
        self.urls = None
        self.nodes = {}

    def nats(self):
        """The servers' URLs (comma-separated), starting them on first use."""
        if self.urls is None:
            d = tempfile.mkdtemp(prefix="rw-e2e-nats-")
            out = subprocess.run([sys.executable, NATSCLUSTER, "start", d, str(self.servers),
                                  "--owner", str(os.getpid())],
                                 capture_output=True, text=True, timeout=90)
            assert out.returncode == 0, out.stderr
            self.dir = d
            self.urls = out.stdout.strip().splitlines()[-1]
        return self.urls

    def node(self, name, extra_conf=""):
        """Node NAME (started and ready on first use)."""
        if name not in self.nodes:
            conf = f"""[cluster]
nats = {self.nats()}
node = {name}
replicas = {min(3, self.servers)}
heartbeat_ms = {self.heartbeat_ms}
node_ttl_ms = {self.node_ttl_ms}

{extra_conf}
"""
            s = rwtest.Suite(conf)
            s.expected_errors = list(EXPECTED)
            self.nodes[name] = s
            s.start()
            assert poll(lambda: s.http("GET", "/readyz")[0] == 200, timeout=30), \
                (s.http("GET", "/readyz"), s.log("coordinatord")[-2000:])
        return self.nodes[name]

    def kill_nats(self, server):
        subprocess.run([sys.executable, NATSCLUSTER, "kill", self.dir, server], timeout=60,
                       check=True)

    def pause_nats(self, server):
        """SIGSTOP one server: it answers nothing and closes nothing."""
        subprocess.run([sys.executable, NATSCLUSTER, "pause", self.dir, server], timeout=60,
                       check=True)

    def resume_nats(self, server):
        subprocess.run([sys.executable, NATSCLUSTER, "resume", self.dir, server], timeout=60,
                       check=True)

    def connections(self, server):
        """The names of the client connections of SERVER (its /connz), or None
        when it does not answer."""
        with open(os.path.join(self.dir, server + ".http")) as f:
            port = int(f.read())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/connz?limit=1000",
                                        timeout=2) as r:
                return [c.get("name", "") for c in json.load(r).get("connections", [])]
        except OSError:
            return None

    def server_of(self, conn):
        """The server (n1, n2, ...) the client connection named CONN is on, or None."""
        for i in range(self.servers):
            if conn in (self.connections(f"n{i + 1}") or []):
                return f"n{i + 1}"
        return None

    def stop_nats(self):
        if self.dir:
            subprocess.run([sys.executable, NATSCLUSTER, "stop", self.dir], timeout=60)
        self.dir = self.urls = None

    def stop_all(self):
        """Stop every node (asserting its hygiene), then the servers."""
        problems = []
        for name in list(self.nodes):
            s = self.nodes.pop(name)
            problems += s.stop()
            s.cleanup()
        self.stop_nats()
        assert not problems, problems

    def jetstream_events(self, run):
        out = subprocess.run([READER, self.nats(), run], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        return [(q, b) for q, b, _ in self.jetstream_log(run, out.stdout)]

    def jetstream_log(self, run, text=None):
        """[(seq, bytes, writer)] of the run's subject: writer is the Rw-Writer
        of the process that published the event ("<node>-<random>")."""
        if text is None:
            out = subprocess.run([READER, self.nats(), run], capture_output=True, text=True,
                                 timeout=30)
            assert out.returncode == 0, out.stderr
            text = out.stdout
        evs = []
        for line in text.splitlines():
            seq, _, hexb, writer = line.split(" ")
            evs.append((int(seq), bytes.fromhex(hexb), writer))
        return evs

    @staticmethod
    def local_record(s, run):
        """The run's record in s's own run log, or None: RUN_GET naming no
        thread (a tool client's) is never forwarded to another node."""
        try:
            return json.loads(coord_call(s, "RUN_GET", {"run_id": run})["record"])
        except IpcError:
            return None

    @staticmethod
    def lmdb_events(s, run):
        """[(seq, bytes)] of the run in s's own log, every page of it (a
        RUN_READ answers at most coordinatord.read_max events)."""
        out = []
        while True:
            body = coord_call(s, "RUN_READ", {"run_id": run, "from_seq": len(out) - 1,
                                              "max": 1000})
            out += [(len(out) + i, e.encode() if isinstance(e, str) else e)
                    for i, e in enumerate(body["events"])]
            if not body["events"] or len(out) > json.loads(body["record"])["lastSeq"]:
                return out

    def run_record(self, run):
        """The run's record in rw_runs (mirrored by its owner, or by the node
        that ended it node_lost), or None."""
        out = subprocess.run([READER, self.nats(), run, "record"], capture_output=True,
                             text=True, timeout=30)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def status(self, via):
        """`runwarden cluster status --json` with node VIA's configuration:
        {"nodes": {name: {"value": heartbeat}}, "threads": {thread: {"value": owner}}}."""
        out = subprocess.run([os.path.join(rwtest.BUILD, "runwarden"), "cluster", "status",
                              "--json", "--config", self.nodes[via].conf_path],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, (out.returncode, out.stderr)
        return json.loads(out.stdout)

    def owner(self, thread, via):
        t = self.status(via)["threads"].get(thread)
        return t and t["value"]

    def kill_node(self, name, sig=9):
        """kill -SIG every daemon of node NAME (its sandboxes' processes are the
        caller's to find: they are not the node's children)."""
        s = self.nodes[name]
        for d in ("routerd", "coordinatord", "containerd-shim"):
            p = s.procs.get(d)
            if p and p.poll() is None:
                p.send_signal(sig)
        for d in ("routerd", "coordinatord", "containerd-shim"):
            p = s.procs.get(d)
            if p:
                p.wait(timeout=10)


TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


def coord_call(s, name, body):
    """One request to suite s's coordinatord, as a client of its socket."""
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))
    try:
        return c.call(name, body)
    finally:
        c.close()


def check_logs(cluster, runs, timeout=20):
    """Every run's log read from JetStream: seqs from 0 without gaps or
    duplicates, exactly one terminal event (RUN_FINISHED or RUN_ERROR), the
    last, and every event a client saw present, the same. runs: {runId: [the
    events a client saw: {"seq", "chunk"} as tails deliver them]}. A replica
    may lag an acknowledgement by a moment: each log is read until it ends
    with a terminal event (up to timeout). Returns {runId: [(seq, chunk dict,
    writer)]}."""
    logs = {}
    for run, seen in runs.items():
        def read():
            try:
                evs = cluster.jetstream_log(run)
            except AssertionError:  # no JetStream leader yet after a server loss
                return None
            if evs and json.loads(evs[-1][1]).get("type") in TERMINAL:
                return evs
            return None
        evs = poll(read, timeout=timeout, interval=0.2) or cluster.jetstream_log(run)
        log = [(q, json.loads(b), w) for q, b, w in evs]
        seqs = [q for q, _, _ in log]
        assert seqs == list(range(len(seqs))), (run, seqs)
        terminal = [q for q, ch, _ in log if ch.get("type") in TERMINAL]
        assert len(terminal) == 1 and terminal[0] == len(log) - 1, (run, terminal, log[-3:])
        for e in seen:
            assert e["seq"] < len(log), (run, "seen but not in JetStream", e)
            assert log[e["seq"]][1] == e["chunk"], (run, e, log[e["seq"]])
        logs[run] = log
    return logs


# what a node_lost end (or the guard before any terminal event) writes to
# close what a run left open, before its RUN_ERROR
CLOSERS = ("TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "REASONING_END", "TOOL_CALL_END",
           "TOOL_CALL_RESULT", "STEP_FINISHED")


def writer_node(w):
    return w.rsplit("-", 1)[0]


def assert_agui_closed(log):
    """The log [(seq, chunk, writer)] is a closed AG-UI stream: every text
    message, reasoning message and tool call that started ended (a tool
    call with its result) before the terminal event."""
    texts, tools, results, reasoning = set(), set(), set(), set()
    for _, ch, _ in log[:-1]:
        t, mid, tid = ch.get("type"), ch.get("messageId"), ch.get("toolCallId")
        if t == "TEXT_MESSAGE_START":
            texts.add(mid)
        elif t == "TEXT_MESSAGE_END":
            texts.discard(mid)
        elif t == "REASONING_MESSAGE_START":
            reasoning.add(mid)
        elif t == "REASONING_MESSAGE_END":
            reasoning.discard(mid)
        elif t == "TOOL_CALL_START":
            tools.add(tid)
            results.add(tid)
        elif t == "TOOL_CALL_END":
            tools.discard(tid)
        elif t == "TOOL_CALL_RESULT":
            results.discard(tid)
    assert not (texts or tools or results or reasoning), \
        ("left open", texts, tools, results, reasoning, log[-4:])


def split_end(log, old, ender):
    """The log: OLD's events, then ENDER's closers and its terminal event.
    Returns ENDER's events."""
    writers = [writer_node(w) for _, _, w in log]
    k = writers.index(ender) if ender in writers else len(writers)
    assert set(writers[:k]) <= {old} and set(writers[k:]) == {ender}, writers
    assert all(ch["type"] in CLOSERS for _, ch, _ in log[k:-1]), log[k:]
    assert_agui_closed(log)
    return log[k:]
