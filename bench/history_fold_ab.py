#!/usr/bin/env python3
"""The run history's fold, one binary against another, each in its own copy of a workspace.

    bench/history_fold_ab.py OLD NEW WS_A WS_B PENDING [ROUNDS]

Each round, for each binary (interleaved, the order alternating): the history of its
workspace copy is removed, PENDING (a `.prova/runs.pending` file of recorded runs, e.g. a
real run's record repeated with other ids) is copied in, and `prova runs -n 1` folds it into a
new `runs.db`. Prints the median wall and CPU of each, their ratios and the database's size.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

if len(sys.argv) < 6:
    sys.exit(__doc__)
old, new, ws_a, ws_b, pending = sys.argv[1:6]
rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 11
sides = {"old": (old, ws_a), "new": (new, ws_b)}
got = {k: [] for k in sides}
print("load", " ".join(f"{x:.2f}" for x in os.getloadavg()))
for r in range(rounds):
    for k in (["old", "new"] if r % 2 == 0 else ["new", "old"]):
        binary, ws = sides[k]
        d = os.path.join(ws, ".prova")
        os.makedirs(d, exist_ok=True)
        for f in ["runs.db", "runs.db-wal", "runs.db-shm"]:
            try:
                os.remove(os.path.join(d, f))
            except FileNotFoundError:
                pass
        shutil.copy(pending, os.path.join(d, "runs.pending"))
        t = time.perf_counter()
        p = subprocess.Popen([binary, "-C", ws, "runs", "-n", "1"], stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        if status != 0:
            sys.exit(f"{binary} runs failed ({status})")
        size = sum(
            os.path.getsize(os.path.join(d, f))
            for f in ["runs.db", "runs.db-wal"]
            if os.path.exists(os.path.join(d, f))
        )
        got[k].append((wall, ru.ru_utime + ru.ru_stime, size))
print("load", " ".join(f"{x:.2f}" for x in os.getloadavg()))
med = {}
for k in sides:
    w = statistics.median(x[0] for x in got[k])
    c = statistics.median(x[1] for x in got[k])
    med[k] = (w, c)
    print(f"{k}: wall {w * 1e3:.1f} ms  cpu {c * 1e3:.1f} ms  runs.db+wal {got[k][-1][2]} bytes")
print(f"new / old: wall {med['new'][0] / med['old'][0]:.3f}  cpu {med['new'][1] / med['old'][1]:.3f}")
