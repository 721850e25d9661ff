#!/bin/sh
# Two prova binaries on the same incremental edit, interleaved: before each run a comment is
# appended to the edited package's `src/mod1.js` (the hub of bench-meta.json; `LEAF=1` the
# leaf), so every run executes the same set of builds — the edited package and whatever does
# not cut off below it — under a key neither binary has seen. Prints, per binary, the median
# wall and CPU (user + system of prova and everything it started, strace and bwrap included)
# and the median per-round NEW / OLD ratios, with the load average. Both binaries share the
# workspace and its cache, so both are warm for everything the edit does not touch.
#
#   bench/hub_ab.sh WS_PROVA OLD_PROVA NEW_PROVA [ROUNDS]
#   bench/hub_ab.sh /tmp/ws-200-prova /tmp/prova-before target/release/prova 7
set -eu
WS=$(realpath "$1")
OLD=$(realpath "$2")
NEW=$(realpath "$3")
ROUNDS=${4:-7}
KEY=incremental_hub
[ "${LEAF:-0}" = 1 ] && KEY=leaf_package
PKG=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['$KEY']['dir'])" "$WS/bench-meta.json")
# Warm both: whatever is not cached yet is built once, untimed.
"$NEW" -C "$WS" run build --all >/dev/null 2>&1 || true
"$OLD" -C "$WS" run build --all >/dev/null 2>&1 || true
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; edited: $PKG"
python3 - "$WS" "$PKG" "$OLD" "$NEW" "$ROUNDS" <<'PY'
import json, resource, statistics, subprocess, sys, time
ws, pkg, old, new, rounds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
mod = f"{ws}/{pkg}/src/mod1.js"
def one(binary, tag):
    with open(mod, "a") as f:
        f.write(f"// {tag} {time.time_ns()}\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    out = subprocess.run([binary, "-C", ws, "run", "build", "--all", "--json"],
                         capture_output=True, text=True)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    summ = [l["summary"] for l in lines if "summary" in l]
    ran = sum(1 for t in summ[-1]["tasks"] if t["cache"]["cache"] != "hit") if summ else -1
    if out.returncode != 0:
        print(f"{binary} exited {out.returncode}: the figures are not trustworthy", file=sys.stderr)
    return wall, cpu, ran
res = {"old": [], "new": []}
for r in range(rounds):
    res["old"].append(one(old, "old"))
    res["new"].append(one(new, "new"))
for k in ("old", "new"):
    w = statistics.median(x[0] for x in res[k]); c = statistics.median(x[1] for x in res[k])
    ran = sorted(set(x[2] for x in res[k]))
    print(f"{k}: wall median {w:.2f} s, cpu median {c:.2f} s, builds executed {ran}")
wr = statistics.median(n[0] / o[0] for n, o in zip(res["new"], res["old"]))
cr = statistics.median(n[1] / o[1] for n, o in zip(res["new"], res["old"]))
print(f"new / old: wall {wr:.3f}, cpu {cr:.3f} ({rounds} rounds)")
PY
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
