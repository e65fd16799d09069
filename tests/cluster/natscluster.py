#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A NATS JetStream cluster on loopback for the cluster tests (docs/CLUSTER.md).

    natscluster.py start DIR [N] [--owner PID]
                                   N servers (default 3), ports free on 127.0.0.1,
                                   store dirs under DIR; waits until every server's
                                   /healthz says JetStream is current; prints the
                                   client URLs, comma-separated (also in DIR/urls).
                                   With --owner, a guard process stops the cluster
                                   and removes DIR when PID exits (a test that
                                   crashes leaves no server behind)
    natscluster.py stop DIR        SIGTERM each server, SIGKILL after 5 s
    natscluster.py kill DIR NAME   SIGKILL one server (n1, n2, ...)
    natscluster.py pause DIR NAME  SIGSTOP one server: a silent server (its sockets
                                   stay open, nothing is answered), as a cut one
    natscluster.py resume DIR NAME SIGCONT it

Per server NAME in DIR: NAME.conf, NAME.pid, NAME.port (client port),
NAME.log, NAME/ (JetStream store). Servers are named (server_name) and
routed to each other by address: no DNS anywhere. Exit status 1 with a
reason on stderr when nats-server is missing or the cluster does not form:
a test that cannot run fails.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

READY_TIMEOUT = 60


def nats_server():
    if os.environ.get("NATS_SERVER"):  # an explicit binary (tests of the harness itself)
        p = os.environ["NATS_SERVER"]
        if os.access(p, os.X_OK):
            return p
        sys.exit(f"natscluster: NATS_SERVER={p} is not executable")
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/usr/bin"]:
        p = os.path.join(d, "nats-server")
        if os.access(p, os.X_OK):
            return p
    sys.exit("natscluster: nats-server not found (Debian package 'nats-server')")


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def config(name, d, client, route, http, routes):
    store = os.path.join(d, name)
    peers = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    return f"""server_name: {name}
listen: 127.0.0.1:{client}
http: 127.0.0.1:{http}
pid_file: "{os.path.join(d, name + '.pid')}"
jetstream {{
  store_dir: "{store}"
  max_memory_store: 64MB
  max_file_store: 1GB
}}
cluster {{
  name: rwtest
  listen: 127.0.0.1:{route}
  routes: [{peers}]
}}
"""


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return r.status == 200 and json.load(r).get("status") == "ok"
    except Exception:
        return False


def start(d, n=3):
    exe = nats_server()
    os.makedirs(d, exist_ok=True)
    ports = free_ports(3 * n)
    client, route, http = ports[:n], ports[n:2 * n], ports[2 * n:]
    for i in range(n):
        name = f"n{i + 1}"
        conf = os.path.join(d, name + ".conf")
        with open(conf, "w") as f:
            f.write(config(name, d, client[i], route[i], http[i],
                           [route[j] for j in range(n) if j != i]))
        with open(os.path.join(d, name + ".port"), "w") as f:
            f.write(f"{client[i]}\n")
        with open(os.path.join(d, name + ".http"), "w") as f:
            f.write(f"{http[i]}\n")
        log = open(os.path.join(d, name + ".log"), "ab")
        subprocess.Popen([exe, "-c", conf], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT
    while not all(healthy(p) for p in http):
        if time.monotonic() > deadline:
            stop(d)
            sys.exit(f"natscluster: the cluster in {d} did not become healthy in "
                     f"{READY_TIMEOUT} s (see {d}/n*.log)")
        time.sleep(0.2)
    urls = ",".join(f"nats://127.0.0.1:{p}" for p in client)
    with open(os.path.join(d, "urls"), "w") as f:
        f.write(urls + "\n")
    print(urls)


def pid_of(d, name):
    try:
        with open(os.path.join(d, name + ".pid")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def names(d):
    if not os.path.isdir(d):  # never started (no nats-server): nothing to stop
        return []
    return sorted(f[:-5] for f in os.listdir(d) if f.endswith(".conf"))


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop(d):
    pids = [p for p in (pid_of(d, n) for n in names(d)) if p]
    for p in pids:
        try:
            os.kill(p, signal.SIGCONT)  # a paused server (pause) would not see SIGTERM
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            os.kill(p, signal.SIGKILL)


def kill(d, name):
    p = pid_of(d, name)
    if not p:
        sys.exit(f"natscluster: no pid for {name} in {d}")
    os.kill(p, signal.SIGKILL)
    while alive(p):
        time.sleep(0.05)


def signal_server(d, name, sig):
    p = pid_of(d, name)
    if not p:
        sys.exit(f"natscluster: no pid for {name} in {d}")
    os.kill(p, sig)


def guard(d, owner):
    """Until DIR is gone (a normal stop) or the owner exits (then stop)."""
    while os.path.isdir(d):
        if not alive(owner):
            stop(d)
            shutil.rmtree(d, ignore_errors=True)
            return
        time.sleep(0.5)


def main(argv):
    if len(argv) >= 3 and argv[1] == "start":
        args = argv[2:]
        owner = None
        if "--owner" in args:
            i = args.index("--owner")
            owner = int(args[i + 1])
            del args[i:i + 2]
        start(args[0], int(args[1]) if len(args) > 1 else 3)
        if owner:
            subprocess.Popen([sys.executable, os.path.abspath(__file__), "guard", args[0],
                              str(owner)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    elif len(argv) == 4 and argv[1] == "guard":
        guard(argv[2], int(argv[3]))
    elif len(argv) == 3 and argv[1] == "stop":
        stop(argv[2])
        shutil.rmtree(argv[2], ignore_errors=True)
    elif len(argv) == 4 and argv[1] == "kill":
        kill(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] in ("pause", "resume"):
        signal_server(argv[2], argv[3], signal.SIGSTOP if argv[1] == "pause" else signal.SIGCONT)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
