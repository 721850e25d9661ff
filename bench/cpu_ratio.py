#!/usr/bin/env python3
"""CPU time (user + system, the command and its children) of shell commands, interleaved.

    cpu_ratio.py [-n RUNS] [--cwd DIR] 'CMD A' 'CMD B' ['CMD C' ...]

Runs A, B, C, A, B, C, ... (after one untimed round) and prints per command the median wall
and the median CPU milliseconds, and the median per-round CPU ratio of each command to the
last one. On a shared machine whose load is far above its core count a few-millisecond
command's wall time is mostly waiting for a core; the CPU it used is what it costs, so
this is the figure to compare there (a complement to compare.py's wall ratios, not a
replacement: it does not see time spent waiting on the disk or on another process).

With --exec each command is split into words (shlex) and started directly, without `sh -c`:
a shell's start (about 1 ms here) is then in neither figure, so a few-millisecond command's
wall ratio is the tools' own. The per-round wall ratio to the last command is printed too.

With --mean the means, the 90th percentile and the largest wall are printed as well.
"""

import argparse
import resource
import shlex
import statistics
import subprocess
import sys
import time


def one(cmd, cwd, direct=False):
    argv = shlex.split(cmd) if direct else ["sh", "-c", cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    rc = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=21)
    ap.add_argument("--cwd", default=".")
    ap.add_argument("--exec", action="store_true", help="start each command without a shell")
    ap.add_argument("--mean", action="store_true",
                    help="also the means, the 90th percentile and the largest wall: a cost "
                         "paid every few runs (a history fold) moves those, not the median")
    ap.add_argument("cmds", nargs="+")
    args = ap.parse_args()
    for c in args.cmds:
        one(c, args.cwd, args.exec)
    walls = [[] for _ in args.cmds]
    cpus = [[] for _ in args.cmds]
    bad = 0
    for _ in range(args.n):
        for i, c in enumerate(args.cmds):
            w, u, rc = one(c, args.cwd, args.exec)
            walls[i].append(w)
            cpus[i].append(u)
            bad += rc != 0
    last, last_wall = cpus[-1], walls[-1]
    for i, c in enumerate(args.cmds):
        ratios = [a / b for a, b in zip(cpus[i], last) if b > 0]
        wall_ratios = [a / b for a, b in zip(walls[i], last_wall) if b > 0]
        print(f"{chr(65 + i)} = {c}")
        print(f"   wall median {statistics.median(walls[i]) * 1000:7.1f} ms   "
              f"cpu median {statistics.median(cpus[i]) * 1000:7.1f} ms   "
              f"cpu / {chr(64 + len(args.cmds))} {statistics.median(ratios) if ratios else float('nan'):.3f}   "
              f"wall / {chr(64 + len(args.cmds))} {statistics.median(wall_ratios) if wall_ratios else float('nan'):.3f}")
        if args.mean:
            ws = sorted(walls[i])
            p90 = ws[min(len(ws) - 1, int(0.9 * len(ws)))]
            print(f"   wall mean   {statistics.fmean(walls[i]) * 1000:7.1f} ms   "
                  f"cpu mean   {statistics.fmean(cpus[i]) * 1000:7.1f} ms   "
                  f"wall p90 {p90 * 1000:7.1f} ms   max {ws[-1] * 1000:7.1f} ms")
    if bad:
        print(f"{bad} runs exited non-zero: the figures are not trustworthy", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
