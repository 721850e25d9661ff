#!/usr/bin/env python3
"""CPU time (user + system, the command and its children) of shell commands, interleaved.

    cpu_ratio.py [-n RUNS] [--cwd DIR] 'CMD A' 'CMD B' ['CMD C' ...]

Runs A, B, C, A, B, C, ... (after one untimed round) and prints per command the median wall
and the median CPU milliseconds, and the median per-round CPU ratio of each command to the
last one. On a shared machine whose load is far above its core count a few-millisecond
command's wall time is mostly waiting for a core; the CPU it used is what it costs, so
this is the figure to compare there (a complement to compare.py's wall ratios, not a
replacement: it does not see time spent waiting on the disk or on another process).
"""

import argparse
import resource
import statistics
import subprocess
import sys
import time


def one(cmd, cwd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    rc = subprocess.run(["sh", "-c", cmd], cwd=cwd, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=21)
    ap.add_argument("--cwd", default=".")
    ap.add_argument("cmds", nargs="+")
    args = ap.parse_args()
    for c in args.cmds:
        one(c, args.cwd)
    walls = [[] for _ in args.cmds]
    cpus = [[] for _ in args.cmds]
    bad = 0
    for _ in range(args.n):
        for i, c in enumerate(args.cmds):
            w, u, rc = one(c, args.cwd)
            walls[i].append(w)
            cpus[i].append(u)
            bad += rc != 0
    last = cpus[-1]
    for i, c in enumerate(args.cmds):
        ratios = [a / b for a, b in zip(cpus[i], last) if b > 0]
        print(f"{chr(65 + i)} = {c}")
        print(f"   wall median {statistics.median(walls[i]) * 1000:7.1f} ms   "
              f"cpu median {statistics.median(cpus[i]) * 1000:7.1f} ms   "
              f"cpu / {chr(64 + len(args.cmds))} {statistics.median(ratios) if ratios else float('nan'):.3f}")
    if bad:
        print(f"{bad} runs exited non-zero: the figures are not trustworthy", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
