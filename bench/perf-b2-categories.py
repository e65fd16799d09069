#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""perf-b2-categories.py PERF_DATA EVENTS — where coordinatord's CPU goes per
event under B2, from a `perf record --call-graph dwarf` of it: each sample
goes to the first category (in this order) one of whose functions is on its
stack. Prints microseconds per event and shares of the daemon's CPU.

  perf record --call-graph dwarf,16384 -F 1000 -p $(pidof coordinatord) -o b2.data
  (B2's load: bench/append-bench SOCK concurrent EVENTS 64 16)
  bench/perf-b2-categories.py b2.data EVENTS
"""
import subprocess, sys, re
# categories by the first matching frame of each sample's (callee-first) stack
CATS = [
 ("chunk check (json_object_check)", ["json_object_check"]),
 ("decode + queue the op (frame, msgpack, op, deferred)", ["read_cb", "bufferevent_run_readcb_"]),
 ("socket reads (readv; before: + FIONREAD, evbuffer_read)", ["evbuffer_read", "sock_read_cb", "bufferevent_readcb"]),
 ("LMDB event puts (batch_append; before: a nested txn each)", ["batch_append"]),
 ("run records: serialise + put (put_record)", ["put_record"]),
 ("LMDB commit: fdatasync", ["fdatasync", "mdb_env_sync"]),
 ("LMDB commit: page writes (pwrite/writev of pages), meta", ["mdb_page_flush", "__libc_pwrite64", "mdb_env_write_meta"]),
 ("LMDB commit: the rest (free list, dirty list)", ["mdb_txn_commit"]),
 ("batch begin/usage (mdb_stat, txn begin)", ["runlog_batch_begin", "runlog_batch_usage", "runlog_batch_usage_bound", "txn_usage"]),
 ("acks: encode + socket writev (peer_uncork, commit_ack)", ["peer_uncork", "commit_ack", "reply_deferred_RUN_APPEND"]),
 ("epoll_wait", ["epoll_wait"]),
 ("commit_ops's own (run look-ups, publish, settle)", ["commit_ops", "commit_cb"]),
]
data = sys.argv[1]
out = subprocess.run(["perf", "script", "-i", data, "-F", "period,ip,sym"], capture_output=True, text=True).stdout
tot = 0; cnt = {c[0]: 0 for c in CATS}; cnt["the rest (libevent loop, malloc, kernel scheduling)"] = 0
for block in out.split("\n\n"):
    lines = [l.strip() for l in block.strip().split("\n") if l.strip()]
    if not lines: continue
    try: period = int(lines[0].split()[0])
    except: continue
    syms = [re.sub(r"^[0-9a-f]+\s+", "", l) for l in lines[1:]]
    syms = [s.split("+")[0].replace(" (inlined)", "") for s in syms]
    tot += period
    for name, keys in CATS:
        if any(s in keys for s in syms):
            cnt[name] += period; break
    else:
        cnt["the rest (libevent loop, malloc, kernel scheduling)"] += period
ev = int(sys.argv[2])
for k, v in cnt.items():
    print(f"{v/1000/ev:5.2f} us {100*v/tot:5.1f} %  {k}")
print(f"{tot/1000/ev:5.2f} us  all (CPU of the daemon per event, perf cpu-clock)")
