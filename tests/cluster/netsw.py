#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A userspace IPv4 switch between TUN devices, one per network namespace, for
the nemesis (tests/cluster/nemesis). This kernel has no netem, no tc actions
and no iptables/nft: the faults are applied here, to each packet.

    netsw.py DEV NS=IP [NS=IP ...]

For each NS (a name under /run/netns), the switch enters the namespace,
creates the TUN device DEV there (IFF_TUN | IFF_NO_PI) and keeps its fd; the
caller then gives DEV its address and brings it up. Packets read from one TUN
are written to the TUN whose namespace owns the destination address, unless
the rules say otherwise:

- blocked: directed (src, dst) pairs whose packets are dropped silently (a
  partition: SYNs time out, established TCP stalls and retransmits);
- loss: each packet dropped with this probability;
- delay_ms + jitter_ms: one-way delay, uniform jitter, FIFO per pair (TCP
  sees delay, not reordering).

Control: one JSON object per line on stdin, the whole rule set each time:
{"blocked": [[ip, ip], ...], "loss": 0.1, "delay_ms": 50, "jitter_ms": 150};
answered "ok" on stdout once in force. {"stats": true} answers one JSON line
of per-pair counters. EOF on stdin ends the switch (the caller died: its
namespaces go with the TUNs). Prints "ready" once every TUN exists.
"""
import ctypes
import fcntl
import heapq
import json
import os
import random
import select
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000

libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def open_tun(ns, dev):
    """The fd of a new TUN device DEV inside namespace NS (this thread goes
    there and back)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    nsfd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        setns(nsfd)
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", dev.encode(), IFF_TUN | IFF_NO_PI))
        return fd
    finally:
        setns(home)
        os.close(nsfd)
        os.close(home)


def main():
    dev = sys.argv[1]
    by_ip, fds = {}, {}
    for arg in sys.argv[2:]:
        ns, ip = arg.split("=")
        fd = open_tun(ns, dev)
        by_ip[bytes(int(x) for x in ip.split("."))] = fd
        fds[fd] = ip
    rules = {"blocked": set(), "loss": 0.0, "delay_ms": 0.0, "jitter_ms": 0.0}
    stats = {}
    queue, last_due, n = [], {}, 0
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    ctl = sys.stdin.fileno()
    poller.register(ctl, select.POLLIN)
    cbuf = b""
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, pkt = heapq.heappop(queue)
            try:
                os.write(out, pkt)
            except OSError:
                pass
        timeout = -1 if not queue else max(0, int((queue[0][0] - now) * 1000) + 1)
        for fd, ev in poller.poll(timeout):
            if fd == ctl:
                data = os.read(ctl, 65536)
                if not data:
                    return
                cbuf += data
                while b"\n" in cbuf:
                    line, cbuf = cbuf.split(b"\n", 1)
                    cmd = json.loads(line)
                    if cmd.get("stats"):
                        print(json.dumps({f"{a}>{b}": v for (a, b), v in stats.items()}),
                              flush=True)
                        continue
                    rules = {"blocked": {tuple(p) for p in cmd.get("blocked", [])},
                             "loss": float(cmd.get("loss", 0)),
                             "delay_ms": float(cmd.get("delay_ms", 0)),
                             "jitter_ms": float(cmd.get("jitter_ms", 0))}
                    print("ok", flush=True)
                continue
            for _ in range(64):  # drain a burst, then look at the others
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue  # IPv4 only (the TUNs' IPv6 chatter is dropped)
                out = by_ip.get(pkt[16:20])
                if out is None:
                    continue
                pair = (fds[fd], fds[out])
                st = stats.setdefault(pair, [0, 0, 0])  # forwarded, blocked, lost
                if pair in rules["blocked"]:
                    st[1] += 1
                    continue
                if rules["loss"] and random.random() < rules["loss"]:
                    st[2] += 1
                    continue
                st[0] += 1
                if not rules["delay_ms"] and not rules["jitter_ms"] and not queue:
                    try:
                        os.write(out, pkt)
                    except OSError:
                        pass
                    continue
                due = time.monotonic() + (rules["delay_ms"] +
                                          random.uniform(0, rules["jitter_ms"])) / 1000
                due = max(due, last_due.get(pair, 0))
                last_due[pair] = due
                n += 1
                heapq.heappush(queue, (due, n, out, pkt))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
