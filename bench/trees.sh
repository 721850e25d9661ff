#!/bin/sh
# Installed trees on the farm (issue 12): a synthetic node_modules of ~50,000 files in
# ~2,000 packages, and
#   1. its digest cold (fresh .prova: no stat memo) vs warm (memo filled), from prova's own
#      debug lines (`tree manifest` elapsed: walk + hash + encode; `installed trees` −
#      `digests`: the whole scan with memo load and store), plus the dry run's wall time;
#   2. the input blobs and bytes uploaded by a first client A and by a second clone B (same
#      tree, empty local cache, the same ci certificate — a second CI machine), and by a
#      `client` certificate D (a developer's checkout);
#   3. the exec-root set-up time per task on a worker whose tree is already materialised
#      (the worker's `exec root prepared` debug lines over a `--no-cache` run after A and B).
#
#   bench/trees.sh [PACKAGES] [FILES_PER_PACKAGE] [PROJECTS] [ROUNDS]
#   PROVA=target/release/prova bench/trees.sh 2000 25 40 5
#   SANDBOX=bwrap bench/trees.sh …          # workers' sandbox (default: none)
#
# Everything lives in one temp dir; the farm (1 coordinator, 1 worker with 2 slots, on
# 127.0.0.1:0 through farm.sh) is stopped and the dir removed at exit. Every wait is bounded.
set -eu
NPKG=${1:-2000}
NFILE=${2:-25}
NPROJ=${3:-40}
ROUNDS=${4:-5}
SANDBOX=${SANDBOX:-none}
P=$(realpath "${PROVA:-target/release/prova}")
unset PROVA_CACHE_DIR PROVA_LOG PROVA_LOG_FORMAT
. "$(dirname "$0")/farm.sh"
farm_scratch prova-trees-bench
load() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }
# t0 t1 → seconds
dt() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }
LOAD0=$(load)

# The workspace: a git repository with a root package.json and package-lock.json (so the
# default `[workspace] trees` is the root node_modules, and the lockfile is fingerprinted),
# NPROJ projects whose build reads two packages of the tree.
WS="$T/a"
mkdir -p "$WS"
python3 - "$WS" "$NPKG" "$NFILE" "$NPROJ" <<'PY'
import json, os, sys
ws, npkg, nfile, nproj = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
nm = os.path.join(ws, "node_modules")
licence = "MIT License\n\nPermission is hereby granted, free of charge, ...\n" * 8
def name(i):  # one package in twenty is scoped, as in real trees
    return f"@scope{i % 7}/pkg-{i}" if i % 20 == 0 else f"pkg-{i}"
deps = {}
lock = {"": {"name": "bench", "version": "1.0.0", "dependencies": deps}}
os.makedirs(os.path.join(nm, ".bin"))
for i in range(npkg):
    n = name(i)
    d = os.path.join(nm, n)
    os.makedirs(os.path.join(d, "lib"))
    files = {
        "package.json": json.dumps({"name": n, "version": f"1.{i % 13}.{i % 7}",
                                    "main": "index.js"}) + "\n",
        "index.js": f"module.exports = require('./lib/f0.js') // {n}\n",
        "LICENSE": licence,  # identical in every package: one blob
        "README.md": f"# {n}\n" + ("Some documentation. " * (5 + i % 40)) + "\n",
    }
    for f in range(max(nfile - len(files) - (1 if i % 10 == 0 else 0), 0)):
        body = f"// {n} lib/f{f}.js\n" + "".join(
            f"exports.f{k} = function f{k}(x) {{ return x * {i} + {f} + {k}; }};\n"
            for k in range(3 + (i * 7 + f) % 30))
        files[f"lib/f{f}.js"] = body
    for rel, body in files.items():
        with open(os.path.join(d, rel), "w") as fh:
            fh.write(body)
    if i % 10 == 0:  # a command-line tool: an executable and its .bin link
        os.makedirs(os.path.join(d, "bin"))
        cli = os.path.join(d, "bin", "cli.js")
        with open(cli, "w") as fh:
            fh.write(f"#!/usr/bin/env node\nrequire('../index.js') // {n}\n")
        os.chmod(cli, 0o755)
        os.symlink(f"../{n}/bin/cli.js", os.path.join(nm, ".bin", n.split("/")[-1]))
    if i % 100 == 1:  # a nested dependency linking back up (pnpm-style)
        os.makedirs(os.path.join(d, "node_modules"))
        os.symlink(f"../../{name(i + 1)}", os.path.join(d, "node_modules", name(i + 1).split("/")[-1]))
    deps[n] = f"^1.{i % 13}.{i % 7}"
    lock[f"node_modules/{n}"] = {"version": f"1.{i % 13}.{i % 7}",
                                 "resolved": f"https://registry.npmjs.org/{n}/-/x.tgz",
                                 "integrity": f"sha512-{i:064d}"}
with open(os.path.join(ws, "package.json"), "w") as fh:
    json.dump({"name": "bench", "version": "1.0.0", "private": True, "dependencies": deps}, fh)
with open(os.path.join(ws, "package-lock.json"), "w") as fh:
    json.dump({"name": "bench", "version": "1.0.0", "lockfileVersion": 3, "requires": True,
               "packages": lock}, fh, indent=1)
with open(os.path.join(ws, "prova.toml"), "w") as fh:
    fh.write('[workspace]\nprojects = ["p/*"]\nfingerprint = ["package-lock.json"]\n\n'
             '[tasks.build]\ninputs = ["src/**"]\noutputs = ["dist/**"]\n')
for j in range(nproj):
    p = os.path.join(ws, "p", str(j))
    os.makedirs(os.path.join(p, "src"))
    with open(os.path.join(p, "src", "a.txt"), "w") as fh:
        fh.write(f"project {j}\n")
    a, b = name(j * 37 % npkg), name(j * 53 % npkg)
    with open(os.path.join(p, "prova.toml"), "w") as fh:
        fh.write('[tasks.build]\ncommand = "mkdir -p dist && cat ../../node_modules/'
                 f'{a}/index.js ../../node_modules/{b}/lib/f1.js src/a.txt > dist/out.js"\n')
with open(os.path.join(ws, ".gitignore"), "w") as fh:
    fh.write("node_modules/\ndist/\n.prova/\n")
PY
(cd "$WS" && git init -q && git add -A \
    && git -c user.name=bench -c user.email=bench@localhost commit -qm ws)
FILES=$(find "$WS/node_modules" -type f | wc -l)
LINKS=$(find "$WS/node_modules" -type l | wc -l)
TREE_BYTES=$(du -sb "$WS/node_modules" | cut -f1)
echo "tree: $FILES files, $LINKS symlinks, $NPKG packages, $TREE_BYTES bytes (du -sb); $NPROJ projects"
# Outside the memo's racy window (2 s): a file modified that recently is hashed again.
sleep 3

# field NAME FILE [MESSAGE]: the value of NAME= on the last log line containing MESSAGE.
field() {
    python3 - "$@" <<'PY'
import re, sys
name, path = sys.argv[1], sys.argv[2]
msg = sys.argv[3] if len(sys.argv) > 3 else ""
val = ""
for line in open(path, errors="replace"):
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    if msg in line:
        m = re.search(rf"\b{name}=(\S+)", line)
        if m:
            val = m.group(1)
print(val)
PY
}

# 1. The tree digest, cold vs warm, local dry run. Cold: no .prova (no memo, no stored
# manifest); warm: right after. Page cache warm in both (not dropped).
DRY="$P -C $WS run build --all --dry-run"
export PROVA_LOG=warn,prova_coordinator=debug
: > "$T/dry.tsv"
LOAD1=$(load)
r=1
while [ "$r" -le "$ROUNDS" ]; do
    rm -rf "$WS/.prova"
    for kind in cold warm; do
        t0=$(now)
        timeout 300 $DRY > "$T/dry.out" 2> "$T/dry.$kind.$r.err"
        t1=$(now)
        f="$T/dry.$kind.$r.err"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$(dt "$t0" "$t1")" \
            "$(field elapsed "$f" "tree manifest")" "$(field elapsed "$f" "installed trees")" \
            "$(field elapsed "$f" " digests")" "$(field hashed "$f" "installed trees")" \
            "$(field memo_hits "$f" "installed trees")" >> "$T/dry.tsv"
    done
    r=$((r + 1))
done
LOAD2=$(load)
unset PROVA_LOG

# 2. The farm: the worker logs its exec-root set-up at debug.
export PROVA_LOG=warn,prova_coordinator=info,prova_worker=debug
start_farm 1 2 "$SANDBOX"
export PROVA_LOG=warn,prova_cli=info,prova_coordinator=info
run_remote() { # NAME DIR CERTS ARGS…: one remote run, its wall time and upload line
    name=$1 dir=$2 certs=$3
    shift 3
    before=$(grep -c "exec root prepared" "$T/w1.err" || true)
    t0=$(now)
    timeout 900 "$P" -C "$dir" run build --all --remote "$ADDR" --certs "$certs" "$@" \
        > "$T/$name.out" 2> "$T/$name.err" || { echo "run $name failed:"; tail -20 "$T/$name.err"; exit 1; }
    t1=$(now)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$(dt "$t0" "$t1")" \
        "$(field uploaded "$T/$name.err" "inputs uploaded")" "$(field needed "$T/$name.err" "inputs uploaded")" \
        "$(field bytes "$T/$name.err" "inputs uploaded")" "$before" >> "$T/remote.tsv"
}
: > "$T/remote.tsv"
rm -rf "$WS/.prova"
run_remote A "$WS" "$CI"
# B: a second clone of the same commit with the same installed tree, nothing cached.
git clone -q "$WS" "$T/b"
cp -a "$WS/node_modules" "$T/b/node_modules"
sleep 3
run_remote B "$T/b" "$CI"
# E: every task executes again on the worker that holds the tree (set-up per task).
run_remote E "$T/b" "$CI" --no-cache --download none
# D: a developer's checkout with a `client` certificate.
"$P" certs issue "$T/certs" --role client --name dev > /dev/null
git clone -q "$WS" "$T/d"
cp -a "$WS/node_modules" "$T/d/node_modules"
sleep 3
run_remote D "$T/d" "$T/certs/dev"
unset PROVA_LOG
LOAD3=$(load)

# The table.
python3 - "$T" "$FILES" "$TREE_BYTES" "$SANDBOX" "$LOAD0" "$LOAD1" "$LOAD2" "$LOAD3" <<'PY'
import re, statistics, sys
t, files, tree_bytes, sandbox = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
l0, l1, l2, l3 = sys.argv[5:9]
UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}
def ms(v):
    m = re.fullmatch(r"([0-9.]+)(ns|µs|us|ms|s)", v or "")
    return float(m.group(1)) * UNITS[m.group(2)] if m else None
def med(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), min(xs), max(xs), len(xs)) if xs else None
def fmt(m, unit="ms"):
    return "n/a" if m is None else f"{m[0]:.1f} {unit} (min {m[1]:.1f}, max {m[2]:.1f}, n={m[3]})"
rows = [l.rstrip("\n").split("\t") for l in open(f"{t}/dry.tsv")]
print(f"\n== 1. tree digest, local dry run ({files} files), load {l1} -> {l2}")
print("| scan | tree manifest (walk+hash+encode) | whole tree pass | dry run wall | hashed / memo hits |")
print("|---|---|---|---|---|")
for kind in ("cold", "warm"):
    rs = [r for r in rows if r[0] == kind]
    manifest = med([ms(r[2]) for r in rs])
    scan = med([(ms(r[3]) - ms(r[4])) if ms(r[3]) and ms(r[4]) else None for r in rs])
    wall = med([float(r[1]) * 1e3 for r in rs])
    hm = sorted({f"{r[5]} / {r[6]}" for r in rs})
    print(f"| {kind} | {fmt(manifest)} | {fmt(scan)} | {fmt(wall)} | {', '.join(hm)} |")
print(f"\n== 2. uploads (tree {tree_bytes} bytes on disk), load {l2} -> {l3}")
from datetime import datetime
def stamp(path, msg):  # the timestamp of the first log line containing msg
    for l in open(path, errors="replace"):
        l = re.sub(r"\x1b\[[0-9;]*m", "", l)
        if msg in l:
            return datetime.fromisoformat(l.split()[0].rstrip("Z"))
def phase(k):  # keys computed -> inputs uploaded: find-missing and the uploads
    a, b = stamp(f"{t}/{k}.err", "keys computed"), stamp(f"{t}/{k}.err", "inputs uploaded")
    return f"{(b - a).total_seconds():.2f} s" if a and b else "n/a"
print("| run | wall | upload phase | blobs uploaded / needed | bytes uploaded |")
print("|---|---|---|---|---|")
remote = {r[0]: r for r in (l.rstrip("\n").split("\t") for l in open(f"{t}/remote.tsv"))}
label = {"A": "A: first client (ci cert)", "B": "B: second clone, same tree (ci cert)",
         "E": "E: B again, --no-cache (all execute)", "D": "D: a client cert's clone"}
for k in ("A", "B", "E", "D"):
    if k in remote:
        r = remote[k]
        print(f"| {label[k]} | {float(r[1]):.2f} s | {phase(k)} | {r[2]} / {r[3]} | {r[4]} |")
lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(f"{t}/w1.err", errors="replace")
         if "exec root prepared" in l]
def sample(lo, hi):
    out = []
    for l in lines[lo:hi]:
        f = dict(re.findall(r"\b(\w+)=(\S+)", l))
        out.append((ms(f.get("elapsed")), ms(f.get("trees_ready")), ms(f.get("fetch"))))
    return out
bounds = {k: int(remote[k][5]) for k in remote}
order = [k for k in ("A", "B", "E", "D") if k in remote]
print(f"\n== 3. exec-root set-up per task on the worker (--sandbox {sandbox})")
print("| run | tasks | set-up per task | of it: fetch + tree ready | first task's set-up |")
print("|---|---|---|---|---|")
for i, k in enumerate(order):
    hi = bounds[order[i + 1]] if i + 1 < len(order) else len(lines)
    s = sample(bounds[k], hi)
    if not s:
        continue
    print(f"| {k} | {len(s)} | {fmt(med([x[0] for x in s]))} | {fmt(med([x[1] for x in s]))} "
          f"| {s[0][0]:.1f} ms (tree ready {s[0][1]:.1f} ms) |")
print(f"\nload average (1 min): start {l0}, dry runs {l1} -> {l2}, farm {l2} -> {l3}")
PY
